/* delay.c - building delay-model stages from the config's per-stage times. */
#include "models/delay.h"

#include <stdio.h>

static pp_status pick(const char *what, int n, const double *ms, int k, double *out, pp_error *err)
{
    if (n < 1 || n > PP_MAX_DELAY_STAGES || (n > 1 && k >= n))
        return pp_error_set(err, PP_ERR_INPUT, "delay model: no %s time for stage %d (%d given)",
                            what, k, n);
    *out = ms[n == 1 ? 0 : k];
    if (!(*out >= 0 && *out <= 3.6e6))
        return pp_error_set(err, PP_ERR_INPUT,
                            "delay model: %s time %g ms of stage %d is not in [0, 3600000]", what,
                            *out, k);
    return PP_OK;
}

pp_status pp_delay_stage_new(const pp_model_config *cfg, int stage_index, pp_device_ctx *dev,
                             pp_stage **out, pp_error *err)
{
    *out = NULL;
    if (cfg->kind != PP_MODEL_DELAY)
        return pp_error_set(err, PP_ERR_INPUT, "model '%s' is not the delay model", cfg->name);
    if (stage_index < 0)
        return pp_error_set(err, PP_ERR_INVALID, "delay stage index %d is negative", stage_index);
    if (cfg->num_classes < 1)
        return pp_error_set(err, PP_ERR_INPUT, "delay model: num_classes %d is not positive",
                            cfg->num_classes);
    pp_unit_spec spec = {.kind = PP_UNIT_DELAY, .in_c = 1, .out_c = cfg->num_classes};
    snprintf(spec.name, sizeof spec.name, "delay%d", stage_index);
    PP_TRY(pick("forward", cfg->n_forward_ms, cfg->forward_ms, stage_index, &spec.forward_ms, err));
    PP_TRY(pick("backward", cfg->n_backward_ms, cfg->backward_ms, stage_index, &spec.backward_ms,
                err));
    /* the split backward's parts: as given, else half of the backward each */
    if (cfg->n_backward_input_ms > 0 || cfg->n_backward_weight_ms > 0) {
        spec.split_ms = true;
        spec.backward_input_ms = spec.backward_weight_ms = spec.backward_ms / 2;
        if (cfg->n_backward_input_ms > 0)
            PP_TRY(pick("backward input", cfg->n_backward_input_ms, cfg->backward_input_ms,
                        stage_index, &spec.backward_input_ms, err));
        if (cfg->n_backward_weight_ms > 0)
            PP_TRY(pick("backward weight", cfg->n_backward_weight_ms, cfg->backward_weight_ms,
                        stage_index, &spec.backward_weight_ms, err));
    }
    int64_t sample[PP_MAX_DIMS] = {1, cfg->num_classes, 1, 1};
    int ndim = 2;
    if (stage_index == 0) {
        if (cfg->in_channels < 1 || cfg->image_h < 1 || cfg->image_w < 1)
            return pp_error_set(err, PP_ERR_INPUT, "delay model: input %dx%dx%d is not positive",
                                cfg->in_channels, cfg->image_h, cfg->image_w);
        ndim = 4;
        sample[1] = cfg->in_channels;
        sample[2] = cfg->image_h;
        sample[3] = cfg->image_w;
    }
    return pp_stage_new_from_specs(&spec, 1, 0, ndim, sample, dev, out, err);
}
