/*
 * ops_check.h - internal to runtime/core: the boundary checks of the op API
 * (ops_check.c), shared by ops.c and the files that hold ops of their own.
 * Each returns PP_OK or PP_ERR_INVALID naming op and what.
 */
#ifndef PP_OPS_CHECK_H
#define PP_OPS_CHECK_H

#include <stdint.h>

#include "dropout.h"
#include "exec.h"
#include "status.h"
#include "tensor.h"

/* The dtype argument of pp_ops_check for tensors that may be F32 or BF16
 * (it takes an int so that this is no pp_dtype value). */
#define PP_OPS_ACT (-1)

/* t has data (or no elements), the dtype (or PP_OPS_ACT), lives on the
 * exec's device and has the shape (ndim of d0..d3). */
pp_status pp_ops_check(pp_exec *ex, const char *op, const char *what, const pp_tensor *t,
                       int dtype, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                       pp_error *err);
/* ... with like's dtype and shape. */
pp_status pp_ops_check_like(pp_exec *ex, const char *op, const char *what, const pp_tensor *t,
                            const pp_tensor *like, pp_error *err);
/* For the elementwise ops: t's memory order must be like's. */
pp_status pp_ops_check_layout_like(const char *op, const char *what, const pp_tensor *t,
                                   const pp_tensor *like, pp_error *err);
/* Parameters and their gradients are NCHW (the checkpoint's order). */
pp_status pp_ops_check_nchw(const char *op, const char *what, const pp_tensor *t, pp_error *err);
/* ex and its device are set. */
pp_status pp_ops_check_exec(pp_exec *ex, const char *op, pp_error *err);
/* F32 of any shape; F32 or BF16 of any shape. */
pp_status pp_ops_check_f32(pp_exec *ex, const char *op, const char *what, const pp_tensor *t,
                           pp_error *err);
pp_status pp_ops_check_act(pp_exec *ex, const char *op, const char *what, const pp_tensor *t,
                           pp_error *err);
/* Any dtype and shape (the copies): on the exec's device, with data. */
pp_status pp_ops_check_any(pp_exec *ex, const char *op, const char *what, const pp_tensor *y,
                           pp_error *err);
/* A dropout's p in [0, 1), and its step in memory (NULL, or one I64
 * element on the exec's device). */
pp_status pp_ops_check_dropout(pp_exec *ex, const char *op, const pp_dropout_desc *d,
                               pp_error *err);

#endif
