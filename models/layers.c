/*
 * layers.c - the pieces unit kinds share: declaring and initialising named
 * parameters and buffers, the conv and batch-norm layers inside units, and
 * the saved-list helpers (unit_kind.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "models/bn_defer.h"
#include "models/rng.h"
#include "models/unit_kind.h"

#define BN_EPS 1e-5f

/* ---- declarations ------------------------------------------------------------- */

/* Fills entry e on the host, from the stream of (seed, stream), and uploads it. */
static pp_status fill_entry(pp_unit *u, int e, pp_fill how, double a, uint64_t seed,
                            const char *stream, pp_error *err)
{
    pp_tensor *t = &u->value[e];
    int64_t n = pp_tensor_numel(t);
    size_t bytes = pp_tensor_bytes(t);
    void *host = malloc(bytes ? bytes : 1);
    if (!host)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory initialising %s", u->names[e]);
    if (t->dtype == PP_I64) {
        int64_t *p = host;
        for (int64_t i = 0; i < n; i++) p[i] = (int64_t)a;
    } else {
        float *p = host;
        pp_rng rng;
        pp_rng_init(&rng, seed, stream);
        for (int64_t i = 0; i < n; i++) {
            switch (how) {
            case PP_FILL_NORMAL: p[i] = (float)(a * pp_rng_normal(&rng)); break;
            case PP_FILL_UNIFORM: p[i] = (float)(a * (2.0 * pp_rng_uniform(&rng) - 1.0)); break;
            case PP_FILL_CONST: p[i] = (float)a; break;
            }
        }
    }
    pp_status s = pp_tensor_from_host(t, host, bytes, err);
    free(host);
    return s;
}

