/*
 * bench_fit.c - the figures of fitting plans to memory (pipeline/fit.h) on the
 * CPU backend. A benchmark: it prints figures and asserts nothing beyond the
 * calls succeeding.
 *
 * Usage: bench_fit [recompute | table | limit | planner]... (all without arguments)
 *
 *   recompute  ResNet-50 224x224, batch 16, split 4, GPipe, two CPU stages cut
 *              after layer2: recompute never and always, STEPS (3) steps each:
 *              stage 0's measured device peak and the cut, the median step and
 *              the slow-down, and whether the saved checkpoints (weights,
 *              momentum, batch-norm statistics) are the same bytes.
 *   table      the memory model against the measured device peaks at 224x224
 *              after two steps: ResNet-50, batch 16, GPipe and 1F1B, every
 *              recompute mode, split sizes 2 and 4.
 *   limit      the same ResNet-50 plan: the planner under a memory limit of
 *              60% of its largest measured peak, then the plan it writes run:
 *              measured peaks against the limit.
 *   planner    ResNet-18 64x64, batch 16, two CPU stages: every candidate of a
 *              small space (gpipe, 1f1b) x (split 2, 4, 8) x (cut after
 *              layer1, layer2, layer3) and the planner's choice over the same
 *              schedules and split sizes (its own cut), run in 3 interleaved rounds of 3 steps; each plan's
 *              fastest step, and its CPU time per step (images per CPU
 *              second: what a busy shared host cannot disturb); prints both
 *              throughputs for the best of the space and the planner's.
 *
 * Unit times go to the profile cache (PP_PROFILE_CACHE, default
 * ~/.cache/pipeline-run/unit-times.json). Several cpu:N devices share the
 * host's cores, so stage times measured alone overstate what the stages do
 * at the same time: read the planner's figures as a ranking.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "partitioner/emit.h"
#include "partitioner/plan.h"
#include "pipeline/fit.h"
#include "pipeline/pipeline.h"

#define STEPS 3

static pp_plan *parse(const char *text)
{
    pp_plan *plan = NULL;
    pp_diag d;
    pp_diag_clear(&d);
    if (pp_plan_parse_string("bench.yaml", text, strlen(text), &plan, &d) != PP_OK) {
        char buf[4096];
        fprintf(stderr, "bench_fit: %s\n", pp_diag_format(&d, buf, sizeof buf));
        return NULL;
    }
    return plan;
}

static int g_steps = STEPS; /* steps of the plans made next */

static pp_plan *resnet(const char *model, int image, int batch, int split, const char *schedule,
                       const char *recompute, const char *stages)
{
    char text[4096];
    snprintf(text, sizeof text,
             "model: {name: %s, num_classes: 1000}\n"
             "batch: {size: %d, split_size: %d}\n"
             "schedule: %s\nrecompute: %s\n"
             "optimizer: {type: sgd, lr: 0.01, momentum: 0.9, weight_decay: 0.0001}\n"
             "data: {format: synthetic, image_size: [%d, %d]}\n"
             "seed: 1\nsteps: %d\nstages:\n%s",
             model, batch, split, schedule, recompute, image, image, g_steps, stages);
    return parse(text);
}

#define CUT(a, b)                                                                          \
    "  - {device: cpu:0, layers: [" a "]}\n  - {device: cpu:1, layers: [" b "]}\n"
#define AFTER_LAYER1 CUT("conv1, bn1, relu, maxpool, layer1", "layer2, layer3, layer4, avgpool, fc")
#define AFTER_LAYER2 CUT("conv1, bn1, relu, maxpool, layer1, layer2", "layer3, layer4, avgpool, fc")
#define AFTER_LAYER3 CUT("conv1, bn1, relu, maxpool, layer1, layer2, layer3", "layer4, avgpool, fc")

/* Runs plan for its steps; device peaks, median step (fastest with
 * g_fastest), the process's CPU time per step after the first (cpu_ms, may
 * be NULL), optional checkpoint. */
static bool g_fastest;

