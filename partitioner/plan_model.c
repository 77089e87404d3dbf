/*
 * plan_model.c - the plan's `model:` section: a ResNet by name, the delay
 * model's times, or a sequential model's layers (each checked where it is
 * written), and the sequential model checked against its input size once the
 * data section is known (walked from plan.c).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/plan_walk.h"

/* ------------------------------------------------------------------ */
/* model                                                                */

static const char *const k_model_names[] = {"resnet18",  "resnet34", "resnet50",  "resnet101",
                                            "resnet152", "delay",    "sequential", "gpt2"};
#define K_MODEL_NAMES                                                                              \
    "resnet18, resnet34, resnet50, resnet101, resnet152, sequential, gpt2 or delay"

/* A sequential layer's name: what nn.Sequential accepts as a child's name
 * and a plan can list in a stage (letters, digits, '_'). */
static bool layer_name_ok(const char *s)
{
    if (!*s || strlen(s) >= PP_SEQ_NAME_MAX) return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_')) return false;
    return true;
}

/* One entry of model.layers into *l; false after reporting. */
static bool walk_layer(pp_walk *w, const pp_ynode *n, int index, pp_seq_layer *l)
{
    enum { L_NAME, L_TYPE, L_OUTC, L_OUTF, L_KERNEL, L_STRIDE, L_PAD, L_BIAS, L_N };
    static const char *const keys[L_N] = {"name",   "type",   "out_channels", "out_features",
                                          "kernel", "stride", "padding",      "bias"};
    static const char *const types[] = {"conv",    "batchnorm",      "relu",
                                        "sigmoid", "maxpool",        "avgpool",
                                        "global_avgpool", "flatten", "linear"};
    const pp_ynode *f[L_N];
    char what[96];
    snprintf(what, sizeof what, "model.layers[%d]", index);
    if (!pp_walk_map(w, n, what, keys, L_N, f)) return false;
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%d", index); /* nn.Sequential's default names */
    if (f[L_NAME]) {
        const char *name;
        if (!pp_walk_str(w, f[L_NAME], "a layer name", &name)) return false;
        if (!layer_name_ok(name)) {
            pp_walk_error(w, f[L_NAME],
                          "layer name '%.64s' must be 1 to %d letters, digits or '_'", name,
                          PP_SEQ_NAME_MAX - 1);
            return false;
        }
        snprintf(l->name, sizeof l->name, "%s", name);
    }
    if (!f[L_TYPE]) {
        pp_walk_error(w, n, "layer '%s' needs a type (conv, batchnorm, relu, sigmoid, maxpool, "
                            "avgpool, global_avgpool, flatten or linear)", l->name);
        return false;
    }
    int t = pp_walk_choice(w, f[L_TYPE], "layer type", types, 9,
                           "conv, batchnorm, relu, sigmoid, maxpool, avgpool, global_avgpool, "
                           "flatten or linear");
    if (t < 0) return false;
    l->type = (pp_seq_type)t;
    const bool conv = l->type == PP_SEQ_CONV, linear = l->type == PP_SEQ_LINEAR;
    const bool window = conv || l->type == PP_SEQ_MAXPOOL || l->type == PP_SEQ_AVGPOOL;
    /* keys that do not belong to the type; a linear layer always has a bias
     * (bias: true says so; only conv layers can go without) */
    const bool applies[L_N] = {true, true, conv, linear, window, window, window, conv || linear};
    bool ok = true;
    for (int k = 0; k < L_N; k++)
        if (f[k] && !applies[k]) {
            pp_walk_error(w, f[k], "layer '%s' (%s) takes no %s", l->name, types[t], keys[k]);
            ok = false;
        }
    if (!ok) return false;
    if (linear && f[L_BIAS]) {
        bool bias = true;
        if (!pp_walk_bool(w, f[L_BIAS], "layer bias", &bias)) return false;
        if (!bias) {
            pp_walk_error(w, f[L_BIAS], "layer '%s' (linear): bias: false is not supported; a "
                          "linear layer always has a bias (leave bias out; only conv layers "
                          "can go without one)", l->name);
            return false;
        }
    }
    if (conv || linear) {
        const int key = conv ? L_OUTC : L_OUTF;
        if (!f[key]) {
            pp_walk_error(w, n, "layer '%s' (%s) needs %s", l->name, types[t], keys[key]);
            return false;
        }
        snprintf(what, sizeof what, "layer '%s' %s", l->name, keys[key]);
        if (!pp_walk_int32(w, f[key], what, 1, 1 << 20, &l->out)) return false;
    }
    if (window) {
        if (!f[L_KERNEL]) {
            pp_walk_error(w, n, "layer '%s' (%s) needs a kernel size", l->name, types[t]);
            return false;
        }
        snprintf(what, sizeof what, "layer '%s' kernel", l->name);
        if (!pp_walk_int32(w, f[L_KERNEL], what, 1, 1024, &l->kernel)) return false;
        l->stride = conv ? 1 : l->kernel; /* torch's defaults */
        snprintf(what, sizeof what, "layer '%s' stride", l->name);
        if (f[L_STRIDE] && !pp_walk_int32(w, f[L_STRIDE], what, 1, 1024, &l->stride))
            return false;
        snprintf(what, sizeof what, "layer '%s' padding", l->name);
        if (f[L_PAD] && !pp_walk_int32(w, f[L_PAD], what, 0, l->kernel / 2, &l->pad))
            return false;
    }
    l->bias = conv;
    if (conv && f[L_BIAS] && !pp_walk_bool(w, f[L_BIAS], "layer bias", &l->bias)) return false;
    return true;
}

