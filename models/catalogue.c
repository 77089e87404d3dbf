/* catalogue.c - model config defaults and the per-unit cost catalogue of a
 * ResNet or sequential model. */
#include "models/catalogue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"
#include "models/unit.h"

pp_status pp_model_config_default(const char *name, pp_model_config *cfg, pp_error *err)
{
    static const struct {
        const char *name;
        int depth;
    } known[] = {{"resnet18", 18},
                 {"resnet34", 34},
                 {"resnet50", 50},
                 {"resnet101", 101},
                 {"resnet152", 152}};
    memset(cfg, 0, sizeof *cfg);
    if (!name) return pp_error_set(err, PP_ERR_INPUT, "no model name");
    cfg->num_classes = 1000;
    cfg->in_channels = 3;
    cfg->stem = PP_STEM_IMAGENET;
    cfg->image_h = cfg->image_w = 224;
    if (strcmp(name, "sequential") == 0) { /* layers, and so classes, come from the plan */
        cfg->kind = PP_MODEL_SEQUENTIAL;
        snprintf(cfg->name, sizeof cfg->name, "sequential");
        cfg->num_classes = 0;
        return PP_OK;
    }
    if (strcmp(name, "gpt2") == 0) { /* 124M; the plan's keys change it */
        cfg->kind = PP_MODEL_GPT2;
        snprintf(cfg->name, sizeof cfg->name, "gpt2");
        PP_TRY(pp_gpt2_preset("124M", &cfg->gpt2, err));
        cfg->num_classes = cfg->gpt2.vocab_size;
        cfg->in_channels = 1;
        return PP_OK;
    }
    if (strcmp(name, "delay") == 0) {
        cfg->kind = PP_MODEL_DELAY;
        snprintf(cfg->name, sizeof cfg->name, "delay");
        cfg->num_classes = 10;
        cfg->n_forward_ms = cfg->n_backward_ms = 1;
        cfg->forward_ms[0] = 1.0;
        cfg->backward_ms[0] = 2.0;
        return PP_OK;
    }
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(name, known[i].name) == 0) {
            cfg->kind = PP_MODEL_RESNET;
            cfg->depth = known[i].depth;
            snprintf(cfg->name, sizeof cfg->name, "%s", known[i].name);
            return PP_OK;
        }
    }
    return pp_error_set(err, PP_ERR_INPUT,
                        "unknown model '%s' (expected resnet18, resnet34, resnet50, resnet101, "
                        "resnet152, sequential, gpt2 or delay)",
                        name);
}

void pp_model_input(const pp_model_config *cfg, int *ndim, int64_t *shape, pp_dtype *dtype)
{
    for (int i = 0; i < PP_MAX_DIMS; i++) shape[i] = 1;
    if (cfg->kind == PP_MODEL_GPT2) {
        *ndim = 2;
        shape[1] = cfg->gpt2.seq_len > 0 ? cfg->gpt2.seq_len : cfg->gpt2.block_size;
        *dtype = PP_I32;
        return;
    }
    *ndim = 4;
    shape[1] = cfg->in_channels;
    shape[2] = cfg->image_h;
    shape[3] = cfg->image_w;
    *dtype = PP_F32;
}

int pp_model_targets_per_sample(const pp_model_config *cfg)
{
    if (cfg->kind != PP_MODEL_GPT2) return 1;
    return cfg->gpt2.seq_len > 0 ? cfg->gpt2.seq_len : cfg->gpt2.block_size;
}

pp_status pp_catalogue_build(const pp_model_config *cfg, pp_catalogue *out, pp_error *err)
{
    return pp_catalogue_build_at(cfg, out, NULL, err);
}

pp_status pp_catalogue_build_at(const pp_model_config *cfg, pp_catalogue *out, int *bad_layer,
                                pp_error *err)
{
    memset(out, 0, sizeof *out);
    if (bad_layer) *bad_layer = -1;
    if (cfg->kind == PP_MODEL_DELAY)
        return pp_error_set(err, PP_ERR_INPUT, "the delay model has no layer catalogue");
    const bool tokens = cfg->kind == PP_MODEL_GPT2;
    if (!tokens && (cfg->image_h < 1 || cfg->image_w < 1))
        return pp_error_set(err, PP_ERR_INPUT, "image size %dx%d is not positive", cfg->image_h,
                            cfg->image_w);
    pp_unit_spec *specs;
    int n;
    PP_TRY(pp_model_units(cfg, &specs, &n, bad_layer, err));
    pp_unit_info *units = calloc((size_t)n, sizeof *units);
    if (!units) {
        free(specs);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (catalogue)");
    }
    int ndim;
    int64_t shape[PP_MAX_DIMS];
    pp_dtype dtype;
    pp_model_input(cfg, &ndim, shape, &dtype);
    for (int i = 0; i < n; i++) {
        int64_t next[PP_MAX_DIMS];
        pp_status s = pp_unit_costs(&specs[i], ndim, shape, &units[i], err);
        if (s == PP_OK) s = pp_unit_output_shape(&specs[i], ndim, shape, &ndim, next, err);
        if (s == PP_OK) memcpy(shape, next, sizeof shape);
        if (s == PP_OK) continue;
        if (!tokens) { /* an image model: the image is too small */
            pp_error_set(err, PP_ERR_INPUT, "image size %dx%d is too small for %s (at %s)",
                         cfg->image_h, cfg->image_w, cfg->name, specs[i].name);
        } else if (err) { /* GPT-2: the unit's own message, named */
            pp_error_prefix(err, "%s (at %s)", cfg->name, specs[i].name);
            err->code = PP_ERR_INPUT;
        }
        free(specs);
        free(units);
        return PP_ERR_INPUT;
    }
    free(specs);
    out->n = n;
    out->units = units;
    return PP_OK;
}

void pp_catalogue_free(pp_catalogue *cat)
{
    if (!cat) return;
    free(cat->units);
    cat->units = NULL;
    cat->n = 0;
}

int64_t pp_catalogue_kept_bytes(const pp_catalogue *cat, int first, int last, int64_t n)
{
    int64_t b = 0;
    if (first < 0) first = 0;
    for (int i = first; i <= last && i < cat->n; i++) {
        const pp_unit_info *u = &cat->units[i];
        b += u->act_bytes * n + u->act_fixed_bytes;
        if (i > first && u->keeps_input && cat->units[i - 1].keeps_output)
            b -= cat->units[i - 1].out_bytes * n;
    }
    return b;
}

int64_t pp_catalogue_iw_bytes(const pp_catalogue *cat, int first, int last, int64_t n)
{
    int64_t b = 0;
    if (first < 0) first = 0;
    for (int i = first; i <= last && i < cat->n; i++) {
        const pp_unit_info *u = &cat->units[i];
        b += u->iw_bytes * n + u->iw_fixed_bytes;
        if (i > first && u->iw_keeps_input && cat->units[i - 1].iw_keeps_output)
            b -= cat->units[i - 1].out_bytes * n;
    }
    return b;
}

int64_t pp_catalogue_input_bytes(const pp_catalogue *cat, int first, int64_t n)
{
    return first >= 0 && first < cat->n ? cat->units[first].in_bytes * n : 0;
}

int pp_catalogue_find(const pp_catalogue *cat, const char *name)
{
    for (int i = 0; i < cat->n; i++)
        if (strcmp(cat->units[i].name, name) == 0) return i;
    return -1;
}
