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
 * Head sizes: multiples of 16 up to 128, run by the kernel of the smallest
 * of 16, 32, 64, 128 at or above (zero columns past the head). Tiles of 64
 * keys (forward and dq) or queries (dkv), 32 where the head is 128 in the
 * backward, so that the static shared memory stays under 48 KiB (at most
 * 37 KiB: the backward's two buffers of two tiles of 64 rows of 64 + 8
 * columns, and the lse and delta of the query tiles).
 */
#include "attention_mma.h"

#include "attention_tile.cuh"
#include "bf16.cuh"
#include "cp_async.cuh"
#include "ldmatrix.cuh"
#include "mma_bf16.cuh"

namespace {

constexpr int MMA_THREADS = 128; /* 4 warps of 16 rows */
constexpr int MB = 64;           /* a block's rows: queries (forward, dq) or keys (dkv) */
constexpr int SKEW = 8;          /* elements (16 bytes) a staged row is padded by */

/* what delta_k reads of an element (attention_tile.cuh) */
struct bf16_elems {
    typedef uint16_t elem;
    __device__ static __forceinline__ float wide(uint16_t e)
    {
        return widen(e);
    }
};

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

/* acc = 0 */
template <int NT> __device__ __forceinline__ void zero(float acc[NT][4])
{
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
}

/* two floats as a word of bf16, each rounded once (the first low) */
__device__ __forceinline__ uint32_t pack(float lo, float hi)
{
    return (uint32_t)narrow(lo) | (uint32_t)narrow(hi) << 16;
}

/* rows r0.. (ROWS) of src (rows ld apart, columns below hs) into dst (rows
 * HS + SKEW elements apart), 8 columns a copy: cp.async where the row is
 * below t, the columns below hs and the source 16-byte aligned, plain loads
 * where it is not aligned, zeros past t or hs; the copies are the calling
 * thread's open cp.async group */
template <int HS, int ROWS>
__device__ __forceinline__ void stage(uint16_t *dst, const uint16_t *src, int64_t ld, int r0,
                                      int t, int hs)
{
    constexpr int CH = HS / 8, LD = HS + SKEW;
    for (int i = threadIdx.x; i < ROWS * CH; i += MMA_THREADS) {
        const int r = i / CH, c = 8 * (i % CH);
        uint16_t *d = dst + r * LD + c;
        if (r0 + r >= t || c >= hs) {
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
            continue;
        }
        const uint16_t *p = src + (int64_t)(r0 + r) * ld + c;
        if (((uintptr_t)p & 15u) == 0)
            pp_cp_async_16(d, p);
        else
#pragma unroll
            for (int e = 0; e < 8; e++) d[e] = p[e];
    }
}

/* A fragment of k step ks (columns 16 ks..) of rows r0, r0 + 8 (the lane's g
 * rows: r0 = the warp's first row + g) of global memory */
template <int KS>
__device__ __forceinline__ void load_a(uint32_t a[KS][4], const uint16_t *src, int64_t ld, int r0,
                                       int t, int hs, int q)
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

/* acc[j] = (the warp's 16 rows of a) times (staged rows 8 j.. of tile)^T, j <
 * NT; B of n tiles j, j + 1 and k step ks by one ldmatrix x4: matrices (rows
 * 8 j, columns 16 ks), (8 j, 16 ks + 8), (8 j + 8, 16 ks), (8 j + 8, 16 ks +
 * 8), lane l giving row l % 8 of matrix l / 8. Each acc[j] sums its k steps
 * in order. */
template <int NT, int KS, int LD>
__device__ __forceinline__ void product(float acc[NT][4], const uint32_t a[KS][4],
                                        const uint16_t *tile, int lane)
{
    zero<NT>(acc);
    const uint16_t *rows = tile + ((lane & 7) + 8 * (lane >> 4)) * LD + 8 * (lane >> 3 & 1);
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

/* acc[jn] += p times tile (staged rows the k of this product, columns its
 * n), p the C fragments of NP tiles of 8 columns (the k), rounded to bf16 as
 * A fragments (the C layout of two adjacent tiles is A's layout of one k
 * step); B of n tiles jn, jn + 1 by one ldmatrix x4.trans: matrices (rows
 * 16 kk, columns 8 jn), (16 kk + 8, 8 jn), (16 kk, 8 jn + 8), (16 kk + 8,
 * 8 jn + 8). Each acc[jn] sums its k steps in order. */
template <int NP, int NT, int LD>
__device__ __forceinline__ void accumulate(float acc[NT][4], const float p[NP][4],
                                           const uint16_t *tile, int lane)
{
    const uint16_t *rows = tile + ((lane & 7) + 8 * (lane >> 3 & 1)) * LD + 8 * (lane >> 4);
#pragma unroll
    for (int kk = 0; kk < NP / 2; kk++) {
        const uint32_t a[4] = {pack(p[2 * kk][0], p[2 * kk][1]), pack(p[2 * kk][2], p[2 * kk][3]),
                               pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                               pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int jn = 0; jn < NT; jn += 2) {
            uint32_t b[4];
            pp_ldmatrix_x4<true>(b, rows + 16 * kk * LD + 8 * jn);
            pp_mma_bf16_16816(acc[jn], a, b, acc[jn]);
            pp_mma_bf16_16816(acc[jn + 1], a, b + 2, acc[jn + 1]);
        }
    }
}

/* rows r0 and r0 + 8 of out (rows ld apart) = acc's columns below hs, each rounded once */
template <int NT>
__device__ __forceinline__ void store_rows(uint16_t *out, int64_t ld, const float acc[NT][4],
                                           int r0, int t, int hs, int q, float s0, float s1)
{
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = r0 + 8 * half;
        const float f = half ? s1 : s0;
        if (r >= t) continue;
        uint16_t *row = out + (int64_t)r * ld;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int col = 8 * j + 2 * q;
            if (col >= hs) continue;
            row[col] = narrow(acc[j][2 * half] * f);
            row[col + 1] = narrow(acc[j][2 * half + 1] * f);
        }
    }
}

