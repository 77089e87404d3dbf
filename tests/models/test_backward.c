/*
 * test_backward.c - the split backward (I then W) and recomputation
 * (PP_STAGE_KEEP_INPUT) of model stages on the CPU backend.
 *
 * Every order of a step's actions (B in order, in reverse, I and W in order,
 * interleaved, delayed, B mixed with I/W, forwards kept whole or recomputed)
 * gives the bits of the reference step (every forward kept, B in micro-batch
 * order): parameter gradients, input gradients, outputs, running statistics
 * and batch counts. Stages cover ResNet-18 and ResNet-50 (cifar stem), cut
 * into stages at several places, NCHW and NHWC, a sequential model of every
 * other unit kind, and a small GPT-2 (with and without biases, tied and
 * untied) whole and cut at every kind of boundary. Memory: what the stage holds after F, after I and
 * after recomputed forwards is what the catalogue says, and everything is
 * freed at the end. The delay unit's parts sleep their times.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/catalogue.h"
#include "models/delay.h"
#include "models/rng.h"
#include "models/stage.h"
#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"

static pp_device_ctx *dev;
static pp_exec ex;

#define MAX_MB 4

/* ---- helpers ------------------------------------------------------------- */

static void *host_copy(const pp_tensor *t)
{
    size_t bytes = pp_tensor_bytes(t);
    void *h = malloc(bytes ? bytes : 4);
    pp_error err;
    CHECK_OK(pp_tensor_to_host(t, h, bytes, &err), &err);
    return h;
}

static void fill_normal(pp_tensor *t, uint64_t seed, double scale)
{
    int64_t n = pp_tensor_numel(t);
    float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    pp_rng r;
    pp_rng_init(&r, seed, "backward test");
    for (int64_t i = 0; i < n; i++) p[i] = (float)(scale * pp_rng_normal(&r));
    pp_error err;
    CHECK_OK(pp_tensor_from_host(t, p, pp_tensor_bytes(t), &err), &err);
    free(p);
}

/* Bytes in use on the device, less the exec's workspace (scratch that grows
 * to the largest op seen and stays with the exec). */
