/*
 * kernels.cu - the CUDA backend's own kernels: elementwise ops (GELU among
 * them), bias (linear and per-channel), adaptive and window average pooling,
 * SGD, zeroing and the delay spin. (The softmax cross-entropy: classifier.cu.)
 * runtime/cpu is the reference each kernel must match (see ops.h for the
 * contracts). Reductions that produce a single value (loss, bias gradient)
 * run in a fixed order, so results are deterministic run to run.
 */
#include "bf16.cuh"
#include "gelu_op.cuh"
#include "kernels.h"
#include "multi.cuh"

#include <cstdlib>
#include <cstring>

namespace {

/* ---- elementwise: y[i] = op(a[i], b[i]) ------------------------------------- */

struct relu_op {
    __device__ float operator()(float a, float) const { return a > 0.0f ? a : 0.0f; }
};
struct relu_backward_op {
    __device__ float operator()(float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};
struct sigmoid_op {
    __device__ float operator()(float a, float) const { return 1.0f / (1.0f + expf(-a)); }
};
struct sigmoid_backward_op { /* dy * (1 - y) * y, the CPU's order */
    __device__ float operator()(float y, float dy) const { return dy * (1.0f - y) * y; }
};
struct add_op {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct add_bf16_op { /* the bits of bf16_from_f32, f32_from_bf16, then accumulate */
    __device__ float operator()(float a, float b) const { return widen(narrow(a)) + b; }
};
struct add_relu_op {
    __device__ float operator()(float a, float b) const
    {
        const float s = a + b;
        return s > 0.0f ? s : 0.0f;
    }
};

/* GELU's gelu_op and gelu_backward_op: gelu_op.cuh */

/* Single floats; b is NULL for unary ops. */
template <class Op>
__global__ void ew_k(int64_t n, const float *a, const float *b, float *y, Op op)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = op(a[i], b ? b[i] : 0.0f);
}

/* float4s over the first 4 * n4 elements, then the tail (< 4) elements by the
 * first threads of the grid. Every pointer is 16-byte aligned. Each thread
 * reads an element before writing it, so y may alias a or b. */
template <class Op>
__global__ void ew_vec_k(int64_t n4, int tail, const float *a, const float *b, float *y, Op op)
{
    const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const float4 *a4 = reinterpret_cast<const float4 *>(a);
    const float4 *b4 = reinterpret_cast<const float4 *>(b);
    float4 *y4 = reinterpret_cast<float4 *>(y);
    for (int64_t i = tid; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 u = a4[i];
        const float4 v = b ? b4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        y4[i] = make_float4(op(u.x, v.x), op(u.y, v.y), op(u.z, v.z), op(u.w, v.w));
    }
    if (tid < tail) {
        const int64_t i = 4 * n4 + tid;
        y[i] = op(a[i], b ? b[i] : 0.0f);
    }
}

template <class Op>
cudaError_t ew_launch(cudaStream_t s, unsigned max_grid, int64_t n, const float *a,
                      const float *b, float *y, Op op)
{
    const bool vec = (((uintptr_t)a | (uintptr_t)b | (uintptr_t)y) & 15) == 0;
    const int64_t units = vec ? (n + 3) / 4 : n;
    int64_t grid = (units + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK;
    if (grid > (int64_t)max_grid) grid = max_grid;
    if (grid < 1) grid = 1;
    if (vec)
        ew_vec_k<<<(unsigned)grid, PP_CUDA_BLOCK, 0, s>>>(n / 4, (int)(n % 4), a, b, y, op);
    else
        ew_k<<<(unsigned)grid, PP_CUDA_BLOCK, 0, s>>>(n, a, b, y, op);
    return cudaGetLastError();
}

__global__ void bias_add_k(int64_t rows, int64_t cols, const float *b, float *y)
{
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += b[i % cols];
}

/* one thread per column; rows summed in order */
__global__ void bias_backward_k(int64_t rows, int64_t cols, const float *dy, float *db)
{
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= cols) return;
    double s = 0.0;
    for (int64_t r = 0; r < rows; r++) s += dy[r * cols + j];
    db[j] += (float)s;
}

/* y (n, c, hw) += b (c) */
__global__ void channel_bias_add_k(int64_t total, int64_t c, int64_t hw, const float *b, float *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += b[(i / hw) % c];
}

/* One block per channel: each thread sums its strided elements of the
 * channel's planes in order (double), then a fixed tree over the block, so
 * the result does not change run to run. */
__global__ void channel_bias_backward_k(int64_t n, int64_t c, int64_t hw, const float *dy,
                                        float *db)
{
    __shared__ double part[PP_CUDA_BLOCK];
    const int64_t ch = blockIdx.x;
    const int64_t per_channel = n * hw;
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < per_channel; k += blockDim.x) {
        const int64_t img = k / hw, i = k % hw;
        s += dy[(img * c + ch) * hw + i];
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int half = PP_CUDA_BLOCK / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) db[ch] += (float)part[0];
}

/* The window of output (p, q) as the CPU backend computes it: its size
 * clipped to the padded input (count_include_pad) and its rows and columns
 * clipped to the input. */
struct avg_window {
    int h0, h1, w0, w1, size;
};

__device__ avg_window avg_window_of(int h, int w, int kernel, int stride, int pad, int p, int q)
{
    const int hs = p * stride - pad, ws = q * stride - pad;
    int he = hs + kernel, we = ws + kernel;
    if (he > h + pad) he = h + pad;
    if (we > w + pad) we = w + pad;
    avg_window a;
    a.size = (he - hs) * (we - ws);
    a.h0 = hs < 0 ? 0 : hs;
    a.w0 = ws < 0 ? 0 : ws;
    a.h1 = he > h ? h : he;
    a.w1 = we > w ? w : we;
    return a;
}

/* one thread per output, the window summed in row-major order (double) */
__global__ void avgpool2d_forward_k(pp_cuda_pool_geom g, const float *x, float *y)
{
    const int64_t total = (int64_t)g.planes * g.p * g.q;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int q = (int)(i % g.q), p = (int)((i / g.q) % g.p);
        const int64_t plane = i / ((int64_t)g.p * g.q);
        const avg_window a = avg_window_of(g.h, g.w, g.kernel, g.stride, g.pad, p, q);
        const float *xp = x + plane * g.h * g.w;
        double s = 0.0;
        for (int ih = a.h0; ih < a.h1; ih++)
            for (int iw = a.w0; iw < a.w1; iw++) s += xp[(int64_t)ih * g.w + iw];
        y[i] = (float)(s / a.size);
    }
}

