/*
 * conv2d.c - CPU convolution (no bias, NCHW, f32) as im2col/col2im + sgemm.
 *
 * Per sample, forward is Y (K, P*Q) = W (K, C*R*S) x col (C*R*S, P*Q), where
 * col is the im2col unfolding of the input; backward-data is
 * dcol = W^T x dY followed by col2im; backward-filter is dW += dY x col^T.
 * A 1x1 stride-1 unpadded ("pointwise") convolution skips im2col: the input
 * plane itself is the col matrix.
 * When P*Q is small, several samples share one GEMM: their columns sit side
 * by side in one (C*R*S, nb*P*Q) buffer (for a pointwise convolution, the
 * input planes copied side by side) and the output is scattered back.
 *
 * Buffers come from the exec's workspace (no allocation per call). The GEMMs
 * run on OpenBLAS threads; the grouping depends on the shape only, so results
 * are bitwise reproducible for a given OpenBLAS thread count (OpenBLAS may
 * round differently with another thread count).
 */
#include <cblas.h>
#include <string.h>

#include "cpu_kernels.h"

/* Minimum number of GEMM columns (samples x P*Q) worth batching towards. */
#define CONV_MIN_COLS 1024

static int is_pointwise(const pp_conv2d_desc *d)
{
    return d->r == 1 && d->s == 1 && d->stride_h == 1 && d->stride_w == 1 && d->pad_h == 0 &&
           d->pad_w == 0;
}

/* Samples per GEMM: 1 when one plane already gives a wide GEMM, otherwise
 * enough samples to reach CONV_MIN_COLS columns (at most n). */
static int conv_batch(const pp_conv2d_desc *d)
{
    int pq = d->p * d->q;
    if (pq >= CONV_MIN_COLS) return 1;
    int nb = (CONV_MIN_COLS + pq - 1) / pq;
    return nb < d->n ? nb : d->n;
}

/* Range [*q0, *q1) of output columns whose input column q*stride - pad + s
 * lies inside [0, w). */
static void valid_range(int q_out, int stride, int pad, int s, int w, int *q0, int *q1)
{
    int lo = pad - s;
    int a = lo <= 0 ? 0 : (lo + stride - 1) / stride;
    int hi = w - 1 + pad - s; /* q*stride <= hi */
    int b = hi < 0 ? 0 : hi / stride + 1;
    if (a > q_out) a = q_out;
    if (b > q_out) b = q_out;
    if (b < a) b = a;
    *q0 = a;
    *q1 = b;
}

/* col (C*R*S rows, P*Q columns, row stride ld) = unfolding of one sample x (C,H,W). */
static void im2col(const pp_conv2d_desc *d, const float *x, float *col, size_t ld)
{
    const int sh = d->stride_h, sw = d->stride_w;
    for (int c = 0; c < d->c; c++) {
        const float *xc = x + (size_t)c * d->h * d->w;
        for (int r = 0; r < d->r; r++) {
            for (int s = 0; s < d->s; s++) {
                float *row = col + ((size_t)(c * d->r + r) * d->s + s) * ld;
                int q0, q1;
                valid_range(d->q, sw, d->pad_w, s, d->w, &q0, &q1);
                for (int p = 0; p < d->p; p++) {
                    float *dst = row + (size_t)p * d->q;
                    int ih = p * sh - d->pad_h + r;
                    if (ih < 0 || ih >= d->h) {
                        memset(dst, 0, sizeof(float) * (size_t)d->q);
                        continue;
                    }
                    for (int q = 0; q < q0; q++) dst[q] = 0.0f;
                    for (int q = q1; q < d->q; q++) dst[q] = 0.0f;
                    if (q1 == q0) continue;
                    const float *src = xc + (size_t)ih * d->w + (q0 * sw - d->pad_w + s);
                    if (sw == 1) {
                        memcpy(dst + q0, src, sizeof(float) * (size_t)(q1 - q0));
                    } else {
                        for (int q = q0; q < q1; q++) dst[q] = src[(size_t)(q - q0) * sw];
                    }
                }
            }
        }
    }
}

