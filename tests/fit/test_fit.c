/*
 * test_fit.c - fitting plans to memory, and the planner (pipeline/fit.h):
 *   - plan keys: recompute (plan and stage, the stage's wins), one memory
 *     figure per device (conflicting caps are an error at their place, a cap
 *     on one stage caps the device every stage on it shares);
 *   - in-flight micro-batches from the schedule's action lists;
 *   - recomputation: weights, momentum and batch-norm statistics bitwise
 *     equal to a run without it, every mode, both schedules;
 *   - the memory model's error table: predicted against measured device
 *     peaks, ResNet-18 and ResNet-50, GPipe and 1F1B, every recompute mode,
 *     several split sizes, every error within 10%; and every other schedule
 *     (split backward, looped and V-shaped virtual stages, programs read from
 *     files, backwards out of micro-batch order) within 10%;
 *   - limits: a plan predicted over a cap is refused at its FILE:LINE:COL
 *     naming what would fit; a cap reached at run time names the stage,
 *     device and micro-batch;
 *   - the profile cache: measured, fresh, stale, off; balance: time resolves
 *     the same cut from it every time;
 *   - the planner: on the delay model its choice runs at least 0.95x as fast
 *     as the best of every candidate run; with a memory limit at 60% of the
 *     default plan's largest peak, the plan it writes runs within the limit.
 * Runs on the CPU backend; figures are printed, never timed assertions
 * beyond the planner's 0.95 (on the delay model, whose stages sleep).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partitioner/emit.h"
#include "partitioner/plan.h"
#include "pipeline/fit.h"
#include "pipeline/pipeline.h"
#include "tests/check.h"

static char tmpdir[256];

static pp_plan *parse(const char *text, pp_diag *d)
{
    pp_plan *plan = NULL;
    pp_diag_clear(d);
    pp_plan_parse_string("fit.yaml", text, strlen(text), &plan, d);
    return plan;
}

static pp_plan *parse_ok(const char *text)
{
    pp_diag d;
    pp_plan *plan = parse(text, &d);
    char buf[4096];
    CHECK_MSG(plan != NULL, "plan: %s", pp_diag_format(&d, buf, sizeof buf));
    return plan;
}

/* Checks that text fails with a problem at line:col containing fragment. */
static void parse_bad(const char *name, const char *text, int line, int col, const char *fragment)
{
    pp_diag d;
    pp_plan *plan = parse(text, &d);
    CHECK_MSG(plan == NULL, "%s: parsed", name);
    pp_plan_free(plan);
    bool found = false;
    for (int i = 0; i < d.count && i < PP_DIAG_MAX; i++)
        found |= d.items[i].line == line && d.items[i].col == col &&
                 strstr(d.items[i].text, fragment) != NULL;
    char buf[4096];
    CHECK_MSG(found, "%s: want %d:%d '%s', got %s", name, line, col, fragment,
              pp_diag_format(&d, buf, sizeof buf));
}

/* ---- plan keys ---------------------------------------------------------------------- */

#define R18 "model: {name: resnet18, num_classes: 10}\n"
#define B8 "batch: {size: 8, split_size: 2}\n"
#define D32 "data: {format: synthetic, image_size: [32, 32]}\n"

