/*
 * bench_scaling.c - predictions, not measurements: the step time and scaling
 * efficiency of ResNet-50 (224x224, bf16 activations, SGD) trained with S
 * pipeline stages x R data-parallel replicas on N = S R H100 GPUs, for N = 8
 * (one node), 64 and 512 (8 GPUs per node), from single-GPU figures and link
 * speeds, through the same simulator as `pipeline-run --simulate`.
 *
 * Model (every number below is an input; change it on the command line):
 *   - One H100 trains ResNet-50 at ONE_GPU images/s (default 3597: PyTorch
 *     eager bf16 channels_last, batch 128, measured on an H100; pipeline-run's
 *     bf16 CUDA figure replaces it once measured). A stage's forward and
 *     backward times are that rate split by the stage's share of the
 *     catalogue's FLOPs (backward twice forward), linear in micro-batch size.
 *   - Weak scaling: 128 images per GPU per step, so a replica of S stages
 *     takes 128 S images in micro-batches of 32 (m = 4 S), 1F1B.
 *   - A replica's stages sit in one node (S <= 8): activations and their
 *     gradients (bf16) move over NVLink, NVLINK GB/s and 5 us per message.
 *   - Each stage's fp32 gradients are summed over its R replicas by a ring
 *     allreduce (2 (R-1)/R bytes per GPU) that starts when the stage's last
 *     backward ends and overlaps the earlier stages' backward; over NVLink
 *     when the R replicas fit in one node (S R <= 8), else over the node's
 *     network at NET GB/s per GPU (400 Gb/s = 50 GB/s) and 10 us per message.
 *     A flat ring over the slowest link: NCCL's hierarchical and tree
 *     algorithms do better at 512 GPUs, so these are pessimistic there.
 *   - The optimizer step (SGD with momentum) reads and writes 5 fp32 words
 *     per parameter at HBM_GBPS (3350 GB/s).
 *
 * Efficiency = predicted images/s / (N x ONE_GPU).
 *
 * usage: bench_scaling [ONE_GPU [NVLINK_GBPS [NET_GBPS]]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/catalogue.h"
#include "partitioner/balance.h"
#include "streams/schedule.h"
#include "streams/simulate.h"

enum { PER_GPU = 128, MB = 32, GPUS_PER_NODE = 8, MAX_S = 8 };

static const double HBM_GBPS = 3350.0;
static const double NVLINK_LATENCY_MS = 0.005, NET_LATENCY_MS = 0.010;

typedef struct world {
    double one_gpu;       /* images/s of one GPU */
    double nvlink_gbps, net_gbps;
    const pp_catalogue *cat;
    double total_flops;   /* per image, forward */
} world;

/* Stage costs of S balanced stages (by FLOPs) for micro-batches of MB. */
typedef struct stages {
    int s;
    double f[MAX_S], b[MAX_S], opt[MAX_S], copy[MAX_S], grad_bytes[MAX_S];
} stages;

static int cut(const world *w, int s, stages *out, pp_error *err)
{
    const pp_catalogue *cat = w->cat;
    double *cost = malloc((size_t)cat->n * sizeof *cost);
    for (int u = 0; u < cat->n; u++) cost[u] = (double)cat->units[u].fwd_flops;
    pp_balance_problem pb = {.n_units = cat->n, .cost = cost, .n_stages = s};
    int first[MAX_S];
    double max_cost;
    pp_status st = pp_balance_partition(&pb, first, &max_cost, err);
    free(cost);
    if (st != PP_OK) return -1;
    /* one image's forward + backward takes 1 / one_gpu s; forward a third */
    const double ms_per_flop = 1000.0 / w->one_gpu / w->total_flops;
    out->s = s;
    for (int i = 0; i < s; i++) {
        const int u0 = first[i], u1 = i + 1 < s ? first[i + 1] - 1 : cat->n - 1;
        double flops = 0, params = 0;
        for (int u = u0; u <= u1; u++) {
            flops += (double)cat->units[u].fwd_flops;
            params += (double)cat->units[u].param_count;
        }
        out->f[i] = flops * MB * ms_per_flop / 3.0;
        out->b[i] = 2.0 * out->f[i];
        out->grad_bytes[i] = 4.0 * params;
        out->opt[i] = 5.0 * 4.0 * params / (HBM_GBPS * 1e6);
        out->copy[i] = i + 1 < s ? pp_sim_message_ms((double)cat->units[u1].out_bytes * MB,
                                                     w->nvlink_gbps, NVLINK_LATENCY_MS)
                                 : 0.0;
    }
    return 0;
}

