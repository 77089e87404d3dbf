/*
 * dropout.cu - inverted dropout over any activation (ops.h:
 * pp_dropout_forward / _backward; kernels.h: pp_cuda_launch_dropout),
 * runtime/cpu/dropout.c's arithmetic: y = x * the factor of dropout.h's
 * hash for (key, first_sample + the element's sample, its index within the
 * sample). The factor is exactly 0 or 1 / (1 - p), so each product is the
 * CPU's bits; nothing is stored between the passes (the backward draws the
 * same factors again). Where the draw's step is in device memory
 * (pp_dropout_desc.step), each thread reads it once and forms the key
 * itself, so that a replayed graph draws the replayed step's masks.
 *
 * The tensor is n samples of per_sample floats, one after another. A
 * thread takes four consecutive elements (a float4 where x and y are 16-byte
 * aligned, else four single floats), finds the first one's sample by one
 * division and steps the others' coordinates across a sample's end; the
 * tail of fewer than four goes to the first threads of the grid.
 */
#include "kernels.h"
#include "runtime/core/tensor.h"

namespace {

struct drop_args {
    uint64_t key;
    int64_t first_sample, per_sample;
    uint32_t threshold;
    float scale;
    const int64_t *step; /* the step in device memory (NULL: key as given) */
    uint64_t seed;
    int site;
};

/* the key the kernel draws from: from the step in memory where there is one,
 * read at every run (a replayed graph passes the captured arguments) */
__device__ __forceinline__ uint64_t key_of(const drop_args &a)
{
    return pp_dropout_key_at(a.key, a.step, a.seed, a.site);
}

/* the factors of the four elements from flat index i on (i < n) */
__device__ __forceinline__ void factors4(const drop_args &a, uint64_t key, int64_t i, int64_t n,
                                         float *f)
{
    int64_t sample = i / a.per_sample, idx = i - sample * a.per_sample;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[k] = i + k < n ? pp_dropout_factor(key, a.first_sample + sample, idx, a.threshold,
                                             a.scale)
                         : 0.0f;
        if (++idx == a.per_sample) idx = 0, sample++;
    }
}

/* float4s over the first 4 * n4 elements, then the tail (< 4) by the first
 * threads. x and y 16-byte aligned; each thread reads its elements before
 * writing them, so y may be x. */
__global__ void dropout_vec_k(int64_t n4, int tail, drop_args a, const float *x, float *y)
{
    const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int64_t n = 4 * n4 + tail;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float4 *y4 = reinterpret_cast<float4 *>(y);
    const uint64_t key = key_of(a);
    for (int64_t i = tid; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float f[4];
        factors4(a, key, 4 * i, n, f);
        const float4 u = x4[i];
        y4[i] = make_float4(u.x * f[0], u.y * f[1], u.z * f[2], u.w * f[3]);
    }
    if (tid < tail) {
        const int64_t i = 4 * n4 + tid, sample = i / a.per_sample;
        y[i] = x[i] * pp_dropout_factor(key, a.first_sample + sample,
                                        i - sample * a.per_sample, a.threshold, a.scale);
    }
}

/* the same on single floats, four consecutive ones a thread */
__global__ void dropout_k(int64_t n, drop_args a, const float *x, float *y)
{
    const int64_t quads = (n + 3) / 4;
    const uint64_t key = key_of(a);
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < quads;
         q += (int64_t)gridDim.x * blockDim.x) {
        float f[4];
        factors4(a, key, 4 * q, n, f);
        for (int k = 0; k < 4 && 4 * q + k < n; k++) y[4 * q + k] = x[4 * q + k] * f[k];
    }
}

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_dropout(cudaStream_t s, unsigned max_grid, pp_dropout_desc d,
                                   int64_t n, int64_t per_sample, const float *x, float *y)
{
    const int64_t total = n * per_sample;
    if (total == 0) return cudaSuccess;
    const drop_args a = {d.key,
                         d.first_sample,
                         per_sample,
                         pp_dropout_threshold(d.p),
                         pp_dropout_scale(d.p),
                         d.step ? (const int64_t *)d.step->data : nullptr,
                         d.seed,
                         d.site};
    int64_t grid = ((total + 3) / 4 + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK;
    if (grid > (int64_t)max_grid) grid = max_grid;
    if (grid < 1) grid = 1;
    if (pp_cuda_aligned16(x) && pp_cuda_aligned16(y))
        dropout_vec_k<<<(unsigned)grid, PP_CUDA_BLOCK, 0, s>>>(total / 4, (int)(total % 4), a, x,
                                                               y);
    else
        dropout_k<<<(unsigned)grid, PP_CUDA_BLOCK, 0, s>>>(total, a, x, y);
    return cudaGetLastError();
}

} // extern "C"
