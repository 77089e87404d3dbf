/*
 * simulate.h - predicts the step time and bubble of a schedule from per-stage
 * costs, before anything runs.
 *
 * The schedule is lowered exactly as the executor lowers it (same lanes, same
 * slot count, same dependencies: see program.h), then timed by list
 * scheduling: each lane runs its items in issue order, an item starts when
 * its lane is free and the items it waits for have ended. Stages placed on
 * one device share its lane. Compute items take the stage's forward,
 * backward, input-backward (I) or weight-backward (W) cost, copies take the
 * boundary's copy cost on their own lanes, per-action overheads are not
 * modelled. The bubble is the devices' idle fraction.
 *
 * For S uniform stages on S devices (forward f, backward b, no copy cost)
 * both GPipe and 1F1B give step = (m + S - 1)(f + b) and bubble =
 * (S - 1)/(m + S - 1); docs/SCHEDULES.md has the closed forms of the others.
 *
 * Jobs of several processes: a boundary between two processes is a message,
 * costed by pp_sim_message_ms (pass it as that boundary's copy cost). With
 * replicas > 1, each stage's gradients are summed over the replicas by an
 * allreduce on a lane of the stage's own that starts when the stage's last
 * backward ends, so it overlaps the earlier stages' backward; the step ends
 * when the last sum does.
 *
 * The allreduce of B bytes over R replicas, with link bandwidths in bytes/ms
 * and latencies per message (pp_sim_costs.allreduce picks the algorithm):
 *
 *   flat ring (pp_sim_allreduce_ms), every replica in one ring over the
 *   slowest link it crosses (the node link when the replicas span several
 *   nodes, else the link within the node):
 *       ring(B, R, bw, lat) = 2(R-1)/R x B / bw + 2(R-1) x lat
 *
 *   hierarchical (pp_sim_allreduce_hier_ms), NCCL's pattern across nodes,
 *   for R = L x N replicas, L in each of N nodes: reduce-scatter within each
 *   node over the L local replicas (intra link), then each local replica
 *   sums its shard of B/L with its counterparts of the other N - 1 nodes by
 *   a ring over the node link (the L shards at once, each over its own
 *   process's share of the network), then all-gather within the node:
 *       hier(B, L, N) = 2(L-1)/L x B / bw_intra + 2(L-1) x lat_intra
 *                     + 2(N-1)/N x (B/L) / bw_inter + 2(N-1) x lat_inter
 *                     = ring(B, L, intra) + ring(B/L, N, inter)
 *   With N = 1 it is the flat ring within the node; with L = 1 the flat
 *   ring over the node link. It cuts the latency term from 2(R-1) messages
 *   over the slow link to 2(N-1), and the bytes each process sends there by
 *   L, at the price of the (fast) steps within the node.
 *
 *   automatic (the default): one node -> the flat ring within it; several
 *   nodes -> the cheaper of the two for each stage's bytes, as NCCL picks
 *   its algorithm by message size.
 */
#ifndef PP_SIMULATE_H
#define PP_SIMULATE_H

#include "runtime/core/status.h"
#include "streams/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How replicas sum their gradients (see the header). */
typedef enum pp_sim_allreduce_algo {
    PP_SIM_ALLREDUCE_AUTO = 0,  /* one node: flat; several: the cheaper per stage */
    PP_SIM_ALLREDUCE_FLAT,      /* one ring over every replica */
    PP_SIM_ALLREDUCE_HIER,      /* within the node, across nodes, within the node */
} pp_sim_allreduce_algo;

