/*
 * test_models.c - layer units, ResNet stages, the catalogue and the delay
 * model on the CPU backend: gradients against central finite differences,
 * torchvision parameter counts and state_dict names, FLOPs, split
 * invariance of initialisation and forward, memory kept per micro-batch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/catalogue.h"
#include "models/delay.h"
#include "models/resnet.h"
#include "models/rng.h"
#include "models/stage.h"
#include "models/unit.h"
#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "runtime/core/exec.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"

static pp_device_ctx *dev;
static pp_exec ex;

/* ---- helpers ------------------------------------------------------------- */

static float *host_copy(const pp_tensor *t)
{
    size_t bytes = pp_tensor_bytes(t);
    float *h = malloc(bytes ? bytes : 4);
    pp_error err;
    CHECK_OK(pp_tensor_to_host(t, h, bytes, &err), &err);
    return h;
}

static void host_store(pp_tensor *t, const float *h)
{
    pp_error err;
    CHECK_OK(pp_tensor_from_host(t, h, pp_tensor_bytes(t), &err), &err);
}

static void fill_normal(float *p, int64_t n, uint64_t seed, double scale)
{
    pp_rng r;
    pp_rng_init(&r, seed, "test");
    for (int64_t i = 0; i < n; i++) p[i] = (float)(scale * pp_rng_normal(&r));
}

static pp_status alloc_shape(pp_tensor *t, int ndim, const int64_t *shape, pp_error *err)
{
    return pp_tensor_alloc(t, dev, PP_F32, ndim, shape, err);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

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

/* ---- catalogue ---------------------------------------------------------------- */

static void test_catalogue_counts(void)
{
    static const struct {
        const char *name;
        int64_t params;
        int units;
        double gmacs; /* torchvision's reported forward GMACs at 224x224 */
    } cases[] = {
        {"resnet18", 11689512, 14, 1.81},   {"resnet34", 21797672, 22, 3.66},
        {"resnet50", 25557032, 22, 4.09},   {"resnet101", 44549160, 39, 7.80},
        {"resnet152", 60192808, 56, 11.51},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_model_config cfg;
        pp_catalogue cat;
        pp_error err;
        CHECK_OK(pp_model_config_default(cases[i].name, &cfg, &err), &err);
        CHECK_OK(pp_catalogue_build(&cfg, &cat, &err), &err);
        int64_t params = 0, macs = 0, flops = 0;
        for (int u = 0; u < cat.n; u++) {
            params += cat.units[u].param_count;
            macs += cat.units[u].fwd_macs;
            flops += cat.units[u].fwd_flops;
        }
        CHECK_MSG(params == cases[i].params, "%s: %lld params", cases[i].name, (long long)params);
        CHECK_MSG(cat.n == cases[i].units, "%s: %d units", cases[i].name, cat.n);
        double g = (double)macs / 1e9;
        fprintf(stderr, "  %-9s %9lld params, %6.3f GMACs, %6.3f GFLOPs forward per sample\n",
                cases[i].name, (long long)params, g, (double)flops / 1e9);
        CHECK_MSG(fabs(g - cases[i].gmacs) < 0.01 * cases[i].gmacs, "%s: %.3f GMACs", cases[i].name,
                  g);
        CHECK(flops > 2 * macs && flops < 2 * macs + macs / 20);
        CHECK(strcmp(cat.units[0].name, "conv1") == 0 && strcmp(cat.units[3].name, "maxpool") == 0);
        CHECK(strcmp(cat.units[4].name, "layer1.0") == 0);
        CHECK(strcmp(cat.units[cat.n - 1].name, "fc") == 0);
        CHECK(pp_catalogue_find(&cat, "avgpool") == cat.n - 2);
        CHECK(pp_catalogue_find(&cat, "layer4.0") > 0);
        CHECK(pp_catalogue_find(&cat, "layer9.0") == -1);
        pp_catalogue_free(&cat);
    }

    /* resnet50: the 4.1 GMACs of the literature, within 2%; per-unit figures */
    pp_model_config cfg;
    pp_catalogue cat;
    pp_error err;
    CHECK_OK(pp_model_config_default("resnet50", &cfg, &err), &err);
    CHECK_OK(pp_catalogue_build(&cfg, &cat, &err), &err);
    int64_t macs = 0;
    for (int u = 0; u < cat.n; u++) macs += cat.units[u].fwd_macs;
    CHECK_MSG(fabs((double)macs - 4.1e9) < 0.02 * 4.1e9, "resnet50 %lld MACs", (long long)macs);
    const pp_unit_info *c1 = &cat.units[0];
    CHECK(c1->fwd_macs == 64LL * 3 * 7 * 7 * 112 * 112);
    CHECK(c1->param_count == 64 * 3 * 7 * 7 && c1->param_bytes == 4 * 64 * 3 * 7 * 7);
    CHECK(c1->out_bytes == 4LL * 64 * 112 * 112 && c1->act_bytes == 4LL * 3 * 224 * 224);
    const pp_unit_info *b1 = &cat.units[1];
    CHECK(b1->param_count == 128 && b1->param_bytes == 4 * 256 + 8);
    CHECK(b1->act_fixed_bytes == 2 * 4 * 64);
    const pp_unit_info *mp = &cat.units[3];
    CHECK(mp->out_bytes == 4LL * 64 * 56 * 56 &&
          mp->act_bytes == 4LL * 64 * (112 * 112 + 2 * 56 * 56));
    const pp_unit_info *fc = &cat.units[cat.n - 1];
    CHECK(fc->param_count == 2048 * 1000 + 1000 && fc->fwd_macs == 2048 * 1000);
    CHECK(fc->out_bytes == 4000 && fc->act_bytes == 4 * 2048);
    int l41 = pp_catalogue_find(&cat, "layer4.1");
    CHECK(l41 > 0 && cat.units[l41].out_bytes == 4LL * 2048 * 7 * 7);
    /* what each unit keeps of its input and output: conv1, bn1 and fc their
     * input, relu its output, max pool and blocks both */
    CHECK(c1->keeps_input && !c1->keeps_output && b1->keeps_input && !b1->keeps_output);
    CHECK(!cat.units[2].keeps_input && cat.units[2].keeps_output);
    CHECK(mp->keeps_input && mp->keeps_output && cat.units[l41].keeps_input &&
          cat.units[l41].keeps_output && fc->keeps_input && !fc->keeps_output);
    /* kept by a stage: relu's output is max pool's input, max pool's output
     * layer1.0's input, one tensor each */
    CHECK(pp_catalogue_kept_bytes(&cat, 0, 4, 3) ==
          3 * (c1->act_bytes + b1->act_bytes + cat.units[2].act_bytes + mp->act_bytes +
               cat.units[4].act_bytes - cat.units[2].out_bytes - mp->out_bytes) +
              b1->act_fixed_bytes + cat.units[4].act_fixed_bytes);
    CHECK(pp_catalogue_kept_bytes(&cat, 3, 3, 2) == 2 * mp->act_bytes);
    /* the whole net at batch 128: what sharing saves (printed for the record) */
    int64_t apart = 0, copied = 0;
    for (int u = 0; u < cat.n; u++) {
        apart += 128 * cat.units[u].act_bytes + cat.units[u].act_fixed_bytes;
        if (u + 1 < cat.n && cat.units[u].keeps_output) copied += 128 * cat.units[u].out_bytes;
        if (u > 0 && cat.units[u].keeps_input) copied += 128 * cat.units[u - 1].out_bytes;
    }
    const int64_t kept = pp_catalogue_kept_bytes(&cat, 0, cat.n - 1, 128);
    CHECK(kept < apart && kept > apart / 2);
    fprintf(stderr,
            "  resnet50 224x224 fp32, batch 128, one stage: keeps %.2f GB for backward (%.2f GB "
            "if each unit kept its own copies; %.2f GB no longer copied)\n",
            (double)kept / 1e9, (double)apart / 1e9, (double)copied / 1e9);
    pp_catalogue_free(&cat);

    /* cifar stem, other sizes and classes */
    cfg.stem = PP_STEM_CIFAR;
    cfg.image_h = cfg.image_w = 32;
    cfg.num_classes = 10;
    CHECK_OK(pp_catalogue_build(&cfg, &cat, &err), &err);
    CHECK(cat.units[0].fwd_macs == 64LL * 3 * 3 * 3 * 32 * 32);
    CHECK(cat.units[3].fwd_flops == 0 && cat.units[3].act_bytes == 0);
    CHECK(cat.units[3].out_bytes == 4LL * 64 * 32 * 32);
    CHECK(cat.units[cat.n - 1].param_count == 2048 * 10 + 10);
    pp_catalogue_free(&cat);

    /* errors */
    CHECK(pp_model_config_default("resnet51", &cfg, &err) == PP_ERR_INPUT);
    CHECK(strstr(err.msg, "resnet51") != NULL);
    CHECK_OK(pp_model_config_default("delay", &cfg, &err), &err);
    CHECK(cfg.kind == PP_MODEL_DELAY);
    CHECK(pp_catalogue_build(&cfg, &cat, &err) == PP_ERR_INPUT);
    CHECK_OK(pp_model_config_default("resnet18", &cfg, &err), &err);
    cfg.depth = 20;
    CHECK(pp_catalogue_build(&cfg, &cat, &err) == PP_ERR_INPUT);
    cfg.depth = 18;
    cfg.image_h = 0;
    CHECK(pp_catalogue_build(&cfg, &cat, &err) == PP_ERR_INPUT);
}

/* ---- instantiated models ---------------------------------------------------------- */

static const pp_named_tensor *find_state(const pp_stage *st, const char *name)
{
    for (int i = 0; i < pp_stage_state_count(st); i++)
        if (strcmp(pp_stage_state(st, i)->name, name) == 0) return pp_stage_state(st, i);
    return NULL;
}

static double sample_std(const float *v, int64_t n, double *mean)
{
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += v[i];
        s2 += (double)v[i] * v[i];
    }
    *mean = s / (double)n;
    return sqrt(s2 / (double)n - *mean * *mean);
}

