/*
 * ops_adapt.c - operand adaptation for the op entry points of ops.c.
 *
 * The backends' f32 entries take f32 NCHW data. An op whose operands are all
 * f32 NCHW calls them directly. Otherwise the backend's native entry may run
 * the op on the operands as they are; where it has none or declines
 * (PP_ERR_UNSUPPORTED), each other operand gets an f32 NCHW stand-in: bf16
 * widened (exactly), NHWC transposed (exactly), and each output is rounded and
 * laid out back when the op ends. Elementwise ops (layout-blind: every
 * operand has the same layout) keep the layout and only widen.
 *
 * Contract: an op calls NATIVE first (ops_adapt.h), then takes every
 * operand through pp_ops_wide_get (WIDE_IN, WIDE_OUT, WIDE_INOUT) and ends
 * with pp_ops_wide_end (WIDE_RUN); stand-ins are stream-ordered temporaries
 * of the exec, freed when the op ends.
 */
#include "ops_adapt.h"

#include <stddef.h>

pp_status pp_ops_unsupported(pp_exec *ex, const char *op, pp_error *err)
{
    return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: not provided by the %s backend", op,
                        ex->dev->ops->name);
}

/* Whether t needs a stand-in for the f32 NCHW entries (keep_layout: only
 * its dtype counts). */
static bool foreign(const pp_tensor *t, bool keep_layout)
{
    return t && (t->dtype == PP_BF16 ||
                 (!keep_layout && pp_tensor_effective_layout(t) == PP_NHWC));
}

/* Offers op to the backend's native entry when one of the n tensors is
 * foreign; *done tells whether it ran. */
pp_status pp_ops_try_native(pp_exec *ex, pp_native_op op, const void *desc, int n,
                            pp_tensor *const *t, bool keep_layout, bool *done, pp_error *err)
{
    *done = false;
    bool any = false;
    for (int i = 0; i < n; i++) any |= foreign(t[i], keep_layout);
    if (!any) return PP_OK;
    return pp_ops_offer_native(ex, op, desc, t, done, err);
}

pp_status pp_ops_offer_native(pp_exec *ex, pp_native_op op, const void *desc,
                              pp_tensor *const *t, bool *done, pp_error *err)
{
    *done = false;
    if (!ex->dev->ops->native) return PP_OK;
    pp_status st = ex->dev->ops->native(ex, op, desc, t, err);
    if (st == PP_ERR_UNSUPPORTED) return PP_OK;
    *done = true;
    return st;
}

/* y (layout to) = x (the other layout), n batches; shapes from t (4-D). */
pp_status pp_ops_relayout(pp_exec *ex, const pp_tensor *t, pp_layout to, const void *x, void *y,
                          pp_error *err)
{
    int64_t c = t->shape[1], hw = t->shape[2] * t->shape[3];
    int64_t rows = to == PP_NHWC ? c : hw, cols = to == PP_NHWC ? hw : c;
    return DISPATCH(transpose, t->shape[0], rows, cols, pp_dtype_size(t->dtype), x, y, err);
}

/* Moves values between an operand t and its f32 stand-in (fill: into the
 * stand-in, widening bf16 exactly and laying NHWC out as NCHW unless
 * keep_layout; else back into t, rounding and laying out as t is). A bf16
 * NHWC operand passes through a bf16 NCHW temporary. */
static pp_status wide_move(wide *v, pp_exec *ex, const pp_tensor *t, const pp_tensor *f32,
                           bool fill, pp_error *err)
{
    const bool nhwc = !v->keep_layout && pp_tensor_effective_layout(t) == PP_NHWC;
    const int64_t n = pp_tensor_numel(t);
    if (!nhwc)
        return fill ? DISPATCH(f32_from_bf16, n, t->data, f32->data, err)
                    : DISPATCH(bf16_from_f32, n, f32->data, t->data, err);
    if (t->dtype == PP_F32)
        return fill ? pp_ops_relayout(ex, t, PP_NCHW, t->data, f32->data, err)
                    : pp_ops_relayout(ex, t, PP_NHWC, f32->data, t->data, err);
    pp_tensor tmp;
    PP_TRY(pp_tensor_alloc_on(&tmp, ex, t->dtype, t->ndim, t->shape, err));
    pp_status st;
    if (fill) {
        st = pp_ops_relayout(ex, t, PP_NCHW, t->data, tmp.data, err);
        if (st == PP_OK) st = DISPATCH(f32_from_bf16, n, tmp.data, f32->data, err);
    } else {
        st = DISPATCH(bf16_from_f32, n, f32->data, tmp.data, err);
        if (st == PP_OK) st = pp_ops_relayout(ex, t, PP_NHWC, tmp.data, t->data, err);
    }
    pp_tensor_free(&tmp);
    return st;
}

