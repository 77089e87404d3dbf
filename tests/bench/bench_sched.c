/*
 * bench_sched.c - executor vs simulator on sleeping stages: for GPipe and
 * 1F1B, S in {2,4,8} and m in {1,4,8,16}, prints the predicted and measured
 * step time (median of REPS steps after one warm-up step) and bubble, the
 * prediction redone from the measured mean F and B durations of each step
 * (which separates the executor's own overhead from sleeps overshooting), and
 * where the executor's overhead goes along the measured critical path:
 *   start_us  first item's start - step start (host enqueue, first wake-up)
 *   deps      cross-lane dependencies on the critical path
 *   dep_us    their median latency (producer's end to consumer's start)
 *   lane_us   total gaps between back-to-back items of one lane on the path
 *   tail_us   step end - last item's end (host wake-up in synchronize)
 * Asserts nothing.
 *
 * usage: bench_sched [FORWARD_MS [BACKWARD_MS [REPS]]]   (defaults 1 2 5)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "streams/executor.h"
#include "streams/program.h"
#include "streams/schedule.h"
#include "streams/simulate.h"

enum { MAX_REPS = 100 };

typedef struct sleep_stage {
    double fwd_ms, bwd_ms;
} sleep_stage;

static pp_status sleep_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    t->dtype = PP_F32;
    t->ndim = 2;
    t->shape[0] = mb_size;
    t->shape[1] = 16;
    return PP_OK;
}

static pp_status sleep_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                               pp_tensor *out, pp_error *err)
{
    return pp_delay(ex, ((sleep_stage *)user)->fwd_ms, err);
}

static pp_status sleep_backward(void *user, pp_exec *ex, int mb, int mb_size,
                                const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    return pp_delay(ex, ((sleep_stage *)user)->bwd_ms, err);
}

static const pp_stage_ops sleep_ops = {sleep_shape, sleep_forward, sleep_backward, NULL, NULL};

/* Re-predicts one step from its measured mean F and B durations per stage. */
static double predict_measured(const pp_schedule *s, const pp_step_stats *st, pp_error *err)
{
    double fw[8] = {0}, bw[8] = {0};
    int nf[8] = {0}, nb[8] = {0};
    for (int j = 0; j < st->n_spans; j++) {
        const pp_trace_span *sp = &st->spans[j];
        if (sp->lane >= st->stages) continue;
        double ms = (double)(sp->end_ns - sp->start_ns) / 1e6;
        if (sp->name[0] == 'F') fw[sp->lane] += ms, nf[sp->lane]++;
        if (sp->name[0] == 'B') bw[sp->lane] += ms, nb[sp->lane]++;
    }
    for (int k = 0; k < st->stages; k++) {
        if (nf[k]) fw[k] /= nf[k];
        if (nb[k]) bw[k] /= nb[k];
    }
    pp_sim_costs c = {.stages = st->stages, .forward_ms = fw, .backward_ms = bw};
    pp_sim_result r;
    if (pp_simulate(s, &c, &r, err) != PP_OK) return -1.0;
    double ms = r.step_ms;
    pp_sim_result_free(&r);
    return ms;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The executor's overhead along the measured critical path of one step. */
typedef struct path_split {
    double start_us, lane_us, tail_us, dep_med_us;
    int deps;
} path_split;

/* Matches the program's items to the measured spans by label and walks back
 * from the last item to end: at each item, the predecessor that ended last
 * (previous item of its lane, or a dependency) is the one it waited for.
 * Items without a span (a STEP without a callback) take no time. */
static int split_path(const pp_schedule *s, const pp_step_stats *st, path_split *out,
                      pp_error *err)
{
    pp_program p;
    if (pp_program_build(s, st->slots, &p, err) != PP_OK) return -1;
    int n = p.n_items;
    int64_t *t0 = malloc((size_t)n * sizeof *t0), *t1 = malloc((size_t)n * sizeof *t1);
    int *prev = malloc((size_t)n * sizeof *prev), *last = malloc((size_t)p.n_lanes * sizeof *last);
    double *dep = malloc((size_t)n * sizeof *dep);
    if (!t0 || !t1 || !prev || !last || !dep) {
        free(t0), free(t1), free(prev), free(last), free(dep);
        pp_program_free(&p);
        return -1;
    }
    for (int l = 0; l < p.n_lanes; l++) last[l] = -1;
    for (int k = 0; k < n; k++) {
        const pp_prog_item *it = &p.items[k];
        char label[PP_STREAM_LABEL_MAX];
        pp_prog_item_label(it, label, sizeof label);
        prev[k] = last[it->lane];
        last[it->lane] = k;
        int64_t ready = st->t0_ns;
        if (prev[k] >= 0 && t1[prev[k]] > ready) ready = t1[prev[k]];
        for (int d = 0; d < it->ndeps; d++)
            if (t1[it->deps[d]] > ready) ready = t1[it->deps[d]];
        t0[k] = t1[k] = ready;
        for (int j = 0; j < st->n_spans; j++)
            if (st->spans[j].lane == it->lane && strcmp(st->spans[j].name, label) == 0) {
                t0[k] = st->spans[j].start_ns;
                t1[k] = st->spans[j].end_ns;
                break;
            }
    }
    int k = 0;
    for (int j = 1; j < n; j++)
        if (t1[j] > t1[k]) k = j;
    int64_t step_end = st->t0_ns + (int64_t)(st->step_ms * 1e6);
    memset(out, 0, sizeof *out);
    out->tail_us = (double)(step_end - t1[k]) / 1e3;
    for (;;) {
        const pp_prog_item *it = &p.items[k];
        int from = prev[k];
        for (int d = 0; d < it->ndeps; d++)
            if (from < 0 || t1[it->deps[d]] > t1[from]) from = it->deps[d];
        if (from < 0) {
            out->start_us = (double)(t0[k] - st->t0_ns) / 1e3;
            break;
        }
        double gap = (double)(t0[k] - t1[from]) / 1e3;
        if (from == prev[k]) out->lane_us += gap;
        else dep[out->deps++] = gap;
        k = from;
    }
    qsort(dep, (size_t)out->deps, sizeof *dep, cmp_double);
    out->dep_med_us = out->deps ? dep[out->deps / 2] : 0.0;
    free(t0), free(t1), free(prev), free(last), free(dep);
    pp_program_free(&p);
    return 0;
}

int main(int argc, char **argv)
{
    double f = argc > 1 ? atof(argv[1]) : 1.0;
    double b = argc > 2 ? atof(argv[2]) : 2.0;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (reps < 1 || reps > MAX_REPS || !(f >= 0) || !(b >= 0)) {
        fprintf(stderr, "usage: bench_sched [FORWARD_MS [BACKWARD_MS [REPS]]]\n");
        return 2;
    }
    pp_registry *reg;
    pp_error err;
    if (pp_registry_new(&reg, &err) != PP_OK) return 1;
    static const int Ss[] = {2, 4, 8}, ms[] = {1, 4, 8, 16};
    printf("forward %.2f ms, backward %.2f ms per micro-batch and stage, median of %d steps "
           "after one warm-up step\n", f, b, reps);
    printf("schedule  S   m  pred_ms  meas_ms  err_%%  bubble_pred  bubble_meas  "
           "pred_from_meas_ms  err_%%  start_us  deps  dep_us  lane_us  tail_us\n");
    double worst = 0.0;
    for (int kind = 0; kind < 2; kind++)
        for (size_t si = 0; si < 3; si++)
            for (size_t mi = 0; mi < 4; mi++) {
                int S = Ss[si], m = ms[mi];
                pp_schedule s;
                if (pp_schedule_build(&s, (pp_schedule_kind)kind, S, m, NULL, &err) != PP_OK)
                    goto fail;
                sleep_stage st[8];
                pp_stage_desc desc[8];
                double fw[8], bw[8];
                for (int k = 0; k < S; k++) {
                    pp_device_ctx *dev;
                    if (pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, k}, &dev, &err) != PP_OK)
                        goto fail;
                    st[k] = (sleep_stage){f, b};
                    fw[k] = f;
                    bw[k] = b;
                    desc[k] = (pp_stage_desc){dev, &sleep_ops, &st[k]};
                }
                pp_sim_costs c = {.stages = S, .forward_ms = fw, .backward_ms = bw};
                pp_sim_result pred;
                if (pp_simulate(&s, &c, &pred, &err) != PP_OK) goto fail;
                pp_executor *ex;
                if (pp_executor_new(desc, S, 0, &ex, &err) != PP_OK) goto fail;
                double t[MAX_REPS], bub[MAX_REPS], remeas[MAX_REPS];
                double start[MAX_REPS], depn[MAX_REPS], dep[MAX_REPS], lane[MAX_REPS];
                double tail[MAX_REPS];
                for (int r = -1; r < reps; r++) {
                    pp_step_stats stats;
                    if (pp_executor_run(ex, &s, &stats, &err) != PP_OK) goto fail;
                    if (r >= 0) {
                        path_split ps;
                        if (split_path(&s, &stats, &ps, &err) != 0) goto fail;
                        t[r] = stats.step_ms;
                        bub[r] = stats.bubble;
                        remeas[r] = predict_measured(&s, &stats, &err) - stats.step_ms;
                        start[r] = ps.start_us;
                        depn[r] = ps.deps;
                        dep[r] = ps.dep_med_us;
                        lane[r] = ps.lane_us;
                        tail[r] = ps.tail_us;
                    }
                    pp_step_stats_free(&stats);
                }
                double *cols[] = {t, bub, remeas, start, depn, dep, lane, tail};
                for (size_t q = 0; q < sizeof cols / sizeof cols[0]; q++)
                    qsort(cols[q], (size_t)reps, sizeof t[0], cmp_double);
                int h = reps / 2;
                double meas = t[h], re = meas + remeas[h];
                double e = 100.0 * (meas - pred.step_ms) / pred.step_ms;
                if (e > worst) worst = e;
                printf("%-8s %2d  %2d  %7.2f  %7.2f  %5.2f  %11.3f  %11.3f  %17.2f  %5.2f  "
                       "%8.0f  %4.0f  %6.0f  %7.0f  %7.0f\n",
                       s.name, S, m, pred.step_ms, meas, e, pred.bubble, bub[h], re,
                       100.0 * (meas - re) / re, start[h], depn[h], dep[h], lane[h], tail[h]);
                fflush(stdout);
                pp_sim_result_free(&pred);
                pp_executor_free(ex);
                pp_schedule_free(&s);
            }
    printf("worst error vs prediction: %.2f%%\n", worst);
    pp_registry_free(reg);
    return 0;
fail:
    fprintf(stderr, "bench_sched: %s\n", err.msg);
    pp_registry_free(reg);
    return 1;
}
