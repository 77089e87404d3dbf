/*
 * blas.c - the fully connected layer through cuBLAS sgemm (fp32, TF32
 * off: the exec's handle uses CUBLAS_DEFAULT_MATH), plus the bias kernels.
 *
 * Row-major x (n,in), w (out,in), y (n,out) are the column-major matrices
 * x^T (in,n), w^T (in,out), y^T (out,n), so (in column-major terms):
 *   y^T  = w x^T          sgemm(T, N, out, n, in)
 *   dx^T = w^T dy^T       sgemm(N, N, in, n, out)
 *   dw^T += x^T dy        sgemm(N, T, in, out, n), beta = 1
 * The backward's halves (data, weights) are entries of their own; the whole
 * backward runs the two.
 */
#include "internal.h"
#include "kernels.h"

pp_status pp_cuda_linear_forward(pp_exec *ex, int n, int in, int out, const float *x,
                                 const float *w, const float *b, float *y, pp_error *err)
{
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 1, &ce, err));
    const float one = 1.0f, zero = 0.0f;
    if (n == 0 || out == 0) return PP_OK;
    PP_TRY(PP_CUDA(ex->dev, err,
                   cublasSgemm(ce->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in, x,
                               in, &zero, y, out)));
    const int64_t total = (int64_t)n * out;
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_bias_add(ce->stream, pp_cuda_grid(ex, total, PP_CUDA_BLOCK), n,
                                           out, b, y));
}

pp_status pp_cuda_linear_backward_data(pp_exec *ex, int n, int in, int out, const float *w,
                                       const float *dy, float *dx, pp_error *err)
{
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 1, &ce, err));
    const float one = 1.0f, zero = 0.0f;
    if (n == 0 || out == 0 || in == 0) return PP_OK;
    return PP_CUDA(ex->dev, err,
                   cublasSgemm(ce->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w, in, dy,
                               out, &zero, dx, in));
}

pp_status pp_cuda_linear_backward_weights(pp_exec *ex, int n, int in, int out, const float *x,
                                          const float *dy, float *dw, float *db, pp_error *err)
{
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 1, &ce, err));
    const float one = 1.0f;
    if (n == 0 || out == 0 || in == 0) return PP_OK;
    PP_TRY(PP_CUDA(ex->dev, err,
                   cublasSgemm(ce->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, in, dy,
                               out, &one, dw, in)));
    return PP_CUDA(ex->dev, err, pp_cuda_launch_bias_backward(ce->stream, n, out, dy, db));
}

pp_status pp_cuda_linear_backward(pp_exec *ex, int n, int in, int out, const float *x,
                                  const float *w, const float *dy, float *dx, float *dw,
                                  float *db, pp_error *err)
{
    if (dx) PP_TRY(pp_cuda_linear_backward_data(ex, n, in, out, w, dy, dx, err));
    return pp_cuda_linear_backward_weights(ex, n, in, out, x, dy, dw, db, err);
}
