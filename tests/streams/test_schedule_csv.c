/*
 * test_schedule_csv.c - schedules in torch.distributed.pipelining's CSV
 * grammar: every file torch's classes wrote (tests/schedules/torch, the
 * folder is argv[1]) loads and validates, its -comms and -comms-fsdp forms
 * print back byte for byte, and our built-ins give the same per-device
 * orders (Looped BFS: the same up to each stage's backward order, which
 * docs/SCHEDULES.md explains, and no slower); other configurations torch
 * would write round-trip; hand-written cells (spaces, LF, idle cells,
 * composites, UNSHARD); and the validator's exact messages for bad programs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streams/schedule.h"
#include "tests/check.h"
#include "tests/streams/schedule_util.h"

static const char *dir = "tests/schedules/torch";

static const struct {
    const char *cls;
    pp_schedule_kind kind;
    int p, v, m;
} torch_files[] = {
    {"ScheduleGPipe", PP_SCHEDULE_GPIPE, 4, 1, 8},
    {"ScheduleGPipe", PP_SCHEDULE_GPIPE, 2, 1, 4},
    {"ScheduleInterleaved1F1B", PP_SCHEDULE_INTERLEAVED_1F1B, 4, 2, 8},
    {"ScheduleInterleaved1F1B", PP_SCHEDULE_INTERLEAVED_1F1B, 2, 2, 4},
    {"ScheduleInterleaved1F1B", PP_SCHEDULE_INTERLEAVED_1F1B, 4, 4, 8},
    {"ScheduleLoopedBFS", PP_SCHEDULE_LOOPED_BFS, 4, 2, 8},
    {"ScheduleLoopedBFS", PP_SCHEDULE_LOOPED_BFS, 2, 2, 4},
    {"ScheduleLoopedBFS", PP_SCHEDULE_LOOPED_BFS, 4, 4, 8},
    {"ScheduleInterleavedZeroBubble", PP_SCHEDULE_INTERLEAVED_ZB, 4, 2, 8},
    {"ScheduleInterleavedZeroBubble", PP_SCHEDULE_INTERLEAVED_ZB, 2, 2, 4},
    {"ScheduleInterleavedZeroBubble", PP_SCHEDULE_INTERLEAVED_ZB, 4, 4, 8},
    {"ScheduleZBVZeroBubble", PP_SCHEDULE_ZBV, 4, 2, 8},
    {"ScheduleZBVZeroBubble", PP_SCHEDULE_ZBV, 2, 2, 4},
    {"ScheduleDualPipeV", PP_SCHEDULE_DUALPIPEV, 4, 2, 8},
    {"ScheduleDualPipeV", PP_SCHEDULE_DUALPIPEV, 2, 2, 4},
};

/* Looped BFS: torch runs each stage's backwards from the last micro-batch
 * down; ours in order. Same device lists up to that: the forwards and the
 * order of stages agree, and each stage's backwards are a reversal. */
static bool bfs_equal_up_to_order(const pp_schedule *t, const pp_schedule *o, int d)
{
    if (t->n_actions[d] != o->n_actions[d]) return false;
    int m = t->micro_batches;
    for (int p = 0; p < t->n_actions[d]; p++) {
        pp_action a = t->actions[d][p], b = o->actions[d][p];
        if (a.kind != b.kind || a.stage != b.stage) return false;
        if (a.kind == PP_ACT_F && a.mb != b.mb) return false;
        if (a.kind == PP_ACT_B && a.mb != m - 1 - b.mb) return false;
    }
    return true;
}

static void test_torch_files(void)
{
    int loaded = 0;
    for (size_t f = 0; f < sizeof torch_files / sizeof torch_files[0]; f++) {
        char path[512], tag[96];
        snprintf(tag, sizeof tag, "%s-pp%d-v%d-m%d", torch_files[f].cls, torch_files[f].p,
                 torch_files[f].v, torch_files[f].m);
        snprintf(path, sizeof path, "%s/%s.csv", dir, tag);
        pp_schedule t, o, c;
        pp_error err;
        /* the shape the file implies is the class's */
        if (pp_schedule_load_csv(path, NULL, &t, &err) != PP_OK) {
            CHECK_MSG(0, "%s", err.msg);
            continue;
        }
        loaded++;
        ut_shape u;
        CHECK(ut_shape_make(&u, torch_files[f].kind, torch_files[f].p, torch_files[f].v,
                            torch_files[f].m) == 0);
        CHECK(t.stages == u.shape.stages && t.devices == u.shape.devices &&
              t.micro_batches == u.shape.micro_batches);
        for (int k = 0; k < t.stages; k++) CHECK_MSG(t.stage_device[k] == u.dev[k], "%s", tag);
        CHECK_OK(pp_schedule_generate(&o, torch_files[f].kind, &u.shape, &err), &err);
        for (int d = 0; d < t.devices; d++) {
            char *a = ut_compute_list(&t, d), *b = ut_compute_list(&o, d);
            bool same = strcmp(a, b) == 0;
            if (torch_files[f].kind == PP_SCHEDULE_LOOPED_BFS)
                CHECK_MSG(!same && bfs_equal_up_to_order(&t, &o, d), "%s device %d", tag, d);
            else
                CHECK_MSG(same, "%s device %d:\n torch %s\n ours  %s", tag, d, a, b);
            free(a);
            free(b);
        }
        double ts = ut_unit_step(&t, NULL), os = ut_unit_step(&o, NULL);
        CHECK_MSG(os > 0 && os <= ts + 1e-9, "%s: ours %.2f, torch's %.2f", tag, os, ts);
        pp_schedule_free(&o);
        /* the same file against the shape a plan gives: accepted */
        CHECK_OK(pp_schedule_load_csv(path, &u.shape, &o, &err), &err);
        pp_schedule_free(&o);
        /* -comms and -comms-fsdp: valid, the same compute order, byte for byte back */
        static const char *const suffix[] = {"-comms", "-comms-fsdp"};
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "%s/%s%s.csv", dir, tag, suffix[k]);
            if (pp_schedule_load_csv(path, &u.shape, &c, &err) != PP_OK) {
                CHECK_MSG(0, "%s", err.msg);
                continue;
            }
            CHECK(pp_schedule_has_comms(&c));
            for (int d = 0; d < t.devices; d++) {
                char *a = ut_compute_list(&t, d), *b = ut_compute_list(&c, d);
                CHECK_MSG(strcmp(a, b) == 0, "%s%s device %d", tag, suffix[k], d);
                free(a);
                free(b);
            }
            size_t n;
            char *file = (char *)check_read_file(path, &n);
            size_t need = pp_schedule_format_csv(&c, true, NULL, 0);
            char *text = malloc(need + 1);
            if (file && text) {
                pp_schedule_format_csv(&c, true, text, need + 1);
                CHECK_MSG(need == n && memcmp(text, file, n) == 0, "%s%s does not print back",
                          tag, suffix[k]);
            }
            free(file);
            free(text);
            pp_schedule_free(&c);
        }
        pp_schedule_free(&t);
    }
    CHECK(loaded == 15);
}

/* Other configurations torch would write: ours, printed and read back. */
static void test_round_trip(void)
{
    int runs = 0;
    for (int kind = 0; kind < PP_SCHEDULE_KINDS; kind++) {
        if (kind == PP_SCHEDULE_FORWARD) continue;
        for (int D = 1; D <= 5; D++)
            for (int V = 1; V <= 3; V++)
                for (int m = 1; m <= 13; m += 3) {
                    ut_shape u;
                    pp_schedule s, back;
                    pp_error err;
                    if (ut_shape_make(&u, (pp_schedule_kind)kind, D, V, m) ||
                        pp_schedule_generate(&s, (pp_schedule_kind)kind, &u.shape, &err) != PP_OK)
                        continue;
                    for (int comms = 0; comms < 2; comms++) {
                        if (comms) CHECK_OK(pp_schedule_add_comms(&s, &err), &err);
                        size_t need = pp_schedule_format_csv(&s, comms, NULL, 0);
                        char *text = malloc(need + 1);
                        pp_schedule_format_csv(&s, comms, text, need + 1);
                        if (pp_schedule_parse_csv("gen.csv", text, need, &u.shape, &back, &err) ==
                            PP_OK) {
                            size_t need2 = pp_schedule_format_csv(&back, comms, NULL, 0);
                            char *again = malloc(need2 + 1);
                            pp_schedule_format_csv(&back, comms, again, need2 + 1);
                            CHECK_MSG(need2 == need && strcmp(text, again) == 0, "%s D=%d V=%d "
                                      "m=%d", s.name, D, V, m);
                            free(again);
                            pp_schedule_free(&back);
                            runs++;
                        } else {
                            CHECK_MSG(0, "%s D=%d V=%d m=%d: %s", s.name, D, V, m, err.msg);
                        }
                        free(text);
                    }
                    pp_schedule_free(&s);
                }
    }
    CHECK(runs > 200);
}

/* Hand-written text: LF, spaces, idle cells (also trailing), UNSHARD, blank lines at the
 * end (an editor's). */
