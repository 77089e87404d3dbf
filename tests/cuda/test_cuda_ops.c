/*
 * test_cuda_ops.c - the CUDA backend against the CPU backend, op by op, on
 * random inputs; TF32 math; the device's convolution algorithm cache and its
 * file; the steady-state "no new device memory" property; streams, events
 * and copies on CUDA devices.
 *
 * Exits 77 (meson's skip) when no CUDA device is visible. Errors are
 * normalised: max |cuda - cpu| / max |cpu| over each output tensor, which must
 * stay within 1e-4 for forward outputs and 1e-3 for gradients (fp32, TF32 off).
 * Kernels whose arithmetic is the CPU's (elementwise, SGD, zeroing) must give
 * its bits. TF32 results are bounded element by element (see test_tf32).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <unistd.h>

#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "runtime/cuda/cuda_internal.h"
#include "streams/stream.h"
#include "tests/check.h"

#define TOL_FWD 1e-4
#define TOL_BWD 1e-3

typedef struct rig {
    pp_registry *reg;
    pp_device_ctx *cpu, *gpu;
    pp_exec ecpu, egpu;
    uint64_t rng;
} rig;

/* The same tensor on both devices. */
typedef struct pair {
    pp_tensor c, g;
} pair;

static float frand(rig *r)
{
    r->rng = r->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((r->rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* A pair filled from host (dtype F32 or I32 by elem size) */
static pair pair_from(rig *r, pp_dtype dt, int ndim, const int64_t *shape, const void *host)
{
    pair p;
    pp_error err;
    CHECK_OK(pp_tensor_alloc(&p.c, r->cpu, dt, ndim, shape, &err), &err);
    CHECK_OK(pp_tensor_alloc(&p.g, r->gpu, dt, ndim, shape, &err), &err);
    size_t bytes = pp_tensor_bytes(&p.c);
    if (bytes) {
        CHECK_OK(pp_tensor_from_host(&p.c, host, bytes, &err), &err);
        CHECK_OK(pp_tensor_from_host(&p.g, host, bytes, &err), &err);
    }
    return p;
}

/* Uniform [lo, hi) f32 values (lo = hi gives a constant). */
static pair pair_rand(rig *r, int ndim, const int64_t *shape, float lo, float hi)
{
    int64_t n = numel_of(ndim, shape);
    float *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * 0.5f * (frand(r) + 1.0f);
    pair p = pair_from(r, PP_F32, ndim, shape, h);
    free(h);
    return p;
}

static void pair_free(pair *p)
{
    pp_tensor_free(&p->c);
    pp_tensor_free(&p->g);
}

/* Normalised error of the CUDA tensor against the CPU one. */
static double pair_err(rig *r, const pair *p)
{
    pp_error err;
    CHECK_OK(pp_exec_sync(&r->egpu, &err), &err);
    int64_t n = pp_tensor_numel(&p->c);
    float *a = malloc((size_t)(n ? n : 1) * sizeof *a);
    float *b = malloc((size_t)(n ? n : 1) * sizeof *b);
    CHECK_OK(pp_tensor_to_host(&p->c, a, (size_t)n * sizeof *a, &err), &err);
    CHECK_OK(pp_tensor_to_host(&p->g, b, (size_t)n * sizeof *b, &err), &err);
    double scale = 0.0, diff = 0.0;
    for (int64_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(a[i]));
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= diff)) diff = d; /* NaN propagates */
    }
    free(a);
    free(b);
    return scale > 0 ? diff / scale : diff;
}

/* Checks the normalised error of p against tol; the label says which op and case. */
static void check_close(rig *r, const pair *p, double tol, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void check_close(rig *r, const pair *p, double tol, const char *fmt, ...)
{
    char label[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(label, sizeof label, fmt, ap);
    va_end(ap);
    double e = pair_err(r, p);
    CHECK_MSG(e <= tol, "%s: normalised error %.3g > %.0e", label, e, tol);
}

#define CHECK_CLOSE check_close

/* Runs one op call on both execs; both must succeed. */
#define BOTH(r, call_c, call_g)                                                            \
    do {                                                                                   \
        pp_error e1_, e2_;                                                                 \
        { pp_exec *ex = &(r)->ecpu; pp_error *err = &e1_; CHECK_OK(call_c, err); }       \
        { pp_exec *ex = &(r)->egpu; pp_error *err = &e2_; CHECK_OK(call_g, err); }       \
    } while (0)

/* ---- convolution ------------------------------------------------------------ */

static void test_conv(rig *r)
{
    static const struct { int n, c, h, w, k, kernel, stride, pad; } cases[] = {
        {2, 3, 23, 23, 8, 7, 2, 3},  /* stem */
        {2, 16, 9, 9, 16, 3, 1, 1},  /* 3x3 */
        {2, 16, 8, 8, 32, 1, 2, 0},  /* downsample 1x1/2 */
        {3, 8, 7, 7, 12, 3, 2, 1},   /* 3x3/2, odd size */
        {1, 64, 4, 4, 256, 1, 1, 0}, /* bottleneck expand */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_conv2d_desc d;
        pp_error pe;
        CHECK_OK(pp_conv2d_desc_init(&d, cases[i].n, cases[i].c, cases[i].h, cases[i].w,
                                     cases[i].k, cases[i].kernel, cases[i].stride, cases[i].pad,
                                     &pe),
                 &pe);
        pair x = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, -1, 1);
        pair w = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, -0.5f, 0.5f);
        pair y = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, 0, 0);
        pair dy = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, -1, 1);
        pair dx = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, 0, 0);
        pair dw = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, -1, 1); /* += target */
        BOTH(r, pp_conv2d_forward(ex, &d, &x.c, &w.c, &y.c, err),
             pp_conv2d_forward(ex, &d, &x.g, &w.g, &y.g, err));
        CHECK_CLOSE(r, &y, TOL_FWD, "conv forward case %zu", i);
        BOTH(r, pp_conv2d_backward_data(ex, &d, &dy.c, &w.c, &dx.c, err),
             pp_conv2d_backward_data(ex, &d, &dy.g, &w.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "conv backward data case %zu", i);
        /* dx += the same gradient: cuDNN's beta = 1 against the CPU's sum */
        BOTH(r, pp_conv2d_backward_data_accumulate(ex, &d, &dy.c, &w.c, &dx.c, err),
             pp_conv2d_backward_data_accumulate(ex, &d, &dy.g, &w.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "conv backward data accumulate case %zu", i);
        for (int rep = 0; rep < 2; rep++)
            BOTH(r, pp_conv2d_backward_filter(ex, &d, &x.c, &dy.c, &dw.c, err),
                 pp_conv2d_backward_filter(ex, &d, &x.g, &dy.g, &dw.g, err));
        CHECK_CLOSE(r, &dw, TOL_BWD, "conv backward filter (accumulating twice) case %zu", i);
        pair_free(&x), pair_free(&w), pair_free(&y), pair_free(&dy), pair_free(&dx),
            pair_free(&dw);
    }
}

/* ---- batch norm -------------------------------------------------------------- */

