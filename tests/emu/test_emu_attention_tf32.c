/*
 * test_emu_attention_tf32.c - the f32 tensor-core attention (runtime/cuda:
 * attention_tf32.cu, its 3xTF32 mma.sync products by the emulator's warp
 * collective) against the CPU backend's f32 attention (the spec), on the CPU
 * by the emulator (cuda_emu.h): heads of 8 (run by the kernels of 16, zero
 * columns past the head), 16, 24 (by 32), 48 (by 64), 64 and 128 columns,
 * t of 1, 64, 70 and 130 (tiles whole and cut short), one to three samples,
 * several heads, operands 4 bytes off a 16-byte boundary (staged by plain
 * loads instead of cp.async).
 *   - forward: y within TOL of the largest element of the CPU's y, lse
 *     within TOL_LSE (absolute);
 *   - backward from the CPU's y and lse: dqkv within TOL of its largest
 *     element, and the same bits when run again;
 *   - the first call's check as a GPU makes it (attention_run.c): y, lse
 *     and dqkv against our CUDA-core kernels' (attention.cu) on the same
 *     operands, within TOL and TOL_LSE (the check's PP_ATTN_TOL_Y_F32 and
 *     PP_ATTN_TOL_LSE_F32 are ten times looser, for a device's sums);
 *   - dropout on the probabilities (p 0.1 and 0.5, heads of 16 and 64, t
 *     not a multiple of 64, first_sample not 0): the same checks against
 *     pp_attention_forward_dropout / _backward_dropout and against ours
 *     drawing the same masks; p 0 the bits of no dropout (NULL), forward and
 *     backward; dropout changes y and leaves lse;
 *   - heads of 12 and of 17 columns are refused (cudaErrorInvalidValue,
 *     nothing written), as pp_cuda_attention_tf32_takes says.
 * TOL (1e-5) is about 80 f32 units at the largest element: 3xTF32 drops
 * the a_lo b_lo term (2^-22 of each product) and sums in the tensor core's
 * order; one TF32 rounding a product (a kernel that lost its split) is 1e-3
 * or so, and a fragment or mask read wrongly tens of percent. The figures
 * each case reaches are printed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "tests/check.h"
#include "tests/emu/emu_rig.h"

#include "emu_attention_tf32.h"
#include "emu_transformer.h"

#define TOL 1e-5
#define TOL_LSE 1e-5
#define MAX_GRID 3

/* max |k - ref| / max |ref| (ref: t's data) */
static double off_rel(const pp_tensor *t, const float *k)
{
    const float *c = emu_f32(t);
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < pp_tensor_numel(t); i++) {
        const double d = fabs((double)k[i] - c[i]);
        scale = fmax(scale, fabs(c[i]));
        if (!(d <= diff)) diff = d;
    }
    return scale > 0 ? diff / scale : diff;
}

/* max |k - ref| */
static double off_abs(const pp_tensor *t, const float *k)
{
    double diff = 0;
    for (int64_t i = 0; i < pp_tensor_numel(t); i++) {
        const double d = fabs((double)emu_f32(t)[i] - k[i]);
        if (!(d <= diff)) diff = d;
    }
    return diff;
}

/* t's shape over data (for off_*) */
static pp_tensor as_tensor(const pp_tensor *t, void *data)
{
    pp_tensor v = *t;
    v.data = data;
    return v;
}

typedef struct f32_attn {
    pp_tensor qkv, dqkv, y, dy, lse;
} f32_attn;

/* qkv uniform in [-2, 2), dy in [-1, 1), dqkv in [5, 6) (an element the
 * kernels leave unwritten shows), y and lse zero */
