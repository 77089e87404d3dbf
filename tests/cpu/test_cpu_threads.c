/*
 * test_cpu_threads.c - the CPU kernels give bitwise-identical results
 * whatever the size of the device's worker pool, and their tiled paths
 * (samples split into row runs, several samples per GEMM, row blocks,
 * grouped unfolding, split reductions) match a naive reference.
 *
 * Devices cpu:0, cpu:1 and cpu:2 are opened with PP_CPU_THREADS = 1, 2 and 3
 * (read when a CPU device is created). Every op runs on each device with the
 * same inputs; outputs are compared byte for byte with cpu:0's. Convolutions
 * are also checked against a float64 reference on cpu:0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"

#define DEVICES 3

static pp_device_ctx *g_dev[DEVICES];
static pp_exec g_ex[DEVICES];

static uint64_t g_rng = 0x9e3779b97f4a7c15u;

static float urand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *host_random(size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = urand();
    return p;
}

/* A tensor on device i holding host data (or uninitialised when src is NULL). */
static pp_tensor tensor_on(int i, int ndim, const int64_t *shape, const float *src)
{
    pp_tensor t;
    pp_error err;
    CHECK_OK(pp_tensor_alloc(&t, g_dev[i], PP_F32, ndim, shape, &err), &err);
    if (src) CHECK_OK(pp_tensor_from_host(&t, src, pp_tensor_bytes(&t), &err), &err);
    return t;
}

static size_t numel(int ndim, const int64_t *shape)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    return n;
}

/* Checks that tensor t of device i equals ref bitwise (ref NULL: keep a copy). */
static void same_bits(const char *what, int i, const pp_tensor *t, float **ref)
{
    size_t bytes = pp_tensor_bytes(t);
    float *h = malloc(bytes);
    pp_error err;
    CHECK_OK(pp_tensor_to_host(t, h, bytes, &err), &err);
    if (!*ref) {
        *ref = h;
        return;
    }
    CHECK_MSG(memcmp(h, *ref, bytes) == 0, "%s: cpu:%d (%d threads) differs from cpu:0", what, i,
              i + 1);
    free(h);
}

/* ---- convolution ------------------------------------------------------------------ */

typedef struct conv_case {
    int n, c, hw, k, kernel, stride;
    int reference; /* also check against the float64 reference */
} conv_case;

static const conv_case conv_cases[] = {
    {4, 3, 64, 64, 7, 2, 1},    /* planes split into row runs; split bwd-filter reduction */
    {6, 64, 16, 64, 3, 1, 1},   /* several samples per GEMM */
    {8, 256, 4, 256, 3, 1, 1},  /* two passes: shared unfolding, row blocks */
    {16, 64, 16, 96, 1, 1, 1},  /* pointwise, one whole plane per block, in place */
    {16, 64, 7, 80, 1, 1, 1},   /* pointwise, samples side by side in equal blocks */
    {5, 32, 40, 48, 1, 1, 1},   /* pointwise, planes split into row runs */
    {9, 96, 4, 160, 1, 2, 1},   /* strided 1x1, short last block */
    {12, 512, 7, 128, 3, 1, 0}, /* unfolding in several groups */
    {3, 64, 56, 64, 3, 1, 0},   /* bwd-filter in groups of samples */
    {2, 512, 12, 512, 1, 1, 1}, /* bwd-filter per sample, x and dY read in place */
    {3, 64, 24, 512, 3, 1, 1},  /* bwd-filter per sample, each sample unfolded alone */
};

static double conv_x(const float *x, const pp_conv2d_desc *d, int n, int c, int ih, int iw)
{
    if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w) return 0.0;
    return x[(((size_t)n * d->c + c) * d->h + ih) * d->w + iw];
}

