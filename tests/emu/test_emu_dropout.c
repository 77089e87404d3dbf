/*
 * test_emu_dropout.c - the CUDA backend's dropout (runtime/cuda:
 * dropout.cu, and the attention's masks in attention_tile.cuh) run on the
 * CPU by the emulator (cuda_emu.h), against the CPU backend's ops on the
 * same inputs:
 *   - the elementwise kernel: the CPU's bits (the factor is exactly 0 or
 *     1 / (1 - p)), p 0.1 and 0.5, samples of sizes that are not multiples
 *     of 4 (a float4 straddles two samples), operands 4 bytes off a 16-byte
 *     boundary (the single-float path), in place, first_sample not 0, a
 *     grid of few blocks (grid strides); about p of the values dropped;
 *   - attention with dropout on the probabilities (attention.cu's f32 and
 *     attention_bf16.cu's bf16 kernels) against pp_attention_forward_dropout
 *     / _backward_dropout: y, lse and dqkv within test_emu_transformer.c's
 *     tolerances (f32 1e-6; bf16 a bf16 step), heads of 16 and 64, t not a
 *     multiple of the tiles, several samples, first_sample not 0, p 0.1 and
 *     0.5; the kernels with p == 0 give the bits of the kernels without
 *     dropout (NULL), and p > 0 changes y.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "tests/check.h"
#include "tests/emu/emu_rig.h"

#include "tests/emu/emu_bf16.h"

#include "emu_attention_bf16.h"
#include "emu_kernels.h"
#include "emu_transformer.h"

/* grid-stride kernels get few blocks, so that each block loops */
#define MAX_GRID 3

/* ---- the elementwise kernel ------------------------------------------------------------ */

