/*
 * sgd.c - CPU torch.optim.SGD step on one parameter tensor (dampening 0).
 * Operation order follows PyTorch: g = grad + wd * param; buf = first ?
 * g : momentum * buf + g; g = nesterov ? g + momentum * buf : buf;
 * param -= lr * g. grad is read only. Elements are independent: fixed ranges
 * run on the device's pool.
 */
#include "kernels.h"
#include "workers.h"

#define ELEMS_PER_TASK ((int64_t)1 << 16)

typedef struct sgd_job {
    const pp_sgd_desc *d;
    int64_t n;
    float *param, *momentum_buf;
    const float *grad;
} sgd_job;

static void sgd_task(void *arg, int64_t t, int worker)
{
    const sgd_job *j = arg;
    const pp_sgd_desc *d = j->d;
    (void)worker;
    const int64_t i0 = t * ELEMS_PER_TASK;
    const int64_t n = j->n - i0 < ELEMS_PER_TASK ? j->n - i0 : ELEMS_PER_TASK;
    float *param = j->param + i0;
    const float *grad = j->grad + i0;
    const float lr = d->lr, wd = d->weight_decay, mu = d->momentum;
    if (mu == 0.0f) {
        for (int64_t i = 0; i < n; i++) param[i] -= lr * (grad[i] + wd * param[i]);
        return;
    }
    float *buf = j->momentum_buf + i0;
    if (d->first_step && !d->nesterov) {
        for (int64_t i = 0; i < n; i++) {
            float g = grad[i] + wd * param[i];
            buf[i] = g;
            param[i] -= lr * g;
        }
        return;
    }
    if (!d->nesterov) {
        for (int64_t i = 0; i < n; i++) {
            float b = mu * buf[i] + (grad[i] + wd * param[i]);
            buf[i] = b;
            param[i] -= lr * b;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] + wd * param[i];
        float b = d->first_step ? g : mu * buf[i] + g;
        buf[i] = b;
        g = g + mu * b;
        param[i] -= lr * g;
    }
}

pp_status pp_cpu_sgd_update(pp_exec *ex, const pp_sgd_desc *d, int64_t n, float *param,
                            const float *grad, float *momentum_buf, pp_error *err)
{
    sgd_job j = {.d = d, .n = n, .param = param, .momentum_buf = momentum_buf, .grad = grad};
    pp_cpu_parallel(ex, (n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, sgd_task, &j);
    return PP_OK;
}
