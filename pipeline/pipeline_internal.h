/*
 * pipeline_internal.h - the pipeline object's state, shared by the files of
 * pipeline/ (pipeline.c: building and stepping; replicas.c: data-parallel
 * replicas). Not installed; nothing outside pipeline/ includes it.
 */
#ifndef PP_PIPELINE_INTERNAL_H
#define PP_PIPELINE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/stage.h"
#include "pipeline/pipeline.h"
#include "runtime/comm/nccl.h"
#include "runtime/io/data.h"
#include "runtime/train/optimizer.h"
#include "streams/executor.h"
#include "streams/schedule.h"

/* One plan stage: its model stage plus what the loss and input need. */
typedef struct pipe_stage {
    struct pp_pipeline *p;
    int index;
    pp_device_ctx *dev;
    pp_stage *model;
    int max_in_flight;
    pp_tensor **grads;           /* (n_grads) the stage's parameter gradients (this rank's) */
    int n_grads;
    /* replicas, one bucket per stage: the ranks holding this stage in every
     * replica, and the stage's gradients in one host buffer summed over them */
    pp_comm_group *group;        /* NULL: no replicas, or the stage runs elsewhere */
    float *bucket;               /* (bucket_n) */
    size_t bucket_n;
    bool bucket_in_lane;         /* summed by the executor's grads_ready, during backward */
    pp_nccl *nccl;               /* CUDA stages: the group's NCCL communicator, which sums
                                  * the gradients in place on the stage's gradient lane;
                                  * NULL: the host path through bucket */
    size_t peak_bytes;           /* another rank's stage: its device's peak, as last reported */
    char device_name[16];        /* the plan's device (another rank's stage runs elsewhere) */
    int n_layers;                /* items of the plan's compact spelling */
    char (*layer_names)[32];     /* (n_layers) "layer1", "layer2.0" */
    const char **layers;         /* (n_layers) pointers into layer_names */
    /* per-step timings, one entry per step run */
    double *fwd_ms, *bwd_ms, *busy;
    double *grads_ms;            /* replicas: the sum of the stage's gradients over them
                                  * (its grads_ready lane's span, or the wall time of the
                                  * sum after the run); 0 without replicas */
    double grads_after_ms;       /* this step's sum after the run (replicas.c), else 0 */
    /* this step's copies sent by the stage (step.c): activations over boundary
     * index, gradients over index-1; on its home rank, shared with every rank */
    double act_ms, act_bytes, act_n, grad_ms, grad_bytes, grad_n;
    pp_event *opt_done;          /* recorded on this stage's compute stream after the
                                  * optimizer's work for its device went there (step.c) */
    /* graphs: the batch norms' pending counts when a capture began (to undo
     * the capture's forwards if it is refused) */
    int64_t *counts;             /* (n_counts) */
    int n_counts;
} pipe_stage;

/* One way of running a batch of a given size: its micro-batches (the plan's
 * rule) and the schedule over them. */
typedef struct batch_run {
    int batch, m;
    int *sizes;                  /* (m) */
    int *offsets;                /* (m) first sample of each micro-batch */
    pp_schedule sched;
} batch_run;

/* What the stage callbacks work on during a pp_executor_run. */
typedef struct run_io {
    const batch_run *run;
    bool train;                  /* false: evaluation (batch norm running statistics) */
    pp_tensor *images, *labels;  /* on stage 0's / the last device */
    pp_tensor *losses, *corrects, *dlogits; /* on the last device */
    float divisor;               /* the loss is summed over a micro-batch and divided by it */
    /* Host side, in memory the devices copy without staging (page-locked on
     * CUDA): each micro-batch's images and labels are copied in by the stage
     * that uses them, in its stream order, and its loss and correct count
     * copied out after the loss, so a step needs no synchronous copy; the
     * host reads the losses once the executor has finished. */
    const float *host_images;    /* (batch, C, H, W) */
    const int32_t *host_labels;  /* (batch) */
    float *host_losses;          /* (m) */
    int32_t *host_corrects;      /* (m) */
} run_io;