static void test_state_dict(void)
{
    static const struct {
        const char *name;
        int64_t params;
        int n_params, n_buffers;
    } cases[] = {
        {"resnet18", 11689512, 62, 60},
        {"resnet50", 25557032, 161, 159},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pp_model_config cfg;
        pp_error err;
        pp_stage *st = NULL;
        CHECK_OK(pp_model_config_default(cases[c].name, &cfg, &err), &err);
        pp_catalogue cat;
        CHECK_OK(pp_catalogue_build(&cfg, &cat, &err), &err);
        CHECK_OK(pp_stage_new(&cfg, 1, 0, cat.n - 1, dev, &st, &err), &err);
        if (!st) continue;
        CHECK_MSG(pp_stage_num_params(st) == cases[c].params, "%s: %lld", cases[c].name,
                  (long long)pp_stage_num_params(st));
        CHECK(pp_stage_param_count(st) == cases[c].n_params);
        CHECK(pp_stage_buffer_count(st) == cases[c].n_buffers);
        CHECK(pp_stage_state_count(st) == cases[c].n_params + cases[c].n_buffers);
        /* every BN has exactly 3 buffers, one of them an I64 scalar */
        int nbt = 0;
        for (int i = 0; i < pp_stage_buffer_count(st); i++) {
            const pp_named_tensor *b = pp_stage_buffer(st, i);
            if (strstr(b->name, "num_batches_tracked")) {
                nbt++;
                CHECK(b->value->dtype == PP_I64 && b->value->ndim == 0);
            } else {
                CHECK(b->value->dtype == PP_F32 && b->value->ndim == 1);
            }
            CHECK(b->grad == NULL);
        }
        CHECK(nbt * 3 == cases[c].n_buffers);
        for (int i = 0; i < pp_stage_param_count(st); i++) {
            const pp_named_tensor *p = pp_stage_param(st, i);
            CHECK(p->grad && pp_tensor_same_shape(p->grad, p->value) && p->grad->dev == dev);
        }
        /* catalogue bytes = instantiated bytes */
        int64_t bytes = 0, cat_bytes = 0;
        for (int i = 0; i < pp_stage_state_count(st); i++)
            bytes += (int64_t)pp_tensor_bytes(pp_stage_state(st, i)->value);
        for (int i = 0; i < cat.n; i++) cat_bytes += cat.units[i].param_bytes;
        CHECK_MSG(bytes == cat_bytes, "%lld vs %lld", (long long)bytes, (long long)cat_bytes);
        /* torchvision state_dict order at the start and the end */
        static const char *head[] = {
            "conv1.weight",          "bn1.weight",         "bn1.bias",
            "bn1.running_mean",      "bn1.running_var",    "bn1.num_batches_tracked",
            "layer1.0.conv1.weight", "layer1.0.bn1.weight"};
        for (int i = 0; i < 8; i++)
            CHECK_MSG(strcmp(pp_stage_state(st, i)->name, head[i]) == 0, "state %d is %s", i,
                      pp_stage_state(st, i)->name);
        int n = pp_stage_state_count(st);
        CHECK(strcmp(pp_stage_state(st, n - 2)->name, "fc.weight") == 0);
        CHECK(strcmp(pp_stage_state(st, n - 1)->name, "fc.bias") == 0);
        pp_catalogue_free(&cat);

        if (c == 1) {
            static const char *names[] = {
                "layer3.2.bn1.running_var", "layer1.0.downsample.0.weight",
                "layer1.0.downsample.1.num_batches_tracked", "layer4.2.bn3.num_batches_tracked",
                "layer2.3.conv3.weight"};
            for (int i = 0; i < 5; i++) CHECK_MSG(find_state(st, names[i]), "%s", names[i]);
            CHECK(find_state(st, "layer1.1.downsample.0.weight") == NULL);
            CHECK(find_state(st, "layer3.2.conv3.bias") == NULL);
            int ds = 0;
            for (int i = 0; i < n; i++)
                ds += strstr(pp_stage_state(st, i)->name, "downsample") != NULL;
            CHECK(ds == 4 * 6);
            /* a bottleneck's order: conv1, bn1, conv2, bn2, conv3, bn3, downsample.0, .1 */
            int i0 = -1;
            for (int i = 0; i < n; i++)
                if (strcmp(pp_stage_state(st, i)->name, "layer2.0.conv1.weight") == 0) i0 = i;
            CHECK(i0 > 0 && strcmp(pp_stage_state(st, i0 + 6)->name, "layer2.0.conv2.weight") == 0);
            CHECK(i0 > 0 &&
                  strcmp(pp_stage_state(st, i0 + 12)->name, "layer2.0.conv3.weight") == 0);
            CHECK(i0 > 0 &&
                  strcmp(pp_stage_state(st, i0 + 18)->name, "layer2.0.downsample.0.weight") == 0);
            CHECK(i0 > 0 &&
                  strcmp(pp_stage_state(st, i0 + 24)->name, "layer2.1.conv1.weight") == 0);
            /* torchvision initialisation */
            const pp_named_tensor *w = find_state(st, "layer1.0.conv2.weight");
            float *h = host_copy(w->value);
            double mean, sd = sample_std(h, pp_tensor_numel(w->value), &mean);
            CHECK_MSG(fabs(sd - sqrt(2.0 / (64 * 9))) < 0.02 * sqrt(2.0 / (64 * 9)), "std %g", sd);
            CHECK(fabs(mean) < 0.002);
            free(h);
            w = find_state(st, "fc.weight");
            h = host_copy(w->value);
            double bound = 1.0 / sqrt(2048.0), lo = 1, hi = -1;
            for (int64_t i = 0; i < pp_tensor_numel(w->value); i++) {
                lo = h[i] < lo ? h[i] : lo;
                hi = h[i] > hi ? h[i] : hi;
            }
            CHECK(lo >= -bound && hi <= bound && lo < -0.99 * bound && hi > 0.99 * bound);
            sd = sample_std(h, pp_tensor_numel(w->value), &mean);
            CHECK(fabs(sd - bound / sqrt(3.0)) < 0.01 * bound);
            free(h);
            static const struct {
                const char *name;
                float v;
            } consts[] = {{"layer3.1.bn2.weight", 1},
                          {"layer3.1.bn2.bias", 0},
                          {"layer3.1.bn2.running_mean", 0},
                          {"layer3.1.bn2.running_var", 1}};
            for (int k = 0; k < 4; k++) {
                w = find_state(st, consts[k].name);
                h = host_copy(w->value);
                bool ok = true;
                for (int64_t i = 0; i < pp_tensor_numel(w->value); i++)
                    ok = ok && h[i] == consts[k].v;
                CHECK_MSG(ok, "%s", consts[k].name);
                free(h);
            }
            int64_t count = -1;
            CHECK_OK(pp_tensor_to_host(find_state(st, "bn1.num_batches_tracked")->value, &count, 8,
                                       &err),
                     &err);
            CHECK(count == 0);
        }
        pp_stage_free(st);
    }
}

