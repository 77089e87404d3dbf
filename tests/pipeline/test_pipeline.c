/*
 * test_pipeline.c - properties of the assembled pipeline on the CPU backend:
 *   - equivalence: ResNet-50 split into 1, 2 and 4 stages on cpu:0..3, under
 *     GPipe and 1F1B, with uneven micro-batches and with fewer micro-batches
 *     than stages, saves bitwise-identical checkpoints after several steps;
 *     the same in bf16 mixed precision (which must differ from fp32 and keep
 *     fp32 checkpoints), and for a sequential model of every layer type;
 *   - memory: 1F1B stage s holds at most min(m, S - s) micro-batches of
 *     activations, GPipe all m, and stage 0's peak memory shows it;
 *   - learning: a small ResNet on the synthetic task lowers its loss and
 *     beats chance accuracy;
 *   - checkpoints: save, load into a fresh pipeline, and continuing gives the
 *     same weights as not stopping;
 *   (epochs, evaluation and graphs: test_epochs.c).
 *
 * Arguments name the parts to run (every part but "quick" without any);
 * "quick" is the ThreadSanitizer build's: 1, 2 and 4 stages in fp32.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partitioner/plan.h"
#include "pipeline/pipeline.h"
#include "runtime/core/device.h"
#include "runtime/core/tensor.h"
#include "runtime/io/checkpoint.h"
#include "tests/check.h"

static char tmpdir[200];
static const char *g_precision = "fp32"; /* the plans' precision */
static pp_pipeline_layout g_layout = PP_PIPELINE_LAYOUT_AUTO; /* the runs' activations */

/* Stage layouts of ResNet-50 for 1, 2 and 4 stages. */
static const char *layout(int stages)
{
    switch (stages) {
    case 1:
        return "  - device: cpu:0\n"
               "    layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool, "
               "fc]\n";
    case 2:
        return "  - device: cpu:0\n"
               "    layers: [conv1, bn1, relu, maxpool, layer1, layer2]\n"
               "  - device: cpu:1\n"
               "    layers: [layer3, layer4, avgpool, fc]\n";
    default:
        return "  - device: cpu:0\n"
               "    layers: [conv1, bn1, relu, maxpool, layer1]\n"
               "  - device: cpu:1\n"
               "    layers: [layer2, layer3.0]\n"
               "  - device: cpu:2\n"
               "    layers: [layer3.1, layer3.2, layer3.3, layer3.4, layer3.5]\n"
               "  - device: cpu:3\n"
               "    layers: [layer4, avgpool, fc]\n";
    }
}

static pp_plan *make_plan(const char *model, int batch, int split, const char *schedule,
                          const char *stages, int image, int steps)
{
    char text[4096];
    snprintf(text, sizeof text,
             "model: {name: %s, num_classes: 10, stem: cifar}\n"
             "batch: {size: %d, split_size: %d}\n"
             "schedule: %s\n"
             "precision: %s\n"
             "optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0001}\n"
             "data: {format: synthetic, image_size: [%d, %d]}\n"
             "seed: 3\n"
             "steps: %d\n"
             "stages:\n%s",
             model, batch, split, schedule, g_precision, image, image, steps, stages);
    pp_plan *plan = NULL;
    pp_diag diag;
    pp_diag_clear(&diag);
    pp_status s = pp_plan_parse_string("test.yaml", text, strlen(text), &plan, &diag);
    char buf[4096];
    CHECK_MSG(s == PP_OK, "plan: %s", pp_diag_format(&diag, buf, sizeof buf));
    return plan;
}

/* Trains plan for its steps and saves to path; returns the last loss. */
static double train_and_save(const pp_plan *plan, const char *path, pp_pipeline **keep)
{
    pp_error err;
    pp_pipeline *p = NULL;
    double loss = -1;
    const pp_pipeline_options opts = {.layout = g_layout};
    CHECK_OK(pp_pipeline_new(plan, &opts, &p, &err), &err);
    if (!p) return loss;
    for (int i = 0; i < plan->steps; i++) {
        pp_step_result r;
        CHECK_OK(pp_pipeline_step(p, &r, &err), &err);
        loss = r.loss;
    }
    if (path) CHECK_OK(pp_pipeline_save(p, path, true, &err), &err);
    if (keep)
        *keep = p;
    else
        pp_pipeline_free(p);
    return loss;
}

typedef struct eq_case {
    int stages;
    const char *schedule;
    int split;
} eq_case;

/* The references trained so far (ResNet-50, batch 8, 16x16, two steps): the
 * parts ask for some of the same runs (the fp32 1-stage run of split 3 three
 * times, the bf16 one twice), which train once and are read back from their
 * file after. The key is everything the run depends on: precision, layout
 * (AUTO is NCHW on the CPU backend, pipeline.h), stages, schedule and split. */
