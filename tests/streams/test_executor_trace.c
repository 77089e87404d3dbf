/*
 * test_executor_trace.c - what the executor reports, on synthetic stages
 * (toy_stage.h): stats and the Chrome trace (its JSON field by field from
 * hand-made steps), and sleeping stages whose measured step time must match
 * the simulator's prediction.
 */
#define PP_CHECK_COUNTERS
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/core/device.h"
#include "streams/executor.h"
#include "streams/schedule.h"
#include "streams/simulate.h"
#include "tests/check.h"
#include "tests/streams/toy_stage.h"

static void test_trace(void)
{
    pp_schedule s;
    pp_error err;
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_1F1B, 2, 3, NULL, &err), &err);
    toy_stage st[2];
    pp_stage_desc desc[2];
    setup_stages(st, desc, 2, (int[]){0, 1}, &s);
    pp_executor *ex;
    CHECK_OK(pp_executor_new(desc, 2, 0, &ex, &err), &err);
    pp_step_stats steps[2];
    CHECK_OK(pp_executor_run(ex, &s, &steps[0], &err), &err);
    CHECK_OK(pp_executor_run(ex, &s, &steps[1], &err), &err);
    char dir[256], path[300];
    const bool made = check_mkdtemp(dir, sizeof dir, "pp_trace") != NULL;
    CHECK(made);
    snprintf(path, sizeof path, "%s/trace.json", dir);
    if (made) {
        CHECK_OK(pp_trace_write_chrome(path, steps, 2, &err), &err);
        json_error_t jerr;
        json_t *root = json_load_file(path, 0, &jerr);
        CHECK_MSG(root != NULL, "trace is not JSON: %s", jerr.text);
        if (root) {
            json_t *evs = json_object_get(root, "traceEvents");
            int x = 0, names = 0, f0 = 0, threads = 0;
            size_t i;
            json_t *e;
            json_array_foreach(evs, i, e) {
                const char *ph = json_string_value(json_object_get(e, "ph"));
                const char *name = json_string_value(json_object_get(e, "name"));
                if (ph && strcmp(ph, "X") == 0) {
                    x++;
                    if (name && strcmp(name, "F0 stage0") == 0) f0++;
                    CHECK(json_number_value(json_object_get(e, "dur")) >= 0);
                } else if (name && strcmp(name, "process_name") == 0) {
                    names++;
                } else if (name && strcmp(name, "thread_name") == 0) {
                    threads++;
                }
            }
            CHECK(x == steps[0].n_spans + steps[1].n_spans);
            CHECK(f0 == 2 && names == 2 && threads == 4);
            json_decref(root);
        }
        unlink(path);
        rmdir(dir);
    }
    CHECK(pp_trace_write_chrome("/nonexistent-dir/trace.json", steps, 2, &err) == PP_ERR_IO);
    pp_step_stats_free(&steps[0]);
    pp_step_stats_free(&steps[1]);
    pp_executor_free(ex);
    pp_schedule_free(&s);
}

/* The trace's JSON, field by field, from hand-made steps with known times:
 * metadata naming each device (process) and stream (thread, one per lane),
 * then one complete event per span with ts and dur in microseconds from
 * steps[0].t0_ns, its step and bytes, and how its step ran (eager, captured or
 * replayed from a graph); lanes on one device share that device's pid (the
 * index of its first lane). */
typedef struct trace_meta {
    const char *what; /* process_name, thread_name, thread_sort_index */
    int pid, tid;
    const char *name; /* args.name; NULL: args.sort_index == tid */
} trace_meta;

typedef struct trace_x {
    const char *name, *cat;
    int pid, tid;
    double ts, dur; /* microseconds */
    int step;
    json_int_t bytes;
    const char *graph; /* args.graph; NULL: "eager" */
} trace_x;

