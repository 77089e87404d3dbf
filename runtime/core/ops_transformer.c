/*
 * ops_transformer.c - the transformer ops of the op API (ops.h: dense layers
 * in either weight order, layer norm, GELU, causal self-attention, token and
 * position embeddings): boundary checks, then dispatch to the exec's backend.
 * Activations may be bf16 (mixed precision): the backend's f32 entries get
 * f32 stand-ins holding their exact values, and each bf16 output is the f32
 * result rounded once (ops_adapt.h); a dense layer's weight gradient from
 * bf16 operands is rounded to bf16 before it is added (as torch.autocast's),
 * its bias's gradient is not. Attention with bf16 operands runs the
 * backend's bf16 entries where it has them (no stand-ins), else the same.
 * A backend without an entry gets PP_ERR_UNSUPPORTED from DISPATCH before
 * anything runs. The fused ops (a dense layer with its GELU, a layer norm
 * with a residual add) run the backend's fused entry where it has one, takes
 * the shape and every operand is f32, else the plain ops one after the other.
 * Where an operand is bf16 and the backend has the op's bf16 entry
 * (backend.h, "bf16 transformer entries"), that entry runs on the operands
 * as they are, unless it declines; then the stand-ins run. A dense layer's
 * whole backward (pp_dense_backward) offers the backend's combined bf16
 * entry where x is bf16, else composes the data and weight ops.
 */
#include "ops.h"

#include <stddef.h>

#include "backend.h"
#include "ops_adapt.h"
#include "ops_check.h"

/* The backend's entry fn of ex's device, NULL when ex has none. */
#define ENTRY(fn) (ex && ex->dev ? ex->dev->ops->fn : NULL)

/* t is F32 or BF16 of rank 2 or 3 on ex's device with last dimension c (c < 0: any);
 * *rows receives the product of its leading dimensions. */
static pp_status check_rows(pp_exec *ex, const char *op, const char *what, const pp_tensor *t,
                            int64_t c, int64_t *rows, pp_error *err)
{
    if (!t) return pp_error_set(err, PP_ERR_INVALID, "%s: %s is NULL", op, what);
    if (t->ndim != 2 && t->ndim != 3)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s must have 2 or 3 dimensions (has %d)",
                            op, what, t->ndim);
    const int64_t last = t->shape[t->ndim - 1];
    PP_TRY(pp_ops_check(ex, op, what, t, PP_OPS_ACT, t->ndim, t->shape[0], t->shape[1],
                        t->shape[2], t->shape[3], err));
    if (c >= 0 && last != c) {
        char have[64];
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s has shape %s, expected %lld features",
                            op, what, pp_tensor_shape_str(t, have, sizeof have), (long long)c);
    }
    *rows = t->ndim == 2 ? t->shape[0] : t->shape[0] * t->shape[1];
    return PP_OK;
}

/* t (F32 or BF16) has like's leading dimensions and c features. */
static pp_status check_rows_like(pp_exec *ex, const char *op, const char *what,
                                 const pp_tensor *t, const pp_tensor *like, int64_t c,
                                 pp_error *err)
{
    int64_t s[4] = {like->shape[0], like->shape[1], like->shape[2], like->shape[3]};
    s[like->ndim - 1] = c;
    return pp_ops_check(ex, op, what, t, PP_OPS_ACT, like->ndim, s[0], s[1], s[2], s[3], err);
}

static pp_status check_f32_vec(pp_exec *ex, const char *op, const char *what, const pp_tensor *t,
                               int64_t n, pp_error *err)
{
    return pp_ops_check(ex, op, what, t, PP_F32, 1, n, 1, 1, 1, err);
}

static pp_status check_order(const char *op, pp_weight_order order, pp_error *err)
{
    if (order != PP_WEIGHT_IN_OUT && order != PP_WEIGHT_OUT_IN)
        return pp_error_set(err, PP_ERR_INVALID, "%s: unknown weight order %d", op, (int)order);
    return PP_OK;
}

/* w is the 2-D weight of order, of dtype (or PP_OPS_ACT): *in and *out read from it. */
static pp_status check_weight(pp_exec *ex, const char *op, const char *what, pp_weight_order order,
                              const pp_tensor *w, int dtype, int64_t *in, int64_t *out,
                              pp_error *err)
{
    PP_TRY(check_order(op, order, err));
    if (!w || w->ndim != 2)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s must be 2-D", op, what);
    *in = order == PP_WEIGHT_IN_OUT ? w->shape[0] : w->shape[1];
    *out = order == PP_WEIGHT_IN_OUT ? w->shape[1] : w->shape[0];
    return pp_ops_check(ex, op, what, w, dtype, 2, w->shape[0], w->shape[1], 1, 1, err);
}

/* Whether the n tensors (NULL ones skipped) are all F32: a backend's fused
 * entries take f32 operands. */
static bool all_f32(int n, const pp_tensor *const *t)
{
    for (int i = 0; i < n; i++)
        if (t[i] && t[i]->dtype != PP_F32) return false;
    return true;
}

#define ALL_F32(...)                                                                  \
    all_f32((int)(sizeof((const pp_tensor *const[]){__VA_ARGS__}) / sizeof(pp_tensor *)), \
            (const pp_tensor *const[]){__VA_ARGS__})