static void test_batchnorm(rig *r)
{
    static const struct { int n, c, h, w; } cases[] = {
        {4, 8, 5, 5}, {2, 3, 7, 9}, {16, 32, 1, 1}, {1, 4, 6, 6}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_bn_desc d = {cases[i].n, cases[i].c, cases[i].h, cases[i].w, 1e-5f, 0.1f};
        const int64_t xs[4] = {d.n, d.c, d.h, d.w}, cs[1] = {d.c};
        pair x = pair_rand(r, 4, xs, -2, 3), y = pair_rand(r, 4, xs, 0, 0);
        pair gamma = pair_rand(r, 1, cs, 0.5f, 1.5f), beta = pair_rand(r, 1, cs, -1, 1);
        pair rm = pair_rand(r, 1, cs, -0.1f, 0.1f), rv = pair_rand(r, 1, cs, 0.9f, 1.1f);
        pair sm = pair_rand(r, 1, cs, 0, 0), si = pair_rand(r, 1, cs, 0, 0);
        pair dy = pair_rand(r, 4, xs, -1, 1), dx = pair_rand(r, 4, xs, 0, 0);
        pair dg = pair_rand(r, 1, cs, -1, 1), db = pair_rand(r, 1, cs, -1, 1); /* += targets */
        for (int rep = 0; rep < 2; rep++) /* two updates of the running statistics */
            BOTH(r,
                 pp_batchnorm_forward_train(ex, &d, &x.c, &gamma.c, &beta.c, &rm.c, &rv.c, &y.c,
                                            &sm.c, &si.c, err),
                 pp_batchnorm_forward_train(ex, &d, &x.g, &gamma.g, &beta.g, &rm.g, &rv.g, &y.g,
                                            &sm.g, &si.g, err));
        CHECK_CLOSE(r, &y, TOL_FWD, "bn train y case %zu", i);
        CHECK_CLOSE(r, &sm, TOL_FWD, "bn save_mean case %zu", i);
        CHECK_CLOSE(r, &si, TOL_FWD, "bn save_invstd case %zu", i);
        CHECK_CLOSE(r, &rm, TOL_FWD, "bn running_mean case %zu", i);
        CHECK_CLOSE(r, &rv, TOL_FWD, "bn running_var (unbiased) case %zu", i);
        BOTH(r,
             pp_batchnorm_backward(ex, &d, &x.c, &dy.c, &gamma.c, &sm.c, &si.c, &dx.c, &dg.c,
                                   &db.c, err),
             pp_batchnorm_backward(ex, &d, &x.g, &dy.g, &gamma.g, &sm.g, &si.g, &dx.g, &dg.g,
                                   &db.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "bn backward dx case %zu", i);
        CHECK_CLOSE(r, &dg, TOL_BWD, "bn backward dgamma (+=) case %zu", i);
        CHECK_CLOSE(r, &db, TOL_BWD, "bn backward dbeta (+=) case %zu", i);
        BOTH(r,
             pp_batchnorm_forward_infer(ex, &d, &x.c, &gamma.c, &beta.c, &rm.c, &rv.c, &y.c,
                                        err),
             pp_batchnorm_forward_infer(ex, &d, &x.g, &gamma.g, &beta.g, &rm.g, &rv.g, &y.g,
                                        err));
        CHECK_CLOSE(r, &y, TOL_FWD, "bn infer case %zu", i);
        pair *all[] = {&x, &y, &gamma, &beta, &rm, &rv, &sm, &si, &dy, &dx, &dg, &db};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
}

/* ---- pooling ------------------------------------------------------------------- */

static void test_pool(rig *r)
{
    static const struct { int n, c, h, w, kernel, stride, pad; } cases[] = {
        {2, 4, 16, 16, 3, 2, 1}, {1, 3, 9, 7, 3, 2, 1}, {2, 2, 8, 8, 2, 2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_pool_desc d;
        pp_error pe;
        CHECK_OK(pp_pool_desc_init(&d, cases[i].n, cases[i].c, cases[i].h, cases[i].w,
                                   cases[i].kernel, cases[i].stride, cases[i].pad, &pe),
                 &pe);
        const int64_t xs[4] = {d.n, d.c, d.h, d.w}, ys[4] = {d.n, d.c, d.p, d.q};
        pair x = pair_rand(r, 4, xs, -1, 1), y = pair_rand(r, 4, ys, 0, 0);
        pair dy = pair_rand(r, 4, ys, -1, 1), dx = pair_rand(r, 4, xs, 5, 5);
        int32_t *zi = calloc((size_t)numel_of(4, ys), sizeof *zi);
        pair idx = pair_from(r, PP_I32, 4, ys, zi);
        free(zi);
        BOTH(r, pp_maxpool_forward(ex, &d, &x.c, &y.c, &idx.c, err),
             pp_maxpool_forward(ex, &d, &x.g, &y.g, &idx.g, err));
        CHECK_CLOSE(r, &y, TOL_FWD, "maxpool forward case %zu (negative inputs, padding)", i);
        BOTH(r, pp_maxpool_backward(ex, &d, &x.c, &y.c, &dy.c, &idx.c, &dx.c, err),
             pp_maxpool_backward(ex, &d, &x.g, &y.g, &dy.g, &idx.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "maxpool backward case %zu", i);
        pair_free(&x), pair_free(&y), pair_free(&dy), pair_free(&dx), pair_free(&idx);
    }
    /* adaptive average pool to 1x1 */
    const int64_t xs[4] = {3, 5, 7, 7}, ys[2] = {3, 5};
    pair x = pair_rand(r, 4, xs, -1, 1), y = pair_rand(r, 2, ys, 0, 0);
    pair dy = pair_rand(r, 2, ys, -1, 1), dx = pair_rand(r, 4, xs, 0, 0);
    BOTH(r, pp_avgpool_forward(ex, &x.c, &y.c, err), pp_avgpool_forward(ex, &x.g, &y.g, err));
    CHECK_CLOSE(r, &y, TOL_FWD, "avgpool forward");
    BOTH(r, pp_avgpool_backward(ex, &dy.c, &dx.c, err),
         pp_avgpool_backward(ex, &dy.g, &dx.g, err));
    CHECK_CLOSE(r, &dx, TOL_BWD, "avgpool backward");
    pair_free(&x), pair_free(&y), pair_free(&dy), pair_free(&dx);
}

/* ---- elementwise --------------------------------------------------------------- */

/* Rows [off, off + len) of p on both devices (a view: p keeps the storage). */
static pair pair_view(const pair *p, int64_t off, int64_t len)
{
    return (pair){pp_tensor_view0(&p->c, off, len), pp_tensor_view0(&p->g, off, len)};
}

/* Every kernel against the CPU bit for bit, on sizes around the float4 width
 * and on views one element off 16-byte alignment (the single-float path). */
static void test_elementwise(rig *r)
{
    static const int64_t sizes[] = {1, 3, 4, 5, 255, 4096, 100003};
    for (size_t i = 0; i < 2 * sizeof sizes / sizeof sizes[0]; i++) {
        const int64_t n = sizes[i / 2], off = (int64_t)(i % 2); /* odd i: misaligned views */
        const int64_t s[1] = {n + off};
        pair sa = pair_rand(r, 1, s, -1, 1), sb = pair_rand(r, 1, s, -1, 1);
        pair sy = pair_rand(r, 1, s, 0, 0), sdy = pair_rand(r, 1, s, -1, 1);
        pair sdx = pair_rand(r, 1, s, 0, 0);
        pair a = pair_view(&sa, off, n), b = pair_view(&sb, off, n), y = pair_view(&sy, off, n);
        pair dy = pair_view(&sdy, off, n), dx = pair_view(&sdx, off, n);
        char tag[48];
        snprintf(tag, sizeof tag, "n=%lld offset=%lld", (long long)n, (long long)off);
        BOTH(r, pp_relu_forward(ex, &a.c, &y.c, err), pp_relu_forward(ex, &a.g, &y.g, err));
        CHECK_CLOSE(r, &y, 0.0, "relu forward %s", tag);
        BOTH(r, pp_relu_backward(ex, &y.c, &dy.c, &dx.c, err),
             pp_relu_backward(ex, &y.g, &dy.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, 0.0, "relu backward %s", tag);
        BOTH(r, pp_relu_forward(ex, &b.c, &b.c, err), pp_relu_forward(ex, &b.g, &b.g, err));
        CHECK_CLOSE(r, &b, 0.0, "relu forward in place %s", tag);
        BOTH(r, pp_add(ex, &a.c, &dy.c, &y.c, err), pp_add(ex, &a.g, &dy.g, &y.g, err));
        CHECK_CLOSE(r, &y, 0.0, "add %s", tag);
        BOTH(r, pp_add(ex, &a.c, &y.c, &y.c, err), pp_add(ex, &a.g, &y.g, &y.g, err));
        CHECK_CLOSE(r, &y, 0.0, "add aliased %s", tag);
        BOTH(r, pp_accumulate(ex, &a.c, &dx.c, err), pp_accumulate(ex, &a.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, 0.0, "accumulate %s", tag);
        BOTH(r, pp_copy(ex, &dy.c, &a.c, err), pp_copy(ex, &dy.g, &a.g, err));
        CHECK_CLOSE(r, &a, 0.0, "copy %s", tag);
        BOTH(r, pp_add_relu(ex, &a.c, &dy.c, &y.c, err), pp_add_relu(ex, &a.g, &dy.g, &y.g, err));
        CHECK_CLOSE(r, &y, 0.0, "add_relu %s", tag);
        BOTH(r, pp_add_relu(ex, &y.c, &dx.c, &dx.c, err),
             pp_add_relu(ex, &y.g, &dx.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, 0.0, "add_relu aliased %s", tag);
        BOTH(r, pp_zero(ex, &a.c, err), pp_zero(ex, &a.g, err));
        CHECK_CLOSE(r, &a, 0.0, "zero %s", tag);
        /* the whole storage: the element before a misaligned view is untouched */
        CHECK_CLOSE(r, &sa, 0.0, "storage around views %s", tag);
        CHECK_CLOSE(r, &sdx, 0.0, "storage around views %s", tag);
        pair_free(&sa), pair_free(&sb), pair_free(&sy), pair_free(&sdy), pair_free(&sdx);
    }
}

/* ---- linear, loss, optimizer ------------------------------------------------------ */

static void test_linear(rig *r)
{
    static const struct { int n, in, out; } cases[] = {{5, 37, 11}, {32, 2048, 1000}, {1, 3, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, in = cases[i].in, out = cases[i].out;
        pair x = pair_rand(r, 2, (int64_t[]){n, in}, -1, 1);
        pair w = pair_rand(r, 2, (int64_t[]){out, in}, -0.1f, 0.1f);
        pair b = pair_rand(r, 1, (int64_t[]){out}, -1, 1);
        pair y = pair_rand(r, 2, (int64_t[]){n, out}, 0, 0);
        pair dy = pair_rand(r, 2, (int64_t[]){n, out}, -1, 1);
        pair dx = pair_rand(r, 2, (int64_t[]){n, in}, 0, 0);
        pair dw = pair_rand(r, 2, (int64_t[]){out, in}, -1, 1);
        pair db = pair_rand(r, 1, (int64_t[]){out}, -1, 1);
        BOTH(r, pp_linear_forward(ex, &x.c, &w.c, &b.c, &y.c, err),
             pp_linear_forward(ex, &x.g, &w.g, &b.g, &y.g, err));
        CHECK_CLOSE(r, &y, TOL_FWD, "linear forward case %zu", i);
        BOTH(r, pp_linear_backward(ex, &x.c, &w.c, &dy.c, &dx.c, &dw.c, &db.c, err),
             pp_linear_backward(ex, &x.g, &w.g, &dy.g, &dx.g, &dw.g, &db.g, err));
        BOTH(r, pp_linear_backward(ex, &x.c, &w.c, &dy.c, NULL, &dw.c, &db.c, err),
             pp_linear_backward(ex, &x.g, &w.g, &dy.g, NULL, &dw.g, &db.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "linear backward dx case %zu", i);
        CHECK_CLOSE(r, &dw, TOL_BWD, "linear backward dw (+= twice) case %zu", i);
        CHECK_CLOSE(r, &db, TOL_BWD, "linear backward db (+= twice) case %zu", i);
        pair *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
}

static void test_softmax_xent(rig *r)
{
    static const struct { int n, classes; float divisor; } cases[] = {
        {7, 1000, 16.0f}, {1, 10, 1.0f}, {64, 3, 128.0f}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, k = cases[i].classes;
        pair z = pair_rand(r, 2, (int64_t[]){n, k}, -4, 4);
        int32_t *lab = malloc((size_t)n * sizeof *lab);
        for (int j = 0; j < n; j++) lab[j] = (int32_t)((r->rng >> 33) % (uint64_t)k), frand(r);
        pair labels = pair_from(r, PP_I32, 1, (int64_t[]){n}, lab);
        pair loss = pair_rand(r, 0, NULL, 0, 0);
        int32_t zero = 0;
        pair correct = pair_from(r, PP_I32, 0, NULL, &zero);
        pair dz = pair_rand(r, 2, (int64_t[]){n, k}, 0, 0);
        BOTH(r,
             pp_softmax_xent(ex, &z.c, &labels.c, cases[i].divisor, &loss.c, &correct.c, &dz.c,
                             err),
             pp_softmax_xent(ex, &z.g, &labels.g, cases[i].divisor, &loss.g, &correct.g, &dz.g,
                             err));
        CHECK_CLOSE(r, &loss, TOL_FWD, "softmax_xent loss case %zu", i);
        CHECK_CLOSE(r, &dz, TOL_BWD, "softmax_xent dlogits case %zu", i);
        int32_t hc = -5, hg = -6;
        pp_error pe;
        CHECK_OK(pp_tensor_to_host(&correct.c, &hc, sizeof hc, &pe), &pe);
        CHECK_OK(pp_tensor_to_host(&correct.g, &hg, sizeof hg, &pe), &pe);
        CHECK_MSG(hc == hg, "softmax_xent correct case %zu: cpu %d cuda %d", i, hc, hg);
        /* a label out of range: the kernel clamps and reports correct = -1 */
        lab[0] = k;
        CHECK_OK(pp_tensor_from_host(&labels.g, lab, (size_t)n * sizeof *lab, &pe), &pe);
        CHECK_OK(pp_softmax_xent(&r->egpu, &z.g, &labels.g, cases[i].divisor, &loss.g,
                                 &correct.g, &dz.g, &pe),
                 &pe);
        CHECK_OK(pp_tensor_to_host(&correct.g, &hg, sizeof hg, &pe), &pe);
        CHECK_MSG(hg == -1, "softmax_xent bad label case %zu: correct %d, expected -1", i, hg);
        free(lab);
        pair *all[] = {&z, &labels, &loss, &correct, &dz};
        for (size_t m = 0; m < sizeof all / sizeof all[0]; m++) pair_free(all[m]);
    }
}

/* Copies p's CUDA tensor to the host and compares it with its CPU twin bit
 * for bit; true when equal. */
static bool pair_bitwise(const pair *p)
{
    pp_error e;
    size_t bytes = pp_tensor_bytes(&p->c);
    unsigned char *h = malloc(bytes ? bytes : 1);
    CHECK_OK(pp_tensor_to_host(&p->g, h, bytes, &e), &e);
    bool same = memcmp(h, p->c.data, bytes) == 0;
    free(h);
    return same;
}

/* SGD rounds each product and sum on its own on both backends (no FMA), in
 * the same order: the CUDA kernels give the CPU's bits. */
static void test_sgd(rig *r)
{
    static const pp_sgd_desc cases[] = {
        {0.1f, 0.0f, 0.0f, false, true},   {0.1f, 0.9f, 1e-4f, false, true},
        {0.05f, 0.9f, 1e-4f, false, false}, {0.1f, 0.9f, 5e-4f, true, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t s[1] = {1000};
        pair p = pair_rand(r, 1, s, -1, 1), g = pair_rand(r, 1, s, -1, 1);
        pair buf = pair_rand(r, 1, s, -1, 1);
        for (int step = 0; step < 3; step++)
            BOTH(r, pp_sgd_update(ex, &cases[i], &p.c, &g.c, &buf.c, err),
                 pp_sgd_update(ex, &cases[i], &p.g, &g.g, &buf.g, err));
        CHECK_CLOSE(r, &p, 0.0, "sgd param case %zu", i);
        CHECK_CLOSE(r, &buf, 0.0, "sgd momentum buffer case %zu", i);
        CHECK_MSG(pair_bitwise(&p) && pair_bitwise(&buf), "sgd case %zu: not the CPU's bits", i);
        pair_free(&p), pair_free(&g), pair_free(&buf);
    }
}

/* The multi-tensor SGD (one launch per 96 tensors, float4s where aligned)
 * against the CPU's per-tensor steps bit for bit, and against the CUDA
 * per-tensor kernel: 211 tensors (three launches) of odd sizes, some larger
 * than a tile, views one element off alignment in param, grad or buffer,
 * empty tensors, for every kind of step over three steps. */
static void test_sgd_multi(rig *r)
{
    static const pp_sgd_desc descs[] = {
        {0.1f, 0.0f, 1e-4f, false, false},  {0.1f, 0.9f, 1e-4f, false, true},
        {0.05f, 0.9f, 1e-4f, false, false}, {0.05f, 0.9f, 5e-4f, true, true},
    };
    enum { T = 211 };
    pp_error e;
    for (size_t c = 0; c < sizeof descs / sizeof descs[0]; c++) {
        pair ps[T], gs[T], bs[T], pv[T], gv[T], bv[T]; /* storage and the views used */
        pp_tensor q[T], qb[T];                          /* the per-tensor kernel's copies */
        pp_tensor *mp[T], *mb[T];
        const pp_tensor *mg[T];
        for (int i = 0; i < T; i++) {
            static const int64_t special[] = {1000003, 4097, 8192, 0}; /* tensors 7..10 */
            int64_t n = i >= 7 && i <= 10 ? special[i - 7] : 1 + (i * 37) % 3001;
            const int64_t s[1] = {n + 1};
            ps[i] = pair_rand(r, 1, s, -1, 1), gs[i] = pair_rand(r, 1, s, -1, 1);
            bs[i] = pair_rand(r, 1, s, -1, 1);
            pv[i] = pair_view(&ps[i], i % 4 == 1, n), gv[i] = pair_view(&gs[i], i % 4 == 2, n);
            bv[i] = pair_view(&bs[i], i % 4 == 3, n);
            CHECK_OK(pp_tensor_alloc(&q[i], r->gpu, PP_F32, 1, &n, &e), &e);
            CHECK_OK(pp_tensor_alloc(&qb[i], r->gpu, PP_F32, 1, &n, &e), &e);
            CHECK_OK(pp_copy(&r->egpu, &pv[i].g, &q[i], &e), &e);
            CHECK_OK(pp_copy(&r->egpu, &bv[i].g, &qb[i], &e), &e);
            mp[i] = &pv[i].g, mg[i] = &gv[i].g, mb[i] = &bv[i].g;
        }
        const bool mom = descs[c].momentum != 0;
        for (int step = 0; step < 3; step++) {
            pp_sgd_desc d = descs[c];
            d.first_step = d.first_step && step == 0;
            for (int i = 0; i < T; i++) {
                CHECK_OK(pp_sgd_update(&r->ecpu, &d, &pv[i].c, &gv[i].c, mom ? &bv[i].c : NULL,
                                       &e),
                         &e);
                CHECK_OK(pp_sgd_update(&r->egpu, &d, &q[i], &gv[i].g, mom ? &qb[i] : NULL, &e),
                         &e);
            }
            CHECK_OK(pp_sgd_update_multi(&r->egpu, &d, T, mp, mg, mom ? mb : NULL, &e), &e);
        }
        CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
        int bad = 0, bad1 = 0;
        for (int i = 0; i < T; i++) {
            bad += !pair_bitwise(&ps[i]) || !pair_bitwise(&bs[i]);
            pair one = {pv[i].c, q[i]}, oneb = {bv[i].c, qb[i]};
            bad1 += !pair_bitwise(&one) || (mom && !pair_bitwise(&oneb));
        }
        CHECK_MSG(bad == 0, "sgd_update_multi case %zu: %d of %d tensors (or the storage around "
                  "their views) differ from the CPU's bits", c, bad, T);
        CHECK_MSG(bad1 == 0, "sgd_update case %zu: %d of %d tensors differ from the CPU's bits",
                  c, bad1, T);
        for (int i = 0; i < T; i++) {
            pair_free(&ps[i]), pair_free(&gs[i]), pair_free(&bs[i]);
            pp_tensor_free(&q[i]), pp_tensor_free(&qb[i]);
        }
    }
}

/* Zeroing 250 tensors (two launches) of every dtype, odd byte counts and
 * views at every misalignment: exactly the view's bytes become zero. */
static void test_zero_multi(rig *r)
{
    enum { T = 250 };
    static const pp_dtype dts[] = {PP_F32, PP_U8, PP_BF16, PP_I32, PP_I64};
    pp_error e;
    pair st[T], v[T];
    pp_tensor *ys[T];
    for (int i = 0; i < T; i++) {
        pp_dtype dt = dts[i % 5];
        int64_t n = i == 3 ? 300001 : i == 4 ? 0 : 1 + (i * 53) % 5000, off = (i / 5) % 17;
        const int64_t s[1] = {n + off + 3};
        size_t bytes = (size_t)s[0] * pp_dtype_size(dt);
        unsigned char *h = malloc(bytes);
        memset(h, 0x5a, bytes);
        st[i] = pair_from(r, dt, 1, s, h);
        free(h);
        v[i] = pair_view(&st[i], off, n);
        ys[i] = &v[i].g;
        CHECK_OK(pp_zero(&r->ecpu, &v[i].c, &e), &e);
    }
    CHECK_OK(pp_zero_multi(&r->egpu, T, ys, &e), &e);
    CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
    int bad = 0;
    for (int i = 0; i < T; i++) {
        bad += !pair_bitwise(&st[i]);
        pair_free(&st[i]);
    }
    CHECK_MSG(bad == 0, "zero_multi: %d of %d tensors (with the bytes around them) wrong", bad, T);
}

/* ---- TF32 ------------------------------------------------------------------------ */

/* dst = |src| (CPU tensors: host memory). */
static pp_tensor cpu_abs(rig *r, const pp_tensor *src)
{
    pp_tensor t;
    pp_error e;
    CHECK_OK(pp_tensor_alloc(&t, r->cpu, PP_F32, src->ndim, src->shape, &e), &e);
    for (int64_t i = 0; i < pp_tensor_numel(src); i++)
        ((float *)t.data)[i] = fabsf(((const float *)src->data)[i]);
    return t;
}

static pp_tensor cpu_zeros_like(rig *r, const pp_tensor *like)
{
    pp_tensor t;
    pp_error e;
    CHECK_OK(pp_tensor_zeros(&t, r->cpu, PP_F32, like->ndim, like->shape, &e), &e);
    return t;
}

/* TF32 keeps 10 of fp32's 23 mantissa bits. An operand rounded (or, as tensor
 * cores may do, truncated) to TF32 is within 2^-10 of itself, so a product of
 * two within 2^-9 + 2^-20, and a sum of products within 2^-9 of the sum of
 * their magnitudes (fp32 accumulation adds K * 2^-24 on each side, 7e-5 for
 * the largest K here). Winograd and FFT algorithms multiply transformed
 * operands, which can amplify that by a small factor: allow 4x, 2^-7 of the
 * magnitudes. A wrong result is off by the order of the magnitudes. */
#define TF32_BOUND (4.0 * ldexp(1.0, -9))

/* |cuda - cpu| <= TF32_BOUND * mag elementwise, mag the CPU op on magnitudes;
 * returns the largest error relative to mag (for the log). */
static double check_tf32(rig *r, const pair *p, const pp_tensor *mag, const char *what)
{
    pp_error e;
    CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
    int64_t n = pp_tensor_numel(&p->c);
    float *g = malloc((size_t)(n ? n : 1) * sizeof *g);
    CHECK_OK(pp_tensor_to_host(&p->g, g, (size_t)n * sizeof *g, &e), &e);
    const float *c = p->c.data, *m = mag->data;
    int64_t bad = 0, first = -1;
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)g[i] - (double)c[i]);
        if (!(d <= TF32_BOUND * m[i] + 1e-30) && bad++ == 0) first = i;
        if (m[i] > 0) worst = fmax(worst, d / m[i]);
    }
    CHECK_MSG(bad == 0, "tf32 %s: %lld of %lld outside 2^-7 of the magnitudes, first #%lld: "
              "%.9g vs %.9g (magnitude %.4g)", what, (long long)bad, (long long)n,
              (long long)first, first >= 0 ? g[first] : 0.0, first >= 0 ? c[first] : 0.0,
              first >= 0 ? m[first] : 0.0);
    free(g);
    return worst;
}

/* With the device in tf32 mode, convolutions (every direction) and the
 * linear layer stay within the TF32 bound of the CPU's fp32 results; back in
 * fp32 mode they match as tightly as before (plans are keyed by the mode and
 * the cuBLAS handle follows it). The log shows the largest relative error
 * seen: around 1e-4 to 1e-3 when tensor cores ran TF32, 1e-7 if they did not. */
static void test_tf32(rig *r)
{
    static const struct { int n, c, h, w, k, kernel, stride, pad; } cases[] = {
        {8, 64, 14, 14, 64, 3, 1, 1}, {4, 64, 28, 28, 256, 1, 1, 0}, {2, 3, 23, 23, 8, 7, 2, 3}};
    pp_error e;
    CHECK_OK(pp_device_set_math(r->gpu, PP_MATH_TF32, &e), &e);
    double seen = 0.0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_conv2d_desc d;
        CHECK_OK(pp_conv2d_desc_init(&d, cases[i].n, cases[i].c, cases[i].h, cases[i].w,
                                     cases[i].k, cases[i].kernel, cases[i].stride, cases[i].pad,
                                     &e),
                 &e);
        pair x = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, -1, 1);
        pair w = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, -0.5f, 0.5f);
        pair dy = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, -1, 1);
        pair y = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, 0, 0);
        pair dx = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, 0, 0);
        pair dw = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, 0, 0);
        pp_tensor ax = cpu_abs(r, &x.c), aw = cpu_abs(r, &w.c), ady = cpu_abs(r, &dy.c);
        pp_tensor my = cpu_zeros_like(r, &y.c), mdx = cpu_zeros_like(r, &dx.c);
        pp_tensor mdw = cpu_zeros_like(r, &dw.c);
        CHECK_OK(pp_conv2d_forward(&r->ecpu, &d, &ax, &aw, &my, &e), &e);
        CHECK_OK(pp_conv2d_backward_data(&r->ecpu, &d, &ady, &aw, &mdx, &e), &e);
        CHECK_OK(pp_conv2d_backward_filter(&r->ecpu, &d, &ax, &ady, &mdw, &e), &e);
        BOTH(r, pp_conv2d_forward(ex, &d, &x.c, &w.c, &y.c, err),
             pp_conv2d_forward(ex, &d, &x.g, &w.g, &y.g, err));
        BOTH(r, pp_conv2d_backward_data(ex, &d, &dy.c, &w.c, &dx.c, err),
             pp_conv2d_backward_data(ex, &d, &dy.g, &w.g, &dx.g, err));
        BOTH(r, pp_conv2d_backward_filter(ex, &d, &x.c, &dy.c, &dw.c, err),
             pp_conv2d_backward_filter(ex, &d, &x.g, &dy.g, &dw.g, err));
        char what[64];
        snprintf(what, sizeof what, "conv forward case %zu", i);
        seen = fmax(seen, check_tf32(r, &y, &my, what));
        snprintf(what, sizeof what, "conv backward data case %zu", i);
        seen = fmax(seen, check_tf32(r, &dx, &mdx, what));
        snprintf(what, sizeof what, "conv backward filter case %zu", i);
        seen = fmax(seen, check_tf32(r, &dw, &mdw, what));
        pp_tensor *mags[] = {&ax, &aw, &ady, &my, &mdx, &mdw};
        for (size_t k = 0; k < sizeof mags / sizeof mags[0]; k++) pp_tensor_free(mags[k]);
        pair_free(&x), pair_free(&w), pair_free(&dy), pair_free(&y), pair_free(&dx),
            pair_free(&dw);
    }
    {
        const int n = 32, in = 2048, out = 1000;
        pair x = pair_rand(r, 2, (int64_t[]){n, in}, -1, 1);
        pair w = pair_rand(r, 2, (int64_t[]){out, in}, -0.1f, 0.1f);
        pair b = pair_rand(r, 1, (int64_t[]){out}, -1, 1);
        pair dy = pair_rand(r, 2, (int64_t[]){n, out}, -1, 1);
        pair y = pair_rand(r, 2, (int64_t[]){n, out}, 0, 0);
        pair dx = pair_rand(r, 2, (int64_t[]){n, in}, 0, 0);
        pair dw = pair_rand(r, 2, (int64_t[]){out, in}, 0, 0);
        pair db = pair_rand(r, 1, (int64_t[]){out}, 0, 0);
        pp_tensor ax = cpu_abs(r, &x.c), aw = cpu_abs(r, &w.c), ab = cpu_abs(r, &b.c);
        pp_tensor ady = cpu_abs(r, &dy.c), my = cpu_zeros_like(r, &y.c);
        pp_tensor mdx = cpu_zeros_like(r, &dx.c), mdw = cpu_zeros_like(r, &dw.c);
        pp_tensor mdb = cpu_zeros_like(r, &db.c);
        CHECK_OK(pp_linear_forward(&r->ecpu, &ax, &aw, &ab, &my, &e), &e);
        CHECK_OK(pp_linear_backward(&r->ecpu, &ax, &aw, &ady, &mdx, &mdw, &mdb, &e), &e);
        BOTH(r, pp_linear_forward(ex, &x.c, &w.c, &b.c, &y.c, err),
             pp_linear_forward(ex, &x.g, &w.g, &b.g, &y.g, err));
        BOTH(r, pp_linear_backward(ex, &x.c, &w.c, &dy.c, &dx.c, &dw.c, &db.c, err),
             pp_linear_backward(ex, &x.g, &w.g, &dy.g, &dx.g, &dw.g, &db.g, err));
        seen = fmax(seen, check_tf32(r, &y, &my, "linear forward"));
        seen = fmax(seen, check_tf32(r, &dx, &mdx, "linear backward dx"));
        seen = fmax(seen, check_tf32(r, &dw, &mdw, "linear backward dw"));
        seen = fmax(seen, check_tf32(r, &db, &mdb, "linear backward db"));
        pp_tensor *mags[] = {&ax, &aw, &ab, &ady, &my, &mdx, &mdw, &mdb};
        for (size_t k = 0; k < sizeof mags / sizeof mags[0]; k++) pp_tensor_free(mags[k]);
        pair *all[] = {&x, &w, &b, &dy, &y, &dx, &dw, &db};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
    fprintf(stderr, "test_cuda_ops: tf32: largest error %.3g of the magnitudes (%s)\n", seen,
            seen > 1e-5 ? "tensor cores ran TF32" : "no TF32 rounding seen");

    /* back to fp32: as tight as the fp32 tests, on a shape measured in both modes */
    CHECK_OK(pp_device_set_math(r->gpu, PP_MATH_FP32, &e), &e);
    pp_conv2d_desc d;
    CHECK_OK(pp_conv2d_desc_init(&d, 8, 64, 14, 14, 64, 3, 1, 1, &e), &e);
    pair x = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, -1, 1);
    pair w = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, -0.5f, 0.5f);
    pair y = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, 0, 0);
    BOTH(r, pp_conv2d_forward(ex, &d, &x.c, &w.c, &y.c, err),
         pp_conv2d_forward(ex, &d, &x.g, &w.g, &y.g, err));
    CHECK_CLOSE(r, &y, TOL_FWD, "conv forward in fp32 after tf32");
    pair lx = pair_rand(r, 2, (int64_t[]){32, 2048}, -1, 1);
    pair lw = pair_rand(r, 2, (int64_t[]){1000, 2048}, -0.1f, 0.1f);
    pair lb = pair_rand(r, 1, (int64_t[]){1000}, -1, 1);
    pair ly = pair_rand(r, 2, (int64_t[]){32, 1000}, 0, 0);
    BOTH(r, pp_linear_forward(ex, &lx.c, &lw.c, &lb.c, &ly.c, err),
         pp_linear_forward(ex, &lx.g, &lw.g, &lb.g, &ly.g, err));
    CHECK_CLOSE(r, &ly, TOL_FWD, "linear forward in fp32 after tf32");
    pair *all[] = {&x, &w, &y, &lx, &lw, &lb, &ly};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
}

