/*
 * layernorm.c - a layer norm over the width as a unit (GPT-2's ln_f):
 * (N, T, C) -> (N, T, C), weight (C) from 1 and, with bias, bias (C) from 0.
 * A split backward's input part gives dx and the parameters' gradients
 * into a (2, C) part that its weight part adds (the same bits as the whole
 * backward: ops.h's add-once contract).
 */
#include "models/transformer/gpt2.h"
#include "models/unit_kind.h"

typedef struct ln_impl {
    int w, b; /* entries: weight, bias (-1: none) */
} ln_impl;

typedef struct ln_saved {
    pp_tensor x;          /* (N, T, C) the input */
    pp_tensor mean, rstd; /* (N*T) */
    pp_tensor part;       /* (2, C): the parameters' gradients, input part to weight part */
} ln_saved;

static bool check(const pp_unit_spec *s)
{
    return s->in_c > 0 && s->out_c == s->in_c;
}

static pp_status build(pp_unit *u, uint64_t seed, pp_error *err)
{
    ln_impl *m = u->impl;
    const int64_t c = u->spec.in_c;
    m->b = -1;
    PP_TRY(pp_unit_declare(u, NULL, "weight", PP_F32, 1, &c, true, PP_FILL_CONST, 1.0, seed,
                           &m->w, err));
    u->entry[m->w].norm = true; /* the optimizer's norm group */
    if (!u->spec.bias) return PP_OK;
    PP_TRY(pp_unit_declare(u, NULL, "bias", PP_F32, 1, &c, true, PP_FILL_CONST, 0.0, seed, &m->b,
                           err));
    u->entry[m->b].norm = true;
    return PP_OK;
}

static void saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv, pp_saved_list *l)
{
    ln_saved *s = sv;
    const int64_t rows = in[0] * in[1];
    pp_saved_add_io(l, &s->x, PP_SAVED_INPUT, pp_unit_act_dtype(u), in_ndim, in);
    pp_saved_add(l, &s->mean, PP_F32, 1, &rows);
    pp_saved_add(l, &s->rstd, PP_F32, 1, &rows);
    pp_saved_add_grad(l, &s->part, PP_F32, 2, (int64_t[]){2, u->spec.in_c});
}

static void flops(const pp_unit_spec *s, int in_ndim, const int64_t *in, const int64_t *out,
                  int64_t *macs, int64_t *elementwise)
{
    *macs = 0;
    *elementwise = 8 * in[1] * s->in_c; /* statistics, normalise, scale, shift */
}

static pp_status forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y, void *sv,
                         pp_error *err)
{
    ln_impl *m = u->impl;
    ln_saved *s = sv;
    pp_tensor mean = {0}, rstd = {0};
    const int64_t rows = x->shape[0] * x->shape[1];
    pp_status st = PP_OK;
    if (!s) { /* inference: the statistics live during the call */
        st = pp_tensor_alloc_on(&mean, ex, PP_F32, 1, &rows, err);
        if (st == PP_OK) st = pp_tensor_alloc_on(&rstd, ex, PP_F32, 1, &rows, err);
    }
    if (st == PP_OK)
        st = pp_layernorm_forward(ex, PP_GPT2_LN_EPS, x, &u->value[m->w],
                                  m->b >= 0 ? &u->value[m->b] : NULL, y, s ? &s->mean : &mean,
                                  s ? &s->rstd : &rstd, err);
    pp_tensor_free(&mean);
    pp_tensor_free(&rstd);
    return st;
}

/* dx (a temporary when NULL) and the parameters' gradients into dg, db. */
static pp_status run_backward(pp_unit *u, pp_exec *ex, ln_saved *s, const pp_tensor *dy,
                              pp_tensor *dx, pp_tensor *dg, pp_tensor *db, pp_error *err)
{
    ln_impl *m = u->impl;
    pp_tensor tmp = {0};
    if (!dx) {
        PP_TRY(pp_unit_alloc_like(&tmp, ex, dy, err));
        dx = &tmp;
    }
    pp_status st = pp_layernorm_backward(ex, &s->x, dy, &u->value[m->w], &s->mean, &s->rstd, dx,
                                         dg, m->b >= 0 ? db : NULL, err);
    pp_tensor_free(&tmp);
    return st;
}

static pp_status backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                          pp_tensor *grad, pp_error *err)
{
    ln_impl *m = u->impl;
    return run_backward(u, ex, sv, dy, dx, &grad[m->w], m->b >= 0 ? &grad[m->b] : NULL, err);
}

static pp_status backward_input(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    ln_saved *s = sv;
    pp_tensor dg = pp_gpt2_part_row(&s->part, 0), db = pp_gpt2_part_row(&s->part, 1);
    PP_TRY(pp_zero(ex, &s->part, err));
    return run_backward(u, ex, s, dy, dx, &dg, &db, err);
}

static pp_status backward_weight(pp_unit *u, pp_exec *ex, void *sv, pp_tensor *grad,
                                 pp_error *err)
{
    ln_impl *m = u->impl;
    ln_saved *s = sv;
    pp_tensor dg = pp_gpt2_part_row(&s->part, 0), db = pp_gpt2_part_row(&s->part, 1);
    PP_TRY(pp_accumulate(ex, &dg, &grad[m->w], err));
    return m->b >= 0 ? pp_accumulate(ex, &db, &grad[m->b], err) : PP_OK;
}

const pp_unit_kind_ops pp_unit_layernorm_ops = {
    .name = "layer norm",
    .impl_size = sizeof(ln_impl),
    .saved_size = sizeof(ln_saved),
    .check = check,
    .shape = pp_gpt2_rows_shape,
    .build = build,
    .saved = saved,
    .flops = flops,
    .forward = forward,
    .backward = backward,
    .backward_input = backward_input,
    .backward_weight = backward_weight,
};