static int64_t used(void)
{
    return (int64_t)pp_device_bytes_in_use(dev) - (int64_t)ex.ws_bytes;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- a stage to test: a range of a model, or explicit unit specs ----------- */

typedef struct stage_case {
    const char *what;
    pp_model_config cfg; /* a ResNet or sequential model ... */
    int first, last;     /* ... and the stage's unit range */
} stage_case;

static pp_stage *stage_make(const stage_case *c)
{
    pp_stage *st = NULL;
    pp_error err;
    CHECK_OK(pp_stage_new(&c->cfg, 11, c->first, c->last, dev, &st, &err), &err);
    return st;
}

/* What a step leaves behind, on the host, for bitwise comparison. */
typedef struct step_result {
    int n_params, n_buffers, m;
    void **grads, **buffers;
    size_t *grad_bytes, *buffer_bytes;
    void *y[MAX_MB], *dx[MAX_MB];
    size_t y_bytes[MAX_MB], dx_bytes[MAX_MB];
    int64_t counts[64];
    int n_counts;
} step_result;

static void result_free(step_result *r)
{
    for (int i = 0; i < r->n_params; i++) free(r->grads[i]);
    for (int i = 0; i < r->n_buffers; i++) free(r->buffers[i]);
    free(r->grads);
    free(r->buffers);
    free(r->grad_bytes);
    free(r->buffer_bytes);
    for (int k = 0; k < r->m; k++) {
        free(r->y[k]);
        free(r->dx[k]);
    }
    memset(r, 0, sizeof *r);
}

/* The first difference between two results, or NULL. */
static const char *result_diff(const step_result *a, const step_result *b, char *buf, size_t n)
{
    if (a->n_params != b->n_params || a->n_buffers != b->n_buffers || a->m != b->m)
        return "different stages";
    if (a->n_counts != b->n_counts || memcmp(a->counts, b->counts, sizeof a->counts) != 0)
        return "batch counts differ";
    for (int i = 0; i < a->n_params; i++)
        if (memcmp(a->grads[i], b->grads[i], a->grad_bytes[i]) != 0) {
            snprintf(buf, n, "gradient %d differs", i);
            return buf;
        }
    for (int i = 0; i < a->n_buffers; i++)
        if (memcmp(a->buffers[i], b->buffers[i], a->buffer_bytes[i]) != 0) {
            snprintf(buf, n, "buffer %d (running statistics) differs", i);
            return buf;
        }
    for (int k = 0; k < a->m; k++) {
        if (memcmp(a->y[k], b->y[k], a->y_bytes[k]) != 0) {
            snprintf(buf, n, "output of micro-batch %d differs", k);
            return buf;
        }
        if (memcmp(a->dx[k], b->dx[k], a->dx_bytes[k]) != 0) {
            snprintf(buf, n, "input gradient of micro-batch %d differs", k);
            return buf;
        }
    }
    return NULL;
}

/* The GPT-2 stages' vocabulary (inputs are ids below it). */
#define TEST_VOCAB 13

/* Micro-batch sizes of a step (a batch norm over 1x1 features needs two). */
static const int sizes[MAX_MB] = {2, 3, 2, 3};

/* The step's tensors: inputs, output gradients (fixed by micro-batch), and
 * the outputs and input gradients it writes. */
typedef struct step_io {
    int m;
    pp_tensor x[MAX_MB], y[MAX_MB], dy[MAX_MB], dx[MAX_MB];
} step_io;

static void io_make(pp_stage *st, int m, step_io *io)
{
    pp_error err;
    io->m = m;
    for (int k = 0; k < m; k++) {
        int nd;
        int64_t s[4];
        CHECK_OK(pp_stage_input_shape(st, sizes[k], &nd, s, &err), &err);
        const pp_dtype in = pp_stage_input_dtype(st);
        CHECK_OK(pp_tensor_alloc(&io->x[k], dev, in, nd, s, &err), &err);
        CHECK_OK(pp_tensor_zeros(&io->dx[k], dev, PP_F32, nd, s, &err), &err);
        if (in == PP_I32) /* token ids below every test vocabulary */
            for (int64_t i = 0; i < pp_tensor_numel(&io->x[k]); i++)
                ((int32_t *)io->x[k].data)[i] = (int32_t)((i * 7 + k * 3) % TEST_VOCAB);
        else
            fill_normal(&io->x[k], 100 + (uint64_t)k, 1.0);
        CHECK_OK(pp_stage_output_shape(st, sizes[k], &nd, s, &err), &err);
        CHECK_OK(pp_tensor_zeros(&io->y[k], dev, PP_F32, nd, s, &err), &err);
        CHECK_OK(pp_tensor_alloc(&io->dy[k], dev, PP_F32, nd, s, &err), &err);
        fill_normal(&io->dy[k], 200 + (uint64_t)k, 0.5);
    }
}

static void io_free(step_io *io)
{
    for (int k = 0; k < io->m; k++) {
        pp_tensor_free(&io->x[k]);
        pp_tensor_free(&io->y[k]);
        pp_tensor_free(&io->dy[k]);
        pp_tensor_free(&io->dx[k]);
    }
}

/* Runs one step's actions on st: tokens "F<k>" (forward, everything kept),
 * "R<k>" (forward keeping the input: recomputed before its backward), "B<k>",
 * "I<k>", "W<k>", "Z" (pp_stage_zero_grads). Returns false on a failed
 * action. */
static bool run_actions(pp_stage *st, step_io *io, const char *order, bool dx_null)
{
    pp_error err;
    for (const char *p = order; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char a = *p++;
        int k = 0;
        while (*p >= '0' && *p <= '9') k = 10 * k + (*p++ - '0');
        pp_status s = PP_OK;
        pp_tensor *dx = dx_null ? NULL : &io->dx[k];
        if (a == 'F' || a == 'R') /* each micro-batch its samples' draw (dropout) */
            s = pp_stage_set_draw(st, k, &(pp_unit_draw){.step = 3, .first_sample = 10 + 3 * k},
                                  &err);
        if (s == PP_OK) switch (a) {
        case 'Z': s = pp_stage_zero_grads(st, &ex, &err); break;
        case 'F':
            s = pp_stage_forward_keep(st, &ex, k, &io->x[k], &io->y[k], PP_STAGE_KEEP_ALL, &err);
            break;
        case 'R':
            s = pp_stage_forward_keep(st, &ex, k, &io->x[k], &io->y[k], PP_STAGE_KEEP_INPUT, &err);
            break;
        case 'B': s = pp_stage_backward(st, &ex, k, &io->dy[k], dx, &err); break;
        case 'I': s = pp_stage_backward_input(st, &ex, k, &io->dy[k], dx, &err); break;
        case 'W': s = pp_stage_backward_weight(st, &ex, k, &err); break;
        default: CHECK_MSG(false, "bad action %c", a); return false;
        }
        CHECK_OK(s, &err);
        if (s != PP_OK) return false;
    }
    return true;
}

static void collect(pp_stage *st, const step_io *io, step_result *r)
{
    pp_error err;
    CHECK_OK(pp_stage_sync_buffers(st, &err), &err);
    r->m = io->m;
    r->n_params = pp_stage_param_count(st);
    r->n_buffers = pp_stage_buffer_count(st);
    r->grads = calloc((size_t)r->n_params + 1, sizeof *r->grads);
    r->grad_bytes = calloc((size_t)r->n_params + 1, sizeof *r->grad_bytes);
    r->buffers = calloc((size_t)r->n_buffers + 1, sizeof *r->buffers);
    r->buffer_bytes = calloc((size_t)r->n_buffers + 1, sizeof *r->buffer_bytes);
    for (int i = 0; i < r->n_params; i++) {
        r->grads[i] = host_copy(pp_stage_param(st, i)->grad);
        r->grad_bytes[i] = pp_tensor_bytes(pp_stage_param(st, i)->grad);
    }
    for (int i = 0; i < r->n_buffers; i++) {
        r->buffers[i] = host_copy(pp_stage_buffer(st, i)->value);
        r->buffer_bytes[i] = pp_tensor_bytes(pp_stage_buffer(st, i)->value);
    }
    for (int k = 0; k < io->m; k++) {
        r->y[k] = host_copy(&io->y[k]);
        r->y_bytes[k] = pp_tensor_bytes(&io->y[k]);
        r->dx[k] = host_copy(&io->dx[k]);
        r->dx_bytes[k] = pp_tensor_bytes(&io->dx[k]);
    }
    memset(r->counts, 0, sizeof r->counts);
    r->n_counts = pp_stage_batch_counts(st, r->counts, 64);
}

/* Puts the stage's buffers back as built (running mean 0, variance 1, no
 * batch counted): the state every step of a comparison starts from (the
 * parameters do not change within a step). */
static void stage_reset(pp_stage *st)
{
    pp_error err;
    CHECK_OK(pp_stage_sync_buffers(st, &err), &err);
    for (int i = 0; i < pp_stage_buffer_count(st); i++) {
        pp_tensor *v = pp_stage_buffer(st, i)->value;
        const char *name = pp_stage_buffer(st, i)->name;
        const size_t len = strlen(name);
        void *h = calloc(1, pp_tensor_bytes(v) + 8);
        if (len > 3 && strcmp(name + len - 3, "var") == 0)
            for (int64_t j = 0; j < pp_tensor_numel(v); j++) ((float *)h)[j] = 1.0f;
        CHECK_OK(pp_tensor_from_host(v, h, pp_tensor_bytes(v), &err), &err);
        free(h);
    }
}

/* One step of actions on st (its buffers reset first); the stage holds
 * nothing afterwards and no gradient waits. */
static bool run_step_on(pp_stage *st, const stage_case *c, int m, const char *order,
                        step_result *r)
{
    stage_reset(st);
    step_io io;
    io_make(st, m, &io);
    const int64_t base = used();
    const bool ok = run_actions(st, &io, order,
                                c->first == 0 && (c->cfg.kind == PP_MODEL_RESNET ||
                                                  c->cfg.kind == PP_MODEL_GPT2));
    CHECK_MSG(pp_stage_in_flight(st) == 0 && pp_stage_grads_waiting(st) == 0,
              "%s, %s: %d micro-batches in flight, %d gradients waiting", c->what, order,
              pp_stage_in_flight(st), pp_stage_grads_waiting(st));
    CHECK_MSG(used() == base, "%s, %s: %lld bytes left", c->what, order,
              (long long)(used() - base));
    if (ok) collect(st, &io, r);
    io_free(&io);
    return ok;
}

/* The same on a stage of its own. */
static bool run_step(const stage_case *c, int m, const char *order, step_result *r)
{
    pp_stage *st = stage_make(c);
    if (!st) return false;
    bool ok = run_step_on(st, c, m, order, r);
    pp_stage_free(st);
    return ok;
}

/* ---- every order of a step gives the same bits ------------------------------- */

/* Orders of a step of 3 micro-batches. The first is the reference. */
static const char *const orders3[] = {
    "Z F0 F1 F2 B0 B1 B2",                /* GPipe, B in order: the reference */
    "Z F0 F1 F2 B2 B1 B0",                /* LoopedBFS: B in reverse */
    "Z F0 F1 F2 I0 W0 I1 W1 I2 W2",       /* I then W, in order */
    "Z F0 F1 F2 I0 I1 I2 W0 W1 W2",       /* W delayed (zero bubble) */
    "Z F0 F1 F2 I2 I1 I0 W2 W1 W0",       /* I and W in reverse */
    "Z F0 F1 I0 F2 I1 W1 I2 W0 W2",       /* interleaved, W out of order */
    "Z F0 F1 F2 I1 B2 W1 B0",             /* B mixed with I/W */
    "Z F0 F1 F2 B1 I0 I2 W2 W0",          /* ... the other way */
    "Z R0 R1 R2 B0 B1 B2",                /* recomputed, B in order */
    "Z R0 F1 R2 B2 B1 B0",                /* some recomputed, B in reverse */
    "Z R0 R1 R2 I0 I1 I2 W0 W1 W2",       /* recomputed, W delayed */
    "Z F0 R1 F2 I2 B1 W2 I0 W0",          /* recomputed and kept, mixed */
};

static void check_orders(const stage_case *c, const char *const *orders, int n_orders, int m)
{
    step_result ref = {0};
    double t0 = now_ms();
    pp_stage *st = stage_make(c);
    if (!st) return;
    if (!run_step_on(st, c, m, orders[0], &ref)) {
        pp_stage_free(st);
        return;
    }
    /* the reference has gradients at all */
    bool nonzero = ref.n_params == 0;
    for (int i = 0; i < ref.n_params && !nonzero; i++) {
        const float *g = ref.grads[i];
        for (size_t j = 0; j < ref.grad_bytes[i] / 4; j++) nonzero = nonzero || g[j] != 0.0f;
    }
    CHECK_MSG(nonzero, "%s: the reference step has no gradient", c->what);
    for (int o = 1; o < n_orders; o++) {
        step_result r = {0};
        if (!run_step_on(st, c, m, orders[o], &r)) continue;
        char buf[96];
        const char *diff = result_diff(&ref, &r, buf, sizeof buf);
        CHECK_MSG(!diff, "%s, order \"%s\": %s (against \"%s\")", c->what, orders[o], diff,
                  orders[0]);
        result_free(&r);
    }
    fprintf(stderr, "  %-44s %2d orders of %d micro-batches bitwise equal (%.0f ms)\n", c->what,
            n_orders, m, now_ms() - t0);
    result_free(&ref);
    pp_stage_free(st);
}

/* cifar stem; 16x16 images for ResNet-18, 8x8 for ResNet-50 (its last
 * blocks then see 1x1 planes: batch norms over two or three values). */
static pp_model_config resnet_cfg(const char *name, bool nhwc)
{
    pp_model_config cfg;
    pp_error err;
    CHECK_OK(pp_model_config_default(name, &cfg, &err), &err);
    cfg.stem = PP_STEM_CIFAR;
    cfg.num_classes = 10;
    cfg.image_h = cfg.image_w = strcmp(name, "resnet50") == 0 ? 8 : 16;
    cfg.nhwc = nhwc;
    return cfg;
}

/* ResNet-18 and ResNet-50 cut into stages at several places; every unit of
 * each model is in one of the stages. */
static void test_resnet_orders(void)
{
    static const struct {
        const char *model;
        const char *cuts[4]; /* first unit of each stage after the first */
        bool nhwc;
    } models[] = {
        {"resnet18", {"relu", "layer2.0", "layer4.1", NULL}, false},
        {"resnet18", {"layer1.1", "layer3.1", NULL}, true},
        {"resnet50", {"maxpool", "layer2.1", "layer4.0", "avgpool"}, false},
        {"resnet50", {"layer3.0", NULL}, true},
    };
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        pp_model_config cfg = resnet_cfg(models[mi].model, models[mi].nhwc);
        pp_catalogue cat;
        pp_error err;
        CHECK_OK(pp_catalogue_build(&cfg, &cat, &err), &err);
        int first = 0;
        for (int s = 0; s <= 4; s++) {
            const char *cut = s < 4 ? models[mi].cuts[s] : NULL;
            const int last = cut ? pp_catalogue_find(&cat, cut) - 1 : cat.n - 1;
            char what[96];
            snprintf(what, sizeof what, "%s%s [%s .. %s]", models[mi].model,
                     models[mi].nhwc ? " NHWC" : "", cat.units[first].name, cat.units[last].name);
            stage_case c = {what, cfg, first, last};
            check_orders(&c, orders3, (int)(sizeof orders3 / sizeof orders3[0]), 3);
            if (!cut) break;
            first = last + 1;
        }
        pp_catalogue_free(&cat);
    }
}

