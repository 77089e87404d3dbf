/*
 * toy_two_stage.c - the PyTorch model-parallel tutorial's toy model, trained
 * through the library as two custom stages on two devices.
 *
 *   stage 0 (cpu:0): net1 = Linear(10, 10), ReLU
 *   stage 1 (cpu:1): net2 = Linear(10, 5), MSE loss against fixed targets
 *
 * A batch of 20 random inputs is cut into micro-batches of 5 and run with the
 * 1F1B schedule; the executor copies activations and gradients between the
 * devices; one SGD optimizer (lr 0.05, momentum 0.9) updates the parameters
 * of both stages after every step. The program prints the loss of every
 * step and exits 1 if the loss did not decrease (0 on success, 2 on a
 * library error).
 *
 * The stage callbacks compute with the op API (runtime/core/ops.h) on the
 * pp_exec they are given; only the MSE loss is a plain loop, which reads the
 * output on the host and is therefore for CPU devices (on a GPU it would be
 * a kernel enqueued on ex).
 *
 * Usage: toy_two_stage [STEPS]   (default 40)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pipeline/pipeline_run.h"

enum { BATCH = 20, SPLIT = 5, IN = 10, HIDDEN = 10, OUT = 5 };

/* One stage: a Linear layer and what its callbacks keep between forward and
 * backward. Touched only by the stage's own callbacks during a step, and by
 * the host between steps. */
typedef struct toy_stage {
    int index;                 /* 0 or 1 */
    pp_device_ctx *dev;
    pp_tensor w, b, dw, db;    /* Linear: w (out, in), b (out) and their gradients */
    pp_tensor data;            /* stage 0: inputs (BATCH, IN); stage 1: targets (BATCH, OUT) */
    pp_tensor keep;            /* stage 0: ReLU outputs (BATCH, HIDDEN); stage 1: inputs */
    pp_tensor scratch;         /* stage 0: gradient before ReLU; stage 1: d loss / d out */
    int start[BATCH];          /* first sample of each micro-batch */
    double loss[BATCH];        /* stage 1: the loss of each micro-batch */
} toy_stage;

/* ---- stage callbacks (pp_stage_ops) ---------------------------------------- */

static pp_status toy_out_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    (void)err; /* cannot fail */
    toy_stage *st = user;
    t->dtype = PP_F32;
    t->ndim = 2;
    t->shape[0] = mb_size;
    t->shape[1] = st->index == 0 ? HIDDEN : OUT;
    return PP_OK;
}

/* Stage 0: out = relu(x w1^T + b1) on its own inputs. Stage 1: out = in w2^T
 * + b2, then the MSE loss of the micro-batch and its gradient, scaled by the
 * whole batch so that the gradients summed over micro-batches are those of
 * the mean loss. */
static pp_status toy_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                             pp_tensor *out, pp_error *err)
{
    toy_stage *st = user;
    pp_tensor keep = pp_tensor_view0(&st->keep, st->start[mb], mb_size);
    pp_tensor rows = pp_tensor_view0(&st->data, st->start[mb], mb_size);
    if (st->index == 0) {
        PP_TRY(pp_linear_forward(ex, &rows, &st->w, &st->b, out, err));
        PP_TRY(pp_relu_forward(ex, out, out, err));
        return pp_copy(ex, out, &keep, err);
    }
    PP_TRY(pp_copy(ex, in, &keep, err));
    PP_TRY(pp_linear_forward(ex, in, &st->w, &st->b, out, err));
    const float *y = out->data, *target = rows.data;
    float *dy = pp_tensor_view0(&st->scratch, st->start[mb], mb_size).data;
    double sum = 0;
    for (int k = 0; k < mb_size * OUT; k++) {
        float d = y[k] - target[k];
        sum += (double)d * d;
        dy[k] = 2.0f * d / (BATCH * OUT);
    }
    st->loss[mb] = sum / (BATCH * OUT);
    return PP_OK;
}

