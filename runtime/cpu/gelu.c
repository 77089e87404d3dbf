/*
 * gelu.c - CPU GELU, tanh approximation (GPT-2's), elementwise in f32:
 *   y  = x / 2 (1 + tanh(u)),  u = sqrt(2 / pi) (x + 0.044715 x^3)
 *   dx = dy (1/2 (1 + tanh(u)) + x/2 (1 - tanh(u)^2) u'),  u' = sqrt(2 / pi) (1 + 3 0.044715 x^2)
 * computed through the identity 1/2 (1 + tanh(u)) = s = 1 / (1 + exp(-2u)), so
 * 1/2 (1 - tanh(u)^2) = 2 s (1 - s): one expf per element, no cancellation
 * near 0, and s is exactly 0 or 1 where exp overflows or vanishes.
 * Elements are independent: fixed ranges run on the device's pool.
 */
#include <math.h>

#include "kernels.h"
#include "workers.h"

#define ELEMS_PER_TASK ((int64_t)1 << 15)

static const float k_sqrt_2_over_pi = 0.7978845608028654f;
static const float k_cubic = 0.044715f;

typedef struct gelu_job {
    int64_t n;
    const float *x, *dy;
    float *y, *dx;
} gelu_job;

static int64_t span(const gelu_job *j, int64_t t, int64_t *i0)
{
    *i0 = t * ELEMS_PER_TASK;
    return j->n - *i0 < ELEMS_PER_TASK ? j->n - *i0 : ELEMS_PER_TASK;
}

static void forward_task(void *arg, int64_t t, int worker)
{
    const gelu_job *j = arg;
    (void)worker;
    int64_t i0;
    const int64_t n = span(j, t, &i0);
    const float *x = j->x + i0;
    float *y = j->y + i0;
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        const float u = k_sqrt_2_over_pi * (v + k_cubic * v * v * v);
        y[i] = v / (1.0f + expf(-2.0f * u));
    }
}

static void backward_task(void *arg, int64_t t, int worker)
{
    const gelu_job *j = arg;
    (void)worker;
    int64_t i0;
    const int64_t n = span(j, t, &i0);
    const float *x = j->x + i0, *dy = j->dy + i0;
    float *dx = j->dx + i0;
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        const float u = k_sqrt_2_over_pi * (v + k_cubic * v * v * v);
        const float s = 1.0f / (1.0f + expf(-2.0f * u));
        const float du = k_sqrt_2_over_pi * (1.0f + 3.0f * k_cubic * v * v);
        dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * du);
    }
}

pp_status pp_cpu_gelu_forward(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err)
{
    gelu_job j = {.n = n, .x = x, .y = y};
    pp_cpu_parallel(ex, (n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, forward_task, &j);
    return PP_OK;
}

pp_status pp_cpu_gelu_backward(pp_exec *ex, int64_t n, const float *x, const float *dy, float *dx,
                               pp_error *err)
{
    gelu_job j = {.n = n, .x = x, .dy = dy, .dx = dx};
    pp_cpu_parallel(ex, (n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, backward_task, &j);
    return PP_OK;
}
