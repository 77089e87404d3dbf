/*
 * attention_tile.cuh - the tiled causal attention shared by attention.cu
 * (f32 tiles) and attention_bf16.cu (bf16 tiles): the kernels, their launch
 * geometry and the host-side launches, templated on a tile type T that says
 * how a tile holds its rows in shared memory (the tensor-core kernels of
 * attention_tc.cuh take their geometry, dropout's draw and the delta
 * kernel from here). The scheme (forward with an
 * online softmax, backward in two passes writing every element of dqkv
 * from one block, delta in double) is described in attention.cu; the
 * sums' order is fixed here and is the same for both element types.
 *
 * Dropout on the probabilities (ops.h: pp_attention_forward_dropout) is a
 * template flag, DROP, of every kernel: with it each probability of
 * (sample n, head h, query i, key j) is multiplied by dropout.h's factor
 * for (key, first_sample + n, (h t + i) t + j), drawn from the hash where
 * the probability is formed, in the forward and again in the backward (the
 * CPU's masks; nothing stored). The forward sums (P M) v and keeps the
 * undropped softmax's lse; the backward is runtime/cpu/attention.c's: dS =
 * P (M dP - delta) / sqrt(hs) with delta the row dot products of dy and
 * the dropped y, dv from P M. Without it (p == 0) the kernels are those
 * without dropout, the same instructions and bits: no factor is drawn.
 * A draw whose step is in device memory (pp_dropout_desc.step) forms its key
 * from it as each kernel starts (drop_read).
 *
 * T provides, as static __device__ members:
 *   elem                      an element of qkv, y, dy and dqkv in global memory
 *   word                      a word of a tile in shared memory
 *   ld<HS>()                  a tile row's stride in words (__host__ too, constexpr)
 *   load<HS, ROWS>(dst, src, ld, r0, t, hs)
 *                             rows r0.. of src (rows ld elements apart), ROWS
 *                             of them, into dst; zero past t or hs
 *   dot<HS, TPR, KPT>(a, tile, lane, s)
 *                             s[j] = the sum over d, in order, of a[d] times
 *                             row lane + TPR j of tile
 *   add<N, STEP>(acc, p, row, lane)
 *                             acc[j] += p times the thread's N columns of a
 *                             tile's row (which N: T's choice, given lane and
 *                             the stride STEP between the lanes of a row)
 *   store<N, STEP>(out, acc, lane, hs)
 *                             the same N columns of out, below hs, = acc
 *   wide(e)                   an element as f32, exactly
 *   to_elem(v)                f32 v as an element (bf16: rounded once)
 *
 * Included by one .cu file each: everything lives in an anonymous namespace.
 */
#ifndef PP_CUDA_ATTENTION_TILE_CUH
#define PP_CUDA_ATTENTION_TILE_CUH

#include <cmath>

#include "kernels.h"
#include "runtime/core/tensor.h"
#include "transformer.h"

