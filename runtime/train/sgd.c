/*
 * sgd.c - the optimizer's SGD kind (optim_kind.h): torch.optim.SGD with
 * momentum, Nesterov and the group's weight decay through
 * pp_sgd_update_multi; a gradient scale is applied to the gradients first
 * (pp_scale_multi), as torch's clip_grad_norm_ does before the step.
 */
#include <math.h>

#include "runtime/core/ops.h"
#include "runtime/train/optim_kind.h"

static pp_status sgd_check(const pp_optimizer_settings *s, pp_error *err)
{
    if (!(s->momentum >= 0) || !isfinite(s->momentum))
        return pp_error_set(err, PP_ERR_INPUT, "optimizer: momentum %g must be >= 0", s->momentum);
    if (s->nesterov && s->momentum <= 0)
        return pp_error_set(err, PP_ERR_INPUT,
                            "optimizer: Nesterov momentum requires momentum > 0");
    return PP_OK;
}

static int sgd_slots(const pp_optimizer_settings *s, const char **prefix, bool *scalar,
                     bool *zeroed)
{
    if (s->momentum == 0) return 0;
    prefix[0] = PP_OPTIMIZER_MOMENTUM_PREFIX;
    scalar[0] = false;
    zeroed[0] = false; /* the first step writes buf = g */
    return 1;
}

static pp_status sgd_update(pp_exec *ex, const pp_optimizer_settings *s, const pp_optim_group *g,
                            pp_error *err)
{
    if (g->grad_scale != 1.0f) PP_TRY(pp_scale_multi(ex, g->grad_scale, g->n, g->grads, err));
    const pp_sgd_desc d = {
        .lr = (float)s->lr,
        .momentum = (float)s->momentum,
        .weight_decay = (float)g->weight_decay,
        .nesterov = s->nesterov,
        .first_step = g->first,
    };
    return pp_sgd_update_multi(ex, &d, g->n, g->params, (const pp_tensor *const *)g->grads,
                               s->momentum != 0 ? g->state[0] : NULL, err);
}

const pp_optim_kind_ops pp_optim_sgd_ops = {
    .name = "sgd",
    .check = sgd_check,
    .slots = sgd_slots,
    .update = sgd_update,
};
