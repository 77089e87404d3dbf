/*
 * executor.h - runs one training step of a schedule over S stages.
 *
 * The executor knows no model: a stage is a device plus the callbacks of
 * pp_stage_ops and an opaque user pointer. Per stage it owns one compute
 * stream; per stage boundary it owns a copy stream for activations and one
 * for gradients, each on the receiving stage's device (on the CUDA side when
 * the other side is a CPU device, since only CUDA streams copy between host
 * and GPU), and `slots` buffers (default 2) per boundary, direction and side,
 * so the copy of micro-batch i+1 overlaps compute on i. A slot is reused only
 * after the events guarding it (copy done reading the sender's slot, consumer
 * done reading the receiver's slot) have completed.
 *
 * The schedule places stages on devices (schedule.h): the stages of one
 * schedule device compute on one stream, that of their lowest stage, in the
 * device list's order, and must be on one pp_device_ctx (and rank); between
 * two of them an activation or gradient is read where it was written, with
 * no copy. Stages on different schedule devices have streams of their own,
 * also when their contexts are the same.
 *
 * A step is enqueued whole, ahead of execution, with events between streams;
 * the host blocks only at the end. On the CPU backend callbacks run on the
 * stream worker threads; on CUDA they run on the host thread at enqueue time
 * and enqueue asynchronous work on ex. Either way a callback must do its work
 * through ex (or synchronously on CPU) and must not assume other stages' work
 * has run. Callbacks of different stages may run concurrently; callbacks of
 * one stage never do, and run in the stage's schedule order.
 */
#ifndef PP_EXECUTOR_H
#define PP_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/comm/comm.h"
#include "runtime/comm/nccl.h"
#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "streams/schedule.h"
#include "streams/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * What a stage provides. Tensors handed to callbacks are views into executor
 * buffers on the stage's device, valid only for the duration of the call in
 * stream order: a stage copies (on ex) what it keeps, e.g. the inputs its
 * backward needs. mb is the micro-batch index (0..m-1), mb_size its samples.
 * A callback's err is always an error to fill, never NULL (also when the run
 * was given none).
 */
typedef struct pp_stage_ops {
    /* Fills shape_only (dtype, ndim, shape; data NULL) with the stage's output
     * activation for a micro-batch of mb_size samples. Called on the host
     * before the step, once per distinct size. The next stage's input and the
     * gradients across the boundary have this shape. Required. */
    pp_status (*out_shape)(void *user, int mb_size, pp_tensor *shape_only, pp_error *err);
    /* out = f(in). in is NULL on stage 0 (the stage sources its own input,
     * e.g. micro-batch mb of its data). out is always provided, on the last
     * stage too (where the stage computes its loss from it). Required. */
    pp_status (*forward)(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                         pp_tensor *out, pp_error *err);
    /* grad_in = d loss / d in (overwritten), parameter gradients +=. The
     * schedule decides the micro-batch order of a stage's backwards (and of
     * its W passes); a stage whose sums must not depend on it keeps partial
     * gradients apart and adds them in micro-batch order (models/stage.h
     * does). grad_out is NULL on the last stage (the stage starts from its
     * loss); grad_in is NULL on stage 0. Required. */
    pp_status (*backward)(void *user, pp_exec *ex, int mb, int mb_size,
                          const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err);
    /* Optional (may be NULL; a schedule with I or W actions then fails to
     * run): the backward split in two for zero-bubble schedules.
     * backward_input (I) is backward without the parameter gradients: it
     * writes grad_in and keeps what backward_weight needs; backward_weight
     * (W) adds mb's parameter gradients, after mb's backward_input. Together
     * they give what backward gives. */
    pp_status (*backward_input)(void *user, pp_exec *ex, int mb, int mb_size,
                                const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err);
    pp_status (*backward_weight)(void *user, pp_exec *ex, int mb, int mb_size, pp_error *err);
    /* Optional (may be NULL): run by the STEP action after the stage's last
     * backward. A pipeline usually runs one optimizer over all stages itself
     * after pp_executor_run returns instead. */
    pp_status (*step)(void *user, pp_exec *ex, pp_error *err);
    /* optional: run once per step that has backward actions,
     * as soon as the stage's last backward of the step has completed, on a
     * stream of its own ("grads s1", on the stage's device), so that it
     * overlaps the backward still running on earlier stages: for work on
     * the step's finished parameter gradients, e.g. summing them over
     * data-parallel replicas (DDP's gradient buckets). On a CUDA device it
     * runs on the host at enqueue time, like every callback, and must
     * enqueue its work on ex. The stage's STEP action and the end of
     * pp_executor_run wait for it; its failure is the run's. NULL: no
     * gradient stream. */
    pp_status (*grads_ready)(void *user, pp_exec *ex, pp_error *err);

    /* optional, for runs through pp_executor_run_replayable
     * (graphs). capture_begin: a capture is about to run the callbacks of a
     * step (on CUDA they run on the host while the device work is captured,
     * not run). capture_abandon: that capture was refused or discarded; none
     * of its device work ran: undo what the callbacks changed on the host
     * since capture_begin (the executor then runs the step eagerly, calling
     * the callbacks again). Memory the callbacks allocated in stream order
     * inside the capture belonged to the discarded graph and never existed:
     * drop it without freeing it (pp_tensor_abandon), with its count.
     * replayed: a graph launch ran the step's device work
     * without calling forward and backward (CUDA); account for the host-side
     * effects of the step's forwards and backwards, as if they had run.
     * NULL: nothing to do. */
    void (*capture_begin)(void *user);
    void (*capture_abandon)(void *user);
    void (*replayed)(void *user, const pp_schedule *s);
} pp_stage_ops;

