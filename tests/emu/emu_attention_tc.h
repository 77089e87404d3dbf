/*
 * emu_attention_tc.h - the emulator's test of the tensor-core attention
 * kernels, written once for both element types: test_emu_attention_mma.c
 * (bf16, attention_mma.cu) and test_emu_attention_tf32.c (f32 in 3xTF32,
 * attention_tf32.cu) give their kernels (emu_tc_kernels), their tolerances
 * and their cases (emu_tc_case); emu_tc_run checks each case:
 *   - forward: y within tol of the largest element of the CPU backend's y
 *     (pp_attention_forward_dropout: the spec), lse within tol_lse
 *     (absolute);
 *   - backward from the CPU's y and lse: dqkv within tol of its largest
 *     element, and the same bits when run again;
 *   - the first call's check as a GPU makes it (attention_run.c): y, lse
 *     and dqkv against our CUDA-core kernels' on the same operands and
 *     masks, within tol and tol_lse;
 *   - with dropout: p 0 the bits of no dropout (NULL), forward and
 *     backward; dropout changes y and leaves lse (the undropped softmax's);
 * and prints the figures each case reaches. emu_tc_refused checks that a
 * shape the kernels do not take is refused (cudaErrorInvalidValue, nothing
 * written). Included by those two tests only, after emu_rig.h and the
 * kernels' generated headers (emu_transformer.h's dims).
 */
#ifndef PP_TESTS_EMU_ATTENTION_TC_H
#define PP_TESTS_EMU_ATTENTION_TC_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "tests/check.h"
#include "tests/emu/emu_attention.h"
#include "tests/emu/emu_rig.h"

/* the kernels' launches with their operands' element type erased (each
 * test's wrappers call the typed ones; backward grids of at most 3 blocks) */
typedef cudaError_t (*emu_tc_forward)(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop,
                                      const void *qkv, void *y, float *lse);
typedef cudaError_t (*emu_tc_backward)(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop,
                                       const void *qkv, const void *y, const float *lse,
                                       const void *dy, float *delta, void *dqkv);

typedef struct emu_tc_kernels {
    const char *name; /* in the cases' names: "mma", "3xTF32" */
    pp_dtype dtype;   /* qkv, y, dy and dqkv: PP_BF16 or PP_F32 */
    double tol, tol_lse;
    size_t y_off; /* bytes y and dy sit past the case's offset (off a 4-byte boundary) */
    bool (*takes)(pp_emu_cuda_attention_dims d);
    emu_tc_forward forward, ours_forward; /* the tensor-core kernels; our CUDA-core ones */
    emu_tc_backward backward, ours_backward;
} emu_tc_kernels;

typedef struct emu_tc_case {
    int n, t, c, heads;
    size_t off; /* bytes the kernels' operands sit past a 64-byte boundary */
    float p;    /* dropout on the probabilities (0: none, NULL) */
    int64_t first_sample;
} emu_tc_case;

/* element i of t's type at data, widened */
static inline double emu_tc_at(const pp_tensor *t, const void *data, int64_t i)
{
    return t->dtype == PP_BF16 ? (double)pp_f32_from_bf16(((const uint16_t *)data)[i])
                               : (double)((const float *)data)[i];
}

/* max |k - ref| / max |ref| (ref: t's data; k of t's type and shape) */
static inline double emu_tc_off_rel(const pp_tensor *t, const void *k)
{
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < pp_tensor_numel(t); i++) {
        const double c = emu_tc_at(t, t->data, i), d = fabs(emu_tc_at(t, k, i) - c);
        scale = fmax(scale, fabs(c));
        if (!(d <= diff)) diff = d;
    }
    return scale > 0 ? diff / scale : diff;
}

/* max |k - ref| */
static inline double emu_tc_off_abs(const pp_tensor *t, const void *k)
{
    double diff = 0;
    for (int64_t i = 0; i < pp_tensor_numel(t); i++) {
        const double d = fabs(emu_tc_at(t, t->data, i) - emu_tc_at(t, k, i));
        if (!(d <= diff)) diff = d;
    }
    return diff;
}

/* t's shape over data (for the off_ functions) */
static inline pp_tensor emu_tc_as(const pp_tensor *t, void *data)
{
    pp_tensor v = *t;
    v.data = data;
    return v;
}

/* With dropout drop: p == 0 gives the bits of the kernels without dropout
 * (NULL), forward and backward; with drop, y changes and lse does not. */
