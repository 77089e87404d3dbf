/*
 * schedules.c - the plan's schedule program (pipeline.h): the stages placed
 * on the plan's devices (stages that repeat a device share it: virtual
 * stages), the built-in the plan names or the program its file holds, made
 * for any batch the pipeline runs (the training batch, an epoch's smaller
 * last batch, evaluation's forward-only batches), with the batch's
 * micro-batches (batch_run).
 */
#include "pipeline/pipeline.h"
#include "pipeline/schedules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/batch_split.h"
#include "streams/schedule.h"

/* The plan's schedule as the runtime's kind (PP_PLAN_SCHEDULE_FILE has none). */
static pp_schedule_kind kind_of(pp_plan_schedule s)
{
    switch (s) {
    case PP_PLAN_SCHEDULE_1F1B: return PP_SCHEDULE_1F1B;
    case PP_PLAN_SCHEDULE_INTERLEAVED_1F1B: return PP_SCHEDULE_INTERLEAVED_1F1B;
    case PP_PLAN_SCHEDULE_LOOPED_BFS: return PP_SCHEDULE_LOOPED_BFS;
    case PP_PLAN_SCHEDULE_INTERLEAVED_ZB: return PP_SCHEDULE_INTERLEAVED_ZB;
    case PP_PLAN_SCHEDULE_ZBH1: return PP_SCHEDULE_ZBH1;
    case PP_PLAN_SCHEDULE_ZBH2: return PP_SCHEDULE_ZBH2;
    case PP_PLAN_SCHEDULE_ZBV: return PP_SCHEDULE_ZBV;
    case PP_PLAN_SCHEDULE_DUALPIPEV: return PP_SCHEDULE_DUALPIPEV;
    default: return PP_SCHEDULE_GPIPE;
    }
}

/* Every replica places its stages alike: two stages share a device in one
 * replica exactly when they do in replica 0. */
static pp_status check_replicas(const pp_plan *plan, const int *stage_device, pp_error *err)
{
    for (int r = 1; r < plan->replicas; r++)
        for (int a = 0; a < plan->n_stages; a++)
            for (int b = a + 1; b < plan->n_stages; b++) {
                const pp_plan_stage *sa = &plan->stages[a], *sb = &plan->stages[b];
                bool here = sa->replica_rank[r] == sb->replica_rank[r] &&
                            sa->replica_device[r].kind == sb->replica_device[r].kind &&
                            sa->replica_device[r].index == sb->replica_device[r].index;
                if (here == (stage_device[a] == stage_device[b])) continue;
                char msg[320];
                snprintf(msg, sizeof msg, "stages %d and %d are %son one device in replica %d "
                         "but %son one in replica 0: every replica places its stages alike (the "
                         "schedule places them once)", a, b, here ? "" : "not ", r,
                         here ? "not " : "");
                return pipe_plan_error(plan, sb->replica_mark[r], err, PP_ERR_INPUT, msg);
            }
    return PP_OK;
}

pp_status pipe_sched_init(pipe_sched *ps, const pp_plan *plan, int m, const int *sizes,
                          pp_error *err)
{
    memset(ps, 0, sizeof *ps);
    ps->plan_kind = plan->schedule;
    ps->kind = kind_of(plan->schedule);
    ps->stages = plan->n_stages;
    ps->devices = pp_plan_devices(plan, ps->stage_device);
    PP_TRY(check_replicas(plan, ps->stage_device, err));
    pp_schedule_shape shape = {ps->stages, ps->devices, m, ps->stage_device, sizes};
    pp_schedule s;
    if (plan->schedule == PP_PLAN_SCHEDULE_FILE) {
        pp_status st = pp_schedule_load_csv(plan->schedule_file, &shape, &ps->file, err);
        if (st == PP_OK) ps->has_file = true;
        return st;
    }
    /* a built-in: its placement fits the plan's (checked now, at the plan) */
    pp_status st = pp_schedule_generate(&s, ps->kind, &shape, err);
    if (st == PP_OK) {
        pp_schedule_free(&s);
        return PP_OK;
    }
    if (st != PP_ERR_INPUT || !err) return st; /* no message wanted (NULL): the status alone */
    char msg[PP_ERROR_MSG_MAX + 160];
    snprintf(msg, sizeof msg, "%.700s (list the stages' devices in the order the schedule "
             "places them, or choose a schedule for this placement: docs/SCHEDULES.md)", err->msg);
    return pipe_plan_error(plan, plan->schedule_mark, err, PP_ERR_INPUT, msg);
}

