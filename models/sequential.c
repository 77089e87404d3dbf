/*
 * sequential.c - the unit specs of a sequential model: one unit per layer of
 * the plan, named as the layer, its input size carried from the layer before
 * so that each layer is checked where it stands and named in the error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"
#include "models/resnet.h"
#include "models/transformer/gpt2.h"
#include "models/unit_kind.h"

static const char *type_name(pp_seq_type t)
{
    switch (t) {
    case PP_SEQ_CONV: return "conv";
    case PP_SEQ_BATCHNORM: return "batchnorm";
    case PP_SEQ_RELU: return "relu";
    case PP_SEQ_SIGMOID: return "sigmoid";
    case PP_SEQ_MAXPOOL: return "maxpool";
    case PP_SEQ_AVGPOOL: return "avgpool";
    case PP_SEQ_GLOBAL_AVGPOOL: return "global_avgpool";
    case PP_SEQ_FLATTEN: return "flatten";
    case PP_SEQ_LINEAR: return "linear";
    }
    return "?";
}

/* "(N, 20, 12, 12)" or "(N, 800)" */
static void describe(int ndim, const int64_t *shape, char *buf, size_t n)
{
    if (ndim == 4)
        snprintf(buf, n, "(N, %lld, %lld, %lld)", (long long)shape[1], (long long)shape[2],
                 (long long)shape[3]);
    else
        snprintf(buf, n, "(N, %lld)", (long long)shape[1]);
}

/* The spec of layer l for an input of shape (ndim, in); false with a message
 * when it cannot take that input. */
static bool layer_spec(const pp_model_config *cfg, const pp_seq_layer *l, int ndim,
                       const int64_t *in, pp_unit_spec *s, pp_error *err)
{
    char got[64];
    describe(ndim, in, got, sizeof got);
    const bool image = ndim == 4;
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", l->name);
    s->in_c = (int)in[1];
    s->init = cfg->init == PP_SEQ_INIT_NORMAL ? PP_INIT_NORMAL : PP_INIT_TORCH;
    s->init_std = cfg->init_std;
    switch (l->type) {
    case PP_SEQ_CONV:
    case PP_SEQ_MAXPOOL:
    case PP_SEQ_AVGPOOL:
    case PP_SEQ_GLOBAL_AVGPOOL:
        if (!image) {
            pp_error_set(err, PP_ERR_INPUT, "layer '%s' (%s) needs images (N, C, H, W), gets %s",
                         l->name, type_name(l->type), got);
            return false;
        }
        break;
    default: break;
    }
    if (l->type == PP_SEQ_CONV || l->type == PP_SEQ_MAXPOOL || l->type == PP_SEQ_AVGPOOL) {
        if (2 * l->pad > l->kernel) {
            pp_error_set(err, PP_ERR_INPUT,
                         "layer '%s' (%s): padding %d is more than half the kernel %d", l->name,
                         type_name(l->type), l->pad, l->kernel);
            return false;
        }
        if (pp_unit_window_out(in[2], l->kernel, l->stride, l->pad) < 1 ||
            pp_unit_window_out(in[3], l->kernel, l->stride, l->pad) < 1) {
            pp_error_set(err, PP_ERR_INPUT,
                         "layer '%s' (%s): its %dx%d window (padding %d) does not fit its input %s",
                         l->name, type_name(l->type), l->kernel, l->kernel, l->pad, got);
            return false;
        }
        s->kernel = l->kernel;
        s->stride = l->stride;
        s->pad = l->pad;
    }
    switch (l->type) {
    case PP_SEQ_CONV:
        s->kind = PP_UNIT_CONV;
        s->out_c = l->out;
        s->bias = l->bias;
        break;
    case PP_SEQ_BATCHNORM: s->kind = PP_UNIT_BN; s->out_c = s->in_c; break;
    case PP_SEQ_RELU: s->kind = PP_UNIT_RELU; s->out_c = s->in_c; break;
    case PP_SEQ_SIGMOID: s->kind = PP_UNIT_SIGMOID; s->out_c = s->in_c; break;
    case PP_SEQ_MAXPOOL: s->kind = PP_UNIT_MAXPOOL; s->out_c = s->in_c; break;
    case PP_SEQ_AVGPOOL: s->kind = PP_UNIT_AVGPOOL2D; s->out_c = s->in_c; break;
    case PP_SEQ_GLOBAL_AVGPOOL: s->kind = PP_UNIT_AVGPOOL; s->out_c = s->in_c; break;
    case PP_SEQ_FLATTEN: s->kind = PP_UNIT_FLATTEN; s->out_c = s->in_c; break;
    case PP_SEQ_LINEAR:
        if (image) {
            pp_error_set(err, PP_ERR_INPUT,
                         "layer '%s' (linear) needs features (N, F), gets %s: put a flatten "
                         "layer before it",
                         l->name, got);
            return false;
        }
        s->kind = PP_UNIT_FC;
        s->out_c = l->out;
        break;
    }
    return true;
}

