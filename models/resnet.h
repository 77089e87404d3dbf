/*
 * resnet.h - the torchvision ResNet family as an ordered list of unit specs.
 *
 * resnet18/34 use BasicBlock (expansion 1), resnet50/101/152 Bottleneck v1.5
 * (expansion 4, stride on the 3x3 conv); the first block of a layer gets a
 * 1x1 conv + BN downsample when its stride is not 1 or its channels change.
 * Units in network order: conv1, bn1, relu, maxpool, layer1.0 ... layer4.N,
 * avgpool, fc. The cifar stem makes conv1 3x3 stride 1 padding 1 and maxpool
 * an identity unit (it keeps its name, so plans are the same for both stems).
 */
#ifndef PP_MODELS_RESNET_H
#define PP_MODELS_RESNET_H

#include "models/catalogue.h"
#include "models/unit.h"

/* Fills *specs (malloc'd, caller frees with free()) with the units of a ResNet
 * config and *n with their number. PP_ERR_INPUT for an unsupported depth, a
 * non-ResNet kind, or non-positive classes or channels. */
pp_status pp_resnet_units(const pp_model_config *cfg, pp_unit_spec **specs, int *n, pp_error *err);

#endif
