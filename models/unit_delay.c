/*
 * unit_delay.c - the delay model's unit (delay.h): sleeps for its forward and
 * backward times in stream order and passes a small activation, y[n][j] =
 * mean(x[n]) / (j + 1) + 0.01 j, through a fixed (D, 1) mixing that is not a
 * parameter (only its input gradient is computed). A split backward sleeps
 * backward_input_ms in its input part and backward_weight_ms in its weight
 * part (half of backward_ms each when the spec does not give them); the
 * whole backward sleeps backward_ms.
 */
#include <stdlib.h>

#include "models/unit_kind.h"

typedef struct delay_impl {
    pp_tensor w, b; /* (D, 1) and (D) fixed mixing */
} delay_impl;

typedef struct delay_saved {
    pp_tensor mean; /* (N, 1) per-sample mean of the input */
} delay_saved;

static bool time_ok(double ms)
{
    return ms >= 0 && ms <= 3.6e6;
}

static bool check(const pp_unit_spec *s)
{
    return s->out_c > 0 && time_ok(s->forward_ms) && time_ok(s->backward_ms) &&
           (!s->split_ms || (time_ok(s->backward_input_ms) && time_ok(s->backward_weight_ms)));
}

/* The times of the split backward's parts: as given, else half of the
 * backward's each. */
static double input_ms(const pp_unit_spec *s)
{
    return s->split_ms ? s->backward_input_ms : s->backward_ms / 2;
}

static double weight_ms(const pp_unit_spec *s)
{
    return s->split_ms ? s->backward_weight_ms : s->backward_ms / 2;
}

static bool shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                  int64_t *out, const char **why)
{
    *out_ndim = 2;
    out[1] = s->out_c;
    return true;
}

static pp_status build(pp_unit *u, uint64_t seed, pp_error *err)
{
    if (!u->dev) return PP_OK; /* counting: no parameters */
    delay_impl *m = u->impl;
    int d = u->spec.out_c;
    float *host = malloc(2 * (size_t)d * sizeof *host);
    if (!host) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    for (int j = 0; j < d; j++) {
        host[j] = 1.0f / (float)(j + 1);
        host[d + j] = 0.01f * (float)j;
    }
    pp_status st = pp_tensor_alloc(&m->w, u->dev, PP_F32, 2, (int64_t[]){d, 1}, err);
    if (st == PP_OK) st = pp_tensor_alloc(&m->b, u->dev, PP_F32, 1, (int64_t[]){d}, err);
    if (st == PP_OK) st = pp_tensor_from_host(&m->w, host, (size_t)d * 4, err);
    if (st == PP_OK) st = pp_tensor_from_host(&m->b, host + d, (size_t)d * 4, err);
    free(host);
    return st;
}

static void release(pp_unit *u)
{
    delay_impl *m = u->impl;
    pp_tensor_free(&m->w);
    pp_tensor_free(&m->b);
}

static void saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv, pp_saved_list *l)
{
    delay_saved *s = sv;
    pp_saved_add(l, &s->mean, PP_F32, 2, (int64_t[]){in[0], 1});
}

static void flops(const pp_unit_spec *s, int in_ndim, const int64_t *in, const int64_t *out,
                  int64_t *macs, int64_t *elementwise)
{
}

/* Views any (N, ...) tensor as (N, 1, F, 1) for the per-sample mean. */
static pp_status flat_view(const pp_tensor *t, pp_tensor *v, pp_error *err)
{
    int64_t n = t->shape[0];
    return pp_tensor_reshape(t, 4, (int64_t[]){n, 1, pp_tensor_numel(t) / n, 1}, v, err);
}

static pp_status forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y, void *sv,
                         pp_error *err)
{
    delay_impl *m = u->impl;
    delay_saved *s = sv;
    PP_TRY(pp_delay(ex, u->spec.forward_ms, err));
    pp_tensor v, tmp = {0};
    pp_tensor *mean = s ? &s->mean : &tmp;
    PP_TRY(flat_view(x, &v, err));
    if (!s) PP_TRY(pp_tensor_alloc_on(&tmp, ex, PP_F32, 2, (int64_t[]){x->shape[0], 1}, err));
    pp_status st = pp_avgpool_forward(ex, &v, mean, err);
    if (st == PP_OK) st = pp_linear_forward(ex, mean, &m->w, &m->b, y, err);
    pp_tensor_free(&tmp);
    return st;
}

/* dx from dy (the input part's computation, B's bits). */
static pp_status input_gradient(pp_unit *u, pp_exec *ex, delay_saved *s, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    delay_impl *m = u->impl;
    pp_tensor dmean = {0}, v;
    pp_status st = pp_tensor_alloc_on(&dmean, ex, PP_F32, 2, s->mean.shape, err);
    if (st == PP_OK) st = pp_linear_backward_data(ex, &m->w, dy, &dmean, err);
    if (st == PP_OK) st = flat_view(dx, &v, err);
    if (st == PP_OK) st = pp_avgpool_backward(ex, &dmean, &v, err);
    pp_tensor_free(&dmean);
    return st;
}

static pp_status backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                          pp_tensor *grad, pp_error *err)
{
    PP_TRY(pp_delay(ex, u->spec.backward_ms, err));
    return dx ? input_gradient(u, ex, sv, dy, dx, err) : PP_OK;
}

static pp_status backward_input(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    PP_TRY(pp_delay(ex, input_ms(&u->spec), err));
    return dx ? input_gradient(u, ex, sv, dy, dx, err) : PP_OK;
}

static pp_status backward_weight(pp_unit *u, pp_exec *ex, void *sv, pp_tensor *grad,
                                 pp_error *err)
{
    return pp_delay(ex, weight_ms(&u->spec), err);
}

const pp_unit_kind_ops pp_unit_delay_ops = {
    .name = "delay",
    .impl_size = sizeof(delay_impl),
    .saved_size = sizeof(delay_saved),
    .check = check,
    .shape = shape,
    .build = build,
    .saved = saved,
    .flops = flops,
    .forward = forward,
    .backward = backward,
    .backward_input = backward_input,
    .backward_weight = backward_weight,
    .release = release,
};