/* ---- the backend's bf16 entries ----------------------------------------------------- */

/* t as a bf16 entry takes it (absent: NULL data) */
static pp_act act(const pp_tensor *t)
{
    return (pp_act){t ? t->data : NULL, t && t->dtype == PP_BF16};
}

/* A backend entry's status: *done unless it declined (PP_ERR_UNSUPPORTED,
 * nothing enqueued), which is then no failure. */
static pp_status entry_status(pp_status s, bool *done)
{
    *done = s != PP_ERR_UNSUPPORTED;
    return *done ? s : PP_OK;
}

/* Runs the backend's bf16 entry fn when it has one and the tensors (a
 * parenthesised list) are not all F32: *done when it ran (or failed). */
#define BF16_ENTRY(fn, tensors, done, ...)                                            \
    (ENTRY(fn) && !ALL_F32 tensors ? entry_status(ex->dev->ops->fn(ex, __VA_ARGS__), done) \
                                   : PP_OK)

/* ---- end of the bf16 entries' helpers ------------------------------------------------ */

pp_status pp_dense_forward(pp_exec *ex, pp_weight_order order, const pp_tensor *x,
                           const pp_tensor *w, const pp_tensor *b, pp_tensor *y, pp_error *err)
{
    const char *op = "dense_forward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    int64_t in = 0, out = 0, rows = 0;
    PP_TRY(check_weight(ex, op, "w", order, w, PP_OPS_ACT, &in, &out, err));
    PP_TRY(check_rows(ex, op, "x", x, in, &rows, err));
    if (b) PP_TRY(check_f32_vec(ex, op, "b", b, out, err));
    PP_TRY(check_rows_like(ex, op, "y", y, x, out, err));
    bool done = false;
    PP_TRY(BF16_ENTRY(dense_forward_bf16, (x, w, y), &done, rows, (int)in, (int)out,
                      order == PP_WEIGHT_OUT_IN, act(x), act(w), b ? b->data : NULL, act(y),
                      err));
    if (done) return PP_OK;
    wide v = {0};
    const float *xd = WIDE_IN(v, x), *wd = WIDE_IN(v, w);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(dense_forward, rows, (int)in, (int)out, order == PP_WEIGHT_OUT_IN,
                                xd, wd, b ? b->data : NULL, yd, err));
}

pp_status pp_dense_backward_data(pp_exec *ex, pp_weight_order order, const pp_tensor *w,
                                 const pp_tensor *dy, pp_tensor *dx, pp_error *err)
{
    const char *op = "dense_backward_data";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    int64_t in = 0, out = 0, rows = 0;
    PP_TRY(check_weight(ex, op, "w", order, w, PP_OPS_ACT, &in, &out, err));
    PP_TRY(check_rows(ex, op, "dy", dy, out, &rows, err));
    PP_TRY(check_rows_like(ex, op, "dx", dx, dy, in, err));
    bool done = false;
    PP_TRY(BF16_ENTRY(dense_backward_data_bf16, (w, dy, dx), &done, rows, (int)in, (int)out,
                      order == PP_WEIGHT_OUT_IN, act(w), act(dy), act(dx), err));
    if (done) return PP_OK;
    wide v = {0};
    const float *wd = WIDE_IN(v, w), *dyd = WIDE_IN(v, dy);
    float *dxd = WIDE_OUT(v, dx);
    return WIDE_RUN(v, DISPATCH(dense_backward_data, rows, (int)in, (int)out,
                                order == PP_WEIGHT_OUT_IN, wd, dyd, dxd, err));
}

pp_status pp_dense_backward_weights(pp_exec *ex, pp_weight_order order, const pp_tensor *x,
                                    const pp_tensor *dy, pp_tensor *dw, pp_tensor *db,
                                    pp_error *err)
{
    const char *op = "dense_backward_weights";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    int64_t in = 0, out = 0, rows = 0;
    PP_TRY(check_weight(ex, op, "dw", order, dw, PP_F32, &in, &out, err));
    PP_TRY(check_rows(ex, op, "x", x, in, &rows, err));
    PP_TRY(check_rows_like(ex, op, "dy", dy, x, out, err));
    if (db) PP_TRY(check_f32_vec(ex, op, "db", db, out, err));
    const bool w_out_in = order == PP_WEIGHT_OUT_IN;
    if (x->dtype != PP_BF16 && dy->dtype != PP_BF16) {
        wide v = {0};
        const float *xd = WIDE_IN(v, x), *dyd = WIDE_IN(v, dy);
        return WIDE_RUN(v, DISPATCH(dense_backward_weights, rows, (int)in, (int)out, w_out_in, xd,
                                    dyd, dw->data, db ? db->data : NULL, err));
    }
    /* mixed precision: this call's weight gradient is rounded to bf16, then
     * added; the bias's is added in f32 (the bias is added in f32 after the
     * bf16 product, as torch.autocast does for x @ w + b). The backend's bf16
     * entry forms the call's f32 gradient from the bf16 operands as they are */
    pp_tensor pw = {0};
    pp_status st = pp_ops_low_begin(ex, dw, &pw, err);
    bool done = false;
    if (st == PP_OK)
        st = BF16_ENTRY(dense_backward_weights_bf16, (x, dy), &done, rows, (int)in, (int)out,
                        w_out_in, act(x), act(dy), pw.data, db ? db->data : NULL, err);
    if (st == PP_OK && !done) {
        wide v = {0};
        const float *xd = WIDE_IN(v, x), *dyd = WIDE_IN(v, dy);
        st = WIDE_RUN(v, DISPATCH(dense_backward_weights, rows, (int)in, (int)out, w_out_in, xd,
                                  dyd, pw.data, db ? db->data : NULL, err));
    }
    return pw.data ? pp_ops_low_end(ex, &pw, dw, st, err) : st;
}

