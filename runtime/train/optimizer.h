/*
 * optimizer.h - the one optimizer over the parameters of every stage.
 *
 * runtime/train/ is the training arithmetic: this optimizer (SGD and AdamW,
 * each a table of its own: optim_kind.h), gradient clipping's arithmetic
 * (clip.h) and the learning-rate schedules (lr_schedule.h). It includes
 * runtime/core, and runtime/io for the checkpoint tensors that hold the
 * optimizer's state.
 *
 * Kinds (pp_optimizer_settings.kind), per parameter, in the order the
 * parameters were given (fixed for the optimizer's life), with wd the
 * parameter's weight decay (its role's, below):
 *   SGD: torch.optim.SGD (dampening 0):
 *     g = grad + wd * param
 *     if momentum != 0: buf = (first step of this parameter) ? g : momentum * buf + g
 *                       g = nesterov ? g + momentum * buf : buf
 *     param -= lr * g
 *   AdamW: torch.optim.AdamW (amsgrad and maximize false): with t the
 *     parameter's own step count (1 at its first step), decoupled decay
 *     param *= 1 - lr * wd, then exp_avg and exp_avg_sq as
 *     pp_adamw_update_multi (runtime/core/ops.h) with bias corrections
 *     1 - beta1^t and 1 - beta2^t.
 * Each parameter may live on a different device; its state (momentum
 * buffer; exp_avg and exp_avg_sq) is allocated, zeroed where the kind
 * starts from zeros, on the parameter's device at its first step.
 *
 * Weight-decay groups (torchvision's set_weight_decay): each parameter has
 * a role. A bias (PP_PARAM_BIAS, PP_PARAM_NORM_BIAS) takes bias_weight_decay
 * when the settings give one; else a normalisation layer's parameter
 * (PP_PARAM_NORM_*) takes norm_weight_decay when given; else every
 * parameter takes weight_decay.
 *
 * Gradient scale: pp_optimizer_set_grad_scale(s) makes the next step use
 * s * grad for every gradient (clipping's coefficient, clip.h): AdamW
 * multiplies in its update, SGD scales the gradients first
 * (pp_scale_multi); the same bits as scaling them beforehand.
 *
 * Tied copies: a parameter given with tied_copy is a copy of one listed on
 * another stage or rank (a tied weight) whose gradient its owner's already
 * includes: it is neither updated nor counted in the gradient norm
 * (pp_optimizer_grad_sumsq), and holds no state; its name may repeat the
 * owner's.
 *
 * Execution: step and zero_grad run each parameter's update on a pp_exec for
 * that parameter's device, found in one of two ways:
 *   - exec_for != NULL: the caller maps a device to an exec (e.g. the stream
 *     of the last stage on that device). Work is enqueued in that exec's
 *     stream order and the call returns without waiting (CUDA); the caller
 *     synchronises before reading parameters or saving a checkpoint.
 *   - exec_for == NULL: the optimizer uses one exec per device that it
 *     creates on first use and keeps until pp_optimizer_free, and waits for
 *     all of them before returning (synchronous).
 *
 * Ownership: the optimizer borrows the parameter and gradient tensors (they
 * must outlive it), copies the names, and owns its state.
 * Thread safety: none; call from one thread at a time.
 */
#ifndef PP_OPTIMIZER_H
#define PP_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/io/checkpoint.h"
#include "runtime/core/exec.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Prefix of every checkpoint name of optimizer state, and of each kind's. */
#define PP_OPTIMIZER_STATE_PREFIX "optimizer."
#define PP_OPTIMIZER_MOMENTUM_PREFIX "optimizer.momentum."     /* SGD: momentum buffer */
#define PP_OPTIMIZER_EXP_AVG_PREFIX "optimizer.exp_avg."       /* AdamW: first moment */
#define PP_OPTIMIZER_EXP_AVG_SQ_PREFIX "optimizer.exp_avg_sq." /* AdamW: second moment */
#define PP_OPTIMIZER_STEP_PREFIX "optimizer.step."             /* AdamW: the parameter's
                                                                * steps (I64 scalar) */

