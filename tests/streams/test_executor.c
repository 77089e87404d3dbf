/*
 * test_executor.c - the executor on synthetic stages: exact results and
 * gradient accumulation order for GPipe and 1F1B over several stage counts,
 * micro-batch counts and uneven splits; stats and the Chrome trace (its JSON
 * field by field from hand-made steps); the first error with stage, device
 * and micro-batch; and sleeping stages whose measured step time must match
 * the simulator's prediction; the grads_ready callback: after each stage's
 * last backward, on its own lane, overlapping the earlier stages' backward
 * (shown by making stage 0's last backward wait for the last stage's
 * callback, which deadlocks, and fails after 30 s, unless they overlap).
 *
 * A toy stage s multiplies its input elementwise by a weight w_s; backward
 * multiplies the gradient by w_s and accumulates dw_s += sum(grad_out * in).
 * The last stage's loss is sum(out) / batch. The reference runs the same
 * arithmetic sequentially in micro-batch order, so results match bitwise.
 */
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "streams/executor.h"
#include "streams/graph.h"
#include "streams/schedule.h"
#include "streams/simulate.h"
#include "tests/check.h"

enum { D = 4, MAX_MB = 32, MAX_SIZE = 4 };

typedef struct toy_stage {
    int index, S, batch;
    pp_device_ctx *dev;
    float w, dw;
    float saved[MAX_MB][MAX_SIZE * D]; /* inputs kept for backward */
    int mb_start[MAX_MB];              /* first global sample of each micro-batch */
    float out_sum[MAX_MB];             /* last stage: sum of outputs */
    int b_order[MAX_MB], nb;
    int f_count[MAX_MB];
    int steps;
    int bad_args;
    int fail_mb;                       /* forward fails at this micro-batch; -1: never */
    double fwd_ms, bwd_ms;             /* > 0: sleep in stream order */
    /* grads_ready */
    int hooks;                         /* calls */
    int nb_at_hook;                    /* backwards done when it was last called */
    float dw_at_hook;
    bool fail_hook;
    atomic_int *hook_flag;             /* set when grads_ready starts */
    atomic_int *wait_flag;             /* last backward waits for it (<= 30 s) */
    int saw_flag;                      /* ... and found it set */
} toy_stage;

static float input_value(int sample, int d)
{
    return (float)(sample % 7 + 1) * 0.5f + (float)d * 0.25f;
}

/* The arithmetic shared by the stages and the reference. */
static __attribute__((noinline)) void toy_forward_math(const float *in, float w, int n, float *out)
{
    for (int k = 0; k < n; k++) out[k] = in[k] * w;
}

static __attribute__((noinline)) float toy_backward_math(const float *in, const float *g, float w,
                                                         int n, float *gin, float dw)
{
    for (int k = 0; k < n; k++) {
        if (gin) gin[k] = g[k] * w;
        dw += g[k] * in[k];
    }
    return dw;
}

static pp_status toy_out_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    t->dtype = PP_F32;
    t->ndim = 2;
    t->shape[0] = mb_size;
    t->shape[1] = D;
    return PP_OK;
}

static int shape_ok(const toy_stage *ts, const pp_tensor *t, int mb_size)
{
    return t && t->data && t->dev == ts->dev && t->ndim == 2 && t->shape[0] == mb_size &&
           t->shape[1] == D && t->dtype == PP_F32;
}

static pp_status toy_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                             pp_tensor *out, pp_error *err)
{
    toy_stage *ts = user;
    if (ts->fwd_ms > 0) PP_TRY(pp_delay(ex, ts->fwd_ms, err));
    if (mb == ts->fail_mb) return pp_error_set(err, PP_ERR_NUMERIC, "loss is NaN");
    if (ex->dev != ts->dev || (ts->index == 0) != (in == NULL) || !shape_ok(ts, out, mb_size) ||
        (in && !shape_ok(ts, in, mb_size)) || mb_size > MAX_SIZE)
        ts->bad_args++;
    ts->f_count[mb]++;
    int n = mb_size * D;
    if (ts->index == 0) {
        for (int j = 0; j < mb_size; j++)
            for (int d = 0; d < D; d++) ts->saved[mb][j * D + d] = input_value(ts->mb_start[mb] + j, d);
    } else {
        memcpy(ts->saved[mb], in->data, (size_t)n * sizeof(float));
    }
    toy_forward_math(ts->saved[mb], ts->w, n, out->data);
    if (ts->index == ts->S - 1) {
        float s = 0;
        for (int k = 0; k < n; k++) s += ((float *)out->data)[k];
        ts->out_sum[mb] = s;
    }
    return PP_OK;
}

