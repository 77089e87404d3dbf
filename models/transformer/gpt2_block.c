/*
 * gpt2_block.c - one GPT-2 block (h.K) as a unit, pre-norm, (N, T, C) ->
 * (N, T, C), R = N*T rows:
 *   ln1 = ln_1(x)                    qkv = ln1 Wa + ba            (R, 3C)
 *   att = attention(qkv)             x2  = x + att Wp + bp        (R, C)
 *   ln2 = ln_2(x2)                   h   = ln2 Wf + bf            (R, 4C)
 *   g   = gelu(h)                    y   = x2 + g Wm + bm         (R, C)
 * with Hugging Face's entries, in its state_dict order: ln_1.{weight,bias},
 * attn.c_attn.{weight (C, 3C), bias}, attn.c_proj.{weight (C, C), bias},
 * ln_2.{weight,bias}, mlp.c_fc.{weight (C, 4C), bias}, mlp.c_proj.{weight
 * (4C, C), bias} (no biases without spec.bias).
 *
 * A training forward keeps, per row: x, ln1, qkv, att, x2, ln2, h and g
 * (16 C floats) and both layer norms' statistics (4 floats), and per head
 * and row attention's log-sum-exp; no (T, T) matrix (ops.h). The backward
 * runs the chain back (c_fc and its GELU as one op each way, which a
 * backend may fuse: pp_dense_gelu_forward, pp_dense_backward_data_gelu;
 * each dense layer's data and weight gradients as one op, pp_dense_backward,
 * where the backward is whole;
 * likewise the attention's residual add with ln_2, pp_add_layernorm_forward,
 * and each layer norm's backward with the residual gradient beside it,
 * pp_layernorm_backward_add; ln_1 reads the block's input, a sum the unit
 * before made, so it has no add to fuse); a
 * split backward's input part keeps, for its weight
 * part, the four dense layers' inputs and output gradients (dy, dh, dx2,
 * dqkv: 9 C floats per row) and the layer norms' parameter gradients
 * ((2, C) each), and adds those into the parameters' gradients there with
 * the whole backward's bits.
 *
 * Dropout (spec.dropout > 0, training forwards only), as GPT-2 places it:
 * on the attention's probabilities (site spec.site, drawn inside the
 * attention op: pp_attention_forward_dropout), and on each residual
 * branch's output before its add (attn.c_proj's, site + 1, into x2 before
 * the add with x; mlp.c_proj's, site + 2, into y before the add with x2).
 * The masks come from the hash of the unit's draw (pp_unit_dropout) and are
 * drawn again in the backward, never stored: the saved state keeps the
 * three descriptors only. The backward takes the branches' output
 * gradients through the same masks (into the split backward's dy and dx2,
 * which the weight part reads); the residual gradients pass unmasked.
 *
 * Decoding (pp_unit_set_decode, generation): an inference forward writes
 * qkv's rows into the unit's cache at their positions and attends its
 * queries over the cache's rows up to them (pp_attention_forward_from), so
 * that a new token's forward computes its own row alone.
 *
 * In bf16 mixed precision (spec.bf16) ln1, qkv, att, ln2, h, g and their
 * gradients are BF16 and the dense layers take their weights' bf16 copies
 * (pp_unit_weight_like); the residual stream (x, x2, y) and its gradient
 * stay F32 (pp_gpt2_bf16_stream: c_proj's outputs are added in f32, as
 * torch.autocast adds a bf16 product to an f32 stream), as do the layer
 * norms' statistics, lse and the parameters' gradients.
 */
#include <math.h>

#include "models/transformer/gpt2.h"
#include "models/unit_kind.h"

/* Entries (indices into the unit's), -1 where absent (the biases without spec.bias). */
typedef struct block_impl {
    int ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, mlp_w, mlp_b;
} block_impl;

/* The block's three dropouts (p 0: none). */
typedef struct block_drops {
    pp_dropout_desc att, proj, mlp;
} block_drops;

