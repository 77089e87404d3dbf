/*
 * emu_selftest.cu - kernels that exercise the emulator itself
 * (test_emu_self.c): a block-wide sum through shared memory and
 * __syncthreads, a warp sum by shuffles (whole and partial warps), the
 * same by xor shuffles into every lane (a butterfly), a shuffle naming a lane that has returned (a fault the emulator must
 * report), the tensor cores' m16n8k16 bf16 product (every lane's fragments
 * given, its D fragment returned; lanes that return first are a fault),
 * and launches out of the device's limits. Written as the
 * project's kernel files are, and compiled as they are (unchevron.py).
 */
#include <cstdint>

#include "emu_selftest.h"
#include "mma_bf16.cuh"

namespace {

/* out[block] = sum of in over the block's threads, through shared memory */
__global__ void block_sum_k(const int *in, int *out)
{
    __shared__ int s[1024];
    const int t = threadIdx.x + blockDim.x * threadIdx.y;
    const int n = blockDim.x * blockDim.y;
    s[t] = in[blockIdx.x * n + t];
    __syncthreads();
    for (int half = 512; half > 0; half /= 2) {
        if (t < half && t + half < n) s[t] += s[t + half];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

/* out[warp] = sum of in over the warp's lanes, by shuffles down */
__global__ void warp_sum_k(const double *in, double *out, int width)
{
    const int t = threadIdx.x;
    double v = in[blockIdx.x * blockDim.x + t];
    for (int off = width / 2; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off, width);
    if (t % width == 0) out[(blockIdx.x * blockDim.x + t) / width] = v;
}

/* out[thread] = sum of in over the thread's segment of width lanes, in
 * every lane: a butterfly of xor shuffles */
__global__ void warp_allsum_k(const double *in, double *out, int width)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    double v = in[t];
    for (int m = width / 2; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m, width);
    out[t] = v;
}

/* lane 1 returns before the others shuffle: lane 0 reads it */
__global__ void early_return_k(float *out)
{
    if (threadIdx.x == 1) return;
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}

/* thread i's fragments: a[4i..], b[2i..], c[4i..]; d[4i..] its D fragment;
 * threads at or above `calls` return without taking part */
__global__ void mma_k(const uint32_t *a, const uint32_t *b, const float *c, float *d, int calls)
{
    const int i = threadIdx.x;
    if (i >= calls) return;
    float out[4];
    pp_mma_bf16_16816(out, a + 4 * i, b + 2 * i, c + 4 * i);
    for (int r = 0; r < 4; r++) d[4 * i + r] = out[r];
}

__global__ void nothing_k() {}

} // namespace

extern "C" {

cudaError_t pp_emu_self_block_sum(int blocks, int bx, int by, const int *in, int *out)
{
    block_sum_k<<<blocks, dim3(bx, by)>>>(in, out);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_warp_sum(int blocks, int threads, int width, const double *in,
                                 double *out)
{
    warp_sum_k<<<blocks, threads>>>(in, out, width);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_warp_allsum(int blocks, int threads, int width, const double *in,
                                    double *out)
{
    warp_allsum_k<<<blocks, threads>>>(in, out, width);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_early_return(float *out)
{
    early_return_k<<<1, 32>>>(out);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_mma(int threads, int calls, const uint32_t *a, const uint32_t *b,
                            const float *c, float *d)
{
    mma_k<<<1, threads>>>(a, b, c, d, calls);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_launch(unsigned gx, unsigned gy, unsigned bx, unsigned by, size_t smem)
{
    nothing_k<<<dim3(gx, gy), dim3(bx, by), smem>>>();
    return cudaGetLastError();
}

} // extern "C"