/* P M of (sample n, head h, query tq, key tk) from its probability p: the
 * factor drawn only where p is not 0 (inside the causal triangle) and the
 * query within t */
__device__ __forceinline__ float dropped(const att_geom &g, const att_drop &dr, int n, int h,
                                         int tq, int tk, float p)
{
    return p == 0.0f || tq >= g.t ? 0.0f : p * drop_factor(g, dr, n, h, tq, tk);
}

/* P (times the dropout factor M with DROP) and dS = P (M dP - delta) scale of
 * (sample n, head h, query tq, key tk) from its score s, dP, lse and delta:
 * both 0 outside the causal triangle or past t (no factor drawn there) */
template <bool DROP>
__device__ __forceinline__ void prob_dscore(const att_geom &g, const att_drop &dr, int n, int h,
                                            int tq, int tk, float s, float dp, float lse,
                                            float delta, float *p, float *ds)
{
    float pv = 0.0f, dsv = 0.0f;
    if (tk <= tq && tq < g.t) {
        pv = expf(s * g.scale - lse);
        if (DROP) {
            const float m = drop_factor(g, dr, n, h, tq, tk);
            dsv = pv * (m * dp - delta) * g.scale;
            pv *= m;
        } else {
            dsv = pv * (dp - delta) * g.scale;
        }
    }
    *p = pv;
    *ds = dsv;
}

/* With DROP, each P is multiplied by its dropout factor before O += P V (l,
 * m and lse stay the undropped softmax's) */