typedef struct block_saved {
    pp_tensor x;                  /* (N, T, C) the input */
    pp_tensor mean1, rstd1;       /* (R) */
    pp_tensor ln1;                /* (N, T, C)  until W: c_attn's input */
    pp_tensor qkv;                /* (N, T, 3C) */
    pp_tensor lse;                /* (N, heads, T) */
    pp_tensor att;                /* (N, T, C)  until W: attn.c_proj's input */
    pp_tensor x2;                 /* (N, T, C) */
    pp_tensor mean2, rstd2;       /* (R) */
    pp_tensor ln2;                /* (N, T, C)  until W: c_fc's input */
    pp_tensor h;                  /* (N, T, 4C) */
    pp_tensor g;                  /* (N, T, 4C) until W: mlp.c_proj's input */
    /* the split backward's, from the input part to the weight part */
    pp_tensor dy, dh, dx2, dqkv;  /* the dense layers' output gradients */
    pp_tensor part1, part2;       /* (2, C) the layer norms' parameter gradients */
    block_drops drop;             /* the training forward's dropout (p 0: none) */
} block_saved;

static bool check(const pp_unit_spec *s)
{
    return s->in_c > 0 && s->out_c == s->in_c && s->heads > 0 && s->in_c % s->heads == 0 &&
           s->depth > 0 && s->init_std > 0;
}

/* A layer norm's weight (1) and bias (0), in the optimizer's norm group. */
static pp_status add_ln(pp_unit *u, const char *module, int *w, int *b, uint64_t seed,
                        pp_error *err)
{
    const int64_t c = u->spec.in_c;
    PP_TRY(pp_unit_declare(u, module, "weight", PP_F32, 1, &c, true, PP_FILL_CONST, 1.0, seed, w,
                           err));
    u->entry[*w].norm = true;
    if (!u->spec.bias) return PP_OK;
    PP_TRY(pp_unit_declare(u, module, "bias", PP_F32, 1, &c, true, PP_FILL_CONST, 0.0, seed, b,
                           err));
    u->entry[*b].norm = true;
    return PP_OK;
}

/* A Conv1D weight (in, out), normal(0, std), and its bias (0). */
static pp_status add_dense(pp_unit *u, const char *module, int in, int out, double std, int *w,
                           int *b, uint64_t seed, pp_error *err)
{
    PP_TRY(pp_unit_declare(u, module, "weight", PP_F32, 2, (int64_t[]){in, out}, true,
                           PP_FILL_NORMAL, std, seed, w, err));
    if (!u->spec.bias) return PP_OK;
    return pp_unit_declare(u, module, "bias", PP_F32, 1, (int64_t[]){out}, true, PP_FILL_CONST,
                           0.0, seed, b, err);
}