/* model.zero_init_residual: each block's last batch norm (bn2 of a basic
 * block, bn3 of a bottleneck) starts with weight 0, every other batch norm
 * with 1, and the convolutions as without it (the same seed). */
static bool all_equal(const pp_named_tensor *t, float v)
{
    float *h = host_copy(t->value);
    bool ok = h != NULL;
    for (int64_t i = 0; ok && i < pp_tensor_numel(t->value); i++) ok = h[i] == v;
    free(h);
    return ok;
}

static void test_zero_init_residual(void)
{
    static const char *const models[] = {"resnet18", "resnet50"};
    for (int m = 0; m < 2; m++) {
        pp_stage *st[2] = {NULL, NULL};
        pp_error err;
        for (int z = 0; z < 2; z++) {
            pp_model_config cfg;
            pp_catalogue cat;
            CHECK_OK(pp_model_config_default(models[m], &cfg, &err), &err);
            cfg.zero_init_residual = z;
            CHECK_OK(pp_catalogue_build(&cfg, &cat, &err), &err);
            CHECK_OK(pp_stage_new(&cfg, 1, 0, cat.n - 1, dev, &st[z], &err), &err);
            pp_catalogue_free(&cat);
        }
        if (!st[0] || !st[1]) goto next;
        const char *last = m ? "bn3" : "bn2";
        int n_last = 0;
        for (int i = 0; i < pp_stage_state_count(st[1]); i++) {
            const pp_named_tensor *t = pp_stage_state(st[1], i), *u = pp_stage_state(st[0], i);
            CHECK(strcmp(t->name, u->name) == 0);
            const char *dot = strrchr(t->name, '.');
            if (!dot || strcmp(dot, ".weight")) continue;
            char want[64];
            int l, b;
            bool is_last = sscanf(t->name, "layer%d.%d.", &l, &b) == 2 &&
                           snprintf(want, sizeof want, "layer%d.%d.%s.weight", l, b, last) > 0 &&
                           !strcmp(t->name, want);
            bool bn = strstr(t->name, "bn") || strstr(t->name, "downsample.1");
            if (is_last) {
                n_last++;
                CHECK_MSG(all_equal(t, 0) && all_equal(u, 1), "%s %s: 0 with, 1 without",
                          models[m], t->name);
            } else if (bn) {
                CHECK_MSG(all_equal(t, 1), "%s %s: 1", models[m], t->name);
            } else {
                float *a = host_copy(t->value), *c = host_copy(u->value);
                CHECK_MSG(a && c && !memcmp(a, c, pp_tensor_bytes(t->value)),
                          "%s %s: the same values with and without", models[m], t->name);
                free(a);
                free(c);
            }
        }
        CHECK_MSG(n_last == (m ? 16 : 8), "%s: %d blocks", models[m], n_last);
    next:
        pp_stage_free(st[0]);
        pp_stage_free(st[1]);
    }
}

