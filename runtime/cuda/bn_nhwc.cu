/*
 * bn_nhwc.cu - batch norm over bf16 NHWC activations (the contracts of
 * ops.h, with pp_batchnorm_forward_act's add and ReLU and
 * pp_batchnorm_backward_relu's mask fused in), which the native entry
 * (native.c) runs instead of ops.c's f32 NCHW stand-ins.
 *
 * Each element's arithmetic is the CPU backend's f32 op on the exact values
 * of the bf16 inputs, each bf16 output rounded once to nearest even; the
 * statistics sum in another order (per-block f32 partials, then the blocks
 * in double in a fixed order: deterministic run to run) and agree within f32
 * rounding. A channel's values are C apart (NHWC), so consecutive threads
 * take consecutive channels (one, or 8 in 16 bytes) and each thread walks
 * rows.
 */
#include "bn_nhwc.h"

#include "bf16.cuh"
#include "bn_finish.cuh"

namespace {

/* ---- batch norm over bf16 NHWC --------------------------------------------------------- */

/* dy[i]'s bits, or +0 where the ReLU output mask[i] (when given) is not
 * positive: the bits pp_relu_backward gives (as nhwc.cu's kernel) */
__device__ __forceinline__ uint16_t masked_bits(const uint16_t *dy, const uint16_t *mask,
                                                int64_t i)
{
    return mask && !(widen(mask[i]) > 0.0f) ? (uint16_t)0 : dy[i];
}

/* its value */
__device__ __forceinline__ float masked(const uint16_t *dy, const uint16_t *mask, int64_t i)
{
    return widen(masked_bits(dy, mask, i));
}

/* the same for 8 channels */
__device__ __forceinline__ uint4 masked8(const uint4 &gv, const uint4 &mv)
{
    uint4 o = gv;
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (!(widen(lane16(mv, k)) > 0.0f)) set16(o, k, 0);
    return o;
}

/* one element of the batch norm's output: x * alpha + beta rounded, then +
 * a (when has_add) and the ReLU as pp_add_relu, pp_add and pp_relu_forward
 * give them, each f32 operation rounded on its own as the CPU rounds it
 * (bn_y, bn_finish.cuh) */
__device__ __forceinline__ uint16_t bn_out(uint16_t x, float alpha, float beta, bool has_add,
                                           uint16_t a, bool relu)
{
    const uint16_t o = narrow(bn_y(widen(x), alpha, beta));
    if (!has_add && !relu) return o;
    float v = widen(o);
    if (has_add) v = __fadd_rn(v, widen(a));
    if (relu) v = v > 0.0f ? v : 0.0f;
    return narrow(v);
}

/* one element of dx from dy (zero where the mask is given and not positive),
 * x and the coefficients of the backward's finish (bn_finish.cuh), rounded
 * op by op in the CPU's order (bn_dx) */
__device__ __forceinline__ uint16_t bn_dx_one(uint16_t dy, bool has_mask, uint16_t m, uint16_t x,
                                              float grad_mean, float proj, float scale,
                                              float mean)
{
    const float g = has_mask && !(widen(m) > 0.0f) ? 0.0f : widen(dy);
    return narrow(bn_dx(g, widen(x), grad_mean, proj, scale, mean));
}

enum { BN_CX = 32, BN_RY = 8 }; /* block: 32 channels x 8 rows */

/* Per-block partial sums over the rows [g * chunk, (g + 1) * chunk) of one
 * channel (block y = g, channel blockIdx.x * 32 + threadIdx.x):
 *   STATS_SUM:   s1 = sum x
 *   STATS_SQDEV: s1 = sum (x - mean)^2
 *   STATS_BWD:   s1 = sum dy, s2 = sum dy (x - mean)
 * written to part1/part2[g * c + channel]; with STATS_BWD and gout, the
 * masked dy written to gout (pp_batchnorm_backward_add_relu's g). */
enum stats_kind { STATS_SUM, STATS_SQDEV, STATS_BWD };

__global__ void bn_partial_k(stats_kind kind, int64_t rows, int c, int64_t chunk,
                             const uint16_t *x, const uint16_t *dy, const uint16_t *mask,
                             const float *mean, float *part1, float *part2, uint16_t *gout)
{
    __shared__ float s1[BN_RY][BN_CX], s2[BN_RY][BN_CX];
    const int ch = blockIdx.x * BN_CX + threadIdx.x;
    const int64_t r0 = (int64_t)blockIdx.y * chunk;
    const int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
    float a = 0.0f, b = 0.0f;
    if (ch < c) {
        const float m = kind == STATS_SUM ? 0.0f : mean[ch];
        for (int64_t r = r0 + threadIdx.y; r < r1; r += BN_RY) {
            const float v = widen(x[r * c + ch]);
            if (kind == STATS_SUM) {
                a += v;
            } else if (kind == STATS_SQDEV) {
                const float d = v - m;
                a += d * d;
            } else {
                const float g = masked(dy, mask, r * c + ch);
                if (gout) gout[r * c + ch] = masked_bits(dy, mask, r * c + ch);
                a += g;
                b += g * (v - m);
            }
        }
    }
    s1[threadIdx.y][threadIdx.x] = a;
    s2[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && ch < c) {
        for (int i = 1; i < BN_RY; i++) {
            a += s1[i][threadIdx.x];
            b += s2[i][threadIdx.x];
        }
        part1[(int64_t)blockIdx.y * c + ch] = a;
        if (kind == STATS_BWD) part2[(int64_t)blockIdx.y * c + ch] = b;
    }
}

/* the blocks' partials of channel ch, in block order, in double */
__device__ double total(const float *part, int groups, int c, int ch)
{
    double s = 0.0;
    for (int g = 0; g < groups; g++) s += part[(int64_t)g * c + ch];
    return s;
}

/* mean[ch] = sum / m (save_mean) */
__global__ void bn_mean_k(int c, int groups, double m, const float *part, float *mean)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c) mean[ch] = (float)(total(part, groups, c, ch) / m);
}

