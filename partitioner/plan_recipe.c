/*
 * plan_recipe.c - the training recipe's sections of a plan (docs/PLAN.md):
 * `optimizer` (sgd or adamw, their settings, weight-decay groups, gradient
 * clipping, the learning-rate schedule) and `loss` (label smoothing). Keys
 * of the other optimizer type are problems at their own mark.
 */
#include "partitioner/plan_walk.h"

#include <stddef.h>

#include "runtime/train/optimizer.h"

/* optimizer.lr_schedule: {type: constant|step|cosine, milestones, gamma, warmup,
 * warmup_start_factor, min_lr}; checked against the run length in walk_root. */
static void walk_lr_schedule(pp_walk *w, const pp_ynode *n)
{
    enum { K_TYPE, K_MILESTONES, K_GAMMA, K_WARMUP, K_START, K_MIN, K_N };
    static const char *const keys[K_N] = {"type",   "milestones",          "gamma",
                                          "warmup", "warmup_start_factor", "min_lr"};
    const pp_ynode *f[K_N];
    pp_lr_schedule *l = &w->plan->lr_schedule;
    w->plan->lr_schedule_mark = pp_walk_mark(n);
    if (!pp_walk_map(w, n, "optimizer.lr_schedule", keys, K_N, f)) return;
    static const char *const types[] = {"constant", "step", "cosine"};
    int type = f[K_TYPE] ? pp_walk_choice(w, f[K_TYPE], "optimizer.lr_schedule.type", types, 3,
                                          "constant, step or cosine")
                         : -1;
    if (!f[K_TYPE]) pp_walk_error(w, n, "optimizer.lr_schedule needs a type (constant, step or "
                                        "cosine)");
    if (type < 0) return;
    l->kind = (pp_lr_kind)type;
    l->gamma = 0.1;
    l->warmup_start_factor = 1.0 / 3.0; /* torch.optim.lr_scheduler.LinearLR's default */
    const pp_ynode *only_step[] = {f[K_MILESTONES], f[K_GAMMA]};
    const pp_ynode *only_cos[] = {f[K_WARMUP], f[K_START], f[K_MIN]};
    for (int i = 0; i < 2; i++)
        if (only_step[i] && l->kind != PP_LR_STEP)
            pp_walk_error(w, only_step[i], "%s applies to lr_schedule type step only",
                          i ? "gamma" : "milestones");
    for (int i = 0; i < 3; i++)
        if (only_cos[i] && l->kind != PP_LR_COSINE)
            pp_walk_error(w, only_cos[i], "%s applies to lr_schedule type cosine only",
                          keys[K_WARMUP + i]);
    if (l->kind == PP_LR_STEP) {
        const pp_ynode *m = f[K_MILESTONES];
        if (!m || m->kind != PP_YNODE_SEQ) {
            pp_walk_error(w, m ? m : n, "lr_schedule type step needs milestones: a list of "
                                        "increasing epochs (or steps)");
        } else if (m->n > PP_LR_MAX_MILESTONES) {
            pp_walk_error(w, m, "at most %d milestones", PP_LR_MAX_MILESTONES);
        } else {
            for (int i = 0; i < m->n; i++) {
                int v;
                if (!pp_walk_int32(w, m->kids[i], "milestone", 1, PP_PLAN_MAX_STEPS, &v)) continue;
                if (l->n_milestones > 0 && v <= l->milestones[l->n_milestones - 1])
                    pp_walk_error(w, m->kids[i], "milestones must increase (%d after %d)", v,
                                  l->milestones[l->n_milestones - 1]);
                else
                    l->milestones[l->n_milestones++] = v;
            }
        }
        if (f[K_GAMMA]) pp_walk_num(w, f[K_GAMMA], "lr_schedule.gamma", 1e-12, 1e12, &l->gamma);
    }
    if (l->kind == PP_LR_COSINE) {
        if (f[K_WARMUP])
            pp_walk_int32(w, f[K_WARMUP], "lr_schedule.warmup", 0, PP_PLAN_MAX_STEPS, &l->warmup);
        if (f[K_START])
            pp_walk_num(w, f[K_START], "lr_schedule.warmup_start_factor", 1e-12, 1.0,
                        &l->warmup_start_factor);
        if (f[K_MIN]) pp_walk_num(w, f[K_MIN], "lr_schedule.min_lr", 0.0, 1e12, &l->eta_min);
    }
}

/* adamw's betas: a list of two numbers in [0, 1). */
static void walk_betas(pp_walk *w, const pp_ynode *n, pp_plan_sgd *o)
{
    if (n->kind != PP_YNODE_SEQ || n->n != 2) {
        pp_walk_error(w, n, "optimizer.betas must be a list of two numbers in [0, 1), got %s",
                      pp_walk_describe(n));
        return;
    }
    double b[2];
    if (pp_walk_num(w, n->kids[0], "optimizer.betas[0]", 0.0, 1.0, &b[0]) &&
        pp_walk_num(w, n->kids[1], "optimizer.betas[1]", 0.0, 1.0, &b[1])) {
        for (int i = 0; i < 2; i++)
            if (b[i] >= 1.0) {
                pp_walk_error(w, n->kids[i], "optimizer.betas[%d] must be below 1", i);
                return;
            }
        o->beta1 = b[0];
        o->beta2 = b[1];
    }
}