static pp_status build(pp_unit *u, uint64_t seed, pp_error *err)
{
    block_impl *m = u->impl;
    const pp_unit_spec *s = &u->spec;
    const int c = s->in_c;
    const double std = s->init_std, scaled = s->init_std / sqrt(2.0 * s->depth);
    *m = (block_impl){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    PP_TRY(add_ln(u, "ln_1", &m->ln1_w, &m->ln1_b, seed, err));
    PP_TRY(add_dense(u, "attn.c_attn", c, 3 * c, std, &m->attn_w, &m->attn_b, seed, err));
    PP_TRY(add_dense(u, "attn.c_proj", c, c, scaled, &m->proj_w, &m->proj_b, seed, err));
    PP_TRY(add_ln(u, "ln_2", &m->ln2_w, &m->ln2_b, seed, err));
    PP_TRY(add_dense(u, "mlp.c_fc", c, 4 * c, std, &m->fc_w, &m->fc_b, seed, err));
    return add_dense(u, "mlp.c_proj", 4 * c, c, scaled, &m->mlp_w, &m->mlp_b, seed, err);
}

static void saved(const pp_unit *u, int in_ndim, const int64_t *in, void *sv, pp_saved_list *l)
{
    block_saved *s = sv;
    const int64_t n = in[0], t = in[1], c = u->spec.in_c, rows = n * t;
    const int64_t w1[3] = {n, t, c}, w3[3] = {n, t, 3 * c}, w4[3] = {n, t, 4 * c};
    const int64_t part[2] = {2, c};
    const pp_dtype act = pp_unit_act_dtype(u), low = u->spec.bf16 ? PP_BF16 : PP_F32;
    pp_saved_add_io(l, &s->x, PP_SAVED_INPUT, act, 3, w1);
    pp_saved_add(l, &s->mean1, PP_F32, 1, &rows);
    pp_saved_add(l, &s->rstd1, PP_F32, 1, &rows);
    pp_saved_add(l, &s->ln1, low, 3, w1);
    pp_saved_until_w(l);
    pp_saved_add(l, &s->qkv, low, 3, w3);
    pp_saved_add(l, &s->lse, PP_F32, 3, (int64_t[]){n, u->spec.heads, t});
    pp_saved_add(l, &s->att, low, 3, w1);
    pp_saved_until_w(l);
    pp_saved_add(l, &s->x2, act, 3, w1);
    pp_saved_add(l, &s->mean2, PP_F32, 1, &rows);
    pp_saved_add(l, &s->rstd2, PP_F32, 1, &rows);
    pp_saved_add(l, &s->ln2, low, 3, w1);
    pp_saved_until_w(l);
    pp_saved_add(l, &s->h, low, 3, w4);
    pp_saved_add(l, &s->g, low, 3, w4);
    pp_saved_until_w(l);
    pp_saved_add_grad(l, &s->dy, act, 3, w1);
    pp_saved_add_grad(l, &s->dh, low, 3, w4);
    pp_saved_add_grad(l, &s->dx2, act, 3, w1);
    pp_saved_add_grad(l, &s->dqkv, low, 3, w3);
    pp_saved_add_grad(l, &s->part1, PP_F32, 2, part);
    pp_saved_add_grad(l, &s->part2, PP_F32, 2, part);
}

static void flops(const pp_unit_spec *s, int in_ndim, const int64_t *in, const int64_t *out,
                  int64_t *macs, int64_t *elementwise)
{
    const int64_t t = in[1], c = s->in_c;
    /* the dense layers, then q k^T and P v over the causal half of (T, T) */
    *macs = 12 * t * c * c + t * (t + 1) * c;
    /* layer norms (8 C), residuals (2 C), biases (9 C), GELU (~8 per 4C value),
     * the softmax over the causal half (~4 per score) */
    *elementwise = t * (16 * c + 2 * c + 9 * c + 32 * c) + 2 * t * (t + 1) * s->heads;
}

static const pp_tensor *entry(pp_unit *u, int e)
{
    return e >= 0 ? &u->value[e] : NULL;
}

/* The forward's tensors: the saved ones, or temporaries (inference). */
typedef struct block_vals {
    pp_tensor mean1, rstd1, ln1, qkv, lse, att, x2, mean2, rstd2, ln2, h, g;
} block_vals;

static void vals_free(block_vals *v)
{
    pp_tensor *t = &v->mean1;
    for (size_t i = 0; i < sizeof *v / sizeof *t; i++) pp_tensor_free(&t[i]);
}

/* Temporaries of the forward's shapes for an input x (inference); decoding,
 * all but qkv (the cache's rows: cache_rows). */
static pp_status vals_alloc(pp_unit *u, pp_exec *ex, const pp_tensor *x, block_vals *v,
                            pp_error *err)
{
    block_saved shapes = {0};
    pp_saved_list l;
    PP_TRY(pp_unit_saved_list(u, x->ndim, x->shape, &shapes, &l, err));
    pp_tensor *out[] = {&v->mean1, &v->rstd1, &v->ln1, &v->qkv, &v->lse, &v->att,
                        &v->x2,    &v->mean2, &v->rstd2, &v->ln2, &v->h, &v->g};
    pp_tensor *from[] = {&shapes.mean1, &shapes.rstd1, &shapes.ln1, &shapes.qkv,
                         &shapes.lse,   &shapes.att,   &shapes.x2,  &shapes.mean2,
                         &shapes.rstd2, &shapes.ln2,   &shapes.h,   &shapes.g};
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++)
        for (int k = 0; k < l.n; k++)
            if (l.item[k].t == from[i] && !(u->decoding && out[i] == &v->qkv))
                PP_TRY(pp_tensor_alloc_on(out[i], ex, l.item[k].dtype, l.item[k].ndim,
                                          l.item[k].shape, err));
    return PP_OK;
}