/* bn_train_finish from the partials of sum (x - mean)^2 */
__global__ void bn_finish_train1_k(int c, int groups, double m, float eps, float momentum,
                                  const float *part, const float *mean, const float *gamma,
                                  const float *beta, float *running_mean, float *running_var,
                                  float *save_invstd, float *coef)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    bn_train_finish(c, ch, m, eps, momentum, mean[ch], total(part, groups, c, ch) / m, gamma,
                    beta, running_mean, running_var, nullptr, save_invstd, coef);
}

/* y = round(x * alpha + beta) per channel, then act */
__global__ void bn_apply_k(int64_t n, int c, const uint16_t *x, const float *coef,
                           const uint16_t *add, bool relu, uint16_t *y)
{
    for (int64_t i = gtid(); i < n; i += gstride()) {
        const int ch = (int)(i % c);
        y[i] = bn_out(x[i], coef[ch], coef[c + ch], add, add ? add[i] : (uint16_t)0, relu);
    }
}

/* bn_backward_finish from the group-major partials */
__global__ void bn_finish_backward1_k(int c, int groups, double m, const float *part1,
                                     const float *part2, const float *mean, const float *invstd,
                                     const float *gamma, float *dgamma, float *dbeta, float *coef)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    bn_backward_finish(c, ch, m, total(part1, groups, c, ch), total(part2, groups, c, ch), mean,
                       invstd, gamma, dgamma, dbeta, coef);
}

__global__ void bn_dx_k(int64_t n, int c, const uint16_t *x, const uint16_t *dy,
                        const uint16_t *mask, const float *coef, uint16_t *dx)
{
    for (int64_t i = gtid(); i < n; i += gstride()) {
        const int ch = (int)(i % c);
        dx[i] = bn_dx_one(dy[i], mask, mask ? mask[i] : (uint16_t)0, x[i], coef[ch], coef[c + ch],
                          coef[2 * c + ch], coef[3 * c + ch]);
    }
}

