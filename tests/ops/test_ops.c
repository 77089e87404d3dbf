/*
 * test_ops.c - the CPU backend's convolution, batch norm, pooling,
 * per-channel bias and host copies through the checked API
 * (runtime/core/ops.h): forward against naive double-precision references,
 * backward against central finite differences of those references, the
 * accumulate (+=) contract of parameter gradients, batch norm running
 * statistics, determinism. Linear, softmax cross-entropy, the += contract
 * of every weight gradient and the boundary checks: test_ops_linear.c; the
 * elementwise ops, SGD and the math mode: test_ops_elementwise.c.
 *
 * Tensors live on cpu:0, whose memory is host memory, so the test reads and
 * writes tensor data directly.
 */
#include <cblas.h>

#include "tests/ops/op_check.h"

/* ---- convolution ------------------------------------------------------------ */

static void ref_conv(const pp_conv2d_desc *d, const double *x, const double *w, double *y)
{
    for (int n = 0; n < d->n; n++)
        for (int k = 0; k < d->k; k++)
            for (int p = 0; p < d->p; p++)
                for (int q = 0; q < d->q; q++) {
                    double s = 0.0;
                    for (int c = 0; c < d->c; c++)
                        for (int r = 0; r < d->r; r++)
                            for (int t = 0; t < d->s; t++) {
                                int ih = p * d->stride_h - d->pad_h + r;
                                int iw = q * d->stride_w - d->pad_w + t;
                                if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w) continue;
                                s += x[(((size_t)n * d->c + c) * d->h + ih) * d->w + iw] *
                                     w[(((size_t)k * d->c + c) * d->r + r) * d->s + t];
                            }
                    y[(((size_t)n * d->k + k) * d->p + p) * d->q + q] = s;
                }
}

/* sum over y of |x| * |w| per output: the scale of the forward rounding error */
static void ref_conv_abs(const pp_conv2d_desc *d, const double *x, const double *w, double *y)
{
    size_t nx = (size_t)d->n * d->c * d->h * d->w, nw = (size_t)d->k * d->c * d->r * d->s;
    double *ax = dalloc(nx), *aw = dalloc(nw);
    for (size_t i = 0; i < nx; i++) ax[i] = fabs(x[i]);
    for (size_t i = 0; i < nw; i++) aw[i] = fabs(w[i]);
    ref_conv(d, ax, aw, y);
    free(ax);
    free(aw);
}

typedef struct conv_ctx {
    const pp_conv2d_desc *d;
    double *x, *w, *r, *y;
    size_t ny;
} conv_ctx;

static double conv_loss(void *p)
{
    conv_ctx *c = p;
    ref_conv(c->d, c->x, c->w, c->y);
    return dot_r(c->y, c->r, c->ny);
}

typedef struct conv_case {
    int n, c, h, w, k, r, s, sh, sw, ph, pw;
    const char *what;
} conv_case;

