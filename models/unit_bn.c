/* unit_bn.c - a batch norm as a unit: over the channels of images (the stem's
 * bn1, BatchNorm2d) or over the features of (N, F) (BatchNorm1d), which runs as
 * images of 1x1. */
#include "models/unit_kind.h"

typedef struct bn_impl {
    pp_bn_layer bn;
} bn_impl;

typedef struct bn_saved {
    pp_tensor x;            /* the input */
    pp_tensor mean, invstd; /* (C) batch statistics */
    pp_tensor dparams;      /* (2, C) dgamma, dbeta of the micro-batch, from the split
                               backward's input part to its weight part */
} bn_saved;

static pp_status build(pp_unit *u, uint64_t seed, pp_error *err)
{
    bn_impl *b = u->impl;
    return pp_unit_add_bn(u, &b->bn, NULL, u->spec.in_c, seed, err);
}

static void saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv, pp_saved_list *l)
{
    bn_saved *s = sv;
    const int64_t c = u->spec.in_c;
    pp_saved_add_io(l, &s->x, PP_SAVED_INPUT, pp_unit_act_dtype(u), in_ndim, in);
    pp_saved_add(l, &s->mean, PP_F32, 1, &c);
    pp_saved_add(l, &s->invstd, PP_F32, 1, &c);
    pp_saved_add_grad(l, &s->dparams, PP_F32, 2, (int64_t[]){2, c});
}

static void flops(const pp_unit_spec *s, int in_ndim, const int64_t *in, const int64_t *out,
                  int64_t *macs, int64_t *elementwise)
{
    *elementwise = 2 * in[1] * in[2] * in[3];
}

static pp_status forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y, void *sv,
                         pp_error *err)
{
    bn_impl *b = u->impl;
    bn_saved *s = sv;
    const pp_tensor x4 = pp_unit_as_image(x);
    pp_tensor y4 = pp_unit_as_image(y);
    return pp_bn_layer_forward(u, ex, &b->bn, &x4, &y4, s ? &s->mean : NULL,
                               s ? &s->invstd : NULL, err);
}

/* The forward followed by a ReLU, as one pass: y = relu(bn(x)). */
static pp_status forward_relu(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                              void *sv, pp_error *err)
{
    bn_impl *b = u->impl;
    bn_saved *s = sv;
    const pp_tensor x4 = pp_unit_as_image(x);
    pp_tensor y4 = pp_unit_as_image(y);
    return pp_bn_layer_forward_act(u, ex, &b->bn, &x4, NULL, true, &y4, s ? &s->mean : NULL,
                                   s ? &s->invstd : NULL, err);
}

/* dx from dy, the gradient of the output or, with relu_y, of relu_y =
 * relu(output); the parameter gradients added to grad's, or (grad NULL: the
 * split backward's input part) into s->dparams, zeroed first. */
static pp_status backward_from(pp_unit *u, pp_exec *ex, bn_saved *s, const pp_tensor *relu_y,
                               const pp_tensor *dy, pp_tensor *dx, pp_tensor *grad,
                               pp_error *err)
{
    bn_impl *b = u->impl;
    pp_tensor tmp = {0}, dgamma, dbeta;
    pp_tensor *out = dx;
    if (!grad) PP_TRY(pp_zero(ex, &s->dparams, err));
    pp_bn_layer_grads(&b->bn, grad, &s->dparams, &dgamma, &dbeta);
    if (!out) { /* the parameter gradients still need dx's computation */
        PP_TRY(pp_unit_alloc_like(&tmp, ex, &s->x, err));
        out = &tmp;
    }
    const pp_tensor x4 = pp_unit_as_image(&s->x), dy4 = pp_unit_as_image(dy);
    pp_tensor out4 = pp_unit_as_image(out);
    pp_status st;
    if (relu_y) {
        const pp_tensor r4 = pp_unit_as_image(relu_y);
        st = pp_bn_layer_backward_relu(u, ex, &b->bn, &x4, &r4, &dy4, &s->mean, &s->invstd, &out4,
                                       &dgamma, &dbeta, err);
    } else {
        st = pp_bn_layer_backward(u, ex, &b->bn, &x4, &dy4, &s->mean, &s->invstd, &out4, &dgamma,
                                  &dbeta, err);
    }
    pp_tensor_free(&tmp);
    return st;
}

static pp_status backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                          pp_tensor *grad, pp_error *err)
{
    return backward_from(u, ex, sv, NULL, dy, dx, grad, err);
}

static pp_status backward_relu(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *relu_y,
                               const pp_tensor *dy, pp_tensor *dx, pp_tensor *grad,
                               pp_error *err)
{
    return backward_from(u, ex, sv, relu_y, dy, dx, grad, err);
}

static pp_status backward_input(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    return backward_from(u, ex, sv, NULL, dy, dx, NULL, err);
}

static pp_status backward_input_relu(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *relu_y,
                                     const pp_tensor *dy, pp_tensor *dx, pp_error *err)
{
    return backward_from(u, ex, sv, relu_y, dy, dx, NULL, err);
}

static pp_status backward_weight(pp_unit *u, pp_exec *ex, void *sv, pp_tensor *grad,
                                 pp_error *err)
{
    bn_impl *b = u->impl;
    bn_saved *s = sv;
    return pp_bn_layer_backward_weight(ex, &b->bn, &s->dparams, grad, err);
}

const pp_unit_kind_ops pp_unit_bn_ops = {
    .name = "batch norm",
    .impl_size = sizeof(bn_impl),
    .saved_size = sizeof(bn_saved),
    .check = pp_unit_check_channels,
    .shape = pp_unit_elementwise_shape,
    .build = build,
    .saved = saved,
    .flops = flops,
    .forward = forward,
    .backward = backward,
    .backward_input = backward_input,
    .backward_weight = backward_weight,
    .forward_relu = forward_relu,
    .backward_relu = backward_relu,
    .backward_input_relu = backward_input_relu,
};
