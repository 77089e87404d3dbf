/*
 * test_cuda_native.c - the CUDA backend on bf16 operands, NCHW and NHWC,
 * against the CPU backend (the reference): every op of tests/ops/op_cases.h
 * on the same bf16-exact inputs on both devices, plus larger shapes for the
 * NHWC kernels (batch norm over many row blocks, 64-channel pooling), and the
 * layout transposes.
 *
 * Where the CUDA backend runs its own bf16 NHWC kernels (runtime/cuda/nhwc.cu:
 * elementwise ops, max pooling, global average pooling) the results must be
 * the CPU's bit for bit. Elsewhere (batch norm, whose statistics sum in
 * another order; cuDNN and cuBLAS ops behind f32 stand-ins) each output may
 * differ by f32 rounding, which a bf16 output can turn into one bf16 step:
 * the normalised error (max |difference| / max |reference|) of a bf16 output
 * is at most 2^-7 (one step at the largest magnitude, 2^-8 relative, twice
 * for a difference near a rounding boundary), of an f32 output 1e-3 (as the
 * CUDA op tests' backward tolerance).
 *
 * Exits 77 (meson's skip) when no CUDA device is visible.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/backend.h"
#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/ops/op_cases.h"

static pp_registry *g_reg;
static pp_device_ctx *g_cpu, *g_gpu;
static pp_exec g_ecpu, g_egpu;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float urand(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static pp_tensor talloc(pp_device_ctx *dev, pp_dtype dt, int ndim, const int64_t *shape)
{
    pp_tensor t;
    pp_error err;
    if (pp_tensor_zeros(&t, dev, dt, ndim, shape, &err) != PP_OK) {
        fprintf(stderr, "allocation failed: %s\n", err.msg);
        exit(1);
    }
    return t;
}

/* The values of t (any device, dtype F32/BF16/I32, any layout) as f32 (I32:
 * converted) in NCHW order on the host; caller frees. */
static float *host_values(pp_exec *ex, const pp_tensor *t)
{
    pp_error err;
    const int64_t n = pp_tensor_numel(t);
    float *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    pp_tensor back = talloc(t->dev, t->dtype == PP_I32 ? PP_I32 : PP_F32, t->ndim, t->shape);
    CHECK_OK(t->dtype == PP_BF16 ? pp_cast(ex, t, &back, &err) : pp_copy(ex, t, &back, &err),
             &err);
    CHECK_OK(pp_exec_sync(ex, &err), &err);
    if (t->dtype == PP_I32) {
        int32_t *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
        CHECK_OK(pp_tensor_to_host(&back, tmp, (size_t)n * sizeof *tmp, &err), &err);
        for (int64_t i = 0; i < n; i++) out[i] = (float)tmp[i];
        free(tmp);
    } else {
        CHECK_OK(pp_tensor_to_host(&back, out, (size_t)n * sizeof *out, &err), &err);
    }
    pp_tensor_free(&back);
    return out;
}