/* The dense layers' weights in the activations' dtype (pp_unit_weight_like). */
typedef struct block_weights {
    pp_tensor attn, proj, fc, mlp;
} block_weights;

/* x: a tensor in the dense layers' input dtype */
static pp_status weights_like(pp_unit *u, pp_exec *ex, const pp_tensor *x, block_weights *w,
                              pp_error *err)
{
    block_impl *m = u->impl;
    PP_TRY(pp_unit_weight_like(u, ex, m->attn_w, x, &w->attn, err));
    PP_TRY(pp_unit_weight_like(u, ex, m->proj_w, x, &w->proj, err));
    PP_TRY(pp_unit_weight_like(u, ex, m->fc_w, x, &w->fc, err));
    return pp_unit_weight_like(u, ex, m->mlp_w, x, &w->mlp, err);
}

/* keys NULL: attention over v->qkv; else (decoding) v->qkv is the cache's
 * rows of the forward's positions and keys the cache's rows up to them. */
static pp_status run_forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                             block_vals *v, const block_drops *dr, const pp_tensor *keys,
                             pp_error *err)
{
    block_impl *m = u->impl;
    const int heads = u->spec.heads;
    block_weights w = {0};
    PP_TRY(weights_like(u, ex, &v->ln1, &w, err));
    PP_TRY(pp_layernorm_forward(ex, PP_GPT2_LN_EPS, x, &u->value[m->ln1_w], entry(u, m->ln1_b),
                                &v->ln1, &v->mean1, &v->rstd1, err));
    PP_TRY(pp_dense_forward(ex, PP_WEIGHT_IN_OUT, &v->ln1, &w.attn,
                            entry(u, m->attn_b), &v->qkv, err));
    if (keys)
        PP_TRY(pp_attention_forward_from(ex, heads, u->decode_at, keys, &v->att, &v->lse, err));
    else
        PP_TRY(pp_attention_forward_dropout(ex, heads, &dr->att, &v->qkv, &v->att, &v->lse,
                                            err));
    PP_TRY(pp_dense_forward(ex, PP_WEIGHT_IN_OUT, &v->att, &w.proj,
                            entry(u, m->proj_b), &v->x2, err));
    if (dr->proj.p > 0.0f) PP_TRY(pp_dropout_forward(ex, &dr->proj, &v->x2, &v->x2, err));
    PP_TRY(pp_add_layernorm_forward(ex, PP_GPT2_LN_EPS, x, &v->x2, &u->value[m->ln2_w],
                                    entry(u, m->ln2_b), &v->x2, &v->ln2, &v->mean2, &v->rstd2,
                                    err));
    PP_TRY(pp_dense_gelu_forward(ex, PP_WEIGHT_IN_OUT, &v->ln2, &w.fc,
                                 entry(u, m->fc_b), &v->h, &v->g, err));
    PP_TRY(pp_dense_forward(ex, PP_WEIGHT_IN_OUT, &v->g, &w.mlp,
                            entry(u, m->mlp_b), y, err));
    if (dr->mlp.p > 0.0f) PP_TRY(pp_dropout_forward(ex, &dr->mlp, y, y, err));
    return pp_add(ex, &v->x2, y, y, err);
}