namespace {

constexpr unsigned FULL = 0xffffffffu;
constexpr int WARP = 32;
constexpr int ATT_THREADS = 128;

struct att_geom {
    int t, c, hs, heads;
    int q0;      /* the forward's first query (y and lse hold rows q0..t-1) */
    int64_t ld;  /* 3c: a row of qkv */
    float scale; /* 1 / sqrt(hs) */
};

/* Dropout's draw (read by the DROP kernels only). */
struct att_drop {
    uint64_t key;
    int64_t first_sample;
    uint32_t threshold;
    float scale;         /* 1 / (1 - p) */
    const int64_t *step; /* the step in device memory (NULL: key as given) */
    uint64_t seed;
    int site;
};

/* The draw a kernel runs with: its key from the step in memory where there
 * is one, read at every run, so that a replayed graph (whose kernels keep
 * their captured arguments) draws the replayed step's masks. */
__device__ __forceinline__ att_drop drop_read(const att_drop &in)
{
    att_drop dr = in;
    dr.key = pp_dropout_key_at(in.key, in.step, in.seed, in.site);
    return dr;
}

/* The factor of (sample n, head h, query tq, key tk): 0 or 1 / (1 - p). */
__device__ __forceinline__ float drop_factor(const att_geom &g, const att_drop &dr, int n, int h,
                                             int tq, int tk)
{
    return pp_dropout_factor(dr.key, dr.first_sample + n, ((int64_t)h * g.t + tq) * g.t + tk,
                             dr.threshold, dr.scale);
}

__device__ __forceinline__ float fmax2(float a, float b)
{
    return a > b ? a : b;
}

template <class T, int HS, int BQ, int BK, bool DROP>
__global__ void __launch_bounds__(ATT_THREADS)
    forward_k(att_geom g, att_drop dr_in, const typename T::elem *qkv, typename T::elem *y,
              float *lse)
{
    const att_drop dr = drop_read(dr_in);
    typedef typename T::elem E;
    typedef typename T::word W;
    constexpr int TPR = ATT_THREADS / BQ, KPT = BK / TPR, DPT = HS / TPR;
    constexpr int LD = T::template ld<HS>(), LP = BK + 1;
    __shared__ W sq[BQ * LD], sk[BK * LD], sv[BK * LD];
    __shared__ float sp[BQ * LP];
    const int tid = threadIdx.x, row = tid / TPR, lane = tid % TPR;
    const int q0 = g.q0 + blockIdx.x * BQ, h = blockIdx.y, n = blockIdx.z;
    const E *q = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    T::template load<HS, BQ>(sq, q, g.ld, q0, g.t, g.hs);
    const int tq = q0 + row;
    float m = -INFINITY, l = 0.0f, o[DPT];
#pragma unroll
    for (int j = 0; j < DPT; j++) o[j] = 0.0f;
    const int kend = q0 + BQ < g.t ? q0 + BQ : g.t;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads(); /* the previous tiles are read */
        T::template load<HS, BK>(sk, q + g.c, g.ld, k0, g.t, g.hs);
        T::template load<HS, BK>(sv, q + 2 * g.c, g.ld, k0, g.t, g.hs);
        __syncthreads();
        float s[KPT], mx = -INFINITY;
        T::template dot<HS, TPR, KPT>(&sq[row * LD], sk, lane, s);
#pragma unroll
        for (int j = 0; j < KPT; j++) {
            const int tk = k0 + lane + TPR * j;
            s[j] = tk <= tq && tq < g.t ? s[j] * g.scale : -INFINITY;
            mx = fmax2(mx, s[j]);
        }
        for (int w = TPR / 2; w > 0; w /= 2) mx = fmax2(mx, __shfl_xor_sync(FULL, mx, w, TPR));
        const float mnew = fmax2(m, mx);
        const float alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew);
        float ls = 0.0f;
#pragma unroll
        for (int j = 0; j < KPT; j++) {
            const float p = s[j] == -INFINITY ? 0.0f : expf(s[j] - mnew);
            if (DROP) /* the sum is the undropped softmax's; O sums P M v */
                sp[row * LP + lane + TPR * j] =
                    p == 0.0f ? 0.0f : p * drop_factor(g, dr, n, h, tq, k0 + lane + TPR * j);
            else
                sp[row * LP + lane + TPR * j] = p;
            ls += p;
        }
        for (int w = TPR / 2; w > 0; w /= 2) ls += __shfl_xor_sync(FULL, ls, w, TPR);
        l = l * alpha + ls;
        m = mnew;
        __syncthreads(); /* the row's probabilities are in sp */
#pragma unroll
        for (int j = 0; j < DPT; j++) o[j] *= alpha;
        for (int kk = 0; kk < BK; kk++)
            T::template add<DPT, TPR>(o, sp[row * LP + kk], &sv[kk * LD], lane);
    }
    if (tq >= g.t) return;
    const float inv = 1.0f / l;
#pragma unroll
    for (int j = 0; j < DPT; j++) o[j] *= inv;
    const int rows = g.t - g.q0, r = tq - g.q0; /* y's and lse's rows */
    T::template store<DPT, TPR>(y + ((int64_t)n * rows + r) * g.c + (int64_t)h * g.hs, o, lane,
                                g.hs);
    if (lane == 0)
        lse[((int64_t)n * g.heads + h) * rows + r] = (float)((double)m + log((double)l));
}

/* P and dS of query row `row` (of the block at q0) against keys kk = lane +
 * TPR j of the key tile at k0, into sp (when not NULL) and sds; zero where
 * masked. With DROP, P M into sp and dS = P (M dP - delta) / sqrt(hs). */
