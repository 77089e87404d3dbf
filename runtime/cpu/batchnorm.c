/*
 * batchnorm.c - CPU batch norm (NCHW, f32, statistics per channel over N*H*W).
 *
 * Statistics and the backward reductions are accumulated in double
 * (reduce.h), two passes for the variance; the per-element transforms run in
 * float as y = x * alpha + beta with per-channel alpha, beta, the form
 * PyTorch's CPU kernel uses. Single-threaded and deterministic.
 */
#include <math.h>

#include "cpu_kernels.h"
#include "reduce.h"

/* y = x * alpha + beta over one channel of every sample. */
static void transform(const pp_bn_desc *d, int c, const float *x, float alpha, float beta,
                      float *y)
{
    const size_t hw = (size_t)d->h * d->w;
    for (int n = 0; n < d->n; n++) {
        size_t off = ((size_t)n * d->c + c) * hw;
        const float *xs = x + off;
        float *ys = y + off;
        for (size_t i = 0; i < hw; i++) ys[i] = xs[i] * alpha + beta;
    }
}

pp_status pp_cpu_batchnorm_forward_train(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                         const float *gamma, const float *beta,
                                         float *running_mean, float *running_var, float *y,
                                         float *save_mean, float *save_invstd, pp_error *err)
{
    const size_t hw = (size_t)d->h * d->w;
    const double m = (double)d->n * (double)hw;
    const double mom = d->momentum;
    for (int c = 0; c < d->c; c++) {
        double sum = 0.0;
        for (int n = 0; n < d->n; n++) sum += pp_sum_f32(x + ((size_t)n * d->c + c) * hw, hw);
        const double mean = sum / m;
        double sq = 0.0;
        for (int n = 0; n < d->n; n++)
            sq += pp_sum_sqdev_f32(x + ((size_t)n * d->c + c) * hw, hw, mean);
        const double var = sq / m;
        const double invstd = 1.0 / sqrt(var + (double)d->eps);
        save_mean[c] = (float)mean;
        save_invstd[c] = (float)invstd;
        running_mean[c] = (float)((1.0 - mom) * running_mean[c] + mom * mean);
        running_var[c] = (float)((1.0 - mom) * running_var[c] + mom * (sq / (m - 1.0)));
        const double alpha = (double)gamma[c] * invstd;
        transform(d, c, x, (float)alpha, (float)((double)beta[c] - mean * alpha), y);
    }
    return PP_OK;
}

pp_status pp_cpu_batchnorm_forward_infer(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                         const float *gamma, const float *beta,
                                         const float *running_mean, const float *running_var,
                                         float *y, pp_error *err)
{
    for (int c = 0; c < d->c; c++) {
        const double invstd = 1.0 / sqrt((double)running_var[c] + (double)d->eps);
        const double alpha = (double)gamma[c] * invstd;
        transform(d, c, x, (float)alpha, (float)((double)beta[c] - running_mean[c] * alpha), y);
    }
    return PP_OK;
}

pp_status pp_cpu_batchnorm_backward(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                    const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_invstd, float *dx, float *dgamma,
                                    float *dbeta, pp_error *err)
{
    const size_t hw = (size_t)d->h * d->w;
    const double m = (double)d->n * (double)hw;
    for (int c = 0; c < d->c; c++) {
        const double mean = save_mean[c], invstd = save_invstd[c];
        double sum_dy = 0.0, dot = 0.0;
        for (int n = 0; n < d->n; n++) {
            size_t off = ((size_t)n * d->c + c) * hw;
            pp_sum_dy_dot_f32(dy + off, x + off, hw, mean, &sum_dy, &dot);
        }
        dgamma[c] += (float)(dot * invstd);
        dbeta[c] += (float)sum_dy;
        /* dx = (dy - mean(dy) - (x - mean) * dot * invstd^2 / m) * gamma * invstd */
        const float grad_mean = (float)(sum_dy / m);
        const float proj = (float)(dot * invstd * invstd / m);
        const float scale = (float)((double)gamma[c] * invstd);
        const float fmean = (float)mean;
        for (int n = 0; n < d->n; n++) {
            size_t off = ((size_t)n * d->c + c) * hw;
            const float *xs = x + off, *gs = dy + off;
            float *out = dx + off;
            for (size_t i = 0; i < hw; i++)
                out[i] = (gs[i] - grad_mean - (xs[i] - fmean) * proj) * scale;
        }
    }
    return PP_OK;
}
