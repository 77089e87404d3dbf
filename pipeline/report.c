/*
 * report.c - what a pipeline tells about its steps (pipeline.h): per-stage and
 * per-replica figures (medians after warm-up), the schedule in text, and the
 * Chrome trace of the kept steps (one file per rank in a job).
 */
#include "pipeline/pipeline.h"
#include "pipeline/report.h"
#include "pipeline/prefetch.h"
#include "pipeline/planning.h"
#include "pipeline/replicas.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/stage.h"
#include "runtime/core/ops.h"
#include "runtime/io/data.h"
#include "runtime/train/optimizer.h"
#include "streams/executor.h"
#include "streams/schedule.h"
#include "streams/simulate.h"
#include "streams/trace.h"


static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[first..n) (first = 1 when n > 1: the warm-up step is excluded). */
static double median_after_warmup(const double *v, int n)
{
    if (n <= 0) return 0;
    int first = n > 1 ? 1 : 0;
    int k = n - first;
    double *tmp = malloc((size_t)k * sizeof(double));
    if (!tmp) return v[n - 1]; /* out of memory: the latest value stands in */
    memcpy(tmp, v + first, (size_t)k * sizeof(double));
    qsort(tmp, (size_t)k, sizeof(double), cmp_double);
    double m = k % 2 ? tmp[k / 2] : 0.5 * (tmp[k / 2 - 1] + tmp[k / 2]);
    free(tmp);
    return m;
}

/* The median after warm-up of boundary b's entries of v (steps_run x (S-1)). */
static double boundary_median(const pp_pipeline *p, const double *v, int b)
{
    int n = p->steps_run, B = p->n_stages - 1;
    if (n <= 0) return 0;
    double *col = malloc((size_t)n * sizeof *col);
    if (!col) return v[(n - 1) * B + b]; /* out of memory: the latest value stands in */
    for (int k = 0; k < n; k++) col[k] = v[k * B + b];
    double m = median_after_warmup(col, n);
    free(col);
    return m;
}

/* The simulator's step of the training schedule from the measured per-stage
 * costs of one micro-batch (first step excluded): a copy takes its
 * boundary's measured time, a message between two ranks latency + bytes /
 * bandwidth of the link measured at start (its spans wait for the peer, so
 * they would count compute as transfer). r is the caller's to free. */
static pp_status predict_measured(const pp_pipeline *p, pp_sim_result *r, pp_error *err)
{
    int n = p->steps_run, S = p->n_stages;
    double f[S], b[S], in[S], wt[S], copy[S];
    for (int s = 0; s < S; s++) {
        f[s] = median_after_warmup(p->stages[s].fwd_ms, n);
        b[s] = median_after_warmup(p->stages[s].bwd_ms, n);
        in[s] = median_after_warmup(p->stages[s].in_ms, n);
        wt[s] = median_after_warmup(p->stages[s].wt_ms, n);
        if (in[s] <= 0 && wt[s] <= 0) in[s] = wt[s] = b[s] / 2; /* no split measured */
        copy[s] = 0;
        if (s + 1 == S) continue;
        if (p->link_gbps && p->link_gbps[s] > 0)
            copy[s] = pp_sim_message_ms(boundary_median(p, p->bnd_bytes, s), p->link_gbps[s],
                                        p->link_latency_ms[s]);
        else
            copy[s] = boundary_median(p, p->bnd_ms, s);
    }
    return pipe_simulate(&p->schedule, S, f, b, in, wt, copy, 0, p->slots, r, err);
}