typedef struct eq_ref {
    char key[64];
    char path[256];
    double loss;
} eq_ref;
static eq_ref g_refs[8];
static int g_n_refs;

/* Fills path with the checkpoint of the run c in the current precision and
 * layout, training it unless an earlier part did; returns its last loss.
 * 1-stage runs are kept for the parts after (*kept); the caller removes the
 * others' files. */
static double reference_run(const eq_case *c, char *path, size_t path_n, bool *kept)
{
    char key[64];
    snprintf(key, sizeof key, "%s %s %d %s %d", g_precision,
             g_layout == PP_PIPELINE_LAYOUT_NHWC ? "nhwc" : "nchw", c->stages, c->schedule,
             c->split);
    for (int k = 0; k < g_n_refs; k++)
        if (!strcmp(g_refs[k].key, key)) {
            snprintf(path, path_n, "%s", g_refs[k].path);
            *kept = true;
            return g_refs[k].loss;
        }
    snprintf(path, path_n, "%s/ref%d.safetensors", tmpdir, g_n_refs);
    double loss = -1;
    pp_plan *plan = make_plan("resnet50", 8, c->split, c->schedule, layout(c->stages), 16, 2);
    if (plan) loss = train_and_save(plan, path, NULL);
    pp_plan_free(plan);
    *kept = plan && c->stages == 1 && g_n_refs < (int)(sizeof g_refs / sizeof g_refs[0]);
    if (*kept) {
        eq_ref *r = &g_refs[g_n_refs++];
        snprintf(r->key, sizeof r->key, "%s", key);
        snprintf(r->path, sizeof r->path, "%s", path);
        r->loss = loss;
    }
    return loss;
}

/* Removes the references' files. */
static void free_references(void)
{
    for (int k = 0; k < g_n_refs; k++) unlink(g_refs[k].path);
    g_n_refs = 0;
}

/* Trains each case and compares its checkpoint with the case's 1-stage
 * reference (the first case of each split; reference_run's); returns the
 * first reference's checkpoint (caller frees) through first, its size
 * through first_n. */
static void run_equivalence(const eq_case *cases, size_t n_cases, unsigned char **first,
                            size_t *first_n)
{
    unsigned char *ref = NULL;
    size_t ref_n = 0;
    double ref_loss = 0;
    int ref_split = 0;
    for (size_t i = 0; i < n_cases; i++) {
        const bool is_ref = cases[i].split != ref_split;
        char path[256];
        double loss;
        bool kept = false;
        if (is_ref) {
            loss = reference_run(&cases[i], path, sizeof path, &kept);
        } else {
            pp_plan *plan = make_plan("resnet50", 8, cases[i].split, cases[i].schedule,
                                      layout(cases[i].stages), 16, 2);
            if (!plan) continue;
            snprintf(path, sizeof path, "%s/eq%zu.safetensors", tmpdir, i);
            loss = train_and_save(plan, path, NULL);
            pp_plan_free(plan);
        }
        size_t n = 0;
        unsigned char *bytes = check_read_file(path, &n);
        CHECK(bytes != NULL && n > 90000000);
        if (is_ref) {
            if (!first || ref != *first) free(ref);
            if (first && !*first) {
                *first = bytes;
                *first_n = n;
            }
            ref = bytes;
            ref_n = n;
            ref_loss = loss;
            ref_split = cases[i].split;
            fprintf(stderr, "%s%s reference: %d stage(s), split %d, loss %.6f\n", g_precision,
                    g_layout == PP_PIPELINE_LAYOUT_NHWC ? " NHWC" : "", cases[i].stages,
                    ref_split, loss);
        } else {
            bool same = bytes && n == ref_n && memcmp(bytes, ref, n) == 0;
            CHECK_MSG(same, "%d stages %s split %d: checkpoint differs from 1 stage",
                      cases[i].stages, cases[i].schedule, cases[i].split);
            CHECK_MSG(loss == ref_loss, "%d stages %s: loss %.9g vs %.9g", cases[i].stages,
                      cases[i].schedule, loss, ref_loss);
            fprintf(stderr, "%d stages %-5s split %d: %s, loss %.6f\n", cases[i].stages,
                    cases[i].schedule, cases[i].split, same ? "bitwise equal" : "DIFFERENT", loss);
            free(bytes);
        }
        if (!kept) unlink(path);
    }
    if (!first || ref != *first) free(ref);
}