/* Decoding (pp_unit_set_decode), for an input x: v->qkv is the cache's rows
 * of the forward's positions and *keys the cache's rows of positions 0 up to
 * them, both (1, rows, 3C), in ln1's dtype; the cache is made at the first
 * decoding forward. */
static pp_status cache_rows(pp_unit *u, const pp_tensor *x, block_vals *v, pp_tensor *keys,
                            pp_error *err)
{
    const int64_t t = x->shape[1], c3 = 3 * (int64_t)u->spec.in_c, at = u->decode_at;
    if (!u->cache.data)
        PP_TRY(pp_tensor_alloc(&u->cache, u->dev, v->ln1.dtype, 2,
                               (int64_t[]){u->decode_cap, c3}, err));
    const pp_tensor mine = pp_tensor_view0(&u->cache, at, t);
    const pp_tensor all = pp_tensor_view0(&u->cache, 0, at + t);
    PP_TRY(pp_tensor_reshape(&mine, 3, (int64_t[]){1, t, c3}, &v->qkv, err));
    return pp_tensor_reshape(&all, 3, (int64_t[]){1, at + t, c3}, keys, err);
}

static pp_status forward(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y, void *sv,
                         pp_error *err)
{
    block_saved *s = sv;
    block_vals v = {0};
    if (s) { /* training: into the saved list (views, freed with it) */
        v = (block_vals){s->mean1, s->rstd1, s->ln1, s->qkv, s->lse, s->att,
                         s->x2,    s->mean2, s->rstd2, s->ln2, s->h, s->g};
        pp_tensor *t = &v.mean1;
        for (size_t i = 0; i < sizeof v / sizeof *t; i++) t[i].owns = false, t[i].stream = NULL;
        if (u->spec.dropout > 0.0f)
            s->drop = (block_drops){pp_unit_dropout(u, 0), pp_unit_dropout(u, 1),
                                    pp_unit_dropout(u, 2)};
        return run_forward(u, ex, x, y, &v, &s->drop, NULL, err);
    }
    const block_drops none = {.att.p = 0.0f}; /* inference: dropout off */
    pp_tensor keys = {0};
    pp_status st = vals_alloc(u, ex, x, &v, err);
    if (st == PP_OK && u->decoding) st = cache_rows(u, x, &v, &keys, err);
    if (st == PP_OK) st = run_forward(u, ex, x, y, &v, &none, u->decoding ? &keys : NULL, err);
    vals_free(&v);
    return st;
}

/* One dense layer's backward, (in, out) weight w, input x, output gradient
 * dy into dx (through GELU'(h) where h is not NULL): with grad, the weight
 * and bias (entries wi, bi; bi -1: none) gradients in the same call
 * (pp_dense_backward: a backend may share the work of both); grad NULL, the
 * data gradient alone (the weight part of a split backward adds the rest). */
static pp_status dense_back(pp_exec *ex, const pp_tensor *w, const pp_tensor *x,
                            const pp_tensor *dy, const pp_tensor *h, pp_tensor *dx,
                            pp_tensor *grad, int wi, int bi, pp_error *err)
{
    if (grad)
        return pp_dense_backward(ex, PP_WEIGHT_IN_OUT, w, x, dy, h, dx, &grad[wi],
                                 bi >= 0 ? &grad[bi] : NULL, err);
    return h ? pp_dense_backward_data_gelu(ex, PP_WEIGHT_IN_OUT, w, dy, h, dx, err)
             : pp_dense_backward_data(ex, PP_WEIGHT_IN_OUT, w, dy, dx, err);
}

/* The backward of the chain. grad NULL: the input part of a split backward,
 * which leaves the parameters' gradients to the weight part: the dense
 * layers' output gradients go into the saved list, the layer norms'
 * parameter gradients into its parts. Else every gradient is added to grad. */