/* model.layers: a non-empty list of layers with distinct names. */
static void walk_layers(pp_walk *w, const pp_ynode *n, pp_model_config *cfg)
{
    if (!n || n->kind != PP_YNODE_SEQ || n->n == 0) {
        pp_walk_error(w, n, "model.layers must be a non-empty list of layers, got %s",
                      n && n->kind == PP_YNODE_SEQ ? "an empty list" : pp_walk_describe(n));
        w->model_ok = false;
        return;
    }
    if (n->n > PP_MAX_SEQ_LAYERS) {
        pp_walk_error(w, n, "model.layers has %d layers (at most %d)", n->n, PP_MAX_SEQ_LAYERS);
        w->model_ok = false;
        return;
    }
    w->layers_node = n;
    for (int i = 0; i < n->n; i++) {
        pp_seq_layer *l = &cfg->layers[i];
        if (!walk_layer(w, n->kids[i], i, l)) {
            w->model_ok = false;
            continue;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(cfg->layers[j].name, l->name) == 0) {
                pp_walk_error(w, n->kids[i], "layer name '%s' is used twice (layers %d and %d)",
                              l->name, j, i);
                w->model_ok = false;
            }
    }
    cfg->n_layers = n->n;
}

/* Number or list of numbers (delay times); n_out is 1 for a number. */
static void walk_delay_times(pp_walk *w, const pp_ynode *n, const char *what, double *vals,
                             int *n_out, bool *is_list)
{
    *n_out = 0;
    *is_list = false;
    if (n && n->kind == PP_YNODE_SEQ) {
        *is_list = true;
        if (n->n == 0) {
            pp_walk_error(w, n, "%s must not be an empty list", what);
            return;
        }
        if (n->n > PP_MAX_DELAY_STAGES) {
            pp_walk_error(w, n, "%s has %d values; at most %d stages are supported", what, n->n,
                          PP_MAX_DELAY_STAGES);
            return;
        }
        bool ok = true;
        for (int i = 0; i < n->n; i++)
            ok &= pp_walk_num(w, n->kids[i], what, 0.0, 1e6, &vals[i]);
        if (ok) *n_out = n->n;
        return;
    }
    if (n && n->kind == PP_YNODE_SCALAR && !pp_ynode_is_null(n)) {
        if (pp_walk_num(w, n, what, 0.0, 1e6, &vals[0])) *n_out = 1;
        return;
    }
    pp_walk_error(w, n, "%s must be a number of milliseconds or a list of them, got %s", what,
                  pp_walk_describe(n));
}

