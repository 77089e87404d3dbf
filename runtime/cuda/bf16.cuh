/*
 * bf16.cuh - device helpers of the bf16 kernels (nhwc.cu, bn_nhwc.cu, and the
 * transformer's layernorm.cu and gelu.cu): bf16
 * bits widened to f32 exactly and rounded back as pp_bf16_from_f32 rounds,
 * elements of either dtype read as f32 and written from f32 (ld_f32, st_f32),
 * the 8 bf16 lanes of a 16-byte vector, grid-stride indices, and the grid
 * of their launchers (the alignment test: pp_cuda_aligned16, kernels.h).
 */
#ifndef PP_CUDA_BF16_CUH
#define PP_CUDA_BF16_CUH

#include <cstdint>

#include "kernels.h"

namespace {

__device__ __forceinline__ float widen(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

/* pp_bf16_from_f32's bits: nearest, ties to even, NaN quiet */
__device__ __forceinline__ uint16_t narrow(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* p[i] as f32, p holding f32 or bf16 elements (exact) */
__device__ __forceinline__ float ld_f32(const float *p, int64_t i)
{
    return p[i];
}

__device__ __forceinline__ float ld_f32(const uint16_t *p, int64_t i)
{
    return widen(p[i]);
}

/* p[i] = v, rounded once where p holds bf16 */
__device__ __forceinline__ void st_f32(float *p, int64_t i, float v)
{
    p[i] = v;
}

__device__ __forceinline__ void st_f32(uint16_t *p, int64_t i, float v)
{
    p[i] = narrow(v);
}

/* v as an element of p's dtype holds it (p is not read) */
__device__ __forceinline__ float rounded_as(const float *, float v)
{
    return v;
}

__device__ __forceinline__ float rounded_as(const uint16_t *, float v)
{
    return widen(narrow(v));
}

__device__ __forceinline__ int64_t gtid()
{
    return blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t gstride()
{
    return (int64_t)gridDim.x * blockDim.x;
}

__device__ __forceinline__ uint16_t lane16(const uint4 &v, int k)
{
    const uint32_t w = (&v.x)[k >> 1];
    return (uint16_t)(k & 1 ? w >> 16 : w);
}

__device__ __forceinline__ void set16(uint4 &v, int k, uint16_t h)
{
    uint32_t &w = (&v.x)[k >> 1];
    w = k & 1 ? (w & 0xffffu) | ((uint32_t)h << 16) : (w & 0xffff0000u) | h;
}

/* blocks of PP_CUDA_BLOCK threads for n elements, at most max_grid */
inline unsigned grid_for(int64_t n, unsigned max_grid)
{
    const int64_t g = (n + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK;
    return (unsigned)(g < 1 ? 1 : g > (int64_t)max_grid ? max_grid : g);
}

} // namespace

#endif