static void test_conv(void)
{
    /* Covers the code paths of conv2d.c: one sample per GEMM when P*Q >= 1024
     * (pointwise 1x1/1 convs as a direct GEMM on the input, others through
     * im2col), and several samples per GEMM when P*Q is small (pointwise or
     * not), including a last partial group (45 = 41 + 4 samples). */
    static const conv_case cases[] = {
        {2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1, "3x3/1 pad 1, non-square input"},
        {2, 3, 9, 7, 5, 3, 3, 2, 2, 1, 1, "3x3/2 pad 1"},
        {1, 3, 13, 11, 4, 7, 7, 2, 2, 3, 3, "7x7/2 pad 3 (stem)"},
        {3, 5, 6, 5, 6, 1, 1, 1, 1, 0, 0, "1x1/1 pointwise, grouped"},
        {2, 4, 7, 7, 3, 1, 1, 2, 2, 0, 0, "1x1/2 downsample"},
        {2, 2, 5, 8, 3, 3, 3, 1, 1, 2, 2, "3x3/1 pad 2"},
        {1, 2, 4, 5, 2, 3, 3, 1, 1, 3, 3, "3x3/1 pad 3 (all-padding rows)"},
        {2, 3, 11, 10, 4, 7, 7, 1, 1, 0, 0, "7x7/1 no padding"},
        {1, 2, 9, 9, 3, 3, 1, 2, 1, 1, 0, "3x1 kernel, strides 2x1"},
        {2, 2, 34, 33, 3, 3, 3, 1, 1, 1, 1, "3x3/1, P*Q >= 1024 (one sample per GEMM)"},
        {2, 3, 40, 30, 4, 1, 1, 1, 1, 0, 0, "1x1/1 with H*W >= 1024 (direct GEMM)"},
        {45, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1, "3x3/1, 45 samples of 5x5 (grouped GEMMs)"},
        {3, 4, 8, 6, 5, 3, 3, 2, 2, 0, 0, "3x3/2 no padding, odd output"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const conv_case *cc = &cases[ci];
        pp_conv2d_desc d = {cc->n, cc->c, cc->h, cc->w, cc->k, cc->r, cc->s, cc->sh, cc->sw,
                            cc->ph, cc->pw, 0, 0};
        d.p = (d.h + 2 * d.pad_h - d.r) / d.stride_h + 1;
        d.q = (d.w + 2 * d.pad_w - d.s) / d.stride_w + 1;
        pp_error err;
        char name[128];

        pp_tensor x = tnew(4, d.n, d.c, d.h, d.w), w = tnew(4, d.k, d.c, d.r, d.s);
        pp_tensor y = tnew(4, d.n, d.k, d.p, d.q), y2 = tnew(4, d.n, d.k, d.p, d.q);
        pp_tensor dy = tnew(4, d.n, d.k, d.p, d.q), dx = tnew(4, d.n, d.c, d.h, d.w);
        pp_tensor dw = tnew(4, d.k, d.c, d.r, d.s);
        size_t nx = numel(&x), nw = numel(&w), ny = numel(&y);
        double *xd = fill(&x, 0.0, 1.0), *wd = fill(&w, 0.0, 1.0), *rd = fill(&dy, 0.0, 1.0);
        double *dw0 = fill(&dw, 0.0, 1.0);
        double *yref = dalloc(ny), *yabs = dalloc(ny);

        /* forward: each output is a sum of K = C*R*S products; recursive float
         * summation errs by at most K * 2^-24 of sum |x||w| (plus one rounding
         * of each product), so allow (K + 2) * 2^-24 of that sum. */
        CHECK_OK(pp_conv2d_forward(&g_ex, &d, &x, &w, &y, &err), &err);
        ref_conv(&d, xd, wd, yref);
        ref_conv_abs(&d, xd, wd, yabs);
        double bound = (double)(d.c * d.r * d.s + 2) * ldexp(1.0, -24);
        size_t bad = 0, first_bad = 0;
        for (size_t i = 0; i < ny; i++)
            if (!(fabs((double)fp(&y)[i] - yref[i]) <= bound * yabs[i] + 1e-30)) {
                if (!bad) first_bad = i;
                bad++;
            }
        CHECK_MSG(bad == 0, "conv forward [%s]: %zu outputs off, first #%zu: %.9g vs %.9g",
                  cc->what, bad, first_bad, (double)fp(&y)[first_bad], yref[first_bad]);
        CHECK_OK(pp_conv2d_forward(&g_ex, &d, &x, &w, &y2, &err), &err);
        CHECK_MSG(memcmp(y.data, y2.data, ny * sizeof(float)) == 0,
                  "conv forward [%s] is not deterministic", cc->what);

        /* backward against finite differences of L = sum(y * r), r = dy */
        conv_ctx ctx = {&d, xd, wd, rd, dalloc(ny), ny};
        double *g = dalloc(nx > nw ? nx : nw);
        unsigned char *mask = malloc(nx > nw ? nx : nw);

        memset(dx.data, 0x7f, nx * sizeof(float)); /* overwritten, not accumulated */
        CHECK_OK(pp_conv2d_backward_data(&g_ex, &d, &dy, &w, &dx, &err), &err);
        fd_grad(conv_loss, &ctx, xd, nx, 1e-3, g, mask);
        snprintf(name, sizeof name, "conv dx [%s]", cc->what);
        check_grad(name, fp(&dx), NULL, g, mask, nx);

        /* dw starts at dw0: backward-filter must add to it */
        CHECK_OK(pp_conv2d_backward_filter(&g_ex, &d, &x, &dy, &dw, &err), &err);
        fd_grad(conv_loss, &ctx, wd, nw, 1e-3, g, mask);
        snprintf(name, sizeof name, "conv dw += [%s]", cc->what);
        check_grad(name, fp(&dw), dw0, g, mask, nw);
        /* a second call adds the same gradient again */
        for (size_t i = 0; i < nw; i++) dw0[i] += g[i];
        CHECK_OK(pp_conv2d_backward_filter(&g_ex, &d, &x, &dy, &dw, &err), &err);
        snprintf(name, sizeof name, "conv dw twice [%s]", cc->what);
        check_grad(name, fp(&dw), dw0, g, mask, nw);

        free(ctx.y);
        free(g);
        free(mask);
        free(xd);
        free(wd);
        free(rd);
        free(dw0);
        free(yref);
        free(yabs);
        pp_tensor_free(&x);
        pp_tensor_free(&w);
        pp_tensor_free(&y);
        pp_tensor_free(&y2);
        pp_tensor_free(&dy);
        pp_tensor_free(&dx);
        pp_tensor_free(&dw);
    }
}

/* Repeated calls give the same bits, with one OpenBLAS thread and with two,
 * on shapes big enough for OpenBLAS to use its threads. (Different thread
 * counts may round differently: OpenBLAS picks its kernels by thread count.) */
static void test_conv_repeat(void)
{
    static const int shapes[][6] = {
        /* n, c, hw, k, kernel, stride */
        {4, 64, 28, 96, 3, 1}, {2, 32, 30, 64, 1, 1}, {16, 96, 7, 200, 1, 1}, {3, 16, 20, 48, 7, 2},
    };
    int threads = openblas_get_num_threads();
    for (int nt = 1; nt <= 2; nt++) {
        openblas_set_num_threads(nt);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int *sh = shapes[si];
            pp_conv2d_desc d;
            pp_error err;
            CHECK_OK(pp_conv2d_desc_init(&d, sh[0], sh[1], sh[2], sh[2], sh[3], sh[4], sh[5],
                                         sh[4] / 2, &err),
                     &err);
            pp_tensor x = tnew(4, d.n, d.c, d.h, d.w), w = tnew(4, d.k, d.c, d.r, d.s);
            pp_tensor dy = tnew(4, d.n, d.k, d.p, d.q);
            free(fill(&x, 0, 1));
            free(fill(&w, 0, 1));
            free(fill(&dy, 0, 1));
            pp_tensor out[2][3];
            for (int t = 0; t < 2; t++) {
                out[t][0] = tnew(4, d.n, d.k, d.p, d.q);
                out[t][1] = tnew(4, d.n, d.c, d.h, d.w);
                out[t][2] = tnew(4, d.k, d.c, d.r, d.s);
                CHECK_OK(pp_conv2d_forward(&g_ex, &d, &x, &w, &out[t][0], &err), &err);
                CHECK_OK(pp_conv2d_backward_data(&g_ex, &d, &dy, &w, &out[t][1], &err), &err);
                CHECK_OK(pp_conv2d_backward_filter(&g_ex, &d, &x, &dy, &out[t][2], &err), &err);
            }
            for (int o = 0; o < 3; o++)
                CHECK_MSG(memcmp(out[0][o].data, out[1][o].data, pp_tensor_bytes(&out[0][o])) == 0,
                          "conv shape %zu op %d, %d threads: repeated calls differ", si, o, nt);
            for (int t = 0; t < 2; t++)
                for (int o = 0; o < 3; o++) pp_tensor_free(&out[t][o]);
            pp_tensor_free(&x);
            pp_tensor_free(&w);
            pp_tensor_free(&dy);
        }
    }
    openblas_set_num_threads(threads);
}

