/*
 * test_schedule.c - the built-in schedules (schedule.h): names and
 * placements; every kind for many device, stage and micro-batch counts
 * (valid, complete, lowered, padded only where the construction needs it);
 * the closed forms of docs/SCHEDULES.md on unit costs; in-flight peaks; the
 * communication pass; the printable forms. test_schedule_csv.c covers the
 * CSV grammar, torch's files and the validator's messages.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streams/program.h"
#include "streams/schedule.h"
#include "streams/simulate.h"
#include "tests/check.h"
#include "tests/streams/schedule_util.h"

static void test_names(void)
{
    pp_error err;
    for (int k = 0; k < PP_SCHEDULE_KINDS; k++) {
        pp_schedule_kind back;
        const char *name = pp_schedule_kind_name((pp_schedule_kind)k);
        CHECK_OK(pp_schedule_kind_parse(name, &back, &err), &err);
        CHECK_MSG(back == (pp_schedule_kind)k, "%s", name);
        CHECK_MSG(strlen(pp_schedule_kind_reference((pp_schedule_kind)k)) > 10, "%s", name);
    }
    pp_schedule_kind k;
    CHECK(pp_schedule_kind_parse("zb", &k, &err) == PP_ERR_INPUT);
    CHECK_MSG(strcmp(err.msg, "unknown schedule 'zb': expected one of gpipe, 1f1b, forward, "
                              "interleaved1f1b, loopedbfs, interleavedzb, zbh1, zbh2, zbv, "
                              "dualpipev") == 0, "%s", err.msg);
    CHECK(pp_schedule_kind_placement(PP_SCHEDULE_ZBV) == PP_PLACEMENT_V);
    CHECK(pp_schedule_kind_placement(PP_SCHEDULE_LOOPED_BFS) == PP_PLACEMENT_LOOP);
    CHECK(pp_schedule_kind_placement(PP_SCHEDULE_ZBH2) == PP_PLACEMENT_ONE);
    int dev[8];
    CHECK_OK(pp_schedule_place(PP_PLACEMENT_V, 8, 4, dev, &err), &err);
    CHECK(dev[0] == 0 && dev[3] == 3 && dev[4] == 3 && dev[7] == 0);
    CHECK_OK(pp_schedule_place(PP_PLACEMENT_LOOP, 6, 3, dev, &err), &err);
    CHECK(dev[3] == 0 && dev[5] == 2);
    CHECK(pp_schedule_place(PP_PLACEMENT_LOOP, 7, 3, dev, &err) == PP_ERR_INVALID);
    CHECK(pp_schedule_place(PP_PLACEMENT_V, 6, 2, dev, &err) == PP_ERR_INVALID);
}

/* Closed forms on unit costs (docs/SCHEDULES.md), where they hold; -1 else. */
static double closed_form(pp_schedule_kind kind, int p, int V, int m)
{
    double t = 3.0 * m; /* F + I + W of every micro-batch on one device */
    int rounds = m / p > 1 ? m / p : 1;
    bool rounds_ok = m >= p && m % rounds == 0;
    switch (kind) {
    case PP_SCHEDULE_GPIPE:
    case PP_SCHEDULE_1F1B: return 3.0 * (m + p - 1);
    case PP_SCHEDULE_ZBH1:
    case PP_SCHEDULE_ZBH2: return m >= p ? t + p - 1 : 2.0 * m + 2.0 * p - 1;
    case PP_SCHEDULE_INTERLEAVED_1F1B:
    case PP_SCHEDULE_LOOPED_BFS: return rounds_ok ? t + 3.0 * (p - 1) / V : -1;
    case PP_SCHEDULE_INTERLEAVED_ZB: return rounds_ok ? t + (double)(p - 1) / V : -1;
    case PP_SCHEDULE_ZBV: return m >= 2 * p - 1 ? t + (p - 1) / 2.0 : -1;
    case PP_SCHEDULE_DUALPIPEV: return m >= 2 * p ? t + (p - 1) / 2.0 : -1;
    default: return -1;
    }
}

/* Every kind, placement and count: valid, complete, lowered, closed forms. */
static void test_generate_all(void)
{
    int runs = 0, closed = 0;
    for (int kind = 0; kind < PP_SCHEDULE_KINDS; kind++) {
        pp_schedule_placement pl = pp_schedule_kind_placement((pp_schedule_kind)kind);
        for (int D = 1; D <= 5; D++)
            for (int V = 1; V <= 3; V++) {
                if ((pl == PP_PLACEMENT_ONE && V != 1) || (pl == PP_PLACEMENT_V && V != 2))
                    continue;
                for (int m = 1; m <= 17; m++) {
                    ut_shape u;
                    if (ut_shape_make(&u, (pp_schedule_kind)kind, D, V, m)) continue;
                    pp_schedule s;
                    pp_error err;
                    if (pp_schedule_generate(&s, (pp_schedule_kind)kind, &u.shape, &err) != PP_OK) {
                        CHECK_MSG(0, "%s D=%d V=%d m=%d: %s",
                                  pp_schedule_kind_name((pp_schedule_kind)kind), D, V, m, err.msg);
                        continue;
                    }
                    runs++;
                    CHECK_MSG(pp_schedule_validate(&s, &err) == PP_OK, "%s D=%d V=%d m=%d: %s",
                              s.name, D, V, m, err.msg);
                    CHECK(!pp_schedule_has_comms(&s) && s.devices == D && s.stages == D * V);
                    CHECK(s.forward_only == (kind == PP_SCHEDULE_FORWARD));
                    int computes = 0;
                    for (int d = 0; d < D; d++) computes += s.n_actions[d];
                    int per = kind == PP_SCHEDULE_FORWARD ? 1 : 2;
                    CHECK_MSG(computes >= per * D * V * m && computes <= 3 * D * V * m,
                              "%s: %d actions", s.name, computes);
                    /* a note exactly when the construction ran padded */
                    int n = m;
                    if (kind == PP_SCHEDULE_ZBV && m < 2 * D - 1) n = 2 * D - 1;
                    if (kind == PP_SCHEDULE_DUALPIPEV && m < 2 * D) n = 2 * D;
                    if ((kind == PP_SCHEDULE_INTERLEAVED_1F1B || kind == PP_SCHEDULE_INTERLEAVED_ZB) &&
                        V > 1)
                        while (n % (n / D > 1 ? n / D : 1)) n++;
                    CHECK_MSG((n != m) == (s.note[0] != '\0'), "%s D=%d V=%d m=%d: note '%s'",
                              s.name, D, V, m, s.note);
                    pp_program p;
                    if (pp_program_build(&s, 2, &p, &err) == PP_OK) pp_program_free(&p);
                    else CHECK_MSG(0, "lower %s D=%d V=%d m=%d: %s", s.name, D, V, m, err.msg);
                    double want = closed_form((pp_schedule_kind)kind, D, V, m);
                    double got = ut_unit_step(&s, NULL);
                    if (want >= 0) {
                        closed++;
                        CHECK_MSG(fabs(got - want) < 1e-9, "%s D=%d V=%d m=%d: step %.4f, "
                                  "closed form %.4f", s.name, D, V, m, got, want);
                    }
                    pp_schedule_free(&s);
                }
            }
    }
    CHECK_MSG(runs > 800 && closed > 400, "runs %d, closed forms %d", runs, closed);
}

/* Zero bubble with other cost ratios (per stage, one per device): ZB-H1
 * m(F+I+W) + (p-1) max(F, F+I-W) for m >= p (the paper's (p-1)(F+I-W)
 * bubble, never below the (p-1)F of the last device's start); ZB-H2 the
 * parallelogram (p-1)F + m(F+I+W) for m >= 2p-1. */
static void test_zero_bubble_costs(void)
{
    static const double costs[][3] = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1, 2}, {1, 1, 0.5}};
    for (size_t c = 0; c < sizeof costs / sizeof costs[0]; c++)
        for (int p = 2; p <= 4; p++)
            for (int m = p; m <= 3 * p; m++) {
                double F = costs[c][0], I = costs[c][1], W = costs[c][2];
                double f[4] = {F, F, F, F}, b[4] = {I + W, I + W, I + W, I + W};
                double in[4] = {I, I, I, I}, w[4] = {W, W, W, W};
                pp_sim_costs sc = {.stages = p, .forward_ms = f, .backward_ms = b,
                                   .input_ms = in, .weight_ms = w};
                for (int k = 0; k < 2; k++) {
                    pp_schedule_kind kind = k ? PP_SCHEDULE_ZBH2 : PP_SCHEDULE_ZBH1;
                    if (kind == PP_SCHEDULE_ZBH2 && m < 2 * p - 1) continue;
                    pp_schedule_shape shape = {p, p, m, NULL, NULL};
                    pp_schedule s;
                    pp_sim_result r;
                    pp_error err;
                    CHECK_OK(pp_schedule_generate(&s, kind, &shape, &err), &err);
                    CHECK_OK(pp_simulate(&s, &sc, &r, &err), &err);
                    double tail = F + I - W > F ? F + I - W : F;
                    double want = m * (F + I + W) + (p - 1) * (k ? F : tail);
                    CHECK_MSG(fabs(r.step_ms - want) < 1e-9, "%s p=%d m=%d F=%g I=%g W=%g: "
                              "%.3f, want %.3f", s.name, p, m, F, I, W, r.step_ms, want);
                    pp_sim_result_free(&r);
                    pp_schedule_free(&s);
                }
            }
}

