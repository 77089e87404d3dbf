/*
 * test_emu_transformer.c - the CUDA backend's kernels of the transformer ops
 * (runtime/cuda: colsum.cu, layernorm.cu, embedding.cu, attention.cu,
 * classifier.cu; GELU is test_emu_kernels.c's) run on the CPU by the
 * emulator (cuda_emu.h), against the CPU backend's ops on the same inputs,
 * with the shapes that matter: sizes of 1, odd sizes, operands 4 bytes off
 * a 16-byte boundary (the single-float paths), several blocks and grid
 * strides, tiles cut short (t not a multiple of the attention's tiles),
 * heads of 4, 17, 32, 64 and 128 columns, chunks of rows cut short.
 *   - the fixed-order column sums (a dense layer's bias gradient) and the
 *     layer norm, plain and with the residual add (forward) and gradient
 *     (backward) fused: within 1e-7 of the CPU (both sum in double), the
 *     residual sum bit for bit;
 *   - token and position embeddings: the CPU's bits (the same sums in the
 *     same order), repeated ids, two column passes;
 *   - attention forward (y, lse) and backward (dqkv from the CPU's y and
 *     lse): within 1e-6 (f32 products in another order); on bf16 operands
 *     (attention_bf16.cu) y and dqkv within one bf16 step of the CPU's
 *     (which rounds its f32 results once too), nearly all the same bits;
 *   - the classifier (label smoothing, top-k counts with ties to the label,
 *     in place): loss and dlogits within 1e-6, the correct and top-k counts
 *     exact, in place, a vocabulary of 50257, an out-of-range label; on bf16
 *     logits and gradient (the bf16 kernel) the loss within 1e-6 too and the
 *     gradient within one bf16 step of the CPU's (both round its f32 value
 *     once), nearly all the same bits.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "tests/check.h"
#include "tests/emu/emu_bf16.h"
#include "tests/emu/emu_layernorm.h"
#include "tests/emu/emu_attention.h"
#include "tests/emu/emu_rig.h"

#include "emu_attention_bf16.h"
#include "emu_transformer.h"

/* grid-stride kernels get few blocks, so that each block loops */
#define MAX_GRID 3

/* ---- column sums: a dense layer's bias gradient ------------------------------------ */

static void test_colsum(void)
{
    static const struct { int rows, cols; size_t off; } cases[] = {
        {1, 1, 0}, {63, 7, 4}, {64, 300, 0}, {65, 33, 4}, {200, 5, 0}};
    pp_error err;
    char what[96];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int rows = cases[i].rows, cols = cases[i].cols;
        pp_tensor x = emu_tensor(PP_F32, 2, (int64_t[]){rows, 1}, PP_NCHW);
        pp_tensor dy = emu_tensor(PP_F32, 2, (int64_t[]){rows, cols}, PP_NCHW);
        pp_tensor dw = emu_tensor(PP_F32, 2, (int64_t[]){1, cols}, PP_NCHW);
        pp_tensor db = emu_tensor(PP_F32, 1, (int64_t[]){cols}, PP_NCHW);
        emu_fill(&x, -1, 2), emu_fill(&dy, -1, 2), emu_fill(&db, -1, 2);
        void *b1, *b2;
        float *kdy = emu_copy(&dy, cases[i].off, &b1), *kdb = emu_copy(&db, cases[i].off, &b2);
        const int64_t chunks = pp_emu_cuda_colsum_chunks(rows);
        double *part = malloc(sizeof(double) * (size_t)(chunks * cols));
        CHECK_OK(pp_dense_backward_weights(&g_ex, PP_WEIGHT_IN_OUT, &x, &dy, &dw, &db, &err),
                 &err);
        snprintf(what, sizeof what, "column sums %d x %d (+=)", rows, cols);
        EMU_LAUNCHED(pp_emu_cuda_launch_colsum_parts(0, rows, cols, kdy, part), what);
        EMU_LAUNCHED(pp_emu_cuda_launch_parts_add(0, MAX_GRID, chunks, cols, cols, part, kdb,
                                                  NULL), what);
        emu_close(&db, kdb, 1e-7, what);
        free(part), free(b1), free(b2);
        pp_tensor_free(&x), pp_tensor_free(&dy), pp_tensor_free(&dw), pp_tensor_free(&db);
    }
}

/* in [-1, 1), from a xorshift of its own */
static double small_draw(uint32_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
    return (double)*s / 2147483648.0 - 1.0;
}

/* parts_add alone: each column's partials added in chunk order in double,
 * rounded once, added to out (columns below split) or out2 (the rest), the
 * bits of that sum one partial at a time; partials of +-2^60 amid small
 * ones, which another order keeps or loses; chunks of whole runs of loads in
 * flight and a tail (37), fewer than a run (5), one, two runs (16) */
