/*
 * attention_tc.cuh - the tensor-core attention kernels shared by
 * attention_mma.cu (bf16 operands, m16n8k16 bf16 products) and
 * attention_tf32.cu (f32 operands, m16n8k8 TF32 products in 3xTF32):
 * FlashAttention-2's scheme, the kernels, their tiles and the host-side
 * launches, templated on the element's operations P. The scheme (which warp
 * holds which rows, what is staged and when, the order of every sum) is
 * described in attention_mma.cu and is the same for both; P says how a
 * tile is staged and how its products are taken.
 *
 * The pieces that do not depend on the element type are here too: the
 * online softmax of a key tile on a warp's score fragments (a lane holds
 * rows g and g + 8 of each m16n8 C fragment, columns 2q and 2q + 1), the
 * end of the forward's rows (sum, lse), a probability and its score
 * gradient with dropout's factor.
 *
 * The staging (16-byte cp.async copies) and the stores are the same for
 * both and live here too. P provides, as static __device__ members (the
 * tile sizes constexpr, __host__ too):
 *   elem, wide(e)        an element of qkv, y, dy, dqkv and it as f32 (what
 *                        attention_tile.cuh's delta kernel reads)
 *   afrag, K             an A fragment register, and the k of one mma step
 *   SKEW                 elements a staged row is padded by (pitch HS + SKEW)
 *   fwd_tile<HS>()       the forward's key tiles (rows), a multiple of 16
 *   back_tile<HS>()      the backward's streamed tiles (rows), likewise
 *   load_a<KS>(a, src, ld, r0, t, hs, q)
 *                        the A fragments of rows r0, r0 + 8 (k steps of K
 *                        columns) from global memory
 *   product<NT, KS, LD>(acc, a, tile, lane)
 *                        acc[j] = A times (staged rows 8 j..)^T, j < NT
 *   accumulate<NP, NT, LD>(acc, p, tile, lane)
 *                        acc += p times tile, p NP C fragments (the k), the
 *                        tile's rows the k
 *   out(x)               an f32 result as the element stored
 *
 * Included by one .cu file each: everything lives in an anonymous namespace.
 */
#ifndef PP_CUDA_ATTENTION_TC_CUH
#define PP_CUDA_ATTENTION_TC_CUH

#include "attention_tile.cuh"
#include "cp_async.cuh"

namespace {

constexpr int MMA_THREADS = 128; /* 4 warps of 16 rows */
constexpr int MB = 64;           /* a block's rows: queries (forward, dq) or keys (dkv) */

/* acc = 0 */
template <int NT> __device__ __forceinline__ void zero(float acc[NT][4])
{
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
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

/* One key tile of the forward's online softmax on a warp's score fragments
 * (NS tiles of 8 keys from k0; the lane's rows r0 and r0 + 8, its columns 2q
 * and 2q + 1 of each tile; a row's scores of the tile lie in the 4 lanes of
 * a quad: maximum and sum by two xor shuffles): s scaled and masked (key
 * after the query or past t: -inf), the rows' running maximum m and sum l
 * brought up to the tile, O's NT tiles rescaled by exp(m_old - m_new), and
 * s replaced by P = exp(s - m) (with DROP, P times the dropout factor: l
 * sums the undropped P, O will sum P M v). */
template <int NS, int NT, bool DROP>
__device__ __forceinline__ void softmax_tile(const att_geom &g, const att_drop &dr, int n, int h,
                                             int r0, int k0, int q, float s[NS][4], float m[2],
                                             float l[2], float o[NT][4])
{
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
}

/* The end of the forward's rows r0 and r0 + 8 of a lane (quad q of their
 * group): each row's sum l, the four partial sums of its quad added, and
 * lse = m + log(l) of the rows below t, written by the quad's first lane */
__device__ __forceinline__ void finish_rows(const att_geom &g, int n, int h, int r0, int q,
                                            const float m[2], float l[2], float *lse)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(FULL, l[r], 1);
        l[r] += __shfl_xor_sync(FULL, l[r], 2);
    }
    if (q != 0) return;
    float *lr = lse + ((int64_t)n * g.heads + h) * g.t;
#pragma unroll
    for (int r = 0; r < 2; r++)
        if (r0 + 8 * r < g.t) lr[r0 + 8 * r] = (float)((double)m[r] + log((double)l[r]));
}