static void test_plan_keys(void)
{
    pp_plan *p = parse_ok(R18 B8 D32 "recompute: except_last\n"
                          "stages:\n"
                          "  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1]}\n"
                          "  - {device: cpu:1, recompute: never, layers: [layer2, layer3]}\n"
                          "  - {device: cpu:0, memory: 512MiB, recompute: always, "
                          "layers: [layer4, avgpool, fc]}\n");
    if (p) {
        CHECK(pp_plan_stage_recompute(p, 0) == PP_PLAN_RECOMPUTE_EXCEPT_LAST);
        CHECK(pp_plan_stage_recompute(p, 1) == PP_PLAN_RECOMPUTE_NEVER);
        CHECK(pp_plan_stage_recompute(p, 2) == PP_PLAN_RECOMPUTE_ALWAYS);
        CHECK(pp_plan_recomputes(p, 0, 2, 4) && !pp_plan_recomputes(p, 0, 3, 4));
        CHECK(!pp_plan_recomputes(p, 1, 0, 4) && pp_plan_recomputes(p, 2, 3, 4));
        /* the cap of stage 2 is cpu:0's, shared with stage 0 */
        CHECK(pp_plan_device_memory(p, 0) == 512ll << 20);
        CHECK(pp_plan_device_memory(p, 2) == 512ll << 20);
        CHECK(pp_plan_device_memory(p, 1) == 0);
        CHECK(pp_plan_device_first_stage(p, 2) == 0);
        /* emit writes the keys back and parses to an equal plan */
        char *text = NULL;
        size_t len;
        pp_error err;
        CHECK_OK(pp_plan_emit(p, &text, &len, &err), &err);
        CHECK(text && strstr(text, "recompute: except_last\n") &&
              strstr(text, "    recompute: always\n") && strstr(text, "    recompute: never\n"));
        pp_plan *q = text ? parse_ok(text) : NULL;
        char why[256] = "";
        CHECK_MSG(q && pp_plan_equal(p, q, why, sizeof why), "emit round trip: %s", why);
        pp_plan_free(q);
        free(text);
    }
    pp_plan_free(p);
    parse_bad("recompute value", R18 B8 D32 "recompute: true\nstages:\n"
              "  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, "
              "layer4, avgpool, fc]}\n", 4, 12,
              "unknown recompute 'true' (expected never, except_last or always)");
    parse_bad("stage recompute value", R18 B8 D32 "stages:\n"
              "  - {device: cpu:0, recompute: sometimes, layers: [conv1, bn1, relu, maxpool, "
              "layer1, layer2, layer3, layer4, avgpool, fc]}\n", 5, 32,
              "unknown recompute 'sometimes'");
    parse_bad("conflicting caps", R18 B8 D32 "stages:\n"
              "  - {device: cpu:0, memory: 1GiB, layers: [conv1, bn1, relu, maxpool, layer1]}\n"
              "  - {device: cpu:1, layers: [layer2, layer3]}\n"
              "  - {device: cpu:0, memory: 2GiB, layers: [layer4, avgpool, fc]}\n", 7, 29,
              "stage 2 caps cpu:0 at 2GiB but stage 0 caps it at 1GiB: a device has one memory "
              "figure");
    parse_bad("conflicting device caps", R18 B8 D32 "stages: auto\nbalance: flops\n"
              "devices: [{device: cpu:0, memory: 1GiB}, {device: cpu:0, memory: 3GiB}]\n", 6, 66,
              "stage 1 caps cpu:0 at 3GiB but stage 0 caps it at 1GiB");
    /* the same figure twice is one cap */
    p = parse_ok(R18 B8 D32 "stages:\n"
                 "  - {device: cpu:0, memory: 1GiB, layers: [conv1, bn1, relu, maxpool, layer1]}\n"
                 "  - {device: cpu:0, memory: 1GiB, layers: [layer2, layer3, layer4, avgpool, "
                 "fc]}\n");
    if (p) CHECK(pp_plan_device_memory(p, 1) == 1ll << 30);
    pp_plan_free(p);
    int64_t b;
    pp_error err;
    CHECK(pp_plan_parse_bytes("12GiB", &b, &err) == PP_OK && b == 12ll << 30);
    CHECK(pp_plan_parse_bytes("12 XB", &b, &err) == PP_ERR_INPUT &&
          strstr(err.msg, "'12 XB' is not a size"));
    CHECK(pp_plan_parse_bytes("0", &b, &err) == PP_ERR_INPUT && strstr(err.msg, "out of range"));
    /* a cache's bound from the environment: unset, a size, none, not a size */
    static const struct { const char *v; pp_status st; int64_t b; } caps[] = {
        {NULL, PP_OK, 7}, {"", PP_OK, 7}, {"2MiB", PP_OK, 2 << 20}, {"none", PP_OK, 0},
        {"lots", PP_ERR_INPUT, 0}, {"0", PP_ERR_INPUT, 0}};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        if (caps[i].v) setenv("PP_TEST_CACHE_MAX", caps[i].v, 1);
        else unsetenv("PP_TEST_CACHE_MAX");
        const pp_status st = pp_plan_cache_max("PP_TEST_CACHE_MAX", 7, &b, &err);
        CHECK_MSG(st == caps[i].st && (st != PP_OK || b == caps[i].b), "'%s': %d, %lld",
                  caps[i].v ? caps[i].v : "(unset)", st, (long long)b);
        if (st != PP_OK)
            CHECK(strstr(err.msg, "PP_TEST_CACHE_MAX=") && strstr(err.msg, "or none"));
    }
    unsetenv("PP_TEST_CACHE_MAX");
}

/* ---- in flight ----------------------------------------------------------------------- */