static pp_status toy_backward(void *user, pp_exec *ex, int mb, int mb_size,
                              const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    toy_stage *ts = user;
    if (ts->bwd_ms > 0) PP_TRY(pp_delay(ex, ts->bwd_ms, err));
    if ((ts->index == ts->S - 1) != (grad_out == NULL) || (ts->index == 0) != (grad_in == NULL) ||
        (grad_out && !shape_ok(ts, grad_out, mb_size)) ||
        (grad_in && !shape_ok(ts, grad_in, mb_size)))
        ts->bad_args++;
    int n = mb_size * D;
    float g[MAX_SIZE * D];
    if (grad_out) memcpy(g, grad_out->data, (size_t)n * sizeof(float));
    else
        for (int k = 0; k < n; k++) g[k] = 1.0f / (float)ts->batch;
    ts->dw = toy_backward_math(ts->saved[mb], g, ts->w, n, grad_in ? grad_in->data : NULL, ts->dw);
    ts->b_order[ts->nb++] = mb;
    return PP_OK;
}

static pp_status toy_step(void *user, pp_exec *ex, pp_error *err)
{
    toy_stage *ts = user;
    ts->steps++;
    if (ts->hook_flag && ts->hooks != ts->steps) ts->bad_args++; /* step before grads_ready */
    return PP_OK;
}

static pp_status toy_grads_ready(void *user, pp_exec *ex, pp_error *err)
{
    toy_stage *ts = user;
    if (ts->hook_flag) atomic_store(ts->hook_flag, 1);
    ts->hooks++;
    ts->nb_at_hook = ts->nb;
    ts->dw_at_hook = ts->dw;
    if (ex->dev != ts->dev) ts->bad_args++;
    if (ts->fail_hook) return pp_error_set(err, PP_ERR_BACKEND, "sum failed");
    return PP_OK;
}

/* The last backward of a stage with wait_flag: waits until the flag is set
 * (another stage's grads_ready started), at most 30 s. */
static pp_status toy_backward_waiting(void *user, pp_exec *ex, int mb, int mb_size,
                                      const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    toy_stage *ts = user;
    PP_TRY(toy_backward(user, ex, mb, mb_size, grad_out, grad_in, err));
    if (!ts->wait_flag || ts->mb_start[mb] + mb_size != ts->batch) return PP_OK;
    for (int k = 0; k < 30000 && !atomic_load(ts->wait_flag); k++) usleep(1000);
    ts->saw_flag = atomic_load(ts->wait_flag);
    return PP_OK;
}

static const pp_stage_ops toy_ops = {
    .out_shape = toy_out_shape,
    .forward = toy_forward,
    .backward = toy_backward,
    .step = toy_step,
};
static const pp_stage_ops hook_ops = {
    .out_shape = toy_out_shape,
    .forward = toy_forward,
    .backward = toy_backward_waiting,
    .step = toy_step,
    .grads_ready = toy_grads_ready,
};

static pp_registry *reg;
static pp_device_ctx *cpus[4];

static void setup_stages(toy_stage *st, pp_stage_desc *desc, int S, const int *dev_of,
                         const pp_schedule *s)
{
    int batch = 0;
    for (int i = 0; i < s->micro_batches; i++) batch += s->mb_sizes[i];
    for (int k = 0; k < S; k++) {
        memset(&st[k], 0, sizeof st[k]);
        st[k].index = k;
        st[k].S = S;
        st[k].batch = batch;
        st[k].dev = cpus[dev_of[k]];
        st[k].w = 1.0f + 0.5f * (float)k;
        st[k].fail_mb = -1;
        for (int i = 0, g = 0; i < s->micro_batches; g += s->mb_sizes[i], i++) st[k].mb_start[i] = g;
        desc[k] = (pp_stage_desc){st[k].dev, &toy_ops, &st[k]};
    }
}


