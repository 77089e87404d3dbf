/*
 * attention_mma.cu - causal multi-head self-attention on bf16 operands on
 * the tensor cores (attention_mma.h): FlashAttention-2's scheme in
 * mma.sync m16n8k16 tiles (mma_bf16.cuh states the fragment layout), f32
 * accumulators. The spec is the CPU backend (runtime/cpu/attention.c) and
 * our CUDA-core kernels (attention_bf16.cu) the reference the first call is
 * checked against (attention_bf16.c).
 *
 *   forward   a block of 4 warps per (64 queries, head, sample), each warp
 *             16 query rows held in registers as A fragments; key tiles of
 *             64 rows staged in shared memory: S = Q K^T by mma into f32,
 *             scaled, masked (key > query or past t: -inf), the online
 *             softmax per row in registers (a row's 64 scores of a tile lie
 *             in the 4 lanes of a quad: maximum and sum by two xor
 *             shuffles), O rescaled, P rounded to bf16 and O += P V by mma;
 *             y = O / l rounded once, lse = m + log(l) (l the sum of the
 *             unrounded P).
 *   backward  delta = rowsum(dy y) (attention_tile.cuh's kernel, double);
 *             dkv: a block per 64 keys, each warp 16 keys held as A
 *             fragments of K and V, over the query tiles at or after them:
 *             S^T = K Q^T and dP^T = V dY^T by mma, P^T = exp(S^T scale -
 *             lse), dS^T = P^T (dP^T - delta) scale, dV += P^T dY and dK +=
 *             dS^T Q by mma (P^T and dS^T rounded to bf16); dq: a block per
 *             64 queries, each warp 16 queries held as A fragments of Q and
 *             dY, over the key tiles up to them: S, dP, P and dS again, dQ
 *             += dS K. Every element of dqkv is written by one block: no
 *             atomics, the same bits run to run.
 *   dropout   (a template flag, DROP, as attention_tile.cuh's kernels; p == 0
 *             runs the kernels without it, no factor drawn) each lane draws
 *             the factor M of each of its accumulator elements by dropout.h's
 *             hash, its (query, key) from the C fragment's layout: in S (the
 *             forward, dq) rows are queries and columns keys, in S^T (dkv)
 *             rows are keys and columns queries; drawn only inside the causal
 *             triangle and within t. Forward: P M rounded to bf16 for O +=
 *             P V (l, m and lse the undropped softmax's); dkv: dV += (P M)^T
 *             dY, dS^T = P^T (M dP^T - delta) scale; dq: dS likewise.
 *
 * The C fragment of one mma is the A fragment of the next: a lane's
 * accumulators of a 16 x 8 tile are rows g and g + 8, columns 2q and 2q + 1;
 * two adjacent tiles (columns 0..7 and 8..15 of a 16-wide step) give exactly
 * A's rows g, g + 8 and columns 2q, 2q + 1, 2q + 8, 2q + 9. So P (or dS) goes
 * from the scores' registers into the next product as bf16 pairs, without
 * shared memory.
 *
 * Shared memory: the operand tiles are staged as they lie in global memory,
 * one row of the tile a row of the head's columns (bf16), at a pitch of
 * HS + 8 elements: each row starts 16 bytes past the bank of the row
 * before, so that every phase of an ldmatrix (8 rows of 16 bytes) falls on
 * 32 distinct banks (padding, not a swizzle). The B fragments are read by
 * ldmatrix x4 (ldmatrix.cuh), two n tiles of 8 at a time: without .trans
 * where the product's k runs along the staged rows (K for S = Q K^T, Q for
 * S^T = K Q^T, dY and V for the dP products), with .trans where k runs down
 * them (V for O += P V, dY and Q for dV and dK, K for dQ), so a tile is
 * staged once whichever way it is read. The A fragments of the rows a warp
 * holds come from global memory once (load_a), those of P and dS from the
 * scores' registers.
 *
 * Staging: cp.async (cp_async.cuh) 16 bytes (8 columns) a copy where the
 * row is below t, the 8 columns below hs (heads are multiples of 16) and the
 * source 16-byte aligned (qkv's and dy's pitches, 3C and C elements, and a
 * head's first column are multiples of 16 bytes, so this is the operand's
 * base pointer: an operand off a 16-byte boundary is staged by plain
 * loads); zeros past t and hs. The streamed tiles overlap the products: the
 * forward alternates K and V of one tile each (V's copy runs under S = Q
 * K^T and the softmax, the next K's under O += P V), the backward passes
 * double-buffer their streamed tiles (Q, dY in dkv; K, V in dq: the next
 * tile's copies run under the products of this one). A wait_group and a
 * __syncthreads before a tile is read; a __syncthreads after, before its
 * buffer is staged again.
 *
 * The kernels and their launches are attention_tc.cuh's (shared with the f32
 * ones of attention_tf32.cu, 3xTF32, with the staging and the stores); this
 * file gives them bf16's operations (bf16_mma below): the fragments and the
 * products.
 *
 * Head sizes: multiples of 16 up to 128, run by the kernel of the smallest
 * of 16, 32, 64, 128 at or above (zero columns past the head). Tiles of 64
 * keys (forward and dq) or queries (dkv), 32 where the head is 128 in the
 * backward, so that the static shared memory stays under 48 KiB (at most
 * 37 KiB: the backward's two buffers of two tiles of 64 rows of 64 + 8
 * columns, and the lse and delta of the query tiles).
 */
