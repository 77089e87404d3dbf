/*
 * unit_block.c - torchvision's residual blocks as units: BasicBlock (3x3,
 * 3x3; expansion 1) and Bottleneck v1.5 (1x1, 3x3 with the stride, 1x1;
 * expansion 4).
 *
 * A block is a chain of n_main (conv, bn) pairs with a ReLU after every pair
 * but the last, then out = relu(bn_last + identity), where identity is x or
 * downsample(x) = bn(conv1x1/stride(x)).
 */
#include <string.h>

#include "models/unit_kind.h"

#define MAX_MAIN 3
#define DS 3 /* index of the downsample conv and bn */

typedef struct block_impl {
    int n_main;                 /* main-path (conv, bn) pairs: 2 or 3 */
    pp_conv_layer conv[4];      /* main path 0..n_main-1, downsample at DS */
    pp_bn_layer bn[4];
} block_impl;

/* What a training forward keeps for backward. */
typedef struct block_saved {
    pp_tensor x;                     /* the block input */
    pp_tensor conv_out[MAX_MAIN];    /* each main conv's output (its batch norm's input) */
    pp_tensor relu_out[MAX_MAIN - 1]; /* each inner ReLU's output (the next conv's input) */
    pp_tensor ds_conv_out;           /* the downsample conv's output */
    pp_tensor out;                   /* the block output (gates the final ReLU) */
    pp_tensor mean[4], invstd[4];    /* (C) batch statistics of each batch norm */
    /* from the split backward's input part to its weight part (with x and relu_out,
     * the convolutions' inputs): */
    pp_tensor dconv[4];              /* each convolution's output gradient */
    pp_tensor dbn[4];                /* (2, C) each batch norm's dgamma, dbeta */
} block_saved;

static bool check(const pp_unit_spec *s, int expansion)
{
    return s->in_c > 0 && s->planes > 0 && s->out_c == expansion * s->planes && s->stride > 0 &&
           (s->downsample || (s->stride == 1 && s->in_c == s->out_c));
}

static bool basic_check(const pp_unit_spec *s)
{
    return check(s, 1);
}

static bool bottleneck_check(const pp_unit_spec *s)
{
    return check(s, 4);
}

static bool shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                  int64_t *out, const char **why)
{
    return pp_unit_window_shape(s, in_ndim, in, s->out_c, 3, s->stride, 1, out_ndim, out, why);
}

static pp_status add_downsample(pp_unit *u, block_impl *b, uint64_t seed, pp_error *err)
{
    const pp_unit_spec *s = &u->spec;
    if (!s->downsample) return PP_OK;
    PP_TRY(pp_unit_add_conv(u, &b->conv[DS], "downsample.0", s->in_c, s->out_c, 1, s->stride, 0,
                            seed, err));
    return pp_unit_add_bn(u, &b->bn[DS], "downsample.1", s->out_c, seed, err);
}

static pp_status basic_build(pp_unit *u, uint64_t seed, pp_error *err)
{
    const pp_unit_spec *s = &u->spec;
    block_impl *b = u->impl;
    b->n_main = 2;
    PP_TRY(pp_unit_add_conv(u, &b->conv[0], "conv1", s->in_c, s->planes, 3, s->stride, 1, seed,
                            err));
    PP_TRY(pp_unit_add_bn(u, &b->bn[0], "bn1", s->planes, seed, err));
    PP_TRY(pp_unit_add_conv(u, &b->conv[1], "conv2", s->planes, s->planes, 3, 1, 1, seed, err));
    PP_TRY(pp_unit_add_bn_gamma(u, &b->bn[1], "bn2", s->planes, s->zero_last_bn ? 0.0 : 1.0,
                                seed, err));
    return add_downsample(u, b, seed, err);
}