/* dx (C,H,W) += fold of col (C*R*S rows, P*Q columns, row stride ld). */
static void col2im(const pp_conv2d_desc *d, const float *col, size_t ld, float *dx)
{
    const int sh = d->stride_h, sw = d->stride_w;
    for (int c = 0; c < d->c; c++) {
        float *dxc = dx + (size_t)c * d->h * d->w;
        for (int r = 0; r < d->r; r++) {
            for (int s = 0; s < d->s; s++) {
                const float *row = col + ((size_t)(c * d->r + r) * d->s + s) * ld;
                int q0, q1;
                valid_range(d->q, sw, d->pad_w, s, d->w, &q0, &q1);
                for (int p = 0; p < d->p; p++) {
                    int ih = p * sh - d->pad_h + r;
                    if (ih < 0 || ih >= d->h || q1 == q0) continue;
                    const float *src = row + (size_t)p * d->q;
                    float *dst = dxc + (size_t)ih * d->w + (q0 * sw - d->pad_w + s);
                    if (sw == 1) {
                        for (int q = q0; q < q1; q++) dst[q - q0] += src[q];
                    } else {
                        for (int q = q0; q < q1; q++) dst[(size_t)(q - q0) * sw] += src[q];
                    }
                }
            }
        }
    }
}

/* Copies rows of nb planes side by side: dst (rows, nb*len) from src planes
 * (nb planes of rows*len, plane i at src + i*plane_stride). */
static void gather_planes(const float *src, size_t plane_stride, int nb, int rows, size_t len,
                          float *dst)
{
    for (int k = 0; k < rows; k++)
        for (int i = 0; i < nb; i++)
            memcpy(dst + ((size_t)k * nb + i) * len, src + i * plane_stride + (size_t)k * len,
                   sizeof(float) * len);
}

/* The inverse of gather_planes. */
static void scatter_planes(const float *src, int nb, int rows, size_t len, float *dst,
                           size_t plane_stride)
{
    for (int k = 0; k < rows; k++)
        for (int i = 0; i < nb; i++)
            memcpy(dst + i * plane_stride + (size_t)k * len, src + ((size_t)k * nb + i) * len,
                   sizeof(float) * len);
}

/* col (C*R*S, m*P*Q) = the unfoldings of m consecutive samples of x, side by
 * side; for a pointwise convolution that is a copy of the input planes. */
static void unfold(const pp_conv2d_desc *d, const float *x, int m, float *col)
{
    const size_t pq = (size_t)d->p * d->q, x_stride = (size_t)d->c * d->h * d->w;
    if (is_pointwise(d)) {
        gather_planes(x, x_stride, m, d->c, pq, col);
        return;
    }
    for (int i = 0; i < m; i++) im2col(d, x + i * x_stride, col + i * pq, (size_t)m * pq);
}

/* dx (m consecutive samples) = the folds of col (C*R*S, m*P*Q), overwriting dx. */
static void fold(const pp_conv2d_desc *d, const float *col, int m, float *dx)
{
    const size_t pq = (size_t)d->p * d->q, x_stride = (size_t)d->c * d->h * d->w;
    if (is_pointwise(d)) {
        scatter_planes(col, m, d->c, pq, dx, x_stride);
        return;
    }
    memset(dx, 0, sizeof(float) * x_stride * (size_t)m);
    for (int i = 0; i < m; i++) col2im(d, col + i * pq, (size_t)m * pq, dx + i * x_stride);
}

static pp_status workspace(pp_exec *ex, size_t floats, float **ptr, pp_error *err)
{
    void *p = NULL;
    PP_TRY(pp_exec_workspace(ex, floats * sizeof(float), &p, err));
    *ptr = p;
    return PP_OK;
}

pp_status pp_cpu_conv2d_forward(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                const float *w, float *y, pp_error *err)
{
    const int crs = d->c * d->r * d->s;
    const size_t pq = (size_t)d->p * d->q, hw = (size_t)d->h * d->w;
    const size_t x_stride = (size_t)d->c * hw, y_stride = (size_t)d->k * pq;
    const int nb = conv_batch(d);

    if (nb == 1 && is_pointwise(d)) {
        for (int n = 0; n < d->n; n++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->k, (int)pq, d->c, 1.0f, w,
                        d->c, x + n * x_stride, (int)hw, 0.0f, y + n * y_stride, (int)pq);
        return PP_OK;
    }
    if (nb == 1) {
        float *col;
        PP_TRY(workspace(ex, (size_t)crs * pq, &col, err));
        for (int n = 0; n < d->n; n++) {
            im2col(d, x + n * x_stride, col, pq);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->k, (int)pq, crs, 1.0f, w,
                        crs, col, (int)pq, 0.0f, y + n * y_stride, (int)pq);
        }
        return PP_OK;
    }
    float *col;
    PP_TRY(workspace(ex, ((size_t)crs + d->k) * nb * pq, &col, err));
    float *out = col + (size_t)crs * nb * pq;
    for (int n0 = 0; n0 < d->n; n0 += nb) {
        int m = d->n - n0 < nb ? d->n - n0 : nb;
        size_t cols = (size_t)m * pq;
        unfold(d, x + n0 * x_stride, m, col);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->k, (int)cols, crs, 1.0f, w,
                    crs, col, (int)cols, 0.0f, out, (int)cols);
        scatter_planes(out, m, d->k, pq, y + n0 * y_stride, y_stride);
    }
    return PP_OK;
}

