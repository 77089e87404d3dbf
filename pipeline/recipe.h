/*
 * recipe.h - what recipe.c offers the other files of pipeline/: the
 * training recipe's parts of a rank's pipeline and step (docs/RUNNING.md):
 * the optimizer made from the plan (its kind, each parameter's weight-decay
 * group), the loss's label smoothing, gradient clipping over every stage and
 * rank, and the deferred batch-norm statistics. Not installed.
 */
#ifndef PP_PIPELINE_RECIPE_H
#define PP_PIPELINE_RECIPE_H

#include "pipeline/state.h"

/* Once the stages are built and p->params lists this rank's parameters: the
 * optimizer (p->opt) of the plan's kind and groups, the loss's settings,
 * clipping's buffers and, with batch.deferred_batch_norm, deferred
 * statistics on this rank's stages (for up to p->m micro-batches). */
pp_status pipe_recipe_init(struct pp_pipeline *p, const pp_plan *plan, pp_error *err);
void pipe_recipe_free(struct pp_pipeline *p);

/* Gradient clipping, after the replicas' sums and before the optimizer: the
 * 2-norm of every gradient of every stage (each tensor's sum of squares on
 * its device, then added in the model's parameter order whatever the
 * stages, schedule and ranks; each stage's sums from its home rank, so
 * replicas count once), kept in p->grad_norm, and the optimizer's gradient
 * scale for the next step (clip_grad_norm_'s coefficient). A norm that is
 * not finite is PP_ERR_NUMERIC naming the step. A no-op without clipping.
 * exec_for maps a device to the exec the optimizer runs on. */
pp_status pipe_clip_grads(struct pp_pipeline *p, pp_exec_for_device_fn exec_for, pp_error *err);

/* Deferred batch-norm statistics: every stage of this rank commits its
 * step of m micro-batches on its compute stream (after the executor's run;
 * stream order puts the next step's work behind it). A no-op without. */
pp_status pipe_bn_commit(struct pp_pipeline *p, int m, pp_error *err);

#endif
