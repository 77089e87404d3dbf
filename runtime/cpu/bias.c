/*
 * bias.c - CPU per-channel bias of a convolution: added over each (N, C)
 * plane forward, summed over N and the plane backward. The gradient's sum
 * runs in double through reduce.h's lanes, the planes of a channel in batch
 * order, so it depends only on the data. Channels are independent and run in
 * fixed runs on the device's pool.
 */
#include "kernels.h"
#include "workers.h"
#include "reduce.h"

#define CHANNELS_PER_TASK 8

typedef struct bias_job {
    int64_t n, c, hw;
    const float *in; /* forward: b; backward: dy */
    float *out;      /* forward: y; backward: db */
} bias_job;

static void channel_range(const bias_job *j, int64_t t, int64_t *c0, int64_t *c1)
{
    *c0 = t * CHANNELS_PER_TASK;
    *c1 = *c0 + CHANNELS_PER_TASK < j->c ? *c0 + CHANNELS_PER_TASK : j->c;
}

static void forward_task(void *arg, int64_t t, int worker)
{
    const bias_job *j = arg;
    (void)worker;
    int64_t c0, c1;
    channel_range(j, t, &c0, &c1);
    for (int64_t n = 0; n < j->n; n++)
        for (int64_t c = c0; c < c1; c++) {
            float *y = j->out + (n * j->c + c) * j->hw;
            const float b = j->in[c];
            for (int64_t i = 0; i < j->hw; i++) y[i] += b;
        }
}

static void backward_task(void *arg, int64_t t, int worker)
{
    const bias_job *j = arg;
    (void)worker;
    int64_t c0, c1;
    channel_range(j, t, &c0, &c1);
    for (int64_t c = c0; c < c1; c++) {
        double sum = 0.0;
        for (int64_t n = 0; n < j->n; n++) sum += pp_sum_f32(j->in + (n * j->c + c) * j->hw,
                                                             (size_t)j->hw);
        j->out[c] += (float)sum;
    }
}

static int64_t tasks(int64_t c)
{
    return (c + CHANNELS_PER_TASK - 1) / CHANNELS_PER_TASK;
}

pp_status pp_cpu_channel_bias_forward(pp_exec *ex, int64_t n, int64_t c, int64_t hw,
                                      const float *b, float *y, pp_error *err)
{
    bias_job j = {n, c, hw, b, y};
    pp_cpu_parallel(ex, tasks(c), forward_task, &j);
    return PP_OK;
}

pp_status pp_cpu_channel_bias_backward(pp_exec *ex, int64_t n, int64_t c, int64_t hw,
                                       const float *dy, float *db, pp_error *err)
{
    bias_job j = {n, c, hw, dy, db};
    pp_cpu_parallel(ex, tasks(c), backward_task, &j);
    return PP_OK;
}