pp_status pp_unit_declare(pp_unit *u, const char *module, const char *leaf, pp_dtype dtype,
                          int ndim, const int64_t *shape, bool learnable, pp_fill fill, double a,
                          uint64_t seed, int *index, pp_error *err)
{
    if (u->n_entries >= PP_UNIT_MAX_ENTRIES)
        return pp_error_set(err, PP_ERR_INTERNAL, "%s: too many tensors", u->spec.name);
    int e = u->n_entries;
    const char *scope = u->spec.scope;
    int len = module && *module
                  ? snprintf(u->names[e], sizeof u->names[e], "%s%s.%s.%s", scope, u->spec.name,
                             module, leaf)
                  : snprintf(u->names[e], sizeof u->names[e], "%s%s.%s", scope, u->spec.name,
                             leaf);
    if (len < 0 || (size_t)len >= sizeof u->names[e])
        return pp_error_set(err, PP_ERR_INVALID, "%s: tensor name too long", u->spec.name);
    if (index) *index = e;
    if (!u->dev) { /* counting mode: the shape is all that is needed */
        pp_tensor *t = &u->value[e];
        *t = (pp_tensor){.dtype = dtype, .ndim = ndim};
        for (int i = 0; i < PP_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 1;
        u->entry[e] = (pp_named_tensor){.name = u->names[e], .value = t,
                                        .grad = learnable ? &u->grad[e] : NULL};
        u->n_entries++;
        return PP_OK;
    }
    PP_TRY(pp_tensor_alloc(&u->value[e], u->dev, dtype, ndim, shape, err));
    u->n_entries++;
    if (learnable) PP_TRY(pp_tensor_zeros(&u->grad[e], u->dev, dtype, ndim, shape, err));
    u->entry[e] = (pp_named_tensor){.name = u->names[e], .value = &u->value[e],
                                    .grad = learnable ? &u->grad[e] : NULL};
    return fill_entry(u, e, fill, a, seed, u->names[e], err);
}

pp_status pp_unit_declare_tied(pp_unit *u, const char *leaf, const char *source, pp_dtype dtype,
                               int ndim, const int64_t *shape, pp_fill fill, double a,
                               uint64_t seed, int *index, pp_error *err)
{
    int e;
    PP_TRY(pp_unit_declare(u, NULL, leaf, dtype, ndim, shape, true, PP_FILL_CONST, 0.0, seed, &e,
                           err));
    if (index) *index = e;
    u->entry[e].tied_to = source;
    return u->dev ? fill_entry(u, e, fill, a, seed, source, err) : PP_OK;
}

pp_status pp_unit_add_conv(pp_unit *u, pp_conv_layer *c, const char *module, int cin, int cout,
                           int kernel, int stride, int pad, uint64_t seed, pp_error *err)
{
    *c = (pp_conv_layer){
        .e = 0, .cin = cin, .cout = cout, .kernel = kernel, .stride = stride, .pad = pad};
    /* kaiming_normal_(mode="fan_out", nonlinearity="relu") */
    double fan_out = (double)cout * kernel * kernel;
    return pp_unit_declare(u, module, "weight", PP_F32, 4, (int64_t[]){cout, cin, kernel, kernel},
                           true, PP_FILL_NORMAL, sqrt(2.0 / fan_out), seed, &c->e, err);
}

pp_status pp_unit_add_conv_spec(pp_unit *u, pp_conv_layer *c, uint64_t seed, pp_error *err)
{
    const pp_unit_spec *s = &u->spec;
    if (s->init == PP_INIT_MODEL && !s->bias)
        return pp_unit_add_conv(u, c, NULL, s->in_c, s->out_c, s->kernel, s->stride, s->pad, seed,
                                err);
    *c = (pp_conv_layer){0, s->in_c, s->out_c, s->kernel, s->stride, s->pad, s->bias, 0};
    const double fan_in = (double)s->in_c * s->kernel * s->kernel;
    pp_fill wfill = PP_FILL_UNIFORM, bfill = PP_FILL_UNIFORM;
    double wa = 1.0 / sqrt(fan_in), ba = wa;
    if (s->init == PP_INIT_NORMAL) {
        wfill = PP_FILL_NORMAL, wa = s->init_std;
        bfill = PP_FILL_CONST, ba = 0.0;
    } else if (s->init == PP_INIT_MODEL) { /* torchvision's conv rule, PyTorch's bias */
        wfill = PP_FILL_NORMAL, wa = sqrt(2.0 / ((double)s->out_c * s->kernel * s->kernel));
    }
    PP_TRY(pp_unit_declare(u, NULL, "weight", PP_F32, 4,
                           (int64_t[]){s->out_c, s->in_c, s->kernel, s->kernel}, true, wfill, wa,
                           seed, &c->e, err));
    if (!s->bias) return PP_OK;
    return pp_unit_declare(u, NULL, "bias", PP_F32, 1, (int64_t[]){s->out_c}, true, bfill, ba,
                           seed, &c->b, err);
}

pp_status pp_unit_add_bn(pp_unit *u, pp_bn_layer *b, const char *module, int c, uint64_t seed,
                         pp_error *err)
{
    return pp_unit_add_bn_gamma(u, b, module, c, 1.0, seed, err);
}

pp_status pp_unit_add_bn_gamma(pp_unit *u, pp_bn_layer *b, const char *module, int c,
                               double gamma, uint64_t seed, pp_error *err)
{
    if (u->n_bn >= PP_UNIT_MAX_BN)
        return pp_error_set(err, PP_ERR_INTERNAL, "%s: too many batch norms", u->spec.name);
    *b = (pp_bn_layer){.c = c};
    const int64_t shape[1] = {c};
    static const char *const leaf[5] = {"weight", "bias", "running_mean", "running_var",
                                        "num_batches_tracked"};
    const double init[5] = {gamma, 0.0, 0.0, 1.0, 0.0};
    for (int i = 0; i < 5; i++)
        PP_TRY(pp_unit_declare(u, module, leaf[i], i == 4 ? PP_I64 : PP_F32, i == 4 ? 0 : 1, shape,
                               i < 2, PP_FILL_CONST, init[i], seed, i == 0 ? &b->e : NULL, err));
    u->entry[b->e].norm = u->entry[b->e + 1].norm = true; /* weight-decay groups */
    u->bn[u->n_bn++] = b;
    return PP_OK;
}

/* ---- shapes and saved lists ------------------------------------------------------- */

int64_t pp_unit_window_out(int64_t h, int kernel, int stride, int pad)
{
    return h + 2 * pad < kernel ? 0 : (h + 2 * pad - kernel) / stride + 1;
}

bool pp_unit_window_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int cout,
                          int kernel, int stride, int pad, int *out_ndim, int64_t *out,
                          const char **why)
{
    if (in_ndim != 4 || in[1] != s->in_c || in[2] < 1 || in[3] < 1) {
        *why = "does not have the unit's channels (N, C, H, W)";
        return false;
    }
    *out_ndim = 4;
    out[1] = cout;
    out[2] = pp_unit_window_out(in[2], kernel, stride, pad);
    out[3] = pp_unit_window_out(in[3], kernel, stride, pad);
    if (out[2] < 1 || out[3] < 1) {
        *why = "is too small";
        return false;
    }
    return true;
}

bool pp_unit_elementwise_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in,
                               int *out_ndim, int64_t *out, const char **why)
{
    if (in_ndim == 4) return pp_unit_same_shape(s, in_ndim, in, out_ndim, out, why);
    if (in_ndim != 2 || in[1] != s->in_c) {
        *why = "does not have the unit's channels ((N, C) or (N, C, H, W))";
        return false;
    }
    *out_ndim = 2;
    out[1] = in[1];
    return true;
}

pp_tensor pp_unit_as_image(const pp_tensor *t)
{
    pp_tensor v = *t;
    if (v.ndim == 2) {
        v.ndim = 4;
        v.shape[2] = v.shape[3] = 1;
    }
    return v;
}

bool pp_unit_check_channels(const pp_unit_spec *s)
{
    return s->in_c > 0;
}

bool pp_unit_same_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                        int64_t *out, const char **why)
{
    return pp_unit_window_shape(s, in_ndim, in, s->in_c, 1, 1, 0, out_ndim, out, why);
}

pp_status pp_unit_build_nothing(pp_unit *u, uint64_t seed, pp_error *err)
{
    return PP_OK;
}

void pp_unit_saved_nothing(const pp_unit *u, int in_ndim, const int64_t *in, void *saved,
                           pp_saved_list *l)
{
}

void pp_unit_keep_input(const pp_unit *u, int in_ndim, const int64_t *in, void *saved,
                         pp_saved_list *l)
{
    pp_input_saved *s = saved;
    pp_saved_add_io(l, &s->x, PP_SAVED_INPUT, pp_unit_act_dtype(u), in_ndim, in);
}

void pp_saved_add_io(pp_saved_list *l, pp_tensor *field, pp_saved_from from, pp_dtype dtype,
                     int ndim, const int64_t *shape)
{
    if (l->n >= PP_UNIT_MAX_SAVED) {
        l->overflow = true;
        return;
    }
    pp_saved_tensor *s = &l->item[l->n++];
    *s = (pp_saved_tensor){.t = field, .from = from, .dtype = dtype, .ndim = ndim};
    for (int i = 0; i < PP_MAX_DIMS; i++) s->shape[i] = i < ndim ? shape[i] : 1;
}

void pp_saved_add(pp_saved_list *l, pp_tensor *field, pp_dtype dtype, int ndim,
                  const int64_t *shape)
{
    pp_saved_add_io(l, field, PP_SAVED_NEW, dtype, ndim, shape);
}

void pp_saved_add_grad(pp_saved_list *l, pp_tensor *field, pp_dtype dtype, int ndim,
                       const int64_t *shape)
{
    pp_saved_add_io(l, field, PP_SAVED_GRAD, dtype, ndim, shape);
    pp_saved_until_w(l);
}

void pp_saved_until_w(pp_saved_list *l)
{
    if (l->n > 0 && !l->overflow) l->item[l->n - 1].until_w = true;
}

pp_dtype pp_unit_act_dtype(const pp_unit *u)
{
    return pp_unit_spec_in_dtype(&u->spec);
}