template <int HS, bool DROP>
__global__ void __launch_bounds__(MMA_THREADS)
    forward_mma_k(att_geom g, att_drop dr, const uint16_t *qkv, uint16_t *y, float *lse)
{
    constexpr int KS = HS / 16, NT = HS / 8, NS = MB / 8, LD = HS + SKEW;
    alignas(16) __shared__ uint16_t sk[MB * LD], sv[MB * LD];
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, gr = lane / 4, q = lane % 4;
    const int q0 = blockIdx.x * MB, h = blockIdx.y, n = blockIdx.z;
    const uint16_t *base = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    const int r0 = q0 + 16 * warp + gr; /* the lane's rows: r0 and r0 + 8 */
    uint32_t qa[KS][4];
    load_a<KS>(qa, base, g.ld, r0, g.t, g.hs, q);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[NT][4];
    zero<NT>(o);
    const int kend = q0 + MB < g.t ? q0 + MB : g.t;
    stage<HS, MB>(sk, base + g.c, g.ld, 0, g.t, g.hs);
    pp_cp_async_commit();
    for (int k0 = 0; k0 < kend; k0 += MB) {
        /* this tile's V, copied under S's products (sv is read: the loop's end) */
        stage<HS, MB>(sv, base + 2 * g.c, g.ld, k0, g.t, g.hs);
        pp_cp_async_commit();
        pp_cp_async_wait<1>(); /* this tile's K, the group before */
        __syncthreads();
        float s[NS][4];
        product<NS, KS, LD>(s, qa, sk, lane);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < NS; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int tk = k0 + 8 * j + 2 * q + (i & 1), tq = r0 + 8 * (i / 2);
                s[j][i] = tk <= tq && tk < g.t ? s[j][i] * g.scale : -INFINITY;
                mx[i / 2] = fmax2(mx[i / 2], s[j][i]);
            }
        float alpha[2], ls[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmax2(mx[r], __shfl_xor_sync(FULL, mx[r], 1));
            mx[r] = fmax2(mx[r], __shfl_xor_sync(FULL, mx[r], 2));
            const float mnew = fmax2(m[r], mx[r]);
            alpha[r] = mnew == -INFINITY ? 1.0f : expf(m[r] - mnew);
            m[r] = mnew;
        }
#pragma unroll
        for (int j = 0; j < NS; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float p = s[j][i] == -INFINITY ? 0.0f : expf(s[j][i] - m[i / 2]);
                ls[i / 2] += p;
                if (DROP) /* the sum is the undropped softmax's; O sums P M v */
                    s[j][i] = dropped(g, dr, n, h, r0 + 8 * (i / 2), k0 + 8 * j + 2 * q + (i & 1),
                                      p);
                else
                    s[j][i] = p;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) l[r] = l[r] * alpha[r] + ls[r];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
        }
        __syncthreads(); /* sk is read: the next tile's K, copied under O += P V */
        if (k0 + MB < kend) stage<HS, MB>(sk, base + g.c, g.ld, k0 + MB, g.t, g.hs);
        pp_cp_async_commit();
        pp_cp_async_wait<1>(); /* this tile's V */
        __syncthreads();
        accumulate<NS, NT, LD>(o, s, sv, lane);
        __syncthreads(); /* sv is read */
    }
    /* a row's sum: its quad's four partial sums */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(FULL, l[r], 1);
        l[r] += __shfl_xor_sync(FULL, l[r], 2);
    }
    store_rows<NT>(y + (int64_t)n * g.t * g.c + (int64_t)h * g.hs, g.c, o, r0, g.t, g.hs, q,
                   1.0f / l[0], 1.0f / l[1]);
    if (q != 0) return;
    float *lr = lse + ((int64_t)n * g.heads + h) * g.t;
#pragma unroll
    for (int r = 0; r < 2; r++)
        if (r0 + 8 * r < g.t) lr[r0 + 8 * r] = (float)((double)m[r] + log((double)l[r]));
}

/* dk and dv of a block of MB keys, over the query tiles of BQ at or after
 * them; with DROP, dV from P^T M^T and dS^T = P^T (M^T dP^T - delta) scale */
template <int HS, int BQ, bool DROP>
__global__ void __launch_bounds__(MMA_THREADS)
    dkv_mma_k(att_geom g, att_drop dr, const uint16_t *qkv, const uint16_t *dy, const float *lse,
              const float *delta, uint16_t *dqkv)
{
    constexpr int KS = HS / 16, NT = HS / 8, NQ = BQ / 8, LD = HS + SKEW;
    alignas(16) __shared__ uint16_t sq[2][BQ * LD], sdy[2][BQ * LD]; /* two buffers */
    __shared__ float s_lse[2][BQ], s_delta[2][BQ];
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, gr = lane / 4, q = lane % 4;
    const int k0 = blockIdx.x * MB, h = blockIdx.y, n = blockIdx.z;
    const uint16_t *base = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    const uint16_t *dyh = dy + (int64_t)n * g.t * g.c + (int64_t)h * g.hs;
    const int64_t lrow = ((int64_t)n * g.heads + h) * g.t;
    const int r0 = k0 + 16 * warp + gr; /* the lane's keys: r0 and r0 + 8 */
    uint32_t ka[KS][4], va[KS][4];
    load_a<KS>(ka, base + g.c, g.ld, r0, g.t, g.hs, q);
    load_a<KS>(va, base + 2 * g.c, g.ld, r0, g.t, g.hs, q);
    float dk[NT][4], dv[NT][4];
    zero<NT>(dk);
    zero<NT>(dv);
    /* query tile q0 into buffer b: Q and dY by cp.async (the thread's open
     * group), lse and delta by plain loads */
    const auto stage_q = [&](int b, int q0) {
        stage<HS, BQ>(sq[b], base, g.ld, q0, g.t, g.hs);
        stage<HS, BQ>(sdy[b], dyh, g.c, q0, g.t, g.hs);
        for (int r = threadIdx.x; r < BQ; r += MMA_THREADS) {
            s_lse[b][r] = q0 + r < g.t ? lse[lrow + q0 + r] : 0.0f;
            s_delta[b][r] = q0 + r < g.t ? delta[lrow + q0 + r] : 0.0f;
        }
    };
    stage_q(0, k0 / BQ * BQ);
    pp_cp_async_commit();
    for (int q0 = k0 / BQ * BQ, b = 0; q0 < g.t; q0 += BQ, b ^= 1) {
        /* the next tile into the other buffer (read: the loop's end), under
         * this one's products */
        if (q0 + BQ < g.t) stage_q(b ^ 1, q0 + BQ);
        pp_cp_async_commit();
        pp_cp_async_wait<1>(); /* this tile, the group before */
        __syncthreads();
        float p[NQ][4], ds[NQ][4];
        product<NQ, KS, LD>(p, ka, sq[b], lane);   /* S^T */
        product<NQ, KS, LD>(ds, va, sdy[b], lane); /* dP^T */
#pragma unroll
        for (int j = 0; j < NQ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                /* S^T: the lane's rows are keys, its columns queries */
                const int c = 8 * j + 2 * q + (i & 1), tq = q0 + c, tk = r0 + 8 * (i / 2);
                prob_dscore<DROP>(g, dr, n, h, tq, tk, p[j][i], ds[j][i], s_lse[b][c],
                                  s_delta[b][c], &p[j][i], &ds[j][i]);
            }
        accumulate<NQ, NT, LD>(dv, p, sdy[b], lane);
        accumulate<NQ, NT, LD>(dk, ds, sq[b], lane);
        __syncthreads(); /* buffer b is read */
    }
    uint16_t *out = dqkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    store_rows<NT>(out + g.c, g.ld, dk, r0, g.t, g.hs, q, 1.0f, 1.0f);
    store_rows<NT>(out + 2 * g.c, g.ld, dv, r0, g.t, g.hs, q, 1.0f, 1.0f);
}