/* one thread per input element, gathering the windows that cover it in the
 * order the CPU backend scatters them (p, then q, ascending) */
__global__ void avgpool2d_backward_k(pp_cuda_pool_geom g, const float *dy, float *dx)
{
    const int64_t total = (int64_t)g.planes * g.h * g.w;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int iw = (int)(i % g.w), ih = (int)((i / g.w) % g.h);
        const int64_t plane = i / ((int64_t)g.h * g.w);
        /* p covers ih when p*stride - pad <= ih < p*stride - pad + kernel */
        int p0 = ih + g.pad - g.kernel + 1, q0 = iw + g.pad - g.kernel + 1;
        p0 = p0 <= 0 ? 0 : (p0 + g.stride - 1) / g.stride;
        q0 = q0 <= 0 ? 0 : (q0 + g.stride - 1) / g.stride;
        int p1 = (ih + g.pad) / g.stride + 1, q1 = (iw + g.pad) / g.stride + 1;
        if (p1 > g.p) p1 = g.p;
        if (q1 > g.q) q1 = g.q;
        const float *dyp = dy + plane * g.p * g.q;
        float acc = 0.0f;
        for (int p = p0; p < p1; p++)
            for (int q = q0; q < q1; q++) {
                const avg_window a = avg_window_of(g.h, g.w, g.kernel, g.stride, g.pad, p, q);
                acc += dyp[(int64_t)p * g.q + q] / (float)a.size;
            }
        dx[i] = acc;
    }
}

/* one warp per plane */
__global__ void avgpool_forward_k(int64_t planes, int64_t hw, const float *x, float *y)
{
    const int64_t p = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (p >= planes) return;
    const float *xp = x + p * hw;
    double s = 0.0;
    for (int64_t i = lane; i < hw; i += 32) s += xp[i];
    for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) y[p] = (float)(s / (double)hw);
}