#include "attention_mma.h"

#include "attention_tc.cuh"
#include "bf16.cuh"
#include "ldmatrix.cuh"
#include "mma_bf16.cuh"

namespace {

/* columns col and col + 1 of row `row` of src (rows ld apart) as one word,
 * the first in the low half (one 32-bit load where the pair is 4-byte
 * aligned, as it is when the operand is: a head's columns start at a
 * multiple of 16); zero at or past t rows or hs columns (hs even) */
__device__ __forceinline__ uint32_t pair_at(const uint16_t *src, int64_t ld, int row, int col,
                                            int t, int hs)
{
    if (row >= t || col >= hs) return 0u;
    const uint16_t *p = src + (int64_t)row * ld + col;
    if (((uintptr_t)p & 3u) == 0) return *reinterpret_cast<const uint32_t *>(p);
    return (uint32_t)p[0] | (uint32_t)p[1] << 16;
}

/* two floats as a word of bf16, each rounded once (the first low) */
__device__ __forceinline__ uint32_t pack(float lo, float hi)
{
    return (uint32_t)narrow(lo) | (uint32_t)narrow(hi) << 16;
}

/* bf16's operations for attention_tc.cuh's kernels (its header lists them) */
struct bf16_mma {
    typedef uint16_t elem;
    typedef uint32_t afrag; /* two bf16, the smaller column low */
    static constexpr int K = 16;
    static constexpr int SKEW = 8; /* elements (16 bytes) a staged row is padded by */

    __device__ static __forceinline__ float wide(uint16_t e)
    {
        return widen(e);
    }

    __device__ static __forceinline__ uint16_t out(float x)
    {
        return narrow(x);
    }

    template <int HS> __host__ __device__ static constexpr int fwd_tile()
    {
        return 64;
    }

    /* 64, or 32 where the head is 128 (four staged tiles of 64 rows of 128
     * columns would pass 48 KiB) */
    template <int HS> __host__ __device__ static constexpr int back_tile()
    {
        return HS > 64 ? 32 : 64;
    }

    /* A fragment of k step ks (columns 16 ks..) of rows r0, r0 + 8 (the
     * lane's g rows) of global memory */
    template <int KS>
    __device__ static __forceinline__ void load_a(uint32_t a[KS][4], const uint16_t *src,
                                                  int64_t ld, int r0, int t, int hs, int q)
    {
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            const int col = 16 * ks + 2 * q;
            a[ks][0] = pair_at(src, ld, r0, col, t, hs);
            a[ks][1] = pair_at(src, ld, r0 + 8, col, t, hs);
            a[ks][2] = pair_at(src, ld, r0, col + 8, t, hs);
            a[ks][3] = pair_at(src, ld, r0 + 8, col + 8, t, hs);
        }
    }