void pp_walk_optimizer(pp_walk *w, const pp_ynode *n)
{
    enum { K_TYPE, K_LR, K_MOM, K_WD, K_NESTEROV, K_SCHED, K_BETAS, K_EPS, K_NORM_WD, K_BIAS_WD,
           K_CLIP, K_N };
    static const char *const keys[K_N] = {"type",         "lr",          "momentum",
                                          "weight_decay", "nesterov",    "lr_schedule",
                                          "betas",        "eps",         "norm_weight_decay",
                                          "bias_weight_decay", "clip_grad_norm"};
    const pp_ynode *f[K_N];
    pp_plan_sgd *o = &w->plan->optimizer;
    o->mark = pp_walk_mark(n);
    if (!pp_walk_map(w, n, "optimizer", keys, K_N, f)) return;
    if (f[K_TYPE]) {
        static const char *const types[] = {"sgd", "adamw"};
        int t = pp_walk_choice(w, f[K_TYPE], "optimizer.type", types, 2, "sgd or adamw");
        if (t >= 0) o->type = (pp_plan_optimizer_type)t;
    }
    const bool adamw = o->type == PP_PLAN_OPTIMIZER_ADAMW;
    if (adamw) { /* torch.optim.AdamW's defaults; no decay on biases and batch norms */
        o->lr = 1e-3;
        o->weight_decay = 0.01;
        o->has_norm_weight_decay = o->has_bias_weight_decay = true;
    }
    const int only_sgd[] = {K_MOM, K_NESTEROV}, only_adamw[] = {K_BETAS, K_EPS};
    for (int i = 0; i < 2; i++) {
        if (adamw && f[only_sgd[i]])
            pp_walk_error(w, f[only_sgd[i]], "optimizer.%s applies to type sgd only",
                          keys[only_sgd[i]]);
        if (!adamw && f[only_adamw[i]])
            pp_walk_error(w, f[only_adamw[i]], "optimizer.%s applies to type adamw only",
                          keys[only_adamw[i]]);
    }
    if (f[K_LR]) pp_walk_num(w, f[K_LR], "optimizer.lr", 0.0, 1e12, &o->lr);
    bool mom_ok = true;
    if (f[K_MOM] && !adamw)
        mom_ok = pp_walk_num(w, f[K_MOM], "optimizer.momentum", 0.0, 1e12, &o->momentum);
    if (f[K_WD]) pp_walk_num(w, f[K_WD], "optimizer.weight_decay", 0.0, 1e12, &o->weight_decay);
    if (f[K_NESTEROV] && !adamw &&
        pp_walk_bool(w, f[K_NESTEROV], "optimizer.nesterov", &o->nesterov) && o->nesterov &&
        mom_ok && !(o->momentum > 0))
        pp_walk_error(w, f[K_NESTEROV], "optimizer.nesterov needs momentum > 0");
    if (f[K_BETAS] && adamw) walk_betas(w, f[K_BETAS], o);
    if (f[K_EPS] && adamw) pp_walk_num(w, f[K_EPS], "optimizer.eps", 0.0, 1e12, &o->eps);
    if (f[K_NORM_WD] && pp_walk_num(w, f[K_NORM_WD], "optimizer.norm_weight_decay", 0.0, 1e12,
                                    &o->norm_weight_decay))
        o->has_norm_weight_decay = true;
    if (f[K_BIAS_WD] && pp_walk_num(w, f[K_BIAS_WD], "optimizer.bias_weight_decay", 0.0, 1e12,
                                    &o->bias_weight_decay))
        o->has_bias_weight_decay = true;
    if (f[K_CLIP] &&
        pp_walk_num(w, f[K_CLIP], "optimizer.clip_grad_norm", 0.0, 1e12, &o->clip_grad_norm) &&
        !(o->clip_grad_norm > 0))
        pp_walk_error(w, f[K_CLIP], "optimizer.clip_grad_norm must be above 0 (leave it out "
                                    "for no clipping)");
    if (f[K_SCHED]) walk_lr_schedule(w, f[K_SCHED]);
}

void pp_walk_loss(pp_walk *w, const pp_ynode *n)
{
    enum { K_SMOOTH, K_N };
    static const char *const keys[K_N] = {"label_smoothing"};
    const pp_ynode *f[K_N];
    pp_plan_loss *l = &w->plan->loss;
    l->mark = pp_walk_mark(n);
    if (!pp_walk_map(w, n, "loss", keys, K_N, f)) return;
    if (f[K_SMOOTH] &&
        pp_walk_num(w, f[K_SMOOTH], "loss.label_smoothing", 0.0, 1.0, &l->label_smoothing) &&
        l->label_smoothing >= 1.0) {
        pp_walk_error(w, f[K_SMOOTH], "loss.label_smoothing must be below 1");
        l->label_smoothing = 0;
    }
}

int pp_plan_optimizer_states(const pp_plan *plan)
{
    if (plan->optimizer.type == PP_PLAN_OPTIMIZER_ADAMW) return 2;
    return plan->optimizer.momentum > 0 ? 1 : 0;
}

const char *pp_plan_optimizer_state_prefix(const pp_plan *plan)
{
    if (plan->optimizer.type == PP_PLAN_OPTIMIZER_ADAMW) return PP_OPTIMIZER_EXP_AVG_PREFIX;
    return plan->optimizer.momentum > 0 ? PP_OPTIMIZER_MOMENTUM_PREFIX : NULL;
}