/* Runs a backend's fused entry: *done when it ran (or failed); not done when
 * the backend has none or declined (PP_ERR_UNSUPPORTED): the caller then
 * composes the op from the plain ones. */
#define FUSED(fn, done, ...)                                                          \
    (ENTRY(fn) ? entry_status(ex->dev->ops->fn(ex, __VA_ARGS__), done) : PP_OK)

pp_status pp_dense_gelu_forward(pp_exec *ex, pp_weight_order order, const pp_tensor *x,
                                const pp_tensor *w, const pp_tensor *b, pp_tensor *h,
                                pp_tensor *g, pp_error *err)
{
    const char *op = "dense_gelu_forward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    int64_t in = 0, out = 0, rows = 0;
    PP_TRY(check_weight(ex, op, "w", order, w, PP_OPS_ACT, &in, &out, err));
    PP_TRY(check_rows(ex, op, "x", x, in, &rows, err));
    if (b) PP_TRY(check_f32_vec(ex, op, "b", b, out, err));
    PP_TRY(check_rows_like(ex, op, "h", h, x, out, err));
    PP_TRY(pp_ops_check_like(ex, op, "g", g, h, err));
    bool done = false;
    if (ALL_F32(x, w, h, g))
        PP_TRY(FUSED(dense_gelu_forward, &done, rows, (int)in, (int)out, order == PP_WEIGHT_OUT_IN,
                 x->data, w->data, b ? b->data : NULL, h->data, g->data, err));
    else
        PP_TRY(BF16_ENTRY(dense_gelu_forward_bf16, (x, w, h, g), &done, rows, (int)in, (int)out,
                          order == PP_WEIGHT_OUT_IN, act(x), act(w), b ? b->data : NULL, act(h),
                          act(g), err));
    if (done) return PP_OK;
    PP_TRY(pp_dense_forward(ex, order, x, w, b, h, err));
    return pp_gelu_forward(ex, h, g, err);
}

pp_status pp_dense_backward_data_gelu(pp_exec *ex, pp_weight_order order, const pp_tensor *w,
                                      const pp_tensor *dy, const pp_tensor *h, pp_tensor *dh,
                                      pp_error *err)
{
    const char *op = "dense_backward_data_gelu";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    int64_t in = 0, out = 0, rows = 0;
    PP_TRY(check_weight(ex, op, "w", order, w, PP_OPS_ACT, &in, &out, err));
    PP_TRY(check_rows(ex, op, "dy", dy, out, &rows, err));
    PP_TRY(check_rows_like(ex, op, "h", h, dy, in, err));
    PP_TRY(pp_ops_check_like(ex, op, "dh", dh, h, err));
    bool done = false;
    if (ALL_F32(w, dy, h, dh))
        PP_TRY(FUSED(dense_backward_data_gelu, &done, rows, (int)in, (int)out,
                 order == PP_WEIGHT_OUT_IN, w->data, dy->data, h->data, dh->data, err));
    else
        PP_TRY(BF16_ENTRY(dense_backward_data_gelu_bf16, (w, dy, h, dh), &done, rows, (int)in,
                          (int)out, order == PP_WEIGHT_OUT_IN, act(w), act(dy), act(h), act(dh),
                          err));
    if (done) return PP_OK;
    PP_TRY(pp_dense_backward_data(ex, order, w, dy, dh, err));
    return pp_gelu_backward(ex, h, dh, dh, err);
}

/* Runs the backend's dense_backward_bf16 when it has one and x is BF16 (the
 * weight gradient's mixed precision: the entry forms the call's f32 gradient,
 * rounded then added as pp_dense_backward_weights does): *done when it ran
 * (or failed), else the caller composes the separate ops. */
static pp_status dense_backward_bf16(pp_exec *ex, int64_t rows, int64_t in, int64_t out,
                                     bool w_out_in, const pp_tensor *w, const pp_tensor *x,
                                     const pp_tensor *dy, const pp_tensor *h, pp_tensor *dx,
                                     pp_tensor *dw, pp_tensor *db, bool *done, pp_error *err)
{
    *done = false;
    if (!ENTRY(dense_backward_bf16) || x->dtype != PP_BF16) return PP_OK;
    pp_tensor pw = {0};
    PP_TRY(pp_ops_low_begin(ex, dw, &pw, err));
    const pp_status st = entry_status(
        ex->dev->ops->dense_backward_bf16(ex, rows, (int)in, (int)out, w_out_in, act(w), act(x),
                                          act(dy), act(h), act(dx), pw.data,
                                          db ? db->data : NULL, err),
        done);
    if (*done) return pp_ops_low_end(ex, &pw, dw, st, err);
    pp_tensor_free(&pw);
    return PP_OK;
}