template <class T, int HS, int BQ, int BK, bool DROP>
__device__ __forceinline__ void probs_and_dscores(const att_geom &g, const att_drop &dr, int n,
                                                  int h, const typename T::word *sq,
                                                  const typename T::word *sdy,
                                                  const typename T::word *sk,
                                                  const typename T::word *sv, const float *s_lse,
                                                  const float *s_delta, int q0, int k0, int row,
                                                  int lane, float *sp, float *sds)
{
    constexpr int TPR = ATT_THREADS / BQ, KPT = BK / TPR;
    constexpr int LD = T::template ld<HS>(), LP = BK + 1;
    const int tq = q0 + row;
    float sc[KPT], dp[KPT];
    T::template dot<HS, TPR, KPT>(&sq[row * LD], sk, lane, sc);
    T::template dot<HS, TPR, KPT>(&sdy[row * LD], sv, lane, dp);
#pragma unroll
    for (int j = 0; j < KPT; j++) {
        const int kk = lane + TPR * j, tk = k0 + kk;
        float p = 0.0f, ds = 0.0f;
        if (tq < g.t && tk <= tq) {
            p = expf(sc[j] * g.scale - s_lse[row]);
            if (DROP) {
                const float m = drop_factor(g, dr, n, h, tq, tk);
                ds = p * (m * dp[j] - s_delta[row]) * g.scale;
                p *= m;
            } else {
                ds = p * (dp[j] - s_delta[row]) * g.scale;
            }
        }
        if (sp) sp[row * LP + kk] = p;
        sds[row * LP + kk] = ds;
    }
}

/* lse and delta of the query block's rows (0 past t) */
template <int BQ>
__device__ __forceinline__ void load_rows(float *s_lse, float *s_delta, const float *lse,
                                          const float *delta, int q0, int t)
{
    for (int r = threadIdx.x; r < BQ; r += ATT_THREADS) {
        s_lse[r] = q0 + r < t ? lse[q0 + r] : 0.0f;
        s_delta[r] = q0 + r < t ? delta[q0 + r] : 0.0f;
    }
}

/* dk and dv of a block of BK keys: over the query blocks from the one
 * holding the first key to the end */
template <class T, int HS, int BQ, int BK, bool DROP>
__global__ void __launch_bounds__(ATT_THREADS)
    dkv_k(att_geom g, att_drop dr_in, const typename T::elem *qkv, const typename T::elem *dy,
          const float *lse, const float *delta, typename T::elem *dqkv)
{
    const att_drop dr = drop_read(dr_in);
    typedef typename T::elem E;
    typedef typename T::word W;
    constexpr int TPR = ATT_THREADS / BQ, TPK = ATT_THREADS / BK, DPT = HS / TPK;
    constexpr int LD = T::template ld<HS>(), LP = BK + 1;
    __shared__ W sk[BK * LD], sv[BK * LD], sq[BQ * LD], sdy[BQ * LD];
    __shared__ float sp[BQ * LP], sds[BQ * LP], s_lse[BQ], s_delta[BQ];
    const int tid = threadIdx.x;
    const int k0 = blockIdx.x * BK, h = blockIdx.y, n = blockIdx.z;
    const E *q = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    const E *dyh = dy + (int64_t)n * g.t * g.c + (int64_t)h * g.hs;
    const int64_t lrow = ((int64_t)n * g.heads + h) * g.t;
    T::template load<HS, BK>(sk, q + g.c, g.ld, k0, g.t, g.hs);
    T::template load<HS, BK>(sv, q + 2 * g.c, g.ld, k0, g.t, g.hs);
    const int krow = tid / TPK, klane = tid % TPK;
    float dk[DPT], dv[DPT];
#pragma unroll
    for (int j = 0; j < DPT; j++) dk[j] = dv[j] = 0.0f;
    for (int q0 = k0 / BQ * BQ; q0 < g.t; q0 += BQ) {
        __syncthreads(); /* the previous query tiles are read */
        T::template load<HS, BQ>(sq, q, g.ld, q0, g.t, g.hs);
        T::template load<HS, BQ>(sdy, dyh, g.c, q0, g.t, g.hs);
        load_rows<BQ>(s_lse, s_delta, lse + lrow, delta + lrow, q0, g.t);
        __syncthreads();
        probs_and_dscores<T, HS, BQ, BK, DROP>(g, dr, n, h, sq, sdy, sk, sv, s_lse, s_delta, q0,
                                               k0, tid / TPR, tid % TPR, sp, sds);
        __syncthreads();
        for (int r = 0; r < BQ; r++) {
            T::template add<DPT, TPK>(dv, sp[r * LP + krow], &sdy[r * LD], klane);
            T::template add<DPT, TPK>(dk, sds[r * LP + krow], &sq[r * LD], klane);
        }
    }
    const int tk = k0 + krow;
    if (tk >= g.t) return;
    E *out = dqkv + ((int64_t)n * g.t + tk) * g.ld + (int64_t)h * g.hs;
    T::template store<DPT, TPK>(out + g.c, dk, klane, g.hs);
    T::template store<DPT, TPK>(out + 2 * g.c, dv, klane, g.hs);
}