/* rows r0.. (ROWS) of src (rows ld elements apart, columns below hs) into
 * dst (rows HS + SKEW elements apart), 16 bytes a copy (8 bf16 or 4 f32):
 * cp.async where the row is below t, the copy's columns below hs (hs a
 * multiple of them) and the source 16-byte aligned, plain loads where it is
 * not aligned, zeros past t or hs; the copies are the calling thread's open
 * cp.async group */
template <class E, int HS, int ROWS, int SKEW>
__device__ __forceinline__ void stage(E *dst, const E *src, int64_t ld, int r0, int t, int hs)
{
    constexpr int W = 16 / (int)sizeof(E), CH = HS / W, LD = HS + SKEW;
    for (int i = threadIdx.x; i < ROWS * CH; i += MMA_THREADS) {
        const int r = i / CH, c = W * (i % CH);
        E *d = dst + r * LD + c;
        if (r0 + r >= t || c >= hs) {
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
            continue;
        }
        const E *p = src + (int64_t)(r0 + r) * ld + c;
        if (((uintptr_t)p & 15u) == 0)
            pp_cp_async_16(d, p);
        else
#pragma unroll
            for (int e = 0; e < W; e++) d[e] = p[e];
    }
}

/* rows r0 and r0 + 8 of out (rows ld apart) = acc's columns below hs (a
 * lane's C fragments: columns 8 j + 2q and 8 j + 2q + 1), row r0 times s0
 * and row r0 + 8 times s1, each stored as P::out gives it (rounded once to
 * bf16, or f32 as it is) */
template <class P, int NT>
__device__ __forceinline__ void store_rows(typename P::elem *out, int64_t ld,
                                           const float acc[NT][4], int r0, int t, int hs, int q,
                                           float s0, float s1)
{
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = r0 + 8 * half;
        const float f = half ? s1 : s0;
        if (r >= t) continue;
        typename P::elem *row = out + (int64_t)r * ld;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int col = 8 * j + 2 * q;
            if (col >= hs) continue;
            row[col] = P::out(acc[j][2 * half] * f);
            row[col + 1] = P::out(acc[j][2 * half + 1] * f);
        }
    }
}

/* y and lse of a block of MB queries, over the key tiles of BK up to them;
 * with DROP, each P is multiplied by its dropout factor before O += P V (l,
 * m and lse stay the undropped softmax's) */