/* The f32 data to hand the backend for t: t's own for an f32 NCHW tensor,
 * else a stand-in, holding t's values when t is read (an input, or an
 * output the op accumulates into). An operand passed twice (an in-place op:
 * y == x) shares one stand-in. */
void *pp_ops_wide_get(wide *v, pp_exec *ex, const pp_tensor *t, bool out, bool read,
                      pp_error *err)
{
    if (!foreign(t, v->keep_layout)) return t ? t->data : NULL;
    if (v->st != PP_OK) return NULL;
    for (int i = 0; i < v->n; i++)
        if (v->e[i].data == t->data) {
            v->e[i].out |= out;
            return v->e[i].f32.data;
        }
    if (v->n == WIDE_MAX) {
        v->st = pp_error_set(err, PP_ERR_INVALID, "too many converted operands");
        return NULL;
    }
    int i = v->n++;
    v->e[i].data = t->data;
    v->e[i].own = *t;
    v->e[i].out = out;
    v->st = pp_tensor_alloc_on(&v->e[i].f32, ex, PP_F32, t->ndim, t->shape, err);
    if (v->st == PP_OK && (!out || read)) v->st = wide_move(v, ex, t, &v->e[i].f32, true, err);
    return v->st == PP_OK ? v->e[i].f32.data : NULL;
}

/* Writes the outputs back when the op (st) succeeded and frees the
 * stand-ins; the first failure wins. */
pp_status pp_ops_wide_end(wide *v, pp_exec *ex, pp_status st, pp_error *err)
{
    for (int i = 0; i < v->n; i++) {
        if (st == PP_OK && v->e[i].out)
            st = wide_move(v, ex, &v->e[i].own, &v->e[i].f32, false, err);
        pp_tensor_free(&v->e[i].f32);
    }
    return st;
}

/* The argmax tensor is laid out like y (whatever path computed it). The f32
 * NCHW entries take it in NCHW order: *id is idx itself, or for an NHWC y a
 * temporary (holding idx's values laid out NCHW when read). */
pp_status pp_ops_idx_nchw(pp_exec *ex, const pp_tensor *y, const pp_tensor *idx, bool read,
                          pp_tensor *id, pp_error *err)
{
    *id = *idx;
    id->owns = false;
    if (pp_tensor_effective_layout(y) != PP_NHWC) return PP_OK;
    PP_TRY(pp_tensor_alloc_on(id, ex, PP_I32, idx->ndim, idx->shape, err));
    if (!read) return PP_OK;
    pp_status st = pp_ops_relayout(ex, idx, PP_NCHW, idx->data, id->data, err);
    if (st != PP_OK) pp_tensor_free(id);
    return st;
}

/* Ends pp_ops_idx_nchw: writes a written temporary back laid out NHWC, frees it. */
pp_status pp_ops_idx_done(pp_exec *ex, pp_tensor *id, const pp_tensor *idx, bool written,
                          pp_status st, pp_error *err)
{
    if (id->data == idx->data) return st;
    if (st == PP_OK && written) st = pp_ops_relayout(ex, idx, PP_NHWC, id->data, idx->data, err);
    pp_tensor_free(id);
    return st;
}

pp_status pp_ops_low_begin(pp_exec *ex, const pp_tensor *dst, pp_tensor *part, pp_error *err)
{
    *part = (pp_tensor){0};
    PP_TRY(pp_tensor_alloc_on(part, ex, PP_F32, dst->ndim, dst->shape, err));
    pp_status st = DISPATCH(zero, pp_tensor_bytes(part), part->data, err);
    if (st != PP_OK) pp_tensor_free(part);
    return st;
}

pp_status pp_ops_low_end(pp_exec *ex, pp_tensor *part, pp_tensor *dst, pp_status st,
                         pp_error *err)
{
    pp_tensor low = {0};
    const int64_t n = pp_tensor_numel(dst);
    if (st == PP_OK && ex->dev->ops->accumulate_bf16) { /* the three below in one pass */
        st = ex->dev->ops->accumulate_bf16(ex, n, part->data, dst->data, err);
        pp_tensor_free(part);
        return st;
    }
    if (st == PP_OK) st = pp_tensor_alloc_on(&low, ex, PP_BF16, dst->ndim, dst->shape, err);
    if (st == PP_OK) st = DISPATCH(bf16_from_f32, n, part->data, low.data, err);
    if (st == PP_OK) st = DISPATCH(f32_from_bf16, n, low.data, part->data, err);
    if (st == PP_OK) st = DISPATCH(accumulate, n, part->data, dst->data, err);
    pp_tensor_free(&low);
    pp_tensor_free(part);
    return st;
}
