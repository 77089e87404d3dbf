/*
 * test_epochs.c - the pipeline over epochs on the CPU backend:
 *   - epochs and evaluation: every epoch is one pass with a partial last
 *     batch, the learning-rate schedule changes per epoch, the forward-only
 *     evaluation changes no state, and 1, 2 and 4 stages (reading batches on
 *     1, 3 and the default number of threads) agree bitwise on losses, test
 *     results and checkpoints;
 *   - graphs: steps replayed from captured graphs (the CPU's recorded ones)
 *     equal eager steps bitwise over epochs with a partial last batch and a
 *     learning-rate schedule, in fp32 and in bf16 NHWC.
 *
 * Arguments name the parts to run ("epochs", "graphs", "graphs-bf16"; every
 * part without any).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partitioner/plan.h"
#include "pipeline/pipeline.h"
#include "tests/check.h"

static char tmpdir[200];

/* n images 1x12x12 whose pixels depend on the label (learnable), and labels. */
static void write_set(const char *images, const char *labels, int n, int seed)
{
    unsigned char *img = malloc((size_t)n * 144), *lab = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        lab[i] = (unsigned char)((i * 7 + seed) % 4);
        for (int k = 0; k < 144; k++)
            img[i * 144 + k] = (unsigned char)((k % 12 < 3 * (lab[i] + 1) ? 180 : 40) +
                                               (i * 31 + k * 17 + seed) % 50);
    }
    const uint32_t u = (uint32_t)n;
    CHECK(check_write_idx(images, 3, (uint32_t[]){u, 12, 12}, img, (size_t)n * 144) == 0);
    CHECK(check_write_idx(labels, 1, (uint32_t[]){u}, lab, (size_t)n) == 0);
    free(img);
    free(lab);
}