static void test_grammar(void)
{
    static const char *const good[] = {
        "0F0,0F1,,0B0,0B1\n,1F0,1F1,1B0,1B1\n",
        " 0F0 , 0F1,0B0 ,0B1,,\r\n1F0,1F1,1B0,1B1",
        "0F0,0F1,0B0,0B1\r\n1F0,1F1,1B0,1B1\r\n\r\n",
        "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n\n  \n",
        "0UNSHARD,0F0,0F1,0B0,0B1,0RESHARD\r\n1UNSHARD,1F0,1B0,1F1,1B1\r\n",
        "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0RECV_B1,0B0,0B1\r\n"
        "1RECV_F0,1RECV_F1,1F0,1F1,1I0,1SEND_B0,1I1,1SEND_B1,1W1,1W0\r\n",
        "0F0,0F1,3F0,(0F2;3B0)OVERLAP_F_B,3F1,(3F2;0B0)OVERLAP_F_B,3B1,0B1,3B2,0B2\r\n"
        "1F0,2F0,1F1,2F1,2B0,1F2,(2F2;1B0)OVERLAP_F_B,2B1,1B1,2B2,1B2\r\n",
    };
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
        pp_schedule s;
        pp_error err;
        CHECK_MSG(pp_schedule_parse_csv("hand.csv", good[k], strlen(good[k]), NULL, &s, &err) ==
                  PP_OK, "case %zu: %s", k, err.msg);
        pp_schedule_free(&s);
    }
}