static void test_parts_add(void)
{
    static const int chunk_cases[] = {37, 5, 1, 16};
    const int64_t cols = 70, split = 50;
    uint32_t rng = 12345; /* its own draws: the other tests' stay as they were */
    for (size_t i = 0; i < sizeof chunk_cases / sizeof chunk_cases[0]; i++) {
        const int64_t chunks = chunk_cases[i];
        double *part = malloc(sizeof(double) * (size_t)(chunks * cols));
        float *out = malloc(sizeof(float) * (size_t)split), *want = malloc(sizeof(float) * cols);
        float *out2 = malloc(sizeof(float) * (size_t)(cols - split));
        for (int64_t k = 0; k < chunks; k++) /* +-2^60 amid small ones: they cancel */
            for (int64_t j = 0; j < cols; j++)
                part[k * cols + j] = (k + j) % 3 == 0 ? ldexp((k + j) % 2 ? -1.0 : 1.0, 60)
                                                      : small_draw(&rng);
        for (int64_t j = 0; j < cols; j++) {
            const float v = (float)small_draw(&rng);
            if (j < split)
                out[j] = v;
            else
                out2[j - split] = v;
            double acc = 0.0;
            for (int64_t k = 0; k < chunks; k++) acc += part[k * cols + j];
            want[j] = v + (float)acc;
        }
        char what[64];
        snprintf(what, sizeof what, "parts_add of %lld chunks", (long long)chunks);
        EMU_LAUNCHED(pp_emu_cuda_launch_parts_add(0, MAX_GRID, chunks, cols, split, part, out,
                                                  out2), what);
        int64_t bad = 0;
        for (int64_t j = 0; j < cols; j++) {
            const float got = j < split ? out[j] : out2[j - split];
            bad += memcmp(&got, &want[j], sizeof got) != 0;
        }
        CHECK_MSG(bad == 0, "%s: %lld of %lld columns not the bits of the sum in chunk order",
                  what, (long long)bad, (long long)cols);
        free(part), free(out), free(out2), free(want);
    }
}

/* ---- layer norm ------------------------------------------------------------------------ */

/* Plain, or fused with the residual add before it (s = a + b written over
 * b, then normalised) and the residual gradient beside its backward (dx =
 * through the norm + dres): against the CPU's pp_add_layernorm_forward and
 * pp_layernorm_backward_add (the plain ops one after the other there). */
static void test_layernorm(void)
{
    static const struct { int rows, c; bool beta, fused; size_t off; } cases[] = {
        {1, 1, true, false, 0}, {3, 33, false, true, 4}, {40, 100, true, true, 0},
        {17, 768, true, false, 4}, {33, 5, false, false, 0}, {18, 768, true, true, 4}};
    pp_error err;
    char what[96];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int rows = cases[i].rows, c = cases[i].c;
        const bool fused = cases[i].fused;
        const size_t off = cases[i].off;
        const int64_t xs[2] = {rows, c}, cs[1] = {c}, rs[1] = {rows};
        pp_tensor x = emu_tensor(PP_F32, 2, xs, PP_NCHW), y = emu_tensor(PP_F32, 2, xs, PP_NCHW);
        pp_tensor a = emu_tensor(PP_F32, 2, xs, PP_NCHW), res = emu_tensor(PP_F32, 2, xs, PP_NCHW);
        pp_tensor dy = emu_tensor(PP_F32, 2, xs, PP_NCHW), dx = emu_tensor(PP_F32, 2, xs, PP_NCHW);
        pp_tensor gamma = emu_tensor(PP_F32, 1, cs, PP_NCHW), beta = emu_tensor(PP_F32, 1, cs, PP_NCHW);
        pp_tensor dgamma = emu_tensor(PP_F32, 1, cs, PP_NCHW), dbeta = emu_tensor(PP_F32, 1, cs, PP_NCHW);
        pp_tensor mean = emu_tensor(PP_F32, 1, rs, PP_NCHW), rstd = emu_tensor(PP_F32, 1, rs, PP_NCHW);
        emu_fill(&x, -2, 4), emu_fill(&dy, -1, 2), emu_fill(&gamma, 0.5f, 1), emu_fill(&beta, -1, 2);
        emu_fill(&dgamma, -1, 2), emu_fill(&dbeta, -1, 2), emu_fill(&a, -1, 2), emu_fill(&res, -1, 2);
        for (int r = 0; r < rows; r++) /* rows about different means */
            for (int j = 0; j < c; j++) emu_f32(&x)[r * c + j] += 0.25f * (float)(r % 7);
        void *bx, *by, *bm, *br, *bdy, *bdx, *bdg, *bdb, *ba, *bres;
        float *kx = emu_copy(&x, off, &bx), *ky = emu_copy(&y, off, &by), *km = emu_copy(&mean, off, &bm);
        float *kr = emu_copy(&rstd, off, &br), *kdy = emu_copy(&dy, off, &bdy);
        float *kdx = emu_copy(&dx, off, &bdx), *kdg = emu_copy(&dgamma, off, &bdg);
        float *kdb = emu_copy(&dbeta, off, &bdb), *ka = emu_copy(&a, off, &ba);
        float *kres = emu_copy(&res, off, &bres);
        const pp_tensor *b = cases[i].beta ? &beta : NULL;
        const float *kbeta = b ? emu_f32(&beta) : NULL;
        snprintf(what, sizeof what, "layer norm %d x %d%s%s%s", rows, c, b ? "" : ", no bias",
                 fused ? ", with the residual add" : "", off ? ", single floats" : "");
        if (fused) { /* x = a + x, in x */
            CHECK_OK(pp_add_layernorm_forward(&g_ex, 1e-5f, &a, &x, &gamma, b, &x, &y, &mean,
                                              &rstd, &err), &err);
            EMU_LAUNCHED(pp_emu_cuda_launch_layernorm_forward(0, MAX_GRID, rows, c, 1e-5f, ka, kx,
                                                              kx, emu_f32(&gamma), kbeta, ky, km,
                                                              kr), what);
            emu_close(&x, kx, 0, "layer norm's residual sum");
        } else {
            CHECK_OK(pp_layernorm_forward(&g_ex, 1e-5f, &x, &gamma, b, &y, &mean, &rstd, &err),
                     &err);
            EMU_LAUNCHED(pp_emu_cuda_launch_layernorm_forward(0, MAX_GRID, rows, c, 1e-5f, kx,
                                                              NULL, NULL, emu_f32(&gamma), kbeta,
                                                              ky, km, kr), what);
        }
        emu_close(&y, ky, 1e-7, what);
        emu_close(&mean, km, 1e-7, what);
        emu_close(&rstd, kr, 1e-7, what);
        emu_ln_backward_cpu(fused, b, &x, &dy, &gamma, &mean, &rstd, &res, &dx, &dgamma,
                            &dbeta);
        double *part = malloc(sizeof(double) * 2 * (size_t)c *
                              (size_t)pp_emu_cuda_layernorm_chunks(rows));
        EMU_LAUNCHED(pp_emu_cuda_launch_layernorm_backward(0, MAX_GRID, rows, c, kx, kdy,
                                                           emu_f32(&gamma), emu_f32(&mean),
                                                           emu_f32(&rstd), fused ? kres : NULL,
                                                           kdx, part, kdg, b ? kdb : NULL), what);
        emu_close(&dx, kdx, 1e-7, fused ? "layer norm dx (+ dres)" : "layer norm dx");
        emu_ln_close_params(&dgamma, kdg, &dbeta, kdb);
        free(part);
        void *bases[] = {bx, by, bm, br, bdy, bdx, bdg, bdb, ba, bres};
        pp_tensor *ts[] = {&x, &y, &a, &res, &dy, &dx, &gamma, &beta, &dgamma, &dbeta, &mean, &rstd};
        EMU_FREE_CASE(bases, ts);
    }
}