static pp_status toy_backward(void *user, pp_exec *ex, int mb, int mb_size,
                              const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    toy_stage *st = user;
    pp_tensor keep = pp_tensor_view0(&st->keep, st->start[mb], mb_size);
    pp_tensor g = pp_tensor_view0(&st->scratch, st->start[mb], mb_size);
    if (st->index == 0) {
        pp_tensor x = pp_tensor_view0(&st->data, st->start[mb], mb_size);
        PP_TRY(pp_relu_backward(ex, &keep, grad_out, &g, err));
        return pp_linear_backward(ex, &x, &st->w, &g, NULL, &st->dw, &st->db, err);
    }
    return pp_linear_backward(ex, &keep, &st->w, &g, grad_in, &st->dw, &st->db, err);
}

static const pp_stage_ops toy_ops = {
    .out_shape = toy_out_shape,
    .forward = toy_forward,
    .backward = toy_backward,
    .step = NULL, /* the one optimizer runs after the step, over both stages */
};

/* ---- setup ----------------------------------------------------------------------- */

/* A fixed pseudo-random sequence (splitmix64) so that every run is the same. */
static double uniform(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

static float normal(uint64_t *state)
{
    double u = uniform(state), v = uniform(state);
    return (float)(sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v));
}

/* Allocates t (rows x cols, or rows when cols is 0) on dev and fills it from host. */
static pp_status tensor_from(pp_tensor *t, pp_device_ctx *dev, int64_t rows, int64_t cols,
                             const float *host, pp_error *err)
{
    int64_t shape[2] = {rows, cols};
    PP_TRY(pp_tensor_alloc(t, dev, PP_F32, cols ? 2 : 1, shape, err));
    return pp_tensor_from_host(t, host, pp_tensor_bytes(t), err);
}

/* A stage's Linear(in, out), initialised as torch.nn.Linear does
 * (U(-1/sqrt(in), 1/sqrt(in))), its data (random normal inputs on stage 0,
 * targets on stage 1) and the buffers its callbacks keep. */
static pp_status stage_init(toy_stage *st, int index, pp_device_ctx *dev, int in, int out,
                            uint64_t *rng, pp_error *err)
{
    st->index = index;
    st->dev = dev;
    float w[HIDDEN * IN], b[HIDDEN], data[BATCH * IN];
    float bound = 1.0f / sqrtf((float)in);
    for (int k = 0; k < out * in; k++) w[k] = bound * (float)(2 * uniform(rng) - 1);
    for (int k = 0; k < out; k++) b[k] = bound * (float)(2 * uniform(rng) - 1);
    int width = index == 0 ? IN : OUT; /* inputs on stage 0, targets on stage 1 */
    for (int k = 0; k < BATCH * width; k++) data[k] = normal(rng);
    PP_TRY(tensor_from(&st->w, dev, out, in, w, err));
    PP_TRY(tensor_from(&st->b, dev, out, 0, b, err));
    PP_TRY(tensor_from(&st->data, dev, BATCH, width, data, err));
    int64_t wshape[2] = {out, in}, bshape[1] = {out};
    int64_t keep[2] = {BATCH, index == 0 ? out : in};
    int64_t scratch[2] = {BATCH, out};
    PP_TRY(pp_tensor_zeros(&st->dw, dev, PP_F32, 2, wshape, err));
    PP_TRY(pp_tensor_zeros(&st->db, dev, PP_F32, 1, bshape, err));
    PP_TRY(pp_tensor_alloc(&st->keep, dev, PP_F32, 2, keep, err));
    return pp_tensor_alloc(&st->scratch, dev, PP_F32, 2, scratch, err);
}