struct pp_pipeline {
    char broken[256];            /* why a step or evaluation failed midway; "" while usable */
    bool opt_pending;            /* the last step's optimizer may still run on the stages'
                                  * streams (CUDA): pipe_settle before the host reads or
                                  * writes parameters */
    struct pipe_local *local;    /* replicas in this process (inprocess.c): the caller's
                                  * pipeline is rank 0's and holds the others; NULL else */
    pp_comm *comm;               /* the job (NULL: one process) */
    int rank;                    /* this process's rank in it (0 without one) */
    int *stage_rank;             /* (n_stages) the rank that runs each stage of this replica */
    int *home_rank;              /* (n_stages) ... of the replica rank 0 belongs to: it
                                  * speaks for all (figures, checkpoints) */
    int replicas, replica;       /* replicas of the plan; the one this process belongs to */
    bool in_process;             /* the replicas share one process: its ranks are threads
                                  * (inprocess.c), and reports say one process */
    int rep_batch;               /* this replica's piece of a full batch */
    int *rep_rank;               /* (replicas x n_stages) rank of stage s in replica r at
                                  * [r * n_stages + s] */
    bool grads_whole;            /* replicas sum every gradient in grad_buf after the run
                                  * (pp_pipeline_options.grad_allreduce_whole) */
    pp_comm_group **link_groups; /* (n_links) links.c: the two ranks of a boundary */
    pp_nccl **link_nccl;         /* (n_links) their NCCL communicators */
    int n_links;
    float *grad_buf;             /* (grad_n) every stage's gradients, summed over replicas */
    size_t grad_n;
    pp_registry *reg;
    pp_model_config model;
    int batch;
    int m;                       /* micro-batches */
    int *mb_sizes;               /* (m) */
    int *mb_offsets;             /* (m) first sample of each micro-batch */
    int classes;
    int in_c, in_h, in_w;
    int n_stages;
    pipe_stage *stages;          /* (n_stages) */
    pp_stage_desc *descs;        /* (n_stages) for the executor */
    pp_schedule schedule;
    pp_executor *exec;
    pp_optimizer *opt;
    pp_param_ref *params;
    int n_params;
    pp_data *data;
    float *host_images;          /* (B, C, H, W) */
    int32_t *host_labels;        /* (B) */
    float *host_images_b;        /* the second set, which the next batch is read into */
    int32_t *host_labels_b;
    struct pipe_prefetch *prefetch; /* reads the next training batch during a step */
    float *host_losses;          /* (m) loss of each micro-batch, read back after a step */
    int32_t *host_corrects;      /* (m) */
    pp_tensor images;            /* (B, C, H, W) on stage 0's device */
    pp_tensor labels;            /* (B) I32 on the last stage's device */
    pp_tensor losses;            /* (m) F32 on the last device: loss of each micro-batch */
    pp_tensor corrects;          /* (m) I32 on the last device */
    pp_tensor dlogits;           /* (B, classes) on the last device */
    int64_t steps_done;
    int graphs_mode;             /* 0 n/a, 1 on, 2 off (pp_pipeline_report.graphs) */
    int graph_captures, graph_replays, graph_launches;
    int steps_run;               /* steps run by this object (for the report) */
    int steps_cap;
    double *step_ms;             /* (steps_run) whole step */
    double *bubble;              /* (steps_run) */
    double *copy_ms;             /* (steps_run) every copy between stages, the sender's side
                                  * (a message's send; its receive waits for the sender) */
    double *copy_bytes;          /* (steps_run) bytes of those copies */
    double *bnd_ms;              /* (steps_run x (n_stages-1)) mean time of one copy of
                                  * boundary b (either direction, the sender's side), at
                                  * [k * (n_stages-1) + b] */
    double *bnd_bytes;           /* (steps_run x (n_stages-1)) mean bytes of one copy of b */
    double *link_gbps;           /* (n_stages-1) boundaries of rank 0's replica between two
                                  * ranks, as host messages: measured at start (link_cost.c);
                                  * 0 within a process and for NCCL links */
    double *link_latency_ms;     /* (n_stages-1) likewise */
    double *rep_step_ms;         /* (steps_run x replicas) each replica's step, at [k * R + r] */
    double *rep_run_ms;          /* (steps_run x replicas) each replica's executor run */
    bool keep_trace;
    int slots;
    pp_pipeline_layout layout;   /* pp_pipeline_options.layout */
    int profile_step;            /* PP_PROFILE_STEP, or -1 (profile_range) */
    pp_step_stats *trace;        /* kept steps (keep_trace) */
    int n_trace;
    /* the job's time base for traces (clocks.c; all 0 in one process) */
    int64_t clock_offset_ns;     /* rank 0's clock minus this rank's */
    int64_t clock_uncertainty_ns; /* half the best round trip of the estimate */
    int64_t clock_origin_ns;     /* time zero of the job's trace files, on rank 0's clock */