/* ---- embeddings ------------------------------------------------------------------------ */

/* the kernels' sorted positions: those of valid ids by id, each id's in
 * increasing order (a stable counting sort's) */
static void check_embedding_order(const uint32_t *order, const int32_t *id, int64_t rows,
                                  int vocab, const char *what)
{
    int64_t at = 0, bad = 0;
    for (int v = 0; v < vocab; v++)
        for (int64_t r = 0; r < rows; r++)
            if (id[r] == v) bad += order[at++] != (uint32_t)r;
    CHECK_MSG(bad == 0, "%s: positions sorted by id, in order (%lld of %lld misplaced)", what,
              (long long)bad, (long long)at);
}

static void test_embedding(void)
{
    /* ids: 0 skewed (low ids repeat most), 1 one id only, 2 ids outside
     * [0, vocab) among them (skipped: their rows of dy zeroed for the CPU,
     * which reads them as id 0), 3 every id distinct */
    static const struct { int n, t, vocab, c, ids; size_t off; } cases[] = {
        {2, 5, 7, 3, 0, 0},        /* many repeats, 3 columns */
        {3, 111, 50, 64, 0, 0},    /* 16-byte rows; runs across blocks */
        {1, 300, 1000, 37, 0, 4},  /* few repeats, single floats */
        {2, 20, 13, 1100, 0, 0},   /* five column blocks */
        {1, 600, 9, 40, 1, 0},     /* one run of 600 positions */
        {2, 150, 3000, 33, 2, 0},  /* ids of -1 and vocab skipped */
        {1, 700, 701, 5, 3, 0},    /* no repeats */
        {1, 3000, 5000, 2, 0, 0},  /* the scan's threads take 5 ids each */
    };
    pp_error err;
    char what[96];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, t = cases[i].t, v = cases[i].vocab, c = cases[i].c;
        const int64_t rows = (int64_t)n * t;
        const size_t off = cases[i].off;
        pp_tensor ids = emu_tensor(PP_I32, 2, (int64_t[]){n, t}, PP_NCHW);
        pp_tensor table = emu_tensor(PP_F32, 2, (int64_t[]){v, c}, PP_NCHW);
        pp_tensor dtable = emu_tensor(PP_F32, 2, (int64_t[]){v, c}, PP_NCHW);
        pp_tensor y = emu_tensor(PP_F32, 3, (int64_t[]){n, t, c}, PP_NCHW);
        pp_tensor dy = emu_tensor(PP_F32, 3, (int64_t[]){n, t, c}, PP_NCHW);
        pp_tensor pos = emu_tensor(PP_F32, 2, (int64_t[]){t + 3, c}, PP_NCHW);
        pp_tensor dpos = emu_tensor(PP_F32, 2, (int64_t[]){t + 3, c}, PP_NCHW);
        int32_t *id = ids.data;
        for (int64_t r = 0; r < rows; r++) /* skewed: low ids repeat most */
            id[r] = (int32_t)((emu_urand() + 1.0f) * (emu_urand() + 1.0f) * 0.25f * (float)v) % v;
        if (cases[i].ids == 1)
            for (int64_t r = 0; r < rows; r++) id[r] = v / 2;
        if (cases[i].ids == 3)
            for (int64_t r = 0; r < rows; r++) id[r] = (int32_t)((r * 7 + 3) % v);
        emu_fill(&table, -1, 2), emu_fill(&dtable, -1, 2), emu_fill(&dy, -1, 2);
        /* magnitudes 2^-20 to 2^20 (a run's double sum seldom shows its order
         * once rounded to f32: check_embedding_order checks the order itself) */
        for (int64_t k = 0; k < rows * c; k++)
            ((float *)dy.data)[k] = ldexpf(((float *)dy.data)[k], (int)(k % 41) - 20);
        emu_fill(&pos, -1, 2), emu_fill(&dpos, -1, 2);
        void *by, *bdt, *bdy, *bp, *bdp, *bt;
        float *ky = emu_copy(&y, off, &by), *kdt = emu_copy(&dtable, off, &bdt);
        float *kdy = emu_copy(&dy, off, &bdy), *kp = emu_copy(&pos, off, &bp);
        float *kdp = emu_copy(&dpos, off, &bdp), *kt = emu_copy(&table, off, &bt);

        CHECK_OK(pp_embedding_forward(&g_ex, &ids, &table, &y, &err), &err);
        snprintf(what, sizeof what, "token embedding %d x %d of %d x %d%s", n, t, v, c,
                 off ? ", single floats" : "");
        EMU_LAUNCHED(pp_emu_cuda_launch_embedding_forward(0, MAX_GRID, rows, v, c, id, kt, ky),
                     what);
        emu_close(&y, ky, 0, what);
        int32_t *kid = malloc(sizeof(int32_t) * (size_t)rows); /* the kernels' ids */
        memcpy(kid, id, sizeof(int32_t) * (size_t)rows);
        if (cases[i].ids == 2)
            for (int64_t r = 0; r < rows; r += 5) { /* out of range: skipped */
                kid[r] = r % 10 == 0 ? -1 : v;
                id[r] = 0;
                memset((float *)dy.data + r * c, 0, sizeof(float) * (size_t)c);
                memset(kdy + r * c, 0, sizeof(float) * (size_t)c);
            }
        CHECK_OK(pp_embedding_backward(&g_ex, &ids, &dy, &dtable, &err), &err);
        void *ws = malloc(pp_emu_cuda_embedding_backward_ws(rows, v));
        EMU_LAUNCHED(pp_emu_cuda_launch_embedding_backward(0, MAX_GRID, rows, v, c, kid, kdy,
                                                           kdt, ws),
                     what);
        emu_close(&dtable, kdt, 0, "token embedding backward (+=)");
        check_embedding_order(pp_emu_cuda_embedding_order(ws, v), kid, rows, v, what);
        free(ws);
        free(kid);

        /* position: y = y + pos[t] in place, then its backward */
        CHECK_OK(pp_position_forward(&g_ex, &y, &pos, &y, &err), &err);
        snprintf(what, sizeof what, "position embedding %d x %d x %d%s", n, t, c,
                 off ? ", single floats" : "");
        EMU_LAUNCHED(pp_emu_cuda_launch_position_forward(0, MAX_GRID, n, t, c, ky, kp, ky), what);
        emu_close(&y, ky, 0, what);
        CHECK_OK(pp_position_backward(&g_ex, &dy, &dpos, &err), &err);
        const int64_t chunks = pp_emu_cuda_colsum_chunks(n);
        double *part = malloc(sizeof(double) * (size_t)(chunks * t * c));
        EMU_LAUNCHED(pp_emu_cuda_launch_colsum_parts(0, n, (int64_t)t * c, kdy, part), what);
        EMU_LAUNCHED(pp_emu_cuda_launch_parts_add(0, MAX_GRID, chunks, (int64_t)t * c,
                                                  (int64_t)t * c, part, kdp, NULL), what);
        emu_close(&dpos, kdp, 0, "position embedding backward (+=)");
        free(part);
        void *bases[] = {by, bdt, bdy, bp, bdp, bt};
        pp_tensor *ts[] = {&ids, &table, &dtable, &y, &dy, &pos, &dpos};
        EMU_FREE_CASE(bases, ts);
    }
}

