/*
 * recipe.c - the training recipe's parts of a rank's pipeline (recipe.h):
 * the optimizer of the plan's kind with each parameter's role (a batch
 * norm's, a bias, a weight), the loss's label smoothing, gradient clipping
 * in the model's parameter order over every stage and rank, and the
 * deferred batch-norm statistics' commit.
 */
#include "pipeline/recipe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/stage.h"
#include "runtime/train/clip.h"
#include "runtime/train/optimizer.h"

/* A parameter's role for the weight-decay groups: torchvision's rule names a
 * bias by its leaf name, a normalisation layer's parameters by the layer. */
static pp_param_role role_of(const pp_named_tensor *nt)
{
    const char *dot = strrchr(nt->name, '.');
    const bool bias = strcmp(dot ? dot + 1 : nt->name, "bias") == 0;
    if (nt->norm) return bias ? PP_PARAM_NORM_BIAS : PP_PARAM_NORM_WEIGHT;
    return bias ? PP_PARAM_BIAS : PP_PARAM_WEIGHT;
}

static pp_optimizer_settings settings_of(const pp_plan *plan)
{
    const pp_plan_sgd *o = &plan->optimizer;
    return (pp_optimizer_settings){
        .kind = o->type == PP_PLAN_OPTIMIZER_ADAMW ? PP_OPTIMIZER_ADAMW : PP_OPTIMIZER_SGD,
        .lr = o->lr,
        .weight_decay = o->weight_decay,
        .has_norm_weight_decay = o->has_norm_weight_decay,
        .norm_weight_decay = o->norm_weight_decay,
        .has_bias_weight_decay = o->has_bias_weight_decay,
        .bias_weight_decay = o->bias_weight_decay,
        .momentum = o->momentum,
        .nesterov = o->nesterov,
        .beta1 = o->beta1,
        .beta2 = o->beta2,
        .eps = o->eps,
    };
}

pp_status pipe_recipe_init(struct pp_pipeline *p, const pp_plan *plan, pp_error *err)
{
    p->label_smoothing = (float)plan->loss.label_smoothing;
    p->clip_max = plan->optimizer.clip_grad_norm;
    p->grad_norm = -1;
    pp_param_info *info = calloc((size_t)(p->n_params ? p->n_params : 1), sizeof *info);
    p->clip_sums = calloc((size_t)(p->n_params ? p->n_params : 1), sizeof *p->clip_sums);
    if (!info || !p->clip_sums) {
        free(info);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (optimizer)");
    }
    int k = 0;
    for (int s = 0; s < p->n_stages; s++) {
        if (!stage_here(p, s)) continue;
        const pp_stage *m = p->stages[s].model;
        for (int i = 0; i < pp_stage_param_count(m); i++) {
            const pp_named_tensor *nt = pp_stage_param(m, i);
            /* (a tied copy is no parameter of the optimizer's: pipeline/tied.h) */
            if (!nt->tied_to) info[k++] = (pp_param_info){.role = role_of(nt)};
        }
    }
    const pp_optimizer_settings set = settings_of(plan);
    pp_status st = pp_optimizer_new_with(&p->opt, &set, p->params, info, (size_t)p->n_params, err);
    free(info);
    for (int s = 0; st == PP_OK && plan->deferred_batch_norm && s < p->n_stages; s++)
        if (stage_here(p, s) && p->model.kind != PP_MODEL_DELAY)
            st = pp_stage_set_deferred_bn(p->stages[s].model, true, p->m, err);
    return st;
}

void pipe_recipe_free(struct pp_pipeline *p)
{
    free(p->clip_sums);
    p->clip_sums = NULL;
}

/* Stage m's parameters that the optimizer holds (a tied copy is none), as
 * pipe_recipe_init lists them. */
static int optimizer_param_count(const pp_stage *m)
{
    int n = 0;
    for (int i = 0; i < pp_stage_param_count(m); i++) n += !pp_stage_param(m, i)->tied_to;
    return n;
}

pp_status pipe_clip_grads(struct pp_pipeline *p, pp_exec_for_device_fn exec_for, pp_error *err)
{
    if (!(p->clip_max > 0)) return PP_OK;
    PP_TRY(pp_optimizer_grad_sumsq(p->opt, exec_for, p, p->clip_sums, err));
    /* every stage's sums in the model's order: this rank's from its optimizer
     * (stage by stage, as p->params lists them), the others' from their home
     * rank; the norm over them in that order */
    int all = 0;
    for (int s = 0; s < p->n_stages; s++) all += optimizer_param_count(p->stages[s].model);
    double *sums = calloc((size_t)(all ? all : 1), sizeof *sums);
    if (!sums) return pp_error_set(err, PP_ERR_OOM, "out of host memory (gradient norm)");
    pp_status st = PP_OK;
    for (int s = 0, at = 0, mine = 0; s < p->n_stages && st == PP_OK; s++) {
        const int n = optimizer_param_count(p->stages[s].model);
        if (stage_here(p, s)) {
            memcpy(sums + at, p->clip_sums + mine, (size_t)n * sizeof *sums);
            mine += n;
        }
        if (pp_comm_size(p->comm) > 1)
            st = pp_comm_broadcast(p->comm, p->home_rank[s], sums + at, (size_t)n * sizeof *sums,
                                   err);
        at += n;
    }
    const float norm = pp_clip_total_norm(sums, (size_t)all);
    free(sums);
    PP_TRY(st);
    p->grad_norm = norm;
    if (!isfinite(norm))
        return pp_error_set(err, PP_ERR_NUMERIC,
                            "the gradients' norm is %s at step %lld (lower the learning rate, or "
                            "check the data)",
                            isnan(norm) ? "NaN" : "infinite", (long long)p->steps_done);
    return pp_optimizer_set_grad_scale(p->opt, pp_clip_coefficient(norm, p->clip_max), err);
}

pp_status pipe_bn_commit(struct pp_pipeline *p, int m, pp_error *err)
{
    for (int s = 0; s < p->n_stages; s++) {
        if (!stage_here(p, s) || p->model.kind == PP_MODEL_DELAY) continue;
        pp_stage *model = p->stages[s].model;
        if (!pp_stage_deferred_bn(model)) continue;
        pp_exec *ex = pp_stream_exec(pp_executor_stage_stream(p->exec, s));
        pp_status st = pp_stage_bn_commit(model, ex, m, err);
        if (st != PP_OK)
            return pp_error_prefix(err, "stage %d (%s): batch-norm statistics", s,
                                   p->stages[s].dev->name);
    }
    return PP_OK;
}