/* Sequential reference: expected dw per stage and last-stage output sums. */
static void reference(const pp_schedule *s, const toy_stage *st, float *dw, float *out_sum)
{
    int S = s->stages, batch = st[0].batch;
    for (int k = 0; k < S; k++) dw[k] = 0.0f;
    for (int i = 0; i < s->micro_batches; i++) {
        int n = s->mb_sizes[i] * D;
        float act[8][MAX_SIZE * D];
        float x[MAX_SIZE * D];
        for (int j = 0; j < s->mb_sizes[i]; j++)
            for (int d = 0; d < D; d++) x[j * D + d] = input_value(st[0].mb_start[i] + j, d);
        const float *in = x;
        float ins[8][MAX_SIZE * D];
        for (int k = 0; k < S; k++) {
            memcpy(ins[k], in, (size_t)n * sizeof(float));
            toy_forward_math(ins[k], st[k].w, n, act[k]);
            in = act[k];
        }
        float sum = 0;
        for (int k = 0; k < n; k++) sum += act[S - 1][k];
        out_sum[i] = sum;
        float g[MAX_SIZE * D], gin[MAX_SIZE * D];
        for (int k = 0; k < n; k++) g[k] = 1.0f / (float)batch;
        for (int k = S - 1; k >= 0; k--) {
            dw[k] = toy_backward_math(ins[k], g, st[k].w, n, k > 0 ? gin : NULL, dw[k]);
            if (k > 0) memcpy(g, gin, sizeof g);
        }
    }
}

static void test_exact(void)
{
    static const struct {
        int S;
        int dev_of[4];
    } layouts[] = {
        {1, {0}}, {2, {0, 1}}, {3, {0, 0, 1}}, {4, {0, 1, 2, 3}},
    };
    static const int ms[] = {1, 2, 3, 5, 8};
    int runs = 0;
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (int kind = 0; kind < 2; kind++) {
                int S = layouts[l].S, m = ms[mi];
                int sizes[MAX_MB];
                for (int i = 0; i < m; i++) sizes[i] = i == m - 1 && m > 1 ? 2 : 3;
                pp_schedule s;
                pp_error err;
                CHECK_OK(pp_schedule_build(&s, (pp_schedule_kind)kind, S, m, sizes, &err), &err);
                toy_stage st[4];
                pp_stage_desc desc[4];
                setup_stages(st, desc, S, layouts[l].dev_of, &s);
                pp_executor *ex;
                CHECK_OK(pp_executor_new(desc, S, 0, &ex, &err), &err);
                float dw[4], out_sum[MAX_MB];
                reference(&s, st, dw, out_sum);
                /* two steps through the same executor: buffers and events are reused */
                for (int rep = 0; rep < 2; rep++) {
                    for (int k = 0; k < S; k++) {
                        st[k].dw = 0.0f;
                        st[k].nb = 0;
                    }
                    pp_step_stats stats;
                    CHECK_OK(pp_executor_run(ex, &s, &stats, &err), &err);
                    runs++;
                    for (int k = 0; k < S; k++) {
                        CHECK_MSG(st[k].dw == dw[k], "%s S=%d m=%d stage %d: dw %.9g want %.9g",
                                  s.name, S, m, k, st[k].dw, dw[k]);
                        int ordered = st[k].nb == m;
                        for (int i = 0; i < st[k].nb; i++) ordered &= st[k].b_order[i] == i;
                        CHECK_MSG(ordered, "%s S=%d m=%d stage %d: backward order", s.name, S,
                                  m, k);
                        CHECK(st[k].bad_args == 0 && st[k].steps == rep + 1);
                    }
                    for (int i = 0; i < m; i++) CHECK(st[S - 1].out_sum[i] == out_sum[i]);
                    /* stats: one span per F/B/STEP and per copy */
                    int want_spans = S * (2 * m + 1) + 2 * (S - 1) * m;
                    CHECK_MSG(stats.n_spans == want_spans, "spans %d want %d", stats.n_spans,
                              want_spans);
                    CHECK(stats.n_lanes == 3 * S - 2 && stats.slots == 2);
                    size_t want_bytes = 0;
                    for (int i = 0; i < m; i++) want_bytes += (size_t)sizes[i] * D * sizeof(float);
                    CHECK(stats.copy_bytes == 2 * (size_t)(S - 1) * want_bytes);
                    CHECK(stats.step_ms > 0 && stats.bubble >= 0 && stats.bubble < 1);
                    /* each stage's lane runs its compute actions in schedule order */
                    for (int k = 0; k < S; k++) {
                        int p = 0, ok = 1;
                        for (int j = 0; j < stats.n_spans; j++) {
                            if (stats.spans[j].lane != k) continue;
                            while (p < s.n_actions[k] && s.actions[k][p].kind != PP_ACT_F &&
                                   s.actions[k][p].kind != PP_ACT_B &&
                                   s.actions[k][p].kind != PP_ACT_STEP)
                                p++;
                            char want[48];
                            pp_action a = s.actions[k][p++];
                            if (a.kind == PP_ACT_STEP) snprintf(want, sizeof want, "STEP stage%d", k);
                            else snprintf(want, sizeof want, "%s%d stage%d",
                                          a.kind == PP_ACT_F ? "F" : "B", a.mb, k);
                            ok &= strcmp(stats.spans[j].name, want) == 0;
                        }
                        CHECK_MSG(ok, "%s S=%d m=%d stage %d: lane order", s.name, S, m, k);
                    }
                    pp_step_stats_free(&stats);
                }
                pp_executor_free(ex);
                pp_schedule_free(&s);
            }
    CHECK(runs == 80);
}