/* dx += conv_transpose(dy, w) gives the bits of backward-data into a
 * temporary and then accumulate, on every code path of conv2d.c (im2col and
 * col2im per sample or per group of samples, pointwise direct or grouped),
 * whatever dx held before. */
static void test_conv_backward_data_accumulate(void)
{
    static const int shapes[][8] = {
        /* n, c, h, w, k, kernel, stride, pad */
        {2, 3, 7, 9, 4, 3, 1, 1},   {2, 2, 34, 33, 3, 3, 1, 1}, {45, 2, 5, 5, 3, 3, 1, 1},
        {3, 5, 6, 5, 6, 1, 1, 0},   {2, 3, 40, 30, 4, 1, 1, 0}, {2, 4, 7, 7, 3, 1, 2, 0},
        {1, 3, 13, 11, 4, 7, 2, 3}, {2, 32, 30, 30, 64, 1, 1, 0}, {16, 96, 7, 7, 200, 1, 1, 0},
        {4, 64, 28, 28, 96, 3, 1, 1},
    };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int *sh = shapes[si];
        pp_conv2d_desc d;
        pp_error err;
        CHECK_OK(pp_conv2d_desc_init(&d, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], sh[7],
                                     &err),
                 &err);
        pp_tensor w = tnew(4, d.k, d.c, d.r, d.s), dy = tnew(4, d.n, d.k, d.p, d.q);
        pp_tensor dx = tnew(4, d.n, d.c, d.h, d.w), want = tnew(4, d.n, d.c, d.h, d.w);
        pp_tensor got = tnew(4, d.n, d.c, d.h, d.w);
        free(fill(&w, 0, 1));
        free(fill(&dy, 0, 1));
        free(fill(&want, 0, 2)); /* what dx held before */
        memcpy(got.data, want.data, pp_tensor_bytes(&want));
        CHECK_OK(pp_conv2d_backward_data(&g_ex, &d, &dy, &w, &dx, &err), &err);
        CHECK_OK(pp_accumulate(&g_ex, &dx, &want, &err), &err);
        CHECK_OK(pp_conv2d_backward_data_accumulate(&g_ex, &d, &dy, &w, &got, &err), &err);
        CHECK_MSG(memcmp(got.data, want.data, pp_tensor_bytes(&want)) == 0,
                  "conv backward-data accumulate, shape %zu: differs from backward-data + "
                  "accumulate",
                  si);
        pp_tensor *ts[] = {&w, &dy, &dx, &want, &got};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- batch norm ------------------------------------------------------------- */

