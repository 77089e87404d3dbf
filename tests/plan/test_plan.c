/*
 * test_plan.c - the partitioner: malformed plans (status, line, column,
 * message), hostile YAML, valid plans that round-trip through emit, the
 * exact balancer against brute force, automatic stages, device maps.
 *
 * Usage: test_plan SOURCE_DIR (the folder holding data/ test files).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/balance.h"
#include "partitioner/emit.h"
#include "partitioner/plan.h"
#include "tests/check.h"

static char g_name[4096]; /* plans parsed from strings "live" in the test's folder */

static pp_status parse(const char *text, size_t len, pp_plan **out, pp_diag *d)
{
    pp_diag_clear(d);
    return pp_plan_parse_string(g_name, text, len, out, d);
}

/* ------------------------------------------------------------------ */
/* malformed plans                                                      */

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

static const struct bad_case {
    const char *name;
    const char *text;
    int line, col; /* 0, 0: no position */
    const char *fragment;
} bad_cases[] = {
    {"empty file", "", 0, 0, "the plan is empty"},
    {"only a comment", "# nothing here\n", 0, 0, "the plan is empty"},
    {"empty document", "---\n", 0, 0, "the plan is empty"},
    {"control bytes", "\x01\x02\x03garbage", 1, 1, "cannot read the YAML text"},
    {"unclosed flow mapping", "model: {name: resnet18\nbatch: 3\n", 2, 6, "YAML syntax error"},
    {"tab indentation", "model:\n\tname: resnet18\n", 2, 1, "YAML syntax error"},
    {"top level is a list", "- model\n- batch\n", 1, 1, "must be a mapping of sections"},
    {"top level is a scalar", "hello\n", 1, 1, "must be a mapping of sections"},
    {"two documents", BASE "---\nsteps: 3\n", 6, 1, "found a second one"},
    {"alias", "model: &m {name: resnet18}\nbatch: *m\n", 2, 8, "aliases (*m) are not allowed"},
    {"NUL in a string", "model: {name: \"res\\0net\"}\n", 1, 15, "NUL character"},
    {"unknown top-level key", BASE "modle: 3\n", 6, 1, "unknown key 'modle' in the plan (did you mean 'model'?)"},
    {"duplicate key", L_MODEL "model: {name: resnet50}\n" L_BATCH L_STAGES L_S0 L_S1, 2, 1,
     "duplicate key 'model' in the plan (first at line 1)"},
    {"no model", L_BATCH L_STAGES L_S0 L_S1, 0, 0, "no model section"},
    {"model is a list", "model: [resnet18]\n" L_BATCH L_STAGES L_S0 L_S1, 1, 8,
     "model must be a mapping, got a list"},
    {"unknown model", "model: {name: resnet51}\n" L_BATCH L_STAGES L_S0 L_S1, 1, 15,
     "unknown model 'resnet51'"},
    {"unknown model key", "model: {name: resnet18, classes: 10}\n" L_BATCH L_STAGES L_S0 L_S1, 1,
     25, "unknown key 'classes' in model"},
    {"stem for delay", "model: {name: delay, stem: cifar}\n" L_BATCH
                       "stages:\n  - {device: cpu:0}\n",
     1, 28, "applies only to ResNet"},
    {"bad stem", "model: {name: resnet18, stem: mnist}\n" L_BATCH L_STAGES L_S0 L_S1, 1, 31,
     "unknown model.stem 'mnist'"},
    {"zero_init_residual for delay", "model: {name: delay, zero_init_residual: true}\n" L_BATCH
                                     "stages:\n  - {device: cpu:0}\n",
     1, 42, "model.zero_init_residual applies only to ResNet models"},
    {"zero_init_residual not a bool",
     "model: {name: resnet18, zero_init_residual: 1}\n" L_BATCH L_STAGES L_S0 L_S1, 1, 45,
     "model.zero_init_residual must be true or false, got '1'"},
    {"in_channels zero", "model: {name: resnet18, in_channels: 0}\n" L_BATCH L_STAGES L_S0 L_S1,
     1, 38, "model.in_channels must be positive, got 0"},
    {"batch size zero", L_MODEL "batch: {size: 0, split_size: 3}\n" L_STAGES L_S0 L_S1, 2, 15,
     "batch.size must be positive, got 0"},
    {"batch size huge", L_MODEL "batch: {size: 99999999999999999999999, split_size: 3}\n" L_STAGES
                        L_S0 L_S1,
     2, 15, "batch.size is too large"},
    {"batch size quoted", L_MODEL "batch: {size: \"8\", split_size: 3}\n" L_STAGES L_S0 L_S1, 2,
     15, "batch.size must be an integer, got a quoted string"},
    {"batch size fractional", L_MODEL "batch: {size: 1.5, split_size: 1}\n" L_STAGES L_S0 L_S1, 2,
     15, "batch.size must be an integer, got '1.5'"},
    {"split larger than batch", L_MODEL "batch: {size: 8, split_size: 9}\n" L_STAGES L_S0 L_S1, 2,
     30, "batch.split_size (9) is larger than batch.size (8)"},
    {"split and micro_batches", L_MODEL "batch: {size: 8, split_size: 2, micro_batches: 4}\n"
                                L_STAGES L_S0 L_S1,
     2, 48, "not both"},
    {"neither split nor micro", L_MODEL "batch: {size: 8}\n" L_STAGES L_S0 L_S1, 2, 8,
     "batch needs split_size (micro-batch size) or micro_batches"},
    {"micro_batches too many", L_MODEL "batch: {size: 4, micro_batches: 5}\n" L_STAGES L_S0 L_S1,
     2, 33, "batch.micro_batches (5) is larger than batch.size (4)"},
    {"unknown schedule", BASE "schedule: zigzag\n", 6, 11, "unknown schedule 'zigzag'"},
    {"schedule key", BASE "schedule: {name: zbv}\n", 6, 12, "unknown key 'name' in schedule"},
    {"schedule without file", BASE "schedule: {}\n", 6, 11,
     "schedule: a mapping names a program with file: PATH"},
    {"schedule file absent", BASE "schedule: {file: nowhere.csv}\n", 6, 18,
     "schedule.file: cannot open"},
    {"fp16", BASE "precision: fp16\n", 6, 12, "precision fp16 is not supported yet (use fp32, tf32 or bf16)"},
    {"unknown precision", BASE "precision: fp8\n", 6, 12, "unknown precision 'fp8'"},
    {"cuda_graphs not on or off", BASE "cuda_graphs: maybe\n", 6, 14, "on or off"},
    {"negative lr", BASE "optimizer: {lr: -0.1}\n", 6, 17,
     "optimizer.lr must not be negative, got -0.1"},
    {"lr not a number", BASE "optimizer: {lr: fast}\n", 6, 17,
     "optimizer.lr must be a number, got 'fast'"},
    {"lr nan", BASE "optimizer: {lr: .nan}\n", 6, 17, "must be a finite number"},
    {"nesterov without momentum", BASE "optimizer: {lr: 0.1, nesterov: true}\n", 6, 32,
     "optimizer.nesterov needs momentum > 0"},
    {"steps and epochs", BASE "steps: 3\nepochs: 2\n", 7, 9, "give steps or epochs, not both"},
    {"epochs zero", BASE "epochs: 0\n", 6, 9, "epochs"},
    {"lr_schedule unknown type", BASE "optimizer: {lr_schedule: {type: wavy}}\n", 6, 33,
     "constant, step or cosine"},
    {"lr_schedule no type", BASE "optimizer: {lr_schedule: {gamma: 0.5}}\n", 6, 26,
     "needs a type"},
    {"lr_schedule step without milestones", BASE "optimizer: {lr_schedule: {type: step}}\n", 6,
     26, "needs milestones"},
    {"lr_schedule milestones decrease",
     BASE "optimizer: {lr_schedule: {type: step, milestones: [5, 3]}}\n", 6, 55,
     "milestones must increase (3 after 5)"},
    {"lr_schedule gamma for cosine",
     BASE "optimizer: {lr_schedule: {type: cosine, gamma: 0.5}}\n", 6, 48,
     "gamma applies to lr_schedule type step only"},
    {"lr_schedule warm-up too long",
     BASE "steps: 4\noptimizer: {lr_schedule: {type: cosine, warmup: 4}}\n", 7, 12,
     "warm-up (4) must be shorter than the run (4)"},
    {"eval without labels", BASE "eval: {images: x.idx}\n", 6, 7, "eval needs labels"},
    {"eval batch zero",
     BASE "eval: {images: data/images.idx, labels: data/labels.idx, batch_size: 0}\n", 6, 70,
     "eval.batch_size"},
    {"nesterov yes", BASE "optimizer: {momentum: 0.9, nesterov: yes}\n", 6, 38,
     "optimizer.nesterov must be true or false, got 'yes'"},
    {"optimizer adam", BASE "optimizer: {type: adam}\n", 6, 19,
     "unknown optimizer.type 'adam' (expected sgd or adamw)"},
    {"steps zero", BASE "steps: 0\n", 6, 8, "steps must be positive, got 0"},
    {"negative seed", BASE "seed: -1\n", 6, 7, "seed must be at least 0, got -1"},
    {"bad device", L_MODEL L_BATCH L_STAGES
                   "  - {device: gpu:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2]}\n" L_S1,
     4, 14, "bad device 'gpu:0'"},
    {"device index negative", L_MODEL L_BATCH L_STAGES L_S0
                              "  - {device: cuda:-1, layers: [layer3, layer4, avgpool, fc]}\n",
     5, 14, "bad device 'cuda:-1'"},
    {"stage without device", L_MODEL L_BATCH L_STAGES L_S0
                             "  - {layers: [layer3, layer4, avgpool, fc]}\n",
     5, 5, "stage 1 needs a device"},
    {"unknown layer", L_MODEL L_BATCH L_STAGES L_S0
                      "  - {device: cpu:1, layers: [layer3, layer5, avgpool, fc]}\n",
     5, 38, "unknown layer 'layer5' in resnet18"},
    {"block out of range", L_MODEL L_BATCH L_STAGES L_S0
                           "  - {device: cpu:1, layers: [layer3, layer4.0, layer4.2, avgpool, fc]}\n",
     5, 48, "layer4.2 does not exist: resnet18 has layer4.0..layer4.1"},
    {"missing block between stages", "model: {name: resnet50}\n" L_BATCH L_STAGES R50_S0
                                     "  - {device: cpu:1, layers: [layer3.2, layer3.3, layer3.4, "
                                     "layer3.5, layer4, avgpool, fc]}\n",
     5, 30, "layer3.1 is missing: stage 0 ends at layer3.0 and stage 1 starts at layer3.2"},
    {"missing block inside a stage", L_MODEL L_BATCH L_STAGES L_S0
                                     "  - {device: cpu:1, layers: [layer3.0, layer4, avgpool, fc]}\n",
     5, 40, "layer3.1 is missing between layer3.0 and layer4.0 in stage 1"},
    {"missing head", L_MODEL L_BATCH L_STAGES
                     "  - {device: cpu:0, layers: [bn1, relu, maxpool, layer1, layer2]}\n" L_S1,
     4, 30, "conv1 is missing: stage 0 starts at bn1"},
    {"missing tail", L_MODEL L_BATCH L_STAGES L_S0
                     "  - {device: cpu:1, layers: [layer3, layer4, avgpool]}\n",
     5, 46, "fc is missing: stage 1 ends at avgpool"},
    {"missing whole group", L_MODEL L_BATCH L_STAGES
                            "  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1]}\n" L_S1,
     5, 30, "layer2 is missing: stage 0 ends at layer1.1 and stage 1 starts at layer3.0"},
    {"imagenet stem without maxpool", L_MODEL L_BATCH L_STAGES
                                      "  - {device: cpu:0, layers: [conv1, bn1, relu, layer1, "
                                      "layer2]}\n" L_S1,
     4, 48, "maxpool is missing between relu and layer1.0 in stage 0"},
    {"layer in two stages", L_MODEL L_BATCH L_STAGES L_S0
                            "  - {device: cpu:1, layers: [layer2, layer3, layer4, avgpool, fc]}\n",
     5, 30, "layer2 appears in stages 0 and 1"},
    {"block of a layer in two stages", L_MODEL L_BATCH L_STAGES L_S0
                                       "  - {device: cpu:1, layers: [layer2.1, layer3, layer4, "
                                       "avgpool, fc]}\n",
     5, 30, "layer2.1 appears in stages 0 and 1"},
    {"layer twice in a stage", L_MODEL L_BATCH L_STAGES
                               "  - {device: cpu:0, layers: [conv1, bn1, bn1, relu, maxpool, "
                               "layer1, layer2]}\n" L_S1,
     4, 42, "bn1 appears twice in stage 0"},
    {"head out of order", L_MODEL L_BATCH L_STAGES L_S0
                          "  - {device: cpu:1, layers: [layer3, layer4, fc, avgpool]}\n",
     5, 46, "fc must come after avgpool"},
    {"stages out of order", L_MODEL L_BATCH L_STAGES L_S1 L_S0, 4, 30,
     "layer3 must come after conv1"},
    {"empty stage", L_MODEL L_BATCH L_STAGES L_S0 L_S1 "  - {device: cpu:2, layers: []}\n", 6, 29,
     "stage 2 has no layers"},
    {"stage without layers", L_MODEL L_BATCH L_STAGES L_S0 L_S1 "  - {device: cpu:2}\n", 6, 5,
     "stage 2 needs layers"},
    {"layers not a list", L_MODEL L_BATCH L_STAGES L_S0
                          "  - {device: cpu:1, layers: layer3}\n",
     5, 29, "stage 1: layers must be a list of layer names"},
    {"stages empty", L_MODEL L_BATCH "stages: []\n", 3, 9, "stages must not be empty"},
    {"stages a string", L_MODEL L_BATCH "stages: manual\n", 3, 9,
     "stages must be a list of {device, layers} or auto, got 'manual'"},
    {"no stages", L_MODEL L_BATCH, 0, 0, "no stages section"},
    {"delay with layers", "model: {name: delay, forward_ms: 1, backward_ms: 2}\n" L_BATCH L_STAGES
                          "  - {device: cpu:0, layers: [conv1]}\n",
     4, 29, "the delay model has no layers"},
    {"delay list length", "model: {name: delay, forward_ms: [1, 2, 3], backward_ms: 2}\n" L_BATCH
                          L_STAGES "  - {device: cpu:0}\n  - {device: cpu:1}\n",
     1, 34, "model.forward_ms has 3 values but the plan has 2 stages"},
    {"delay negative time", "model: {name: delay, forward_ms: 1, backward_ms: [2, -1]}\n" L_BATCH
                            L_STAGES "  - {device: cpu:0}\n  - {device: cpu:1}\n",
     1, 54, "model.backward_ms must not be negative"},
    {"forward_ms for resnet", "model: {name: resnet18, forward_ms: 3}\n" L_BATCH L_STAGES L_S0 L_S1,
     1, 37, "applies only to the delay model"},
    {"backward_input_ms for resnet", "model: {name: resnet18, backward_input_ms: 3}\n" L_BATCH
     L_STAGES L_S0 L_S1, 1, 44, "model.backward_input_ms applies only to the delay model"},
    {"backward_weight_ms list length", "model: {name: delay, backward_weight_ms: [1, 2, 3]}\n"
     L_BATCH L_STAGES "  - {device: cpu:0}\n  - {device: cpu:1}\n",
     1, 42, "model.backward_weight_ms has 3 values but the plan has 2 stages"},
    {"backward_input_ms negative", "model: {name: delay, backward_input_ms: -1}\n" L_BATCH
     L_STAGES "  - {device: cpu:0}\n", 1, 41, "model.backward_input_ms must not be negative"},
    /* the whole backward and its parts agree: B = I + W */
    {"backward parts disagree", "model: {name: delay, backward_ms: 5, backward_input_ms: 4, "
     "backward_weight_ms: 4}\n" L_BATCH L_STAGES "  - {device: cpu:0}\n", 1, 35,
     "model.backward_ms is 5 but backward_input_ms + backward_weight_ms is 4 + 4 = 8: a split "
     "backward does the work of a whole one (give two of the three)"},
    {"backward parts disagree on a stage", "model: {name: delay, backward_ms: [3, 4], "
     "backward_input_ms: [1, 3], backward_weight_ms: 2}\n" L_BATCH L_STAGES
     "  - {device: cpu:0}\n  - {device: cpu:1}\n", 1, 35,
     "model.backward_ms (stage 1) is 4 but backward_input_ms + backward_weight_ms is 3 + 2 = 5"},
    {"one backward part alone", "model: {name: delay, backward_input_ms: 4}\n" L_BATCH L_STAGES
     "  - {device: cpu:0}\n", 1, 41, "model.backward_input_ms without model.backward_weight_ms "
     "or model.backward_ms: give both parts (backward_ms is then their sum) or backward_ms (a "
     "part not given is its half)"},
    {"missing data file", BASE "data: {format: idx, images: data/nope.idx, labels: data/labels.idx}\n",
     6, 29, "data.images: cannot open"},
    {"data path is a folder", BASE "data: {format: idx, images: data, labels: data/labels.idx}\n",
     6, 29, "is a folder, not a file"},
    {"idx without labels", BASE "data: {format: idx, images: data/images.idx}\n", 6, 7,
     "data format idx needs labels"},
    {"image_size for idx", BASE "data: {format: idx, images: data/images.idx, labels: "
                                "data/labels.idx, image_size: [32, 32]}\n",
     6, 83, "data.image_size applies only to format synthetic, not idx"},
    {"cifar10 files empty", BASE "data: {format: cifar10, files: []}\n", 6, 32,
     "data.files must be a non-empty list"},
    {"unknown data format", BASE "data: {format: imagenet}\n", 6, 16,
     "unknown data.format 'imagenet'"},
    {"image height zero", BASE "data: {image_size: [0, 32]}\n", 6, 21,
     "data.image_size height must be positive, got 0"},
    {"image_size length", BASE "data: {image_size: [32]}\n", 6, 20,
     "data.image_size must be a size N (for N x N) or a list [height, width]"},
    {"mean length", BASE "data: {mean: [0.5, 0.5], std: [0.2, 0.2, 0.2]}\n", 6, 14,
     "data.mean has 2 values but the model has 3 input channels"},
    {"std zero", BASE "data: {mean: [0.5, 0.5, 0.5], std: [0.2, 0, 0.2]}\n", 6, 42,
     "data.std values must be positive"},
    {"mean without std", BASE "data: {mean: [0.5, 0.5, 0.5]}\n", 6, 14,
     "data.mean needs data.std"},
    {"data classes above model", BASE "data: {num_classes: 2000}\n", 6, 21,
     "data.num_classes is too large: 2000 (at most 1000)"},
    {"auto without devices", L_MODEL L_BATCH "stages: auto\nbalance: flops\n", 3, 9,
     "stages: auto needs devices"},
    {"auto without balance", L_MODEL L_BATCH "stages: auto\ndevices: [cpu:0]\n", 3, 9,
     "stages: auto needs balance"},
    {"auto bad balance", L_MODEL L_BATCH "stages: auto\ndevices: [cpu:0]\nbalance: speed\n", 5, 10,
     "unknown balance 'speed' (expected time, flops or memory)"},
    {"auto too many devices", L_MODEL L_BATCH "stages: auto\nbalance: flops\ndevices: [cpu:0, cpu:1, "
                              "cpu:2, cpu:3, cpu:4, cpu:5, cpu:6, cpu:7, cpu:8, cpu:9, cpu:10, "
                              "cpu:11, cpu:12, cpu:13, cpu:14]\n",
     5, 10, "15 devices but resnet18 has only 14 units"},
    {"auto bad device entry", L_MODEL L_BATCH "stages: auto\nbalance: flops\ndevices: [cpu:0, "
                              "{device: cuda:0, memory: lots}]\n",
     5, 43, "memory must be a size such as 40GiB"},
    {"devices with explicit stages", BASE "devices: [cpu:0]\n", 6, 10,
     "devices applies only to stages: auto"},
    {"memory out of range", L_MODEL L_BATCH L_STAGES
                            "  - {device: cpu:0, memory: 9999999TiB, layers: [conv1, bn1, relu, "
                            "maxpool, layer1, layer2]}\n" L_S1,
     4, 29, "is out of range"},
    {"complex key", BASE "? [a, b]\n: 1\n", 6, 3, "keys in the plan must be names"},
    /* sequential models: layers are checked where they stand */
    {"seq linear on images", S_MODEL "    - {name: fc, type: linear, out_features: 3}\n" S_REST1,
     5, 7, "layer 'fc' (linear) needs features (N, F), gets (N, 1, 8, 8): put a flatten"},
    {"seq unknown type", S_MODEL "    - {name: c1, type: dense}\n" S_REST1, 5, 24,
     "unknown layer type 'dense'"},
    {"seq conv without out_channels", S_MODEL "    - {name: c1, type: conv, kernel: 3}\n" S_REST1,
     5, 7, "layer 'c1' (conv) needs out_channels"},
    {"seq key of another type", S_MODEL "    - {name: r, type: relu, kernel: 3}\n" S_REST1, 5,
     37, "layer 'r' (relu) takes no kernel"},
    {"seq duplicate name", S_MODEL S_L0 "    - {name: c1, type: flatten}\n" S_L2 S_REST, 6, 7,
     "layer name 'c1' is used twice (layers 0 and 1)"},
    {"seq bad name", S_MODEL "    - {name: a.b, type: relu}\n" S_REST1, 5, 14,
     "layer name 'a.b' must be 1 to 31 letters, digits or '_'"},
    {"seq window too large", S_MODEL "    - {name: c1, type: conv, out_channels: 4, kernel: 9}\n"
                             S_L1 S_L2 S_REST,
     5, 7, "layer 'c1' (conv): its 9x9 window (padding 0) does not fit its input (N, 1, 8, 8)"},
    {"seq padding over half", S_MODEL "    - {name: p, type: maxpool, kernel: 2, padding: 2}\n"
                              S_REST1,
     5, 52, "layer 'p' padding is too large: 2 (at most 1)"},
    {"seq ends in images", S_MODEL S_L0 S_REST1, 5, 7,
     "the last layer 'c1' gives (N, 4, 6, 6); a classifier ends in (N, classes)"},
    {"seq classes disagree", "model:\n  name: sequential\n  num_classes: 5\n  in_channels: 1\n"
                             "  layers:\n" S_L0 S_L1 S_L2 S_REST,
     3, 16, "model.num_classes is 5 but the last layer 'fc' gives 3 outputs"},
    {"seq without layers", "model: {name: sequential}\n" S_REST1, 1, 8,
     "a sequential model needs layers"},
    {"seq empty layers", "model: {name: sequential, layers: []}\n" S_REST1, 1, 35,
     "model.layers must be a non-empty list of layers, got an empty list"},
    {"layers on resnet", "model: {name: resnet18, layers: []}\n" L_BATCH L_STAGES L_S0 L_S1, 1,
     33, "model.layers applies only to the sequential model"},
    {"seq normal without std", "model:\n  name: sequential\n  init: normal\n  layers:\n" S_L0 S_L1
                               S_L2 S_REST,
     3, 9, "model.init normal needs init_std"},
    {"seq batch norm over one value", S_MODEL S_L0 S_L1 S_L2
     "    - {name: bn, type: batchnorm}\n" S_DATA "batch: {size: 5, split_size: 2}\n" L_STAGES
     "  - {device: cpu:0, layers: [c1, f, fc, bn]}\n",
     10, 8, "batch 5 split by 2 gives a micro-batch of 1 sample, and layer 'bn' (batch norm over "
            "one value per channel per sample) needs at least 2 to train"},
    {"seq unknown stage layer", S_MODEL S_L0 S_L1 S_L2 S_DATA L_BATCH L_STAGES
                                "  - {device: cpu:0, layers: [c1, flat, fc]}\n",
     11, 34, "unknown layer 'flat' in sequential"},
    {"seq linear without bias", S_MODEL S_L0 S_L1
     "    - {name: fc, type: linear, out_features: 3, bias: false}\n" S_REST, 7, 55,
     "layer 'fc' (linear): bias: false is not supported; a linear layer always has a bias"},
};