static void test_dropout(void)
{
    static const struct {
        float p;
        int n, per_sample;
        size_t off;
        int64_t first_sample;
        bool in_place;
        unsigned max_grid;
    } cases[] = {
        {0.1f, 3, 1001, 0, 0, false, 3},   /* float4s across samples' ends */
        {0.5f, 2, 1003, 4, 5, false, 2},   /* single floats */
        {0.1f, 4, 7, 0, 11, true, 1},      /* in place, one block */
        {0.5f, 1, 4099, 0, 1, true, 64},   /* a tail of 3 */
        {0.5f, 5, 3, 4, 100, false, 3},    /* samples shorter than a float4 */
    };
    pp_error err;
    char what[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t shape[2] = {cases[i].n, cases[i].per_sample};
        const size_t off = cases[i].off;
        const pp_dropout_desc d = {cases[i].p, pp_dropout_key(1234, 7, (int)i),
                                   cases[i].first_sample};
        pp_tensor x = emu_tensor(PP_F32, 2, shape, PP_NCHW), y = emu_tensor(PP_F32, 2, shape, PP_NCHW);
        pp_tensor dx = emu_tensor(PP_F32, 2, shape, PP_NCHW);
        emu_fill(&x, 0.5f, 1), emu_fill(&y, -1, 2);
        void *bx, *by, *bdx;
        float *kx = emu_copy(&x, off, &bx), *ky = emu_copy(&y, off, &by);
        float *kdx = emu_copy(&dx, off, &bdx);
        snprintf(what, sizeof what, "dropout %g, %d x %d%s%s, first sample %lld",
                 (double)cases[i].p, cases[i].n, cases[i].per_sample, off ? ", 4 bytes off" : "",
                 cases[i].in_place ? ", in place" : "", (long long)cases[i].first_sample);
        /* the backward first, from y as its dy (dx = dy * M), then the forward */
        CHECK_OK(pp_dropout_backward(&g_ex, &d, &y, &dx, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_dropout(0, cases[i].max_grid, d, shape[0], shape[1], ky,
                                                kdx),
                     what);
        emu_close(&dx, kdx, 0, what);
        float *kout = cases[i].in_place ? kx : ky;
        pp_tensor *out = cases[i].in_place ? &x : &y;
        CHECK_OK(pp_dropout_forward(&g_ex, &d, &x, out, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_dropout(0, cases[i].max_grid, d, shape[0], shape[1], kx,
                                                kout),
                     what);
        emu_close(out, kout, 0, what);
        /* x was in [0.5, 1.5): a zero is a dropped value, the rest scaled */
        const int64_t total = shape[0] * shape[1];
        int64_t dropped = 0;
        for (int64_t k = 0; k < total; k++) dropped += emu_f32(out)[k] == 0.0f;
        const double sd = sqrt(total * cases[i].p * (1 - cases[i].p));
        CHECK_MSG(fabs(dropped - total * cases[i].p) <= 5 * sd + 1,
                  "%s: %lld of %lld dropped, p %g", what, (long long)dropped, (long long)total,
                  (double)cases[i].p);
        void *bases[] = {bx, by, bdx};
        pp_tensor *ts[] = {&x, &y, &dx};
        EMU_FREE_CASE(bases, ts);
    }
}

/* ---- attention with dropout on the probabilities ------------------------------------ */

static const struct {
    int n, t, c, heads;
    float p;
    int64_t first_sample;
} att_cases[] = {
    {3, 45, 48, 3, 0.1f, 4},  /* heads of 16; two tiles, the last short; three samples */
    {2, 70, 128, 2, 0.5f, 9}, /* heads of 64; three tiles, the last short */
    {1, 33, 128, 2, 0.1f, 0}, /* heads of 64; first_sample 0 */
};

/* the case's drop: its p, a key of its own, its first sample */
static pp_dropout_desc att_drop(size_t i)
{
    return (pp_dropout_desc){att_cases[i].p, pp_dropout_key(99, 3, 10 + (int)i),
                             att_cases[i].first_sample};
}

static bool same_bits(const void *a, const void *b, size_t bytes)
{
    return memcmp(a, b, bytes) == 0;
}

static void test_attention_f32(void)
{
    pp_error err;
    char what[128];
    for (size_t i = 0; i < sizeof att_cases / sizeof att_cases[0]; i++) {
        const int n = att_cases[i].n, t = att_cases[i].t, c = att_cases[i].c;
        const int h = att_cases[i].heads;
        const pp_dropout_desc drop = att_drop(i), none = {0.0f, drop.key, drop.first_sample};
        pp_tensor qkv = emu_tensor(PP_F32, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
        pp_tensor dqkv = emu_tensor(PP_F32, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
        pp_tensor y = emu_tensor(PP_F32, 3, (int64_t[]){n, t, c}, PP_NCHW);
        pp_tensor dy = emu_tensor(PP_F32, 3, (int64_t[]){n, t, c}, PP_NCHW);
        pp_tensor lse = emu_tensor(PP_F32, 3, (int64_t[]){n, h, t}, PP_NCHW);
        emu_fill(&qkv, -2, 4), emu_fill(&dy, -1, 2), emu_fill(&dqkv, 5, 1);
        void *bq, *by, *bl, *bdy, *bdq, *by0, *bl0;
        float *kq = emu_copy(&qkv, 0, &bq), *ky = emu_copy(&y, 0, &by);
        float *kl = emu_copy(&lse, 0, &bl), *kdy = emu_copy(&dy, 0, &bdy);
        float *kdq = emu_copy(&dqkv, 0, &bdq);
        float *ky0 = emu_copy(&y, 0, &by0), *kl0 = emu_copy(&lse, 0, &bl0);
        const size_t ybytes = pp_tensor_bytes(&y), lbytes = pp_tensor_bytes(&lse);
        const pp_emu_cuda_attention_dims d = {n, t, c, h};
        snprintf(what, sizeof what, "attention, dropout %g, %d x %d, %d heads of %d, first %lld",
                 (double)drop.p, n, t, h, c / h, (long long)drop.first_sample);
        /* p == 0 is the kernel without dropout, bit for bit */
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward(0, d, NULL, kq, ky0, kl0), what);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward(0, d, &none, kq, ky, kl), what);
        CHECK_MSG(same_bits(ky, ky0, ybytes) && same_bits(kl, kl0, lbytes),
                  "%s: p 0 is not the bits of no dropout", what);
        CHECK_OK(pp_attention_forward_dropout(&g_ex, h, &drop, &qkv, &y, &lse, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward(0, d, &drop, kq, ky, kl), what);
        emu_close(&y, ky, 1e-6, what);
        emu_close(&lse, kl, 5e-7, "attention with dropout: lse");
        CHECK_MSG(!same_bits(ky, ky0, ybytes), "%s: dropout left y as it was", what);
        CHECK_OK(pp_attention_backward_dropout(&g_ex, h, &drop, &qkv, &y, &lse, &dy, &dqkv, &err),
                 &err);
        float *delta = malloc(sizeof(float) * (size_t)n * h * t);
        memcpy(ky, y.data, ybytes); /* the backward from the CPU's forward */
        memcpy(kl, lse.data, lbytes);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward(0, MAX_GRID, d, &drop, kq, ky, kl, kdy,
                                                           delta, kdq),
                     what);
        emu_close(&dqkv, kdq, 1e-6, "attention with dropout: backward dqkv (=)");
        free(delta);
        void *bases[] = {bq, by, bl, bdy, bdq, by0, bl0};
        pp_tensor *ts[] = {&qkv, &dqkv, &y, &dy, &lse};
        EMU_FREE_CASE(bases, ts);
    }
}

static void test_attention_bf16(void)
{
    pp_error err;
    char what[128];
    for (size_t i = 0; i < sizeof att_cases / sizeof att_cases[0]; i++) {
        const int n = att_cases[i].n, t = att_cases[i].t, c = att_cases[i].c;
        const int h = att_cases[i].heads;
        const pp_dropout_desc drop = att_drop(i), none = {0.0f, drop.key, drop.first_sample};
        pp_tensor qkv = emu_tensor(PP_BF16, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
        pp_tensor dqkv = emu_tensor(PP_BF16, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
        pp_tensor y = emu_tensor(PP_BF16, 3, (int64_t[]){n, t, c}, PP_NCHW);
        pp_tensor dy = emu_tensor(PP_BF16, 3, (int64_t[]){n, t, c}, PP_NCHW);
        pp_tensor lse = emu_tensor(PP_F32, 3, (int64_t[]){n, h, t}, PP_NCHW);
        emu_fill_bf16(&qkv, -2, 4), emu_fill_bf16(&dy, -1, 2), emu_fill_bf16(&dqkv, 5, 1);
        void *bq, *by, *bl, *bdy, *bdq, *bdq0;
        uint16_t *kq = emu_copy(&qkv, 0, &bq), *ky = emu_copy(&y, 2, &by);
        uint16_t *kdy = emu_copy(&dy, 2, &bdy), *kdq = emu_copy(&dqkv, 0, &bdq);
        uint16_t *kdq0 = emu_copy(&dqkv, 0, &bdq0);
        float *kl = emu_copy(&lse, 0, &bl);
        const pp_emu_cuda_attention_dims d = {n, t, c, h};
        snprintf(what, sizeof what, "bf16 attention, dropout %g, %d x %d, %d heads of %d",
                 (double)drop.p, n, t, h, c / h);
        CHECK_OK(pp_attention_forward_dropout(&g_ex, h, &drop, &qkv, &y, &lse, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_bf16(0, d, &drop, kq, ky, kl), what);
        emu_close_bf16(&y, ky, what);
        emu_close(&lse, kl, 5e-7, "bf16 attention with dropout: lse");
        CHECK_OK(pp_attention_backward_dropout(&g_ex, h, &drop, &qkv, &y, &lse, &dy, &dqkv, &err),
                 &err);
        float *delta = malloc(sizeof(float) * (size_t)n * h * t);
        memcpy(ky, y.data, pp_tensor_bytes(&y)); /* the backward from the CPU's forward */
        memcpy(kl, lse.data, pp_tensor_bytes(&lse));
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_bf16(0, MAX_GRID, d, &drop, kq, ky, kl,
                                                                kdy, delta, kdq),
                     what);
        emu_close_bf16(&dqkv, kdq, "bf16 attention with dropout: backward dqkv (=)");
        /* p == 0: the backward without dropout, bit for bit */
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_bf16(0, MAX_GRID, d, &none, kq, ky, kl,
                                                                kdy, delta, kdq),
                     what);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_bf16(0, MAX_GRID, d, NULL, kq, ky, kl,
                                                                kdy, delta, kdq0),
                     what);
        CHECK_MSG(same_bits(kdq, kdq0, pp_tensor_bytes(&dqkv)),
                  "%s: p 0 is not the backward's bits without dropout", what);
        free(delta);
        void *bases[] = {bq, by, bl, bdy, bdq, bdq0};
        pp_tensor *ts[] = {&qkv, &dqkv, &y, &dy, &lse};
        EMU_FREE_CASE(bases, ts);
    }
}

int main(void)
{
    emu_rig_open();
    test_dropout();
    test_attention_f32();
    test_attention_bf16();
    return emu_rig_close("test_emu_dropout");
}
