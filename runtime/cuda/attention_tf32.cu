/*
 * attention_tf32.cu - causal multi-head self-attention on f32 operands on
 * the tensor cores in 3xTF32 (attention_tf32.h): attention_mma.cu's scheme
 * (FlashAttention-2's) in mma.sync m16n8k8 TF32 tiles (mma_tf32.cuh), each
 * product of f32 operands split into a TF32 value and remainder and taken as
 * three products (a_lo b_hi + a_hi b_lo + a_hi b_hi, CUTLASS's fast f32;
 * what PyTorch's fp32 memory-efficient attention multiplies with at compute
 * capability 8.0 and up). f32 accumulators; P and dS stay f32 (split like
 * every operand), so the results are f32's within the sums' order: the spec
 * is the CPU backend (runtime/cpu/attention.c), our CUDA-core kernels
 * (attention.cu) the reference the first call is checked against
 * (attention_run.c).
 *
 *   forward   a block of 4 warps per (64 queries, head, sample), each warp
 *             16 query rows held in registers as f32 A fragments (split at
 *             each k step); key tiles staged in shared memory: S = Q K^T,
 *             attention_tc.cuh's online softmax on the fragments, O += P V;
 *             y = O / l, lse = m + log(l).
 *   backward  delta = rowsum(dy y) (attention_tile.cuh's kernel, double);
 *             dkv: a block per 64 keys, each warp 16 keys held as A
 *             fragments of K and V, over the query tiles at or after them:
 *             S^T = K Q^T, dP^T = V dY^T, P^T and dS^T, dV += P^T dY, dK +=
 *             dS^T Q; dq: a block per 64 queries (Q and dY as A fragments)
 *             over the key tiles up to them: S, dP, P, dS, dQ += dS K. Every
 *             element of dqkv is written by one block: no atomics, the same
 *             bits run to run.
 *   dropout   as attention_mma.cu's (a template flag; the factor of each
 *             accumulator element drawn from its (query, key)).
 *
 * The C fragment of one product into the A fragment of the next, without
 * shuffles: an m16n8k8 C fragment gives lane (g, q) columns 2q and 2q + 1 of
 * rows g and g + 8, A wants columns q and q + 4. The order of the sum over k
 * is the kernel's to choose, so the next product's k index kappa is mapped
 * to the tile's keys (or queries) as kappa = q -> 2q, kappa = q + 4 -> 2q +
 * 1: A is then {c0, c2, c1, c3} of the lane's own registers, and B's rows
 * are read in that order from shared memory (b0 = row 2q, b1 = row 2q + 1 of
 * the 8-row step).
 *
 * Shared memory: tiles staged as they lie in global memory (a tile's row a
 * row of the head's columns, f32) at a pitch of HS + 4 floats, so that both
 * ways a B fragment is read fall on 32 distinct banks: k along the row
 * (S = Q K^T: lane (g, q) reads row g, column q: bank 4g + q) and k down
 * the rows (O += P V: row 2q, column g: bank 8q + g). Staging by cp.async
 * 16 bytes (4 columns) a copy where the row is below t, the columns below hs
 * and the source 16-byte aligned (else plain loads; zeros past t and hs), the
 * streamed tiles overlapping the products as in attention_mma.cu (the
 * forward's K and V alternate; the backward's tiles are double-buffered).
 *
 * The kernels and their launches are attention_tc.cuh's (shared with the
 * bf16 ones, with the staging and the stores); this file gives them f32's
 * operations in 3xTF32 (tf32x3_mma below): the fragments, the split and the
 * products.
 *
 * Head sizes: multiples of 8 up to 128, run by the kernel of the smallest of
 * 16, 32, 64, 128 at or above (zero columns past the head). Tiles of the
 * streamed operand sized so that the static shared memory stays under
 * 48 KiB: the forward's K and V tiles 64 rows (32 where the head is 128);
 * the backward's double-buffered pairs 64 rows (heads up to 32), 32 (64) or
 * 16 (128).
 */
#include "attention_tf32.h"

#include "attention_tc.cuh"
#include "mma_tf32.cuh"

namespace {

/* element (row, col) of src, zero at or past t rows or hs columns */
__device__ __forceinline__ float at(const float *src, int64_t ld, int row, int col, int t, int hs)
{
    return row < t && col < hs ? src[(int64_t)row * ld + col] : 0.0f;
}

/* 4 f32 registers as TF32 hi and lo (pp_tf32_split) */
__device__ __forceinline__ void split4(const float x[4], uint32_t hi[4], uint32_t lo[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++) pp_tf32_split(x[i], &hi[i], &lo[i]);
}

/* f32's operations in 3xTF32 for attention_tc.cuh's kernels (its header
 * lists them); the A fragments are f32, split at each k step */
struct tf32x3_mma {
    typedef float elem;
    typedef float afrag;
    static constexpr int K = 8;
    static constexpr int SKEW = 4; /* floats (16 bytes) a staged row is padded by */

    __device__ static __forceinline__ float wide(float e)
    {
        return e;
    }

    __device__ static __forceinline__ float out(float x)
    {
        return x;
    }

