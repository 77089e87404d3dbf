/*
 * test_emu_bn.c - the CUDA backend's batch-norm kernels, run on the CPU by
 * the emulator (cuda_emu.h), against the CPU backend (the reference):
 *   - f32 NCHW (runtime/cuda/bn_nchw.cu): planes of 1 to 1225 floats, in
 *     16-byte steps where a plane and every pointer allow and in single
 *     floats where not (odd planes, and the same shapes with every operand
 *     4 bytes off alignment), one or several blocks of images per channel;
 *   - bf16 NHWC (runtime/cuda/bn_nhwc.cu): the 8-channel tiled kernels
 *     (channels a multiple of 8, one and two tiles of channels, many row
 *     groups) and the one-channel-per-thread ones (other channel counts,
 *     misaligned operands, and PP_CUDA_BN_SCALAR=1).
 * Each case runs the training forward plain and with the residual add and
 * ReLU fused, the inference forward both ways, and the backward plain and
 * through the ReLU's mask (the CPU's forward output, so both sides mask the
 * same elements), with parameter gradients accumulating onto nonzero
 * values; and the backward through the mask keeping the ReLU's gradient
 * (pp_batchnorm_backward_add_relu's g, beside dy and in dy's memory), which
 * must be pp_relu_backward's bits. Tolerances are those the CUDA suite holds the GPU to
 * (tests/cuda/test_cuda_ops.c, test_cuda_native.c): normalised error
 * max |kernel - cpu| / max |cpu| within 1e-4 for f32 forward outputs and
 * statistics, 1e-3 for gradients, 2^-7 for bf16 outputs (one bf16 step).
 * The emulator's own checks (launch limits, shuffle masks) must stay silent
 * and every launcher must return cudaSuccess.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/emu/emu_rig.h"

/* the kernels' launchers, renamed pp_emu_cuda_* by unchevron.py */
#include "emu_bn_nchw.h"
#include "emu_bn_nhwc.h"

static uint64_t g_rng = 0x853c49e6748fea9bull;

static float urand(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* An operand: the CPU backend's tensor and the kernel's copy of its bytes
 * (64-byte aligned, or `off` bytes past such a boundary). */
typedef struct buf {
    pp_tensor t;
    void *base, *k;
    size_t bytes;
} buf;

static buf make(pp_dtype dt, pp_layout lay, int ndim, const int64_t *shape, size_t off)
{
    buf b;
    b.t = emu_tensor(dt, ndim, shape, lay);
    b.bytes = pp_tensor_bytes(&b.t);
    b.k = emu_alloc(b.bytes, off, &b.base);
    return b;
}

static void drop(buf *b)
{
    pp_tensor_free(&b->t);
    free(b->base);
}

static float value(const buf *b, int64_t i, const void *p)
{
    return b->t.dtype == PP_BF16 ? pp_f32_from_bf16(((const uint16_t *)p)[i])
                                 : ((const float *)p)[i];
}

/* random values in [lo, lo + span) (bf16-exact for bf16), the same bytes on both sides */
static void fill(buf *b, float lo, float span)
{
    const int64_t n = pp_tensor_numel(&b->t);
    for (int64_t i = 0; i < n; i++) {
        const float v = lo + (urand() + 1.0f) * 0.5f * span;
        if (b->t.dtype == PP_BF16)
            ((uint16_t *)b->t.data)[i] = pp_bf16_from_f32(v);
        else
            ((float *)b->t.data)[i] = v;
    }
    memcpy(b->k, b->t.data, b->bytes);
}

/* the CPU's bytes given to the kernel (the mask of the backward through ReLU) */
static void share(buf *b)
{
    memcpy(b->k, b->t.data, b->bytes);
}

/* max |kernel - cpu| / max |cpu| within tol */
static void compare(const buf *b, double tol, const char *what, const char *label)
{
    const int64_t n = pp_tensor_numel(&b->t);
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        const double r = value(b, i, b->t.data), g = value(b, i, b->k);
        scale = fmax(scale, fabs(r));
        const double d = fabs(r - g);
        if (!(d <= diff)) diff = d; /* NaN sticks */
    }
    const double e = scale > 0 ? diff / scale : diff;
    CHECK_MSG(e <= tol, "%s: %s: normalised error %.3g > %.3g", label, what, e, tol);
}