pp_status pp_dense_backward(pp_exec *ex, pp_weight_order order, const pp_tensor *w,
                            const pp_tensor *x, const pp_tensor *dy, const pp_tensor *h,
                            pp_tensor *dx, pp_tensor *dw, pp_tensor *db, pp_error *err)
{
    const char *op = "dense_backward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    int64_t in = 0, out = 0, rows = 0, dw_in = 0, dw_out = 0;
    PP_TRY(check_weight(ex, op, "w", order, w, PP_OPS_ACT, &in, &out, err));
    PP_TRY(check_weight(ex, op, "dw", order, dw, PP_F32, &dw_in, &dw_out, err));
    if (dw_in != in || dw_out != out)
        return pp_error_set(err, PP_ERR_INVALID, "%s: dw is not shaped like w", op);
    PP_TRY(check_rows(ex, op, "x", x, in, &rows, err));
    PP_TRY(check_rows_like(ex, op, "dy", dy, x, out, err));
    if (db) PP_TRY(check_f32_vec(ex, op, "db", db, out, err));
    if (h && !dx) return pp_error_set(err, PP_ERR_INVALID, "%s: h without dx", op);
    if (h) PP_TRY(check_rows_like(ex, op, "h", h, x, in, err));
    if (dx) PP_TRY(h ? pp_ops_check_like(ex, op, "dx", dx, h, err)
                     : check_rows_like(ex, op, "dx", dx, x, in, err));
    bool done = false;
    PP_TRY(dense_backward_bf16(ex, rows, in, out, order == PP_WEIGHT_OUT_IN, w, x, dy, h, dx, dw,
                               db, &done, err));
    if (done) return PP_OK;
    /* all f32, no GELU: the backend's combined entry where it shares work (CUDA: one copy
     * of a dy at a padded pitch), else the two entries below */
    if (!h && dx && ENTRY(dense_backward) && w->dtype == PP_F32 && x->dtype == PP_F32 &&
        dy->dtype == PP_F32 && dx->dtype == PP_F32) {
        PP_TRY(entry_status(ex->dev->ops->dense_backward(ex, rows, (int)in, (int)out,
                                                         order == PP_WEIGHT_OUT_IN, w->data,
                                                         x->data, dy->data, dx->data, dw->data,
                                                         db ? db->data : NULL, err),
                            &done));
        if (done) return PP_OK;
    }
    if (h)
        PP_TRY(pp_dense_backward_data_gelu(ex, order, w, dy, h, dx, err));
    else if (dx)
        PP_TRY(pp_dense_backward_data(ex, order, w, dy, dx, err));
    return pp_dense_backward_weights(ex, order, x, dy, dw, db, err);
}

/* A layer norm's operands as the forward sees them (eps, x, gamma, beta, y,
 * mean, rstd): *rows and *c. */
static pp_status check_ln_forward(pp_exec *ex, const char *op, float eps, const pp_tensor *x,
                                  const pp_tensor *gamma, const pp_tensor *beta,
                                  const pp_tensor *y, const pp_tensor *mean,
                                  const pp_tensor *rstd, int64_t *rows, int64_t *c,
                                  pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!(eps > 0)) return pp_error_set(err, PP_ERR_INVALID, "%s: eps must be positive", op);
    PP_TRY(check_rows(ex, op, "x", x, -1, rows, err));
    *c = x->shape[x->ndim - 1];
    PP_TRY(check_f32_vec(ex, op, "gamma", gamma, *c, err));
    if (beta) PP_TRY(check_f32_vec(ex, op, "beta", beta, *c, err));
    PP_TRY(check_rows_like(ex, op, "y", y, x, *c, err));
    PP_TRY(check_f32_vec(ex, op, "mean", mean, *rows, err));
    return check_f32_vec(ex, op, "rstd", rstd, *rows, err);
}

pp_status pp_layernorm_forward(pp_exec *ex, float eps, const pp_tensor *x, const pp_tensor *gamma,
                               const pp_tensor *beta, pp_tensor *y, pp_tensor *mean,
                               pp_tensor *rstd, pp_error *err)
{
    int64_t rows = 0, c = 0;
    PP_TRY(check_ln_forward(ex, "layernorm_forward", eps, x, gamma, beta, y, mean, rstd, &rows,
                            &c, err));
    bool done = false;
    PP_TRY(BF16_ENTRY(layernorm_forward_bf16, (x, y), &done, rows, (int)c, eps, act(x), act(NULL),
                      act(NULL), gamma->data, beta ? beta->data : NULL, act(y), mean->data,
                      rstd->data, err));
    if (done) return PP_OK;
    wide v = {0};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(layernorm_forward, rows, (int)c, eps, xd, gamma->data,
                                beta ? beta->data : NULL, yd, mean->data, rstd->data, err));
}

