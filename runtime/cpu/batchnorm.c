/*
 * batchnorm.c - CPU batch norm (NCHW, f32, statistics per channel over N*H*W).
 *
 * Statistics and the backward reductions are accumulated in double with
 * eight interleaved lanes running across the N planes of a channel
 * (reduce.h), two passes for the variance; the per-element transforms run in
 * float as y = x * alpha + beta with per-channel alpha, beta, the form
 * PyTorch's CPU kernel uses.
 *
 * Threads: channels are independent. Each channel is reduced and transformed
 * entirely by one task, in a fixed order, and tasks take fixed runs of
 * channels (by shape), so results do not depend on the thread count.
 */
#include <math.h>

#include "kernels.h"
#include "workers.h"
#include "reduce.h"

/* Elements a task should cover at least (whole channels). */
#define BN_TASK_ELEMS 16384

typedef struct bn_job {
    const pp_bn_desc *d;
    const float *x, *dy, *gamma, *beta;
    const float *mean_in, *var_in; /* running statistics (inference) */
    const float *save_mean, *save_invstd;
    float *running_mean, *running_var, *y, *save_mean_out, *save_invstd_out;
    float *dx, *dgamma, *dbeta;
    int per_task; /* channels per task */
} bn_job;

static int bn_per_task(const pp_bn_desc *d)
{
    size_t per_channel = (size_t)d->n * d->h * d->w;
    size_t k = per_channel >= BN_TASK_ELEMS ? 1 : BN_TASK_ELEMS / (per_channel ? per_channel : 1);
    return k > (size_t)d->c ? d->c : (int)k;
}

static void bn_run(pp_exec *ex, bn_job *j, pp_cpu_task_fn fn)
{
    j->per_task = bn_per_task(j->d);
    pp_cpu_parallel(ex, (j->d->c + j->per_task - 1) / j->per_task, fn, j);
}

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

static void forward_train_channel(const bn_job *j, int c)
{
    const pp_bn_desc *d = j->d;
    const size_t hw = (size_t)d->h * d->w;
    const double m = (double)d->n * (double)hw;
    const double mom = d->momentum;
    double acc[PP_REDUCE_LANES] = {0};
    unsigned lane = 0;
    for (int n = 0; n < d->n; n++)
        lane = pp_lanes_sum_f32(acc, j->x + ((size_t)n * d->c + c) * hw, hw, lane);
    const double mean = pp_lanes_total(acc) / m;
    double sq[PP_REDUCE_LANES] = {0};
    lane = 0;
    for (int n = 0; n < d->n; n++)
        lane = pp_lanes_sqdev_f32(sq, j->x + ((size_t)n * d->c + c) * hw, hw, mean, lane);
    const double ssq = pp_lanes_total(sq);
    const double invstd = 1.0 / sqrt(ssq / m + (double)d->eps);
    j->save_mean_out[c] = (float)mean;
    j->save_invstd_out[c] = (float)invstd;
    j->running_mean[c] = (float)((1.0 - mom) * j->running_mean[c] + mom * mean);
    j->running_var[c] = (float)((1.0 - mom) * j->running_var[c] + mom * (ssq / (m - 1.0)));
    const double alpha = (double)j->gamma[c] * invstd;
    transform(d, c, j->x, (float)alpha, (float)((double)j->beta[c] - mean * alpha), j->y);
}

static void forward_train_task(void *arg, int64_t t, int worker)
{
    const bn_job *j = arg;
    (void)worker;
    int c0 = (int)t * j->per_task, c1 = c0 + j->per_task < j->d->c ? c0 + j->per_task : j->d->c;
    for (int c = c0; c < c1; c++) forward_train_channel(j, c);
}

pp_status pp_cpu_batchnorm_forward_train(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                         const float *gamma, const float *beta,
                                         float *running_mean, float *running_var, float *y,
                                         float *save_mean, float *save_invstd, pp_error *err)
{
    bn_job j = {.d = d, .x = x, .gamma = gamma, .beta = beta, .running_mean = running_mean,
                .running_var = running_var, .y = y, .save_mean_out = save_mean,
                .save_invstd_out = save_invstd};
    bn_run(ex, &j, forward_train_task);
    return PP_OK;
}

static void forward_infer_task(void *arg, int64_t t, int worker)
{
    const bn_job *j = arg;
    const pp_bn_desc *d = j->d;
    (void)worker;
    int c0 = (int)t * j->per_task, c1 = c0 + j->per_task < d->c ? c0 + j->per_task : d->c;
    for (int c = c0; c < c1; c++) {
        const double invstd = 1.0 / sqrt((double)j->var_in[c] + (double)d->eps);
        const double alpha = (double)j->gamma[c] * invstd;
        transform(d, c, j->x, (float)alpha, (float)((double)j->beta[c] - j->mean_in[c] * alpha),
                  j->y);
    }
}

pp_status pp_cpu_batchnorm_forward_infer(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                         const float *gamma, const float *beta,
                                         const float *running_mean, const float *running_var,
                                         float *y, pp_error *err)
{
    bn_job j = {.d = d, .x = x, .gamma = gamma, .beta = beta, .mean_in = running_mean,
                .var_in = running_var, .y = y};
    bn_run(ex, &j, forward_infer_task);
    return PP_OK;
}

static void backward_channel(const bn_job *j, int c)
{
    const pp_bn_desc *d = j->d;
    const size_t hw = (size_t)d->h * d->w;
    const double m = (double)d->n * (double)hw;
    const double mean = j->save_mean[c], invstd = j->save_invstd[c];
    double a[PP_REDUCE_LANES] = {0}, b[PP_REDUCE_LANES] = {0};
    unsigned lane = 0;
    for (int n = 0; n < d->n; n++) {
        size_t off = ((size_t)n * d->c + c) * hw;
        lane = pp_lanes_dy_dot_f32(a, b, j->dy + off, j->x + off, hw, mean, lane);
    }
    const double sum_dy = pp_lanes_total(a), dot = pp_lanes_total(b);
    j->dgamma[c] += (float)(dot * invstd);
    j->dbeta[c] += (float)sum_dy;
    /* dx = (dy - mean(dy) - (x - mean) * dot * invstd^2 / m) * gamma * invstd */
    const float grad_mean = (float)(sum_dy / m);
    const float proj = (float)(dot * invstd * invstd / m);
    const float scale = (float)((double)j->gamma[c] * invstd);
    const float fmean = (float)mean;
    for (int n = 0; n < d->n; n++) {
        size_t off = ((size_t)n * d->c + c) * hw;
        const float *xs = j->x + off, *gs = j->dy + off;
        float *out = j->dx + off;
        for (size_t i = 0; i < hw; i++)
            out[i] = (gs[i] - grad_mean - (xs[i] - fmean) * proj) * scale;
    }
}

static void backward_task(void *arg, int64_t t, int worker)
{
    const bn_job *j = arg;
    (void)worker;
    int c0 = (int)t * j->per_task, c1 = c0 + j->per_task < j->d->c ? c0 + j->per_task : j->d->c;
    for (int c = c0; c < c1; c++) backward_channel(j, c);
}

pp_status pp_cpu_batchnorm_backward(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                    const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_invstd, float *dx, float *dgamma,
                                    float *dbeta, pp_error *err)
{
    bn_job j = {.d = d, .x = x, .dy = dy, .gamma = gamma, .save_mean = save_mean,
                .save_invstd = save_invstd, .dx = dx, .dgamma = dgamma, .dbeta = dbeta};
    bn_run(ex, &j, backward_task);
    return PP_OK;
}