/* ---- the device's convolution algorithm cache -------------------------------------- */

/* One convolution in every direction on cuda:0 of a fresh registry (which
 * reads PP_CUDNN_FIND and PP_CUDNN_CACHE), against the CPU; returns the
 * device's cache statistics. With tf32 set, the device runs in tf32 mode
 * (and only the forward is compared, loosely). */
static pp_algo_stats algo_run(rig *r, const pp_conv2d_desc *d, bool two_execs, bool tf32)
{
    pp_error e;
    pp_registry *reg = NULL;
    pp_device_ctx *g = NULL;
    pp_algo_stats st;
    memset(&st, 0, sizeof st);
    CHECK_OK(pp_registry_new(&reg, &e), &e);
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &g, &e), &e);
    if (!g) {
        pp_registry_free(reg);
        return st;
    }
    if (tf32) CHECK_OK(pp_device_set_math(g, PP_MATH_TF32, &e), &e);
    rig q = *r;
    q.gpu = g;
    for (int k = 0; k < (two_execs ? 2 : 1); k++) {
        CHECK_OK(pp_exec_init(&q.egpu, g, NULL, &e), &e);
        const int64_t xs[4] = {d->n, d->c, d->h, d->w}, ws[4] = {d->k, d->c, d->r, d->s};
        const int64_t ys[4] = {d->n, d->k, d->p, d->q};
        pair px = pair_rand(&q, 4, xs, -1, 1), pw = pair_rand(&q, 4, ws, -0.5f, 0.5f);
        pair py = pair_rand(&q, 4, ys, 0, 0), pdy = pair_rand(&q, 4, ys, -1, 1);
        pair pdx = pair_rand(&q, 4, xs, -1, 1), pdw = pair_rand(&q, 4, ws, -1, 1);
        BOTH(&q, pp_conv2d_forward(ex, d, &px.c, &pw.c, &py.c, err),
             pp_conv2d_forward(ex, d, &px.g, &pw.g, &py.g, err));
        CHECK_CLOSE(&q, &py, tf32 ? 1e-2 : TOL_FWD, "cached-algorithm conv forward");
        if (!tf32) {
            /* the first backward-data call accumulates: measuring must not touch dx */
            BOTH(&q, pp_conv2d_backward_data_accumulate(ex, d, &pdy.c, &pw.c, &pdx.c, err),
                 pp_conv2d_backward_data_accumulate(ex, d, &pdy.g, &pw.g, &pdx.g, err));
            CHECK_CLOSE(&q, &pdx, TOL_BWD, "cached-algorithm conv backward data (+=)");
            BOTH(&q, pp_conv2d_backward_data(ex, d, &pdy.c, &pw.c, &pdx.c, err),
                 pp_conv2d_backward_data(ex, d, &pdy.g, &pw.g, &pdx.g, err));
            CHECK_CLOSE(&q, &pdx, TOL_BWD, "cached-algorithm conv backward data");
            BOTH(&q, pp_conv2d_backward_filter(ex, d, &px.c, &pdy.c, &pdw.c, err),
                 pp_conv2d_backward_filter(ex, d, &px.g, &pdy.g, &pdw.g, err));
            CHECK_CLOSE(&q, &pdw, TOL_BWD, "cached-algorithm conv backward filter (+=)");
        }
        pair *all[] = {&px, &pw, &py, &pdy, &pdx, &pdw};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
        pp_exec_destroy(&q.egpu);
    }
    r->rng = q.rng;
    st = pp_algo_cache_stats(&pp_cuda_dev(g)->algos);
    pp_registry_free(reg);
    return st;
}

