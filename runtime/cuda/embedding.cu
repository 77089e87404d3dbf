/*
 * embedding.cu - token and position embeddings (ops.h: pp_embedding_* and
 * pp_position_forward), runtime/cpu/embedding.c's arithmetic:
 *   token forward      y[r] = table[ids[r]]: a gather, 16 bytes a thread
 *                      where the rows allow.
 *   token backward     deterministic without sorting or atomics: one block
 *                      per position r. It first scans the positions before r
 *                      (a tile of ids at a time) for one of the same id and
 *                      returns if there is one; the block of an id's first
 *                      position then walks the positions from r on, a tile
 *                      of ids at a time, and adds the rows of its id to
 *                      per-thread accumulators (double, positions in order,
 *                      EMB_COLS columns a thread per pass), which it adds to
 *                      the id's table row once. No two blocks write one row.
 *                      The scans cost O(rows^2 / 2) id reads in all (from L2:
 *                      about 34 million for 8 x 1024 tokens).
 *   position forward   y[n, t] = x[n, t] + table[t], 16 bytes a thread where
 *                      the rows allow. (Its backward is a column sum,
 *                      colsum.cu.)
 */
#include "transformer.h"

#include "kernels.h"

namespace {

constexpr int EMB_THREADS = 256;
constexpr int EMB_COLS = 4; /* columns a thread per pass: EMB_THREADS * EMB_COLS a pass */

__device__ __forceinline__ int32_t clamp_id(int32_t id, int vocab)
{
    return id < 0 ? 0 : id >= vocab ? vocab - 1 : id;
}

/* units of V floats: c / V a row */
template <class U>
__global__ void gather_k(int64_t rows, int units, int vocab, const int32_t *ids, const U *table,
                         U *y)
{
    const int64_t total = rows * units;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / units;
        y[i] = table[(int64_t)clamp_id(ids[r], vocab) * units + (i - r * units)];
    }
}

__device__ __forceinline__ float add(float a, float b)
{
    return a + b;
}

__device__ __forceinline__ float4 add(float4 a, float4 b)
{
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

template <class U>
__global__ void position_k(int64_t total, int t, int units, const U *x, const U *table, U *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / units;
        const int64_t pos = row % t;
        y[i] = add(x[i], table[pos * units + (i - row * units)]);
    }
}

__global__ void embedding_backward_k(int64_t rows, int vocab, int c, const int32_t *ids,
                                     const float *dy, float *dtable)
{
    __shared__ int32_t tile[EMB_THREADS];
    __shared__ int seen;
    const int tid = threadIdx.x;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int32_t id = ids[r];
        if (id < 0 || id >= vocab) continue; /* the same for every thread of the block */
        bool first = true;
        for (int64_t k0 = 0; k0 < r && first; k0 += EMB_THREADS) {
            __syncthreads(); /* every thread has read seen */
            if (tid == 0) seen = 0;
            __syncthreads();
            const int64_t k = k0 + tid;
            if (k < r && ids[k] == id) seen = 1;
            __syncthreads();
            first = seen == 0;
        }
        if (!first) continue;
        for (int c0 = 0; c0 < c; c0 += EMB_THREADS * EMB_COLS) {
            double acc[EMB_COLS];
            for (int q = 0; q < EMB_COLS; q++) acc[q] = 0.0;
            for (int64_t k0 = r; k0 < rows; k0 += EMB_THREADS) {
                __syncthreads(); /* the previous tile is read */
                tile[tid] = k0 + tid < rows ? ids[k0 + tid] : -1;
                __syncthreads();
                const int n = rows - k0 < EMB_THREADS ? (int)(rows - k0) : EMB_THREADS;
                for (int j = 0; j < n; j++) {
                    if (tile[j] != id) continue;
                    const float *g = dy + (k0 + j) * c;
                    for (int q = 0; q < EMB_COLS; q++) {
                        const int col = c0 + tid + q * EMB_THREADS;
                        if (col < c) acc[q] += (double)g[col];
                    }
                }
            }
            float *row = dtable + (int64_t)id * c;
            for (int q = 0; q < EMB_COLS; q++) {
                const int col = c0 + tid + q * EMB_THREADS;
                if (col < c) row[col] += (float)acc[q];
            }
        }
    }
}

unsigned grid_of(int64_t n, unsigned max_grid)
{
    const int64_t g = (n + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK;
    return (unsigned)(g < 1 ? 1 : g > (int64_t)max_grid ? max_grid : g);
}

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_embedding_forward(cudaStream_t s, unsigned max_grid, int64_t rows,
                                             int vocab, int c, const int32_t *ids,
                                             const float *table, float *y)
{
    if (rows <= 0 || c <= 0) return cudaSuccess;
    if (c % 4 == 0 && pp_cuda_aligned16(table) && pp_cuda_aligned16(y)) {
        gather_k<<<grid_of(rows * (c / 4), max_grid), PP_CUDA_BLOCK, 0, s>>>(
            rows, c / 4, vocab, ids, reinterpret_cast<const float4 *>(table),
            reinterpret_cast<float4 *>(y));
    } else {
        gather_k<<<grid_of(rows * c, max_grid), PP_CUDA_BLOCK, 0, s>>>(rows, c, vocab, ids,
                                                                       table, y);
    }
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_embedding_backward(cudaStream_t s, int64_t rows, int vocab, int c,
                                              const int32_t *ids, const float *dy,
                                              float *dtable)
{
    if (rows <= 0 || c <= 0) return cudaSuccess;
    const unsigned grid = rows < 2147483647 ? (unsigned)rows : 2147483647u;
    embedding_backward_k<<<grid, EMB_THREADS, 0, s>>>(rows, vocab, c, ids, dy, dtable);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_position_forward(cudaStream_t s, unsigned max_grid, int64_t n, int t,
                                            int c, const float *x, const float *table, float *y)
{
    const int64_t rows = n * t;
    if (rows <= 0 || c <= 0) return cudaSuccess;
    if (c % 4 == 0 && pp_cuda_aligned16(x) && pp_cuda_aligned16(table) &&
        pp_cuda_aligned16(y)) {
        const int64_t total = rows * (c / 4);
        position_k<<<grid_of(total, max_grid), PP_CUDA_BLOCK, 0, s>>>(
            total, t, c / 4, reinterpret_cast<const float4 *>(x),
            reinterpret_cast<const float4 *>(table), reinterpret_cast<float4 *>(y));
    } else {
        position_k<<<grid_of(rows * c, max_grid), PP_CUDA_BLOCK, 0, s>>>(rows * c, t, c, x,
                                                                         table, y);
    }
    return cudaGetLastError();
}

} // extern "C"