static void test_in_flight(void)
{
    static const char *const four =
        "stages:\n"
        "  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1]}\n"
        "  - {device: cpu:1, layers: [layer2]}\n"
        "  - {device: cpu:2, layers: [layer3]}\n"
        "  - {device: cpu:3, layers: [layer4, avgpool, fc]}\n";
    static const struct {
        const char *schedule, *batch;
        int want[4];
    } cases[] = {
        {"gpipe", "batch: {size: 12, split_size: 2}\n", {6, 6, 6, 6}},
        {"1f1b", "batch: {size: 12, split_size: 2}\n", {4, 3, 2, 1}},
        {"1f1b", "batch: {size: 4, split_size: 2}\n", {2, 2, 2, 1}},
        {"gpipe", "batch: {size: 3, split_size: 3}\n", {1, 1, 1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%s%s%sschedule: %s\n%s", R18, cases[i].batch, D32,
                 cases[i].schedule, four);
        pp_plan *p = parse_ok(text);
        for (int s = 0; p && s < 4; s++)
            CHECK_MSG(pp_fit_in_flight(p, s) == cases[i].want[s], "%s %s stage %d: %d, want %d",
                      cases[i].schedule, cases[i].batch, s, pp_fit_in_flight(p, s),
                      cases[i].want[s]);
        pp_plan_free(p);
    }
}

/* ---- running plans ------------------------------------------------------------------- */

/* Runs plan for steps steps; device peaks per stage into peak (may be NULL),
 * the median step into *step_ms (may be NULL), a checkpoint to path (may be
 * NULL). Returns the status of the first failure. */
static pp_status run_plan(const pp_plan *plan, int steps, size_t *peak, double *step_ms,
                          const char *path, pp_error *err)
{
    pp_pipeline *p = NULL;
    PP_TRY(pp_pipeline_new(plan, NULL, &p, err));
    pp_status s = PP_OK;
    for (int i = 0; i < steps && s == PP_OK; i++) s = pp_pipeline_step(p, NULL, err);
    if (s == PP_OK && path) s = pp_pipeline_save(p, path, true, err);
    if (s == PP_OK) {
        for (int k = 0; peak && k < plan->n_stages; k++) {
            pp_stage_report sr;
            pp_pipeline_stage_report(p, k, &sr);
            peak[k] = sr.peak_bytes;
        }
        pp_pipeline_report r;
        pp_pipeline_report_get(p, &r);
        if (step_ms) *step_ms = r.step_ms_median;
    }
    pp_pipeline_free(p);
    return s;
}

static pp_plan *resnet_plan(const char *model, int image, int batch, int split,
                            const char *schedule, const char *recompute, const char *stages)
{
    char text[4096];
    snprintf(text, sizeof text,
             "model: {name: %s, num_classes: 10}\n"
             "batch: {size: %d, split_size: %d}\n"
             "schedule: %s\n"
             "recompute: %s\n"
             "optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0001}\n"
             "data: {format: synthetic, image_size: [%d, %d]}\n"
             "seed: 5\n"
             "steps: 2\n"
             "stages:\n%s",
             model, batch, split, schedule, recompute, image, image, stages);
    return parse_ok(text);
}

#define TWO_STAGES                                                                          \
    "  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2]}\n"              \
    "  - {device: cpu:1, layers: [layer3, layer4, avgpool, fc]}\n"

/* ---- recomputation: the same bits ----------------------------------------------------- */

/* Trains plan with opts for its steps and saves to path. */
static void train_save(const pp_plan *plan, const pp_pipeline_options *opts, const char *path)
{
    pp_error err;
    pp_pipeline *p = NULL;
    CHECK_OK(pp_pipeline_new(plan, opts, &p, &err), &err);
    for (int i = 0; p && i < plan->steps; i++) CHECK_OK(pp_pipeline_step(p, NULL, &err), &err);
    if (p) CHECK_OK(pp_pipeline_save(p, path, true, &err), &err);
    pp_pipeline_free(p);
}

static void test_recompute_bits(void)
{
    static const char *const stages3 =
        "  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1]}\n"
        "  - {device: cpu:1, layers: [layer2, layer3.0]}\n"
        "  - {device: cpu:2, layers: [layer3.1, layer4, avgpool, fc]}\n";
    static const char *const mixed =
        "  - {device: cpu:0, recompute: always, layers: [conv1, bn1, relu, maxpool, layer1]}\n"
        "  - {device: cpu:1, recompute: never, layers: [layer2, layer3.0]}\n"
        "  - {device: cpu:2, layers: [layer3.1, layer4, avgpool, fc]}\n";
    static const struct {
        const char *schedule;
        int batch, split;
        const char *recompute, *stages;
        bool graphs;
    } cases[] = {
        {"gpipe", 8, 2, "always", stages3, false},
        {"gpipe", 8, 2, "except_last", stages3, false},
        {"1f1b", 8, 2, "always", stages3, false},
        {"1f1b", 8, 2, "except_last", stages3, false},
        {"1f1b", 7, 3, "always", stages3, false},     /* uneven micro-batches */
        {"1f1b", 4, 2, "except_last", stages3, false}, /* fewer micro-batches than stages */
        {"gpipe", 8, 2, "except_last", mixed, false},  /* per stage, the stage's key wins */
        {"1f1b", 8, 2, "always", stages3, true},       /* replayed steps (recorded items) */
    };
    /* the references (recompute never, eager): cases of the same schedule,
     * batch, split and stages share one, trained once */
    char ref_text[sizeof cases / sizeof cases[0]][4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[4096], a[512], b[512];
        for (int k = 0; k < 2; k++) {
            snprintf(text, sizeof text,
                     "model: {name: resnet18, num_classes: 10, stem: cifar}\n"
                     "batch: {size: %d, split_size: %d}\nschedule: %s\nrecompute: %s\n"
                     "optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0001}\n"
                     "data: {format: synthetic, image_size: [16, 16]}\nseed: 7\nsteps: 3\n"
                     "stages:\n%s",
                     cases[i].batch, cases[i].split, cases[i].schedule,
                     k ? cases[i].recompute : "never", cases[i].stages);
            if (!k) {
                snprintf(ref_text[i], sizeof ref_text[i], "%s", text);
                size_t j = 0;
                while (j < i && strcmp(ref_text[j], text)) j++;
                snprintf(a, sizeof a, "%s/rec%zu-0.safetensors", tmpdir, j);
                if (j < i) continue; /* case j's, kept */
            }
            pp_plan *plan = parse_ok(text);
            if (!plan) return;
            if (!k) /* the reference keeps everything on every stage */
                for (int s = 0; s < plan->n_stages; s++) plan->stages[s].has_recompute = false;
            pp_pipeline_options opts = {0};
            if (k && cases[i].graphs) opts.graphs = PP_PIPELINE_GRAPHS_FORCE;
            if (k) snprintf(b, sizeof b, "%s/rec%zu-1.safetensors", tmpdir, i);
            train_save(plan, &opts, k ? b : a);
            pp_plan_free(plan);
        }
        size_t na, nb;
        unsigned char *x = check_read_file(a, &na), *y = check_read_file(b, &nb);
        CHECK_MSG(x && y && na == nb && memcmp(x, y, na) == 0,
                  "%s batch %d split %d recompute %s%s: the checkpoint differs from never",
                  cases[i].schedule, cases[i].batch, cases[i].split, cases[i].recompute,
                  cases[i].graphs ? " (graphs)" : "");
        free(x);
        free(y);
        unlink(b);
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a[512];
        snprintf(a, sizeof a, "%s/rec%zu-0.safetensors", tmpdir, i);
        unlink(a); /* the references: absent where shared */
    }
}

/* ---- the memory model's error table ---------------------------------------------------- */

static void test_error_table(void)
{
    static const char *const models[] = {"resnet18", "resnet50"};
    static const char *const schedules[] = {"gpipe", "1f1b"};
    static const char *const modes[] = {"never", "except_last", "always"};
    static const int splits[] = {2, 4, 8};
    double worst = 0;
    fprintf(stderr, "\nmemory model, predicted against measured device peaks (CPU, 64x64, batch 16, "
                    "stages [conv1..layer2] [layer3..fc]):\n");
    fprintf(stderr, "%-9s %-6s %-12s %5s  %12s %12s %7s  %12s %12s %7s\n", "model", "sched",
            "recompute", "split", "s0 measured", "s0 predicted", "error", "s1 measured",
            "s1 predicted", "error");
    for (size_t a = 0; a < 2; a++)
        for (size_t b = 0; b < 2; b++)
            for (size_t c = 0; c < 3; c++)
                for (size_t d = 0; d < 3; d++) {
                    if (a == 1 && splits[d] == 2) continue; /* ResNet-50: 4 and 8 (CI time) */
                    pp_plan *plan = resnet_plan(models[a], 64, 16, splits[d], schedules[b],
                                                modes[c], TWO_STAGES);
                    if (!plan) continue;
                    pp_error err;
                    pp_fit_stage pred[2];
                    size_t peak[2] = {0};
                    CHECK_OK(pp_fit_predict(plan, pred, &err), &err);
                    CHECK_OK(run_plan(plan, 2, peak, NULL, NULL, &err), &err);
                    double e[2];
                    for (int s = 0; s < 2; s++) {
                        e[s] = peak[s] ? ((double)pred[s].device_peak - (double)peak[s]) /
                                             (double)peak[s]
                                       : 1.0;
                        if (fabs(e[s]) > worst) worst = fabs(e[s]);
                        CHECK_MSG(fabs(e[s]) <= 0.10, "%s %s %s split %d stage %d: predicted %lld, "
                                  "measured %zu", models[a], schedules[b], modes[c], splits[d], s,
                                  (long long)pred[s].device_peak, peak[s]);
                    }
                    fprintf(stderr, "%-9s %-6s %-12s %5d  %8.1f MiB %8.1f MiB %+6.1f%%  %8.1f MiB "
                            "%8.1f MiB %+6.1f%%\n", models[a], schedules[b], modes[c], splits[d],
                            peak[0] / 1048576.0, pred[0].device_peak / 1048576.0, 100 * e[0],
                            peak[1] / 1048576.0, pred[1].device_peak / 1048576.0, 100 * e[1]);
                    pp_plan_free(plan);
                }
    fprintf(stderr, "largest error %.1f%%\n", 100 * worst);
}

/* Every schedule, built in or read from a file (a split backward, virtual
 * stages looped and in a V, recomputation, backwards out of micro-batch order
 * keeping parameter gradients apart): predicted against measured device
 * peaks, ResNet-18 (cifar stem) at 16x16, batch 16 in 8 micro-batches, and a
 * small GPT-2 with its tied head (split backward, recomputation, a V). */
static void test_schedules_table(void)
{
    static const char *const two =
        "  - {device: cpu:0, layers: [conv1, bn1, relu, layer1, layer2]}\n"
        "  - {device: cpu:1, layers: [layer3, layer4, avgpool, fc]}\n";
    static const char *const looped =
        "  - {device: cpu:0, layers: [conv1, bn1, relu, layer1]}\n"
        "  - {device: cpu:1, layers: [layer2]}\n"
        "  - {device: cpu:0, layers: [layer3]}\n"
        "  - {device: cpu:1, layers: [layer4, avgpool, fc]}\n";
    static const char *const vee =
        "  - {device: cpu:0, layers: [conv1, bn1, relu, layer1]}\n"
        "  - {device: cpu:1, layers: [layer2]}\n"
        "  - {device: cpu:1, layers: [layer3]}\n"
        "  - {device: cpu:0, layers: [layer4, avgpool, fc]}\n";
    /* 1F1B's order as a file, and GPipe's with every backward in reverse order */
    static const char *const f1b =
        "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0F4,0B3,0F5,0B4,0F6,0B5,0F7,0B6,0B7\n"
        "1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3,1F4,1B4,1F5,1B5,1F6,1B6,1F7,1B7\n";
    static const char *const reversed =
        "0F0,0F1,0F2,0F3,0F4,0F5,0F6,0F7,0B7,0B6,0B5,0B4,0B3,0B2,0B1,0B0\n"
        "1F0,1F1,1F2,1F3,1F4,1F5,1F6,1F7,1B7,1B6,1B5,1B4,1B3,1B2,1B1,1B0\n";
    static const char *const gpt_two =
        "  - {device: cpu:0, layers: [wte, wpe, h.0]}\n"
        "  - {device: cpu:1, layers: [h.1, ln_f, lm_head]}\n";
    /* the same stages (written another way: a string of its own) with dropout
     * 0.1: no mask kept (drawn again in the backward) */
    static const char *const gpt_drop =
        "  - device: cpu:0\n    layers: [wte, wpe, h.0]\n"
        "  - device: cpu:1\n    layers: [h.1, ln_f, lm_head]\n";
    static const char *const gpt_vee =
        "  - {device: cpu:0, layers: [wte, wpe]}\n"
        "  - {device: cpu:1, layers: [h.0]}\n"
        "  - {device: cpu:1, layers: [h.1]}\n"
        "  - {device: cpu:0, layers: [ln_f, lm_head]}\n";
    static const struct {
        const char *schedule, *recompute, *stages, *file;
    } cases[] = {
        /* GPT-2: the tied head on the last stage, its logits' gradient kept from I to W */
        {"zbh1", "never", gpt_two, NULL},
        {"1f1b", "always", gpt_two, NULL},
        {"zbv", "never", gpt_vee, NULL},
        {"zbh1", "never", gpt_drop, NULL},
        {"zbh1", "never", two, NULL},
        {"zbh2", "never", two, NULL},
        {"zbh2", "except_last", two, NULL},
        {"zbh2", "always", two, NULL},
        {"interleaved1f1b", "never", looped, NULL},
        {"loopedbfs", "always", looped, NULL},
        {"interleavedzb", "except_last", looped, NULL},
        {"zbv", "never", vee, NULL},
        {"dualpipev", "always", vee, NULL},
        {"file", "never", two, f1b},
        {"file", "never", two, reversed},
        {"file", "always", two, reversed},
    };
    double worst = 0;
    fprintf(stderr, "\nmemory model, every schedule (CPU, resnet18 cifar 16x16, batch 16, split "
                    "2; gpt2 2 blocks of 64, vocabulary 4096, 32 positions, batch 8, split 1): "
                    "device peaks, measured MiB / predicted MiB (error)\n");
    char tokens[300]; /* llm.c's .bin: 256 int32 of header, then uint16 ids */
    snprintf(tokens, sizeof tokens, "%s/tokens.bin", tmpdir);
    bool wrote = check_write_tokens(tokens, 20000, 4096) == 0;
    CHECK_MSG(wrote, "cannot write %s", tokens);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char csv[512] = "", schedule[600], text[4096];
        snprintf(schedule, sizeof schedule, "%s", cases[i].schedule);
        if (cases[i].file) {
            snprintf(csv, sizeof csv, "%s/order%zu.csv", tmpdir, i);
            FILE *f = fopen(csv, "w");
            if (!f || fputs(cases[i].file, f) < 0 || fclose(f) != 0) {
                CHECK_MSG(false, "cannot write %s", csv);
                continue;
            }
            snprintf(schedule, sizeof schedule, "{file: %s}", csv);
        }
        const bool gpt = cases[i].stages == gpt_two || cases[i].stages == gpt_vee ||
                         cases[i].stages == gpt_drop;
        if (gpt)
            snprintf(text, sizeof text,
                     "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 4096, "
                     "block_size: 32, dropout: %g}\nbatch: {size: 8, split_size: 1}\n"
                     "schedule: %s\nrecompute: %s\n"
                     "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                     "data: {format: tokens, file: %s}\nseed: 5\nsteps: 2\nstages:\n%s",
                     cases[i].stages == gpt_drop ? 0.1 : 0.0, schedule, cases[i].recompute,
                     tokens, cases[i].stages);
        else
            snprintf(text, sizeof text,
                     "model: {name: resnet18, num_classes: 10, stem: cifar}\n"
                     "batch: {size: 16, split_size: 2}\nschedule: %s\nrecompute: %s\n"
                     "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                     "data: {format: synthetic, image_size: [16, 16]}\nseed: 5\nsteps: 2\n"
                     "stages:\n%s",
                     schedule, cases[i].recompute, cases[i].stages);
        pp_plan *plan = parse_ok(text);
        if (!plan) continue;
        pp_error err;
        pp_fit_stage pred[4];
        size_t peak[4] = {0};
        CHECK_OK(pp_fit_predict(plan, pred, &err), &err);
        CHECK_OK(run_plan(plan, 2, peak, NULL, NULL, &err), &err);
        fprintf(stderr, "  %-16s %-12s %-18s", cases[i].schedule, cases[i].recompute,
                cases[i].file ? (cases[i].file == f1b ? "(1f1b's order)" : "(reversed B)")
                              : cases[i].stages == gpt_drop ? "(gpt2, dropout)"
                              : gpt                         ? "(gpt2)"
                                                            : "");
        int first[2] = {-1, -1}; /* one figure per device: its first stage's */
        for (int s = 0; s < plan->n_stages; s++) {
            int d = plan->stages[s].device.index;
            if (d < 0 || d > 1 || first[d] >= 0) continue;
            first[d] = s;
            double e = peak[s] ? ((double)pred[s].device_peak - (double)peak[s]) / (double)peak[s]
                               : 1.0;
            if (fabs(e) > worst) worst = fabs(e);
            CHECK_MSG(fabs(e) <= 0.10, "%s %s%s cpu:%d: predicted %lld, measured %zu",
                      cases[i].schedule, cases[i].recompute, cases[i].file ? " (file)" : "", d,
                      (long long)pred[s].device_peak, peak[s]);
            fprintf(stderr, "  cpu:%d %6.1f / %6.1f (%+5.1f%%)", d, peak[s] / 1048576.0,
                    pred[s].device_peak / 1048576.0, 100 * e);
        }
        fprintf(stderr, "\n");
        pp_plan_free(plan);
        if (csv[0]) unlink(csv);
    }
    fprintf(stderr, "largest error %.1f%%\n", 100 * worst);
    unlink(tokens);
}