/* ---- attention ------------------------------------------------------------------------- */

static void test_attention(void)
{
    static const struct { int n, t, c, heads; size_t off; } cases[] = {
        {2, 5, 8, 2, 0},     /* heads of 4; one short tile */
        {1, 70, 128, 2, 4},  /* heads of 64; three tiles, the last short */
        {2, 33, 51, 3, 0},   /* heads of 17 */
        {1, 40, 256, 2, 0},  /* heads of 128: tiles of 16 */
        {1, 37, 96, 3, 4},   /* heads of 32 */
    };
    pp_error err;
    char what[96];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, t = cases[i].t, c = cases[i].c, h = cases[i].heads;
        const size_t off = cases[i].off;
        pp_tensor qkv = emu_tensor(PP_F32, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
        pp_tensor dqkv = emu_tensor(PP_F32, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
        pp_tensor y = emu_tensor(PP_F32, 3, (int64_t[]){n, t, c}, PP_NCHW);
        pp_tensor dy = emu_tensor(PP_F32, 3, (int64_t[]){n, t, c}, PP_NCHW);
        pp_tensor lse = emu_tensor(PP_F32, 3, (int64_t[]){n, h, t}, PP_NCHW);
        emu_fill(&qkv, -2, 4), emu_fill(&dy, -1, 2), emu_fill(&dqkv, 5, 1);
        void *bq, *by, *bl, *bdy, *bdq;
        float *kq = emu_copy(&qkv, off, &bq), *ky = emu_copy(&y, off, &by), *kl = emu_copy(&lse, off, &bl);
        float *kdy = emu_copy(&dy, off, &bdy), *kdq = emu_copy(&dqkv, off, &bdq);
        const pp_emu_cuda_attention_dims d = {n, t, c, h, 0};
        snprintf(what, sizeof what, "attention %d x %d, %d heads of %d%s", n, t, h, c / h,
                 off ? ", 4 bytes off" : "");
        CHECK_OK(pp_attention_forward(&g_ex, h, &qkv, &y, &lse, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward(0, d, NULL, kq, ky, kl), what);
        emu_close(&y, ky, 1e-6, what);
        emu_close(&lse, kl, 5e-7, "attention lse");
        CHECK_OK(pp_attention_backward(&g_ex, h, &qkv, &y, &lse, &dy, &dqkv, &err), &err);
        float *delta = malloc(sizeof(float) * (size_t)n * h * t);
        memcpy(ky, y.data, pp_tensor_bytes(&y)); /* the backward from the CPU's forward */
        memcpy(kl, lse.data, pp_tensor_bytes(&lse));
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward(0, MAX_GRID, d, NULL, kq, ky, kl, kdy,
                                                           delta, kdq), what);
        emu_close(&dqkv, kdq, 1e-6, "attention backward dqkv (=)");
        free(delta);
        void *bases[] = {bq, by, bl, bdy, bdq};
        pp_tensor *ts[] = {&qkv, &dqkv, &y, &dy, &lse};
        EMU_FREE_CASE(bases, ts);
    }
    /* a head wider than the kernels take is refused before anything runs */
    const pp_emu_cuda_attention_dims wide = {1, 4, 2 * (PP_CUDA_ATTENTION_HS_MAX + 1), 2, 0};
    CHECK(pp_emu_cuda_launch_attention_forward(0, wide, NULL, NULL, NULL, NULL) ==
          cudaErrorInvalidValue);
}

/* ---- attention on bf16 operands (attention_bf16.cu) ---------------------------------- */

/* Against the CPU backend's bf16 attention (the f32 arithmetic on widened
 * operands, each output rounded once): y and dqkv within a bf16 step, lse
 * as the f32 kernel's. */
static void test_attention_bf16(void)
{
    static const struct { int n, t, c, heads; } cases[] = {
        {2, 70, 128, 2}, /* heads of 64; three tiles, the last short; two samples */
        {1, 33, 51, 3},  /* heads of 17 */
        {3, 5, 8, 2},    /* heads of 4; one short tile */
        {1, 40, 256, 2}, /* heads of 128: tiles of 16 */
        {2, 37, 96, 3},  /* heads of 32 */
    };
    pp_error err;
    char what[96];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, t = cases[i].t, c = cases[i].c, h = cases[i].heads;
        emu_attn a = emu_attn_case(n, t, c, h);
        void *bq, *by, *bl, *bdy, *bdq;
        uint16_t *kq = emu_copy(&a.qkv, 0, &bq), *ky = emu_copy(&a.y, 2, &by);
        uint16_t *kdy = emu_copy(&a.dy, 2, &bdy), *kdq = emu_copy(&a.dqkv, 0, &bdq);
        float *kl = emu_copy(&a.lse, 0, &bl);
        const pp_emu_cuda_attention_dims d = {n, t, c, h, 0};
        snprintf(what, sizeof what, "bf16 attention %d x %d, %d heads of %d", n, t, h, c / h);
        CHECK_OK(pp_attention_forward(&g_ex, h, &a.qkv, &a.y, &a.lse, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_bf16(0, d, NULL, kq, ky, kl), what);
        emu_close_bf16(&a.y, ky, what);
        emu_close(&a.lse, kl, 5e-7, "bf16 attention lse");
        CHECK_OK(pp_attention_backward(&g_ex, h, &a.qkv, &a.y, &a.lse, &a.dy, &a.dqkv, &err),
                 &err);
        float *delta = malloc(sizeof(float) * (size_t)n * h * t);
        memcpy(ky, a.y.data, pp_tensor_bytes(&a.y)); /* the backward from the CPU's forward */
        memcpy(kl, a.lse.data, pp_tensor_bytes(&a.lse));
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_bf16(0, MAX_GRID, d, NULL, kq, ky, kl,
                                                                kdy, delta, kdq), what);
        emu_close_bf16(&a.dqkv, kdq, "bf16 attention backward dqkv (=)");
        free(delta);
        void *bases[] = {bq, by, bl, bdy, bdq};
        pp_tensor *ts[] = {&a.qkv, &a.dqkv, &a.y, &a.dy, &a.lse};
        EMU_FREE_CASE(bases, ts);
    }
    const pp_emu_cuda_attention_dims wide = {1, 4, 2 * (PP_CUDA_ATTENTION_HS_MAX + 1), 2, 0};
    CHECK(pp_emu_cuda_launch_attention_forward_bf16(0, wide, NULL, NULL, NULL, NULL) ==
          cudaErrorInvalidValue);
}

