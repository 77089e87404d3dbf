/*
 * test_schedules.c - every schedule trains exactly like one stage, on the
 * CPU backend: each built-in on its placement (one stage per device, looped
 * or V-shaped virtual stages), with 2 and 4 devices (ResNet-18) and 4 (ResNet-50),
 * 1, 4 and 8 micro-batches (cifar stem, small images), stages
 * of uneven sizes, saves after two steps the checkpoint bytes (weights and
 * momentum) of the 1-stage run; so does every program of
 * tests/schedules/torch (argv[1]) run from its file; so does a small GPT-2
 * whose output head is tied to its token embedding across the first and
 * last stage, with recomputation and without. And the plan errors of
 * schedules: a built-in on a placement it does not take, a file that does
 * not fit the plan.
 *
 * argv[2] (optional) picks a part: "errors", "resnet18", "resnet50", "gpt2",
 * "torch" or "quick" (not in "all": resnet18's built-ins on 4 devices and 8
 * micro-batches only, and GPT-2's dropout under graphs, for the
 * ThreadSanitizer build).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partitioner/plan.h"
#include "pipeline/pipeline.h"
#include "streams/schedule.h"
#include "tests/check.h"

static char tmpdir[200];

/* Units of a model, from a 1-stage plan's catalogue. */
typedef struct units {
    int n;
    char name[64][32];
} units;

/* The plan of text; bad plans fail the test unless expected to. */
static pp_plan *parse_as(const char *text, bool want_ok)
{
    pp_plan *plan = NULL;
    pp_diag diag;
    pp_diag_clear(&diag);
    char buf[4096];
    pp_status s = pp_plan_parse_string("sched.yaml", text, strlen(text), &plan, &diag);
    CHECK_MSG((s == PP_OK) == want_ok, "plan: %s\n%s", pp_diag_format(&diag, buf, sizeof buf),
              text);
    return plan;
}

static pp_plan *parse(const char *text)
{
    return parse_as(text, true);
}

/* GPT-2's runs: recomputation of every stage (recompute: always), or none;
 * bf16 mixed precision (precision: bf16), or fp32; model.dropout. */
static bool g_recompute, g_bf16;
static double g_dropout;

/* The plan's lines before its stages: model (a ResNet, or "gpt2": a small
 * GPT-2 with its head tied to its token embedding, on a text file of
 * tmpdir), batch of 16 by split, schedule (YAML), the optimizer and data. */
static int plan_head(char *out, size_t n, const char *model, int split, const char *schedule)
{
    if (!strcmp(model, "gpt2"))
        return snprintf(out, n,
                        "model: {name: gpt2, n_layer: 6, n_head: 2, n_embd: 16, vocab_size: 256, "
                        "block_size: 12, dropout: %g}\n"
                        "batch: {size: 16, split_size: %d}\n"
                        "schedule: %s\n"
                        "recompute: %s\n"
                        "precision: %s\n"
                        "optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0001}\n"
                        "data: {format: text, file: \"%s/corpus.txt\", shuffle: true}\n"
                        "seed: 5\nsteps: 2\nstages:\n",
                        g_dropout, split, schedule, g_recompute ? "always" : "never",
                        g_bf16 ? "bf16" : "fp32", tmpdir);
    return snprintf(out, n,
                    "model: {name: %s, num_classes: 10, stem: cifar}\n"
                    "batch: {size: 16, split_size: %d}\n"
                    "schedule: %s\n"
                    "optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0001}\n"
                    "data: {format: synthetic, image_size: [8, 8]}\n"
                    "seed: 5\nsteps: 2\nstages:\n",
                    model, split, schedule);
}

/* The plan text of model on S stages, stage s on device dev[s], its units cut
 * unevenly (stage k gets about (1 + k % 3) shares); schedule is YAML. */
