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
 *     dropout (NULL), and p > 0 changes y;
 *   - both as a replayed CUDA graph runs them (the key captured at another
 *     step, the step in memory: pp_dropout_desc.step): the masks of the
 *     step in memory (elementwise backward, attention forward: the bits of
 *     the key; attention backward against the CPU).
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
    pp_tensor mem = emu_step_tensor();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t shape[2] = {cases[i].n, cases[i].per_sample};
        const size_t off = cases[i].off;
        const pp_dropout_desc d = {.p = cases[i].p, .key = pp_dropout_key(1234, 7, (int)i),
                                   .first_sample = cases[i].first_sample};
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
        /* again as a replayed graph runs it: a stale key, the step in memory */
        const pp_dropout_desc r = emu_replayed(&d, 1234, 7, (int)i, &mem);
        memset(kdx, 0, pp_tensor_bytes(&dx));
        EMU_LAUNCHED(pp_emu_cuda_launch_dropout(0, cases[i].max_grid, r, shape[0], shape[1], ky,
                                                kdx),
                     what);
        emu_close(&dx, kdx, 0, "dropout backward, the step in memory");
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
    pp_tensor_free(&mem);
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
    return (pp_dropout_desc){.p = att_cases[i].p, .key = pp_dropout_key(99, 3, 10 + (int)i),
                             .first_sample = att_cases[i].first_sample};
}

static bool same_bits(const void *a, const void *b, size_t bytes)
{
    return memcmp(a, b, bytes) == 0;
}

/* The kernels of one element type: attention.cu's (f32) or attention_bf16.cu's. */
static cudaError_t att_forward(bool bf16, pp_emu_cuda_attention_dims d,
                               const pp_dropout_desc *drop, const void *qkv, void *y, float *lse)
{
    return bf16 ? pp_emu_cuda_launch_attention_forward_bf16(0, d, drop, qkv, y, lse)
                : pp_emu_cuda_launch_attention_forward(0, d, drop, qkv, y, lse);
}

static cudaError_t att_backward(bool bf16, pp_emu_cuda_attention_dims d,
                                const pp_dropout_desc *drop, const void *qkv, const void *y,
                                const float *lse, const void *dy, float *delta, void *dqkv)
{
    return bf16 ? pp_emu_cuda_launch_attention_backward_bf16(0, MAX_GRID, d, drop, qkv, y, lse,
                                                             dy, delta, dqkv)
                : pp_emu_cuda_launch_attention_backward(0, MAX_GRID, d, drop, qkv, y, lse, dy,
                                                        delta, dqkv);
}

/* The kernel's output k against the CPU's t: test_emu_transformer's
 * tolerances (f32 tol; bf16 a bf16 step). */
static void att_close(bool bf16, const pp_tensor *t, const void *k, double tol, const char *what)
{
    if (bf16)
        emu_close_bf16(t, k, what);
    else
        emu_close(t, k, tol, what);
}

/* Per case and element type: with p == 0 the kernels give the bits of the
 * kernels without dropout (NULL), forward and backward; with p > 0 y, lse
 * and dqkv (from the CPU's y and lse) against pp_attention_forward_dropout
 * and _backward_dropout, and y is not the undropped one. */
