/*
 * model.h - the unit specs of a layered model, whatever its family: the
 * torchvision ResNets (resnet.h), sequential models described layer by
 * layer in the plan (catalogue.h's pp_seq_layer) and GPT-2
 * (transformer/gpt2.h). Internal to models/ and its tests.
 */
#ifndef PP_MODELS_MODEL_H
#define PP_MODELS_MODEL_H

#include "models/catalogue.h"
#include "models/unit.h"

/* Fills *specs (malloc'd, caller frees with free()) with the units of cfg in
 * network order and *n with their number. Sequential models: each layer's
 * input size follows from the one before; a layer that does not fit it is
 * PP_ERR_INPUT naming the layer (*bad_layer, when not NULL, receives its
 * index; else -1). The delay model has no units (PP_ERR_INPUT). */
pp_status pp_model_units(const pp_model_config *cfg, pp_unit_spec **specs, int *n,
                         int *bad_layer, pp_error *err);

/* The sequential part of pp_model_units. */
pp_status pp_sequential_units(const pp_model_config *cfg, pp_unit_spec **specs, int *n,
                              int *bad_layer, pp_error *err);

#endif