/* Same seed, one stage or two: identical names and values, state for state. */
static void test_split_init(void)
{
    pp_model_config cfg;
    pp_error err;
    CHECK_OK(pp_model_config_default("resnet50", &cfg, &err), &err);
    pp_stage *whole = NULL, *a = NULL, *b = NULL, *other = NULL;
    int l3 = 4 + 3 + 4; /* conv1 bn1 relu maxpool, layer1 x3, layer2 x4 -> layer3.0 */
    CHECK_OK(pp_stage_new(&cfg, 42, 0, 21, dev, &whole, &err), &err);
    CHECK_OK(pp_stage_new(&cfg, 42, 0, l3 - 1, dev, &a, &err), &err);
    CHECK_OK(pp_stage_new(&cfg, 42, l3, 21, dev, &b, &err), &err);
    if (!whole || !a || !b) return;
    CHECK(strcmp(pp_unit_name(pp_stage_unit(b, 0)), "layer3.0") == 0);
    CHECK(pp_stage_state_count(a) + pp_stage_state_count(b) == pp_stage_state_count(whole));
    int mismatches = 0;
    for (int i = 0; i < pp_stage_state_count(whole); i++) {
        const pp_named_tensor *w = pp_stage_state(whole, i);
        int na = pp_stage_state_count(a);
        const pp_named_tensor *p = i < na ? pp_stage_state(a, i) : pp_stage_state(b, i - na);
        float *hw = host_copy(w->value), *hp = host_copy(p->value);
        if (strcmp(w->name, p->name) != 0 ||
            pp_tensor_bytes(w->value) != pp_tensor_bytes(p->value) ||
            memcmp(hw, hp, pp_tensor_bytes(w->value)) != 0)
            mismatches++;
        free(hw);
        free(hp);
    }
    CHECK_MSG(mismatches == 0, "%d tensors differ between split and whole", mismatches);
    /* another seed gives other weights */
    CHECK_OK(pp_stage_new(&cfg, 43, l3, 21, dev, &other, &err), &err);
    if (other) {
        float *h1 = host_copy(pp_stage_param(b, 0)->value),
              *h2 = host_copy(pp_stage_param(other, 0)->value);
        CHECK(memcmp(h1, h2, pp_tensor_bytes(pp_stage_param(b, 0)->value)) != 0);
        free(h1);
        free(h2);
        pp_stage_free(other);
    }
    /* input shapes from the model config */
    int nd;
    int64_t s[4];
    CHECK_OK(pp_stage_input_shape(b, 3, &nd, s, &err), &err);
    CHECK(nd == 4 && s[0] == 3 && s[1] == 512 && s[2] == 28 && s[3] == 28);
    CHECK_OK(pp_stage_output_shape(a, 3, &nd, s, &err), &err);
    CHECK(nd == 4 && s[0] == 3 && s[1] == 512 && s[2] == 28 && s[3] == 28);
    CHECK_OK(pp_stage_output_shape(b, 3, &nd, s, &err), &err);
    CHECK(nd == 2 && s[0] == 3 && s[1] == 1000);
    CHECK(pp_stage_new(&cfg, 42, 5, 4, dev, &other, &err) == PP_ERR_INPUT && !other);
    CHECK(pp_stage_new(&cfg, 42, 0, 22, dev, &other, &err) == PP_ERR_INPUT && !other);
    pp_stage_free(whole);
    pp_stage_free(a);
    pp_stage_free(b);
}

/* Bytes in use on the device, less the exec's workspace (scratch that grows
 * to the largest op seen and stays with the exec). */
static int64_t used(void)
{
    return (int64_t)pp_device_bytes_in_use(dev) - (int64_t)ex.ws_bytes;
}

/* Bytes the units keep for one micro-batch, from the catalogue. */
static int64_t kept_bytes(const pp_model_config *cfg, int first, int last, int mb)
{
    pp_catalogue cat;
    pp_error err;
    CHECK_OK(pp_catalogue_build(cfg, &cat, &err), &err);
    int64_t b = pp_catalogue_kept_bytes(&cat, first, last, mb);
    pp_catalogue_free(&cat);
    return b;
}