/* ---- limits ----------------------------------------------------------------------------- */

static void test_limits(void)
{
    /* the new user's plan: a cap on stage 2 of cpu:0 that stage 0 shares */
    static const char *const text =
        "model: {name: resnet18, num_classes: 10}\n"
        "batch: {size: 8, split_size: 2}\n"
        "data: {format: synthetic, image_size: [64, 64]}\n"
        "optimizer: {momentum: 0.9}\n"
        "steps: 1\n"
        "stages:\n"
        "  - device: cpu:0\n"
        "    layers: [conv1, bn1, relu, maxpool, layer1]\n"
        "  - device: cpu:1\n"
        "    layers: [layer2, layer3]\n"
        "  - device: cpu:0\n"
        "    memory: 20MiB\n"
        "    layers: [layer4, avgpool, fc]\n";
    pp_plan *plan = parse_ok(text);
    if (!plan) return;
    pp_error err;
    pp_fit_stage pred[3];
    CHECK_OK(pp_fit_predict(plan, pred, &err), &err);
    CHECK(pred[0].cap == 20 << 20 && pred[2].cap == 20 << 20 && pred[1].cap == 0);
    /* the device holds both stages: their fixed parts, one workspace, and the
     * walk over both stages' actions (no more than the two stages' own peaks) */
    CHECK(pred[0].device_peak == pred[2].device_peak && pred[0].device_peak > pred[2].peak &&
          pred[0].device_peak <= pred[0].peak + pred[2].peak);
    pp_status s = pp_fit_check(plan, pred, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "fit.yaml:12:13: stage 2 (cpu:0): predicted "
                                                   "peak ") &&
                  strstr(err.msg, "exceeds the memory cap of cpu:0, 20.0 MiB (20971520 bytes); "
                                  "would fit: "),
              "refusal: %s", err.msg);
    /* the cap holds for the whole device when the pipeline is made: stage 2's
     * parameters do not fit it beside stage 0's */
    s = run_plan(plan, 1, NULL, NULL, NULL, &err);
    CHECK_MSG(s == PP_ERR_OOM && strstr(err.msg, "stage 2 (cpu:0)") &&
                  strstr(err.msg, "cpu:0: out of memory allocating") &&
                  strstr(err.msg, "limit 20971520"),
              "the cap of a shared device: %s", err.msg);
    /* at run time a device that would pass its cap fails naming the stage,
     * device and micro-batch: a cap between what the parameters need and
     * the predicted peak (the prediction is not consulted here) */
    plan->stages[2].memory_bytes = 0;
    CHECK_OK(pp_fit_predict(plan, pred, &err), &err);
    const pp_fit_stage *p0 = &pred[0];
    int64_t fixed = 0;
    for (int k = 0; k < 3; k += 2)
        fixed += pred[k].params + pred[k].grads + pred[k].optimizer + pred[k].batch +
                 pred[k].slots + pred[k].workspace;
    plan->stages[0].memory_bytes = fixed + p0->activations / 4;
    plan->stages[0].memory_mark = (pp_mark){0, 0};
    s = run_plan(plan, 2, NULL, NULL, NULL, &err);
    CHECK_MSG(s == PP_ERR_OOM && strstr(err.msg, "(cpu:0) micro-batch ") &&
                  strstr(err.msg, "cpu:0: out of memory allocating"),
              "run-time cap: %s", err.msg);
    pp_plan_free(plan);

    /* what would fit is itself predicted to fit */
    plan = resnet_plan("resnet50", 64, 16, 4, "gpipe", "never",
                       "  - {device: cpu:0, memory: 40MiB, layers: [conv1, bn1, relu, maxpool, "
                       "layer1]}\n"
                       "  - {device: cpu:1, layers: [layer2, layer3, layer4, avgpool, fc]}\n");
    if (!plan) return;
    CHECK_OK(pp_fit_predict(plan, pred, &err), &err);
    s = pp_fit_check(plan, pred, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "fit.yaml:10:29: stage 0 (cpu:0)") &&
                  strstr(err.msg, "would fit: ") && strstr(err.msg, "recompute: "),
              "suggestions: %s", err.msg);
    const char *hint = strstr(err.msg, "recompute: ");
    if (hint) {
        /* apply the hint and predict again */
        plan->stages[0].has_recompute = true;
        plan->stages[0].recompute = strncmp(hint + 11, "always", 6) == 0
                                        ? PP_PLAN_RECOMPUTE_ALWAYS
                                        : PP_PLAN_RECOMPUTE_EXCEPT_LAST;
        CHECK_OK(pp_fit_predict(plan, pred, &err), &err);
        CHECK_OK(pp_fit_check(plan, pred, &err), &err);
    }
    pp_plan_free(plan);
}