/* Lines of a file that are neither empty nor comments. */
static int entry_lines(const char *path)
{
    size_t n;
    unsigned char *t = check_read_file(path, &n);
    int lines = 0;
    for (size_t i = 0; t && i < n; i++)
        if ((i == 0 || t[i - 1] == '\n') && t[i] != '#' && t[i] != '\n') lines++;
    free(t);
    return lines;
}

/* Algorithms are measured once per shape, direction and mode on a device and
 * shared by its execs; PP_CUDNN_CACHE keeps them for the next device context
 * (no measurement then); PP_CUDNN_FIND=0 measures nothing; a foreign cache
 * file is left alone; a bad PP_CUDNN_FIND is refused when the device opens.
 * Every run's results match the CPU. */
static void test_algo_cache(rig *r)
{
    char dir[256], path[320];
    if (!check_mkdtemp(dir, sizeof dir, "pp-cudnn-cache")) {
        CHECK(0);
        return;
    }
    snprintf(path, sizeof path, "%s/algos.txt", dir);
    const char *old_cache = getenv("PP_CUDNN_CACHE"), *old_find = getenv("PP_CUDNN_FIND");
    char *saved_cache = old_cache ? strdup(old_cache) : NULL;
    char *saved_find = old_find ? strdup(old_find) : NULL;
    pp_conv2d_desc d, d2;
    pp_error e;
    CHECK_OK(pp_conv2d_desc_init(&d, 4, 32, 15, 15, 48, 3, 1, 1, &e), &e);
    CHECK_OK(pp_conv2d_desc_init(&d2, 2, 16, 9, 9, 24, 3, 2, 1, &e), &e);

    setenv("PP_CUDNN_CACHE", path, 1);
    unsetenv("PP_CUDNN_FIND");
    /* 1. measured once (three directions), shared by a second exec, written */
    pp_algo_stats st = algo_run(r, &d, true, false);
    CHECK_MSG(st.inserted == 3 && st.hits == 3 && st.saves == 3 && st.file_entries == 0 &&
                  !st.foreign,
              "first run: inserted %d, hits %d, saves %d (%s)", st.inserted, st.hits, st.saves,
              st.save_error);
    CHECK_MSG(entry_lines(path) == 3, "cache file holds %d entries", entry_lines(path));
    /* 2. a new device context reads them: nothing measured */
    st = algo_run(r, &d, false, false);
    CHECK_MSG(st.file_entries == 3 && st.hits == 3 && st.inserted == 0 && st.bad_lines == 0,
              "second run: file entries %d, hits %d, inserted %d", st.file_entries, st.hits,
              st.inserted);
    /* 3. tf32 mode is keyed apart */
    st = algo_run(r, &d, false, true);
    CHECK_MSG(st.inserted == 1 && entry_lines(path) == 4, "tf32 run: inserted %d, %d entries",
              st.inserted, entry_lines(path));
    /* 4. heuristics only: nothing stored, results still right */
    setenv("PP_CUDNN_FIND", "0", 1);
    st = algo_run(r, &d2, false, false);
    CHECK_MSG(st.inserted == 0 && entry_lines(path) == 4, "PP_CUDNN_FIND=0: inserted %d",
              st.inserted);
    /* 5. a foreign file is neither used nor replaced */
    unsetenv("PP_CUDNN_FIND");
    static const char foreign[] = "not an algorithm cache\n";
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(foreign, f);
        fclose(f);
    }
    st = algo_run(r, &d, false, false);
    size_t n;
    unsigned char *t = check_read_file(path, &n);
    CHECK_MSG(st.foreign && st.inserted == 3 && st.saves == 0 && t && n == strlen(foreign) &&
                  memcmp(t, foreign, n) == 0,
              "foreign file: foreign %d, inserted %d, saves %d", st.foreign, st.inserted,
              st.saves);
    free(t);
    /* 6. a bad PP_CUDNN_FIND is an input error when the device opens */
    setenv("PP_CUDNN_FIND", "maybe", 1);
    pp_registry *reg;
    pp_device_ctx *g = NULL;
    CHECK_OK(pp_registry_new(&reg, &e), &e);
    pp_status s = pp_registry_get(reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &g, &e);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(e.msg, "PP_CUDNN_FIND"), "PP_CUDNN_FIND=maybe: %s",
              pp_status_name(s));
    pp_registry_free(reg);

    if (saved_cache)
        setenv("PP_CUDNN_CACHE", saved_cache, 1);
    else
        unsetenv("PP_CUDNN_CACHE");
    if (saved_find)
        setenv("PP_CUDNN_FIND", saved_find, 1);
    else
        unsetenv("PP_CUDNN_FIND");
    free(saved_cache);
    free(saved_find);
    unlink(path);
    rmdir(dir);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_delay(rig *r)
{
    pp_error err;
    CHECK_OK(pp_exec_sync(&r->egpu, &err), &err);
    double t0 = now_ms();
    CHECK_OK(pp_delay(&r->egpu, 30.0, &err), &err);
    double enq = now_ms() - t0;
    CHECK_OK(pp_exec_sync(&r->egpu, &err), &err);
    double total = now_ms() - t0;
    CHECK_MSG(enq < 10.0, "pp_delay must not block the host (%.1f ms)", enq);
    CHECK_MSG(total >= 29.0 && total < 500.0, "pp_delay(30 ms) took %.1f ms", total);
}

