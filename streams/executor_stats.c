/*
 * executor_stats.c - pass 3 of a step (executor.c): the records of every
 * lane gathered into pp_step_stats after the lanes are synchronized (spans,
 * per-stage busy time, copy and gradient time, bytes moved, bubble), and
 * pp_step_stats_free. Reads the executor; enqueues nothing.
 */
#include "streams/executor.h"
#include "streams/executor_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streams/program.h"

void pp_step_stats_free(pp_step_stats *st)
{
    if (!st) return;
    free(st->busy_ms);
    free(st->busy_frac);
    free(st->lanes);
    free(st->spans);
    memset(st, 0, sizeof *st);
}

/* The bytes a message between two ranks moved: the record of its launch
 * (run_message) carries none, so they come from its boundary (the lane)
 * and micro-batch (its label, "copy act 3 s0->s1", pp_prog_item_label). */
static size_t message_bytes(const pp_executor *ex, int lane, const char *label)
{
    int S = ex->S, m = ex->sched->micro_batches, i = -1;
    int b = lane < 2 * S - 1 ? lane - S : lane - (2 * S - 1);
    if (sscanf(label, "copy %*s %d", &i) != 1 || i < 0 || i >= m || b < 0 || b >= S - 1 ||
        b * m + i >= ex->shapes_cap)
        return 0;
    return pp_tensor_bytes(&ex->shapes[b * m + i]);
}

pp_status pp_executor_collect_stats(pp_executor *ex, int64_t t0, int64_t t1, int slots,
                                    pp_step_stats *out, pp_error *err)
{
    int S = ex->S;
    memset(out, 0, sizeof *out);
    size_t total = 0;
    for (int l = 0; l < ex->n_lanes; l++) {
        const pp_stream_record *r;
        size_t n;
        PP_TRY(pp_stream_records(ex->lanes[l], &r, &n, err));
        total += n;
    }
    out->busy_ms = calloc((size_t)S, sizeof *out->busy_ms);
    out->busy_frac = calloc((size_t)S, sizeof *out->busy_frac);
    size_t n_lanes = ex->n_lanes > 0 ? (size_t)ex->n_lanes : 1;
    out->lanes = calloc(n_lanes, sizeof *out->lanes);
    out->spans = malloc((total ? total : 1) * sizeof *out->spans);
    if (!out->busy_ms || !out->busy_frac || !out->lanes || !out->spans) {
        pp_step_stats_free(out);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (step stats)");
    }
    out->stages = S;
    out->devices = ex->sched->devices;
    out->micro_batches = ex->sched->micro_batches;
    out->slots = slots;
    out->t0_ns = t0;
    out->step_ms = (double)(t1 - t0) / 1e6;
    out->n_lanes = ex->n_lanes;
    for (int l = 0; l < ex->n_lanes; l++) {
        pp_stream *s = ex->lanes[l];
        pp_trace_lane *ln = &out->lanes[l];
        snprintf(ln->name, sizeof ln->name, "%s", pp_stream_name(s));
        snprintf(ln->device, sizeof ln->device, "%s", pp_stream_device(s)->name);
        ln->kind = pp_stream_get_kind(s);
        const pp_stream_record *r;
        size_t n;
        PP_TRY(pp_stream_records(s, &r, &n, err));
        for (size_t j = 0; j < n; j++) {
            pp_trace_span *sp = &out->spans[out->n_spans++];
            memcpy(sp->name, r[j].label, sizeof sp->name);
            sp->lane = l;
            sp->start_ns = r[j].start_ns;
            sp->end_ns = r[j].end_ns;
            sp->bytes = r[j].bytes;
            if (r[j].kind == PP_RECORD_LAUNCH && l >= S && l < 3 * S - 2)
                sp->bytes = message_bytes(ex, l, r[j].label); /* either half of a message */
            double ms = (double)(r[j].end_ns - r[j].start_ns) / 1e6;
            int st = l < S ? pp_prog_label_stage(r[j].label) : -1;
            if (l < S) {
                out->busy_ms[st >= 0 && st < S ? st : l] += ms;
            } else if (l >= 3 * S - 2) {
                out->grads_ms += ms;
            } else {
                out->copy_ms += ms;
                out->copy_bytes += sp->bytes;
            }
        }
    }
    out->n_actions = out->n_spans;
    double busy = 0.0;
    for (int s = 0; s < S; s++) {
        out->busy_frac[s] = out->step_ms > 0 ? out->busy_ms[s] / out->step_ms : 0.0;
        busy += out->busy_ms[s];
    }
    out->bubble = out->step_ms > 0 ? 1.0 - busy / ((double)out->devices * out->step_ms) : 0.0;
    return PP_OK;
}