pp_status pp_add_layernorm_forward(pp_exec *ex, float eps, const pp_tensor *a,
                                   const pp_tensor *b, const pp_tensor *gamma,
                                   const pp_tensor *beta, pp_tensor *s, pp_tensor *y,
                                   pp_tensor *mean, pp_tensor *rstd, pp_error *err)
{
    const char *op = "add_layernorm_forward";
    int64_t rows = 0, c = 0;
    PP_TRY(check_ln_forward(ex, op, eps, s, gamma, beta, y, mean, rstd, &rows, &c, err));
    PP_TRY(pp_ops_check_like(ex, op, "a", a, s, err));
    PP_TRY(pp_ops_check_like(ex, op, "b", b, s, err));
    bool done = false;
    if (ALL_F32(a, b, s, y))
        PP_TRY(FUSED(add_layernorm_forward, &done, rows, (int)c, eps, a->data, b->data, gamma->data,
                 beta ? beta->data : NULL, s->data, y->data, mean->data, rstd->data, err));
    else if (a->dtype == s->dtype && b->dtype == s->dtype)
        PP_TRY(BF16_ENTRY(layernorm_forward_bf16, (a, b, s, y), &done, rows, (int)c, eps, act(a),
                          act(b), act(s), gamma->data, beta ? beta->data : NULL, act(y),
                          mean->data, rstd->data, err));
    if (done) return PP_OK;
    PP_TRY(pp_add(ex, a, b, s, err));
    return pp_layernorm_forward(ex, eps, s, gamma, beta, y, mean, rstd, err);
}

/* A layer norm's operands as the backward sees them: *rows and *c. */
static pp_status check_ln_backward(pp_exec *ex, const char *op, const pp_tensor *x,
                                   const pp_tensor *dy, const pp_tensor *gamma,
                                   const pp_tensor *mean, const pp_tensor *rstd,
                                   const pp_tensor *dx, const pp_tensor *dgamma,
                                   const pp_tensor *dbeta, int64_t *rows, int64_t *c,
                                   pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(check_rows(ex, op, "x", x, -1, rows, err));
    *c = x->shape[x->ndim - 1];
    PP_TRY(check_rows_like(ex, op, "dy", dy, x, *c, err));
    PP_TRY(check_f32_vec(ex, op, "gamma", gamma, *c, err));
    PP_TRY(check_f32_vec(ex, op, "mean", mean, *rows, err));
    PP_TRY(check_f32_vec(ex, op, "rstd", rstd, *rows, err));
    PP_TRY(pp_ops_check_like(ex, op, "dx", dx, x, err));
    PP_TRY(check_f32_vec(ex, op, "dgamma", dgamma, *c, err));
    return dbeta ? check_f32_vec(ex, op, "dbeta", dbeta, *c, err) : PP_OK;
}

pp_status pp_layernorm_backward(pp_exec *ex, const pp_tensor *x, const pp_tensor *dy,
                                const pp_tensor *gamma, const pp_tensor *mean,
                                const pp_tensor *rstd, pp_tensor *dx, pp_tensor *dgamma,
                                pp_tensor *dbeta, pp_error *err)
{
    int64_t rows = 0, c = 0;
    PP_TRY(check_ln_backward(ex, "layernorm_backward", x, dy, gamma, mean, rstd, dx, dgamma,
                             dbeta, &rows, &c, err));
    bool done = false;
    PP_TRY(BF16_ENTRY(layernorm_backward_bf16, (x, dy, dx), &done, rows, (int)c, act(x), act(dy),
                      gamma->data, mean->data, rstd->data, act(NULL), act(dx), dgamma->data,
                      dbeta ? dbeta->data : NULL, err));
    if (done) return PP_OK;
    wide v = {0};
    const float *xd = WIDE_IN(v, x), *dyd = WIDE_IN(v, dy);
    float *dxd = WIDE_OUT(v, dx);
    return WIDE_RUN(v, DISPATCH(layernorm_backward, rows, (int)c, xd, dyd, gamma->data,
                                mean->data, rstd->data, dxd, dgamma->data,
                                dbeta ? dbeta->data : NULL, err));
}

pp_status pp_layernorm_backward_add(pp_exec *ex, const pp_tensor *x, const pp_tensor *dy,
                                    const pp_tensor *gamma, const pp_tensor *mean,
                                    const pp_tensor *rstd, const pp_tensor *dres,
                                    pp_tensor *dx, pp_tensor *dgamma, pp_tensor *dbeta,
                                    pp_error *err)
{
    const char *op = "layernorm_backward_add";
    int64_t rows = 0, c = 0;
    PP_TRY(check_ln_backward(ex, op, x, dy, gamma, mean, rstd, dx, dgamma, dbeta, &rows, &c,
                             err));
    PP_TRY(pp_ops_check_like(ex, op, "dres", dres, x, err));
    if (dres->data == dx->data)
        return pp_error_set(err, PP_ERR_INVALID, "%s: dres may not alias dx", op);
    bool done = false;
    if (ALL_F32(x, dy, dres, dx))
        PP_TRY(FUSED(layernorm_backward_add, &done, rows, (int)c, x->data, dy->data, gamma->data,
                 mean->data, rstd->data, dres->data, dx->data, dgamma->data,
                 dbeta ? dbeta->data : NULL, err));
    else if (dres->dtype == dx->dtype)
        PP_TRY(BF16_ENTRY(layernorm_backward_bf16, (x, dy, dres, dx), &done, rows, (int)c, act(x),
                          act(dy), gamma->data, mean->data, rstd->data, act(dres), act(dx),
                          dgamma->data, dbeta ? dbeta->data : NULL, err));
    if (done) return PP_OK;
    PP_TRY(pp_layernorm_backward(ex, x, dy, gamma, mean, rstd, dx, dgamma, dbeta, err));
    return pp_accumulate(ex, dres, dx, err);
}