/* ---- steady state: no device allocation after warm-up ------------------------------ */

typedef struct step_bufs {
    pp_conv2d_desc cd;
    pp_bn_desc bd;
    pp_tensor x, w, y, dy, dx, dw, g, b, rm, rv, sm, si, z, feat, fw, fb, logits, dlogits,
        dfeat, dfw, dfb, labels, loss, correct, buf, dg, db, dxin;
} step_bufs;

static pp_status train_step(pp_exec *ex, step_bufs *t, bool first, pp_error *err)
{
    pp_sgd_desc sgd = {0.1f, 0.9f, 1e-4f, false, first};
    PP_TRY(pp_conv2d_forward(ex, &t->cd, &t->x, &t->w, &t->y, err));
    PP_TRY(pp_batchnorm_forward_train(ex, &t->bd, &t->y, &t->g, &t->b, &t->rm, &t->rv, &t->z,
                                      &t->sm, &t->si, err));
    PP_TRY(pp_relu_forward(ex, &t->z, &t->z, err));
    PP_TRY(pp_avgpool_forward(ex, &t->z, &t->feat, err));
    PP_TRY(pp_linear_forward(ex, &t->feat, &t->fw, &t->fb, &t->logits, err));
    PP_TRY(pp_softmax_xent(ex, &t->logits, &t->labels, 8.0f, &t->loss, &t->correct,
                           &t->dlogits, err));
    PP_TRY(pp_linear_backward(ex, &t->feat, &t->fw, &t->dlogits, &t->dfeat, &t->dfw, &t->dfb,
                              err));
    PP_TRY(pp_avgpool_backward(ex, &t->dfeat, &t->dy, err));
    PP_TRY(pp_relu_backward(ex, &t->z, &t->dy, &t->dy, err));
    PP_TRY(pp_batchnorm_backward(ex, &t->bd, &t->y, &t->dy, &t->g, &t->sm, &t->si, &t->dx,
                                 &t->dg, &t->db, err));
    PP_TRY(pp_conv2d_backward_data(ex, &t->cd, &t->dx, &t->w, &t->dxin, err));
    PP_TRY(pp_conv2d_backward_filter(ex, &t->cd, &t->x, &t->dx, &t->dw, err));
    PP_TRY(pp_sgd_update(ex, &sgd, &t->w, &t->dw, &t->buf, err));
    return pp_exec_sync(ex, err);
}

