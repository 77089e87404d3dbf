/*
 * restage.c - pp_plan_restage (plan.h): the plan's model cut anew into a
 * number of stages placed on its devices as a schedule wants them, keeping
 * each device's share of the work. The delay model: a device's times (the
 * sum over the stages it held) split evenly over the stages it now holds;
 * a ResNet: the units balanced by forward FLOPs over the new stages
 * (pp_plan_resolve_auto with balance flops), each device's memory cap split
 * evenly over its stages.
 */
#include "partitioner/plan.h"

#include <stdio.h>
#include <string.h>

/* Per device, the plan's delay times summed over its stages (t has n entries
 * or one for all stages). */
static void device_sums(const pp_plan *plan, const int *old_dev, const double *t, int n,
                        double *sum)
{
    for (int s = 0; s < plan->n_stages; s++) sum[old_dev[s]] += n > 1 ? t[s] : t[0];
}

/* The new per-stage list: the device's sum over the count of its stages. */
static void spread(const double *sum, const int *dev, const int *count, int S, double *t,
                   int *n)
{
    for (int s = 0; s < S; s++) t[s] = sum[dev[s]] / count[dev[s]];
    *n = S;
}

pp_status pp_plan_restage(pp_plan *plan, int n_stages, const int *stage_device, pp_error *err)
{
    int old_dev[PP_PLAN_MAX_STAGES];
    int D = pp_plan_devices(plan, old_dev);
    if (n_stages < D || n_stages > PP_PLAN_MAX_STAGES)
        return pp_error_set(err, PP_ERR_INPUT, "%s: %d stages on the plan's %d device%s (at "
                            "most %d stages)", plan->path, n_stages, D, D == 1 ? "" : "s",
                            PP_PLAN_MAX_STAGES);
    if (plan->replicas > 1)
        return pp_error_set(err, PP_ERR_INPUT, "%s: cutting the stages anew for a schedule "
                            "takes a plan without replicas", plan->path);
    int count[PP_PLAN_MAX_STAGES] = {0};
    for (int s = 0; s < n_stages; s++) {
        if (stage_device[s] < 0 || stage_device[s] >= D)
            return pp_error_set(err, PP_ERR_INVALID, "restage: stage %d on device %d of %d", s,
                                stage_device[s], D);
        count[stage_device[s]]++;
    }
    for (int d = 0; d < D; d++)
        if (!count[d])
            return pp_error_set(err, PP_ERR_INVALID, "restage: device %d gets no stage", d);
    /* each device as the plan names it, with its memory cap (the sum of its stages') */
    pp_plan_stage dev[PP_PLAN_MAX_STAGES];
    int64_t cap[PP_PLAN_MAX_STAGES] = {0};
    bool capped[PP_PLAN_MAX_STAGES];
    for (int d = 0; d < D; d++) capped[d] = true;
    for (int s = 0; s < plan->n_stages; s++) {
        dev[old_dev[s]] = plan->stages[s];
        cap[old_dev[s]] += plan->stages[s].memory_bytes;
        capped[old_dev[s]] &= plan->stages[s].memory_bytes > 0;
    }
    pp_model_config *m = &plan->model;
    if (m->kind == PP_MODEL_DELAY) {
        double sum[PP_PLAN_MAX_STAGES] = {0};
        device_sums(plan, old_dev, m->forward_ms, m->n_forward_ms, sum);
        spread(sum, stage_device, count, n_stages, m->forward_ms, &m->n_forward_ms);
        memset(sum, 0, sizeof sum);
        device_sums(plan, old_dev, m->backward_ms, m->n_backward_ms, sum);
        spread(sum, stage_device, count, n_stages, m->backward_ms, &m->n_backward_ms);
        if (m->n_backward_input_ms > 0) {
            memset(sum, 0, sizeof sum);
            device_sums(plan, old_dev, m->backward_input_ms, m->n_backward_input_ms, sum);
            spread(sum, stage_device, count, n_stages, m->backward_input_ms,
                   &m->n_backward_input_ms);
        }
        if (m->n_backward_weight_ms > 0) {
            memset(sum, 0, sizeof sum);
            device_sums(plan, old_dev, m->backward_weight_ms, m->n_backward_weight_ms, sum);
            spread(sum, stage_device, count, n_stages, m->backward_weight_ms,
                   &m->n_backward_weight_ms);
        }
    } else if (plan->catalogue.n < n_stages) {
        return pp_error_set(err, PP_ERR_INPUT, "%s: %d stages, but %s has only %d units",
                            plan->path, n_stages, m->name, plan->catalogue.n);
    }
    for (int s = 0; s < n_stages; s++) {
        int d = stage_device[s];
        plan->stages[s] = dev[d];
        plan->stages[s].memory_bytes = capped[d] ? cap[d] / count[d] : 0;
        plan->stages[s].first = plan->stages[s].last = -1;
        plan->stages[s].layers_mark = (pp_mark){0, 0};
    }
    plan->n_stages = n_stages;
    if (m->kind == PP_MODEL_DELAY) return PP_OK;
    plan->stages_auto = true;
    plan->balance = PP_PLAN_BALANCE_FLOPS;
    return pp_plan_resolve_auto(plan, NULL, NULL, err);
}
