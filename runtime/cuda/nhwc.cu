/*
 * nhwc.cu - the CUDA backend's kernels on bf16 operands and NHWC
 * layouts, which its native entry (native.c) runs instead of ops.c's
 * f32 NCHW stand-ins: layout transposes, bf16 elementwise ops, batch norm,
 * max pooling and global average pooling over bf16 NHWC activations.
 *
 * Each kernel computes what the fallback computes (runtime/core/ops.c): the
 * f32 op of the CPU backend (runtime/cpu, the reference) on the exact values
 * of the bf16 inputs, each bf16 output rounded once to nearest even (the
 * integer rounding of kernels.cu's bf16_from_f32_k). Elementwise ops,
 * pooling and transposes give the fallback's bits; batch-norm statistics sum
 * in another order (per-block f32 partials, then the blocks in double in a
 * fixed order: deterministic run to run) and agree within f32 rounding.
 *
 * NHWC: element (n, c, h, w) of a (N, C, H, W) tensor lies at
 * ((n * H + h) * W + w) * C + c; a channel's values are C apart, so the
 * reductions give each thread one channel and consecutive threads
 * consecutive channels (coalesced rows of C values).
 */
#include "nhwc.h"

#include <cstdlib>
#include <cstring>

namespace {

__device__ __forceinline__ float widen(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

/* pp_bf16_from_f32's bits: nearest, ties to even, NaN quiet */
__device__ __forceinline__ uint16_t narrow(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ int64_t gtid()
{
    return blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t gstride()
{
    return (int64_t)gridDim.x * blockDim.x;
}

/* ---- transposes --------------------------------------------------------------------- */

enum { TT = 32, TR = 8 }; /* tile side, rows per thread step */

/* each of n rows x cols matrices of x written transposed to y; a 32x32 tile
 * goes through shared memory so both sides move whole rows */
template <class T>
__global__ void transpose_k(int64_t n, int64_t rows, int64_t cols, const T *x, T *y)
{
    __shared__ T tile[TT][TT + 1];
    const int64_t c0 = (int64_t)blockIdx.x * TT, row_tiles = (rows + TT - 1) / TT;
    for (int64_t m = blockIdx.z; m < n; m += gridDim.z) {
        const T *xm = x + m * rows * cols;
        T *ym = y + m * rows * cols;
        /* row tiles loop: gridDim.y stops at 65535 (images above ~1448x1448) */
        for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
            const int64_t r0 = rt * TT;
            for (int i = threadIdx.y; i < TT; i += TR) {
                const int64_t r = r0 + i, c = c0 + threadIdx.x;
                if (r < rows && c < cols) tile[i][threadIdx.x] = xm[r * cols + c];
            }
            __syncthreads();
            for (int i = threadIdx.y; i < TT; i += TR) {
                const int64_t c = c0 + i, r = r0 + threadIdx.x;
                if (r < rows && c < cols) ym[c * rows + r] = tile[threadIdx.x][i];
            }
            __syncthreads();
        }
    }
}

/* ---- bf16 elementwise ---------------------------------------------------------------- */

__device__ __forceinline__ uint16_t ew_one(pp_cuda_bf16_ew kind, uint16_t a, uint16_t b)
{
    const float x = widen(a), z = widen(b);
    switch (kind) {
    case PP_CUDA_BF16_RELU: return x > 0.0f ? a : (uint16_t)0; /* exact: no rounding */
    case PP_CUDA_BF16_RELU_BACKWARD: return x > 0.0f ? b : (uint16_t)0;
    case PP_CUDA_BF16_ADD: return narrow(x + z);
    default: { /* add + ReLU: the f32 sum, its ReLU, one rounding */
        const float s = x + z;
        return narrow(s > 0.0f ? s : 0.0f);
    }
    }
}

/* 8 elements (16 bytes) per step where every pointer is 16-byte aligned, then
 * the tail; each element is read before it is written (y may alias a or b) */
__global__ void bf16_ew_k(pp_cuda_bf16_ew kind, int64_t n, const uint16_t *a, const uint16_t *b,
                          uint16_t *y, bool vec)
{
    int64_t done = 0;
    if (vec) {
        const int64_t n8 = n / 8;
        const uint4 *a8 = reinterpret_cast<const uint4 *>(a);
        const uint4 *b8 = reinterpret_cast<const uint4 *>(b);
        uint4 *y8 = reinterpret_cast<uint4 *>(y);
        for (int64_t i = gtid(); i < n8; i += gstride()) {
            uint4 u = a8[i], v = b ? b8[i] : make_uint4(0u, 0u, 0u, 0u), w;
            const uint32_t *up = &u.x, *vp = &v.x;
            uint32_t *wp = &w.x;
            for (int k = 0; k < 4; k++) {
                uint16_t lo = ew_one(kind, (uint16_t)up[k], (uint16_t)vp[k]);
                uint16_t hi = ew_one(kind, (uint16_t)(up[k] >> 16), (uint16_t)(vp[k] >> 16));
                wp[k] = (uint32_t)lo | ((uint32_t)hi << 16);
            }
            y8[i] = w;
        }
        done = n8 * 8;
    }
    for (int64_t i = done + gtid(); i < n; i += gstride())
        y[i] = ew_one(kind, a[i], b ? b[i] : (uint16_t)0);
}

/* ---- batch norm over bf16 NHWC --------------------------------------------------------- */

/* dy[i], or 0 where the ReLU output mask[i] (when given) is not positive: the
 * bits pp_relu_backward gives */
__device__ __forceinline__ float masked(const uint16_t *dy, const uint16_t *mask, int64_t i)
{
    return mask && !(widen(mask[i]) > 0.0f) ? 0.0f : widen(dy[i]);
}

/* one element of the batch norm's output: x * alpha + beta rounded, then +
 * a (when has_add) and the ReLU as pp_add_relu, pp_add and pp_relu_forward
 * give them */
__device__ __forceinline__ uint16_t bn_out(uint16_t x, float alpha, float beta, bool has_add,
                                           uint16_t a, bool relu)
{
    const uint16_t o = narrow(widen(x) * alpha + beta);
    if (!has_add && !relu) return o;
    float v = widen(o);
    if (has_add) v += widen(a);
    if (relu) v = v > 0.0f ? v : 0.0f;
    return narrow(v);
}

/* one element of dx from dy (zero where the mask is given and not positive),
 * x and the coefficients of bn_finish_backward_k */
__device__ __forceinline__ uint16_t bn_dx_one(uint16_t dy, bool has_mask, uint16_t m, uint16_t x,
                                              const float *coef, int c, int ch)
{
    const float g = has_mask && !(widen(m) > 0.0f) ? 0.0f : widen(dy), v = widen(x);
    return narrow((g - coef[ch] - (v - coef[3 * c + ch]) * coef[c + ch]) * coef[2 * c + ch]);
}

enum { BN_CX = 32, BN_RY = 8 }; /* block: 32 channels x 8 rows */

/* Per-block partial sums over the rows [g * chunk, (g + 1) * chunk) of one
 * channel (block y = g, channel blockIdx.x * 32 + threadIdx.x):
 *   STATS_SUM:   s1 = sum x
 *   STATS_SQDEV: s1 = sum (x - mean)^2
 *   STATS_BWD:   s1 = sum dy, s2 = sum dy (x - mean)
 * written to part1/part2[g * c + channel]. */
enum stats_kind { STATS_SUM, STATS_SQDEV, STATS_BWD };

__global__ void bn_partial_k(stats_kind kind, int64_t rows, int c, int64_t chunk,
                             const uint16_t *x, const uint16_t *dy, const uint16_t *mask,
                             const float *mean, float *part1, float *part2)
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

/* invstd, running statistics, and the transform y = x * coef[ch] + coef[c + ch],
 * as the CPU's forward_train_channel */
__global__ void bn_finish_train_k(int c, int groups, double m, float eps, float momentum,
                                  const float *part, const float *mean, const float *gamma,
                                  const float *beta, float *running_mean, float *running_var,
                                  float *save_invstd, float *coef)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    const double ssq = total(part, groups, c, ch), mu = mean[ch], mom = momentum;
    const double invstd = 1.0 / sqrt(ssq / m + (double)eps);
    save_invstd[ch] = (float)invstd;
    running_mean[ch] = (float)((1.0 - mom) * running_mean[ch] + mom * mu);
    running_var[ch] = (float)((1.0 - mom) * running_var[ch] + mom * (ssq / (m - 1.0)));
    const double alpha = (double)gamma[ch] * invstd;
    coef[ch] = (float)alpha;
    coef[c + ch] = (float)((double)beta[ch] - mu * alpha);
}

/* inference: the transform from the running statistics */
__global__ void bn_infer_coef_k(int c, float eps, const float *gamma, const float *beta,
                                const float *running_mean, const float *running_var, float *coef)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    const double invstd = 1.0 / sqrt((double)running_var[ch] + (double)eps);
    const double alpha = (double)gamma[ch] * invstd;
    coef[ch] = (float)alpha;
    coef[c + ch] = (float)((double)beta[ch] - running_mean[ch] * alpha);
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

/* dgamma += dot * invstd, dbeta += sum dy, and the dx coefficients (grad_mean,
 * proj, scale, mean) as the CPU's backward_channel */
__global__ void bn_finish_backward_k(int c, int groups, double m, const float *part1,
                                     const float *part2, const float *mean, const float *invstd,
                                     const float *gamma, float *dgamma, float *dbeta, float *coef)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    const double sum_dy = total(part1, groups, c, ch), dot = total(part2, groups, c, ch);
    const double is = invstd[ch];
    dgamma[ch] += (float)(dot * is);
    dbeta[ch] += (float)sum_dy;
    coef[ch] = (float)(sum_dy / m);
    coef[c + ch] = (float)(dot * is * is / m);
    coef[2 * c + ch] = (float)((double)gamma[ch] * is);
    coef[3 * c + ch] = mean[ch];
}

__global__ void bn_dx_k(int64_t n, int c, const uint16_t *x, const uint16_t *dy,
                        const uint16_t *mask, const float *coef, uint16_t *dx)
{
    for (int64_t i = gtid(); i < n; i += gstride()) {
        dx[i] = bn_dx_one(dy[i], mask, mask ? mask[i] : (uint16_t)0, x[i], coef, c, (int)(i % c));
    }
}

/* ---- the same batch-norm kernels, 8 channels (16 bytes) or 2 channels (4
 * bytes) per thread: where c is a multiple of 8 (64 for the partials) and
 * every pointer 16-byte aligned (bn_vec). Each element's arithmetic, and each
 * channel's order of summation, is the scalar kernel's: the same bits, in
 * fewer and wider memory transactions and without a 64-bit modulo per element
 * (PP_CUDA_BN_SCALAR=1 runs the scalar kernels, to compare). */

__device__ __forceinline__ uint16_t lane16(const uint4 &v, int k)
{
    const uint32_t w = (&v.x)[k >> 1];
    return (uint16_t)(k & 1 ? w >> 16 : w);
}

__device__ __forceinline__ void set16(uint4 &v, int k, uint16_t h)
{
    uint32_t &w = (&v.x)[k >> 1];
    w = k & 1 ? (w & 0xffffu) | ((uint32_t)h << 16) : (w & 0xffff0000u) | h;
}

/* bn_apply_k over n8 groups of 8 channels of one row */
__global__ void bn_apply8_k(int64_t n8, int c, const uint4 *x, const float *coef,
                            const uint4 *add, bool relu, uint4 *y)
{
    const int c8 = c / 8;
    for (int64_t i = gtid(); i < n8; i += gstride()) {
        const int ch0 = (int)(i % c8) * 8;
        const uint4 xv = x[i], av = add ? add[i] : make_uint4(0u, 0u, 0u, 0u);
        uint4 out = make_uint4(0u, 0u, 0u, 0u);
        for (int k = 0; k < 8; k++)
            set16(out, k, bn_out(lane16(xv, k), coef[ch0 + k], coef[c + ch0 + k], add,
                                 lane16(av, k), relu));
        y[i] = out;
    }
}

/* bn_dx_k over n8 groups of 8 channels of one row */
__global__ void bn_dx8_k(int64_t n8, int c, const uint4 *x, const uint4 *dy, const uint4 *mask,
                         const float *coef, uint4 *dx)
{
    const int c8 = c / 8;
    for (int64_t i = gtid(); i < n8; i += gstride()) {
        const int ch0 = (int)(i % c8) * 8;
        const uint4 xv = x[i], gv = dy[i], mv = mask ? mask[i] : make_uint4(0u, 0u, 0u, 0u);
        uint4 out = make_uint4(0u, 0u, 0u, 0u);
        for (int k = 0; k < 8; k++)
            set16(out, k, bn_dx_one(lane16(gv, k), mask, lane16(mv, k), lane16(xv, k), coef, c,
                                    ch0 + k));
        dx[i] = out;
    }
}

/* bn_partial_k with 2 channels per thread (block: 32 x 8 threads, 64
 * channels): each channel's rows in the scalar kernel's order */
__global__ void bn_partial2_k(stats_kind kind, int64_t rows, int c, int64_t chunk,
                              const uint16_t *x, const uint16_t *dy, const uint16_t *mask,
                              const float *mean, float *part1, float *part2)
{
    __shared__ float s1[BN_RY][2 * BN_CX], s2[BN_RY][2 * BN_CX];
    const int ch = (blockIdx.x * BN_CX + threadIdx.x) * 2; /* c % 64 == 0: ch + 1 < c */
    const int64_t r0 = (int64_t)blockIdx.y * chunk;
    const int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
    float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f;
    const float m0 = kind == STATS_SUM ? 0.0f : mean[ch], m1 = kind == STATS_SUM ? 0.0f : mean[ch + 1];
    for (int64_t r = r0 + threadIdx.y; r < r1; r += BN_RY) {
        const uint32_t xw = *reinterpret_cast<const uint32_t *>(x + r * c + ch);
        const float v0 = widen((uint16_t)xw), v1 = widen((uint16_t)(xw >> 16));
        if (kind == STATS_SUM) {
            a0 += v0;
            a1 += v1;
        } else if (kind == STATS_SQDEV) {
            const float d0 = v0 - m0, d1 = v1 - m1;
            a0 += d0 * d0;
            a1 += d1 * d1;
        } else {
            const uint32_t gw = *reinterpret_cast<const uint32_t *>(dy + r * c + ch);
            float g0 = widen((uint16_t)gw), g1 = widen((uint16_t)(gw >> 16));
            if (mask) {
                const uint32_t mw = *reinterpret_cast<const uint32_t *>(mask + r * c + ch);
                if (!(widen((uint16_t)mw) > 0.0f)) g0 = 0.0f;
                if (!(widen((uint16_t)(mw >> 16)) > 0.0f)) g1 = 0.0f;
            }
            a0 += g0;
            a1 += g1;
            b0 += g0 * (v0 - m0);
            b1 += g1 * (v1 - m1);
        }
    }
    const int t = 2 * threadIdx.x;
    s1[threadIdx.y][t] = a0;
    s1[threadIdx.y][t + 1] = a1;
    s2[threadIdx.y][t] = b0;
    s2[threadIdx.y][t + 1] = b1;
    __syncthreads();
    if (threadIdx.y == 0) {
        for (int i = 1; i < BN_RY; i++) {
            a0 += s1[i][t];
            a1 += s1[i][t + 1];
            b0 += s2[i][t];
            b1 += s2[i][t + 1];
        }
        const int64_t o = (int64_t)blockIdx.y * c + ch;
        part1[o] = a0;
        part1[o + 1] = a1;
        if (kind == STATS_BWD) {
            part2[o] = b0;
            part2[o + 1] = b1;
        }
    }
}

/* ---- max pooling over bf16 NHWC ------------------------------------------------------ */

/* One output element: the window in row-major order, the first maximum wins
 * (a NaN is taken), idx = h * W + w, as the CPU's maxpool_row. Every output
 * writes its idx, padded windows included: ops.c refuses 2 * pad > kernel,
 * so every window, clipped to the input, holds at least one element (the
 * backward reads idx only at outputs whose window holds its element). */
__global__ void maxpool_fwd_k(pp_cuda_pool_geom4 g, const uint16_t *x, uint16_t *y, int32_t *idx)
{
    const int64_t total = (int64_t)g.n * g.p * g.q * g.c;
    for (int64_t i = gtid(); i < total; i += gstride()) {
        const int ch = (int)(i % g.c);
        int64_t t = i / g.c;
        const int q = (int)(t % g.q);
        t /= g.q;
        const int p = (int)(t % g.p);
        const int64_t n = t / g.p;
        int h0 = p * g.stride - g.pad, h1 = h0 + g.kernel;
        int w0 = q * g.stride - g.pad, w1 = w0 + g.kernel;
        h0 = h0 < 0 ? 0 : h0;
        w0 = w0 < 0 ? 0 : w0;
        h1 = h1 > g.h ? g.h : h1;
        w1 = w1 > g.w ? g.w : w1;
        const uint16_t *xn = x + n * g.h * g.w * g.c + ch;
        uint16_t best = xn[((int64_t)h0 * g.w + w0) * g.c];
        float bv = widen(best);
        int32_t at = h0 * g.w + w0;
        for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) {
                const uint16_t raw = xn[((int64_t)ih * g.w + iw) * g.c];
                const float v = widen(raw);
                if (v > bv || v != v) {
                    best = raw;
                    bv = v;
                    at = ih * g.w + iw;
                }
            }
        y[i] = best;
        idx[i] = at;
    }
}

