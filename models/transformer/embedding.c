/*
 * embedding.c - GPT-2's embeddings as units:
 *   wte  token ids (N, T) I32 -> (N, T, C): the rows of weight (vocab, C);
 *        its input has no gradient (dx must be NULL: it is the network's
 *        first unit).
 *   wpe  (N, T, C) -> x + weight[t] for position t (weight (positions, C),
 *        T <= positions; decoding, pp_unit_set_decode: weight[at + t]);
 *        dx = dy. With spec.dropout, training forwards
 *        drop from that sum (GPT-2's dropout after the embeddings, site
 *        spec.site: pp_unit_dropout) and the backward takes dy through the
 *        same mask first.
 * Both keep what their weight gradients need until the weight part of a
 * split backward: the ids (wte) and the output gradient.
 */
#include "models/transformer/gpt2.h"
#include "models/unit_kind.h"

typedef struct emb_impl {
    int w; /* entry: weight */
} emb_impl;

typedef struct emb_saved {
    pp_tensor ids; /* (N, T) I32: wte's input */
    pp_tensor dy;  /* (N, T, C): the output gradient, from the input part to the weight part
                    * (wpe with dropout: through the mask) */
    pp_dropout_desc drop; /* wpe: the training forward's dropout */
} emb_saved;

static bool token_check(const pp_unit_spec *s)
{
    return s->tokens && s->in_c > 0 && s->out_c > 0 && s->init_std > 0;
}

static bool token_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                        int64_t *out, const char **why)
{
    if (in_ndim != 2) {
        *why = "is not token ids (N, T)";
        return false;
    }
    *out_ndim = 3;
    out[1] = in[1];
    out[2] = s->out_c;
    return true;
}

static pp_status token_build(pp_unit *u, uint64_t seed, pp_error *err)
{
    emb_impl *m = u->impl;
    const pp_unit_spec *s = &u->spec;
    return pp_unit_declare(u, NULL, "weight", PP_F32, 2, (int64_t[]){s->in_c, s->out_c}, true,
                           PP_FILL_NORMAL, s->init_std, seed, &m->w, err);
}

static void token_saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv,
                        pp_saved_list *l)
{
    emb_saved *s = sv;
    pp_saved_add_io(l, &s->ids, PP_SAVED_INPUT, PP_I32, in_ndim, in);
    pp_saved_until_w(l);
    pp_saved_add_grad(l, &s->dy, pp_unit_spec_out_dtype(&u->spec), 3,
                      (int64_t[]){in[0], in[1], u->spec.out_c});
}

static void token_flops(const pp_unit_spec *s, int in_ndim, const int64_t *in,
                        const int64_t *out, int64_t *macs, int64_t *elementwise)
{
    *macs = 0;
    *elementwise = in[1] * s->out_c; /* a row copied per position */
}

static pp_status token_forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                               void *sv, pp_error *err)
{
    emb_impl *m = u->impl;
    return pp_embedding_forward(ex, x, &u->value[m->w], y, err);
}

static pp_status no_input_gradient(const pp_unit *u, const pp_tensor *dx, pp_error *err)
{
    if (!dx) return PP_OK;
    return pp_error_set(err, PP_ERR_INVALID, "%s: token ids have no gradient (dx must be NULL)",
                        u->spec.name);
}

static pp_status token_backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    emb_impl *m = u->impl;
    emb_saved *s = sv;
    PP_TRY(no_input_gradient(u, dx, err));
    return pp_embedding_backward(ex, &s->ids, dy, &grad[m->w], err);
}

static pp_status keep_dy(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                         pp_error *err)
{
    emb_saved *s = sv;
    PP_TRY(pp_copy(ex, dy, &s->dy, err));
    return dx ? pp_copy(ex, dy, dx, err) : PP_OK;
}

static pp_status token_backward_input(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                      pp_tensor *dx, pp_error *err)
{
    PP_TRY(no_input_gradient(u, dx, err));
    return keep_dy(u, ex, sv, dy, NULL, err);
}

static pp_status token_backward_weight(pp_unit *u, pp_exec *ex, void *sv, pp_tensor *grad,
                                       pp_error *err)
{
    emb_impl *m = u->impl;
    emb_saved *s = sv;
    return pp_embedding_backward(ex, &s->ids, &s->dy, &grad[m->w], err);
}

