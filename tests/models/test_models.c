/*
 * test_models.c - the models as built on the CPU backend: the catalogue's
 * torchvision parameter counts, FLOPs and bytes per unit, state_dict names
 * and initialisation (zero_init_residual too), split invariance of the
 * initialisation, the delay model's stages. (Units one at a time:
 * test_units.c; stages running: test_stages.c.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/catalogue.h"
#include "models/delay.h"
#include "models/stage.h"
#include "runtime/core/device.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/models/model_rig.h"

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

int main(void)
{
    model_rig_open();
    test_catalogue_counts();
    test_state_dict();
    test_zero_init_residual();
    test_split_init();
    test_delay();
    return model_rig_close("models");
}