/* Runs case c with its 'a' operands BF16 in layout lay on both devices. */
static void check_case(const op_case *c, pp_layout lay)
{
    pp_tensor tc[MAX_OPS], tg[MAX_OPS];
    pp_tensor *pc[MAX_OPS], *pg[MAX_OPS];
    pp_error err;
    const char *mode = lay == PP_NHWC ? "bf16 NHWC" : "bf16 NCHW";
    for (int i = 0; i < c->n; i++) {
        const operand *o = &c->o[i];
        pc[i] = &tc[i];
        pg[i] = &tg[i];
        if (c->alias_of[i] > 0) {
            pc[i] = pc[c->alias_of[i] - 1];
            pg[i] = pg[c->alias_of[i] - 1];
            continue;
        }
        const pp_dtype dt = o->kind == 'a' ? PP_BF16 : o->kind == 'i' ? PP_I32 : PP_F32;
        tc[i] = talloc(g_cpu, dt, o->ndim, o->shape);
        tg[i] = talloc(g_gpu, dt, o->ndim, o->shape);
        if ((o->kind == 'a' || o->kind == 'i') && o->ndim == 4)
            tc[i].layout = tg[i].layout = lay;
        if (o->kind == 'i' || o->kind == 'w') continue; /* zeros */
        /* the values, in NCHW order, through an f32 NCHW host tensor on each device */
        const int64_t n = pp_tensor_numel(&tc[i]);
        float *h = malloc((size_t)n * sizeof *h);
        for (int64_t k = 0; k < n; k++) {
            float v = urand() * 2.0f;
            if (o->kind == 'f') v = fabsf(v) + 0.25f;
            h[k] = pp_f32_from_bf16(pp_bf16_from_f32(v));
        }
        pp_tensor fc = talloc(g_cpu, PP_F32, o->ndim, o->shape);
        pp_tensor fg = talloc(g_gpu, PP_F32, o->ndim, o->shape);
        CHECK_OK(pp_tensor_from_host(&fc, h, (size_t)n * sizeof *h, &err), &err);
        CHECK_OK(pp_tensor_from_host(&fg, h, (size_t)n * sizeof *h, &err), &err);
        CHECK_OK(pp_cast(&g_ecpu, &fc, &tc[i], &err), &err);
        CHECK_OK(pp_cast(&g_egpu, &fg, &tg[i], &err), &err);
        CHECK_OK(pp_exec_sync(&g_egpu, &err), &err);
        pp_tensor_free(&fc);
        pp_tensor_free(&fg);
        free(h);
    }
    CHECK_OK(c->run(&g_ecpu, c->desc, pc, &err), &err);
    pp_status s = c->run(&g_egpu, c->desc, pg, &err);
    CHECK_MSG(s == PP_OK, "%s (%s) on cuda: %s", c->what, mode, err.msg);
    const bool exact = c->exact && lay == PP_NHWC;
    for (int i = 0; i < c->n && s == PP_OK; i++) {
        if (c->alias_of[i] > 0) continue;
        /* the CUDA backend's NCHW pooling recomputes its argmax: idx is its own there */
        if (c->o[i].kind == 'i' && lay != PP_NHWC) continue;
        const int64_t n = pp_tensor_numel(&tc[i]);
        float *a = host_values(&g_ecpu, &tc[i]), *b = host_values(&g_egpu, &tg[i]);
        double scale = 0, diff = 0;
        int64_t differ = 0;
        for (int64_t k = 0; k < n; k++) {
            scale = fmax(scale, fabs(a[k]));
            double d = fabs((double)a[k] - (double)b[k]);
            if (!(d <= diff)) diff = d;
            differ += memcmp(&a[k], &b[k], sizeof a[k]) != 0;
        }
        if (exact) {
            CHECK_MSG(differ == 0, "%s (%s): operand %d differs from the CPU in %lld of %lld",
                      c->what, mode, i, (long long)differ, (long long)n);
        } else {
            const bool low = c->o[i].kind == 'a' || c->o[i].kind == 'w';
            const double tol = low ? ldexp(1.0, -7) : 1e-3;
            const double e = scale > 0 ? diff / scale : diff;
            CHECK_MSG(e <= tol, "%s (%s): operand %d normalised error %.3g > %.3g", c->what, mode,
                      i, e, tol);
        }
        free(a);
        free(b);
    }
    for (int i = 0; i < c->n; i++) {
        if (c->alias_of[i] > 0) continue;
        pp_tensor_free(&tc[i]);
        pp_tensor_free(&tg[i]);
    }
}

/* Larger shapes for the NHWC kernels: batch norm (its 8-channel-per-thread
 * kernels; PP_CUDA_BN_SCALAR=1, the suite's cuda_native_scalar_bn, runs the
 * one-channel ones) over 8 row blocks of 64 channels (32 rows at once), 5 of
 * 40 (51 rows at once, 3 threads of the block idle) and over 2064 channels
 * (two tiles of 8-channel lanes, the second with one lane); max pooling with
 * 64 channels (8 per thread), a stem-like pool, global pooling. */
