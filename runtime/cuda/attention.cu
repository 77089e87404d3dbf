/*
 * attention.cu - causal multi-head self-attention from a qkv projection
 * (ops.h: pp_attention_forward / _backward), runtime/cpu/attention.c's
 * arithmetic in f32, tiled so that no (t, t) matrix is ever in memory
 * (flash-attention's scheme). qkv (n, t, 3c) holds q, k, v side by side,
 * heads of hs = c / heads columns; y (n, t, c); lse (n, heads, t).
 *
 *   forward   one block per (block of BQ queries, head, sample). It walks
 *             the keys up to its last query in tiles of BK: S = q k^T / sqrt(hs)
 *             (masked to keys at or before the query), the row maximum and
 *             the sum of exp(S - max) kept online (the running output
 *             rescaled when the maximum grows), O += P v. At the end y = O /
 *             sum and lse = max + log(sum).
 *   backward  the probabilities again from lse, P = exp(S - lse), tile by
 *             tile; delta = the row dot products of dy and y (double), dS =
 *             P (dy v^T - delta) / sqrt(hs). Two passes, so that every
 *             element of dqkv is written by one block and no float atomic is
 *             needed: per block of BK keys, dv = P^T dy and dk = dS^T q over
 *             the queries at or after the keys; per block of BQ queries, dq =
 *             dS k over the keys up to the queries.
 *
 * Tiles live in static shared memory, rows padded by one float (no bank
 * conflicts when lanes read different rows). A query row belongs to TPR =
 * ATT_THREADS / BQ consecutive lanes (a segment of a warp): each takes
 * every TPR-th key of a tile and every TPR-th column of the output, and the
 * row's maximum and sum go round the segment by xor shuffles. Head sizes up
 * to 32, 64 and 128 have a kernel each (smaller sizes run padded with
 * zeros). The products run on the CUDA cores in f32 whatever the device's
 * math mode (TF32 would only lower the precision); each thread keeps its
 * outputs in registers and reads an operand shared by them once per step
 * of the sum (a query row's element for all its keys, a probability for all
 * its columns), about one shared-memory load per multiply-add.
 *
 * Dropout (drop->p > 0): each probability times its mask's factor, drawn
 * from dropout.h's hash in both passes (attention_tile.cuh), the CPU's
 * masks and formulation (runtime/cpu/attention.c).
 */
#include "attention_tile.cuh"

namespace {

/* A tile of f32 rows, padded by one float; a thread's N columns of a row
 * are lane + STEP j. */
struct f32_tile {
    typedef float elem;
    typedef float word;

    template <int HS> __host__ __device__ static constexpr int ld()
    {
        return HS + 1;
    }

    template <int HS, int ROWS>
    __device__ static __forceinline__ void load(float *dst, const float *src, int64_t ld, int r0,
                                                int t, int hs)
    {
        constexpr int LD = HS + 1;
        for (int i = threadIdx.x; i < ROWS * HS; i += ATT_THREADS) {
            const int r = i / HS, d = i % HS;
            dst[r * LD + d] = (r0 + r < t && d < hs) ? src[(int64_t)(r0 + r) * ld + d] : 0.0f;
        }
    }

    /* a[d] read once for all of a lane's rows */
    template <int HS, int TPR, int KPT>
    __device__ static __forceinline__ void dot(const float *a, const float *tile, int lane,
                                               float *s)
    {
        constexpr int LD = HS + 1;
#pragma unroll
        for (int j = 0; j < KPT; j++) s[j] = 0.0f;
        for (int d = 0; d < HS; d++) {
            const float x = a[d];
#pragma unroll
            for (int j = 0; j < KPT; j++) s[j] += x * tile[(lane + TPR * j) * LD + d];
        }
    }

    template <int N, int STEP>
    __device__ static __forceinline__ void add(float *acc, float p, const float *row, int lane)
    {
#pragma unroll
        for (int j = 0; j < N; j++) acc[j] += p * row[lane + STEP * j];
    }

    template <int N, int STEP>
    __device__ static __forceinline__ void store(float *out, const float *acc, int lane, int hs)
    {
#pragma unroll
        for (int j = 0; j < N; j++) {
            const int d = lane + STEP * j;
            if (d < hs) out[d] = acc[j];
        }
    }

    __device__ static __forceinline__ float wide(float e)
    {
        return e;
    }

    __device__ static __forceinline__ float to_elem(float v)
    {
        return v;
    }
};

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_attention_forward(cudaStream_t s, pp_cuda_attention_dims d,
                                             const pp_dropout_desc *drop, const float *qkv,
                                             float *y, float *lse)
{
    return launch_forward<f32_tile>(s, d, drop, qkv, y, lse);
}

cudaError_t pp_cuda_launch_attention_decode(cudaStream_t s, pp_cuda_attention_dims d,
                                            const float *qkv, float *y, float *lse, float *part)
{
    return launch_decode<f32_tile>(s, d, qkv, y, lse, part);
}

cudaError_t pp_cuda_launch_attention_backward(cudaStream_t s, unsigned max_grid,
                                              pp_cuda_attention_dims d,
                                              const pp_dropout_desc *drop, const float *qkv,
                                              const float *y, const float *lse, const float *dy,
                                              float *delta, float *dqkv)
{
    return launch_backward<f32_tile>(s, max_grid, d, drop, qkv, y, lse, dy, delta, dqkv);
}

} // extern "C"
