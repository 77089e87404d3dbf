/*
 * train.cu - the training recipe's kernels (train.h): AdamW over many
 * tensors, sums of squares and scaling of many tensors, the deferred
 * batch-norm statistics. Every operation that the CPU reference rounds is
 * rounded here on its own (__fmul_rn and kin: nvcc contracts nothing they
 * compute into an FMA), in the reference's order, so results are the CPU
 * backend's bits.
 */
#include "train.h"
#include "multi.cuh"

namespace {

static_assert(PP_CUDA_BLOCK == PP_CUDA_SUMSQ_LANES, "one thread per lane of a tile");
static_assert(sizeof(pp_cuda_adamw_list) + sizeof(pp_cuda_adamw_args) <= 4000, "AdamW list");
static_assert(sizeof(pp_cuda_norm_list) + sizeof(double *) * 2 <= 4000, "norm list");
static_assert(sizeof(pp_cuda_bn_stats_list) <= 4000, "batch-norm list");

/* ---- AdamW ---------------------------------------------------------------------- */

/* One element in runtime/cpu/adamw.c's order. */
__device__ __forceinline__ void adamw_elem(const pp_cuda_adamw_args &a, float &p, float grad,
                                           float &m, float &v)
{
    const float g = __fmul_rn(grad, a.grad_scale);
    const float pk = __fmul_rn(p, a.decay);
    m = __fadd_rn(__fmul_rn(m, a.b1), __fmul_rn(a.c1, g));
    v = __fadd_rn(__fmul_rn(v, a.b2), __fmul_rn(__fmul_rn(a.c2, g), g));
    const float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), a.bc2), a.eps);
    p = __fsub_rn(pk, __fmul_rn(a.step_size, __fdiv_rn(m, den)));
}

__global__ void adamw_multi_k(const pp_cuda_adamw_list list, pp_cuda_adamw_args a)
{
    for (int32_t t = blockIdx.x; t < list.tiles; t += gridDim.x) {
        const int j = tile_owner(list.first_tile, list.count, t);
        const int64_t n = list.n[j];
        const int64_t i0 = (int64_t)(t - list.first_tile[j]) * PP_CUDA_MULTI_TILE;
        const int64_t i1 = n - i0 < PP_CUDA_MULTI_TILE ? n : i0 + PP_CUDA_MULTI_TILE;
        float *param = list.param[j], *m = list.exp_avg[j], *v = list.exp_avg_sq[j];
        const float *grad = list.grad[j];
        int64_t v1 = i0; /* end of the float4 part; i0 is a multiple of 4 */
        if ((((uintptr_t)param | (uintptr_t)grad | (uintptr_t)m | (uintptr_t)v) & 15) == 0) {
            v1 = i0 + ((i1 - i0) & ~(int64_t)3);
            for (int64_t i = i0 + 4 * (int64_t)threadIdx.x; i < v1; i += 4 * (int64_t)blockDim.x) {
                float4 p4 = *reinterpret_cast<float4 *>(param + i);
                const float4 g4 = *reinterpret_cast<const float4 *>(grad + i);
                float4 m4 = *reinterpret_cast<float4 *>(m + i);
                float4 v4 = *reinterpret_cast<float4 *>(v + i);
                adamw_elem(a, p4.x, g4.x, m4.x, v4.x);
                adamw_elem(a, p4.y, g4.y, m4.y, v4.y);
                adamw_elem(a, p4.z, g4.z, m4.z, v4.z);
                adamw_elem(a, p4.w, g4.w, m4.w, v4.w);
                *reinterpret_cast<float4 *>(param + i) = p4;
                *reinterpret_cast<float4 *>(m + i) = m4;
                *reinterpret_cast<float4 *>(v + i) = v4;
            }
        }
        for (int64_t i = v1 + threadIdx.x; i < i1; i += blockDim.x) {
            float p = param[i], mi = m[i], vi = v[i];
            adamw_elem(a, p, grad[i], mi, vi);
            param[i] = p;
            m[i] = mi;
            v[i] = vi;
        }
    }
}

/* ---- sums of squares and scaling ------------------------------------------------- */

/* Each block a tile: lane l (thread l) adds its elements' squares in order,
 * then the lanes' tree (runtime/core/ops.h's order). */
__global__ void sumsq_tiles_k(const pp_cuda_norm_list list, double *part)
{
    __shared__ double lane[PP_CUDA_SUMSQ_LANES];
    for (int32_t t = blockIdx.x; t < list.tiles; t += gridDim.x) {
        const int j = tile_owner(list.first_tile, list.count, t);
        const int64_t n = list.n[j];
        const int64_t i0 = (int64_t)(t - list.first_tile[j]) * PP_CUDA_SUMSQ_TILE;
        const int64_t i1 = n - i0 < PP_CUDA_SUMSQ_TILE ? n : i0 + PP_CUDA_SUMSQ_TILE;
        const float *x = list.x[j];
        double s = 0.0;
        for (int64_t i = i0 + threadIdx.x; i < i1; i += PP_CUDA_SUMSQ_LANES)
            s = __dadd_rn(s, __dmul_rn((double)x[i], (double)x[i]));
        lane[threadIdx.x] = s;
        __syncthreads();
        for (int o = PP_CUDA_SUMSQ_LANES / 2; o > 0; o /= 2) {
            const int l = threadIdx.x;
            if (l < o) lane[l] = __dadd_rn(lane[l], lane[l + o]);
            __syncthreads();
        }
        if (threadIdx.x == 0) part[t] = lane[0];
        __syncthreads(); /* lane[0] read before the next tile writes */
    }
}

