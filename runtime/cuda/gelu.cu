/*
 * gelu.cu - GELU forward and backward on activations of either dtype (the
 * bf16 entries of mixed precision, ops.h: pp_gelu_forward / _backward):
 * each element widened exactly to f32, gelu_op.cuh's f32 arithmetic (the
 * f32 kernels' and runtime/cpu/gelu.c's), the result rounded once where the
 * output is bf16 (pp_bf16_from_f32's bits). One element a thread, grid
 * stride; each element is read before it is written, so y may alias x or dy.
 * And a dense layer's pre-activation in f32 (dense.c's bf16 dense + GELU)
 * rounded to bf16 h, then g = GELU(h) rounded: the stand-ins' composition.
 */
#include "bf16.cuh"
#include "gelu_op.cuh"
#include "transformer.h"

namespace {

/* y[i] = op(x[i], dy[i]) (dy NULL: unary) */
template <class TX, class TY, class Op>
__global__ void gelu_k(int64_t n, const TX *x, const TX *dy, TY *y, Op op)
{
    for (int64_t i = gtid(); i < n; i += gstride())
        st_f32(y, i, op(ld_f32(x, i), dy ? ld_f32(dy, i) : 0.0f));
}

template <class Op>
cudaError_t launch(cudaStream_t s, unsigned max_grid, int64_t n, bool x_bf16, const void *x,
                   const void *dy, bool y_bf16, void *y, Op op)
{
    if (n <= 0) return cudaSuccess;
    const unsigned grid = grid_for(n, max_grid);
    const uint16_t *xh = static_cast<const uint16_t *>(x), *dyh = static_cast<const uint16_t *>(dy);
    const float *xf = static_cast<const float *>(x), *dyf = static_cast<const float *>(dy);
    if (x_bf16 && y_bf16)
        gelu_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(n, xh, dyh, static_cast<uint16_t *>(y), op);
    else if (x_bf16)
        gelu_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(n, xh, dyh, static_cast<float *>(y), op);
    else if (y_bf16)
        gelu_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(n, xf, dyf, static_cast<uint16_t *>(y), op);
    else
        gelu_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(n, xf, dyf, static_cast<float *>(y), op);
    return cudaGetLastError();
}

/* h = bf16(pre), g = bf16(GELU(h)) */
__global__ void gelu_from_f32_k(int64_t n, const float *pre, uint16_t *h, uint16_t *g)
{
    for (int64_t i = gtid(); i < n; i += gstride()) {
        const uint16_t hv = narrow(pre[i]);
        h[i] = hv;
        g[i] = narrow(gelu_op()(widen(hv), 0.0f));
    }
}

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_gelu_from_f32(cudaStream_t s, unsigned max_grid, int64_t n,
                                         const float *pre, void *h, void *g)
{
    if (n <= 0) return cudaSuccess;
    gelu_from_f32_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(
        n, pre, static_cast<uint16_t *>(h), static_cast<uint16_t *>(g));
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_gelu_mixed(cudaStream_t s, unsigned max_grid, int64_t n, bool x_bf16,
                                      const void *x, const void *dy, bool y_bf16, void *y)
{
    if (dy) return launch(s, max_grid, n, x_bf16, x, dy, y_bf16, y, gelu_backward_op());
    return launch(s, max_grid, n, x_bf16, x, nullptr, y_bf16, y, gelu_op());
}

} // extern "C"