/* Plans with one problem say that one only, as a user reads it: no internal
 * message after it, no hint that does not apply (fragment present, absent
 * absent). */
static void test_one_message(void)
{
    static const struct {
        const char *text, *present, *absent;
    } cases[] = {
        {"model:\n  name: sequential\n  init: normal\n  layers:\n" S_L0 S_L1 S_L2 S_REST,
         "model.init normal needs init_std", "bad conv spec"},
        {S_MODEL S_L0 S_L1 S_L2 S_DATA L_BATCH L_STAGES
         "  - {device: cpu:0, layers: [c1, flat, fc]}\n",
         "(layers are c1, f, fc)", "layerN.K"},
        {L_MODEL L_BATCH L_STAGES L_S0 "  - {device: cpu:1, layers: [layer3, layer5, fc]}\n",
         "layerN.K names one block", NULL},
        {S_MODEL S_L0 S_L1 "    - {name: fc, type: linear, out_features: 3, bias: true}\n" S_REST,
         NULL, NULL}, /* bias: true on a linear layer says what is so: valid */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_plan *plan;
        pp_diag d;
        pp_status s = parse(cases[i].text, strlen(cases[i].text), &plan, &d);
        if (!cases[i].present) {
            CHECK_MSG(s == PP_OK, "case %zu: %s", i, d.count ? d.items[0].text : "");
            pp_plan_free(plan);
            continue;
        }
        CHECK_MSG(s == PP_ERR_INPUT && d.count == 1, "case %zu: %d messages (%s)", i, d.count,
                  d.count > 1 ? d.items[1].text : "");
        if (d.count < 1) continue;
        CHECK_MSG(strstr(d.items[0].text, cases[i].present) != NULL, "case %zu: %s", i,
                  d.items[0].text);
        CHECK_MSG(!cases[i].absent || !strstr(d.items[0].text, cases[i].absent), "case %zu: %s",
                  i, d.items[0].text);
    }
}