/* ---- the profile cache ------------------------------------------------------------------ */

static void test_profile_cache(void)
{
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/unit-times.json", tmpdir);
    setenv("PP_PROFILE_CACHE", path, 1);
    pp_plan *plan = resnet_plan("resnet18", 32, 4, 2, "gpipe", "never", TWO_STAGES);
    if (!plan) return;
    pp_error err;
    pp_unit_times a, b;
    pp_profile_note note = {0};
    CHECK_OK(pp_fit_profile(plan, plan->stages[0].device, 2, &a, &note, &err), &err);
    CHECK(note.source == PP_PROFILE_MEASURED && !strcmp(note.cache, path));
    memset(&note, 0, sizeof note);
    CHECK_OK(pp_fit_profile(plan, plan->stages[1].device, 2, &b, &note, &err), &err);
    CHECK_MSG(note.source == PP_PROFILE_FRESH, "second lookup (every cpu:N is one host): %s",
              pp_profile_source_name(note.source));
    bool same = a.n == b.n && a.n == plan->catalogue.n;
    for (int u = 0; same && u < a.n; u++)
        same = a.forward_ms[u] == b.forward_ms[u] && a.backward_ms[u] == b.backward_ms[u];
    CHECK_MSG(same, "a fresh entry gives the measured times back");
    pp_unit_times_free(&b);
    /* another version's entry is stale */
    size_t n;
    char *json = (char *)check_read_file(path, &n);
    char *at = json ? strstr(json, "\"version\": \"") : NULL;
    if (at) {
        at[12] = '9';
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite(json, 1, n, f);
            fclose(f);
        }
    }
    free(json);
    memset(&note, 0, sizeof note);
    CHECK_OK(pp_fit_profile(plan, plan->stages[0].device, 2, &b, &note, &err), &err);
    CHECK_MSG(note.source == PP_PROFILE_STALE && strstr(note.why, "measured by pipeline-run 9"),
              "stale: %s (%s)", pp_profile_source_name(note.source), note.why);
    pp_unit_times_free(&b);
    setenv("PP_PROFILE_CACHE", "off", 1);
    memset(&note, 0, sizeof note);
    CHECK_OK(pp_fit_profile(plan, plan->stages[0].device, 2, &b, &note, &err), &err);
    CHECK(note.source == PP_PROFILE_UNCACHED);
    pp_unit_times_free(&b);
    pp_unit_times_free(&a);
    pp_plan_free(plan);
    /* balance: time resolves the same cut every time from the cache */
    setenv("PP_PROFILE_CACHE", path, 1);
    snprintf(text, sizeof text, "%sbatch: {size: 8, split_size: 4}\n%sstages: auto\n"
             "balance: time\ndevices: [cpu:0, cpu:1, cpu:2]\n", R18, D32);
    int first[3][3];
    for (int k = 0; k < 3; k++) {
        pp_plan *p = parse_ok(text);
        if (!p) return;
        memset(&note, 0, sizeof note);
        CHECK_OK(pp_fit_resolve_plan(p, &note, &err), &err);
        CHECK(note.source == (k == 0 ? PP_PROFILE_MEASURED : PP_PROFILE_FRESH));
        for (int s = 0; s < 3; s++) first[k][s] = p->stages[s].first;
        pp_plan_free(p);
    }
    CHECK_MSG(!memcmp(first[0], first[1], sizeof first[0]) &&
                  !memcmp(first[0], first[2], sizeof first[0]),
              "balance: time gives one cut");
}