static void test_steady_state(rig *r)
{
    pp_error err;
    step_bufs t;
    memset(&t, 0, sizeof t);
    pp_device_ctx *g = r->gpu;
    CHECK_OK(pp_conv2d_desc_init(&t.cd, 8, 3, 32, 32, 16, 3, 1, 1, &err), &err);
    t.bd = (pp_bn_desc){8, 16, 32, 32, 1e-5f, 0.1f};
    const int64_t xs[4] = {8, 3, 32, 32}, ws[4] = {16, 3, 3, 3}, ys[4] = {8, 16, 32, 32};
    const int64_t c16[1] = {16}, f[2] = {8, 16}, fw[2] = {10, 16}, c10[1] = {10}, l[2] = {8, 10};
    struct { pp_tensor *t; int nd; const int64_t *s; pp_dtype dt; } all[] = {
        {&t.x, 4, xs, PP_F32},     {&t.w, 4, ws, PP_F32},      {&t.y, 4, ys, PP_F32},
        {&t.dy, 4, ys, PP_F32},    {&t.dx, 4, ys, PP_F32},     {&t.dw, 4, ws, PP_F32},
        {&t.g, 1, c16, PP_F32},    {&t.b, 1, c16, PP_F32},     {&t.rm, 1, c16, PP_F32},
        {&t.rv, 1, c16, PP_F32},   {&t.sm, 1, c16, PP_F32},    {&t.si, 1, c16, PP_F32},
        {&t.z, 4, ys, PP_F32},     {&t.feat, 2, f, PP_F32},    {&t.fw, 2, fw, PP_F32},
        {&t.fb, 1, c10, PP_F32},   {&t.logits, 2, l, PP_F32},  {&t.dlogits, 2, l, PP_F32},
        {&t.dfeat, 2, f, PP_F32},  {&t.dfw, 2, fw, PP_F32},    {&t.dfb, 1, c10, PP_F32},
        {&t.labels, 1, xs, PP_I32}, {&t.loss, 0, NULL, PP_F32}, {&t.correct, 0, NULL, PP_I32},
        {&t.buf, 4, ws, PP_F32},   {&t.dg, 1, c16, PP_F32},    {&t.db, 1, c16, PP_F32},
        {&t.dxin, 4, xs, PP_F32},
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        CHECK_OK(pp_tensor_zeros(all[i].t, g, all[i].dt, all[i].nd, all[i].s, &err), &err);
    float ones[16];
    for (int i = 0; i < 16; i++) ones[i] = 1.0f;
    CHECK_OK(pp_tensor_from_host(&t.g, ones, sizeof ones, &err), &err);
    CHECK_OK(pp_tensor_from_host(&t.rv, ones, sizeof ones, &err), &err);

    pp_exec ex;
    cudaStream_t cs;
    CHECK(cudaSetDevice(0) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) == cudaSuccess);
    CHECK_OK(pp_exec_init(&ex, g, cs, &err), &err);
    for (int s = 0; s < 2; s++) CHECK_OK(train_step(&ex, &t, s == 0, &err), &err);

    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
    uint64_t reserved0 = 0, high0 = 0, reserved1 = 0, high1 = 0;
    size_t free0 = 0, free1 = 0, total = 0;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved0) ==
          cudaSuccess);
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high0) == cudaSuccess);
    CHECK(cudaMemGetInfo(&free0, &total) == cudaSuccess);
    size_t in_use0 = pp_device_bytes_in_use(g);
    for (int s = 0; s < 5; s++) CHECK_OK(train_step(&ex, &t, false, &err), &err);
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved1) ==
          cudaSuccess);
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high1) == cudaSuccess);
    CHECK(cudaMemGetInfo(&free1, &total) == cudaSuccess);
    CHECK_MSG(reserved1 == reserved0 && high1 == high0,
              "steady state grew the pool: reserved %llu -> %llu, high %llu -> %llu",
              (unsigned long long)reserved0, (unsigned long long)reserved1,
              (unsigned long long)high0, (unsigned long long)high1);
    CHECK_MSG(free1 == free0, "steady state allocated device memory: free %zu -> %zu", free0,
              free1);
    CHECK(pp_device_bytes_in_use(g) == in_use0);
    float loss = NAN;
    CHECK_OK(pp_tensor_to_host(&t.loss, &loss, sizeof loss, &err), &err);
    CHECK_MSG(isfinite(loss), "steady-state loss %g", loss);

    pp_exec_destroy(&ex);
    CHECK(cudaStreamDestroy(cs) == cudaSuccess);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pp_tensor_free(all[i].t);
}

