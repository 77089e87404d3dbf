/*
 * ops_dropout.c - inverted dropout over any activation (ops.h:
 * pp_dropout_forward, pp_dropout_backward): checks, then the backend's
 * dropout entry; bf16 operands through f32 stand-ins (ops_adapt.h), which
 * hold them exactly, so a bf16 result is the f32 one rounded once. The
 * mask comes from dropout.h's hash and is never stored.
 */
#include "ops.h"

#include "backend.h"
#include "ops_adapt.h"
#include "ops_check.h"

#define ENTRY(fn) (ex && ex->dev ? ex->dev->ops->fn : NULL)

static pp_status dropout_run(pp_exec *ex, const char *op, const pp_dropout_desc *d,
                             const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!d) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL descriptor", op);
    PP_TRY(pp_ops_check_dropout(ex, op, d, err));
    PP_TRY(pp_ops_check_act(ex, op, "x", x, err));
    PP_TRY(pp_ops_check_like(ex, op, "y", y, x, err));
    if (x->ndim < 1 || x->shape[0] < 1)
        return pp_error_set(err, PP_ERR_INVALID, "%s: x has no samples", op);
    if (d->p == 0.0f) return x == y ? PP_OK : pp_copy(ex, x, y, err);
    const int64_t n = x->shape[0], per_sample = pp_tensor_numel(x) / n;
    wide v = {.keep_layout = true};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_OUT(v, y); /* y == x: one stand-in, read then written back */
    return WIDE_RUN(v, DISPATCH(dropout, d, n, per_sample, xd, yd, err));
}

pp_status pp_dropout_forward(pp_exec *ex, const pp_dropout_desc *d, const pp_tensor *x,
                             pp_tensor *y, pp_error *err)
{
    return dropout_run(ex, "dropout_forward", d, x, y, err);
}

pp_status pp_dropout_backward(pp_exec *ex, const pp_dropout_desc *d, const pp_tensor *dy,
                              pp_tensor *dx, pp_error *err)
{
    return dropout_run(ex, "dropout_backward", d, dy, dx, err);
}