/* max |got - want| / (1 + max |want|) over the three ops, against float64 loops. */
static double conv_reference_error(const pp_conv2d_desc *d, const float *x, const float *w,
                                   const float *dy, const float *y, const float *dx,
                                   const float *dw)
{
    size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = (size_t)d->k * d->c * d->r * d->s;
    double *rdx = calloc(nx, sizeof *rdx), *rdw = calloc(nw, sizeof *rdw);
    double worst = 0.0, scale = 1.0;
    double *ry = malloc((size_t)d->n * d->k * d->p * d->q * sizeof *ry);
    size_t yi = 0;
    for (int n = 0; n < d->n; n++)
        for (int k = 0; k < d->k; k++)
            for (int p = 0; p < d->p; p++)
                for (int q = 0; q < d->q; q++, yi++) {
                    double s = 0.0, g = dy[yi];
                    for (int c = 0; c < d->c; c++)
                        for (int r = 0; r < d->r; r++)
                            for (int t = 0; t < d->s; t++) {
                                int ih = p * d->stride_h - d->pad_h + r;
                                int iw = q * d->stride_w - d->pad_w + t;
                                size_t wi = (((size_t)k * d->c + c) * d->r + r) * d->s + t;
                                double xv = conv_x(x, d, n, c, ih, iw);
                                s += xv * w[wi];
                                rdw[wi] += xv * g;
                                if (ih >= 0 && ih < d->h && iw >= 0 && iw < d->w)
                                    rdx[(((size_t)n * d->c + c) * d->h + ih) * d->w + iw] +=
                                        g * w[wi];
                            }
                    ry[yi] = s;
                }
    const double *refs[3] = {ry, rdx, rdw};
    const float *gots[3] = {y, dx, dw};
    size_t lens[3] = {yi, nx, nw};
    for (int o = 0; o < 3; o++) {
        double mx = 0.0, err = 0.0;
        for (size_t i = 0; i < lens[o]; i++) mx = fmax(mx, fabs(refs[o][i]));
        for (size_t i = 0; i < lens[o]; i++) err = fmax(err, fabs(gots[o][i] - refs[o][i]));
        scale = 1.0 + mx;
        worst = fmax(worst, err / scale);
    }
    free(ry);
    free(rdx);
    free(rdw);
    return worst;
}

static void test_conv(void)
{
    for (size_t ci = 0; ci < sizeof conv_cases / sizeof conv_cases[0]; ci++) {
        const conv_case *cc = &conv_cases[ci];
        pp_conv2d_desc d;
        pp_error err;
        CHECK_OK(pp_conv2d_desc_init(&d, cc->n, cc->c, cc->hw, cc->hw, cc->k, cc->kernel,
                                     cc->stride, cc->kernel / 2, &err),
                 &err);
        int64_t xs[4] = {d.n, d.c, d.h, d.w}, ws[4] = {d.k, d.c, d.r, d.s};
        int64_t ys[4] = {d.n, d.k, d.p, d.q};
        float *hx = host_random(numel(4, xs)), *hw = host_random(numel(4, ws));
        float *hdy = host_random(numel(4, ys)), *hdw0 = host_random(numel(4, ws));
        float *ref[3] = {NULL, NULL, NULL};
        for (int i = 0; i < DEVICES; i++) {
            pp_tensor x = tensor_on(i, 4, xs, hx), w = tensor_on(i, 4, ws, hw);
            pp_tensor dy = tensor_on(i, 4, ys, hdy), dw = tensor_on(i, 4, ws, hdw0);
            pp_tensor y = tensor_on(i, 4, ys, NULL), dx = tensor_on(i, 4, xs, NULL);
            CHECK_OK(pp_conv2d_forward(&g_ex[i], &d, &x, &w, &y, &err), &err);
            CHECK_OK(pp_conv2d_backward_data(&g_ex[i], &d, &dy, &w, &dx, &err), &err);
            CHECK_OK(pp_conv2d_backward_filter(&g_ex[i], &d, &x, &dy, &dw, &err), &err);
            char what[96];
            snprintf(what, sizeof what, "conv case %zu", ci);
            same_bits(what, i, &y, &ref[0]);
            same_bits(what, i, &dx, &ref[1]);
            same_bits(what, i, &dw, &ref[2]);
            pp_tensor_free(&x);
            pp_tensor_free(&w);
            pp_tensor_free(&dy);
            pp_tensor_free(&dw);
            pp_tensor_free(&y);
            pp_tensor_free(&dx);
        }
        if (cc->reference) {
            /* dw accumulated onto hdw0: subtract it back for the comparison */
            size_t nw = numel(4, ws);
            float *dwonly = malloc(nw * sizeof *dwonly);
            for (size_t j = 0; j < nw; j++) dwonly[j] = ref[2][j] - hdw0[j];
            double e = conv_reference_error(&d, hx, hw, hdy, ref[0], ref[1], dwonly);
            CHECK_MSG(e < 2e-5, "conv case %zu: relative error %.3g against float64", ci, e);
            free(dwonly);
        }
        for (int o = 0; o < 3; o++) free(ref[o]);
        free(hx);
        free(hw);
        free(hdy);
        free(hdw0);
    }
}

