/*
 * bench_step.c - time of one ResNet-50 training step on the CPU backend.
 *
 * Usage: bench_step [STEPS [BATCH [IMAGE]]]   (defaults 10, 16, 64)
 *
 * The pipeline is built from a plan string: ResNet-50 (1000 classes,
 * imagenet stem), one stage on cpu:0 holding every unit, batch BATCH in one
 * micro-batch (split_size = BATCH), synthetic 3xIMAGExIMAGE data, SGD with
 * momentum 0.9 and weight decay 1e-4. It runs 2 warm-up steps, then STEPS
 * timed steps (data, forward, backward and the optimizer: pp_pipeline_step),
 * and prints the median, minimum and maximum step time and the last loss.
 * The last line, "median_ms N", is for scripts. OpenBLAS's thread count comes
 * from the environment (OPENBLAS_NUM_THREADS). A benchmark, not a test: it
 * asserts nothing beyond the calls succeeding.
 *
 * Linked with an op profiler (bench_step_ops: tests/torch/op_profile.c), the
 * weak hooks below are defined: the profile is reset after the warm-up and
 * printed, per timed step, before the last line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "partitioner/plan.h"
#include "pipeline/pipeline.h"

#define WARMUP_STEPS 2

/* Defined only when an op profiler is linked in. */
void pp_bench_profile_reset(void) __attribute__((weak));
void pp_bench_profile_print(int steps, double mean_step_ms) __attribute__((weak));
#define MAX_STEPS 1000

static const char plan_fmt[] =
    "model:\n"
    "  name: resnet50\n"
    "  num_classes: 1000\n"
    "  in_channels: 3\n"
    "  stem: imagenet\n"
    "batch:\n"
    "  size: %d\n"
    "  split_size: %d\n"
    "schedule: gpipe\n"
    "optimizer:\n"
    "  type: sgd\n"
    "  lr: 0.01\n"
    "  momentum: 0.9\n"
    "  weight_decay: 0.0001\n"
    "data:\n"
    "  format: synthetic\n"
    "  image_size: [%d, %d]\n"
    "seed: 1\n"
    "steps: %d\n"
    "stages:\n"
    "  - device: cpu:0\n"
    "    layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool, fc]\n";

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int arg_int(int argc, char **argv, int i, int def, int lo, int hi)
{
    if (argc <= i) return def;
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "bench_step: argument %d must be an integer in [%d, %d]\n", i, lo, hi);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    int steps = arg_int(argc, argv, 1, 10, 1, MAX_STEPS);
    int batch = arg_int(argc, argv, 2, 16, 1, 4096);
    int image = arg_int(argc, argv, 3, 64, 32, 1024);

    char text[sizeof plan_fmt + 64];
    int len = snprintf(text, sizeof text, plan_fmt, batch, batch, image, image,
                       steps + WARMUP_STEPS);
    pp_plan *plan = NULL;
    pp_diag diag = {0};
    if (pp_plan_parse_string("bench_step.yaml", text, (size_t)len, &plan, &diag) != PP_OK) {
        char buf[4096];
        fprintf(stderr, "bench_step: %s\n", pp_diag_format(&diag, buf, sizeof buf));
        return 1;
    }
    pp_pipeline *p = NULL;
    pp_error err = {0};
    if (pp_pipeline_new(plan, NULL, &p, &err) != PP_OK) {
        fprintf(stderr, "bench_step: %s\n", err.msg);
        pp_plan_free(plan);
        return 1;
    }
    pp_plan_free(plan);

    double times[MAX_STEPS];
    pp_step_result r = {0};
    int rc = 0;
    for (int i = 0; i < WARMUP_STEPS + steps; i++) {
        if (i == WARMUP_STEPS && pp_bench_profile_reset) pp_bench_profile_reset();
        double t0 = now_ms();
        if (pp_pipeline_step(p, &r, &err) != PP_OK) {
            fprintf(stderr, "bench_step: step %d: %s\n", i, err.msg);
            rc = 1;
            break;
        }
        if (i >= WARMUP_STEPS) times[i - WARMUP_STEPS] = now_ms() - t0;
    }
    pp_pipeline_free(p);
    if (rc) return rc;

    double sum = 0;
    for (int i = 0; i < steps; i++) sum += times[i];
    qsort(times, (size_t)steps, sizeof times[0], cmp_double);
    double median = steps % 2 ? times[steps / 2] : 0.5 * (times[steps / 2 - 1] + times[steps / 2]);
    const char *thr = getenv("OPENBLAS_NUM_THREADS");
    printf("resnet50 cpu step: batch %d, 3x%dx%d, 1000 classes, SGD momentum, %s OpenBLAS threads\n",
           batch, image, image, thr ? thr : "default");
    printf("%d timed steps after %d warm-up: median %.1f ms, min %.1f, max %.1f; last loss %.4f\n",
           steps, WARMUP_STEPS, median, times[0], times[steps - 1], r.loss);
    if (pp_bench_profile_print) pp_bench_profile_print(steps, sum / steps);
    printf("median_ms %.3f\n", median);
    return 0;
}