/* The figures of the issue: 4 devices, 8 micro-batches, F = I = W. */
static void test_headline(void)
{
    static const struct {
        pp_schedule_kind kind;
        int V;
        double step, bubble;
    } cases[] = {
        {PP_SCHEDULE_GPIPE, 1, 33, 9.0 / 33},
        {PP_SCHEDULE_1F1B, 1, 33, 9.0 / 33},
        {PP_SCHEDULE_ZBH1, 1, 27, 3.0 / 27},
        {PP_SCHEDULE_ZBH2, 1, 27, 3.0 / 27},
        {PP_SCHEDULE_INTERLEAVED_1F1B, 2, 28.5, 4.5 / 28.5},
        {PP_SCHEDULE_LOOPED_BFS, 2, 28.5, 4.5 / 28.5},
        {PP_SCHEDULE_INTERLEAVED_ZB, 2, 25.5, 1.5 / 25.5},
        {PP_SCHEDULE_ZBV, 2, 25.5, 1.5 / 25.5},
        {PP_SCHEDULE_DUALPIPEV, 2, 25.5, 1.5 / 25.5},
    };
    double best = 1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ut_shape u;
        pp_schedule s;
        pp_error err;
        CHECK(ut_shape_make(&u, cases[c].kind, 4, cases[c].V, 8) == 0);
        CHECK_OK(pp_schedule_generate(&s, cases[c].kind, &u.shape, &err), &err);
        double bubble = -1, step = ut_unit_step(&s, &bubble);
        CHECK_MSG(fabs(step - cases[c].step) < 1e-9 && fabs(bubble - cases[c].bubble) < 1e-9,
                  "%s: step %.2f bubble %.4f", s.name, step, bubble);
        if (bubble < best) best = bubble;
        pp_schedule_free(&s);
    }
    CHECK(best <= 0.08);
}