/* A small GPT-2: 2 blocks of 2 heads of 4, a vocabulary of TEST_VOCAB, 9
 * positions, samples of 7; dropout 0.2 with dropout. */
static pp_model_config gpt2_drop_cfg(bool bias, bool tied, bool dropout)
{
    pp_model_config cfg;
    pp_error err;
    CHECK_OK(pp_model_config_default("gpt2", &cfg, &err), &err);
    cfg.gpt2 = (pp_gpt2_config){.n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = TEST_VOCAB,
                                .block_size = 9, .seq_len = 7, .bias = bias,
                                .tie_embeddings = tied, .dropout = dropout ? 0.2 : 0.0};
    cfg.num_classes = TEST_VOCAB;
    return cfg;
}

static pp_model_config gpt2_cfg(bool bias, bool tied)
{
    return gpt2_drop_cfg(bias, tied, false);
}

/* GPT-2 whole and cut at each boundary kind (after the embeddings, between
 * blocks, before the final layer norm and before the head), with and
 * without biases, tied and untied, with dropout (masks drawn again by the
 * recomputed forwards, the split backward's I masking what W reads): every
 * order of orders3. */
static void test_gpt2_orders(void)
{
    static const struct {
        bool bias, tied, dropout;
        int first, last; /* units: wte 0, wpe 1, h.0 2, h.1 3, ln_f 4, lm_head 5 */
    } cases[] = {
        {true, true, false, 0, 5},   {true, true, false, 0, 1},  {true, true, false, 2, 2},
        {true, true, false, 3, 5},   {false, true, false, 0, 3}, {false, false, false, 4, 5},
        {true, false, false, 5, 5},  {true, true, true, 0, 5},   {true, true, true, 1, 1},
        {false, true, true, 2, 3},
    };
    static const char *const names[] = {"wte", "wpe", "h.0", "h.1", "ln_f", "lm_head"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char what[96];
        snprintf(what, sizeof what, "gpt2%s%s%s [%s .. %s]", cases[i].bias ? "" : " no bias",
                 cases[i].tied ? "" : " untied", cases[i].dropout ? " dropout" : "",
                 names[cases[i].first], names[cases[i].last]);
        stage_case c = {what, gpt2_drop_cfg(cases[i].bias, cases[i].tied, cases[i].dropout),
                        cases[i].first, cases[i].last};
        check_orders(&c, orders3, (int)(sizeof orders3 / sizeof orders3[0]), 3);
    }
}