pp_status pp_sequential_units(const pp_model_config *cfg, pp_unit_spec **specs, int *n,
                              int *bad_layer, pp_error *err)
{
    *specs = NULL;
    *n = 0;
    if (bad_layer) *bad_layer = -1;
    if (cfg->kind != PP_MODEL_SEQUENTIAL)
        return pp_error_set(err, PP_ERR_INPUT, "model '%s' is not sequential", cfg->name);
    if (cfg->n_layers < 1 || cfg->n_layers > PP_MAX_SEQ_LAYERS)
        return pp_error_set(err, PP_ERR_INPUT, "a sequential model needs 1 to %d layers (got %d)",
                            PP_MAX_SEQ_LAYERS, cfg->n_layers);
    if (cfg->in_channels < 1 || cfg->image_h < 1 || cfg->image_w < 1)
        return pp_error_set(err, PP_ERR_INPUT, "input %dx%dx%d is not positive",
                            cfg->in_channels, cfg->image_h, cfg->image_w);
    pp_unit_spec *s = calloc((size_t)cfg->n_layers, sizeof *s);
    if (!s) return pp_error_set(err, PP_ERR_OOM, "out of host memory (unit list)");
    int ndim = 4;
    int64_t shape[PP_MAX_DIMS] = {1, cfg->in_channels, cfg->image_h, cfg->image_w};
    for (int i = 0; i < cfg->n_layers; i++) {
        int64_t next[PP_MAX_DIMS];
        pp_status st = PP_ERR_INPUT;
        if (layer_spec(cfg, &cfg->layers[i], ndim, shape, &s[i], err))
            st = pp_unit_output_shape(&s[i], ndim, shape, &ndim, next, err);
        if (st != PP_OK) {
            if (bad_layer) *bad_layer = i;
            free(s);
            return PP_ERR_INPUT;
        }
        memcpy(shape, next, sizeof shape);
    }
    if (ndim != 2) {
        char got[64];
        describe(ndim, shape, got, sizeof got);
        if (bad_layer) *bad_layer = cfg->n_layers - 1;
        free(s);
        return pp_error_set(err, PP_ERR_INPUT,
                            "the last layer '%s' gives %s; a classifier ends in (N, classes) "
                            "(a linear layer, or a flatten or global average pool)",
                            cfg->layers[cfg->n_layers - 1].name, got);
    }
    *specs = s;
    *n = cfg->n_layers;
    return PP_OK;
}

pp_status pp_model_units(const pp_model_config *cfg, pp_unit_spec **specs, int *n,
                         int *bad_layer, pp_error *err)
{
    if (bad_layer) *bad_layer = -1;
    pp_status st = cfg->kind == PP_MODEL_SEQUENTIAL ? pp_sequential_units(cfg, specs, n, bad_layer, err)
                   : cfg->kind == PP_MODEL_GPT2     ? pp_gpt2_units(cfg, specs, n, err)
                                                    : pp_resnet_units(cfg, specs, n, err);
    if (st != PP_OK || cfg->kind == PP_MODEL_DELAY) return st;
    for (int i = 0; i < *n; i++) (*specs)[i].nhwc = cfg->nhwc;
    if (!cfg->bf16) return PP_OK;
    /* bf16: activations in bf16 throughout (GPT-2: but its residual stream).
     * A final linear layer's logits stay f32: a classifier's are tiny (batch x
     * classes), so the f32 loss costs nothing. GPT-2's head's logits are bf16,
     * as torch.autocast's (a bf16 matmul): at batch x tokens x vocabulary they
     * are the step's largest tensor; the loss widens them (softmax and
     * cross-entropy in f32) and rounds their gradient once to bf16. */
    for (int i = 0; i < *n; i++) (*specs)[i].bf16 = true;
    if ((*specs)[*n - 1].kind == PP_UNIT_FC) (*specs)[*n - 1].f32_out = true;
    if (cfg->kind == PP_MODEL_GPT2) pp_gpt2_bf16_stream(*specs, *n);
    return PP_OK;
}