static void test_in_flight(void)
{
    static const struct {
        pp_schedule_kind kind;
        int V;
        int want[8];
    } cases[] = {
        {PP_SCHEDULE_GPIPE, 1, {8, 8, 8, 8}},
        {PP_SCHEDULE_1F1B, 1, {4, 3, 2, 1}},
        {PP_SCHEDULE_ZBH1, 1, {4, 4, 4, 4}},
        {PP_SCHEDULE_ZBH2, 1, {7, 7, 7, 7}},
        {PP_SCHEDULE_INTERLEAVED_1F1B, 2, {8, 8, 7, 5, 4, 4, 3, 1}},
        {PP_SCHEDULE_LOOPED_BFS, 2, {8, 8, 8, 8, 8, 8, 8, 8}},
        {PP_SCHEDULE_INTERLEAVED_ZB, 2, {8, 8, 8, 8, 4, 4, 4, 4}},
        {PP_SCHEDULE_ZBV, 2, {8, 7, 6, 5, 4, 3, 2, 1}},
        {PP_SCHEDULE_DUALPIPEV, 2, {8, 7, 6, 5, 4, 3, 2, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ut_shape u;
        pp_schedule s;
        pp_error err;
        CHECK(ut_shape_make(&u, cases[c].kind, 4, cases[c].V, 8) == 0);
        CHECK_OK(pp_schedule_generate(&s, cases[c].kind, &u.shape, &err), &err);
        int peak[8];
        pp_schedule_in_flight(&s, peak);
        for (int k = 0; k < s.stages; k++)
            CHECK_MSG(peak[k] == cases[c].want[k], "%s stage %d: %d in flight, want %d", s.name,
                      k, peak[k], cases[c].want[k]);
        pp_schedule_free(&s);
    }
}

static void test_format(void)
{
    pp_schedule s;
    pp_error err;
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_1F1B, 2, 3, NULL, &err), &err);
    char buf[512];
    const char *want = "device 0: 0F0 0F1 0B0 0F2 0B1 0B2 0STEP\n"
                       "device 1: 1F0 1B0 1F1 1B1 1F2 1B2 1STEP\n";
    size_t need = pp_schedule_format(&s, false, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, want) == 0 && need == strlen(want), "%s", buf);
    char small[10];
    CHECK(pp_schedule_format(&s, false, small, sizeof small) == need && strlen(small) == 9);
    pp_schedule_free(&s);
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_GPIPE, 2, 1, NULL, &err), &err);
    pp_schedule_format(&s, true, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, "device 0: 0F0 0SEND_F0 0RECV_B0 0B0 0STEP\n"
                          "device 1: 1RECV_F0 1F0 1B0 1SEND_B0 1STEP\n") == 0, "%s", buf);
    need = pp_schedule_format_csv(&s, true, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, "0F0,0SEND_F0,0RECV_B0,0B0\r\n1RECV_F0,1F0,1B0,1SEND_B0\r\n") == 0 &&
              need == strlen(buf), "%s", buf);
    pp_schedule_format_csv(&s, false, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, "0F0,0B0\r\n1F0,1B0\r\n") == 0, "%s", buf);
    pp_schedule_free(&s);
    /* a composite */
    ut_shape u;
    CHECK(ut_shape_make(&u, PP_SCHEDULE_DUALPIPEV, 2, 2, 4) == 0);
    CHECK_OK(pp_schedule_generate(&s, PP_SCHEDULE_DUALPIPEV, &u.shape, &err), &err);
    pp_schedule_format_csv(&s, false, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, "0F0,0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1)OVERLAP_F_B,(3F2;0B0)OVERLAP_F_B,"
                          "3B2,(3F3;0B1)OVERLAP_F_B,3B3,0I2,0W2,0I3,0W3\r\n1F0,2F0,1F1,2F1,1F2,"
                          "2B0,(2F2;1B0)OVERLAP_F_B,(1F3;2B1)OVERLAP_F_B,(2F3;1B1)OVERLAP_F_B,2B2,"
                          "1B2,2I3,1I3,2W3,1W3\r\n") == 0, "%s", buf);
    pp_schedule_format(&s, false, buf, sizeof buf);
    const char *head = "device 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1) (3F2;0B0)";
    CHECK_MSG(strncmp(buf, head, strlen(head)) == 0, "%s", buf);
    pp_schedule_free(&s);
}

/* The lowering pass: sends and receives only between devices; a V's turn
 * and its first/last stage on device 0 hand over locally. */
static void test_add_comms(void)
{
    static const int dev[4] = {0, 1, 1, 0};
    pp_schedule_shape shape = {4, 2, 1, dev, NULL};
    pp_schedule s;
    pp_error err;
    CHECK_OK(pp_schedule_init_shape(&s, "v", &shape, &err), &err);
    static const struct {
        int stage;
        pp_action_kind kind;
    } order[] = {{0, PP_ACT_F}, {1, PP_ACT_F}, {2, PP_ACT_F}, {3, PP_ACT_F},
                 {3, PP_ACT_B}, {2, PP_ACT_I}, {2, PP_ACT_W}, {1, PP_ACT_B}, {0, PP_ACT_B}};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++)
        CHECK_OK(pp_schedule_push(&s, order[k].stage, order[k].kind, 0, &err), &err);
    CHECK_OK(pp_schedule_validate(&s, &err), &err);
    CHECK_OK(pp_schedule_add_comms(&s, &err), &err);
    CHECK_OK(pp_schedule_validate(&s, &err), &err);
    char buf[512];
    pp_schedule_format(&s, true, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, "device 0: 0F0 0SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0\n"
                          "device 1: 1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2I0 2W0 1B0 1SEND_B0\n") ==
              0, "%s", buf);
    CHECK_OK(pp_schedule_add_comms(&s, &err), &err); /* no-op with comms */
    char again[512];
    pp_schedule_format(&s, true, again, sizeof again);
    CHECK(strcmp(buf, again) == 0);
    int peak[4];
    pp_schedule_in_flight(&s, peak);
    CHECK(peak[0] == 1 && peak[2] == 1);
    pp_schedule_free(&s);
}