static double cpu_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int run_cpu(const pp_plan *plan, size_t *peak, double *step_ms, double *cpu_ms,
                   const char *save)
{
    pp_error err;
    pp_pipeline *p = NULL;
    pp_status s = pp_pipeline_new(plan, NULL, &p, &err);
    double c0 = 0;
    for (int i = 0; i < plan->steps && s == PP_OK; i++) {
        if (i == 1) c0 = cpu_now_ms();
        s = pp_pipeline_step(p, NULL, &err);
    }
    if (cpu_ms && plan->steps > 1) *cpu_ms = (cpu_now_ms() - c0) / (plan->steps - 1);
    if (s == PP_OK && save) s = pp_pipeline_save(p, save, true, &err);
    if (s == PP_OK) {
        for (int k = 0; peak && k < plan->n_stages; k++) {
            pp_stage_report sr;
            pp_pipeline_stage_report(p, k, &sr);
            peak[k] = sr.peak_bytes;
        }
        pp_pipeline_report r;
        pp_pipeline_report_get(p, &r);
        if (step_ms) *step_ms = g_fastest ? r.step_ms_min : r.step_ms_median;
    } else {
        fprintf(stderr, "bench_fit: %s\n", err.msg);
    }
    pp_pipeline_free(p);
    return s == PP_OK ? 0 : 1;
}

static int run(const pp_plan *plan, size_t *peak, double *step_ms, const char *save)
{
    return run_cpu(plan, peak, step_ms, NULL, save);
}

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = false;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static double mib(size_t b)
{
    return (double)b / 1048576.0;
}

static int bench_recompute(const char *dir)
{
    static const char *const modes[] = {"never", "always"};
    size_t peak[2][2];
    double step[2];
    char path[2][512];
    for (int k = 0; k < 2; k++) {
        pp_plan *plan = resnet("resnet50", 224, 16, 4, "gpipe", modes[k], AFTER_LAYER2);
        snprintf(path[k], sizeof path[k], "%s/recompute-%s.safetensors", dir, modes[k]);
        if (!plan || run(plan, peak[k], &step[k], path[k])) return 1;
        pp_plan_free(plan);
    }
    printf("recompute: ResNet-50 224x224, batch 16, split 4, GPipe, cut after layer2, %d steps\n",
           STEPS);
    printf("  recompute never:  stage 0 peak %8.1f MiB, stage 1 %8.1f MiB, step %8.1f ms\n",
           mib(peak[0][0]), mib(peak[0][1]), step[0]);
    printf("  recompute always: stage 0 peak %8.1f MiB, stage 1 %8.1f MiB, step %8.1f ms\n",
           mib(peak[1][0]), mib(peak[1][1]), step[1]);
    printf("  stage 0's peak cut by %.1f%%; step %.2fx; checkpoints %s\n",
           100.0 * (1.0 - (double)peak[1][0] / (double)peak[0][0]), step[1] / step[0],
           same_file(path[0], path[1]) ? "bitwise equal" : "DIFFER");
    return 0;
}

static int bench_table(void)
{
    static const char *const schedules[] = {"gpipe", "1f1b"};
    static const char *const modes[] = {"never", "except_last", "always"};
    static const int splits[] = {2, 4};
    g_steps = 2; /* the peak is reached in the second */
    printf("memory model at 224x224: ResNet-50, batch 16, cut after layer2, %d steps\n", g_steps);
    printf("  %-6s %-12s %5s  %11s %11s %7s  %11s %11s %7s\n", "sched", "recompute", "split",
           "s0 measured", "predicted", "error", "s1 measured", "predicted", "error");
    double worst = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++) {
                pp_plan *plan = resnet("resnet50", 224, 16, splits[c], schedules[a], modes[b],
                                       AFTER_LAYER2);
                pp_fit_stage pred[2];
                pp_error err;
                size_t peak[2];
                if (!plan || pp_fit_predict(plan, pred, &err) != PP_OK || run(plan, peak, NULL, NULL))
                    return 1;
                double e0 = ((double)pred[0].device_peak - (double)peak[0]) / (double)peak[0];
                double e1 = ((double)pred[1].device_peak - (double)peak[1]) / (double)peak[1];
                worst = fmax(worst, fmax(fabs(e0), fabs(e1)));
                printf("  %-6s %-12s %5d  %7.1f MiB %7.1f MiB %+6.1f%%  %7.1f MiB %7.1f MiB "
                       "%+6.1f%%\n", schedules[a], modes[b], splits[c], mib(peak[0]),
                       mib((size_t)pred[0].device_peak), 100 * e0, mib(peak[1]),
                       mib((size_t)pred[1].device_peak), 100 * e1);
                pp_plan_free(plan);
            }
    printf("  largest error %.1f%%\n", 100 * worst);
    g_steps = STEPS;
    return 0;
}