/* A sequential model of the unit kinds ResNets lack (a convolution with its
 * bias, sigmoid, window average pool, flatten, a batch norm over features, a
 * global average pool) and those they have, as one stage and as two; four
 * micro-batches, orders of all four. */
static void test_sequential_orders(void)
{
    static const char *const orders4[] = {
        "Z F0 F1 F2 F3 B0 B1 B2 B3",
        "Z F0 F1 F2 F3 B3 B2 B1 B0",
        "Z F0 F1 F2 F3 I0 W0 I1 W1 I2 W2 I3 W3",
        "Z F0 F1 F2 F3 I3 I2 I1 I0 W0 W1 W2 W3",
        "Z F0 I0 F1 I1 F2 W1 I2 F3 I3 W3 W0 W2",
        "Z F0 F1 F2 F3 I2 B3 I0 W2 B1 W0",
        "Z R0 R1 F2 R3 I3 B2 I1 W3 I0 W1 W0",
    };
    pp_model_config cfg;
    pp_error err;
    CHECK_OK(pp_model_config_default("sequential", &cfg, &err), &err);
    cfg.in_channels = 3;
    cfg.image_h = cfg.image_w = 12;
    const pp_seq_layer layers[] = {
        {"c1", PP_SEQ_CONV, 6, 3, 1, 1, true},  {"b1", PP_SEQ_BATCHNORM, 0, 0, 0, 0, false},
        {"r1", PP_SEQ_RELU, 0, 0, 0, 0, false}, {"p1", PP_SEQ_MAXPOOL, 0, 2, 2, 0, false},
        {"c2", PP_SEQ_CONV, 8, 3, 1, 1, false}, {"s2", PP_SEQ_SIGMOID, 0, 0, 0, 0, false},
        {"a2", PP_SEQ_AVGPOOL, 0, 3, 2, 1, false}, {"f", PP_SEQ_FLATTEN, 0, 0, 0, 0, false},
        {"l3", PP_SEQ_LINEAR, 12, 0, 0, 0, true}, {"b3", PP_SEQ_BATCHNORM, 0, 0, 0, 0, false},
        {"r3", PP_SEQ_RELU, 0, 0, 0, 0, false}, {"l4", PP_SEQ_LINEAR, 5, 0, 0, 0, true},
    };
    cfg.n_layers = (int)(sizeof layers / sizeof layers[0]);
    memcpy(cfg.layers, layers, sizeof layers);
    cfg.num_classes = 5;
    const int n = cfg.n_layers;
    const struct {
        int first, last;
    } ranges[] = {{0, n - 1}, {0, 4}, {5, n - 1}};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "sequential [%s .. %s]", layers[ranges[i].first].name,
                 layers[ranges[i].last].name);
        stage_case c = {what, cfg, ranges[i].first, ranges[i].last};
        check_orders(&c, orders4, (int)(sizeof orders4 / sizeof orders4[0]), 4);
    }
    /* a global average pool before the classifier */
    const pp_seq_layer gap[] = {
        {"c1", PP_SEQ_CONV, 4, 3, 2, 1, false}, {"b1", PP_SEQ_BATCHNORM, 0, 0, 0, 0, false},
        {"r1", PP_SEQ_RELU, 0, 0, 0, 0, false}, {"g", PP_SEQ_GLOBAL_AVGPOOL, 0, 0, 0, 0, false},
        {"l", PP_SEQ_LINEAR, 3, 0, 0, 0, true},
    };
    cfg.n_layers = 5;
    memcpy(cfg.layers, gap, sizeof gap);
    cfg.num_classes = 3;
    stage_case c = {"sequential, global average pool", cfg, 0, 4};
    check_orders(&c, orders4, (int)(sizeof orders4 / sizeof orders4[0]), 4);
}

