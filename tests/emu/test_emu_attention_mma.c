/*
 * test_emu_attention_mma.c - the tensor-core attention (runtime/cuda:
 * attention_mma.cu, its mma.sync products by the emulator's warp collective)
 * against the CPU backend's bf16 attention (the f32 arithmetic on widened
 * operands, each output rounded once: the spec), on the CPU by the emulator
 * (cuda_emu.h): heads of 16, 48 (run by the kernels of 64, zero columns
 * past the head), 64 and 128 columns, t of 1, 64, 70 and 130 (tiles of 64
 * whole and cut short), one to three samples, several heads, outputs 2 bytes off a 4-byte
 * boundary.
 *   - forward: y within TOL of the largest element of the CPU's y (the
 *     kernels round P to bf16 before P V, the CPU does not), lse within
 *     TOL_LSE (absolute, natural log: its sum is of the unrounded P);
 *   - backward from the CPU's y and lse: dqkv within TOL of its largest
 *     element, and the same bits when run again;
 *   - the first call's check as a GPU makes it (attention_bf16.c): y, lse
 *     and dqkv against our CUDA-core kernels' (attention_bf16.cu) on the
 *     same operands, within TOL and TOL_LSE (tighter than the check's);
 *   - dropout on the probabilities (p 0.1 and 0.5, heads of 16 and 64, t
 *     not a multiple of 64, one to three samples, first_sample not 0): the
 *     same checks against pp_attention_forward_dropout / _backward_dropout
 *     and against ours drawing the same masks; p 0 the bits of no dropout
 *     (NULL) forward and backward; dropout changes y and leaves lse;
 *   - a head of 17 columns is refused (cudaErrorInvalidValue, nothing
 *     written), as pp_cuda_attention_mma_takes says.
 * TOL (8e-3: one or two bf16 units at the largest element) is the kernels'
 * spec here, half the first call's check's PP_ATTN_TOL_Y (1.6e-2, which
 * leaves room for roundings on a device: runtime/cuda/attention_check.h);
 * TOL_LSE is its PP_ATTN_TOL_LSE. That header needs the CUDA runtime's, hence
 * the values here; the figures each case reaches are printed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "tests/check.h"
#include "tests/emu/emu_attention.h"
#include "tests/emu/emu_rig.h"

#include "emu_attention_bf16.h"
#include "emu_attention_mma.h"

#define TOL 8e-3
#define TOL_LSE 1e-3
#define MAX_GRID 3

/* max |k - cpu| / max |cpu| over bf16 elements */
static double off_bf16(const pp_tensor *t, const uint16_t *k)
{
    const int64_t n = pp_tensor_numel(t);
    const uint16_t *c = t->data;
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        const double cv = pp_f32_from_bf16(c[i]), d = fabs(pp_f32_from_bf16(k[i]) - cv);
        scale = fmax(scale, fabs(cv));
        if (!(d <= diff)) diff = d;
    }
    return scale > 0 ? diff / scale : diff;
}

/* max |k - cpu| over f32 elements */
static double off_f32(const pp_tensor *t, const float *k)
{
    double diff = 0;
    for (int64_t i = 0; i < pp_tensor_numel(t); i++) {
        const double d = fabs((double)emu_f32(t)[i] - k[i]);
        if (!(d <= diff)) diff = d;
    }
    return diff;
}

/* the kernels' outputs on t's shape into a tensor (its data replaced, for off_*) */
static pp_tensor as_tensor(const pp_tensor *t, void *data)
{
    pp_tensor v = *t;
    v.data = data;
    return v;
}

/* For a case with dropout drop: the kernels with p == 0 give the bits of
 * the kernels without dropout (NULL), forward and backward; with drop, y
 * changes and lse does not (the undropped softmax's). */
