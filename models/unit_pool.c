/*
 * unit_pool.c - pooling and reshaping units: max pool (the imagenet stem's and
 * a sequential model's), the adaptive average pool to 1x1 before fc
 * (flattened to (N, C)), window average pool, flatten, and the identity that
 * stands in for the cifar stem's absent max pool (it keeps the name maxpool so
 * plans are the same for both stems).
 */
#include "models/unit_kind.h"

/* ---- max pool ---------------------------------------------------------------------- */

typedef struct maxpool_saved {
    pp_tensor x, y; /* input and output */
    pp_tensor idx;  /* (N, C, P, Q) I32 argmax indices */
} maxpool_saved;

static bool maxpool_check(const pp_unit_spec *s)
{
    return s->in_c > 0 && s->kernel > 0 && s->stride > 0 && s->pad >= 0 && 2 * s->pad <= s->kernel;
}

static bool maxpool_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                          int64_t *out, const char **why)
{
    return pp_unit_window_shape(s, in_ndim, in, s->in_c, s->kernel, s->stride, s->pad, out_ndim,
                                out, why);
}

static void maxpool_saved_list(const pp_unit *u, int in_ndim, const int64_t *in, void *sv,
                               pp_saved_list *l)
{
    maxpool_saved *s = sv;
    int out_ndim;
    int64_t out[PP_MAX_DIMS] = {in[0], 1, 1, 1};
    const char *why;
    if (!maxpool_shape(&u->spec, in_ndim, in, &out_ndim, out, &why)) return;
    pp_saved_add_io(l, &s->x, PP_SAVED_INPUT, pp_unit_act_dtype(u), in_ndim, in);
    pp_saved_add_io(l, &s->y, PP_SAVED_OUTPUT, pp_unit_act_dtype(u), out_ndim, out);
    pp_saved_add(l, &s->idx, PP_I32, out_ndim, out);
}

static void maxpool_flops(const pp_unit_spec *s, int in_ndim, const int64_t *in,
                          const int64_t *out, int64_t *macs, int64_t *elementwise)
{
    *elementwise = out[1] * out[2] * out[3] * s->kernel * s->kernel;
}

static pp_status pool_desc(const pp_unit *u, const pp_tensor *x, pp_pool_desc *d, pp_error *err)
{
    return pp_pool_desc_init(d, (int)x->shape[0], (int)x->shape[1], (int)x->shape[2],
                             (int)x->shape[3], u->spec.kernel, u->spec.stride, u->spec.pad, err);
}

static pp_status maxpool_forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                                 void *sv, pp_error *err)
{
    maxpool_saved *s = sv;
    pp_pool_desc d;
    PP_TRY(pool_desc(u, x, &d, err));
    pp_tensor tmp = {0};
    pp_tensor *idx = s ? &s->idx : &tmp;
    if (!s) PP_TRY(pp_tensor_alloc_on(&tmp, ex, PP_I32, 4, y->shape, err));
    pp_status st = pp_maxpool_forward(ex, &d, x, y, idx, err);
    pp_tensor_free(&tmp);
    return st;
}

static pp_status maxpool_backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                  pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    maxpool_saved *s = sv;
    if (!dx) return PP_OK;
    pp_pool_desc d;
    PP_TRY(pool_desc(u, &s->x, &d, err));
    return pp_maxpool_backward(ex, &d, &s->x, &s->y, dy, &s->idx, dx, err);
}

const pp_unit_kind_ops pp_unit_maxpool_ops = {
    .name = "max pool",
    .saved_size = sizeof(maxpool_saved),
    .check = maxpool_check,
    .shape = maxpool_shape,
    .build = pp_unit_build_nothing,
    .saved = maxpool_saved_list,
    .flops = maxpool_flops,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};

/* ---- identity ------------------------------------------------------------------------ */

static void identity_flops(const pp_unit_spec *s, int in_ndim, const int64_t *in,
                           const int64_t *out, int64_t *macs, int64_t *elementwise)
{
}

static pp_status identity_forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                                  void *sv, pp_error *err)
{
    return pp_copy(ex, x, y, err);
}

static pp_status identity_backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                   pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    return dx ? pp_copy(ex, dy, dx, err) : PP_OK;
}