static void test_epochs_eval(void)
{
    char ti[256], tl[256], ei[256], el[256];
    snprintf(ti, sizeof ti, "%s/train-images.idx", tmpdir);
    snprintf(tl, sizeof tl, "%s/train-labels.idx", tmpdir);
    snprintf(ei, sizeof ei, "%s/test-images.idx", tmpdir);
    snprintf(el, sizeof el, "%s/test-labels.idx", tmpdir);
    write_set(ti, tl, 50, 1);
    write_set(ei, el, 30, 2);
    static const char *const stages[3] = {
        "  - device: cpu:0\n    layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, "
        "layer4, avgpool, fc]\n",
        "  - device: cpu:0\n    layers: [conv1, bn1, relu, maxpool, layer1, layer2]\n"
        "  - device: cpu:1\n    layers: [layer3, layer4, avgpool, fc]\n",
        "  - device: cpu:0\n    layers: [conv1, bn1, relu]\n"
        "  - device: cpu:1\n    layers: [maxpool, layer1]\n"
        "  - device: cpu:2\n    layers: [layer2, layer3]\n"
        "  - device: cpu:3\n    layers: [layer4, avgpool, fc]\n",
    };
    enum { STEPS = 8 };
    double ref_loss[STEPS] = {0}, ref_test[2][2] = {{0}};
    unsigned char *ref = NULL;
    size_t ref_n = 0;
    for (int k = 0; k < 3; k++) {
        char text[4096], path[256];
        snprintf(text, sizeof text,
                 "model: {name: resnet18, num_classes: 4, in_channels: 1, stem: cifar}\n"
                 "batch: {size: 16, split_size: 5}\n"
                 "schedule: %s\n"
                 "optimizer:\n  lr: 0.02\n  momentum: 0.9\n"
                 "  lr_schedule: {type: step, milestones: [1], gamma: 0.5}\n"
                 "data: {format: idx, images: %s, labels: %s, shuffle: true}\n"
                 "seed: 4\nepochs: 2\n"
                 "eval: {images: %s, labels: %s, batch_size: 7}\n"
                 "stages:\n%s",
                 k == 2 ? "gpipe" : "1f1b", ti, tl, ei, el, stages[k]);
        pp_plan *plan = NULL;
        pp_diag diag;
        char buf[4096];
        CHECK_MSG(pp_plan_parse_string("epochs.yaml", text, strlen(text), &plan, &diag) == PP_OK,
                  "plan: %s", pp_diag_format(&diag, buf, sizeof buf));
        if (!plan) continue;
        CHECK(plan->epochs == 2 && plan->steps == 0 && plan->eval.enabled &&
              plan->eval.batch_size == 7);
        pp_error err;
        pp_pipeline *p = NULL;
        if (k == 0) { /* a malformed read thread count is refused */
            setenv("PP_READ_THREADS", "zero", 1);
            CHECK(pp_pipeline_new(plan, NULL, &p, &err) == PP_ERR_INPUT && !p &&
                  strstr(err.msg, "PP_READ_THREADS"));
        }
        /* batches read on 1, 3 and the default number of threads agree */
        if (k < 2)
            setenv("PP_READ_THREADS", k == 0 ? "1" : "3", 1);
        else
            unsetenv("PP_READ_THREADS");
        CHECK_OK(pp_pipeline_new(plan, NULL, &p, &err), &err);
        if (!p) {
            pp_plan_free(plan);
            continue;
        }
        CHECK(pp_pipeline_steps_per_epoch(p) == 4 && pp_pipeline_has_eval(p));
        static const int batches[4] = {16, 16, 16, 2};
        for (int i = 0; i < STEPS; i++) {
            pp_step_result r;
            CHECK_OK(pp_pipeline_step(p, &r, &err), &err);
            CHECK_MSG(r.batch == batches[i % 4] && r.epoch == i / 4 &&
                          r.epoch_end == (i % 4 == 3) && r.lr == (i < 4 ? 0.02 : 0.01),
                      "step %d: batch %d epoch %lld lr %g", i, r.batch, (long long)r.epoch, r.lr);
            if (k == 0) ref_loss[i] = r.loss;
            else CHECK_MSG(r.loss == ref_loss[i], "%d stages step %d: loss %.9g vs %.9g",
                           plan->n_stages, i, r.loss, ref_loss[i]);
            if (i % 4 != 3) continue;
            pp_eval_result e1, e2;
            CHECK_OK(pp_pipeline_evaluate(p, &e1, &err), &err);
            CHECK_OK(pp_pipeline_evaluate(p, &e2, &err), &err);
            CHECK(e1.samples == 30 && e1.loss == e2.loss && e1.accuracy == e2.accuracy);
            CHECK(e1.loss > 0 && e1.accuracy >= 0 && e1.accuracy <= 1);
            if (k == 0) {
                ref_test[i / 4][0] = e1.loss;
                ref_test[i / 4][1] = e1.accuracy;
            } else {
                CHECK_MSG(e1.loss == ref_test[i / 4][0] && e1.accuracy == ref_test[i / 4][1],
                          "%d stages epoch %d: test loss %.9g acc %g vs %.9g %g", plan->n_stages,
                          i / 4, e1.loss, e1.accuracy, ref_test[i / 4][0], ref_test[i / 4][1]);
            }
        }
        fprintf(stderr, "epochs: %d stage%s, loss %.4f -> %.4f, test loss %.4f acc %.2f\n",
                plan->n_stages, plan->n_stages == 1 ? "" : "s", ref_loss[0], ref_loss[STEPS - 1],
                ref_test[1][0], ref_test[1][1]);
        /* evaluation leaves no trace: the checkpoint equals the 1-stage one */
        snprintf(path, sizeof path, "%s/epochs%d.safetensors", tmpdir, k);
        CHECK_OK(pp_pipeline_save(p, path, true, &err), &err);
        size_t n = 0;
        unsigned char *bytes = check_read_file(path, &n);
        if (k == 0) {
            ref = bytes;
            ref_n = n;
        } else {
            CHECK_MSG(bytes && n == ref_n && memcmp(bytes, ref, n) == 0,
                      "%d stages: checkpoint after 2 epochs differs from 1 stage", plan->n_stages);
            free(bytes);
        }
        unlink(path);
        pp_pipeline_free(p);
        pp_plan_free(plan);
    }
    /* It learns: the first epoch's full batches' loss falls (to ~0.59 of the
     * first with OpenBLAS's AVX2, AVX-512, AVX and SSE3 kernels alike). The
     * test accuracy after 8 steps of batches of 16 and 2 is not held: the
     * batch norms' running statistics, which the evaluation uses, are still
     * half their initial values, and the kernels' rounding decides it
     * (0.23 to 0.77). */
    CHECK_MSG(ref_loss[2] < 0.8 * ref_loss[0], "the first epoch's loss falls: %.4f, %.4f, %.4f",
              ref_loss[0], ref_loss[1], ref_loss[2]);
    free(ref);
    unlink(ti);
    unlink(tl);
    unlink(ei);
    unlink(el);
}

