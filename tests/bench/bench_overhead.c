/*
 * bench_overhead.c - per-action overhead of streams and the executor on CPU:
 * empty launches on one stream, an event ping-pong between two streams, and
 * full executor steps over empty stages (tiny activations), reported as
 * microseconds per action. Asserts nothing.
 *
 * usage: bench_overhead [STEPS]   (default 20)
 */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/core/device.h"
#include "streams/executor.h"
#include "streams/schedule.h"
#include "streams/stream.h"

static pp_status nothing(pp_exec *ex, void *arg, pp_error *err)
{
    return PP_OK;
}

static pp_status empty_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    t->dtype = PP_F32;
    t->ndim = 1;
    t->shape[0] = mb_size;
    return PP_OK;
}

static pp_status empty_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                               pp_tensor *out, pp_error *err)
{
    return PP_OK;
}

static pp_status empty_backward(void *user, pp_exec *ex, int mb, int mb_size,
                                const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    return PP_OK;
}

static const pp_stage_ops empty_ops = {empty_shape, empty_forward, empty_backward, NULL, NULL};

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    if (steps < 1) steps = 1;
    pp_registry *reg;
    pp_error err;
    pp_device_ctx *dev[8];
    if (pp_registry_new(&reg, &err) != PP_OK) return 1;
    for (int k = 0; k < 8; k++)
        if (pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, k}, &dev[k], &err) != PP_OK)
            goto fail;

    /* 1. empty launches on one stream, enqueued ahead */
    {
        enum { N = 200000 };
        pp_stream *s;
        if (pp_stream_new(dev[0], PP_STREAM_COMPUTE, "bench", &s, &err) != PP_OK) goto fail;
        for (int round = 0; round < 2; round++) { /* the first round grows the buffers */
            int64_t t0 = pp_stream_clock_ns();
            for (int i = 0; i < N; i++)
                if (pp_stream_launch(s, "empty", nothing, NULL, &err) != PP_OK) goto fail;
            if (pp_stream_synchronize(s, &err) != PP_OK) goto fail;
            int64_t t1 = pp_stream_clock_ns();
            pp_stream_records_clear(s);
            if (round == 1)
                printf("stream launch (empty fn, %d queued ahead): %.3f us per launch\n", N,
                       (double)(t1 - t0) / 1e3 / N);
        }
        pp_stream_free(s);
    }

    /* 2. ping-pong: each launch waits for the other stream's previous one */
    {
        enum { N = 20000 };
        pp_stream *a, *b;
        pp_event *ea, *eb;
        if (pp_stream_new(dev[0], PP_STREAM_COMPUTE, "a", &a, &err) != PP_OK ||
            pp_stream_new(dev[1], PP_STREAM_COMPUTE, "b", &b, &err) != PP_OK ||
            pp_event_new(dev[0], &ea, &err) != PP_OK || pp_event_new(dev[1], &eb, &err) != PP_OK)
            goto fail;
        int64_t t0 = pp_stream_clock_ns();
        for (int i = 0; i < N; i++) {
            if (pp_stream_wait_event(a, eb, &err) != PP_OK ||
                pp_stream_launch(a, "ping", nothing, NULL, &err) != PP_OK ||
                pp_event_record(ea, a, &err) != PP_OK || pp_stream_wait_event(b, ea, &err) != PP_OK ||
                pp_stream_launch(b, "pong", nothing, NULL, &err) != PP_OK ||
                pp_event_record(eb, b, &err) != PP_OK)
                goto fail;
        }
        if (pp_stream_synchronize(a, &err) != PP_OK || pp_stream_synchronize(b, &err) != PP_OK)
            goto fail;
        int64_t t1 = pp_stream_clock_ns();
        printf("event ping-pong between two streams: %.3f us per dependent launch\n",
               (double)(t1 - t0) / 1e3 / (2.0 * N));
        pp_event_free(ea);
        pp_event_free(eb);
        pp_stream_free(a);
        pp_stream_free(b);
    }

    /* 3. executor steps over empty stages */
    printf("executor, empty stages (median over %d steps):\n", steps);
    printf("schedule  S   m  actions  step_us  us_per_action\n");
    static const int Ss[] = {1, 2, 4, 8}, ms[] = {1, 8, 32};
    for (int kind = 0; kind < 2; kind++)
        for (size_t si = 0; si < 4; si++)
            for (size_t mi = 0; mi < 3; mi++) {
                int S = Ss[si], m = ms[mi];
                pp_schedule s;
                if (pp_schedule_build(&s, (pp_schedule_kind)kind, S, m, NULL, &err) != PP_OK)
                    goto fail;
                pp_stage_desc desc[8];
                for (int k = 0; k < S; k++) desc[k] = (pp_stage_desc){dev[k], &empty_ops, NULL};
                pp_executor *ex;
                if (pp_executor_new(desc, S, 0, &ex, &err) != PP_OK) goto fail;
                double *t = malloc((size_t)steps * sizeof *t);
                int actions = 0;
                for (int r = 0; r < steps; r++) {
                    pp_step_stats stats;
                    if (pp_executor_run(ex, &s, &stats, &err) != PP_OK) {
                        free(t);
                        goto fail;
                    }
                    t[r] = stats.step_ms * 1e3;
                    actions = stats.n_actions;
                    pp_step_stats_free(&stats);
                }
                for (int i = 1; i < steps; i++)
                    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                        double x = t[j]; t[j] = t[j - 1]; t[j - 1] = x;
                    }
                double med = t[steps / 2];
                printf("%-8s %2d  %2d  %7d  %7.1f  %13.2f\n", s.name, S, m, actions, med,
                       med / actions);
                free(t);
                pp_executor_free(ex);
                pp_schedule_free(&s);
            }
    pp_registry_free(reg);
    return 0;
fail:
    fprintf(stderr, "bench_overhead: %s\n", err.msg);
    pp_registry_free(reg);
    return 1;
}