typedef struct pp_sgd_config {
    float lr;            /* >= 0 */
    float momentum;      /* >= 0; 0 keeps no buffers */
    float weight_decay;  /* >= 0 */
    bool nesterov;       /* requires momentum > 0 */
} pp_sgd_config;

typedef enum pp_optimizer_kind {
    PP_OPTIMIZER_SGD = 0,
    PP_OPTIMIZER_ADAMW = 1,
} pp_optimizer_kind;

/* Every setting of either kind (those of the other kind are ignored). */
typedef struct pp_optimizer_settings {
    pp_optimizer_kind kind;
    double lr;                 /* >= 0 */
    double weight_decay;       /* >= 0 */
    bool has_norm_weight_decay, has_bias_weight_decay; /* the groups (see above) */
    double norm_weight_decay, bias_weight_decay;       /* >= 0 */
    /* SGD */
    double momentum;           /* >= 0; 0 keeps no buffers */
    bool nesterov;             /* requires momentum > 0 */
    /* AdamW */
    double beta1, beta2;       /* in [0, 1) */
    double eps;                /* >= 0 */
} pp_optimizer_settings;

/* What a parameter is, for its weight-decay group. */
typedef enum pp_param_role {
    PP_PARAM_WEIGHT = 0,      /* convolution kernels, matrices, embeddings */
    PP_PARAM_BIAS = 1,        /* a layer's bias */
    PP_PARAM_NORM_WEIGHT = 2, /* a normalisation layer's scale (batch norm, layer norm) */
    PP_PARAM_NORM_BIAS = 3,   /* a normalisation layer's shift */
} pp_param_role;

/* One parameter: its state_dict name, the parameter and its gradient (F32,
 * same shape and device). Borrowed. */
typedef struct pp_param_ref {
    const char *name;
    pp_tensor *param;
    pp_tensor *grad;
} pp_param_ref;

/* What the optimizer knows of a parameter beyond its tensors: its role and
 * whether it is a tied copy (see above). */
typedef struct pp_param_info {
    pp_param_role role;
    bool tied_copy;
} pp_param_info;

/* Returns the exec to run work for dev on, or NULL if there is none (the
 * call then fails with PP_ERR_INVALID). */
typedef pp_exec *(*pp_exec_for_device_fn)(void *user, pp_device_ctx *dev);

typedef struct pp_optimizer pp_optimizer;

/* Validates the settings (PP_ERR_INPUT) and the parameters (PP_ERR_INVALID:
 * names non-empty and distinct but for tied copies, param/grad F32 with
 * equal shape and device). info has n entries, or is NULL: every parameter
 * PP_PARAM_WEIGHT, none a copy. n may be 0. */
pp_status pp_optimizer_new_with(pp_optimizer **out, const pp_optimizer_settings *s,
                                const pp_param_ref *params, const pp_param_info *info, size_t n,
                                pp_error *err);
/* An SGD optimizer: pp_optimizer_new_with of cfg's settings. */
pp_status pp_optimizer_new(pp_optimizer **out, const pp_sgd_config *cfg, const pp_param_ref *params,
                           size_t n, pp_error *err);
void pp_optimizer_free(pp_optimizer *opt);

/* The defaults of a kind: SGD lr 0.1, no momentum and no decay; AdamW
 * torch.optim.AdamW's (lr 0.001, betas 0.9 and 0.999, eps 1e-8, weight
 * decay 0.01) with no decay on biases and normalisation parameters (the
 * recipes of nanoGPT and Hugging Face). */
pp_optimizer_settings pp_optimizer_defaults(pp_optimizer_kind kind);
/* The weight decay the settings give a parameter of this role. */
double pp_optimizer_decay_of(const pp_optimizer_settings *s, pp_param_role role);
/* "sgd", "adamw". */
const char *pp_optimizer_kind_name(pp_optimizer_kind kind);

/* Sets every gradient to zero (tied copies' too). */
pp_status pp_optimizer_zero_grad(pp_optimizer *opt, pp_exec_for_device_fn exec_for, void *user,
                                 pp_error *err);

/* One step over every parameter, in order; increments the step counts on
 * success and sets the gradient scale back to 1. On failure some parameters
 * may already be updated. */