static void test_equivalence(void)
{
    static const eq_case cases[] = {
        /* reference first: 1 stage, 8 = 3 + 3 + 2 */
        {1, "gpipe", 3}, {1, "1f1b", 3}, {2, "gpipe", 3}, {2, "1f1b", 3},
        {4, "gpipe", 3}, {4, "1f1b", 3},
        /* m = 2 < S = 4 */
        {1, "gpipe", 4}, {4, "1f1b", 4}, {4, "gpipe", 4}, {2, "1f1b", 4},
    };
    run_equivalence(cases, sizeof cases / sizeof cases[0], NULL, NULL);
}

/* The part a ThreadSanitizer build runs: 1, 2 and 4 stages under both
 * schedules, in fp32, uneven micro-batches (a quarter of "equivalence"). */
static void test_equivalence_quick(void)
{
    static const eq_case cases[] = {{1, "gpipe", 3}, {2, "1f1b", 3}, {4, "gpipe", 3}};
    run_equivalence(cases, sizeof cases / sizeof cases[0], NULL, NULL);
}

/* bf16: 1, 2 and 4 stages bitwise equal as in fp32; the checkpoint (fp32
 * master weights, same names and size) differs from the fp32 run's. */
static void test_equivalence_bf16(void)
{
    static const eq_case cases[] = {
        {1, "gpipe", 3}, {2, "1f1b", 3}, {4, "gpipe", 3}, {4, "1f1b", 3},
        {1, "1f1b", 4}, {4, "gpipe", 4},
    };
    unsigned char *fp32 = NULL, *bf16 = NULL;
    size_t fp32_n = 0, bf16_n = 0;
    run_equivalence(cases, 1, &fp32, &fp32_n);
    g_precision = "bf16";
    run_equivalence(cases, sizeof cases / sizeof cases[0], &bf16, &bf16_n);
    g_precision = "fp32";
    CHECK_MSG(fp32 && bf16 && fp32_n == bf16_n, "bf16 checkpoint has %zu bytes, fp32 %zu", bf16_n,
              fp32_n);
    CHECK_MSG(fp32 && bf16 && fp32_n == bf16_n && memcmp(fp32, bf16, fp32_n) != 0,
              "the bf16 run trained exactly as the fp32 run");
    free(fp32);
    free(bf16);
}

/* NHWC activations (and bf16 weight copies) give the NCHW run's results bit
 * for bit on the CPU backend, whose ops run them through exact f32 NCHW
 * stand-ins: 2 stages (1F1B) in fp32 and 4 stages (GPipe) in bf16, in NHWC,
 * against the 1-stage NCHW run. */
static void test_nhwc(void)
{
    static const eq_case nchw = {1, "gpipe", 3};
    static const eq_case nhwc_cases[2] = {{2, "1f1b", 3}, {4, "gpipe", 3}};
    static const char *const precisions[] = {"fp32", "bf16"};
    for (int k = 0; k < 2; k++) {
        g_precision = precisions[k];
        unsigned char *ref = NULL, *got = NULL;
        size_t ref_n = 0, got_n = 0;
        g_layout = PP_PIPELINE_LAYOUT_NCHW;
        run_equivalence(&nchw, 1, &ref, &ref_n);
        g_layout = PP_PIPELINE_LAYOUT_NHWC;
        run_equivalence(&nhwc_cases[k], 1, &got, &got_n);
        CHECK_MSG(ref && got && ref_n == got_n && memcmp(ref, got, ref_n) == 0,
                  "%s: the NHWC run's checkpoint differs from the NCHW run's", g_precision);
        fprintf(stderr, "%s: NHWC %d stages bitwise equal to NCHW 1 stage\n", g_precision,
                nhwc_cases[k].stages);
        free(ref);
        free(got);
    }
    g_precision = "fp32";
    g_layout = PP_PIPELINE_LAYOUT_AUTO;
}

/* A sequential model of every layer type, 1, 2 and 3 stages (cuts after a
 * batch norm, inside the pooling run, before the linear layers), both
 * schedules: checkpoints bitwise equal to the 1-stage NCHW run (the others
 * in g_layout). */