void pp_pipeline_stage_report(const pp_pipeline *p, int stage, pp_stage_report *out)
{
    memset(out, 0, sizeof *out);
    if (stage < 0 || stage >= p->n_stages) return;
    const pipe_stage *st = &p->stages[stage];
    out->rank = p->stage_rank[stage];
    if (stage_here(p, stage))
        snprintf(out->device, sizeof out->device, "%s", st->dev->name);
    else
        snprintf(out->device, sizeof out->device, "%s", st->device_name);
    out->params = pp_stage_num_params(st->model);
    out->n_layers = st->n_layers;
    out->layers = st->layers;
    out->forward_ms = median_after_warmup(st->fwd_ms, p->steps_run);
    out->backward_ms = median_after_warmup(st->bwd_ms, p->steps_run);
    out->input_ms = median_after_warmup(st->in_ms, p->steps_run);
    out->weight_ms = median_after_warmup(st->wt_ms, p->steps_run);
    out->busy_frac = median_after_warmup(st->busy, p->steps_run);
    out->grads_ms = median_after_warmup(st->grads_ms, p->steps_run);
    out->peak_bytes = stage_here(p, stage) ? pp_device_peak_bytes(st->dev) : st->peak_bytes;
    out->max_in_flight = st->max_in_flight;
    if (stage + 1 < p->n_stages && p->link_gbps) {
        out->link_gbps = p->link_gbps[stage];
        out->link_latency_ms = p->link_latency_ms[stage];
    }
    out->schedule_device = p->schedule.stage_device[stage];
    out->in_flight = p->in_flight ? p->in_flight[stage] : 0;
    pp_sim_result r;
    pp_error err;
    if (p->steps_run > 0 && predict_measured(p, &r, &err) == PP_OK) {
        double busy = r.device_busy_ms[out->schedule_device];
        out->bubble_predicted = r.step_ms > 0 ? 1 - busy / r.step_ms : 0;
        pp_sim_result_free(&r);
    }
}

/* The median after warm-up of replica r's entries of v (steps_run x replicas). */
static double replica_median(const pp_pipeline *p, const double *v, int r)
{
    int n = p->steps_run;
    double col[n > 0 ? n : 1];
    for (int k = 0; k < n; k++) col[k] = v[k * p->replicas + r];
    return median_after_warmup(col, n);
}

void pp_pipeline_replica_report(const pp_pipeline *p, int replica, pp_replica_report *out)
{
    memset(out, 0, sizeof *out);
    if (replica < 0 || replica >= p->replicas) return;
    for (int s = 0; s < p->n_stages && s < PP_PLAN_MAX_STAGES; s++) {
        int rank = p->in_process ? 0 : p->rep_rank[replica * p->n_stages + s], seen = 0;
        for (int i = 0; i < out->n_ranks; i++) seen |= out->ranks[i] == rank;
        if (!seen) out->ranks[out->n_ranks++] = rank;
    }
    int off, size;
    if (p->replicas > 1)
        pipe_replica_piece(p->batch, p->replicas, replica, &off, &size);
    else
        size = p->batch;
    out->batch = size;
    out->step_ms = replica_median(p, p->rep_step_ms, replica);
    out->run_ms = replica_median(p, p->rep_run_ms, replica);
    out->images_per_s = out->step_ms > 0 ? size * 1000.0 / out->step_ms : 0;
}

void pp_pipeline_report_get(const pp_pipeline *p, pp_pipeline_report *out)
{
    memset(out, 0, sizeof *out);
    out->devices = p->schedule.devices;
    out->schedule = p->schedule.name;
    out->schedule_note = p->schedule.note[0] ? p->schedule.note : NULL;
    int n = p->steps_run;
    out->steps = n;
    if (n == 0) return;
    int first = n > 1 ? 1 : 0;
    out->step_ms_min = out->step_ms_max = p->step_ms[first];
    for (int i = first; i < n; i++) {
        if (p->step_ms[i] < out->step_ms_min) out->step_ms_min = p->step_ms[i];
        if (p->step_ms[i] > out->step_ms_max) out->step_ms_max = p->step_ms[i];
    }
    out->step_ms_median = median_after_warmup(p->step_ms, n);
    out->images_per_s = out->step_ms_median > 0 ? p->batch * 1000.0 / out->step_ms_median : 0;
    out->bubble_frac = median_after_warmup(p->bubble, n);
    out->copy_bytes = (size_t)llround(median_after_warmup(p->copy_bytes, n));
    out->ranks = p->in_process ? 1 : pp_comm_size(p->comm);
    out->replicas = p->replicas;
    out->copy_ms = median_after_warmup(p->copy_ms, n);
    out->graphs = p->graphs_mode == 1 ? "on" : p->graphs_mode == 2 ? "off" : "n/a";
    out->graph_captures = p->graph_captures;
    out->graph_replays = p->graph_replays;
    out->graph_launches = p->graph_launches;
    out->graph_refusal = pp_executor_graph_refusal(p->exec);
    out->data_wait_ms = median_after_warmup(p->data_ms, n);
    out->data_workers = pipe_prefetch_threads(p->prefetch);
    out->data_prefetch = pipe_prefetch_ahead(p->prefetch);
    pp_pipeline *q = (pp_pipeline *)p; /* the sources count under their own locks */
    char eval_first[sizeof q->bad_first];
    out->bad_images = pp_data_bad_images(q->data, q->bad_first, sizeof q->bad_first);
    if (q->eval_data) {
        out->bad_images += pp_data_bad_images(q->eval_data, eval_first, sizeof eval_first);
        if (!q->bad_first[0]) memcpy(q->bad_first, eval_first, sizeof eval_first);
    }
    out->bad_image_first = q->bad_first[0] ? q->bad_first : NULL;
    if (q->data && pp_data_tokenizing_of(q->data, &q->tokenizing)) {
        out->text_tokens = q->tokenizing.tokens;
        out->text_from_cache = q->tokenizing.from_cache;
        out->text_cached = q->tokenizing.cached;
        out->text_tokenize_s = q->tokenizing.seconds;
        out->text_cache_path = q->tokenizing.cache_path[0] ? q->tokenizing.cache_path : NULL;
        out->text_cache_evicted = q->tokenizing.evicted;
        out->text_cache_evicted_bytes = q->tokenizing.evicted_bytes;
    }
    if (q->eval_data && pp_data_tokenizing_of(q->eval_data, &q->eval_tokenizing)) {
        const pp_data_tokenizing *e = &q->eval_tokenizing;
        out->eval_text_tokens = e->tokens;
        out->eval_text_from_cache = e->from_cache;
        out->eval_text_cached = e->cached;
        out->eval_text_tokenize_s = e->seconds;
        out->eval_text_cache_path = e->cache_path[0] ? e->cache_path : NULL;
        out->text_cache_evicted += e->evicted;
        out->text_cache_evicted_bytes += e->evicted_bytes;
    }

    pp_sim_result r;
    pp_error err;
    if (predict_measured(p, &r, &err) == PP_OK) {
        out->predicted_step_ms = r.step_ms;
        out->bubble_frac_predicted = r.bubble;
        pp_sim_result_free(&r);
    }
}