static int predict(const world *w, int s, int r, double *step_ms, double *bubble,
                   double *allreduce_ms)
{
    pp_error err;
    stages st;
    if (cut(w, s, &st, &err) != 0) {
        fprintf(stderr, "bench_scaling: %d stages: %s\n", s, err.msg);
        return -1;
    }
    const int m = PER_GPU * s / MB;
    int sizes[PER_GPU * MAX_S / MB];
    for (int i = 0; i < m; i++) sizes[i] = MB;
    pp_schedule sched;
    if (pp_schedule_build(&sched, PP_SCHEDULE_1F1B, s, m, sizes, &err) != PP_OK) {
        fprintf(stderr, "bench_scaling: schedule: %s\n", err.msg);
        return -1;
    }
    const bool in_node = s * r <= GPUS_PER_NODE;
    pp_sim_costs c = {
        .stages = s,
        .forward_ms = st.f,
        .backward_ms = st.b,
        .step_ms = st.opt,
        .copy_act_ms = s > 1 ? st.copy : NULL,
        .copy_grad_ms = s > 1 ? st.copy : NULL,
        .ref_mb_size = MB,
        .replicas = r,
        .grad_bytes = st.grad_bytes,
        .link_gbps = in_node ? w->nvlink_gbps : w->net_gbps,
        .link_latency_ms = in_node ? NVLINK_LATENCY_MS : NET_LATENCY_MS,
    };
    pp_sim_result res;
    pp_status rc = pp_simulate(&sched, &c, &res, &err);
    pp_schedule_free(&sched);
    if (rc != PP_OK) {
        fprintf(stderr, "bench_scaling: simulate: %s\n", err.msg);
        return -1;
    }
    *step_ms = res.step_ms;
    *bubble = res.bubble;
    *allreduce_ms = res.allreduce_ms;
    pp_sim_result_free(&res);
    return 0;
}

int main(int argc, char **argv)
{
    world w = {.one_gpu = 3597.0, .nvlink_gbps = 450.0, .net_gbps = 50.0};
    if (argc > 1) w.one_gpu = atof(argv[1]);
    if (argc > 2) w.nvlink_gbps = atof(argv[2]);
    if (argc > 3) w.net_gbps = atof(argv[3]);
    if (!(w.one_gpu > 0 && w.nvlink_gbps > 0 && w.net_gbps > 0)) {
        fprintf(stderr, "usage: bench_scaling [ONE_GPU_IMAGES_S [NVLINK_GBPS [NET_GBPS]]]\n");
        return 2;
    }
    pp_model_config cfg;
    pp_catalogue cat;
    pp_error err;
    if (pp_model_config_default("resnet50", &cfg, &err) != PP_OK) goto fail;
    cfg.bf16 = true;
    if (pp_catalogue_build(&cfg, &cat, &err) != PP_OK) goto fail;
    w.cat = &cat;
    for (int u = 0; u < cat.n; u++) w.total_flops += (double)cat.units[u].fwd_flops;

    printf("PREDICTIONS (simulator, not measured): ResNet-50 224x224 bf16, %d images per GPU, "
           "micro-batches of %d, 1F1B\n",
           PER_GPU, MB);
    printf("one H100: %.0f images/s; NVLink %.0f GB/s; network %.0f GB/s per GPU; "
           "%d GPUs per node\n\n",
           w.one_gpu, w.nvlink_gbps, w.net_gbps, GPUS_PER_NODE);
    printf("%5s  %6s  %8s  %8s  %8s  %9s  %11s  %10s\n", "GPUs", "stages", "replicas",
           "batch", "step ms", "bubble %", "allreduce ms", "efficiency");
    static const int gpus[] = {8, 64, 512};
    static const int split[] = {1, 2, 4, 8};
    for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
        for (size_t k = 0; k < sizeof split / sizeof split[0]; k++) {
            const int s = split[k], r = gpus[g] / s;
            double step_ms, bubble, ar;
            if (predict(&w, s, r, &step_ms, &bubble, &ar) != 0) {
                pp_catalogue_free(&cat);
                return 1;
            }
            const double batch = (double)PER_GPU * gpus[g];
            const double images_s = batch * 1000.0 / step_ms;
            printf("%5d  %6d  %8d  %8.0f  %8.1f  %9.1f  %11.2f  %9.1f%%\n", gpus[g], s, r, batch,
                   step_ms, 100.0 * bubble, ar, 100.0 * images_s / (gpus[g] * w.one_gpu));
        }
    }
    pp_catalogue_free(&cat);
    return 0;
fail:
    fprintf(stderr, "bench_scaling: %s\n", err.msg);
    return 1;
}