static pp_status run_backward(pp_unit *u, pp_exec *ex, block_saved *s, const pp_tensor *dy,
                              pp_tensor *dx, pp_tensor *grad, pp_error *err)
{
    block_impl *m = u->impl;
    const bool split = grad == NULL;
    const block_drops *dr = &s->drop;
    pp_tensor dh = {0}, dx2 = {0}, dqkv = {0}, dc = {0}, dc2 = {0}, dxt = {0};
    /* the branches' output gradients (dy, dx2 through their masks): dmt and
     * dpt hold them when they differ from dy and dx2, else unused */
    pp_tensor dmt = {0}, dpt = {0};
    const pp_tensor *dm = dy;
    pp_tensor *dp = &dx2;
    pp_tensor p1g = {0}, p1b = {0}, p2g = {0}, p2b = {0};
    block_weights w = {0};
    pp_status st = weights_like(u, ex, &s->ln1, &w, err);
#define RUN(call)                        \
    do {                                 \
        if (st == PP_OK) st = (call);    \
    } while (0)
    if (split) {
        dh = s->dh, dx2 = s->dx2, dqkv = s->dqkv;
        dh.owns = dx2.owns = dqkv.owns = false;
        p1g = pp_gpt2_part_row(&s->part1, 0), p1b = pp_gpt2_part_row(&s->part1, 1);
        p2g = pp_gpt2_part_row(&s->part2, 0), p2b = pp_gpt2_part_row(&s->part2, 1);
        if (dr->mlp.p > 0.0f) {
            RUN(pp_dropout_backward(ex, &dr->mlp, dy, &s->dy, err));
            dm = &s->dy;
        } else {
            RUN(pp_copy(ex, dy, &s->dy, err));
        }
        if (dr->proj.p > 0.0f) { /* the weight part reads the masked one */
            dpt = dx2;
            dp = &dpt;
            dx2 = (pp_tensor){0};
            RUN(pp_unit_alloc_like(&dx2, ex, &s->x2, err));
        }
        RUN(pp_zero(ex, &s->part1, err));
        RUN(pp_zero(ex, &s->part2, err));
    } else {
        RUN(pp_unit_alloc_like(&dh, ex, &s->h, err));
        RUN(pp_unit_alloc_like(&dx2, ex, &s->x2, err));
        RUN(pp_unit_alloc_like(&dqkv, ex, &s->qkv, err));
        if (dr->mlp.p > 0.0f) {
            RUN(pp_unit_alloc_like(&dmt, ex, dy, err));
            RUN(pp_dropout_backward(ex, &dr->mlp, dy, &dmt, err));
            dm = &dmt;
        }
        if (dr->proj.p > 0.0f) {
            RUN(pp_unit_alloc_like(&dpt, ex, &s->x2, err));
            dp = &dpt;
        }
        p1g = grad[m->ln1_w], p2g = grad[m->ln2_w];
        if (m->ln1_b >= 0) p1b = grad[m->ln1_b], p2b = grad[m->ln2_b];
    }
    RUN(pp_unit_alloc_like(&dc, ex, &s->ln2, err));  /* (R, C) scratch: ln2's, att's gradient */
    RUN(pp_unit_alloc_like(&dc2, ex, &s->ln1, err)); /* (R, C) scratch: ln1's gradient */
    if (!dx) RUN(pp_unit_alloc_like(&dxt, ex, &s->x, err));
    pp_tensor *dxo = dx ? dx : &dxt;
    const bool lnb = m->ln1_b >= 0;
    /* mlp: y = x2 + g Wm + bm, g = gelu(h): dh through the GELU at once */
    RUN(dense_back(ex, &w.mlp, &s->g, dm, &s->h, &dh, grad, m->mlp_w, m->mlp_b, err));
    RUN(dense_back(ex, &w.fc, &s->ln2, &dh, NULL, &dc, grad, m->fc_w, m->fc_b, err));
    /* x2's gradient: through ln_2, plus the residual's dy */
    RUN(pp_layernorm_backward_add(ex, &s->x2, &dc, &u->value[m->ln2_w], &s->mean2, &s->rstd2, dy,
                                  &dx2, &p2g, lnb ? &p2b : NULL, err));
    /* attn: x2 = x + att Wp + bp */
    if (dr->proj.p > 0.0f) RUN(pp_dropout_backward(ex, &dr->proj, &dx2, dp, err));
    RUN(dense_back(ex, &w.proj, &s->att, dp, NULL, &dc, grad, m->proj_w, m->proj_b, err));
    RUN(pp_attention_backward_dropout(ex, u->spec.heads, &dr->att, &s->qkv, &s->att, &s->lse,
                                      &dc, &dqkv, err));
    RUN(dense_back(ex, &w.attn, &s->ln1, &dqkv, NULL, &dc2, grad, m->attn_w, m->attn_b, err));
    /* x's gradient: through ln_1, plus the residual's dx2 */
    RUN(pp_layernorm_backward_add(ex, &s->x, &dc2, &u->value[m->ln1_w], &s->mean1, &s->rstd1,
                                  &dx2, dxo, &p1g, lnb ? &p1b : NULL, err));
#undef RUN
    pp_tensor *tmp[] = {&dc, &dc2, &dxt, &dh, &dx2, &dqkv, &dmt};
    if (!split) pp_tensor_free(&dpt);
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) pp_tensor_free(tmp[i]);
    return st;
}