/* ---- batch norm, elementwise, pooling, SGD, zero/copy ------------------------------ */

static void test_batchnorm(void)
{
    static const int shapes[][4] = {{16, 2048, 2, 2}, {16, 64, 16, 16}, {3, 5, 1, 1},
                                    {2, 3, 3, 5},     {16, 256, 4, 4},  {1, 7, 9, 9}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        pp_bn_desc d = {shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3], 1e-5f, 0.1f};
        int64_t xs[4] = {d.n, d.c, d.h, d.w}, cs[1] = {d.c};
        float *hx = host_random(numel(4, xs)), *hdy = host_random(numel(4, xs));
        float *hg = host_random((size_t)d.c), *hb = host_random((size_t)d.c);
        float *ref[7] = {NULL};
        for (int i = 0; i < DEVICES; i++) {
            pp_error err;
            pp_tensor x = tensor_on(i, 4, xs, hx), dy = tensor_on(i, 4, xs, hdy);
            pp_tensor g = tensor_on(i, 1, cs, hg), b = tensor_on(i, 1, cs, hb);
            pp_tensor rm = tensor_on(i, 1, cs, hb), rv = tensor_on(i, 1, cs, hg);
            pp_tensor y = tensor_on(i, 4, xs, NULL), dx = tensor_on(i, 4, xs, NULL);
            pp_tensor sm = tensor_on(i, 1, cs, NULL), si_ = tensor_on(i, 1, cs, NULL);
            pp_tensor dg = tensor_on(i, 1, cs, hg), db = tensor_on(i, 1, cs, hb);
            CHECK_OK(pp_batchnorm_forward_train(&g_ex[i], &d, &x, &g, &b, &rm, &rv, &y, &sm, &si_,
                                                &err),
                     &err);
            CHECK_OK(pp_batchnorm_backward(&g_ex[i], &d, &x, &dy, &g, &sm, &si_, &dx, &dg, &db,
                                           &err),
                     &err);
            char what[64];
            snprintf(what, sizeof what, "batch norm shape %zu", si);
            const pp_tensor *outs[7] = {&y, &rm, &rv, &sm, &dx, &dg, &db};
            for (int o = 0; o < 7; o++) same_bits(what, i, outs[o], &ref[o]);
            pp_tensor *all[12] = {&x, &dy, &g, &b, &rm, &rv, &y, &dx, &sm, &si_, &dg, &db};
            for (int k = 0; k < 12; k++) pp_tensor_free(all[k]);
        }
        for (int o = 0; o < 7; o++) free(ref[o]);
        free(hx);
        free(hdy);
        free(hg);
        free(hb);
    }
}

static void test_flat_ops(void)
{
    const int64_t n = 300001; /* several tasks and a short last one */
    int64_t shape[1] = {n};
    float *ha = host_random((size_t)n), *hb = host_random((size_t)n), *hc = host_random((size_t)n);
    float *ref[7] = {NULL};
    for (int i = 0; i < DEVICES; i++) {
        pp_error err;
        pp_tensor a = tensor_on(i, 1, shape, ha), b = tensor_on(i, 1, shape, hb);
        pp_tensor p = tensor_on(i, 1, shape, hc), buf = tensor_on(i, 1, shape, ha);
        pp_tensor y = tensor_on(i, 1, shape, NULL), z = tensor_on(i, 1, shape, hc);
        pp_tensor cp = tensor_on(i, 1, shape, NULL);
        CHECK_OK(pp_relu_forward(&g_ex[i], &a, &y, &err), &err);
        same_bits("relu", i, &y, &ref[0]);
        CHECK_OK(pp_relu_backward(&g_ex[i], &a, &b, &y, &err), &err);
        same_bits("relu backward", i, &y, &ref[1]);
        CHECK_OK(pp_add(&g_ex[i], &a, &b, &y, &err), &err);
        CHECK_OK(pp_accumulate(&g_ex[i], &b, &y, &err), &err);
        same_bits("add, accumulate", i, &y, &ref[2]);
        for (int step = 0; step < 2; step++) {
            pp_sgd_desc sd = {0.1f, 0.9f, 1e-4f, step == 1, step == 0};
            CHECK_OK(pp_sgd_update(&g_ex[i], &sd, &p, &b, &buf, &err), &err);
        }
        same_bits("sgd", i, &p, &ref[3]);
        same_bits("sgd momentum", i, &buf, &ref[4]);
        CHECK_OK(pp_copy(&g_ex[i], &a, &cp, &err), &err);
        same_bits("copy", i, &cp, &ref[5]);
        CHECK_OK(pp_zero(&g_ex[i], &z, &err), &err);
        same_bits("zero", i, &z, &ref[6]);
        pp_tensor *all[7] = {&a, &b, &p, &buf, &y, &z, &cp};
        for (int k = 0; k < 7; k++) pp_tensor_free(all[k]);
    }
    CHECK(memcmp(ref[5], ha, (size_t)n * sizeof(float)) == 0);
    int zero = 1;
    for (int64_t j = 0; j < n; j++) zero &= ref[6][j] == 0.0f;
    CHECK(zero);
    for (int o = 0; o < 7; o++) free(ref[o]);
    free(ha);
    free(hb);
    free(hc);
}

