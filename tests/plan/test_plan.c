/*
 * test_plan.c - the partitioner's malformed plans: status, line, column and
 * message of each, one message where there is one problem, many errors in one
 * plan, numbers emitted exactly, hostile YAML. Valid plans are
 * test_plan_valid.c's, the balancer and device maps test_plan_balance.c's.
 *
 * Usage: test_plan SOURCE_DIR (the folder holding data/ test files).
 */
#define PP_CHECK_COUNTERS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/emit.h"
#include "tests/check.h"
#include "tests/plan/plan_common.h"

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
            snprintf(prefix, sizeof prefix, "%s:%d:%d: ", plan_test_name(), c->line, c->col);
        else
            snprintf(prefix, sizeof prefix, "%s: ", plan_test_name());
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

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    plan_test_init(dir);
    test_bad_plans();
    test_many_errors();
    test_one_message();
    test_emit_numbers();
    test_hostile();
    return check_summary("test_plan");
}
