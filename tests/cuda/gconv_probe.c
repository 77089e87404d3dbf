/*
 * gconv_probe.c - what cuDNN's graph API offers for ResNet-50's convolutions
 * (224x224 images): for each distinct geometry, every direction in bf16 and
 * fp32 (IEEE; with --tf32 the device in tf32 mode), NHWC and NCHW, the
 * engines found, refused and timed, the one chosen, its workspace and time
 * (pp_cuda_gconv_probe's lines), then a count of the rows that built.
 *
 *   gconv_probe [BATCH] [--tf32] [--budget S]      (BATCH default 128)
 *
 * --budget S: start no new geometry after S seconds (plans of runtime-compiled
 * engines can take a second each to finalize); those left are listed as
 * skipped.
 *
 * Exits 77 when no CUDA device is visible, 1 when a row failed other than by
 * cuDNN having no engine for it (PP_ERR_UNSUPPORTED, which the caller's
 * legacy path covers), else 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/cuda/gconv.h"

/* n c h w k kernel stride pad, for batch n */
typedef struct geom {
    const char *where;
    int c, h, w, k, kernel, stride, pad;
} geom;

static const geom resnet50[] = {
    {"conv1", 3, 224, 224, 64, 7, 2, 3},
    {"layer1 1x1 reduce (first)", 64, 56, 56, 64, 1, 1, 0},
    {"layer1 3x3", 64, 56, 56, 64, 3, 1, 1},
    {"layer1 1x1 expand, downsample", 64, 56, 56, 256, 1, 1, 0},
    {"layer1 1x1 reduce", 256, 56, 56, 64, 1, 1, 0},
    {"layer2.0 1x1 reduce", 256, 56, 56, 128, 1, 1, 0},
    {"layer2.0 3x3 stride 2", 128, 56, 56, 128, 3, 2, 1},
    {"layer2.0 downsample", 256, 56, 56, 512, 1, 2, 0},
    {"layer2 1x1 expand", 128, 28, 28, 512, 1, 1, 0},
    {"layer2 1x1 reduce", 512, 28, 28, 128, 1, 1, 0},
    {"layer2 3x3", 128, 28, 28, 128, 3, 1, 1},
    {"layer3.0 1x1 reduce", 512, 28, 28, 256, 1, 1, 0},
    {"layer3.0 3x3 stride 2", 256, 28, 28, 256, 3, 2, 1},
    {"layer3.0 downsample", 512, 28, 28, 1024, 1, 2, 0},
    {"layer3 1x1 expand", 256, 14, 14, 1024, 1, 1, 0},
    {"layer3 1x1 reduce", 1024, 14, 14, 256, 1, 1, 0},
    {"layer3 3x3", 256, 14, 14, 256, 3, 1, 1},
    {"layer4.0 1x1 reduce", 1024, 14, 14, 512, 1, 1, 0},
    {"layer4.0 3x3 stride 2", 512, 14, 14, 512, 3, 2, 1},
    {"layer4.0 downsample", 1024, 14, 14, 2048, 1, 2, 0},
    {"layer4 1x1 expand", 512, 7, 7, 2048, 1, 1, 0},
    {"layer4 1x1 reduce", 2048, 7, 7, 512, 1, 1, 0},
    {"layer4 3x3", 512, 7, 7, 512, 3, 1, 1},
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    int batch = 128;
    bool tf32 = false;
    double budget = 0.0; /* 0: none */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tf32") == 0) {
            tf32 = true;
        } else if (strcmp(argv[i], "--budget") == 0 && i + 1 < argc) {
            budget = atof(argv[++i]);
        } else if ((batch = atoi(argv[i])) <= 0) {
            fprintf(stderr, "usage: gconv_probe [BATCH] [--tf32] [--budget S]\n");
            return 2;
        }
    }
    const double t0 = now_s();
    if (pp_cuda_device_count() == 0) {
        fprintf(stderr, "gconv_probe: no CUDA device visible, skipping\n");
        return 77;
    }
    pp_registry *reg = NULL;
    pp_device_ctx *gpu = NULL;
    pp_exec ex = {0};
    pp_error err;
    if (pp_registry_new(&reg, &err) != PP_OK ||
        pp_registry_get(reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &gpu, &err) != PP_OK ||
        (tf32 && pp_device_set_math(gpu, PP_MATH_TF32, &err) != PP_OK) ||
        pp_exec_init(&ex, gpu, NULL, &err) != PP_OK) {
        fprintf(stderr, "gconv_probe: %s\n", err.msg);
        pp_registry_free(reg);
        return 1;
    }
    const int n = (int)(sizeof resnet50 / sizeof resnet50[0]);
    int built = 0, unsupported = 0, failed = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        const geom *g = &resnet50[i];
        if (budget > 0 && now_s() - t0 > budget) {
            printf("%s: skipped (time budget of %.0f s spent)\n", g->where, budget);
            skipped++;
            continue;
        }
        pp_conv2d_desc d;
        if (pp_conv2d_desc_init(&d, batch, g->c, g->h, g->w, g->k, g->kernel, g->stride, g->pad,
                                &err) != PP_OK) {
            fprintf(stderr, "gconv_probe: %s: %s\n", g->where, err.msg);
            failed++;
            continue;
        }
        printf("%s (%s):\n", g->where, tf32 ? "fp32 rows in tf32 mode" : "fp32 rows IEEE");
        pp_status s = pp_cuda_gconv_probe(&ex, &d, stdout, &err);
        if (s == PP_OK)
            built++;
        else if (s == PP_ERR_UNSUPPORTED)
            unsupported++;
        else
            failed++;
        /* plans of this geometry are not needed again */
        pp_cuda_gconv_cache_free(&ex);
        fflush(stdout);
    }
    printf("gconv_probe: batch %d: %d of %d geometries built in every direction, dtype and "
           "layout; %d with a row cuDNN has no engine for; %d failed; %d skipped; %.0f s\n",
           batch, built, n, unsupported, failed, skipped, now_s() - t0);
    pp_exec_destroy(&ex);
    pp_registry_free(reg);
    return failed ? 1 : 0;
}
