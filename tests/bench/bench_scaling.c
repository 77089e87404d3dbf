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
 *   - Each stage's fp32 gradients are summed over its R replicas by an
 *     allreduce that starts when the stage's last backward ends and overlaps
 *     the earlier stages' backward. When the R replicas fit in one node
 *     (S R <= 8): a ring over NVLink. Else each node holds L = 8 / S
 *     replicas of the stage and N = R / L nodes take part, joined by the
 *     network at NET GB/s per GPU (400 Gb/s = 50 GB/s) and 10 us per
 *     message; two models, both printed (simulate.h has the formulas):
 *       flat: one ring of all R replicas over the network,
 *             2(R-1)/R x bytes / NET + 2(R-1) x 10 us;
 *       hier: NCCL's pattern across nodes: reduce-scatter over NVLink
 *             within the node, a ring of the node's shards (bytes / L)
 *             across the N nodes over the network, all-gather over NVLink:
 *             2(L-1)/L x bytes / NVLINK + 2(L-1) x 5 us
 *             + 2(N-1)/N x bytes / L / NET + 2(N-1) x 10 us.
 *     Tree algorithms (NCCL's other choice) are not modelled.
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

/* One prediction: the step of S stages x R replicas, the gradient sums by algo. */
typedef struct prediction {
    double step_ms, bubble, allreduce_ms;
} prediction;

static int predict(const world *w, int s, int r, pp_sim_allreduce_algo algo, prediction *out)
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
        .link_gbps = w->nvlink_gbps,
        .link_latency_ms = NVLINK_LATENCY_MS,
        .replicas_per_node = in_node ? 0 : GPUS_PER_NODE / s,
        .node_gbps = w->net_gbps,
        .node_latency_ms = NET_LATENCY_MS,
        .allreduce = algo,
    };
    pp_sim_result res;
    pp_status rc = pp_simulate(&sched, &c, &res, &err);
    pp_schedule_free(&sched);
    if (rc != PP_OK) {
        fprintf(stderr, "bench_scaling: simulate: %s\n", err.msg);
        return -1;
    }
    *out = (prediction){res.step_ms, res.bubble, res.allreduce_ms};
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
    printf("allreduce: flat = one ring of all replicas over the slowest link; hier = within "
           "the node over NVLink, across nodes over the network (the same within one node)\n\n");
    printf("%5s  %6s  %8s  %8s  | %-34s | %-34s\n", "", "", "", "", "flat ring (PREDICTED)",
           "hierarchical (PREDICTED)");
    printf("%5s  %6s  %8s  %8s  | %7s  %6s  %9s  %6s | %7s  %6s  %9s  %6s\n", "GPUs", "stages",
           "replicas", "batch", "step ms", "bubble", "allreduce", "eff.", "step ms", "bubble",
           "allreduce", "eff.");
    static const int gpus[] = {8, 64, 512};
    static const int split[] = {1, 2, 4, 8};
    for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
        for (size_t k = 0; k < sizeof split / sizeof split[0]; k++) {
            const int s = split[k], r = gpus[g] / s;
            prediction flat, hier;
            if (predict(&w, s, r, PP_SIM_ALLREDUCE_FLAT, &flat) != 0 ||
                predict(&w, s, r, PP_SIM_ALLREDUCE_HIER, &hier) != 0) {
                pp_catalogue_free(&cat);
                return 1;
            }
            const double batch = (double)PER_GPU * gpus[g];
            const double ideal = gpus[g] * w.one_gpu / 1000.0; /* images per ms */
            printf("%5d  %6d  %8d  %8.0f  | %7.1f  %5.1f%%  %6.2f ms  %5.1f%% | %7.1f  %5.1f%%  "
                   "%6.2f ms  %5.1f%%\n",
                   gpus[g], s, r, batch, flat.step_ms, 100.0 * flat.bubble, flat.allreduce_ms,
                   100.0 * batch / flat.step_ms / ideal, hier.step_ms, 100.0 * hier.bubble,
                   hier.allreduce_ms, 100.0 * batch / hier.step_ms / ideal);
        }
    }
    printf("\nallreduce: the sum over every stage of its gradient sum's time (per step)\n");
    pp_catalogue_free(&cat);
    return 0;
fail:
    fprintf(stderr, "bench_scaling: %s\n", err.msg);
    return 1;
}
