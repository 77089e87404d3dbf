/*
 * test_plan_valid.c - the partitioner's valid plans: each round-trips through
 * emit; precision, CUDA graphs and the plan's fields; memory sizes;
 * schedules by name and from files, stages cut anew; a plan file loaded;
 * the keys a checkpoint records; pp_plan_equal, on which every round trip
 * rests, telling each key apart (one key changed at a time in ResNet, GPT-2,
 * sequential, delay and image-folder plans: unequal both ways, the reason
 * naming the key).
 *
 * Usage: test_plan_valid SOURCE_DIR (the folder holding data/ test files).
 */
#define PP_CHECK_COUNTERS
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "partitioner/emit.h"
#include "tests/check.h"
#include "tests/plan/plan_common.h"

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

/* pp_plan_load reads a file and resolves data paths against its folder. */
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

/* ------------------------------------------------------------------ */
/* pp_plan_equal tells every field apart                               */

typedef struct mutation {
    const char *why;     /* a fragment of pp_plan_equal's reason */
    const char *edit[4]; /* from, to: a replacement in the base text; and a second one
                          * after it (NULL: none) */
} mutation;

/* Each mutation of base (one key changed) parses, and pp_plan_equal finds it
 * unequal to base, naming the difference; base equals itself parsed again.
 * The round trips above rest on it: an equality that missed a field would
 * pass them all. */
static void check_mutations(const char *label, const char *base, const mutation *m, size_t n)
{
    pp_plan *a = NULL, *b = NULL;
    pp_diag d;
    char msg[2048], why[256];
    CHECK_MSG(parse(base, strlen(base), &a, &d) == PP_OK, "[%s] base: %s", label,
              pp_diag_format(&d, msg, sizeof msg));
    CHECK_MSG(parse(base, strlen(base), &b, &d) == PP_OK, "[%s] base again", label);
    if (!a || !b) {
        pp_plan_free(a), pp_plan_free(b);
        return;
    }
    CHECK_MSG(pp_plan_equal(a, b, why, sizeof why), "[%s] base differs from itself: %s", label,
              why);
    pp_plan_free(b);
    for (size_t i = 0; i < n; i++) {
        const char *at = strstr(base, m[i].edit[0]);
        CHECK_MSG(at != NULL, "[%s] '%s' is not in the base", label, m[i].edit[0]);
        if (!at) continue;
        char text[4096], once[4096];
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, m[i].edit[1],
                 at + strlen(m[i].edit[0]));
        if (m[i].edit[2]) {
            memcpy(once, text, sizeof once);
            at = strstr(once, m[i].edit[2]);
            CHECK_MSG(at != NULL, "[%s] '%s' is not in the base", label, m[i].edit[2]);
            if (!at) continue;
            snprintf(text, sizeof text, "%.*s%s%s", (int)(at - once), once, m[i].edit[3],
                     at + strlen(m[i].edit[2]));
        }
        b = NULL;
        CHECK_MSG(parse(text, strlen(text), &b, &d) == PP_OK, "[%s] '%s' -> '%s': %s", label,
                  m[i].edit[0], m[i].edit[1], pp_diag_format(&d, msg, sizeof msg));
        if (!b) continue;
        why[0] = '\0';
        const bool eq = pp_plan_equal(a, b, why, sizeof why);
        CHECK_MSG(!eq && strstr(why, m[i].why) != NULL,
                  "[%s] '%s' -> '%s': %s (want a difference naming '%s')", label, m[i].edit[0],
                  m[i].edit[1], eq ? "equal" : why, m[i].why);
        CHECK_MSG(!pp_plan_equal(b, a, NULL, 0), "[%s] '%s' -> '%s': equal the other way",
                  label, m[i].edit[0], m[i].edit[1]);
        pp_plan_free(b);
    }
    pp_plan_free(a);
}