static void p0_bits(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop, const emu_attn *a,
                    const uint16_t *kq, const uint16_t *kdy, float *delta, const char *what)
{
    const pp_dropout_desc none = {0.0f, drop->key, drop->first_sample};
    void *b[6];
    uint16_t *y0 = emu_copy(&a->y, 0, &b[0]), *y1 = emu_copy(&a->y, 0, &b[1]);
    float *l0 = emu_copy(&a->lse, 0, &b[2]), *l1 = emu_copy(&a->lse, 0, &b[3]);
    uint16_t *q0 = emu_copy(&a->dqkv, 0, &b[4]), *q1 = emu_copy(&a->dqkv, 0, &b[5]);
    const size_t yb = pp_tensor_bytes(&a->y), lb = pp_tensor_bytes(&a->lse);
    EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_mma(0, d, NULL, kq, y0, l0), what);
    EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_mma(0, d, &none, kq, y1, l1), what);
    CHECK_MSG(!memcmp(y0, y1, yb) && !memcmp(l0, l1, lb), "%s: p 0 is not the forward's bits "
              "without dropout", what);
    EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_mma(0, MAX_GRID, d, NULL, kq, y0, l0, kdy,
                                                           delta, q0), what);
    EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_mma(0, MAX_GRID, d, &none, kq, y0, l0,
                                                           kdy, delta, q1), what);
    CHECK_MSG(!memcmp(q0, q1, pp_tensor_bytes(&a->dqkv)), "%s: p 0 is not the backward's bits "
              "without dropout", what);
    EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_mma(0, d, drop, kq, y1, l1), what);
    CHECK_MSG(memcmp(y0, y1, yb) != 0, "%s: dropout left y as it was", what);
    CHECK_MSG(!memcmp(l0, l1, lb), "%s: lse is not the undropped softmax's", what);
    for (int k = 0; k < 6; k++) free(b[k]);
}

static void test_attention_mma(void)
{
    static const struct {
        int n, t, c, heads;
        float p; /* dropout on the probabilities (0: none, NULL) */
        int64_t first_sample;
    } cases[] = {
        {2, 70, 128, 2, 0, 0},  /* GPT-2's heads of 64; two tiles, the last short; two samples */
        {1, 130, 64, 4, 0, 0},  /* heads of 16; three tiles */
        {3, 1, 128, 2, 0, 0},   /* one query */
        {1, 64, 64, 1, 0, 0},   /* one whole tile */
        {1, 130, 256, 2, 0, 0}, /* heads of 128: backward tiles of 32 */
        {2, 70, 96, 2, 0, 0},   /* heads of 48, by the kernels of 64 */
        /* dropout on the probabilities: the CPU's masks */
        {3, 70, 48, 3, 0.1f, 4},  /* heads of 16; three samples */
        {2, 70, 128, 2, 0.5f, 9}, /* heads of 64; two samples */
        {1, 100, 64, 1, 0.1f, 5}, /* one head of 64, one sample */
        {2, 45, 64, 4, 0.5f, 1},  /* heads of 16, one short tile */
    };
    pp_error err;
    char what[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, t = cases[i].t, c = cases[i].c, h = cases[i].heads;
        const pp_dropout_desc dd = {cases[i].p, pp_dropout_key(77, 5, 20 + (int)i),
                                    cases[i].first_sample};
        const pp_dropout_desc *drop = dd.p > 0 ? &dd : NULL;
        emu_attn a = emu_attn_case(n, t, c, h);
        void *bq, *by, *bl, *bdy, *bdq, *bdq2;
        uint16_t *kq = emu_copy(&a.qkv, 0, &bq), *ky = emu_copy(&a.y, 2, &by);
        uint16_t *kdy = emu_copy(&a.dy, 2, &bdy), *kdq = emu_copy(&a.dqkv, 0, &bdq);
        uint16_t *kdq2 = emu_copy(&a.dqkv, 0, &bdq2);
        float *kl = emu_copy(&a.lse, 0, &bl);
        float *delta = malloc(sizeof(float) * (size_t)n * h * t);
        const pp_emu_cuda_attention_dims d = {n, t, c, h};
        int w = snprintf(what, sizeof what, "mma attention %d x %d, %d heads of %d", n, t, h,
                         c / h);
        if (drop)
            snprintf(what + w, sizeof what - (size_t)w, ", dropout %g, first sample %lld",
                     (double)dd.p, (long long)dd.first_sample);
        CHECK_MSG(pp_emu_cuda_attention_mma_takes(d), "%s: refused", what);
        if (drop) p0_bits(d, drop, &a, kq, kdy, delta, what);
        CHECK_OK(pp_attention_forward_dropout(&g_ex, h, drop, &a.qkv, &a.y, &a.lse, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_mma(0, d, drop, kq, ky, kl), what);
        /* ours (CUDA cores) on the same operands and masks: the first call's check */
        void *bo, *bol, *boq;
        uint16_t *oy = emu_copy(&a.y, 0, &bo), *odq = emu_copy(&a.dqkv, 0, &boq);
        float *ol = emu_copy(&a.lse, 0, &bol);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_bf16(0, d, drop, kq, oy, ol), what);
        const pp_tensor oyt = as_tensor(&a.y, oy), olt = as_tensor(&a.lse, ol),
                        odqt = as_tensor(&a.dqkv, odq);
        const double ey = off_bf16(&a.y, ky), el = off_f32(&a.lse, kl);
        const double cy = off_bf16(&oyt, ky), cl = off_f32(&olt, kl);
        CHECK_MSG(ey <= TOL, "%s: y off by %.3g of the largest (tolerance %g)", what, ey, TOL);
        CHECK_MSG(el <= TOL_LSE, "%s: lse off by %.3g (tolerance %g)", what, el, TOL_LSE);
        CHECK_OK(pp_attention_backward_dropout(&g_ex, h, drop, &a.qkv, &a.y, &a.lse, &a.dy,
                                               &a.dqkv, &err),
                 &err);
        memcpy(ky, a.y.data, pp_tensor_bytes(&a.y)); /* the backwards from the CPU's forward */
        memcpy(kl, a.lse.data, pp_tensor_bytes(&a.lse));
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_mma(0, MAX_GRID, d, drop, kq, ky, kl,
                                                               kdy, delta, kdq), what);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_mma(0, MAX_GRID, d, drop, kq, ky, kl,
                                                               kdy, delta, kdq2), what);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_bf16(0, MAX_GRID, d, drop, kq, ky, kl,
                                                                kdy, delta, odq), what);
        const double eq = off_bf16(&a.dqkv, kdq), cq = off_bf16(&odqt, kdq);
        CHECK_MSG(eq <= TOL, "%s: dqkv off by %.3g of the largest (tolerance %g)", what, eq, TOL);
        CHECK_MSG(memcmp(kdq, kdq2, pp_tensor_bytes(&a.dqkv)) == 0, "%s: backward not the same "
                  "bits twice", what);
        CHECK_MSG(cy <= TOL && cl <= TOL_LSE && cq <= TOL, "%s: the first call's check fails: "
                  "y %.3g, lse %.3g, dqkv %.3g off ours", what, cy, cl, cq);
        printf("%s: y %.2e, lse %.2e, dqkv %.2e of the CPU's; %.2e, %.2e, %.2e of ours\n", what,
               ey, el, eq, cy, cl, cq);
        free(bo), free(bol), free(boq);
        free(delta);
        void *bases[] = {bq, by, bl, bdy, bdq, bdq2};
        pp_tensor *ts[] = {&a.qkv, &a.dqkv, &a.y, &a.dy, &a.lse};
        EMU_FREE_CASE(bases, ts);
    }
    const pp_emu_cuda_attention_dims odd = {1, 4, 34, 2};
    CHECK(!pp_emu_cuda_attention_mma_takes(odd));
    CHECK(pp_emu_cuda_launch_attention_forward_mma(0, odd, NULL, NULL, NULL, NULL) ==
          cudaErrorInvalidValue);
    CHECK(pp_emu_cuda_launch_attention_backward_mma(0, MAX_GRID, odd, NULL, NULL, NULL, NULL,
                                                    NULL, NULL, NULL) == cudaErrorInvalidValue);
}

int main(void)
{
    emu_rig_open();
    test_attention_mma();
    return emu_rig_close("test_emu_attention_mma");
}
