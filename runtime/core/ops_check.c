/*
 * ops_check.c - the boundary checks every op of ops.c shares: a tensor's
 * presence, dtype (PP_OPS_ACT: F32 or BF16), device, shape, data and memory
 * order, and the exec itself. Each failure names the op and the offending
 * tensor with its shape (PP_ERR_INVALID).
 */
#include "ops_check.h"

#include <stddef.h>

#include "backend.h"

#define ACT PP_OPS_ACT

/* A tensor is acceptable for an op when it has data (or no elements), the
 * expected dtype, lives on the exec's device and has the expected shape. */
pp_status pp_ops_check(pp_exec *ex, const char *op, const char *what, const pp_tensor *t,
                       int dtype, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                       pp_error *err)
{
    if (!t) return pp_error_set(err, PP_ERR_INVALID, "%s: %s is NULL", op, what);
    if (dtype == ACT && t->dtype != PP_F32 && t->dtype != PP_BF16)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s has dtype %s, expected F32 or BF16", op,
                            what, pp_dtype_name(t->dtype));
    if (dtype != ACT && (int)t->dtype != dtype)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s has dtype %s, expected %s", op, what,
                            pp_dtype_name(t->dtype), pp_dtype_name((pp_dtype)dtype));
    if (t->dev != ex->dev)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s is on %s, the op runs on %s", op, what,
                            t->dev ? t->dev->name : "no device", ex->dev->name);
    const int64_t want[4] = {d0, d1, d2, d3};
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char have[64];
        pp_tensor expect = {.ndim = ndim, .shape = {d0, d1, d2, d3}};
        char exp[64];
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s has shape %s, expected %s", op, what,
                            pp_tensor_shape_str(t, have, sizeof have),
                            pp_tensor_shape_str(&expect, exp, sizeof exp));
    }
    if (!t->data && pp_tensor_numel(t) > 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s has no data", op, what);
    return PP_OK;
}

pp_status pp_ops_check_like(pp_exec *ex, const char *op, const char *what, const pp_tensor *t,
                            const pp_tensor *like, pp_error *err)
{
    if (!like) return pp_error_set(err, PP_ERR_INVALID, "%s: reference tensor is NULL", op);
    return pp_ops_check(ex, op, what, t, like->dtype, like->ndim, like->shape[0], like->shape[1],
                        like->shape[2], like->shape[3], err);
}

/* For the elementwise ops: t's memory order must be like's. */
pp_status pp_ops_check_layout_like(const char *op, const char *what, const pp_tensor *t,
                                   const pp_tensor *like, pp_error *err)
{
    pp_layout a = pp_tensor_effective_layout(t), b = pp_tensor_effective_layout(like);
    if (a == b) return PP_OK;
    return pp_error_set(err, PP_ERR_INVALID, "%s: %s is %s, the other operands %s", op, what,
                        pp_layout_name(a), pp_layout_name(b));
}

/* Parameters and their gradients are NCHW (the checkpoint's order). */
pp_status pp_ops_check_nchw(const char *op, const char *what, const pp_tensor *t, pp_error *err)
{
    if (pp_tensor_effective_layout(t) == PP_NCHW) return PP_OK;
    return pp_error_set(err, PP_ERR_INVALID, "%s: %s must be NCHW", op, what);
}

pp_status pp_ops_check_exec(pp_exec *ex, const char *op, pp_error *err)
{
    if (!ex || !ex->dev) return pp_error_set(err, PP_ERR_INVALID, "%s: no exec context", op);
    return PP_OK;
}

pp_status pp_ops_check_f32(pp_exec *ex, const char *op, const char *what, const pp_tensor *t,
                           pp_error *err)
{
    if (!t) return pp_error_set(err, PP_ERR_INVALID, "%s: %s is NULL", op, what);
    return pp_ops_check(ex, op, what, t, PP_F32, t->ndim, t->shape[0], t->shape[1], t->shape[2],
                        t->shape[3], err);
}

/* F32 or BF16, any shape. */
pp_status pp_ops_check_act(pp_exec *ex, const char *op, const char *what, const pp_tensor *t,
                           pp_error *err)
{
    if (!t) return pp_error_set(err, PP_ERR_INVALID, "%s: %s is NULL", op, what);
    return pp_ops_check(ex, op, what, t, ACT, t->ndim, t->shape[0], t->shape[1], t->shape[2],
                        t->shape[3], err);
}

/* Any dtype: y is on the exec's device and has data. */
pp_status pp_ops_check_any(pp_exec *ex, const char *op, const char *what, const pp_tensor *y,
                           pp_error *err)
{
    if (!y) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL tensor", op);
    return pp_ops_check(ex, op, what, y, y->dtype, y->ndim, y->shape[0], y->shape[1], y->shape[2],
                        y->shape[3], err);
}

pp_status pp_ops_check_dropout(pp_exec *ex, const char *op, const pp_dropout_desc *d,
                               pp_error *err)
{
    if (!(d->p >= 0.0f && d->p < 1.0f))
        return pp_error_set(err, PP_ERR_INVALID, "%s: dropout %g is not in [0, 1)", op,
                            (double)d->p);
    if (!d->step) return PP_OK;
    return pp_ops_check(ex, op, "the dropout's step", d->step, PP_I64, 1, 1, 0, 0, 0, err);
}
