/*
 * op_cases_transformer.h - one call of every GPT-2 op (ops.h, transformer
 * ops) that takes bf16 operands, in op_cases.h's table form: rows of
 * (2, 3, C), C = 8, 2 heads, 5 outputs or vocabulary entries, 4 positions.
 * tests/ops/test_bf16.c runs them with bf16 activations (3-D operands have
 * no NHWC). The fused forms (dense with GELU, add with layer norm, layer
 * norm backward with the residual) round twice in bf16 like the ops they
 * compose, so they are not the f32 op rounded once, and are left out.
 */
#ifndef PP_TESTS_OP_CASES_TRANSFORMER_H
#define PP_TESTS_OP_CASES_TRANSFORMER_H

#include "tests/ops/op_cases.h"

static const int HEADS2 = 2;

static pp_status r_dense(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_dense_forward(ex, *(const pp_weight_order *)d, t[0], t[1], t[2], t[3], err);
}
static pp_status r_dense_bwd_data(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_dense_backward_data(ex, *(const pp_weight_order *)d, t[0], t[1], t[2], err);
}
static pp_status r_dense_bwd_w(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_dense_backward_weights(ex, *(const pp_weight_order *)d, t[0], t[1], t[2], t[3],
                                     err);
}
static pp_status r_ln(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_layernorm_forward(ex, 1e-5f, t[0], t[1], t[2], t[3], t[4], t[5], err);
}
static pp_status r_ln_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_layernorm_backward(ex, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], err);
}
static pp_status r_gelu(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_gelu_forward(ex, t[0], t[1], err);
}
static pp_status r_gelu_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_gelu_backward(ex, t[0], t[1], t[2], err);
}
static pp_status r_attn(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_attention_forward(ex, *(const int *)d, t[0], t[1], t[2], err);
}
static pp_status r_attn_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_attention_backward(ex, *(const int *)d, t[0], t[1], t[2], t[3], t[4], err);
}
static pp_status r_emb(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_embedding_forward(ex, t[0], t[1], t[2], err);
}
static pp_status r_emb_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_embedding_backward(ex, t[0], t[1], t[2], err);
}
static pp_status r_pos(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_position_forward(ex, t[0], t[1], t[2], err);
}
static pp_status r_pos_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_position_backward(ex, t[0], t[1], err);
}

static const pp_weight_order IN_OUT = PP_WEIGHT_IN_OUT, OUT_IN = PP_WEIGHT_OUT_IN;
#define R3(k, c) {k, 3, {2, 3, c, 1}} /* (2, 3, c) rows */
#define M2(k, a, b) {k, 2, {a, b, 1, 1}}
#define IDS {'i', 2, {2, 3, 1, 1}}    /* token ids: zeros, every one valid */

static const op_case TRANSFORMER_CASES[] = {
    {"dense_forward (in, out)", r_dense, &IN_OUT, 4,
     {R3('a', 8), M2('a', 8, 5), F1(5), R3('a', 5)}, {0}, false},
    {"dense_forward (out, in), f32 logits", r_dense, &OUT_IN, 4,
     {R3('a', 8), M2('a', 5, 8), F1(5), R3('f', 5)}, {0}, false},
    {"dense_backward_data", r_dense_bwd_data, &IN_OUT, 3,
     {M2('a', 8, 5), R3('a', 5), R3('a', 8)}, {0}, false},
    {"dense_backward_data, f32 dy", r_dense_bwd_data, &OUT_IN, 3,
     {M2('a', 5, 8), R3('f', 5), R3('a', 8)}, {0}, false},
    {"dense_backward_weights (dw rounded, db f32 +=)", r_dense_bwd_w, &IN_OUT, 4,
     {R3('a', 8), R3('a', 5), M2('w', 8, 5), F1(5)}, {0}, false},
    {"dense_backward_weights, f32 dy", r_dense_bwd_w, &OUT_IN, 4,
     {R3('a', 8), R3('f', 5), M2('w', 5, 8), F1(5)}, {0}, false},
    {"layernorm_forward", r_ln, NULL, 6,
     {R3('a', 8), F1(8), F1(8), R3('a', 8), F1(6), F1(6)}, {0}, false},
    {"layernorm_forward, f32 x, bf16 y", r_ln, NULL, 6,
     {R3('f', 8), F1(8), F1(8), R3('a', 8), F1(6), F1(6)}, {0}, false},
    {"layernorm_backward", r_ln_bwd, NULL, 8,
     {R3('a', 8), R3('a', 8), F1(8), F1(6), F1(6), R3('a', 8), F1(8), F1(8)}, {0}, false},
    {"layernorm_backward, f32 x and dx, bf16 dy", r_ln_bwd, NULL, 8,
     {R3('f', 8), R3('a', 8), F1(8), F1(6), F1(6), R3('f', 8), F1(8), F1(8)}, {0}, false},
    {"gelu_forward", r_gelu, NULL, 2, {R3('a', 8), R3('a', 8)}, {0}, false},
    {"gelu_forward in place", r_gelu, NULL, 2, {R3('a', 8), R3('a', 8)}, {0, 1}, false},
    {"gelu_backward", r_gelu_bwd, NULL, 3, {R3('a', 8), R3('a', 8), R3('a', 8)}, {0}, false},
    {"attention_forward", r_attn, &HEADS2, 3, {R3('a', 24), R3('a', 8), {'f', 3, {2, 2, 3, 1}}},
     {0}, false},
    {"attention_backward", r_attn_bwd, &HEADS2, 5,
     {R3('a', 24), R3('a', 8), {'f', 3, {2, 2, 3, 1}}, R3('a', 8), R3('a', 24)}, {0}, false},
    {"embedding_forward", r_emb, NULL, 3, {IDS, M2('f', 5, 8), R3('a', 8)}, {0}, false},
    {"embedding_backward (dtable f32 +=)", r_emb_bwd, NULL, 3, {IDS, R3('a', 8), M2('f', 5, 8)},
     {0}, false},
    {"position_forward", r_pos, NULL, 3, {R3('a', 8), M2('f', 4, 8), R3('a', 8)}, {0}, false},
    {"position_forward in place", r_pos, NULL, 3, {R3('a', 8), M2('f', 4, 8), R3('a', 8)},
     {0, 0, 1}, false},
    {"position_backward (dtable f32 +=)", r_pos_bwd, NULL, 2, {R3('a', 8), M2('f', 4, 8)}, {0},
     false},
};

#undef R3
#undef M2
#undef IDS

#endif