/* One input element gathers the gradients of the windows whose maximum it is,
 * in the CPU's scatter order (outputs in row-major order), in f32. */
__global__ void maxpool_bwd_k(pp_cuda_pool_geom4 g, const uint16_t *dy, const int32_t *idx,
                              uint16_t *dx)
{
    const int64_t total = (int64_t)g.n * g.h * g.w * g.c;
    for (int64_t i = gtid(); i < total; i += gstride()) {
        const int ch = (int)(i % g.c);
        int64_t t = i / g.c;
        const int w = (int)(t % g.w);
        t /= g.w;
        const int h = (int)(t % g.h);
        const int64_t n = t / g.h;
        /* outputs p whose window [p s - pad, p s - pad + k) holds h */
        int p0 = (h + g.pad - g.kernel + g.stride) / g.stride, p1 = (h + g.pad) / g.stride;
        int q0 = (w + g.pad - g.kernel + g.stride) / g.stride, q1 = (w + g.pad) / g.stride;
        if (h + g.pad - g.kernel + 1 <= 0) p0 = 0;
        if (w + g.pad - g.kernel + 1 <= 0) q0 = 0;
        p1 = p1 < g.p - 1 ? p1 : g.p - 1;
        q1 = q1 < g.q - 1 ? q1 : g.q - 1;
        const int32_t me = h * g.w + w;
        float acc = 0.0f;
        for (int p = p0; p <= p1; p++)
            for (int q = q0; q <= q1; q++) {
                const int64_t o = ((n * g.p + p) * g.q + q) * g.c + ch;
                if (idx[o] == me) acc += widen(dy[o]);
            }
        dx[i] = narrow(acc);
    }
}