/* cifar stem, 32x32, batch 2: two chained stages equal one stage bitwise,
 * forward and backward (input gradient and every parameter gradient). With
 * split_nhwc the two stages keep NHWC activations while every tensor they
 * exchange (input, output, gradients) is NCHW, so each converts at both ends. */
static void test_split_forward(const char *model, bool split_nhwc, const char *cut_at)
{
    pp_model_config cfg;
    pp_error err;
    CHECK_OK(pp_model_config_default(model, &cfg, &err), &err);
    cfg.stem = PP_STEM_CIFAR;
    cfg.num_classes = 10;
    cfg.image_h = cfg.image_w = 32;
    pp_catalogue cat;
    CHECK_OK(pp_catalogue_build(&cfg, &cat, &err), &err);
    const int last = cat.n - 1, cut = pp_catalogue_find(&cat, cut_at);
    pp_catalogue_free(&cat);
    pp_stage *whole = NULL, *a = NULL, *b = NULL;
    CHECK_OK(pp_stage_new(&cfg, 5, 0, last, dev, &whole, &err), &err);
    pp_model_config split = cfg;
    split.nhwc = split_nhwc;
    CHECK_OK(pp_stage_new(&split, 5, 0, cut - 1, dev, &a, &err), &err);
    CHECK_OK(pp_stage_new(&split, 5, cut, last, dev, &b, &err), &err);
    if (!whole || !a || !b) return;
    pp_tensor x, mid, y1, y2, dy, dmid, dx1, dx2;
    int nd;
    int64_t s[4];
    CHECK_OK(pp_stage_input_shape(whole, 2, &nd, s, &err), &err);
    CHECK_OK(alloc_shape(&x, nd, s, &err), &err);
    CHECK_OK(alloc_shape(&dx1, nd, s, &err), &err);
    CHECK_OK(alloc_shape(&dx2, nd, s, &err), &err);
    CHECK_OK(pp_stage_output_shape(a, 2, &nd, s, &err), &err);
    CHECK_OK(alloc_shape(&mid, nd, s, &err), &err);
    CHECK_OK(alloc_shape(&dmid, nd, s, &err), &err);
    CHECK_OK(pp_stage_output_shape(whole, 2, &nd, s, &err), &err);
    CHECK(nd == 2 && s[0] == 2 && s[1] == 10);
    CHECK_OK(alloc_shape(&y1, nd, s, &err), &err);
    CHECK_OK(alloc_shape(&y2, nd, s, &err), &err);
    CHECK_OK(alloc_shape(&dy, nd, s, &err), &err);
    float *hx = malloc(pp_tensor_bytes(&x)), hdy[20];
    fill_normal(hx, pp_tensor_numel(&x), 21, 1.0);
    fill_normal(hdy, 20, 22, 0.5);
    host_store(&x, hx);
    host_store(&dy, hdy);

    int64_t before = used();
    double t0 = now_ms();
    CHECK_OK(pp_stage_forward(whole, &ex, 0, &x, &y1, true, &err), &err);
    double t1 = now_ms();
    /* what stays is exactly what the catalogue says */
    int64_t kept = used() - before;
    CHECK_MSG(kept == kept_bytes(&cfg, 0, last, 2), "%s kept %lld, catalogue %lld", model,
              (long long)kept, (long long)kept_bytes(&cfg, 0, last, 2));
    CHECK_OK(pp_stage_forward(a, &ex, 0, &x, &mid, true, &err), &err);
    CHECK_OK(pp_stage_forward(b, &ex, 0, &mid, &y2, true, &err), &err);
    float *h1 = host_copy(&y1), *h2 = host_copy(&y2);
    CHECK_MSG(memcmp(h1, h2, pp_tensor_bytes(&y1)) == 0, "%s: split forward differs", model);
    bool finite = true;
    for (int i = 0; i < 20; i++) finite = finite && isfinite(h1[i]);
    CHECK(finite);
    free(h1);
    free(h2);

    double t2 = now_ms();
    CHECK_OK(pp_stage_backward(whole, &ex, 0, &dy, &dx1, &err), &err);
    double t3 = now_ms();
    CHECK_OK(pp_stage_backward(b, &ex, 0, &dy, &dmid, &err), &err);
    CHECK_OK(pp_stage_backward(a, &ex, 0, &dmid, &dx2, &err), &err);
    CHECK(used() == before);
    h1 = host_copy(&dx1);
    h2 = host_copy(&dx2);
    CHECK_MSG(memcmp(h1, h2, pp_tensor_bytes(&dx1)) == 0, "%s: split input gradient differs",
              model);
    free(h1);
    free(h2);
    int na = pp_stage_param_count(a), diff = 0;
    for (int i = 0; i < pp_stage_param_count(whole); i++) {
        const pp_named_tensor *w = pp_stage_param(whole, i);
        const pp_named_tensor *p = i < na ? pp_stage_param(a, i) : pp_stage_param(b, i - na);
        h1 = host_copy(w->grad);
        h2 = host_copy(p->grad);
        diff += memcmp(h1, h2, pp_tensor_bytes(w->grad)) != 0;
        free(h1);
        free(h2);
    }
    CHECK_MSG(diff == 0, "%s: %d parameter gradients differ", model, diff);
    /* running statistics moved identically, and were counted */
    const pp_named_tensor *rv_w = find_state(whole, "layer3.0.bn1.running_var");
    const pp_named_tensor *rv_b = find_state(b, "layer3.0.bn1.running_var");
    h1 = host_copy(rv_w->value);
    h2 = host_copy(rv_b->value);
    CHECK(memcmp(h1, h2, pp_tensor_bytes(rv_w->value)) == 0 && h1[0] != 1.0f);
    free(h1);
    free(h2);
    int64_t count = 0;
    CHECK_OK(pp_stage_sync_buffers(whole, &err), &err);
    CHECK_OK(pp_tensor_to_host(find_state(whole, "layer4.1.bn2.num_batches_tracked")->value, &count,
                               8, &err),
             &err);
    CHECK(count == 1);
    fprintf(stderr,
            "  %s cifar 32x32 batch 2, cut at %s%s: forward %.0f ms, backward %.0f ms, kept %.1f "
            "MB\n",
            model, cut_at, split_nhwc ? ", split stages NHWC" : "", t1 - t0, t3 - t2,
            (double)kept / 1e6);
    free(hx);
    pp_tensor *all[] = {&x, &mid, &y1, &y2, &dy, &dmid, &dx1, &dx2};
    for (int i = 0; i < 8; i++) pp_tensor_free(all[i]);
    pp_stage_free(whole);
    pp_stage_free(a);
    pp_stage_free(b);
}