/* dq of a block of MB queries, over the key tiles of BK up to them; with
 * DROP, dS = P (M dP - delta) scale */
template <int HS, int BK, bool DROP>
__global__ void __launch_bounds__(MMA_THREADS)
    dq_mma_k(att_geom g, att_drop dr, const uint16_t *qkv, const uint16_t *dy, const float *lse,
             const float *delta, uint16_t *dqkv)
{
    constexpr int KS = HS / 16, NT = HS / 8, NK = BK / 8, LD = HS + SKEW;
    alignas(16) __shared__ uint16_t sk[2][BK * LD], sv[2][BK * LD]; /* two buffers */
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, gr = lane / 4, q = lane % 4;
    const int q0 = blockIdx.x * MB, h = blockIdx.y, n = blockIdx.z;
    const uint16_t *base = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    const int64_t lrow = ((int64_t)n * g.heads + h) * g.t;
    const int r0 = q0 + 16 * warp + gr; /* the lane's queries: r0 and r0 + 8 */
    uint32_t qa[KS][4], dya[KS][4];
    load_a<KS>(qa, base, g.ld, r0, g.t, g.hs, q);
    load_a<KS>(dya, dy + (int64_t)n * g.t * g.c + (int64_t)h * g.hs, g.c, r0, g.t, g.hs, q);
    float rl[2], rd[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const bool in = r0 + 8 * r < g.t;
        rl[r] = in ? lse[lrow + r0 + 8 * r] : 0.0f;
        rd[r] = in ? delta[lrow + r0 + 8 * r] : 0.0f;
    }
    float dq[NT][4];
    zero<NT>(dq);
    const int kend = q0 + MB < g.t ? q0 + MB : g.t;
    stage<HS, BK>(sk[0], base + g.c, g.ld, 0, g.t, g.hs);
    stage<HS, BK>(sv[0], base + 2 * g.c, g.ld, 0, g.t, g.hs);
    pp_cp_async_commit();
    for (int k0 = 0, b = 0; k0 < kend; k0 += BK, b ^= 1) {
        /* the next key tile into the other buffer (read: the loop's end),
         * under this one's products */
        if (k0 + BK < kend) {
            stage<HS, BK>(sk[b ^ 1], base + g.c, g.ld, k0 + BK, g.t, g.hs);
            stage<HS, BK>(sv[b ^ 1], base + 2 * g.c, g.ld, k0 + BK, g.t, g.hs);
        }
        pp_cp_async_commit();
        pp_cp_async_wait<1>(); /* this tile, the group before */
        __syncthreads();
        float s[NK][4], ds[NK][4];
        product<NK, KS, LD>(s, qa, sk[b], lane);
        product<NK, KS, LD>(ds, dya, sv[b], lane); /* dP */
#pragma unroll
        for (int j = 0; j < NK; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int tk = k0 + 8 * j + 2 * q + (i & 1), tq = r0 + 8 * (i / 2);
                prob_dscore<DROP>(g, dr, n, h, tq, tk, s[j][i], ds[j][i], rl[i / 2], rd[i / 2],
                                  &s[j][i], &ds[j][i]);
            }
        accumulate<NK, NT, LD>(dq, ds, sk[b], lane);
        __syncthreads(); /* buffer b is read */
    }
    store_rows<NT>(dqkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs, g.ld, dq, r0, g.t, g.hs,
                   q, 1.0f, 1.0f);
}

