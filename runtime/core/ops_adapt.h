/*
 * ops_adapt.h - what ops.c and ops_batchnorm.c (the op entry points) ask
 * of ops_adapt.c (operand adaptation, below them): dispatch to the exec's
 * backend, the offer to the backend's native entry, and the f32 NCHW
 * stand-ins of bf16 and NHWC operands. Not installed; only runtime/core/ops*.c include it.
 *
 * The macros expect the op's `pp_exec *ex` and `pp_error *err` in scope.
 */
#ifndef PP_OPS_ADAPT_H
#define PP_OPS_ADAPT_H

#include <stdbool.h>

#include "backend.h"
#include "exec.h"
#include "ops.h"
#include "tensor.h"

/* PP_ERR_UNSUPPORTED: op is not provided by ex's backend. */
pp_status pp_ops_unsupported(pp_exec *ex, const char *op, pp_error *err);

#define DISPATCH(fn, ...)                                                          \
    (ex->dev->ops->fn ? ex->dev->ops->fn(ex, __VA_ARGS__) : pp_ops_unsupported(ex, #fn, err))

/* Offers op to the backend's native entry when one of the n tensors is
 * foreign; *done tells whether it ran. */
pp_status pp_ops_try_native(pp_exec *ex, pp_native_op op, const void *desc, int n,
                            pp_tensor *const *t, bool keep_layout, bool *done, pp_error *err);

/* Offers op to the backend's native entry whatever its operands (an op the
 * backend runs natively on f32 NCHW too: the batch norms); *done tells
 * whether it ran. */
pp_status pp_ops_offer_native(pp_exec *ex, pp_native_op op, const void *desc,
                              pp_tensor *const *t, bool *done, pp_error *err);

/* Returns from the calling op when the backend ran it natively. The tensor
 * list is the op's in pp_native_op order. */
#define NATIVE(op, desc, keep_layout, ...)                                                \
    do {                                                                                  \
        pp_tensor *const native_t_[] = {__VA_ARGS__};                                     \
        bool native_done_;                                                                \
        pp_status native_st_ =                                                            \
            pp_ops_try_native(ex, (op), (desc), (int)(sizeof native_t_ / sizeof native_t_[0]), \
                              native_t_, (keep_layout), &native_done_, err);              \
        if (native_done_ || native_st_ != PP_OK) return native_st_;                       \
    } while (0)

/* NATIVE through pp_ops_offer_native */
#define NATIVE_ANY(op, desc, ...)                                                         \
    do {                                                                                  \
        pp_tensor *const native_t_[] = {__VA_ARGS__};                                     \
        bool native_done_;                                                                \
        pp_status native_st_ = pp_ops_offer_native(ex, (op), (desc), native_t_,           \
                                                   &native_done_, err);                   \
        if (native_done_ || native_st_ != PP_OK) return native_st_;                       \
    } while (0)

/* Casts away const for the native tensor list (the backend writes outputs only). */
#define T(x) ((pp_tensor *)(x))

/* An op's stand-ins (ops_adapt.c); zero-initialised per op, keep_layout set
 * for the elementwise ones. */
enum { WIDE_MAX = 8 };
typedef struct wide {
    bool keep_layout;  /* elementwise op: stand-ins keep the operand's layout */
    int n;
    struct {
        void *data;    /* the operand's data */
        pp_tensor own; /* the operand (its dtype, shape, layout) */
        pp_tensor f32; /* its stand-in */
        bool out;      /* written back into data when the op ends */
    } e[WIDE_MAX];
    pp_status st;      /* the first failure; later calls do nothing */
} wide;

/* y (layout to) = x (the other layout), n batches; shapes from t (4-D). */
pp_status pp_ops_relayout(pp_exec *ex, const pp_tensor *t, pp_layout to, const void *x, void *y,
                          pp_error *err);

/* The f32 data to hand the backend for t: t's own for an f32 NCHW tensor,
 * else a stand-in, holding t's values when t is read (an input, or an
 * output the op accumulates into). An operand passed twice (an in-place op:
 * y == x) shares one stand-in. */
void *pp_ops_wide_get(wide *v, pp_exec *ex, const pp_tensor *t, bool out, bool read,
                      pp_error *err);

#define WIDE_IN(v, t) pp_ops_wide_get(&(v), ex, (t), false, true, err)
#define WIDE_OUT(v, t) pp_ops_wide_get(&(v), ex, (t), true, false, err)
#define WIDE_INOUT(v, t) pp_ops_wide_get(&(v), ex, (t), true, true, err)

/* Writes the outputs back when the op (st) succeeded and frees the
 * stand-ins; the first failure wins. */
pp_status pp_ops_wide_end(wide *v, pp_exec *ex, pp_status st, pp_error *err);

/* Runs call once every stand-in is ready, then wide_end. */
#define WIDE_RUN(v, call) pp_ops_wide_end(&(v), ex, (v).st == PP_OK ? (call) : (v).st, err)

/* Mixed precision's parameter gradients (torch.autocast's): an op's
 * gradient g is formed on its own in a zeroed F32 temporary *part shaped
 * like dst (pp_ops_low_begin), then rounded to bf16 and added to dst (F32):
 * dst += f32(bf16(g)) (pp_ops_low_end, which frees part; the first failure
 * wins, and on one nothing is added). */
pp_status pp_ops_low_begin(pp_exec *ex, const pp_tensor *dst, pp_tensor *part, pp_error *err);
pp_status pp_ops_low_end(pp_exec *ex, pp_tensor *part, pp_tensor *dst, pp_status st,
                         pp_error *err);

/* The argmax tensor is laid out like y (whatever path computed it). The f32
 * NCHW entries take it in NCHW order: *id is idx itself, or for an NHWC y a
 * temporary (holding idx's values laid out NCHW when read). */
pp_status pp_ops_idx_nchw(pp_exec *ex, const pp_tensor *y, const pp_tensor *idx, bool read,
                          pp_tensor *id, pp_error *err);

/* Ends pp_ops_idx_nchw: writes a written temporary back laid out NHWC, frees it. */
pp_status pp_ops_idx_done(pp_exec *ex, pp_tensor *id, const pp_tensor *idx, bool written,
                          pp_status st, pp_error *err);

#endif
