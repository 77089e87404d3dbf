/*
 * catalogue.h - the model description the partitioner sees: the ordered list
 * of placeable units of a model with their cost metadata. This is the only
 * part of models/ that partitioner/ depends on.
 *
 * models/ holds the models: this catalogue, the unit specs of layered
 * models (model.h; ResNets in resnet.c, plan-described sequential models in
 * sequential.c), units with a table of functions per kind (unit.h,
 * unit_kind.h: unit_*.c, sharing layers.c), stages of units on one device
 * (stage.h), the delay model for schedule tests (delay.h) and the seeded
 * initialisation (rng.h). It includes runtime/ only.
 *
 * Units are torchvision module names in network order: conv1, bn1, relu,
 * maxpool, layer1.0 ... layer4.N, avgpool, fc ("layerN" in a plan stands for
 * every "layerN.K"). Costs are per sample, for the configured input size.
 */
#ifndef PP_MODELS_CATALOGUE_H
#define PP_MODELS_CATALOGUE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pp_stem {
    PP_STEM_IMAGENET = 0, /* 7x7/2 conv, BN, ReLU, 3x3/2 max pool */
    PP_STEM_CIFAR = 1,    /* 3x3/1 conv, BN, ReLU, no max pool (maxpool is an identity
                             unit, which stage lists may leave out) */
} pp_stem;

typedef enum pp_model_kind {
    PP_MODEL_RESNET = 0,
    PP_MODEL_DELAY = 1,
    PP_MODEL_SEQUENTIAL = 2, /* layers listed in the plan */
    PP_MODEL_GPT2 = 3,       /* GPT-2 (models/transformer/): token inputs */
} pp_model_kind;

/* GPT-2's shape (Hugging Face's GPT2Config, nanoGPT's GPTConfig). */
typedef struct pp_gpt2_config {
    int n_layer, n_head, n_embd; /* blocks, attention heads, width (n_embd % n_head == 0) */
    int vocab_size;
    int block_size;         /* the model's positions (wpe's rows) */
    int seq_len;            /* T: the positions a sample holds (the data's windows, the
                               costs' input), 1..block_size; 0: block_size */
    bool bias;              /* the linear layers and layer norms have biases (default true) */
    double dropout;         /* training forwards' dropout probability, [0, 1); 0: none */
    bool tie_embeddings;    /* lm_head's weight is wte's (default true) */
} pp_gpt2_config;

/* The published sizes: 124M, 350M, 774M, 1558M (n_layer, n_head, n_embd; vocabulary
 * 50257, 1024 positions). PP_ERR_INPUT for another name. */
pp_status pp_gpt2_preset(const char *name, pp_gpt2_config *out, pp_error *err);

#define PP_MAX_DELAY_STAGES 64
#define PP_MAX_SEQ_LAYERS 128
#define PP_SEQ_NAME_MAX 32 /* bytes of a layer name, NUL included */

/* The layer types of a sequential model (torch.nn's modules of the same names). */
typedef enum pp_seq_type {
    PP_SEQ_CONV = 0,  /* Conv2d(out_channels, kernel, stride, padding, bias) */
    PP_SEQ_BATCHNORM, /* BatchNorm2d over images, BatchNorm1d over features */
    PP_SEQ_RELU,
    PP_SEQ_SIGMOID,
    PP_SEQ_MAXPOOL,   /* MaxPool2d(kernel, stride, padding) */
    PP_SEQ_AVGPOOL,   /* AvgPool2d(kernel, stride, padding), count_include_pad */
    PP_SEQ_GLOBAL_AVGPOOL, /* AdaptiveAvgPool2d(1) then flatten: (N, C, H, W) -> (N, C) */
    PP_SEQ_FLATTEN,   /* Flatten(): (N, C, H, W) -> (N, C*H*W) */
    PP_SEQ_LINEAR,    /* Linear(out_features), with bias */
} pp_seq_type;

/* One layer of a sequential model. Its input size comes from the layer before
 * (the model's in_channels and image size for the first). */
typedef struct pp_seq_layer {
    char name[PP_SEQ_NAME_MAX]; /* module name: parameters are "<name>.weight", ... */
    pp_seq_type type;
    int out;          /* conv: out_channels; linear: out_features */
    int kernel, stride, pad; /* conv and pools (stride defaults: conv 1, pools kernel) */
    bool bias;        /* conv (default true; linear always has one) */
} pp_seq_layer;

/* How a sequential model's conv and linear weights start. */
typedef enum pp_seq_init {
    PP_SEQ_INIT_TORCH = 0, /* PyTorch's defaults (uniform +-1/sqrt(fan_in), bias too) */
    PP_SEQ_INIT_NORMAL,    /* weight normal(0, init_std), bias 0 */
} pp_seq_init;

/* What a plan's `model:` section and `data.image_size` resolve to. */
typedef struct pp_model_config {
    pp_model_kind kind;
    char name[16];          /* "resnet50", ..., "delay" */
    int depth;              /* 18, 34, 50, 101, 152 (resnet) */
    int num_classes;        /* default 1000 */
    int in_channels;        /* default 3 */
    pp_stem stem;           /* default imagenet */
    bool zero_init_residual; /* ResNet: each block's last batch norm's weight starts at
                              * 0 (torchvision's zero_init_residual); default false */
    int image_h, image_w;   /* input size the costs are computed for */
    /* delay model: per-stage times in milliseconds (n_delay values, or one for all) */
    int n_forward_ms, n_backward_ms;
    double forward_ms[PP_MAX_DELAY_STAGES];
    double backward_ms[PP_MAX_DELAY_STAGES];
    /* ... and of the split backward's parts (I, W); 0 values: not given, each part
     * then takes half of backward_ms (backward_ms stays the time of a whole B) */
    int n_backward_input_ms, n_backward_weight_ms;
    double backward_input_ms[PP_MAX_DELAY_STAGES];
    double backward_weight_ms[PP_MAX_DELAY_STAGES];
    /* sequential model: its layers in order; num_classes is the last one's width */
    int n_layers;
    pp_seq_layer layers[PP_MAX_SEQ_LAYERS];
    pp_seq_init init;
    double init_std;
    /* GPT-2 (kind PP_MODEL_GPT2) */
    pp_gpt2_config gpt2;
    /* bf16 mixed precision (the plan's precision: bf16): every unit's spec gets
     * bf16, and a final fc layer its f32_out (pp_model_units); not for delay */
    bool bf16;
    /* activations (4-D) and the bf16 copies of convolution weights in NHWC memory
     * order (runtime/core/tensor.h) instead of NCHW: set per stage by whoever builds
     * it (the pipeline, for devices that compute faster so); results do not change */
    bool nhwc;
} pp_model_config;

