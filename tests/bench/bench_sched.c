/*
 * bench_sched.c - executor vs simulator on sleeping stages: for GPipe and
 * 1F1B, S in {2,4,8} and m in {1,4,8,16}, prints the predicted and measured
 * step time (median of REPS steps) and bubble, and the prediction redone from
 * the measured mean F and B durations of that step (which separates the
 * executor's own overhead from sleeps overshooting). Asserts nothing.
 *
 * usage: bench_sched [FORWARD_MS [BACKWARD_MS [REPS]]]   (defaults 1 2 3)
 */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "streams/executor.h"
#include "streams/schedule.h"
#include "streams/simulate.h"

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

static const pp_stage_ops sleep_ops = {sleep_shape, sleep_forward, sleep_backward, NULL};

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

int main(int argc, char **argv)
{
    double f = argc > 1 ? atof(argv[1]) : 1.0;
    double b = argc > 2 ? atof(argv[2]) : 2.0;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    if (reps < 1 || reps > 100 || !(f >= 0) || !(b >= 0)) {
        fprintf(stderr, "usage: bench_sched [FORWARD_MS [BACKWARD_MS [REPS]]]\n");
        return 2;
    }
    pp_registry *reg;
    pp_error err;
    if (pp_registry_new(&reg, &err) != PP_OK) return 1;
    static const int Ss[] = {2, 4, 8}, ms[] = {1, 4, 8, 16};
    printf("forward %.2f ms, backward %.2f ms per micro-batch and stage, median of %d steps\n",
           f, b, reps);
    printf("schedule  S   m  predicted_ms  measured_ms  error_%%  bubble_pred  bubble_meas  "
           "pred_from_measured_ms  error_%%\n");
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
                double t[100], bub[100], remeas[100];
                for (int r = 0; r < reps; r++) {
                    pp_step_stats stats;
                    if (pp_executor_run(ex, &s, &stats, &err) != PP_OK) goto fail;
                    t[r] = stats.step_ms;
                    bub[r] = stats.bubble;
                    remeas[r] = predict_measured(&s, &stats, &err) - stats.step_ms;
                    pp_step_stats_free(&stats);
                }
                qsort(t, (size_t)reps, sizeof t[0], cmp_double);
                qsort(bub, (size_t)reps, sizeof bub[0], cmp_double);
                qsort(remeas, (size_t)reps, sizeof remeas[0], cmp_double);
                double meas = t[reps / 2], re = meas + remeas[reps / 2];
                printf("%-8s %2d  %2d  %12.2f  %11.2f  %7.2f  %11.3f  %11.3f  %21.2f  %7.2f\n",
                       s.name, S, m, pred.step_ms, meas,
                       100.0 * (meas - pred.step_ms) / pred.step_ms, pred.bubble, bub[reps / 2],
                       re, 100.0 * (meas - re) / re);
                fflush(stdout);
                pp_sim_result_free(&pred);
                pp_executor_free(ex);
                pp_schedule_free(&s);
            }
    pp_registry_free(reg);
    return 0;
fail:
    fprintf(stderr, "bench_sched: %s\n", err.msg);
    pp_registry_free(reg);
    return 1;
}