size_t pp_pipeline_format_schedule(const pp_pipeline *p, char *buf, size_t n)
{
    return pp_schedule_format(&p->schedule, false, buf, n);
}

/* Rank R's trace file in a job: path with ".rankR" before its extension
 * (run.json -> run.rank1.json), or after it when it has none. */
static pp_status rank_path(const char *path, int rank, char *out, size_t n, pp_error *err)
{
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash) || dot == (slash ? slash + 1 : path))
        dot = path + strlen(path);
    int k = snprintf(out, n, "%.*s.rank%d%s", (int)(dot - path), path, rank, dot);
    if (k < 0 || (size_t)k >= n)
        return pp_error_set(err, PP_ERR_INPUT, "%s: path too long for rank %d's trace", path,
                            rank);
    return PP_OK;
}

pp_status pipe_write_trace_rank(const pp_pipeline *p, const char *path, pp_error *err)
{
    if (!p->keep_trace)
        return pp_error_set(err, PP_ERR_INVALID,
                            "pp_pipeline_write_trace: the pipeline was made without keep_trace");
    if (!path) return pp_error_set(err, PP_ERR_INVALID, "pp_pipeline_write_trace: no path");
    if (pp_comm_size(p->comm) < 2) return pp_trace_write_chrome(path, p->trace, p->n_trace, err);
    /* a job: every rank's file on rank 0's clock (clocks.c) */
    pp_trace_clock clock = {.rank = p->rank, .offset_ns = p->clock_offset_ns,
                            .uncertainty_ns = p->clock_uncertainty_ns,
                            .origin_ns = p->clock_origin_ns};
    char mine[4096];
    if (p->rank > 0) PP_TRY(rank_path(path, p->rank, mine, sizeof mine, err));
    return pp_trace_write_chrome_aligned(p->rank > 0 ? mine : path, p->trace, p->n_trace,
                                         &clock, err);
}

/* In a job, a kept step's lanes name their rank with their device
 * ("rank1 cpu:0"), so each rank's trace says whose streams it holds. */
void pipe_name_rank_lanes(const pp_pipeline *p, pp_step_stats *st)
{
    if (pp_comm_size(p->comm) < 2) return;
    for (int l = 0; l < st->n_lanes; l++) {
        char dev[sizeof st->lanes[l].device];
        memcpy(dev, st->lanes[l].device, sizeof dev);
        snprintf(st->lanes[l].device, sizeof st->lanes[l].device, "rank%d %.9s", p->rank, dev);
    }
}
