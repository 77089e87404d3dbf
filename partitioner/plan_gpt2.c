/*
 * plan_gpt2.c - the plan's `model:` keys of GPT-2: a published size by
 * `preset` (124M, the default, 350M, 774M, 1558M), then each key that
 * changes it (n_layer, n_head, n_embd, vocab_size, block_size, bias,
 * dropout, tie_embeddings), each checked where it is written.
 */
#include <string.h>

#include "partitioner/plan_walk.h"

enum { G_PRESET, G_LAYER, G_HEAD, G_EMBD, G_VOCAB, G_BLOCK, G_BIAS, G_DROPOUT, G_TIE };

/* The largest sizes a plan may ask for (the CPU kernels' int dimensions). */
#define MAX_LAYERS 1024
#define MAX_WIDTH (1 << 16)
#define MAX_VOCAB (1 << 24)
#define MAX_POSITIONS (1 << 20)

void pp_walk_gpt2(pp_walk *w, const pp_ynode *model, const pp_ynode *const *f)
{
    pp_model_config *cfg = &w->plan->model;
    pp_gpt2_config *g = &cfg->gpt2;
    if (f[G_PRESET]) {
        const char *name;
        if (!pp_walk_str(w, f[G_PRESET], "model.preset", &name)) {
            w->model_ok = false;
            return;
        }
        if (pp_gpt2_preset(name, g, NULL) != PP_OK) {
            pp_walk_error(w, f[G_PRESET], "unknown model.preset '%.32s' (expected 124M, 350M, "
                          "774M or 1558M)", name);
            w->model_ok = false;
            return;
        }
    }
    bool ok = true;
    if (f[G_LAYER]) ok &= pp_walk_int32(w, f[G_LAYER], "model.n_layer", 1, MAX_LAYERS, &g->n_layer);
    if (f[G_HEAD]) ok &= pp_walk_int32(w, f[G_HEAD], "model.n_head", 1, MAX_WIDTH, &g->n_head);
    if (f[G_EMBD]) ok &= pp_walk_int32(w, f[G_EMBD], "model.n_embd", 1, MAX_WIDTH, &g->n_embd);
    if (f[G_VOCAB])
        ok &= pp_walk_int32(w, f[G_VOCAB], "model.vocab_size", 1, MAX_VOCAB, &g->vocab_size);
    if (f[G_BLOCK])
        ok &= pp_walk_int32(w, f[G_BLOCK], "model.block_size", 1, MAX_POSITIONS, &g->block_size);
    if (f[G_BIAS]) ok &= pp_walk_bool(w, f[G_BIAS], "model.bias", &g->bias);
    if (f[G_TIE]) ok &= pp_walk_bool(w, f[G_TIE], "model.tie_embeddings", &g->tie_embeddings);
    if (f[G_DROPOUT]) {
        double p = 0.0;
        if (!pp_walk_num(w, f[G_DROPOUT], "model.dropout", 0.0, 1.0, &p)) {
            ok = false;
        } else if (p >= 1.0) {
            pp_walk_error(w, f[G_DROPOUT], "model.dropout must be below 1 (1 drops every "
                          "value), got %g", p);
            ok = false;
        } else {
            g->dropout = p;
        }
    }
    if (ok && g->n_embd % g->n_head != 0) {
        pp_walk_error(w, f[G_HEAD] ? f[G_HEAD] : f[G_EMBD] ? f[G_EMBD] : model,
                      "model.n_embd %d is not divisible by model.n_head %d", g->n_embd,
                      g->n_head);
        ok = false;
    }
    if (!ok) w->model_ok = false;
    cfg->num_classes = g->vocab_size;
    cfg->in_channels = 1;
}