template <int HS>
cudaError_t forward_mma_at(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                           const pp_dropout_desc *drop, const uint16_t *qkv, uint16_t *y,
                           float *lse)
{
    const dim3 grid((unsigned)((d.t + MB - 1) / MB), (unsigned)d.heads, (unsigned)d.n);
    bool on;
    const att_drop dr = drop_of(drop, &on);
    if (on)
        forward_mma_k<HS, true><<<grid, MMA_THREADS, 0, s>>>(g, dr, qkv, y, lse);
    else
        forward_mma_k<HS, false><<<grid, MMA_THREADS, 0, s>>>(g, dr, qkv, y, lse);
    return cudaGetLastError();
}

/* the backward's query tiles (dkv) and key tiles (dq): 64, or 32 where the
 * head is 128 (four staged tiles of 64 rows of 128 columns would pass 48 KiB) */
template <int HS> constexpr int back_tile()
{
    return HS > 64 ? 32 : 64;
}

/* the backward's two passes with tiles of B (back_tile) */
template <int HS, int B, bool DROP>
cudaError_t backward_mma_as(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                            const att_drop &dr, const uint16_t *qkv, const uint16_t *dy,
                            const float *lse, const float *delta, uint16_t *dqkv)
{
    const dim3 grid((unsigned)((d.t + MB - 1) / MB), (unsigned)d.heads, (unsigned)d.n);
    dkv_mma_k<HS, B, DROP><<<grid, MMA_THREADS, 0, s>>>(g, dr, qkv, dy, lse, delta, dqkv);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    dq_mma_k<HS, B, DROP><<<grid, MMA_THREADS, 0, s>>>(g, dr, qkv, dy, lse, delta, dqkv);
    return cudaGetLastError();
}

template <int HS>
cudaError_t backward_mma_at(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                            const pp_dropout_desc *drop, const uint16_t *qkv, const uint16_t *dy,
                            const float *lse, const float *delta, uint16_t *dqkv)
{
    bool on;
    const att_drop dr = drop_of(drop, &on);
    constexpr int B = back_tile<HS>();
    if (on) return backward_mma_as<HS, B, true>(s, d, g, dr, qkv, dy, lse, delta, dqkv);
    return backward_mma_as<HS, B, false>(s, d, g, dr, qkv, dy, lse, delta, dqkv);
}

} // namespace

extern "C" {

bool pp_cuda_attention_mma_takes(pp_cuda_attention_dims d)
{
    return dims_ok(d) && (d.c / d.heads) % 16 == 0;
}

cudaError_t pp_cuda_launch_attention_forward_mma(cudaStream_t s, pp_cuda_attention_dims d,
                                                 const pp_dropout_desc *drop,
                                                 const uint16_t *qkv, uint16_t *y, float *lse)
{
    if (!pp_cuda_attention_mma_takes(d)) return cudaErrorInvalidValue;
    const att_geom g = geom_of(d);
    if (g.hs <= 16) return forward_mma_at<16>(s, d, g, drop, qkv, y, lse);
    if (g.hs <= 32) return forward_mma_at<32>(s, d, g, drop, qkv, y, lse);
    if (g.hs <= 64) return forward_mma_at<64>(s, d, g, drop, qkv, y, lse);
    return forward_mma_at<128>(s, d, g, drop, qkv, y, lse);
}

cudaError_t pp_cuda_launch_attention_backward_mma(cudaStream_t s, unsigned max_grid,
                                                  pp_cuda_attention_dims d,
                                                  const pp_dropout_desc *drop, const uint16_t *qkv,
                                                  const uint16_t *y, const float *lse,
                                                  const uint16_t *dy, float *delta,
                                                  uint16_t *dqkv)
{
    if (!pp_cuda_attention_mma_takes(d)) return cudaErrorInvalidValue;
    const att_geom g = geom_of(d);
    const cudaError_t e = launch_delta<bf16_elems>(s, max_grid, d, g, y, dy, delta);
    if (e != cudaSuccess) return e;
    if (g.hs <= 16) return backward_mma_at<16>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
    if (g.hs <= 32) return backward_mma_at<32>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
    if (g.hs <= 64) return backward_mma_at<64>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
    return backward_mma_at<128>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
}

} // extern "C"