typedef struct bn_ctx {
    const pp_bn_desc *d;
    double *x, *gamma, *beta, *r, *y;
    size_t ny;
} bn_ctx;

/* Training-mode batch norm in double; optionally returns mean and biased variance. */
static void ref_bn(const pp_bn_desc *d, const double *x, const double *gamma, const double *beta,
                   double *y, double *mean_out, double *var_out)
{
    size_t hw = (size_t)d->h * d->w;
    double m = (double)d->n * (double)hw;
    for (int c = 0; c < d->c; c++) {
        double s = 0.0, sq = 0.0;
        for (int n = 0; n < d->n; n++)
            for (size_t i = 0; i < hw; i++) s += x[((size_t)n * d->c + c) * hw + i];
        double mean = s / m;
        for (int n = 0; n < d->n; n++)
            for (size_t i = 0; i < hw; i++) {
                double t = x[((size_t)n * d->c + c) * hw + i] - mean;
                sq += t * t;
            }
        double var = sq / m, invstd = 1.0 / sqrt(var + d->eps);
        if (mean_out) mean_out[c] = mean;
        if (var_out) var_out[c] = var;
        for (int n = 0; n < d->n; n++)
            for (size_t i = 0; i < hw; i++) {
                size_t o = ((size_t)n * d->c + c) * hw + i;
                y[o] = (x[o] - mean) * invstd * gamma[c] + beta[c];
            }
    }
}

static double bn_loss(void *p)
{
    bn_ctx *c = p;
    ref_bn(c->d, c->x, c->gamma, c->beta, c->y, NULL, NULL);
    return dot_r(c->y, c->r, c->ny);
}

