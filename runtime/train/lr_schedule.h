/*
 * lr_schedule.h - learning-rate schedules with torch.optim.lr_scheduler's
 * values.
 *
 * A schedule maps a period index t = 0, 1, 2, ... (epochs when the plan trains
 * for epochs, steps when it trains for steps) to the learning rate used
 * during that period, for a base learning rate lr0:
 *
 *   constant  lr(t) = lr0
 *   step      lr(t) = lr0 * gamma^k, k = number of milestones <= t
 *             (MultiStepLR; StepLR(step_size) is milestones step_size,
 *             2*step_size, ...)
 *   cosine    warm-up for t < W (LinearLR from start_factor to 1 over W
 *             periods): lr0 * (f + (1 - f) * t / W); then, with
 *             u = t - W and T = total - W (CosineAnnealingLR(T_max = T,
 *             eta_min) after a SequentialLR milestone at W):
 *             lr(t) = eta_min + (lr0 - eta_min) * (1 + cos(pi * u / T)) / 2
 *             (eta_min at u = T; past the run it rises again, as PyTorch's).
 *
 * PyTorch computes these recursively in double precision; the closed forms
 * here agree with it to rounding (tests/torch compares them). Plain data, no
 * allocation, thread-safe.
 */
#ifndef PP_LR_SCHEDULE_H
#define PP_LR_SCHEDULE_H

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PP_LR_MAX_MILESTONES 32

typedef enum pp_lr_kind {
    PP_LR_CONSTANT = 0,
    PP_LR_STEP = 1,
    PP_LR_COSINE = 2,
} pp_lr_kind;

typedef struct pp_lr_schedule {
    pp_lr_kind kind;
    double base_lr;                          /* lr0 > 0 */
    /* step */
    int n_milestones;                        /* 0..PP_LR_MAX_MILESTONES, increasing */
    int milestones[PP_LR_MAX_MILESTONES];
    double gamma;                            /* factor at each milestone, > 0 */
    /* cosine */
    int total;                               /* periods of the whole run, > warmup */
    int warmup;                              /* linear warm-up periods, >= 0 */
    double warmup_start_factor;              /* in (0, 1]; PyTorch's LinearLR default is 1/3 */
    double eta_min;                          /* >= 0, final learning rate */
} pp_lr_schedule;

/* Checks a schedule (PP_ERR_INPUT with a message naming the field). */
pp_status pp_lr_schedule_check(const pp_lr_schedule *s, pp_error *err);

/* The learning rate of period t >= 0. */
double pp_lr_at(const pp_lr_schedule *s, int t);

/* "constant", "step", "cosine". */
const char *pp_lr_kind_name(pp_lr_kind k);

#ifdef __cplusplus
}
#endif

#endif