static void plan_text(char *out, size_t n, const char *model, const units *u, int S,
                      const int *dev, int split, const char *schedule)
{
    int len = plan_head(out, n, model, split, schedule);
    int shares = 0;
    for (int k = 0; k < S; k++) shares += 1 + k % 3;
    int first = 0, acc = 0;
    for (int k = 0; k < S; k++) {
        acc += 1 + k % 3;
        int last = k == S - 1 ? u->n - 1 : (int)((long)u->n * acc / shares) - 1;
        if (last < first) last = first;               /* every stage a unit at least */
        if (last > u->n - (S - k)) last = u->n - (S - k); /* and every later one too */
        len += snprintf(out + len, n - (size_t)len, "  - device: cpu:%d\n    layers: [", dev[k]);
        for (int x = first; x <= last; x++)
            len += snprintf(out + len, n - (size_t)len, "%s%s", x > first ? ", " : "", u->name[x]);
        len += snprintf(out + len, n - (size_t)len, "]\n");
        first = last + 1;
    }
}

/* Trains plan for its steps with opts (NULL: the defaults), saves, returns
 * the file's bytes (caller frees); *replays (unless NULL): the steps that
 * replayed a graph. */
static unsigned char *train_with(const pp_plan *plan, const pp_pipeline_options *opts,
                                 const char *tag, size_t *n, int *replays)
{
    pp_error err;
    pp_pipeline *p = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", tmpdir, tag);
    pp_status st = pp_pipeline_new(plan, opts, &p, &err);
    for (int i = 0; i < plan->steps && st == PP_OK; i++) st = pp_pipeline_step(p, NULL, &err);
    if (st == PP_OK) st = pp_pipeline_save(p, path, true, &err);
    if (st == PP_OK && replays) {
        pp_pipeline_report r;
        pp_pipeline_report_get(p, &r);
        *replays = r.graph_replays;
    }
    pp_pipeline_free(p);
    if (st != PP_OK) {
        CHECK_MSG(0, "%s: %s", tag, err.msg);
        return NULL;
    }
    unsigned char *bytes = check_read_file(path, n);
    unlink(path);
    return bytes;
}

static unsigned char *train(const pp_plan *plan, const char *tag, size_t *n)
{
    return train_with(plan, NULL, tag, n, NULL);
}

/* The 1-stage plan of model with split; fills its units. */
static pp_plan *one_stage(const char *model, int split, units *u)
{
    char text[4096];
    int len = plan_head(text, sizeof text, model, split, "gpipe");
    snprintf(text + len, sizeof text - (size_t)len, "  - device: cpu:0\n    layers: [%s]\n",
             !strcmp(model, "gpt2") ? "wte, wpe, h, ln_f, lm_head"
                                    : "conv1, bn1, relu, maxpool, layer1, layer2, layer3, "
                                      "layer4, avgpool, fc");
    pp_plan *plan = parse(text);
    if (plan && u) {
        u->n = plan->catalogue.n < 64 ? plan->catalogue.n : 64;
        for (int k = 0; k < u->n; k++)
            snprintf(u->name[k], sizeof u->name[k], "%s", plan->catalogue.units[k].name);
    }
    return plan;
}

/* Every built-in on model, against the 1-stage run, for D devices and m
 * micro-batches (split 16/m of a batch of 16); quick: D = 4 and m = 8 only
 * (the part a ThreadSanitizer build runs: every schedule's lanes and waits,
 * at a sixth of the cost). ResNet-50 (its bottleneck blocks; each run
 * twice ResNet-18's cost) on 4 devices only: 2 are ResNet-18's. */