static void test_equivalence_sequential(const char *precision)
{
    static const char *const stages[] = {
        "  - {device: cpu:0, layers: [c1, b1, r1, p1, c2, s1, a1, fl, f1, b2, r2, f2]}\n",
        "  - {device: cpu:0, layers: [c1, b1]}\n"
        "  - {device: cpu:1, layers: [r1, p1, c2, s1, a1, fl, f1, b2, r2, f2]}\n",
        "  - {device: cpu:0, layers: [c1, b1, r1, p1]}\n"
        "  - {device: cpu:1, layers: [c2, s1, a1]}\n"
        "  - {device: cpu:2, layers: [fl, f1, b2, r2, f2]}\n",
    };
    static const char *const schedules[] = {"gpipe", "1f1b"};
    unsigned char *ref = NULL;
    size_t ref_n = 0;
    double ref_loss = 0;
    for (int k = 0; k < 6; k++) {
        char text[4096];
        snprintf(text, sizeof text,
                 "model:\n  name: sequential\n  in_channels: 2\n  layers:\n"
                 "    - {name: c1, type: conv, out_channels: 6, kernel: 3, padding: 1}\n"
                 "    - {name: b1, type: batchnorm}\n    - {name: r1, type: relu}\n"
                 "    - {name: p1, type: maxpool, kernel: 3, stride: 2, padding: 1}\n"
                 "    - {name: c2, type: conv, out_channels: 8, kernel: 3, bias: false}\n"
                 "    - {name: s1, type: sigmoid}\n"
                 "    - {name: a1, type: avgpool, kernel: 2, padding: 1}\n"
                 "    - {name: fl, type: flatten}\n"
                 "    - {name: f1, type: linear, out_features: 12}\n"
                 "    - {name: b2, type: batchnorm}\n    - {name: r2, type: relu}\n"
                 "    - {name: f2, type: linear, out_features: 5}\n"
                 "batch: {size: 10, split_size: 4}\nschedule: %s\nprecision: %s\n"
                 "optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0001}\n"
                 "data: {format: synthetic, image_size: [16, 16]}\nseed: 5\nsteps: 3\n"
                 "stages:\n%s",
                 schedules[k % 2], precision, stages[k / 2]);
        pp_plan *plan = NULL;
        pp_diag diag;
        pp_diag_clear(&diag);
        char buf[4096];
        pp_status s = pp_plan_parse_string("seq.yaml", text, strlen(text), &plan, &diag);
        CHECK_MSG(s == PP_OK, "plan: %s", pp_diag_format(&diag, buf, sizeof buf));
        if (!plan) continue;
        char path[256];
        snprintf(path, sizeof path, "%s/seq%d.safetensors", tmpdir, k);
        const pp_pipeline_layout asked = g_layout;
        if (k == 0) g_layout = PP_PIPELINE_LAYOUT_NCHW; /* the reference */
        double loss = train_and_save(plan, path, NULL);
        g_layout = asked;
        size_t n = 0;
        unsigned char *bytes = check_read_file(path, &n);
        CHECK(bytes != NULL && n > 4000);
        if (k == 0) {
            ref = bytes, ref_n = n, ref_loss = loss;
        } else {
            bool same = bytes && n == ref_n && memcmp(bytes, ref, n) == 0;
            CHECK_MSG(same && loss == ref_loss, "sequential, %d stages %s: %s, loss %.9g vs %.9g",
                      k / 2 + 1, schedules[k % 2], same ? "same bytes" : "checkpoint differs",
                      loss, ref_loss);
            free(bytes);
        }
        unlink(path);
        pp_plan_free(plan);
    }
    fprintf(stderr, "sequential %s%s: 1, 2, 3 stages x gpipe, 1f1b bitwise equal, loss %.6f\n",
            precision, g_layout == PP_PIPELINE_LAYOUT_NHWC ? " NHWC" : "", ref_loss);
    free(ref);
}

/* bf16 with a last layer other than linear (global average pooling): its bf16
 * output is widened for the loss and the loss gradient rounded back. 1 and 2
 * stages save equal checkpoints; the first loss (forward only, same initial
 * weights) is within a few bf16 steps of the fp32 run's. */
