/*
 * edge_cases.h - op edge cases that every backend must treat the same, run
 * on any device through the checked op API with host copies in and out
 * (header-only; included by tests/ops/test_ops_edges.c on the CPU and by
 * tests/cuda/test_cuda_review.c on cuda:0):
 *   - batch norm over zero values per channel (an empty micro-batch, an
 *     image of no pixel): every batch-norm entry refuses it with
 *     PP_ERR_INVALID and a message saying so, writing nothing (the running
 *     statistics and the outputs keep their poison); training over a single
 *     value per channel is refused too;
 *   - max pooling with padding wider than some windows' overlap with the
 *     input (corners of a 2x2 window with pad 1 hold one input element):
 *     every index is written (idx is poisoned first), in range, at the
 *     window's first maximum, and the backward sends each gradient there.
 */
#ifndef PP_TESTS_EDGE_CASES_H
#define PP_TESTS_EDGE_CASES_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"

static pp_tensor edge_tensor(pp_device_ctx *dev, pp_dtype dt, int ndim, int64_t d0, int64_t d1,
                             int64_t d2, int64_t d3)
{
    pp_tensor t;
    pp_error err;
    int64_t shape[4] = {d0, d1, d2, d3};
    CHECK_OK(pp_tensor_alloc(&t, dev, dt, ndim, shape, &err), &err);
    return t;
}

static void edge_fill(pp_tensor *t, float v)
{
    size_t n = (size_t)pp_tensor_numel(t);
    if (!n) return;
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = v;
    pp_error err;
    CHECK_OK(pp_tensor_from_host(t, h, n * sizeof *h, &err), &err);
    free(h);
}

/* Whether every element of t (f32) is v. */
static bool edge_all(const pp_tensor *t, float v)
{
    size_t n = (size_t)pp_tensor_numel(t);
    float *h = malloc((n ? n : 1) * sizeof *h);
    pp_error err;
    bool ok = n == 0 || pp_tensor_to_host(t, h, n * sizeof *h, &err) == PP_OK;
    for (size_t i = 0; ok && i < n; i++) ok = h[i] == v;
    free(h);
    return ok;
}

#define EDGE_REFUSED(call, what)                                                                \
    do {                                                                                        \
        pp_error e_;                                                                            \
        pp_error_clear(&e_);                                                                    \
        pp_status s_ = (call);                                                                  \
        CHECK_MSG(s_ == PP_ERR_INVALID && strstr(e_.msg, what), "%s on %s: %s: %s", #call,      \
                  dev->name, pp_status_name(s_), e_.msg);                                      \
    } while (0)