static f32_attn f32_case(int n, int t, int c, int h)
{
    f32_attn a;
    a.qkv = emu_tensor(PP_F32, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
    a.dqkv = emu_tensor(PP_F32, 3, (int64_t[]){n, t, 3 * c}, PP_NCHW);
    a.y = emu_tensor(PP_F32, 3, (int64_t[]){n, t, c}, PP_NCHW);
    a.dy = emu_tensor(PP_F32, 3, (int64_t[]){n, t, c}, PP_NCHW);
    a.lse = emu_tensor(PP_F32, 3, (int64_t[]){n, h, t}, PP_NCHW);
    emu_fill(&a.qkv, -2, 4), emu_fill(&a.dy, -1, 2), emu_fill(&a.dqkv, 5, 1);
    return a;
}

/* For a case with dropout drop: p == 0 gives the bits of the kernels
 * without dropout (NULL), forward and backward; with drop, y changes and
 * lse does not (the undropped softmax's). */
static void p0_bits(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop, const f32_attn *a,
                    const float *kq, const float *kdy, float *delta, const char *what)
{
    const pp_dropout_desc none = {0.0f, drop->key, drop->first_sample};
    void *b[6];
    float *y0 = emu_copy(&a->y, 0, &b[0]), *y1 = emu_copy(&a->y, 0, &b[1]);
    float *l0 = emu_copy(&a->lse, 0, &b[2]), *l1 = emu_copy(&a->lse, 0, &b[3]);
    float *q0 = emu_copy(&a->dqkv, 0, &b[4]), *q1 = emu_copy(&a->dqkv, 0, &b[5]);
    const size_t yb = pp_tensor_bytes(&a->y), lb = pp_tensor_bytes(&a->lse);
    EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_tf32(0, d, NULL, kq, y0, l0), what);
    EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_tf32(0, d, &none, kq, y1, l1), what);
    CHECK_MSG(!memcmp(y0, y1, yb) && !memcmp(l0, l1, lb), "%s: p 0 is not the forward's bits "
              "without dropout", what);
    EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_tf32(0, MAX_GRID, d, NULL, kq, y0, l0, kdy,
                                                            delta, q0), what);
    EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_tf32(0, MAX_GRID, d, &none, kq, y0, l0,
                                                            kdy, delta, q1), what);
    CHECK_MSG(!memcmp(q0, q1, pp_tensor_bytes(&a->dqkv)), "%s: p 0 is not the backward's bits "
              "without dropout", what);
    EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_tf32(0, d, drop, kq, y1, l1), what);
    CHECK_MSG(memcmp(y0, y1, yb) != 0, "%s: dropout left y as it was", what);
    CHECK_MSG(!memcmp(l0, l1, lb), "%s: lse is not the undropped softmax's", what);
    for (int k = 0; k < 6; k++) free(b[k]);
}