/* Two steps on one stage: pp_stage_zero_grads begins the second (in reverse
 * order, so parts wait); or the caller zeroes the gradients itself at
 * micro-batch 0's backward (as a pipeline may), which begins the step too. */
static void test_steps(void)
{
    stage_case c = {"resnet18 [layer1.0 .. layer2.1]", resnet_cfg("resnet18", false), 4, 7};
    step_result ref = {0};
    if (!run_step(&c, 3, "Z F0 F1 F2 B0 B1 B2", &ref)) return;
    for (int way = 0; way < 2; way++) {
        pp_stage *st = stage_make(&c);
        if (!st) break;
        step_io io;
        io_make(st, 3, &io);
        /* a first step, then the running statistics put back as they were */
        run_actions(st, &io, "Z F0 F1 F2 I2 B1 I0 W0 W2", false);
        stage_reset(st);
        pp_error err;
        if (way == 0) {
            run_actions(st, &io, "Z F0 F1 F2 B2 B1 B0", false);
        } else {
            run_actions(st, &io, "F0 F1 F2 B2 B1", false);
            for (int i = 0; i < pp_stage_param_count(st); i++)
                CHECK_OK(pp_zero(&ex, pp_stage_param(st, i)->grad, &err), &err);
            run_actions(st, &io, "B0", false);
        }
        CHECK(pp_stage_grads_waiting(st) == 0);
        step_result r = {0};
        collect(st, &io, &r);
        char buf[96];
        const char *diff = result_diff(&ref, &r, buf, sizeof buf);
        CHECK_MSG(!diff, "second step (%s): %s", way ? "caller zeroes" : "zero_grads", diff);
        result_free(&r);
        io_free(&io);
        pp_stage_free(st);
    }
    result_free(&ref);
}