static int bench_limit(void)
{
    pp_plan *plan = resnet("resnet50", 224, 16, 4, "gpipe", "never", AFTER_LAYER2);
    size_t peak[2];
    if (!plan || run(plan, peak, NULL, NULL)) return 1;
    size_t largest = peak[0] > peak[1] ? peak[0] : peak[1];
    int64_t limit = (int64_t)(0.6 * (double)largest);
    pp_fit_result res;
    pp_error err;
    const pp_fit_options opt = {.memory_limit = limit};
    if (pp_fit_optimize(plan, &opt, &res, &err) != PP_OK) {
        fprintf(stderr, "bench_fit: %s\n", err.msg);
        return 1;
    }
    printf("limit: ResNet-50 224x224 batch 16 split 4 GPipe: largest peak %.1f MiB, limit %.1f "
           "MiB (60%%); %d of %d candidates fit\n", mib(largest), mib((size_t)limit), res.fitting,
           res.tried);
    if (res.n == 0) {
        printf("  nothing fits: %s\n", res.why);
        pp_fit_result_free(&res);
        pp_plan_free(plan);
        return 1;
    }
    const pp_fit_candidate *c = &res.best[0];
    char *text = NULL;
    size_t len;
    int rc = pp_fit_emit(plan, c, limit, &text, &len, &err) != PP_OK;
    pp_plan *best = rc ? NULL : parse(text);
    size_t got[2] = {0};
    double step = 0;
    rc = rc || !best || run(best, got, &step, NULL);
    char s0[256], s1[256];
    pp_plan_spell_units(&plan->catalogue, c->first[0], c->last[0], s0, sizeof s0);
    pp_plan_spell_units(&plan->catalogue, c->first[1], c->last[1], s1, sizeof s1);
    printf("  chosen: %s, split %d, stage 0 [%s] recompute %s, stage 1 [%s] recompute %s\n",
           pp_plan_schedule_name(c->schedule), c->split_size, s0,
           pp_plan_recompute_name(c->recompute[0]), s1, pp_plan_recompute_name(c->recompute[1]));
    printf("  predicted peaks %.1f / %.1f MiB, measured %.1f / %.1f MiB: %s; step %.1f ms\n",
           mib((size_t)c->peak[0]), mib((size_t)c->peak[1]), mib(got[0]), mib(got[1]),
           !rc && got[0] <= (size_t)limit && got[1] <= (size_t)limit ? "within the limit"
                                                                      : "OVER THE LIMIT",
           step);
    free(text);
    pp_plan_free(best);
    pp_fit_result_free(&res);
    pp_plan_free(plan);
    return rc;
}

/* The planner's choice against every candidate of a small space, all run in
 * ROUNDS interleaved rounds of STEPS steps each; a plan's figure is its
 * fastest step over every round (the least disturbed by other work on a
 * shared host). */
#define ROUNDS 3
#define SPACE 18

