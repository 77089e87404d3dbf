/*
 * test_cuda_pipeline.c - ResNet-50 training steps on cuda:0, in 1, 2 and 4
 * stages sharing the GPU, against the same plan on the CPU backend.
 *
 * After two steps (SGD with momentum, so the momentum buffers hold the last
 * gradient plus the decayed previous one) every parameter, buffer and
 * momentum tensor of each CUDA run must match the CPU run within a norm-wise
 * relative error of 2e-2 per tensor: fp32 ResNet-50 gradients carry about
 * 1e-2 relative rounding noise between two correct implementations that sum
 * in different orders (cuDNN vs im2col+GEMM). The CUDA runs among themselves
 * (1, 2, 4 stages) share kernels and must agree far more closely (1e-4), and
 * every run's losses must agree with the CPU's within 1e-3 relative.
 * Exits 77 (skip) without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partitioner/plan.h"
#include "runtime/checkpoint.h"
#include "runtime/core/device.h"
#include "pipeline/pipeline.h"
#include "tests/check.h"

static const char *layouts[] = {
    "  - device: %s:0\n"
    "    layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool, fc]\n",
    "  - device: %s:0\n"
    "    layers: [conv1, bn1, relu, maxpool, layer1, layer2]\n"
    "  - device: %s:0\n"
    "    layers: [layer3, layer4, avgpool, fc]\n",
    "  - device: %s:0\n"
    "    layers: [conv1, bn1, relu, maxpool, layer1]\n"
    "  - device: %s:0\n"
    "    layers: [layer2, layer3.0]\n"
    "  - device: %s:0\n"
    "    layers: [layer3.1, layer3.2, layer3.3, layer3.4, layer3.5]\n"
    "  - device: %s:0\n"
    "    layers: [layer4, avgpool, fc]\n",
};

/* Runs 2 steps of ResNet-50 (cifar stem, 32x32, batch 8 in micro-batches of
 * 4) with the given layout on kind ("cpu" or "cuda"), saves to path, returns
 * the losses. */
static void run(int layout, const char *kind, const char *path, double losses[2])
{
    char stages[1024], text[4096];
    snprintf(stages, sizeof stages, layouts[layout], kind, kind, kind, kind);
    snprintf(text, sizeof text,
             "model: {name: resnet50, num_classes: 10, stem: cifar}\n"
             "batch: {size: 8, split_size: 4}\n"
             "schedule: 1f1b\n"
             "optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0001}\n"
             "data: {format: synthetic, image_size: [32, 32]}\n"
             "seed: 5\nsteps: 2\nstages:\n%s",
             stages);
    pp_plan *plan = NULL;
    pp_diag diag;
    pp_error err;
    char buf[4096];
    CHECK_MSG(pp_plan_parse_string("cuda.yaml", text, strlen(text), &plan, &diag) == PP_OK,
              "plan: %s", pp_diag_format(&diag, buf, sizeof buf));
    if (!plan) return;
    pp_pipeline *p = NULL;
    CHECK_OK(pp_pipeline_new(plan, NULL, &p, &err), &err);
    for (int i = 0; p && i < 2; i++) {
        pp_step_result r;
        CHECK_OK(pp_pipeline_step(p, &r, &err), &err);
        losses[i] = r.loss;
    }
    if (p) CHECK_OK(pp_pipeline_save(p, path, true, &err), &err);
    pp_pipeline_free(p);
    pp_plan_free(plan);
}

/* Largest per-tensor norm-wise relative difference of the F32 tensors of two
 * checkpoints with the same tensors; I64 tensors must be equal. */
static double compare(const char *a, const char *b, char *worst, size_t n)
{
    pp_checkpoint_info ia, ib;
    pp_error err;
    double max_rel = 0;
    CHECK_OK(pp_checkpoint_list(a, &ia, &err), &err);
    CHECK_OK(pp_checkpoint_list(b, &ib, &err), &err);
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    CHECK(fa && fb && ia.n == ib.n);
    for (size_t i = 0; fa && fb && i < ia.n && i < ib.n; i++) {
        const pp_checkpoint_entry *ea = &ia.entries[i], *eb = &ib.entries[i];
        CHECK(strcmp(ea->name, eb->name) == 0 && ea->end - ea->begin == eb->end - eb->begin);
        size_t bytes = (size_t)(ea->end - ea->begin);
        unsigned char *da = malloc(bytes + 1), *db = malloc(bytes + 1);
        fseek(fa, (long)(ia.data_offset + ea->begin), SEEK_SET);
        fseek(fb, (long)(ib.data_offset + eb->begin), SEEK_SET);
        CHECK(fread(da, 1, bytes, fa) == bytes && fread(db, 1, bytes, fb) == bytes);
        if (ea->dtype == PP_F32) {
            const float *x = (const float *)da, *y = (const float *)db;
            double num = 0, den = 0;
            for (size_t k = 0; k < bytes / 4; k++) {
                num += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
                den += (double)y[k] * y[k];
            }
            double rel = den > 0 ? sqrt(num / den) : sqrt(num);
            if (rel > max_rel) {
                max_rel = rel;
                snprintf(worst, n, "%s", ea->name);
            }
        } else {
            CHECK_MSG(memcmp(da, db, bytes) == 0, "%s differs", ea->name);
        }
        free(da);
        free(db);
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    pp_checkpoint_info_free(&ia);
    pp_checkpoint_info_free(&ib);
    return max_rel;
}

int main(void)
{
    if (pp_cuda_device_count() == 0) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77;
    }
    char dir[200];
    if (!check_mkdtemp(dir, sizeof dir, "pp-cuda-pipeline")) return 1;
    char cpu[256], gpu[3][256], worst[64] = "";
    double cpu_loss[2] = {0}, gpu_loss[3][2] = {{0}};
    snprintf(cpu, sizeof cpu, "%s/cpu.safetensors", dir);
    run(0, "cpu", cpu, cpu_loss);
    const int stages[3] = {1, 2, 4};
    for (int l = 0; l < 3; l++) {
        snprintf(gpu[l], sizeof gpu[l], "%s/cuda%d.safetensors", dir, stages[l]);
        run(l, "cuda", gpu[l], gpu_loss[l]);
        for (int i = 0; i < 2; i++)
            CHECK_MSG(fabs(gpu_loss[l][i] - cpu_loss[i]) <= 1e-3 * fabs(cpu_loss[i]),
                      "%d stages step %d: loss %.7f on cuda, %.7f on cpu", stages[l], i,
                      gpu_loss[l][i], cpu_loss[i]);
        double rel = compare(gpu[l], cpu, worst, sizeof worst);
        fprintf(stderr, "cuda %d stage%s vs cpu: losses %.6f %.6f (cpu %.6f %.6f), largest "
                        "relative difference %.2e (%s)\n",
                stages[l], stages[l] == 1 ? "" : "s", gpu_loss[l][0], gpu_loss[l][1],
                cpu_loss[0], cpu_loss[1], rel, worst);
        CHECK_MSG(rel <= 2e-2, "%d stages vs cpu: %.2e at %s", stages[l], rel, worst);
        if (l > 0) {
            rel = compare(gpu[l], gpu[0], worst, sizeof worst);
            fprintf(stderr, "cuda %d stages vs 1 stage: %.2e (%s)\n", stages[l], rel, worst);
            CHECK_MSG(rel <= 1e-4, "cuda %d stages vs 1: %.2e at %s", stages[l], rel, worst);
        }
    }
    unlink(cpu);
    for (int l = 0; l < 3; l++) unlink(gpu[l]);
    rmdir(dir);
    return check_summary("cuda_pipeline");
}
