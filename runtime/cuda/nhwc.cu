/*
 * nhwc.cu - the CUDA backend's kernels on bf16 operands and NHWC
 * layouts, which its native entry (native.c) runs instead of ops.c's
 * f32 NCHW stand-ins: layout transposes, bf16 elementwise ops, max pooling
 * and global average pooling over bf16 NHWC activations (batch norm:
 * bn_nhwc.cu).
 *
 * Each kernel computes what the fallback computes (runtime/core/ops.c): the
 * f32 op of the CPU backend (runtime/cpu, the reference) on the exact values
 * of the bf16 inputs, each bf16 output rounded once to nearest even (the
 * integer rounding of kernels.cu's bf16_from_f32_k): the fallback's bits.
 *
 * NHWC: element (n, c, h, w) of a (N, C, H, W) tensor lies at
 * ((n * H + h) * W + w) * C + c; a channel's values are C apart, so
 * consecutive threads take consecutive channels (coalesced rows of C values).
 */
#include "nhwc.h"

#include "bf16.cuh"

namespace {

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

/* A transpose with a side of at most NARROW (the input images' 3 channels;
 * a 3x3 convolution weight's 9 positions, KCRS -> KRSC for its bf16 copy):
 * a 32x32 tile would leave most of its threads idle and launch a block per
 * 32 pixels (0.54 ms for a batch of 128 224x224 images on an H200; 22 us for
 * a 512x512x3x3 weight). Here one thread moves one column of x (rows <=
 * NARROW: the NCHW -> NHWC of few channels) or one row (cols <= NARROW:
 * back), in a grid-stride loop: the threads of a warp read consecutive
 * elements of each row of x, and write consecutive runs of y. */
enum { NARROW = 16, NARROW_MAX_GRID = 4096 };

template <class T>
__global__ void transpose_narrow_k(int64_t n, int64_t rows, int64_t cols, const T *x, T *y)
{
    const bool by_col = rows <= NARROW; /* else cols <= NARROW */
    const int64_t wide = by_col ? cols : rows, total = n * wide;
    for (int64_t i = gtid(); i < total; i += gstride()) {
        const int64_t m = i / wide, j = i % wide;
        const T *xm = x + m * rows * cols;
        T *ym = y + m * rows * cols;
        if (by_col)
            for (int64_t r = 0; r < rows; r++) ym[j * rows + r] = xm[r * cols + j];
        else
            for (int64_t c = 0; c < cols; c++) ym[c * rows + j] = xm[j * cols + c];
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

/* ---- max pooling over bf16 NHWC ------------------------------------------------------ */

/* Element i of an NHWC index space of c channels (or groups of them), w
 * columns and h rows: its channel, column, row and image. */
template <class I>
__device__ __forceinline__ void nhwc_split(I i, I c, int w, int h, I *ch, int *col, int *row,
                                           I *n)
{
    *ch = i % c;
    I t = i / c;
    *col = (int)(t % (I)w);
    t /= (I)w;
    *row = (int)(t % (I)h);
    *n = t / (I)h;
}

/* Output (p, q)'s window clipped to the input: rows [*h0, *h1), columns [*w0, *w1). */
__device__ __forceinline__ void pool_window(const pp_cuda_pool_geom4 &g, int p, int q, int *h0,
                                            int *h1, int *w0, int *w1)
{
    *h0 = p * g.stride - g.pad, *h1 = *h0 + g.kernel;
    *w0 = q * g.stride - g.pad, *w1 = *w0 + g.kernel;
    *h0 = *h0 < 0 ? 0 : *h0;
    *w0 = *w0 < 0 ? 0 : *w0;
    *h1 = *h1 > g.h ? g.h : *h1;
    *w1 = *w1 > g.w ? g.w : *w1;
}

/* The outputs whose windows [p s - pad, p s - pad + k) hold input (h, w):
 * rows [*p0, *p1], columns [*q0, *q1]. */
__device__ __forceinline__ void pool_outputs(const pp_cuda_pool_geom4 &g, int h, int w, int *p0,
                                             int *p1, int *q0, int *q1)
{
    *p0 = (h + g.pad - g.kernel + g.stride) / g.stride, *p1 = (h + g.pad) / g.stride;
    *q0 = (w + g.pad - g.kernel + g.stride) / g.stride, *q1 = (w + g.pad) / g.stride;
    if (h + g.pad - g.kernel + 1 <= 0) *p0 = 0;
    if (w + g.pad - g.kernel + 1 <= 0) *q0 = 0;
    *p1 = *p1 < g.p - 1 ? *p1 : g.p - 1;
    *q1 = *q1 < g.q - 1 ? *q1 : g.q - 1;
}

/* One output element: the window in row-major order, the first maximum wins
 * (a NaN is taken), idx = h * W + w, as the CPU's maxpool_row. Every output
 * writes its idx, padded windows included: ops.c refuses 2 * pad > kernel,
 * so every window, clipped to the input, holds at least one element (the
 * backward reads idx only at outputs whose window holds its element). */
__global__ void maxpool_fwd_k(pp_cuda_pool_geom4 g, const uint16_t *x, uint16_t *y, int32_t *idx)
{
    const int64_t total = (int64_t)g.n * g.p * g.q * g.c;
    for (int64_t i = gtid(); i < total; i += gstride()) {
        int64_t ch, n;
        int p, q, h0, h1, w0, w1;
        nhwc_split<int64_t>(i, g.c, g.q, g.p, &ch, &q, &p, &n);
        pool_window(g, p, q, &h0, &h1, &w0, &w1);
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
        int64_t ch, n;
        int h, w, p0, p1, q0, q1;
        nhwc_split<int64_t>(i, g.c, g.w, g.h, &ch, &w, &h, &n);
        pool_outputs(g, h, w, &p0, &p1, &q0, &q1);
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

/* The two pooling kernels above with 8 channels (16 bytes) per thread, where c
 * is a multiple of 8 and every pointer 16-byte aligned: each lane's
 * comparisons and sums in the same order, so the same bits, with the
 * position arithmetic once per 8 channels and in 32 bits where the element
 * count allows (I: uint32_t or int64_t). */
template <class I>
__global__ void maxpool_fwd8_k(pp_cuda_pool_geom4 g, const uint4 *x, uint4 *y, int4 *idx)
{
    const I c8 = (I)(g.c / 8), total = (I)g.n * g.p * g.q * c8;
    for (I i = (I)gtid(); i < total; i += (I)gstride()) {
        I cg, n;
        int p, q, h0, h1, w0, w1;
        nhwc_split<I>(i, c8, g.q, g.p, &cg, &q, &p, &n);
        pool_window(g, p, q, &h0, &h1, &w0, &w1);
        const uint4 *xn = x + n * (I)g.h * (I)g.w * c8 + cg;
        uint4 best = xn[((I)h0 * g.w + w0) * c8];
        float bv[8];
        int32_t at[8];
        for (int k = 0; k < 8; k++) bv[k] = widen(lane16(best, k)), at[k] = h0 * g.w + w0;
        for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) {
                const uint4 raw = xn[((I)ih * g.w + iw) * c8];
                for (int k = 0; k < 8; k++) {
                    const float v = widen(lane16(raw, k));
                    if (v > bv[k] || v != v) {
                        set16(best, k, lane16(raw, k));
                        bv[k] = v;
                        at[k] = ih * g.w + iw;
                    }
                }
            }
        y[i] = best;
        idx[2 * i] = make_int4(at[0], at[1], at[2], at[3]);
        idx[2 * i + 1] = make_int4(at[4], at[5], at[6], at[7]);
    }
}

template <class I>
__global__ void maxpool_bwd8_k(pp_cuda_pool_geom4 g, const uint4 *dy, const int4 *idx, uint4 *dx)
{
    const I c8 = (I)(g.c / 8), total = (I)g.n * g.h * g.w * c8;
    for (I i = (I)gtid(); i < total; i += (I)gstride()) {
        I cg, n;
        int h, w, p0, p1, q0, q1;
        nhwc_split<I>(i, c8, g.w, g.h, &cg, &w, &h, &n);
        pool_outputs(g, h, w, &p0, &p1, &q0, &q1);
        const int32_t me = h * g.w + w;
        float acc[8] = {0};
        for (int p = p0; p <= p1; p++)
            for (int q = q0; q <= q1; q++) {
                const I o = ((n * (I)g.p + p) * g.q + q) * c8 + cg;
                const int4 ia = idx[2 * o], ib = idx[2 * o + 1];
                const int32_t id[8] = {ia.x, ia.y, ia.z, ia.w, ib.x, ib.y, ib.z, ib.w};
                const uint4 gv = dy[o];
                for (int k = 0; k < 8; k++)
                    if (id[k] == me) acc[k] += widen(lane16(gv, k));
            }
        uint4 out = make_uint4(0u, 0u, 0u, 0u);
        for (int k = 0; k < 8; k++) set16(out, k, narrow(acc[k]));
        dx[i] = out;
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

/* the same, 8 channels (16 bytes) of y per thread: cp % 8 == 0, y aligned */
__global__ void pad_channels8_k(int64_t rows, int c, int cp, const uint16_t *x, uint4 *y)
{
    const int groups = cp / 8;
    for (int64_t i = gtid(); i < rows * groups; i += gstride()) {
        const int64_t r = groups == 1 ? i : i / groups;
        const int c0 = groups == 1 ? 0 : (int)(i % groups) * 8;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        for (int k = 0; k < 8; k++)
            if (c0 + k < c) set16(v, k, x[r * c + c0 + k]);
        y[i] = v;
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

/* the narrow kernel where a side allows, else 32x32 tiles */
template <class T>
void transpose(cudaStream_t s, int64_t n, int64_t rows, int64_t cols, const T *x, T *y)
{
    if (rows <= NARROW || cols <= NARROW) {
        const unsigned grid = grid_for(n * (rows <= NARROW ? cols : rows), NARROW_MAX_GRID);
        transpose_narrow_k<T><<<grid, PP_CUDA_BLOCK, 0, s>>>(n, rows, cols, x, y);
        return;
    }
    const int64_t row_tiles = (rows + TT - 1) / TT;
    const dim3 grid((unsigned)((cols + TT - 1) / TT),
                    (unsigned)(row_tiles < 65535 ? row_tiles : 65535),
                    (unsigned)(n < 65535 ? n : 65535));
    transpose_k<T><<<grid, dim3(TT, TR), 0, s>>>(n, rows, cols, x, y);
}

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_transpose(cudaStream_t s, int64_t n, int64_t rows, int64_t cols,
                                     size_t elem, const void *x, void *y)
{
    if (n <= 0 || rows <= 0 || cols <= 0) return cudaSuccess;
    if (rows > NARROW && cols > NARROW && (cols + TT - 1) / TT > 0x7fffffff)
        return cudaErrorInvalidValue;
    if (elem == 2)
        transpose<uint16_t>(s, n, rows, cols, static_cast<const uint16_t *>(x),
                            static_cast<uint16_t *>(y));
    else
        transpose<uint32_t>(s, n, rows, cols, static_cast<const uint32_t *>(x),
                            static_cast<uint32_t *>(y));
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_bf16_elementwise(cudaStream_t s, unsigned max_grid,
                                            pp_cuda_bf16_ew kind, int64_t n, const uint16_t *a,
                                            const uint16_t *b, uint16_t *y)
{
    if (n <= 0) return cudaSuccess;
    const bool vec = pp_cuda_aligned16(a) && pp_cuda_aligned16(b) && pp_cuda_aligned16(y);
    bf16_ew_k<<<grid_for(vec ? (n + 7) / 8 : n, max_grid), PP_CUDA_BLOCK, 0, s>>>(kind, n, a, b,
                                                                                y, vec);
    return cudaGetLastError();
}

/* The scalar kernels' partials: groups blocks of rows per channel. */
static bool pool_vec8(const pp_cuda_pool_geom4 &g, const void *a, const void *b, const void *idx)
{
    return g.c % 8 == 0 && pp_cuda_aligned16(a) && pp_cuda_aligned16(b) && pp_cuda_aligned16(idx);
}

/* 32-bit positions where every element index fits with room */
static bool pool_small(const pp_cuda_pool_geom4 &g)
{
    const int64_t in = (int64_t)g.n * g.h * g.w * g.c, out = (int64_t)g.n * g.p * g.q * g.c;
    return (in > out ? in : out) <= ((int64_t)1 << 32);
}

cudaError_t pp_cuda_launch_maxpool_nhwc(cudaStream_t s, unsigned max_grid, pp_cuda_pool_geom4 g,
                                        const uint16_t *x, uint16_t *y, int32_t *idx)
{
    const int64_t n = (int64_t)g.n * g.p * g.q * g.c;
    if (n <= 0) return cudaSuccess;
    if (pool_vec8(g, x, y, idx)) {
        const uint4 *x8 = reinterpret_cast<const uint4 *>(x);
        uint4 *y8 = reinterpret_cast<uint4 *>(y);
        int4 *i8 = reinterpret_cast<int4 *>(idx);
        if (pool_small(g))
            maxpool_fwd8_k<uint32_t><<<grid_for(n / 8, max_grid), PP_CUDA_BLOCK, 0, s>>>(g, x8, y8, i8);
        else
            maxpool_fwd8_k<int64_t><<<grid_for(n / 8, max_grid), PP_CUDA_BLOCK, 0, s>>>(g, x8, y8, i8);
        return cudaGetLastError();
    }
    maxpool_fwd_k<<<grid_for(n, max_grid), PP_CUDA_BLOCK, 0, s>>>(g, x, y, idx);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_maxpool_backward_nhwc(cudaStream_t s, unsigned max_grid,
                                                 pp_cuda_pool_geom4 g, const uint16_t *dy,
                                                 const int32_t *idx, uint16_t *dx)
{
    const int64_t n = (int64_t)g.n * g.h * g.w * g.c;
    if (n <= 0) return cudaSuccess;
    if (pool_vec8(g, dy, dx, idx)) {
        const uint4 *dy8 = reinterpret_cast<const uint4 *>(dy);
        const int4 *i8 = reinterpret_cast<const int4 *>(idx);
        uint4 *dx8 = reinterpret_cast<uint4 *>(dx);
        if (pool_small(g))
            maxpool_bwd8_k<uint32_t><<<grid_for(n / 8, max_grid), PP_CUDA_BLOCK, 0, s>>>(g, dy8, i8, dx8);
        else
            maxpool_bwd8_k<int64_t><<<grid_for(n / 8, max_grid), PP_CUDA_BLOCK, 0, s>>>(g, dy8, i8, dx8);
        return cudaGetLastError();
    }
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
    if (cp % 8 == 0 && pp_cuda_aligned16(y)) {
        pad_channels8_k<<<grid_for(rows * (cp / 8), max_grid), PP_CUDA_BLOCK, 0, s>>>(
            rows, c, cp, x, reinterpret_cast<uint4 *>(y));
        return cudaGetLastError();
    }
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