pp_status pp_gelu_forward(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    const char *op = "gelu_forward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(pp_ops_check_act(ex, op, "x", x, err));
    PP_TRY(pp_ops_check_like(ex, op, "y", y, x, err));
    bool done = false;
    PP_TRY(BF16_ENTRY(gelu_forward_bf16, (x, y), &done, pp_tensor_numel(x), act(x), act(y), err));
    if (done) return PP_OK;
    wide v = {.keep_layout = true};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(gelu_forward, pp_tensor_numel(x), xd, yd, err));
}

pp_status pp_gelu_backward(pp_exec *ex, const pp_tensor *x, const pp_tensor *dy, pp_tensor *dx,
                           pp_error *err)
{
    const char *op = "gelu_backward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(pp_ops_check_act(ex, op, "x", x, err));
    PP_TRY(pp_ops_check_like(ex, op, "dy", dy, x, err));
    PP_TRY(pp_ops_check_like(ex, op, "dx", dx, x, err));
    bool done = false;
    PP_TRY(BF16_ENTRY(gelu_backward_bf16, (x, dy, dx), &done, pp_tensor_numel(x), act(x),
                      act(dy), act(dx), err));
    if (done) return PP_OK;
    wide v = {.keep_layout = true};
    const float *xd = WIDE_IN(v, x), *dyd = WIDE_IN(v, dy);
    float *dxd = WIDE_OUT(v, dx);
    return WIDE_RUN(v, DISPATCH(gelu_backward, pp_tensor_numel(x), xd, dyd, dxd, err));
}

/* qkv (N, T, 3C) with C a multiple of heads: the descriptor. */
static pp_status attention_desc(pp_exec *ex, const char *op, int heads, const pp_tensor *qkv,
                                pp_attention_desc *d, pp_error *err)
{
    if (!qkv || qkv->ndim != 3)
        return pp_error_set(err, PP_ERR_INVALID, "%s: qkv must be 3-D (N, T, 3C)", op);
    PP_TRY(pp_ops_check_act(ex, op, "qkv", qkv, err));
    const int64_t c3 = qkv->shape[2];
    if (heads < 1 || c3 % 3 != 0 || (c3 / 3) % heads != 0)
        return pp_error_set(err, PP_ERR_INVALID,
                            "%s: qkv's %lld columns are not 3 x a multiple of %d heads", op,
                            (long long)c3, heads);
    if (qkv->shape[0] > INT32_MAX || qkv->shape[1] > INT32_MAX || c3 > INT32_MAX)
        return pp_error_set(err, PP_ERR_INVALID, "%s: qkv is too large", op);
    *d = (pp_attention_desc){.n = (int)qkv->shape[0], .t = (int)qkv->shape[1],
                             .c = (int)(c3 / 3), .heads = heads};
    return PP_OK;
}

/* drop (NULL: none) into d; p > 0 needs the backend's dropout entry. */
static pp_status attention_drop(pp_exec *ex, const char *op, const pp_dropout_desc *drop,
                                pp_attention_desc *d, pp_error *err)
{
    if (!drop || drop->p == 0.0f) return PP_OK;
    PP_TRY(pp_ops_check_dropout(ex, op, drop, err));
    if (!ENTRY(dropout))
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: the %s backend has no dropout", op,
                            ex->dev->name);
    d->drop = *drop;
    return PP_OK;
}

/* ---- attention in bf16: the backend's bf16 entries where it has them ---- */

/* Whether the n tensors are all BF16 (the bf16 entries' operands). */
static bool all_bf16(int n, const pp_tensor *const *t)
{
    for (int i = 0; i < n; i++)
        if (t[i]->dtype != PP_BF16) return false;
    return true;
}

/* Runs the backend's attention_forward_bf16 when qkv and y are BF16 (with
 * d->drop: attention_drop let p > 0 through only to a backend with a
 * dropout entry, whose attention entries draw the masks): *done when it ran
 * (or failed), else the caller takes the f32 stand-ins. */
static pp_status attention_forward_bf16(pp_exec *ex, const pp_attention_desc *d,
                                        const pp_tensor *qkv, pp_tensor *y, pp_tensor *lse,
                                        bool *done, pp_error *err)
{
    *done = false;
    if (!all_bf16(2, (const pp_tensor *const[]){qkv, y})) return PP_OK;
    return FUSED(attention_forward_bf16, done, d, qkv->data, y->data, lse->data, err);
}

/* attention_forward_bf16's backward: qkv, y, dy and dqkv BF16. */
static pp_status attention_backward_bf16(pp_exec *ex, const pp_attention_desc *d,
                                         const pp_tensor *qkv, const pp_tensor *y,
                                         const pp_tensor *lse, const pp_tensor *dy,
                                         pp_tensor *dqkv, bool *done, pp_error *err)
{
    *done = false;
    if (!all_bf16(4, (const pp_tensor *const[]){qkv, y, dy, dqkv})) return PP_OK;
    return FUSED(attention_backward_bf16, done, d, qkv->data, y->data, lse->data, dy->data,
                 dqkv->data, err);
}

/* ---- attention ---- */