    /* split rule of the plan, for batches of other sizes */
    int split_size, micro_batches; /* one of them > 0 */
    pp_schedule_kind kind;
    run_io io;                   /* the current run's buffers */
    batch_run full;              /* the training batch (views of mb_sizes, mb_offsets, schedule) */
    batch_run tail;              /* an epoch's partial last batch (built on first use) */
    int64_t data_size;           /* training samples N */
    int epochs;                  /* plan epochs (0: steps) */
    pp_lr_schedule lr;
    double cur_lr;

    /* evaluation (plan eval section) */
    pp_data *eval_data;
    int eval_batch;
    int64_t eval_size;
    batch_run eval_full, eval_tail;
    float *host_eval_images;
    int32_t *host_eval_labels;
    float *host_eval_losses;
    int32_t *host_eval_corrects;
    pp_tensor eval_images, eval_labels, eval_losses, eval_corrects, eval_dlogits;
};

/* Whether stage s runs in this process. */
static inline bool stage_here(const struct pp_pipeline *p, int s)
{
    return p->stage_rank[s] == p->rank;
}

/* ---- shared helpers ------------------------------------------------------------- */

/* The plan's schedule as the runtime's. */
static inline pp_schedule_kind pipe_schedule_kind(pp_plan_schedule s)
{
    return s == PP_PLAN_SCHEDULE_1F1B ? PP_SCHEDULE_1F1B : PP_SCHEDULE_GPIPE;
}

/* A plan error at mark ("FILE:LINE:COL: msg"; "FILE: msg" without a line). */
static inline pp_status pipe_plan_error(const pp_plan *plan, pp_mark mark, pp_error *err, pp_status code,
                            const char *msg)
{
    if (mark.line > 0)
        return pp_error_set(err, code, "%s:%d:%d: %s", plan->path, mark.line, mark.col, msg);
    return pp_error_set(err, code, "%s: %s", plan->path, msg);
}

/* Simulates sched with per-stage costs of one micro-batch of ref_mb samples
 * (planning.c). */
pp_status pipe_simulate(const pp_schedule *sched, int n, const double *f, const double *b,
                        const double *copy, int ref_mb, int slots, double *step_ms,
                        double *bubble, pp_error *err);

/* PP_ERR_INPUT at the plan's batch section when a micro-batch's tensors exceed
 * what a cuDNN descriptor indexes (planning.c). */
pp_status pipe_check_cudnn_limits(const pp_plan *plan, pp_error *err);

/* ---- the next batch, read while a step runs (prefetch.c) ------------------- */

typedef struct pipe_prefetch pipe_prefetch;

/* A prefetcher over data filling the two host buffer sets images[i],
 * labels[i] (borrowed; each holds a whole batch), reading on PP_READ_THREADS
 * threads (PP_ERR_INPUT when that variable is not valid). */
pp_status pipe_prefetch_new(pp_data *data, float *const images[2], int32_t *const labels[2],
                            pipe_prefetch **out, pp_error *err);
/* Waits for a pending read, stops the worker. NULL is a no-op. */
void pipe_prefetch_free(pipe_prefetch *pf);
/* The batch of count samples at pos in one of the sets (*slot: 0 or 1,
 * alternating from call to call): the prefetched one when it is exactly
 * that batch, else read now. Then starts reading (next_pos, next_count) into
 * the other set on the worker (next_count <= 0: nothing). */
pp_status pipe_prefetch_get(pipe_prefetch *pf, int64_t pos, int count, int64_t next_pos,
                            int next_count, float **images, int32_t **labels, int *slot,
                            pp_error *err);
/* pp_data_read of any source (the test set) on the prefetcher's read
 * threads; waits for a prefetch in progress to finish first. */
pp_status pipe_prefetch_read(pipe_prefetch *pf, pp_data *src, int64_t pos, int count,
                             float *images, int32_t *labels, pp_error *err);

/* ---- replicas (replicas.c) ------------------------------------------------ */

/* The replica whose stages include one on this rank; -1 when none does. */
int pipe_replica_of(const pp_plan *plan, int rank);

/* The schedule and micro-batches of a batch of another size (pipeline.c):
 * an epoch's partial last batch, evaluation batches. */
pp_status pipe_batch_run_make(const struct pp_pipeline *p, batch_run *r, int batch,
                              pp_schedule_kind kind, pp_error *err);

/* Waits for the last step's optimizer on the stages' streams, if it may
 * still run (step.c): before the host reads or writes parameters. */
pp_status pipe_settle(struct pp_pipeline *p, pp_error *err);

/* A kept step's lanes named with their rank in a job (report.c). */
void pipe_name_rank_lanes(const pp_pipeline *p, pp_step_stats *st);