static void test_batchnorm(void)
{
    static const struct {
        int n, c, h, w;
        double offset;
    } cases[] = {
        {2, 3, 4, 5, 0.0}, {1, 2, 3, 3, 2.0}, {4, 2, 1, 1, -1.0}, {3, 4, 7, 6, 3.0},
        {2, 1, 9, 11, 0.5},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        pp_bn_desc d = {cases[ci].n, cases[ci].c, cases[ci].h, cases[ci].w, 1e-5f, 0.1f};
        pp_error err;
        char name[96];
        snprintf(name, sizeof name, "bn %dx%dx%dx%d", d.n, d.c, d.h, d.w);
        pp_tensor x = tnew(4, d.n, d.c, d.h, d.w), y = tnew(4, d.n, d.c, d.h, d.w);
        pp_tensor y2 = tnew(4, d.n, d.c, d.h, d.w);
        pp_tensor dy = tnew(4, d.n, d.c, d.h, d.w), dx = tnew(4, d.n, d.c, d.h, d.w);
        pp_tensor gamma = tnew(1, d.c, 1, 1, 1), beta = tnew(1, d.c, 1, 1, 1);
        pp_tensor rm = tnew(1, d.c, 1, 1, 1), rv = tnew(1, d.c, 1, 1, 1);
        pp_tensor sm = tnew(1, d.c, 1, 1, 1), si = tnew(1, d.c, 1, 1, 1);
        pp_tensor dg = tnew(1, d.c, 1, 1, 1), db = tnew(1, d.c, 1, 1, 1);
        size_t nx = numel(&x), nc = (size_t)d.c;
        double *xd = fill(&x, cases[ci].offset, 1.0), *gd = fill(&gamma, 1.0, 0.5);
        double *bd = fill(&beta, 0.0, 0.5), *rd = fill(&dy, 0.0, 1.0);
        double *rm0 = fill(&rm, 0.0, 1.0), *rv0 = fill(&rv, 1.5, 0.5);
        double *dg0 = fill(&dg, 0.0, 1.0), *db0 = fill(&db, 0.0, 1.0);
        double *yref = dalloc(nx), *mean = dalloc(nc), *var = dalloc(nc), *want = dalloc(nc);

        CHECK_OK(pp_batchnorm_forward_train(&g_ex, &d, &x, &gamma, &beta, &rm, &rv, &y, &sm, &si,
                                            &err),
                 &err);
        ref_bn(&d, xd, gd, bd, yref, mean, var);
        /* y = x * alpha + beta' in float: a few roundings of values of size
         * |x * alpha| <= ~10 here, so 1e-5 of the output scale is generous. */
        check_close(name, fp(&y), yref, nx, 1e-5);
        check_close("bn save_mean", fp(&sm), mean, nc, 1e-6);
        for (size_t c = 0; c < nc; c++) want[c] = 1.0 / sqrt(var[c] + 1e-5);
        check_close("bn save_invstd", fp(&si), want, nc, 1e-6);
        /* running = 0.9 * running + 0.1 * batch, with the unbiased variance */
        double m = (double)d.n * d.h * d.w;
        for (size_t c = 0; c < nc; c++) want[c] = 0.9 * rm0[c] + 0.1 * mean[c];
        check_close("bn running_mean", fp(&rm), want, nc, 1e-6);
        for (size_t c = 0; c < nc; c++) want[c] = 0.9 * rv0[c] + 0.1 * var[c] * m / (m - 1.0);
        check_close("bn running_var", fp(&rv), want, nc, 1e-6);

        /* determinism: the same call on the same inputs gives the same bits */
        float *rm1 = malloc(nc * sizeof(float)), *rv1 = malloc(nc * sizeof(float));
        memcpy(rm1, rm.data, nc * sizeof(float));
        memcpy(rv1, rv.data, nc * sizeof(float));
        for (size_t c = 0; c < nc; c++) {
            fp(&rm)[c] = (float)rm0[c];
            fp(&rv)[c] = (float)rv0[c];
        }
        CHECK_OK(pp_batchnorm_forward_train(&g_ex, &d, &x, &gamma, &beta, &rm, &rv, &y2, &sm, &si,
                                            &err),
                 &err);
        CHECK_MSG(memcmp(y.data, y2.data, nx * sizeof(float)) == 0 &&
                      memcmp(rm.data, rm1, nc * sizeof(float)) == 0 &&
                      memcmp(rv.data, rv1, nc * sizeof(float)) == 0,
                  "%s: forward is not deterministic", name);
        free(rm1);
        free(rv1);

        /* backward: dx =, dgamma +=, dbeta += against finite differences */
        bn_ctx ctx = {&d, xd, gd, bd, rd, dalloc(nx), nx};
        double *g = dalloc(nx);
        unsigned char *mask = malloc(nx);
        CHECK_OK(pp_batchnorm_backward(&g_ex, &d, &x, &dy, &gamma, &sm, &si, &dx, &dg, &db, &err),
                 &err);
        fd_grad(bn_loss, &ctx, xd, nx, 1e-5, g, mask);
        check_grad("bn dx", fp(&dx), NULL, g, mask, nx);
        fd_grad(bn_loss, &ctx, gd, nc, 1e-5, g, mask);
        check_grad("bn dgamma +=", fp(&dg), dg0, g, mask, nc);
        fd_grad(bn_loss, &ctx, bd, nc, 1e-5, g, mask);
        check_grad("bn dbeta +=", fp(&db), db0, g, mask, nc);

        /* inference uses the running statistics */
        for (size_t c = 0; c < nc; c++) {
            double inv = 1.0 / sqrt((double)fp(&rv)[c] + 1e-5);
            for (int n = 0; n < d.n; n++)
                for (int i = 0; i < d.h * d.w; i++) {
                    size_t o = ((size_t)n * d.c + c) * d.h * d.w + i;
                    yref[o] = (xd[o] - fp(&rm)[c]) * inv * gd[c] + bd[c];
                }
        }
        CHECK_OK(pp_batchnorm_forward_infer(&g_ex, &d, &x, &gamma, &beta, &rm, &rv, &y, &err),
                 &err);
        check_close("bn infer", fp(&y), yref, nx, 1e-5);

        free(ctx.y);
        free(g);
        free(mask);
        double *arrs[] = {xd, gd, bd, rd, rm0, rv0, dg0, db0, yref, mean, var, want};
        for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) free(arrs[i]);
        pp_tensor *ts[] = {&x, &y, &y2, &dy, &dx, &gamma, &beta, &rm, &rv, &sm, &si, &dg, &db};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- pooling ------------------------------------------------------------------ */

typedef struct pool_ctx {
    const pp_pool_desc *d;
    double *x, *r, *y;
    size_t ny;
} pool_ctx;

static void ref_maxpool(const pp_pool_desc *d, const double *x, double *y, int32_t *idx)
{
    for (int pl = 0; pl < d->n * d->c; pl++)
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++) {
                double m = -INFINITY;
                int best = -1;
                for (int i = 0; i < d->kernel; i++)
                    for (int j = 0; j < d->kernel; j++) {
                        int ih = p * d->stride - d->pad + i, iw = q * d->stride - d->pad + j;
                        if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w) continue;
                        double v = x[((size_t)pl * d->h + ih) * d->w + iw];
                        if (v > m || isnan(v)) { /* PyTorch's rule: the last NaN wins */
                            m = v;
                            best = ih * d->w + iw;
                        }
                    }
                size_t o = ((size_t)pl * d->p + p) * d->q + q;
                y[o] = m;
                if (idx) idx[o] = best;
            }
}

static double maxpool_loss(void *p)
{
    pool_ctx *c = p;
    ref_maxpool(c->d, c->x, c->y, NULL);
    return dot_r(c->y, c->r, c->ny);
}

