/*
 * test_executor.c - the executor on synthetic stages (toy_stage.h): exact
 * results and gradient accumulation order for GPipe and 1F1B over several
 * stage counts, micro-batch counts and uneven splits; the first error with
 * stage, device and micro-batch; forward-only schedules; steps captured as
 * graphs and captures refused; the grads_ready callback: after each stage's
 * last backward, on its own lane, overlapping the earlier stages' backward
 * (shown by making stage 0's last backward wait for the last stage's
 * callback, which deadlocks, and fails after 30 s, unless they overlap).
 * Stats, the Chrome trace and the measured step against the simulator's:
 * test_executor_trace.c.
 */
#define PP_CHECK_COUNTERS
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "streams/executor.h"
#include "streams/graph.h"
#include "streams/schedule.h"
#include "streams/simulate.h"
#include "tests/check.h"
#include "tests/streams/toy_stage.h"

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

/* pp_executor_set_own_output: the last stage's forward gets its output's
 * shape without a buffer and writes its own; the step equals the reference
 * (training and forward-only), and setting it after the first run is refused. */
static void test_own_output(void)
{
    const pp_schedule_kind kinds[] = {PP_SCHEDULE_1F1B, PP_SCHEDULE_FORWARD};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        pp_schedule s;
        pp_error err;
        CHECK_OK(pp_schedule_build(&s, kinds[k], 3, 4, NULL, &err), &err);
        toy_stage st[3];
        pp_stage_desc desc[3];
        setup_stages(st, desc, 3, (int[]){0, 1, 1}, &s);
        st[2].own_out = true;
        float dw[3], out_sum[MAX_MB];
        reference(&s, st, dw, out_sum);
        pp_executor *ex;
        CHECK_OK(pp_executor_new(desc, 3, 0, &ex, &err), &err);
        CHECK_OK(pp_executor_set_own_output(ex, true, &err), &err);
        CHECK_OK(pp_executor_run(ex, &s, NULL, &err), &err);
        for (int i = 0; i < s.micro_batches; i++)
            CHECK_MSG(st[2].out_sum[i] == out_sum[i], "%s: micro-batch %d's output", s.name, i);
        for (int j = 0; j < 3; j++)
            CHECK_MSG(st[j].bad_args == 0 && (s.forward_only || st[j].dw == dw[j]),
                      "%s: stage %d: %d bad calls", s.name, j, st[j].bad_args);
        CHECK(pp_executor_set_own_output(ex, false, &err) == PP_ERR_INVALID);
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

/* pp_executor_set_ranks refuses a rank outside the job and leaves the ranks
 * set before as they were (it freed them first: the next link was then
 * refused as "needs ranks set first"); NULL comm makes every stage local. */
static void test_set_ranks(void)
{
    pp_schedule s;
    pp_error err;
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_1F1B, 3, 2, NULL, &err), &err);
    toy_stage st[3];
    pp_stage_desc desc[3];
    setup_stages(st, desc, 3, (int[]){0, 1, 2}, &s);
    pp_comm *comms[2];
    CHECK_OK(pp_comm_local_new(2, comms, &err), &err);
    pp_executor *ex;
    CHECK_OK(pp_executor_new(desc, 3, 0, &ex, &err), &err);
    CHECK_OK(pp_executor_set_ranks(ex, comms[0], (int[]){0, 0, 1}, 3, &err), &err);
    CHECK(pp_executor_set_ranks(ex, comms[0], (int[]){0, 2, 1}, 3, &err) == PP_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "stage 1 on rank 2, the job has 2 processes") != NULL, "%s",
              err.msg);
    CHECK(pp_executor_set_ranks(ex, comms[0], (int[]){0, 1}, 2, &err) == PP_ERR_INVALID);
    /* the ranks {0, 0, 1} stand: boundary 1 (ranks 0 and 1) takes a link, boundary
     * 0 (both on rank 0) does not. The links are only stored, never used here. */
    char a, g;
    pp_nccl *act = (pp_nccl *)(void *)&a, *grad = (pp_nccl *)(void *)&g;
    CHECK_OK(pp_executor_set_link(ex, 1, act, grad, &err), &err);
    CHECK(pp_executor_set_link(ex, 0, act, grad, &err) == PP_ERR_INVALID);
    /* NULL comm: every stage local, a link then refused for want of ranks */
    CHECK_OK(pp_executor_set_ranks(ex, NULL, NULL, 0, &err), &err);
    CHECK(pp_executor_set_link(ex, 1, act, grad, &err) == PP_ERR_INVALID);
    CHECK_OK(pp_executor_run(ex, &s, NULL, &err), &err);
    pp_executor_free(ex);
    pp_comm_free(comms[0]);
    pp_comm_free(comms[1]);
    pp_schedule_free(&s);
}

int main(void)
{
    if (!toy_devices_open()) return 1;
    test_exact();
    test_graphs();
    test_graph_refused();
    test_forward_only();
    test_own_output();
    test_error();
    test_set_ranks();
    test_grads_ready();
    toy_devices_close();
    return check_summary("executor");
}