/* A sequential model's layers and initialisation. */
static void walk_sequential(pp_walk *w, const pp_ynode *model, const pp_ynode *layers,
                            const pp_ynode *init, const pp_ynode *std, pp_model_config *cfg)
{
    if (!layers) {
        pp_walk_error(w, model, "a sequential model needs layers (a list of layers)");
        w->model_ok = false;
    } else {
        walk_layers(w, layers, cfg);
    }
    if (init) {
        static const char *const inits[] = {"default", "normal"};
        int k = pp_walk_choice(w, init, "model.init", inits, 2, "default or normal");
        if (k < 0) w->model_ok = false;
        cfg->init = k == 1 ? PP_SEQ_INIT_NORMAL : PP_SEQ_INIT_TORCH;
    }
    if (cfg->init == PP_SEQ_INIT_NORMAL && !std) {
        pp_walk_error(w, init, "model.init normal needs init_std (e.g. 0.01)");
        w->model_ok = false; /* no layer can be made without it: say nothing more */
    }
    if (std && cfg->init != PP_SEQ_INIT_NORMAL)
        pp_walk_error(w, std, "model.init_std applies only to init: normal");
    else if (std && !pp_walk_num(w, std, "model.init_std", 1e-12, 1e6, &cfg->init_std))
        w->model_ok = false;
}

void pp_walk_model(pp_walk *w, const pp_ynode *n)
{
    enum { K_NAME, K_CLASSES, K_CHANNELS, K_STEM, K_FWD, K_BWD, K_BIN, K_BWT, K_LAYERS, K_INIT,
           K_STD, K_ZERO, K_GPT2, K_N = K_GPT2 + PP_WALK_GPT2_KEYS };
    static const char *const keys[K_N] = {"name",        "num_classes", "in_channels",
                                          "stem",        "forward_ms",  "backward_ms",
                                          "backward_input_ms", "backward_weight_ms",
                                          "layers",      "init",        "init_std",
                                          "zero_init_residual",
                                          /* GPT-2's, in pp_walk_gpt2's order */
                                          "preset",      "n_layer",     "n_head",
                                          "n_embd",      "vocab_size",  "block_size",
                                          "bias",        "dropout",     "tie_embeddings"};
    const pp_ynode *f[K_N];
    pp_plan *p = w->plan;
    p->model_mark = pp_walk_mark(n);
    if (!pp_walk_map(w, n, "model", keys, K_N, f)) return;
    if (!f[K_NAME]) {
        pp_walk_error(w, n, "model needs a name (" K_MODEL_NAMES ")");
        return;
    }
    w->model_node = n;
    int which = pp_walk_choice(w, f[K_NAME], "model", k_model_names, 8, K_MODEL_NAMES);
    if (which < 0) return;
    pp_model_config *cfg = &p->model;
    pp_error e;
    if (pp_model_config_default(k_model_names[which], cfg, &e) != PP_OK) {
        pp_walk_error(w, f[K_NAME], "%s", e.msg);
        return;
    }
    w->model_ok = true;
    bool delay = cfg->kind == PP_MODEL_DELAY;
    const bool seq = cfg->kind == PP_MODEL_SEQUENTIAL;
    if (cfg->kind == PP_MODEL_GPT2) {
        /* keys of image models and the delay model do not apply */
        for (int k = K_CLASSES; k < K_GPT2; k++)
            if (f[k]) {
                pp_walk_error(w, f[k], "model.%s does not apply to gpt2 (its keys: preset, "
                              "n_layer, n_head, n_embd, vocab_size, block_size, bias, dropout, "
                              "tie_embeddings)", keys[k]);
                w->model_ok = false;
            }
        pp_walk_gpt2(w, n, f + K_GPT2);
        return;
    }
    for (int k = K_GPT2; k < K_N; k++)
        if (f[k]) pp_walk_error(w, f[k], "model.%s applies only to gpt2", keys[k]);
    w->classes_node = f[K_CLASSES]; /* sequential: checked against the last layer later */
    if (seq) {
        walk_sequential(w, n, f[K_LAYERS], f[K_INIT], f[K_STD], cfg);
    } else {
        const int only[] = {K_LAYERS, K_INIT, K_STD};
        for (int i = 0; i < 3; i++)
            if (f[only[i]])
                pp_walk_error(w, f[only[i]], "model.%s applies only to the sequential model",
                              keys[only[i]]);
    }
    if (f[K_CLASSES] &&
        !pp_walk_int32(w, f[K_CLASSES], "model.num_classes", 1, 1000000, &cfg->num_classes))
        w->model_ok = false;
    if (f[K_CHANNELS] && !pp_walk_int32(w, f[K_CHANNELS], "model.in_channels", 1,
                                        PP_PLAN_MAX_CHANNELS, &cfg->in_channels))
        w->model_ok = false;
    if (f[K_STEM]) {
        static const char *const stems[] = {"imagenet", "cifar"};
        if (delay || seq) {
            pp_walk_error(w, f[K_STEM], "model.stem applies only to ResNet models");
        } else {
            int s = pp_walk_choice(w, f[K_STEM], "model.stem", stems, 2, "imagenet or cifar");
            if (s >= 0)
                cfg->stem = s == 1 ? PP_STEM_CIFAR : PP_STEM_IMAGENET;
            else
                w->model_ok = false;
        }
    }
    if (f[K_ZERO]) {
        if (delay || seq)
            pp_walk_error(w, f[K_ZERO], "model.zero_init_residual applies only to ResNet models");
        else if (!pp_walk_bool(w, f[K_ZERO], "model.zero_init_residual", &cfg->zero_init_residual))
            w->model_ok = false;
    }
    if (!delay) {
        if (f[K_FWD]) pp_walk_error(w, f[K_FWD], "model.forward_ms applies only to the delay model");
        if (f[K_BWD])
            pp_walk_error(w, f[K_BWD], "model.backward_ms applies only to the delay model");
        for (int k = K_BIN; k <= K_BWT; k++)
            if (f[k]) pp_walk_error(w, f[k], "model.%s applies only to the delay model", keys[k]);
        return;
    }
    p->forward_ms_mark = pp_walk_mark(f[K_FWD]);
    p->backward_ms_mark = pp_walk_mark(f[K_BWD]);
    if (f[K_FWD])
        walk_delay_times(w, f[K_FWD], "model.forward_ms", cfg->forward_ms, &cfg->n_forward_ms,
                         &w->forward_is_list);
    if (f[K_BWD])
        walk_delay_times(w, f[K_BWD], "model.backward_ms", cfg->backward_ms, &cfg->n_backward_ms,
                         &w->backward_is_list);
    /* the split backward's parts (I, W); each defaults to half of backward_ms */
    if (f[K_BIN])
        walk_delay_times(w, f[K_BIN], "model.backward_input_ms", cfg->backward_input_ms,
                         &cfg->n_backward_input_ms, &w->input_is_list);
    if (f[K_BWT])
        walk_delay_times(w, f[K_BWT], "model.backward_weight_ms", cfg->backward_weight_ms,
                         &cfg->n_backward_weight_ms, &w->weight_is_list);
    w->forward_node = f[K_FWD];
    w->backward_node = f[K_BWD];
    w->input_node = f[K_BIN];
    w->weight_node = f[K_BWT];
}