/* Placements a kind cannot run, and padding notes. */
static void test_placement_and_notes(void)
{
    ut_shape u;
    pp_schedule s;
    pp_error err;
    CHECK(ut_shape_make(&u, PP_SCHEDULE_LOOPED_BFS, 4, 2, 8) == 0); /* looped */
    CHECK(pp_schedule_generate(&s, PP_SCHEDULE_ZBV, &u.shape, &err) == PP_ERR_INPUT);
    CHECK_MSG(strcmp(err.msg, "schedule zbv runs two stages per device in a V (stage s on device "
                              "s, then 2 x devices - 1 - s): here 0,1,2,3,3,2,1,0; these 8 stages "
                              "are on 4 devices as 0,1,2,3,0,1,2,3") == 0, "%s", err.msg);
    /* a kind of one stage per device over stages that share devices runs
     * folded: valid, every device's list its stages' actions only */
    for (int kind = 0; kind < PP_SCHEDULE_KINDS; kind++) {
        if (pp_schedule_kind_placement((pp_schedule_kind)kind) != PP_PLACEMENT_ONE) continue;
        CHECK_OK(pp_schedule_generate(&s, (pp_schedule_kind)kind, &u.shape, &err), &err);
        CHECK_OK(pp_schedule_validate(&s, &err), &err);
        CHECK_OK(pp_schedule_add_comms(&s, &err), &err);
        CHECK_OK(pp_schedule_validate(&s, &err), &err);
        CHECK_MSG(strstr(s.note, "8 stages on 4 devices as 0,1,2,3,0,1,2,3 run as its order "
                                 "over one device per stage, merged per device") != NULL,
                  "%s", s.note);
        pp_schedule_free(&s);
    }
    {
        /* the plan of a new user: stages 0 and 2 on one device */
        static const int dev010[] = {0, 1, 0};
        pp_schedule_shape sh = {3, 2, 5, dev010, NULL};
        CHECK_OK(pp_schedule_generate(&s, PP_SCHEDULE_GPIPE, &sh, &err), &err);
        CHECK_OK(pp_schedule_validate(&s, &err), &err);
        CHECK(s.n_actions[0] == 20 && s.n_actions[1] == 10);
        /* device 0 begins with stage 0's forwards and ends with its backwards */
        CHECK(s.actions[0][0].kind == PP_ACT_F && s.actions[0][0].stage == 0);
        CHECK(s.actions[0][19].kind == PP_ACT_B && s.actions[0][19].stage == 0);
        pp_schedule_free(&s);
    }
    CHECK(ut_shape_make(&u, PP_SCHEDULE_ZBV, 4, 2, 3) == 0);
    CHECK_OK(pp_schedule_generate(&s, PP_SCHEDULE_ZBV, &u.shape, &err), &err);
    CHECK_MSG(strcmp(s.note, "zbv: 3 micro-batches run as its order for 7 without micro-batches "
                             "3..6 (it needs at least 2 x devices - 1)") == 0, "%s", s.note);
    pp_schedule_free(&s);
    CHECK(ut_shape_make(&u, PP_SCHEDULE_INTERLEAVED_1F1B, 4, 2, 9) == 0);
    CHECK_OK(pp_schedule_generate(&s, PP_SCHEDULE_INTERLEAVED_1F1B, &u.shape, &err), &err);
    CHECK_MSG(strcmp(s.note, "interleaved1f1b: 9 micro-batches run as its order for 10 without "
                             "micro-batch 9 (it needs a multiple of its rounds, max(1, m div "
                             "devices))") == 0, "%s", s.note);
    pp_schedule_free(&s);
    /* pp_schedule_build: one stage per device, with communication and STEP */
    CHECK(pp_schedule_build(&s, PP_SCHEDULE_ZBV, 4, 4, NULL, &err) == PP_ERR_INVALID);
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_ZBH1, 3, 4, NULL, &err), &err);
    CHECK(pp_schedule_has_comms(&s) && s.actions[0][s.n_actions[0] - 1].kind == PP_ACT_STEP);
    pp_schedule_free(&s);
    /* shapes that are not */
    int bad_dev[3] = {0, 2, 2};
    pp_schedule_shape bad = {3, 3, 2, bad_dev, NULL};
    CHECK(pp_schedule_init_shape(&s, "x", &bad, &err) == PP_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "device 1 holds no stage") != NULL, "%s", err.msg);
    CHECK(pp_schedule_init(&s, "x", 0, 2, NULL, &err) == PP_ERR_INVALID);
    CHECK(pp_schedule_init(&s, "x", 2, 2, (int[]){1, 0}, &err) == PP_ERR_INVALID);
}

int main(void)
{
    test_names();
    test_generate_all();
    test_headline();
    test_zero_bubble_costs();
    test_in_flight();
    test_format();
    test_add_comms();
    test_placement_and_notes();
    return check_summary("schedule");
}
