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

static pp_status backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                          pp_error *err)
{
    conv_impl *c = u->impl;
    pp_input_saved *s = sv;
    return pp_conv_layer_backward(u, ex, &c->conv, &s->x, dy, dx, err);
}

const pp_unit_kind_ops pp_unit_conv_ops = {
    .name = "conv",
    .impl_size = sizeof(conv_impl),
    .saved_size = sizeof(pp_input_saved),
    .check = check,
    .shape = shape,
    .build = build,
    .saved = pp_unit_keep_input,
    .flops = flops,
    .forward = forward,
    .backward = backward,
};