/* ---- batch norm, 8 channels (16 bytes) per thread ------------------------------------
 * Where c is a multiple of 8 and every pointer 16-byte aligned (bn_tiled; the
 * kernels above otherwise, and with PP_CUDA_BN_SCALAR=1, to compare). A block
 * of 256 threads covers a tile of lt = min(c / 8, 256) groups of 8 channels
 * (lane = thread % lt) and rp = 256 / lt rows at once (phase = thread / lt);
 * block (tile, g) walks the rows [g * chunk, (g + 1) * chunk) rp apart. Each
 * thread keeps its 8 channels' coefficients in registers for all its rows and
 * moves 16 bytes per load: the per-element arithmetic is the scalar kernels'
 * (bn_out, bn_dx_one), only the sums' order differs.
 *
 * Statistics in one pass over x: per channel s1 = sum (x - k), s2 = sum
 * (x - k)^2 about k = x[0, channel] (the shifted-data sums: with k a sample
 * of the channel, s2 / m - (s1 / m)^2 loses no more than the two-pass
 * variance to cancellation; x - k of two bf16 values is exact in f32), f32
 * within a thread and a block in a fixed order, the blocks' partials in
 * double by one warp per channel in a fixed order: deterministic run to run.
 * Partials are channel-major: part[channel * groups + g]. */

enum { BN_T = 256, BN_MAX_GROUPS = 2048, BN_MIN_ROWS = 16 };

struct bn_tiling {
    int lt, rp, tiles, groups;
    int64_t chunk;
};

/* a tile's lanes, phases, and blocks of rows: at most BN_MAX_GROUPS blocks
 * in all (about 16 per SM of a large GPU), each thread BN_MIN_ROWS rows or more */
__host__ bn_tiling bn_tile(int64_t rows, int c)
{
    bn_tiling t;
    const int lanes = c / 8;
    t.lt = lanes < BN_T ? lanes : BN_T;
    t.tiles = (lanes + t.lt - 1) / t.lt;
    t.rp = BN_T / t.lt;
    int64_t g = (rows + (int64_t)t.rp * BN_MIN_ROWS - 1) / ((int64_t)t.rp * BN_MIN_ROWS);
    const int64_t cap = BN_MAX_GROUPS / t.tiles > 0 ? BN_MAX_GROUPS / t.tiles : 1;
    g = g < 1 ? 1 : g > cap ? cap : g;
    t.chunk = (rows + g - 1) / g;
    t.groups = (int)((rows + t.chunk - 1) / t.chunk);
    return t;
}

/* this thread's 8-channel group (-1: none) and its rows [*r, r1) step rp */
__device__ __forceinline__ int bn_lane(const bn_tiling &t, int c, int64_t rows, int64_t *r,
                                       int64_t *r1)
{
    const int lane = threadIdx.x % t.lt, phase = threadIdx.x / t.lt;
    const int cg = blockIdx.x * t.lt + lane;
    const int64_t r0 = (int64_t)blockIdx.y * t.chunk;
    *r = r0 + phase;
    *r1 = r0 + t.chunk < rows ? r0 + t.chunk : rows;
    return phase < t.rp && cg * 8 < c ? cg : -1;
}

__device__ __forceinline__ void load8f(const float *p, float v[8])
{
    const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

/* The block's per-thread sums a[8] and b[8] added over its phases in phase
 * order and written as the block's partials of its 8 channels. */
__device__ void bn_block_sums(const bn_tiling &t, int cg, const float a[8], const float b[8],
                              float *part1, float *part2)
{
    __shared__ __align__(16) float s1[BN_T * 8], s2[BN_T * 8];
    for (int k = 0; k < 8; k++) {
        s1[threadIdx.x * 8 + k] = a[k];
        s2[threadIdx.x * 8 + k] = b[k];
    }
    __syncthreads();
    if (threadIdx.x >= t.lt || cg < 0) return; /* phase 0 of a live lane */
    float x1[8], x2[8], v[8];
    for (int k = 0; k < 8; k++) x1[k] = a[k], x2[k] = b[k];
    for (int p = 1; p < t.rp; p++) {
        const int o = (p * t.lt + threadIdx.x) * 8;
        load8f(s1 + o, v);
        for (int k = 0; k < 8; k++) x1[k] += v[k];
        load8f(s2 + o, v);
        for (int k = 0; k < 8; k++) x2[k] += v[k];
    }
    for (int k = 0; k < 8; k++) {
        const int64_t o = (int64_t)(cg * 8 + k) * gridDim.y + blockIdx.y;
        part1[o] = x1[k];
        part2[o] = x2[k];
    }
}

/* One row's 8 channels added to the statistics' sums about k0. The
 * reductions keep several rows' loads in flight (a block of 256 threads holds
 * 4 of an SM's 8 block slots at these kernels' 60-odd registers: 16 bytes in
 * flight a thread left the loads waiting on latency, at 2 to 2.8 TB/s of an
 * H200's 4.8), and add the rows in row order: the bits of a row-by-row loop. */
enum { BN_STATS_ROWS = 4, BN_BWD_ROWS = 2, BN_APPLY_ROWS = 2 };

__device__ __forceinline__ void stats_row(const uint4 &u, const float k0[8], float a[8],
                                          float b[8])
{
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float d = widen(lane16(u, k)) - k0[k];
        a[k] += d;
        b[k] += d * d;
    }
}