/* y (N, T - q0, C) and lse (N, heads, T - q0) checked, then the backend's
 * bf16 entry where the operands are BF16 and it has one, else its f32 entry
 * (on stand-ins where they are BF16). */
static pp_status attention_forward_run(pp_exec *ex, const char *op, const pp_attention_desc *d,
                                       const pp_tensor *qkv, pp_tensor *y, pp_tensor *lse,
                                       pp_error *err)
{
    const int rows = d->t - d->q0;
    PP_TRY(pp_ops_check(ex, op, "y", y, PP_OPS_ACT, 3, d->n, rows, d->c, 1, err));
    PP_TRY(pp_ops_check(ex, op, "lse", lse, PP_F32, 3, d->n, d->heads, rows, 1, err));
    bool done = false;
    PP_TRY(attention_forward_bf16(ex, d, qkv, y, lse, &done, err));
    if (done) return PP_OK;
    wide v = {0};
    const float *qkvd = WIDE_IN(v, qkv);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(attention_forward, d, qkvd, yd, lse->data, err));
}

pp_status pp_attention_forward(pp_exec *ex, int heads, const pp_tensor *qkv, pp_tensor *y,
                               pp_tensor *lse, pp_error *err)
{
    return pp_attention_forward_dropout(ex, heads, NULL, qkv, y, lse, err);
}

pp_status pp_attention_forward_dropout(pp_exec *ex, int heads, const pp_dropout_desc *drop,
                                       const pp_tensor *qkv, pp_tensor *y, pp_tensor *lse,
                                       pp_error *err)
{
    const char *op = "attention_forward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    pp_attention_desc d;
    PP_TRY(attention_desc(ex, op, heads, qkv, &d, err));
    PP_TRY(attention_drop(ex, op, drop, &d, err));
    return attention_forward_run(ex, op, &d, qkv, y, lse, err);
}

pp_status pp_attention_forward_from(pp_exec *ex, int heads, int q0, const pp_tensor *qkv,
                                    pp_tensor *y, pp_tensor *lse, pp_error *err)
{
    const char *op = "attention_forward_from";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    pp_attention_desc d;
    PP_TRY(attention_desc(ex, op, heads, qkv, &d, err));
    if (q0 < 0 || (q0 > 0 && q0 >= d.t))
        return pp_error_set(err, PP_ERR_INVALID,
                            "%s: the first query's position %d is not below qkv's %d positions",
                            op, q0, d.t);
    d.q0 = q0;
    return attention_forward_run(ex, op, &d, qkv, y, lse, err);
}

pp_status pp_attention_backward(pp_exec *ex, int heads, const pp_tensor *qkv, const pp_tensor *y,
                                const pp_tensor *lse, const pp_tensor *dy, pp_tensor *dqkv,
                                pp_error *err)
{
    return pp_attention_backward_dropout(ex, heads, NULL, qkv, y, lse, dy, dqkv, err);
}

pp_status pp_attention_backward_dropout(pp_exec *ex, int heads, const pp_dropout_desc *drop,
                                        const pp_tensor *qkv, const pp_tensor *y,
                                        const pp_tensor *lse, const pp_tensor *dy,
                                        pp_tensor *dqkv, pp_error *err)
{
    const char *op = "attention_backward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    pp_attention_desc d;
    PP_TRY(attention_desc(ex, op, heads, qkv, &d, err));
    PP_TRY(attention_drop(ex, op, drop, &d, err));
    PP_TRY(pp_ops_check(ex, op, "y", y, PP_OPS_ACT, 3, d.n, d.t, d.c, 1, err));
    PP_TRY(pp_ops_check(ex, op, "lse", lse, PP_F32, 3, d.n, d.heads, d.t, 1, err));
    PP_TRY(pp_ops_check(ex, op, "dy", dy, PP_OPS_ACT, 3, d.n, d.t, d.c, 1, err));
    PP_TRY(pp_ops_check_like(ex, op, "dqkv", dqkv, qkv, err));
    bool done = false;
    PP_TRY(attention_backward_bf16(ex, &d, qkv, y, lse, dy, dqkv, &done, err));
    if (done) return PP_OK;
    wide v = {0};
    const float *qkvd = WIDE_IN(v, qkv), *yd = WIDE_IN(v, y), *dyd = WIDE_IN(v, dy);
    float *dqkvd = WIDE_OUT(v, dqkv);
    return WIDE_RUN(v, DISPATCH(attention_backward, &d, qkvd, yd, lse->data, dyd, dqkvd, err));
}

/* ids (N, T) I32 and table (V, C) F32: *rows = N*T. */
static pp_status check_ids(pp_exec *ex, const char *op, const pp_tensor *ids,
                           const pp_tensor *table, const char *tname, int64_t *rows,
                           pp_error *err)
{
    if (!ids || ids->ndim != 2)
        return pp_error_set(err, PP_ERR_INVALID, "%s: ids must be 2-D (N, T)", op);
    PP_TRY(pp_ops_check(ex, op, "ids", ids, PP_I32, 2, ids->shape[0], ids->shape[1], 1, 1, err));
    if (!table || table->ndim != 2)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s must be 2-D (V, C)", op, tname);
    PP_TRY(pp_ops_check_f32(ex, op, tname, table, err));
    if (table->shape[0] > INT32_MAX || table->shape[1] > INT32_MAX)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s is too large", op, tname);
    *rows = ids->shape[0] * ids->shape[1];
    return PP_OK;
}