static void test_bf16_pooled_logits(void)
{
    static const char *const stages[] = {
        "  - {device: cpu:0, layers: [c1, b1, r1, c2, gap]}\n",
        "  - {device: cpu:0, layers: [c1, b1]}\n  - {device: cpu:1, layers: [r1, c2, gap]}\n",
    };
    static const char *const precision[] = {"bf16", "bf16", "fp32"};
    unsigned char *ref = NULL;
    size_t ref_n = 0;
    double first[3] = {0};
    for (int k = 0; k < 3; k++) {
        char text[2048];
        snprintf(text, sizeof text,
                 "model:\n  name: sequential\n  in_channels: 2\n  layers:\n"
                 "    - {name: c1, type: conv, out_channels: 6, kernel: 3, padding: 1}\n"
                 "    - {name: b1, type: batchnorm}\n    - {name: r1, type: relu}\n"
                 "    - {name: c2, type: conv, out_channels: 5, kernel: 3}\n"
                 "    - {name: gap, type: global_avgpool}\n"
                 "batch: {size: 8, split_size: 3}\nschedule: 1f1b\nprecision: %s\n"
                 "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                 "data: {format: synthetic, image_size: [8, 8]}\nseed: 2\nsteps: 1\n"
                 "stages:\n%s",
                 precision[k], stages[k == 1]);
        pp_plan *plan = NULL;
        pp_diag diag;
        pp_diag_clear(&diag);
        char buf[4096];
        pp_status s = pp_plan_parse_string("gap.yaml", text, strlen(text), &plan, &diag);
        CHECK_MSG(s == PP_OK, "plan: %s", pp_diag_format(&diag, buf, sizeof buf));
        if (!plan) continue;
        char path[256];
        snprintf(path, sizeof path, "%s/gap%d.safetensors", tmpdir, k);
        first[k] = train_and_save(plan, path, NULL);
        size_t n = 0;
        unsigned char *bytes = check_read_file(path, &n);
        if (k == 0) {
            ref = bytes, ref_n = n;
        } else if (k == 1) {
            CHECK_MSG(bytes && n == ref_n && memcmp(bytes, ref, n) == 0,
                      "bf16 pooled logits: 2 stages differ from 1");
            free(bytes);
        } else {
            free(bytes);
        }
        unlink(path);
        pp_plan_free(plan);
    }
    CHECK_MSG(first[0] == first[1] && fabs(first[0] - first[2]) <= 0x1p-5 * fabs(first[2]),
              "bf16 pooled logits: losses %.7f (1 stage), %.7f (2 stages), fp32 %.7f", first[0],
              first[1], first[2]);
    fprintf(stderr, "bf16 pooled logits: loss %.6f (fp32 %.6f), 1 and 2 stages bitwise equal\n",
            first[0], first[2]);
    free(ref);
}

/* A step that fails midway (here a NaN loss from a huge learning rate) leaves
 * the pipeline refusing further steps and evaluations with that failure's
 * message, instead of running on from half-done state; and saves (a file
 * of half-updated parameters: none is written) and loads (its links are
 * freed: a load would not make it step again) alike. */
/* The plan of YAML text (named name in messages) in *plan, and a pipeline of it
 * (NULL, with a failed check, where either fails; *plan NULL where the plan does). */
static pp_pipeline *pipeline_from_text(const char *name, const char *text, pp_plan **plan)
{
    pp_diag diag;
    pp_diag_clear(&diag);
    char buf[2048];
    *plan = NULL;
    pp_status s = pp_plan_parse_string(name, text, strlen(text), plan, &diag);
    CHECK_MSG(s == PP_OK, "plan: %s", pp_diag_format(&diag, buf, sizeof buf));
    if (!*plan) return NULL;
    pp_error err;
    pp_pipeline *p = NULL;
    CHECK_OK(pp_pipeline_new(*plan, NULL, &p, &err), &err);
    return p;
}

static void test_failed_step(void)
{
    const char *text =
        "model:\n  name: sequential\n  layers:\n"
        "    - {name: c, type: conv, out_channels: 4, kernel: 3}\n"
        "    - {name: f, type: flatten}\n    - {name: fc, type: linear, out_features: 3}\n"
        "batch: {size: 4, split_size: 2}\noptimizer: {lr: 1.0e+10, momentum: 0.9}\n"
        "data: {format: synthetic, image_size: [6, 6]}\nsteps: 20\n"
        "stages:\n  - {device: cpu:0, layers: [c]}\n  - {device: cpu:1, layers: [f, fc]}\n";
    pp_plan *plan = NULL;
    pp_pipeline *p = pipeline_from_text("nan.yaml", text, &plan);
    if (!plan) return;
    pp_error err;
    char good[256], broken[256];
    snprintf(good, sizeof good, "%s/before-nan.safetensors", tmpdir);
    snprintf(broken, sizeof broken, "%s/after-nan.safetensors", tmpdir);
    if (p) CHECK_OK(pp_pipeline_save(p, good, true, &err), &err);
    int failed_at = -1;
    for (int i = 0; p && i < plan->steps && failed_at < 0; i++) {
        pp_step_result r;
        if (pp_pipeline_step(p, &r, &err) != PP_OK) failed_at = i;
    }
    CHECK_MSG(failed_at > 0 && strstr(err.msg, "NaN") != NULL, "no NaN failure (step %d: %s)",
              failed_at, err.msg);
    char first[sizeof err.msg];
    snprintf(first, sizeof first, "%s", err.msg);
    pp_step_result r;
    CHECK(p && pp_pipeline_step(p, &r, &err) == PP_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "an earlier step or evaluation of this pipeline failed") &&
                  strstr(err.msg, first),
              "after a failed step: %s", err.msg);
    CHECK(!pp_pipeline_usable(p));
    pp_status s2 = pp_pipeline_save(p, broken, true, &err);
    CHECK_MSG(s2 == PP_ERR_INVALID && strstr(err.msg, "save: an earlier step") &&
                  access(broken, F_OK) != 0,
              "save after a failed step: %s (%s)", pp_status_name(s2), err.msg);
    s2 = pp_pipeline_load(p, good, &err);
    CHECK_MSG(s2 == PP_ERR_INVALID && strstr(err.msg, "load: an earlier step"),
              "load after a failed step: %s (%s)", pp_status_name(s2), err.msg);
    const int32_t prompt[1] = {0};
    int32_t tokens[2];
    const pp_generate_options go = {.tokens = 1};
    s2 = pp_pipeline_generate(p, prompt, 1, &go, tokens, &err);
    CHECK_MSG(s2 == PP_ERR_INVALID && strstr(err.msg, "generate: an earlier step"),
              "generate after a failed step: %s (%s)", pp_status_name(s2), err.msg);
    pp_pipeline_free(p);
    pp_plan_free(plan);
    unlink(good);
    unlink(broken);
}

