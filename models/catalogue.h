/*
 * catalogue.h - the model description the partitioner sees: the ordered list
 * of placeable units of a model with their cost metadata. This is the only
 * part of models/ that partitioner/ depends on.
 *
 * Units are torchvision module names in network order: conv1, bn1, relu,
 * maxpool, layer1.0 ... layer4.N, avgpool, fc ("layerN" in a plan stands for
 * every "layerN.K"). Costs are per sample, for the configured input size.
 */
#ifndef PP_MODELS_CATALOGUE_H
#define PP_MODELS_CATALOGUE_H

#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pp_stem {
    PP_STEM_IMAGENET = 0, /* 7x7/2 conv, BN, ReLU, 3x3/2 max pool */
    PP_STEM_CIFAR = 1,    /* 3x3/1 conv, BN, ReLU, no max pool (maxpool is identity) */
} pp_stem;

typedef enum pp_model_kind {
    PP_MODEL_RESNET = 0,
    PP_MODEL_DELAY = 1,
} pp_model_kind;

#define PP_MAX_DELAY_STAGES 64

/* What a plan's `model:` section and `data.image_size` resolve to. */
typedef struct pp_model_config {
    pp_model_kind kind;
    char name[16];          /* "resnet50", ..., "delay" */
    int depth;              /* 18, 34, 50, 101, 152 (resnet) */
    int num_classes;        /* default 1000 */
    int in_channels;        /* default 3 */
    pp_stem stem;           /* default imagenet */
    int image_h, image_w;   /* input size the costs are computed for */
    /* delay model: per-stage times in milliseconds (n_delay values, or one for all) */
    int n_forward_ms, n_backward_ms;
    double forward_ms[PP_MAX_DELAY_STAGES];
    double backward_ms[PP_MAX_DELAY_STAGES];
} pp_model_config;

typedef struct pp_unit_info {
    char name[32];          /* torchvision name, e.g. "layer3.2" */
    int64_t fwd_macs;       /* forward multiply-adds per sample (conv and linear only) */
    int64_t fwd_flops;      /* forward FLOPs per sample: 2 per multiply-add, plus the
                               elementwise work (batch norm, relu, add, pooling, bias) */
    int64_t param_count;    /* learnable parameters */
    int64_t param_bytes;    /* parameters + buffers, bytes */
    int64_t act_bytes;      /* bytes kept for backward, per sample */
    int64_t act_fixed_bytes; /* bytes kept for backward per micro-batch whatever its size
                               (batch-norm saved statistics) */
    int64_t out_bytes;      /* bytes of the output activation, per sample */
} pp_unit_info;

typedef struct pp_catalogue {
    int n;                  /* number of units */
    pp_unit_info *units;    /* n entries, network order; owned */
} pp_catalogue;

/* Fills cfg from a model name ("resnet50"...) with torchvision defaults
 * (1000 classes, 3 channels, imagenet stem, 224x224). PP_ERR_INPUT for an
 * unknown name. */
pp_status pp_model_config_default(const char *name, pp_model_config *cfg, pp_error *err);

/* Builds the catalogue of a ResNet config. PP_ERR_INPUT if the input size is
 * too small for the network. The caller frees it with pp_catalogue_free. */
pp_status pp_catalogue_build(const pp_model_config *cfg, pp_catalogue *out, pp_error *err);
void pp_catalogue_free(pp_catalogue *cat);

/* Index of a unit by exact name, or -1. */
int pp_catalogue_find(const pp_catalogue *cat, const char *name);

#ifdef __cplusplus
}
#endif

#endif