/* dq of a block of BQ queries: over the key tiles up to its last query */
template <class T, int HS, int BQ, int BK, bool DROP>
__global__ void __launch_bounds__(ATT_THREADS)
    dq_k(att_geom g, att_drop dr_in, const typename T::elem *qkv, const typename T::elem *dy,
         const float *lse, const float *delta, typename T::elem *dqkv)
{
    const att_drop dr = drop_read(dr_in);
    typedef typename T::elem E;
    typedef typename T::word W;
    constexpr int TPR = ATT_THREADS / BQ, DPT = HS / TPR;
    constexpr int LD = T::template ld<HS>(), LP = BK + 1;
    __shared__ W sq[BQ * LD], sdy[BQ * LD], sk[BK * LD], sv[BK * LD];
    __shared__ float sds[BQ * LP], s_lse[BQ], s_delta[BQ];
    const int tid = threadIdx.x, row = tid / TPR, lane = tid % TPR;
    const int q0 = blockIdx.x * BQ, h = blockIdx.y, n = blockIdx.z;
    const E *q = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    const int64_t lrow = ((int64_t)n * g.heads + h) * g.t;
    T::template load<HS, BQ>(sq, q, g.ld, q0, g.t, g.hs);
    T::template load<HS, BQ>(sdy, dy + (int64_t)n * g.t * g.c + (int64_t)h * g.hs, g.c, q0, g.t,
                             g.hs);
    load_rows<BQ>(s_lse, s_delta, lse + lrow, delta + lrow, q0, g.t);
    float dq[DPT];
#pragma unroll
    for (int j = 0; j < DPT; j++) dq[j] = 0.0f;
    const int kend = q0 + BQ < g.t ? q0 + BQ : g.t;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads(); /* the previous key tiles are read */
        T::template load<HS, BK>(sk, q + g.c, g.ld, k0, g.t, g.hs);
        T::template load<HS, BK>(sv, q + 2 * g.c, g.ld, k0, g.t, g.hs);
        __syncthreads();
        probs_and_dscores<T, HS, BQ, BK, DROP>(g, dr, n, h, sq, sdy, sk, sv, s_lse, s_delta, q0,
                                               k0, row, lane, nullptr, sds);
        __syncthreads();
        for (int kk = 0; kk < BK; kk++)
            T::template add<DPT, TPR>(dq, sds[row * LP + kk], &sk[kk * LD], lane);
    }
    const int tq = q0 + row;
    if (tq >= g.t) return;
    T::template store<DPT, TPR>(dqkv + ((int64_t)n * g.t + tq) * g.ld + (int64_t)h * g.hs, dq,
                                lane, g.hs);
}

/* delta[n, h, t] = the sum over the head's columns of dy y (double): a warp per row */
template <class T>
__global__ void delta_k(att_geom g, int64_t rows, const typename T::elem *y,
                        const typename T::elem *dy, float *delta)
{
    typedef typename T::elem E;
    const int lane = threadIdx.x % WARP;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / WARP);
    for (int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / WARP; w < rows;
         w += warps) {
        const int64_t nt = w / g.heads;
        const int h = (int)(w % g.heads);
        const E *yr = y + nt * g.c + (int64_t)h * g.hs, *gr = dy + nt * g.c + (int64_t)h * g.hs;
        double acc = 0.0;
        for (int d = lane; d < g.hs; d += WARP)
            acc += (double)T::wide(yr[d]) * (double)T::wide(gr[d]);
        for (int m = WARP / 2; m > 0; m /= 2) acc += __shfl_xor_sync(FULL, acc, m);
        if (lane == 0) {
            const int64_t nn = nt / g.t, t = nt % g.t;
            delta[(nn * g.heads + h) * g.t + t] = (float)acc;
        }
    }
}