/* One thread per tensor: its tiles' sums in order. */
__global__ void sumsq_total_k(const pp_cuda_norm_list list, const double *part, double *sums)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= list.count) return;
    const int32_t end = j + 1 < list.count ? list.first_tile[j + 1] : list.tiles;
    double s = 0.0;
    for (int32_t t = list.first_tile[j]; t < end; t++) s = __dadd_rn(s, part[t]);
    sums[j] = s;
}

__global__ void scale_multi_k(const pp_cuda_norm_list list, float scale)
{
    for (int32_t t = blockIdx.x; t < list.tiles; t += gridDim.x) {
        const int j = tile_owner(list.first_tile, list.count, t);
        const int64_t n = list.n[j];
        const int64_t i0 = (int64_t)(t - list.first_tile[j]) * PP_CUDA_MULTI_TILE;
        const int64_t i1 = n - i0 < PP_CUDA_MULTI_TILE ? n : i0 + PP_CUDA_MULTI_TILE;
        float *x = list.x[j];
        for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) x[i] = __fmul_rn(x[i], scale);
    }
}

/* ---- deferred batch-norm statistics ----------------------------------------------- */

/* The layer of channel g: the last one whose first channel is <= g. */
__device__ __forceinline__ int layer_of(const pp_cuda_bn_stats_list &l, int32_t g)
{
    int lo = 0, hi = l.count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (l.first_ch[mid] <= g)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

__global__ void bn_stats_k(const pp_cuda_bn_stats_list l)
{
    for (int32_t g = blockIdx.x * blockDim.x + threadIdx.x; g < l.channels;
         g += gridDim.x * blockDim.x) {
        const int i = layer_of(l, g);
        const int C = l.c[i], ch = g - l.first_ch[i];
        float *s = l.slots[i];
        const double hw = (double)l.hw[i];
        double total = 0.0, sum = 0.0;
        for (int k = 0; k < l.m; k++) {
            const double nk = __dmul_rn((double)l.sizes[k], hw);
            total = __dadd_rn(total, nk);
            sum = __dadd_rn(sum, __dmul_rn(nk, (double)s[(int64_t)k * 2 * C + ch]));
        }
        const double mean = __ddiv_rn(sum, total);
        double m2 = 0.0;
        for (int k = 0; k < l.m; k++) {
            const double nk = __dmul_rn((double)l.sizes[k], hw);
            const double dm = __dsub_rn((double)s[(int64_t)k * 2 * C + ch], mean);
            m2 = __dadd_rn(m2, __dadd_rn(__dmul_rn(__dsub_rn(nk, 1.0),
                                                   (double)s[(int64_t)k * 2 * C + C + ch]),
                                         __dmul_rn(__dmul_rn(nk, dm), dm)));
            s[(int64_t)k * 2 * C + ch] = 0.0f;
            s[(int64_t)k * 2 * C + C + ch] = 0.0f;
        }
        const double var = __ddiv_rn(m2, __dsub_rn(total, 1.0));
        const double mom = l.momentum, keep = __dsub_rn(1.0, mom);
        l.running_mean[i][ch] =
            (float)__dadd_rn(__dmul_rn(keep, (double)l.running_mean[i][ch]), __dmul_rn(mom, mean));
        l.running_var[i][ch] =
            (float)__dadd_rn(__dmul_rn(keep, (double)l.running_var[i][ch]), __dmul_rn(mom, var));
    }
}

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_adamw_multi(cudaStream_t s, unsigned max_grid,
                                       const pp_cuda_adamw_list *list, pp_cuda_adamw_args a)
{
    if (list->count <= 0 || list->tiles <= 0) return cudaSuccess;
    const unsigned grid = (unsigned)list->tiles < max_grid ? (unsigned)list->tiles : max_grid;
    adamw_multi_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(*list, a);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_sumsq_multi(cudaStream_t s, unsigned max_grid,
                                       const pp_cuda_norm_list *list, double *part,
                                       double *sums)
{
    if (list->count <= 0) return cudaSuccess;
    if (list->tiles > 0) {
        const unsigned grid = (unsigned)list->tiles < max_grid ? (unsigned)list->tiles : max_grid;
        sumsq_tiles_k<<<grid, PP_CUDA_SUMSQ_LANES, 0, s>>>(*list, part);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    sumsq_total_k<<<(list->count + 127) / 128, 128, 0, s>>>(*list, part, sums);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_scale_multi(cudaStream_t s, unsigned max_grid,
                                       const pp_cuda_norm_list *list, float scale)
{
    if (list->count <= 0 || list->tiles <= 0) return cudaSuccess;
    const unsigned grid = (unsigned)list->tiles < max_grid ? (unsigned)list->tiles : max_grid;
    scale_multi_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(*list, scale);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_bn_stats(cudaStream_t s, unsigned max_grid,
                                    const pp_cuda_bn_stats_list *list)
{
    if (list->count <= 0 || list->channels <= 0) return cudaSuccess;
    unsigned grid = (unsigned)((list->channels + 127) / 128);
    if (grid > max_grid) grid = max_grid;
    bn_stats_k<<<grid, 128, 0, s>>>(*list);
    return cudaGetLastError();
}

} // extern "C"