/* ---- global average pooling over bf16 NHWC --------------------------------------------- */

/* y[n, c] = (float)(sum over h, w in double / hw), as the CPU's avgpool */
__global__ void gap_fwd_k(int64_t n, int c, int64_t hw, const uint16_t *x, void *y, bool y_bf16)
{
    for (int64_t i = gtid(); i < n * c; i += gstride()) {
        const int64_t b = i / c, ch = i % c;
        const uint16_t *xb = x + b * hw * c + ch;
        double s = 0.0;
        for (int64_t k = 0; k < hw; k++) s += widen(xb[k * c]);
        const float v = (float)(s / (double)hw);
        if (y_bf16)
            static_cast<uint16_t *>(y)[i] = narrow(v);
        else
            static_cast<float *>(y)[i] = v;
    }
}

__global__ void gap_bwd_k(int64_t n, int c, int64_t hw, const void *dy, bool dy_bf16,
                          uint16_t *dx)
{
    const int64_t total = n * hw * c;
    for (int64_t i = gtid(); i < total; i += gstride()) {
        const int64_t ch = i % c, b = i / (hw * c);
        const double g = dy_bf16 ? (double)widen(static_cast<const uint16_t *>(dy)[b * c + ch])
                                 : (double)static_cast<const float *>(dy)[b * c + ch];
        dx[i] = narrow((float)(g / (double)hw));
    }
}

