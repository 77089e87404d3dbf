/*
 * bn_nchw.cu - batch norm over f32 NCHW activations: the forward (training
 * and inference, with pp_batchnorm_forward_act's residual add and ReLU
 * fused into its output pass) and the backward (with
 * pp_batchnorm_backward_relu's mask fused into both its passes), in place of
 * cuDNN's batch norm and the separate elementwise kernels around it.
 *
 * A channel's values are n planes of hw contiguous floats, one per image.
 * Block (channel, g) of 256 threads walks the planes of images [g * nchunk,
 * (g + 1) * nchunk) as one sequence of units (4 floats, 16 bytes, where hw is
 * a multiple of 4 and every pointer 16-byte aligned; else 1), thread t
 * taking units t, t + 256, ...; the channel's coefficients are the block's
 * scalars. Each pass reads its operands once: forward statistics (sums about
 * the channel's first value, in one pass), forward output, backward sums,
 * backward dx; bn_finish.cuh turns partials into statistics and
 * coefficients. Sums run in f32 within a block in a fixed order, the blocks'
 * partials in double: deterministic run to run, within f32 rounding of the
 * CPU backend's (runtime/cpu, the reference), as cuDNN's batch norm was.
 */
#include "bn_nchw.h"

#include "bn_finish.cuh"
#include "kernels.h"

namespace {

enum { BNC_T = 256, BNC_MAX_BLOCKS = 2048, BNC_MIN_UNITS = 8 };

struct bnc_geom {
    int n, c, groups, nchunk;
    int64_t units; /* per plane: hw / V */
};

/* V floats at unit u of x: float4 or float */
template <int V> struct vec;
template <> struct vec<4> {
    typedef float4 type;
    static __device__ __forceinline__ float get(const float4 &v, int k) { return (&v.x)[k]; }
    static __device__ __forceinline__ void set(float4 &v, int k, float f) { (&v.x)[k] = f; }
};
template <> struct vec<1> {
    typedef float type;
    static __device__ __forceinline__ float get(const float &v, int) { return v; }
    static __device__ __forceinline__ void set(float &v, int, float f) { v = f; }
};

/* this thread's walk over block (channel, g)'s units: the unit's offset in
 * the tensor (in units), valid while more() */
struct walk {
    int img, end, c, ch;
    int64_t u, units;
    __device__ walk(const bnc_geom &g)
    {
        const int n0 = blockIdx.y * g.nchunk;
        c = g.c;
        ch = blockIdx.x;
        units = g.units;
        end = n0 + g.nchunk < g.n ? n0 + g.nchunk : g.n;
        img = n0 + (int)(threadIdx.x / units);
        u = threadIdx.x % units;
    }
    __device__ bool more() const { return img < end; }
    __device__ int64_t at() const { return ((int64_t)img * c + ch) * units + u; }
    __device__ void next()
    {
        u += BNC_T;
        if (u >= units) {
            img += (int)(u / units);
            u %= units;
        }
    }
};

/* the block's sums a and b added in a fixed order (warps by shuffles, then
 * the 8 warps in order) and written as its partials */
__device__ void block_sums(float a, float b, float *part1, float *part2)
{
    __shared__ float s[2][BNC_T / 32];
    for (int off = 16; off > 0; off >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, off);
        b += __shfl_down_sync(0xffffffffu, b, off);
    }
    if (threadIdx.x % 32 == 0) {
        s[0][threadIdx.x / 32] = a;
        s[1][threadIdx.x / 32] = b;
    }
    __syncthreads();
    if (threadIdx.x) return;
    a = s[0][0];
    b = s[1][0];
    for (int w = 1; w < BNC_T / 32; w++) {
        a += s[0][w];
        b += s[1][w];
    }
    const int64_t o = (int64_t)blockIdx.x * gridDim.y + blockIdx.y;
    part1[o] = a;
    part2[o] = b;
}

/* one unit's values added to the sums about k0 */
template <int V>
__device__ __forceinline__ void stats_unit(const typename vec<V>::type &v, float k0, float &a,
                                           float &b)
{
    for (int k = 0; k < V; k++) {
        const float d = vec<V>::get(v, k) - k0;
        a += d;
        b += d * d;
    }
}