static pp_model_config gpt2_cfg(bool bias, bool tied);

/* ---- memory ----------------------------------------------------------------- */

/* What the stage holds through a step is what the catalogue says: after
 * forwards (kept whole or recomputed), after input parts, while weight
 * gradients wait for their turn (a copy of the parameter gradients each),
 * and nothing at the end. */
static void test_memory(void)
{
    const struct {
        const char *model;
        const char *from, *to;
        bool nhwc;
    } cases[] = {
        {"resnet18", "layer1.0", "layer2.1", false},
        {"resnet50", "conv1", "layer1.1", false},
        {"resnet50", "layer3.5", "fc", true},
        {"resnet18", "maxpool", "layer1.0", true},
        {"gpt2", "wte", "lm_head", false},
        {"gpt2", "h.1", "ln_f", false},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        pp_model_config cfg = strcmp(cases[ci].model, "gpt2") == 0
                                  ? gpt2_cfg(true, true)
                                  : resnet_cfg(cases[ci].model, cases[ci].nhwc);
        pp_catalogue cat;
        pp_error err;
        CHECK_OK(pp_catalogue_build(&cfg, &cat, &err), &err);
        const int first = pp_catalogue_find(&cat, cases[ci].from);
        const int last = pp_catalogue_find(&cat, cases[ci].to);
        stage_case c = {cases[ci].model, cfg, first, last};
        pp_stage *st = stage_make(&c);
        if (!st) continue;
        step_io io;
        io_make(st, 3, &io);
        const bool dx_null = first == 0;
        CHECK_OK(pp_stage_zero_grads(st, &ex, &err), &err);
        const int64_t base = used();
        int64_t want = 0;
        const char *step = "";
#define EXPECT(what)                                                                           \
    CHECK_MSG(used() - base == want, "%s [%s .. %s], after %s: holds %lld bytes, want %lld",     \
              cases[ci].model, cases[ci].from, cases[ci].to, what, (long long)(used() - base), \
              (long long)want)
        for (int k = 0; k < 3; k++) {
            char a[8];
            snprintf(a, sizeof a, "%c%d", k == 1 ? 'R' : 'F', k);
            run_actions(st, &io, a, dx_null);
            want += k == 1 ? pp_catalogue_input_bytes(&cat, first, sizes[k])
                           : pp_catalogue_kept_bytes(&cat, first, last, sizes[k]);
            EXPECT(a);
        }
        CHECK(pp_stage_in_flight(st) == 3);
        /* the input parts: what W needs stays (the recomputed one from its
         * forward again) */
        const int order[3] = {2, 1, 0};
        for (int i = 0; i < 3; i++) {
            const int k = order[i];
            char a[8];
            snprintf(a, sizeof a, "I%d", k);
            run_actions(st, &io, a, dx_null);
            want += pp_catalogue_iw_bytes(&cat, first, last, sizes[k]) -
                    (k == 1 ? pp_catalogue_input_bytes(&cat, first, sizes[k])
                            : pp_catalogue_kept_bytes(&cat, first, last, sizes[k]));
            EXPECT(a);
        }
        CHECK(pp_stage_in_flight(st) == 3);
        /* W out of order: each keeps a copy of the parameter gradients */
        const int64_t grads = 4 * pp_stage_num_params(st);
        run_actions(st, &io, "W2", dx_null);
        want += grads - pp_catalogue_iw_bytes(&cat, first, last, sizes[2]);
        EXPECT("W2");
        CHECK(pp_stage_grads_waiting(st) == (grads ? 1 : 0));
        run_actions(st, &io, "W1", dx_null);
        want += grads - pp_catalogue_iw_bytes(&cat, first, last, sizes[1]);
        EXPECT("W1");
        run_actions(st, &io, "W0", dx_null);
        want = 0;
        EXPECT("W0");
        CHECK(pp_stage_grads_waiting(st) == 0 && pp_stage_in_flight(st) == 0);
        (void)step;
#undef EXPECT
        /* a step left half done: zero_grads drops the waiting gradients, release
         * what is in flight */
        run_actions(st, &io, "F0 R1 I1 W1 I0", dx_null);
        CHECK(pp_stage_in_flight(st) == 1 && pp_stage_grads_waiting(st) == (grads ? 1 : 0));
        CHECK_OK(pp_stage_zero_grads(st, &ex, &err), &err);
        pp_stage_release(st, 0);
        CHECK(used() == base && pp_stage_in_flight(st) == 0 && pp_stage_grads_waiting(st) == 0);
        io_free(&io);
        pp_stage_free(st);
        pp_catalogue_free(&cat);
    }
}

