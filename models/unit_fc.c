/* unit_fc.c - the linear layer with bias (fc) as a unit: (N, in) -> (N, out). */
#include <math.h>

#include "models/unit_kind.h"

typedef struct fc_impl {
    int w, b; /* entries: weight (out, in), bias (out) */
} fc_impl;

static bool check(const pp_unit_spec *s)
{
    return s->in_c > 0 && s->out_c > 0 && (s->init != PP_INIT_NORMAL || s->init_std > 0);
}

static bool shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                  int64_t *out, const char **why)
{
    if (in_ndim != 2 || in[1] != s->in_c) {
        *why = "is not (N, in_features)";
        return false;
    }
    *out_ndim = 2;
    out[1] = s->out_c;
    return true;
}

static pp_status build(pp_unit *u, uint64_t seed, pp_error *err)
{
    const pp_unit_spec *s = &u->spec;
    fc_impl *f = u->impl;
    /* torch.nn.Linear (torchvision keeps it): weight and bias uniform(-1/sqrt(in),
     * 1/sqrt(in)); or weight normal(0, std) and bias 0 */
    const bool normal = s->init == PP_INIT_NORMAL;
    double bound = 1.0 / sqrt((double)s->in_c);
    PP_TRY(pp_unit_declare(u, NULL, "weight", PP_F32, 2, (int64_t[]){s->out_c, s->in_c}, true,
                           normal ? PP_FILL_NORMAL : PP_FILL_UNIFORM, normal ? s->init_std : bound,
                           seed, &f->w, err));
    return pp_unit_declare(u, NULL, "bias", PP_F32, 1, (int64_t[]){s->out_c}, true,
                           normal ? PP_FILL_CONST : PP_FILL_UNIFORM, normal ? 0.0 : bound, seed,
                           &f->b, err);
}

static void flops(const pp_unit_spec *s, int in_ndim, const int64_t *in, const int64_t *out,
                  int64_t *macs, int64_t *elementwise)
{
    *macs = (int64_t)s->in_c * s->out_c;
    *elementwise = s->out_c;
}

static pp_status forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y, void *sv,
                         pp_error *err)
{
    fc_impl *f = u->impl;
    pp_tensor w;
    PP_TRY(pp_unit_weight_like(u, ex, f->w, x, &w, err));
    pp_status st = pp_linear_forward(ex, x, &w, &u->value[f->b], y, err);
    pp_tensor_free(&w);
    return st;
}

/* What a training forward keeps, and the split backward's output gradient. */
typedef struct fc_saved {
    pp_tensor x;  /* (N, in) the input (kept until the weight part) */
    pp_tensor dy; /* (N, out) the output gradient, from the input part to the weight part */
} fc_saved;

static void saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv, pp_saved_list *l)
{
    fc_saved *s = sv;
    pp_saved_add_io(l, &s->x, PP_SAVED_INPUT, pp_unit_act_dtype(u), in_ndim, in);
    pp_saved_until_w(l);
    pp_saved_add_grad(l, &s->dy, pp_unit_spec_out_dtype(&u->spec), 2,
                      (int64_t[]){in[0], u->spec.out_c});
}

static pp_status backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                          pp_tensor *grad, pp_error *err)
{
    fc_impl *f = u->impl;
    fc_saved *s = sv;
    pp_tensor w;
    PP_TRY(pp_unit_weight_like(u, ex, f->w, &s->x, &w, err));
    pp_status st = pp_linear_backward(ex, &s->x, &w, dy, dx, &grad[f->w], &grad[f->b], err);
    pp_tensor_free(&w);
    return st;
}

static pp_status backward_input(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    fc_impl *f = u->impl;
    fc_saved *s = sv;
    PP_TRY(pp_copy(ex, dy, &s->dy, err));
    if (!dx) return PP_OK;
    pp_tensor w;
    PP_TRY(pp_unit_weight_like(u, ex, f->w, &s->x, &w, err));
    pp_status st = pp_linear_backward_data(ex, &w, dy, dx, err);
    pp_tensor_free(&w);
    return st;
}

static pp_status backward_weight(pp_unit *u, pp_exec *ex, void *sv, pp_tensor *grad,
                                 pp_error *err)
{
    fc_impl *f = u->impl;
    fc_saved *s = sv;
    return pp_linear_backward_weights(ex, &s->x, &s->dy, &grad[f->w], &grad[f->b], err);
}

const pp_unit_kind_ops pp_unit_fc_ops = {
    .name = "linear",
    .impl_size = sizeof(fc_impl),
    .saved_size = sizeof(fc_saved),
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
