/* unit_conv.c - a convolution as a unit: ResNet's bias-free stem (conv1), or a
 * layer of a sequential model with its bias and initialisation rule. */
#include "models/unit_kind.h"

typedef struct conv_impl {
    pp_conv_layer conv;
} conv_impl;

static bool check(const pp_unit_spec *s)
{
    return s->in_c > 0 && s->out_c > 0 && s->kernel > 0 && s->stride > 0 && s->pad >= 0 &&
           (s->init != PP_INIT_NORMAL || s->init_std > 0);
}

static bool shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                  int64_t *out, const char **why)
{
    return pp_unit_window_shape(s, in_ndim, in, s->out_c, s->kernel, s->stride, s->pad, out_ndim,
                                out, why);
}

static pp_status build(pp_unit *u, uint64_t seed, pp_error *err)
{
    conv_impl *c = u->impl;
    return pp_unit_add_conv_spec(u, &c->conv, seed, err);
}

static void flops(const pp_unit_spec *s, int in_ndim, const int64_t *in, const int64_t *out,
                  int64_t *macs, int64_t *elementwise)
{
    *macs = out[1] * out[2] * out[3] * s->in_c * s->kernel * s->kernel;
    if (s->bias) *elementwise = out[1] * out[2] * out[3];
}

static pp_status forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y, void *sv,
                         pp_error *err)
{
    conv_impl *c = u->impl;
    return pp_conv_layer_forward(u, ex, &c->conv, x, y, err);
}

/* What a training forward keeps, and the split backward's output gradient. */
typedef struct conv_saved {
    pp_tensor x;  /* the input (kept until the weight part) */
    pp_tensor dy; /* the output gradient, from the input part to the weight part */
} conv_saved;

static void saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv, pp_saved_list *l)
{
    conv_saved *s = sv;
    int out_ndim;
    int64_t out[PP_MAX_DIMS] = {in[0], 1, 1, 1};
    const char *why;
    if (!shape(&u->spec, in_ndim, in, &out_ndim, out, &why)) return;
    pp_saved_add_io(l, &s->x, PP_SAVED_INPUT, pp_unit_act_dtype(u), in_ndim, in);
    pp_saved_until_w(l);
    pp_saved_add_grad(l, &s->dy, pp_unit_spec_out_dtype(&u->spec), out_ndim, out);
}

static pp_status backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                          pp_tensor *grad, pp_error *err)
{
    conv_impl *c = u->impl;
    conv_saved *s = sv;
    return pp_conv_layer_backward(u, ex, &c->conv, &s->x, dy, dx, grad, err);
}

static pp_status backward_input(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    conv_impl *c = u->impl;
    conv_saved *s = sv;
    PP_TRY(pp_copy(ex, dy, &s->dy, err));
    return dx ? pp_conv_layer_backward_data(u, ex, &c->conv, dy, dx, false, err) : PP_OK;
}

static pp_status backward_weight(pp_unit *u, pp_exec *ex, void *sv, pp_tensor *grad,
                                 pp_error *err)
{
    conv_impl *c = u->impl;
    conv_saved *s = sv;
    return pp_conv_layer_backward_weight(u, ex, &c->conv, &s->x, &s->dy, grad, err);
}

const pp_unit_kind_ops pp_unit_conv_ops = {
    .name = "conv",
    .impl_size = sizeof(conv_impl),
    .saved_size = sizeof(conv_saved),
    .check = check,
    .shape = shape,
    .build = build,
    .saved = saved,
    .flops = flops,
    .forward = forward,
    .backward = backward,
    .backward_input = backward_input,
    .backward_weight = backward_weight,
};