att_geom geom_of(const pp_cuda_attention_dims &d)
{
    att_geom g;
    g.t = d.t;
    g.c = d.c;
    g.heads = d.heads;
    g.q0 = d.q0;
    g.hs = d.c / d.heads;
    g.ld = 3 * (int64_t)d.c;
    g.scale = 1.0f / sqrtf((float)g.hs);
    return g;
}

/* The draw of drop (NULL or p == 0: none, *on false). */
att_drop drop_of(const pp_dropout_desc *drop, bool *on)
{
    att_drop dr = {0, 0, 0, 1.0f, nullptr, 0, 0};
    *on = drop && drop->p > 0.0f;
    if (*on) {
        dr.key = drop->key;
        dr.step = drop->step ? (const int64_t *)drop->step->data : nullptr;
        dr.seed = drop->seed;
        dr.site = drop->site;
        dr.first_sample = drop->first_sample;
        dr.threshold = pp_dropout_threshold(drop->p);
        dr.scale = pp_dropout_scale(drop->p);
    }
    return dr;
}

template <class T, int HS, int BQ, int BK>
cudaError_t forward_at(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                       const pp_dropout_desc *drop, const typename T::elem *qkv,
                       typename T::elem *y, float *lse)
{
    const dim3 grid((unsigned)((d.t - d.q0 + BQ - 1) / BQ), (unsigned)d.heads, (unsigned)d.n);
    bool on;
    const att_drop dr = drop_of(drop, &on);
    if (on)
        forward_k<T, HS, BQ, BK, true><<<grid, ATT_THREADS, 0, s>>>(g, dr, qkv, y, lse);
    else
        forward_k<T, HS, BQ, BK, false><<<grid, ATT_THREADS, 0, s>>>(g, dr, qkv, y, lse);
    return cudaGetLastError();
}

template <class T, int HS, int BQ, int BK, bool DROP>
cudaError_t backward_as(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                        const att_drop &dr, const typename T::elem *qkv,
                        const typename T::elem *dy, const float *lse, const float *delta,
                        typename T::elem *dqkv)
{
    const dim3 gk((unsigned)((d.t + BK - 1) / BK), (unsigned)d.heads, (unsigned)d.n);
    dkv_k<T, HS, BQ, BK, DROP><<<gk, ATT_THREADS, 0, s>>>(g, dr, qkv, dy, lse, delta, dqkv);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const dim3 gq((unsigned)((d.t + BQ - 1) / BQ), (unsigned)d.heads, (unsigned)d.n);
    dq_k<T, HS, BQ, BK, DROP><<<gq, ATT_THREADS, 0, s>>>(g, dr, qkv, dy, lse, delta, dqkv);
    return cudaGetLastError();
}

template <class T, int HS, int BQ, int BK>
cudaError_t backward_at(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                        const pp_dropout_desc *drop, const typename T::elem *qkv,
                        const typename T::elem *dy, const float *lse, const float *delta,
                        typename T::elem *dqkv)
{
    bool on;
    const att_drop dr = drop_of(drop, &on);
    if (on) return backward_as<T, HS, BQ, BK, true>(s, d, g, dr, qkv, dy, lse, delta, dqkv);
    return backward_as<T, HS, BQ, BK, false>(s, d, g, dr, qkv, dy, lse, delta, dqkv);
}

bool dims_ok(const pp_cuda_attention_dims &d)
{
    return d.n > 0 && d.t > 0 && d.q0 >= 0 && d.q0 < d.t && d.heads > 0 &&
           d.c % d.heads == 0 && d.n <= 65535 &&
           d.heads <= 65535 && d.c / d.heads <= PP_CUDA_ATTENTION_HS_MAX;
}

/* The forward on stream s: y and lse from qkv, by the kernel of the
 * smallest head size (32, 64, 128) at or above the head's, with drop's
 * masks on the probabilities (NULL or p == 0: none); cudaErrorInvalidValue,
 * nothing enqueued, for dimensions the kernels do not take. */