/* Graph replay (pp_pipeline_options.graphs FORCE: the CPU's recorded graphs)
 * against eager steps over three epochs of a partial last batch, with a
 * learning-rate schedule changing each epoch and an evaluation after each:
 * every loss, test result and the final checkpoint bitwise equal; each
 * (batch size, input buffer set) is captured at its second step and replayed
 * after. The plan's
 * cuda_graphs switch is accepted on CPU stages and reported not applicable.
 * Run in fp32, and in bf16 with NHWC activations (weight copies made in the
 * captured step, layout conversions at the stages' ends). */
static void test_graphs(const char *precision, pp_pipeline_layout layout)
{
    char ti[256], tl[256], ei[256], el[256];
    snprintf(ti, sizeof ti, "%s/g-train-images.idx", tmpdir);
    snprintf(tl, sizeof tl, "%s/g-train-labels.idx", tmpdir);
    snprintf(ei, sizeof ei, "%s/g-test-images.idx", tmpdir);
    snprintf(el, sizeof el, "%s/g-test-labels.idx", tmpdir);
    write_set(ti, tl, 34, 5);
    write_set(ei, el, 12, 6);
    enum { STEPS = 9 }; /* 3 epochs of 16, 16, 2 */
    double loss[2][STEPS] = {{0}}, test[2][3][2] = {{{0}}};
    unsigned char *ckpt[2] = {NULL, NULL};
    size_t ckpt_n[2] = {0, 0};
    static const pp_pipeline_graphs modes[3] = {PP_PIPELINE_GRAPHS_OFF, PP_PIPELINE_GRAPHS_FORCE,
                                                PP_PIPELINE_GRAPHS_PLAN};
    for (int k = 0; k < 3; k++) {
        char text[4096], path[256];
        snprintf(text, sizeof text,
                 "model: {name: resnet18, num_classes: 4, in_channels: 1, stem: cifar}\n"
                 "batch: {size: 16, split_size: 5}\n"
                 "schedule: 1f1b\n"
                 "precision: %s\n"
                 "cuda_graphs: %s\n"
                 "optimizer:\n  lr: 0.05\n  momentum: 0.9\n  weight_decay: 0.0001\n"
                 "  lr_schedule: {type: step, milestones: [1, 2], gamma: 0.5}\n"
                 "data: {format: idx, images: %s, labels: %s, shuffle: true}\n"
                 "seed: 7\nepochs: 3\n"
                 "eval: {images: %s, labels: %s, batch_size: 5}\n"
                 "stages:\n"
                 "  - device: cpu:0\n    layers: [conv1, bn1, relu, maxpool, layer1, layer2]\n"
                 "  - device: cpu:1\n    layers: [layer3, layer4, avgpool, fc]\n",
                 precision, k == 2 ? "on" : "off", ti, tl, ei, el);
        pp_plan *plan = NULL;
        pp_diag diag;
        char buf[4096];
        CHECK_MSG(pp_plan_parse_string("graphs.yaml", text, strlen(text), &plan, &diag) == PP_OK,
                  "plan: %s", pp_diag_format(&diag, buf, sizeof buf));
        if (!plan) continue;
        CHECK(plan->cuda_graphs == (k == 2));
        pp_error err;
        pp_pipeline *p = NULL;
        pp_pipeline_options opts = {.graphs = modes[k], .layout = layout};
        CHECK_OK(pp_pipeline_new(plan, &opts, &p, &err), &err);
        if (!p) {
            pp_plan_free(plan);
            continue;
        }
        int r = k == 1 ? 1 : 0; /* results row: eager or replayed */
        for (int i = 0; i < STEPS && k < 2; i++) {
            pp_step_result res;
            CHECK_OK(pp_pipeline_step(p, &res, &err), &err);
            CHECK(res.batch == (i % 3 == 2 ? 2 : 16) && res.lr == 0.05 / (1 << (i / 3)));
            loss[r][i] = res.loss;
            if (i % 3 != 2) continue;
            pp_eval_result e;
            CHECK_OK(pp_pipeline_evaluate(p, &e, &err), &err);
            CHECK(e.samples == 12);
            test[r][i / 3][0] = e.loss;
            test[r][i / 3][1] = e.accuracy;
        }
        pp_pipeline_report rep;
        if (k == 2) { /* CPU stages: the plan's switch is not applicable */
            pp_step_result res;
            for (int i = 0; i < 3; i++) CHECK_OK(pp_pipeline_step(p, &res, &err), &err);
            pp_pipeline_report_get(p, &rep);
            CHECK_MSG(!strcmp(rep.graphs, "n/a") && rep.graph_launches == 0, "graphs %s",
                      rep.graphs);
        } else {
            pp_pipeline_report_get(p, &rep);
            CHECK_MSG(!strcmp(rep.graphs, k ? "on" : "n/a"), "graphs %s", rep.graphs);
            /* keys (batch, host buffer set), sets alternating step by step:
             * F0 F1 T0 | F1 F0 T1 | F0 F1 T0: captured F1 F0 T0, replayed F0 F1 */
            CHECK_MSG(rep.graph_captures == 3 * k && rep.graph_replays == 2 * k &&
                          rep.graph_launches == 5 * k && rep.graph_refusal == NULL,
                      "mode %d: %d captured, %d replayed, %d launches", k, rep.graph_captures,
                      rep.graph_replays, rep.graph_launches);
            snprintf(path, sizeof path, "%s/graphs%d.safetensors", tmpdir, k);
            CHECK_OK(pp_pipeline_save(p, path, true, &err), &err);
            ckpt[k] = check_read_file(path, &ckpt_n[k]);
            unlink(path);
        }
        pp_pipeline_free(p);
        pp_plan_free(plan);
    }
    for (int i = 0; i < STEPS; i++)
        CHECK_MSG(loss[0][i] == loss[1][i] && loss[0][i] > 0,
                  "step %d: loss %.9g eager, %.9g replayed", i, loss[0][i], loss[1][i]);
    for (int e = 0; e < 3; e++)
        CHECK_MSG(test[0][e][0] == test[1][e][0] && test[0][e][1] == test[1][e][1],
                  "epoch %d: test loss %.9g vs %.9g", e, test[0][e][0], test[1][e][0]);
    CHECK_MSG(ckpt[0] && ckpt[1] && ckpt_n[0] == ckpt_n[1] &&
                  memcmp(ckpt[0], ckpt[1], ckpt_n[0]) == 0,
              "checkpoint after replayed steps differs from eager");
    fprintf(stderr, "graphs (%s%s): 9 steps replayed as eager, loss %.4f -> %.4f, test acc %.2f\n",
            precision, layout == PP_PIPELINE_LAYOUT_NHWC ? " NHWC" : "", loss[1][0],
            loss[1][STEPS - 1], test[1][2][1]);
    free(ckpt[0]);
    free(ckpt[1]);
    unlink(ti);
    unlink(tl);
    unlink(ei);
    unlink(el);
}


static bool wants(int argc, char **argv, const char *part)
{
    if (argc < 2) return true;
    for (int k = 1; k < argc; k++)
        if (!strcmp(argv[k], part)) return true;
    return false;
}

int main(int argc, char **argv)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "pp-epochs")) return 1;
    if (wants(argc, argv, "epochs")) test_epochs_eval();
    if (wants(argc, argv, "graphs")) test_graphs("fp32", PP_PIPELINE_LAYOUT_AUTO);
    if (wants(argc, argv, "graphs-bf16")) test_graphs("bf16", PP_PIPELINE_LAYOUT_NHWC);
    rmdir(tmpdir);
    return check_summary("epochs");
}