/* Batch norm over n x c x h x w (n*h*w == 0, or 1 for training only). */
static void edge_bn_case(pp_device_ctx *dev, pp_exec *ex, int n, int c, int h, int w)
{
    const bool empty = (int64_t)n * h * w == 0;
    const char *why = empty ? "zero values per channel" : "more than one value per channel";
    pp_bn_desc d = {n, c, h, w, 1e-5f, 0.1f};
    pp_tensor x = edge_tensor(dev, PP_F32, 4, n, c, h, w);
    pp_tensor y = edge_tensor(dev, PP_F32, 4, n, c, h, w);
    pp_tensor dy = edge_tensor(dev, PP_F32, 4, n, c, h, w);
    pp_tensor dx = edge_tensor(dev, PP_F32, 4, n, c, h, w);
    pp_tensor v[8];
    for (int i = 0; i < 8; i++) { /* gamma beta rmean rvar smean sinvstd dgamma dbeta */
        v[i] = edge_tensor(dev, PP_F32, 1, c, 1, 1, 1);
        edge_fill(&v[i], 7.0f);
    }
    edge_fill(&x, 1.0f);
    edge_fill(&y, 7.0f);
    edge_fill(&dy, 1.0f);
    edge_fill(&dx, 7.0f);
    EDGE_REFUSED(pp_batchnorm_forward_train(ex, &d, &x, &v[0], &v[1], &v[2], &v[3], &y, &v[4],
                                            &v[5], &e_),
                 why);
    EDGE_REFUSED(pp_batchnorm_forward_act(ex, &d, true, &x, &v[0], &v[1], &v[2], &v[3], NULL,
                                          true, &y, &v[4], &v[5], &e_),
                 why);
    if (empty) {
        EDGE_REFUSED(pp_batchnorm_forward_infer(ex, &d, &x, &v[0], &v[1], &v[2], &v[3], &y, &e_),
                     why);
        EDGE_REFUSED(pp_batchnorm_forward_act(ex, &d, false, &x, &v[0], &v[1], &v[2], &v[3], NULL,
                                              true, &y, NULL, NULL, &e_),
                     why);
        EDGE_REFUSED(pp_batchnorm_backward(ex, &d, &x, &dy, &v[0], &v[4], &v[5], &dx, &v[6],
                                           &v[7], &e_),
                     why);
        EDGE_REFUSED(pp_batchnorm_backward_relu(ex, &d, &x, &x, &dy, &v[0], &v[4], &v[5], &dx,
                                                &v[6], &v[7], &e_),
                     why);
        EDGE_REFUSED(pp_batchnorm_backward_add_relu(ex, &d, &x, &x, &dy, &v[0], &v[4], &v[5],
                                                    &dx, &v[6], &v[7], &dy, &e_),
                     why);
    }
    pp_error err;
    CHECK_OK(pp_exec_sync(ex, &err), &err);
    for (int i = 0; i < 8; i++)
        CHECK_MSG(edge_all(&v[i], 7.0f), "%s: a refused batch norm %dx%dx%dx%d wrote tensor %d",
                  dev->name, n, c, h, w, i);
    CHECK(edge_all(&y, 7.0f) && edge_all(&dx, 7.0f));
    pp_tensor *all[] = {&x, &y, &dy, &dx};
    for (int i = 0; i < 4; i++) pp_tensor_free(all[i]);
    for (int i = 0; i < 8; i++) pp_tensor_free(&v[i]);
}

static void edge_batchnorm_zero_rows(pp_device_ctx *dev, pp_exec *ex)
{
    edge_bn_case(dev, ex, 0, 4, 3, 3); /* an empty micro-batch */
    edge_bn_case(dev, ex, 2, 4, 0, 3); /* images of no pixel */
    edge_bn_case(dev, ex, 3, 4, 2, 0);
    edge_bn_case(dev, ex, 1, 4, 1, 1); /* training over one value per channel */
}

/* Max pooling n x c x h x w, kernel k, stride s, pad p: idx poisoned, then
 * forward and backward against a direct reference. */