static void stage_free(toy_stage *st)
{
    pp_tensor *all[] = {&st->w, &st->b, &st->dw, &st->db, &st->data, &st->keep, &st->scratch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pp_tensor_free(all[i]);
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 40;
    if (steps < 2) {
        fprintf(stderr, "usage: %s [STEPS >= 2]\n", argv[0]);
        return 2;
    }
    pp_error err;
    pp_error_clear(&err);
    pp_registry *reg = NULL;
    pp_executor *exec = NULL;
    pp_optimizer *opt = NULL;
    pp_schedule sched = {0};
    toy_stage st[2] = {{0}};
    double first = 0, last = 0;
    pp_status s;

    /* Devices, then the stages on them: net1 on cpu:0, net2 on cpu:1. */
    pp_device_ctx *dev[2];
    const char *names[2] = {"cpu:0", "cpu:1"};
    uint64_t rng = 1;
    if ((s = pp_registry_new(&reg, &err)) != PP_OK) goto done;
    for (int i = 0; i < 2; i++) {
        pp_device_id id;
        if ((s = pp_device_id_parse(names[i], &id, &err)) != PP_OK) goto done;
        if ((s = pp_registry_get(reg, id, &dev[i], &err)) != PP_OK) goto done;
    }
    if ((s = stage_init(&st[0], 0, dev[0], IN, HIDDEN, &rng, &err)) != PP_OK) goto done;
    if ((s = stage_init(&st[1], 1, dev[1], HIDDEN, OUT, &rng, &err)) != PP_OK) goto done;

    /* The schedule: 1F1B over micro-batches of SPLIT samples. */
    int sizes[BATCH], m;
    if ((s = pp_microbatch_sizes(BATCH, SPLIT, sizes, BATCH, &m, &err)) != PP_OK) goto done;
    if ((s = pp_schedule_build(&sched, PP_SCHEDULE_1F1B, 2, m, sizes, &err)) != PP_OK) goto done;
    for (int i = 0, at = 0; i < m; at += sizes[i++]) st[0].start[i] = st[1].start[i] = at;

    /* The executor over the two stages, and one optimizer over all parameters. */
    pp_stage_desc desc[2] = {{dev[0], &toy_ops, &st[0]}, {dev[1], &toy_ops, &st[1]}};
    if ((s = pp_executor_new(desc, 2, 0, &exec, &err)) != PP_OK) goto done;
    pp_param_ref params[] = {
        {"net1.weight", &st[0].w, &st[0].dw}, {"net1.bias", &st[0].b, &st[0].db},
        {"net2.weight", &st[1].w, &st[1].dw}, {"net2.bias", &st[1].b, &st[1].db},
    };
    pp_sgd_config sgd = {.lr = 0.05f, .momentum = 0.9f};
    if ((s = pp_optimizer_new(&opt, &sgd, params, 4, &err)) != PP_OK) goto done;

    printf("toy model: Linear(10,10)+ReLU on %s | Linear(10,5)+MSE on %s, batch %d, "
           "%d micro-batches, %s\n", names[0], names[1], BATCH, m, sched.name);
    for (int step = 0; step < steps; step++) {
        pp_step_stats stats;
        if ((s = pp_optimizer_zero_grad(opt, NULL, NULL, &err)) != PP_OK) goto done;
        if ((s = pp_executor_run(exec, &sched, &stats, &err)) != PP_OK) goto done;
        if ((s = pp_optimizer_step(opt, NULL, NULL, &err)) != PP_OK) {
            pp_step_stats_free(&stats);
            goto done;
        }
        double loss = 0;
        for (int i = 0; i < m; i++) loss += st[1].loss[i];
        printf("step %3d  loss %.6f  (%.2f ms, bubble %.0f%%)\n", step, loss, stats.step_ms,
               100 * stats.bubble);
        pp_step_stats_free(&stats);
        if (step == 0) first = loss;
        last = loss;
    }

done:
    pp_optimizer_free(opt);
    pp_executor_free(exec);
    pp_schedule_free(&sched);
    stage_free(&st[0]);
    stage_free(&st[1]);
    pp_registry_free(reg);
    if (s != PP_OK) {
        fprintf(stderr, "toy_two_stage: %s: %s\n", pp_status_name(s), err.msg);
        return 2;
    }
    if (!(last < first)) {
        fprintf(stderr, "toy_two_stage: the loss did not decrease (%.6f -> %.6f)\n", first, last);
        return 1;
    }
    printf("loss %.6f -> %.6f\n", first, last);
    return 0;
}
