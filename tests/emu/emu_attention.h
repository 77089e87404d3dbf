/*
 * emu_attention.h - a bf16 attention case's CPU tensors, made and filled
 * the same way by the tests of the bf16 attention kernels
 * (test_emu_transformer.c: attention_bf16.cu; test_emu_attention_mma.c:
 * attention_mma.cu): qkv uniform in [-2, 2), dy in [-1, 1), dqkv in [5, 6)
 * (so that an element the kernels leave unwritten shows), y zero, lse f32
 * (n, heads, t) zero (emu_bf16.h's fills).
 */
#ifndef PP_TESTS_EMU_ATTENTION_H
#define PP_TESTS_EMU_ATTENTION_H

#include "tests/emu/emu_bf16.h"
#include "tests/emu/emu_rig.h"

typedef struct emu_attn {
    pp_tensor qkv, dqkv; /* (n, t, 3c) bf16 */
    pp_tensor y, dy;     /* (n, t, c) bf16 */
    pp_tensor lse;       /* (n, heads, t) f32 */
} emu_attn;

static inline emu_attn emu_attn_case(int n, int t, int c, int heads)
{
    emu_attn a;
    a.qkv = emu_tensor(PP_BF16, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
    a.dqkv = emu_tensor(PP_BF16, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
    a.y = emu_tensor(PP_BF16, 3, (int64_t[]){n, t, c}, PP_NCHW);
    a.dy = emu_tensor(PP_BF16, 3, (int64_t[]){n, t, c}, PP_NCHW);
    a.lse = emu_tensor(PP_F32, 3, (int64_t[]){n, heads, t}, PP_NCHW);
    emu_fill_bf16(&a.qkv, -2, 4), emu_fill_bf16(&a.dy, -1, 2), emu_fill_bf16(&a.dqkv, 5, 1);
    return a;
}

#endif
