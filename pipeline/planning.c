/*
 * planning.c - what a plan will do before it runs: the predicted step time
 * and bubble from the cost model (the simulator), `stages: auto` (the time
 * balance from the profile cache, profile.c), and the cuDNN descriptor limit
 * checked at resolution time.
 */
#include "pipeline/pipeline.h"
#include "pipeline/fit.h"
#include "pipeline/fit_internal.h"
#include "pipeline/planning.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/stage.h"
#include "runtime/core/ops.h"
#include "streams/schedule.h"
#include "streams/simulate.h"

/* Simulates sched with per-stage costs of one micro-batch of ref_mb
 * samples (in, wt: the split backward's parts, NULL: halves of b). */
pp_status pipe_simulate(const pp_schedule *sched, int n, const double *f, const double *b,
                        const double *in, const double *wt, const double *copy, int ref_mb,
                        int slots, pp_sim_result *res, pp_error *err)
{
    pp_sim_costs c = {
        .stages = n,
        .forward_ms = f,
        .backward_ms = b,
        .input_ms = in,
        .weight_ms = wt,
        .copy_act_ms = n > 1 ? copy : NULL,
        .copy_grad_ms = n > 1 ? copy : NULL,
        .ref_mb_size = ref_mb,
        .slots = slots,
    };
    return pp_simulate(sched, &c, res, err);
}

/* ---- planning ---------------------------------------------------------------------- */

#define NOMINAL_CPU_GFLOPS 50.0
#define NOMINAL_CUDA_GFLOPS 20000.0
#define NOMINAL_COPY_GBPS 10.0

/* The delay model's time of stage s from a per-stage list (or its one value). */
static double delay_time(const double *v, int n, int s)
{
    return n > 1 ? v[s] : n == 1 ? v[0] : 0;
}

/* Per-stage costs of one micro-batch of the plan's split size. */
static void plan_costs(const pp_plan *plan, pp_pipeline_prediction *out, double *copy)
{
    int mb = plan->split_size;
    for (int s = 0; s < plan->n_stages; s++) {
        const pp_plan_stage *ps = &plan->stages[s];
        copy[s] = 0;
        if (plan->model.kind == PP_MODEL_DELAY) {
            const pp_model_config *m = &plan->model;
            out->forward_ms[s] = delay_time(m->forward_ms, m->n_forward_ms, s);
            out->backward_ms[s] = delay_time(m->backward_ms, m->n_backward_ms, s);
            /* the parts as the delay stage takes them: given, else half of B */
            double half = out->backward_ms[s] / 2;
            out->input_ms[s] = m->n_backward_input_ms
                                   ? delay_time(m->backward_input_ms, m->n_backward_input_ms, s)
                                   : half;
            out->weight_ms[s] = m->n_backward_weight_ms
                                    ? delay_time(m->backward_weight_ms, m->n_backward_weight_ms, s)
                                    : half;
            continue;
        }
        double gflops = ps->device.kind == PP_DEVICE_CUDA ? NOMINAL_CUDA_GFLOPS
                                                          : NOMINAL_CPU_GFLOPS;
        double flops = 0;
        for (int u = ps->first; u <= ps->last; u++)
            flops += (double)plan->catalogue.units[u].fwd_flops;
        out->forward_ms[s] = flops * mb / (gflops * 1e6);
        out->backward_ms[s] = 2 * out->forward_ms[s];
        out->input_ms[s] = out->weight_ms[s] = out->forward_ms[s];
        if (s + 1 < plan->n_stages)
            copy[s] = (double)plan->catalogue.units[ps->last].out_bytes * mb /
                      (NOMINAL_COPY_GBPS * 1e6);
    }
}

pp_status pp_pipeline_predict_plan(const pp_plan *plan, pp_pipeline_prediction *out,
                                   pp_error *err)
{
    if (!plan || !out)
        return pp_error_set(err, PP_ERR_INVALID, "pp_pipeline_predict_plan: no %s (NULL)",
                            plan ? "prediction to fill" : "plan");
    memset(out, 0, sizeof *out);
    int n = plan->n_stages;
    if (plan->stages_auto)
        return pp_error_set(err, PP_ERR_INVALID, "pp_pipeline_predict: unresolved stages");
    double copy[PP_PLAN_MAX_STAGES];
    plan_costs(plan, out, copy);
    pp_schedule sched;
    PP_TRY(pp_pipeline_plan_schedule(plan, &sched, err));
    pp_sim_result r;
    pp_status s = pipe_simulate(&sched, n, out->forward_ms, out->backward_ms, out->input_ms,
                                out->weight_ms, copy,
                                plan->model.kind == PP_MODEL_DELAY ? 0 : plan->split_size, 0, &r,
                                err);
    if (s == PP_OK) {
        out->stages = n;
        out->devices = sched.devices;
        out->step_ms = r.step_ms;
        out->bubble = r.bubble;
        snprintf(out->note, sizeof out->note, "%s", sched.note);
        pp_schedule_in_flight(&sched, out->in_flight);
        for (int k = 0; k < n; k++) {
            int d = sched.stage_device[k];
            out->stage_device[k] = d;
            out->device_bubble[k] = r.step_ms > 0 ? 1 - r.device_busy_ms[d] / r.step_ms : 0;
        }
        pp_sim_result_free(&r);
    }
    pp_schedule_free(&sched);
    /* the memory model's device peaks (--memory's figures) */
    pp_fit_stage *pred = s == PP_OK && plan->model.kind != PP_MODEL_DELAY
                             ? malloc((size_t)n * sizeof *pred)
                             : NULL;
    if (pred) {
        s = pp_fit_predict(plan, pred, err);
        for (int k = 0; s == PP_OK && k < n; k++) out->memory_bytes[k] = pred[k].device_peak;
    } else if (s == PP_OK && plan->model.kind != PP_MODEL_DELAY) {
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory");
    }
    free(pred);
    return s;
}