static const pp_bn_desc BN_BIG = {4, 64, 30, 30, 1e-5f, 0.1f};
static const pp_bn_desc BN_40 = {4, 40, 30, 30, 1e-5f, 0.1f};
static const pp_bn_desc BN_WIDE = {2, 2064, 3, 5, 1e-5f, 0.1f}; /* 258 lanes: two tiles */
static const pp_pool_desc POOL_BIG = {2, 64, 15, 16, 3, 2, 1, 8, 8};
#define BIGB {'a', 4, {4, 64, 30, 30}}
#define BIGX {'a', 4, {2, 64, 15, 16}}
#define BIGP {'a', 4, {2, 64, 8, 8}}
#define BIGI {'i', 4, {2, 64, 8, 8}}
#define C64 {'f', 1, {64, 1, 1, 1}}
#define B40 {'a', 4, {4, 40, 30, 30}}
#define C40 {'f', 1, {40, 1, 1, 1}}
#define BW {'a', 4, {2, 2064, 3, 5}}
#define CW {'f', 1, {2064, 1, 1, 1}}

static const op_case BIG[] = {
    {"batchnorm_forward_train 4x64x30x30", r_bn_train, &BN_BIG, 8,
     {BIGB, C64, C64, C64, C64, BIGB, C64, C64}, {0}, false},
    {"batchnorm_backward 4x64x30x30", r_bn_bwd, &BN_BIG, 8,
     {BIGB, BIGB, C64, C64, C64, BIGB, C64, C64}, {0}, false},
    {"batchnorm_forward_act (add, relu) 4x64x30x30", r_bn_act_add_relu, &BN_BIG, 9,
     {BIGB, C64, C64, C64, C64, BIGB, C64, C64, BIGB}, {0}, false},
    {"batchnorm_backward_relu 4x64x30x30", r_bn_bwd_relu, &BN_BIG, 9,
     {BIGB, BIGB, BIGB, C64, C64, C64, BIGB, C64, C64}, {0}, false},
    {"batchnorm_forward_act (add, relu) 4x40x30x30", r_bn_act_add_relu, &BN_40, 9,
     {B40, C40, C40, C40, C40, B40, C40, C40, B40}, {0}, false},
    {"batchnorm_backward_relu 4x40x30x30", r_bn_bwd_relu, &BN_40, 9,
     {B40, B40, B40, C40, C40, C40, B40, C40, C40}, {0}, false},
    {"batchnorm_forward_act (add, relu) 2x2064x3x5", r_bn_act_add_relu, &BN_WIDE, 9,
     {BW, CW, CW, CW, CW, BW, CW, CW, BW}, {0}, false},
    {"batchnorm_backward_relu 2x2064x3x5", r_bn_bwd_relu, &BN_WIDE, 9,
     {BW, BW, BW, CW, CW, CW, BW, CW, CW}, {0}, false},
    {"maxpool_backward 64 channels", r_maxpool_bwd, &POOL_BIG, 5, {BIGX, BIGP, BIGI, BIGP, BIGX},
     {0}, true},
    {"avgpool_forward 64 channels", r_avgpool, NULL, 2, {BIGX, {'a', 2, {2, 64, 1, 1}}}, {0},
     true},
    {"add_relu odd length", r_add_relu, NULL, 3,
     {{'a', 4, {3, 5, 7, 3}}, {'a', 4, {3, 5, 7, 3}}, {'a', 4, {3, 5, 7, 3}}}, {0}, true},
};

/* The transposes both ways, 2- and 4-byte elements, against the CPU's:
 * 70 channels (32x32 tiles with ragged edges) and 3 (the input images':
 * nhwc.cu's narrow kernel). */
