/*
 * split_compare.c - the same custom model trained with several split sizes
 * (and both schedules) from the same initial weights: what the split size
 * changes (step time, number of micro-batches) and what it must not change
 * (the result).
 *
 * The model is an MLP without any batch-dependent layer, one Linear per stage
 * on four devices (cpu:0..cpu:3 unless given on the command line):
 *   Linear(32, 64)+ReLU | Linear(64, 64)+ReLU | Linear(64, 64)+ReLU |
 *   Linear(64, 10)+softmax cross-entropy
 * trained on a fixed batch of 8 samples with SGD (lr 0.1, momentum 0.9) for
 * 20 steps, with split sizes 1, 2, 4 and 8 under 1F1B and GPipe. Everything is
 * computed with the op API on each stage's pp_exec, so the program runs on
 * any devices ("cuda:0 cuda:0 cuda:1 cuda:1" on a GPU machine).
 *
 * Checks (exit 1 when one fails, 2 on a library error):
 *   - for each split size, GPipe and 1F1B give bitwise equal weights: both
 *     accumulate the gradients in micro-batch order 0..m-1;
 *   - across split sizes the final weights agree with those of split size 8
 *     (one micro-batch: plain mini-batch training) within 1e-5 of the
 *     largest weight magnitude. Rationale: the split size only changes how
 *     each gradient sum over the 8 samples is grouped (per-micro-batch BLAS
 *     sums, then += across micro-batches), so in float32 a gradient differs
 *     by a few units of 2^-24 relative to its terms; 20 SGD steps at lr 0.1
 *     with momentum 0.9 carry that into the weights as differences of about
 *     1e-7 of their size (measured: at most 1.2e-7), two orders below the
 *     tolerance. A real fault (a micro-batch dropped or counted twice, a
 *     gradient overwritten instead of accumulated) moves the weights by
 *     0.1 to 1 of their size: dropping one micro-batch's gradient gives
 *     0.55 to 1.0 here;
 *   - the loss decreases in every run.
 *
 * Usage: split_compare [DEV0 DEV1 DEV2 DEV3]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_run.h"

enum { S = 4, BATCH = 8, IN = 32, HIDDEN = 64, CLASSES = 10, STEPS = 20 };
static const int widths[S + 1] = {IN, HIDDEN, HIDDEN, HIDDEN, CLASSES};
static const int splits[] = {1, 2, 4, 8};
#define N_SPLITS ((int)(sizeof splits / sizeof splits[0]))
#define TOLERANCE 1e-5

/* One stage: Linear(widths[i], widths[i+1]) followed by ReLU, or by the loss
 * on the last stage. Its state is touched by its own callbacks during a step
 * and by the host between steps. */
typedef struct mlp_stage {
    int index;
    pp_device_ctx *dev;
    pp_tensor w, b, dw, db;   /* w (out, in), b (out) and gradients */
    pp_tensor x;              /* (BATCH, in) inputs kept for backward; stage 0: the data */
    pp_tensor act;            /* (BATCH, out) ReLU outputs (not on the last stage) */
    pp_tensor g;              /* (BATCH, out) gradient before ReLU; last stage: d loss / d logits */
    pp_tensor labels;         /* last stage: (BATCH) I32 */
    pp_tensor loss, correct;  /* last stage: (BATCH) one slot per micro-batch */
    int start[BATCH];         /* first sample of each micro-batch */
} mlp_stage;

/* The scalar element i of a 1-D tensor, as a 0-D view (what the loss op writes). */
static pp_status scalar_at(const pp_tensor *t, int i, pp_tensor *out, pp_error *err)
{
    pp_tensor one = pp_tensor_view0(t, i, 1);
    return pp_tensor_reshape(&one, 0, NULL, out, err);
}

static pp_status mlp_out_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    (void)err; /* cannot fail */
    const mlp_stage *st = user;
    t->dtype = PP_F32;
    t->ndim = 2;
    t->shape[0] = mb_size;
    t->shape[1] = widths[st->index + 1];
    return PP_OK;
}