pp_status pp_cpu_conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d, const float *dy,
                                      const float *w, float *dx, pp_error *err)
{
    const int crs = d->c * d->r * d->s;
    const size_t pq = (size_t)d->p * d->q, hw = (size_t)d->h * d->w;
    const size_t x_stride = (size_t)d->c * hw, y_stride = (size_t)d->k * pq;
    const int nb = conv_batch(d);

    if (nb == 1 && is_pointwise(d)) {
        for (int n = 0; n < d->n; n++)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d->c, (int)pq, d->k, 1.0f, w,
                        d->c, dy + n * y_stride, (int)pq, 0.0f, dx + n * x_stride, (int)hw);
        return PP_OK;
    }
    if (nb == 1) {
        float *col;
        PP_TRY(workspace(ex, (size_t)crs * pq, &col, err));
        for (int n = 0; n < d->n; n++) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, crs, (int)pq, d->k, 1.0f, w,
                        crs, dy + n * y_stride, (int)pq, 0.0f, col, (int)pq);
            memset(dx + n * x_stride, 0, sizeof(float) * x_stride);
            col2im(d, col, pq, dx + n * x_stride);
        }
        return PP_OK;
    }
    float *col;
    PP_TRY(workspace(ex, ((size_t)crs + d->k) * nb * pq, &col, err));
    float *dyb = col + (size_t)crs * nb * pq;
    for (int n0 = 0; n0 < d->n; n0 += nb) {
        int m = d->n - n0 < nb ? d->n - n0 : nb;
        size_t cols = (size_t)m * pq;
        gather_planes(dy + n0 * y_stride, y_stride, m, d->k, pq, dyb);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, crs, (int)cols, d->k, 1.0f, w, crs,
                    dyb, (int)cols, 0.0f, col, (int)cols);
        fold(d, col, m, dx + n0 * x_stride);
    }
    return PP_OK;
}

pp_status pp_cpu_conv2d_backward_filter(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                        const float *dy, float *dw, pp_error *err)
{
    const int crs = d->c * d->r * d->s;
    const size_t pq = (size_t)d->p * d->q, hw = (size_t)d->h * d->w;
    const size_t x_stride = (size_t)d->c * hw, y_stride = (size_t)d->k * pq;
    const int nb = conv_batch(d);

    if (nb == 1 && is_pointwise(d)) {
        for (int n = 0; n < d->n; n++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->k, d->c, (int)pq, 1.0f,
                        dy + n * y_stride, (int)pq, x + n * x_stride, (int)hw, 1.0f, dw, d->c);
        return PP_OK;
    }
    if (nb == 1) {
        float *col;
        PP_TRY(workspace(ex, (size_t)crs * pq, &col, err));
        for (int n = 0; n < d->n; n++) {
            im2col(d, x + n * x_stride, col, pq);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->k, crs, (int)pq, 1.0f,
                        dy + n * y_stride, (int)pq, col, (int)pq, 1.0f, dw, crs);
        }
        return PP_OK;
    }
    float *col;
    PP_TRY(workspace(ex, ((size_t)crs + d->k) * nb * pq, &col, err));
    float *dyb = col + (size_t)crs * nb * pq;
    for (int n0 = 0; n0 < d->n; n0 += nb) {
        int m = d->n - n0 < nb ? d->n - n0 : nb;
        size_t cols = (size_t)m * pq;
        gather_planes(dy + n0 * y_stride, y_stride, m, d->k, pq, dyb);
        unfold(d, x + n0 * x_stride, m, col);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->k, crs, (int)cols, 1.0f, dyb,
                    (int)cols, col, (int)cols, 1.0f, dw, crs);
    }
    return PP_OK;
}