static void test_attention_tf32(void)
{
    static const struct {
        int n, t, c, heads;
        size_t off;  /* bytes the kernels' operands sit past a 64-byte boundary */
        float p;     /* dropout on the probabilities (0: none, NULL) */
        int64_t first_sample;
    } cases[] = {
        {2, 70, 128, 2, 0, 0, 0},  /* GPT-2's heads of 64; two tiles, the last short */
        {1, 130, 64, 4, 0, 0, 0},  /* heads of 16; three tiles */
        {3, 1, 128, 2, 0, 0, 0},   /* one query */
        {1, 64, 64, 1, 0, 0, 0},   /* one whole tile */
        {1, 130, 256, 2, 0, 0, 0}, /* heads of 128: forward tiles of 32, backward of 16 */
        {2, 70, 96, 2, 4, 0, 0},   /* heads of 48, by the kernels of 64; 4 bytes off */
        {1, 37, 96, 4, 4, 0, 0},   /* heads of 24, by 32; 4 bytes off */
        {2, 20, 16, 2, 0, 0, 0},   /* heads of 8, by 16 */
        /* dropout on the probabilities: the CPU's masks */
        {3, 70, 48, 3, 0, 0.1f, 4},  /* heads of 16; three samples */
        {2, 70, 128, 2, 0, 0.5f, 9}, /* heads of 64; two samples */
        {1, 100, 64, 1, 4, 0.1f, 5}, /* one head of 64, one sample; 4 bytes off */
    };
    pp_error err;
    char what[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, t = cases[i].t, c = cases[i].c, h = cases[i].heads;
        const size_t off = cases[i].off;
        const pp_dropout_desc dd = {cases[i].p, pp_dropout_key(77, 5, 40 + (int)i),
                                    cases[i].first_sample};
        const pp_dropout_desc *drop = dd.p > 0 ? &dd : NULL;
        f32_attn a = f32_case(n, t, c, h);
        void *bq, *by, *bl, *bdy, *bdq, *bdq2;
        float *kq = emu_copy(&a.qkv, off, &bq), *ky = emu_copy(&a.y, off, &by);
        float *kdy = emu_copy(&a.dy, off, &bdy), *kdq = emu_copy(&a.dqkv, off, &bdq);
        float *kdq2 = emu_copy(&a.dqkv, off, &bdq2), *kl = emu_copy(&a.lse, off, &bl);
        float *delta = malloc(sizeof(float) * (size_t)n * h * t);
        const pp_emu_cuda_attention_dims d = {n, t, c, h};
        int w = snprintf(what, sizeof what, "3xTF32 attention %d x %d, %d heads of %d%s", n, t,
                         h, c / h, off ? ", 4 bytes off" : "");
        if (drop)
            snprintf(what + w, sizeof what - (size_t)w, ", dropout %g, first sample %lld",
                     (double)dd.p, (long long)dd.first_sample);
        CHECK_MSG(pp_emu_cuda_attention_tf32_takes(d), "%s: refused", what);
        if (drop) p0_bits(d, drop, &a, kq, kdy, delta, what);
        CHECK_OK(pp_attention_forward_dropout(&g_ex, h, drop, &a.qkv, &a.y, &a.lse, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward_tf32(0, d, drop, kq, ky, kl), what);
        /* ours (CUDA cores) on the same operands and masks: the first call's check */
        void *bo, *bol, *boq;
        float *oy = emu_copy(&a.y, 0, &bo), *odq = emu_copy(&a.dqkv, 0, &boq);
        float *ol = emu_copy(&a.lse, 0, &bol);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_forward(0, d, drop, kq, oy, ol), what);
        const pp_tensor oyt = as_tensor(&a.y, oy), olt = as_tensor(&a.lse, ol),
                        odqt = as_tensor(&a.dqkv, odq);
        const double ey = off_rel(&a.y, ky), el = off_abs(&a.lse, kl);
        const double cy = off_rel(&oyt, ky), cl = off_abs(&olt, kl);
        CHECK_MSG(ey <= TOL, "%s: y off by %.3g of the largest (tolerance %g)", what, ey, TOL);
        CHECK_MSG(el <= TOL_LSE, "%s: lse off by %.3g (tolerance %g)", what, el, TOL_LSE);
        CHECK_OK(pp_attention_backward_dropout(&g_ex, h, drop, &a.qkv, &a.y, &a.lse, &a.dy,
                                               &a.dqkv, &err),
                 &err);
        memcpy(ky, a.y.data, pp_tensor_bytes(&a.y)); /* the backwards from the CPU's forward */
        memcpy(kl, a.lse.data, pp_tensor_bytes(&a.lse));
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_tf32(0, MAX_GRID, d, drop, kq, ky, kl,
                                                                kdy, delta, kdq), what);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward_tf32(0, MAX_GRID, d, drop, kq, ky, kl,
                                                                kdy, delta, kdq2), what);
        EMU_LAUNCHED(pp_emu_cuda_launch_attention_backward(0, MAX_GRID, d, drop, kq, ky, kl, kdy,
                                                           delta, odq), what);
        const double eq = off_rel(&a.dqkv, kdq), cq = off_rel(&odqt, kdq);
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
    const pp_emu_cuda_attention_dims odd[] = {{1, 4, 24, 2}, {1, 4, 34, 2}};
    for (int k = 0; k < 2; k++) {
        CHECK(!pp_emu_cuda_attention_tf32_takes(odd[k]));
        CHECK(pp_emu_cuda_launch_attention_forward_tf32(0, odd[k], NULL, NULL, NULL, NULL) ==
              cudaErrorInvalidValue);
        CHECK(pp_emu_cuda_launch_attention_backward_tf32(0, MAX_GRID, odd[k], NULL, NULL, NULL,
                                                         NULL, NULL, NULL, NULL) ==
              cudaErrorInvalidValue);
    }
}

int main(void)
{
    emu_rig_open();
    test_attention_tf32();
    return emu_rig_close("test_emu_attention_tf32");
}