    /* acc[j] = (the warp's 16 rows of a) times (staged rows 8 j.. of
     * tile)^T, j < NT; B of n tiles j, j + 1 and k step ks by one ldmatrix
     * x4: matrices (rows 8 j, columns 16 ks), (8 j, 16 ks + 8), (8 j + 8, 16
     * ks), (8 j + 8, 16 ks + 8), lane l giving row l % 8 of matrix l / 8.
     * Each acc[j] sums its k steps in order. */
    template <int NT, int KS, int LD>
    __device__ static __forceinline__ void product(float acc[NT][4], const uint32_t a[KS][4],
                                                   const uint16_t *tile, int lane)
    {
        zero<NT>(acc);
        const uint16_t *rows =
            tile + ((lane & 7) + 8 * (lane >> 4)) * LD + 8 * (lane >> 3 & 1);
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                uint32_t b[4];
                pp_ldmatrix_x4<false>(b, rows + 8 * j * LD + 16 * ks);
                pp_mma_bf16_16816(acc[j], a[ks], b, acc[j]);
                pp_mma_bf16_16816(acc[j + 1], a[ks], b + 2, acc[j + 1]);
            }
        }
    }

    /* acc[jn] += p times tile (staged rows the k of this product, columns
     * its n), p the C fragments of NP tiles of 8 columns (the k), rounded to
     * bf16 as A fragments (the C layout of two adjacent tiles is A's layout
     * of one k step); B of n tiles jn, jn + 1 by one ldmatrix x4.trans:
     * matrices (rows 16 kk, columns 8 jn), (16 kk + 8, 8 jn), (16 kk, 8 jn +
     * 8), (16 kk + 8, 8 jn + 8). Each acc[jn] sums its k steps in order. */
    template <int NP, int NT, int LD>
    __device__ static __forceinline__ void accumulate(float acc[NT][4], const float p[NP][4],
                                                      const uint16_t *tile, int lane)
    {
        const uint16_t *rows =
            tile + ((lane & 7) + 8 * (lane >> 3 & 1)) * LD + 8 * (lane >> 4);
#pragma unroll
        for (int kk = 0; kk < NP / 2; kk++) {
            const uint32_t a[4] = {
                pack(p[2 * kk][0], p[2 * kk][1]), pack(p[2 * kk][2], p[2 * kk][3]),
                pack(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
            for (int jn = 0; jn < NT; jn += 2) {
                uint32_t b[4];
                pp_ldmatrix_x4<true>(b, rows + 16 * kk * LD + 8 * jn);
                pp_mma_bf16_16816(acc[jn], a, b, acc[jn]);
                pp_mma_bf16_16816(acc[jn + 1], a, b + 2, acc[jn + 1]);
            }
        }
    }
};

} // namespace

extern "C" {

bool pp_cuda_attention_mma_takes(pp_cuda_attention_dims d)
{
    return dims_ok(d) && d.q0 == 0 && (d.c / d.heads) % 16 == 0;
}

cudaError_t pp_cuda_launch_attention_forward_mma(cudaStream_t s, pp_cuda_attention_dims d,
                                                 const pp_dropout_desc *drop,
                                                 const uint16_t *qkv, uint16_t *y, float *lse)
{
    if (!pp_cuda_attention_mma_takes(d)) return cudaErrorInvalidValue;
    return launch_forward_mma<bf16_mma>(s, d, drop, qkv, y, lse);
}

cudaError_t pp_cuda_launch_attention_backward_mma(cudaStream_t s, unsigned max_grid,
                                                  pp_cuda_attention_dims d,
                                                  const pp_dropout_desc *drop, const uint16_t *qkv,
                                                  const uint16_t *y, const float *lse,
                                                  const uint16_t *dy, float *delta,
                                                  uint16_t *dqkv)
{
    if (!pp_cuda_attention_mma_takes(d)) return cudaErrorInvalidValue;
    return launch_backward_mma<bf16_mma>(s, max_grid, d, drop, qkv, y, lse, dy, delta, dqkv);
}

} // extern "C"
