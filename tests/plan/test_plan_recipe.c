/*
 * test_plan_recipe.c - the training recipe's plan keys (docs/PLAN.md):
 * optimizer type adamw with torch.optim.AdamW's defaults and no decay on
 * biases and batch norms, betas and eps, the decay groups of either type,
 * clip_grad_norm, loss.label_smoothing and batch.deferred_batch_norm: each
 * parses to its field and survives emit -> parse -> equal; every misuse is
 * a problem at its FILE:LINE:COL; deferral is a step key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/emit.h"
#include "partitioner/plan.h"
#include "tests/check.h"

static char g_name[4096];

#define STAGES                                                                                     \
    "stages:\n"                                                                                    \
    "  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2]}\n"                  \
    "  - {device: cpu:1, layers: [layer3, layer4, avgpool, fc]}\n"
#define BASE "model: {name: resnet18}\nbatch: {size: 8, split_size: 4}\n" STAGES
#define DEFERRED(v)                                                                                \
    "model: {name: resnet18}\nbatch: {size: 8, split_size: 4, deferred_batch_norm: " v "}\n" STAGES

static pp_status parse(const char *text, pp_plan **out, pp_diag *d)
{
    pp_diag_clear(d);
    return pp_plan_parse_string(g_name, text, strlen(text), out, d);
}

static void round_trip(const char *label, const pp_plan *p)
{
    pp_error err;
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(pp_plan_emit(p, &text, &len, &err), &err);
    if (!text) return;
    pp_plan *q = NULL;
    pp_diag d;
    char why[256] = "";
    CHECK_MSG(parse(text, &q, &d) == PP_OK && pp_plan_equal(p, q, why, sizeof why),
              "[%s] round trip: %s\n%s", label, why, text);
    pp_plan_free(q);
    free(text);
}

static void test_good(void)
{
    static const struct {
        const char *name, *extra;
        int type;
        double lr, wd, b1, b2, eps, norm_wd, bias_wd, clip, smoothing;
        bool has_norm, has_bias, deferred;
    } cases[] = {
        {"defaults", "", 0, 0.1, 0, 0.9, 0.999, 1e-8, 0, 0, 0, 0, false, false, false},
        {"adamw defaults", "optimizer: {type: adamw}\n", 1, 1e-3, 0.01, 0.9, 0.999, 1e-8, 0, 0, 0,
         0, true, true, false},
        {"adamw recipe",
         "optimizer: {type: adamw, lr: 6.0e-4, betas: [0.9, 0.95], eps: 1.0e-6, weight_decay: 0.1, "
         "clip_grad_norm: 1.0, bias_weight_decay: 0.05}\nloss: {label_smoothing: 0.1}\n",
         1, 6e-4, 0.1, 0.9, 0.95, 1e-6, 0, 0.05, 1.0, 0.1, true, true, false},
        {"sgd groups",
         "optimizer: {lr: 0.5, momentum: 0.9, weight_decay: 2.0e-5, norm_weight_decay: 0.0}\n"
         "loss: {label_smoothing: 0.0}\n",
         0, 0.5, 2e-5, 0.9, 0.999, 1e-8, 0, 0, 0, 0, true, false, false},
        {"deferred", "optimizer: {clip_grad_norm: 5}\n", 0, 0.1, 0, 0.9, 0.999, 1e-8, 0, 0, 5, 0,
         false, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%s%s", cases[i].deferred ? DEFERRED("true") : BASE,
                 cases[i].extra);
        pp_plan *p = NULL;
        pp_diag d;
        char msg[1024];
        CHECK_MSG(parse(text, &p, &d) == PP_OK, "[%s] %s", cases[i].name,
                  pp_diag_format(&d, msg, sizeof msg));
        if (!p) continue;
        const pp_plan_sgd *o = &p->optimizer;
        CHECK_MSG((int)o->type == cases[i].type && o->lr == cases[i].lr &&
                      o->weight_decay == cases[i].wd && o->beta1 == cases[i].b1 &&
                      o->beta2 == cases[i].b2 && o->eps == cases[i].eps &&
                      o->has_norm_weight_decay == cases[i].has_norm &&
                      o->norm_weight_decay == cases[i].norm_wd &&
                      o->has_bias_weight_decay == cases[i].has_bias &&
                      o->bias_weight_decay == cases[i].bias_wd &&
                      o->clip_grad_norm == cases[i].clip &&
                      p->loss.label_smoothing == cases[i].smoothing &&
                      p->deferred_batch_norm == cases[i].deferred,
                  "[%s] fields differ", cases[i].name);
        round_trip(cases[i].name, p);
        pp_plan_free(p);
    }
}

static void test_bad(void)
{
    static const struct {
        const char *name, *extra;
        int line, col;
        const char *fragment;
    } cases[] = {
        {"momentum with adamw", "optimizer: {type: adamw, momentum: 0.9}\n", 6, 36,
         "optimizer.momentum applies to type sgd only"},
        {"nesterov with adamw", "optimizer: {type: adamw, nesterov: true}\n", 6, 36,
         "optimizer.nesterov applies to type sgd only"},
        {"betas with sgd", "optimizer: {betas: [0.9, 0.99]}\n", 6, 20,
         "optimizer.betas applies to type adamw only"},
        {"eps with sgd", "optimizer: {eps: 1.0e-8}\n", 6, 18,
         "optimizer.eps applies to type adamw"},
        {"one beta", "optimizer: {type: adamw, betas: [0.9]}\n", 6, 33,
         "optimizer.betas must be a list of two numbers"},
        {"beta of 1", "optimizer: {type: adamw, betas: [0.9, 1.0]}\n", 6, 39,
         "optimizer.betas[1] must be below 1"},
        {"negative beta", "optimizer: {type: adamw, betas: [-0.1, 0.9]}\n", 6, 34, "betas[0]"},
        {"negative eps", "optimizer: {type: adamw, eps: -1}\n", 6, 31, "optimizer.eps"},
        {"clip zero", "optimizer: {clip_grad_norm: 0}\n", 6, 29,
         "optimizer.clip_grad_norm must be above 0"},
        {"clip text", "optimizer: {clip_grad_norm: big}\n", 6, 29, "optimizer.clip_grad_norm"},
        {"negative norm decay", "optimizer: {norm_weight_decay: -1}\n", 6, 32,
         "optimizer.norm_weight_decay"},
        {"negative bias decay", "optimizer: {bias_weight_decay: -1}\n", 6, 32,
         "optimizer.bias_weight_decay"},
        {"smoothing 1", "loss: {label_smoothing: 1.0}\n", 6, 25,
         "loss.label_smoothing must be below 1"},
        {"smoothing negative", "loss: {label_smoothing: -0.1}\n", 6, 25, "loss.label_smoothing"},
        {"unknown loss key", "loss: {smoothing: 0.1}\n", 6, 8, "smoothing"},
        {"loss not a map", "loss: 0.1\n", 6, 7, "loss"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%s%s", BASE, cases[i].extra);
        pp_plan *p = NULL;
        pp_diag d;
        pp_status s = parse(text, &p, &d);
        CHECK_MSG(s == PP_ERR_INPUT && d.count >= 1, "[%s] status %s", cases[i].name,
                  pp_status_name(s));
        pp_plan_free(p);
        if (d.count < 1) continue;
        const pp_diag_item *it = &d.items[0];
        CHECK_MSG(it->line == cases[i].line && it->col == cases[i].col &&
                      strstr(it->text, cases[i].fragment),
                  "[%s] %d:%d '%s', expected %d:%d '%s'", cases[i].name, it->line, it->col,
                  it->text, cases[i].line, cases[i].col, cases[i].fragment);
    }
    /* the deferred key must be a boolean, at its mark */
    pp_plan *p = NULL;
    pp_diag d;
    const char *text = DEFERRED("maybe");
    const int col = (int)(strstr(text, "maybe") - strstr(text, "batch:")) + 1;
    CHECK(parse(text, &p, &d) == PP_ERR_INPUT && d.count >= 1 && d.items[0].line == 2 &&
          d.items[0].col == col && strstr(d.items[0].text, "batch.deferred_batch_norm"));
    pp_plan_free(p);
}

/* batch.deferred_batch_norm is a step key when on (it changes the running statistics a
 * step leaves), absent when off */
static void test_step_key(void)
{
    for (int on = 0; on < 2; on++) {
        pp_plan *p = NULL;
        pp_diag d;
        pp_error err;
        pp_plan_step_keys k = {0};
        CHECK(parse(on ? DEFERRED("true") : BASE, &p, &d) == PP_OK);
        if (!p) continue;
        CHECK_OK(pp_plan_step_keys_get(p, &k, &err), &err);
        int found = -1;
        for (int i = 0; i < k.n; i++)
            if (strcmp(k.keys[i], "batch.deferred_batch_norm") == 0) found = i;
        CHECK_MSG(on ? found >= 0 && strcmp(k.values[found], "true") == 0 : found < 0,
                  "step key batch.deferred_batch_norm with deferral %s", on ? "on" : "off");
        pp_plan_step_keys_free(&k);
        pp_plan_free(p);
    }
}

int main(int argc, char **argv)
{
    snprintf(g_name, sizeof g_name, "%s/inline.yaml", argc > 1 ? argv[1] : ".");
    test_good();
    test_bad();
    test_step_key();
    return check_summary("test_plan_recipe");
}
