/*
 * linear.c - CPU fully connected layer on cblas_sgemm.
 * x (n,in), w (out,in), b (out), y (n,out). Forward y = x w^T + b; backward
 * dx = dy w (when dx is given), dw += dy^T x, db += column sums of dy (in
 * double, fixed order).
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

pp_status pp_cpu_linear_backward(pp_exec *ex, int n, int in, int out, const float *x,
                                 const float *w, const float *dy, float *dx, float *dw, float *db,
                                 pp_error *err)
{
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in,
                    0.0f, dx, in);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 1.0f,
                dw, in);
    for (int o = 0; o < out; o++) {
        double s = 0.0;
        for (int i = 0; i < n; i++) s += (double)dy[(size_t)i * out + o];
        db[o] += (float)s;
    }
    return PP_OK;
}
