/*
 * test_units.c - layer units on the CPU backend, one at a time: their specs
 * (checked before any arithmetic), gradients against central finite
 * differences (a unit or a few chained as a stage), the cost model against
 * the device bytes a training forward keeps (owned and shared operands),
 * batch-norm running statistics, decoding with GPT-2's cache of keys and
 * values. (Whole models: test_models.c; stages
 * running: test_stages.c.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/resnet.h"
#include "models/rng.h"
#include "models/stage.h"
#include "models/unit.h"
#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/models/model_rig.h"

/* ---- spec builders --------------------------------------------------------- */

static pp_unit_spec spec_conv(const char *name, int in, int out, int k, int stride, int pad)
{
    pp_unit_spec s = {
        .kind = PP_UNIT_CONV, .in_c = in, .out_c = out, .kernel = k, .stride = stride, .pad = pad};
    snprintf(s.name, sizeof s.name, "%s", name);
    return s;
}

static pp_unit_spec spec_simple(pp_unit_kind kind, const char *name, int c)
{
    pp_unit_spec s = {.kind = kind, .in_c = c, .out_c = c};
    if (kind == PP_UNIT_MAXPOOL) {
        s.kernel = 3;
        s.stride = 2;
        s.pad = 1;
    }
    snprintf(s.name, sizeof s.name, "%s", name);
    return s;
}

static pp_unit_spec spec_block(pp_unit_kind kind, int in, int planes, int stride, bool ds)
{
    pp_unit_spec s = {.kind = kind,
                      .in_c = in,
                      .planes = planes,
                      .out_c = kind == PP_UNIT_BOTTLENECK ? 4 * planes : planes,
                      .stride = stride,
                      .downsample = ds};
    snprintf(s.name, sizeof s.name, "layer1.0");
    return s;
}

static pp_unit_spec spec_fc(int in, int out)
{
    pp_unit_spec s = {.kind = PP_UNIT_FC, .in_c = in, .out_c = out};
    snprintf(s.name, sizeof s.name, "fc");
    return s;
}

/* GPT-2's wpe and block h.0 (width c, positions 8), dropout p at their sites. */
static pp_unit_spec spec_gpt2(pp_unit_kind kind, int c, int heads, float p)
{
    pp_unit_spec s = {.kind = kind, .in_c = c, .out_c = c, .bias = true, .init = PP_INIT_NORMAL,
                      .init_std = 0.3, .heads = heads, .positions = 8, .depth = 1,
                      .dropout = p, .site = kind == PP_UNIT_GPT2_BLOCK ? 1 : 0};
    snprintf(s.name, sizeof s.name, kind == PP_UNIT_GPT2_BLOCK ? "h.0" : "wpe");
    return s;
}

/* A sequential model's layer units: a conv with bias (PyTorch's init), a
 * window average pool, a sigmoid, a flatten. */
static pp_unit_spec spec_conv_bias(const char *name, int in, int out, int k, int stride, int pad)
{
    pp_unit_spec s = spec_conv(name, in, out, k, stride, pad);
    s.bias = true;
    s.init = PP_INIT_TORCH;
    return s;
}

static pp_unit_spec spec_window(pp_unit_kind kind, const char *name, int c, int k, int stride,
                                int pad)
{
    pp_unit_spec s = {.kind = kind, .in_c = c, .out_c = c, .kernel = k, .stride = stride,
                      .pad = pad};
    snprintf(s.name, sizeof s.name, "%s", name);
    return s;
}

/* ---- finite differences ---------------------------------------------------- */

/* L = sum(r * stage(x)) in double, from a training forward (batch statistics)
 * whose saved state is dropped at once. */
static double stage_loss(pp_stage *st, const pp_tensor *x, pp_tensor *y, const float *r)
{
    pp_error err;
    CHECK_OK(pp_stage_forward(st, &ex, 99, x, y, true, &err), &err);
    pp_stage_release(st, 99);
    float *h = host_copy(y);
    double l = 0;
    for (int64_t i = 0; i < pp_tensor_numel(y); i++) l += (double)r[i] * h[i];
    free(h);
    return l;
}

typedef struct fd_stats {
    int checked, kinks, bad;
    double err2, ref2; /* sums of squares of (fd - analytic) and of analytic, smooth points */
} fd_stats;