__global__ void avgpool_backward_k(int64_t planes, int64_t hw, const float *dy, float *dx)
{
    const int64_t n = planes * hw;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dx[i] = (float)((double)dy[i / hw] / (double)hw); /* the quotient, as the CPU's */
}

/* ---- SGD and zeroing ------------------------------------------------------------ */

struct sgd_args {
    float lr, mu, wd;
    int nesterov, first_step;
};

/* One element of torch.optim.SGD (see pp_sgd_update) in runtime/cpu/sgd.c's
 * order. __fmul_rn/__fadd_rn/__fsub_rn round each operation and are never
 * contracted into FMAs, so the result is the CPU backend's, bit for bit. buf
 * is read only after the first step and written only with momentum. */
__device__ __forceinline__ void sgd_elem(const sgd_args &a, float &p, float grad, float &buf)
{
    float g = __fadd_rn(grad, __fmul_rn(a.wd, p));
    if (a.mu != 0.0f) {
        const float b = a.first_step ? g : __fadd_rn(__fmul_rn(a.mu, buf), g);
        buf = b;
        g = a.nesterov ? __fadd_rn(g, __fmul_rn(a.mu, b)) : b;
    }
    p = __fsub_rn(p, __fmul_rn(a.lr, g));
}

/* Elements [i0, i1) of one tensor, by the threads of a block (or of the grid). */
__device__ __forceinline__ void sgd_scalar(const sgd_args &a, int64_t i0, int64_t i1,
                                           int64_t first, int64_t stride, float *param,
                                           const float *grad, float *buf)
{
    for (int64_t i = i0 + first; i < i1; i += stride) {
        float p = param[i], b = 0.0f;
        if (a.mu != 0.0f && !a.first_step) b = buf[i];
        sgd_elem(a, p, grad[i], b);
        param[i] = p;
        if (a.mu != 0.0f) buf[i] = b;
    }
}

__global__ void sgd_k(int64_t n, sgd_args a, float *param, const float *grad, float *buf)
{
    sgd_scalar(a, 0, n, blockIdx.x * (int64_t)blockDim.x + threadIdx.x,
               (int64_t)gridDim.x * blockDim.x, param, grad, buf);
}

__global__ void sgd_multi_k(const pp_cuda_sgd_list list, sgd_args a)
{
    for (int32_t t = blockIdx.x; t < list.tiles; t += gridDim.x) {
        const int j = tile_owner(list.first_tile, list.count, t);
        const int64_t n = list.n[j];
        const int64_t i0 = (int64_t)(t - list.first_tile[j]) * PP_CUDA_MULTI_TILE;
        const int64_t i1 = n - i0 < PP_CUDA_MULTI_TILE ? n : i0 + PP_CUDA_MULTI_TILE;
        float *param = list.param[j], *buf = list.buf[j];
        const float *grad = list.grad[j];
        int64_t v1 = i0; /* end of the float4 part; i0 is a multiple of 4 */
        if ((((uintptr_t)param | (uintptr_t)grad | (uintptr_t)buf) & 15) == 0) {
            v1 = i0 + ((i1 - i0) & ~(int64_t)3);
            for (int64_t i = i0 + 4 * (int64_t)threadIdx.x; i < v1; i += 4 * (int64_t)blockDim.x) {
                float4 p = *reinterpret_cast<float4 *>(param + i);
                const float4 g = *reinterpret_cast<const float4 *>(grad + i);
                float4 b = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (a.mu != 0.0f && !a.first_step) b = *reinterpret_cast<const float4 *>(buf + i);
                sgd_elem(a, p.x, g.x, b.x);
                sgd_elem(a, p.y, g.y, b.y);
                sgd_elem(a, p.z, g.z, b.z);
                sgd_elem(a, p.w, g.w, b.w);
                *reinterpret_cast<float4 *>(param + i) = p;
                if (a.mu != 0.0f) *reinterpret_cast<float4 *>(buf + i) = b;
            }
        }
        sgd_scalar(a, v1, i1, threadIdx.x, blockDim.x, param, grad, buf);
    }
}