typedef struct pp_stage_desc {
    pp_device_ctx *dev;        /* where the stage computes */
    const pp_stage_ops *ops;   /* must outlive the executor */
    void *user;                /* passed to every callback */
} pp_stage_desc;

/* One lane of the trace: a stream of the executor. */
typedef struct pp_trace_lane {
    char name[32];             /* "stage1", "act s0->s1", "grad s1->s0" */
    char device[16];           /* "cpu:1" */
    pp_stream_kind kind;
} pp_trace_lane;

/* One timed item on a lane. */
typedef struct pp_trace_span {
    char name[PP_STREAM_LABEL_MAX]; /* "F3 stage1", "copy act 3 s0->s1", "STEP stage0" */
    int lane;
    int64_t start_ns, end_ns;  /* pp_stream_clock_ns */
    size_t bytes;              /* copies */
} pp_trace_span;

/* How a step ran. */
typedef enum pp_step_graph {
    PP_STEP_EAGER = 0,         /* every item enqueued from the host */
    PP_STEP_CAPTURED,          /* captured into a graph, then launched */
    PP_STEP_REPLAYED,          /* a launch of a graph captured by an earlier step */
} pp_step_graph;

/* Measurements of one step. Caller-owned; release with pp_step_stats_free. */
typedef struct pp_step_stats {
    int stages;
    int micro_batches;
    int slots;                 /* buffers per boundary and direction used */
    int64_t t0_ns;             /* host clock when the step started enqueuing */
    double step_ms;            /* wall time: first enqueue to last completion */
    int devices;               /* D, the schedule's devices */
    double *busy_ms;           /* (S) compute time per stage (F, B, I, W, STEP) */
    double *busy_frac;         /* (S) busy_ms / step_ms */
    double bubble;             /* 1 - sum(busy_ms) / (D * step_ms): idle of the devices */
    size_t copy_bytes;         /* all boundary copies */
    double copy_ms;            /* sum of copy durations */
    double grads_ms;           /* sum of grads_ready durations */
    int n_actions;             /* compute items and copies executed */
    int n_lanes;
    pp_trace_lane *lanes;      /* (n_lanes): stages 0..S-1, then act copies, grad copies,
                                * then one "grads sN" lane per stage with grads_ready */
    int n_spans;
    pp_trace_span *spans;      /* (n_spans) per lane, in execution order */
    pp_step_graph graph;       /* how the step ran (pp_executor_run_replayable) */
    int graph_launches;        /* graph launches of the step (0 or 1) */
} pp_step_stats;

typedef struct pp_executor pp_executor;

/* Creates streams for n stages (copied descriptors). slots: buffers per
 * boundary and direction, 0 for the default 2; the executor uses more when a
 * schedule needs them to make progress. */
pp_status pp_executor_new(const pp_stage_desc *stages, int n, int slots, pp_executor **out,
                          pp_error *err);
/* Frees streams, events and buffers. NULL is a no-op. */
void pp_executor_free(pp_executor *ex);

/* Spreads the stages over the processes of a job: stage s runs on rank
 * ranks[s] of comm (copied; n entries, the executor's stage count). Each
 * process runs the same schedule but only its own stages' actions: the
 * callbacks of other ranks' stages are never called (their out_shape still
 * is, for buffer sizes), and a boundary between two ranks is a message
 * (pp_comm_send on the sender's copy lane, pp_comm_recv on the receiver's,
 * in micro-batch order, one tag per boundary and direction) ordered by the
 * same events as an in-process copy. Both sides of such a boundary must be
 * CPU devices (host memory), unless pp_executor_set_link makes it an NCCL
 * link between CUDA devices (a run refuses it otherwise); PP_ERR_INVALID
 * when a rank is outside the job. A stage's device descriptor of another rank is only a
 * placeholder (no buffers are allocated for it). comm must outlive the
 * executor; call before the first run. NULL comm: every stage is local. */