static void test_error(void)
{
    pp_schedule s;
    pp_error err;
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_1F1B, 3, 6, NULL, &err), &err);
    toy_stage st[3];
    pp_stage_desc desc[3];
    setup_stages(st, desc, 3, (int[]){0, 1, 2}, &s);
    st[1].fail_mb = 2;
    pp_executor *ex;
    CHECK_OK(pp_executor_new(desc, 3, 0, &ex, &err), &err);
    pp_step_stats stats;
    pp_status rc = pp_executor_run(ex, &s, &stats, &err);
    CHECK(rc == PP_ERR_NUMERIC);
    CHECK_MSG(strcmp(err.msg, "stage 1 (cpu:1) micro-batch 2: loss is NaN") == 0, "%s", err.msg);
    CHECK(st[2].f_count[2] == 0 && st[2].f_count[1] == 1);
    CHECK(stats.n_spans == 0 && stats.spans == NULL);

    /* the executor is usable again */
    st[1].fail_mb = -1;
    float dw[3], out_sum[MAX_MB];
    reference(&s, st, dw, out_sum);
    for (int k = 0; k < 3; k++) {
        st[k].dw = 0.0f;
        st[k].nb = 0;
    }
    CHECK_OK(pp_executor_run(ex, &s, NULL, &err), &err);
    for (int k = 0; k < 3; k++) CHECK(st[k].dw == dw[k]);

    /* a schedule for another stage count is refused, as is an invalid one */
    pp_schedule other;
    CHECK_OK(pp_schedule_build(&other, PP_SCHEDULE_GPIPE, 2, 2, NULL, &err), &err);
    CHECK(pp_executor_run(ex, &other, NULL, &err) == PP_ERR_INVALID);
    pp_schedule_free(&other);
    CHECK_OK(pp_schedule_init(&other, "broken", 3, 1, NULL, &err), &err);
    CHECK(pp_executor_run(ex, &other, NULL, &err) == PP_ERR_INVALID);
    pp_schedule_free(&other);
    pp_executor_free(ex);
    pp_schedule_free(&s);

    pp_stage_desc none = {cpus[0], NULL, NULL};
    CHECK(pp_executor_new(&none, 1, 0, &ex, &err) == PP_ERR_INVALID);
}

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
    char path[] = "/tmp/pp_trace_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        close(fd);
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