/* The cost model is what forward keeps: for every unit kind, the device bytes a
 * training forward leaves allocated until backward (measured through the
 * device's accounting) equal act_bytes * N + act_fixed_bytes of pp_unit_costs,
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
        size_t before_new = pp_device_bytes_in_use(dev);
        pp_unit *u = NULL;
        CHECK_OK(pp_unit_new(spec, 1, dev, &u, &err), &err);
        if (!u) continue;
        int64_t state = 0;
        for (int i = 0; i < pp_unit_state_count(u); i++)
            state += (int64_t)pp_tensor_bytes(pp_unit_state(u, i)->value);
        CHECK_MSG(state == info.param_bytes, "%s: state %lld bytes, costed %lld", spec->name,
                  (long long)state, (long long)info.param_bytes);
        if (spec->kind != PP_UNIT_DELAY) /* + gradients of the parameters */
            CHECK(pp_device_bytes_in_use(dev) - before_new ==
                  (size_t)(info.param_bytes + 4 * info.param_count));
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
            size_t before = pp_device_bytes_in_use(dev);
            CHECK_OK(pp_unit_forward(u, &ex, 0, &x, &y, true, &err), &err);
            int64_t kept = (int64_t)(pp_device_bytes_in_use(dev) - before);
            int64_t costed = info.act_bytes * n + info.act_fixed_bytes;
            CHECK_MSG(kept == costed, "%s (%s), batch %lld: forward keeps %lld bytes, costed %lld",
                      spec->name, c < 6 ? "simple" : "block/fc/delay", (long long)n,
                      (long long)kept, (long long)costed);
            pp_unit_release(u, 0);
            CHECK(pp_device_bytes_in_use(dev) == before);
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
                size_t base = pp_device_bytes_in_use(dev);
                CHECK_OK(pp_unit_forward_shared(u, &ex, 0, xa, pp_unit_act_tensor(xa), ya,
                                                pp_unit_act_tensor(ya), true, &err),
                         &err);
                int64_t shared = 0;
                if (info.keeps_input && !moved)
                    shared += (int64_t)pp_tensor_bytes(pp_unit_act_tensor(xa));
                if (info.keeps_output) shared += (int64_t)pp_tensor_bytes(pp_unit_act_tensor(ya));
                int64_t kept_shared = (int64_t)(pp_device_bytes_in_use(dev) - base);
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
                CHECK(pp_device_bytes_in_use(dev) == base + (size_t)kept_shared -
                                                         (held_x ? 0 : pp_tensor_bytes(&x)) -
                                                         (held_y ? 0 : pp_tensor_bytes(&y)));
                pp_unit_release(u, 0);
                CHECK(pp_device_bytes_in_use(dev) == before);
            }
            pp_tensor_free(&x);
            pp_tensor_free(&y);
        }
        pp_unit_free(u);
        CHECK(pp_device_bytes_in_use(dev) == before_new);
    }
}

/* imagenet stem (max pool with saved indices), whole resnet18 at 64x64: the
 * bytes kept equal the catalogue's; a first-stage backward (no dx) frees them. */
static void test_kept_imagenet(void)
{
    pp_model_config cfg;
    pp_error err;
    CHECK_OK(pp_model_config_default("resnet18", &cfg, &err), &err);
    cfg.image_h = cfg.image_w = 64;
    pp_stage *st = NULL;
    CHECK_OK(pp_stage_new(&cfg, 3, 0, 13, dev, &st, &err), &err);
    if (!st) return;
    pp_tensor x, y;
    int nd;
    int64_t s[4];
    CHECK_OK(pp_stage_input_shape(st, 2, &nd, s, &err), &err);
    CHECK_OK(pp_tensor_zeros(&x, dev, PP_F32, nd, s, &err), &err);
    CHECK_OK(pp_stage_output_shape(st, 2, &nd, s, &err), &err);
    CHECK_OK(pp_tensor_zeros(&y, dev, PP_F32, nd, s, &err), &err);
    float *h = host_copy(&x);
    fill_normal(h, pp_tensor_numel(&x), 40, 1.0);
    host_store(&x, h);
    free(h);
    int64_t base = used();
    CHECK_OK(pp_stage_forward(st, &ex, 0, &x, &y, true, &err), &err);
    CHECK_MSG(used() - base == kept_bytes(&cfg, 0, 13, 2), "kept %lld, catalogue %lld",
              (long long)(used() - base), (long long)kept_bytes(&cfg, 0, 13, 2));
    CHECK_OK(pp_stage_backward(st, &ex, 0, &y, NULL, &err), &err);
    CHECK(used() == base);
    const pp_named_tensor *g = pp_stage_param(st, 0);
    CHECK(strcmp(g->name, "conv1.weight") == 0);
    h = host_copy(g->grad);
    double sum = 0;
    for (int64_t i = 0; i < pp_tensor_numel(g->grad); i++) sum += fabs(h[i]);
    CHECK(sum > 0 && isfinite(sum));
    free(h);
    pp_tensor_free(&x);
    pp_tensor_free(&y);
    pp_stage_free(st);
}