template <class P, int HS, bool DROP>
__global__ void __launch_bounds__(MMA_THREADS)
    forward_mma_k(att_geom g, att_drop dr_in, const typename P::elem *qkv, typename P::elem *y,
                  float *lse)
{
    const att_drop dr = drop_read(dr_in);
    typedef typename P::elem E;
    constexpr int BK = P::template fwd_tile<HS>();
    constexpr int KS = HS / P::K, NT = HS / 8, NS = BK / 8, LD = HS + P::SKEW;
    alignas(16) __shared__ E sk[BK * LD], sv[BK * LD];
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, gr = lane / 4, q = lane % 4;
    const int q0 = blockIdx.x * MB, h = blockIdx.y, n = blockIdx.z;
    const E *base = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    const int r0 = q0 + 16 * warp + gr; /* the lane's rows: r0 and r0 + 8 */
    typename P::afrag qa[KS][4];
    P::template load_a<KS>(qa, base, g.ld, r0, g.t, g.hs, q);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[NT][4];
    zero<NT>(o);
    const int kend = q0 + MB < g.t ? q0 + MB : g.t;
    stage<E, HS, BK, P::SKEW>(sk, base + g.c, g.ld, 0, g.t, g.hs);
    pp_cp_async_commit();
    for (int k0 = 0; k0 < kend; k0 += BK) {
        /* this tile's V, copied under S's products (sv is read: the loop's end) */
        stage<E, HS, BK, P::SKEW>(sv, base + 2 * g.c, g.ld, k0, g.t, g.hs);
        pp_cp_async_commit();
        pp_cp_async_wait<1>(); /* this tile's K, the group before */
        __syncthreads();
        float s[NS][4];
        P::template product<NS, KS, LD>(s, qa, sk, lane);
        softmax_tile<NS, NT, DROP>(g, dr, n, h, r0, k0, q, s, m, l, o);
        __syncthreads(); /* sk is read: the next tile's K, copied under O += P V */
        if (k0 + BK < kend) stage<E, HS, BK, P::SKEW>(sk, base + g.c, g.ld, k0 + BK, g.t, g.hs);
        pp_cp_async_commit();
        pp_cp_async_wait<1>(); /* this tile's V */
        __syncthreads();
        P::template accumulate<NS, NT, LD>(o, s, sv, lane);
        __syncthreads(); /* sv is read */
    }
    finish_rows(g, n, h, r0, q, m, l, lse);
    store_rows<P, NT>(y + (int64_t)n * g.t * g.c + (int64_t)h * g.hs, g.c, o, r0, g.t,
                               g.hs, q, 1.0f / l[0], 1.0f / l[1]);
}

/* dk and dv of a block of MB keys, over the query tiles of BQ at or after
 * them; with DROP, dV from P^T M^T and dS^T = P^T (M^T dP^T - delta) scale */
template <class P, int HS, bool DROP>
__global__ void __launch_bounds__(MMA_THREADS)
    dkv_mma_k(att_geom g, att_drop dr_in, const typename P::elem *qkv, const typename P::elem *dy,
              const float *lse, const float *delta, typename P::elem *dqkv)
{
    const att_drop dr = drop_read(dr_in);
    typedef typename P::elem E;
    constexpr int BQ = P::template back_tile<HS>();
    constexpr int KS = HS / P::K, NT = HS / 8, NQ = BQ / 8, LD = HS + P::SKEW;
    alignas(16) __shared__ E sq[2][BQ * LD], sdy[2][BQ * LD]; /* two buffers */
    __shared__ float s_lse[2][BQ], s_delta[2][BQ];
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, gr = lane / 4, q = lane % 4;
    const int k0 = blockIdx.x * MB, h = blockIdx.y, n = blockIdx.z;
    const E *base = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    const E *dyh = dy + (int64_t)n * g.t * g.c + (int64_t)h * g.hs;
    const int64_t lrow = ((int64_t)n * g.heads + h) * g.t;
    const int r0 = k0 + 16 * warp + gr; /* the lane's keys: r0 and r0 + 8 */
    typename P::afrag ka[KS][4], va[KS][4];
    P::template load_a<KS>(ka, base + g.c, g.ld, r0, g.t, g.hs, q);
    P::template load_a<KS>(va, base + 2 * g.c, g.ld, r0, g.t, g.hs, q);
    float dk[NT][4], dv[NT][4];
    zero<NT>(dk);
    zero<NT>(dv);
    /* query tile q0 into buffer b: Q and dY by cp.async (the thread's open
     * group), lse and delta by plain loads */
    const auto stage_q = [&](int b, int q0) {
        stage<E, HS, BQ, P::SKEW>(sq[b], base, g.ld, q0, g.t, g.hs);
        stage<E, HS, BQ, P::SKEW>(sdy[b], dyh, g.c, q0, g.t, g.hs);
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
        P::template product<NQ, KS, LD>(p, ka, sq[b], lane);   /* S^T */
        P::template product<NQ, KS, LD>(ds, va, sdy[b], lane); /* dP^T */
#pragma unroll
        for (int j = 0; j < NQ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                /* S^T: the lane's rows are keys, its columns queries */
                const int c = 8 * j + 2 * q + (i & 1), tq = q0 + c, tk = r0 + 8 * (i / 2);
                prob_dscore<DROP>(g, dr, n, h, tq, tk, p[j][i], ds[j][i], s_lse[b][c],
                                  s_delta[b][c], &p[j][i], &ds[j][i]);
            }
        P::template accumulate<NQ, NT, LD>(dv, p, sdy[b], lane);
        P::template accumulate<NQ, NT, LD>(dk, ds, sq[b], lane);
        __syncthreads(); /* buffer b is read */
    }
    E *out = dqkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    store_rows<P, NT>(out + g.c, g.ld, dk, r0, g.t, g.hs, q, 1.0f, 1.0f);
    store_rows<P, NT>(out + 2 * g.c, g.ld, dv, r0, g.t, g.hs, q, 1.0f, 1.0f);
}