/* A forward-only schedule (evaluation, inference) validates, runs every
 * forward once per stage in any placement, no backward or step, and gives the
 * reference outputs; schedules that mix in a backward are refused. */
static void test_forward_only(void)
{
    static const int placements[][4] = {{0, 1, 2, 3}, {0, 0, 1, 1}, {0, 0, 0, 0}};
    for (int S = 1; S <= 4; S++)
        for (int m = 1; m <= 6; m += 5)
            for (size_t pl = 0; pl < sizeof placements / sizeof placements[0]; pl++) {
                pp_error err;
                pp_schedule s;
                int sizes[8];
                for (int i = 0; i < m; i++) sizes[i] = 1 + i % 3;
                CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_FORWARD, S, m, sizes, &err), &err);
                CHECK(s.forward_only && strcmp(s.name, "forward") == 0);
                CHECK_OK(pp_schedule_validate(&s, &err), &err);
                toy_stage st[4];
                pp_stage_desc desc[4];
                setup_stages(st, desc, S, placements[pl], &s);
                pp_executor *ex = NULL;
                CHECK_OK(pp_executor_new(desc, S, 0, &ex, &err), &err);
                pp_step_stats stats;
                CHECK_OK(pp_executor_run(ex, &s, &stats, &err), &err);
                float dw[4], out_sum[8];
                reference(&s, st, dw, out_sum);
                for (int k = 0; k < S; k++) {
                    CHECK(st[k].nb == 0 && st[k].steps == 0 && st[k].bad_args == 0);
                    for (int i = 0; i < m; i++) CHECK(st[k].f_count[i] == 1);
                }
                for (int i = 0; i < m; i++)
                    CHECK_MSG(st[S - 1].out_sum[i] == out_sum[i], "S %d m %d mb %d", S, m, i);
                pp_step_stats_free(&stats);
                pp_executor_free(ex);
                /* a backward in a forward-only schedule is refused */
                CHECK_OK(pp_schedule_push(&s, 0, PP_ACT_B, 0, &err), &err);
                CHECK(pp_schedule_validate(&s, &err) == PP_ERR_INVALID &&
                      strstr(err.msg, "forward-only"));
                pp_schedule_free(&s);
            }
}

/* Graphs (pp_executor_run_replayable) on the CPU's recorded graphs: a key's
 * first run is eager, its second captured and launched, later ones replayed;
 * every step gives the eager results bitwise, with one span per action, and
 * a fifth key evicts the least recently used one. */