/* ---- attention from a query position (generation's cache) --------------------------- */

/* the attention forward without dropout on f32 or bf16 operands */
static cudaError_t attention_forward(bool bf16, pp_emu_cuda_attention_dims d, const void *qkv,
                                     void *y, float *lse)
{
    return bf16 ? pp_emu_cuda_launch_attention_forward_bf16(0, d, NULL, qkv, y, lse)
                : pp_emu_cuda_launch_attention_forward(0, d, NULL, qkv, y, lse);
}

/* bytes of rows [r, r + count) of sample k of an (n, rows, width) tensor of es-byte elements */
static const char *rows_at(const void *base, int k, int rows, int r, int width, size_t es)
{
    return (const char *)base + (((size_t)k * rows + r) * (size_t)width) * es;
}

/* The queries of positions q0.. alone (pp_attention_forward_from), f32 and
 * bf16: y's rows and lse the bits of the whole forward's rows q0.. (a row's
 * arithmetic does not depend on which rows share its block), and within the
 * kernels' tolerance of the CPU backend's; the backward, and q0 at or past
 * the last position, refused. */
static void test_attention_from(void)
{
    static const struct { int n, t, c, heads, q0; } cases[] = {
        {2, 70, 128, 2, 37}, /* heads of 64; the first block mid-tile */
        {1, 33, 51, 3, 32},  /* one query; heads of 17 */
        {1, 40, 256, 2, 39}, /* one query; heads of 128: tiles of 16 */
        {3, 65, 96, 3, 1},   /* heads of 32; every row but the first */
    };
    pp_error err;
    char what[96];
    for (int bf = 0; bf < 2; bf++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int n = cases[i].n, t = cases[i].t, c = cases[i].c, h = cases[i].heads;
            const int q0 = cases[i].q0, rows = t - q0;
            const pp_dtype dt = bf ? PP_BF16 : PP_F32;
            const size_t es = bf ? 2 : 4;
            emu_attn a = emu_attn_case_of(dt, n, t, c, h);
            pp_tensor yf = emu_tensor(dt, 3, (int64_t[]){n, rows, c}, PP_NCHW);
            pp_tensor lf = emu_tensor(PP_F32, 3, (int64_t[]){n, h, rows}, PP_NCHW);
            void *bq, *by, *bl, *byf, *blf;
            void *kq = emu_copy(&a.qkv, 0, &bq), *ky = emu_copy(&a.y, 0, &by);
            void *kyf = emu_copy(&yf, 0, &byf);
            float *kl = emu_copy(&a.lse, 0, &bl), *klf = emu_copy(&lf, 0, &blf);
            const pp_emu_cuda_attention_dims whole = {n, t, c, h, 0}, from = {n, t, c, h, q0};
            snprintf(what, sizeof what, "%s attention %d x %d from %d, %d heads of %d",
                     bf ? "bf16" : "f32", n, t, q0, h, c / h);
            EMU_LAUNCHED(attention_forward(bf, whole, kq, ky, kl), what);
            EMU_LAUNCHED(attention_forward(bf, from, kq, kyf, klf), what);
            int differ = 0;
            for (int k = 0; k < n; k++) {
                differ += memcmp(rows_at(kyf, k, rows, 0, c, es), rows_at(ky, k, t, q0, c, es),
                                 (size_t)rows * c * es) != 0;
                for (int hh = 0; hh < h; hh++)
                    differ += memcmp(rows_at(klf, k * h + hh, rows, 0, 1, 4),
                                     rows_at(kl, k * h + hh, t, q0, 1, 4), (size_t)rows * 4) != 0;
            }
            CHECK_MSG(differ == 0, "%s: %d of %d row blocks not the whole forward's bits", what,
                      differ, n * (h + 1));
            CHECK_OK(pp_attention_forward_from(&g_ex, h, q0, &a.qkv, &yf, &lf, &err), &err);
            if (bf)
                emu_close_bf16(&yf, kyf, what);
            else
                emu_close(&yf, kyf, 1e-6, what);
            emu_close(&lf, klf, 5e-7, "attention from a position: lse");
            /* the backward takes no q0 */
            float delta;
            CHECK(pp_emu_cuda_launch_attention_backward(0, MAX_GRID, from, NULL, NULL, NULL, NULL,
                                                        NULL, &delta, NULL) ==
                  cudaErrorInvalidValue);
            void *bases[] = {bq, by, bl, byf, blf};
            pp_tensor *ts[] = {&a.qkv, &a.dqkv, &a.y, &a.dy, &a.lse, &yf, &lf};
            EMU_FREE_CASE(bases, ts);
        }
    const pp_emu_cuda_attention_dims past = {1, 4, 64, 2, 4};
    CHECK(pp_emu_cuda_launch_attention_forward(0, past, NULL, NULL, NULL, NULL) ==
          cudaErrorInvalidValue);
}

