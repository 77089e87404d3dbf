/*
 * bf16.cuh - device helpers of the bf16 kernels (nhwc.cu, bn_nhwc.cu, and the
 * transformer's layernorm.cu and gelu.cu): bf16
 * bits widened to f32 exactly and rounded back as pp_bf16_from_f32 rounds,
 * elements of either dtype read as f32 and written from f32 (ld_f32, st_f32),
 * the 8 bf16 lanes of a 16-byte vector, eight elements of either dtype at a
 * time (ld8, st8), an elementwise map one or eight at a time (map_each,
 * map_each8), a thread's strided loads in flight (strided_run), grid-stride
 * indices, and the grid
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

/* Eight consecutive elements, group i8 of p (elements 8 i8 .. 8 i8 + 7) as
 * f32: one 16-byte load of bf16, two of f32 (p 16-byte aligned); and
 * stored from f32, each rounded once where p holds bf16. The elementwise
 * kernels' wide path: 16 bytes a load keep enough bytes in flight per SM for
 * HBM's bandwidth, where one 2-byte element a thread keeps an eighth. */
__device__ __forceinline__ void ld8(const uint16_t *p, int64_t i8, float (&v)[8])
{
    const uint4 u = reinterpret_cast<const uint4 *>(p)[i8];
    for (int k = 0; k < 8; k++) v[k] = widen(lane16(u, k));
}

__device__ __forceinline__ void ld8(const float *p, int64_t i8, float (&v)[8])
{
    const float4 a = reinterpret_cast<const float4 *>(p)[2 * i8];
    const float4 b = reinterpret_cast<const float4 *>(p)[2 * i8 + 1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ void st8(uint16_t *p, int64_t i8, const float (&v)[8])
{
    uint4 u = make_uint4(0u, 0u, 0u, 0u);
    for (int k = 0; k < 8; k++) set16(u, k, narrow(v[k]));
    reinterpret_cast<uint4 *>(p)[i8] = u;
}

__device__ __forceinline__ void st8(float *p, int64_t i8, const float (&v)[8])
{
    reinterpret_cast<float4 *>(p)[2 * i8] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4 *>(p)[2 * i8 + 1] = make_float4(v[4], v[5], v[6], v[7]);
}

/* y[i] = op(x[i], dy[i]) (dy NULL: op(x[i], 0)) for i < n, elements of
 * either dtype read as f32 and stored rounded once (ld_f32, st_f32), by a
 * kernel's grid: one element a thread (map_each), or (x, dy and y 16-byte
 * aligned) eight at a time, then the last n % 8 one a thread by the grid's
 * first threads (map_each8). Each element is computed alone, the same way
 * on both: the same bits; each is read before it is written, so y may alias
 * x or dy. */
template <class TX, class TY, class Op>
__device__ __forceinline__ void map_each(int64_t n, const TX *x, const TX *dy, TY *y, Op op)
{
    for (int64_t i = gtid(); i < n; i += gstride())
        st_f32(y, i, op(ld_f32(x, i), dy ? ld_f32(dy, i) : 0.0f));
}

template <class TX, class TY, class Op>
__device__ __forceinline__ void map_each8(int64_t n, const TX *x, const TX *dy, TY *y, Op op)
{
    const int64_t n8 = n / 8;
    for (int64_t i = gtid(); i < n8; i += gstride()) {
        float a[8], b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        ld8(x, i, a);
        if (dy) ld8(dy, i, b);
        for (int k = 0; k < 8; k++) a[k] = op(a[k], b[k]);
        st8(y, i, a);
    }
    const int64_t i = 8 * n8 + gtid();
    if (i < n) st_f32(y, i, op(ld_f32(x, i), dy ? ld_f32(dy, i) : 0.0f));
}

/* A thread's next N elements of p, i0, i0 + stride, ..., i0 + (N - 1)
 * stride, all loaded before any is used, so that N loads are in flight
 * where a store between them would keep the compiler from hoisting the next
 * (the output may alias the input); one at or past n reads the thread's own
 * i0 again (no element another thread may be writing) and is not to be
 * used. The caller then takes them in the order one at a time would. */
template <int N, class T>
__device__ __forceinline__ void strided_run(const T *p, int n, int i0, int stride, float (&v)[N])
{
#pragma unroll
    for (int u = 0; u < N; u++) {
        const int i = i0 + u * stride;
        v[u] = ld_f32(p, i < n ? i : i0);
    }
}

/* blocks of PP_CUDA_BLOCK threads for n elements, at most max_grid */
inline unsigned grid_for(int64_t n, unsigned max_grid)
{
    const int64_t g = (n + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK;
    return (unsigned)(g < 1 ? 1 : g > (int64_t)max_grid ? max_grid : g);
}

} // namespace

#endif
