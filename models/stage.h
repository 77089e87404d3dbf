/*
 * stage.h - a model stage: a contiguous range [first, last] of a model's units
 * placed on one device, run as one piece by the pipeline.
 *
 * Forward runs the units in order, backward in reverse, for one micro-batch
 * index mb at a time; several micro-batches may be in flight (see unit.h).
 * Intermediate activations between units live during the call, and after it
 * only while a unit keeps them for its backward (a unit keeping its input and
 * the one before keeping its output share one tensor, unit.h); what units keep
 * is allocated on the stage's device and freed by that micro-batch's backward
 * or pp_stage_release.
 * The loss is not part of a stage: the pipeline puts softmax cross-entropy
 * after the last stage.
 *
 * Ownership and threading: a stage owns its units. It is not thread-safe: use
 * it from one thread (its stream's worker) at a time. Ops run on the exec the
 * caller passes, which must be on the stage's device.
 */
#ifndef PP_MODELS_STAGE_H
#define PP_MODELS_STAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "models/catalogue.h"
#include "models/unit.h"
#include "runtime/core/exec.h"
#include "runtime/core/tensor.h"

typedef struct pp_stage pp_stage;

/* Builds units first..last (indices into the model's unit order, the same as
 * pp_catalogue_build's) of a ResNet config on dev, initialised from seed (the
 * values do not depend on the split). The stage's input is the model input
 * (N, in_channels, image_h, image_w) propagated through units 0..first-1.
 * PP_ERR_INPUT for a bad range, a non-ResNet config or too small an image. */
pp_status pp_stage_new(const pp_model_config *cfg, uint64_t seed, int first, int last,
                       pp_device_ctx *dev, pp_stage **out, pp_error *err);

/* Builds a stage from explicit unit specs (n >= 1, in order) taking inputs of
 * per-sample shape sample_shape (sample_shape[0] == 1, in_ndim dims). For
 * embedding applications, the delay model and tests (e.g. narrow blocks). */
pp_status pp_stage_new_from_specs(const pp_unit_spec *specs, int n, uint64_t seed, int in_ndim,
                                  const int64_t *sample_shape, pp_device_ctx *dev, pp_stage **out,
                                  pp_error *err);

/* Frees the stage, its units and all saved state. NULL is ok. */
void pp_stage_free(pp_stage *s);

pp_device_ctx *pp_stage_device(const pp_stage *s);
int pp_stage_unit_count(const pp_stage *s);
pp_unit *pp_stage_unit(const pp_stage *s, int i);

/* Shapes of the stage's input and output for a micro-batch of mb_size
 * samples; shape has PP_MAX_DIMS entries (unused ones are 1). */
pp_status pp_stage_input_shape(const pp_stage *s, int mb_size, int *ndim, int64_t *shape,
                               pp_error *err);
pp_status pp_stage_output_shape(const pp_stage *s, int mb_size, int *ndim, int64_t *shape,
                                pp_error *err);

/* A token model's positions: the stage's input and output shapes (the
 * sample's first dimension after the batch, (N, T) ids or (N, T, C)) take t
 * positions instead of the sample's T (1 <= t <= T; t = T restores it), so
 * that an inference forward computes a shorter window (generation). Nothing
 * kept changes: the units' shape rules take any T up to their positions.
 * PP_ERR_INVALID for a t outside [1, T] or a stage whose input is not (N,
 * T, ...). */
pp_status pp_stage_set_positions(pp_stage *s, int t, pp_error *err);
/* Incremental decoding on every unit (pp_unit_set_decode, with the sample's
 * T as the cache's positions): the next inference forwards of one sample
 * compute the positions at.. of a sequence whose earlier positions the
 * stage's earlier decoding forwards computed (with pp_stage_set_positions
 * for how many); at -1 ends it and frees the caches. */
pp_status pp_stage_set_decode(pp_stage *s, int at, pp_error *err);

/* The dtype of the stage's input: its first unit's (I32 for token ids; an
 * F32 input to bf16 units is rounded, pp_stage_forward). */
pp_dtype pp_stage_input_dtype(const pp_stage *s);
/* The dtype of the stage's output (and of its gradient dy): its last unit's
 * (BF16 in bf16 mixed precision, F32 for the logits of a final linear layer). */