static inline void emu_tc_p0_bits(const emu_tc_kernels *K, pp_emu_cuda_attention_dims d,
                                  const pp_dropout_desc *drop, const emu_attn *a, const void *kq,
                                  const void *kdy, float *delta, const char *what)
{
    const pp_dropout_desc none = {.p = 0.0f, .key = drop->key,
                                  .first_sample = drop->first_sample};
    void *b[6];
    void *y0 = emu_copy(&a->y, 0, &b[0]), *y1 = emu_copy(&a->y, 0, &b[1]);
    float *l0 = emu_copy(&a->lse, 0, &b[2]), *l1 = emu_copy(&a->lse, 0, &b[3]);
    void *q0 = emu_copy(&a->dqkv, 0, &b[4]), *q1 = emu_copy(&a->dqkv, 0, &b[5]);
    const size_t yb = pp_tensor_bytes(&a->y), lb = pp_tensor_bytes(&a->lse);
    EMU_LAUNCHED(K->forward(d, NULL, kq, y0, l0), what);
    EMU_LAUNCHED(K->forward(d, &none, kq, y1, l1), what);
    CHECK_MSG(!memcmp(y0, y1, yb) && !memcmp(l0, l1, lb), "%s: p 0 is not the forward's bits "
              "without dropout", what);
    EMU_LAUNCHED(K->backward(d, NULL, kq, y0, l0, kdy, delta, q0), what);
    EMU_LAUNCHED(K->backward(d, &none, kq, y0, l0, kdy, delta, q1), what);
    CHECK_MSG(!memcmp(q0, q1, pp_tensor_bytes(&a->dqkv)), "%s: p 0 is not the backward's bits "
              "without dropout", what);
    EMU_LAUNCHED(K->forward(d, drop, kq, y1, l1), what);
    CHECK_MSG(memcmp(y0, y1, yb) != 0, "%s: dropout left y as it was", what);
    CHECK_MSG(!memcmp(l0, l1, lb), "%s: lse is not the undropped softmax's", what);
    for (int k = 0; k < 6; k++) free(b[k]);
}

/* The checks above over n cases; case i draws its masks with key
 * pp_dropout_key(77, 5, key0 + i). */