/* Compares the analytic gradient an of tensor t with central differences at
 * up to 12 coordinates. A relu or max-pool kink inside [-eps, eps] makes the
 * two one-sided differences disagree; such coordinates are counted apart
 * (not a smooth point to compare at). l0 is the unperturbed loss. */
static void fd_tensor(pp_stage *st, pp_tensor *t, const float *an, const pp_tensor *x, pp_tensor *y,
                      const float *r, double l0, uint64_t seed, fd_stats *fs)
{
    const double eps = 1e-3;
    int64_t n = pp_tensor_numel(t);
    float *v = host_copy(t);
    pp_rng rng;
    pp_rng_init(&rng, seed, "coords");
    int k = n < 12 ? (int)n : 12;
    for (int c = 0; c < k; c++) {
        int64_t i = n <= 12 ? c : (int64_t)(pp_rng_uniform(&rng) * (double)n);
        float keep = v[i];
        v[i] = keep + (float)eps;
        host_store(t, v);
        double lp = stage_loss(st, x, y, r);
        v[i] = keep - (float)eps;
        host_store(t, v);
        double lm = stage_loss(st, x, y, r);
        v[i] = keep;
        host_store(t, v);
        double fd = (lp - lm) / (2 * eps);
        double right = (lp - l0) / eps, left = (l0 - lm) / eps;
        fs->checked++;
        if (fabs(right - left) > 2e-2 * (1 + fabs(fd))) {
            fs->kinks++;
            continue;
        }
        double d = fd - an[i];
        fs->err2 += d * d;
        fs->ref2 += (double)an[i] * an[i];
        if (fabs(d) > 1e-2 + 1e-2 * fabs(an[i])) {
            fs->bad++;
            if (getenv("FD_VERBOSE"))
                fprintf(stderr, "    %s[%lld]: fd %.5f analytic %.5f (left %.5f right %.5f)\n",
                        t == x ? "x" : "param", (long long)i, fd, an[i], left, right);
        }
    }
    free(v);
}

typedef struct fd_case {
    const char *what;
    int n;
    pp_unit_spec specs[4];
    int in_ndim;
    int64_t in[4]; /* batch included */
} fd_case;

static void fd_check(const fd_case *c)
{
    pp_error err;
    pp_stage *st = NULL;
    int64_t sample[4] = {1, c->in[1], c->in[2], c->in[3]};
    CHECK_OK(pp_stage_new_from_specs(c->specs, c->n, 7, c->in_ndim, sample, dev, &st, &err), &err);
    if (!st) return;
    pp_tensor x, y, dy, dx;
    int yndim;
    int64_t yshape[4];
    CHECK_OK(pp_stage_output_shape(st, (int)c->in[0], &yndim, yshape, &err), &err);
    CHECK_OK(alloc_shape(&x, c->in_ndim, c->in, &err), &err);
    CHECK_OK(alloc_shape(&dx, c->in_ndim, c->in, &err), &err);
    CHECK_OK(alloc_shape(&y, yndim, yshape, &err), &err);
    CHECK_OK(alloc_shape(&dy, yndim, yshape, &err), &err);
    float *hx = malloc(pp_tensor_bytes(&x)), *r = malloc(pp_tensor_bytes(&y));
    fill_normal(hx, pp_tensor_numel(&x), 11, 1.0);
    fill_normal(r, pp_tensor_numel(&y), 12, 1.0);
    host_store(&x, hx);
    host_store(&dy, r);

    /* analytic: one training forward and backward */
    CHECK_OK(pp_stage_zero_grads(st, &ex, &err), &err);
    CHECK_OK(pp_stage_forward(st, &ex, 0, &x, &y, true, &err), &err);
    CHECK(pp_stage_in_flight(st) == 1);
    CHECK_OK(pp_stage_backward(st, &ex, 0, &dy, &dx, &err), &err);
    CHECK(pp_stage_in_flight(st) == 0);

    fd_stats fs = {0};
    const double l0 = stage_loss(st, &x, &y, r);
    float *an = host_copy(&dx);
    fd_tensor(st, &x, an, &x, &y, r, l0, 1, &fs);
    free(an);
    int n_param_tensors = pp_stage_param_count(st);
    for (int p = 0; p < n_param_tensors; p++) {
        const pp_named_tensor *nt = pp_stage_param(st, p);
        an = host_copy(nt->grad);
        fd_tensor(st, nt->value, an, &x, &y, r, l0, 100 + (uint64_t)p, &fs);
        free(an);
    }
    double rel = sqrt(fs.err2 / (fs.ref2 > 0 ? fs.ref2 : 1));
    fprintf(stderr, "  fd %-34s %3d coords over %2d tensors (%2d at kinks), rel err %.1e\n",
            c->what, fs.checked, 1 + n_param_tensors, fs.kinks, rel);
    CHECK_MSG(rel < 5e-3, "%s: relative gradient error %.3e", c->what, rel);
    CHECK_MSG(fs.bad == 0, "%s: %d of %d coordinates off", c->what, fs.bad, fs.checked);
    CHECK_MSG(fs.kinks * 4 <= fs.checked, "%s: %d of %d coordinates at kinks", c->what, fs.kinks,
              fs.checked);
    CHECK(fs.ref2 > 0);
    free(hx);
    free(r);
    pp_tensor_free(&x);
    pp_tensor_free(&y);
    pp_tensor_free(&dy);
    pp_tensor_free(&dx);
    pp_stage_free(st);
}

