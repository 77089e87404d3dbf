/*
 * optimizer.h - the one optimizer over the parameters of every stage.
 *
 * runtime/train/ is the training arithmetic: this optimizer and the
 * learning-rate schedules (lr_schedule.h). It includes runtime/core, and
 * runtime/io for the checkpoint tensors that hold the optimizer's state.
 *
 * torch.optim.SGD semantics (dampening 0), per parameter, in the order the
 * parameters were given (fixed for the optimizer's life):
 *   g = grad + weight_decay * param
 *   if momentum != 0: buf = (first step of this parameter) ? g : momentum * buf + g
 *                     g = nesterov ? g + momentum * buf : buf
 *   param -= lr * g
 * Each parameter may live on a different device; its momentum buffer is
 * allocated lazily, on the parameter's device, at its first step.
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
 * must outlive it), copies the names, and owns the momentum buffers.
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

/* Prefix of the checkpoint names of momentum buffers. */
#define PP_OPTIMIZER_MOMENTUM_PREFIX "optimizer.momentum."

typedef struct pp_sgd_config {
    float lr;            /* >= 0 */
    float momentum;      /* >= 0; 0 keeps no buffers */
    float weight_decay;  /* >= 0 */
    bool nesterov;       /* requires momentum > 0 */
} pp_sgd_config;

/* One parameter: its state_dict name, the parameter and its gradient (F32,
 * same shape and device). Borrowed. */
typedef struct pp_param_ref {
    const char *name;
    pp_tensor *param;
    pp_tensor *grad;
} pp_param_ref;

/* Returns the exec to run work for dev on, or NULL if there is none (the
 * call then fails with PP_ERR_INVALID). */
typedef pp_exec *(*pp_exec_for_device_fn)(void *user, pp_device_ctx *dev);

typedef struct pp_optimizer pp_optimizer;

/* Validates the configuration (PP_ERR_INPUT) and the parameters
 * (PP_ERR_INVALID: names non-empty and distinct, param/grad F32 with equal
 * shape and device). n may be 0. */
pp_status pp_optimizer_new(pp_optimizer **out, const pp_sgd_config *cfg, const pp_param_ref *params,
                           size_t n, pp_error *err);
void pp_optimizer_free(pp_optimizer *opt);

/* Sets every gradient to zero. */
pp_status pp_optimizer_zero_grad(pp_optimizer *opt, pp_exec_for_device_fn exec_for, void *user,
                                 pp_error *err);

/* One SGD step over every parameter, in order; increments the step count on
 * success. On failure some parameters may already be updated. */
pp_status pp_optimizer_step(pp_optimizer *opt, pp_exec_for_device_fn exec_for, void *user,
                            pp_error *err);

/* Number of completed steps (restored from a checkpoint with set_steps). */
int64_t pp_optimizer_steps(const pp_optimizer *opt);
void pp_optimizer_set_steps(pp_optimizer *opt, int64_t steps);

/* Current configuration; set_lr changes the learning rate (schedules). */
pp_sgd_config pp_optimizer_config(const pp_optimizer *opt);
void pp_optimizer_set_lr(pp_optimizer *opt, float lr);

/* Number of parameters and the i-th parameter's name. */
size_t pp_optimizer_size(const pp_optimizer *opt);
const char *pp_optimizer_param_name(const pp_optimizer *opt, size_t i);

/* The momentum buffer whose checkpoint name is state_name
 * ("optimizer.momentum.<param name>"), or NULL when there is no such
 * parameter, momentum is 0, or the buffer holds no state yet. */
pp_tensor *pp_optimizer_momentum(pp_optimizer *opt, const char *state_name);

/* Fills out[0..min(cap, count)) with the momentum buffers that hold state,
 * named "optimizer.momentum.<param name>" (names owned by the optimizer,
 * valid until it is freed), in parameter order; returns count. With cap 0
 * out may be NULL (to size the array). For saving a checkpoint. */
size_t pp_optimizer_state(pp_optimizer *opt, pp_ckpt_tensor *out, size_t cap);

/* For loading a checkpoint: allocates every missing momentum buffer (zeros)
 * and marks every buffer as holding state, so that pp_optimizer_state lists
 * them all and the next step continues (buf = momentum * buf + g). No-op when
 * momentum is 0. If loading then fails, call pp_optimizer_reset_state. */
pp_status pp_optimizer_alloc_state(pp_optimizer *opt, pp_error *err);

/* Frees the momentum buffers and sets the step count to 0: the next step
 * starts afresh (buf = g). */
void pp_optimizer_reset_state(pp_optimizer *opt);

#ifdef __cplusplus
}
#endif

#endif