static void edge_maxpool_case(pp_device_ctx *dev, pp_exec *ex, int n, int c, int h, int w, int k,
                              int s, int p)
{
    pp_error err;
    pp_pool_desc d;
    CHECK_OK(pp_pool_desc_init(&d, n, c, h, w, k, s, p, &err), &err);
    const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * d.p * d.q;
    float *hx = malloc(nx * sizeof *hx), *hdy = malloc(ny * sizeof *hdy);
    float *hy = malloc(ny * sizeof *hy), *hdx = malloc(nx * sizeof *hdx);
    float *want_dx = calloc(nx, sizeof *want_dx);
    int32_t *hidx = malloc(ny * sizeof *hidx);
    /* distinct values (no ties: backends may route a tie's gradient differently) */
    for (size_t i = 0; i < nx; i++) hx[i] = (float)((i * 7919) % nx) - (float)(nx / 2);
    for (size_t i = 0; i < ny; i++) hdy[i] = (float)(i % 5) + 0.5f;
    pp_tensor x = edge_tensor(dev, PP_F32, 4, n, c, h, w);
    pp_tensor y = edge_tensor(dev, PP_F32, 4, n, c, d.p, d.q);
    pp_tensor idx = edge_tensor(dev, PP_I32, 4, n, c, d.p, d.q);
    pp_tensor dy = edge_tensor(dev, PP_F32, 4, n, c, d.p, d.q);
    pp_tensor dx = edge_tensor(dev, PP_F32, 4, n, c, h, w);
    for (size_t i = 0; i < ny; i++) hidx[i] = 0x7f7f7f7f; /* poison */
    CHECK_OK(pp_tensor_from_host(&x, hx, nx * sizeof *hx, &err), &err);
    CHECK_OK(pp_tensor_from_host(&dy, hdy, ny * sizeof *hdy, &err), &err);
    CHECK_OK(pp_tensor_from_host(&idx, hidx, ny * sizeof *hidx, &err), &err);
    edge_fill(&dx, 1234.0f);
    CHECK_OK(pp_maxpool_forward(ex, &d, &x, &y, &idx, &err), &err);
    CHECK_OK(pp_maxpool_backward(ex, &d, &x, &y, &dy, &idx, &dx, &err), &err);
    CHECK_OK(pp_tensor_to_host(&y, hy, ny * sizeof *hy, &err), &err);
    CHECK_OK(pp_tensor_to_host(&dx, hdx, nx * sizeof *hdx, &err), &err);
    CHECK_OK(pp_tensor_to_host(&idx, hidx, ny * sizeof *hidx, &err), &err);
    size_t bad_y = 0, bad_idx = 0, bad_dx = 0, unwritten = 0;
    for (int pl = 0; pl < n * c; pl++)
        for (int i = 0; i < d.p; i++)
            for (int j = 0; j < d.q; j++) {
                const size_t o = ((size_t)pl * d.p + i) * d.q + j;
                int h0 = i * s - p, w0 = j * s - p, h1 = h0 + k, w1 = w0 + k;
                h0 = h0 < 0 ? 0 : h0;
                w0 = w0 < 0 ? 0 : w0;
                h1 = h1 > h ? h : h1;
                w1 = w1 > w ? w : w1;
                int at = -1;
                float best = 0;
                for (int a = h0; a < h1; a++)
                    for (int b = w0; b < w1; b++) {
                        float v = hx[(size_t)pl * h * w + (size_t)a * w + b];
                        if (at < 0 || v > best) best = v, at = a * w + b;
                    }
                bad_y += hy[o] != best;
                /* CUDA may leave idx unused (ops.h): then the backward checks it */
                unwritten += hidx[o] == 0x7f7f7f7f;
                bad_idx += hidx[o] != 0x7f7f7f7f && hidx[o] != at;
                want_dx[(size_t)pl * h * w + (size_t)at] += hdy[o];
            }
    for (size_t i = 0; i < nx; i++) bad_dx += hdx[i] != want_dx[i];
    CHECK_MSG(bad_y == 0 && bad_idx == 0 && bad_dx == 0,
              "%s maxpool %dx%dx%dx%d k%d s%d p%d: %zu outputs, %zu indices, %zu gradients wrong",
              dev->name, n, c, h, w, k, s, p, bad_y, bad_idx, bad_dx);
    if (dev->id.kind == PP_DEVICE_CPU)
        CHECK_MSG(unwritten == 0, "%zu of %zu indices left unwritten", unwritten, ny);
    pp_tensor *all[] = {&x, &y, &idx, &dy, &dx};
    for (int i = 0; i < 5; i++) pp_tensor_free(all[i]);
    free(hx), free(hdy), free(hy), free(hdx), free(want_dx), free(hidx);
}

static void edge_maxpool_padding(pp_device_ctx *dev, pp_exec *ex)
{
    edge_maxpool_case(dev, ex, 2, 3, 5, 4, 2, 1, 1); /* corner windows hold one element */
    edge_maxpool_case(dev, ex, 1, 2, 7, 7, 3, 2, 1); /* the stem's geometry */
    edge_maxpool_case(dev, ex, 1, 1, 3, 3, 3, 3, 1); /* one window per plane */
}

#endif