pp_dtype pp_stage_output_dtype(const pp_stage *s);
/* The layout of the stage's activations of rank ndim (pp_unit_spec_layout):
 * its input and output may come in either layout and are converted. */
pp_layout pp_stage_layout(const pp_stage *s, int ndim);

/* Forward of micro-batch mb: y (allocated by the caller with the output
 * shape for x's batch size and pp_stage_output_dtype) = stage(x). x is read
 * only during the call; an F32 x to bf16 units (the model's input images) is
 * rounded to bf16 first. See pp_unit_forward for train. On failure nothing
 * of mb stays saved. */
pp_status pp_stage_forward(pp_stage *s, pp_exec *ex, int mb, const pp_tensor *x, pp_tensor *y,
                           bool train, pp_error *err);

/* The draw (pp_unit_draw: step, global first sample) of micro-batch mb's
 * training forwards from now on, the recomputed one included; every unit of
 * the stage gets it before its forward. Until set, a micro-batch's draw is
 * step 0, first sample 0. */
pp_status pp_stage_set_draw(pp_stage *s, int mb, const pp_unit_draw *d, pp_error *err);

/* Backward of micro-batch mb: dx = dL/dx (skipped when dx is NULL, as for the
 * first stage; F32 or the first unit's input dtype), parameter gradients +=
 * (in micro-batch order: see the step below). Frees mb's saved state in every
 * unit, also on failure. */
pp_status pp_stage_backward(pp_stage *s, pp_exec *ex, int mb, const pp_tensor *dy, pp_tensor *dx,
                            pp_error *err);

/* The backward split in two (B = I then W, with B's bits on the CPU backend).
 * I of micro-batch mb: dx = dL/dx (skipped when dx is NULL), parameter
 * gradients untouched; keeps what mb's W needs (e.g. the output gradient of
 * each weighted layer) and frees the rest of mb's saved state. */
pp_status pp_stage_backward_input(pp_stage *s, pp_exec *ex, int mb, const pp_tensor *dy,
                                  pp_tensor *dx, pp_error *err);
/* W of micro-batch mb, after its I: parameter gradients +=; frees what mb
 * kept. Both free mb's state on failure.
 *
 * Memory kept between I and W, per micro-batch (pp_catalogue_iw_bytes): the
 * inputs of the stage's convolutions and linear layer, their output
 * gradients, and two floats per batch-norm channel. */
pp_status pp_stage_backward_weight(pp_stage *s, pp_exec *ex, int mb, pp_error *err);

/* What a training forward keeps for its backward:
 *   KEEP_ALL:   every unit keeps what its backward needs (pp_stage_forward);
 *   KEEP_INPUT: the stage keeps only a copy of x (in the units' dtype and
 *               layout), and mb's backward (pp_stage_backward or
 *               pp_stage_backward_input) first runs the forward again from
 *               it, keeping what backward needs (recomputation). */
typedef enum pp_stage_keep { PP_STAGE_KEEP_ALL = 0, PP_STAGE_KEEP_INPUT } pp_stage_keep;

/* A training forward like pp_stage_forward(train = true); with
 * PP_STAGE_KEEP_INPUT the stage keeps only a copy of x for mb, and mb's
 * backward (pp_stage_backward or pp_stage_backward_input) first runs the
 * forward again from it, keeping what backward needs. Batch norm sees the
 * same batch statistics in both forwards (the same bits from the same
 * input) and updates its running statistics, num_batches_tracked and the
 * pending counts (pp_stage_batch_counts) in the first only, so results are
 * bitwise those of KEEP_ALL on the CPU backend. The forward again runs in
 * the exec of the backward that asks for it. */
pp_status pp_stage_forward_keep(pp_stage *s, pp_exec *ex, int mb, const pp_tensor *x,
                                pp_tensor *y, pp_stage_keep keep, pp_error *err);

/* Drops mb's saved state (a forward in flight, a kept input, a W not run)
 * without its backward. */
void pp_stage_release(pp_stage *s, int mb);
/* Drops mb's saved state made inside a discarded CUDA graph capture
 * (pp_unit_abandon): its stream-ordered memory was the graph's. */