/* Exact messages for bad programs: the class of problem, its place. */
static void test_errors(void)
{
    static const int v2[4] = {0, 1, 1, 0};
    static const pp_schedule_shape two = {2, 2, 2, NULL, NULL}, v_shape = {4, 2, 1, v2, NULL};
    static const struct {
        const char *text;
        const pp_schedule_shape *want;
        const char *msg;
    } cases[] = {
        /* unknown actions */
        {"0F0,0X0\r\n", NULL, "t.csv:1:2: unknown action '0X0': a cell is STAGE ACTION "
         "MICRO-BATCH, e.g. 2F0, 1I3, 3SEND_F1, or a composite (0F3;3B1)OVERLAP_F_B"},
        {"0F0,0F\r\n", NULL, "t.csv:1:2: unknown action '0F': the action needs a micro-batch "
         "(e.g. 2F0)"},
        {"0UNSHARD2,0F0,0B0\r\n", NULL, "t.csv:1:1: unknown action '0UNSHARD2': UNSHARD and "
         "RESHARD take no micro-batch"},
        {"(0F0;1B0)OVERLAP\r\n", NULL, "t.csv:1:1: unknown action '(0F0;1B0)OVERLAP': a "
         "composite is (A;B)OVERLAP_F_B, e.g. (0F3;3B1)OVERLAP_F_B"},
        /* missing and duplicate actions */
        {"0F0,0F1,0B0,0B1\r\n1F0,1F1,1B0\r\n", NULL, "t.csv:2:2: missing 1B1 (for 1F1 here): "
         "every stage runs each micro-batch backward once (B, or I and W)"},
        {"0F0,0F1,0B0,0B1\r\n1F1,1B1\r\n", &two, "t.csv:2:2: missing 1F0 (not in the row, which "
         "ends here): every stage runs each micro-batch forward once"},
        {"0F0,0F0,0B0\r\n", NULL, "t.csv:1:2: 0F0 twice (also at row 1 column 1)"},
        {"0F0,0I0\r\n", NULL, "t.csv:1:2: missing 0W0 (for 0I0 here): I leaves the weight gradients "
         "to W"},
        {"0F0,0B0,0I0,0W0\r\n", NULL, "t.csv:1:3: 0I0, but the micro-batch also has a whole "
         "backward 0B0: a backward is B, or I and W"},
        /* wrong device and shapes */
        {"0F0,1F0,0B0,1B0\r\n1F1\r\n", NULL, "t.csv:2:1: 1F1 on device 1, but stage 1 is placed "
         "on device 0 (the row it first appears in)"},
        {"0F0,1F0,1F1,1B0,0B0\r\n2F0,1B1,2B0\r\n", NULL, "t.csv:2:2: 1B1 on device 1, but "
         "stage 1 is placed on device 0"},
        {"0F0,0F1,0B0,0B1\r\n1F0,1F1,1B0,1B1\r\n1F0\r\n", &two, "t.csv:3:1: 3 rows, but the "
         "stages are placed on 2 devices: a schedule has one row per device"},
        {"0F0,0B0\r\n1F0,1B0\r\n", &two, "t.csv:1:1: the program is written for 1 micro-batch "
         "but the batch has 2: a program runs the plan's micro-batches (write it for 2, or "
         "change batch.size or split_size)"},
        {"0F0,0F1,0B0,0B1\r\n1F0,1F1,1B0\r\n\r\n \r\n", &two, "t.csv:2:2: missing 1B1 (for "
         "1F1 here): every stage runs each micro-batch backward once (B, or I and W)"},
        {"0F0,0F2,0B0\r\n1F0,1B0\r\n", &two, "t.csv:1:2: 0F2: micro-batch 2 out of range: the "
         "program is written for 3 micro-batches but the batch has 2 (write it for 2, or change "
         "batch.size or split_size)"},
        /* order within a device */
        {"0F0,0W0,0I0\r\n", NULL, "t.csv:1:2: 0W0 before 0I0 (at row 1 column 3): W needs its I "
         "first"},
        {"0B0,0F0\r\n", NULL, "t.csv:1:1: 0B0 before 0F0 (at row 1 column 2): the backward needs "
         "its forward"},
        {"0F0,0SEND_F0,1F0,1B0,0B0\r\n", NULL, "t.csv:1:2: 0SEND_F0, but stages 0 and 1 are both "
         "on device 0, which hands the activation over without a send"},
        {"(0F0;0B0)OVERLAP_F_B\r\n", NULL, "t.csv:1:1: 0F0: an OVERLAP_F_B composite needs two "
         "compute actions of other micro-batches or stages, side by side"},
        /* a cycle through one device's order, a deadlock across devices */
        {"0F0,3F0,3B0,0B0\r\n2F0,1F0,2B0,1B0\r\n", &v_shape, "t.csv:2:1: cycle: 2F0 needs 1F0, "
         "which comes later on device 1 (at row 2 column 2)"},
        {"0F0,0B0,0F1,0B1\r\n1F1,1F0,1B0,1B1\r\n", NULL, "t.csv:1:2: deadlock with blocking "
         "receives: device 0 waits at 0B0 for 1B0 of device 1; device 1 waits at 1F1 for 0F1 of "
         "device 0"},
        {"0F0,0RECV_B0,0SEND_F0,0B0\r\n1RECV_F0,1F0,1B0,1SEND_B0\r\n", NULL, "t.csv:1:2: "
         "deadlock with blocking receives: device 0 waits at 0RECV_B0 for 1SEND_B0 of device 1; "
         "device 1 waits at 1RECV_F0 for 0SEND_F0 of device 0"},
        {"0F0,0SEND_F0,0B0\r\n1RECV_F0,1F0,1B0,1SEND_B0\r\n", NULL, "t.csv:1:3: missing "
         "0RECV_B0 (for 0B0 here): the next stage is on another device"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pp_schedule s;
        pp_error err;
        pp_status st = pp_schedule_parse_csv("t.csv", cases[k].text, strlen(cases[k].text),
                                             cases[k].want, &s, &err);
        CHECK_MSG(st == PP_ERR_INPUT && strcmp(err.msg, cases[k].msg) == 0,
                  "case %zu:\n got  '%s'\n want '%s'", k, st == PP_OK ? "ok" : err.msg,
                  cases[k].msg);
        if (st == PP_OK) pp_schedule_free(&s);
    }
    /* built schedules name device and action */
    pp_schedule s;
    pp_error err;
    CHECK_OK(pp_schedule_init(&s, "hand", 2, 1, NULL, &err), &err);
    CHECK_OK(pp_schedule_push(&s, 1, PP_ACT_B, 0, &err), &err);
    CHECK_OK(pp_schedule_push(&s, 1, PP_ACT_F, 0, &err), &err);
    CHECK_OK(pp_schedule_push(&s, 0, PP_ACT_F, 0, &err), &err);
    CHECK_OK(pp_schedule_push(&s, 0, PP_ACT_B, 0, &err), &err);
    CHECK(pp_schedule_validate(&s, &err) == PP_ERR_INVALID);
    CHECK_MSG(strcmp(err.msg, "device 1, action 0: 1B0 before 1F0 (at action 1): the backward "
                              "needs its forward") == 0, "%s", err.msg);
    pp_schedule_free(&s);
    /* files that are not there, and empty ones */
    CHECK(pp_schedule_load_csv("/nonexistent/x.csv", NULL, &s, &err) == PP_ERR_INPUT);
    CHECK(strncmp(err.msg, "/nonexistent/x.csv: cannot open", 31) == 0);
    CHECK(pp_schedule_parse_csv("e.csv", "", 0, NULL, &s, &err) == PP_ERR_INPUT);
    CHECK_MSG(strcmp(err.msg, "e.csv:1:1: no actions with a micro-batch: a schedule has a row "
                              "per device of actions such as 0F0") == 0, "%s", err.msg);
}

int main(int argc, char **argv)
{
    if (argc > 1) dir = argv[1];
    test_torch_files();
    test_round_trip();
    test_grammar();
    test_errors();
    return check_summary("schedule_csv");
}