static void test_transpose_shape(const int64_t shape[4])
{
    pp_error err;
    const int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    float *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = (float)i;
    const pp_dtype dts[2] = {PP_F32, PP_BF16};
    for (int k = 0; k < 2; k++) {
        pp_tensor fc = talloc(g_cpu, PP_F32, 4, shape), fg = talloc(g_gpu, PP_F32, 4, shape);
        pp_tensor xc = talloc(g_cpu, dts[k], 4, shape), xg = talloc(g_gpu, dts[k], 4, shape);
        xc.layout = xg.layout = PP_NHWC;
        CHECK_OK(pp_tensor_from_host(&fc, h, (size_t)n * sizeof *h, &err), &err);
        CHECK_OK(pp_tensor_from_host(&fg, h, (size_t)n * sizeof *h, &err), &err);
        CHECK_OK(pp_cast(&g_ecpu, &fc, &xc, &err), &err);
        CHECK_OK(pp_cast(&g_egpu, &fg, &xg, &err), &err);
        CHECK_OK(pp_exec_sync(&g_egpu, &err), &err);
        const size_t bytes = pp_tensor_bytes(&xc);
        unsigned char *a = malloc(bytes), *b = malloc(bytes);
        CHECK_OK(pp_tensor_to_host(&xc, a, bytes, &err), &err);
        CHECK_OK(pp_tensor_to_host(&xg, b, bytes, &err), &err);
        CHECK_MSG(memcmp(a, b, bytes) == 0, "%s NCHW -> NHWC differs from the CPU's (%lld channels)",
                  pp_dtype_name(dts[k]), (long long)shape[1]);
        /* each device's NHWC tensor back to NCHW: the values as stored (f32:
         * the integers exactly; bf16: rounded once, above 256 not all exact) */
        float *back = host_values(&g_egpu, &xg), *back_cpu = host_values(&g_ecpu, &xc);
        int bad = 0, bad_cpu = 0;
        for (int64_t i = 0; i < n; i++) {
            const float want = dts[k] == PP_BF16 ? pp_f32_from_bf16(pp_bf16_from_f32(h[i])) : h[i];
            bad += back[i] != want;
            bad_cpu += back_cpu[i] != want;
        }
        CHECK_MSG(bad_cpu == 0, "%s NHWC -> NCHW round trip on the CPU misplaces %d elements",
                  pp_dtype_name(dts[k]), bad_cpu);
        CHECK_MSG(bad == 0, "%s NHWC -> NCHW round trip misplaces %d elements (%lld channels)",
                  pp_dtype_name(dts[k]), bad, (long long)shape[1]);
        free(back);
        free(back_cpu);
        free(a);
        free(b);
        pp_tensor *all[] = {&fc, &fg, &xc, &xg};
        for (int i = 0; i < 4; i++) pp_tensor_free(all[i]);
    }
    free(h);
}

static void test_transpose(void)
{
    static const int64_t shapes[2][4] = {{3, 70, 9, 37}, {3, 3, 9, 37}};
    for (int i = 0; i < 2; i++) test_transpose_shape(shapes[i]);
}

int main(void)
{
    if (pp_backend_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_native: no CUDA device, skipped\n");
        return 77;
    }
    pp_error err;
    if (pp_registry_new(&g_reg, &err) != PP_OK ||
        pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CPU, 0}, &g_cpu, &err) != PP_OK ||
        pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &g_gpu, &err) != PP_OK ||
        pp_exec_init(&g_ecpu, g_cpu, NULL, &err) != PP_OK ||
        pp_exec_init(&g_egpu, g_gpu, NULL, &err) != PP_OK) {
        fprintf(stderr, "setup failed: %s\n", err.msg);
        return 1;
    }
    test_transpose();
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        check_case(&CASES[i], PP_NCHW);
        check_case(&CASES[i], PP_NHWC);
    }
    for (size_t i = 0; i < sizeof FUSED_ADD_CASES / sizeof FUSED_ADD_CASES[0]; i++) {
        check_case(&FUSED_ADD_CASES[i], PP_NCHW);
        check_case(&FUSED_ADD_CASES[i], PP_NHWC);
    }
    for (size_t i = 0; i < sizeof BIG / sizeof BIG[0]; i++) check_case(&BIG[i], PP_NHWC);
    pp_exec_destroy(&g_ecpu);
    pp_exec_destroy(&g_egpu);
    pp_registry_free(g_reg);
    return check_summary("test_cuda_native");
}