static pp_status mlp_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                             pp_tensor *out, pp_error *err)
{
    mlp_stage *st = user;
    pp_tensor x = pp_tensor_view0(&st->x, st->start[mb], mb_size);
    if (in) PP_TRY(pp_copy(ex, in, &x, err)); /* stage 0 reads its own data rows */
    PP_TRY(pp_linear_forward(ex, &x, &st->w, &st->b, out, err));
    if (st->index < S - 1) {
        pp_tensor act = pp_tensor_view0(&st->act, st->start[mb], mb_size);
        PP_TRY(pp_relu_forward(ex, out, out, err));
        return pp_copy(ex, out, &act, err);
    }
    pp_tensor labels = pp_tensor_view0(&st->labels, st->start[mb], mb_size);
    pp_tensor dlogits = pp_tensor_view0(&st->g, st->start[mb], mb_size);
    pp_tensor loss, correct;
    PP_TRY(scalar_at(&st->loss, mb, &loss, err));
    PP_TRY(scalar_at(&st->correct, mb, &correct, err));
    /* Divided by the whole batch: summed over micro-batches, the gradient is
     * that of the mean loss over the batch, whatever the split. */
    return pp_softmax_xent(ex, out, &labels, (float)BATCH, &loss, &correct, &dlogits, err);
}

static pp_status mlp_backward(void *user, pp_exec *ex, int mb, int mb_size,
                              const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    mlp_stage *st = user;
    pp_tensor x = pp_tensor_view0(&st->x, st->start[mb], mb_size);
    pp_tensor g = pp_tensor_view0(&st->g, st->start[mb], mb_size);
    if (grad_out) {
        pp_tensor act = pp_tensor_view0(&st->act, st->start[mb], mb_size);
        PP_TRY(pp_relu_backward(ex, &act, grad_out, &g, err));
    }
    return pp_linear_backward(ex, &x, &st->w, &g, grad_in, &st->dw, &st->db, err);
}

static const pp_stage_ops mlp_ops = {mlp_out_shape, mlp_forward, mlp_backward, NULL, NULL};

/* ---- host side ------------------------------------------------------------------ */

static double uniform(uint64_t *state) /* splitmix64 in [0, 1) */
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/* Number of weights over all stages (the host layout below). */
static int n_params(void)
{
    int n = 0;
    for (int i = 0; i < S; i++) n += widths[i + 1] * widths[i] + widths[i + 1];
    return n;
}

static pp_status stage_alloc(mlp_stage *st, int index, pp_device_ctx *dev, pp_error *err)
{
    int in = widths[index], out = widths[index + 1];
    int64_t w[2] = {out, in}, b[1] = {out}, x[2] = {BATCH, in}, y[2] = {BATCH, out}, n[1] = {BATCH};
    st->index = index;
    st->dev = dev;
    PP_TRY(pp_tensor_alloc(&st->w, dev, PP_F32, 2, w, err));
    PP_TRY(pp_tensor_alloc(&st->b, dev, PP_F32, 1, b, err));
    PP_TRY(pp_tensor_zeros(&st->dw, dev, PP_F32, 2, w, err));
    PP_TRY(pp_tensor_zeros(&st->db, dev, PP_F32, 1, b, err));
    PP_TRY(pp_tensor_zeros(&st->x, dev, PP_F32, 2, x, err));
    PP_TRY(pp_tensor_zeros(&st->g, dev, PP_F32, 2, y, err));
    if (index < S - 1) return pp_tensor_zeros(&st->act, dev, PP_F32, 2, y, err);
    PP_TRY(pp_tensor_zeros(&st->labels, dev, PP_I32, 1, n, err));
    PP_TRY(pp_tensor_zeros(&st->loss, dev, PP_F32, 1, n, err));
    return pp_tensor_zeros(&st->correct, dev, PP_I32, 1, n, err);
}

static void stage_free(mlp_stage *st)
{
    pp_tensor *all[] = {&st->w,   &st->b, &st->dw,     &st->db,   &st->x,
                        &st->act, &st->g, &st->labels, &st->loss, &st->correct};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pp_tensor_free(all[i]);
}

/* Copies host weights (stage after stage: w, then b) into the stages. */
static pp_status weights_put(mlp_stage *st, const float *host, pp_error *err)
{
    for (int i = 0; i < S; i++) {
        PP_TRY(pp_tensor_from_host(&st[i].w, host, pp_tensor_bytes(&st[i].w), err));
        host += pp_tensor_numel(&st[i].w);
        PP_TRY(pp_tensor_from_host(&st[i].b, host, pp_tensor_bytes(&st[i].b), err));
        host += pp_tensor_numel(&st[i].b);
    }
    return PP_OK;
}

