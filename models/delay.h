/*
 * delay.h - stages of the synthetic delay model, for exploring schedules and
 * checking the executor against the simulator.
 *
 * A delay stage is an ordinary pp_stage (stage.h) holding one unit named
 * "delay<k>": forward calls pp_delay(forward_ms) and writes y (N, D) with
 * y[n][j] = mean(x[n]) / (j + 1) + 0.01 j, D = cfg->num_classes (so the last
 * stage's output feeds the loss); backward calls pp_delay(backward_ms) and
 * writes the matching gradient dx[n][...] = sum_j dy[n][j] / (j + 1) / F
 * (F = elements per sample). A split backward's input part (I) calls
 * pp_delay(backward_input_ms) and writes the same dx, its weight part (W)
 * pp_delay(backward_weight_ms); a stage whose config gives neither time
 * splits backward_ms in halves (one given alone: the other is half of
 * backward_ms). It has no parameters or buffers. Stage 0 takes the model
 * input (N, in_channels, image_h, image_w); later stages take (N, D).
 */
#ifndef PP_MODELS_DELAY_H
#define PP_MODELS_DELAY_H

#include "models/catalogue.h"
#include "models/stage.h"

/* Builds delay stage stage_index (>= 0) of a delay config on dev. Its times
 * are forward_ms[stage_index] / backward_ms[stage_index] (and the parts'),
 * or entry 0 when the config has a single value. PP_ERR_INPUT when the config is not the delay
 * model, the index has no time, a time is outside [0, 3600000] ms, or
 * num_classes < 1. */
pp_status pp_delay_stage_new(const pp_model_config *cfg, int stage_index, pp_device_ctx *dev,
                             pp_stage **out, pp_error *err);

#endif