pp_status pp_pipeline_predict(const pp_plan *plan, double *step_ms, double *bubble,
                              double *stage_forward_ms, double *stage_backward_ms, pp_error *err)
{
    pp_pipeline_prediction *pr = malloc(sizeof *pr);
    if (!pr) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    pp_status s = pp_pipeline_predict_plan(plan, pr, err);
    if (s == PP_OK) {
        *step_ms = pr->step_ms;
        *bubble = pr->bubble;
        size_t bytes = (size_t)plan->n_stages * sizeof(double);
        if (stage_forward_ms) memcpy(stage_forward_ms, pr->forward_ms, bytes);
        if (stage_backward_ms) memcpy(stage_backward_ms, pr->backward_ms, bytes);
    }
    free(pr);
    return s;
}

/* cuDNN describes a tensor with int dimensions and strides: a tensor of more
 * than 2^31 - 1 elements cannot be described (cudnnSetTensor4dDescriptor
 * fails with CUDNN_STATUS_NOT_SUPPORTED). Checks every unit placed on a CUDA
 * device for its largest activation (input or output) at the plan's largest
 * micro-batch, from the catalogue, before anything is allocated, and names
 * the stage, layer, limit and the split size that would fit. */
#define CUDNN_MAX_ELEMENTS ((int64_t)INT32_MAX)

pp_status pipe_check_cudnn_limits(const pp_plan *plan, pp_error *err)
{
    if (plan->model.kind == PP_MODEL_DELAY || plan->stages_auto) return PP_OK;
    const pp_catalogue *cat = &plan->catalogue;
    int in_ndim;
    int64_t in_shape[PP_MAX_DIMS];
    pp_dtype in_dtype;
    pp_model_input(&plan->model, &in_ndim, in_shape, &in_dtype);
    int64_t in = in_shape[1] * in_shape[2] * in_shape[3];
    for (int s = 0; s < plan->n_stages; s++) {
        const pp_plan_stage *ps = &plan->stages[s];
        for (int u = ps->first; u >= 0 && u <= ps->last && u < cat->n; u++) {
            int64_t out = cat->units[u].out_bytes / 4;
            int64_t per_sample = in > out ? in : out;
            in = out;
            if (ps->device.kind != PP_DEVICE_CUDA ||
                per_sample * plan->split_size <= CUDNN_MAX_ELEMENTS)
                continue;
            char msg[512];
            snprintf(msg, sizeof msg,
                     "stage %d (%s): %s holds %lld elements per sample, %lld in a micro-batch "
                     "of %d: over cuDNN's limit of %lld elements per tensor; lower "
                     "batch.split_size to at most %lld",
                     s, ps->device_name, cat->units[u].name, (long long)per_sample,
                     (long long)(per_sample * plan->split_size), plan->split_size,
                     (long long)CUDNN_MAX_ELEMENTS, (long long)(CUDNN_MAX_ELEMENTS / per_sample));
            return pipe_plan_error(plan, plan->batch_mark, err, PP_ERR_INPUT, msg);
        }
    }
    return PP_OK;
}

/* Each stage's micro-batches in flight under the plan's schedule (its
 * placement and batch are known before the cut). */
static pp_status schedule_in_flight(const pp_plan *plan, int *in_flight, pp_error *err)
{
    pp_schedule sched;
    PP_TRY(pipe_fit_schedule(plan, &sched, err));
    if (sched.stages == plan->n_stages) pp_schedule_in_flight(&sched, in_flight);
    pp_schedule_free(&sched);
    return PP_OK;
}

pp_status pp_fit_resolve_plan(pp_plan *plan, pp_profile_note *note, pp_error *err)
{
    if (!plan) return pp_error_set(err, PP_ERR_INVALID, "pp_fit_resolve_plan: no plan (NULL)");
    if (!plan->stages_auto) return pipe_check_cudnn_limits(plan, err);
    int in_flight[PP_PLAN_MAX_STAGES];
    for (int s = 0; s < plan->n_stages; s++) in_flight[s] = pp_plan_in_flight(plan, s);
    PP_TRY(schedule_in_flight(plan, in_flight, err));
    if (plan->balance != PP_PLAN_BALANCE_TIME) {
        PP_TRY(pp_plan_resolve_auto_in_flight(plan, NULL, NULL, in_flight, err));
        return pipe_check_cudnn_limits(plan, err);
    }
    /* per-unit forward + backward on the plan's first device, from the
     * profile cache (so --validate, the run and the planner agree) */
    pp_unit_times t;
    PP_TRY(pp_fit_profile(plan, plan->stages[0].device, plan->split_size, &t, note, err));
    double *cost = calloc((size_t)t.n + 1, sizeof *cost);
    pp_status s = cost ? PP_OK : pp_error_set(err, PP_ERR_OOM, "out of host memory");
    for (int u = 0; cost && u < t.n; u++) cost[u] = t.forward_ms[u] + t.backward_ms[u];
    if (s == PP_OK) s = pp_plan_resolve_auto_in_flight(plan, NULL, cost, in_flight, err);
    free(cost);
    pp_unit_times_free(&t);
    return s == PP_OK ? pipe_check_cudnn_limits(plan, err) : s;
}

pp_status pp_pipeline_resolve_plan(pp_plan *plan, pp_error *err)
{
    if (!plan) return pp_error_set(err, PP_ERR_INVALID, "pp_pipeline_resolve_plan: no plan (NULL)");
    return pp_fit_resolve_plan(plan, NULL, err);
}