template <class T>
cudaError_t launch_forward(cudaStream_t s, const pp_cuda_attention_dims &d,
                           const pp_dropout_desc *drop, const typename T::elem *qkv,
                           typename T::elem *y, float *lse)
{
    if (!dims_ok(d)) return cudaErrorInvalidValue;
    const att_geom g = geom_of(d);
    if (g.hs <= 32) return forward_at<T, 32, 32, 32>(s, d, g, drop, qkv, y, lse);
    if (g.hs <= 64) return forward_at<T, 64, 32, 32>(s, d, g, drop, qkv, y, lse);
    return forward_at<T, 128, 16, 16>(s, d, g, drop, qkv, y, lse);
}

/* ---- one query: the last position against the cache (split keys) ------------------- */

/* The forward of query t - 1 alone (generation's new token) in two kernels,
 * as flash-decoding splits it: decode_k's blocks take the keys in chunks of
 * PP_CUDA_ATTENTION_DECODE_KEYS (the chunks of a (sample, head) run on
 * blocks of their own: the keys of a long sequence over many SMs, where
 * forward_k walks them on one block with most of its rows idle), each
 * writing its chunk's softmax partials (m = the chunk's largest scaled
 * score, l = the sum of exp(s - m), o[d] = the sum of exp(s - m) v[d]) to
 * part; decode_combine_k rescales the chunks' partials to their largest m
 * and writes y = o / l and lse = m + log(l). Scores: a warp per key, the
 * lanes over the head's columns; each exp(s - m) times v summed in key
 * order per column. Within rounding of forward_k's row (other sums'
 * order), not its bits. */
template <class T, int HS>
__global__ void __launch_bounds__(ATT_THREADS)
    decode_k(att_geom g, int chunks, const typename T::elem *qkv, float *part)
{
    typedef typename T::elem E;
    constexpr int KEYS = PP_CUDA_ATTENTION_DECODE_KEYS, WARPS = ATT_THREADS / WARP;
    constexpr int GROUPS = ATT_THREADS / HS; /* threads a column of o */
    __shared__ float sq[HS], sp[KEYS], so[ATT_THREADS];
    const int chunk = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
    const int tq = g.t - 1, k0 = chunk * KEYS;
    const int kn = g.t - k0 < KEYS ? g.t - k0 : KEYS;
    const E *base = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    for (int d = threadIdx.x; d < HS; d += ATT_THREADS)
        sq[d] = d < g.hs ? T::wide(base[(int64_t)tq * g.ld + d]) : 0.0f;
    __syncthreads();
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    for (int kk = warp; kk < kn; kk += WARPS) {
        const E *kr = base + g.c + (int64_t)(k0 + kk) * g.ld;
        float s = 0.0f;
        for (int d = lane; d < g.hs; d += WARP) s += sq[d] * T::wide(kr[d]);
        for (int w = WARP / 2; w > 0; w /= 2) s += __shfl_xor_sync(FULL, s, w);
        if (lane == 0) sp[kk] = s * g.scale;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int kk = 0; kk < kn; kk++) m = fmax2(m, sp[kk]);
    const int d = threadIdx.x % HS, grp = threadIdx.x / HS;
    float o = 0.0f;
    if (d < g.hs)
        for (int kk = grp; kk < kn; kk += GROUPS)
            o += expf(sp[kk] - m) * T::wide(base[2 * g.c + (int64_t)(k0 + kk) * g.ld + d]);
    so[threadIdx.x] = o;
    __syncthreads();
    float *pp = part + (((int64_t)n * g.heads + h) * chunks + chunk) * (HS + 2);
    if (threadIdx.x < HS) {
        float sum = 0.0f;
        for (int j = 0; j < GROUPS; j++) sum += so[j * HS + threadIdx.x];
        pp[2 + threadIdx.x] = sum;
    }
    if (threadIdx.x == 0) {
        float l = 0.0f;
        for (int kk = 0; kk < kn; kk++) l += expf(sp[kk] - m);
        pp[0] = m;
        pp[1] = l;
    }
}

/* y's one row and lse of (sample blockIdx.y, head blockIdx.x) from the
 * chunks' partials (a thread per column of HS) */