static int bench_planner(void)
{
    static const char *const schedules[] = {"gpipe", "1f1b"};
    static const int splits[] = {2, 4, 8};
    static const char *const cuts[] = {AFTER_LAYER1, AFTER_LAYER2, AFTER_LAYER3};
    static const char *const cut_names[] = {"layer1", "layer2", "layer3"};
    pp_plan *plans[SPACE + 1] = {0};
    char names[SPACE + 1][96];
    double fastest[SPACE + 1], work[SPACE + 1];
    int k = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++, k++) {
                plans[k] = resnet("resnet18", 64, 16, splits[b], schedules[a], "never", cuts[c]);
                snprintf(names[k], sizeof names[k], "%s split %d, cut after %s", schedules[a],
                         splits[b], cut_names[c]);
                if (!plans[k]) return 1;
            }
    /* the planner over the same schedules and split sizes, from the same
     * model and batch; its cut is its own (the dynamic program over every
     * unit, not only the three above), and nothing of the space is run */
    pp_fit_options opt = {.splits = splits, .n_splits = 3};
    pp_fit_result res;
    pp_error err;
    if (pp_fit_optimize(plans[0], &opt, &res, &err) != PP_OK || res.n == 0) {
        fprintf(stderr, "bench_fit: %s\n", res.n ? err.msg : res.why);
        return 1;
    }
    const pp_fit_candidate *c = &res.best[0];
    char *text = NULL, units[256];
    size_t len;
    if (pp_fit_emit(plans[0], c, 0, &text, &len, &err) != PP_OK) return 1;
    pp_plan_spell_units(&plans[0]->catalogue, c->first[1], c->last[1], units, sizeof units);
    plans[SPACE] = parse(text);
    free(text);
    if (!plans[SPACE]) return 1;
    snprintf(names[SPACE], sizeof names[SPACE], "the planner's: %s split %d, stage 1 from %.30s",
             pp_plan_schedule_name(c->schedule), c->split_size, units);
    printf("planner: ResNet-18 64x64, batch 16, cpu:0 and cpu:1; every plan run in %d rounds of "
           "%d steps, its fastest step\n", ROUNDS, STEPS);
    g_fastest = true;
    for (int i = 0; i <= SPACE; i++) fastest[i] = work[i] = INFINITY;
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i <= SPACE; i++) {
            double step = 0, cpu = 0;
            if (run_cpu(plans[i], NULL, &step, &cpu, NULL)) return 1;
            if (step > 0 && step < fastest[i]) fastest[i] = step;
            if (cpu > 0 && cpu < work[i]) work[i] = cpu;
        }
    g_fastest = false;
    /* wall time: images per second of the fastest step; work: images per
     * second of the process's CPU time per step (what the host's cores
     * would give it alone, whatever else runs there) */
    int best = 0, best_work = 0;
    printf("  %-44s %10s %14s\n", "", "images/s", "images/cpu-s");
    for (int i = 0; i < SPACE; i++) {
        printf("  %-44s %10.1f %14.1f\n", names[i], 16000.0 / fastest[i], 16000.0 / work[i]);
        if (fastest[i] < fastest[best]) best = i;
        if (work[i] < work[best_work]) best_work = i;
    }
    printf("  %-44s %10.1f %14.1f  (predicted %.1f images/s)\n", names[SPACE],
           16000.0 / fastest[SPACE], 16000.0 / work[SPACE], c->images_per_s);
    printf("  wall time: the best of the space %s, %.1f images/s; the planner's choice %.3fx\n",
           names[best], 16000.0 / fastest[best], fastest[best] / fastest[SPACE]);
    printf("  CPU time:  the best of the space %s, %.1f images/cpu-s; the planner's choice "
           "%.3fx\n", names[best_work], 16000.0 / work[best_work], work[best_work] / work[SPACE]);
    pp_fit_result_free(&res);
    for (int i = 0; i <= SPACE; i++) pp_plan_free(plans[i]);
    return 0;
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/pp-bench-fit.XXXXXX";
    if (!mkdtemp(dir)) return 1;
    int rc = 0;
    for (int i = argc > 1 ? 1 : 0; i < (argc > 1 ? argc : 1); i++) {
        const char *what = argc > 1 ? argv[i] : NULL;
        if (!what || !strcmp(what, "recompute")) rc |= bench_recompute(dir);
        if (!what || !strcmp(what, "table")) rc |= bench_table();
        if (!what || !strcmp(what, "limit")) rc |= bench_limit();
        if (!what || !strcmp(what, "planner")) rc |= bench_planner();
        fflush(stdout);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_fit: could not remove %s\n", dir);
    return rc;
}