/* ---- misuse ------------------------------------------------------------------ */

static void test_misuse(void)
{
    stage_case c = {"resnet18", resnet_cfg("resnet18", false), 4, 5};
    pp_stage *st = stage_make(&c);
    if (!st) return;
    step_io io;
    io_make(st, 2, &io);
    pp_error err;
    const int64_t base = used();
    /* W without I, I without F */
    CHECK(pp_stage_backward_weight(st, &ex, 0, &err) == PP_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "micro-batch 0") != NULL, "%s", err.msg);
    CHECK(pp_stage_backward_input(st, &ex, 0, &io.dy[0], &io.dx[0], &err) == PP_ERR_INVALID);
    /* a forward of a micro-batch waiting for its W, B or I after I: refused */
    run_actions(st, &io, "F0 I0", false);
    CHECK(pp_stage_forward(st, &ex, 0, &io.x[0], &io.y[0], true, &err) == PP_ERR_INVALID);
    CHECK(pp_stage_forward_keep(st, &ex, 0, &io.x[0], &io.y[0], PP_STAGE_KEEP_INPUT, &err) ==
          PP_ERR_INVALID);
    CHECK(pp_stage_in_flight(st) == 1);
    /* (a failed B or I drops the micro-batch's state) */
    CHECK(pp_stage_backward(st, &ex, 0, &io.dy[0], &io.dx[0], &err) == PP_ERR_INVALID);
    CHECK(pp_stage_in_flight(st) == 0 && used() == base);
    /* a recomputed forward of a micro-batch in flight is refused; an unknown keep */
    run_actions(st, &io, "R1", false);
    CHECK(pp_stage_forward(st, &ex, 1, &io.x[1], &io.y[1], true, &err) == PP_ERR_INVALID);
    CHECK(pp_stage_forward_keep(st, &ex, 0, &io.x[0], &io.y[0], (pp_stage_keep)7, &err) ==
          PP_ERR_INVALID);
    CHECK(pp_stage_in_flight(st) == 1);
    pp_stage_release(st, 1);
    CHECK(pp_stage_in_flight(st) == 0 && used() == base);
    /* W twice */
    run_actions(st, &io, "Z F0 I0 W0", false);
    CHECK(pp_stage_backward_weight(st, &ex, 0, &err) == PP_ERR_INVALID);
    /* the unit says which part failed */
    pp_unit *u = pp_stage_unit(st, 0);
    CHECK(pp_unit_backward_weight(u, &ex, 1, &err) == PP_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "weight part") != NULL, "%s", err.msg);
    CHECK(used() == base);
    io_free(&io);
    pp_stage_free(st);
}

/* ---- the delay unit ----------------------------------------------------------- */

/* I sleeps backward_input_ms and W backward_weight_ms (half of backward_ms
 * each when not given), B backward_ms; I's dx is B's. */
