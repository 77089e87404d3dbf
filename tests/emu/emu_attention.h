/*
 * emu_attention.h - an attention case's CPU tensors, made and filled the
 * same way by the tests of the attention kernels (test_emu_transformer.c:
 * attention_bf16.cu; emu_attention_tc.h: attention_mma.cu in bf16,
 * attention_tf32.cu in f32): qkv uniform in [-2, 2), dy in [-1, 1), dqkv
 * in [5, 6) (so that an element the kernels leave unwritten shows), y zero,
 * lse f32 (n, heads, t) zero (emu_rig.h's and emu_bf16.h's fills).
 */
#ifndef PP_TESTS_EMU_ATTENTION_H
#define PP_TESTS_EMU_ATTENTION_H

#include "tests/emu/emu_bf16.h"
#include "tests/emu/emu_rig.h"

typedef struct emu_attn {
    pp_tensor qkv, dqkv; /* (n, t, 3c) bf16 or f32 */
    pp_tensor y, dy;     /* (n, t, c) bf16 or f32 */
    pp_tensor lse;       /* (n, heads, t) f32 */
} emu_attn;

/* qkv, dqkv, y and dy of element type dt (PP_BF16 or PP_F32) */
static inline emu_attn emu_attn_case_of(pp_dtype dt, int n, int t, int c, int heads)
{
    emu_attn a;
    a.qkv = emu_tensor(dt, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
    a.dqkv = emu_tensor(dt, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
    a.y = emu_tensor(dt, 3, (int64_t[]){n, t, c}, PP_NCHW);
    a.dy = emu_tensor(dt, 3, (int64_t[]){n, t, c}, PP_NCHW);
    a.lse = emu_tensor(PP_F32, 3, (int64_t[]){n, heads, t}, PP_NCHW);
    void (*fill)(pp_tensor *, float, float) = dt == PP_BF16 ? emu_fill_bf16 : emu_fill;
    fill(&a.qkv, -2, 4), fill(&a.dy, -1, 2), fill(&a.dqkv, 5, 1);
    return a;
}

static inline emu_attn emu_attn_case(int n, int t, int c, int heads)
{
    return emu_attn_case_of(PP_BF16, n, t, c, heads);
}

#endif
