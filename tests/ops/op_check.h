/*
 * op_check.h - what the op tests share (test_ops.c, test_ops_transformer.c):
 * the CPU device they run on, random fills, tensors, closeness checks
 * against double references, and central finite differences of a scalar
 * function of double arrays. Each test executable includes it once.
 *
 * Tensors live on cpu:0, whose memory is host memory, so tests read and
 * write tensor data directly.
 */
#ifndef PP_TESTS_OP_CHECK_H
#define PP_TESTS_OP_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"

static pp_registry *g_reg;
static pp_device_ctx *g_dev;  /* cpu:0: where every op runs */
static pp_device_ctx *g_dev1; /* cpu:1: for the wrong-device checks */
static pp_exec g_ex;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

/* Uniform in [-1, 1) (splitmix64). */
static double urand(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

static pp_tensor tnew_on(pp_device_ctx *dev, pp_dtype dt, int ndim, int64_t d0, int64_t d1,
                         int64_t d2, int64_t d3)
{
    pp_tensor t;
    pp_error err;
    const int64_t shape[4] = {d0, d1, d2, d3};
    pp_status s = pp_tensor_zeros(&t, dev, dt, ndim, shape, &err);
    if (s != PP_OK) {
        fprintf(stderr, "tensor allocation failed: %s\n", err.msg);
        exit(1);
    }
    return t;
}

static pp_tensor tnew(int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    return tnew_on(g_dev, PP_F32, ndim, d0, d1, d2, d3);
}

static float *fp(const pp_tensor *t) { return (float *)t->data; }
static size_t numel(const pp_tensor *t) { return (size_t)pp_tensor_numel(t); }

/* Fills t with offset + scale * U[-1,1) and returns a double copy (caller frees). */
static double *fill(pp_tensor *t, double offset, double scale)
{
    size_t n = numel(t);
    double *d = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        fp(t)[i] = (float)(offset + scale * urand());
        d[i] = fp(t)[i];
    }
    return d;
}

static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

/* Largest |a[i]| (at least 1), the scale the relative tolerances refer to. */
static double scale_of(const double *a, size_t n)
{
    double m = 1.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

/* Checks |got - want| <= rtol * max(1, max|want|) elementwise; reports the worst. */
static void check_close(const char *what, const float *got, const double *want, size_t n,
                        double rtol)
{
    double sc = scale_of(want, n), worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= worst)) {
            worst = e;
            wi = i;
        }
    }
    CHECK_MSG(worst <= rtol * sc, "%s: element %zu is %.9g, expected %.9g (error %.3g > %.3g)",
              what, wi, n ? (double)got[wi] : 0.0, n ? want[wi] : 0.0, worst, rtol * sc);
}

/* Finite differences. A scalar function L of some double arrays is evaluated
 * through a callback; fd_grad fills g[i] = dL/dv[i] by central differences
 * for a subset of i (at most FD_MAX_POINTS, evenly strided with a random
 * offset) and marks the checked entries in mask. */
typedef double (*scalar_fn)(void *ctx);

#define FD_MAX_POINTS 400

static void fd_grad(scalar_fn f, void *ctx, double *v, size_t n, double h, double *g,
                    unsigned char *mask)
{
    size_t step = n > FD_MAX_POINTS ? (n + FD_MAX_POINTS - 1) / FD_MAX_POINTS : 1;
    size_t start = step > 1 ? (size_t)((urand() + 1.0) * 0.5 * (double)step) % step : 0;
    for (size_t i = 0; i < n; i++) {
        mask[i] = i >= start && (i - start) % step == 0;
        if (!mask[i]) continue;
        double s = v[i];
        v[i] = s + h;
        double lp = f(ctx);
        v[i] = s - h;
        double lm = f(ctx);
        v[i] = s;
        g[i] = (lp - lm) / (2.0 * h);
    }
}

/* Compares an analytic gradient (float, minus an initial value base when the
 * op accumulates) with the finite-difference one on the masked entries.
 *
 * Tolerance: each gradient entry is a float sum of up to ~2300 products of
 * values in [-1, 1] (conv dw over N*P*Q positions) or, for batch norm and
 * softmax, a few O(1) terms. Blocked float summation of terms with random
 * signs errs by about sqrt(K) * 2^-24 of the terms' size, ~1e-6 of the
 * gradient's scale here (the largest error seen over these cases is 1.1e-6).
 * The finite differences are taken on the double reference and are exact to
 * ~1e-9 (bilinear ops) or O(h^2) ~ 1e-8 (batch norm, pooling, softmax). A
 * wrong index or formula gives an O(1e-1..1) relative error, so 2e-5 of the
 * gradient's scale sits more than an order of magnitude from both. */
#define GRAD_RTOL 2e-5

static void check_grad(const char *what, const float *got, const double *base, const double *fd,
                       const unsigned char *mask, size_t n)
{
    double sc = 1.0, worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++)
        if (mask[i]) sc = fmax(sc, fabs(fd[i]));
    for (size_t i = 0; i < n; i++) {
        if (!mask[i]) continue;
        double g = (double)got[i] - (base ? base[i] : 0.0);
        double e = fabs(g - fd[i]);
        if (!(e <= worst)) {
            worst = e;
            wi = i;
        }
    }
    CHECK_MSG(worst <= GRAD_RTOL * sc, "%s: element %zu is %.9g, finite differences give %.9g",
              what, wi, (double)got[wi] - (base ? base[wi] : 0.0), fd[wi]);
}

static inline double dot_r(const double *y, const double *r, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += y[i] * r[i];
    return s;
}

/* Opens cpu:0 (g_dev, g_ex) and cpu:1 (g_dev1); false after a message. */
static bool op_check_setup(void)
{
    pp_error err;
    if (pp_registry_new(&g_reg, &err) != PP_OK ||
        pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CPU, 0}, &g_dev, &err) != PP_OK ||
        pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CPU, 1}, &g_dev1, &err) != PP_OK ||
        pp_exec_init(&g_ex, g_dev, NULL, &err) != PP_OK) {
        fprintf(stderr, "setup failed: %s\n", err.msg);
        return false;
    }
    return true;
}

/* After op_check_setup: cpu:2 with 1 worker thread and cpu:3 with 3, for
 * ops whose bits must not depend on the thread count; false after a message. */
static inline bool op_check_thread_devices(pp_device_ctx **one, pp_device_ctx **three)
{
    pp_error err;
    setenv("PP_CPU_THREADS", "1", 1);
    pp_status s = pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CPU, 2}, one, &err);
    setenv("PP_CPU_THREADS", "3", 1);
    if (s == PP_OK) s = pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CPU, 3}, three, &err);
    unsetenv("PP_CPU_THREADS");
    if (s != PP_OK) fprintf(stderr, "setup failed: %s\n", err.msg);
    return s == PP_OK;
}

/* Closes what op_check_setup opened, checking that no device memory is left. */
static void op_check_teardown(void)
{
    pp_exec_destroy(&g_ex);
    CHECK(pp_device_bytes_in_use(g_dev) == 0 && pp_device_bytes_in_use(g_dev1) == 0);
    pp_registry_free(g_reg);
}

#endif
