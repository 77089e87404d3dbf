/* unit_relu.c - ReLU and sigmoid as units (images or features). */
#include "models/unit_kind.h"

typedef struct relu_saved {
    pp_tensor y; /* the output (its sign gates the gradient) */
} relu_saved;

static void saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv, pp_saved_list *l)
{
    relu_saved *s = sv;
    pp_saved_add_io(l, &s->y, PP_SAVED_OUTPUT, pp_unit_act_dtype(u), in_ndim, in);
}

static void flops(const pp_unit_spec *s, int in_ndim, const int64_t *in, const int64_t *out,
                  int64_t *macs, int64_t *elementwise)
{
    *elementwise = in[1] * in[2] * in[3];
}

static pp_status forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y, void *sv,
                         pp_error *err)
{
    return pp_relu_forward(ex, x, y, err);
}

static pp_status backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                          pp_tensor *grad, pp_error *err)
{
    relu_saved *s = sv;
    return dx ? pp_relu_backward(ex, &s->y, dy, dx, err) : PP_OK;
}

const pp_unit_kind_ops pp_unit_relu_ops = {
    .name = "relu",
    .saved_size = sizeof(relu_saved),
    .check = pp_unit_check_channels,
    .shape = pp_unit_elementwise_shape,
    .build = pp_unit_build_nothing,
    .saved = saved,
    .flops = flops,
    .forward = forward,
    .backward = backward,
};

/* ---- sigmoid ------------------------------------------------------------------------ */

static pp_status sigmoid_forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                                 void *sv, pp_error *err)
{
    /* keeps the output again (saved): the gradient is dy * y * (1 - y) */
    return pp_sigmoid_forward(ex, x, y, err);
}

static pp_status sigmoid_backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                  pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    relu_saved *s = sv;
    return dx ? pp_sigmoid_backward(ex, &s->y, dy, dx, err) : PP_OK;
}

static void sigmoid_flops(const pp_unit_spec *s, int in_ndim, const int64_t *in,
                          const int64_t *out, int64_t *macs, int64_t *elementwise)
{
    *elementwise = 4 * in[1] * in[2] * in[3]; /* exp, add, divide, negate */
}

const pp_unit_kind_ops pp_unit_sigmoid_ops = {
    .name = "sigmoid",
    .saved_size = sizeof(relu_saved),
    .check = pp_unit_check_channels,
    .shape = pp_unit_elementwise_shape,
    .build = pp_unit_build_nothing,
    .saved = saved,
    .flops = sigmoid_flops,
    .forward = sigmoid_forward,
    .backward = sigmoid_backward,
};