/* ---- the planner ------------------------------------------------------------------------- */

/* Measured images per second of plan with candidate c applied. */
static double measure_candidate(const pp_plan *plan, const pp_fit_candidate *c, int steps,
                                size_t *peak)
{
    char *text = NULL;
    size_t len;
    pp_error err;
    double step_ms = 0;
    if (pp_fit_emit(plan, c, 0, &text, &len, &err) != PP_OK) return 0;
    pp_plan *v = parse_ok(text);
    free(text);
    if (v) CHECK_OK(run_plan(v, steps, peak, &step_ms, NULL, &err), &err);
    double ips = v && step_ms > 0 ? v->batch_size * 1000.0 / step_ms : 0;
    pp_plan_free(v);
    return ips;
}

static void test_planner_delay(void)
{
    /* four stages of unequal times; every schedule and split size */
    pp_plan *plan = parse_ok("model: {name: delay, num_classes: 4, forward_ms: [4, 8, 6, 3], "
                             "backward_ms: [8, 14, 12, 6]}\n"
                             "batch: {size: 8, split_size: 1}\n"
                             "data: {format: synthetic, image_size: [4, 4]}\n"
                             "stages:\n  - {device: cpu:0}\n  - {device: cpu:1}\n"
                             "  - {device: cpu:2}\n  - {device: cpu:3}\n");
    if (!plan) return;
    pp_error err;
    pp_fit_result res;
    const pp_fit_options opt = {.top = 64};
    CHECK_OK(pp_fit_optimize(plan, &opt, &res, &err), &err);
    CHECK(res.n == res.fitting && res.tried == 8 && res.n == 8);
    double best = 0, chosen = 0, best_predicted = 0;
    fprintf(stderr, "\nplanner on the delay model (every candidate run, 6 steps each):\n");
    fprintf(stderr, "%-6s %5s  %10s  %10s\n", "sched", "split", "predicted", "measured");
    for (int k = 0; k < res.n; k++) {
        double ips = measure_candidate(plan, &res.best[k], 6, NULL);
        fprintf(stderr, "%-6s %5d  %7.1f/s  %7.1f/s%s\n",
                pp_plan_schedule_name(res.best[k].schedule), res.best[k].split_size,
                res.best[k].images_per_s, ips, k == 0 ? "  <- the planner's choice" : "");
        if (k == 0) chosen = ips;
        if (ips > best) best = ips, best_predicted = res.best[k].images_per_s;
    }
    /* candidates the model predicts equal (gpipe and 1f1b at one split, here)
     * are a tie the planner cannot break: when the best measured one is
     * predicted as fast as the choice, the choice is right whatever the two
     * measure (sleeps on 4 devices sharing 2 cores differ by 10% run to run) */
    const bool tie = best_predicted >= 0.999 * res.best[0].images_per_s;
    fprintf(stderr, "planner's choice %.1f images/s, best measured %.1f (%.3fx)%s\n", chosen, best,
            best > 0 ? chosen / best : 0, tie ? ", predicted equal to the choice" : "");
    CHECK_MSG(chosen >= 0.95 * best || tie, "the planner's choice %.1f images/s, the best %.1f",
              chosen, best);
    pp_fit_result_free(&res);
    pp_plan_free(plan);
}