static void test_plan_equal(void)
{
    static const char resnet[] =
        "model: {name: resnet18, num_classes: 10, in_channels: 3, stem: cifar, "
        "zero_init_residual: false}\n"
        "batch: {size: 8, split_size: 4, deferred_batch_norm: false}\n"
        "schedule: 1f1b\nprecision: fp32\nrecompute: never\ncuda_graphs: on\n"
        "optimizer: {type: sgd, lr: 0.1, momentum: 0.9, weight_decay: 0.0001, nesterov: false, "
        "clip_grad_norm: 2, lr_schedule: {type: step, milestones: [2, 4], gamma: 0.5}}\n"
        "loss: {label_smoothing: 0.05}\n"
        "data: {format: synthetic, image_size: [32, 32], num_classes: 10, samples: 64, "
        "shuffle: false, drop_last: false, workers: 2, prefetch: 1, mean: [0.5, 0.5, 0.5], "
        "std: [0.25, 0.25, 0.25]}\n"
        "eval: {format: synthetic, samples: 16, batch_size: 4, every: 1}\n"
        "checkpoint: {path: \"ck-{epoch}.safetensors\", every: 1, keep: 2}\n"
        "seed: 1\nepochs: 2\n"
        "stages:\n"
        "  - {device: cpu:0, layers: [conv1, bn1, relu, layer1, layer2]}\n"
        "  - {device: cpu:1, layers: [layer3, layer4, avgpool, fc]}\n";
    static const mutation rm[] = {
        {"model resnet18 vs resnet34", {"name: resnet18", "name: resnet34"}},
        {"model classes", {"num_classes: 10, in_channels", "num_classes: 12, in_channels"}},
        {"stem/depth", {"stem: cifar", "stem: imagenet", "relu, layer1", "relu, maxpool, layer1"}},
        {"zero_init_residual", {"zero_init_residual: false", "zero_init_residual: true"}},
        {"batch 8/4/2 vs 8/3/3", {"split_size: 4", "split_size: 3"}},
        {"deferred_batch_norm", {"deferred_batch_norm: false", "deferred_batch_norm: true"}},
        {"schedule differs", {"schedule: 1f1b", "schedule: gpipe"}},
        {"precision differs", {"precision: fp32", "precision: bf16"}},
        {"recompute differs", {"recompute: never", "recompute: always"}},
        {"cuda_graphs differs", {"cuda_graphs: on", "cuda_graphs: off"}},
        {"optimizer differs", {"lr: 0.1", "lr: 0.2"}},
        {"optimizer differs", {"momentum: 0.9", "momentum: 0.8"}},
        {"optimizer differs", {"weight_decay: 0.0001", "weight_decay: 0.001"}},
        {"optimizer differs", {"nesterov: false", "nesterov: true"}},
        {"optimizer differs", {"clip_grad_norm: 2", "clip_grad_norm: 3"}},
        {"lr_schedule differs", {"milestones: [2, 4]", "milestones: [2, 3]"}},
        {"lr_schedule differs", {"gamma: 0.5", "gamma: 0.25"}},
        {"loss.label_smoothing", {"label_smoothing: 0.05", "label_smoothing: 0.1"}},
        {"data.samples differs", {"samples: 64", "samples: 32"}},
        {"data.num_classes differs", {"num_classes: 10, samples", "num_classes: 5, samples"}},
        {"data.shuffle differs", {"shuffle: false", "shuffle: true"}},
        {"data.drop_last differs", {"drop_last: false", "drop_last: true"}},
        {"data.workers or prefetch", {"workers: 2", "workers: 3"}},
        {"data.workers or prefetch", {"prefetch: 1", "prefetch: 2"}},
        {"data mean/std[2] differs", {"mean: [0.5, 0.5, 0.5]", "mean: [0.5, 0.5, 0.25]"}},
        {"data mean/std[0] differs", {"std: [0.25, 0.25, 0.25]", "std: [0.5, 0.25, 0.25]"}},
        {"image size", {"image_size: [32, 32]", "image_size: [32, 24]"}},
        {"eval.samples differs", {"samples: 16", "samples: 8"}},
        {"eval differs", {"batch_size: 4", "batch_size: 2"}},
        {"eval differs", {"every: 1}\ncheckpoint", "every: 2}\ncheckpoint"}},
        {"checkpoint differs", {"keep: 2", "keep: 3"}},
        {"checkpoint differs", {"ck-{epoch}", "cp-{epoch}"}},
        {"seed differs", {"seed: 1", "seed: 2"}},
        {"epochs 2 vs 3", {"epochs: 2", "epochs: 3"}},
        {"stage 1 device cpu:1 vs cpu:2", {"device: cpu:1", "device: cpu:2"}},
        {"stage 0 units", {"layer2]}\n  - {device: cpu:1, layers: [layer3, ", "layer2, layer3]}\n  - {device: cpu:1, layers: ["}},
        {"stage 0 memory", {"{device: cpu:0, layers", "{device: cpu:0, memory: 1GiB, layers"}},
        {"stage 1 recompute", {"{device: cpu:1, layers", "{device: cpu:1, recompute: always, layers"}},
    };
    check_mutations("resnet18", resnet, rm, sizeof rm / sizeof rm[0]);

    /* its text data in the test's folder (any bytes are text) */
    static const char gpt2[] =
        "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, "
        "block_size: 16, bias: true, dropout: 0, tie_embeddings: true}\n"
        "batch: {size: 4, micro_batches: 2}\n"
        "optimizer: {type: adamw, lr: 0.001, betas: [0.9, 0.95], eps: 1.0e-8, "
        "weight_decay: 0.1}\n"
        "data: {format: text, file: data/two.csv, block_size: 16}\n"
        "steps: 3\n"
        "stages:\n  - {device: cpu:0, layers: [wte, wpe, h.0]}\n"
        "  - {device: cpu:1, layers: [h.1, ln_f, lm_head]}\n";
    static const mutation gm[] = {
        {"gpt2 sizes differ", {"n_head: 2", "n_head: 4"}},
        {"gpt2 sizes differ", {"bias: true", "bias: false"}},
        {"gpt2 sizes differ", {"dropout: 0", "dropout: 0.1"}},
        {"gpt2 sizes differ", {"tie_embeddings: true", "tie_embeddings: false"}},
        {"batch", {"size: 4, micro_batches: 2", "size: 4, micro_batches: 4"}},
        {"optimizer differs", {"type: adamw, lr: 0.001, betas: [0.9, 0.95], eps: 1.0e-8", "type: sgd, lr: 0.001"}},
        {"optimizer differs", {"betas: [0.9, 0.95]", "betas: [0.9, 0.999]"}},
        {"optimizer differs", {"eps: 1.0e-8", "eps: 1.0e-6"}},
        /* the data's block_size is the model's seq_len: found there first */
        {"gpt2 sizes differ", {"block_size: 16}\nsteps", "block_size: 8}\nsteps"}},
        {"data.file or block_size", {"data/two.csv", "data/data_batch_1.bin"}},
        {"steps 3 vs 4", {"steps: 3", "steps: 4"}},
    };
    check_mutations("gpt2", gpt2, gm, sizeof gm / sizeof gm[0]);

    static const char seq[] =
        "model:\n  name: sequential\n  in_channels: 1\n  layers:\n"
        "    - {name: c1, type: conv, out_channels: 4, kernel: 3}\n"
        "    - {name: f, type: flatten}\n"
        "    - {name: fc, type: linear, out_features: 3}\n"
        "data: {image_size: [8, 8]}\nbatch: {size: 4, split_size: 2}\n"
        "stages:\n  - {device: cpu:0, layers: [c1, f, fc]}\n";
    static const mutation sm[] = {
        {"sequential layer 0 differs", {"out_channels: 4", "out_channels: 5"}},
        {"sequential layer 0 differs", {"kernel: 3}", "kernel: 3, stride: 2}"}},
        {"model classes", {"out_features: 3", "out_features: 4"}},
    };
    check_mutations("sequential", seq, sm, sizeof sm / sizeof sm[0]);

    static const char delay[] =
        "model: {name: delay, forward_ms: [1, 2], backward_input_ms: [2, 2], "
        "backward_weight_ms: [1, 1]}\nbatch: {size: 4, split_size: 2}\n"
        "stages:\n  - {device: cpu:0}\n  - {device: cpu:1}\n";
    static const mutation dm[] = {
        {"forward_ms[1] differs", {"forward_ms: [1, 2]", "forward_ms: [1, 3]"}},
        {"backward", {"backward_input_ms: [2, 2]", "backward_input_ms: [2, 3]"}},
        {"backward", {"backward_weight_ms: [1, 1]", "backward_weight_ms: [2, 1]"}},
    };
    check_mutations("delay", delay, dm, sizeof dm / sizeof dm[0]);

    /* an image folder's transforms: two classes of one 2x2 grey PGM each */
    char root[256], path[512], folder[2048];
    if (!check_mkdtemp(root, sizeof root, "test_plan_valid")) return;
    static const unsigned char pgm[] = "P5\n2 2\n255\n\x10\x20\x30\x40";
    for (int c = 0; c < 2; c++) {
        snprintf(path, sizeof path, "%s/%c", root, 'a' + c);
        CHECK(mkdir(path, 0755) == 0);
        snprintf(path, sizeof path, "%s/%c/x.pgm", root, 'a' + c);
        check_write_file(path, pgm, sizeof pgm - 1);
    }
    snprintf(folder, sizeof folder,
             "model: {name: resnet18, num_classes: 2, in_channels: 1, stem: cifar}\n"
             "batch: {size: 4, split_size: 2}\n"
             "data: {format: imagefolder, root: %s, "
             "transforms: [{random_resized_crop: 8}, {horizontal_flip: 0.5}]}\n"
             "stages:\n  - {device: cpu:0, layers: [conv1, bn1, relu, layer1, layer2, layer3, "
             "layer4, avgpool, fc]}\n",
             root);
    static const mutation fm[] = {
        /* (the crop's size is the model's image size: found there first) */
        {"image size 8x8 vs 6x6", {"random_resized_crop: 8", "random_resized_crop: 6"}},
        {"data.transforms differ",
         {"random_resized_crop: 8", "random_resized_crop: {size: 8, scale: [0.5, 1.0]}"}},
        {"data.transforms differ", {"horizontal_flip: 0.5", "horizontal_flip: 0.25"}},
        {"data.transforms differ", {"{horizontal_flip: 0.5}", "{horizontal_flip: 0.5}, "
                                                              "{horizontal_flip: 0.5}"}},
        {"data.on_bad_image differs", {"format: imagefolder", "format: imagefolder, "
                                                              "on_bad_image: skip"}},
    };
    check_mutations("imagefolder", folder, fm, sizeof fm / sizeof fm[0]);
    for (int c = 0; c < 2; c++) {
        snprintf(path, sizeof path, "%s/%c/x.pgm", root, 'a' + c);
        remove(path);
        snprintf(path, sizeof path, "%s/%c", root, 'a' + c);
        rmdir(path);
    }
    rmdir(root);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    plan_test_init(dir);
    test_valid_plans();
    test_plan_fields();
    test_precision();
    test_cuda_graphs();
    test_sizes();
    test_schedules(dir);
    test_step_keys();
    test_load_file(dir);
    test_plan_equal();
    return check_summary("test_plan_valid");
}