static pp_status bottleneck_build(pp_unit *u, uint64_t seed, pp_error *err)
{
    const pp_unit_spec *s = &u->spec;
    block_impl *b = u->impl;
    b->n_main = 3;
    PP_TRY(pp_unit_add_conv(u, &b->conv[0], "conv1", s->in_c, s->planes, 1, 1, 0, seed, err));
    PP_TRY(pp_unit_add_bn(u, &b->bn[0], "bn1", s->planes, seed, err));
    PP_TRY(pp_unit_add_conv(u, &b->conv[1], "conv2", s->planes, s->planes, 3, s->stride, 1, seed,
                            err));
    PP_TRY(pp_unit_add_bn(u, &b->bn[1], "bn2", s->planes, seed, err));
    PP_TRY(pp_unit_add_conv(u, &b->conv[2], "conv3", s->planes, s->out_c, 1, 1, 0, seed, err));
    PP_TRY(pp_unit_add_bn_gamma(u, &b->bn[2], "bn3", s->out_c, s->zero_last_bn ? 0.0 : 1.0, seed,
                                err));
    return add_downsample(u, b, seed, err);
}

/* Output shape of conv layer c for an (N, C, H, W) input shape. */
static void conv_shape(const pp_conv_layer *c, const int64_t *in, int64_t *out)
{
    out[0] = in[0];
    out[1] = c->cout;
    out[2] = pp_unit_window_out(in[2], c->kernel, c->stride, c->pad);
    out[3] = pp_unit_window_out(in[3], c->kernel, c->stride, c->pad);
}

/* Whether conv and batch norm i (0..n_main-1 main path, DS downsample) exist. */
static bool has_bn(const pp_unit *u, int i)
{
    const block_impl *b = u->impl;
    return i < b->n_main ? true : i == DS && u->spec.downsample;
}

static void saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv, pp_saved_list *l)
{
    const block_impl *b = u->impl;
    block_saved *s = sv;
    int64_t cur[PP_MAX_DIMS], next[PP_MAX_DIMS];
    memcpy(cur, in, sizeof cur);
    const pp_dtype act = pp_unit_act_dtype(u);
    pp_saved_add_io(l, &s->x, PP_SAVED_INPUT, act, 4, in);
    pp_saved_until_w(l);
    for (int i = 0; i < b->n_main; i++) {
        conv_shape(&b->conv[i], cur, next);
        pp_saved_add(l, &s->conv_out[i], act, 4, next);
        pp_saved_add_grad(l, &s->dconv[i], act, 4, next);
        if (i < b->n_main - 1) {
            pp_saved_add(l, &s->relu_out[i], act, 4, next);
            pp_saved_until_w(l);
        }
        memcpy(cur, next, sizeof cur);
    }
    if (u->spec.downsample) {
        pp_saved_add(l, &s->ds_conv_out, act, 4, cur);
        pp_saved_add_grad(l, &s->dconv[DS], act, 4, cur);
    }
    pp_saved_add_io(l, &s->out, PP_SAVED_OUTPUT, act, 4, cur);
    for (int i = 0; i < 4; i++) {
        if (!has_bn(u, i)) continue;
        const int64_t c = b->bn[i].c;
        pp_saved_add(l, &s->mean[i], PP_F32, 1, &c);
        pp_saved_add(l, &s->invstd[i], PP_F32, 1, &c);
        pp_saved_add_grad(l, &s->dbn[i], PP_F32, 2, (int64_t[]){2, c});
    }
}

static void flops(const pp_unit_spec *s, int in_ndim, const int64_t *in, const int64_t *out,
                  int64_t *macs, int64_t *elementwise)
{
    const bool bottle = s->kind == PP_UNIT_BOTTLENECK;
    const int64_t hw = in[2] * in[3], pq = out[2] * out[3];
    const int64_t p = s->planes, o = s->out_c, c = s->in_c;
    const int64_t out_e = o * pq;
    /* per main conv: input channels, output channels, kernel, output spatial size */
    const int64_t mc[3][4] = {
        {c, p, bottle ? 1 : 3, bottle ? hw : pq},
        {p, bottle ? p : o, 3, pq},
        {p, o, 1, pq},
    };
    const int nm = bottle ? 3 : 2;
    for (int i = 0; i < nm; i++) {
        int64_t conv_out_e = mc[i][1] * mc[i][3];
        *macs += conv_out_e * mc[i][0] * mc[i][2] * mc[i][2];
        *elementwise += 2 * conv_out_e;                /* batch norm */
        if (i < nm - 1) *elementwise += conv_out_e;    /* relu */
    }
    if (s->downsample) {
        *macs += out_e * c;
        *elementwise += 2 * out_e;
    }
    *elementwise += 2 * out_e; /* residual add, relu */
}

/* Allocates t (x's dtype, the given shape) unless it is already allocated (training
 * forwards find their saved tensors allocated; inference allocates them here
 * as temporaries). */
static pp_status ensure_like(pp_tensor *t, pp_exec *ex, const pp_tensor *x, const int64_t *shape,
                             pp_error *err)
{
    if (t->data) return PP_OK;
    PP_TRY(pp_tensor_alloc_on(t, ex, x->dtype, 4, shape, err));
    t->layout = x->layout;
    return PP_OK;
}

static pp_status forward_into(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                              block_saved *s, bool train, pp_error *err)
{
    block_impl *b = u->impl;
    pp_tensor ds = {0};
    pp_status st = PP_OK;
    const pp_tensor *in = x;
    const int n = b->n_main;
    for (int i = 0; i < n && st == PP_OK; i++) {
        pp_tensor *c = &s->conv_out[i];
        pp_tensor *a = i < n - 1 ? &s->relu_out[i] : NULL;
        int64_t shape[PP_MAX_DIMS];
        conv_shape(&b->conv[i], in->shape, shape);
        st = ensure_like(c, ex, x, shape, err);
        if (st == PP_OK) st = pp_conv_layer_forward(u, ex, &b->conv[i], in, c, err);
        if (i == n - 1) break; /* the last pair ends with the residual add, below */
        if (st == PP_OK) st = ensure_like(a, ex, x, shape, err);
        if (st == PP_OK)
            st = pp_bn_layer_forward_act(u, ex, &b->bn[i], c, NULL, true, a,
                                         train ? &s->mean[i] : NULL, train ? &s->invstd[i] : NULL,
                                         err);
        in = a;
    }
    const pp_tensor *identity = x;
    if (st == PP_OK && u->spec.downsample) {
        st = ensure_like(&s->ds_conv_out, ex, x, y->shape, err);
        if (st == PP_OK) st = pp_conv_layer_forward(u, ex, &b->conv[DS], x, &s->ds_conv_out, err);
        if (st == PP_OK) st = pp_unit_alloc_like(&ds, ex, &s->ds_conv_out, err);
        if (st == PP_OK)
            st = pp_bn_layer_forward(u, ex, &b->bn[DS], &s->ds_conv_out, &ds,
                                     train ? &s->mean[DS] : NULL, train ? &s->invstd[DS] : NULL,
                                     err);
        identity = &ds;
    }
    /* out = relu(bn_last(conv_out) + identity) */
    if (st == PP_OK)
        st = pp_bn_layer_forward_act(u, ex, &b->bn[n - 1], &s->conv_out[n - 1], identity, true, y,
                                     train ? &s->mean[n - 1] : NULL,
                                     train ? &s->invstd[n - 1] : NULL, err);
    pp_tensor_free(&ds);
    return st;
}

static pp_status forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y, void *sv,
                         pp_error *err)
{
    if (sv) return forward_into(u, ex, x, y, sv, true, err);
    block_saved tmp = {0}; /* inference: the intermediate tensors are temporaries */
    pp_status st = forward_into(u, ex, x, y, &tmp, false, err);
    for (int i = 0; i < MAX_MAIN; i++) pp_tensor_free(&tmp.conv_out[i]);
    for (int i = 0; i < MAX_MAIN - 1; i++) pp_tensor_free(&tmp.relu_out[i]);
    pp_tensor_free(&tmp.ds_conv_out);
    return st;
}

/* The identity branch's backward: dx = g (g_in_dx: there already), or through
 * the downsample's batch norm and convolution (into s->dconv[DS] and s->dbn[DS]
 * without grad: the split backward's input part). */