/* part1 = sum (x - k), part2 = sum (x - k)^2, k = the channel's first value;
 * 16 bytes in flight a thread left the loads waiting on latency (the
 * bf16 kernels' lesson, bn_nhwc.cu), so two units are loaded at once */
template <int V>
__global__ void __launch_bounds__(BNC_T) bnc_stats_k(bnc_geom g, const float *x, float *part1,
                                                     float *part2, float *shift)
{
    typedef typename vec<V>::type T;
    const T *xv = reinterpret_cast<const T *>(x);
    const float k0 = x[(int64_t)blockIdx.x * g.units * V];
    if (blockIdx.y == 0 && threadIdx.x == 0) shift[blockIdx.x] = k0;
    float a = 0.0f, b = 0.0f;
    for (walk w(g); w.more();) { /* two units' loads in flight, added in walk order */
        const T v0 = xv[w.at()];
        w.next();
        const bool two = w.more();
        T v1 = v0;
        if (two) {
            v1 = xv[w.at()];
            w.next();
        }
        stats_unit<V>(v0, k0, a, b);
        if (two) stats_unit<V>(v1, k0, a, b);
    }
    block_sums(a, b, part1, part2);
}

/* y = x * alpha + beta, + add, ReLU, in f32, each operation rounded on its
 * own as the CPU's batch norm, add and ReLU one after the other (bn_y) */
template <int V>
__global__ void __launch_bounds__(BNC_T) bnc_apply_k(bnc_geom g, const float *x,
                                                     const float *coef, const float *add,
                                                     bool relu, float *y)
{
    typedef typename vec<V>::type T;
    const T *xv = reinterpret_cast<const T *>(x), *av = reinterpret_cast<const T *>(add);
    T *yv = reinterpret_cast<T *>(y);
    const float alpha = coef[blockIdx.x], beta = coef[g.c + blockIdx.x];
    for (walk w(g); w.more(); w.next()) {
        const int64_t i = w.at();
        const T v = xv[i];
        T a = v, out = v;
        if (add) a = av[i];
        for (int k = 0; k < V; k++) {
            float o = bn_y(vec<V>::get(v, k), alpha, beta);
            if (add) o = __fadd_rn(o, vec<V>::get(a, k));
            if (relu) o = o > 0.0f ? o : 0.0f;
            vec<V>::set(out, k, o);
        }
        yv[i] = out;
    }
}

/* dy, or 0 where the ReLU output mask (when given) is not positive */
__device__ __forceinline__ float grad(float dy, bool has_mask, float m)
{
    return has_mask && !(m > 0.0f) ? 0.0f : dy;
}

/* part1 = sum dy, part2 = sum dy (x - mean), dy masked; the masked dy
 * written to gout when given (pp_batchnorm_backward_add_relu's g; it may be
 * dy: each element is read, then written, by one thread) */
template <int V>
__global__ void __launch_bounds__(BNC_T) bnc_bwd_sums_k(bnc_geom g, const float *x,
                                                        const float *dy, const float *mask,
                                                        const float *mean, float *part1,
                                                        float *part2, float *gout)
{
    typedef typename vec<V>::type T;
    const T *xv = reinterpret_cast<const T *>(x), *gv = reinterpret_cast<const T *>(dy);
    const T *mv = reinterpret_cast<const T *>(mask);
    T *ov = reinterpret_cast<T *>(gout);
    const float mu = mean[blockIdx.x];
    float a = 0.0f, b = 0.0f;
    for (walk w(g); w.more(); w.next()) {
        const int64_t i = w.at();
        const T xi = xv[i], gi = gv[i];
        T mi = gi, gm = gi;
        if (mask) mi = mv[i];
        for (int k = 0; k < V; k++) {
            const float d = grad(vec<V>::get(gi, k), mask, vec<V>::get(mi, k));
            vec<V>::set(gm, k, d);
            a += d;
            b += d * (vec<V>::get(xi, k) - mu);
        }
        if (gout) ov[i] = gm;
    }
    block_sums(a, b, part1, part2);
}

