/*
 * pipeline_run.h - the embedding API in one include: pipeline-run's plans,
 * pipeline, streams, schedules, executor and optimizer inside a C program.
 *
 *     #include "pipeline/pipeline_run.h"
 *     cc app.c $(pkg-config --cflags --libs pipeline-run)
 *
 * This header declares nothing of its own beyond the version; it includes the
 * public headers and states, in one place, the rules they share. Each header
 * documents its functions; what follows is the map.
 *
 * ---- Two layers -------------------------------------------------------------
 *
 * High level: a plan made runnable (a ResNet or the delay model, from YAML).
 *   partitioner/plan.h   pp_plan_load, pp_plan_parse_string, pp_plan_free,
 *                        pp_plan_apply_device_map
 *   partitioner/emit.h   pp_plan_emit (a resolved plan back as YAML)
 *   pipeline/pipeline.h  pp_pipeline_resolve_plan (stages: auto), pp_pipeline_new,
 *                        pp_pipeline_step, pp_pipeline_report_get,
 *                        pp_pipeline_stage_report, pp_pipeline_save / _load
 *                        (safetensors checkpoints), pp_pipeline_write_trace,
 *                        pp_pipeline_free; pp_pipeline_plan_schedule (the plan's
 *                        schedule program), pp_pipeline_predict_plan
 *   pipeline/fit.h       pp_fit_predict (memory per stage before anything runs),
 *                        pp_fit_check (caps), the planner
 *
 * Low level: an application's own stages on the same scheduler.
 *   runtime/core/device.h   pp_registry (device contexts: "cpu:N", "cuda:N"),
 *                           device memory with accounting
 *   runtime/core/tensor.h   pp_tensor: dense tensors on a device (value type)
 *   runtime/core/exec.h     pp_exec: a device bound to one stream; ops run on it
 *   runtime/core/ops.h      forward/backward op pairs (conv, batch norm, relu,
 *                           pooling, linear, softmax cross-entropy, SGD and
 *                           AdamW updates, gradient norms)
 *   streams/stream.h        pp_stream, pp_event, stream-ordered copies
 *   streams/schedule.h      pp_schedule: schedules as programs (per device, actions
 *                           over stages and micro-batches: F, B, I, W, sends and
 *                           receives), built-ins (GPipe ... DualPipeV), torch's CSV
 *                           grammar read and written, validator, in-flight peaks
 *   streams/executor.h      pp_stage_ops (the callbacks a stage implements),
 *                           pp_executor (runs one step of a schedule),
 *                           pp_step_stats, Chrome traces
 *   streams/simulate.h      predicted step time and bubble from stage costs
 *   runtime/train/optimizer.h     pp_optimizer: one SGD or AdamW over the parameters
 *                           of every stage, on whatever devices they live
 *   runtime/train/clip.h          gradient clipping's norm and coefficient
 *   runtime/train/lr_schedule.h   learning-rate schedules (torch.optim.lr_scheduler values)
 *   runtime/io/checkpoint.h    safetensors read/write of named tensors
 *   runtime/io/data.h          IDX, CIFAR-10 and synthetic batch sources
 *   runtime/core/atomic_file.h a file written whole or not at all (pp_atomic_open,
 *                              pp_atomic_commit), as checkpoints are
 *
 * A custom-stage step is: pp_optimizer_zero_grad, pp_executor_run (forwards
 * and backwards of every micro-batch; parameter gradients accumulate in
 * micro-batch order 0..m-1), pp_optimizer_step. examples/toy_two_stage.c is a
 * complete program.
 *
 * ---- Status returns ------------------------------------------------------------
 *
 * Every fallible function returns a pp_status and fills a caller-owned
 * pp_error (code and a message; plain data, one per thread). pp_plan_load
 * fills a pp_diag instead (several "FILE:LINE:COL: message" problems). The
 * library never prints and never exits. PP_ERR_INPUT means bad input (plan,
 * data, checkpoint file); PP_ERR_INVALID means API misuse; errors raised
 * inside a step name the stage, device and micro-batch. PP_ERR_UNSYNCED: a
 * file written whole is in place but its folder could not be synced. Every
 * call that takes a pp_error also takes NULL (no message wanted) and returns
 * the same status as with one (pp_error_prefix aside: status.h).
 *
 * ---- Ownership, per handle --------------------------------------------------------
 *
 *   pp_plan        caller-owned from pp_plan_load; pp_plan_free. A pipeline
 *                  copies what it needs: the plan may be freed after
 *                  pp_pipeline_new.
 *   pp_pipeline    caller-owned; owns its devices, stages, streams, buffers,
 *                  data source and optimizer; pp_pipeline_free.
 *   pp_registry    caller-owned; owns every pp_device_ctx it hands out, which
 *                  stay valid until pp_registry_free. Free it last, after
 *                  every tensor, stream, executor and optimizer on its devices.
 *   pp_tensor      a value; owns its storage when made by pp_tensor_alloc /
 *                  _zeros (release with pp_tensor_free), borrows it when a
 *                  view (pp_tensor_view0, pp_tensor_reshape).
 *   pp_stream,     caller-owned; free only after the work using them has
 *   pp_event       completed (pp_stream_free waits for its own queue).
 *   pp_schedule    caller-owned plain data; pp_schedule_free.
 *   pp_executor    caller-owned; owns its streams, events and boundary
 *                  buffers; borrows the pp_stage_ops tables and user pointers
 *                  (they must outlive it); pp_executor_free.
 *   pp_step_stats  filled by pp_executor_run; pp_step_stats_free.
 *   pp_optimizer   caller-owned; borrows parameter and gradient tensors (they
 *                  must outlive it), owns the momentum buffers.
 *   pp_data        caller-owned; owns the loaded files; pp_data_close.
 *
 * ---- Threading ------------------------------------------------------------------------
 *
 * Handles are not locked: each pp_pipeline, pp_executor, pp_optimizer,
 * pp_registry, pp_data and pp_stream is driven by one host thread at a time
 * (different handles may be used from different threads; there is no global
 * mutable state, so two pipelines may run side by side). pp_registry_get is
 * for setup; allocation through a device context is thread-safe. pp_error and
 * pp_diag are per call. The library starts threads of its own: on the CPU
 * backend every stream has a worker thread.
 *
 * ---- Streams and stage callbacks ----------------------------------------------------
 *
 * Work on a stream runs in FIFO order; events order work across streams
 * (record, then wait). On the CPU backend a stage's callbacks run on its
 * stream's worker thread, later than the enqueue; on CUDA they run on the host
 * at enqueue time and must only enqueue asynchronous work on the pp_exec they
 * are given. In both cases a callback:
 *   - computes through its pp_exec (the ops of ops.h), or synchronously on the
 *     CPU backend;
 *   - treats the tensors it is handed as views valid for that call only, and
 *     copies (on its exec) what it keeps for backward;
 *   - never assumes another stage's work has run, and touches only its own
 *     stage's state: callbacks of one stage never run concurrently and run in
 *     schedule order, callbacks of different stages do run concurrently.
 * pp_executor_run returns only when the whole step has completed, so the host
 * may read stage state (losses, gradients) afterwards without further
 * synchronisation. Parameter gradients are accumulated (+=); zero them before
 * each step (pp_optimizer_zero_grad).
 */
#ifndef PP_PIPELINE_RUN_H
#define PP_PIPELINE_RUN_H

#include "runtime/version.h"

#include "runtime/core/atomic_file.h"
#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#include "streams/executor.h"
#include "streams/schedule.h"
#include "streams/simulate.h"
#include "streams/stream.h"
#include "streams/trace.h"

#include "runtime/io/checkpoint.h"
#include "runtime/comm/comm.h"
#include "runtime/io/data.h"
#include "runtime/io/bpe.h"
#include "runtime/train/clip.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/optimizer.h"

#include "partitioner/emit.h"
#include "partitioner/plan.h"
#include "pipeline/pipeline.h"
#include "pipeline/fit.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif
