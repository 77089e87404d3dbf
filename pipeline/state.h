/*
 * state.h - the pipeline object's state, shared by the files of pipeline/
 * (each declares its functions for the others in a header of its own:
 * pipeline_impl.h for pipeline.c, step.h, replicas.h, ...). Not installed;
 * nothing outside pipeline/ includes it.
 */
#ifndef PP_PIPELINE_STATE_H
#define PP_PIPELINE_STATE_H

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
#include "streams/simulate.h"

/* One plan stage: its model stage plus what the loss and input need. */
typedef struct pipe_stage {
    struct pp_pipeline *p;
    int index;
    pp_device_ctx *dev;
    pp_stage *model;
    pp_plan_recompute recompute; /* the plan's mode for this stage (pp_plan_stage_recompute) */
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
    double *fwd_ms, *bwd_ms, *busy; /* bwd_ms: a whole backward (B, or I + W) */
    double *in_ms, *wt_ms;       /* the split backward's parts (0 when the step had none) */
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
    /* dropout (model.dropout > 0): the step in the stage's device memory,
     * which its dropout ops read as they run (pp_unit_draw.step_at), copied
     * from host_step (page-locked, set by the step before the executor runs)
     * at each training forward: a replayed graph copies it again and so
     * draws its own step's masks. No data: no dropout. */
    pp_tensor step_at;           /* (1) I64 */
    int64_t *host_step;
} pipe_stage;

/* One way of running a batch of a given size: its micro-batches (the plan's
 * rule) and the schedule over them. */
typedef struct batch_run {
    int batch, m;
    int *sizes;                  /* (m) */
    int *offsets;                /* (m) first sample of each micro-batch */
    pp_schedule sched;
    int *first_bw;               /* (S) the micro-batch of each stage's first B or W in the
                                  * program: it starts the step's gradients (-1: none) */
} batch_run;

/* The plan's schedule program, made for any batch (schedules.c): the stages'
 * devices (pp_plan_devices), the built-in kind, or the program read from the
 * plan's file (for fewer micro-batches, its first ones). */
typedef struct pipe_sched {
    pp_plan_schedule plan_kind;
    pp_schedule_kind kind;       /* the built-in (not PP_PLAN_SCHEDULE_FILE) */
    int stages, devices;
    int stage_device[PP_PLAN_MAX_STAGES];
    bool has_file;
    pp_schedule file;            /* the program as read, for the training batch */
} pipe_sched;

/* What the stage callbacks work on during a pp_executor_run. */
typedef struct run_io {
    const batch_run *run;
    bool train;                  /* false: evaluation (batch norm running statistics) */
    int64_t step;                /* training: the step (dropout's draws, pp_unit_draw) */
    int64_t first_sample;        /* training: the global index in the step's mini-batch of
                                  * this replica's sample 0 */
    pp_tensor *images, *labels;  /* on stage 0's / the last device */
    pp_tensor *losses, *corrects, *dlogits; /* on the last device; dlogits (batch * targets,
                                  * classes) in the logits' dtype (pipe_logits_dtype): a token
                                  * model's last stage writes its logits there and the loss
                                  * turns them into their gradient in place */
    float divisor;               /* the loss is summed over a micro-batch and divided by it */
    /* Host side, in memory the devices copy without staging (page-locked on
     * CUDA): each micro-batch's images and labels are copied in by the stage
     * that uses them, in its stream order, and its loss and correct count
     * copied out after the loss, so a step needs no synchronous copy; the
     * host reads the losses once the executor has finished. */
    const float *host_images;    /* (batch, C, H, W), or (batch, T) int32 token ids in the
                                  * same 4-byte elements */
    const int32_t *host_labels;  /* (batch * targets) */
    /* a training step's images already on stage 0's device (upload.h): the
     * forwards read them there instead of copying host_images; NULL: copy */
    const pp_tensor *uploaded;   /* (>= batch, C, H, W) */
    float *host_losses;          /* (m) */
    int32_t *host_corrects;      /* (m) */
    pp_tensor *logits;           /* generation: row logits_row of the last micro-batch's
                                  * logits (1, classes) copied here before the loss, F32
                                  * (bf16 logits widened) (else NULL) */
    int logits_row;
    pp_tensor *corrects_k;       /* (m) I32 on the last device: top-5 counts (evaluation);
                                  * NULL: none */
    int32_t *host_corrects_k;    /* (m) */
} run_io;