/* The reverse: the stages' weights into host memory, same layout. */
static pp_status weights_get(mlp_stage *st, float *host, pp_error *err)
{
    for (int i = 0; i < S; i++) {
        PP_TRY(pp_tensor_to_host(&st[i].w, host, pp_tensor_bytes(&st[i].w), err));
        host += pp_tensor_numel(&st[i].w);
        PP_TRY(pp_tensor_to_host(&st[i].b, host, pp_tensor_bytes(&st[i].b), err));
        host += pp_tensor_numel(&st[i].b);
    }
    return PP_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One training run from the initial weights: STEPS steps of the schedule
 * (kind, split); the final weights go to weights_out. */
typedef struct run_result {
    int micro_batches;
    double step_ms;                 /* median wall time of a step, the first excluded */
    double first_loss, final_loss;  /* mean loss over the batch at the first and last step */
} run_result;

static pp_status train(mlp_stage *st, pp_executor *exec, pp_optimizer *opt, const float *init,
                       pp_schedule_kind kind, int split, float *weights_out, run_result *res,
                       pp_error *err)
{
    int sizes[BATCH], m;
    PP_TRY(pp_microbatch_sizes(BATCH, split, sizes, BATCH, &m, err));
    for (int i = 0, at = 0; i < m; at += sizes[i++])
        for (int k = 0; k < S; k++) st[k].start[i] = at;
    PP_TRY(weights_put(st, init, err));
    pp_optimizer_reset_state(opt); /* fresh momentum: the next step is a first step */

    pp_schedule sched;
    PP_TRY(pp_schedule_build(&sched, kind, S, m, sizes, err));
    double ms[STEPS];
    pp_status s = PP_OK;
    res->micro_batches = m;
    for (int step = 0; s == PP_OK && step < STEPS; step++) {
        int64_t t0 = pp_stream_clock_ns();
        s = pp_optimizer_zero_grad(opt, NULL, NULL, err);
        if (s == PP_OK) s = pp_executor_run(exec, &sched, NULL, err);
        if (s == PP_OK) s = pp_optimizer_step(opt, NULL, NULL, err);
        ms[step] = (double)(pp_stream_clock_ns() - t0) / 1e6;
        float loss[BATCH];
        if (s == PP_OK) s = pp_tensor_to_host(&st[S - 1].loss, loss, sizeof loss, err);
        double sum = 0;
        for (int i = 0; i < m; i++) sum += loss[i];
        if (step == 0) res->first_loss = sum;
        res->final_loss = sum;
    }
    pp_schedule_free(&sched);
    PP_TRY(s);
    qsort(ms + 1, STEPS - 1, sizeof ms[0], cmp_double);
    res->step_ms = ms[1 + (STEPS - 1) / 2];
    return weights_get(st, weights_out, err);
}

int main(int argc, char **argv)
{
    const char *names[S] = {"cpu:0", "cpu:1", "cpu:2", "cpu:3"};
    if (argc != 1 && argc != S + 1) {
        fprintf(stderr, "usage: %s [DEV0 DEV1 DEV2 DEV3]\n", argv[0]);
        return 2;
    }
    for (int i = 0; argc > 1 && i < S; i++) names[i] = argv[i + 1];

    int np = n_params();
    float *init = malloc((size_t)np * sizeof(float));
    float *weights = malloc((size_t)2 * N_SPLITS * np * sizeof(float)); /* [split][schedule] */
    pp_error err;
    pp_error_clear(&err);
    pp_registry *reg = NULL;
    pp_executor *exec = NULL;
    pp_optimizer *opt = NULL;
    mlp_stage st[S];
    memset(st, 0, sizeof st);
    pp_status s = init && weights ? PP_OK : pp_error_set(&err, PP_ERR_OOM, "out of host memory");
    int failures = 0;

    /* Devices and stages. */
    if (s == PP_OK) s = pp_registry_new(&reg, &err);
    for (int i = 0; s == PP_OK && i < S; i++) {
        pp_device_id id;
        pp_device_ctx *dev = NULL;
        s = pp_device_id_parse(names[i], &id, &err);
        if (s == PP_OK) s = pp_registry_get(reg, id, &dev, &err);
        if (s == PP_OK) s = stage_alloc(&st[i], i, dev, &err);
    }

    /* Initial weights as torch.nn.Linear; a fixed batch: inputs on stage 0,
     * labels on the last stage. */
    uint64_t rng = 7;
    if (s == PP_OK) {
        float *p = init;
        for (int i = 0; i < S; i++) {
            float bound = 1.0f / sqrtf((float)widths[i]);
            int n = widths[i + 1] * widths[i] + widths[i + 1];
            for (int k = 0; k < n; k++) *p++ = bound * (float)(2 * uniform(&rng) - 1);
        }
        float x[BATCH * IN];
        int32_t labels[BATCH];
        for (int k = 0; k < BATCH * IN; k++) x[k] = (float)(2 * uniform(&rng) - 1);
        for (int k = 0; k < BATCH; k++) labels[k] = (int32_t)(uniform(&rng) * CLASSES);
        s = pp_tensor_from_host(&st[0].x, x, sizeof x, &err);
        if (s == PP_OK) s = pp_tensor_from_host(&st[S - 1].labels, labels, sizeof labels, &err);
    }

    /* One executor and one optimizer, reused by every run. */
    if (s == PP_OK) {
        pp_stage_desc desc[S];
        pp_param_ref params[2 * S];
        static const char *pnames[2 * S] = {"0.weight", "0.bias", "1.weight", "1.bias",
                                            "2.weight", "2.bias", "3.weight", "3.bias"};
        for (int i = 0; i < S; i++) {
            desc[i] = (pp_stage_desc){st[i].dev, &mlp_ops, &st[i]};
            params[2 * i] = (pp_param_ref){pnames[2 * i], &st[i].w, &st[i].dw};
            params[2 * i + 1] = (pp_param_ref){pnames[2 * i + 1], &st[i].b, &st[i].db};
        }
        pp_sgd_config sgd = {.lr = 0.1f, .momentum = 0.9f};
        s = pp_executor_new(desc, S, 0, &exec, &err);
        if (s == PP_OK) s = pp_optimizer_new(&opt, &sgd, params, 2 * S, &err);
    }

    /* The runs, then the table. */
    run_result res[N_SPLITS][2];
    const pp_schedule_kind kinds[2] = {PP_SCHEDULE_1F1B, PP_SCHEDULE_GPIPE};
    for (int i = 0; s == PP_OK && i < N_SPLITS; i++)
        for (int k = 0; s == PP_OK && k < 2; k++)
            s = train(st, exec, opt, init, kinds[k], splits[i],
                      weights + (size_t)(2 * i + k) * np, &res[i][k], &err);

    if (s == PP_OK) {
        const float *ref = weights + (size_t)(2 * (N_SPLITS - 1)) * np; /* split 8, 1F1B */
        double wmax = 0;
        for (int j = 0; j < np; j++) wmax = fmax(wmax, fabs(ref[j]));
        printf("MLP %d-%d-%d-%d-%d on %s %s %s %s, batch %d, %d steps, SGD lr 0.1 momentum 0.9\n",
               IN, HIDDEN, HIDDEN, HIDDEN, CLASSES, names[0], names[1], names[2], names[3], BATCH,
               STEPS);
        printf("split  micro-batches  1f1b step ms  gpipe step ms  final loss  max |dw| / max |w|\n");
        for (int i = 0; i < N_SPLITS; i++) {
            const float *w1 = weights + (size_t)(2 * i) * np, *wg = w1 + np;
            double diff = 0;
            for (int j = 0; j < np; j++) diff = fmax(diff, fabs((double)w1[j] - ref[j]));
            printf("%5d  %13d  %12.3f  %13.3f  %10.6f  %.2e\n", splits[i], res[i][0].micro_batches,
                   res[i][0].step_ms, res[i][1].step_ms, res[i][0].final_loss, diff / wmax);
            if (memcmp(w1, wg, (size_t)np * sizeof(float)) != 0) {
                fprintf(stderr, "split %d: GPipe and 1F1B weights differ\n", splits[i]);
                failures++;
            }
            if (!(diff <= TOLERANCE * wmax)) {
                fprintf(stderr, "split %d: weights differ from split %d by %.3g (tolerance %.3g)\n",
                        splits[i], BATCH, diff, TOLERANCE * wmax);
                failures++;
            }
            for (int k = 0; k < 2; k++)
                if (!(res[i][k].final_loss < res[i][k].first_loss)) {
                    fprintf(stderr, "split %d %s: the loss did not decrease (%.6f -> %.6f)\n",
                            splits[i], pp_schedule_kind_name(kinds[k]), res[i][k].first_loss,
                            res[i][k].final_loss);
                    failures++;
                }
        }
    }

    pp_optimizer_free(opt);
    pp_executor_free(exec);
    for (int i = 0; i < S; i++) stage_free(&st[i]);
    pp_registry_free(reg);
    free(init);
    free(weights);
    if (s != PP_OK) {
        fprintf(stderr, "split_compare: %s: %s\n", pp_status_name(s), err.msg);
        return 2;
    }
    if (failures) return 1;
    printf("all split sizes agree within %.0e; GPipe and 1F1B bitwise equal\n", TOLERANCE);
    return 0;
}