static void test_maxpool(void)
{
    static const struct {
        int n, c, h, w, kernel, stride, pad;
        int fill_kind; /* 0 random, 1 all equal (ties), 2 all negative, 3 with NaNs */
    } cases[] = {
        {2, 3, 9, 8, 3, 2, 1, 0}, {1, 2, 7, 7, 2, 2, 0, 0}, {1, 1, 5, 6, 3, 1, 1, 0},
        {2, 2, 6, 5, 1, 1, 0, 0}, {1, 2, 10, 7, 3, 3, 1, 0}, {1, 2, 6, 7, 3, 2, 1, 1},
        {1, 2, 5, 5, 3, 2, 1, 2}, {1, 1, 6, 6, 3, 1, 1, 3},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        pp_pool_desc d;
        pp_error err;
        CHECK_OK(pp_pool_desc_init(&d, cases[ci].n, cases[ci].c, cases[ci].h, cases[ci].w,
                                   cases[ci].kernel, cases[ci].stride, cases[ci].pad, &err),
                 &err);
        pp_tensor x = tnew(4, d.n, d.c, d.h, d.w), y = tnew(4, d.n, d.c, d.p, d.q);
        pp_tensor idx = tnew_on(g_dev, PP_I32, 4, d.n, d.c, d.p, d.q);
        pp_tensor dy = tnew(4, d.n, d.c, d.p, d.q), dx = tnew(4, d.n, d.c, d.h, d.w);
        size_t nx = numel(&x), ny = numel(&y);
        double *xd = fill(&x, 0.0, 1.0), *rd = fill(&dy, 0.0, 1.0);
        if (cases[ci].fill_kind == 1)
            for (size_t i = 0; i < nx; i++) xd[i] = fp(&x)[i] = 0.25f;
        if (cases[ci].fill_kind == 2)
            for (size_t i = 0; i < nx; i++) xd[i] = fp(&x)[i] = (float)(-1.5 - 0.5 * urand());
        if (cases[ci].fill_kind == 3) /* two NaNs sharing some windows */
            for (size_t i = 7; i <= 8; i++) xd[i] = fp(&x)[i] = NAN;
        double *yref = dalloc(ny);
        int32_t *iref = calloc(ny, sizeof(int32_t));
        ref_maxpool(&d, xd, yref, iref);
        CHECK_OK(pp_maxpool_forward(&g_ex, &d, &x, &y, &idx, &err), &err);
        size_t bad = 0;
        for (size_t i = 0; i < ny; i++)
            bad += ((double)fp(&y)[i] != yref[i] && !(isnan(fp(&y)[i]) && isnan(yref[i]))) ||
                   ((int32_t *)idx.data)[i] != iref[i];
        CHECK_MSG(bad == 0, "maxpool case %zu: %zu outputs or indices differ", ci, bad);

        memset(dx.data, 0x7f, nx * sizeof(float));
        CHECK_OK(pp_maxpool_backward(&g_ex, &d, &x, &y, &dy, &idx, &dx, &err), &err);
        if (cases[ci].fill_kind == 1 || cases[ci].fill_kind == 3) {
            /* ties (NaNs): all gradient goes to the first (last NaN) element of each window */
            double *want = dalloc(nx);
            for (size_t i = 0; i < ny; i++)
                want[(i / ((size_t)d.p * d.q)) * d.h * d.w + (size_t)iref[i]] += rd[i];
            check_close("maxpool ties dx", fp(&dx), want, nx, 1e-6);
            free(want);
        } else {
            pool_ctx ctx = {&d, xd, rd, dalloc(ny), ny};
            double *g = dalloc(nx);
            unsigned char *mask = malloc(nx);
            fd_grad(maxpool_loss, &ctx, xd, nx, 1e-6, g, mask);
            check_grad("maxpool dx", fp(&dx), NULL, g, mask, nx);
            free(ctx.y);
            free(g);
            free(mask);
        }
        free(xd);
        free(rd);
        free(yref);
        free(iref);
        pp_tensor *ts[] = {&x, &y, &idx, &dy, &dx};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

static void test_avgpool(void)
{
    static const int cases[][4] = {{2, 3, 5, 7}, {1, 4, 1, 1}, {2, 2, 7, 7}, {3, 5, 3, 11}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int n = cases[ci][0], c = cases[ci][1], h = cases[ci][2], w = cases[ci][3];
        pp_error err;
        pp_tensor x = tnew(4, n, c, h, w), y = tnew(2, n, c, 1, 1);
        pp_tensor dy = tnew(2, n, c, 1, 1), dx = tnew(4, n, c, h, w);
        double *xd = fill(&x, 0.5, 1.0), *rd = fill(&dy, 0.0, 1.0);
        size_t planes = (size_t)n * c, hw = (size_t)h * w;
        double *want = dalloc(planes), *gwant = dalloc(planes * hw);
        for (size_t p = 0; p < planes; p++) {
            for (size_t i = 0; i < hw; i++) want[p] += xd[p * hw + i];
            want[p] /= (double)hw;
            /* L = sum_p y_p r_p is linear: dL/dx = r_p / hw exactly */
            for (size_t i = 0; i < hw; i++) gwant[p * hw + i] = rd[p] / (double)hw;
        }
        CHECK_OK(pp_avgpool_forward(&g_ex, &x, &y, &err), &err);
        check_close("avgpool forward", fp(&y), want, planes, 1e-6);
        CHECK_OK(pp_avgpool_backward(&g_ex, &dy, &dx, &err), &err);
        check_close("avgpool backward", fp(&dx), gwant, planes * hw, 1e-6);
        free(xd);
        free(rd);
        free(want);
        free(gwant);
        pp_tensor *ts[] = {&x, &y, &dy, &dx};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* Window average pooling as torch.nn.AvgPool2d(kernel, stride, padding) with
 * count_include_pad: the divisor is the window clipped to the padded input. */
static void ref_avgpool2d(const pp_pool_desc *d, const double *x, double *y)
{
    for (int pl = 0; pl < d->n * d->c; pl++)
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++) {
                int hs = p * d->stride - d->pad, ws = q * d->stride - d->pad;
                int he = hs + d->kernel < d->h + d->pad ? hs + d->kernel : d->h + d->pad;
                int we = ws + d->kernel < d->w + d->pad ? ws + d->kernel : d->w + d->pad;
                double s = 0.0;
                for (int ih = hs; ih < he; ih++)
                    for (int iw = ws; iw < we; iw++)
                        if (ih >= 0 && ih < d->h && iw >= 0 && iw < d->w)
                            s += x[((size_t)pl * d->h + ih) * d->w + iw];
                y[((size_t)pl * d->p + p) * d->q + q] = s / ((he - hs) * (we - ws));
            }
}

static double avgpool2d_loss(void *p)
{
    pool_ctx *c = p;
    ref_avgpool2d(c->d, c->x, c->y);
    return dot_r(c->y, c->r, c->ny);
}

static void test_avgpool2d(void)
{
    static const int cases[][7] = {
        /* n, c, h, w, kernel, stride, pad */
        {2, 3, 8, 8, 2, 2, 0},  /* LeNet's pools */
        {1, 2, 9, 7, 2, 2, 0},  /* odd sizes: the last row and column dropped */
        {2, 2, 7, 7, 3, 2, 1},  /* padded windows, divisor counts the padding */
        {1, 3, 5, 6, 3, 1, 1},  /* overlapping windows */
        {1, 1, 6, 6, 4, 3, 2},  /* windows clipped at the padded border */
        {3, 4, 1, 1, 1, 1, 0},  /* identity */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *k = cases[ci];
        pp_pool_desc d;
        pp_error err;
        CHECK_OK(pp_pool_desc_init(&d, k[0], k[1], k[2], k[3], k[4], k[5], k[6], &err), &err);
        pp_tensor x = tnew(4, d.n, d.c, d.h, d.w), y = tnew(4, d.n, d.c, d.p, d.q);
        pp_tensor dy = tnew(4, d.n, d.c, d.p, d.q), dx = tnew(4, d.n, d.c, d.h, d.w);
        size_t nx = numel(&x), ny = numel(&y);
        double *xd = fill(&x, 0.0, 1.0), *rd = fill(&dy, 0.0, 1.0), *yref = dalloc(ny);
        ref_avgpool2d(&d, xd, yref);
        CHECK_OK(pp_avgpool2d_forward(&g_ex, &d, &x, &y, &err), &err);
        check_close("avgpool2d forward", fp(&y), yref, ny, 1e-6);
        memset(dx.data, 0x7f, nx * sizeof(float)); /* fully overwritten */
        CHECK_OK(pp_avgpool2d_backward(&g_ex, &d, &dy, &dx, &err), &err);
        pool_ctx ctx = {&d, xd, rd, dalloc(ny), ny};
        double *g = dalloc(nx);
        unsigned char *mask = malloc(nx);
        fd_grad(avgpool2d_loss, &ctx, xd, nx, 1e-3, g, mask);
        check_grad("avgpool2d dx", fp(&dx), NULL, g, mask, nx);
        free(ctx.y), free(g), free(mask), free(xd), free(rd), free(yref);
        pp_tensor *ts[] = {&x, &y, &dy, &dx};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- host copies ------------------------------------------------------------------ */

/* Stream-ordered copies from and to host memory (page-locked buffers from
 * pp_device_host_alloc): into a view at an offset, back out, and the checks. */
static void test_host_copies(void)
{
    pp_error err;
    const int64_t n = 1000;
    float *host = NULL, *back = NULL;
    CHECK_OK(pp_device_host_alloc(g_dev, (size_t)n * sizeof(float), (void **)&host, &err), &err);
    CHECK_OK(pp_device_host_alloc(g_dev, (size_t)n * sizeof(float), (void **)&back, &err), &err);
    if (!host || !back) return;
    CHECK(((uintptr_t)host & 63) == 0);
    for (int64_t i = 0; i < n; i++) host[i] = (float)i * 0.5f, back[i] = -1.0f;
    pp_tensor t = tnew(2, 10, 100, 1, 1);
    pp_tensor rows = pp_tensor_view0(&t, 3, 4); /* rows 3..6 */
    CHECK_OK(pp_copy_from_host(&g_ex, host, &rows, &err), &err);
    CHECK_OK(pp_exec_sync(&g_ex, &err), &err);
    CHECK(fp(&t)[300] == 0.0f && fp(&t)[399] == 49.5f && fp(&t)[699] == 199.5f &&
          fp(&t)[299] == 0.0f && fp(&t)[700] == 0.0f);
    CHECK_OK(pp_copy_to_host(&g_ex, &rows, back, &err), &err);
    CHECK_OK(pp_exec_sync(&g_ex, &err), &err);
    CHECK(memcmp(back, host, 400 * sizeof(float)) == 0 && back[400] == -1.0f);
    CHECK(pp_copy_from_host(&g_ex, NULL, &rows, &err) == PP_ERR_INVALID &&
          strstr(err.msg, "NULL host source"));
    CHECK(pp_copy_to_host(&g_ex, &rows, NULL, &err) == PP_ERR_INVALID);
    pp_tensor other = tnew_on(g_dev1, PP_F32, 1, 4, 1, 1, 1);
    CHECK(pp_copy_from_host(&g_ex, host, &other, &err) == PP_ERR_INVALID); /* wrong device */
    pp_tensor_free(&other);
    pp_tensor_free(&t);
    pp_device_host_free(g_dev, host);
    pp_device_host_free(g_dev, back);
    pp_device_host_free(g_dev, NULL);
}

/* ---- per-channel bias ------------------------------------------------------------ */

static void test_channel_bias(void)
{
    static const int cases[][4] = {{2, 3, 5, 7}, {1, 20, 24, 24}, {4, 1, 1, 1}, {3, 17, 2, 9}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int n = cases[ci][0], c = cases[ci][1], h = cases[ci][2], w = cases[ci][3];
        pp_error err;
        pp_tensor y = tnew(4, n, c, h, w), b = tnew(1, c, 1, 1, 1), db = tnew(1, c, 1, 1, 1);
        size_t ny = numel(&y), hw = (size_t)h * w;
        double *yd = fill(&y, 0.0, 1.0), *bd = fill(&b, 0.0, 1.0), *db0 = fill(&db, 0.0, 1.0);
        double *want = dalloc(ny), *dbw = dalloc((size_t)c);
        for (size_t i = 0; i < ny; i++) want[i] = (double)((float)yd[i] + (float)bd[(i / hw) % c]);
        CHECK_OK(pp_channel_bias_forward(&g_ex, &b, &y, &err), &err);
        check_close("channel bias forward", fp(&y), want, ny, 0.0); /* one float add each */
        /* backward: L = sum(y * dy) is linear in b, dL/db_c = sum over n, hw of dy */
        for (size_t i = 0; i < ny; i++) dbw[(i / hw) % c] += yd[i];
        for (int i = 0; i < c; i++) dbw[i] += db0[i];
        pp_tensor dy = tnew(4, n, c, h, w);
        for (size_t i = 0; i < ny; i++) fp(&dy)[i] = (float)yd[i];
        CHECK_OK(pp_channel_bias_backward(&g_ex, &dy, &db, &err), &err);
        check_close("channel bias backward +=", fp(&db), dbw, (size_t)c, 1e-6);
        free(yd), free(bd), free(db0), free(want), free(dbw);
        pp_tensor *ts[] = {&y, &b, &db, &dy};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
    /* a bias of the wrong length is refused */
    pp_error err;
    pp_tensor y = tnew(4, 2, 3, 4, 4), b = tnew(1, 4, 1, 1, 1);
    CHECK(pp_channel_bias_forward(&g_ex, &b, &y, &err) == PP_ERR_INVALID);
    pp_tensor y2 = tnew(2, 2, 3, 1, 1), b3 = tnew(1, 3, 1, 1, 1);
    CHECK(pp_channel_bias_backward(&g_ex, &y2, &b3, &err) == PP_ERR_INVALID &&
          strstr(err.msg, "4-D"));
    pp_tensor_free(&y), pp_tensor_free(&b), pp_tensor_free(&y2), pp_tensor_free(&b3);
}

int main(void)
{
    if (!op_check_setup()) return 1;
    test_conv();
    test_conv_repeat();
    test_conv_backward_data_accumulate();
    test_batchnorm();
    test_maxpool();
    test_avgpool();
    test_avgpool2d();
    test_channel_bias();
    test_host_copies();
    op_check_teardown();
    return check_summary("test_ops");
}
