/*
 * test_upload.c - the first stage's upload (pipeline/upload.h) on CPU
 * devices, whose streams keep the same order as CUDA's:
 *
 *   bits     a 2-stage pipeline trains the same bits with the upload and
 *            without it (PP_UPLOAD=off: the forwards copy from host memory),
 *            eager and replayed as graphs, over epochs with a short last
 *            batch, shuffled, with evaluations between steps, and the
 *            1-stage run's bits
 *   trace    the copies run on a lane of their own ("upload s0", on stage
 *            0's device), one per step, each ending before its step's first
 *            forward begins; how many began before the step before them had
 *            ended is printed
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "pipeline/pipeline.h"
#include "tests/check.h"

static char tmpdir[200];

enum { STEPS = 8 }; /* 2 epochs of 3 batches: 10, 10 and 6 of 26 samples */

static pp_plan *plan_of(int stages)
{
    static const char *const placements[] = {
        "  - {device: cpu:0, layers: [c1, b1, r1, p1, c2, s1, a1, fl, f1, r2, f2]}\n",
        "  - {device: cpu:0, layers: [c1, b1, r1]}\n"
        "  - {device: cpu:1, layers: [p1, c2, s1, a1, fl, f1, r2, f2]}\n",
    };
    char text[4096];
    snprintf(text, sizeof text,
             "model:\n  name: sequential\n  in_channels: 3\n  layers:\n"
             "    - {name: c1, type: conv, out_channels: 6, kernel: 3, padding: 1}\n"
             "    - {name: b1, type: batchnorm}\n    - {name: r1, type: relu}\n"
             "    - {name: p1, type: maxpool, kernel: 3, stride: 2, padding: 1}\n"
             "    - {name: c2, type: conv, out_channels: 8, kernel: 3, bias: false}\n"
             "    - {name: s1, type: sigmoid}\n"
             "    - {name: a1, type: avgpool, kernel: 2, padding: 1}\n"
             "    - {name: fl, type: flatten}\n"
             "    - {name: f1, type: linear, out_features: 12}\n"
             "    - {name: r2, type: relu}\n"
             "    - {name: f2, type: linear, out_features: 10}\n"
             "batch: {size: 10, split_size: 4}\nschedule: 1f1b\n"
             "optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0001}\n"
             "data: {format: synthetic, image_size: [12, 12], samples: 26, "
             "shuffle: true}\n"
             "eval: {format: synthetic, image_size: [12, 12], samples: 7, "
             "batch_size: 4}\n"
             "seed: 9\nsteps: %d\nstages:\n%s",
             STEPS, placements[stages - 1]);
    pp_plan *plan = NULL;
    pp_diag diag;
    pp_diag_clear(&diag);
    char buf[4096];
    CHECK_MSG(pp_plan_parse_string("upload.yaml", text, strlen(text), &plan, &diag) == PP_OK,
              "plan: %s", pp_diag_format(&diag, buf, sizeof buf));
    return plan;
}

/* Trains the plan's steps (an evaluation after steps 2 and 5), saves, and
 * returns the checkpoint's bytes (*n) and each step's loss; the trace to
 * trace_path when not NULL. */
static unsigned char *train(int stages, bool upload, pp_pipeline_graphs graphs,
                            const char *trace_path, double *losses, size_t *n)
{
    setenv("PP_UPLOAD", upload ? "on" : "off", 1);
    *n = 0;
    pp_plan *plan = plan_of(stages);
    if (!plan) return NULL;
    pp_error err;
    pp_pipeline *p = NULL;
    const pp_pipeline_options opts = {.graphs = graphs, .keep_trace = trace_path != NULL};
    CHECK_OK(pp_pipeline_new(plan, &opts, &p, &err), &err);
    unsigned char *bytes = NULL;
    if (p) {
        for (int i = 0; i < STEPS; i++) {
            pp_step_result r;
            CHECK_OK(pp_pipeline_step(p, &r, &err), &err);
            losses[i] = r.loss;
            if (i == 2 || i == 5) {
                pp_eval_result e;
                CHECK_OK(pp_pipeline_evaluate(p, &e, &err), &err);
            }
        }
        char path[256];
        snprintf(path, sizeof path, "%s/u.safetensors", tmpdir);
        CHECK_OK(pp_pipeline_save(p, path, true, &err), &err);
        bytes = check_read_file(path, n);
        unlink(path);
        if (trace_path) CHECK_OK(pp_pipeline_write_trace(p, trace_path, &err), &err);
        pp_pipeline_free(p);
    }
    pp_plan_free(plan);
    unsetenv("PP_UPLOAD");
    return bytes;
}

