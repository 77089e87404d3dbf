/*
 * linear.c - CPU fully connected layer on cblas_sgemm.
 * x (n,in), w (out,in), b (out), y (n,out). Forward y = x w^T + b; backward
 * dx = dy w (when dx is given), dw += dy^T x, db += column sums of dy (in
 * double, fixed order). The backward's halves (data, weights) are entries of
 * their own with the same arithmetic, so their results are those of the
 * whole backward bit for bit.
 *
 * The weight gradient is computed on its own into the exec's workspace and
 * then added to dw once, so dw + g is the result whatever dw held (ops.h):
 * a micro-batch's gradient computed apart and added later has the same bits.
 */
#include <cblas.h>
#include <string.h>

#include "kernels.h"

pp_status pp_cpu_linear_forward(pp_exec *ex, int n, int in, int out, const float *x,
                                const float *w, const float *b, float *y, pp_error *err)
{
    for (int i = 0; i < n; i++) memcpy(y + (size_t)i * out, b, sizeof(float) * (size_t)out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 1.0f, y,
                out);
    return PP_OK;
}

pp_status pp_cpu_linear_backward_data(pp_exec *ex, int n, int in, int out, const float *w,
                                      const float *dy, float *dx, pp_error *err)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in, 0.0f,
                dx, in);
    return PP_OK;
}

pp_status pp_cpu_linear_backward_weights(pp_exec *ex, int n, int in, int out, const float *x,
                                         const float *dy, float *dw, float *db, pp_error *err)
{
    const size_t len = (size_t)out * in;
    void *ws = NULL;
    PP_TRY(pp_exec_workspace(ex, len * sizeof(float), &ws, err));
    float *g = ws;
    if (len) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in,
                    0.0f, g, in);
        for (size_t i = 0; i < len; i++) dw[i] += g[i];
    }
    for (int o = 0; o < out; o++) {
        double s = 0.0;
        for (int i = 0; i < n; i++) s += (double)dy[(size_t)i * out + o];
        db[o] += (float)s;
    }
    return PP_OK;
}

pp_status pp_cpu_linear_backward(pp_exec *ex, int n, int in, int out, const float *x,
                                 const float *w, const float *dy, float *dx, float *dw, float *db,
                                 pp_error *err)
{
    if (dx) PP_TRY(pp_cpu_linear_backward_data(ex, n, in, out, w, dy, dx, err));
    return pp_cpu_linear_backward_weights(ex, n, in, out, x, dy, dw, db, err);
}