__global__ void zero_multi_k(const pp_cuda_zero_list list)
{
    for (int32_t t = blockIdx.x; t < list.tiles; t += gridDim.x) {
        const int j = tile_owner(list.first_tile, list.count, t);
        const int64_t bytes = list.bytes[j];
        const int64_t i0 = (int64_t)(t - list.first_tile[j]) * PP_CUDA_ZERO_TILE_BYTES;
        const int64_t i1 =
            bytes - i0 < PP_CUDA_ZERO_TILE_BYTES ? bytes : i0 + PP_CUDA_ZERO_TILE_BYTES;
        unsigned char *p = static_cast<unsigned char *>(list.ptr[j]);
        /* head bytes up to a 16-byte boundary, 16-byte stores, tail bytes */
        int64_t v0 = i0 + (int64_t)((16 - ((uintptr_t)(p + i0) & 15)) & 15);
        if (v0 > i1) v0 = i1;
        const int64_t v1 = v0 + ((i1 - v0) & ~(int64_t)15);
        if (i0 + (int64_t)threadIdx.x < v0) p[i0 + threadIdx.x] = 0;
        for (int64_t i = v0 + 16 * (int64_t)threadIdx.x; i < v1; i += 16 * (int64_t)blockDim.x)
            *reinterpret_cast<uint4 *>(p + i) = make_uint4(0u, 0u, 0u, 0u);
        if (v1 + (int64_t)threadIdx.x < i1) p[v1 + threadIdx.x] = 0;
    }
}

__device__ uint64_t global_ns()
{
#ifdef PP_CUDA_EMU /* the CPU emulator of tests/emu: the host's clock */
    return pp_emu::now_ns();
#else
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}

__global__ void delay_k(uint64_t ns)
{
    const uint64_t start = global_ns();
    while (global_ns() - start < ns) {
    }
}

/* y = x in y's dtype: bf16 from f32 with pp_bf16_from_f32's bits
 * (runtime/core/tensor.c; bf16.cuh's narrow, integer arithmetic only so that
 * no rounding mode or flush-to-zero setting can change them), f32 from bf16
 * exactly. One element a thread, or (x and y 16-byte aligned) eight at a
 * time, then the n % 8 last one a thread: the same bits. */
struct same_op {
    __device__ float operator()(float a, float) const { return a; }
};

template <class TX, class TY>
__global__ void cast_k(int64_t n, const TX *x, TY *y)
{
    map_each(n, x, static_cast<const TX *>(nullptr), y, same_op());
}

template <class TX, class TY>
__global__ void cast8_k(int64_t n, const TX *x, TY *y)
{
    map_each8(n, x, static_cast<const TX *>(nullptr), y, same_op());
}

template <class TX, class TY>
cudaError_t cast(cudaStream_t s, unsigned grid, int64_t n, const TX *x, TY *y)
{
    if (n <= 0) return cudaSuccess;
    if (pp_cuda_aligned16(x) && pp_cuda_aligned16(y))
        cast8_k<<<grid_for((n + 7) / 8, grid), PP_CUDA_BLOCK, 0, s>>>(n, x, y);
    else
        cast_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(n, x, y);
    return cudaGetLastError();
}

/* ---- a matrix copied from one pitch to another ---------------------------------------
 * lines of fill elements each, line k at dst + k dld: the first len elements of line k from
 * src + k sld where k < src_lines, zeros elsewhere (the rest of the line, and the lines from
 * src_lines on). A group of tpl threads a line (a warp for lines of at most COPY_RUN x 32
 * elements, else the block), each thread loading its next COPY_RUN elements before it
 * stores the first: a pitch of any 2-byte alignment, read and written at one element a
 * thread, coalesced. */
constexpr int COPY_RUN = 8;

template <class T>
__global__ void copy_pitched_k(int64_t lines, int64_t len, int64_t src_lines, int64_t fill,
                               int tpl, const T *src, int64_t sld, T *dst, int64_t dld)
{
    const int groups = blockDim.x / tpl, t = threadIdx.x % tpl;
    for (int64_t l = (int64_t)blockIdx.x * groups + threadIdx.x / tpl; l < lines;
         l += (int64_t)gridDim.x * groups) {
        const int64_t have = l < src_lines ? len : 0;
        const T *sr = have ? src + l * sld : nullptr;
        T *dr = dst + l * dld;
        for (int64_t i0 = t; i0 < fill; i0 += (int64_t)COPY_RUN * tpl) {
            T v[COPY_RUN];
            for (int u = 0; u < COPY_RUN; u++) {
                const int64_t i = i0 + u * tpl;
                v[u] = i < have ? sr[i] : T(0);
            }
            for (int u = 0; u < COPY_RUN; u++)
                if (i0 + u * tpl < fill) dr[i0 + u * tpl] = v[u];
        }
    }
}