/* one row's backward sums: dy (already masked) and dy (x - mean) */
__device__ __forceinline__ void bwd_row(const uint4 &xv, const uint4 &gv, const float mu[8],
                                        float a[8], float b[8])
{
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float g = widen(lane16(gv, k));
        a[k] += g;
        b[k] += g * (widen(lane16(xv, k)) - mu[k]);
    }
}

/* forward statistics: part1 = sum (x - k), part2 = sum (x - k)^2 */
__global__ void __launch_bounds__(BN_T) bn_stats8_k(bn_tiling t, int64_t rows, int c,
                                                    const uint4 *x, float *part1, float *part2,
                                                    float *shift)
{
    int64_t r, r1;
    const int cg = bn_lane(t, c, rows, &r, &r1);
    const int c8 = c / 8;
    float a[8] = {0}, b[8] = {0};
    if (cg >= 0) {
        const uint4 kv = x[cg];
        float k0[8];
        for (int k = 0; k < 8; k++) k0[k] = widen(lane16(kv, k));
        if (blockIdx.y == 0 && threadIdx.x < t.lt)
            for (int k = 0; k < 8; k++) shift[cg * 8 + k] = k0[k];
        /* BN_STATS_ROWS rows' loads in flight, then added in row order */
        for (; r + (BN_STATS_ROWS - 1) * t.rp < r1; r += BN_STATS_ROWS * t.rp) {
            uint4 u[BN_STATS_ROWS];
#pragma unroll
            for (int j = 0; j < BN_STATS_ROWS; j++) u[j] = x[(r + j * t.rp) * c8 + cg];
#pragma unroll
            for (int j = 0; j < BN_STATS_ROWS; j++) stats_row(u[j], k0, a, b);
        }
        for (; r < r1; r += t.rp) stats_row(x[r * c8 + cg], k0, a, b);
    }
    bn_block_sums(t, cg, a, b, part1, part2);
}

/* backward sums: part1 = sum dy, part2 = sum dy (x - mean), dy zero where the
 * mask is given and not positive (masked8: the bits pp_relu_backward gives,
 * +0 adding as the scalar kernels' 0.0f); that masked dy written to gout when
 * given (pp_batchnorm_backward_add_relu's g; it may be dy: each element is
 * read, then written, by one thread) */