typedef struct shape {
    int n, c, h, w;
} shape;

/* one case of either layout: bf16 = the NHWC kernels, else the NCHW ones */
static void run_case(shape s, bool bf16, size_t off, unsigned max_grid, const char *label)
{
    const pp_bn_desc d = {s.n, s.c, s.h, s.w, 1e-5f, 0.1f};
    const int64_t xs[4] = {s.n, s.c, s.h, s.w}, cs[1] = {s.c};
    const int64_t hw = (int64_t)s.h * s.w, rows = s.n * hw;
    const pp_dtype adt = bf16 ? PP_BF16 : PP_F32;
    const pp_layout lay = bf16 ? PP_NHWC : PP_NCHW;
    const size_t aoff = off, poff = off ? 4 : 0; /* parameters stay 4-byte aligned */
    buf x = make(adt, lay, 4, xs, aoff), add = make(adt, lay, 4, xs, aoff);
    buf y = make(adt, lay, 4, xs, aoff), y2 = make(adt, lay, 4, xs, aoff);
    buf dy = make(adt, lay, 4, xs, aoff), dx = make(adt, lay, 4, xs, aoff);
    buf g = make(adt, lay, 4, xs, aoff);
    buf gamma = make(PP_F32, lay, 1, cs, poff), beta = make(PP_F32, lay, 1, cs, poff);
    buf rm = make(PP_F32, lay, 1, cs, poff), rv = make(PP_F32, lay, 1, cs, poff);
    buf sm = make(PP_F32, lay, 1, cs, poff), si = make(PP_F32, lay, 1, cs, poff);
    buf dg = make(PP_F32, lay, 1, cs, poff), db = make(PP_F32, lay, 1, cs, poff);
    /* channels of different means and spreads: x = mean + spread * u */
    fill(&x, -1.0f, 2.0f);
    for (int64_t i = 0; i < rows * s.c; i++) {
        const int ch = (int)(bf16 ? i % s.c : i / hw % s.c);
        const float v = (float)(ch % 5) - 2.0f + value(&x, i, x.t.data) * (0.5f + (float)(ch % 3));
        if (bf16)
            ((uint16_t *)x.t.data)[i] = pp_bf16_from_f32(v);
        else
            ((float *)x.t.data)[i] = v;
    }
    share(&x);
    fill(&add, -1.0f, 2.0f);
    fill(&dy, -1.0f, 2.0f);
    fill(&gamma, 0.5f, 1.0f);
    fill(&beta, -0.5f, 1.0f);
    fill(&rm, -0.2f, 0.4f);
    fill(&rv, 0.5f, 1.0f);
    fill(&dg, -1.0f, 2.0f);
    fill(&db, -1.0f, 2.0f);
    const size_t sf = bf16 ? pp_emu_cuda_bn_scratch_floats(rows, s.c)
                           : pp_emu_cuda_bn_nchw_scratch_floats(s.n, s.c);
    float *scratch = aligned_alloc(64, (sf * sizeof(float) + 63) / 64 * 64);
    pp_error err;
    const double tf = 1e-4, tb = 1e-3, ta = bf16 ? ldexp(1.0, -7) : tf;
    const double tg = bf16 ? ldexp(1.0, -7) : tb;
#define K(p, T) ((T *)(p).k)
    /* 0: plain; 1: + add, ReLU (the backward through its mask); 2: the same,
     * the backward keeping the ReLU's gradient in g; 3: in dy's memory */
    for (int mode = 0; mode < 4; mode++) {
        const bool fused = mode > 0, keep = mode >= 2;
        buf *gk = mode == 3 ? &dy : &g;
        /* training forward: y (plain) or y2 (+ add, ReLU); the running statistics move */
        buf *out = fused ? &y2 : &y;
        CHECK_OK(pp_batchnorm_forward_act(&g_ex, &d, true, &x.t, &gamma.t, &beta.t, &rm.t, &rv.t,
                                          fused ? &add.t : NULL, fused, &out->t, &sm.t, &si.t,
                                          &err),
                 &err);
        if (bf16)
            CUDA_OK(pp_emu_cuda_launch_bn_train_nhwc(
                        0, max_grid, rows, s.c, d.eps, d.momentum, K(x, uint16_t), K(gamma, float),
                        K(beta, float), K(rm, float), K(rv, float), fused ? K(add, uint16_t) : NULL,
                        fused, K(*out, uint16_t), K(sm, float), K(si, float), scratch),
                    "%s", label);
        else
            CUDA_OK(pp_emu_cuda_launch_bn_train_nchw(
                        0, s.n, s.c, hw, d.eps, d.momentum, K(x, float), K(gamma, float),
                        K(beta, float), K(rm, float), K(rv, float), fused ? K(add, float) : NULL,
                        fused, K(*out, float), K(sm, float), K(si, float), scratch),
                    "%s", label);
        const char *ws = fused ? "train + add + relu" : "train";
        char what[96];
        snprintf(what, sizeof what, "%s y", ws);
        compare(out, ta, what, label);
        snprintf(what, sizeof what, "%s save_mean", ws);
        compare(&sm, tf, what, label);
        snprintf(what, sizeof what, "%s save_invstd", ws);
        compare(&si, tf, what, label);
        snprintf(what, sizeof what, "%s running_mean", ws);
        compare(&rm, tf, what, label);
        snprintf(what, sizeof what, "%s running_var (unbiased)", ws);
        compare(&rv, tf, what, label);
        /* the same statistics on both sides from here on */
        share(&sm), share(&si), share(&rm), share(&rv);

        /* inference forward into dx's storage (a scratch output here) */
        CHECK_OK(pp_batchnorm_forward_act(&g_ex, &d, false, &x.t, &gamma.t, &beta.t, &rm.t, &rv.t,
                                          fused ? &add.t : NULL, fused, &dx.t, NULL, NULL, &err),
                 &err);
        if (bf16)
            CUDA_OK(pp_emu_cuda_launch_bn_infer_nhwc(0, max_grid, rows, s.c, d.eps, K(x, uint16_t),
                                                     K(gamma, float), K(beta, float), K(rm, float),
                                                     K(rv, float), fused ? K(add, uint16_t) : NULL,
                                                     fused, K(dx, uint16_t), scratch),
                    "%s", label);
        else
            CUDA_OK(pp_emu_cuda_launch_bn_infer_nchw(0, s.n, s.c, hw, d.eps, K(x, float),
                                                     K(gamma, float), K(beta, float), K(rm, float),
                                                     K(rv, float), fused ? K(add, float) : NULL,
                                                     fused, K(dx, float), scratch),
                    "%s", label);
        compare(&dx, ta, fused ? "infer + add + relu" : "infer", label);

        /* backward: plain, or through the mask of y2 (the CPU's bytes on both sides) */
        if (keep) {
            share(&y2);
            CHECK_OK(pp_batchnorm_backward_add_relu(&g_ex, &d, &x.t, &y2.t, &dy.t, &gamma.t, &sm.t,
                                                    &si.t, &dx.t, &dg.t, &db.t, &gk->t, &err),
                     &err);
        } else if (fused) {
            share(&y2);
            CHECK_OK(pp_batchnorm_backward_relu(&g_ex, &d, &x.t, &y2.t, &dy.t, &gamma.t, &sm.t,
                                                &si.t, &dx.t, &dg.t, &db.t, &err),
                     &err);
        } else {
            CHECK_OK(pp_batchnorm_backward(&g_ex, &d, &x.t, &dy.t, &gamma.t, &sm.t, &si.t, &dx.t,
                                           &dg.t, &db.t, &err),
                     &err);
        }
        const void *mask = fused ? y2.k : NULL;
        void *gout = keep ? gk->k : NULL;
        if (bf16)
            CUDA_OK(pp_emu_cuda_launch_bn_backward_nhwc(0, max_grid, rows, s.c, K(x, uint16_t),
                                                        K(dy, uint16_t), mask, K(gamma, float),
                                                        K(sm, float), K(si, float), K(dx, uint16_t),
                                                        K(dg, float), K(db, float), gout, scratch),
                    "%s", label);
        else
            CUDA_OK(pp_emu_cuda_launch_bn_backward_nchw(0, s.n, s.c, hw, K(x, float), K(dy, float),
                                                        mask, K(gamma, float), K(sm, float),
                                                        K(si, float), K(dx, float), K(dg, float),
                                                        K(db, float), gout, scratch),
                    "%s", label);
        static const char *const bw[4] = {"backward", "backward through relu",
                                          "backward through relu keeping g",
                                          "backward through relu keeping g in dy"};
        snprintf(what, sizeof what, "%s dx", bw[mode]);
        compare(&dx, tg, what, label);
        snprintf(what, sizeof what, "%s dgamma (+=)", bw[mode]);
        compare(&dg, tb, what, label);
        snprintf(what, sizeof what, "%s dbeta (+=)", bw[mode]);
        compare(&db, tb, what, label);
        if (keep) {
            snprintf(what, sizeof what, "%s: g (pp_relu_backward's bits)", bw[mode]);
            compare(gk, 0.0, what, label);
        }
        share(&dg), share(&db);
    }
#undef K
    free(scratch);
    buf *all[] = {&x, &add, &y, &y2, &dy, &dx, &g, &gamma, &beta, &rm, &rv, &sm, &si, &dg, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) drop(all[i]);
}

