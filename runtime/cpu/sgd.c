/*
 * sgd.c - CPU torch.optim.SGD step on one parameter tensor (dampening 0).
 * Operation order follows PyTorch: g = grad + wd * param; buf = first ?
 * g : momentum * buf + g; g = nesterov ? g + momentum * buf : buf;
 * param -= lr * g. grad is read only.
 */
#include "cpu_kernels.h"

pp_status pp_cpu_sgd_update(pp_exec *ex, const pp_sgd_desc *d, int64_t n, float *param,
                            const float *grad, float *momentum_buf, pp_error *err)
{
    const float lr = d->lr, wd = d->weight_decay, mu = d->momentum;
    if (mu == 0.0f) {
        for (int64_t i = 0; i < n; i++) param[i] -= lr * (grad[i] + wd * param[i]);
        return PP_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] + wd * param[i];
        float b = d->first_step ? g : mu * momentum_buf[i] + g;
        momentum_buf[i] = b;
        g = d->nesterov ? g + mu * b : b;
        param[i] -= lr * g;
    }
    return PP_OK;
}
