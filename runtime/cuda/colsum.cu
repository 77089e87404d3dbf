/*
 * colsum.cu - column sums of a row-major (rows, cols) f32 matrix in a fixed
 * order, for the parameter gradients that sum over rows: a dense layer's
 * bias, a layer norm's weight and bias (layernorm.cu), a position
 * embedding (the rows are the samples).
 *   parts      one thread per (column, chunk of PP_CUDA_COLSUM_CHUNK rows):
 *              the chunk's rows in order, in double; consecutive threads take
 *              consecutive columns, so the reads are coalesced.
 *   parts_add  one thread per column: the chunks' sums in chunk order, in
 *              double, rounded once and added to the gradient. A thread's
 *              sum is a serial chain (a layer norm's 512 chunks at 8192
 *              rows), so it loads its next PARTS_RUN partials before it adds
 *              the first, in the same order: the bits of one at a time, with
 *              PARTS_RUN loads in flight instead of the compiler's few; and
 *              blocks of PARTS_T threads spread a norm's 1536 columns over
 *              24 SMs instead of 6.
 * The cuts depend on the shape alone: the same bits on every run.
 */
#include "transformer.h"

#include "kernels.h"

namespace {

__global__ void colsum_parts_k(int64_t rows, int64_t cols, const float *x, double *part)
{
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= cols) return;
    const int64_t k = blockIdx.y, r0 = k * PP_CUDA_COLSUM_CHUNK;
    const int64_t r1 = rows - r0 < PP_CUDA_COLSUM_CHUNK ? rows : r0 + PP_CUDA_COLSUM_CHUNK;
    double acc = 0.0;
    for (int64_t r = r0; r < r1; r++) acc += (double)x[r * cols + j];
    part[k * cols + j] = acc;
}

constexpr int PARTS_RUN = 8; /* a thread's partials in flight */
constexpr int PARTS_T = 64;  /* parts_add's block */

__global__ void __launch_bounds__(PARTS_T) parts_add_k(int64_t chunks, int64_t cols,
                                                       int64_t split, const double *part,
                                                       float *out, float *out2)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols;
         j += (int64_t)gridDim.x * blockDim.x) {
        double acc = 0.0;
        int64_t k = 0;
        for (; k + PARTS_RUN <= chunks; k += PARTS_RUN) {
            double v[PARTS_RUN];
#pragma unroll
            for (int q = 0; q < PARTS_RUN; q++) v[q] = part[(k + q) * cols + j];
#pragma unroll
            for (int q = 0; q < PARTS_RUN; q++) acc += v[q];
        }
        for (; k < chunks; k++) acc += part[k * cols + j];
        if (j < split)
            out[j] += (float)acc;
        else if (out2)
            out2[j - split] += (float)acc;
    }
}

} // namespace

extern "C" {

int64_t pp_cuda_colsum_chunks(int64_t rows)
{
    const int64_t k = (rows + PP_CUDA_COLSUM_CHUNK - 1) / PP_CUDA_COLSUM_CHUNK;
    return k > 0 ? k : 1;
}

cudaError_t pp_cuda_launch_colsum_parts(cudaStream_t s, int64_t rows, int64_t cols,
                                        const float *x, double *part)
{
    if (cols <= 0) return cudaSuccess;
    const int64_t chunks = pp_cuda_colsum_chunks(rows);
    if (chunks > 65535) return cudaErrorInvalidValue; /* grid.y; 4 million rows */
    const dim3 grid((unsigned)((cols + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK), (unsigned)chunks);
    colsum_parts_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(rows, cols, x, part);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_parts_add(cudaStream_t s, unsigned max_grid, int64_t chunks,
                                     int64_t cols, int64_t split, const double *part, float *out,
                                     float *out2)
{
    if (cols <= 0) return cudaSuccess;
    int64_t grid = (cols + PARTS_T - 1) / PARTS_T;
    if (grid > (int64_t)max_grid) grid = max_grid;
    parts_add_k<<<(unsigned)grid, PARTS_T, 0, s>>>(chunks, cols, split, part, out, out2);
    return cudaGetLastError();
}

} // extern "C"