typedef struct pp_sim_costs {
    int stages;                 /* must equal the schedule's S */
    const double *forward_ms;   /* (S) forward of one micro-batch on each stage */
    const double *backward_ms;  /* (S) backward of one micro-batch (B: input and weights) */
    const double *input_ms;     /* (S) I, the backward for the input, or NULL: backward / 2 */
    const double *weight_ms;    /* (S) W, the backward for the weights, or NULL: backward / 2 */
    const double *step_ms;      /* (S) optimizer step per stage, or NULL for 0 */
    const double *copy_act_ms;  /* (S-1) activation copy per boundary, or NULL for 0 */
    const double *copy_grad_ms; /* (S-1) gradient copy per boundary, or NULL for 0 */
    int ref_mb_size;            /* > 0: costs are for micro-batches of this size and scale
                                   linearly with each micro-batch's size; 0: per micro-batch */
    int slots;                  /* buffers per boundary and direction, as the executor's
                                   (0 = the executor's default, 2) */
    int replicas;               /* data-parallel replicas; <= 1: no gradient sum */
    const double *grad_bytes;   /* (S) bytes of each stage's parameter gradients (replicas) */
    double link_gbps;           /* bandwidth between processes, GB/s (1e9 bytes/s), > 0
                                   (within a node, when replicas_per_node is set) */
    double link_latency_ms;     /* latency of one message between processes */
    int replicas_per_node;      /* replicas of a stage that share a node; 0 or >= replicas:
                                   all in one node (link_*); else it must divide replicas,
                                   and the nodes are joined by node_* */
    double node_gbps;           /* between nodes, per process, GB/s, > 0 (several nodes) */
    double node_latency_ms;     /* latency of one message between nodes, >= 0 */
    pp_sim_allreduce_algo allreduce; /* several nodes: which allreduce (AUTO: cheaper) */
} pp_sim_costs;

/* Milliseconds to send one message of bytes over a link: latency + bytes /
 * bandwidth. */
double pp_sim_message_ms(double bytes, double gbps, double latency_ms);

/* Milliseconds of a ring allreduce of bytes over r processes: 2(r-1)/r x
 * bytes / bandwidth, plus 2(r-1) messages' latency (reduce-scatter then
 * all-gather, r-1 rounds each). 0 for r <= 1. */
double pp_sim_allreduce_ms(double bytes, int r, double gbps, double latency_ms);

/* Milliseconds of a hierarchical allreduce of bytes over local x nodes
 * processes (local in each node): ring(bytes, local, intra) +
 * ring(bytes / local, nodes, inter), see the header. 0 for one process. */
double pp_sim_allreduce_hier_ms(double bytes, int local, int nodes, double intra_gbps,
                                double intra_latency_ms, double inter_gbps,
                                double inter_latency_ms);

/* Milliseconds of one stage's gradient sum of bytes over c's replicas, by
 * c->allreduce over c's links; *used (may be NULL) says which algorithm was
 * taken (FLAT or HIER). 0 without replicas. */
double pp_sim_stage_allreduce_ms(const pp_sim_costs *c, double bytes,
                                 pp_sim_allreduce_algo *used);

/* One predicted item, for predicted traces. */
typedef struct pp_sim_item {
    char name[48];              /* as the executor labels it: "F3 stage1", "copy act 3 s0->s1" */
    int lane;                   /* 0..S-1 stage compute, then copy lanes (program.h) */
    double start_ms, end_ms;
} pp_sim_item;

typedef struct pp_sim_result {
    double step_ms;             /* end of the last item */
    double bubble;              /* 1 - sum(busy_ms) / (D * step_ms) */
    int stages;
    int devices;                /* D, the schedule's */
    double *busy_ms;            /* (S) compute time per stage */
    double *device_busy_ms;     /* (D) compute time per device (its stages') */
    double allreduce_ms;        /* replicas: the sum of every stage's allreduce time (0 without) */
    int hier_stages;            /* replicas: stages whose sum took the hierarchical allreduce */
    int n_items;
    pp_sim_item *items;         /* (n_items) in issue order */
} pp_sim_result;

/* Validates the schedule and predicts one step. res is caller-owned; release
 * with pp_sim_result_free. */
pp_status pp_simulate(const pp_schedule *s, const pp_sim_costs *c, pp_sim_result *res,
                      pp_error *err);
void pp_sim_result_free(pp_sim_result *res);

#ifdef __cplusplus
}
#endif

#endif