const pp_unit_kind_ops pp_unit_token_embedding_ops = {
    .name = "token embedding",
    .impl_size = sizeof(emb_impl),
    .saved_size = sizeof(emb_saved),
    .check = token_check,
    .shape = token_shape,
    .build = token_build,
    .saved = token_saved,
    .flops = token_flops,
    .forward = token_forward,
    .backward = token_backward,
    .backward_input = token_backward_input,
    .backward_weight = token_backward_weight,
};

/* ---- wpe ------------------------------------------------------------------------- */

static bool position_check(const pp_unit_spec *s)
{
    return s->in_c > 0 && s->out_c == s->in_c && s->positions > 0 && s->init_std > 0;
}

static pp_status position_build(pp_unit *u, uint64_t seed, pp_error *err)
{
    emb_impl *m = u->impl;
    const pp_unit_spec *s = &u->spec;
    return pp_unit_declare(u, NULL, "weight", PP_F32, 2, (int64_t[]){s->positions, s->out_c},
                           true, PP_FILL_NORMAL, s->init_std, seed, &m->w, err);
}

static void position_saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv,
                           pp_saved_list *l)
{
    emb_saved *s = sv;
    pp_saved_add_grad(l, &s->dy, pp_unit_spec_out_dtype(&u->spec), 3,
                      (int64_t[]){in[0], in[1], u->spec.out_c});
}

static void position_flops(const pp_unit_spec *s, int in_ndim, const int64_t *in,
                           const int64_t *out, int64_t *macs, int64_t *elementwise)
{
    *macs = 0;
    *elementwise = in[1] * s->out_c;
}

static pp_status position_forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                                  void *sv, pp_error *err)
{
    emb_impl *m = u->impl;
    emb_saved *s = sv;
    if (u->decoding) { /* the rows of positions decode_at.. (pp_unit_set_decode) */
        const pp_tensor rows = pp_tensor_view0(&u->value[m->w], u->decode_at, x->shape[1]);
        return pp_position_forward(ex, x, &rows, y, err);
    }
    PP_TRY(pp_position_forward(ex, x, &u->value[m->w], y, err));
    if (!s || u->spec.dropout <= 0.0f) return PP_OK;
    s->drop = pp_unit_dropout(u, 0);
    return pp_dropout_forward(ex, &s->drop, y, y, err);
}

static pp_status position_backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                   pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    emb_impl *m = u->impl;
    emb_saved *s = sv;
    if (s->drop.p <= 0.0f) {
        if (dx) PP_TRY(pp_copy(ex, dy, dx, err));
        return pp_position_backward(ex, dy, &grad[m->w], err);
    }
    pp_tensor tmp = {0}; /* dy through the mask: dx's, or a temporary's */
    pp_tensor *g = dx ? dx : &tmp;
    pp_status st = dx ? PP_OK : pp_unit_alloc_like(&tmp, ex, dy, err);
    if (st == PP_OK) st = pp_dropout_backward(ex, &s->drop, dy, g, err);
    if (st == PP_OK) st = pp_position_backward(ex, g, &grad[m->w], err);
    pp_tensor_free(&tmp);
    return st;
}

/* The input part: dy through the mask kept for the weight part, and dx. */
static pp_status position_backward_input(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                         pp_tensor *dx, pp_error *err)
{
    emb_saved *s = sv;
    if (s->drop.p <= 0.0f) return keep_dy(u, ex, sv, dy, dx, err);
    PP_TRY(pp_dropout_backward(ex, &s->drop, dy, &s->dy, err));
    return dx ? pp_copy(ex, &s->dy, dx, err) : PP_OK;
}

static pp_status position_backward_weight(pp_unit *u, pp_exec *ex, void *sv, pp_tensor *grad,
                                          pp_error *err)
{
    emb_impl *m = u->impl;
    emb_saved *s = sv;
    return pp_position_backward(ex, &s->dy, &grad[m->w], err);
}

const pp_unit_kind_ops pp_unit_position_embedding_ops = {
    .name = "position embedding",
    .impl_size = sizeof(emb_impl),
    .saved_size = sizeof(emb_saved),
    .check = position_check,
    .shape = pp_gpt2_rows_shape,
    .build = position_build,
    .saved = position_saved,
    .flops = position_flops,
    .forward = position_forward,
    .backward = position_backward,
    .backward_input = position_backward_input,
    .backward_weight = position_backward_weight,
};