static void check_trace_file(const char *path, const trace_meta *meta, int n_meta,
                             const trace_x *xs, int n_x)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    CHECK_MSG(root != NULL, "%s is not JSON: %s", path, jerr.text);
    if (!root) return;
    CHECK(json_object_size(root) == 2);
    CHECK(strcmp(json_string_value(json_object_get(root, "displayTimeUnit")), "ms") == 0);
    json_t *evs = json_object_get(root, "traceEvents");
    CHECK_MSG(json_array_size(evs) == (size_t)(n_meta + n_x), "%zu events",
              json_array_size(evs));
    for (int i = 0; i < n_meta && (size_t)i < json_array_size(evs); i++) {
        const trace_meta *m = &meta[i];
        json_t *e = json_array_get(evs, (size_t)i), *args = json_object_get(e, "args");
        CHECK_MSG(json_object_size(e) == 5 && json_object_size(args) == 1, "metadata %d", i);
        CHECK(strcmp(json_string_value(json_object_get(e, "ph")), "M") == 0);
        CHECK_MSG(strcmp(json_string_value(json_object_get(e, "name")), m->what) == 0,
                  "metadata %d is %s, not %s", i, json_string_value(json_object_get(e, "name")),
                  m->what);
        CHECK_MSG(json_integer_value(json_object_get(e, "pid")) == m->pid &&
                      json_integer_value(json_object_get(e, "tid")) == m->tid,
                  "metadata %d (%s): pid %d tid %d expected", i, m->what, m->pid, m->tid);
        if (m->name)
            CHECK_MSG(strcmp(json_string_value(json_object_get(args, "name")), m->name) == 0,
                      "metadata %d: name %s expected", i, m->name);
        else
            CHECK(json_integer_value(json_object_get(args, "sort_index")) == m->tid);
    }
    for (int i = 0; i < n_x && (size_t)(n_meta + i) < json_array_size(evs); i++) {
        const trace_x *x = &xs[i];
        json_t *e = json_array_get(evs, (size_t)(n_meta + i)), *args = json_object_get(e, "args");
        CHECK_MSG(json_object_size(e) == 8 && json_object_size(args) == 3, "span %d: keys", i);
        const char *graph = json_string_value(json_object_get(args, "graph"));
        CHECK_MSG(graph && strcmp(graph, x->graph ? x->graph : "eager") == 0,
                  "span %d: graph %s", i, graph ? graph : "(none)");
        CHECK(strcmp(json_string_value(json_object_get(e, "ph")), "X") == 0);
        CHECK_MSG(strcmp(json_string_value(json_object_get(e, "name")), x->name) == 0 &&
                      strcmp(json_string_value(json_object_get(e, "cat")), x->cat) == 0,
                  "span %d: %s (%s) expected", i, x->name, x->cat);
        CHECK_MSG(json_integer_value(json_object_get(e, "pid")) == x->pid &&
                      json_integer_value(json_object_get(e, "tid")) == x->tid,
                  "span %d (%s): pid %d tid %d expected", i, x->name, x->pid, x->tid);
        double ts = json_number_value(json_object_get(e, "ts"));
        double dur = json_number_value(json_object_get(e, "dur"));
        CHECK_MSG(fabs(ts - x->ts) < 1e-9 && fabs(dur - x->dur) < 1e-9,
                  "span %d (%s): ts %.3f dur %.3f, expected %.3f %.3f", i, x->name, ts, dur,
                  x->ts, x->dur);
        CHECK_MSG(json_integer_value(json_object_get(args, "step")) == x->step &&
                      json_integer_value(json_object_get(args, "bytes")) == x->bytes,
                  "span %d (%s): step %d bytes %lld expected", i, x->name, x->step,
                  (long long)x->bytes);
    }
    json_decref(root);
}