pp_status pp_unit_weight_like(pp_unit *u, pp_exec *ex, int e, const pp_tensor *x, pp_tensor *w,
                              pp_error *err)
{
    *w = u->value[e];
    w->owns = false;
    w->stream = NULL;
    if (x->dtype == w->dtype) return PP_OK;
    pp_tensor *low = &u->low[e];
    if (low->data && low->dtype != x->dtype) return pp_error_set(err, PP_ERR_INVALID,
                                                                 "%s: weights in two dtypes",
                                                                 u->names[e]);
    if (!low->data) {
        PP_TRY(pp_tensor_alloc(low, u->dev, x->dtype, w->ndim, w->shape, err));
        low->layout = pp_unit_spec_layout(&u->spec, low->ndim); /* a conv's: KRSC with NHWC */
        u->low_fresh[e] = false;
    }
    if (!u->low_fresh[e]) {
        PP_TRY(pp_cast(ex, &u->value[e], low, err));
        u->low_fresh[e] = true;
    }
    *w = *low;
    w->owns = false;
    return PP_OK;
}

pp_status pp_unit_alloc_like(pp_tensor *t, pp_exec *ex, const pp_tensor *like, pp_error *err)
{
    PP_TRY(pp_tensor_alloc_on(t, ex, like->dtype, like->ndim, like->shape, err));
    t->layout = like->layout;
    return PP_OK;
}

/* ---- conv and batch-norm layers ---------------------------------------------------- */

static pp_status conv_desc(const pp_conv_layer *c, const pp_tensor *x, pp_conv2d_desc *d,
                           pp_error *err)
{
    return pp_conv2d_desc_init(d, (int)x->shape[0], (int)x->shape[1], (int)x->shape[2],
                               (int)x->shape[3], c->cout, c->kernel, c->stride, c->pad, err);
}

pp_status pp_conv_layer_forward(pp_unit *u, pp_exec *ex, const pp_conv_layer *c,
                                const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    pp_conv2d_desc d;
    pp_tensor w;
    PP_TRY(conv_desc(c, x, &d, err));
    PP_TRY(pp_unit_weight_like(u, ex, c->e, x, &w, err));
    pp_status st = pp_conv2d_forward(ex, &d, x, &w, y, err);
    pp_tensor_free(&w);
    PP_TRY(st);
    return c->has_bias ? pp_channel_bias_forward(ex, &u->value[c->b], y, err) : PP_OK;
}

pp_status pp_conv_layer_backward_weight(pp_unit *u, pp_exec *ex, const pp_conv_layer *c,
                                        const pp_tensor *x, const pp_tensor *dy, pp_tensor *grad,
                                        pp_error *err)
{
    pp_conv2d_desc d;
    PP_TRY(conv_desc(c, x, &d, err));
    PP_TRY(pp_conv2d_backward_filter(ex, &d, x, dy, &grad[c->e], err));
    return c->has_bias ? pp_channel_bias_backward(ex, dy, &grad[c->b], err) : PP_OK;
}

pp_status pp_conv_layer_backward_data(pp_unit *u, pp_exec *ex, const pp_conv_layer *c,
                                      const pp_tensor *dy, pp_tensor *dx, bool accumulate,
                                      pp_error *err)
{
    pp_conv2d_desc d;
    PP_TRY(conv_desc(c, dx, &d, err)); /* dx has the input's shape */
    pp_tensor w;
    PP_TRY(pp_unit_weight_like(u, ex, c->e, dy, &w, err));
    pp_status st = accumulate ? pp_conv2d_backward_data_accumulate(ex, &d, dy, &w, dx, err)
                              : pp_conv2d_backward_data(ex, &d, dy, &w, dx, err);
    pp_tensor_free(&w);
    return st;
}