static pp_status backward(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy, pp_tensor *dx,
                          pp_tensor *grad, pp_error *err)
{
    return run_backward(u, ex, sv, dy, dx, grad, err);
}

static pp_status backward_input(pp_unit *u, pp_exec *ex, void *sv, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    return run_backward(u, ex, sv, dy, dx, NULL, err);
}

/* The parameters' gradients from what the input part kept, in the whole
 * backward's order. */
static pp_status backward_weight(pp_unit *u, pp_exec *ex, void *sv, pp_tensor *grad,
                                 pp_error *err)
{
    block_impl *m = u->impl;
    block_saved *s = sv;
    const bool lnb = m->ln1_b >= 0;
    pp_tensor *bm = m->mlp_b >= 0 ? &grad[m->mlp_b] : NULL, *bf = m->fc_b >= 0 ? &grad[m->fc_b] : NULL;
    pp_tensor *bp = m->proj_b >= 0 ? &grad[m->proj_b] : NULL;
    pp_tensor *ba = m->attn_b >= 0 ? &grad[m->attn_b] : NULL;
    pp_tensor p1g = pp_gpt2_part_row(&s->part1, 0), p1b = pp_gpt2_part_row(&s->part1, 1);
    pp_tensor p2g = pp_gpt2_part_row(&s->part2, 0), p2b = pp_gpt2_part_row(&s->part2, 1);
    PP_TRY(pp_dense_backward_weights(ex, PP_WEIGHT_IN_OUT, &s->g, &s->dy, &grad[m->mlp_w], bm,
                                     err));
    PP_TRY(pp_dense_backward_weights(ex, PP_WEIGHT_IN_OUT, &s->ln2, &s->dh, &grad[m->fc_w], bf,
                                     err));
    PP_TRY(pp_accumulate(ex, &p2g, &grad[m->ln2_w], err));
    if (lnb) PP_TRY(pp_accumulate(ex, &p2b, &grad[m->ln2_b], err));
    PP_TRY(pp_dense_backward_weights(ex, PP_WEIGHT_IN_OUT, &s->att, &s->dx2, &grad[m->proj_w],
                                     bp, err));
    PP_TRY(pp_dense_backward_weights(ex, PP_WEIGHT_IN_OUT, &s->ln1, &s->dqkv, &grad[m->attn_w],
                                     ba, err));
    PP_TRY(pp_accumulate(ex, &p1g, &grad[m->ln1_w], err));
    return lnb ? pp_accumulate(ex, &p1b, &grad[m->ln1_b], err) : PP_OK;
}

const pp_unit_kind_ops pp_unit_gpt2_block_ops = {
    .name = "GPT-2 block",
    .impl_size = sizeof(block_impl),
    .saved_size = sizeof(block_saved),
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