/* ---- convolution helpers ------------------------------------------------------------ */

/* y (rows, cp) = x (rows, c) with channels c..cp-1 zero */
__global__ void pad_channels_k(int64_t rows, int c, int cp, const uint16_t *x, uint16_t *y)
{
    for (int64_t i = gtid(); i < rows * cp; i += gstride()) {
        const int64_t r = i / cp;
        const int ch = (int)(i % cp);
        y[i] = ch < c ? x[r * c + ch] : (uint16_t)0;
    }
}

/* dw (k, c, rs) += low (k, rs, cp) widened, channels < c */
__global__ void wgrad_add_k(int k, int c, int rs, int cp, const uint16_t *low, float *dw)
{
    const int64_t n = (int64_t)k * c * rs;
    for (int64_t i = gtid(); i < n; i += gstride()) {
        const int64_t kk = i / ((int64_t)c * rs), rem = i % ((int64_t)c * rs);
        const int ch = (int)(rem / rs), pos = (int)(rem % rs);
        dw[i] += widen(low[(kk * rs + pos) * cp + ch]);
    }
}

unsigned grid_for(int64_t n, unsigned max_grid)
{
    const int64_t g = (n + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK;
    return (unsigned)(g < 1 ? 1 : g > (int64_t)max_grid ? max_grid : g);
}

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_transpose(cudaStream_t s, int64_t n, int64_t rows, int64_t cols,
                                     size_t elem, const void *x, void *y)
{
    if (n <= 0 || rows <= 0 || cols <= 0) return cudaSuccess;
    if ((cols + TT - 1) / TT > 0x7fffffff) return cudaErrorInvalidValue;
    const int64_t row_tiles = (rows + TT - 1) / TT;
    const dim3 grid((unsigned)((cols + TT - 1) / TT),
                    (unsigned)(row_tiles < 65535 ? row_tiles : 65535),
                    (unsigned)(n < 65535 ? n : 65535));
    const dim3 block(TT, TR);
    if (elem == 2)
        transpose_k<uint16_t><<<grid, block, 0, s>>>(n, rows, cols,
                                                    static_cast<const uint16_t *>(x),
                                                    static_cast<uint16_t *>(y));
    else
        transpose_k<uint32_t><<<grid, block, 0, s>>>(n, rows, cols,
                                                    static_cast<const uint32_t *>(x),
                                                    static_cast<uint32_t *>(y));
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_bf16_elementwise(cudaStream_t s, unsigned max_grid,
                                            pp_cuda_bf16_ew kind, int64_t n, const uint16_t *a,
                                            const uint16_t *b, uint16_t *y)
{
    if (n <= 0) return cudaSuccess;
    const bool vec = ((uintptr_t)a % 16 == 0) && (!b || (uintptr_t)b % 16 == 0) &&
                     ((uintptr_t)y % 16 == 0);
    bf16_ew_k<<<grid_for(vec ? (n + 7) / 8 : n, max_grid), PP_CUDA_BLOCK, 0, s>>>(kind, n, a, b,
                                                                                y, vec);
    return cudaGetLastError();
}

/* The partials' layout: groups blocks of rows per channel. */
static void bn_groups(int64_t rows, int *groups, int64_t *chunk)
{
    int64_t g = (rows + 1023) / 1024; /* about 1024 rows per block */
    if (g > 1024) g = 1024;
    if (g < 1) g = 1;
    *chunk = (rows + g - 1) / g;
    *groups = (int)((rows + *chunk - 1) / *chunk);
}

size_t pp_cuda_bn_scratch_floats(int64_t rows, int c)
{
    int groups;
    int64_t chunk;
    bn_groups(rows, &groups, &chunk);
    return (size_t)2 * groups * c + 4 * (size_t)c;
}

static dim3 bn_grid(int c, int groups)
{
    return dim3((unsigned)((c + BN_CX - 1) / BN_CX), (unsigned)groups);
}

/* PP_CUDA_BN_SCALAR (set and not 0): the one-channel-per-thread kernels only */
static bool bn_scalar_only(void)
{
    static int only = -1; /* read once; a racing first read stores the same value */
    if (only < 0) {
        const char *e = getenv("PP_CUDA_BN_SCALAR");
        only = e && *e && strcmp(e, "0") != 0;
    }
    return only == 1;
}

static bool aligned16(const void *p)
{
    return (uintptr_t)p % 16 == 0;
}

/* the 8-channel elementwise kernels: c % 8 and every pointer (NULL or) aligned */
static bool bn_vec8(int c, const void *a, const void *b, const void *m, const void *y)
{
    return !bn_scalar_only() && c % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(m) &&
           aligned16(y);
}

/* the 2-channel partial sums: 64-channel blocks */
static bool bn_vec2(int c, const void *x, const void *dy, const void *m)
{
    return !bn_scalar_only() && c % (2 * BN_CX) == 0 && aligned16(x) && aligned16(dy) &&
           aligned16(m);
}

static void bn_partial(cudaStream_t s, stats_kind kind, int64_t rows, int c, int groups,
                       int64_t chunk, const uint16_t *x, const uint16_t *dy, const uint16_t *mask,
                       const float *mean, float *part1, float *part2)
{
    const dim3 block(BN_CX, BN_RY);
    if (bn_vec2(c, x, dy, mask))
        bn_partial2_k<<<dim3((unsigned)(c / (2 * BN_CX)), (unsigned)groups), block, 0, s>>>(
            kind, rows, c, chunk, x, dy, mask, mean, part1, part2);
    else
        bn_partial_k<<<bn_grid(c, groups), block, 0, s>>>(kind, rows, c, chunk, x, dy, mask, mean,
                                                          part1, part2);
}

static void bn_apply(cudaStream_t s, unsigned max_grid, int64_t rows, int c, const uint16_t *x,
                     const float *coef, const uint16_t *add, bool relu, uint16_t *y)
{
    const int64_t n = rows * c;
    if (bn_vec8(c, x, add, nullptr, y))
        bn_apply8_k<<<grid_for(n / 8, max_grid), PP_CUDA_BLOCK, 0, s>>>(
            n / 8, c, reinterpret_cast<const uint4 *>(x), coef,
            reinterpret_cast<const uint4 *>(add), relu, reinterpret_cast<uint4 *>(y));
    else
        bn_apply_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(n, c, x, coef, add, relu, y);
}

cudaError_t pp_cuda_launch_bn_train_nhwc(cudaStream_t s, unsigned max_grid, int64_t rows, int c,
                                         float eps, float momentum, const uint16_t *x,
                                         const float *gamma, const float *beta,
                                         float *running_mean, float *running_var,
                                         const uint16_t *add, bool relu, uint16_t *y,
                                         float *save_mean, float *save_invstd, float *scratch)
{
    int groups;
    int64_t chunk;
    bn_groups(rows, &groups, &chunk);
    float *part = scratch, *coef = scratch + 2 * (size_t)groups * c;
    const unsigned cg = (unsigned)((c + 127) / 128);
    bn_partial(s, STATS_SUM, rows, c, groups, chunk, x, nullptr, nullptr, nullptr, part, nullptr);
    bn_mean_k<<<cg, 128, 0, s>>>(c, groups, (double)rows, part, save_mean);
    bn_partial(s, STATS_SQDEV, rows, c, groups, chunk, x, nullptr, nullptr, save_mean, part,
               nullptr);
    bn_finish_train_k<<<cg, 128, 0, s>>>(c, groups, (double)rows, eps, momentum, part, save_mean,
                                         gamma, beta, running_mean, running_var, save_invstd,
                                         coef);
    bn_apply(s, max_grid, rows, c, x, coef, add, relu, y);
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
    bn_apply(s, max_grid, rows, c, x, scratch, add, relu, y);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_bn_backward_nhwc(cudaStream_t s, unsigned max_grid, int64_t rows, int c,
                                            const uint16_t *x, const uint16_t *dy,
                                            const uint16_t *relu_y, const float *gamma, const float *save_mean,
                                            const float *save_invstd, uint16_t *dx,
                                            float *dgamma, float *dbeta, float *scratch)
{
    int groups;
    int64_t chunk;
    bn_groups(rows, &groups, &chunk);
    float *part1 = scratch, *part2 = scratch + (size_t)groups * c;
    float *coef = scratch + 2 * (size_t)groups * c;
    bn_partial(s, STATS_BWD, rows, c, groups, chunk, x, dy, relu_y, save_mean, part1, part2);
    bn_finish_backward_k<<<(unsigned)((c + 127) / 128), 128, 0, s>>>(
        c, groups, (double)rows, part1, part2, save_mean, save_invstd, gamma, dgamma, dbeta,
        coef);
    const int64_t n = rows * c;
    if (bn_vec8(c, x, dy, relu_y, dx))
        bn_dx8_k<<<grid_for(n / 8, max_grid), PP_CUDA_BLOCK, 0, s>>>(
            n / 8, c, reinterpret_cast<const uint4 *>(x), reinterpret_cast<const uint4 *>(dy),
            reinterpret_cast<const uint4 *>(relu_y), coef, reinterpret_cast<uint4 *>(dx));
    else
        bn_dx_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(n, c, x, dy, relu_y, coef, dx);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_maxpool_nhwc(cudaStream_t s, unsigned max_grid, pp_cuda_pool_geom4 g,
                                        const uint16_t *x, uint16_t *y, int32_t *idx)
{
    const int64_t n = (int64_t)g.n * g.p * g.q * g.c;
    if (n <= 0) return cudaSuccess;
    maxpool_fwd_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(g, x, y, idx);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_maxpool_backward_nhwc(cudaStream_t s, unsigned max_grid,
                                                 pp_cuda_pool_geom4 g, const uint16_t *dy,
                                                 const int32_t *idx, uint16_t *dx)
{
    const int64_t n = (int64_t)g.n * g.h * g.w * g.c;
    if (n <= 0) return cudaSuccess;
    maxpool_bwd_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(g, dy, idx, dx);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_gap_nhwc(cudaStream_t s, unsigned max_grid, int64_t n, int c,
                                    int64_t hw, const uint16_t *x, void *y, bool y_bf16)
{
    if (n * c <= 0) return cudaSuccess;
    gap_fwd_k<<<grid_for(n * c, max_grid), PP_CUDA_BLOCK, 0, s>>>(n, c, hw, x, y, y_bf16);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_gap_backward_nhwc(cudaStream_t s, unsigned max_grid, int64_t n, int c,
                                             int64_t hw, const void *dy, bool dy_bf16,
                                             uint16_t *dx)
{
    if (n * c * hw <= 0) return cudaSuccess;
    gap_bwd_k<<<grid_for(n * c * hw, max_grid), PP_CUDA_BLOCK, 0, s>>>(n, c, hw, dy, dy_bf16, dx);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_pad_channels(cudaStream_t s, unsigned max_grid, int64_t rows, int c,
                                        int cp, const uint16_t *x, uint16_t *y)
{
    if (rows * cp <= 0) return cudaSuccess;
    pad_channels_k<<<grid_for(rows * cp, max_grid), PP_CUDA_BLOCK, 0, s>>>(rows, c, cp, x, y);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_wgrad_add(cudaStream_t s, unsigned max_grid, int k, int c, int rs,
                                     int cp, const uint16_t *low, float *dw)
{
    const int64_t n = (int64_t)k * c * rs;
    if (n <= 0) return cudaSuccess;
    wgrad_add_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(k, c, rs, cp, low, dw);
    return cudaGetLastError();
}

} // extern "C"