/* dq of a block of MB queries, over the key tiles of BK up to them; with
 * DROP, dS = P (M dP - delta) scale */
template <class P, int HS, bool DROP>
__global__ void __launch_bounds__(MMA_THREADS)
    dq_mma_k(att_geom g, att_drop dr_in, const typename P::elem *qkv, const typename P::elem *dy,
             const float *lse, const float *delta, typename P::elem *dqkv)
{
    const att_drop dr = drop_read(dr_in);
    typedef typename P::elem E;
    constexpr int BK = P::template back_tile<HS>();
    constexpr int KS = HS / P::K, NT = HS / 8, NK = BK / 8, LD = HS + P::SKEW;
    alignas(16) __shared__ E sk[2][BK * LD], sv[2][BK * LD]; /* two buffers */
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, gr = lane / 4, q = lane % 4;
    const int q0 = blockIdx.x * MB, h = blockIdx.y, n = blockIdx.z;
    const E *base = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    const int64_t lrow = ((int64_t)n * g.heads + h) * g.t;
    const int r0 = q0 + 16 * warp + gr; /* the lane's queries: r0 and r0 + 8 */
    typename P::afrag qa[KS][4], dya[KS][4];
    P::template load_a<KS>(qa, base, g.ld, r0, g.t, g.hs, q);
    P::template load_a<KS>(dya, dy + (int64_t)n * g.t * g.c + (int64_t)h * g.hs, g.c, r0, g.t,
                           g.hs, q);
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
    stage<E, HS, BK, P::SKEW>(sk[0], base + g.c, g.ld, 0, g.t, g.hs);
    stage<E, HS, BK, P::SKEW>(sv[0], base + 2 * g.c, g.ld, 0, g.t, g.hs);
    pp_cp_async_commit();
    for (int k0 = 0, b = 0; k0 < kend; k0 += BK, b ^= 1) {
        /* the next key tile into the other buffer (read: the loop's end),
         * under this one's products */
        if (k0 + BK < kend) {
            stage<E, HS, BK, P::SKEW>(sk[b ^ 1], base + g.c, g.ld, k0 + BK, g.t, g.hs);
            stage<E, HS, BK, P::SKEW>(sv[b ^ 1], base + 2 * g.c, g.ld, k0 + BK, g.t, g.hs);
        }
        pp_cp_async_commit();
        pp_cp_async_wait<1>(); /* this tile, the group before */
        __syncthreads();
        float s[NK][4], ds[NK][4];
        P::template product<NK, KS, LD>(s, qa, sk[b], lane);
        P::template product<NK, KS, LD>(ds, dya, sv[b], lane); /* dP */
#pragma unroll
        for (int j = 0; j < NK; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int tk = k0 + 8 * j + 2 * q + (i & 1), tq = r0 + 8 * (i / 2);
                prob_dscore<DROP>(g, dr, n, h, tq, tk, s[j][i], ds[j][i], rl[i / 2], rd[i / 2],
                                  &s[j][i], &ds[j][i]);
            }
        P::template accumulate<NK, NT, LD>(dq, ds, sk[b], lane);
        __syncthreads(); /* buffer b is read */
    }
    store_rows<P, NT>(dqkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs, g.ld, dq, r0,
                               g.t, g.hs, q, 1.0f, 1.0f);
}

