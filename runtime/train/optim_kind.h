/*
 * optim_kind.h - the optimizer's kinds (internal to runtime/train): what a
 * kind keeps per parameter and how it updates a group of parameters.
 * optimizer.c holds the parameters, their state and the groups, and calls
 * the kind's table; sgd.c and adamw.c fill one each.
 */
#ifndef PP_TRAIN_OPTIM_KIND_H
#define PP_TRAIN_OPTIM_KIND_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/exec.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/train/optimizer.h"

#define PP_OPTIM_MAX_SLOTS 3

/* One multi-tensor update: n parameters of one device that share their
 * weight decay, whether they hold state and their step count. */
typedef struct pp_optim_group {
    int n;
    pp_tensor *const *params;
    pp_tensor *const *grads;                     /* scaled in place by SGD's grad_scale */
    pp_tensor *const *state[PP_OPTIM_MAX_SLOTS]; /* per tensor slot, n tensors */
    double weight_decay;
    bool first;                                  /* the state holds nothing yet */
    int64_t step;                                /* the step being taken, >= 1 */
    float grad_scale;                            /* > 0; 1: none */
} pp_optim_group;

typedef struct pp_optim_kind_ops {
    const char *name; /* "sgd", "adamw" */
    /* PP_ERR_INPUT for settings the kind refuses, naming them */
    pp_status (*check)(const pp_optimizer_settings *s, pp_error *err);
    /* the state slots per parameter under s (at most PP_OPTIM_MAX_SLOTS): their
     * checkpoint prefixes, whether each is an I64 scalar step count (else a tensor
     * like the parameter) and whether it starts from zeros (else the first step
     * writes it whole) */
    int (*slots)(const pp_optimizer_settings *s, const char **prefix, bool *scalar,
                 bool *zeroed);
    /* one group's update on ex (tensor slots in g->state, in slot order) */
    pp_status (*update)(pp_exec *ex, const pp_optimizer_settings *s, const pp_optim_group *g,
                        pp_error *err);
} pp_optim_kind_ops;

extern const pp_optim_kind_ops pp_optim_sgd_ops, pp_optim_adamw_ops;

#endif
