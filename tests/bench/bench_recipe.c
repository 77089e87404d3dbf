/*
 * bench_recipe.c - what the training recipe's optimizer work costs on the
 * CPU backend, per step over ResNet-50's 161 parameter tensors (25.6 M
 * floats, built from the model): an SGD step with momentum, an AdamW step,
 * the gradients' sums of squares (clipping's norm) and their scaling (SGD's
 * clipping), each in ms and in GB/s of the bytes it must move (SGD 16 bytes
 * a parameter: param and buffer read and written, the gradient read; AdamW
 * 28: param, exp_avg, exp_avg_sq read and written, the gradient read; sums
 * of squares 4; scaling 8).
 *
 * usage: bench_recipe [REPS]   (default 5; best of REPS; PP_CPU_THREADS sets
 * the threads). Asserts nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "models/stage.h"
#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "runtime/train/optimizer.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    pp_error err;
    pp_registry *reg;
    pp_device_ctx *dev;
    pp_stage *stage;
    pp_model_config cfg;
    pp_catalogue cat;
    if (reps < 1) {
        fprintf(stderr, "usage: bench_recipe [REPS]\n");
        return 2;
    }
    if (pp_model_config_default("resnet50", &cfg, &err) != PP_OK ||
        pp_catalogue_build(&cfg, &cat, &err) != PP_OK || pp_registry_new(&reg, &err) != PP_OK ||
        pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &dev, &err) != PP_OK ||
        pp_stage_new(&cfg, 1, 0, cat.n - 1, dev, &stage, &err) != PP_OK) {
        fprintf(stderr, "bench_recipe: %s\n", err.msg);
        return 1;
    }
    pp_catalogue_free(&cat);
    const int n = pp_stage_param_count(stage);
    pp_param_ref *refs = calloc((size_t)n, sizeof *refs);
    pp_tensor **grads = calloc((size_t)n, sizeof *grads);
    int64_t floats = 0;
    for (int i = 0; i < n; i++) {
        const pp_named_tensor *nt = pp_stage_param(stage, i);
        refs[i] = (pp_param_ref){nt->name, nt->value, nt->grad};
        grads[i] = nt->grad;
        floats += pp_tensor_numel(nt->value);
    }
    double *sums = calloc((size_t)n, sizeof *sums);
    pp_optimizer *sgd, *adamw;
    const pp_sgd_config sc = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f};
    pp_optimizer_settings as = pp_optimizer_defaults(PP_OPTIMIZER_ADAMW);
    pp_exec ex;
    if (pp_optimizer_new(&sgd, &sc, refs, (size_t)n, &err) != PP_OK ||
        pp_optimizer_new_with(&adamw, &as, refs, NULL, (size_t)n, &err) != PP_OK ||
        pp_exec_init(&ex, dev, NULL, &err) != PP_OK) {
        fprintf(stderr, "bench_recipe: %s\n", err.msg);
        return 1;
    }
    static const struct {
        const char *what;
        double bytes_per_float;
    } rows[] = {{"SGD step (momentum)", 16}, {"AdamW step", 28},
                {"sums of squares (norm)", 4}, {"scaling (SGD clip)", 8}};
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < reps + 1; r++) { /* the first pass allocates the state */
        for (int k = 0; k < 4; k++) {
            const double t0 = now_ms();
            pp_status s = k == 0   ? pp_optimizer_step(sgd, NULL, NULL, &err)
                          : k == 1 ? pp_optimizer_step(adamw, NULL, NULL, &err)
                          : k == 2 ? pp_sumsq_multi(&ex, n, (const pp_tensor *const *)grads,
                                                    sums, &err)
                                   : pp_scale_multi(&ex, 0.5f, n, grads, &err);
            const double ms = now_ms() - t0;
            if (s != PP_OK) {
                fprintf(stderr, "bench_recipe: %s\n", err.msg);
                return 1;
            }
            if (r > 0 && ms < best[k]) best[k] = ms;
        }
    }
    const char *threads = getenv("PP_CPU_THREADS");
    printf("ResNet-50: %d parameter tensors, %.1f M floats, %s threads, best of %d\n", n,
           (double)floats / 1e6, threads && *threads ? threads : "all", reps);
    for (int k = 0; k < 4; k++)
        printf("%-24s %8.2f ms  %6.2f GB/s\n", rows[k].what, best[k],
               rows[k].bytes_per_float * (double)floats / (best[k] * 1e6));
    pp_exec_destroy(&ex);
    pp_optimizer_free(sgd);
    pp_optimizer_free(adamw);
    pp_stage_free(stage);
    pp_registry_free(reg);
    free(refs);
    free(grads);
    free(sums);
    return 0;
}