static void test_finite_differences(void)
{
    const fd_case cases[] = {
        {"basic, identity", 1, {spec_block(PP_UNIT_BASIC, 4, 4, 1, false)}, 4, {2, 4, 8, 8}},
        {"basic, downsample stride 2",
         1,
         {spec_block(PP_UNIT_BASIC, 3, 5, 2, true)},
         4,
         {2, 3, 8, 8}},
        {"bottleneck, identity",
         1,
         {spec_block(PP_UNIT_BOTTLENECK, 8, 2, 1, false)},
         4,
         {2, 8, 6, 6}},
        {"bottleneck, downsample stride 2",
         1,
         {spec_block(PP_UNIT_BOTTLENECK, 4, 3, 2, true)},
         4,
         {2, 4, 8, 8}},
        {"bottleneck, downsample stride 1",
         1,
         {spec_block(PP_UNIT_BOTTLENECK, 4, 2, 1, true)},
         4,
         {2, 4, 6, 6}},
        {"stem conv1 7x7/2 + bn1",
         2,
         {spec_conv("conv1", 3, 4, 7, 2, 3), spec_simple(PP_UNIT_BN, "bn1", 4)},
         4,
         {2, 3, 8, 8}},
        {"stem conv1 3x3/1 + bn1 (cifar)",
         2,
         {spec_conv("conv1", 3, 4, 3, 1, 1), spec_simple(PP_UNIT_BN, "bn1", 4)},
         4,
         {2, 3, 8, 8}},
        {"bn1 + relu + maxpool",
         3,
         {spec_simple(PP_UNIT_BN, "bn1", 3), spec_simple(PP_UNIT_RELU, "relu", 3),
          spec_simple(PP_UNIT_MAXPOOL, "maxpool", 3)},
         4,
         {2, 3, 8, 8}},
        {"avgpool + fc",
         2,
         {spec_simple(PP_UNIT_AVGPOOL, "avgpool", 6), spec_fc(6, 5)},
         4,
         {2, 6, 3, 3}},
        {"fc", 1, {spec_fc(7, 4)}, 2, {3, 7, 1, 1}},
        {"conv+bias, sigmoid, avgpool 3/2 pad 1",
         3,
         {spec_conv_bias("c1", 2, 3, 3, 1, 1), spec_simple(PP_UNIT_SIGMOID, "s1", 3),
          spec_window(PP_UNIT_AVGPOOL2D, "a1", 3, 3, 2, 1)},
         4,
         {2, 2, 7, 7}},
        {"flatten + fc + bn1d + relu",
         4,
         {spec_simple(PP_UNIT_FLATTEN, "fl", 3), spec_fc(12, 5),
          spec_simple(PP_UNIT_BN, "b1", 5), spec_simple(PP_UNIT_RELU, "r1", 5)},
         4,
         {3, 3, 2, 2}},
        {"maxpool 2/2 + sigmoid on features",
         3,
         {spec_window(PP_UNIT_MAXPOOL, "p1", 2, 2, 2, 0), spec_simple(PP_UNIT_FLATTEN, "fl", 2),
          spec_simple(PP_UNIT_SIGMOID, "s2", 18)},
         4,
         {2, 2, 6, 7}},
        /* GPT-2's dropout (the masks fixed: one draw for every forward) */
        {"gpt2 wpe + h.0, dropout 0.3",
         2,
         {spec_gpt2(PP_UNIT_POSITION_EMBEDDING, 8, 2, 0.3f),
          spec_gpt2(PP_UNIT_GPT2_BLOCK, 8, 2, 0.3f)},
         3,
         {2, 5, 8, 1}},
        {"gpt2 h.0, dropout 0.5", 1, {spec_gpt2(PP_UNIT_GPT2_BLOCK, 8, 4, 0.5f)}, 3, {3, 6, 8, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fd_check(&cases[i]);
}

/* ---- the cost model ---------------------------------------------------------------- */

/* The cost model is what forward keeps: for every unit kind, the device bytes a
 * training forward leaves allocated until backward (measured through the
 * device's accounting, less the exec's workspace: used()) equal act_bytes * N + act_fixed_bytes of pp_unit_costs,
 * for two batch sizes; the parameter bytes equal what the unit allocated. */
static void test_costs_match_forward(void)
{
    pp_unit_spec delay = {.kind = PP_UNIT_DELAY, .in_c = 1, .out_c = 7};
    snprintf(delay.name, sizeof delay.name, "delay0");
    struct {
        pp_unit_spec spec;
        int ndim;
        int64_t sample[4]; /* per-sample input shape, batch 1 */
    } cases[] = {
        {spec_conv("conv1", 3, 8, 7, 2, 3), 4, {1, 3, 20, 18}},
        {spec_simple(PP_UNIT_BN, "bn1", 8), 4, {1, 8, 10, 9}},
        {spec_simple(PP_UNIT_RELU, "relu", 8), 4, {1, 8, 10, 9}},
        {spec_simple(PP_UNIT_MAXPOOL, "maxpool", 8), 4, {1, 8, 10, 9}},
        {spec_simple(PP_UNIT_IDENTITY, "maxpool", 8), 4, {1, 8, 10, 9}},
        {spec_simple(PP_UNIT_AVGPOOL, "avgpool", 8), 4, {1, 8, 5, 3}},
        {spec_block(PP_UNIT_BASIC, 8, 8, 1, false), 4, {1, 8, 9, 7}},
        {spec_block(PP_UNIT_BASIC, 8, 16, 2, true), 4, {1, 8, 9, 7}},
        {spec_block(PP_UNIT_BOTTLENECK, 16, 4, 1, false), 4, {1, 16, 9, 7}},
        {spec_block(PP_UNIT_BOTTLENECK, 8, 4, 2, true), 4, {1, 8, 9, 7}},
        {spec_fc(12, 5), 2, {1, 12, 1, 1}},
        {delay, 4, {1, 3, 4, 4}},
        {spec_conv_bias("c1", 3, 8, 5, 1, 2), 4, {1, 3, 12, 11}},
        {spec_simple(PP_UNIT_SIGMOID, "s1", 8), 4, {1, 8, 10, 9}},
        {spec_simple(PP_UNIT_SIGMOID, "s2", 8), 2, {1, 8, 1, 1}},
        {spec_window(PP_UNIT_AVGPOOL2D, "a1", 8, 2, 2, 0), 4, {1, 8, 10, 9}},
        {spec_simple(PP_UNIT_FLATTEN, "fl", 8), 4, {1, 8, 5, 3}},
        {spec_simple(PP_UNIT_RELU, "r2", 8), 2, {1, 8, 1, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pp_error err;
        const pp_unit_spec *spec = &cases[c].spec;
        pp_unit_info info;
        CHECK_OK(pp_unit_costs(spec, cases[c].ndim, cases[c].sample, &info, &err), &err);
        int64_t before_new = used();
        pp_unit *u = NULL;
        CHECK_OK(pp_unit_new(spec, 1, dev, &u, &err), &err);
        if (!u) continue;
        int64_t state = 0;
        for (int i = 0; i < pp_unit_state_count(u); i++)
            state += (int64_t)pp_tensor_bytes(pp_unit_state(u, i)->value);
        CHECK_MSG(state == info.param_bytes, "%s: state %lld bytes, costed %lld", spec->name,
                  (long long)state, (long long)info.param_bytes);
        if (spec->kind != PP_UNIT_DELAY) /* + gradients of the parameters */
            CHECK(used() - before_new == info.param_bytes + 4 * info.param_count);
        for (int64_t n = 1; n <= 3; n += 2) {
            int64_t in[4], out[4];
            int out_ndim;
            memcpy(in, cases[c].sample, sizeof in);
            in[0] = n;
            CHECK_OK(pp_unit_output_shape(spec, cases[c].ndim, in, &out_ndim, out, &err), &err);
            pp_tensor x, y;
            CHECK_OK(alloc_shape(&x, cases[c].ndim, in, &err), &err);
            CHECK_OK(alloc_shape(&y, out_ndim, out, &err), &err);
            CHECK_OK(pp_zero(&ex, &x, &err), &err);
            int64_t before = used();
            CHECK_OK(pp_unit_forward(u, &ex, 0, &x, &y, true, &err), &err);
            int64_t kept = used() - before;
            int64_t costed = info.act_bytes * n + info.act_fixed_bytes;
            CHECK_MSG(kept == costed, "%s (%s), batch %lld: forward keeps %lld bytes, costed %lld",
                      spec->name, c < 6 ? "simple" : "block/fc/delay", (long long)n,
                      (long long)kept, (long long)costed);
            pp_unit_release(u, 0);
            CHECK(used() == before);
            /* the same forward with x and y shared: what the unit keeps of them
             * is a reference, the rest as costed, the output the same bits;
             * an input in another memory order is copied instead */
            for (int other_layout = 0; other_layout < 2; other_layout++) {
                /* (kinds whose ops take operands of mixed memory orders) */
                const bool mixed_ok = spec->kind == PP_UNIT_CONV || spec->kind == PP_UNIT_BN ||
                                      spec->kind == PP_UNIT_MAXPOOL;
                if (other_layout && !mixed_ok) continue;
                pp_tensor xs = {0}, ys = {0};
                pp_unit_act *xa = NULL, *ya = NULL;
                CHECK_OK(alloc_shape(&xs, cases[c].ndim, in, &err), &err);
                CHECK_OK(alloc_shape(&ys, out_ndim, out, &err), &err);
                const bool moved = other_layout && cases[c].ndim == 4 && in[1] > 1;
                if (moved) xs.layout = PP_NHWC; /* zeros: the same tensor in either order */
                CHECK_OK(pp_zero(&ex, &xs, &err), &err);
                CHECK_OK(pp_unit_act_new(&xs, &xa, &err), &err);
                CHECK_OK(pp_unit_act_new(&ys, &ya, &err), &err);
                if (!xa || !ya) break;
                int64_t base = used();
                CHECK_OK(pp_unit_forward_shared(u, &ex, 0, xa, pp_unit_act_tensor(xa), ya,
                                                pp_unit_act_tensor(ya), true, &err),
                         &err);
                int64_t shared = 0;
                if (info.keeps_input && !moved)
                    shared += (int64_t)pp_tensor_bytes(pp_unit_act_tensor(xa));
                if (info.keeps_output) shared += (int64_t)pp_tensor_bytes(pp_unit_act_tensor(ya));
                int64_t kept_shared = used() - base;
                CHECK_MSG(kept_shared == costed - shared,
                          "%s, batch %lld, layout %d: shared forward keeps %lld bytes, want %lld",
                          spec->name, (long long)n, other_layout, (long long)kept_shared,
                          (long long)(costed - shared));
                if (spec->kind != PP_UNIT_DELAY) {
                    float *h1 = host_copy(&y), *h2 = host_copy(pp_unit_act_tensor(ya));
                    CHECK_MSG(memcmp(h1, h2, pp_tensor_bytes(&y)) == 0, "%s: shared output differs",
                              spec->name);
                    free(h1);
                    free(h2);
                }
                /* the creator's references go first: the unit's keep the tensors */
                pp_unit_act_drop(xa);
                pp_unit_act_drop(ya);
                const bool held_x = info.keeps_input && !moved, held_y = info.keeps_output;
                CHECK(used() == base + kept_shared -
                                    (held_x ? 0 : (int64_t)pp_tensor_bytes(&x)) -
                                    (held_y ? 0 : (int64_t)pp_tensor_bytes(&y)));
                pp_unit_release(u, 0);
                CHECK(used() == before);
            }
            pp_tensor_free(&x);
            pp_tensor_free(&y);
        }
        pp_unit_free(u);
        CHECK(used() == before_new);
    }
}

/* ---- batch-norm running statistics --------------------------------------------------- */

/* Batch-norm running statistics: momentum 0.1, unbiased variance, inference
 * uses them. */
static void test_bn_running_stats(void)
{
    pp_unit_spec spec = spec_simple(PP_UNIT_BN, "bn1", 2);
    pp_unit *u = NULL;
    pp_error err;
    CHECK_OK(pp_unit_new(&spec, 1, dev, &u, &err), &err);
    if (!u) return;
    pp_tensor x, y;
    const int64_t shape[4] = {2, 2, 1, 2};
    CHECK_OK(alloc_shape(&x, 4, shape, &err), &err);
    CHECK_OK(alloc_shape(&y, 4, shape, &err), &err);
    /* channel 0 values 1,2,3,4 (n0: 1,2; n1: 3,4); channel 1 all 5 */
    const float hx[8] = {1, 2, 5, 5, 3, 4, 5, 5};
    host_store(&x, hx);
    CHECK_OK(pp_unit_forward(u, &ex, 0, &x, &y, true, &err), &err);
    pp_unit_release(u, 0);
    float rm[2], rv[2];
    CHECK_OK(pp_tensor_to_host(pp_unit_state(u, 2)->value, rm, 8, &err), &err);
    CHECK_OK(pp_tensor_to_host(pp_unit_state(u, 3)->value, rv, 8, &err), &err);
    CHECK(fabsf(rm[0] - 0.25f) < 1e-6f && fabsf(rm[1] - 0.5f) < 1e-6f);
    /* unbiased variance of 1..4 is 5/3 */
    CHECK(fabsf(rv[0] - (0.9f + 0.1f * 5.0f / 3.0f)) < 1e-6f && fabsf(rv[1] - 0.9f) < 1e-6f);
    int64_t count = 0;
    CHECK_OK(pp_tensor_to_host(pp_unit_state(u, 4)->value, &count, 8, &err), &err);
    CHECK(count == 0); /* counted on the host until the buffers are synced */
    CHECK_OK(pp_unit_sync_buffers(u, &err), &err);
    CHECK_OK(pp_tensor_to_host(pp_unit_state(u, 4)->value, &count, 8, &err), &err);
    CHECK(count == 1);
    CHECK_OK(pp_unit_forward(u, &ex, 0, &x, &y, false, &err), &err);
    float hy[8];
    CHECK_OK(pp_tensor_to_host(&y, hy, sizeof hy, &err), &err);
    CHECK(fabsf(hy[0] - (1.0f - rm[0]) / sqrtf(rv[0] + 1e-5f)) < 1e-5f);
    CHECK_OK(pp_unit_sync_buffers(u, &err), &err); /* inference counts nothing */
    CHECK_OK(pp_tensor_to_host(pp_unit_state(u, 4)->value, &count, 8, &err), &err);
    CHECK(count == 1 && pp_unit_in_flight(u) == 0);
    /* the pending counts for graph replays: read, raised, restored, added */
    int64_t pend[2] = {-1, -1};
    CHECK(pp_unit_batch_counts(u, pend, 2) == 1 && pend[0] == 0);
    CHECK_OK(pp_unit_forward(u, &ex, 0, &x, &y, true, &err), &err);
    pp_unit_release(u, 0);
    CHECK(pp_unit_batch_counts(u, pend, 2) == 1 && pend[0] == 1);
    pp_unit_add_batches(u, 4); /* a replay of four training forwards */
    CHECK(pp_unit_batch_counts(u, pend + 1, 1) == 1 && pend[1] == 5);
    pp_unit_set_batch_counts(u, pend); /* a refused capture undone: back to 1 */
    CHECK(pp_unit_batch_counts(u, NULL, 0) == 1);
    pp_unit_add_batches(u, 2);
    CHECK_OK(pp_unit_sync_buffers(u, &err), &err);
    CHECK_OK(pp_tensor_to_host(pp_unit_state(u, 4)->value, &count, 8, &err), &err);
    CHECK_MSG(count == 4, "num_batches_tracked %lld, want 1 + 1 + 2", (long long)count);
    pp_tensor_free(&x);
    pp_tensor_free(&y);
    pp_unit_free(u);
}

/* ---- unit specs ---------------------------------------------------------------------- */

static void test_unit_specs(void)
{
    pp_model_config cfg;
    pp_error err;
    pp_unit_spec *specs;
    int n;
    CHECK_OK(pp_model_config_default("resnet50", &cfg, &err), &err);
    CHECK_OK(pp_resnet_units(&cfg, &specs, &n, &err), &err);
    int ds = 0;
    for (int i = 0; i < n; i++) ds += specs[i].downsample;
    CHECK(ds == 4);
    CHECK(specs[4].downsample && specs[4].stride == 1 && specs[4].in_c == 64 &&
          specs[4].out_c == 256);
    CHECK(specs[7].downsample && specs[7].stride == 2 && specs[7].in_c == 256 &&
          specs[7].planes == 128);
    CHECK(specs[0].kernel == 7 && specs[0].stride == 2 && specs[3].kind == PP_UNIT_MAXPOOL);
    free(specs);
    CHECK_OK(pp_model_config_default("resnet18", &cfg, &err), &err);
    cfg.stem = PP_STEM_CIFAR;
    CHECK_OK(pp_resnet_units(&cfg, &specs, &n, &err), &err);
    ds = 0;
    for (int i = 0; i < n; i++) ds += specs[i].downsample;
    CHECK(ds == 3 && !specs[4].downsample);
    CHECK(specs[0].kernel == 3 && specs[0].stride == 1 && specs[3].kind == PP_UNIT_IDENTITY);
    CHECK(strcmp(specs[3].name, "maxpool") == 0);
    free(specs);
    /* bad specs are refused */
    pp_unit *u = NULL;
    pp_unit_spec bad = spec_block(PP_UNIT_BASIC, 4, 8, 1, false);
    CHECK(pp_unit_new(&bad, 1, dev, &u, &err) == PP_ERR_INVALID && !u);
    bad = spec_conv("conv1", 3, 0, 3, 1, 1);
    CHECK(pp_unit_new(&bad, 1, dev, &u, &err) == PP_ERR_INVALID && !u);
    /* ... by shapes and costs too, before any window arithmetic (stride 0) */
    const int64_t in[4] = {1, 3, 8, 8};
    int out_ndim;
    int64_t out[4];
    pp_unit_info info;
    const pp_unit_spec bad_specs[] = {spec_conv("conv1", 3, 8, 3, 0, 1),
                                      {.kind = (pp_unit_kind)42, .name = "x", .in_c = 3}};
    for (int i = 0; i < 2; i++) {
        CHECK(pp_unit_output_shape(&bad_specs[i], 4, in, &out_ndim, out, &err) ==
              PP_ERR_INVALID);
        CHECK_MSG(strstr(err.msg, i == 0 ? "bad conv spec" : "unknown kind 42") != NULL, "%s",
                  err.msg);
        CHECK(pp_unit_costs(&bad_specs[i], 4, in, &info, &err) == PP_ERR_INVALID);
    }
}
/* ---- decoding with a cache of keys and values ------------------------------------- */

/* wpe then h.0 (width 16, 2 heads, 8 positions; fp32, and bf16 with GPT-2's
 * f32 residual stream) over one sample: the inference forward of the whole
 * sequence, then decoding (pp_unit_set_decode) the same positions in pieces
 * of 3, 1, 1, 2 and 1: each piece's rows within rounding of the whole
 * forward's (the attention's products are of other shapes; bf16 within a
 * few of its steps). Refused while decoding: a training forward, a piece
 * past the cache, two samples; a position at or past the cache; the cache
 * freed when decoding ends. */
static void test_decode(void)
{
    enum { T = 8, C = 16 };
    static const int pieces[] = {3, 1, 1, 2, 1};
    for (int bf = 0; bf < 2; bf++) {
        pp_error err;
        pp_unit_spec sw = spec_gpt2(PP_UNIT_POSITION_EMBEDDING, C, 2, 0.0f);
        pp_unit_spec sb = spec_gpt2(PP_UNIT_GPT2_BLOCK, C, 2, 0.0f);
        sb.bf16 = sw.bf16 = bf;
        sb.f32_in = sb.f32_out = sw.f32_in = sw.f32_out = bf;
        pp_unit *wpe = NULL, *blk = NULL;
        CHECK_OK(pp_unit_new(&sw, 5, dev, &wpe, &err), &err);
        CHECK_OK(pp_unit_new(&sb, 5, dev, &blk, &err), &err);
        if (!wpe || !blk) {
            pp_unit_free(wpe);
            pp_unit_free(blk);
            return;
        }
        pp_tensor x = {0}, a = {0}, y = {0};
        CHECK_OK(alloc_shape(&x, 3, (int64_t[]){1, T, C}, &err), &err);
        CHECK_OK(alloc_shape(&a, 3, (int64_t[]){1, T, C}, &err), &err);
        CHECK_OK(alloc_shape(&y, 3, (int64_t[]){1, T, C}, &err), &err);
        float *hx = malloc(sizeof(float) * T * C);
        fill_normal(hx, T * C, 11, 1.0);
        host_store(&x, hx);
        CHECK_OK(pp_unit_forward(wpe, &ex, 0, &x, &a, false, &err), &err);
        CHECK_OK(pp_unit_forward(blk, &ex, 0, &a, &y, false, &err), &err);
        float *whole = host_copy(&y);
        const int64_t before = used(); /* bf16: with the weights' bf16 copies */
        double scale = 0, worst = 0;
        for (int i = 0; i < T * C; i++) scale = fmax(scale, fabs(whole[i]));
        for (int k = 0, at = 0; k < (int)(sizeof pieces / sizeof pieces[0]); at += pieces[k++]) {
            const int t = pieces[k];
            CHECK_OK(pp_unit_set_decode(wpe, at, T, &err), &err);
            CHECK_OK(pp_unit_set_decode(blk, at, T, &err), &err);
            pp_tensor px = pp_tensor_view0(&x, 0, 1), pa = pp_tensor_view0(&a, 0, 1);
            pp_tensor py = pp_tensor_view0(&y, 0, 1);
            px.shape[1] = pa.shape[1] = py.shape[1] = t;
            host_store(&px, hx + (size_t)at * C);
            CHECK_OK(pp_unit_forward(wpe, &ex, 0, &px, &pa, false, &err), &err);
            CHECK_OK(pp_unit_forward(blk, &ex, 0, &pa, &py, false, &err), &err);
            float *got = host_copy(&py);
            for (int i = 0; i < t * C; i++)
                worst = fmax(worst, fabs((double)got[i] - whole[(size_t)at * C + i]));
            free(got);
        }
        CHECK_MSG(worst <= (bf ? 3e-2 : 2e-6) * scale,
                  "%s: decoded rows differ from the whole forward's by %.3g of %.3g",
                  bf ? "bf16" : "fp32", worst, scale);
        /* refusals while decoding from position 7 */
        pp_tensor p2 = pp_tensor_view0(&a, 0, 1), q2 = pp_tensor_view0(&y, 0, 1);
        p2.shape[1] = q2.shape[1] = 2;
        CHECK(pp_unit_forward(blk, &ex, 0, &p2, &q2, false, &err) == PP_ERR_INVALID);
        p2.shape[1] = q2.shape[1] = 1;
        CHECK(pp_unit_forward(blk, &ex, 0, &p2, &q2, true, &err) == PP_ERR_INVALID);
        CHECK(pp_unit_set_decode(blk, T, T, &err) == PP_ERR_INVALID);
        CHECK(pp_unit_set_decode(blk, 0, T + 1, &err) == PP_ERR_INVALID); /* the cache holds T */
        CHECK_OK(pp_unit_set_decode(wpe, -1, 0, &err), &err);
        CHECK_OK(pp_unit_set_decode(blk, -1, 0, &err), &err);
        CHECK_MSG(used() == before, "%s: %lld bytes in use after decoding, %lld before",
                  bf ? "bf16" : "fp32", (long long)used(), (long long)before);
        /* not decoding: a training forward runs again */
        CHECK_OK(pp_unit_forward(blk, &ex, 0, &a, &y, true, &err), &err);
        pp_unit_release(blk, 0);
        free(hx), free(whole);
        pp_tensor_free(&x), pp_tensor_free(&a), pp_tensor_free(&y);
        pp_unit_free(wpe);
        pp_unit_free(blk);
    }
}

int main(void)
{
    model_rig_open();
    test_unit_specs();
    test_finite_differences();
    test_bn_running_stats();
    test_costs_match_forward();
    test_decode();
    return model_rig_close("units");
}