__global__ void __launch_bounds__(BN_T, 4) bn_bwd_sums8_k(bn_tiling t, int64_t rows, int c,
                                                          const uint4 *x, const uint4 *dy,
                                                          const uint4 *mask, const float *mean,
                                                          float *part1, float *part2, uint4 *gout)
{
    int64_t r, r1;
    const int cg = bn_lane(t, c, rows, &r, &r1);
    const int c8 = c / 8;
    float a[8] = {0}, b[8] = {0};
    if (cg >= 0) {
        float mu[8];
        load8f(mean + cg * 8, mu);
        for (; r + (BN_BWD_ROWS - 1) * t.rp < r1; r += BN_BWD_ROWS * t.rp) {
            uint4 xv[BN_BWD_ROWS], gv[BN_BWD_ROWS];
#pragma unroll
            for (int j = 0; j < BN_BWD_ROWS; j++) {
                const int64_t i = (r + j * t.rp) * c8 + cg;
                xv[j] = x[i];
                gv[j] = mask ? masked8(dy[i], mask[i]) : dy[i];
            }
#pragma unroll
            for (int j = 0; j < BN_BWD_ROWS; j++) {
                if (gout) gout[(r + j * t.rp) * c8 + cg] = gv[j];
                bwd_row(xv[j], gv[j], mu, a, b);
            }
        }
        for (; r < r1; r += t.rp) {
            const int64_t i = r * c8 + cg;
            const uint4 gv = mask ? masked8(dy[i], mask[i]) : dy[i];
            if (gout) gout[i] = gv;
            bwd_row(x[i], gv, mu, a, b);
        }
    }
    bn_block_sums(t, cg, a, b, part1, part2);
}

/* y = bn_out per element, the 8 channels' alpha and beta in registers */
__global__ void __launch_bounds__(BN_T) bn_apply8_k(bn_tiling t, int64_t rows, int c,
                                                    const uint4 *x, const float *coef,
                                                    const uint4 *add, bool relu, uint4 *y)
{
    int64_t r, r1;
    const int cg = bn_lane(t, c, rows, &r, &r1);
    if (cg < 0) return;
    const int c8 = c / 8;
    float al[8], be[8];
    load8f(coef + cg * 8, al);
    load8f(coef + c + cg * 8, be);
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (; r < r1; r += BN_APPLY_ROWS * t.rp) { /* the rows' loads in flight together */
        uint4 xv[BN_APPLY_ROWS], av[BN_APPLY_ROWS];
#pragma unroll
        for (int j = 0; j < BN_APPLY_ROWS; j++) {
            const int64_t i = (r + j * t.rp) * c8 + cg;
            const bool in = r + j * t.rp < r1;
            xv[j] = in ? x[i] : zero;
            av[j] = in && add ? add[i] : zero;
        }
#pragma unroll
        for (int j = 0; j < BN_APPLY_ROWS; j++) {
            if (r + j * t.rp >= r1) break;
            uint4 out = zero;
#pragma unroll
            for (int k = 0; k < 8; k++)
                set16(out, k, bn_out(lane16(xv[j], k), al[k], be[k], add, lane16(av[j], k), relu));
            y[(r + j * t.rp) * c8 + cg] = out;
        }
    }
}

/* dx = bn_dx_one per element, the 8 channels' four coefficients in registers */
__global__ void __launch_bounds__(BN_T) bn_dx8_k(bn_tiling t, int64_t rows, int c,
                                                 const uint4 *x, const uint4 *dy,
                                                 const uint4 *mask, const float *coef, uint4 *dx)
{
    int64_t r, r1;
    const int cg = bn_lane(t, c, rows, &r, &r1);
    if (cg < 0) return;
    const int c8 = c / 8;
    float cf[4 * 8]; /* coef[j * c + channel] at cf[j * 8 + k] */
    for (int j = 0; j < 4; j++) load8f(coef + (int64_t)j * c + cg * 8, cf + j * 8);
    for (; r < r1; r += t.rp) {
        const int64_t i = r * c8 + cg;
        const uint4 xv = x[i], gv = dy[i], mv = mask ? mask[i] : make_uint4(0u, 0u, 0u, 0u);
        uint4 out = make_uint4(0u, 0u, 0u, 0u);
        for (int k = 0; k < 8; k++) {
            set16(out, k, bn_dx_one(lane16(gv, k), mask, lane16(mv, k), lane16(xv, k), cf[k],
                                    cf[8 + k], cf[16 + k], cf[24 + k]));
        }
        dx[i] = out;
    }
}

} // namespace