template <class P, int HS>
cudaError_t forward_mma_at(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                           const pp_dropout_desc *drop, const typename P::elem *qkv,
                           typename P::elem *y, float *lse)
{
    const dim3 grid((unsigned)((d.t + MB - 1) / MB), (unsigned)d.heads, (unsigned)d.n);
    bool on;
    const att_drop dr = drop_of(drop, &on);
    if (on)
        forward_mma_k<P, HS, true><<<grid, MMA_THREADS, 0, s>>>(g, dr, qkv, y, lse);
    else
        forward_mma_k<P, HS, false><<<grid, MMA_THREADS, 0, s>>>(g, dr, qkv, y, lse);
    return cudaGetLastError();
}

template <class P, int HS, bool DROP>
cudaError_t backward_mma_as(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                            const att_drop &dr, const typename P::elem *qkv,
                            const typename P::elem *dy, const float *lse, const float *delta,
                            typename P::elem *dqkv)
{
    const dim3 grid((unsigned)((d.t + MB - 1) / MB), (unsigned)d.heads, (unsigned)d.n);
    dkv_mma_k<P, HS, DROP><<<grid, MMA_THREADS, 0, s>>>(g, dr, qkv, dy, lse, delta, dqkv);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    dq_mma_k<P, HS, DROP><<<grid, MMA_THREADS, 0, s>>>(g, dr, qkv, dy, lse, delta, dqkv);
    return cudaGetLastError();
}

template <class P, int HS>
cudaError_t backward_mma_at(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                            const pp_dropout_desc *drop, const typename P::elem *qkv,
                            const typename P::elem *dy, const float *lse, const float *delta,
                            typename P::elem *dqkv)
{
    bool on;
    const att_drop dr = drop_of(drop, &on);
    if (on) return backward_mma_as<P, HS, true>(s, d, g, dr, qkv, dy, lse, delta, dqkv);
    return backward_mma_as<P, HS, false>(s, d, g, dr, qkv, dy, lse, delta, dqkv);
}

/* The forward on stream s by the kernel of the smallest head size of 16,
 * 32, 64 and 128 at or above the head's (zero columns past it); the caller
 * has checked that the kernels take d. */
template <class P>
cudaError_t launch_forward_mma(cudaStream_t s, const pp_cuda_attention_dims &d,
                               const pp_dropout_desc *drop, const typename P::elem *qkv,
                               typename P::elem *y, float *lse)
{
    const att_geom g = geom_of(d);
    if (g.hs <= 16) return forward_mma_at<P, 16>(s, d, g, drop, qkv, y, lse);
    if (g.hs <= 32) return forward_mma_at<P, 32>(s, d, g, drop, qkv, y, lse);
    if (g.hs <= 64) return forward_mma_at<P, 64>(s, d, g, drop, qkv, y, lse);
    return forward_mma_at<P, 128>(s, d, g, drop, qkv, y, lse);
}

/* The backward likewise: delta by attention_tile.cuh's kernel on at most
 * max_grid blocks, then the two passes. */
template <class P>
cudaError_t launch_backward_mma(cudaStream_t s, unsigned max_grid,
                                const pp_cuda_attention_dims &d, const pp_dropout_desc *drop,
                                const typename P::elem *qkv, const typename P::elem *y,
                                const float *lse, const typename P::elem *dy, float *delta,
                                typename P::elem *dqkv)
{
    const att_geom g = geom_of(d);
    const cudaError_t e = launch_delta<P>(s, max_grid, d, g, y, dy, delta);
    if (e != cudaSuccess) return e;
    if (g.hs <= 16) return backward_mma_at<P, 16>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
    if (g.hs <= 32) return backward_mma_at<P, 32>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
    if (g.hs <= 64) return backward_mma_at<P, 64>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
    return backward_mma_at<P, 128>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
}

} // namespace

#endif