static void test_memory(void)
{
    const int S = 4, m = 8;
    size_t peak0[2] = {0, 0};
    const char *schedules[2] = {"gpipe", "1f1b"};
    for (int k = 0; k < 2; k++) {
        pp_plan *plan = make_plan("resnet50", 16, 2, schedules[k], layout(S), 16, 1);
        if (!plan) continue;
        pp_pipeline *p = NULL;
        train_and_save(plan, NULL, &p);
        if (!p) {
            pp_plan_free(plan);
            continue;
        }
        for (int s = 0; s < S; s++) {
            pp_stage_report r;
            pp_pipeline_stage_report(p, s, &r);
            int bound = k == 0 ? m : (m < S - s ? m : S - s);
            CHECK_MSG(r.max_in_flight == bound, "%s stage %d held %d micro-batches, expected %d",
                      schedules[k], s, r.max_in_flight, bound);
            fprintf(stderr, "%-5s stage %d: %d micro-batches in flight at most, peak %.1f MiB\n",
                    schedules[k], s, r.max_in_flight, (double)r.peak_bytes / (1 << 20));
            if (s == 0) peak0[k] = r.peak_bytes;
        }
        pp_pipeline_free(p);
        pp_plan_free(plan);
    }
    /* stage 0 keeps 8 micro-batches under GPipe and 4 under 1F1B */
    CHECK_MSG(peak0[1] < peak0[0], "1f1b stage-0 peak %zu not below gpipe's %zu", peak0[1],
              peak0[0]);
}

static void test_learning(void)
{
    pp_plan *plan = make_plan("resnet18", 32, 8, "1f1b",
                              "  - device: cpu:0\n    layers: [conv1, bn1, relu, maxpool, layer1, "
                              "layer2]\n  - device: cpu:1\n    layers: [layer3, layer4, avgpool, "
                              "fc]\n",
                              16, 25);
    if (!plan) return;
    pp_error err;
    pp_pipeline *p = NULL;
    CHECK_OK(pp_pipeline_new(plan, NULL, &p, &err), &err);
    if (!p) return;
    double first_loss = 0, last_loss = 0, acc_late = 0;
    int late = 0;
    for (int i = 0; i < plan->steps; i++) {
        pp_step_result r;
        CHECK_OK(pp_pipeline_step(p, &r, &err), &err);
        if (i == 0) first_loss = r.loss;
        last_loss = r.loss;
        if (i >= plan->steps - 5) acc_late += r.accuracy, late++;
    }
    acc_late /= late;
    fprintf(stderr, "learning: loss %.3f -> %.3f, accuracy over the last 5 steps %.2f\n",
            first_loss, last_loss, acc_late);
    CHECK_MSG(last_loss < 0.5 * first_loss, "loss %.3f -> %.3f", first_loss, last_loss);
    CHECK_MSG(acc_late > 0.5, "accuracy %.2f (chance 0.1)", acc_late);
    pp_pipeline_free(p);
    pp_plan_free(plan);
}

/* src's tensors and metadata, tensor `name` zeroed, written to dst by the
 * checkpoint writer (checksums and all: a file whose checks pass and whose
 * values a later stage of the load refuses). */
static bool zero_tensor(const char *src, const char *dst, const char *name)
{
    pp_error err;
    pp_registry *reg = NULL;
    pp_device_ctx *cpu = NULL;
    pp_checkpoint_info info = {0};
    bool ok = pp_registry_new(&reg, &err) == PP_OK &&
              pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu, &err) == PP_OK &&
              pp_checkpoint_list(src, &info, &err) == PP_OK;
    pp_tensor *t = ok ? calloc(info.n, sizeof *t) : NULL;
    pp_ckpt_tensor *list = ok ? calloc(info.n, sizeof *list) : NULL;
    pp_checkpoint_meta *meta = ok ? calloc(info.n_meta + 1, sizeof *meta) : NULL;
    size_t n_meta = 0, made = 0;
    ok = ok && t && list && meta;
    for (; ok && made < info.n; made++) {
        const pp_checkpoint_entry *e = &info.entries[made];
        ok = pp_tensor_zeros(&t[made], cpu, e->dtype, e->ndim, e->shape, &err) == PP_OK;
        list[made] = (pp_ckpt_tensor){e->name, &t[made]};
    }
    ok = ok && pp_checkpoint_load(src, list, info.n, false, &err) == PP_OK;
    for (size_t i = 0; ok && i < info.n; i++)
        if (strcmp(list[i].name, name) == 0) {
            void *zero = calloc(1, pp_tensor_bytes(&t[i]));
            ok = zero && pp_tensor_from_host(&t[i], zero, pp_tensor_bytes(&t[i]), &err) == PP_OK;
            free(zero);
        }
    for (size_t i = 0; ok && i < info.n_meta; i++) /* the writer adds the checksums */
        if (strncmp(info.meta[i].key, "checksum.", 9) != 0) meta[n_meta++] = info.meta[i];
    ok = ok && pp_checkpoint_save(dst, list, info.n, meta, n_meta, &err) == PP_OK;
    CHECK_MSG(ok, "rewriting %s: %s", src, err.msg);
    for (size_t i = 0; i < made; i++) pp_tensor_free(&t[i]);
    free(t);
    free(list);
    free(meta);
    pp_checkpoint_info_free(&info);
    pp_registry_free(reg);
    return ok;
}

/* A load that fails after it began writing the parameters (here: AdamW's
 * step count 0, refused once the tensors are in) leaves the pipeline
 * refusing to step, save, evaluate and generate on its half-loaded state,
 * naming the load's failure, until a load succeeds; a load refused before
 * writing (a corrupt file) leaves it usable and its parameters as they were. */
static void test_partial_load(void)
{
    const char *text =
        "model:\n  name: sequential\n  layers:\n"
        "    - {name: f, type: flatten}\n    - {name: fc, type: linear, out_features: 3}\n"
        "batch: {size: 4, split_size: 2}\noptimizer: {type: adamw, lr: 1.0e-3}\n"
        "data: {format: synthetic, image_size: [4, 4]}\nsteps: 2\n"
        "stages:\n  - {device: cpu:0, layers: [f, fc]}\n";
    pp_plan *plan = NULL;
    pp_pipeline *p = pipeline_from_text("adamw.yaml", text, &plan);
    if (!plan) return;
    pp_error err;
    pp_status s;
    char good[256], bad[256], torn[256], after[256];
    snprintf(good, sizeof good, "%s/adamw.safetensors", tmpdir);
    snprintf(bad, sizeof bad, "%s/adamw-step0.safetensors", tmpdir);
    snprintf(torn, sizeof torn, "%s/adamw-torn.safetensors", tmpdir);
    snprintf(after, sizeof after, "%s/adamw-after.safetensors", tmpdir);
    if (!p) {
        pp_plan_free(plan);
        return;
    }
    CHECK_OK(pp_pipeline_step(p, NULL, &err), &err);
    CHECK_OK(pp_pipeline_save(p, good, true, &err), &err);
    CHECK(zero_tensor(good, bad, "optimizer.step.fc.weight"));
    /* refused before writing: a file cut short leaves the pipeline usable */
    size_t n;
    unsigned char *b = check_read_file(good, &n);
    FILE *f = fopen(torn, "wb");
    if (f && b) fwrite(b, 1, n - 4, f);
    if (f) fclose(f);
    free(b);
    CHECK(pp_pipeline_load(p, torn, &err) == PP_ERR_INPUT);
    CHECK(pp_pipeline_usable(p));
    CHECK_OK(pp_pipeline_step(p, NULL, &err), &err);
    /* refused after writing */
    s = pp_pipeline_load(p, bad, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "optimizer.step.fc.weight is 0"),
              "loading a step count of 0: %s (%s)", pp_status_name(s), err.msg);
    CHECK(!pp_pipeline_usable(p));
    s = pp_pipeline_step(p, NULL, &err);
    CHECK_MSG(s == PP_ERR_INVALID &&
                  strstr(err.msg, "step: an earlier load failed after it began writing") &&
                  strstr(err.msg, "optimizer.step.fc.weight is 0"),
              "step after a torn load: %s (%s)", pp_status_name(s), err.msg);
    s = pp_pipeline_save(p, after, true, &err);
    CHECK_MSG(s == PP_ERR_INVALID && access(after, F_OK) != 0,
              "save after a torn load: %s (%s)", pp_status_name(s), err.msg);
    /* a load that succeeds repairs it: the next step is the one from good */
    CHECK_OK(pp_pipeline_load(p, good, &err), &err);
    CHECK(pp_pipeline_usable(p) && pp_pipeline_steps_done(p) == 1);
    CHECK_OK(pp_pipeline_step(p, NULL, &err), &err);
    pp_pipeline_free(p);
    pp_plan_free(plan);
    unlink(good);
    unlink(bad);
    unlink(torn);
    unlink(after);
}