extern "C" {

static void bn_groups(int64_t rows, int *groups, int64_t *chunk)
{
    int64_t g = (rows + 1023) / 1024; /* about 1024 rows per block */
    if (g > 1024) g = 1024;
    if (g < 1) g = 1;
    *chunk = (rows + g - 1) / g;
    *groups = (int)((rows + *chunk - 1) / *chunk);
}

/* two partial sums per channel and group, then four coefficients per channel,
 * for whichever kernels run */
size_t pp_cuda_bn_scratch_floats(int64_t rows, int c)
{
    int groups;
    int64_t chunk;
    bn_groups(rows, &groups, &chunk);
    if (c % 8 == 0) {
        const bn_tiling t = bn_tile(rows, c);
        groups = t.groups > groups ? t.groups : groups;
    }
    return (size_t)2 * groups * c + 5 * (size_t)c; /* partials, coefficients, shift */
}

static dim3 bn_grid(int c, int groups)
{
    return dim3((unsigned)((c + BN_CX - 1) / BN_CX), (unsigned)groups);
}

/* PP_CUDA_BN_SCALAR (set and not 0): the one-channel-per-thread kernels only */
static bool bn_scalar_only(void)
{
    static int only = -1;
    return pp_cuda_env_on("PP_CUDA_BN_SCALAR", &only);
}

/* the 8-channel kernels: c % 8 and every pointer (NULL or) 16-byte aligned */
static bool bn_tiled(int c, const void *a, const void *b, const void *m, const void *y,
                     const void *stats, const void *scratch)
{
    return !bn_scalar_only() && c % 8 == 0 && pp_cuda_aligned16(a) && pp_cuda_aligned16(b) &&
           pp_cuda_aligned16(m) && pp_cuda_aligned16(y) && pp_cuda_aligned16(stats) &&
           pp_cuda_aligned16(scratch);
}

static void bn_apply(cudaStream_t s, unsigned max_grid, int64_t rows, int c, const uint16_t *x,
                     const float *coef, const uint16_t *add, bool relu, uint16_t *y, bool tiled)
{
    if (tiled) {
        const bn_tiling t = bn_tile(rows, c);
        bn_apply8_k<<<dim3((unsigned)t.tiles, (unsigned)t.groups), BN_T, 0, s>>>(
            t, rows, c, reinterpret_cast<const uint4 *>(x), coef,
            reinterpret_cast<const uint4 *>(add), relu, reinterpret_cast<uint4 *>(y));
        return;
    }
    const int64_t n = rows * c;
    bn_apply_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(n, c, x, coef, add, relu, y);
}

cudaError_t pp_cuda_launch_bn_train_nhwc(cudaStream_t s, unsigned max_grid, int64_t rows, int c,
                                         float eps, float momentum, const uint16_t *x,
                                         const float *gamma, const float *beta,
                                         float *running_mean, float *running_var,
                                         const uint16_t *add, bool relu, uint16_t *y,
                                         float *save_mean, float *save_invstd, float *scratch)
{
    if (bn_tiled(c, x, add, nullptr, y, nullptr, scratch)) {
        const bn_tiling t = bn_tile(rows, c);
        float *part1 = scratch, *part2 = scratch + (size_t)t.groups * c;
        float *coef = scratch + 2 * (size_t)t.groups * c, *shift = coef + 4 * (size_t)c;
        bn_stats8_k<<<dim3((unsigned)t.tiles, (unsigned)t.groups), BN_T, 0, s>>>(
            t, rows, c, reinterpret_cast<const uint4 *>(x), part1, part2, shift);
        bn_finish_train_k<<<bn_warp_grid(c), 128, 0, s>>>(
            c, t.groups, (double)rows, eps, momentum, shift, part1, part2, gamma, beta,
            running_mean, running_var, save_mean, save_invstd, coef);
        bn_apply(s, max_grid, rows, c, x, coef, add, relu, y, true);
        return cudaGetLastError();
    }
    int groups;
    int64_t chunk;
    bn_groups(rows, &groups, &chunk);
    float *part = scratch, *coef = scratch + 2 * (size_t)groups * c;
    const unsigned cg = (unsigned)((c + 127) / 128);
    const dim3 block(BN_CX, BN_RY);
    bn_partial_k<<<bn_grid(c, groups), block, 0, s>>>(STATS_SUM, rows, c, chunk, x, nullptr,
                                                      nullptr, nullptr, part, nullptr, nullptr);
    bn_mean_k<<<cg, 128, 0, s>>>(c, groups, (double)rows, part, save_mean);
    bn_partial_k<<<bn_grid(c, groups), block, 0, s>>>(STATS_SQDEV, rows, c, chunk, x, nullptr,
                                                      nullptr, save_mean, part, nullptr, nullptr);
    bn_finish_train1_k<<<cg, 128, 0, s>>>(c, groups, (double)rows, eps, momentum, part, save_mean,
                                         gamma, beta, running_mean, running_var, save_invstd,
                                         coef);
    bn_apply(s, max_grid, rows, c, x, coef, add, relu, y, false);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_bn_infer_nhwc(cudaStream_t s, unsigned max_grid, int64_t rows, int c,
                                         float eps, const uint16_t *x, const float *gamma,
                                         const float *beta, const float *running_mean,
                                         const float *running_var, const uint16_t *add,
                                         bool relu, uint16_t *y, float *scratch)
{
    bn_infer_coef_k<<<(unsigned)((c + 127) / 128), 128, 0, s>>>(c, eps, gamma, beta, running_mean,
                                                               running_var, scratch);
    bn_apply(s, max_grid, rows, c, x, scratch, add, relu, y,
             bn_tiled(c, x, add, nullptr, y, nullptr, scratch));
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_bn_backward_nhwc(cudaStream_t s, unsigned max_grid, int64_t rows,
                                            int c, const uint16_t *x, const uint16_t *dy,
                                            const uint16_t *relu_y, const float *gamma,
                                            const float *save_mean, const float *save_invstd,
                                            uint16_t *dx, float *dgamma, float *dbeta,
                                            uint16_t *g, float *scratch)
{
    /* with g the masked gradient is there after the sums: dx reads it, unmasked */
    const uint16_t *dx_dy = g ? g : dy, *dx_mask = g ? nullptr : relu_y;
    if (bn_tiled(c, x, dy, relu_y, dx, save_mean, scratch) && pp_cuda_aligned16(g)) {
        const bn_tiling t = bn_tile(rows, c);
        float *part1 = scratch, *part2 = scratch + (size_t)t.groups * c;
        float *coef = scratch + 2 * (size_t)t.groups * c;
        const dim3 grid((unsigned)t.tiles, (unsigned)t.groups);
        const uint4 *x8 = reinterpret_cast<const uint4 *>(x);
        bn_bwd_sums8_k<<<grid, BN_T, 0, s>>>(t, rows, c, x8, reinterpret_cast<const uint4 *>(dy),
                                             reinterpret_cast<const uint4 *>(relu_y), save_mean,
                                             part1, part2, reinterpret_cast<uint4 *>(g));
        bn_finish_backward_k<<<bn_warp_grid(c), 128, 0, s>>>(c, t.groups, (double)rows, part1,
                                                             part2, save_mean, save_invstd,
                                                             gamma, dgamma, dbeta, coef);
        bn_dx8_k<<<grid, BN_T, 0, s>>>(t, rows, c, x8, reinterpret_cast<const uint4 *>(dx_dy),
                                       reinterpret_cast<const uint4 *>(dx_mask), coef,
                                       reinterpret_cast<uint4 *>(dx));
        return cudaGetLastError();
    }
    int groups;
    int64_t chunk;
    bn_groups(rows, &groups, &chunk);
    float *part1 = scratch, *part2 = scratch + (size_t)groups * c;
    float *coef = scratch + 2 * (size_t)groups * c;
    bn_partial_k<<<bn_grid(c, groups), dim3(BN_CX, BN_RY), 0, s>>>(
        STATS_BWD, rows, c, chunk, x, dy, relu_y, save_mean, part1, part2, g);
    bn_finish_backward1_k<<<(unsigned)((c + 127) / 128), 128, 0, s>>>(
        c, groups, (double)rows, part1, part2, save_mean, save_invstd, gamma, dgamma, dbeta,
        coef);
    const int64_t n = rows * c;
    bn_dx_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(n, c, x, dx_dy, dx_mask, coef, dx);
    return cudaGetLastError();
}

/* the 8-channel pooling kernels: c % 8 and every pointer 16-byte aligned */

} // extern "C"