/* ---- streams, events, copies on CUDA -------------------------------------------------- */

typedef struct stream_job {
    pp_tensor *src, *dst;
    double delay_ms;
    int runs;
} stream_job;

/* delay, then dst = src (or dst += src when delay_ms < 0) */
static pp_status job_fn(pp_exec *ex, void *arg, pp_error *err)
{
    stream_job *j = arg;
    j->runs++;
    if (j->delay_ms < 0) return pp_accumulate(ex, j->src, j->dst, err);
    PP_TRY(pp_delay(ex, j->delay_ms, err));
    return pp_copy(ex, j->src, j->dst, err);
}

static pp_status failing_fn(pp_exec *ex, void *arg, pp_error *err)
{
    return pp_error_set(err, PP_ERR_INVALID, "planned failure");
}

static void test_streams(rig *r)
{
    pp_error err;
    pp_stream *s1 = NULL, *s2 = NULL, *sc = NULL;
    pp_event *ev = NULL;
    CHECK_OK(pp_stream_new(r->gpu, PP_STREAM_COMPUTE, "compute1", &s1, &err), &err);
    CHECK_OK(pp_stream_new(r->gpu, PP_STREAM_COMPUTE, "compute2", &s2, &err), &err);
    CHECK_OK(pp_stream_new(r->gpu, PP_STREAM_COPY, "copy", &sc, &err), &err);
    CHECK_OK(pp_event_new(r->gpu, &ev, &err), &err);
    if (!s1 || !s2 || !sc || !ev) return;

    enum { N = 1 << 16 };
    float *host = malloc(N * sizeof *host), *back = malloc(N * sizeof *back);
    for (int i = 0; i < N; i++) host[i] = (float)i;
    const int64_t shape[1] = {N};
    pp_tensor a, b, c, h;
    CHECK_OK(pp_tensor_zeros(&a, r->gpu, PP_F32, 1, shape, &err), &err);
    CHECK_OK(pp_tensor_zeros(&b, r->gpu, PP_F32, 1, shape, &err), &err);
    CHECK_OK(pp_tensor_zeros(&c, r->gpu, PP_F32, 1, shape, &err), &err);
    CHECK_OK(pp_tensor_alloc(&h, r->cpu, PP_F32, 1, shape, &err), &err);
    memcpy(h.data, host, N * sizeof *host);

    /* host -> device on the copy stream; compute waits; b = a after 20 ms on s1;
     * s2 waits for s1's event, then c += b; device -> host on the copy stream */
    CHECK_OK(pp_stream_copy_tensor(sc, &a, &h, "h2d", &err), &err);
    CHECK_OK(pp_event_record(ev, sc, &err), &err);
    CHECK_OK(pp_stream_wait_event(s1, ev, &err), &err);
    stream_job j1 = {&a, &b, 20.0, 0}, j2 = {&b, &c, -1.0, 0};
    CHECK_OK(pp_stream_launch(s1, "delay+copy", job_fn, &j1, &err), &err);
    CHECK_OK(pp_event_record(ev, s1, &err), &err);
    CHECK_OK(pp_stream_wait_event(s2, ev, &err), &err);
    CHECK_OK(pp_stream_launch(s2, "accumulate", job_fn, &j2, &err), &err);
    CHECK_OK(pp_event_record(ev, s2, &err), &err);
    CHECK_OK(pp_stream_wait_event(sc, ev, &err), &err);
    memset(h.data, 0, N * sizeof *host);
    CHECK_OK(pp_stream_copy_tensor(sc, &h, &c, "d2h", &err), &err);
    CHECK(j1.runs == 1 && j2.runs == 1); /* CUDA launches run fn at once on the host */
    CHECK_OK(pp_stream_synchronize(sc, &err), &err);
    bool done = false;
    CHECK_OK(pp_event_query(ev, &done, &err), &err);
    CHECK(done);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += ((float *)h.data)[i] != host[i];
    CHECK_MSG(bad == 0, "cross-stream ordering: %d of %d values wrong", bad, N);

    /* timing records: the launch on s1 spans the 20 ms delay; copies carry bytes */
    CHECK_OK(pp_stream_synchronize(s1, &err), &err);
    const pp_stream_record *recs;
    size_t nrec = 0;
    CHECK_OK(pp_stream_records(s1, &recs, &nrec, &err), &err);
    CHECK(nrec == 1);
    if (nrec == 1) {
        double ms = (double)(recs[0].end_ns - recs[0].start_ns) / 1e6;
        CHECK_MSG(ms >= 19.0 && ms < 200.0, "launch record spans %.2f ms, expected ~20", ms);
        CHECK(recs[0].kind == PP_RECORD_LAUNCH && strcmp(recs[0].label, "delay+copy") == 0);
        CHECK(recs[0].end_ns <= pp_stream_clock_ns());
    }
    CHECK_OK(pp_stream_records(sc, &recs, &nrec, &err), &err);
    CHECK(nrec == 2);
    if (nrec == 2)
        CHECK(recs[0].kind == PP_RECORD_COPY && recs[0].bytes == N * sizeof(float) &&
              recs[1].start_ns >= recs[0].end_ns - 1000);
    pp_stream_records_clear(sc);
    CHECK_OK(pp_stream_records(sc, &recs, &nrec, &err), &err);
    CHECK(nrec == 0);

    /* sticky errors: the failing item's message, later items skipped, then cleared */
    stream_job j3 = {&a, &b, 0.0, 0};
    CHECK_OK(pp_stream_launch(s2, "bad", failing_fn, NULL, &err), &err);
    CHECK_OK(pp_stream_launch(s2, "skipped", job_fn, &j3, &err), &err);
    pp_status st = pp_stream_synchronize(s2, &err);
    CHECK(st == PP_ERR_INVALID && strstr(err.msg, "planned failure") != NULL);
    CHECK(j3.runs == 0);
    pp_stream_clear_error(s2);
    CHECK_OK(pp_stream_synchronize(s2, &err), &err);

    /* a peer copy when a second GPU is visible */
    if (pp_cuda_device_count() > 1) {
        pp_device_ctx *g1;
        pp_tensor d;
        CHECK_OK(pp_registry_get(r->reg, (pp_device_id){PP_DEVICE_CUDA, 1}, &g1, &err), &err);
        CHECK_OK(pp_tensor_zeros(&d, g1, PP_F32, 1, shape, &err), &err);
        CHECK_OK(pp_stream_copy_tensor(sc, &d, &a, "peer", &err), &err);
        CHECK_OK(pp_stream_synchronize(sc, &err), &err);
        CHECK_OK(pp_tensor_to_host(&d, back, N * sizeof *back, &err), &err);
        CHECK(memcmp(back, host, N * sizeof *back) == 0);
        pp_tensor_free(&d);
    }

    pp_event_free(ev);
    pp_stream_free(s1);
    pp_stream_free(s2);
    pp_stream_free(sc);
    pp_tensor_free(&a), pp_tensor_free(&b), pp_tensor_free(&c), pp_tensor_free(&h);
    free(host);
    free(back);
}