void pp_stage_abandon(pp_stage *s, int mb);
/* Number of micro-batches with saved state (as pp_stage_release drops). */
int pp_stage_in_flight(const pp_stage *s);

/* Named tensors, pointers valid for the stage's lifetime:
 *   params  - learnable parameters (grad non-NULL), network order;
 *   buffers - running_mean, running_var, num_batches_tracked, network order;
 *   state   - both, in torchvision state_dict order (what a checkpoint holds). */
int pp_stage_param_count(const pp_stage *s);
const pp_named_tensor *pp_stage_param(const pp_stage *s, int i);
int pp_stage_buffer_count(const pp_stage *s);
const pp_named_tensor *pp_stage_buffer(const pp_stage *s, int i);
int pp_stage_state_count(const pp_stage *s);
const pp_named_tensor *pp_stage_state(const pp_stage *s, int i);
/* Number of learnable scalars. */
int64_t pp_stage_num_params(const pp_stage *s);

/* The step. Weight gradients are summed in micro-batch order whatever order
 * the backwards (B, or W) of a step run in, so the bits do not depend on the
 * schedule (unit.h). A step begins here: every gradient set to zero in ex's
 * stream order (one pp_zero_multi), micro-batch 0 next in the order, and
 * gradients waiting for their turn dropped. A B or W of the next
 * micro-batch adds to the gradients; one of a later micro-batch computes its
 * gradients apart and they are added when their turn comes. Memory: a W (or
 * B) run before its turn holds a copy of the stage's parameter gradients
 * (pp_stage_num_params * 4 bytes) until then: a reverse order of m
 * micro-batches holds m - 1 of them at its peak; in-order schedules, none.
 * (A backward of a micro-batch already added this step, with none waiting,
 * begins a new step too, for callers that zero the gradients themselves.) */
pp_status pp_stage_zero_grads(pp_stage *s, pp_exec *ex, pp_error *err);
/* Number of micro-batches whose weight gradients wait for their turn. */
int pp_stage_grads_waiting(const pp_stage *s);

/* See pp_unit_sync_buffers: call with the stage idle before reading or
 * writing buffers (checkpoint save or load). */
pp_status pp_stage_sync_buffers(pp_stage *s, pp_error *err);

/* See pp_unit_params_changed: call after changing the stage's parameters
 * (an optimizer step, a load, writing them through pp_stage_param) and
 * before the next forward, in bf16 mixed precision. */
void pp_stage_params_changed(pp_stage *s);

/* The batch norms' pending training-forward counts (pp_unit_batch_counts)
 * over the stage's units, in network order: how many (out may be NULL with
 * cap 0), read into out, replaced from in (n of them, as read), or each
 * raised by n (a replay of n training forwards whose host side did not run). */
int pp_stage_batch_counts(const pp_stage *s, int64_t *out, int cap);
void pp_stage_set_batch_counts(pp_stage *s, const int64_t *in, int n);
void pp_stage_add_batches(pp_stage *s, int64_t n);

/* Deferred batch-norm statistics (torchgpipe's deferred batch norm,
 * models/bn_defer.h): with on, each training forward of micro-batch mb <
 * max_mb normalises by its own statistics as always, but leaves the running
 * statistics and num_batches_tracked alone and keeps its statistics for
 * the step's pp_stage_bn_commit, which updates them once from the combined
 * moments of micro-batches 0..m-1, in that order, as one forward over the
 * whole mini-batch would (to float rounding). Switch it with the stage
 * idle; off drops what a step kept. Allocates 2 x channels floats per batch
 * norm and micro-batch on the stage's device. */
pp_status pp_stage_set_deferred_bn(pp_stage *s, bool on, int max_mb, pp_error *err);
bool pp_stage_deferred_bn(const pp_stage *s);
/* The commit of a step of m micro-batches whose training forwards (the first
 * of a recomputed one) all ran since the last commit, in ex's stream order
 * (the stream of those forwards). PP_ERR_INVALID when one of them did not
 * run; a no-op without deferred statistics or batch norms. */
pp_status pp_stage_bn_commit(pp_stage *s, pp_exec *ex, int m, pp_error *err);

#endif
