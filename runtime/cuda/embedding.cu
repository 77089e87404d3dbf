/*
 * embedding.cu - token and position embeddings (ops.h: pp_embedding_* and
 * pp_position_forward), runtime/cpu/embedding.c's arithmetic:
 *   token forward      y[r] = table[ids[r]]: a gather, 16 bytes a thread
 *                      where the rows allow.
 *   token backward     deterministic, in linear time: a counting sort of the
 *                      positions by id, then one sum per id. Six kernels
 *                      over a workspace of 2 (vocab + 1) + 2 rows words:
 *                      the counts zeroed; each position counts its id (an
 *                      integer atomicAdd: the counts do not depend on the
 *                      order); one block scans them into each id's first
 *                      slot and zeroes them again; each position takes a
 *                      slot in its id's run (atomicAdd on that count: an
 *                      order that varies run to run), and each slot's
 *                      position is then moved to its rank among the run's
 *                      positions (how many are smaller), which puts every
 *                      run in position order, whatever the atomics did; a
 *                      block per run's first slot and 256 columns sums the
 *                      run's rows of dy in double, in position order, and
 *                      adds the sum to the id's table row once. No two
 *                      blocks write one row. The ranks cost the sum of
 *                      each run's length squared (8 x 1024 random tokens
 *                      of GPT-2's vocabulary: about 9,500 compares; one
 *                      token repeated 8192 times: 67 million, over 8192
 *                      threads); the scan of the ids it replaced (a block
 *                      per position) cost up to rows^2 / 2 compares in a
 *                      block's serial loop (34 million at 8 x 1024 random
 *                      tokens, one shared-memory load each: ~1 ms of an
 *                      H200, GPU.md section 8.1).
 *   position forward   y[n, t] = x[n, t] + table[t], 16 bytes a thread where
 *                      the rows allow. (Its backward is a column sum,
 *                      colsum.cu.)
 */
#include "transformer.h"

#include "kernels.h"

namespace {

constexpr int EMB_THREADS = 256; /* the sums' block: one column a thread */
constexpr int EMB_SCAN = 1024;   /* the scan's block */

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

/* ---- token backward: the counting sort, then the sums ------------------------------ */

__global__ void emb_zero_k(int64_t n, uint32_t *w)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        w[i] = 0;
}

__device__ __forceinline__ bool valid_id(int32_t id, int vocab)
{
    return id >= 0 && id < vocab;
}

__global__ void emb_count_k(int64_t rows, int vocab, const int32_t *ids, uint32_t *count)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x)
        if (valid_id(ids[r], vocab)) atomicAdd(&count[ids[r]], 1u);
}

/* One block: start[v] = the counts of the ids below v (start[vocab]: every
 * valid position), and the counts zeroed, to serve as each run's cursor.
 * Each thread takes a contiguous share of the ids. */
__global__ void __launch_bounds__(EMB_SCAN) emb_scan_k(int vocab, uint32_t *count,
                                                       uint32_t *start)
{
    __shared__ uint32_t part[EMB_SCAN];
    const int tid = threadIdx.x;
    const int share = (vocab + EMB_SCAN - 1) / EMB_SCAN;
    const int v0 = tid * share < vocab ? tid * share : vocab;
    const int v1 = v0 + share < vocab ? v0 + share : vocab;
    uint32_t sum = 0;
    for (int v = v0; v < v1; v++) sum += count[v];
    part[tid] = sum;
    __syncthreads();
    for (int d = 1; d < EMB_SCAN; d *= 2) { /* inclusive scan of the shares */
        const uint32_t add = tid >= d ? part[tid - d] : 0;
        __syncthreads();
        part[tid] += add;
        __syncthreads();
    }
    uint32_t at = part[tid] - sum; /* exclusive */
    for (int v = v0; v < v1; v++) {
        const uint32_t n = count[v];
        start[v] = at;
        count[v] = 0;
        at += n;
    }
    if (tid == EMB_SCAN - 1) start[vocab] = part[tid];
}

/* each valid position into a slot of its id's run, in any order */
__global__ void emb_place_k(int64_t rows, int vocab, const int32_t *ids, const uint32_t *start,
                            uint32_t *cursor, uint32_t *slot)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {
        const int32_t id = ids[r];
        if (valid_id(id, vocab)) slot[start[id] + atomicAdd(&cursor[id], 1u)] = (uint32_t)r;
    }
}

/* each slot's position to its rank within its run: the runs in position order */
__global__ void emb_rank_k(int64_t rows, int vocab, const int32_t *ids, const uint32_t *start,
                           const uint32_t *slot, uint32_t *order)
{
    const int64_t n = start[vocab];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n && i < rows;
         i += (int64_t)gridDim.x * blockDim.x) {
        const uint32_t r = slot[i];
        const int32_t id = ids[r];
        const uint32_t b0 = start[id], b1 = start[id + 1];
        uint32_t rank = 0;
        for (uint32_t k = b0; k < b1; k++) rank += slot[k] < r;
        order[b0 + rank] = r;
    }
}

/* Block (i, j): where slot i is the first of its run, columns 256 j on of
 * the run's rows of dy summed in double in position order, then added to
 * the id's table row once. Four rows' loads in flight, taken in order. */
__global__ void __launch_bounds__(EMB_THREADS) emb_sum_k(int vocab, int c, const int32_t *ids,
                                                         const uint32_t *start,
                                                         const uint32_t *order, const float *dy,
                                                         float *dtable)
{
    const uint32_t i = blockIdx.x;
    if (i >= start[vocab]) return;
    const int32_t id = ids[order[i]];
    if (start[id] != i) return; /* the same for every thread of the block */
    const int col = blockIdx.y * EMB_THREADS + threadIdx.x;
    if (col >= c) return;
    const uint32_t b1 = start[id + 1];
    double acc = 0.0;
    uint32_t k = i;
    for (; k + 4 <= b1; k += 4) {
        float g[4];
        for (int q = 0; q < 4; q++) g[q] = dy[(int64_t)order[k + q] * c + col];
        for (int q = 0; q < 4; q++) acc += (double)g[q];
    }
    for (; k < b1; k++) acc += (double)dy[(int64_t)order[k] * c + col];
    float *row = dtable + (int64_t)id * c;
    row[col] += (float)acc;
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

size_t pp_cuda_embedding_backward_ws(int64_t rows, int vocab)
{
    return (2 * ((size_t)vocab + 1) + 2 * (size_t)rows) * sizeof(uint32_t);
}

const uint32_t *pp_cuda_embedding_order(const void *ws, int vocab)
{
    return static_cast<const uint32_t *>(ws) + 2 * ((size_t)vocab + 1);
}

cudaError_t pp_cuda_launch_embedding_backward(cudaStream_t s, unsigned max_grid, int64_t rows,
                                              int vocab, int c, const int32_t *ids,
                                              const float *dy, float *dtable, void *ws)
{
    if (rows <= 0 || c <= 0 || vocab <= 0) return cudaSuccess;
    if (rows > (int64_t)INT32_MAX || (c + EMB_THREADS - 1) / EMB_THREADS > 65535)
        return cudaErrorInvalidValue;
    uint32_t *count = static_cast<uint32_t *>(ws), *start = count + vocab + 1;
    uint32_t *order = start + vocab + 1, *slot = order + rows;
    emb_zero_k<<<grid_of(vocab + 1, max_grid), PP_CUDA_BLOCK, 0, s>>>(vocab + 1, count);
    emb_count_k<<<grid_of(rows, max_grid), PP_CUDA_BLOCK, 0, s>>>(rows, vocab, ids, count);
    emb_scan_k<<<1, EMB_SCAN, 0, s>>>(vocab, count, start);
    emb_place_k<<<grid_of(rows, max_grid), PP_CUDA_BLOCK, 0, s>>>(rows, vocab, ids, start,
                                                                  count, slot);
    emb_rank_k<<<grid_of(rows, max_grid), PP_CUDA_BLOCK, 0, s>>>(rows, vocab, ids, start, slot,
                                                                 order);
    const dim3 grid((unsigned)rows, (unsigned)((c + EMB_THREADS - 1) / EMB_THREADS));
    emb_sum_k<<<grid, EMB_THREADS, 0, s>>>(vocab, c, ids, start, order, dy, dtable);
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
