/*
 * bn_defer.h - deferred batch-norm statistics (torchgpipe's deferred batch
 * norm) inside the models: each micro-batch of a step is normalised by its
 * own statistics, which its training forward writes to its row of the batch
 * norm's slots (momentum 1 into zeros) instead of the running statistics;
 * the step's commit combines the rows in micro-batch order
 * (pp_batchnorm_stats_combine) and updates the running statistics and
 * num_batches_tracked once, as one forward over the whole mini-batch would.
 * Used by layers.c (a forward's rows) and stage.c (switching it on,
 * committing); the stage API is models/stage.h's.
 */
#ifndef PP_MODELS_BN_DEFER_H
#define PP_MODELS_BN_DEFER_H

#include <stdbool.h>

#include "models/unit_kind.h"

/* The running statistics' momentum of every batch norm (torchvision's). */
#define PP_UNIT_BN_MOMENTUM 0.1f

/* Allocates (on) or frees (off) the slots of every batch norm of u, cap
 * micro-batches each (zeros), and sets u->bn_deferred. */
pp_status pp_unit_bn_defer(pp_unit *u, bool on, int cap, pp_error *err);

/* Views of row mb of b's slots as the running mean and variance a training
 * forward updates (into *mean, *var, held by rm and rv). PP_ERR_INVALID when
 * mb is beyond the slots. */
pp_status pp_bn_defer_rows(pp_bn_layer *b, int mb, pp_tensor *rm, pp_tensor *rv,
                           pp_tensor **mean, pp_tensor **var, pp_error *err);

/* The commit of a step of m micro-batches of sizes[k] samples over the n
 * units' deferred batch norms, in one pp_batchnorm_stats_combine on ex (the
 * stream their forwards ran on); each counts one training forward. */
pp_status pp_units_bn_commit(pp_unit *const *units, int n, pp_exec *ex, int m, const int *sizes,
                             pp_error *err);

#endif