/* A sequential model against its input: every layer must fit the one before
 * (a problem is reported at the layer), and the last layer's width is the
 * number of classes (model.num_classes, when given, must agree). Builds the
 * catalogue the stages are resolved against. */
void pp_walk_resolve_sequential(pp_walk *w, const pp_ynode *model)
{
    pp_plan *p = w->plan;
    if (!w->size_ok) {
        w->model_ok = false;
        return;
    }
    int bad = -1;
    pp_error e;
    if (pp_catalogue_build_at(&p->model, &p->catalogue, &bad, &e) != PP_OK) {
        memset(&p->catalogue, 0, sizeof p->catalogue);
        const pp_ynode *at = w->layers_node && bad >= 0 && bad < w->layers_node->n
                                 ? w->layers_node->kids[bad]
                                 : model;
        pp_walk_error(w, at, "%s (input %dx%dx%d)", e.msg, p->model.in_channels,
                      p->model.image_h, p->model.image_w);
        w->model_ok = false;
        return;
    }
    w->catalogue_ok = true;
    const int classes = (int)(p->catalogue.units[p->catalogue.n - 1].out_bytes / 4);
    if (w->classes_node && p->model.num_classes != classes) {
        pp_walk_error(w, w->classes_node,
                      "model.num_classes is %d but the last layer '%s' gives %d outputs",
                      p->model.num_classes, p->catalogue.units[p->catalogue.n - 1].name, classes);
        w->model_ok = false;
    }
    p->model.num_classes = classes;
}