/* One rank's pipeline (pipeline.c, step.c, checkpoints.c, report.c): what
 * the public calls of the same names do for a job of processes; inprocess.c
 * runs them on every rank of a job of threads when replicas share this
 * process. */
pp_status pipe_new_rank(const pp_plan *plan, const pp_pipeline_options *opts, pp_pipeline **out,
                        pp_error *err);
void pipe_free_rank(pp_pipeline *p);
pp_status pipe_step_rank(pp_pipeline *p, pp_step_result *res, pp_error *err);
pp_status pipe_evaluate_rank(pp_pipeline *p, pp_eval_result *out, pp_error *err);
pp_status pipe_save_rank(pp_pipeline *p, const char *path, bool with_optimizer, pp_error *err);
pp_status pipe_load_rank(pp_pipeline *p, const char *path, pp_error *err);
pp_status pipe_write_trace_rank(const pp_pipeline *p, const char *path, pp_error *err);

/* Rank of stage s in replica r. */
int pipe_rank_in(const pp_plan *plan, int s, int r);

/* Piece r of a batch of `count` samples cut over the replicas (the
 * micro-batch rule by count): its first sample and size. */
void pipe_replica_piece(int count, int replicas, int r, int *off, int *size);

/* What summing gradients over replicas needs; nothing without replicas.
 * Buckets (the default): a group per stage (collective: every rank calls it
 * in the same order) and a host buffer per stage of this rank, summed from
 * the stage's grads_ready (bucket_in_lane: CPU stages, MPI threads allowed)
 * or after the run; p->grads_whole: the one buffer of every gradient.
 * PP_ERR_UNSUPPORTED for gradients not in fp32. Before pp_executor_new. */
pp_status pipe_replicas_init(struct pp_pipeline *p, pp_error *err);
void pipe_replicas_free(struct pp_pipeline *p);

/* Sums stage st's gradients over its replicas; every replica gets the same
 * bits. Host path: through its bucket, in replica order. NCCL: enqueued on
 * ex (the stage's gradient lane, after its backward). */
pp_status pipe_sum_bucket(pipe_stage *st, pp_exec *ex, pp_error *err);

/* After a fault: stops the stages' NCCL communicators (their peers may never
 * join the pending sums). */
void pipe_replicas_abort(struct pp_pipeline *p);

/* Gives every replica the batch-norm statistics of rank 0's replica (before
 * an evaluation and a checkpoint); every rank calls it. */
pp_status pipe_sync_replica_state(struct pp_pipeline *p, pp_error *err);

/* After this replica's run: sums the gradients not yet summed over the
 * replicas (all of them with grads_whole; else the buckets summed outside
 * the executor). Every replica gets the same bits. Every rank calls it.
 * Sets each stage's grads_after_ms (the time of its sum here, else 0). */
pp_status pipe_sum_replica_grads(struct pp_pipeline *p, pp_error *err);

/* ---- the job's clocks (clocks.c) ------------------------------------------- */

/* In a job of several processes: estimates this rank's clock offset to
 * rank 0's and the job's trace origin (collective: every rank calls it once,
 * after the comm exists). Nothing in one process. */
pp_status pipe_clocks_sync(struct pp_pipeline *p, pp_error *err);

/* ---- what a message between ranks costs (link_cost.c) ---------------------- */

/* Measures the bandwidth and latency of every boundary of rank 0's replica
 * between two ranks (host messages) into p->link_gbps and
 * p->link_latency_ms (allocated here, zeros elsewhere). Collective: every
 * rank calls it once, after pipe_links_init. */
pp_status pipe_link_cost_measure(struct pp_pipeline *p, const pp_plan *plan, pp_error *err);

/* ---- links between ranks (links.c) ---------------------------------------- */

/* The plan's device of stage s in replica r. */
pp_device_id pipe_plan_device(const pp_plan *plan, int s, int r);

/* Whether boundary b of replica r joins CUDA stages of two ranks, which an
 * NCCL link carries (in a build with NCCL). */
bool pipe_cuda_link(const pp_plan *plan, int b, int r);

/* Makes the links of every such boundary (collective over the job: every
 * rank calls it) and hands this rank's to the executor. After
 * pp_executor_set_ranks. */
pp_status pipe_links_init(struct pp_pipeline *p, const pp_plan *plan, pp_error *err);

/* Frees the links; abort: stops their pending transfers (after a fault),
 * and pipe_links_free(p, false) still frees the rest later. */
void pipe_links_free(struct pp_pipeline *p, bool abort);

#endif