pp_status pp_conv_layer_backward(pp_unit *u, pp_exec *ex, const pp_conv_layer *c,
                                 const pp_tensor *x, const pp_tensor *dy, pp_tensor *dx,
                                 pp_tensor *grad, pp_error *err)
{
    PP_TRY(pp_conv_layer_backward_weight(u, ex, c, x, dy, grad, err));
    return dx ? pp_conv_layer_backward_data(u, ex, c, dy, dx, false, err) : PP_OK;
}

pp_status pp_conv_layer_backward_accumulate(pp_unit *u, pp_exec *ex, const pp_conv_layer *c,
                                            const pp_tensor *x, const pp_tensor *dy,
                                            pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    PP_TRY(pp_conv_layer_backward_weight(u, ex, c, x, dy, grad, err));
    return pp_conv_layer_backward_data(u, ex, c, dy, dx, true, err);
}

static pp_bn_desc bn_desc(const pp_tensor *x)
{
    return (pp_bn_desc){.n = (int)x->shape[0],
                        .c = (int)x->shape[1],
                        .h = (int)x->shape[2],
                        .w = (int)x->shape[3],
                        .eps = BN_EPS,
                        .momentum = PP_UNIT_BN_MOMENTUM};
}

/* The running statistics a training batch norm updates: the unit's; with
 * deferred statistics the micro-batch's row of the slots (d's momentum 1:
 * the row, zero until then, receives the batch statistics); in a recomputed
 * forward (stats_frozen) copies of the unit's in rm, rv (allocated here in
 * ex's order; the caller frees them), so the unit's stay as the first
 * forward left them. */
static pp_status bn_running(pp_unit *u, pp_exec *ex, pp_bn_layer *b, pp_bn_desc *d, pp_tensor *rm,
                            pp_tensor *rv, pp_tensor **mean, pp_tensor **var, pp_error *err)
{
    pp_tensor *v = &u->value[b->e];
    *mean = &v[2];
    *var = &v[3];
    if (u->bn_deferred && !u->stats_frozen) {
        b->hw = (int64_t)d->h * d->w;
        d->momentum = 1.0f;
        return pp_bn_defer_rows(b, u->cur_mb, rm, rv, mean, var, err);
    }
    if (!u->stats_frozen) return PP_OK;
    PP_TRY(pp_unit_alloc_like(rm, ex, &v[2], err));
    PP_TRY(pp_unit_alloc_like(rv, ex, &v[3], err));
    PP_TRY(pp_copy(ex, &v[2], rm, err));
    PP_TRY(pp_copy(ex, &v[3], rv, err));
    *mean = rm;
    *var = rv;
    return PP_OK;
}

pp_status pp_bn_layer_forward(pp_unit *u, pp_exec *ex, pp_bn_layer *b, const pp_tensor *x,
                              pp_tensor *y, pp_tensor *mean, pp_tensor *invstd, pp_error *err)
{
    pp_tensor *v = &u->value[b->e];
    pp_bn_desc d = bn_desc(x);
    if (!mean) return pp_batchnorm_forward_infer(ex, &d, x, &v[0], &v[1], &v[2], &v[3], y, err);
    pp_tensor rm = {0}, rv = {0}, *run_mean, *run_var;
    pp_status st = bn_running(u, ex, b, &d, &rm, &rv, &run_mean, &run_var, err);
    if (st == PP_OK)
        st = pp_batchnorm_forward_train(ex, &d, x, &v[0], &v[1], run_mean, run_var, y, mean,
                                        invstd, err);
    pp_tensor_free(&rm);
    pp_tensor_free(&rv);
    /* num_batches_tracked: counted on the host, added by pp_unit_sync_buffers (an
     * integer op in stream order would cost a launch per batch norm); deferred
     * statistics count at their commit */
    if (st == PP_OK && !u->stats_frozen && !u->bn_deferred) b->pending++;
    return st;
}