void pipe_sched_free(pipe_sched *ps)
{
    if (ps->has_file) pp_schedule_free(&ps->file);
    memset(ps, 0, sizeof *ps);
}

pp_status pipe_sched_make(const pipe_sched *ps, int m, const int *sizes, bool forward_only,
                          pp_schedule *out, pp_error *err)
{
    pp_schedule_shape shape = {ps->stages, ps->devices, m, ps->stage_device, sizes};
    if (forward_only) return pp_schedule_generate(out, PP_SCHEDULE_FORWARD, &shape, err);
    if (!ps->has_file) return pp_schedule_generate(out, ps->kind, &shape, err);
    if (m > ps->file.micro_batches)
        return pp_error_set(err, PP_ERR_INPUT, "%s: the program runs %d micro-batches, the "
                            "batch has %d", ps->file.source, ps->file.micro_batches, m);
    return pp_schedule_truncate(&ps->file, m, sizes, out, err);
}

/* ---- batches of other sizes --------------------------------------------------- */

void pipe_batch_run_free(batch_run *r)
{
    free(r->sizes);
    free(r->offsets);
    free(r->first_bw);
    pp_schedule_free(&r->sched);
    memset(r, 0, sizeof *r);
}

bool pipe_first_backward(const pp_schedule *s, int **first_bw)
{
    int *f = malloc((size_t)s->stages * sizeof *f);
    if (!f) return false;
    for (int k = 0; k < s->stages; k++) f[k] = -1;
    for (int d = 0; d < s->devices; d++)
        for (int k = 0; k < s->n_actions[d]; k++) {
            pp_action a = s->actions[d][k];
            if ((a.kind == PP_ACT_B || a.kind == PP_ACT_W) && f[a.stage] < 0) f[a.stage] = a.mb;
        }
    *first_bw = f;
    return true;
}

/* Cuts a batch of `batch` samples by the plan's rule (fewer pieces when the
 * batch is smaller than the number of micro-batches asked for) and makes
 * the plan's schedule (or its forward-only pass) over them. */
pp_status pipe_batch_run_make(const struct pp_pipeline *p, batch_run *r, int batch,
                              bool forward_only, pp_error *err)
{
    pipe_batch_run_free(r);
    int micro = p->micro_batches > batch ? batch : p->micro_batches;
    int split = p->split_size > 0 && micro == 0 ? p->split_size : 0;
    r->batch = batch;
    r->m = pp_batch_split_count(batch, split, micro);
    r->sizes = malloc((size_t)r->m * sizeof *r->sizes);
    r->offsets = malloc((size_t)r->m * sizeof *r->offsets);
    if (!r->sizes || !r->offsets) {
        pipe_batch_run_free(r);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    }
    pp_batch_split_sizes(batch, split, micro, r->sizes);
    for (int i = 0, off = 0; i < r->m; off += r->sizes[i], i++) r->offsets[i] = off;
    pp_status s = pipe_sched_make(&p->sched, r->m, r->sizes, forward_only, &r->sched, err);
    if (s == PP_OK && !pipe_first_backward(&r->sched, &r->first_bw))
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory");
    if (s != PP_OK) pipe_batch_run_free(r);
    return s;
}

pp_status pp_pipeline_plan_schedule(const pp_plan *plan, pp_schedule *out, pp_error *err)
{
    if (!out) return pp_error_set(err, PP_ERR_INVALID, "pp_pipeline_plan_schedule: out is NULL");
    memset(out, 0, sizeof *out);
    if (!plan || plan->stages_auto)
        return pp_error_set(err, PP_ERR_INVALID, "pp_pipeline_plan_schedule: %s",
                            plan ? "the plan's automatic stages are not resolved" : "no plan");
    pipe_sched ps;
    PP_TRY(pipe_sched_init(&ps, plan, plan->micro_batches, plan->micro_sizes, err));
    pp_status st = pipe_sched_make(&ps, plan->micro_batches, plan->micro_sizes, false, out, err);
    pipe_sched_free(&ps);
    return st;
}
