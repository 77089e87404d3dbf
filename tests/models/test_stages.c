/*
 * test_stages.c - ResNet stages running on the CPU backend: two chained
 * stages equal one bitwise (forward, backward, running statistics; cut
 * inside a block's stem or between blocks, NCHW or NHWC inside), the bytes
 * a training forward keeps equal the catalogue's, several micro-batches in
 * flight released in any order. (Units one at a time: test_units.c; the
 * models as built: test_models.c.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/catalogue.h"
#include "models/resnet.h"
#include "models/stage.h"
#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/models/model_rig.h"

/* ---- helpers ------------------------------------------------------------------------ */

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

/* ---- split invariance ------------------------------------------------------------- */

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

/* ---- memory kept, micro-batches ---------------------------------------------------- */

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

int main(void)
{
    model_rig_open();
    test_micro_batches();
    test_kept_imagenet();
    test_split_forward("resnet18", false, "layer3.0");
    test_split_forward("resnet50", false, "layer3.0");
    test_split_forward("resnet18", true, "layer3.0");
    /* cut between bn1 and relu: the whole stage runs them as one, the split
     * stages apart */
    test_split_forward("resnet18", false, "relu");
    test_split_forward("resnet18", true, "relu");
    return model_rig_close("stages");
}