/* Several micro-batches in flight (as 1F1B keeps them), released in any order;
 * inference keeps nothing; misuse is reported. */
static void test_micro_batches(void)
{
    pp_model_config cfg;
    pp_error err;
    CHECK_OK(pp_model_config_default("resnet18", &cfg, &err), &err);
    cfg.stem = PP_STEM_CIFAR;
    cfg.image_h = cfg.image_w = 16;
    cfg.num_classes = 4;
    pp_stage *st = NULL;
    CHECK_OK(pp_stage_new(&cfg, 9, 4, 7, dev, &st, &err), &err); /* layer1.0 .. layer2.1 */
    if (!st) return;
    pp_tensor x[3], y[3], dy, dx;
    int nd, ynd;
    int64_t s[4], ys[4];
    const int sizes[3] = {3, 3, 2};
    for (int m = 0; m < 3; m++) {
        CHECK_OK(pp_stage_input_shape(st, sizes[m], &nd, s, &err), &err);
        CHECK_OK(pp_stage_output_shape(st, sizes[m], &ynd, ys, &err), &err);
        CHECK_OK(pp_tensor_zeros(&x[m], dev, PP_F32, nd, s, &err), &err);
        CHECK_OK(alloc_shape(&y[m], ynd, ys, &err), &err);
        float *h = host_copy(&x[m]);
        fill_normal(h, pp_tensor_numel(&x[m]), 30 + (uint64_t)m, 1.0);
        host_store(&x[m], h);
        free(h);
    }
    CHECK(ynd == 4 && ys[1] == 128 && ys[2] == 8);
    CHECK_OK(pp_stage_input_shape(st, 3, &nd, s, &err), &err);
    CHECK_OK(alloc_shape(&dx, nd, s, &err), &err);
    CHECK_OK(pp_tensor_zeros(&dy, dev, PP_F32, ynd, (int64_t[]){3, ys[1], ys[2], ys[3]}, &err),
             &err);
    int64_t base = used();
    for (int m = 0; m < 3; m++)
        CHECK_OK(pp_stage_forward(st, &ex, m, &x[m], &y[m], true, &err), &err);
    CHECK(pp_stage_in_flight(st) == 3);
    int64_t want = kept_bytes(&cfg, 4, 7, 3) * 2 + kept_bytes(&cfg, 4, 7, 2);
    CHECK_MSG(used() - base == want, "kept %lld, want %lld", (long long)(used() - base),
              (long long)want);
    /* forwarding a micro-batch still in flight is refused and changes nothing */
    CHECK(pp_stage_forward(st, &ex, 1, &x[1], &y[1], true, &err) == PP_ERR_INVALID);
    CHECK(pp_stage_in_flight(st) == 3);
    /* an inference forward keeps nothing */
    int64_t mid = used();
    CHECK_OK(pp_stage_forward(st, &ex, 1, &x[1], &y[1], false, &err), &err);
    CHECK(used() == mid);
    /* backward out of order: 1, then 0; 2 released without backward */
    CHECK_OK(pp_stage_backward(st, &ex, 1, &dy, &dx, &err), &err);
    CHECK_OK(pp_stage_backward(st, &ex, 0, &dy, NULL, &err), &err);
    CHECK(pp_stage_in_flight(st) == 1);
    CHECK(pp_stage_backward(st, &ex, 0, &dy, &dx, &err) == PP_ERR_INVALID);
    CHECK(strstr(err.msg, "micro-batch 0") != NULL);
    pp_stage_release(st, 2);
    CHECK(pp_stage_in_flight(st) == 0);
    CHECK(used() == base);
    /* wrong input channels */
    CHECK(pp_stage_forward(st, &ex, 5, &y[0], &y[1], true, &err) == PP_ERR_INVALID);
    CHECK(pp_stage_in_flight(st) == 0);
    /* num_batches_tracked counts training forwards of each micro-batch, inference excluded */
    int64_t count = 0;
    CHECK_OK(pp_stage_sync_buffers(st, &err), &err);
    CHECK_OK(pp_tensor_to_host(find_state(st, "layer2.0.downsample.1.num_batches_tracked")->value,
                               &count, 8, &err),
             &err);
    CHECK(count == 3);
    for (int m = 0; m < 3; m++) {
        pp_tensor_free(&x[m]);
        pp_tensor_free(&y[m]);
    }
    pp_tensor_free(&dx);
    pp_tensor_free(&dy);
    pp_stage_free(st);
}

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

/* ---- delay model -------------------------------------------------------------------- */

