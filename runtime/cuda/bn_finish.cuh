/*
 * bn_finish.cuh - the batch norm's per-channel finishing kernels, shared by
 * the bf16 NHWC kernels (nhwc.cu) and the f32 NCHW ones (bn_nchw.cu): both
 * leave per-block partial sums channel-major (part[channel * groups + g]),
 * which one warp per channel adds in double in a fixed order (deterministic
 * run to run), and both take the forward's statistics as sums about a shift
 * (each channel's first value: s1 = sum (x - k), s2 = sum (x - k)^2).
 *
 * coef holds the transform y = x * coef[ch] + coef[c + ch] after the
 * forward's finish (and bn_infer_coef_k), and grad_mean, proj, scale, mean at
 * coef[ch], coef[c + ch], coef[2c + ch], coef[3c + ch] after the backward's,
 * as the CPU's forward_train_channel and backward_channel compute them.
 */
#ifndef PP_CUDA_BN_FINISH_CUH
#define PP_CUDA_BN_FINISH_CUH

#include <cstdint>

namespace {

/* one warp per channel: the channel's partials of groups blocks, lane-strided
 * then folded, in double, in a fixed order */
__device__ __forceinline__ double warp_total(const float *part, int groups, int ch, int lane)
{
    double s = 0.0;
    for (int g = lane; g < groups; g += 32) s += part[(int64_t)ch * groups + g];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    return s;
}

/* channel ch's statistics from its mean mu and biased variance var over m
 * values: save_invstd (and save_mean when given), the running statistics
 * (with the unbiased variance) and the transform */
__device__ __forceinline__ void bn_train_finish(int c, int ch, double m, float eps,
                                                float momentum, double mu, double var,
                                                const float *gamma, const float *beta,
                                                float *running_mean, float *running_var,
                                                float *save_mean, float *save_invstd,
                                                float *coef)
{
    const double invstd = 1.0 / sqrt(var + (double)eps), mom = momentum;
    if (save_mean) save_mean[ch] = (float)mu;
    save_invstd[ch] = (float)invstd;
    running_mean[ch] = (float)((1.0 - mom) * running_mean[ch] + mom * mu);
    running_var[ch] = (float)((1.0 - mom) * running_var[ch] + mom * (var * m / (m - 1.0)));
    const double alpha = (double)gamma[ch] * invstd;
    coef[ch] = (float)alpha;
    coef[c + ch] = (float)((double)beta[ch] - mu * alpha);
}

/* channel ch's dgamma += dot * invstd, dbeta += sum dy, and the dx
 * coefficients, from sum dy and dot = sum dy (x - mean) over m values */
__device__ __forceinline__ void bn_backward_finish(int c, int ch, double m, double sum_dy,
                                                   double dot, const float *mean,
                                                   const float *invstd, const float *gamma,
                                                   float *dgamma, float *dbeta, float *coef)
{
    const double is = invstd[ch];
    dgamma[ch] += (float)(dot * is);
    dbeta[ch] += (float)sum_dy;
    coef[ch] = (float)(sum_dy / m);
    coef[c + ch] = (float)(dot * is * is / m);
    coef[2 * c + ch] = (float)((double)gamma[ch] * is);
    coef[3 * c + ch] = mean[ch];
}

/* The per-element arithmetic of the batch norm, each f32 operation rounded
 * on its own (__fmul_rn and kin: nvcc contracts none of them into an FMA) in
 * the CPU backend's order (runtime/cpu/batchnorm.c): with the same
 * coefficients, the CPU's bits. An FMA rounds once where the CPU rounds
 * twice; near 0 its sign can differ from the CPU's, and a ReLU's mask with it
 * (one flipped element moves a channel's bias gradient by that element's
 * whole gradient). */

/* y = x * alpha + beta */
__device__ __forceinline__ float bn_y(float x, float alpha, float beta)
{
    return __fadd_rn(__fmul_rn(x, alpha), beta);
}

/* dx = (dy - grad_mean - (x - mean) * proj) * scale */
__device__ __forceinline__ float bn_dx(float dy, float x, float grad_mean, float proj,
                                       float scale, float mean)
{
    return __fmul_rn(__fsub_rn(__fsub_rn(dy, grad_mean), __fmul_rn(__fsub_rn(x, mean), proj)),
                     scale);
}

/* from the shifted sums of m values per channel: bn_train_finish */
__global__ void bn_finish_train_k(int c, int groups, double m, float eps, float momentum,
                                  const float *shift, const float *part1, const float *part2,
                                  const float *gamma, const float *beta, float *running_mean,
                                  float *running_var, float *save_mean, float *save_invstd,
                                  float *coef)
{
    const int ch = (int)((blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32);
    const int lane = threadIdx.x % 32;
    if (ch >= c) return; /* whole warps */
    const double s1 = warp_total(part1, groups, ch, lane), s2 = warp_total(part2, groups, ch, lane);
    if (lane) return;
    const double d = s1 / m, var = s2 / m - d * d;
    bn_train_finish(c, ch, m, eps, momentum, (double)shift[ch] + d, var > 0.0 ? var : 0.0, gamma,
                    beta, running_mean, running_var, save_mean, save_invstd, coef);
}

/* bn_backward_finish from the partials of sum dy and dot = sum dy (x - mean) */
__global__ void bn_finish_backward_k(int c, int groups, double m, const float *part1,
                                     const float *part2, const float *mean, const float *invstd,
                                     const float *gamma, float *dgamma, float *dbeta, float *coef)
{
    const int ch = (int)((blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32);
    const int lane = threadIdx.x % 32;
    if (ch >= c) return;
    const double sum_dy = warp_total(part1, groups, ch, lane);
    const double dot = warp_total(part2, groups, ch, lane);
    if (lane == 0)
        bn_backward_finish(c, ch, m, sum_dy, dot, mean, invstd, gamma, dgamma, dbeta, coef);
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

/* the finishing kernels' grid: one warp per channel, 128 threads a block */
inline unsigned bn_warp_grid(int c)
{
    return (unsigned)((c + 3) / 4);
}

} // namespace

#endif
