/* lr_schedule.c - closed forms of PyTorch's MultiStepLR, LinearLR warm-up and
 * CosineAnnealingLR (see train/lr_schedule.h). */
#include "runtime/train/lr_schedule.h"

#include <math.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

const char *pp_lr_kind_name(pp_lr_kind k)
{
    switch (k) {
    case PP_LR_CONSTANT: return "constant";
    case PP_LR_STEP: return "step";
    case PP_LR_COSINE: return "cosine";
    }
    return "?";
}

pp_status pp_lr_schedule_check(const pp_lr_schedule *s, pp_error *err)
{
    if (!(s->base_lr > 0 && isfinite(s->base_lr)))
        return pp_error_set(err, PP_ERR_INPUT, "learning rate %g is not positive", s->base_lr);
    switch (s->kind) {
    case PP_LR_CONSTANT: return PP_OK;
    case PP_LR_STEP:
        if (s->n_milestones < 0 || s->n_milestones > PP_LR_MAX_MILESTONES)
            return pp_error_set(err, PP_ERR_INPUT, "lr_schedule: %d milestones (at most %d)",
                                s->n_milestones, PP_LR_MAX_MILESTONES);
        for (int i = 0; i < s->n_milestones; i++)
            if (s->milestones[i] < 1 || (i > 0 && s->milestones[i] <= s->milestones[i - 1]))
                return pp_error_set(err, PP_ERR_INPUT,
                                    "lr_schedule: milestones must be positive and increasing "
                                    "(milestone %d is %d)",
                                    i, s->milestones[i]);
        if (!(s->gamma > 0 && isfinite(s->gamma)))
            return pp_error_set(err, PP_ERR_INPUT, "lr_schedule: gamma %g is not positive",
                                s->gamma);
        return PP_OK;
    case PP_LR_COSINE:
        if (s->warmup < 0 || s->total <= s->warmup)
            return pp_error_set(err, PP_ERR_INPUT,
                                "lr_schedule: warm-up (%d) must be shorter than the run (%d)",
                                s->warmup, s->total);
        if (s->warmup > 0 && !(s->warmup_start_factor > 0 && s->warmup_start_factor <= 1))
            return pp_error_set(err, PP_ERR_INPUT,
                                "lr_schedule: warmup_start_factor %g is not in (0, 1]",
                                s->warmup_start_factor);
        if (!(s->eta_min >= 0 && s->eta_min <= s->base_lr))
            return pp_error_set(err, PP_ERR_INPUT,
                                "lr_schedule: min_lr %g is not in [0, lr]", s->eta_min);
        return PP_OK;
    }
    return pp_error_set(err, PP_ERR_INPUT, "lr_schedule: unknown kind %d", (int)s->kind);
}

double pp_lr_at(const pp_lr_schedule *s, int t)
{
    if (t < 0) t = 0;
    switch (s->kind) {
    case PP_LR_CONSTANT: return s->base_lr;
    case PP_LR_STEP: {
        int k = 0;
        while (k < s->n_milestones && s->milestones[k] <= t) k++;
        return s->base_lr * pow(s->gamma, k);
    }
    case PP_LR_COSINE: {
        if (t < s->warmup) {
            double f = s->warmup_start_factor;
            return s->base_lr * (f + (1.0 - f) * (double)t / s->warmup);
        }
        int u = t - s->warmup, T = s->total - s->warmup;
        return s->eta_min + (s->base_lr - s->eta_min) * (1.0 + cos(M_PI * u / T)) / 2.0;
    }
    }
    return s->base_lr;
}