/* The resolved plan's numbers are numbers to every YAML reader: a dot in
 * the mantissa (YAML 1.1 reads "2e+01" as a string) and no exponent within
 * the range plans use. */
static void test_emit_numbers(void)
{
    const char *text = "model: {name: delay, forward_ms: [10, 0.5], backward_ms: 20}\n"
                       "batch: {size: 4, split_size: 2}\n"
                       "optimizer: {lr: 0.0000001, momentum: 0.9, weight_decay: 1e-12}\n"
                       "stages: [{device: cpu:0}, {device: cpu:1}]\n";
    pp_plan *plan;
    pp_diag d;
    CHECK(parse(text, strlen(text), &plan, &d) == PP_OK);
    if (!plan) return;
    char *out = NULL;
    pp_error err;
    CHECK(pp_plan_emit(plan, &out, NULL, &err) == PP_OK);
    static const char *const want[] = {"forward_ms: [10.0, 0.5]\n", "backward_ms: 20.0\n",
                                       "lr: 1.0e-07\n", "momentum: 0.9\n",
                                       "weight_decay: 1.0e-12\n"};
    for (size_t i = 0; out && i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(strstr(out, want[i]) != NULL, "emit lacks '%s':\n%s", want[i], out);
    pp_plan *back = NULL;
    CHECK(out && parse(out, strlen(out), &back, &d) == PP_OK);
    CHECK(back && pp_plan_equal(plan, back, NULL, 0));
    free(out);
    pp_plan_free(back);
    pp_plan_free(plan);
}

static void test_bad_plans(void)
{
    size_t n = sizeof bad_cases / sizeof bad_cases[0];
    CHECK_MSG(n >= 30, "only %zu malformed cases", n);
    for (size_t i = 0; i < n; i++) {
        const struct bad_case *c = &bad_cases[i];
        pp_plan *plan = (pp_plan *)1;
        pp_diag d;
        pp_status s = parse(c->text, strlen(c->text), &plan, &d);
        CHECK_MSG(s == PP_ERR_INPUT, "[%s] status %s", c->name, pp_status_name(s));
        CHECK_MSG(plan == NULL, "[%s] plan not NULL on failure", c->name);
        if (s == PP_OK) {
            pp_plan_free(plan);
            continue;
        }
        CHECK_MSG(d.count >= 1, "[%s] no diagnostics", c->name);
        if (d.count < 1) continue;
        const pp_diag_item *it = &d.items[0];
        CHECK_MSG(it->code == PP_ERR_INPUT, "[%s] item code", c->name);
        CHECK_MSG(it->line == c->line && it->col == c->col, "[%s] at %d:%d, expected %d:%d (%s)",
                  c->name, it->line, it->col, c->line, c->col, it->text);
        CHECK_MSG(strstr(it->text, c->fragment) != NULL, "[%s] message '%s' lacks '%s'", c->name,
                  it->text, c->fragment);
        /* FILE:LINE:COL: prefix */
        char prefix[4200];
        if (c->line > 0)
            snprintf(prefix, sizeof prefix, "%s:%d:%d: ", g_name, c->line, c->col);
        else
            snprintf(prefix, sizeof prefix, "%s: ", g_name);
        CHECK_MSG(strncmp(it->text, prefix, strlen(prefix)) == 0, "[%s] prefix of '%s'", c->name,
                  it->text);
    }
}

/* Several problems in one plan are all reported, in file order. */
static void test_many_errors(void)
{
    const char *text = "model: {name: resnet18, colour: red}\n"
                       "batch: {size: 8, split_size: 3, speed: 9}\n"
                       "optimizer: {lr: 0.1, beta: 0.9}\n"
                       "stages:\n" L_S0 L_S1 "extra: 1\n";
    pp_plan *plan;
    pp_diag d;
    CHECK(parse(text, strlen(text), &plan, &d) == PP_ERR_INPUT);
    CHECK_MSG(d.count == 4, "count %d", d.count);
    static const struct {
        int line, col;
        const char *frag;
    } want[] = {{1, 25, "unknown key 'colour' in model"},
                {2, 33, "unknown key 'speed' in batch"},
                {3, 22, "unknown key 'beta' in optimizer"},
                {7, 1, "unknown key 'extra' in the plan"}};
    for (int i = 0; i < 4 && i < d.count; i++) {
        CHECK_MSG(d.items[i].line == want[i].line && d.items[i].col == want[i].col,
                  "item %d at %d:%d", i, d.items[i].line, d.items[i].col);
        CHECK_MSG(strstr(d.items[i].text, want[i].frag) != NULL, "item %d: %s", i,
                  d.items[i].text);
    }
    pp_error err;
    CHECK(pp_diag_to_error(&d, &err) == PP_ERR_INPUT);
    CHECK(strstr(err.msg, "'extra'") && strstr(err.msg, "'beta'") && strchr(err.msg, '\n'));

    /* more problems than the list keeps: counted, and the summary says so */
    char big[8192];
    size_t k = (size_t)snprintf(big, sizeof big, "%s", BASE);
    for (int i = 0; i < 40; i++) k += (size_t)snprintf(big + k, sizeof big - k, "bad%d: 1\n", i);
    CHECK(parse(big, k, &plan, &d) == PP_ERR_INPUT);
    CHECK_MSG(d.count == 40, "count %d", d.count);
    char buf[4096];
    pp_diag_format(&d, buf, sizeof buf);
    CHECK(strstr(buf, "more problems)") != NULL);
    CHECK(strlen(buf) < sizeof buf);
}

/* Hostile inputs built at run time: depth, size, node count, many anchors. */
static void test_hostile(void)
{
    pp_plan *plan;
    pp_diag d;
    /* nesting: 40 '[' on one line; the root mapping is level 1, so the 32nd
     * '[' (column 6 + 32) would open level 33 */
    char deep[256];
    int k = snprintf(deep, sizeof deep, "data: ");
    for (int i = 0; i < 40; i++) deep[k++] = '[';
    for (int i = 0; i < 40; i++) deep[k++] = ']';
    deep[k++] = '\n';
    CHECK(parse(deep, (size_t)k, &plan, &d) == PP_ERR_INPUT);
    CHECK_MSG(d.count == 1 && d.items[0].line == 1 && d.items[0].col == 38 &&
                  strstr(d.items[0].text, "nested too deeply"),
              "deep: %s", d.items[0].text);

    /* unterminated nesting of 100000 levels: still the depth error, quickly */
    size_t n = 100000;
    char *open = malloc(n);
    memset(open, '[', n);
    CHECK(parse(open, n, &plan, &d) == PP_ERR_INPUT);
    CHECK(strstr(d.items[0].text, "nested too deeply") != NULL);
    free(open);

    /* larger than 1 MiB */
    n = (1u << 20) + 1;
    char *huge = malloc(n);
    memset(huge, '#', n);
    CHECK(parse(huge, n, &plan, &d) == PP_ERR_INPUT);
    CHECK(d.items[0].line == 0 && strstr(d.items[0].text, "too large"));
    free(huge);

    /* many nodes (a flat list of 150000 items, under 1 MiB) */
    n = 4 + 2 * 150000 + 2;
    char *wide = malloc(n);
    size_t w = 0;
    wide[w++] = 'x';
    wide[w++] = ':';
    wide[w++] = ' ';
    wide[w++] = '[';
    for (int i = 0; i < 150000; i++) {
        wide[w++] = '1';
        wide[w++] = ',';
    }
    wide[w - 1] = ']';
    wide[w++] = '\n';
    CHECK(parse(wide, w, &plan, &d) == PP_ERR_INPUT);
    CHECK_MSG(strstr(d.items[0].text, "too many YAML nodes") != NULL, "wide: %s",
              d.items[0].text);
    free(wide);

    /* billion laughs: rejected at the first alias, no expansion */
    const char *laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n"
                         "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                         "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n";
    CHECK(parse(laughs, strlen(laughs), &plan, &d) == PP_ERR_INPUT);
    CHECK(d.count == 1 && d.items[0].line == 2 && d.items[0].col == 8);

    /* a NUL byte in the raw text */
    const char nul[] = "model: {name: resnet18}\n\0\n";
    CHECK(parse(nul, sizeof nul - 1, &plan, &d) == PP_ERR_INPUT);
    CHECK_MSG(d.items[0].line == 2 && d.items[0].col == 1, "nul at %d:%d: %s", d.items[0].line,
              d.items[0].col, d.items[0].text);

    /* missing file and folder through pp_plan_load */
    CHECK(pp_plan_load("/nonexistent/plan.yaml", &plan, &d) == PP_ERR_INPUT);
    CHECK(strstr(d.items[d.count - 1].text, "/nonexistent/plan.yaml: cannot open") != NULL);
    pp_diag_clear(&d);
    CHECK(pp_plan_load("/", &plan, &d) == PP_ERR_INPUT && plan == NULL);
}

/* ------------------------------------------------------------------ */
/* valid plans and round trips                                          */

/* emit -> parse -> equal, and emitting again gives the same text. */
static void check_round_trip(const char *label, const pp_plan *p)
{
    pp_error err;
    char *text = NULL, *again = NULL;
    size_t len = 0;
    CHECK_OK(pp_plan_emit(p, &text, &len, &err), &err);
    if (!text) return;
    CHECK(strlen(text) == len);
    pp_plan *q = NULL;
    pp_diag d;
    pp_status s = parse(text, len, &q, &d);
    char msg[2048];
    CHECK_MSG(s == PP_OK, "[%s] emitted plan does not parse: %s\n%s", label,
              pp_diag_format(&d, msg, sizeof msg), text);
    if (q) {
        char why[256];
        CHECK_MSG(pp_plan_equal(p, q, why, sizeof why), "[%s] round trip differs: %s\n%s", label,
                  why, text);
        CHECK_OK(pp_plan_emit(q, &again, NULL, &err), &err);
        CHECK_MSG(again && strcmp(text, again) == 0, "[%s] emit is not a fixpoint", label);
    }
    free(again);
    free(text);
    pp_plan_free(q);
}

static void test_valid_plans(void)
{
    static const struct good_case {
        const char *name;
        const char *text;
        int n_units, n_stages, batch, split, micro;
        int sizes[8];
        int stage0_last; /* last unit of stage 0, -1 when not checked */
    } good[] = {
        {"resnet18 gpipe split", BASE, 14, 2, 8, 3, 3, {3, 3, 2}, 7},
        {"resnet34 1f1b micro", "model: {name: resnet34, num_classes: 10, stem: cifar, "
                                "zero_init_residual: true}\n"
                                "batch: {size: 9, micro_batches: 4}\nschedule: 1f1b\n"
                                "data: {image_size: [32, 32], shuffle: true}\n"
                                "stages:\n  - device: cuda:0\n    layers: [conv1, bn1, relu, "
                                "maxpool, layer1, layer2.0]\n"
                                "  - device: cuda:1\n    memory: 40GiB\n    layers: "
                                "[layer2.1, layer2.2, layer2.3, layer3, layer4, avgpool, fc]\n",
         4 + 3 + 4 + 6 + 3 + 2, 2, 9, 3, 4, {3, 2, 2, 2}, 7},
        {"resnet50 four stages", "model:\n  name: resnet50\n  num_classes: 1000\n"
                                 "batch:\n  size: 128\n  split_size: 32\n"
                                 "schedule: 1f1b\nprecision: fp32\n"
                                 "optimizer: {type: sgd, lr: 0.1, momentum: 0.9, weight_decay: "
                                 "0.0001, nesterov: true}\n"
                                 "data: {format: synthetic, image_size: [224, 224], mean: [0.485, "
                                 "0.456, 0.406], std: [0.229, 0.224, 0.225], num_classes: 10}\n"
                                 "seed: 18446744\nsteps: 100\n"
                                 "stages:\n"
                                 "  - {device: cuda:0, layers: [conv1, bn1, relu, maxpool, "
                                 "layer1]}\n"
                                 "  - {device: cuda:1, layers: [layer2]}\n"
                                 "  - {device: cuda:1, layers: [layer3.0, layer3.1, layer3.2]}\n"
                                 "  - {device: cpu, layers: [layer3.3, layer3.4, layer3.5, "
                                 "layer4, avgpool, fc]}\n",
         22, 4, 128, 32, 4, {32, 32, 32, 32}, 6},
        {"resnet101 one stage", "model: {name: resnet101, in_channels: 1}\n"
                                "batch: {size: 2, split_size: 2}\n"
                                "data: {format: idx, images: data/images.idx, labels: "
                                "./data/labels.idx, mean: [0.1307], std: [0.3081]}\n"
                                "stages:\n  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, "
                                "layer1, layer2, layer3, layer4, avgpool, fc]}\n",
         4 + 3 + 4 + 23 + 3 + 2, 1, 2, 2, 1, {2}, 38},
        {"resnet152 cifar10", "model: {name: resnet152, num_classes: 10, stem: cifar}\n"
                              "batch: {size: 5, split_size: 5}\n"
                              "data:\n  format: cifar10\n  files: [data/data_batch_1.bin, "
                              "data/data_batch_2.bin]\n"
                              "stages:\n  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, "
                              "layer1, layer2.0]}\n"
                              "  - {device: cpu:1, layers: [layer2.1, layer2.2, layer2.3, "
                              "layer2.4, layer2.5, layer2.6, layer2.7, layer3, layer4, avgpool, "
                              "fc]}\n",
         4 + 3 + 8 + 36 + 3 + 2, 2, 5, 5, 1, {5}, 7},
        /* the cifar stem's maxpool is an identity: a stage list may leave it out (it
         * joins the stage of relu); image_size: N is [N, N] */
        {"cifar stem without maxpool", "model: {name: resnet18, num_classes: 10, stem: cifar}\n"
                                       "batch: {size: 4, split_size: 2}\ndata: {image_size: 16}\n"
                                       "stages:\n  - {device: cpu:0, layers: [conv1, bn1, relu, "
                                       "layer1]}\n  - {device: cpu:1, layers: [layer2, layer3, "
                                       "layer4, avgpool, fc]}\n",
         14, 2, 4, 2, 2, {2, 2}, 5},
        {"cifar stem ends at relu", "model: {name: resnet18, num_classes: 10, stem: cifar}\n"
                                    "batch: {size: 4, split_size: 2}\n"
                                    "stages:\n  - {device: cpu:0, layers: [conv1, bn1, relu]}\n"
                                    "  - {device: cpu:1, layers: [layer1, layer2, layer3, "
                                    "layer4, avgpool, fc]}\n",
         14, 2, 4, 2, 2, {2, 2}, 3},
        {"sequential lenet", "model:\n  name: sequential\n  in_channels: 1\n  init: normal\n"
                             "  init_std: 0.01\n  layers:\n"
                             "    - {type: conv, out_channels: 20, kernel: 5}\n"
                             "    - {type: maxpool, kernel: 2}\n    - {type: relu}\n"
                             "    - {name: conv2, type: conv, out_channels: 50, kernel: 5, "
                             "bias: false}\n"
                             "    - {type: avgpool, kernel: 3, stride: 2, padding: 1}\n"
                             "    - {type: sigmoid}\n    - {type: batchnorm}\n"
                             "    - {type: flatten}\n    - {type: linear, out_features: 500}\n"
                             "    - {type: batchnorm}\n    - {type: relu}\n"
                             "    - {name: out, type: linear, out_features: 10}\n"
                             "data: {image_size: [28, 28]}\nbatch: {size: 6, split_size: 4}\n"
                             "stages:\n  - {device: cpu:0, layers: ['0', '1', '2', conv2]}\n"
                             "  - {device: cpu:1, layers: ['4', '5', '6', '7', '8', '9', '10', "
                             "out]}\n",
         12, 2, 6, 4, 2, {4, 2}, 3},
        {"sequential global pool", "model:\n  name: sequential\n  layers:\n"
                                   "    - {name: c, type: conv, out_channels: 8, kernel: 3, "
                                   "stride: 2, padding: 1}\n"
                                   "    - {name: g, type: global_avgpool}\n"
                                   "data: {image_size: [32, 32]}\nbatch: {size: 2, split_size: 2}\n"
                                   "stages:\n  - {device: cpu:0, layers: [c, g]}\n",
         2, 1, 2, 2, 1, {2}, 1},
        {"delay scalar", "model: {name: delay, forward_ms: 2.5, backward_ms: 5}\n"
                         "batch: {size: 8, micro_batches: 8}\n"
                         "stages:\n  - {device: cpu:0}\n  - {device: cpu:1}\n"
                         "  - {device: cpu:2, memory: 512MiB}\n",
         0, 3, 8, 1, 8, {1, 1, 1, 1, 1, 1, 1, 1}, -1},
        {"delay split backward", "model: {name: delay, forward_ms: 1, backward_ms: [3, 5], "
                                 "backward_input_ms: [1, 3], backward_weight_ms: 2}\n"
                                 "batch: {size: 4, split_size: 1}\nschedule: zbh1\n"
                                 "stages:\n  - {device: cpu:0}\n  - {device: cpu:1}\n",
         0, 2, 4, 1, 4, {1, 1, 1, 1}, -1},
        {"delay per stage", "model: {name: delay, forward_ms: [1, 2], backward_ms: [2, 4.25]}\n"
                            "batch: {size: 4, split_size: 1}\nschedule: 1f1b\n"
                            "stages: auto\ndevices: [cpu:0, cpu:1]\nbalance: time\n",
         0, 2, 4, 1, 4, {1, 1, 1, 1}, -1},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        const struct good_case *c = &good[i];
        pp_plan *p = NULL;
        pp_diag d;
        char msg[2048];
        pp_status s = parse(c->text, strlen(c->text), &p, &d);
        CHECK_MSG(s == PP_OK, "[%s] %s", c->name, pp_diag_format(&d, msg, sizeof msg));
        if (!p) continue;
        CHECK_MSG(p->catalogue.n == c->n_units, "[%s] units %d", c->name, p->catalogue.n);
        CHECK_MSG(p->n_stages == c->n_stages, "[%s] stages %d", c->name, p->n_stages);
        CHECK(p->batch_size == c->batch && p->split_size == c->split &&
              p->micro_batches == c->micro);
        int sum = 0;
        for (int m = 0; m < p->micro_batches && m < 8; m++) {
            CHECK_MSG(p->micro_sizes[m] == c->sizes[m], "[%s] micro %d size %d", c->name, m,
                      p->micro_sizes[m]);
            sum += p->micro_sizes[m];
        }
        CHECK(sum == p->batch_size);
        if (c->stage0_last >= 0) {
            CHECK_MSG(p->stages[0].first == 0 && p->stages[0].last == c->stage0_last,
                      "[%s] stage 0 = [%d, %d]", c->name, p->stages[0].first, p->stages[0].last);
            CHECK(p->stages[p->n_stages - 1].last == c->n_units - 1);
            for (int s2 = 1; s2 < p->n_stages; s2++)
                CHECK(p->stages[s2].first == p->stages[s2 - 1].last + 1);
        }
        CHECK(!p->stages_auto);
        if (strstr(c->text, "image_size: 16"))
            CHECK_MSG(p->model.image_h == 16 && p->model.image_w == 16, "[%s] image %dx%d",
                      c->name, p->model.image_h, p->model.image_w);
        check_round_trip(c->name, p);
        pp_plan_free(p);
    }
}

/* BASE with extra appended, parsed (a failure is a failed check); NULL then. */
static pp_plan *parse_with(const char *extra)
{
    char text[1024];
    snprintf(text, sizeof text, "%s%s", BASE, extra);
    pp_plan *p = NULL;
    pp_diag d;
    char msg[2048];
    CHECK_MSG(parse(text, strlen(text), &p, &d) == PP_OK, "%s",
              pp_diag_format(&d, msg, sizeof msg));
    return p;
}

/* precision: each value parses to its enum and survives emit -> parse. */
static void test_precision(void)
{
    static const struct {
        const char *text;
        pp_plan_precision want;
    } cases[] = {
        {"", PP_PLAN_PRECISION_FP32},
        {"precision: fp32\n", PP_PLAN_PRECISION_FP32},
        {"precision: tf32\n", PP_PLAN_PRECISION_TF32},
        {"precision: bf16\n", PP_PLAN_PRECISION_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_plan *p = parse_with(cases[i].text);
        if (!p) continue;
        CHECK_MSG(p->precision == cases[i].want, "[%s] precision %d, expected %d",
                  cases[i].text, (int)p->precision, (int)cases[i].want);
        check_round_trip(cases[i].text, p);
        pp_plan_free(p);
    }
}

/* cuda_graphs: on by default, on|off parse and survive emit -> parse. */
static void test_cuda_graphs(void)
{
    static const struct {
        const char *text;
        bool want;
    } cases[] = {
        {"", true},
        {"cuda_graphs: on\n", true},
        {"cuda_graphs: off\n", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_plan *p = parse_with(cases[i].text);
        if (!p) continue;
        CHECK_MSG(p->cuda_graphs == cases[i].want, "[%s] cuda_graphs %d", cases[i].text,
                  (int)p->cuda_graphs);
        check_round_trip(cases[i].text, p);
        pp_plan_free(p);
    }
}

static void test_plan_fields(void)
{
    const char *text = "model: {name: resnet50,\n  num_classes: 10,\n  in_channels: 1}\n"
                       "batch: {size: 16, split_size: 4}\n"
                       "schedule: 1f1b\n"
                       "optimizer: {lr: 0.05, momentum: 0.9, weight_decay: 5e-4, nesterov: true}\n"
                       "data: {format: idx, images: data/images.idx, labels: data/labels.idx}\n"
                       "seed: 7\nsteps: 12\n"
                       "stages:\n"
                       "  - {device: cuda:0, memory: 1.5GiB, layers: [conv1, bn1, relu, maxpool, "
                       "layer1, layer2]}\n"
                       "  - {device: cuda:1, layers: [layer3, layer4, avgpool, fc]}\n";
    pp_plan *p;
    pp_diag d;
    char msg[2048];
    CHECK_MSG(parse(text, strlen(text), &p, &d) == PP_OK, "%s",
              pp_diag_format(&d, msg, sizeof msg));
    if (!p) return;
    CHECK(strcmp(p->model.name, "resnet50") == 0 && p->model.depth == 50);
    CHECK(p->model.num_classes == 10 && p->data.num_classes == 10);
    CHECK(p->model.image_h == 32 && p->model.image_w == 32); /* from the IDX header */
    CHECK(p->schedule == PP_PLAN_SCHEDULE_1F1B && p->schedule_mark.line == 5 &&
          p->schedule_mark.col == 11);
    CHECK(p->optimizer.lr == 0.05 && p->optimizer.momentum == 0.9 &&
          p->optimizer.weight_decay == 5e-4 && p->optimizer.nesterov);
    CHECK(p->seed == 7 && p->steps == 12);
    CHECK(p->data.format == PP_PLAN_DATA_IDX && p->data.images && p->data.images[0] == '/' &&
          strstr(p->data.images, "tests/plan/data/images.idx") != NULL);
    CHECK(p->data.images_mark.line == 7 && p->data.images_mark.col == 29);
    CHECK(p->stages[0].memory_bytes == (int64_t)3 << 29);
    CHECK(p->stages[1].memory_bytes == 0);
    CHECK(p->stages[1].device.kind == PP_DEVICE_CUDA && p->stages[1].device.index == 1);
    CHECK(p->stages[1].device_mark.line == 12 && p->stages[1].device_mark.col == 14);
    CHECK(p->stages[0].first == 0 && p->stages[0].last == 3 + 3 + 4);
    CHECK(p->stages[1].first == 11 && p->stages[1].last == 21);
    char spelled[256];
    pp_plan_spell_units(&p->catalogue, p->stages[0].first, p->stages[0].last, spelled,
                        sizeof spelled);
    CHECK_MSG(strcmp(spelled, "conv1, bn1, relu, maxpool, layer1, layer2") == 0, "%s", spelled);
    pp_plan_spell_units(&p->catalogue, 5, 11, spelled, sizeof spelled);
    CHECK_MSG(strcmp(spelled, "layer1.1, layer1.2, layer2, layer3.0") == 0, "%s", spelled);
    /* memory estimate: parameters x3 (momentum) + activations x split x in-flight,
     * where an activation two neighbouring units keep is kept once: relu's
     * output is maxpool's input, maxpool's output layer1.0's input and each
     * block's output the next block's input (8 of the 10 boundaries) */
    int64_t params = 0, act = 0, shared = 0;
    for (int u = 0; u <= 10; u++) {
        params += p->catalogue.units[u].param_bytes;
        act += p->catalogue.units[u].act_bytes * 4 + p->catalogue.units[u].act_fixed_bytes;
    }
    const char *sharing[] = {"relu", "maxpool", "layer1.0", "layer1.1", "layer1.2",
                             "layer2.0", "layer2.1", "layer2.2"};
    for (size_t i = 0; i < sizeof sharing / sizeof sharing[0]; i++)
        shared += p->catalogue.units[pp_catalogue_find(&p->catalogue, sharing[i])].out_bytes * 4;
    CHECK(pp_catalogue_kept_bytes(&p->catalogue, 0, 10, 4) == act - shared);
    act -= shared;
    CHECK(params > 0 && act > 0);
    CHECK(pp_plan_in_flight(p, 0) == 2 && pp_plan_in_flight(p, 1) == 1);
    CHECK(pp_plan_stage_memory_estimate(p, 0, 10, 2) == params * 3 + act * 2);
    pp_plan_free(p);
}

/* ------------------------------------------------------------------ */
/* balancer                                                             */

static unsigned g_rng = 12345;
static unsigned rnd(void)
{
    g_rng = g_rng * 1103515245u + 12345u;
    return (g_rng >> 16) & 0x7fff;
}

typedef struct brute {
    const pp_balance_problem *pb;
    int cut[16];
    double best;
    int found;
} brute;

static double seg_sum(const double *v, int i, int j)
{
    double s = 0;
    for (int u = i; u <= j; u++) s += v ? v[u] : 0;
    return s;
}

/* Enumerates every partition of units [start, n) into stages s..S-1. */
static void brute_rec(brute *b, int s, int start, double cur)
{
    const pp_balance_problem *pb = b->pb;
    int n = pb->n_units, S = pb->n_stages;
    if (s == S) {
        if (start == n && cur < b->best) b->best = cur;
        if (start == n) b->found++;
        return;
    }
    for (int end = start; end <= n - (S - s); end++) {
        if (s == S - 1 && end != n - 1) continue;
        double mem = seg_sum(pb->unit_fixed_bytes, start, end) +
                     pb->stage_in_flight[s] * seg_sum(pb->unit_flight_bytes, start, end);
        if (pb->capacity && pb->capacity[s] > 0 && mem > pb->capacity[s]) continue;
        double c = seg_sum(pb->cost, start, end);
        brute_rec(b, s + 1, end + 1, c > cur ? c : cur);
    }
}

static void test_balance_random(void)
{
    int checked = 0, infeasible = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int n = 1 + (int)(rnd() % 9);
        int S = 1 + (int)(rnd() % (unsigned)n);
        bool integer = trial % 2 == 0;
        bool mem = trial % 3 != 0;
        double cost[16], fixed[16], flight[16], inflight[16], cap[16];
        for (int u = 0; u < n; u++) {
            cost[u] = integer ? (double)(rnd() % 20) : (double)rnd() / 327.68;
            fixed[u] = (double)(rnd() % 50);
            flight[u] = (double)(rnd() % 30);
        }
        for (int s = 0; s < S; s++) {
            inflight[s] = 1 + rnd() % 4;
            cap[s] = rnd() % 5 == 0 ? 0 : (double)(40 + rnd() % 300);
        }
        pp_balance_problem pb = {.n_units = n,
                                 .cost = cost,
                                 .n_stages = S,
                                 .unit_fixed_bytes = mem ? fixed : NULL,
                                 .unit_flight_bytes = mem ? flight : NULL,
                                 .stage_in_flight = inflight,
                                 .capacity = mem ? cap : NULL};
        brute b = {.pb = &pb, .best = INFINITY};
        brute_rec(&b, 0, 0, 0.0);
        int first[16];
        double best = -1;
        pp_error err;
        pp_status s = pp_balance_partition(&pb, first, &best, &err);
        if (!b.found) {
            infeasible++;
            CHECK_MSG(s == PP_ERR_INPUT, "trial %d: brute force finds nothing, DP says %s", trial,
                      pp_status_name(s));
            CHECK(strstr(err.msg, "memory too small") != NULL);
            continue;
        }
        CHECK_MSG(s == PP_OK, "trial %d: %s", trial, err.msg);
        if (s != PP_OK) continue;
        checked++;
        double tol = integer ? 0 : 1e-9 * (1 + b.best);
        CHECK_MSG(fabs(best - b.best) <= tol, "trial %d: DP %.17g brute %.17g", trial, best,
                  b.best);
        /* the returned partition is valid and achieves the reported optimum */
        CHECK(first[0] == 0);
        double worst = 0;
        for (int st = 0; st < S; st++) {
            int last = st + 1 < S ? first[st + 1] - 1 : n - 1;
            CHECK_MSG(last >= first[st], "trial %d: empty stage %d", trial, st);
            double c = seg_sum(cost, first[st], last);
            if (c > worst) worst = c;
            if (mem && cap[st] > 0)
                CHECK_MSG(seg_sum(fixed, first[st], last) +
                                  inflight[st] * seg_sum(flight, first[st], last) <=
                              cap[st],
                          "trial %d: stage %d over memory", trial, st);
        }
        CHECK_MSG(fabs(worst - best) <= tol, "trial %d: partition cost %.17g != %.17g", trial,
                  worst, best);
    }
    CHECK_MSG(checked > 1500 && infeasible > 20, "checked %d infeasible %d", checked, infeasible);
}

static void test_balance_errors(void)
{
    double cost[3] = {1, 2, 3};
    int first[4];
    pp_error err;
    pp_balance_problem pb = {.n_units = 3, .cost = cost, .n_stages = 4};
    CHECK(pp_balance_partition(&pb, first, NULL, &err) == PP_ERR_INPUT);
    CHECK(strstr(err.msg, "cannot split 3 units into 4 stages") != NULL);

    double bad[3] = {1, -2, 3};
    pb.n_stages = 2;
    pb.cost = bad;
    CHECK(pp_balance_partition(&pb, first, NULL, &err) == PP_ERR_INVALID);
    bad[1] = NAN;
    CHECK(pp_balance_partition(&pb, first, NULL, &err) == PP_ERR_INVALID);

    /* the last stage cannot hold what is left */
    double fixed[3] = {10, 10, 10}, cap[2] = {15, 15};
    const char *names[2] = {"cuda:0", "cuda:1"};
    const char *units[3] = {"a", "b", "c"};
    pp_balance_problem m = {.n_units = 3,
                            .cost = cost,
                            .n_stages = 2,
                            .unit_fixed_bytes = fixed,
                            .capacity = cap,
                            .stage_names = names,
                            .unit_names = units};
    CHECK(pp_balance_partition(&m, first, NULL, &err) == PP_ERR_INPUT);
    CHECK_MSG(strstr(err.msg, "cuda:1 (stage 1) has 15 bytes but would need at least 20 bytes for "
                              "the remaining units b..c") != NULL,
              "%s", err.msg);
    /* the first stage cannot hold even one unit */
    cap[0] = 5;
    cap[1] = 100;
    CHECK(pp_balance_partition(&m, first, NULL, &err) == PP_ERR_INPUT);
    CHECK_MSG(strstr(err.msg, "cuda:0 (stage 0) has 5 bytes but the next unit it could hold, a, "
                              "needs 10 bytes") != NULL,
              "%s", err.msg);
    /* memory moves the optimum: costs favour [a b | c], memory forces [a | b c] */
    double c2[3] = {1, 1, 5};
    cap[0] = 10;
    m.cost = c2;
    double best;
    CHECK_OK(pp_balance_partition(&m, first, &best, &err), &err);
    CHECK(first[0] == 0 && first[1] == 1 && best == 6);
    cap[0] = 0; /* unlimited */
    CHECK_OK(pp_balance_partition(&m, first, &best, &err), &err);
    CHECK(first[1] == 2 && best == 5);
}

/* Brute-force optimum of catalogue FLOPs over S stages (S <= 4). */
static double brute_flops(const pp_catalogue *cat, int S)
{
    double cost[128];
    for (int u = 0; u < cat->n; u++) cost[u] = (double)cat->units[u].fwd_flops;
    double in[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    pp_balance_problem pb = {.n_units = cat->n, .cost = cost, .n_stages = S, .stage_in_flight = in};
    brute b = {.pb = &pb, .best = INFINITY};
    brute_rec(&b, 0, 0, 0.0);
    return b.best;
}

static void test_auto_plans(void)
{
    pp_plan *p;
    pp_diag d;
    pp_error err;
    char msg[2048];
    const char *text = "model: {name: resnet50}\nbatch: {size: 32, split_size: 8}\n"
                       "stages: auto\ndevices: [cuda:0, cuda:1, {device: cpu:0}]\nbalance: flops\n";
    CHECK_MSG(parse(text, strlen(text), &p, &d) == PP_OK, "%s",
              pp_diag_format(&d, msg, sizeof msg));
    if (!p) return;
    CHECK(p->stages_auto && p->balance == PP_PLAN_BALANCE_FLOPS && p->n_stages == 3);
    char *yaml = NULL;
    CHECK(pp_plan_emit(p, &yaml, NULL, &err) == PP_ERR_INVALID && yaml == NULL);
    CHECK_OK(pp_plan_resolve_auto(p, NULL, NULL, &err), &err);
    CHECK(!p->stages_auto);
    double worst = 0;
    for (int s = 0; s < 3; s++) {
        double c = 0;
        for (int u = p->stages[s].first; u <= p->stages[s].last; u++)
            c += (double)p->catalogue.units[u].fwd_flops;
        if (c > worst) worst = c;
        CHECK(p->stages[s].last >= p->stages[s].first);
    }
    CHECK_MSG(worst == brute_flops(&p->catalogue, 3), "auto flops not optimal");
    check_round_trip("auto flops", p);

    /* balance: time needs costs; given costs, they are used */
    pp_plan_free(p);
    text = "model: {name: resnet18}\nbatch: {size: 4, micro_batches: 2}\n"
           "stages: auto\ndevices: [cpu:0, cpu:1]\nbalance: time\n";
    CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
    if (!p) return;
    CHECK(pp_plan_resolve_auto(p, NULL, NULL, &err) == PP_ERR_INVALID);
    double costs[14];
    for (int u = 0; u < 14; u++) costs[u] = 1;
    costs[13] = 100; /* most of the time in fc: fc alone on the last stage */
    CHECK_OK(pp_plan_resolve_auto(p, NULL, costs, &err), &err);
    CHECK(p->stages[0].first == 0 && p->stages[0].last == 12 && p->stages[1].first == 13);
    check_round_trip("auto time", p);
    pp_plan_free(p);

    /* balance: memory with limits: respected, and infeasible names the device */
    text = "model: {name: resnet50}\nbatch: {size: 32, split_size: 8}\nschedule: 1f1b\n"
           "optimizer: {momentum: 0.9}\n"
           "stages: auto\ndevices: [{device: cuda:0, memory: 2GiB}, {device: cuda:1, memory: "
           "2GiB}]\nbalance: memory\n";
    CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
    if (!p) return;
    pp_status s = pp_plan_resolve_auto(p, NULL, NULL, &err);
    if (s == PP_OK) {
        for (int st = 0; st < 2; st++)
            CHECK(pp_plan_stage_memory_estimate(p, p->stages[st].first, p->stages[st].last,
                                                pp_plan_in_flight(p, st)) <=
                  p->stages[st].memory_bytes);
    } else {
        CHECK_MSG(0, "2GiB x2 should fit resnet50 at split 8: %s", err.msg);
    }
    pp_plan_free(p);
    text = "model: {name: resnet50}\nbatch: {size: 32, split_size: 8}\n"
           "stages: auto\ndevices: [{device: cuda:0, memory: 1MiB}, {device: cuda:1, memory: "
           "1GiB}]\nbalance: flops\n";
    CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
    if (!p) return;
    s = pp_plan_resolve_auto(p, NULL, NULL, &err);
    CHECK(s == PP_ERR_INPUT && p->stages_auto);
    CHECK_MSG(strstr(err.msg, ":3:9: memory too small: cuda:0 (stage 0) has 1.00 MiB") != NULL,
              "%s", err.msg);
    pp_plan_free(p);
}

/* ------------------------------------------------------------------ */
/* device maps                                                          */

static void test_device_map(void)
{
    static const struct {
        const char *map;
        pp_status status;
        const char *result; /* devices after mapping, or a message fragment */
    } cases[] = {
        {"cuda:1=cuda:0", PP_OK, "cpu:0 cuda:0 cuda:0 cuda:3"},
        {"cuda:*=cpu", PP_OK, "cpu:0 cpu:1 cpu:0 cpu:3"},
        {"cuda:*=cpu:*", PP_OK, "cpu:0 cpu:1 cpu:0 cpu:3"},
        {"cuda:*=cpu:2", PP_OK, "cpu:0 cpu:2 cpu:2 cpu:2"},
        {"cuda:1=cpu, cuda:*=cuda:0", PP_OK, "cpu:0 cpu:0 cuda:0 cuda:0"},
        {"cpu:0=cuda:1,cuda:1=cpu:0", PP_OK, "cuda:1 cpu:0 cuda:0 cuda:3"},
        {"cpu:*=cuda", PP_OK, "cuda:0 cuda:1 cuda:0 cuda:3"},
        {"cuda=cpu", PP_OK, "cpu:0 cpu:1 cpu:0 cpu:3"},          /* a bare kind: every one */
        {"cuda=cpu:0", PP_OK, "cpu:0 cpu:0 cpu:0 cpu:0"},
        {"cuda:1=cpu", PP_OK, "cpu:0 cpu:0 cuda:0 cuda:3"},       /* one device: "cpu" is cpu:0 */
        {"cuda:7=cpu:7", PP_ERR_INPUT, "names cuda:7, which the plan does not use (its devices: "
                                       "cpu:0, cuda:1, cuda:0, cuda:3)"},
        {"cpu:*=cpu:1,cuda:*=cpu:0", PP_OK, "cpu:1 cpu:0 cpu:0 cpu:0"}, /* wildcards need no match */
        {"cuda:*=cpu,cpu:5=cpu:0", PP_ERR_INPUT, "names cpu:5"},
        {"", PP_ERR_INPUT, "entry 1 is empty"},
        {"cuda:1=cuda:0,", PP_ERR_INPUT, "entry 2 is empty"},
        {"cuda:1", PP_ERR_INPUT, "must have the form FROM=TO"},
        {"cuda:1=cuda:0=cpu", PP_ERR_INPUT, "must have the form FROM=TO"},
        {"gpu:1=cuda:0", PP_ERR_INPUT, "bad device 'gpu:1'"},
        {"cuda:1=tpu", PP_ERR_INPUT, "bad device 'tpu'"},
        {"cuda:1=cpu:*", PP_ERR_INPUT, "a wildcard target needs a wildcard source"},
        {"cuda:1=cpu,cuda:1=cuda:0", PP_ERR_INPUT, "names cuda:1 twice"},
        {"cuda:*=cpu,cuda:*=cuda:0", PP_ERR_INPUT, "names cuda:* twice"},
        {"*=cpu", PP_ERR_INPUT, "bad device '*'"},
    };
    const char *text = "model: {name: delay}\nbatch: {size: 4, split_size: 1}\n"
                       "stages: [{device: cpu:0}, {device: cuda:1}, {device: cuda:0}, "
                       "{device: cuda:3}]\n";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_plan *p;
        pp_diag d;
        CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
        if (!p) return;
        pp_error err;
        pp_status s = pp_plan_apply_device_map(p, cases[i].map, &err);
        CHECK_MSG(s == cases[i].status, "map '%s': %s", cases[i].map, pp_status_name(s));
        char got[128] = "";
        size_t k = 0;
        for (int st = 0; st < p->n_stages; st++)
            k += (size_t)snprintf(got + k, sizeof got - k, "%s%s", st ? " " : "",
                                  p->stages[st].device_name);
        if (s == PP_OK) {
            CHECK_MSG(strcmp(got, cases[i].result) == 0, "map '%s': got '%s'", cases[i].map, got);
            char fmt[16];
            for (int st = 0; st < p->n_stages; st++)
                CHECK(strcmp(pp_device_id_format(p->stages[st].device, fmt, sizeof fmt),
                             p->stages[st].device_name) == 0);
        } else {
            CHECK_MSG(strstr(err.msg, cases[i].result) != NULL, "map '%s': %s", cases[i].map,
                      err.msg);
            CHECK_MSG(strcmp(got, "cpu:0 cuda:1 cuda:0 cuda:3") == 0, "map '%s' changed the plan",
                      cases[i].map);
        }
        CHECK(p->stages[1].device_mark.line == 3);
        pp_plan_free(p);
    }
}

static void test_sizes(void)
{
    pp_plan *p;
    pp_diag d;
    static const struct {
        const char *mem;
        int64_t bytes;
    } sizes[] = {{"1", 1},
                 {"4096", 4096},
                 {"40GiB", (int64_t)40 << 30},
                 {"512MiB", (int64_t)512 << 20},
                 {"8GB", 8000000000},
                 {"\"1.5 KiB\"", 1536},
                 {"3TiB", (int64_t)3 << 40},
                 {"100B", 100}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "model: {name: delay}\nbatch: {size: 4, split_size: 1}\n"
                 "stages: [{device: cpu:0, memory: %s}]\n",
                 sizes[i].mem);
        CHECK_MSG(parse(text, strlen(text), &p, &d) == PP_OK, "memory %s", sizes[i].mem);
        if (!p) continue;
        CHECK_MSG(p->stages[0].memory_bytes == sizes[i].bytes, "memory %s -> %lld", sizes[i].mem,
                  (long long)p->stages[0].memory_bytes);
        check_round_trip(sizes[i].mem, p);
        pp_plan_free(p);
    }
}

/* pp_plan_load reads a file and resolves data paths against its folder. */
/* schedule: every built-in by name, a program file (resolved against the
 * plan's folder, emitted and compared), devices shared by stages, stages cut
 * anew for another placement. */
static void test_schedules(const char *dir)
{
    static const char *const names[] = {"gpipe", "1f1b", "interleaved1f1b", "loopedbfs",
                                        "interleavedzb", "zbh1", "zbh2", "zbv", "dualpipev"};
    for (int k = 0; k < 9; k++) {
        char text[1024];
        snprintf(text, sizeof text, BASE "schedule: %s\n", names[k]);
        pp_plan *p = NULL;
        pp_diag d;
        CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
        if (!p) continue;
        CHECK(p->schedule == (pp_plan_schedule)k && strcmp(pp_plan_schedule_name(p->schedule),
                                                             names[k]) == 0);
        check_round_trip(names[k], p);
        pp_plan_free(p);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/sched.yaml", dir);
    const char *text = "model: {name: delay, forward_ms: [1, 2, 3, 4], backward_ms: 6}\n"
                       "batch: {size: 6, split_size: 2}\n"
                       "schedule: {file: data/two.csv}\n"
                       "stages:\n  - device: cpu:0\n  - device: cpu:1\n  - device: cpu:0\n"
                       "  - device: rank1:cpu:0\n";
    pp_plan *p = NULL;
    pp_diag d;
    pp_diag_clear(&d);
    char msg[2048];
    CHECK_MSG(pp_plan_parse_string(path, text, strlen(text), &p, &d) == PP_OK, "%s",
              pp_diag_format(&d, msg, sizeof msg));
    if (!p) return;
    CHECK(p->schedule == PP_PLAN_SCHEDULE_FILE && p->schedule_file &&
          strstr(p->schedule_file, "/tests/plan/data/two.csv") != NULL);
    check_round_trip("schedule file", p);
    int dev[PP_PLAN_MAX_STAGES];
    CHECK(pp_plan_devices(p, dev) == 3 && dev[0] == 0 && dev[1] == 1 && dev[2] == 0 && dev[3] == 2);
    /* the delay model cut for a V on its 3 devices: 6 stages, each device's
     * times halved (device 0 held stages 0 and 2: forward 1 + 3) */
    pp_error err;
    const int v[6] = {0, 1, 2, 2, 1, 0};
    CHECK_OK(pp_plan_restage(p, 6, v, &err), &err);
    CHECK(p->n_stages == 6 && p->model.n_forward_ms == 6 && p->model.forward_ms[0] == 2 &&
          p->model.forward_ms[1] == 1 && p->model.forward_ms[2] == 2 &&
          p->model.forward_ms[5] == 2 && p->model.backward_ms[0] == 6 &&
          p->model.backward_ms[2] == 3 && p->stages[3].rank == 1);
    CHECK(pp_plan_devices(p, dev) == 3);
    pp_plan_free(p);
    /* both parts and no whole backward: B is their sum, so every schedule is timed alike */
    text = "model: {name: delay, forward_ms: 4, backward_input_ms: [4, 3], backward_weight_ms: 4}"
           "\nbatch: {size: 4, split_size: 2}\nstages:\n  - device: cpu:0\n  - device: cpu:1\n";
    CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
    if (!p) return;
    CHECK(p->model.n_backward_ms == 2 && p->model.backward_ms[0] == 8 &&
          p->model.backward_ms[1] == 7);
    check_round_trip("backward from its parts", p);
    pp_plan_free(p);
    /* the split backward's times follow the devices too */
    text = "model: {name: delay, forward_ms: 2, backward_ms: [6, 4], backward_input_ms: [4, 2],"
           " backward_weight_ms: 2}\nbatch: {size: 4, split_size: 2}\n"
           "stages:\n  - device: cpu:0\n  - device: cpu:1\n";
    CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
    if (!p) return;
    check_round_trip("split backward", p);
    const int v2[4] = {0, 1, 1, 0};
    CHECK_OK(pp_plan_restage(p, 4, v2, &err), &err);
    CHECK(p->model.n_backward_input_ms == 4 && p->model.backward_input_ms[0] == 2 &&
          p->model.backward_input_ms[1] == 1 && p->model.backward_weight_ms[3] == 1 &&
          p->model.forward_ms[2] == 1);
    check_round_trip("split backward, cut anew", p);
    pp_plan_free(p);
    /* a ResNet cut anew into 4 stages on its 2 devices, looped */
    const char *r = BASE;
    CHECK(parse(r, strlen(r), &p, &d) == PP_OK);
    if (!p) return;
    const int loop[4] = {0, 1, 0, 1};
    CHECK_OK(pp_plan_restage(p, 4, loop, &err), &err);
    CHECK(p->n_stages == 4 && !p->stages_auto && p->stages[0].first == 0 &&
          p->stages[3].last == p->catalogue.n - 1 && p->stages[2].device.index == 0);
    for (int s = 1; s < 4; s++) CHECK(p->stages[s].first == p->stages[s - 1].last + 1);
    CHECK(pp_plan_restage(p, 99, loop, &err) == PP_ERR_INPUT);
    pp_plan_free(p);
}

static void test_load_file(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/resnet50_idx.yaml", dir);
    pp_plan *p = NULL;
    pp_diag d;
    pp_diag_clear(&d);
    char msg[2048];
    CHECK_MSG(pp_plan_load(path, &p, &d) == PP_OK, "%s", pp_diag_format(&d, msg, sizeof msg));
    if (!p) return;
    CHECK(strcmp(p->path, path) == 0);
    CHECK(p->model.in_channels == 1 && p->model.image_h == 32 && p->catalogue.n == 22);
    CHECK(p->data.labels && strstr(p->data.labels, "/tests/plan/data/labels.idx") != NULL);
    CHECK(p->data.labels_mark.line == 13 && p->data.labels_mark.col == 11);
    CHECK(p->stages[0].layers_mark.line == 16 && p->stages[0].layers_mark.col == 13);
    CHECK(p->stages[1].first == 11 && p->micro_batches == 1 && p->micro_sizes[0] == 2);
    check_round_trip("resnet50_idx.yaml", p);

    /* a catalogue of another model is refused by resolve_auto */
    pp_plan *a = NULL;
    const char *text = "model: {name: resnet18}\nbatch: {size: 2, split_size: 1}\n"
                       "stages: auto\ndevices: [cpu:0, cpu:1]\nbalance: flops\n";
    CHECK(parse(text, strlen(text), &a, &d) == PP_OK);
    if (a) {
        pp_error err;
        CHECK(pp_plan_resolve_auto(a, &p->catalogue, NULL, &err) == PP_ERR_INVALID);
        CHECK(a->stages_auto);
        CHECK_OK(pp_plan_resolve_auto(a, NULL, NULL, &err), &err);
        CHECK_OK(pp_plan_resolve_auto(a, NULL, NULL, &err), &err); /* resolved: no-op */
    }
    pp_plan_free(a);
    pp_plan_free(p);
}

/* What a step means: the keys a checkpoint records, by plan */
static void test_step_keys(void)
{
    static const struct {
        const char *what, *text;
        const char *want;  /* "key=value;" for every key, in order */
    } cases[] = {
        {"resnet18", BASE,
         "model.name=resnet18;model.num_classes=1000;model.in_channels=3;model.stem=imagenet;"
         "batch.size=8;batch.micro_batches=3 (3+3+2);data.format=synthetic;"
         "data.image_size=[224, 224];data.num_classes=1000;data.shuffle=false;seed=0;"},
        {"replicas cut the batch first",
         "model: {name: resnet18, num_classes: 10, stem: cifar}\n"
         "batch: {size: 10, micro_batches: 2}\ndata: {image_size: 8, shuffle: true, "
         "mean: [0.5, 0.25, 0.125], std: [1, 2, 4]}\nseed: 7\nreplicas: 2\n"
         "stages:\n  - {device: [cpu:0, cpu:1], layers: [conv1, bn1, relu, layer1, layer2, "
         "layer3, layer4, avgpool, fc]}\n",
         "model.name=resnet18;model.num_classes=10;model.in_channels=3;model.stem=cifar;"
         "batch.size=10;batch.micro_batches=4 (3+2+3+2);data.format=synthetic;"
         "data.image_size=[8, 8];data.num_classes=10;data.shuffle=true;"
         "data.mean=[0.5, 0.25, 0.125];data.std=[1.0, 2.0, 4.0];seed=7;"},
        {"no batch norm: micro-batches do not matter", S_MODEL S_L0 S_L1 S_L2 S_REST,
         "model.name=sequential;model.num_classes=3;model.in_channels=1;"
         "model.layers=c1 conv 4 k3 s1 p0, f flatten, fc linear 3;batch.size=8;"
         "data.format=synthetic;data.image_size=[8, 8];data.num_classes=3;"
         "data.shuffle=false;seed=0;"},
        {"delay", "model: {name: delay, forward_ms: 1, backward_ms: 2}\n" L_BATCH L_STAGES
                  "  - {device: cpu:0}\n",
         "model.name=delay;batch.size=8;data.format=synthetic;data.image_size=[224, 224];"
         "data.num_classes=10;data.shuffle=false;seed=0;"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_plan *p = NULL;
        pp_diag d;
        char msg[2048];
        pp_status s = parse(cases[i].text, strlen(cases[i].text), &p, &d);
        CHECK_MSG(s == PP_OK, "[%s] %s", cases[i].what, pp_diag_format(&d, msg, sizeof msg));
        if (!p) continue;
        pp_plan_step_keys k;
        pp_error err;
        CHECK_OK(pp_plan_step_keys_get(p, &k, &err), &err);
        char got[2048] = "";
        size_t used = 0;
        for (int j = 0; j < k.n; j++)
            used += (size_t)snprintf(got + used, sizeof got - used, "%s=%s;", k.keys[j],
                                     k.values[j]);
        CHECK_MSG(strcmp(got, cases[i].want) == 0, "[%s]\n got  %s\n want %s", cases[i].what,
                  got, cases[i].want);
        pp_plan_step_keys_free(&k);
        pp_plan_free(p);
    }
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    snprintf(g_name, sizeof g_name, "%s/inline.yaml", dir);
    test_bad_plans();
    test_many_errors();
    test_one_message();
    test_emit_numbers();
    test_hostile();
    test_valid_plans();
    test_plan_fields();
    test_precision();
    test_cuda_graphs();
    test_balance_random();
    test_balance_errors();
    test_auto_plans();
    test_device_map();
    test_sizes();
    test_schedules(dir);
    test_step_keys();
    test_load_file(dir);
    return check_summary("test_plan");
}