/* ---- one query: the split-keys kernels ------------------------------------------------- */

/* The last query alone (q0 = t - 1: a new token over the cache) by the
 * split-keys kernels, f32 and bf16: y's row and lse within the kernels'
 * tolerance of the CPU backend's pp_attention_forward_from and of the
 * whole forward's last row (other sums' order: not its bits); the partials
 * stay within the scratch pp_cuda_attention_decode_floats sizes (the rest
 * of a guarded buffer untouched); other dimensions refused. */
static void test_attention_decode(void)
{
    static const struct { int n, t, c, heads; } cases[] = {
        {1, 2, 128, 2},    /* two keys, heads of 64 */
        {2, 64, 96, 3},    /* one whole chunk, heads of 32 */
        {1, 65, 51, 3},    /* a chunk and one key, heads of 17 */
        {2, 200, 256, 2},  /* four chunks, the last of 8, heads of 128 */
        {1, 1024, 192, 3}, /* GPT-2's window: 16 chunks, heads of 64 */
    };
    pp_error err;
    char what[96];
    for (int bf = 0; bf < 2; bf++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int n = cases[i].n, t = cases[i].t, c = cases[i].c, h = cases[i].heads;
            const pp_dtype dt = bf ? PP_BF16 : PP_F32;
            const size_t es = bf ? 2 : 4;
            emu_attn a = emu_attn_case_of(dt, n, t, c, h);
            pp_tensor yf = emu_tensor(dt, 3, (int64_t[]){n, 1, c}, PP_NCHW);
            pp_tensor lf = emu_tensor(PP_F32, 3, (int64_t[]){n, h, 1}, PP_NCHW);
            const pp_emu_cuda_attention_dims whole = {n, t, c, h, 0}, last = {n, t, c, h, t - 1};
            const size_t floats = pp_emu_cuda_attention_decode_floats(last), guard = 256;
            void *bq, *by, *bl, *byf, *blf, *bp;
            void *kq = emu_copy(&a.qkv, 0, &bq), *ky = emu_copy(&a.y, 0, &by);
            void *kyf = emu_copy(&yf, 0, &byf);
            float *kl = emu_copy(&a.lse, 0, &bl), *klf = emu_copy(&lf, 0, &blf);
            float *part = emu_alloc((floats + guard) * sizeof(float), 0, &bp);
            for (size_t k = 0; k < floats + guard; k++) part[k] = -7.0f;
            snprintf(what, sizeof what, "%s decode %d x %d, %d heads of %d", bf ? "bf16" : "f32",
                     n, t, h, c / h);
            EMU_LAUNCHED(attention_forward(bf, whole, kq, ky, kl), what);
            EMU_LAUNCHED(bf ? pp_emu_cuda_launch_attention_decode_bf16(0, last, kq, kyf, klf, part)
                            : pp_emu_cuda_launch_attention_decode(0, last, kq, kyf, klf, part),
                         what);
            int spoiled = 0;
            for (size_t k = floats; k < floats + guard; k++) spoiled += part[k] != -7.0f;
            CHECK_MSG(spoiled == 0, "%s: %d floats written past the partials' %zu", what,
                      spoiled, floats);
            /* the CPU backend's row */
            CHECK_OK(pp_attention_forward_from(&g_ex, h, t - 1, &a.qkv, &yf, &lf, &err), &err);
            if (bf)
                emu_close_bf16(&yf, kyf, what);
            else
                emu_close(&yf, kyf, 2e-6, what);
            emu_close(&lf, klf, 1e-6, "decode: lse");
            /* the whole forward's last row, as a tensor of its own */
            pp_tensor yw = emu_tensor(dt, 3, (int64_t[]){n, 1, c}, PP_NCHW);
            pp_tensor lw = emu_tensor(PP_F32, 3, (int64_t[]){n, h, 1}, PP_NCHW);
            for (int k = 0; k < n; k++) {
                memcpy((char *)yw.data + (size_t)k * c * es, rows_at(ky, k, t, t - 1, c, es),
                       (size_t)c * es);
                for (int hh = 0; hh < h; hh++)
                    emu_f32(&lw)[k * h + hh] = *(const float *)rows_at(kl, k * h + hh, t, t - 1, 1, 4);
            }
            if (bf)
                emu_close_bf16(&yw, kyf, "decode against the whole forward's last row");
            else
                emu_close(&yw, kyf, 2e-6, "decode against the whole forward's last row");
            emu_close(&lw, klf, 1e-6, "decode against the whole forward's last lse");
            void *bases[] = {bq, by, bl, byf, blf, bp};
            pp_tensor *ts[] = {&a.qkv, &a.dqkv, &a.y, &a.dy, &a.lse, &yf, &lf, &yw, &lw};
            EMU_FREE_CASE(bases, ts);
        }
    /* only the last query, heads the kernels take */
    const pp_emu_cuda_attention_dims early = {1, 4, 64, 2, 2}, wide = {1, 4, 2 * 129, 2, 3};
    CHECK(pp_emu_cuda_launch_attention_decode(0, early, NULL, NULL, NULL, NULL) ==
          cudaErrorInvalidValue);
    CHECK(pp_emu_cuda_launch_attention_decode_bf16(0, wide, NULL, NULL, NULL, NULL) ==
          cudaErrorInvalidValue);
}

