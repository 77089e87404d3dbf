/*
 * plan_common.h - what the partitioner's tests share: plans parsed from
 * strings (named as if they lived in the test's data folder), the emit ->
 * parse round trip, and the lines of a valid plan each test varies.
 */
#ifndef PP_TESTS_PLAN_COMMON_H
#define PP_TESTS_PLAN_COMMON_H

#include <stddef.h>

#include "partitioner/plan.h"


/* A valid resnet18 plan, one line per macro (resnet18 has 14 units). */
#define L_MODEL "model: {name: resnet18}\n"
#define L_BATCH "batch: {size: 8, split_size: 3}\n"
#define L_STAGES "stages:\n"
#define L_S0 "  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2]}\n"
#define L_S1 "  - {device: cpu:1, layers: [layer3, layer4, avgpool, fc]}\n"
#define BASE L_MODEL L_BATCH L_STAGES L_S0 L_S1

#define R50_S0 "  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3.0]}\n"

/* A valid sequential plan: c1 conv 3x3 on 1x8x8, flatten, linear to 3 classes. */
#define S_MODEL "model:\n  name: sequential\n  in_channels: 1\n  layers:\n"
#define S_L0 "    - {name: c1, type: conv, out_channels: 4, kernel: 3}\n"
#define S_L1 "    - {name: f, type: flatten}\n"
#define S_L2 "    - {name: fc, type: linear, out_features: 3}\n"
#define S_DATA "data: {image_size: [8, 8]}\n"
#define S_REST S_DATA L_BATCH L_STAGES "  - {device: cpu:0, layers: [c1, f, fc]}\n"
/* the same after a one-layer list (the layer under test, on its own) */
#define S_REST1 S_DATA L_BATCH L_STAGES "  - {device: cpu:0, layers: [c1]}\n"

/* The name plans parsed from strings carry: DIR/inline.yaml, so that their
 * relative paths resolve against DIR. Call once, before any parse. */
void plan_test_init(const char *dir);
const char *plan_test_name(void);

/* pp_plan_parse_string under that name, the diagnostics cleared first. */
pp_status parse(const char *text, size_t len, pp_plan **out, pp_diag *d);

/* emit -> parse -> equal, and emitting again gives the same text. */
void check_round_trip(const char *label, const pp_plan *p);

/* BASE with extra appended, parsed (a failure is a failed check); NULL then. */
pp_plan *parse_with(const char *extra);

#endif