static pp_status identity_backward(pp_unit *u, pp_exec *ex, block_saved *s, const pp_tensor *g,
                                   bool g_in_dx, pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    block_impl *b = u->impl;
    const bool split = grad == NULL;
    if (!u->spec.downsample) return dx && !g_in_dx ? pp_copy(ex, g, dx, err) : PP_OK;
    pp_tensor tmp = {0}, dgamma, dbeta;
    pp_tensor *dcd = split ? &s->dconv[DS] : &tmp;
    pp_status st = split ? PP_OK : pp_unit_alloc_like(&tmp, ex, &s->ds_conv_out, err);
    pp_bn_layer_grads(&b->bn[DS], grad, &s->dbn[DS], &dgamma, &dbeta);
    if (st == PP_OK)
        st = pp_bn_layer_backward(u, ex, &b->bn[DS], &s->ds_conv_out, g, &s->mean[DS],
                                  &s->invstd[DS], dcd, &dgamma, &dbeta, err);
    if (st == PP_OK && split && dx)
        st = pp_conv_layer_backward_data(u, ex, &b->conv[DS], dcd, dx, false, err);
    else if (st == PP_OK && !split)
        st = pp_conv_layer_backward(u, ex, &b->conv[DS], &s->x, dcd, dx, grad, err);
    pp_tensor_free(&tmp);
    return st;
}

/* The backward of a block: dx (NULL: not needed) and, with grad, the
 * parameter gradients (grad[e] +=). Without grad (the split backward's input
 * part) the same dx, each convolution's output gradient kept in s->dconv
 * (what its weight gradient needs, with its input) and each batch norm's
 * parameter gradients in s->dbn, for backward_weight. */
static pp_status backward_core(pp_unit *u, pp_exec *ex, block_saved *s, const pp_tensor *dy,
                               pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    block_impl *b = u->impl;
    const bool split = grad == NULL;
    pp_tensor g = {0}, tmp = {0}, d = {0}, dgamma, dbeta;
    const pp_tensor *x = &s->x;
    pp_status st = PP_OK;
    if (split) { /* the batch norms' parameter gradients add into zeros */
        pp_tensor *zero[4];
        int nz = 0;
        for (int i = 0; i < 4; i++)
            if (has_bn(u, i)) zero[nz++] = &s->dbn[i];
        st = pp_zero_multi(ex, nz, zero, err);
    }
    /* g = dL/d(bn_last + identity), the gradient of both branches' outputs.
     * Without a downsample it is also the identity branch's gradient, so it
     * goes straight into dx (when dx is like it), read by the main branch's
     * backward before its first convolution adds its own gradient to dx. */
    const bool g_in_dx = !u->spec.downsample && dx && dx->dtype == s->out.dtype &&
                         pp_tensor_same_shape(dx, &s->out) &&
                         pp_tensor_effective_layout(dx) == pp_tensor_effective_layout(&s->out);
    pp_tensor *gp = g_in_dx ? dx : &g;
    if (st == PP_OK && !g_in_dx) st = pp_unit_alloc_like(&g, ex, &s->out, err);
    /* The last batch norm's backward first, through the block's ReLU, keeping
     * g (one pass over dy and the ReLU's output: the bits of pp_relu_backward
     * into g, then the batch norm's backward from g). */
    const int last = b->n_main - 1;
    pp_tensor dlast = {0};
    pp_tensor *dcl = split ? &s->dconv[last] : &dlast;
    if (st == PP_OK && !split) st = pp_unit_alloc_like(&dlast, ex, &s->conv_out[last], err);
    pp_bn_layer_grads(&b->bn[last], grad, &s->dbn[last], &dgamma, &dbeta);
    if (st == PP_OK)
        st = pp_bn_layer_backward_add_relu(u, ex, &b->bn[last], &s->conv_out[last], &s->out, dy,
                                           &s->mean[last], &s->invstd[last], dcl, &dgamma,
                                           &dbeta, gp, err);
    /* d holds dL/d(relu output i) for i < last; the last's batch norm is done */
    for (int i = last; i >= 0 && st == PP_OK; i--) {
        pp_tensor *dc = i == last ? dcl : split ? &s->dconv[i] : &tmp;
        if (i != last) {
            if (!split) st = pp_unit_alloc_like(&tmp, ex, &s->conv_out[i], err);
            pp_bn_layer_grads(&b->bn[i], grad, &s->dbn[i], &dgamma, &dbeta);
            if (st == PP_OK)
                st = pp_bn_layer_backward_relu(u, ex, &b->bn[i], &s->conv_out[i],
                                               &s->relu_out[i], &d, &s->mean[i], &s->invstd[i],
                                               dc, &dgamma, &dbeta, err);
            pp_tensor_free(&d);
        }
        if (st != PP_OK) break;
        if (i > 0) {
            const pp_tensor *in = &s->relu_out[i - 1];
            st = pp_unit_alloc_like(&d, ex, in, err);
            if (st == PP_OK && split)
                st = pp_conv_layer_backward_data(u, ex, &b->conv[i], dc, &d, false, err);
            else if (st == PP_OK)
                st = pp_conv_layer_backward(u, ex, &b->conv[i], in, dc, &d, grad, err);
        } else if (split) {
            if (dx) st = pp_conv_layer_backward_data(u, ex, &b->conv[0], dc, dx, true, err);
        } else if (dx) {
            st = pp_conv_layer_backward_accumulate(u, ex, &b->conv[0], x, dc, dx, grad, err);
        } else {
            st = pp_conv_layer_backward(u, ex, &b->conv[0], x, dc, NULL, grad, err);
        }
        pp_tensor_free(&tmp);
        if (i != last) continue;
        /* The identity branch's gradient goes into dx before the main branch's
         * first convolution (i = 0 < last: blocks have 2 or 3 pairs) adds its
         * own (no separate accumulate pass); here, once the last convolution's
         * gradient is out, so that no more is held at once than before. */
        pp_tensor_free(&dlast);
        if (st == PP_OK) st = identity_backward(u, ex, s, &g, g_in_dx, dx, grad, err);
    }
    pp_tensor_free(&dlast);
    pp_tensor_free(&tmp);
    pp_tensor_free(&d);
    pp_tensor_free(&g);
    return st;
}

