/*
 * gpt2.h - the transformer room of models/: GPT-2 as units at plan
 * granularity, named as Hugging Face's GPT2LMHeadModel names its modules
 * (wte, wpe, h.0 ... h.{n_layer-1}, ln_f, lm_head; "h" in a plan stands for
 * every block), their entries as its state_dict names them
 * ("transformer.h.0.attn.c_attn.weight", (in, out) as Conv1D keeps it).
 *
 * models/transformer/ holds the GPT-2 unit specs (gpt2.c) and the unit
 * kinds of a transformer, each a pp_unit_kind_ops table in its own file:
 * the token and position embeddings (embedding.c), the block
 * (gpt2_block.c), the final layer norm (layernorm.c) and the output head,
 * its weight tied to the token embedding's by default (lm_head.c). It
 * includes models/ (unit_kind.h) and runtime/ only; models/unit.c reaches
 * the kinds through their tables.
 *
 * Initialisation, GPT-2's: linear and embedding weights normal(0,
 * init_std = 0.02), the blocks' output projections (attn.c_proj,
 * mlp.c_proj) normal(0, 0.02 / sqrt(2 n_layer)), biases 0, layer norms'
 * weights 1 and biases 0; each tensor from the stream of (seed, its name).
 */
#ifndef PP_MODELS_TRANSFORMER_GPT2_H
#define PP_MODELS_TRANSFORMER_GPT2_H

#include "models/catalogue.h"
#include "models/unit.h"

/* GPT-2's initial weight std. */
#define PP_GPT2_INIT_STD 0.02
/* Layer-norm epsilon (GPT2Config.layer_norm_epsilon). */
#define PP_GPT2_LN_EPS 1e-5f
/* The scope of every entry but lm_head's ("transformer.h.0..."). */
#define PP_GPT2_SCOPE "transformer."
/* The name of the token embedding's weight, which a tied head copies. */
#define PP_GPT2_WTE_WEIGHT "transformer.wte.weight"

/* Dropout's sites (pp_unit_draw): the embeddings' sum, then three per block
 * K (attention probabilities, attn.c_proj's output, mlp.c_proj's output). */
#define PP_GPT2_SITE_EMBEDDINGS 0
#define PP_GPT2_SITE_BLOCK(k) (1 + 3 * (k))

/* The shape rule of the units between the embeddings and the head: an input
 * (N, T, in_c) with T at most the model's positions (spec.positions), an
 * output (N, T, out_c) (a pp_unit_kind_ops.shape). */
bool pp_gpt2_rows_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                        int64_t *out, const char **why);

/* bf16 mixed precision (every spec's bf16 set): the residual stream, from
 * the embeddings through the blocks to ln_f's input, and its gradient stay
 * F32 (f32_in, f32_out), as torch.autocast keeps GPT-2's; ln_f's output,
 * the head's input, and the head's output (the logits) and their gradients
 * are BF16, as torch.autocast's (the loss widens the logits). */
void pp_gpt2_bf16_stream(pp_unit_spec *specs, int n);

/* Row `row` of a (2, C) tensor as a (C) view: where a split backward's input
 * part keeps a layer norm's weight (row 0) and bias (row 1) gradients. */
pp_tensor pp_gpt2_part_row(const pp_tensor *part, int row);

/* Checks cfg->gpt2 (PP_ERR_INPUT with a message naming the key: "n_embd 100 is
 * not divisible by n_head 3") and fills *specs (malloc'd, caller frees) with
 * its units in network order, *n their number. */
pp_status pp_gpt2_units(const pp_model_config *cfg, pp_unit_spec **specs, int *n, pp_error *err);

#endif