static pp_status noop_fn(pp_exec *ex, void *arg, pp_error *err)
{
    return PP_OK;
}

/* Timing-event recycling: 64 items on a fresh stream fill its spare-event list
 * exactly; records() then adds its reference event, which records_clear() must
 * still have room for. And an event of one GPU recorded on another GPU's stream
 * (stream.h allows it; CUDA records an event only on its own device's streams). */
static void test_stream_events_reuse(rig *r)
{
    pp_error err;
    pp_stream *s = NULL;
    CHECK_OK(pp_stream_new(r->gpu, PP_STREAM_COMPUTE, "records", &s, &err), &err);
    if (!s) return;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 64; i++)
            CHECK_OK(pp_stream_launch(s, "noop", noop_fn, NULL, &err), &err);
        CHECK_OK(pp_stream_synchronize(s, &err), &err);
        const pp_stream_record *recs;
        size_t n = 0;
        CHECK_OK(pp_stream_records(s, &recs, &n, &err), &err);
        CHECK_MSG(n == 64, "round %d: %zu records, expected 64", round, n);
        pp_stream_records_clear(s);
    }

    if (pp_cuda_device_count() > 1) {
        pp_device_ctx *g1;
        pp_stream *s1 = NULL;
        pp_event *ev = NULL;
        CHECK_OK(pp_registry_get(r->reg, (pp_device_id){PP_DEVICE_CUDA, 1}, &g1, &err), &err);
        CHECK_OK(pp_stream_new(g1, PP_STREAM_COMPUTE, "gpu1", &s1, &err), &err);
        CHECK_OK(pp_event_new(r->gpu, &ev, &err), &err);
        if (s1 && ev) {
            CHECK_OK(pp_stream_launch(s1, "noop", noop_fn, NULL, &err), &err);
            CHECK_OK(pp_event_record(ev, s1, &err), &err);
            CHECK_OK(pp_stream_wait_event(s, ev, &err), &err);
            CHECK_OK(pp_stream_synchronize(s, &err), &err);
            CHECK_OK(pp_event_synchronize(ev, &err), &err);
            bool done = false;
            CHECK_OK(pp_event_query(ev, &done, &err), &err);
            CHECK(done);
            CHECK_OK(pp_event_record(ev, s, &err), &err); /* and back to its own device */
            CHECK_OK(pp_event_synchronize(ev, &err), &err);
        }
        pp_event_free(ev);
        pp_stream_free(s1);
    }
    pp_stream_free(s);
}

/* ---- errors ---------------------------------------------------------------------- */

static void test_errors(rig *r)
{
    pp_error err;
    void *p = (void *)1;
    pp_status s = pp_device_alloc(r->gpu, (size_t)1 << 52, &p, &err);
    CHECK_MSG(s == PP_ERR_OOM, "huge allocation: %s (%s)", pp_status_name(s), err.msg);
    CHECK(p == NULL);
    CHECK_MSG(strstr(err.msg, "cuda:0") && strstr(err.msg, "cudaMallocAsync") &&
                  strstr(err.msg, ".c:"),
              "message names device, call and file:line: %s", err.msg);
    pp_device_ctx *none;
    s = pp_registry_get(r->reg, (pp_device_id){PP_DEVICE_CUDA, pp_cuda_device_count()}, &none,
                        &err);
    CHECK(s == PP_ERR_INPUT);
}

int main(void)
{
    if (pp_cuda_device_count() == 0) {
        fprintf(stderr, "test_cuda_ops: no CUDA device visible, skipping\n");
        return 77;
    }
    rig r = {.rng = 12345};
    pp_error err;
    CHECK_OK(pp_registry_new(&r.reg, &err), &err);
    CHECK_OK(pp_registry_get(r.reg, (pp_device_id){PP_DEVICE_CPU, 0}, &r.cpu, &err), &err);
    CHECK_OK(pp_registry_get(r.reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &r.gpu, &err), &err);
    if (check_failures_) return check_summary("test_cuda_ops");
    CHECK_OK(pp_exec_init(&r.ecpu, r.cpu, NULL, &err), &err);
    CHECK_OK(pp_exec_init(&r.egpu, r.gpu, NULL, &err), &err);

    test_conv(&r);
    test_tf32(&r);
    test_algo_cache(&r);
    test_batchnorm(&r);
    test_pool(&r);
    test_elementwise(&r);
    test_linear(&r);
    test_softmax_xent(&r);
    test_sgd(&r);
    test_sgd_multi(&r);
    test_zero_multi(&r);
    test_delay(&r);
    test_steady_state(&r);
    test_streams(&r);
    test_stream_events_reuse(&r);
    test_errors(&r);

    pp_exec_destroy(&r.ecpu);
    pp_exec_destroy(&r.egpu);
    pp_registry_free(r.reg);
    return check_summary("test_cuda_ops");
}
