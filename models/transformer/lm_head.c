/*
 * lm_head.c - GPT-2's output head as a unit: logits (N, T, vocab) = x W^T
 * for x (N, T, C) and weight W (vocab, C), no bias (the token embedding's
 * layout). Tied (spec.tied, GPT-2's default), W is a copy of
 * transformer.wte.weight: it starts equal to it and its entry says so
 * (pp_named_tensor.tied_to), so whoever holds both sums the two gradients
 * and refreshes the copy (pipeline/tied.c); its checkpoint name is then the
 * embedding's. The input is kept until the weight part of a split backward,
 * and so is the logits' gradient (N, T, vocab) between its two parts.
 */
#include "models/transformer/gpt2.h"
#include "models/unit_kind.h"

typedef struct head_impl {
    int w; /* entry: weight (vocab, C) */
} head_impl;

typedef struct head_saved {
    pp_tensor x;  /* (N, T, C) the input (kept until the weight part) */
    pp_tensor dy; /* (N, T, vocab) the logits' gradient, input part to weight part */
} head_saved;

static bool check(const pp_unit_spec *s)
{
    return s->in_c > 0 && s->vocab > 0 && s->out_c == s->vocab && s->init_std > 0;
}

static pp_status build(pp_unit *u, uint64_t seed, pp_error *err)
{
    head_impl *m = u->impl;
    const pp_unit_spec *s = &u->spec;
    const int64_t shape[2] = {s->vocab, s->in_c};
    if (s->tied)
        return pp_unit_declare_tied(u, "weight", PP_GPT2_WTE_WEIGHT, PP_F32, 2, shape,
                                    PP_FILL_NORMAL, s->init_std, seed, &m->w, err);
    return pp_unit_declare(u, NULL, "weight", PP_F32, 2, shape, true, PP_FILL_NORMAL,
                           s->init_std, seed, &m->w, err);
}

static void saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv, pp_saved_list *l)
{
    head_saved *s = sv;
    pp_saved_add_io(l, &s->x, PP_SAVED_INPUT, pp_unit_act_dtype(u), in_ndim, in);
    pp_saved_until_w(l);
    pp_saved_add_grad(l, &s->dy, pp_unit_spec_out_dtype(&u->spec), 3, (int64_t[]){in[0], in[1], u->spec.vocab});
}

static void flops(const pp_unit_spec *s, int in_ndim, const int64_t *in, const int64_t *out,
                  int64_t *macs, int64_t *elementwise)
{
    *macs = in[1] * (int64_t)s->in_c * s->vocab;
    *elementwise = 0;
}

static pp_status forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y, void *sv,
                         pp_error *err)
{
    head_impl *m = u->impl;
    pp_tensor w;
    PP_TRY(pp_unit_weight_like(u, ex, m->w, x, &w, err));
    return pp_dense_forward(ex, PP_WEIGHT_OUT_IN, x, &w, NULL, y, err);
}

static pp_status backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                          pp_tensor *grad, pp_error *err)
{
    head_impl *m = u->impl;
    head_saved *s = sv;
    pp_tensor w;
    PP_TRY(pp_unit_weight_like(u, ex, m->w, &s->x, &w, err));
    return pp_dense_backward(ex, PP_WEIGHT_OUT_IN, &w, &s->x, dy, NULL, dx, &grad[m->w], NULL,
                             err);
}

static pp_status backward_input(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    head_impl *m = u->impl;
    head_saved *s = sv;
    PP_TRY(pp_copy(ex, dy, &s->dy, err));
    pp_tensor w;
    PP_TRY(pp_unit_weight_like(u, ex, m->w, &s->x, &w, err));
    return dx ? pp_dense_backward_data(ex, PP_WEIGHT_OUT_IN, &w, dy, dx, err) : PP_OK;
}

static pp_status backward_weight(pp_unit *u, pp_exec *ex, void *sv, pp_tensor *grad,
                                 pp_error *err)
{
    head_impl *m = u->impl;
    head_saved *s = sv;
    return pp_dense_backward_weights(ex, PP_WEIGHT_OUT_IN, &s->x, &s->dy, &grad[m->w], NULL, err);
}

const pp_unit_kind_ops pp_unit_lm_head_ops = {
    .name = "output head",
    .impl_size = sizeof(head_impl),
    .saved_size = sizeof(head_saved),
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