struct pp_pipeline {
    char broken[256];            /* why a step or evaluation failed midway; "" while usable */
    char partial[256];           /* why the parameters are partly a file's (a load failed
                                  * after it began writing them); "" else: a load that
                                  * succeeds clears it (pipe_check_usable) */
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
    int m_batch;                 /* the whole batch's (every replica's m is at most it) */
    int *mb_sizes;               /* (m) */
    int *mb_offsets;             /* (m) first sample of each micro-batch */
    int classes;
    int targets;                 /* labels per sample: 1, or a token model's T (its loss is the
                                  * mean over every token of the global batch) */
    int in_c, in_h, in_w;        /* the data's sample: (C, H, W), or (1, 1, T) token ids */
    pp_dtype in_dtype;           /* the model's input: F32 images or I32 token ids */
    int n_stages;
    pipe_stage *stages;          /* (n_stages) */
    pp_stage_desc *descs;        /* (n_stages) for the executor */
    pp_schedule schedule;
    pp_executor *exec;
    pp_optimizer *opt;
    pp_param_ref *params;
    int n_params;
    pp_data *data;
    struct pipe_prefetch *prefetch; /* reads the next training batches during a step, into
                                     * host buffer sets of its own: (B, C, H, W) floats, or
                                     * (B, T) int32 token ids, and (B * targets) labels */
    struct pipe_upload *upload;  /* sends the next step's images to stage 0's device while a
                                  * step runs (upload.h); NULL on a rank without stage 0 and
                                  * for token ids */
    float *host_losses;          /* (m) loss of each micro-batch, read back after a step */
    int32_t *host_corrects;      /* (m) */
    pp_tensor images;            /* (B, C, H, W), or (B, T) I32, on stage 0's device */
    pp_tensor labels;            /* (B * targets) I32 on the last stage's device */
    pp_tensor losses;            /* (m) F32 on the last device: loss of each micro-batch */
    pp_tensor corrects;          /* (m) I32 on the last device */
    pp_tensor dlogits;           /* (B * targets, classes) on the last device */
    struct pipe_tied *tied;      /* tied parameters across stages (tied.c); NULL: none */
    int64_t steps_done;
    pp_plan_step_keys step_keys; /* what a step means, recorded in checkpoints */
    pp_plan_step_keys run_keys;  /* what else tells this run from another (recorded too) */
    int graphs_mode;             /* 0 n/a, 1 on, 2 off (pp_pipeline_report.graphs) */
    int graph_captures, graph_replays, graph_launches;
    int steps_run;               /* steps run by this object (for the report) */
    int steps_cap;
    double *step_ms;             /* (steps_run) whole step */
    bool drop_last;              /* plan data.drop_last: epochs of whole batches only */
    double *data_ms;             /* (steps_run) of it, the wait for the step's batch */
    char bad_first[512];         /* the first bad image skipped (report.c) */
    pp_data_tokenizing tokenizing; /* the training text's, for the report (report.c) */
    pp_data_tokenizing eval_tokenizing; /* the test text's, likewise */
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
    pipe_sched sched;            /* the plan's schedule, for any batch (schedules.c) */
    int *in_flight;              /* (n_stages) the training schedule's in-flight peaks */
    run_io io;                   /* the current run's buffers */
    batch_run full;              /* the training batch (views of mb_sizes, mb_offsets, schedule) */
    batch_run tail;              /* an epoch's partial last batch (built on first use) */
    int64_t data_size;           /* training samples N */
    int epochs;                  /* plan epochs (0: steps) */
    pp_lr_schedule lr;
    double cur_lr;

    /* the training recipe (recipe.c) */
    float label_smoothing;       /* loss.label_smoothing */
    double clip_max;             /* optimizer.clip_grad_norm; 0: no clipping */
    double *clip_sums;           /* (n_params) this rank's gradients' sums of squares */
    double grad_norm;            /* the last step's gradient norm; -1 without clipping */

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
    pp_tensor eval_corrects5;    /* (m) I32: top-5 counts */
    int32_t *host_eval_corrects5;
};

/* Whether stage s runs in this process. */
static inline bool stage_here(const struct pp_pipeline *p, int s)
{
    return p->stage_rank[s] == p->rank;
}

/* ---- shared helpers ------------------------------------------------------------- */

/* A plan error at mark ("FILE:LINE:COL: msg"; "FILE: msg" without a line). */
static inline pp_status pipe_plan_error(const pp_plan *plan, pp_mark mark, pp_error *err, pp_status code,
                            const char *msg)
{
    if (mark.line > 0)
        return pp_error_set(err, code, "%s:%d:%d: %s", plan->path, mark.line, mark.col, msg);
    return pp_error_set(err, code, "%s: %s", plan->path, msg);
}

#endif