pp_status pp_bn_layer_forward_act(pp_unit *u, pp_exec *ex, pp_bn_layer *b, const pp_tensor *x,
                                  const pp_tensor *add, bool relu, pp_tensor *y, pp_tensor *mean,
                                  pp_tensor *invstd, pp_error *err)
{
    pp_tensor *v = &u->value[b->e];
    pp_bn_desc d = bn_desc(x);
    pp_tensor rm = {0}, rv = {0}, *run_mean = &v[2], *run_var = &v[3];
    pp_status st = mean ? bn_running(u, ex, b, &d, &rm, &rv, &run_mean, &run_var, err) : PP_OK;
    if (st == PP_OK)
        st = pp_batchnorm_forward_act(ex, &d, mean != NULL, x, &v[0], &v[1], run_mean, run_var,
                                      add, relu, y, mean, invstd, err);
    pp_tensor_free(&rm);
    pp_tensor_free(&rv);
    if (st == PP_OK && mean && !u->stats_frozen && !u->bn_deferred)
        b->pending++; /* as pp_bn_layer_forward */
    return st;
}

pp_status pp_bn_layer_backward_relu(pp_unit *u, pp_exec *ex, const pp_bn_layer *b,
                                    const pp_tensor *x, const pp_tensor *relu_y,
                                    const pp_tensor *dy, const pp_tensor *mean,
                                    const pp_tensor *invstd, pp_tensor *dx, pp_tensor *dgamma,
                                    pp_tensor *dbeta, pp_error *err)
{
    pp_bn_desc d = bn_desc(x);
    return pp_batchnorm_backward_relu(ex, &d, x, relu_y, dy, &u->value[b->e], mean, invstd, dx,
                                      dgamma, dbeta, err);
}

pp_status pp_bn_layer_backward_add_relu(pp_unit *u, pp_exec *ex, const pp_bn_layer *b,
                                        const pp_tensor *x, const pp_tensor *relu_y,
                                        const pp_tensor *dy, const pp_tensor *mean,
                                        const pp_tensor *invstd, pp_tensor *dx,
                                        pp_tensor *dgamma, pp_tensor *dbeta, pp_tensor *g,
                                        pp_error *err)
{
    pp_bn_desc d = bn_desc(x);
    return pp_batchnorm_backward_add_relu(ex, &d, x, relu_y, dy, &u->value[b->e], mean, invstd,
                                          dx, dgamma, dbeta, g, err);
}

pp_status pp_bn_layer_backward(pp_unit *u, pp_exec *ex, const pp_bn_layer *b, const pp_tensor *x,
                               const pp_tensor *dy, const pp_tensor *mean,
                               const pp_tensor *invstd, pp_tensor *dx, pp_tensor *dgamma,
                               pp_tensor *dbeta, pp_error *err)
{
    pp_bn_desc d = bn_desc(x);
    return pp_batchnorm_backward(ex, &d, x, dy, &u->value[b->e], mean, invstd, dx, dgamma, dbeta,
                                 err);
}

/* Row r of a (2, C) tensor, as a (C) view. */
static pp_tensor part_row(const pp_tensor *part, int r)
{
    pp_tensor v = *part;
    v.owns = false;
    v.ndim = 1;
    v.shape[0] = part->shape[1];
    v.shape[1] = 1;
    v.data = (char *)part->data + (size_t)r * (size_t)part->shape[1] * pp_dtype_size(part->dtype);
    return v;
}

void pp_bn_layer_grads(const pp_bn_layer *b, pp_tensor *grad, pp_tensor *part, pp_tensor *dgamma,
                       pp_tensor *dbeta)
{
    if (grad) {
        *dgamma = grad[b->e];
        *dbeta = grad[b->e + 1];
        dgamma->owns = dbeta->owns = false;
        return;
    }
    *dgamma = part_row(part, 0);
    *dbeta = part_row(part, 1);
}

pp_status pp_bn_layer_backward_weight(pp_exec *ex, const pp_bn_layer *b, const pp_tensor *part,
                                      pp_tensor *grad, pp_error *err)
{
    const pp_tensor dgamma = part_row(part, 0), dbeta = part_row(part, 1);
    PP_TRY(pp_accumulate(ex, &dgamma, &grad[b->e], err));
    return pp_accumulate(ex, &dbeta, &grad[b->e + 1], err);
}