/* Every id in [0, vocab), checked where the host can read them (the CPU
 * backend's memory). */
static pp_status check_id_range(pp_exec *ex, const char *op, const pp_tensor *ids, int64_t vocab,
                                pp_error *err)
{
    if (ex->dev->id.kind != PP_DEVICE_CPU) return PP_OK;
    const int32_t *v = ids->data;
    const int64_t n = pp_tensor_numel(ids);
    for (int64_t i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= vocab)
            return pp_error_set(err, PP_ERR_INPUT,
                                "%s: token id %d at (%lld, %lld) is not below the vocabulary "
                                "size %lld",
                                op, (int)v[i], (long long)(i / ids->shape[1]),
                                (long long)(i % ids->shape[1]), (long long)vocab);
    return PP_OK;
}

/* An embedding op's operands: ids (N, T), the table (V, C) named tname and the
 * (N, T, C) activation named aname; whether the backend has the op (have);
 * then the ids' range. *rows = N*T, *v, *c the table's sizes. */
static pp_status check_embedding(pp_exec *ex, const char *op, bool have,
                                 const pp_tensor *ids, const pp_tensor *table, const char *tname,
                                 const pp_tensor *act, const char *aname, int64_t *rows,
                                 int64_t *v, int64_t *c, pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(check_ids(ex, op, ids, table, tname, rows, err));
    *v = table->shape[0];
    *c = table->shape[1];
    PP_TRY(pp_ops_check(ex, op, aname, act, PP_OPS_ACT, 3, ids->shape[0], ids->shape[1], *c, 1,
                        err));
    if (!have) return pp_ops_unsupported(ex, op, err);
    return check_id_range(ex, op, ids, *v, err);
}

pp_status pp_embedding_forward(pp_exec *ex, const pp_tensor *ids, const pp_tensor *table,
                               pp_tensor *y, pp_error *err)
{
    int64_t rows = 0, v = 0, c = 0;
    PP_TRY(check_embedding(ex, "embedding_forward", ENTRY(embedding_forward) != NULL, ids, table,
                           "table", y, "y", &rows, &v, &c, err));
    wide w = {0};
    float *yd = WIDE_OUT(w, y);
    return WIDE_RUN(w, DISPATCH(embedding_forward, rows, (int)v, (int)c, ids->data, table->data,
                                yd, err));
}

pp_status pp_embedding_backward(pp_exec *ex, const pp_tensor *ids, const pp_tensor *dy,
                                pp_tensor *dtable, pp_error *err)
{
    int64_t rows = 0, v = 0, c = 0;
    PP_TRY(check_embedding(ex, "embedding_backward", ENTRY(embedding_backward) != NULL, ids,
                           dtable, "dtable", dy, "dy", &rows, &v, &c, err));
    wide w = {0};
    const float *dyd = WIDE_IN(w, dy);
    return WIDE_RUN(w, DISPATCH(embedding_backward, rows, (int)v, (int)c, ids->data, dyd,
                                dtable->data, err));
}

/* x (N, T, C) and a table (P, C) with P >= T. */
static pp_status check_position(pp_exec *ex, const char *op, const char *xname,
                                const pp_tensor *x, const char *tname, const pp_tensor *table,
                                pp_error *err)
{
    if (!x || x->ndim != 3)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s must be 3-D (N, T, C)", op, xname);
    PP_TRY(pp_ops_check_act(ex, op, xname, x, err));
    if (!table || table->ndim != 2)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s must be 2-D (P, C)", op, tname);
    PP_TRY(pp_ops_check_f32(ex, op, tname, table, err));
    if (table->shape[1] != x->shape[2] || table->shape[0] < x->shape[1])
        return pp_error_set(err, PP_ERR_INVALID,
                            "%s: %s of %lld positions of %lld features does not cover %s's %lld "
                            "positions of %lld",
                            op, tname, (long long)table->shape[0], (long long)table->shape[1],
                            xname, (long long)x->shape[1], (long long)x->shape[2]);
    if (x->shape[1] > INT32_MAX || x->shape[2] > INT32_MAX)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s is too large", op, xname);
    return PP_OK;
}

pp_status pp_position_forward(pp_exec *ex, const pp_tensor *x, const pp_tensor *table,
                              pp_tensor *y, pp_error *err)
{
    const char *op = "position_forward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(check_position(ex, op, "x", x, "table", table, err));
    PP_TRY(pp_ops_check_like(ex, op, "y", y, x, err));
    wide v = {.keep_layout = true};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(position_forward, x->shape[0], (int)x->shape[1],
                                (int)x->shape[2], xd, table->data, yd, err));
}

pp_status pp_position_backward(pp_exec *ex, const pp_tensor *dy, pp_tensor *dtable,
                               pp_error *err)
{
    const char *op = "position_backward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(check_position(ex, op, "dy", dy, "dtable", dtable, err));
    wide v = {0};
    const float *dyd = WIDE_IN(v, dy);
    return WIDE_RUN(v, DISPATCH(position_backward, dy->shape[0], (int)dy->shape[1],
                                (int)dy->shape[2], dyd, dtable->data, err));
}