static void test_delay_parts(void)
{
    pp_model_config cfg;
    pp_error err;
    CHECK_OK(pp_model_config_default("delay", &cfg, &err), &err);
    cfg.num_classes = 3;
    cfg.image_h = cfg.image_w = 4;
    cfg.in_channels = 2;
    cfg.n_forward_ms = cfg.n_backward_ms = 1;
    cfg.forward_ms[0] = 1;
    cfg.backward_ms[0] = 40;
    const struct {
        int n_in, n_w;
        double in, w; /* given times */
        double want_in, want_w;
    } cases[] = {
        {0, 0, 0, 0, 20, 20},  /* not given: halves */
        {1, 1, 30, 6, 30, 6},  /* both given */
        {0, 1, 0, 35, 20, 35}, /* one given: the other half of backward_ms */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        cfg.n_backward_input_ms = cases[ci].n_in;
        cfg.n_backward_weight_ms = cases[ci].n_w;
        cfg.backward_input_ms[0] = cases[ci].in;
        cfg.backward_weight_ms[0] = cases[ci].w;
        pp_stage *st = NULL;
        CHECK_OK(pp_delay_stage_new(&cfg, 1, dev, &st, &err), &err);
        if (!st) continue;
        pp_tensor x, y, dy, dx1, dx2;
        const int64_t s23[2] = {2, 3};
        CHECK_OK(pp_tensor_alloc(&x, dev, PP_F32, 2, s23, &err), &err);
        CHECK_OK(pp_tensor_alloc(&y, dev, PP_F32, 2, s23, &err), &err);
        CHECK_OK(pp_tensor_alloc(&dy, dev, PP_F32, 2, s23, &err), &err);
        CHECK_OK(pp_tensor_alloc(&dx1, dev, PP_F32, 2, s23, &err), &err);
        CHECK_OK(pp_tensor_alloc(&dx2, dev, PP_F32, 2, s23, &err), &err);
        fill_normal(&x, 1, 1.0);
        fill_normal(&dy, 2, 1.0);
        CHECK_OK(pp_stage_forward(st, &ex, 0, &x, &y, true, &err), &err);
        double t0 = now_ms();
        CHECK_OK(pp_stage_backward(st, &ex, 0, &dy, &dx1, &err), &err);
        double t1 = now_ms();
        CHECK_OK(pp_stage_forward(st, &ex, 0, &x, &y, true, &err), &err);
        double t2 = now_ms();
        CHECK_OK(pp_stage_backward_input(st, &ex, 0, &dy, &dx2, &err), &err);
        double t3 = now_ms();
        CHECK_OK(pp_stage_backward_weight(st, &ex, 0, &err), &err);
        double t4 = now_ms();
        const double got[3] = {t1 - t0, t3 - t2, t4 - t3};
        const double want[3] = {40, cases[ci].want_in, cases[ci].want_w};
        /* at least the delay; the upper bound only catches a wrong part (a
         * loaded machine can hold a thread back by far more) */
        for (int i = 0; i < 3; i++)
            CHECK_MSG(got[i] >= want[i] - 0.5 && got[i] < 10 * want[i] + 250,
                      "delay case %zu, %s: %.1f ms, want %.0f", ci, i == 0 ? "B" : i == 1 ? "I" : "W",
                      got[i], want[i]);
        float *h1 = host_copy(&dx1), *h2 = host_copy(&dx2);
        CHECK(memcmp(h1, h2, 24) == 0 && h1[0] != 0.0f);
        free(h1);
        free(h2);
        fprintf(stderr, "  delay parts: B %.1f ms, I %.1f ms, W %.1f ms (want %.0f, %.0f, %.0f)\n",
                got[0], got[1], got[2], want[0], want[1], want[2]);
        pp_tensor *ts[] = {&x, &y, &dy, &dx1, &dx2};
        for (int i = 0; i < 5; i++) pp_tensor_free(ts[i]);
        pp_stage_free(st);
    }
    /* a bad part time is refused */
    cfg.n_backward_input_ms = 1;
    cfg.backward_input_ms[0] = -3;
    pp_stage *st = NULL;
    CHECK(pp_delay_stage_new(&cfg, 0, dev, &st, &err) == PP_ERR_INPUT && !st);
    CHECK_MSG(strstr(err.msg, "backward input") != NULL, "%s", err.msg);
}

int main(void)
{
    pp_registry *reg;
    pp_error err;
    if (pp_registry_new(&reg, &err) != PP_OK ||
        pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &dev, &err) != PP_OK ||
        pp_exec_init(&ex, dev, NULL, &err) != PP_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    test_misuse();
    test_delay_parts();
    test_memory();
    test_sequential_orders();
    test_steps();
    test_resnet_orders();
    test_gpt2_orders();
    pp_exec_destroy(&ex);
    pp_registry_free(reg);
    return check_summary("backward");
}