static void test_graphs(void)
{
    static const int dev_of[4] = {0, 1, 0, 1};
    int full[3] = {3, 3, 3}, tail[3] = {3, 2, 0}, other[2] = {2, 2};
    for (int S = 1; S <= 4; S++)
        for (int kind = 0; kind < 2; kind++) {
            pp_error err;
            pp_schedule s_full, s_tail, s_other;
            CHECK_OK(pp_schedule_build(&s_full, (pp_schedule_kind)kind, S, 3, full, &err), &err);
            CHECK_OK(pp_schedule_build(&s_tail, (pp_schedule_kind)kind, S, 2, tail, &err), &err);
            CHECK_OK(pp_schedule_build(&s_other, (pp_schedule_kind)kind, S, 2, other, &err),
                     &err);
            toy_stage st[4];
            pp_stage_desc desc[4];
            setup_stages(st, desc, S, dev_of, &s_full);
            pp_executor *ex;
            CHECK_OK(pp_executor_new(desc, S, 0, &ex, &err), &err);
            CHECK(!pp_executor_graphs(ex)); /* CPU lanes: off unless asked for */
            pp_executor_set_graphs(ex, true);
            /* keys A = (full, 0), B = (tail, 0), C = (full, 1), D = (tail, 1), E =
             * (other, 0); four keep graphs. Steps: A A B A B C C D D E A E B: E evicts A
             * (least recently used), A then evicts B, B then evicts C */
            const pp_schedule *seq[] = {&s_full, &s_full, &s_tail, &s_full, &s_tail,
                                        &s_full, &s_full, &s_tail, &s_tail, &s_other,
                                        &s_full, &s_other, &s_tail};
            const int tag[] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0};
            const pp_step_graph want[] = {PP_STEP_EAGER,    PP_STEP_CAPTURED, PP_STEP_EAGER,
                                          PP_STEP_REPLAYED, PP_STEP_CAPTURED, PP_STEP_EAGER,
                                          PP_STEP_CAPTURED, PP_STEP_EAGER,    PP_STEP_CAPTURED,
                                          PP_STEP_EAGER,    PP_STEP_EAGER,    PP_STEP_CAPTURED,
                                          PP_STEP_EAGER};
            for (size_t k = 0; k < sizeof seq / sizeof seq[0]; k++) {
                const pp_schedule *s = seq[k];
                int m = s->micro_batches, batch = 0;
                for (int i = 0; i < m; i++) batch += s->mb_sizes[i];
                for (int j = 0; j < S; j++) {
                    st[j].dw = 0.0f;
                    st[j].nb = 0;
                    st[j].batch = batch;
                    st[j].steps = 0;
                    for (int i = 0, g = 0; i < m; g += s->mb_sizes[i], i++)
                        st[j].mb_start[i] = g + (int)k; /* new data every step */
                }
                float dw[4], out_sum[MAX_MB];
                reference(s, st, dw, out_sum);
                pp_step_stats stats;
                CHECK_OK(pp_executor_run_replayable(ex, s, tag[k], &stats, &err), &err);
                CHECK_MSG(stats.graph == want[k], "%s S=%d step %zu: ran as %d, want %d",
                          s->name, S, k, (int)stats.graph, (int)want[k]);
                CHECK(stats.graph_launches == (want[k] != PP_STEP_EAGER));
                for (int j = 0; j < S; j++) {
                    CHECK_MSG(st[j].dw == dw[j], "%s S=%d step %zu stage %d: dw %.9g want %.9g",
                              s->name, S, k, j, st[j].dw, dw[j]);
                    CHECK(st[j].nb == m && st[j].steps == 1 && st[j].bad_args == 0);
                }
                for (int i = 0; i < m; i++) CHECK(st[S - 1].out_sum[i] == out_sum[i]);
                int want_spans = S * (2 * m + 1) + 2 * (S - 1) * m;
                CHECK_MSG(stats.n_spans == want_spans, "step %zu: spans %d want %d", k,
                          stats.n_spans, want_spans);
                pp_step_stats_free(&stats);
            }
            CHECK(pp_executor_graph_refusal(ex) == NULL);
            /* graphs off: eager again */
            pp_executor_set_graphs(ex, false);
            pp_step_stats stats;
            CHECK_OK(pp_executor_run_replayable(ex, &s_full, 0, &stats, &err), &err);
            CHECK(stats.graph == PP_STEP_EAGER && stats.graph_launches == 0);
            pp_step_stats_free(&stats);
            pp_executor_free(ex);
            pp_schedule_free(&s_full);
            pp_schedule_free(&s_tail);
            pp_schedule_free(&s_other);
        }
}

/* The refusal path: a stage's capture_begin hook starts a capture of its own
 * on the executor's first lane, so the executor's capture is refused ("already
 * capturing"); its capture_abandon hook ends that capture. The step then runs
 * eagerly with exact results, the refusal is kept, graphs turn off, and the
 * next steps are eager too. */
static pp_executor *refuse_ex;
static int refuse_begins, refuse_abandons;

static void refuse_capture_begin(void *user)
{
    pp_stream *s = pp_executor_stage_stream(refuse_ex, 0);
    pp_error err;
    if (((toy_stage *)user)->index == 0 && pp_graph_capture_begin(&s, 1, &err) == PP_OK)
        refuse_begins++;
}

