/*
 * attention_bf16.cu - causal multi-head self-attention on bf16 operands
 * (attention_bf16.h), attention.cu's scheme with bf16 tiles: q, k, v and dy
 * are loaded as bf16 into shared memory and widened (exactly) where they
 * are read; scores, the online softmax, the output's and the gradients'
 * sums are f32 on the CUDA cores; y and dqkv are each rounded once to bf16
 * as they are stored, lse stays f32. So the results are those of the f32
 * kernels on the widened operands, rounded once, within f32 rounding of the
 * sums' order (the CPU backend's stand-in path is the spec).
 *
 *   forward   one block per (block of BQ queries, head, sample), walking
 *             the keys up to its last query in tiles of BK: S = q k^T /
 *             sqrt(hs), masked to keys at or before the query; the row's
 *             maximum and sum of exp(S - max) kept online (the output
 *             rescaled when the maximum grows); O += P v; y = O / sum, lse
 *             = max + log(sum).
 *   backward  delta = the row dot products of dy and y (double); then
 *             P = exp(S - lse) again, dS = P (dy v^T - delta) / sqrt(hs);
 *             per block of BK keys dv = P^T dy, dk = dS^T q over the
 *             queries at or after them; per block of BQ queries dq = dS k
 *             over the keys up to them. Every element of dqkv is written
 *             by one block: no atomics, the same bits run to run.
 *
 * A tile holds a row's bf16 in 32-bit words of two columns, rows padded by
 * one word (HS / 2 + 1, odd), so the lanes reading one word of different
 * rows hit different banks. Every shared-memory read of a tile feeds two
 * multiply-adds (a query's score against a key: two columns; the output's
 * and the gradients' sums: two adjacent columns a thread owns), half the
 * loads of attention.cu's f32 tiles, whose bound they are. A query row
 * belongs to TPR = ATT_THREADS / BQ consecutive lanes, which share its keys
 * and output columns and reduce its maximum and sum by xor shuffles. No
 * tensor cores: the products are f32 multiply-adds (docs/GPU.md says what
 * this gives and what an mma.sync version would).
 */
#include "attention_bf16.h"

#include "attention_tile.cuh"
#include "bf16.cuh"

namespace {

/* the two bf16 of a word, widened */
__device__ __forceinline__ float lo16(uint32_t w)
{
    return __uint_as_float(w << 16);
}

__device__ __forceinline__ float hi16(uint32_t w)
{
    return __uint_as_float(w & 0xffff0000u);
}

/* A tile of bf16 rows in words of two columns (2w and 2w + 1 in word w),
 * padded by one word; a thread's N columns of a row are the N / 2 pairs
 * 2 (lane + STEP i) and the next. */
struct bf16_tile {
    typedef uint16_t elem;
    typedef uint32_t word;

    template <int HS> __host__ __device__ static constexpr int ld()
    {
        return HS / 2 + 1;
    }

    /* (a head's columns start at any element, so a pair is read as two
     * elements) */
    template <int HS, int ROWS>
    __device__ static __forceinline__ void load(uint32_t *dst, const uint16_t *src, int64_t ld,
                                                int r0, int t, int hs)
    {
        constexpr int LD = HS / 2 + 1, W = HS / 2;
        for (int i = threadIdx.x; i < ROWS * W; i += ATT_THREADS) {
            const int r = i / W, d = 2 * (i % W);
            const uint16_t *row = src + (int64_t)(r0 + r) * ld;
            const bool in = r0 + r < t;
            const uint32_t a = in && d < hs ? row[d] : 0u, b = in && d + 1 < hs ? row[d + 1] : 0u;
            dst[r * LD + d / 2] = a | b << 16;
        }
    }

    /* one shared-memory word read for two multiply-adds */
    template <int HS, int TPR, int KPT>
    __device__ static __forceinline__ void dot(const uint32_t *a, const uint32_t *tile, int lane,
                                               float *s)
    {
        constexpr int LD = HS / 2 + 1;
#pragma unroll
        for (int j = 0; j < KPT; j++) s[j] = 0.0f;
        for (int w = 0; w < HS / 2; w++) {
            const float x0 = lo16(a[w]), x1 = hi16(a[w]);
#pragma unroll
            for (int j = 0; j < KPT; j++) {
                const uint32_t e = tile[(lane + TPR * j) * LD + w];
                s[j] += x0 * lo16(e);
                s[j] += x1 * hi16(e);
            }
        }
    }

    template <int N, int STEP>
    __device__ static __forceinline__ void add(float *acc, float p, const uint32_t *row, int lane)
    {
#pragma unroll
        for (int i = 0; i < N / 2; i++) {
            const uint32_t e = row[lane + STEP * i];
            acc[2 * i] += p * lo16(e);
            acc[2 * i + 1] += p * hi16(e);
        }
    }

    /* each rounded once */
    template <int N, int STEP>
    __device__ static __forceinline__ void store(uint16_t *out, const float *acc, int lane, int hs)
    {
#pragma unroll
        for (int i = 0; i < N / 2; i++) {
            const int d = 2 * (lane + STEP * i);
            if (d < hs) out[d] = narrow(acc[2 * i]);
            if (d + 1 < hs) out[d + 1] = narrow(acc[2 * i + 1]);
        }
    }

    __device__ static __forceinline__ float wide(uint16_t e)
    {
        return widen(e);
    }

    __device__ static __forceinline__ uint16_t to_elem(float v)
    {
        return narrow(v);
    }
};

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_attention_forward_bf16(cudaStream_t s, pp_cuda_attention_dims d,
                                                  const pp_dropout_desc *drop,
                                                  const uint16_t *qkv, uint16_t *y, float *lse)
{
    return launch_forward<bf16_tile>(s, d, drop, qkv, y, lse);
}

cudaError_t pp_cuda_launch_attention_decode_bf16(cudaStream_t s, pp_cuda_attention_dims d,
                                                 const uint16_t *qkv, uint16_t *y, float *lse,
                                                 float *part)
{
    return launch_decode<bf16_tile>(s, d, qkv, y, lse, part);
}

cudaError_t pp_cuda_launch_attention_backward_bf16(cudaStream_t s, unsigned max_grid,
                                                   pp_cuda_attention_dims d,
                                                   const pp_dropout_desc *drop,
                                                   const uint16_t *qkv, const uint16_t *y,
                                                   const float *lse, const uint16_t *dy,
                                                   float *delta, uint16_t *dqkv)
{
    return launch_backward<bf16_tile>(s, max_grid, d, drop, qkv, y, lse, dy, delta, dqkv);
}

} // extern "C"
