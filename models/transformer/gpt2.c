/*
 * gpt2.c - GPT-2's unit specs (see gpt2.h) and its published sizes.
 */
#include "models/transformer/gpt2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int n_layer, n_head, n_embd;
} presets[] = {
    {"124M", 12, 12, 768},   /* gpt2 */
    {"350M", 24, 16, 1024},  /* gpt2-medium */
    {"774M", 36, 20, 1280},  /* gpt2-large */
    {"1558M", 48, 25, 1600}, /* gpt2-xl */
};

pp_status pp_gpt2_preset(const char *name, pp_gpt2_config *out, pp_error *err)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name) != 0) continue;
        *out = (pp_gpt2_config){.n_layer = presets[i].n_layer, .n_head = presets[i].n_head,
                                .n_embd = presets[i].n_embd, .vocab_size = 50257,
                                .block_size = 1024, .bias = true, .tie_embeddings = true};
        return PP_OK;
    }
    return pp_error_set(err, PP_ERR_INPUT,
                        "unknown GPT-2 preset '%s' (expected 124M, 350M, 774M or 1558M)", name);
}

bool pp_gpt2_rows_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                        int64_t *out, const char **why)
{
    if (in_ndim != 3 || in[2] != s->in_c) {
        *why = "is not (N, T, n_embd)";
        return false;
    }
    if (s->positions > 0 && in[1] > s->positions) {
        *why = "has more positions than the model's block_size";
        return false;
    }
    *out_ndim = 3;
    out[1] = in[1];
    out[2] = s->out_c;
    return true;
}

pp_tensor pp_gpt2_part_row(const pp_tensor *part, int row)
{
    pp_tensor r = pp_tensor_view0(part, row, 1);
    r.ndim = 1;
    r.shape[0] = part->shape[1];
    r.shape[1] = 1;
    return r;
}

void pp_gpt2_bf16_stream(pp_unit_spec *specs, int n)
{
    for (int i = 0; i < n; i++) {
        const pp_unit_kind k = specs[i].kind;
        specs[i].f32_in = k == PP_UNIT_POSITION_EMBEDDING || k == PP_UNIT_GPT2_BLOCK ||
                          k == PP_UNIT_LAYERNORM;
        specs[i].f32_out = k != PP_UNIT_LAYERNORM && k != PP_UNIT_LM_HEAD;
    }
}

/* The sizes the runtime can build; the first problem as PP_ERR_INPUT. */
static pp_status check(const pp_gpt2_config *g, pp_error *err)
{
    if (g->n_layer < 1 || g->n_head < 1 || g->n_embd < 1 || g->vocab_size < 1 ||
        g->block_size < 1)
        return pp_error_set(err, PP_ERR_INPUT,
                            "GPT-2 needs n_layer, n_head, n_embd, vocab_size and block_size of "
                            "at least 1 (got %d, %d, %d, %d, %d)",
                            g->n_layer, g->n_head, g->n_embd, g->vocab_size, g->block_size);
    if (g->n_embd % g->n_head != 0)
        return pp_error_set(err, PP_ERR_INPUT, "n_embd %d is not divisible by n_head %d",
                            g->n_embd, g->n_head);
    if (g->seq_len > g->block_size)
        return pp_error_set(err, PP_ERR_INPUT,
                            "a sample of %d positions is more than the model's block_size %d",
                            g->seq_len, g->block_size);
    if (!(g->dropout >= 0.0 && g->dropout < 1.0))
        return pp_error_set(err, PP_ERR_INPUT, "dropout %g is not in [0, 1)", g->dropout);
    return PP_OK;
}

static pp_unit_spec spec(pp_unit_kind kind, const char *name, const pp_gpt2_config *g,
                         const char *scope)
{
    pp_unit_spec s = {.kind = kind, .in_c = g->n_embd, .out_c = g->n_embd, .bias = g->bias,
                      .init = PP_INIT_NORMAL, .init_std = PP_GPT2_INIT_STD, .heads = g->n_head,
                      .vocab = g->vocab_size, .positions = g->block_size, .depth = g->n_layer};
    snprintf(s.name, sizeof s.name, "%s", name);
    snprintf(s.scope, sizeof s.scope, "%s", scope);
    return s;
}

pp_status pp_gpt2_units(const pp_model_config *cfg, pp_unit_spec **specs, int *n, pp_error *err)
{
    *specs = NULL;
    *n = 0;
    const pp_gpt2_config *g = &cfg->gpt2;
    PP_TRY(check(g, err));
    const int total = g->n_layer + 4;
    pp_unit_spec *s = calloc((size_t)total, sizeof *s);
    if (!s) return pp_error_set(err, PP_ERR_OOM, "out of host memory (unit list)");
    int k = 0;
    s[k] = spec(PP_UNIT_TOKEN_EMBEDDING, "wte", g, PP_GPT2_SCOPE);
    s[k].tokens = true;
    s[k++].in_c = g->vocab_size;
    s[k] = spec(PP_UNIT_POSITION_EMBEDDING, "wpe", g, PP_GPT2_SCOPE);
    s[k].dropout = (float)g->dropout;
    s[k++].site = PP_GPT2_SITE_EMBEDDINGS;
    for (int i = 0; i < g->n_layer; i++) {
        char name[16];
        snprintf(name, sizeof name, "h.%d", i);
        s[k] = spec(PP_UNIT_GPT2_BLOCK, name, g, PP_GPT2_SCOPE);
        s[k].dropout = (float)g->dropout;
        s[k++].site = PP_GPT2_SITE_BLOCK(i);
    }
    s[k++] = spec(PP_UNIT_LAYERNORM, "ln_f", g, PP_GPT2_SCOPE);
    s[k] = spec(PP_UNIT_LM_HEAD, "lm_head", g, "");
    s[k].out_c = g->vocab_size;
    s[k++].tied = g->tie_embeddings;
    *specs = s;
    *n = k;
    return PP_OK;
}