pp_status pp_executor_set_ranks(pp_executor *ex, pp_comm *comm, const int *ranks, int n,
                                pp_error *err);

/* Makes boundary b (stages b and b+1, on different ranks after
 * pp_executor_set_ranks, this rank holding one of them on a CUDA device) a
 * device-to-device link: activations travel over act and gradients over
 * grad (NCCL communicators of the two ranks, see runtime/comm/nccl.h) with
 * ncclSend/ncclRecv on the boundary's copy streams, ordered by the same
 * events as any copy. Without a link such a boundary needs CPU devices on
 * both sides (host messages); a run refuses it otherwise. Both must outlive
 * the executor; call after pp_executor_set_ranks, before the first run. */
pp_status pp_executor_set_link(pp_executor *ex, int b, pp_nccl *act, pp_nccl *grad,
                               pp_error *err);

/* own: the last stage's forward writes its output where it chooses (its out
 * tensor then carries the output's shape with data NULL), so the executor
 * allocates no buffer for it; a language model's head, say, writing its
 * logits over their gradient's rows keeps no second tensor of vocabulary
 * size. Off by default; call before the first run (PP_ERR_INVALID after). */
pp_status pp_executor_set_own_output(pp_executor *ex, bool own, pp_error *err);

/* Runs one step of s (validated first; s->stages must equal n) and waits for
 * it. On success fills *stats if stats is non-NULL (pp_step_stats_free it).
 * On failure returns the first failing action's error, its message prefixed
 * "stage 1 (cpu:1) micro-batch 3: " (copies: "copy act 3 s0->s1 (cpu:1): "),
 * and the executor stays usable (err NULL: the status alone). With stages on
 * several ranks, every rank calls it with the same schedule; stats then hold
 * this rank's lanes only. */
pp_status pp_executor_run(pp_executor *ex, const pp_schedule *s, pp_step_stats *stats,
                          pp_error *err);

/* Graphs (graph.h) for pp_executor_run_replayable: on (the default for
 * executors whose streams are all CUDA) or off. */
void pp_executor_set_graphs(pp_executor *ex, bool on);
bool pp_executor_graphs(const pp_executor *ex);

/* Like pp_executor_run, for steps that repeat: the first run of a (tag,
 * micro-batch sizes) key runs eagerly (a warm-up: handles, algorithms,
 * workspaces and buffers settle), the second is captured into a graph and
 * launched, later ones launch that graph. At most four keys keep a graph
 * (e.g. an epoch's full and partial last batch, each from two host buffer
 * sets); a new key evicts the least recently used one. The
 * caller promises that runs of one key do the same device work on the same
 * buffers, only their contents changing, and that callbacks read per-step
 * values from buffers, not from arguments frozen at capture (tag tells
 * apart runs whose frozen values differ). Eager runs with graphs off, in a
 * job of several processes, or when a capture was refused: the executor then
 * keeps the refusal's message (pp_executor_graph_refusal) and captures no
 * more. Graphs are dropped when the boundary buffers are reallocated (and,
 * on CUDA, when a lane's workspace is), and captured anew on the key's next
 * run. stats->graph says how the step ran; its spans are those of an eager
 * step, one per action (CUDA: the actions' timing events are event-record
 * nodes of the graph, recorded again by every launch). */
pp_status pp_executor_run_replayable(pp_executor *ex, const pp_schedule *s, int tag,
                                     pp_step_stats *stats, pp_error *err);

/* Why the last capture was refused, or NULL if none was. */
const char *pp_executor_graph_refusal(const pp_executor *ex);

/* The compute stream of a stage, e.g. to run its optimizer after the step in
 * stream order. Owned by the executor. */
pp_stream *pp_executor_stage_stream(pp_executor *ex, int stage);

/* Releases the arrays of *st and zeroes it. Safe on a zeroed struct. */
void pp_step_stats_free(pp_step_stats *st);

/* Writes a Chrome trace-event JSON file (open in Perfetto or
 * chrome://tracing): one process per device, one thread per stream, one
 * complete ("X") event per span, times relative to steps[0].t0_ns. */
pp_status pp_trace_write_chrome(const char *path, const pp_step_stats *steps, int n_steps,
                                pp_error *err);

#ifdef __cplusplus
}
#endif

#endif