static void refuse_capture_abandon(void *user)
{
    pp_stream *s = pp_executor_stage_stream(refuse_ex, 0);
    pp_graph *g = NULL;
    pp_error err;
    if (((toy_stage *)user)->index != 0) return;
    CHECK_OK(pp_graph_capture_end(&s, 1, &g, &err), &err);
    pp_graph_free(g);
    refuse_abandons++;
}

static const pp_stage_ops refuse_ops = {
    .out_shape = toy_out_shape,
    .forward = toy_forward,
    .backward = toy_backward,
    .step = toy_step,
    .capture_begin = refuse_capture_begin,
    .capture_abandon = refuse_capture_abandon,
};

static void test_graph_refused(void)
{
    static const int dev_of[2] = {0, 1};
    int sizes[3] = {3, 3, 2};
    pp_error err;
    pp_schedule s;
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_1F1B, 2, 3, sizes, &err), &err);
    toy_stage st[2];
    pp_stage_desc desc[2];
    setup_stages(st, desc, 2, dev_of, &s);
    for (int k = 0; k < 2; k++) desc[k].ops = &refuse_ops;
    CHECK_OK(pp_executor_new(desc, 2, 0, &refuse_ex, &err), &err);
    if (!refuse_ex) return;
    pp_executor_set_graphs(refuse_ex, true);
    float dw[2], out_sum[MAX_MB];
    reference(&s, st, dw, out_sum);
    for (int step = 0; step < 4; step++) {
        for (int k = 0; k < 2; k++) {
            st[k].dw = 0.0f;
            st[k].nb = 0;
        }
        pp_step_stats stats;
        CHECK_OK(pp_executor_run_replayable(refuse_ex, &s, 0, &stats, &err), &err);
        CHECK_MSG(stats.graph == PP_STEP_EAGER && stats.graph_launches == 0,
                  "step %d ran as %d", step, (int)stats.graph);
        for (int k = 0; k < 2; k++)
            CHECK_MSG(st[k].dw == dw[k] && st[k].nb == 3, "step %d stage %d: dw %.9g want %.9g",
                      step, k, st[k].dw, dw[k]);
        CHECK(stats.n_spans == 2 * (2 * 3 + 1) + 2 * 3);
        pp_step_stats_free(&stats);
    }
    const char *why = pp_executor_graph_refusal(refuse_ex);
    CHECK_MSG(why && strstr(why, "refused") && strstr(why, "already capturing"),
              "refusal: %s", why ? why : "(none)");
    CHECK(!pp_executor_graphs(refuse_ex) && refuse_begins == 1 && refuse_abandons == 1);
    pp_executor_free(refuse_ex);
    refuse_ex = NULL;
    pp_schedule_free(&s);
}

/* The span named name on lane; NULL when none. */
static const pp_trace_span *span_named(const pp_step_stats *st, const char *name)
{
    for (int j = 0; j < st->n_spans; j++)
        if (strcmp(st->spans[j].name, name) == 0) return &st->spans[j];
    return NULL;
}

