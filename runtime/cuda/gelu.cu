/*
 * gelu.cu - GELU forward and backward on activations of either dtype (the
 * bf16 entries of mixed precision, ops.h: pp_gelu_forward / _backward):
 * each element widened exactly to f32, gelu_op.cuh's f32 arithmetic (the
 * f32 kernels' and runtime/cpu/gelu.c's), the result rounded once where the
 * output is bf16 (pp_bf16_from_f32's bits). Where every operand is 16-byte
 * aligned, eight elements a thread at a time (bf16.cuh's ld8 and st8: one
 * 16-byte load of bf16, two of f32), the last n % 8 one a thread; otherwise
 * one element a thread. Grid stride; each element is computed alone, the
 * same way on both paths (the same bits), and read before it is written, so
 * y may alias x or dy. And a dense layer's pre-activation in f32 (dense.c's
 * bf16 dense + GELU) rounded to bf16 h, then g = GELU(h) rounded: the
 * stand-ins' composition, on the same two paths.
 *
 * Why eight: GPT-2 124M's bf16 step moves about 4.2 GB through these kernels
 * (c_fc's 25 M elements a block: 8 bytes each forward, 6 backward). At one
 * 2-byte element a thread, 2048 resident threads keep some 4 to 8 KB of loads
 * in flight per SM, where HBM's bandwidth times its latency asks ~32 KB
 * (4.8 TB/s x ~0.9 us over 132 SMs); 16 bytes a load keep 32 to 64 KB.
 */
#include "bf16.cuh"
#include "gelu_op.cuh"
#include "transformer.h"

namespace {

/* y[i] = op(x[i], dy[i]) (dy NULL: unary): bf16.cuh's map_each, one element a
 * thread, or map_each8, eight at a time (every operand 16-byte aligned) */
template <class TX, class TY, class Op>
__global__ void gelu_k(int64_t n, const TX *x, const TX *dy, TY *y, Op op)
{
    map_each(n, x, dy, y, op);
}

template <class TX, class TY, class Op>
__global__ void gelu8_k(int64_t n, const TX *x, const TX *dy, TY *y, Op op)
{
    map_each8(n, x, dy, y, op);
}

/* the eight-wide kernel where x, dy and y are 16-byte aligned, else gelu_k */
template <class TX, class TY, class Op>
cudaError_t launch_as(cudaStream_t s, unsigned max_grid, int64_t n, const void *x,
                      const void *dy, void *y, Op op)
{
    const TX *xt = static_cast<const TX *>(x), *dyt = static_cast<const TX *>(dy);
    TY *yt = static_cast<TY *>(y);
    if (pp_cuda_aligned16(x) && pp_cuda_aligned16(dy) && pp_cuda_aligned16(y))
        gelu8_k<<<grid_for((n + 7) / 8, max_grid), PP_CUDA_BLOCK, 0, s>>>(n, xt, dyt, yt, op);
    else
        gelu_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(n, xt, dyt, yt, op);
    return cudaGetLastError();
}

template <class Op>
cudaError_t launch(cudaStream_t s, unsigned max_grid, int64_t n, bool x_bf16, const void *x,
                   const void *dy, bool y_bf16, void *y, Op op)
{
    if (n <= 0) return cudaSuccess;
    if (x_bf16 && y_bf16) return launch_as<uint16_t, uint16_t>(s, max_grid, n, x, dy, y, op);
    if (x_bf16) return launch_as<uint16_t, float>(s, max_grid, n, x, dy, y, op);
    if (y_bf16) return launch_as<float, uint16_t>(s, max_grid, n, x, dy, y, op);
    return launch_as<float, float>(s, max_grid, n, x, dy, y, op);
}

/* h = bf16(pre), g = bf16(GELU(h)) for element i */
__device__ __forceinline__ void from_f32(float pre, uint16_t &h, uint16_t &g)
{
    h = narrow(pre);
    g = narrow(gelu_op()(widen(h), 0.0f));
}

__global__ void gelu_from_f32_k(int64_t n, const float *pre, uint16_t *h, uint16_t *g)
{
    for (int64_t i = gtid(); i < n; i += gstride()) from_f32(pre[i], h[i], g[i]);
}

/* the same eight at a time, then the tail one a thread (all 16-byte aligned) */
__global__ void gelu_from_f32_8_k(int64_t n, const float *pre, uint16_t *h, uint16_t *g)
{
    const int64_t n8 = n / 8;
    for (int64_t i = gtid(); i < n8; i += gstride()) {
        float p[8];
        ld8(pre, i, p);
        uint4 hv = make_uint4(0u, 0u, 0u, 0u), gv = hv;
        for (int k = 0; k < 8; k++) {
            uint16_t hk, gk;
            from_f32(p[k], hk, gk);
            set16(hv, k, hk);
            set16(gv, k, gk);
        }
        reinterpret_cast<uint4 *>(h)[i] = hv;
        reinterpret_cast<uint4 *>(g)[i] = gv;
    }
    const int64_t i = 8 * n8 + gtid();
    if (i < n) from_f32(pre[i], h[i], g[i]);
}

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_gelu_from_f32(cudaStream_t s, unsigned max_grid, int64_t n,
                                         const float *pre, void *h, void *g)
{
    if (n <= 0) return cudaSuccess;
    uint16_t *ht = static_cast<uint16_t *>(h), *gt = static_cast<uint16_t *>(g);
    if (pp_cuda_aligned16(pre) && pp_cuda_aligned16(h) && pp_cuda_aligned16(g))
        gelu_from_f32_8_k<<<grid_for((n + 7) / 8, max_grid), PP_CUDA_BLOCK, 0, s>>>(n, pre, ht,
                                                                                   gt);
    else
        gelu_from_f32_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(n, pre, ht, gt);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_gelu_mixed(cudaStream_t s, unsigned max_grid, int64_t n, bool x_bf16,
                                      const void *x, const void *dy, bool y_bf16, void *y)
{
    if (dy) return launch(s, max_grid, n, x_bf16, x, dy, y_bf16, y, gelu_backward_op());
    return launch(s, max_grid, n, x_bf16, x, nullptr, y_bf16, y, gelu_op());
}

} // extern "C"