static void test_builtins(const char *model, bool quick)
{
    const int d_first = quick || !strcmp(model, "resnet50") ? 4 : 2;
    static const int splits[] = {2, 4, 16}; /* m = 8, 4, 1 */
    units u;
    int runs = 0;
    size_t n_splits = quick ? 1 : sizeof splits / sizeof splits[0];
    for (size_t si = 0; si < n_splits; si++) {
        pp_plan *ref_plan = one_stage(model, splits[si], &u);
        if (!ref_plan) return;
        size_t ref_n = 0;
        char tag[128];
        snprintf(tag, sizeof tag, "%s-ref-%d", model, splits[si]);
        unsigned char *ref = train(ref_plan, tag, &ref_n);
        pp_plan_free(ref_plan);
        for (int D = d_first; D <= 4 && ref; D += 2)
            for (int kind = 0; kind < PP_SCHEDULE_KINDS; kind++) {
                if (kind == PP_SCHEDULE_FORWARD) continue;
                pp_schedule_placement pl = pp_schedule_kind_placement((pp_schedule_kind)kind);
                int S = pl == PP_PLACEMENT_ONE ? D : 2 * D, dev[16];
                pp_error err;
                CHECK_OK(pp_schedule_place(pl, S, D, dev, &err), &err);
                char text[8192];
                plan_text(text, sizeof text, model, &u, S, dev, splits[si],
                          pp_schedule_kind_name((pp_schedule_kind)kind));
                pp_plan *plan = parse(text);
                if (!plan) continue;
                snprintf(tag, sizeof tag, "%s-%s-D%d-m%d", model,
                         pp_schedule_kind_name((pp_schedule_kind)kind), D, plan->micro_batches);
                size_t n = 0;
                unsigned char *got = train(plan, tag, &n);
                CHECK_MSG(got && n == ref_n && memcmp(got, ref, n) == 0, "%s: not the 1-stage "
                          "run's checkpoint", tag);
                runs += got != NULL;
                free(got);
                pp_plan_free(plan);
            }
        free(ref);
    }
    CHECK_MSG(runs == (quick ? 9 : 3 * (d_first == 4 ? 1 : 2) * 9), "%s: %d runs", model, runs);
}

/* Every torch file as the plan's program, on ResNet-18 (ResNet-50 for more
 * stages than ResNet-18 has units: pp4 v4) split unevenly over its stages
 * and devices, against the 1-stage run of its micro-batches. */
static void test_torch_files(const char *dir)
{
    DIR *dp = opendir(dir);
    CHECK_MSG(dp != NULL, "%s", dir);
    if (!dp) return;
    static const char *const models[2] = {"resnet18", "resnet50"};
    units u[2];
    unsigned char *ref[2][9] = {{0}};
    size_t ref_n[2][9] = {{0}};
    pp_plan_free(one_stage("resnet18", 16, &u[0])); /* its units */
    int runs = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        int P, V, M;
        const char *at = strstr(e->d_name, "-pp");
        size_t len = strlen(e->d_name);
        if (!at || len < 5 || strcmp(e->d_name + len - 4, ".csv") ||
            sscanf(at, "-pp%d-v%d-m%d", &P, &V, &M) != 3 || M > 8 || 16 % M)
            continue;
        const int m = P * V > u[0].n;
        if (!ref[m][M]) {
            pp_plan *rp = one_stage(models[m], 16 / M, &u[m]);
            char tag[64];
            snprintf(tag, sizeof tag, "torch-ref-%s-%d", models[m], M);
            if (rp) ref[m][M] = train(rp, tag, &ref_n[m][M]);
            pp_plan_free(rp);
        }
        /* the class's placement */
        pp_schedule_placement pl = strstr(e->d_name, "ZBV") || strstr(e->d_name, "DualPipeV")
                                       ? PP_PLACEMENT_V
                                   : V == 1 ? PP_PLACEMENT_ONE : PP_PLACEMENT_LOOP;
        int dev[16];
        pp_error err;
        CHECK_OK(pp_schedule_place(pl, P * V, P, dev, &err), &err);
        char schedule[1024], text[8192], tag[256];
        snprintf(schedule, sizeof schedule, "{file: \"%s/%s\"}", dir, e->d_name);
        plan_text(text, sizeof text, models[m], &u[m], P * V, dev, 16 / M, schedule);
        pp_plan *plan = parse(text);
        if (!plan) continue;
        snprintf(tag, sizeof tag, "torch-%s", e->d_name);
        size_t n = 0;
        unsigned char *got = train(plan, tag, &n);
        CHECK_MSG(got && ref[m][M] && n == ref_n[m][M] && memcmp(got, ref[m][M], n) == 0,
                  "%s on %s: not the 1-stage run's checkpoint", e->d_name, models[m]);
        runs += got != NULL;
        free(got);
        pp_plan_free(plan);
    }
    closedir(dp);
    for (int k = 0; k < 9; k++) free(ref[0][k]), free(ref[1][k]);
    CHECK_MSG(runs == 45, "%d torch files ran", runs);
}