    /* 64 rows, 32 where the head is 128 (two staged tiles of 64 rows of
     * 132 floats would pass 48 KiB) */
    template <int HS> __host__ __device__ static constexpr int fwd_tile()
    {
        return HS > 64 ? 32 : 64;
    }

    /* four staged at once: 64 rows for heads up to 32, 32 up to 64, 16 at 128 */
    template <int HS> __host__ __device__ static constexpr int back_tile()
    {
        return HS > 64 ? 16 : HS > 32 ? 32 : 64;
    }

    /* A fragments (f32) of k steps ks (columns 8 ks..) of rows r0, r0 + 8
     * (the lane's g rows) of global memory: a[0] (r0, 8 ks + q), a[1] (r0 +
     * 8, ..), a[2] (r0, 8 ks + q + 4), a[3] (r0 + 8, ..) */
    template <int KS>
    __device__ static __forceinline__ void load_a(float a[KS][4], const float *src, int64_t ld,
                                                  int r0, int t, int hs, int q)
    {
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            const int col = 8 * ks + q;
            a[ks][0] = at(src, ld, r0, col, t, hs);
            a[ks][1] = at(src, ld, r0 + 8, col, t, hs);
            a[ks][2] = at(src, ld, r0, col + 4, t, hs);
            a[ks][3] = at(src, ld, r0 + 8, col + 4, t, hs);
        }
    }

    /* acc[j] = (the warp's 16 rows of a) times (staged rows 8 j.. of
     * tile)^T, j < NT, in 3xTF32: k runs along the staged rows, lane (g, q)
     * reading b0 = row 8 j + g, column 8 ks + q and b1 = column 8 ks + q +
     * 4. A is split once a k step for all n tiles; each acc[j] sums its k
     * steps in order. */
    template <int NT, int KS, int LD>
    __device__ static __forceinline__ void product(float acc[NT][4], const float a[KS][4],
                                                   const float *tile, int lane)
    {
        zero<NT>(acc);
        const float *rows = tile + (lane >> 2) * LD + (lane & 3);
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t ahi[4], alo[4];
            split4(a[ks], ahi, alo);
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint32_t bhi[2], blo[2];
                pp_tf32_split(rows[8 * j * LD + 8 * ks], &bhi[0], &blo[0]);
                pp_tf32_split(rows[8 * j * LD + 8 * ks + 4], &bhi[1], &blo[1]);
                pp_mma_3xtf32_1688(acc[j], ahi, alo, bhi, blo, acc[j]);
            }
        }
    }

    /* acc[jn] += p times tile, in 3xTF32: p the C fragments of NP tiles of 8
     * columns (this product's k: 8 rows of the tile each), taken as A by the
     * header's mapping (kappa q -> column 2q, q + 4 -> 2q + 1: a = {p0, p2,
     * p1, p3}); B of n tile jn: lane (g, q) reading rows 8 kk + 2q and 8 kk
     * + 2q + 1, column 8 jn + g. Each acc[jn] sums its k steps in order. */
    template <int NP, int NT, int LD>
    __device__ static __forceinline__ void accumulate(float acc[NT][4], const float p[NP][4],
                                                      const float *tile, int lane)
    {
        const float *rows = tile + 2 * (lane & 3) * LD + (lane >> 2);
#pragma unroll
        for (int kk = 0; kk < NP; kk++) {
            const float a[4] = {p[kk][0], p[kk][2], p[kk][1], p[kk][3]};
            uint32_t ahi[4], alo[4];
            split4(a, ahi, alo);
#pragma unroll
            for (int jn = 0; jn < NT; jn++) {
                uint32_t bhi[2], blo[2];
                pp_tf32_split(rows[8 * kk * LD + 8 * jn], &bhi[0], &blo[0]);
                pp_tf32_split(rows[(8 * kk + 1) * LD + 8 * jn], &bhi[1], &blo[1]);
                pp_mma_3xtf32_1688(acc[jn], ahi, alo, bhi, blo, acc[jn]);
            }
        }
    }
};

} // namespace

extern "C" {

bool pp_cuda_attention_tf32_takes(pp_cuda_attention_dims d)
{
    return dims_ok(d) && d.q0 == 0 && (d.c / d.heads) % 8 == 0;
}

cudaError_t pp_cuda_launch_attention_forward_tf32(cudaStream_t s, pp_cuda_attention_dims d,
                                                  const pp_dropout_desc *drop, const float *qkv,
                                                  float *y, float *lse)
{
    if (!pp_cuda_attention_tf32_takes(d)) return cudaErrorInvalidValue;
    return launch_forward_mma<tf32x3_mma>(s, d, drop, qkv, y, lse);
}

cudaError_t pp_cuda_launch_attention_backward_tf32(cudaStream_t s, unsigned max_grid,
                                                   pp_cuda_attention_dims d,
                                                   const pp_dropout_desc *drop, const float *qkv,
                                                   const float *y, const float *lse,
                                                   const float *dy, float *delta, float *dqkv)
{
    if (!pp_cuda_attention_tf32_takes(d)) return cudaErrorInvalidValue;
    return launch_backward_mma<tf32x3_mma>(s, max_grid, d, drop, qkv, y, lse, dy, delta, dqkv);
}

} // extern "C"