static inline void emu_tc_run(const emu_tc_kernels *K, const emu_tc_case *cases, size_t n_cases,
                              int key0)
{
    pp_error err;
    char what[128];
    for (size_t i = 0; i < n_cases; i++) {
        const emu_tc_case *e = &cases[i];
        const int n = e->n, t = e->t, c = e->c, h = e->heads;
        const size_t off = e->off, yoff = off + K->y_off;
        const pp_dropout_desc dd = {.p = e->p,
                                    .key = pp_dropout_key(77, 5, key0 + (int)i),
                                    .first_sample = e->first_sample};
        const pp_dropout_desc *drop = dd.p > 0 ? &dd : NULL;
        emu_attn a = emu_attn_case_of(K->dtype, n, t, c, h);
        void *bq, *by, *bl, *bdy, *bdq, *bdq2;
        void *kq = emu_copy(&a.qkv, off, &bq), *ky = emu_copy(&a.y, yoff, &by);
        void *kdy = emu_copy(&a.dy, yoff, &bdy), *kdq = emu_copy(&a.dqkv, off, &bdq);
        void *kdq2 = emu_copy(&a.dqkv, off, &bdq2);
        float *kl = emu_copy(&a.lse, off, &bl);
        float *delta = malloc(sizeof(float) * (size_t)n * h * t);
        const pp_emu_cuda_attention_dims d = {n, t, c, h, 0};
        int w = snprintf(what, sizeof what, "%s attention %d x %d, %d heads of %d%s", K->name, n,
                         t, h, c / h, off ? ", 4 bytes off" : "");
        if (drop)
            snprintf(what + w, sizeof what - (size_t)w, ", dropout %g, first sample %lld",
                     (double)dd.p, (long long)dd.first_sample);
        CHECK_MSG(K->takes(d), "%s: refused", what);
        if (drop) emu_tc_p0_bits(K, d, drop, &a, kq, kdy, delta, what);
        CHECK_OK(pp_attention_forward_dropout(&g_ex, h, drop, &a.qkv, &a.y, &a.lse, &err), &err);
        EMU_LAUNCHED(K->forward(d, drop, kq, ky, kl), what);
        /* each kernel's second run as a replayed graph runs it: the key
         * captured at another step, the step in memory (the same bits where
         * the kernels read it; the backward's below) */
        pp_tensor mem = emu_step_tensor();
        const pp_dropout_desc rd = emu_replayed(&dd, 77, 5, key0 + (int)i, &mem);
        if (drop) {
            void *br, *brl;
            void *ry = emu_copy(&a.y, yoff, &br);
            float *rl = emu_copy(&a.lse, off, &brl);
            EMU_LAUNCHED(K->forward(d, &rd, kq, ry, rl), what);
            CHECK_MSG(!memcmp(ry, ky, pp_tensor_bytes(&a.y)) &&
                          !memcmp(rl, kl, pp_tensor_bytes(&a.lse)),
                      "%s: the step in memory is not the key's forward", what);
            free(br), free(brl);
        }
        /* ours (CUDA cores) on the same operands and masks: the first call's check */
        void *bo, *bol, *boq;
        void *oy = emu_copy(&a.y, 0, &bo), *odq = emu_copy(&a.dqkv, 0, &boq);
        float *ol = emu_copy(&a.lse, 0, &bol);
        EMU_LAUNCHED(K->ours_forward(d, drop, kq, oy, ol), what);
        const pp_tensor oyt = emu_tc_as(&a.y, oy), olt = emu_tc_as(&a.lse, ol),
                        odqt = emu_tc_as(&a.dqkv, odq);
        const double ey = emu_tc_off_rel(&a.y, ky), el = emu_tc_off_abs(&a.lse, kl);
        const double cy = emu_tc_off_rel(&oyt, ky), cl = emu_tc_off_abs(&olt, kl);
        CHECK_MSG(ey <= K->tol, "%s: y off by %.3g of the largest (tolerance %g)", what, ey,
                  K->tol);
        CHECK_MSG(el <= K->tol_lse, "%s: lse off by %.3g (tolerance %g)", what, el, K->tol_lse);
        CHECK_OK(pp_attention_backward_dropout(&g_ex, h, drop, &a.qkv, &a.y, &a.lse, &a.dy,
                                               &a.dqkv, &err),
                 &err);
        memcpy(ky, a.y.data, pp_tensor_bytes(&a.y)); /* the backwards from the CPU's forward */
        memcpy(kl, a.lse.data, pp_tensor_bytes(&a.lse));
        EMU_LAUNCHED(K->backward(d, drop, kq, ky, kl, kdy, delta, kdq), what);
        EMU_LAUNCHED(K->backward(d, drop ? &rd : NULL, kq, ky, kl, kdy, delta, kdq2), what);
        EMU_LAUNCHED(K->ours_backward(d, drop, kq, ky, kl, kdy, delta, odq), what);
        const double eq = emu_tc_off_rel(&a.dqkv, kdq), cq = emu_tc_off_rel(&odqt, kdq);
        CHECK_MSG(eq <= K->tol, "%s: dqkv off by %.3g of the largest (tolerance %g)", what, eq,
                  K->tol);
        CHECK_MSG(memcmp(kdq, kdq2, pp_tensor_bytes(&a.dqkv)) == 0, "%s: backward not the same "
                  "bits twice", what);
        CHECK_MSG(cy <= K->tol && cl <= K->tol_lse && cq <= K->tol, "%s: the first call's check "
                  "fails: y %.3g, lse %.3g, dqkv %.3g off ours", what, cy, cl, cq);
        printf("%s: y %.2e, lse %.2e, dqkv %.2e of the CPU's; %.2e, %.2e, %.2e of ours\n", what,
               ey, el, eq, cy, cl, cq);
        free(bo), free(bol), free(boq);
        free(delta);
        pp_tensor_free(&mem);
        void *bases[] = {bq, by, bl, bdy, bdq, bdq2};
        pp_tensor *ts[] = {&a.qkv, &a.dqkv, &a.y, &a.dy, &a.lse};
        EMU_FREE_CASE(bases, ts);
    }
}

/* A shape the kernels do not take: refused, nothing launched (no operands) */
static inline void emu_tc_refused(const emu_tc_kernels *K, pp_emu_cuda_attention_dims d)
{
    CHECK_MSG(!K->takes(d), "%s: a head of %d taken", K->name, d.c / d.heads);
    CHECK(K->forward(d, NULL, NULL, NULL, NULL) == cudaErrorInvalidValue);
    CHECK(K->backward(d, NULL, NULL, NULL, NULL, NULL, NULL, NULL) == cudaErrorInvalidValue);
}

#endif
