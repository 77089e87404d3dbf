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

#include <cmath>

#include "bf16.cuh"

namespace {

constexpr unsigned FULL = 0xffffffffu;
constexpr int WARP = 32;
constexpr int ATT_THREADS = 128;

struct att_geom {
    int t, c, hs, heads;
    int64_t ld;  /* 3c: a row of qkv */
    float scale; /* 1 / sqrt(hs) */
};

/* shared-memory row stride of a bf16 tile of head size HS, in words of two
 * elements (columns 2w and 2w + 1 in word w) */
template <int HS> __host__ __device__ constexpr int tile_ld()
{
    return HS / 2 + 1;
}

/* the two bf16 of a word, widened */
__device__ __forceinline__ float lo16(uint32_t w)
{
    return __uint_as_float(w << 16);
}

__device__ __forceinline__ float hi16(uint32_t w)
{
    return __uint_as_float(w & 0xffff0000u);
}

__device__ __forceinline__ float fmax2(float a, float b)
{
    return a > b ? a : b;
}

/* Rows r0.. of one head's q, k, v (src at the head's column in qkv) or dy,
 * ROWS of them as bf16 pairs into dst; zero past t or hs. (A head's columns
 * start at any element, so a pair is read as two elements.) */
template <int HS, int ROWS>
__device__ __forceinline__ void load_tile(uint32_t *dst, const uint16_t *src, int64_t ld, int r0,
                                          int t, int hs)
{
    constexpr int LD = tile_ld<HS>(), W = HS / 2;
    for (int i = threadIdx.x; i < ROWS * W; i += ATT_THREADS) {
        const int r = i / W, d = 2 * (i % W);
        const uint16_t *row = src + (int64_t)(r0 + r) * ld;
        const bool in = r0 + r < t;
        const uint32_t a = in && d < hs ? row[d] : 0u, b = in && d + 1 < hs ? row[d + 1] : 0u;
        dst[r * LD + d / 2] = a | b << 16;
    }
}

/* s[j] = the sum over d, in order, of a[d] times row lane + TPR j of tile
 * (one shared-memory word read for two multiply-adds) */
template <int HS, int TPR, int KPT>
__device__ __forceinline__ void dot_rows(const uint32_t *a, const uint32_t *tile, int lane,
                                         float *s)
{
    constexpr int LD = tile_ld<HS>();
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

/* acc[2 i], acc[2 i + 1] += p times columns 2 (lane + STEP i) and the next
 * of a tile's row: a thread's NP pairs of columns */
template <int NP, int STEP>
__device__ __forceinline__ void add_row(float *acc, float p, const uint32_t *row, int lane)
{
#pragma unroll
    for (int i = 0; i < NP; i++) {
        const uint32_t e = row[lane + STEP * i];
        acc[2 * i] += p * lo16(e);
        acc[2 * i + 1] += p * hi16(e);
    }
}

/* out's columns 2 (lane + STEP i) and the next, below hs, = acc rounded */
template <int NP, int STEP>
__device__ __forceinline__ void store_row(uint16_t *out, const float *acc, int lane, int hs)
{
#pragma unroll
    for (int i = 0; i < NP; i++) {
        const int d = 2 * (lane + STEP * i);
        if (d < hs) out[d] = narrow(acc[2 * i]);
        if (d + 1 < hs) out[d + 1] = narrow(acc[2 * i + 1]);
    }
}

template <int HS, int BQ, int BK>
__global__ void __launch_bounds__(ATT_THREADS)
    forward_k(att_geom g, const uint16_t *qkv, uint16_t *y, float *lse)
{
    constexpr int TPR = ATT_THREADS / BQ, KPT = BK / TPR, DPT = HS / TPR;
    constexpr int LD = tile_ld<HS>(), LP = BK + 1;
    __shared__ uint32_t sq[BQ * LD], sk[BK * LD], sv[BK * LD];
    __shared__ float sp[BQ * LP];
    const int tid = threadIdx.x, row = tid / TPR, lane = tid % TPR;
    const int q0 = blockIdx.x * BQ, h = blockIdx.y, n = blockIdx.z;
    const uint16_t *q = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    load_tile<HS, BQ>(sq, q, g.ld, q0, g.t, g.hs);
    const int tq = q0 + row;
    float m = -INFINITY, l = 0.0f, o[DPT];
#pragma unroll
    for (int j = 0; j < DPT; j++) o[j] = 0.0f;
    const int kend = q0 + BQ < g.t ? q0 + BQ : g.t;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads(); /* the previous tiles are read */
        load_tile<HS, BK>(sk, q + g.c, g.ld, k0, g.t, g.hs);
        load_tile<HS, BK>(sv, q + 2 * g.c, g.ld, k0, g.t, g.hs);
        __syncthreads();
        float s[KPT], mx = -INFINITY;
        dot_rows<HS, TPR, KPT>(&sq[row * LD], sk, lane, s);
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
            add_row<DPT / 2, TPR>(o, sp[row * LP + kk], &sv[kk * LD], lane);
    }
    if (tq >= g.t) return;
    const float inv = 1.0f / l;
#pragma unroll
    for (int j = 0; j < DPT; j++) o[j] *= inv;
    store_row<DPT / 2, TPR>(y + ((int64_t)n * g.t + tq) * g.c + (int64_t)h * g.hs, o, lane, g.hs);
    if (lane == 0)
        lse[((int64_t)n * g.heads + h) * g.t + tq] = (float)((double)m + log((double)l));
}

/* P and dS of query row `row` (block at q0) against keys lane + TPR j of
 * the key tile at k0, into sp (when not NULL) and sds; zero where masked. */
template <int HS, int BQ, int BK>
__device__ __forceinline__ void probs_and_dscores(const att_geom &g, const uint32_t *sq,
                                                  const uint32_t *sdy, const uint32_t *sk,
                                                  const uint32_t *sv, const float *s_lse,
                                                  const float *s_delta, int q0, int k0, int row,
                                                  int lane, float *sp, float *sds)
{
    constexpr int TPR = ATT_THREADS / BQ, KPT = BK / TPR;
    constexpr int LD = tile_ld<HS>(), LP = BK + 1;
    const int tq = q0 + row;
    float sc[KPT], dp[KPT];
    dot_rows<HS, TPR, KPT>(&sq[row * LD], sk, lane, sc);
    dot_rows<HS, TPR, KPT>(&sdy[row * LD], sv, lane, dp);
#pragma unroll
    for (int j = 0; j < KPT; j++) {
        const int kk = lane + TPR * j, tk = k0 + kk;
        float p = 0.0f, ds = 0.0f;
        if (tq < g.t && tk <= tq) {
            p = expf(sc[j] * g.scale - s_lse[row]);
            ds = p * (dp[j] - s_delta[row]) * g.scale;
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

/* dk and dv of a block of BK keys, over the query blocks from the one
 * holding its first key to the end */
template <int HS, int BQ, int BK>
__global__ void __launch_bounds__(ATT_THREADS)
    dkv_k(att_geom g, const uint16_t *qkv, const uint16_t *dy, const float *lse,
          const float *delta, uint16_t *dqkv)
{
    constexpr int TPR = ATT_THREADS / BQ, TPK = ATT_THREADS / BK, DPT = HS / TPK;
    constexpr int LD = tile_ld<HS>(), LP = BK + 1;
    __shared__ uint32_t sk[BK * LD], sv[BK * LD], sq[BQ * LD], sdy[BQ * LD];
    __shared__ float sp[BQ * LP], sds[BQ * LP], s_lse[BQ], s_delta[BQ];
    const int tid = threadIdx.x;
    const int k0 = blockIdx.x * BK, h = blockIdx.y, n = blockIdx.z;
    const uint16_t *q = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    const uint16_t *dyh = dy + (int64_t)n * g.t * g.c + (int64_t)h * g.hs;
    const int64_t lrow = ((int64_t)n * g.heads + h) * g.t;
    load_tile<HS, BK>(sk, q + g.c, g.ld, k0, g.t, g.hs);
    load_tile<HS, BK>(sv, q + 2 * g.c, g.ld, k0, g.t, g.hs);
    const int krow = tid / TPK, klane = tid % TPK;
    float dk[DPT], dv[DPT];
#pragma unroll
    for (int j = 0; j < DPT; j++) dk[j] = dv[j] = 0.0f;
    for (int q0 = k0 / BQ * BQ; q0 < g.t; q0 += BQ) {
        __syncthreads(); /* the previous query tiles are read */
        load_tile<HS, BQ>(sq, q, g.ld, q0, g.t, g.hs);
        load_tile<HS, BQ>(sdy, dyh, g.c, q0, g.t, g.hs);
        load_rows<BQ>(s_lse, s_delta, lse + lrow, delta + lrow, q0, g.t);
        __syncthreads();
        probs_and_dscores<HS, BQ, BK>(g, sq, sdy, sk, sv, s_lse, s_delta, q0, k0, tid / TPR,
                                      tid % TPR, sp, sds);
        __syncthreads();
        for (int r = 0; r < BQ; r++) {
            add_row<DPT / 2, TPK>(dv, sp[r * LP + krow], &sdy[r * LD], klane);
            add_row<DPT / 2, TPK>(dk, sds[r * LP + krow], &sq[r * LD], klane);
        }
    }
    const int tk = k0 + krow;
    if (tk >= g.t) return;
    uint16_t *out = dqkv + ((int64_t)n * g.t + tk) * g.ld + (int64_t)h * g.hs;
    store_row<DPT / 2, TPK>(out + g.c, dk, klane, g.hs);
    store_row<DPT / 2, TPK>(out + 2 * g.c, dv, klane, g.hs);
}

/* dq of a block of BQ queries, over the key tiles up to its last query */
template <int HS, int BQ, int BK>
__global__ void __launch_bounds__(ATT_THREADS)
    dq_k(att_geom g, const uint16_t *qkv, const uint16_t *dy, const float *lse,
         const float *delta, uint16_t *dqkv)
{
    constexpr int TPR = ATT_THREADS / BQ, DPT = HS / TPR;
    constexpr int LD = tile_ld<HS>(), LP = BK + 1;
    __shared__ uint32_t sq[BQ * LD], sdy[BQ * LD], sk[BK * LD], sv[BK * LD];
    __shared__ float sds[BQ * LP], s_lse[BQ], s_delta[BQ];
    const int tid = threadIdx.x, row = tid / TPR, lane = tid % TPR;
    const int q0 = blockIdx.x * BQ, h = blockIdx.y, n = blockIdx.z;
    const uint16_t *q = qkv + (int64_t)n * g.t * g.ld + (int64_t)h * g.hs;
    const int64_t lrow = ((int64_t)n * g.heads + h) * g.t;
    load_tile<HS, BQ>(sq, q, g.ld, q0, g.t, g.hs);
    load_tile<HS, BQ>(sdy, dy + (int64_t)n * g.t * g.c + (int64_t)h * g.hs, g.c, q0, g.t, g.hs);
    load_rows<BQ>(s_lse, s_delta, lse + lrow, delta + lrow, q0, g.t);
    float dq[DPT];
#pragma unroll
    for (int j = 0; j < DPT; j++) dq[j] = 0.0f;
    const int kend = q0 + BQ < g.t ? q0 + BQ : g.t;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads(); /* the previous key tiles are read */
        load_tile<HS, BK>(sk, q + g.c, g.ld, k0, g.t, g.hs);
        load_tile<HS, BK>(sv, q + 2 * g.c, g.ld, k0, g.t, g.hs);
        __syncthreads();
        probs_and_dscores<HS, BQ, BK>(g, sq, sdy, sk, sv, s_lse, s_delta, q0, k0, row, lane,
                                      nullptr, sds);
        __syncthreads();
        for (int kk = 0; kk < BK; kk++)
            add_row<DPT / 2, TPR>(dq, sds[row * LP + kk], &sk[kk * LD], lane);
    }
    const int tq = q0 + row;
    if (tq >= g.t) return;
    store_row<DPT / 2, TPR>(dqkv + ((int64_t)n * g.t + tq) * g.ld + (int64_t)h * g.hs, dq, lane,
                            g.hs);
}

/* delta[n, h, t] = the sum over the head's columns of dy y (double): a warp per row */
__global__ void delta_k(att_geom g, int64_t rows, const uint16_t *y, const uint16_t *dy,
                        float *delta)
{
    const int lane = threadIdx.x % WARP;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / WARP);
    for (int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / WARP; w < rows;
         w += warps) {
        const int64_t nt = w / g.heads;
        const int h = (int)(w % g.heads);
        const uint16_t *yr = y + nt * g.c + (int64_t)h * g.hs;
        const uint16_t *gr = dy + nt * g.c + (int64_t)h * g.hs;
        double acc = 0.0;
        for (int d = lane; d < g.hs; d += WARP) acc += (double)widen(yr[d]) * widen(gr[d]);
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
    g.hs = d.c / d.heads;
    g.ld = 3 * (int64_t)d.c;
    g.scale = 1.0f / sqrtf((float)g.hs);
    return g;
}

template <int HS, int BQ, int BK>
cudaError_t forward_at(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                       const uint16_t *qkv, uint16_t *y, float *lse)
{
    const dim3 grid((unsigned)((d.t + BQ - 1) / BQ), (unsigned)d.heads, (unsigned)d.n);
    forward_k<HS, BQ, BK><<<grid, ATT_THREADS, 0, s>>>(g, qkv, y, lse);
    return cudaGetLastError();
}

template <int HS, int BQ, int BK>
cudaError_t backward_at(cudaStream_t s, const pp_cuda_attention_dims &d, const att_geom &g,
                        const uint16_t *qkv, const uint16_t *dy, const float *lse,
                        const float *delta, uint16_t *dqkv)
{
    const dim3 gk((unsigned)((d.t + BK - 1) / BK), (unsigned)d.heads, (unsigned)d.n);
    dkv_k<HS, BQ, BK><<<gk, ATT_THREADS, 0, s>>>(g, qkv, dy, lse, delta, dqkv);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const dim3 gq((unsigned)((d.t + BQ - 1) / BQ), (unsigned)d.heads, (unsigned)d.n);
    dq_k<HS, BQ, BK><<<gq, ATT_THREADS, 0, s>>>(g, qkv, dy, lse, delta, dqkv);
    return cudaGetLastError();
}

bool dims_ok(const pp_cuda_attention_dims &d)
{
    return d.n > 0 && d.t > 0 && d.heads > 0 && d.c % d.heads == 0 && d.n <= 65535 &&
           d.heads <= 65535 && d.c / d.heads <= PP_CUDA_ATTENTION_HS_MAX;
}

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_attention_forward_bf16(cudaStream_t s, pp_cuda_attention_dims d,
                                                  const uint16_t *qkv, uint16_t *y, float *lse)
{
    if (!dims_ok(d)) return cudaErrorInvalidValue;
    const att_geom g = geom_of(d);
    if (g.hs <= 32) return forward_at<32, 32, 32>(s, d, g, qkv, y, lse);
    if (g.hs <= 64) return forward_at<64, 32, 32>(s, d, g, qkv, y, lse);
    return forward_at<128, 16, 16>(s, d, g, qkv, y, lse);
}

cudaError_t pp_cuda_launch_attention_backward_bf16(cudaStream_t s, unsigned max_grid,
                                                   pp_cuda_attention_dims d, const uint16_t *qkv,
                                                   const uint16_t *y, const float *lse,
                                                   const uint16_t *dy, float *delta,
                                                   uint16_t *dqkv)
{
    if (!dims_ok(d)) return cudaErrorInvalidValue;
    const att_geom g = geom_of(d);
    const int64_t rows = (int64_t)d.n * d.t * d.heads;
    int64_t grid = (rows * WARP + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK;
    if (grid > (int64_t)max_grid) grid = max_grid;
    delta_k<<<(unsigned)grid, PP_CUDA_BLOCK, 0, s>>>(g, rows, y, dy, delta);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    if (g.hs <= 32) return backward_at<32, 32, 32>(s, d, g, qkv, dy, lse, delta, dqkv);
    if (g.hs <= 64) return backward_at<64, 32, 32>(s, d, g, qkv, dy, lse, delta, dqkv);
    return backward_at<128, 16, 16>(s, d, g, qkv, dy, lse, delta, dqkv);
}

} // extern "C"