template <class T>
cudaError_t copy_pitched(cudaStream_t s, unsigned max_grid, int64_t lines, int64_t len,
                         int64_t src_lines, int64_t fill, const void *src, int64_t sld,
                         void *dst, int64_t dld)
{
    const int tpl = fill <= (int64_t)COPY_RUN * 32 ? 32 : PP_CUDA_BLOCK;
    const int64_t groups = PP_CUDA_BLOCK / tpl, need = (lines + groups - 1) / groups;
    const unsigned grid = need < (int64_t)max_grid ? (unsigned)need : max_grid;
    copy_pitched_k<T><<<grid, PP_CUDA_BLOCK, 0, s>>>(lines, len, src_lines, fill, tpl,
                                                     static_cast<const T *>(src), sld,
                                                     static_cast<T *>(dst), dld);
    return cudaGetLastError();
}

} // namespace

extern "C" {

bool pp_cuda_env_on(const char *name, int *cache)
{
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = e && *e && strcmp(e, "0") != 0;
    }
    return *cache == 1;
}

cudaError_t pp_cuda_launch_copy_padded(cudaStream_t s, unsigned max_grid, int64_t lines,
                                       int64_t len, int64_t src_lines, int64_t fill, size_t es,
                                       const void *src, int64_t sld, void *dst, int64_t dld)
{
    if (lines < 0 || len < 0 || src_lines < 0 || src_lines > lines || fill < len ||
        dld < fill || (src_lines > 0 && sld < len) || (es != 2 && es != 4) ||
        (uintptr_t)src % es || (uintptr_t)dst % es)
        return cudaErrorInvalidValue;
    if (lines == 0 || fill == 0) return cudaSuccess;
    if (src_lines == 0) len = 0;
    return es == 2 ? copy_pitched<uint16_t>(s, max_grid, lines, len, src_lines, fill, src, sld,
                                            dst, dld)
                   : copy_pitched<uint32_t>(s, max_grid, lines, len, src_lines, fill, src, sld,
                                            dst, dld);
}

cudaError_t pp_cuda_launch_copy_pitched(cudaStream_t s, unsigned max_grid, int64_t lines,
                                        int64_t len, size_t es, const void *src, int64_t sld,
                                        void *dst, int64_t dld)
{
    if (sld < len) return cudaErrorInvalidValue;
    return pp_cuda_launch_copy_padded(s, max_grid, lines, len, lines, len, es, src, sld, dst,
                                      dld);
}

cudaError_t pp_cuda_launch_bf16_from_f32(cudaStream_t s, unsigned grid, int64_t n, const float *x,
                                         uint16_t *y)
{
    return cast(s, grid, n, x, y);
}

cudaError_t pp_cuda_launch_f32_from_bf16(cudaStream_t s, unsigned grid, int64_t n,
                                         const uint16_t *x, float *y)
{
    return cast(s, grid, n, x, y);
}

cudaError_t pp_cuda_launch_elementwise(cudaStream_t s, unsigned max_grid, pp_cuda_ew_kind kind,
                                       int64_t n, const float *a, const float *b, float *y)
{
    if (n <= 0) return cudaSuccess;
    switch (kind) {
    case PP_CUDA_EW_RELU: return ew_launch(s, max_grid, n, a, nullptr, y, relu_op());
    case PP_CUDA_EW_RELU_BACKWARD: return ew_launch(s, max_grid, n, a, b, y, relu_backward_op());
    case PP_CUDA_EW_SIGMOID: return ew_launch(s, max_grid, n, a, nullptr, y, sigmoid_op());
    case PP_CUDA_EW_SIGMOID_BACKWARD:
        return ew_launch(s, max_grid, n, a, b, y, sigmoid_backward_op());
    case PP_CUDA_EW_ADD: return ew_launch(s, max_grid, n, a, b, y, add_op());
    case PP_CUDA_EW_ADD_BF16: return ew_launch(s, max_grid, n, a, b, y, add_bf16_op());
    case PP_CUDA_EW_ADD_RELU: return ew_launch(s, max_grid, n, a, b, y, add_relu_op());
    case PP_CUDA_EW_GELU: return ew_launch(s, max_grid, n, a, nullptr, y, gelu_op());
    case PP_CUDA_EW_GELU_BACKWARD: return ew_launch(s, max_grid, n, a, b, y, gelu_backward_op());
    }
    return cudaErrorInvalidValue;
}