static pp_status backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                          pp_tensor *grad, pp_error *err)
{
    return backward_core(u, ex, sv, dy, dx, grad, err);
}

static pp_status backward_input(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    return backward_core(u, ex, sv, dy, dx, NULL, err);
}

/* The weight part: each convolution's weight gradient from its input and
 * output gradient, each batch norm's from the input part's. */
static pp_status backward_weight(pp_unit *u, pp_exec *ex, void *sv, pp_tensor *grad,
                                 pp_error *err)
{
    block_impl *b = u->impl;
    block_saved *s = sv;
    for (int i = 0; i < 4; i++) {
        if (!has_bn(u, i)) continue;
        const pp_tensor *in = i == 0 || i == DS ? &s->x : &s->relu_out[i - 1];
        PP_TRY(pp_conv_layer_backward_weight(u, ex, &b->conv[i], in, &s->dconv[i], grad, err));
        PP_TRY(pp_bn_layer_backward_weight(ex, &b->bn[i], &s->dbn[i], grad, err));
    }
    return PP_OK;
}

const pp_unit_kind_ops pp_unit_basic_ops = {
    .name = "basic block",
    .impl_size = sizeof(block_impl),
    .saved_size = sizeof(block_saved),
    .check = basic_check,
    .shape = shape,
    .build = basic_build,
    .saved = saved,
    .flops = flops,
    .forward = forward,
    .backward = backward,
    .backward_input = backward_input,
    .backward_weight = backward_weight,
};

const pp_unit_kind_ops pp_unit_bottleneck_ops = {
    .name = "bottleneck block",
    .impl_size = sizeof(block_impl),
    .saved_size = sizeof(block_saved),
    .check = bottleneck_check,
    .shape = shape,
    .build = bottleneck_build,
    .saved = saved,
    .flops = flops,
    .forward = forward,
    .backward = backward,
    .backward_input = backward_input,
    .backward_weight = backward_weight,
};
