/*
 * callbacks.h - the executor's view of the pipeline's stages (callbacks.c).
 * Not installed. Each stage is described to the executor as {dev, ops, user}
 * with user its pipe_stage (state.h); the callbacks work on the pipeline's
 * current run (its run_io).
 */
#ifndef PP_PIPELINE_CALLBACKS_H
#define PP_PIPELINE_CALLBACKS_H

#include "pipeline/state.h"

/* A stage's callbacks; _bucketed adds grads_ready, which sums the stage's
 * gradients over its replicas as soon as its backward of a step is done. */
extern const pp_stage_ops pipe_stage_ops, pipe_stage_ops_bucketed;

/* The dtype of the logits the last stage hands the loss, and of their
 * gradient's buffers (run_io.dlogits): its output's, F32, or BF16 under bf16
 * where the model does not end in a linear layer (GPT-2's head, as
 * torch.autocast's); the loss widens bf16 logits itself. */
pp_dtype pipe_logits_dtype(const struct pp_pipeline *p);

#endif