/* GPT-2's text, tmpdir/corpus.txt (its path into path); false after a failed check. */
static bool write_corpus(char *path, size_t n)
{
    snprintf(path, n, "%s/corpus.txt", tmpdir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return false;
    for (int i = 0; i < 4000; i++) fputc("the quick brown fox jumps over a lazy dog. "[i % 43] ^ (i % 7 == 0), f);
    fclose(f);
    return true;
}

/* Dropout under graphs: the dropout ops read the step from the stage's
 * memory, copied in by every training forward from the step's host value,
 * so that a replayed step draws its own masks (a CUDA graph keeps its
 * kernels' arguments). CPU stages replay a recorded list (graphs forced):
 * 6 steps (the batches alternate between two host buffers, each a graph
 * key: two warm-ups, two captures, two replays) save the eager run's bytes
 * on 1 and 3 stages, in fp32 and bf16. The CPU backend refuses
 * a step in memory that is not its key's (PP_ERR_INTERNAL): a copy that a
 * replay skipped, or one ordered after the draws, fails the run here. */
static void test_gpt2_dropout_graphs(void)
{
    g_dropout = 0.1;
    for (int b = 0; b < 2; b++) {
        g_bf16 = b == 1;
        units u;
        pp_plan *one = one_stage("gpt2", 4, &u);
        if (!one) continue;
        for (int S = 1; S <= 3; S += 2) {
            char text[4096];
            const int dev[3] = {0, 1, 2};
            plan_text(text, sizeof text, "gpt2", &u, S, dev, 4, "1f1b");
            pp_plan *plan = parse(text);
            if (!plan) continue;
            plan->steps = 6;
            size_t n_eager = 0, n_graph = 0;
            int replays = 0;
            const pp_pipeline_options force = {.graphs = PP_PIPELINE_GRAPHS_FORCE};
            unsigned char *eager = train(plan, "gpt2-dropout-eager", &n_eager);
            unsigned char *graph = train_with(plan, &force, "gpt2-dropout-graphs", &n_graph,
                                              &replays);
            CHECK_MSG(eager && graph && n_eager == n_graph && !memcmp(eager, graph, n_eager),
                      "%s, %d stages: dropout with graphs replayed differs from eager",
                      g_bf16 ? "bf16" : "fp32", S);
            CHECK_MSG(replays == 2, "%d stages: %d steps replayed, expected 2", S, replays);
            free(eager), free(graph);
            pp_plan_free(plan);
        }
        pp_plan_free(one);
    }
    g_bf16 = false;
    g_dropout = 0.0;
}

/* GPT-2, its head tied to its token embedding on the first stage (a copy on
 * the last, its gradient summed into the embedding's after the backward):
 * every built-in on 2 and 4 devices, 1, 4 and 8 micro-batches, without
 * recomputation and with it on every stage, saves the 1-stage run's bytes;
 * in bf16 too (all of them without recomputation; 4 devices and 8
 * micro-batches with it). With dropout 0.1 (masks by global sample, drawn
 * again by a recomputed forward): every built-in without recomputation and
 * with it; bf16 on 4 devices and 8 micro-batches; and the 1-stage run's
 * bytes differ from those without dropout (the masks do act). */
static void test_gpt2(void)
{
    char path[256];
    if (!write_corpus(path, sizeof path)) return;
    for (int r = 0; r < 2; r++) {
        g_recompute = r == 1;
        test_builtins("gpt2", false);
    }
    /* bf16: every built-in, recomputation off; on 4 devices and 8 micro-batches with it */
    g_bf16 = true;
    for (int r = 0; r < 2; r++) {
        g_recompute = r == 1;
        test_builtins("gpt2", g_recompute);
    }
    g_bf16 = g_recompute = false;
    g_dropout = 0.1;
    for (int r = 0; r < 2; r++) {
        g_recompute = r == 1;
        test_builtins("gpt2", false);
    }
    g_bf16 = true;
    test_builtins("gpt2", true);
    g_bf16 = g_recompute = false;
    size_t n_on = 0, n_off = 0;
    pp_plan *on = one_stage("gpt2", 4, NULL);
    unsigned char *b_on = on ? train(on, "gpt2-dropout", &n_on) : NULL;
    g_dropout = 0.0;
    pp_plan *off = one_stage("gpt2", 4, NULL);
    unsigned char *b_off = off ? train(off, "gpt2-no-dropout", &n_off) : NULL;
    CHECK_MSG(b_on && b_off && n_on == n_off && memcmp(b_on, b_off, n_on) != 0,
              "dropout 0.1 trained the bits of dropout 0");
    free(b_on), free(b_off);
    pp_plan_free(on), pp_plan_free(off);
    test_gpt2_dropout_graphs();
    unlink(path);
}

/* Plan errors: the exact messages, exit-2 class. */
static void test_plan_errors(const char *dir)
{
    units u;
    pp_plan *rp = one_stage("resnet18", 4, &u);
    pp_plan_free(rp);
    static const int looped[4] = {0, 1, 0, 1};
    char text[8192];
    pp_error err;
    pp_pipeline *p = NULL;
    /* zbv needs a V: these stages loop */
    plan_text(text, sizeof text, "resnet18", &u, 4, looped, 4, "zbv");
    pp_plan *plan = parse(text);
    CHECK(plan && pp_pipeline_new(plan, NULL, &p, &err) == PP_ERR_INPUT);
    CHECK_MSG(strncmp(err.msg, "sched.yaml:3:11: schedule zbv runs two stages per device in a V "
                               "(stage s on device s, then 2 x devices - 1 - s): here 0,1,1,0; "
                               "these 4 stages are on 2 devices as 0,1,0,1 (list the stages' "
                               "devices", 180) == 0, "%s", err.msg);
    pp_plan_free(plan);
    /* a torch file for 8 micro-batches, the plan cuts 4 */
    char schedule[1024];
    snprintf(schedule, sizeof schedule, "{file: \"%s/ScheduleGPipe-pp2-v1-m8.csv\"}", dir);
    static const int two[2] = {0, 1};
    plan_text(text, sizeof text, "resnet18", &u, 2, two, 4, schedule);
    plan = parse_as(text, false); /* no such file: the plan itself is bad */
    CHECK(plan == NULL);
    snprintf(schedule, sizeof schedule, "{file: \"%s/ScheduleGPipe-pp2-v1-m4.csv\"}", dir);
    plan_text(text, sizeof text, "resnet18", &u, 2, two, 2, schedule);
    plan = parse(text);
    CHECK(plan && pp_pipeline_new(plan, NULL, &p, &err) == PP_ERR_INPUT);
    CHECK_MSG(strstr(err.msg, "ScheduleGPipe-pp2-v1-m4.csv:1:1: the program is written for 4 "
                              "micro-batches but the batch has 8") != NULL, "%s", err.msg);
    pp_plan_free(plan);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "tests/schedules/torch";
    const char *part = argc > 2 ? argv[2] : "all";
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "pp_schedules")) return 1;
    if (!strcmp(part, "all") || !strcmp(part, "errors")) test_plan_errors(dir);
    if (!strcmp(part, "all") || !strcmp(part, "resnet18")) test_builtins("resnet18", false);
    if (!strcmp(part, "all") || !strcmp(part, "resnet50")) test_builtins("resnet50", false);
    if (!strcmp(part, "quick")) {
        test_builtins("resnet18", true);
        /* the host's step against the streams' copies of it (ThreadSanitizer) */
        char path[256];
        if (write_corpus(path, sizeof path)) test_gpt2_dropout_graphs();
        unlink(path);
    }
    if (!strcmp(part, "all") || !strcmp(part, "gpt2")) test_gpt2();
    if (!strcmp(part, "all") || !strcmp(part, "torch")) test_torch_files(dir);
    rmdir(tmpdir);
    return check_summary("schedules");
}