cudaError_t pp_cuda_launch_bias_add(cudaStream_t s, unsigned grid, int64_t rows, int64_t cols,
                                    const float *b, float *y)
{
    bias_add_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(rows, cols, b, y);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_bias_backward(cudaStream_t s, int64_t rows, int64_t cols,
                                         const float *dy, float *db)
{
    const unsigned grid = (unsigned)((cols + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK);
    bias_backward_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(rows, cols, dy, db);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_channel_bias_add(cudaStream_t s, unsigned grid, int64_t n, int64_t c,
                                           int64_t hw, const float *b, float *y)
{
    channel_bias_add_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(n * c * hw, c, hw, b, y);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_channel_bias_backward(cudaStream_t s, int64_t n, int64_t c, int64_t hw,
                                                 const float *dy, float *db)
{
    channel_bias_backward_k<<<(unsigned)c, PP_CUDA_BLOCK, 0, s>>>(n, c, hw, dy, db);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_avgpool2d_forward(cudaStream_t s, unsigned grid, pp_cuda_pool_geom g,
                                             const float *x, float *y)
{
    avgpool2d_forward_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(g, x, y);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_avgpool2d_backward(cudaStream_t s, unsigned grid, pp_cuda_pool_geom g,
                                              const float *dy, float *dx)
{
    avgpool2d_backward_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(g, dy, dx);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_avgpool_forward(cudaStream_t s, int64_t planes, int64_t hw,
                                           const float *x, float *y)
{
    const int64_t threads = planes * 32;
    const unsigned grid = (unsigned)((threads + PP_CUDA_BLOCK - 1) / PP_CUDA_BLOCK);
    avgpool_forward_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(planes, hw, x, y);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_avgpool_backward(cudaStream_t s, unsigned grid, int64_t planes,
                                            int64_t hw, const float *dy, float *dx)
{
    avgpool_backward_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(planes, hw, dy, dx);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_sgd(cudaStream_t s, unsigned grid, int64_t n, float lr, float momentum,
                               float weight_decay, int nesterov, int first_step, float *param,
                               const float *grad, float *momentum_buf)
{
    const sgd_args a = {lr, momentum, weight_decay, nesterov, first_step};
    sgd_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(n, a, param, grad, momentum_buf);
    return cudaGetLastError();
}

/* Both lists, with the other parameters, fit the 4 KiB kernel-parameter limit. */
static_assert(sizeof(pp_cuda_sgd_list) + sizeof(sgd_args) <= 4000, "SGD list too large");
static_assert(sizeof(pp_cuda_zero_list) <= 4000, "zero list too large");

cudaError_t pp_cuda_launch_sgd_multi(cudaStream_t s, unsigned max_grid,
                                     const pp_cuda_sgd_list *list, float lr, float momentum,
                                     float weight_decay, int nesterov, int first_step)
{
    if (list->count <= 0 || list->tiles <= 0) return cudaSuccess;
    const sgd_args a = {lr, momentum, weight_decay, nesterov, first_step};
    const unsigned grid = (unsigned)list->tiles < max_grid ? (unsigned)list->tiles : max_grid;
    sgd_multi_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(*list, a);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_zero_multi(cudaStream_t s, unsigned max_grid,
                                      const pp_cuda_zero_list *list)
{
    if (list->count <= 0 || list->tiles <= 0) return cudaSuccess;
    const unsigned grid = (unsigned)list->tiles < max_grid ? (unsigned)list->tiles : max_grid;
    zero_multi_k<<<grid, PP_CUDA_BLOCK, 0, s>>>(*list);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_delay(cudaStream_t s, uint64_t ns)
{
    delay_k<<<1, 1, 0, s>>>(ns);
    return cudaGetLastError();
}

} // extern "C"