static void test_attention(bool bf16)
{
    enum { QKV, DQKV, Y, DY, LSE, Y0, DQKV0 };
    pp_error err;
    char what[128];
    const pp_dtype dt = bf16 ? PP_BF16 : PP_F32;
    pp_tensor mem = emu_step_tensor();
    for (size_t i = 0; i < sizeof att_cases / sizeof att_cases[0]; i++) {
        const int n = att_cases[i].n, t = att_cases[i].t, c = att_cases[i].c;
        const int h = att_cases[i].heads;
        const pp_dropout_desc drop = att_drop(i);
        const pp_dropout_desc none = {.p = 0.0f, .key = drop.key, .first_sample = drop.first_sample};
        const int64_t shapes[7][3] = {{n, t, 3 * c}, {n, t, 3 * c}, {n, t, c}, {n, t, c},
                                      {n, h, t},     {n, t, c},     {n, t, 3 * c}};
        pp_tensor ts[7];
        void *k[7], *bases[7];
        for (int j = 0; j < 7; j++) ts[j] = emu_tensor(j == LSE ? PP_F32 : dt, 3, shapes[j], PP_NCHW);
        if (bf16)
            emu_fill_bf16(&ts[QKV], -2, 4), emu_fill_bf16(&ts[DY], -1, 2);
        else
            emu_fill(&ts[QKV], -2, 4), emu_fill(&ts[DY], -1, 2);
        /* y and dy 4 bytes off a 16-byte boundary */
        for (int j = 0; j < 7; j++) k[j] = emu_copy(&ts[j], j == Y || j == DY ? 4 : 0, &bases[j]);
        float *kl = k[LSE], *delta = malloc(sizeof(float) * (size_t)n * h * t);
        const size_t yb = pp_tensor_bytes(&ts[Y]), qb = pp_tensor_bytes(&ts[QKV]);
        const pp_emu_cuda_attention_dims d = {n, t, c, h, 0};
        snprintf(what, sizeof what, "%s attention, dropout %g, %d x %d, %d heads of %d, first %lld",
                 bf16 ? "bf16" : "f32", (double)drop.p, n, t, h, c / h,
                 (long long)drop.first_sample);
        EMU_LAUNCHED(att_forward(bf16, d, NULL, k[QKV], k[Y0], kl), what);
        EMU_LAUNCHED(att_forward(bf16, d, &none, k[QKV], k[Y], kl), what);
        CHECK_MSG(same_bits(k[Y], k[Y0], yb), "%s: p 0 is not the forward's bits without dropout",
                  what);
        EMU_LAUNCHED(att_backward(bf16, d, NULL, k[QKV], k[Y], kl, k[DY], delta, k[DQKV0]), what);
        EMU_LAUNCHED(att_backward(bf16, d, &none, k[QKV], k[Y], kl, k[DY], delta, k[DQKV]), what);
        CHECK_MSG(same_bits(k[DQKV], k[DQKV0], qb),
                  "%s: p 0 is not the backward's bits without dropout", what);
        CHECK_OK(pp_attention_forward_dropout(&g_ex, h, &drop, &ts[QKV], &ts[Y], &ts[LSE], &err),
                 &err);
        EMU_LAUNCHED(att_forward(bf16, d, &drop, k[QKV], k[Y], kl), what);
        att_close(bf16, &ts[Y], k[Y], 1e-6, what);
        emu_close(&ts[LSE], kl, 5e-7, "attention with dropout: lse");
        CHECK_MSG(!same_bits(k[Y], k[Y0], yb), "%s: dropout left y as it was", what);
        /* as a replayed graph runs them (a stale key, the step in memory): the
         * forward's bits, and the backward below */
        const pp_dropout_desc r = emu_replayed(&drop, 99, 3, 10 + (int)i, &mem);
        EMU_LAUNCHED(att_forward(bf16, d, &r, k[QKV], k[Y0], kl), what);
        CHECK_MSG(same_bits(k[Y], k[Y0], yb), "%s: the step in memory is not the key's forward",
                  what);
        CHECK_OK(pp_attention_backward_dropout(&g_ex, h, &drop, &ts[QKV], &ts[Y], &ts[LSE],
                                               &ts[DY], &ts[DQKV], &err),
                 &err);
        memcpy(k[Y], ts[Y].data, yb); /* the backward from the CPU's forward */
        memcpy(kl, ts[LSE].data, pp_tensor_bytes(&ts[LSE]));
        EMU_LAUNCHED(att_backward(bf16, d, &r, k[QKV], k[Y], kl, k[DY], delta, k[DQKV]), what);
        att_close(bf16, &ts[DQKV], k[DQKV], 1e-6, "attention with dropout: backward dqkv (=)");
        free(delta);
        for (int j = 0; j < 7; j++) free(bases[j]), pp_tensor_free(&ts[j]);
    }
    pp_tensor_free(&mem);
}

int main(void)
{
    emu_rig_open();
    test_dropout();
    test_attention(false);
    test_attention(true);
    return emu_rig_close("test_emu_dropout");
}