/* dx = (dy - grad_mean - (x - mean) * proj) * scale, dy masked (bn_dx) */
template <int V>
__global__ void __launch_bounds__(BNC_T) bnc_dx_k(bnc_geom g, const float *x, const float *dy,
                                                  const float *mask, const float *coef, float *dx)
{
    typedef typename vec<V>::type T;
    const T *xv = reinterpret_cast<const T *>(x), *gv = reinterpret_cast<const T *>(dy);
    const T *mv = reinterpret_cast<const T *>(mask);
    T *dv = reinterpret_cast<T *>(dx);
    const int ch = blockIdx.x, c = g.c;
    const float gm = coef[ch], proj = coef[c + ch], scale = coef[2 * c + ch],
                mu = coef[3 * c + ch];
    for (walk w(g); w.more(); w.next()) {
        const int64_t i = w.at();
        const T xi = xv[i], gi = gv[i];
        T mi = gi, out = gi;
        if (mask) mi = mv[i];
        for (int k = 0; k < V; k++) {
            const float d = grad(vec<V>::get(gi, k), mask, vec<V>::get(mi, k));
            vec<V>::set(out, k, bn_dx(d, vec<V>::get(xi, k), gm, proj, scale, mu));
        }
        dv[i] = out;
    }
}

/* blocks of images per channel: about BNC_MAX_BLOCKS blocks in all, each
 * thread BNC_MIN_UNITS units or more */
int max_groups(int n, int c)
{
    const int g = BNC_MAX_BLOCKS / c;
    return g < 1 ? 1 : g > n ? n : g;
}

bnc_geom geom(int n, int c, int64_t hw, int v)
{
    bnc_geom g;
    g.n = n;
    g.c = c;
    g.units = hw / v;
    int64_t groups = max_groups(n, c);
    const int64_t by_work = (int64_t)n * g.units / ((int64_t)BNC_T * BNC_MIN_UNITS);
    if (groups > by_work) groups = by_work > 1 ? by_work : 1;
    g.nchunk = (int)((n + groups - 1) / groups);
    g.groups = (n + g.nchunk - 1) / g.nchunk;
    return g;
}

/* 16-byte units: hw a multiple of 4, every pointer (NULL or) aligned */
bool vec4(int64_t hw, const void *a, const void *b, const void *m, const void *y)
{
    return hw % 4 == 0 && pp_cuda_aligned16(a) && pp_cuda_aligned16(b) && pp_cuda_aligned16(m) &&
           pp_cuda_aligned16(y);
}

template <int V>
void apply(cudaStream_t s, const bnc_geom &g, const float *x, const float *coef,
           const float *add, bool relu, float *y)
{
    bnc_apply_k<V><<<dim3((unsigned)g.c, (unsigned)g.groups), BNC_T, 0, s>>>(g, x, coef, add,
                                                                             relu, y);
}

template <int V>
void train(cudaStream_t s, const bnc_geom &g, float eps, float momentum, const float *x,
           const float *gamma, const float *beta, float *running_mean, float *running_var,
           const float *add, bool relu, float *y, float *save_mean, float *save_invstd,
           float *scratch)
{
    const int c = g.c;
    float *part1 = scratch, *part2 = scratch + (size_t)g.groups * c;
    float *coef = scratch + 2 * (size_t)g.groups * c, *shift = coef + 4 * (size_t)c;
    const double m = (double)g.n * (double)g.units * V;
    bnc_stats_k<V><<<dim3((unsigned)c, (unsigned)g.groups), BNC_T, 0, s>>>(g, x, part1, part2,
                                                                           shift);
    bn_finish_train_k<<<bn_warp_grid(c), 128, 0, s>>>(c, g.groups, m, eps, momentum, shift,
                                                      part1, part2, gamma, beta, running_mean,
                                                      running_var, save_mean, save_invstd, coef);
    apply<V>(s, g, x, coef, add, relu, y);
}