/* ---- the classifier ---------------------------------------------------------------------- */

/* element i of f32 or bf16 logits, as f32; and set to v (rounded) */
static float logit_at(const pp_tensor *t, int64_t i)
{
    return t->dtype == PP_BF16 ? pp_f32_from_bf16(((uint16_t *)t->data)[i]) : emu_f32(t)[i];
}

static void logit_set(pp_tensor *t, int64_t i, float v)
{
    if (t->dtype == PP_BF16)
        ((uint16_t *)t->data)[i] = pp_bf16_from_f32(v);
    else
        emu_f32(t)[i] = v;
}

/* the f32 kernel, or the bf16 one (bf16 logits and gradient) */
static cudaError_t launch_classifier(bool bf16, int n, int classes, void *kl,
                                     const int32_t *labels, float eps, int top_k,
                                     double *row_loss, int32_t *row_correct, float *loss,
                                     int32_t *correct, int32_t *correct_k, void *kd)
{
    if (bf16)
        return pp_emu_cuda_launch_classifier_bf16(0, n, classes, kl, labels, 8.0f, eps, top_k,
                                                  row_loss, row_correct, loss, correct,
                                                  correct_k, kd);
    return pp_emu_cuda_launch_classifier(0, n, classes, kl, labels, 8.0f, eps, top_k, row_loss,
                                         row_correct, loss, correct, correct_k, kd);
}