typedef struct pp_unit_info {
    char name[32];          /* torchvision name, e.g. "layer3.2" */
    int64_t fwd_macs;       /* forward multiply-adds per sample (conv and linear only) */
    int64_t fwd_flops;      /* forward FLOPs per sample: 2 per multiply-add, plus the
                               elementwise work (batch norm, relu, add, pooling, bias) */
    int64_t param_count;    /* learnable parameters */
    int64_t tied_count;     /* of them, copies of another unit's (a tied output head's
                               weight: pp_named_tensor.tied_to), counted once by the
                               model's size */
    int64_t param_bytes;    /* parameters + buffers, bytes */
    int64_t act_bytes;      /* bytes kept for backward, per sample */
    int64_t act_fixed_bytes; /* bytes kept for backward per micro-batch whatever its size
                               (batch-norm saved statistics) */
    int64_t out_bytes;      /* bytes of the output activation, per sample */
    bool keeps_input;       /* act_bytes include the unit's input activation ... */
    bool keeps_output;      /* ... its output activation (in a stage, one tensor serves a
                               unit keeping its output and the next keeping its input:
                               pp_catalogue_kept_bytes) */
    int64_t in_bytes;       /* bytes of the input activation per sample, in the unit's dtype
                               (what a stage starting here keeps under recomputation) */
    int64_t iw_bytes;       /* bytes kept between the input and the weight part of a split
                               backward, per sample (layer inputs, output gradients) */
    int64_t iw_fixed_bytes; /* ... per micro-batch whatever its size (batch-norm parameter
                               gradients) */
    bool iw_keeps_input;    /* iw_bytes include the unit's input activation ... */
    bool iw_keeps_output;   /* ... its output activation */
    int min_batch;          /* smallest micro-batch a training forward accepts: 2 where a
                               batch norm sees one value per channel per sample */
    bool identity;          /* computes nothing and holds nothing (the cifar stem's maxpool,
                               kept so that names match torchvision): a stage's layer list
                               may leave it out, and it joins the stage of the unit before */
} pp_unit_info;

typedef struct pp_catalogue {
    int n;                  /* number of units */
    pp_unit_info *units;    /* n entries, network order; owned */
} pp_catalogue;

/* Fills cfg from a model name ("resnet50"...) with torchvision defaults
 * (1000 classes, 3 channels, imagenet stem, 224x224). PP_ERR_INPUT for an
 * unknown name. */
pp_status pp_model_config_default(const char *name, pp_model_config *cfg, pp_error *err);

/* What one sample of the model's input is: F32 (C, H, W) images, or for
 * GPT-2 I32 (T) token ids; shape[0] is 1 (a batch of one), unused entries
 * 1. */
void pp_model_input(const pp_model_config *cfg, int *ndim, int64_t *shape, pp_dtype *dtype);
/* The targets the loss compares one sample's output with: 1 label, or for
 * GPT-2 the T next tokens (one per position). */
int pp_model_targets_per_sample(const pp_model_config *cfg);

/* Builds the catalogue of a ResNet, sequential or GPT-2 config. PP_ERR_INPUT if the
 * input size is too small for the network or a layer does not fit the one
 * before it (*bad_layer, when not NULL, then receives that layer's index, else
 * -1). The caller frees it with pp_catalogue_free. */
pp_status pp_catalogue_build(const pp_model_config *cfg, pp_catalogue *out, pp_error *err);
pp_status pp_catalogue_build_at(const pp_model_config *cfg, pp_catalogue *out, int *bad_layer,
                                pp_error *err);
void pp_catalogue_free(pp_catalogue *cat);

/* Bytes a training forward of units first..last, run as one stage, keeps for
 * a micro-batch of n samples: each unit's act_bytes * n + act_fixed_bytes,
 * less the activations two neighbours both keep (one tensor, shared). */
int64_t pp_catalogue_kept_bytes(const pp_catalogue *cat, int first, int last, int64_t n);

/* Bytes the units first..last, run as one stage, keep for a micro-batch of n
 * samples between the input part (I) and the weight part (W) of a split
 * backward (pp_stage_backward_input): each unit's iw_bytes * n +
 * iw_fixed_bytes, less the activations two neighbours both keep. */
int64_t pp_catalogue_iw_bytes(const pp_catalogue *cat, int first, int last, int64_t n);

/* Bytes a stage starting at unit first keeps for a micro-batch of n samples
 * forwarded with PP_STAGE_KEEP_INPUT (recomputation): the copy of its input,
 * in_bytes * n. */
int64_t pp_catalogue_input_bytes(const pp_catalogue *cat, int first, int64_t n);

/* Index of a unit by exact name, or -1. */
int pp_catalogue_find(const pp_catalogue *cat, const char *name);

#ifdef __cplusplus
}
#endif

#endif