static void test_grads_ready(void)
{
    enum { S = 3, M = 4 };
    static const int dev_of[S] = {0, 1, 2};
    int sizes[M] = {2, 2, 2, 1};
    for (int kind = 0; kind < 2; kind++) {
        pp_schedule s;
        pp_error err;
        CHECK_OK(pp_schedule_build(&s, (pp_schedule_kind)kind, S, M, sizes, &err), &err);
        toy_stage st[S];
        pp_stage_desc desc[S];
        setup_stages(st, desc, S, dev_of, &s);
        atomic_int flags[S];
        for (int k = 0; k < S; k++) {
            atomic_init(&flags[k], 0);
            st[k].hook_flag = &flags[k];
            desc[k].ops = &hook_ops;
        }
        st[0].wait_flag = &flags[S - 1];
        float dw[S], out_sum[MAX_MB];
        reference(&s, st, dw, out_sum);
        pp_executor *ex;
        CHECK_OK(pp_executor_new(desc, S, 0, &ex, &err), &err);
        if (!ex) return;
        for (int rep = 0; rep < 2; rep++) {
            for (int k = 0; k < S; k++) {
                st[k].dw = 0.0f;
                st[k].nb = 0;
                atomic_store(&flags[k], 0);
            }
            st[0].saw_flag = 0;
            pp_step_stats stats;
            CHECK_OK(pp_executor_run(ex, &s, &stats, &err), &err);
            for (int k = 0; k < S; k++) {
                CHECK_MSG(st[k].hooks == rep + 1 && st[k].nb_at_hook == M &&
                          st[k].dw_at_hook == dw[k] && st[k].bad_args == 0,
                          "%s stage %d: grads_ready %d calls, after %d backwards, dw %g of %g",
                          s.name, k, st[k].hooks, st[k].nb_at_hook, st[k].dw_at_hook, dw[k]);
            }
            /* stage 0's last backward waited for the last stage's grads_ready */
            CHECK_MSG(st[0].saw_flag == 1, "%s: the last stage's grads_ready did not start while "
                      "stage 0's backward ran", s.name);
            CHECK(stats.n_lanes == 4 * S - 2);
            char last_b0[48];
            snprintf(last_b0, sizeof last_b0, "B%d stage0", M - 1);
            const pp_trace_span *g = span_named(&stats, "grads stage2"),
                                *b0 = span_named(&stats, last_b0),
                                *b2 = span_named(&stats, "B3 stage2");
            CHECK(g && b0 && b2 && strcmp(stats.lanes[g->lane].name, "grads s2") == 0);
            if (g && b0 && b2)
                CHECK_MSG(g->start_ns >= b2->end_ns && g->start_ns < b0->end_ns,
                          "%s: grads stage2 at %lld, after B3 stage2 (%lld), before B3 stage0 "
                          "ends (%lld)", s.name, (long long)g->start_ns, (long long)b2->end_ns,
                          (long long)b0->end_ns);
            CHECK(stats.grads_ms >= 0 && stats.n_spans == S * (2 * M + 1) + 2 * (S - 1) * M + S);
            pp_step_stats_free(&stats);
        }
        /* a failing grads_ready fails the run, naming the stage; the next run works */
        st[0].wait_flag = NULL;
        st[1].fail_hook = true;
        pp_status rc = pp_executor_run(ex, &s, NULL, &err);
        CHECK_MSG(rc == PP_ERR_BACKEND && strstr(err.msg, "stage 1 (cpu:1) gradients: sum failed"),
                  "%s: %s", pp_status_name(rc), err.msg);
        st[1].fail_hook = false;
        for (int k = 0; k < S; k++) st[k].hooks = st[k].steps = 0;
        CHECK_OK(pp_executor_run(ex, &s, NULL, &err), &err);
        for (int k = 0; k < S; k++) CHECK(st[k].hooks == 1);
        /* forward-only runs have no gradients */
        pp_schedule fwd;
        CHECK_OK(pp_schedule_build(&fwd, PP_SCHEDULE_FORWARD, S, M, sizes, &err), &err);
        CHECK_OK(pp_executor_run(ex, &fwd, NULL, &err), &err);
        for (int k = 0; k < S; k++) CHECK(st[k].hooks == 1);
        pp_schedule_free(&fwd);
        pp_executor_free(ex);
        pp_schedule_free(&s);
    }
}

int main(void)
{
    pp_error err;
    if (pp_registry_new(&reg, &err) != PP_OK) return 1;
    for (int i = 0; i < 4; i++)
        if (pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, i}, &cpus[i], &err) != PP_OK) {
            fprintf(stderr, "setup: %s\n", err.msg);
            return 1;
        }
    test_exact();
    test_graphs();
    test_graph_refused();
    test_forward_only();
    test_error();
    test_trace();
    test_trace_shape();
    test_timing();
    test_grads_ready();
    for (int i = 0; i < 4; i++) CHECK(pp_device_bytes_in_use(cpus[i]) == 0);
    pp_registry_free(reg);
    return check_summary("executor");
}
