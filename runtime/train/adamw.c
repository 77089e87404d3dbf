/*
 * adamw.c - the optimizer's AdamW kind (optim_kind.h): torch.optim.AdamW
 * through pp_adamw_update_multi, its first and second moments starting
 * from zeros, the step count kept per parameter (saved as an I64 scalar,
 * as torch keeps state['step']) for the bias corrections.
 */
#include <math.h>

#include "runtime/core/ops.h"
#include "runtime/train/optim_kind.h"

static pp_status adamw_check(const pp_optimizer_settings *s, pp_error *err)
{
    if (!(s->beta1 >= 0 && s->beta1 < 1) || !(s->beta2 >= 0 && s->beta2 < 1))
        return pp_error_set(err, PP_ERR_INPUT, "optimizer: betas (%g, %g) must be in [0, 1)",
                            s->beta1, s->beta2);
    if (!(s->eps >= 0) || !isfinite(s->eps))
        return pp_error_set(err, PP_ERR_INPUT, "optimizer: eps %g must be >= 0", s->eps);
    return PP_OK;
}

static int adamw_slots(const pp_optimizer_settings *s, const char **prefix, bool *scalar,
                       bool *zeroed)
{
    (void)s;
    prefix[0] = PP_OPTIMIZER_EXP_AVG_PREFIX;
    prefix[1] = PP_OPTIMIZER_EXP_AVG_SQ_PREFIX;
    prefix[2] = PP_OPTIMIZER_STEP_PREFIX;
    scalar[0] = scalar[1] = false;
    scalar[2] = true;
    zeroed[0] = zeroed[1] = zeroed[2] = true;
    return 3;
}

static pp_status adamw_update(pp_exec *ex, const pp_optimizer_settings *s,
                              const pp_optim_group *g, pp_error *err)
{
    const pp_adamw_desc d = {
        .lr = s->lr,
        .beta1 = s->beta1,
        .beta2 = s->beta2,
        .eps = s->eps,
        .weight_decay = g->weight_decay,
        .step = g->step,
        .grad_scale = g->grad_scale,
    };
    return pp_adamw_update_multi(ex, &d, g->n, g->params, (const pp_tensor *const *)g->grads,
                                 g->state[0], g->state[1], err);
}

const pp_optim_kind_ops pp_optim_adamw_ops = {
    .name = "adamw",
    .check = adamw_check,
    .slots = adamw_slots,
    .update = adamw_update,
};