static void test_planner_memory_limit(void)
{
    /* a plan whose activations weigh: ResNet-18's CIFAR stem keeps 32x32 planes */
    pp_plan *plan = parse_ok("model: {name: resnet18, num_classes: 10, stem: cifar}\n"
                             "batch: {size: 32, split_size: 8}\n"
                             "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                             "data: {format: synthetic, image_size: [32, 32]}\n"
                             "stages:\n" TWO_STAGES);
    if (!plan) return;
    pp_error err;
    size_t peak[2] = {0};
    CHECK_OK(run_plan(plan, 2, peak, NULL, NULL, &err), &err);
    size_t largest = peak[0] > peak[1] ? peak[0] : peak[1];
    int64_t limit = (int64_t)(0.6 * (double)largest);
    pp_fit_result res;
    static const int splits[] = {2, 4};
    const pp_fit_options opt = {.memory_limit = limit, .splits = splits, .n_splits = 2};
    CHECK_OK(pp_fit_optimize(plan, &opt, &res, &err), &err);
    CHECK_MSG(res.n > 0, "nothing fits 60%% of %zu: %s", largest, res.why);
    if (res.n > 0) {
        char *text = NULL;
        size_t len;
        CHECK_OK(pp_fit_emit(plan, &res.best[0], limit, &text, &len, &err), &err);
        pp_plan *v = text ? parse_ok(text) : NULL;
        size_t got[2] = {0};
        if (v) {
            CHECK(pp_plan_device_memory(v, 0) == limit && pp_plan_device_memory(v, 1) == limit);
            CHECK_OK(run_plan(v, 2, got, NULL, NULL, &err), &err);
            CHECK_MSG(got[0] <= (size_t)limit && got[1] <= (size_t)limit,
                      "measured %zu and %zu over the limit %lld", got[0], got[1],
                      (long long)limit);
            fprintf(stderr, "\nplanner under --memory-limit %.1f MiB (60%% of %.1f MiB): "
                    "%s, split %d, recompute %s/%s; measured peaks %.1f and %.1f MiB\n",
                    limit / 1048576.0, largest / 1048576.0,
                    pp_plan_schedule_name(res.best[0].schedule), res.best[0].split_size,
                    pp_plan_recompute_name(res.best[0].recompute[0]),
                    pp_plan_recompute_name(res.best[0].recompute[1]), got[0] / 1048576.0,
                    got[1] / 1048576.0);
        }
        pp_plan_free(v);
        free(text);
    }
    pp_fit_result_free(&res);
    /* a limit nothing meets */
    const pp_fit_options tiny = {.memory_limit = 1 << 20, .splits = splits, .n_splits = 2};
    CHECK_OK(pp_fit_optimize(plan, &tiny, &res, &err), &err);
    CHECK_MSG(res.n == 0 && res.fitting == 0 && strstr(res.why, "the closest: "), "1 MiB: %s",
              res.why);
    pp_fit_result_free(&res);
    pp_plan_free(plan);
}

/* Whether test name runs: every test without arguments, else those named. */
static bool wanted(int argc, char **argv, const char *name)
{
    if (argc < 2) return true;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return true;
    return false;
}

/* test_fit [keys in_flight bits limits cache planner_delay planner_limit table schedules]: all
 * without arguments. */
int main(int argc, char **argv)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "pp-fit")) return 1;
    setenv("PP_PROFILE_CACHE", "off", 1);
    if (wanted(argc, argv, "keys")) test_plan_keys();
    if (wanted(argc, argv, "in_flight")) test_in_flight();
    if (wanted(argc, argv, "bits")) test_recompute_bits();
    if (wanted(argc, argv, "limits")) test_limits();
    if (wanted(argc, argv, "cache")) test_profile_cache();
    setenv("PP_PROFILE_CACHE", "off", 1);
    if (wanted(argc, argv, "planner_delay")) test_planner_delay();
    if (wanted(argc, argv, "planner_limit")) test_planner_memory_limit();
    if (wanted(argc, argv, "table")) test_error_table();
    if (wanted(argc, argv, "schedules")) test_schedules_table();
    check_rmtree(tmpdir);
    return check_summary("fit");
}