static void test_resume(void)
{
    const char *stages = layout(2);
    pp_plan *straight = make_plan("resnet18", 8, 4, "1f1b", stages, 16, 4);
    pp_plan *first = make_plan("resnet18", 8, 4, "1f1b", stages, 16, 2);
    if (!straight || !first) return;
    char a[256], b[256], c[256];
    snprintf(a, sizeof a, "%s/straight.safetensors", tmpdir);
    snprintf(b, sizeof b, "%s/half.safetensors", tmpdir);
    snprintf(c, sizeof c, "%s/resumed.safetensors", tmpdir);
    train_and_save(straight, a, NULL);
    train_and_save(first, b, NULL);
    pp_error err;
    pp_pipeline *p = NULL;
    CHECK_OK(pp_pipeline_new(first, NULL, &p, &err), &err);
    if (p) {
        CHECK_OK(pp_pipeline_load(p, b, &err), &err);
        CHECK(pp_pipeline_steps_done(p) == 2);
        for (int i = 0; i < 2; i++) CHECK_OK(pp_pipeline_step(p, NULL, &err), &err);
        CHECK_OK(pp_pipeline_save(p, c, true, &err), &err);
        pp_pipeline_free(p);
    }
    size_t na, nc;
    unsigned char *ba = check_read_file(a, &na), *bc = check_read_file(c, &nc);
    CHECK_MSG(ba && bc && na == nc && memcmp(ba, bc, na) == 0,
              "4 straight steps differ from 2 + save + load + 2");
    free(ba);
    free(bc);

    /* a checkpoint of another model is refused with the file and tensor named */
    pp_plan *other = make_plan("resnet34", 8, 4, "1f1b", stages, 16, 1);
    if (other) {
        CHECK_OK(pp_pipeline_new(other, NULL, &p, &err), &err);
        if (p) {
            pp_status s = pp_pipeline_load(p, a, &err);
            CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "straight.safetensors") &&
                          strstr(err.msg, "layer"),
                      "loading a resnet18 file into resnet34: %s", err.msg);
            pp_pipeline_free(p);
        }
        pp_plan_free(other);
    }
    unlink(a);
    unlink(b);
    unlink(c);
    pp_plan_free(straight);
    pp_plan_free(first);
}

/* The parts named on the command line (all but "quick" without any). */
static int g_argc;
static char **g_argv;
static bool wants(const char *part)
{
    if (g_argc < 2) return true;
    for (int k = 1; k < g_argc; k++)
        if (!strcmp(g_argv[k], part)) return true;
    return false;
}

int main(int argc, char **argv)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "pp-pipeline")) return 1;
    g_argc = argc;
    g_argv = argv;
    if (wants("equivalence")) test_equivalence();
    if (g_argc > 1 && wants("quick")) test_equivalence_quick(); /* not in the whole run */
    if (wants("bf16")) test_equivalence_bf16();
    if (wants("sequential")) test_equivalence_sequential("fp32");
    if (wants("sequential-bf16")) test_equivalence_sequential("bf16");
    if (wants("bf16-pooled")) test_bf16_pooled_logits();
    if (wants("nhwc")) test_nhwc();
    if (wants("sequential-nhwc")) {
        g_layout = PP_PIPELINE_LAYOUT_NHWC; /* compared with the NCHW 1-stage run below */
        test_equivalence_sequential("bf16");
        g_layout = PP_PIPELINE_LAYOUT_AUTO;
    }
    if (wants("failed")) test_failed_step();
    if (wants("partial-load")) test_partial_load();
    if (wants("memory")) test_memory();
    if (wants("learning")) test_learning();
    if (wants("resume")) test_resume();
    free_references();
    rmdir(tmpdir);
    return check_summary("pipeline");
}