static void test_trace_shape(void)
{
    pp_trace_lane lanes[] = {
        {"stage0", "cpu:0", PP_STREAM_COMPUTE},
        {"stage1", "cpu:1", PP_STREAM_COMPUTE},
        {"act s0->s1", "cpu:1", PP_STREAM_COPY},
        {"grad s1->s0", "cpu:0", PP_STREAM_COPY},
    };
    pp_trace_span spans0[] = {
        {"F0 stage0", 0, 1002000, 1502000, 0},
        {"copy act 0 s0->s1", 2, 1503000, 1503250, 4096},
        {"F0 stage1", 1, 1504000, 2004000, 0},
        {"B0 stage1", 1, 2004000, 3004000, 0},
        {"copy grad 0 s1->s0", 3, 3005000, 3005500, 2048},
        {"B0 stage0", 0, 3006000, 4006000, 0},
    };
    pp_trace_span spans1[] = {
        {"F0 stage0", 0, 5000500, 5001000, 0},
        {"STEP stage1", 1, 5002000, 5002001, 0},
    };
    pp_step_stats steps[2] = {
        {.t0_ns = 1000000, .n_lanes = 4, .lanes = lanes, .n_spans = 6, .spans = spans0},
        {.t0_ns = 5000000, .n_lanes = 4, .lanes = lanes, .n_spans = 2, .spans = spans1,
         .graph = PP_STEP_REPLAYED, .graph_launches = 1},
    };
    const trace_meta meta[] = {
        {"process_name", 0, 0, "cpu:0"},
        {"thread_name", 0, 0, "stage0"},
        {"thread_sort_index", 0, 0, NULL},
        {"process_name", 1, 0, "cpu:1"},
        {"thread_name", 1, 1, "stage1"},
        {"thread_sort_index", 1, 1, NULL},
        {"thread_name", 1, 2, "act s0->s1"},
        {"thread_sort_index", 1, 2, NULL},
        {"thread_name", 0, 3, "grad s1->s0"},
        {"thread_sort_index", 0, 3, NULL},
    };
    const trace_x xs[] = {
        {"F0 stage0", "compute", 0, 0, 2.0, 500.0, 0, 0, NULL},
        {"copy act 0 s0->s1", "copy", 1, 2, 503.0, 0.25, 0, 4096, NULL},
        {"F0 stage1", "compute", 1, 1, 504.0, 500.0, 0, 0, NULL},
        {"B0 stage1", "compute", 1, 1, 1004.0, 1000.0, 0, 0, NULL},
        {"copy grad 0 s1->s0", "copy", 0, 3, 2005.0, 0.5, 0, 2048, NULL},
        {"B0 stage0", "compute", 0, 0, 2006.0, 1000.0, 0, 0, NULL},
        {"F0 stage0", "compute", 0, 0, 4000.5, 0.5, 1, 0, "replayed"},
        {"STEP stage1", "compute", 1, 1, 4002.0, 0.001, 1, 0, "replayed"},
    };
    char dir[256], path[300];
    if (!check_mkdtemp(dir, sizeof dir, "pp_trace")) {
        CHECK(false);
        return;
    }
    snprintf(path, sizeof path, "%s/trace.json", dir);
    pp_error err;
    CHECK_OK(pp_trace_write_chrome(path, steps, 2, &err), &err);
    check_trace_file(path, meta, 10, xs, 8);
    /* written again: replaced whole, and no temporary file is left beside it */
    CHECK_OK(pp_trace_write_chrome(path, steps, 1, &err), &err);
    check_trace_file(path, meta, 10, xs, 6);
    CHECK_OK(pp_trace_write_chrome(path, NULL, 0, &err), &err);
    check_trace_file(path, meta, 0, xs, 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s')\" = trace.json", dir);
    CHECK_MSG(system(cmd) == 0, "%s holds more than trace.json", dir);

    /* every error names the path */
    CHECK(pp_trace_write_chrome(NULL, steps, 2, &err) == PP_ERR_INVALID);
    CHECK(pp_trace_write_chrome(path, NULL, 2, &err) == PP_ERR_INVALID &&
          strstr(err.msg, path) != NULL);
    CHECK(pp_trace_write_chrome(path, steps, -1, &err) == PP_ERR_INVALID &&
          strstr(err.msg, path) != NULL);
    snprintf(path, sizeof path, "%s/missing/trace.json", dir);
    CHECK(pp_trace_write_chrome(path, steps, 2, &err) == PP_ERR_IO &&
          strstr(err.msg, path) != NULL);
    snprintf(path, sizeof path, "%s/trace.json", dir);
    unlink(path);
    CHECK_MSG(rmdir(dir) == 0, "%s: not empty after the failed writes", dir);
}

/* Mean measured forward and backward duration per stage, from the spans. */
static void measured_costs(const pp_step_stats *st, double *fw, double *bw)
{
    for (int k = 0; k < st->stages; k++) {
        double sf = 0, sb = 0;
        int nf = 0, nbk = 0;
        for (int j = 0; j < st->n_spans; j++) {
            const pp_trace_span *sp = &st->spans[j];
            if (sp->lane != k) continue;
            double ms = (double)(sp->end_ns - sp->start_ns) / 1e6;
            if (sp->name[0] == 'F') sf += ms, nf++;
            if (sp->name[0] == 'B') sb += ms, nbk++;
        }
        fw[k] = nf ? sf / nf : 0;
        bw[k] = nbk ? sb / nbk : 0;
    }
}

/*
 * Sleeping stages: the measured step against the simulator. Sleeps overshoot
 * by a varying amount on a loaded machine, so the check re-predicts from the
 * measured mean durations of each stage's F and B (what the schedule had to
 * work with) and takes the best of 3 steps; up to 3 attempts absorb bursts of
 * load. The prediction from the nominal costs is printed alongside.
 */
static void test_timing(void)
{
    const double f = 2.0, b = 4.0;
    static const int Ss[] = {2, 4}, ms[] = {1, 4, 8};
    fprintf(stderr, "schedule  S  m  nominal_ms  predicted_ms  measured_ms  bubble_pred  bubble_meas\n");
    for (int kind = 0; kind < 2; kind++)
        for (size_t si = 0; si < 2; si++)
            for (size_t mi = 0; mi < 3; mi++) {
                int S = Ss[si], m = ms[mi];
                pp_schedule s;
                pp_error err;
                CHECK_OK(pp_schedule_build(&s, (pp_schedule_kind)kind, S, m, NULL, &err), &err);
                toy_stage st[4];
                pp_stage_desc desc[4];
                setup_stages(st, desc, S, (int[]){0, 1, 2, 3}, &s);
                double fw[4], bw[4];
                for (int k = 0; k < S; k++) {
                    st[k].fwd_ms = fw[k] = f;
                    st[k].bwd_ms = bw[k] = b;
                }
                pp_sim_costs c = {.stages = S, .forward_ms = fw, .backward_ms = bw};
                pp_sim_result nominal;
                CHECK_OK(pp_simulate(&s, &c, &nominal, &err), &err);
                pp_executor *ex;
                CHECK_OK(pp_executor_new(desc, S, 0, &ex, &err), &err);
                bool ok = false;
                double meas = 0, pred = 0, bub_meas = 0, bub_pred = 0;
                for (int attempt = 0; attempt < 3 && !ok; attempt++) {
                    meas = 1e30;
                    for (int r = 0; r < 3; r++) {
                        pp_step_stats stats;
                        for (int k = 0; k < S; k++) st[k].nb = 0;
                        CHECK_OK(pp_executor_run(ex, &s, &stats, &err), &err);
                        if (stats.step_ms < meas) {
                            meas = stats.step_ms;
                            bub_meas = stats.bubble;
                            double mf[4], mb[4];
                            measured_costs(&stats, mf, mb);
                            pp_sim_costs mc = {.stages = S, .forward_ms = mf, .backward_ms = mb};
                            pp_sim_result p;
                            CHECK_OK(pp_simulate(&s, &mc, &p, &err), &err);
                            pred = p.step_ms;
                            bub_pred = p.bubble;
                            pp_sim_result_free(&p);
                        }
                        pp_step_stats_free(&stats);
                    }
                    ok = fabs(meas - pred) <= 0.15 * pred + 1.0 && fabs(bub_meas - bub_pred) <= 0.1;
                }
                fprintf(stderr, "%-8s %2d %2d  %10.2f  %12.2f  %11.2f  %11.3f  %11.3f\n", s.name, S,
                        m, nominal.step_ms, pred, meas, bub_pred, bub_meas);
                CHECK_MSG(ok, "%s S=%d m=%d: measured %.2f ms (bubble %.3f), predicted %.2f ms "
                          "(bubble %.3f)", s.name, S, m, meas, bub_meas, pred, bub_pred);
                /* sleeps never undershoot */
                CHECK(meas >= nominal.step_ms * 0.99);
                pp_sim_result_free(&nominal);
                pp_executor_free(ex);
                pp_schedule_free(&s);
            }
}

int main(void)
{
    if (!toy_devices_open()) return 1;
    test_trace();
    test_trace_shape();
    test_timing();
    toy_devices_close();
    return check_summary("executor_trace");
}