static void test_delay(void)
{
    pp_model_config cfg;
    pp_error err;
    CHECK_OK(pp_model_config_default("delay", &cfg, &err), &err);
    cfg.num_classes = 3;
    cfg.image_h = cfg.image_w = 4;
    cfg.in_channels = 2;
    cfg.n_forward_ms = cfg.n_backward_ms = 2;
    cfg.forward_ms[0] = 30;
    cfg.forward_ms[1] = 10;
    cfg.backward_ms[0] = 20;
    cfg.backward_ms[1] = 40;
    pp_stage *s0 = NULL, *s1 = NULL, *bad = NULL;
    CHECK_OK(pp_delay_stage_new(&cfg, 0, dev, &s0, &err), &err);
    CHECK_OK(pp_delay_stage_new(&cfg, 1, dev, &s1, &err), &err);
    CHECK(pp_delay_stage_new(&cfg, 2, dev, &bad, &err) == PP_ERR_INPUT && !bad);
    if (!s0 || !s1) return;
    CHECK(pp_stage_param_count(s0) == 0 && pp_stage_state_count(s1) == 0);
    int nd;
    int64_t s[4];
    CHECK_OK(pp_stage_input_shape(s0, 2, &nd, s, &err), &err);
    CHECK(nd == 4 && s[0] == 2 && s[1] == 2 && s[2] == 4 && s[3] == 4);
    CHECK_OK(pp_stage_input_shape(s1, 2, &nd, s, &err), &err);
    CHECK(nd == 2 && s[0] == 2 && s[1] == 3);
    CHECK_OK(pp_stage_output_shape(s0, 2, &nd, s, &err), &err);
    CHECK(nd == 2 && s[0] == 2 && s[1] == 3);

    pp_tensor x, a, y, dy, da, dx;
    CHECK_OK(alloc_shape(&x, 4, (int64_t[]){2, 2, 4, 4}, &err), &err);
    CHECK_OK(alloc_shape(&dx, 4, (int64_t[]){2, 2, 4, 4}, &err), &err);
    const int64_t s23[2] = {2, 3};
    CHECK_OK(alloc_shape(&a, 2, s23, &err), &err);
    CHECK_OK(alloc_shape(&da, 2, s23, &err), &err);
    CHECK_OK(alloc_shape(&y, 2, s23, &err), &err);
    CHECK_OK(alloc_shape(&dy, 2, s23, &err), &err);
    float hx[64];
    for (int i = 0; i < 64; i++) hx[i] = i < 32 ? 1.0f : (float)(i - 32) / 31.0f; /* means 1, 0.5 */
    host_store(&x, hx);

    double t0 = now_ms();
    CHECK_OK(pp_stage_forward(s0, &ex, 0, &x, &a, true, &err), &err);
    double t1 = now_ms();
    CHECK_OK(pp_stage_forward(s1, &ex, 0, &a, &y, true, &err), &err);
    double t2 = now_ms();
    float ha[6], hy[6];
    CHECK_OK(pp_tensor_to_host(&a, ha, sizeof ha, &err), &err);
    CHECK_OK(pp_tensor_to_host(&y, hy, sizeof hy, &err), &err);
    for (int n = 0; n < 2; n++) {
        double mean = n == 0 ? 1.0 : 0.5, amean = 0;
        for (int j = 0; j < 3; j++) {
            CHECK(fabs(ha[n * 3 + j] - (mean / (j + 1) + 0.01 * j)) < 1e-6);
            amean += ha[n * 3 + j] / 3.0;
        }
        for (int j = 0; j < 3; j++)
            CHECK(fabs(hy[n * 3 + j] - (amean / (j + 1) + 0.01 * j)) < 1e-5);
    }
    const float hdy[6] = {1, 2, 3, -1, 0, 6};
    host_store(&dy, hdy);
    double t3 = now_ms();
    CHECK_OK(pp_stage_backward(s1, &ex, 0, &dy, &da, &err), &err);
    double t4 = now_ms();
    CHECK_OK(pp_stage_backward(s0, &ex, 0, &da, &dx, &err), &err);
    double t5 = now_ms();
    float hda[6], hdx[64];
    CHECK_OK(pp_tensor_to_host(&da, hda, sizeof hda, &err), &err);
    CHECK_OK(pp_tensor_to_host(&dx, hdx, sizeof hdx, &err), &err);
    for (int n = 0; n < 2; n++) {
        double g = 0, gx = 0;
        for (int j = 0; j < 3; j++) g += hdy[n * 3 + j] / (j + 1.0);
        for (int j = 0; j < 3; j++) {
            CHECK(fabs(hda[n * 3 + j] - g / 3.0) < 1e-6);
            gx += hda[n * 3 + j] / (j + 1.0);
        }
        CHECK(fabs(hdx[n * 32] - gx / 32.0) < 1e-6 && hdx[n * 32 + 31] == hdx[n * 32]);
    }
    /* the first stage's backward may skip dx */
    CHECK_OK(pp_stage_forward(s0, &ex, 1, &x, &a, true, &err), &err);
    CHECK_OK(pp_stage_backward(s0, &ex, 1, &da, NULL, &err), &err);
    CHECK(pp_stage_in_flight(s0) == 0 && pp_stage_in_flight(s1) == 0);
    const double want[4] = {30, 10, 40, 20};
    const double got[4] = {t1 - t0, t2 - t1, t4 - t3, t5 - t4};
    /* at least the delay; the upper bound only catches a wrong unit (a
     * loaded machine can hold a thread back by far more than the delay) */
    for (int i = 0; i < 4; i++)
        CHECK_MSG(got[i] >= want[i] - 0.5 && got[i] < 10 * want[i] + 250,
                  "delay %d: %.1f ms, want %.0f", i, got[i], want[i]);
    fprintf(stderr, "  delay: forward %.1f, %.1f ms; backward %.1f, %.1f ms\n", got[0], got[1],
            got[2], got[3]);
    pp_tensor *all[] = {&x, &a, &y, &dy, &da, &dx};
    for (int i = 0; i < 6; i++) pp_tensor_free(all[i]);
    pp_stage_free(s0);
    pp_stage_free(s1);
    /* a single value applies to every stage */
    cfg.n_forward_ms = cfg.n_backward_ms = 1;
    CHECK_OK(pp_delay_stage_new(&cfg, 7, dev, &s1, &err), &err);
    pp_stage_free(s1);
    cfg.forward_ms[0] = -1;
    CHECK(pp_delay_stage_new(&cfg, 0, dev, &s1, &err) == PP_ERR_INPUT);
    cfg.forward_ms[0] = 1;
    cfg.kind = PP_MODEL_RESNET;
    CHECK(pp_delay_stage_new(&cfg, 0, dev, &s1, &err) == PP_ERR_INPUT);
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
    test_unit_specs();
    test_catalogue_counts();
    test_finite_differences();
    test_bn_running_stats();
    test_micro_batches();
    test_kept_imagenet();
    test_costs_match_forward();
    test_state_dict();
    test_zero_init_residual();
    test_split_init();
    test_split_forward("resnet18", false, "layer3.0");
    test_split_forward("resnet50", false, "layer3.0");
    test_split_forward("resnet18", true, "layer3.0");
    /* cut between bn1 and relu: the whole stage runs them as one, the split
     * stages apart */
    test_split_forward("resnet18", false, "relu");
    test_split_forward("resnet18", true, "relu");
    test_delay();
    pp_exec_destroy(&ex);
    pp_registry_free(reg);
    return check_summary("models");
}