const pp_unit_kind_ops pp_unit_identity_ops = {
    .name = "identity",
    .check = pp_unit_check_channels,
    .shape = pp_unit_same_shape,
    .build = pp_unit_build_nothing,
    .saved = pp_unit_saved_nothing,
    .flops = identity_flops,
    .forward = identity_forward,
    .backward = identity_backward,
};

/* ---- adaptive average pool to 1x1 ------------------------------------------------------ */

static bool avgpool_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                          int64_t *out, const char **why)
{
    if (!pp_unit_same_shape(s, in_ndim, in, out_ndim, out, why)) return false;
    *out_ndim = 2;
    out[2] = out[3] = 1;
    return true;
}

static void avgpool_flops(const pp_unit_spec *s, int in_ndim, const int64_t *in,
                          const int64_t *out, int64_t *macs, int64_t *elementwise)
{
    *elementwise = in[1] * in[2] * in[3];
}

static pp_status avgpool_forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                                 void *sv, pp_error *err)
{
    return pp_avgpool_forward(ex, x, y, err);
}

static pp_status avgpool_backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                  pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    return dx ? pp_avgpool_backward(ex, dy, dx, err) : PP_OK;
}

const pp_unit_kind_ops pp_unit_avgpool_ops = {
    .name = "average pool",
    .check = pp_unit_check_channels,
    .shape = avgpool_shape,
    .build = pp_unit_build_nothing,
    .saved = pp_unit_saved_nothing,
    .flops = avgpool_flops,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
};

/* ---- window average pool ------------------------------------------------------------ */

/* Nothing is saved: backward needs only the input's shape, which dx has. */
static void avgpool2d_flops(const pp_unit_spec *s, int in_ndim, const int64_t *in,
                            const int64_t *out, int64_t *macs, int64_t *elementwise)
{
    *elementwise = out[1] * out[2] * out[3] * s->kernel * s->kernel;
}

static pp_status avgpool2d_forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                                   void *sv, pp_error *err)
{
    pp_pool_desc d;
    PP_TRY(pool_desc(u, x, &d, err));
    return pp_avgpool2d_forward(ex, &d, x, y, err);
}

static pp_status avgpool2d_backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                    pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    if (!dx) return PP_OK;
    pp_pool_desc d;
    PP_TRY(pool_desc(u, dx, &d, err));
    return pp_avgpool2d_backward(ex, &d, dy, dx, err);
}

const pp_unit_kind_ops pp_unit_avgpool2d_ops = {
    .name = "average pool",
    .check = maxpool_check,
    .shape = maxpool_shape,
    .build = pp_unit_build_nothing,
    .saved = pp_unit_saved_nothing,
    .flops = avgpool2d_flops,
    .forward = avgpool2d_forward,
    .backward = avgpool2d_backward,
};

/* ---- flatten ---------------------------------------------------------------------------- */

/* (N, C, H, W) -> (N, C*H*W) in memory order, as torch.flatten(x, 1) */
static bool flatten_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                          int64_t *out, const char **why)
{
    if (!pp_unit_elementwise_shape(s, in_ndim, in, out_ndim, out, why)) return false;
    *out_ndim = 2;
    out[1] = in_ndim == 4 ? in[1] * in[2] * in[3] : in[1];
    out[2] = out[3] = 1;
    return true;
}

/* t's data under another shape of as many elements, in NCHW order */
static pp_tensor reshaped(const pp_tensor *t, const pp_tensor *like)
{
    pp_tensor v = *t;
    v.ndim = like->ndim;
    for (int i = 0; i < PP_MAX_DIMS; i++) v.shape[i] = like->shape[i];
    v.layout = PP_NCHW;
    return v;
}

/* The 2-D side viewed in the 4-D shape, NCHW: copying between it and the 4-D
 * side lays an NHWC tensor out in torch.flatten's order. */
static pp_status flatten_forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                                 void *sv, pp_error *err)
{
    pp_tensor yv = reshaped(y, x);
    return pp_copy(ex, x, &yv, err);
}

static pp_status flatten_backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                  pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    if (!dx) return PP_OK;
    const pp_tensor dyv = reshaped(dy, dx);
    return pp_copy(ex, &dyv, dx, err);
}

const pp_unit_kind_ops pp_unit_flatten_ops = {
    .name = "flatten",
    .check = pp_unit_check_channels,
    .shape = flatten_shape,
    .build = pp_unit_build_nothing,
    .saved = pp_unit_saved_nothing,
    .flops = identity_flops,
    .forward = flatten_forward,
    .backward = flatten_backward,
};