static void test_classifier(void)
{
    static const struct {
        int n, classes;
        bool in_place;
        float eps;
        int top_k;
        bool bf16; /* bf16 logits and gradient (a mixed-precision language model's head) */
    } cases[] = {{37, 10, false, 0.0f, 0, false},  {37, 10, false, 0.1f, 5, false},
                 {37, 10, true, 0.3f, 3, false},   {5, 1000, true, 0.0f, 5, false},
                 {2, 50257, true, 0.1f, 5, false}, {3, 1, false, 0.0f, 1, false},
                 {37, 10, false, 0.0f, 0, true},   {37, 10, true, 0.1f, 5, true},
                 {5, 1000, false, 0.3f, 3, true},  {3, 50257, true, 0.0f, 5, true},
                 {2, 50257, false, 0.1f, 1, true}, {3, 1, true, 0.0f, 1, true}};
    pp_error err;
    char what[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, classes = cases[i].classes, top_k = cases[i].top_k;
        const bool bf16 = cases[i].bf16;
        const pp_dtype dt = bf16 ? PP_BF16 : PP_F32;
        const int64_t ls[2] = {n, classes}, ns[1] = {n}, one[1] = {1};
        pp_tensor logits = emu_tensor(dt, 2, ls, PP_NCHW);
        pp_tensor labels = emu_tensor(PP_I32, 1, ns, PP_NCHW);
        pp_tensor loss = emu_tensor(PP_F32, 0, one, PP_NCHW);
        pp_tensor correct = emu_tensor(PP_I32, 0, one, PP_NCHW);
        pp_tensor correct_k = emu_tensor(PP_I32, 0, one, PP_NCHW);
        pp_tensor dl = emu_tensor(dt, 2, ls, PP_NCHW);
        if (bf16)
            emu_fill_bf16(&logits, -4, 8);
        else
            emu_fill(&logits, -4, 8);
        for (int r = 0; r < n; r++) {
            const int label = (r * 7) % classes;
            const int64_t z = (int64_t)r * classes;
            ((int32_t *)labels.data)[r] = label;
            if (r % 3 == 0) { /* a tie for the maximum: the first index wins */
                logit_set(&logits, z + classes / 2, 9.0f);
                logit_set(&logits, z + classes - 1, 9.0f);
            }
            if (r % 5 == 0 && classes > 3) /* a tie with the label (top-k) */
                logit_set(&logits, z + 3, logit_at(&logits, z + label));
        }
        void *bl, *bd;
        void *kl = emu_copy(&logits, 0, &bl), *kd = cases[i].in_place ? kl : emu_copy(&dl, 0, &bd);
        double *row_loss = malloc(sizeof(double) * (size_t)n);
        int32_t *row_correct = malloc(sizeof(int32_t) * (size_t)n), kcorrect = -5, kcorrect_k = -5;
        float kloss = 0;
        pp_tensor *dst = cases[i].in_place ? &logits : &dl;
        const pp_xent_desc xd = {8.0f, cases[i].eps, top_k > 0 ? top_k : 1};
        CHECK_OK(pp_softmax_xent_ex(&g_ex, &xd, &logits, &labels, &loss, &correct,
                                    top_k ? &correct_k : NULL, dst, &err),
                 &err);
        snprintf(what, sizeof what, "classifier %d x %d%s%s, smoothing %g, top-%d", n, classes,
                 bf16 ? ", bf16" : "", cases[i].in_place ? ", in place" : "",
                 (double)cases[i].eps, top_k);
        EMU_LAUNCHED(launch_classifier(bf16, n, classes, kl, labels.data, cases[i].eps, top_k,
                                       row_loss, row_correct, &kloss, &kcorrect,
                                       top_k ? &kcorrect_k : NULL, kd),
                     what);
        CHECK_MSG(fabs(kloss - emu_f32(&loss)[0]) <= 1e-6 * fabs(emu_f32(&loss)[0]),
                  "%s: loss %.9g, the CPU's %.9g", what, kloss, emu_f32(&loss)[0]);
        CHECK_MSG(kcorrect == ((int32_t *)correct.data)[0], "%s: correct %d, the CPU's %d", what,
                  kcorrect, ((int32_t *)correct.data)[0]);
        if (top_k)
            CHECK_MSG(kcorrect_k == ((int32_t *)correct_k.data)[0],
                      "%s: top-%d %d, the CPU's %d", what, top_k, kcorrect_k,
                      ((int32_t *)correct_k.data)[0]);
        if (bf16)
            emu_close_bf16(dst, kd, what);
        else
            emu_close(dst, kd, 1e-6, what);
        /* a label out of range: correct = -1, no access outside the row */
        ((int32_t *)labels.data)[n - 1] = classes;
        EMU_LAUNCHED(launch_classifier(bf16, n, classes, kl, labels.data, cases[i].eps, top_k,
                                       row_loss, row_correct, &kloss, &kcorrect,
                                       top_k ? &kcorrect_k : NULL, kd),
                     what);
        CHECK_MSG(kcorrect == -1, "%s, a label out of range: correct %d (want -1)", what,
                  kcorrect);
        free(bl), free(row_loss), free(row_correct);
        if (!cases[i].in_place) free(bd);
        pp_tensor *ts[] = {&logits, &labels, &loss, &correct, &correct_k, &dl};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) pp_tensor_free(ts[k]);
    }
}

int main(void)
{
    emu_rig_open();
    test_colsum();
    test_parts_add();
    test_layernorm();
    test_embedding();
    test_attention();
    test_attention_bf16();
    test_attention_from();
    test_attention_decode();
    test_classifier();
    return emu_rig_close("test_emu_transformer");
}