template <int V>
void backward(cudaStream_t s, const bnc_geom &g, const float *x, const float *dy,
              const float *relu_y, const float *gamma, const float *save_mean,
              const float *save_invstd, float *dx, float *dgamma, float *dbeta, float *gout,
              float *scratch)
{
    const int c = g.c;
    float *part1 = scratch, *part2 = scratch + (size_t)g.groups * c;
    float *coef = scratch + 2 * (size_t)g.groups * c;
    const double m = (double)g.n * (double)g.units * V;
    const dim3 grid((unsigned)c, (unsigned)g.groups);
    bnc_bwd_sums_k<V><<<grid, BNC_T, 0, s>>>(g, x, dy, relu_y, save_mean, part1, part2, gout);
    bn_finish_backward_k<<<bn_warp_grid(c), 128, 0, s>>>(c, g.groups, m, part1, part2, save_mean,
                                                         save_invstd, gamma, dgamma, dbeta, coef);
    /* with gout the masked gradient is there: dx reads it, without the mask */
    if (gout)
        bnc_dx_k<V><<<grid, BNC_T, 0, s>>>(g, x, gout, nullptr, coef, dx);
    else
        bnc_dx_k<V><<<grid, BNC_T, 0, s>>>(g, x, dy, relu_y, coef, dx);
}

} // namespace

extern "C" {

size_t pp_cuda_bn_nchw_scratch_floats(int n, int c)
{
    return (size_t)2 * max_groups(n, c) * c + 5 * (size_t)c; /* partials, coef, shift */
}

cudaError_t pp_cuda_launch_bn_train_nchw(cudaStream_t s, int n, int c, int64_t hw, float eps,
                                         float momentum, const float *x, const float *gamma,
                                         const float *beta, float *running_mean,
                                         float *running_var, const float *add, bool relu,
                                         float *y, float *save_mean, float *save_invstd,
                                         float *scratch)
{
    if (n <= 0 || c <= 0 || hw <= 0) return cudaErrorInvalidValue;
    if (vec4(hw, x, add, nullptr, y))
        train<4>(s, geom(n, c, hw, 4), eps, momentum, x, gamma, beta, running_mean, running_var,
                 add, relu, y, save_mean, save_invstd, scratch);
    else
        train<1>(s, geom(n, c, hw, 1), eps, momentum, x, gamma, beta, running_mean, running_var,
                 add, relu, y, save_mean, save_invstd, scratch);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_bn_infer_nchw(cudaStream_t s, int n, int c, int64_t hw, float eps,
                                         const float *x, const float *gamma, const float *beta,
                                         const float *running_mean, const float *running_var,
                                         const float *add, bool relu, float *y, float *scratch)
{
    if (n <= 0 || c <= 0 || hw <= 0) return cudaErrorInvalidValue;
    bn_infer_coef_k<<<(unsigned)((c + 127) / 128), 128, 0, s>>>(c, eps, gamma, beta, running_mean,
                                                               running_var, scratch);
    if (vec4(hw, x, add, nullptr, y))
        apply<4>(s, geom(n, c, hw, 4), x, scratch, add, relu, y);
    else
        apply<1>(s, geom(n, c, hw, 1), x, scratch, add, relu, y);
    return cudaGetLastError();
}

cudaError_t pp_cuda_launch_bn_backward_nchw(cudaStream_t s, int n, int c, int64_t hw,
                                            const float *x, const float *dy, const float *relu_y,
                                            const float *gamma, const float *save_mean,
                                            const float *save_invstd, float *dx, float *dgamma,
                                            float *dbeta, float *g, float *scratch)
{
    if (n <= 0 || c <= 0 || hw <= 0) return cudaErrorInvalidValue;
    if (vec4(hw, x, dy, relu_y, dx) && pp_cuda_aligned16(g))
        backward<4>(s, geom(n, c, hw, 4), x, dy, relu_y, gamma, save_mean, save_invstd, dx,
                    dgamma, dbeta, g, scratch);
    else
        backward<1>(s, geom(n, c, hw, 1), x, dy, relu_y, gamma, save_mean, save_invstd, dx,
                    dgamma, dbeta, g, scratch);
    return cudaGetLastError();
}

} // extern "C"