static void test_bits(void)
{
    double ref_loss[STEPS], loss[STEPS];
    size_t ref_n, n;
    unsigned char *ref = train(1, false, PP_PIPELINE_GRAPHS_OFF, NULL, ref_loss, &ref_n);
    CHECK(ref && ref_n > 1000);
    static const struct {
        int stages;
        bool upload;
        pp_pipeline_graphs graphs;
    } runs[] = {{1, true, PP_PIPELINE_GRAPHS_OFF},  {2, false, PP_PIPELINE_GRAPHS_OFF},
                {2, true, PP_PIPELINE_GRAPHS_OFF},  {2, true, PP_PIPELINE_GRAPHS_FORCE},
                {2, false, PP_PIPELINE_GRAPHS_FORCE}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        unsigned char *b = train(runs[k].stages, runs[k].upload, runs[k].graphs, NULL, loss, &n);
        const bool same = b && ref && n == ref_n && memcmp(b, ref, n) == 0;
        CHECK_MSG(same && memcmp(loss, ref_loss, sizeof loss) == 0,
                  "%d stage(s), upload %s, graphs %s: %s, last loss %.9g vs %.9g",
                  runs[k].stages, runs[k].upload ? "on" : "off",
                  runs[k].graphs == PP_PIPELINE_GRAPHS_FORCE ? "forced" : "off",
                  same ? "same checkpoint" : "checkpoint differs", loss[STEPS - 1],
                  ref_loss[STEPS - 1]);
        free(b);
    }
    free(ref);
}

/* A span of the trace: its name, lane (tid), step and times (us). */
typedef struct span {
    const char *name;
    int tid, step;
    double ts, end;
} span;

static void test_trace(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s/trace.json", tmpdir);
    double loss[STEPS];
    size_t n;
    free(train(2, true, PP_PIPELINE_GRAPHS_OFF, path, loss, &n));
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    CHECK_MSG(root != NULL, "trace: %s", jerr.text);
    json_t *events = json_is_object(root) ? json_object_get(root, "traceEvents") : root;
    int upload_tid = -1, stage0_tid = -1, upload_pid = -1, stage0_pid = -1;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *what = json_string_value(json_object_get(e, "name"));
        if (!ph || strcmp(ph, "M") || !what || strcmp(what, "thread_name")) continue;
        const char *lane = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
        const int tid = (int)json_integer_value(json_object_get(e, "tid"));
        const int pid = (int)json_integer_value(json_object_get(e, "pid"));
        if (lane && !strcmp(lane, "upload s0")) upload_tid = tid, upload_pid = pid;
        if (lane && !strcmp(lane, "stage0")) stage0_tid = tid, stage0_pid = pid;
    }
    CHECK_MSG(upload_tid >= 0 && upload_tid != stage0_tid && upload_pid == stage0_pid,
              "an upload lane of its own on stage 0's device (tids %d, %d; pids %d, %d)",
              upload_tid, stage0_tid, upload_pid, stage0_pid);
    double up_ts[STEPS], up_end[STEPS], first_f[STEPS], last_end[STEPS];
    bool seen[STEPS] = {false};
    int ups = 0;
    for (int k = 0; k < STEPS; k++) first_f[k] = 1e300, last_end[k] = -1e300;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph || strcmp(ph, "X")) continue;
        const span sp = {json_string_value(json_object_get(e, "name")),
                         (int)json_integer_value(json_object_get(e, "tid")),
                         (int)json_integer_value(json_object_get(json_object_get(e, "args"),
                                                                 "step")),
                         json_real_value(json_object_get(e, "ts")),
                         json_real_value(json_object_get(e, "ts")) +
                             json_real_value(json_object_get(e, "dur"))};
        if (!sp.name || sp.step < 0 || sp.step >= STEPS) continue;
        int k;
        if (sp.tid == upload_tid && sscanf(sp.name, "upload %d", &k) == 1 && k >= 0 &&
            k < STEPS) {
            up_ts[k] = sp.ts;
            up_end[k] = sp.end;
            seen[k] = true;
            ups++;
            CHECK_MSG(sp.step == k || sp.step == k - 1, "upload %d kept with step %d", k,
                      sp.step);
        } else if (sp.tid == stage0_tid && sp.name[0] == 'F' && sp.ts < first_f[sp.step]) {
            first_f[sp.step] = sp.ts;
        }
        if (sp.tid != upload_tid && sp.end > last_end[sp.step]) last_end[sp.step] = sp.end;
    }
    int early = 0;
    for (int k = 0; k < STEPS; k++) {
        CHECK_MSG(seen[k] && up_end[k] <= first_f[k] + 1e-3,
                  "step %d: its copy (%.1f .. %.1f us) before its first forward (%.1f us)", k,
                  up_ts[k], up_end[k], first_f[k]);
        early += k > 0 && seen[k] && up_ts[k] < last_end[k - 1];
    }
    CHECK_MSG(ups >= STEPS, "%d upload spans for %d steps", ups, STEPS);
    fprintf(stderr, "upload: %d copies on their own lane, each before its step's forwards; %d "
            "of %d began while the step before ran\n", ups, early, STEPS - 1);
    json_decref(root);
    unlink(path);
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "pp-upload")) return 1;
    test_bits();
    test_trace();
    rmdir(tmpdir);
    return check_summary("upload");
}