pp_status pp_optimizer_step(pp_optimizer *opt, pp_exec_for_device_fn exec_for, void *user,
                            pp_error *err);

/* The next step's gradient scale (> 0 and finite; 1 after each step). */
pp_status pp_optimizer_set_grad_scale(pp_optimizer *opt, float scale, pp_error *err);

/* sums[i] = the sum of squares of parameter i's gradient (pp_sumsq_multi's
 * order; 0 for a tied copy), for the n parameters in order; waits for the
 * sums. For gradient clipping (clip.h). */
pp_status pp_optimizer_grad_sumsq(pp_optimizer *opt, pp_exec_for_device_fn exec_for, void *user,
                                  double *sums, pp_error *err);

/* Number of completed steps (restored from a checkpoint with set_steps). */
int64_t pp_optimizer_steps(const pp_optimizer *opt);
void pp_optimizer_set_steps(pp_optimizer *opt, int64_t steps);

/* Current settings; set_lr changes the learning rate (schedules). The SGD
 * view: lr, momentum, weight decay and Nesterov as floats. */
pp_optimizer_settings pp_optimizer_get_settings(const pp_optimizer *opt);
pp_sgd_config pp_optimizer_config(const pp_optimizer *opt);
void pp_optimizer_set_lr(pp_optimizer *opt, float lr);
void pp_optimizer_set_learning_rate(pp_optimizer *opt, double lr);

/* Number of parameters and the i-th parameter's name. */
size_t pp_optimizer_size(const pp_optimizer *opt);
const char *pp_optimizer_param_name(const pp_optimizer *opt, size_t i);

/* The state kept per parameter: slot names (the checkpoint prefixes above)
 * and whether each is an I64 scalar (a step count) or shaped like the
 * parameter. Returns the number of slots (0: SGD without momentum), fills
 * prefix/scalar up to cap. The same for every optimizer of equal settings. */
int pp_optimizer_slots(const pp_optimizer *opt, const char **prefix, bool *scalar, int cap);

/* The state tensor whose checkpoint name is state_name (a slot's prefix and
 * a parameter's name), or NULL when there is no such parameter or slot, or
 * the parameter holds no state yet. */
pp_tensor *pp_optimizer_state_tensor(pp_optimizer *opt, const char *state_name);
/* pp_optimizer_state_tensor of an "optimizer.momentum." name (SGD). */
pp_tensor *pp_optimizer_momentum(pp_optimizer *opt, const char *state_name);

/* Fills out[0..min(cap, count)) with the state tensors of the parameters
 * that hold state, named "<slot prefix><param name>" (names owned by the
 * optimizer, valid until it is freed), parameter by parameter in order,
 * slots in order; returns count. With cap 0 out may be NULL (to size the
 * array). For saving a checkpoint: call pp_optimizer_state_sync first. */
size_t pp_optimizer_state(pp_optimizer *opt, pp_ckpt_tensor *out, size_t cap);

/* Writes what the optimizer counts on the host (AdamW's per-parameter step
 * counts) into the state tensors pp_optimizer_state lists. */
pp_status pp_optimizer_state_sync(pp_optimizer *opt, pp_error *err);

/* For loading a checkpoint: allocates every missing state tensor (zeros)
 * and marks every parameter as holding state, so that pp_optimizer_state
 * lists them all and, once they are loaded and pp_optimizer_state_loaded has
 * read the step counts back, the next step continues. No-op for a kind
 * without state. If loading then fails, call pp_optimizer_reset_state. */
pp_status pp_optimizer_alloc_state(pp_optimizer *opt, pp_error *err);
/* After loading: reads the step counts from their tensors (PP_ERR_INPUT
 * naming the parameter when one is below 1). */
pp_status pp_optimizer_state_loaded(pp_optimizer *opt, pp_error *err);

/* Frees the state and sets the step counts to 0: the next step starts
 * afresh (SGD: buf = g; AdamW: zeros, step 1). */
void pp_optimizer_reset_state(pp_optimizer *opt);

#ifdef __cplusplus
}
#endif

#endif