static void test_maxpool(void)
{
    pp_pool_desc d;
    pp_error err;
    CHECK_OK(pp_pool_desc_init(&d, 16, 37, 32, 32, 3, 2, 1, &err), &err);
    int64_t xs[4] = {d.n, d.c, d.h, d.w}, ys[4] = {d.n, d.c, d.p, d.q};
    float *hx = host_random(numel(4, xs)), *hdy = host_random(numel(4, ys));
    float *ref[2] = {NULL};
    for (int i = 0; i < DEVICES; i++) {
        pp_tensor x = tensor_on(i, 4, xs, hx), dy = tensor_on(i, 4, ys, hdy);
        pp_tensor y = tensor_on(i, 4, ys, NULL), dx = tensor_on(i, 4, xs, NULL), idx;
        CHECK_OK(pp_tensor_alloc(&idx, g_dev[i], PP_I32, 4, ys, &err), &err);
        CHECK_OK(pp_maxpool_forward(&g_ex[i], &d, &x, &y, &idx, &err), &err);
        CHECK_OK(pp_maxpool_backward(&g_ex[i], &d, &x, &y, &dy, &idx, &dx, &err), &err);
        same_bits("maxpool", i, &y, &ref[0]);
        same_bits("maxpool backward", i, &dx, &ref[1]);
        pp_tensor *all[5] = {&x, &dy, &y, &dx, &idx};
        for (int k = 0; k < 5; k++) pp_tensor_free(all[k]);
    }
    free(ref[0]);
    free(ref[1]);
    free(hx);
    free(hdy);
}

/* A malformed PP_CPU_THREADS is an input error when the device is created. */
static void test_bad_env(void)
{
    static const char *bad[] = {"0", "abc", "3x", "-2", "100000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pp_registry *reg;
        pp_device_ctx *dev;
        pp_error err;
        CHECK_OK(pp_registry_new(&reg, &err), &err);
        setenv("PP_CPU_THREADS", bad[i], 1);
        pp_status s = pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &dev, &err);
        CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "PP_CPU_THREADS") != NULL,
                  "PP_CPU_THREADS='%s': status %s, message '%s'", bad[i], pp_status_name(s),
                  err.msg);
        pp_registry_free(reg);
    }
    unsetenv("PP_CPU_THREADS");
}

int main(void)
{
    pp_registry *reg;
    pp_error err;
    if (pp_registry_new(&reg, &err) != PP_OK) return 1;
    for (int i = 0; i < DEVICES; i++) {
        char threads[8];
        snprintf(threads, sizeof threads, "%d", i + 1);
        setenv("PP_CPU_THREADS", threads, 1);
        if (pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, i}, &g_dev[i], &err) != PP_OK ||
            pp_exec_init(&g_ex[i], g_dev[i], NULL, &err) != PP_OK) {
            fprintf(stderr, "setup failed: %s\n", err.msg);
            return 1;
        }
    }
    unsetenv("PP_CPU_THREADS");
    test_conv();
    test_batchnorm();
    test_flat_ops();
    test_maxpool();
    test_bad_env();
    for (int i = 0; i < DEVICES; i++) {
        pp_exec_destroy(&g_ex[i]);
        CHECK(pp_device_bytes_in_use(g_dev[i]) == 0);
    }
    pp_registry_free(reg);
    return check_summary("test_cpu_threads");
}