template <class T, int HS>
__global__ void __launch_bounds__(HS)
    decode_combine_k(att_geom g, int chunks, const float *part, typename T::elem *y, float *lse)
{
    const int h = blockIdx.x, n = blockIdx.y, d = threadIdx.x;
    const float *pp = part + ((int64_t)n * g.heads + h) * chunks * (HS + 2);
    float m = -INFINITY;
    for (int k = 0; k < chunks; k++) m = fmax2(m, pp[(int64_t)k * (HS + 2)]);
    float l = 0.0f, o = 0.0f;
    for (int k = 0; k < chunks; k++) {
        const float *pk = pp + (int64_t)k * (HS + 2);
        const float f = expf(pk[0] - m);
        l += pk[1] * f;
        o += pk[2 + d] * f;
    }
    if (d < g.hs) y[(int64_t)n * g.c + (int64_t)h * g.hs + d] = T::to_elem(o / l);
    if (d == 0) lse[(int64_t)n * g.heads + h] = (float)((double)m + log((double)l));
}

template <class T, int HS>
cudaError_t decode_at(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                      const typename T::elem *qkv, typename T::elem *y, float *lse, float *part)
{
    const int chunks = (d.t + PP_CUDA_ATTENTION_DECODE_KEYS - 1) / PP_CUDA_ATTENTION_DECODE_KEYS;
    const dim3 grid((unsigned)chunks, (unsigned)d.heads, (unsigned)d.n);
    decode_k<T, HS><<<grid, ATT_THREADS, 0, s>>>(g, chunks, qkv, part);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    decode_combine_k<T, HS><<<dim3((unsigned)d.heads, (unsigned)d.n), HS, 0, s>>>(g, chunks, part,
                                                                                 y, lse);
    return cudaGetLastError();
}

/* The forward of the last query alone (d.q0 == d.t - 1), on stream s, with
 * part's pp_cuda_attention_decode_floats(d) floats of scratch; no dropout.
 * cudaErrorInvalidValue (nothing enqueued) for other dimensions. */
template <class T>
cudaError_t launch_decode(cudaStream_t s, const pp_cuda_attention_dims &d,
                          const typename T::elem *qkv, typename T::elem *y, float *lse,
                          float *part)
{
    if (!dims_ok(d) || d.q0 != d.t - 1) return cudaErrorInvalidValue;
    const att_geom g = geom_of(d);
    if (g.hs <= 32) return decode_at<T, 32>(s, d, g, qkv, y, lse, part);
    if (g.hs <= 64) return decode_at<T, 64>(s, d, g, qkv, y, lse, part);
    return decode_at<T, 128>(s, d, g, qkv, y, lse, part);
}

/* delta (n, heads, t) from y and dy on stream s, on at most max_grid blocks
 * (T: elem and wide() are all delta_k reads; attention_tc.cuh launches it
 * too) */
template <class T>
cudaError_t launch_delta(cudaStream_t s, unsigned max_grid, const pp_cuda_attention_dims &d,
                         const att_geom &g, const typename T::elem *y,
                         const typename T::elem *dy, float *delta)
{
    const int64_t rows = (int64_t)d.n * d.t * d.heads;
    int64_t grid = (rows * WARP + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK;
    if (grid > (int64_t)max_grid) grid = max_grid;
    delta_k<T><<<(unsigned)grid, PP_CUDA_BLOCK, 0, s>>>(g, rows, y, dy, delta);
    return cudaGetLastError();
}

/* The backward on stream s: delta (n, heads, t) from y and dy on at most
 * max_grid blocks, then dqkv, every element written, with the forward's
 * drop; the same refusal, and for q0 > 0. */
template <class T>
cudaError_t launch_backward(cudaStream_t s, unsigned max_grid, const pp_cuda_attention_dims &d,
                            const pp_dropout_desc *drop, const typename T::elem *qkv,
                            const typename T::elem *y, const float *lse,
                            const typename T::elem *dy, float *delta, typename T::elem *dqkv)
{
    if (!dims_ok(d) || d.q0 != 0) return cudaErrorInvalidValue;
    const att_geom g = geom_of(d);
    const cudaError_t e = launch_delta<T>(s, max_grid, d, g, y, dy, delta);
    if (e != cudaSuccess) return e;
    if (g.hs <= 32)
        return backward_at<T, 32, 32, 32>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
    if (g.hs <= 64)
        return backward_at<T, 64, 32, 32>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
    return backward_at<T, 128, 16, 16>(s, d, g, drop, qkv, dy, lse, delta, dqkv);
}

} // namespace

#endif