static void test_nchw(void)
{
    /* planes of 25, 63, 1, 36 and 1024 floats; 1024 and 1225 floats give
     * two blocks of images per channel; 36 and 1024 take 16-byte steps */
    static const shape cases[] = {{4, 8, 5, 5},    {2, 3, 7, 9},   {16, 32, 1, 1}, {1, 4, 6, 6},
                                  {16, 8, 32, 32}, {4, 8, 35, 35}, {3, 2, 4, 4}};
    char label[96];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t off = 0; off <= 4; off += 4) {
            snprintf(label, sizeof label, "f32 nchw %dx%dx%dx%d%s", cases[i].n, cases[i].c,
                     cases[i].h, cases[i].w, off ? " (misaligned)" : "");
            run_case(cases[i], false, off, 0, label);
        }
    }
    /* no rows: refused, as cuDNN's path refuses */
    CHECK(pp_emu_cuda_launch_bn_train_nchw(0, 0, 4, 9, 1e-5f, 0.1f, NULL, NULL, NULL, NULL, NULL,
                                           NULL, false, NULL, NULL, NULL,
                                           NULL) == cudaErrorInvalidValue);
}

static void test_nhwc(void)
{
    /* 8-channel tiles: 16, 24 and 64 channels (one tile), 2064 (two); many
     * row groups at 64 x 4096 rows; 5 and 12 channels take the scalar path */
    static const shape cases[] = {{2, 16, 5, 7},  {4, 24, 3, 3}, {2, 2064, 1, 3},
                                  {64, 64, 8, 8}, {3, 5, 4, 4},  {2, 12, 3, 5}};
    char label[96];
    for (int scalar = 0; scalar < 2; scalar++) {
        setenv("PP_CUDA_BN_SCALAR", scalar ? "1" : "0", 1);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            for (size_t off = 0; off <= 2; off += 2) {
                if (scalar && off) continue; /* misaligned is scalar anyway */
                for (unsigned grid = 3; grid <= 1024; grid += 1021) {
                    snprintf(label, sizeof label, "bf16 nhwc %dx%dx%dx%d%s%s, max grid %u",
                             cases[i].n, cases[i].c, cases[i].h, cases[i].w,
                             off ? " (misaligned)" : "", scalar ? " (PP_CUDA_BN_SCALAR)" : "",
                             grid);
                    run_case(cases[i], true, off, grid, label);
                }
            }
        }
    }
    unsetenv("PP_CUDA_BN_SCALAR");
}

int main(void)
{
    emu_rig_open();
    test_nchw();
    test_nhwc();
    return emu_rig_close("test_emu_bn");
}
