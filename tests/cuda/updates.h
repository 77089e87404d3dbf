/*
 * updates.h - what the CUDA-against-CPU training tests share
 * (test_cuda_pipeline.c, test_cuda_gpt2.c): a plan trained for a few steps
 * from a checkpoint, and checkpoints compared by what the steps changed.
 *
 * What is compared is what the steps changed, not the tensors themselves
 * (with a small learning rate the tensors are nearly their initial values,
 * and a comparison of values could not fail): for every parameter and
 * running statistic, update = value after the steps - initial value; for the
 * momentum buffers (pure gradient sums) the buffers; per tensor the
 * norm-wise relative difference, held to NUDGE_K times what the conditioning
 * yardstick (nudge.h) moved the same tensor, and at least FLOOR.
 * Header-only (static functions): the checks count in the including test's
 * summary.
 */
#ifndef PP_TESTS_CUDA_UPDATES_H
#define PP_TESTS_CUDA_UPDATES_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/plan.h"
#include "pipeline/pipeline.h"
#include "runtime/io/checkpoint.h"
#include "tests/check.h"

#define FLOOR 1e-3 /* a figure's least tolerance (fp32 sums in other orders: ~1e-5) */
#define NUDGE_K 10 /* PyTorch's fp32 step against float64: up to 3x its nudge */

/* What the last updates_run's report said of CUDA graphs: "on", "off" or
 * "n/a", the steps that replayed a graph, and why graphs were off ("" when
 * not). */
static struct {
    char graphs[8], why[256];
    int replays;
} updates_graphs;

/* Trains the plan text for steps steps (at most 8), from the checkpoint
 * load when it is not NULL, saving the initial state to init_path first
 * when it is not NULL and the final one to path; fills the losses and
 * updates_graphs. */
static void updates_run(const char *text, int steps, const char *init_path, const char *load,
                        const char *path, double *losses)
{
    memset(&updates_graphs, 0, sizeof updates_graphs);
    pp_plan *plan = NULL;
    pp_diag diag;
    pp_error err;
    char buf[4096];
    CHECK_MSG(pp_plan_parse_string("cuda.yaml", text, strlen(text), &plan, &diag) == PP_OK,
              "plan: %s", pp_diag_format(&diag, buf, sizeof buf));
    if (!plan) return;
    pp_pipeline *p = NULL;
    CHECK_OK(pp_pipeline_new(plan, NULL, &p, &err), &err);
    if (p && init_path) CHECK_OK(pp_pipeline_save(p, init_path, true, &err), &err);
    if (p && load) CHECK_OK(pp_pipeline_load(p, load, &err), &err);
    for (int i = 0; p && i < steps; i++) {
        pp_step_result r;
        CHECK_OK(pp_pipeline_step(p, &r, &err), &err);
        losses[i] = r.loss;
    }
    if (p) {
        pp_pipeline_report rep;
        pp_pipeline_report_get(p, &rep);
        snprintf(updates_graphs.graphs, sizeof updates_graphs.graphs, "%s",
                 rep.graphs ? rep.graphs : "?");
        snprintf(updates_graphs.why, sizeof updates_graphs.why, "%s",
                 rep.graph_refusal ? rep.graph_refusal : "");
        updates_graphs.replays = rep.graph_replays;
        CHECK_OK(pp_pipeline_save(p, path, true, &err), &err);
    }
    pp_pipeline_free(p);
    pp_plan_free(plan);
}

/* Reads tensor i of a checkpoint (malloc'd; NULL on failure). */
static unsigned char *read_entry(FILE *f, const pp_checkpoint_info *info, size_t i)
{
    const pp_checkpoint_entry *e = &info->entries[i];
    size_t bytes = (size_t)(e->end - e->begin);
    unsigned char *d = malloc(bytes + 1);
    if (d && fseek(f, (long)(info->data_offset + e->begin), SEEK_SET) == 0 &&
        fread(d, 1, bytes, f) == bytes)
        return d;
    free(d);
    return NULL;
}

/* The worst tensor of a comparison: its figure over its tolerance, the
 * figure, the yardstick's. */
typedef struct diff {
    double ratio, rel, yard;
    char name[96];
} diff;

/* Norm-wise relative difference of tensor i's update in checkpoint x against
 * y's (x - init against y - init; momentum buffers, "optimizer.*", as they
 * are); -1 when unreadable or not f32 (I64 tensors must then be equal). */
static double entry_rel(FILE *fx, const pp_checkpoint_info *ix, FILE *fy,
                        const pp_checkpoint_info *iy, FILE *f0, const pp_checkpoint_info *i0,
                        size_t i)
{
    const pp_checkpoint_entry *ex = &ix->entries[i], *ey = &iy->entries[i];
    CHECK(strcmp(ex->name, ey->name) == 0 && ex->end - ex->begin == ey->end - ey->begin);
    size_t bytes = (size_t)(ex->end - ex->begin);
    unsigned char *dx = read_entry(fx, ix, i), *dy = read_entry(fy, iy, i), *d0 = NULL;
    bool momentum = strncmp(ex->name, "optimizer.", 10) == 0;
    for (size_t j = 0; !momentum && j < i0->n; j++)
        if (strcmp(i0->entries[j].name, ex->name) == 0) d0 = read_entry(f0, i0, j);
    CHECK_MSG(dx && dy && (momentum || d0), "%s: cannot read", ex->name);
    double rel = -1;
    if (dx && dy && (momentum || d0) && ex->dtype == PP_F32) {
        const float *x = (const float *)dx, *y = (const float *)dy, *z = (const float *)d0;
        double num = 0, den = 0;
        for (size_t k = 0; k < bytes / 4; k++) {
            double ux = z ? (double)x[k] - z[k] : x[k], uy = z ? (double)y[k] - z[k] : y[k];
            num += (ux - uy) * (ux - uy);
            den += uy * uy;
        }
        rel = den > 0 ? sqrt(num / den) : sqrt(num);
        if (isnan(rel)) rel = INFINITY;
    } else if (dx && dy) {
        CHECK_MSG(memcmp(dx, dy, bytes) == 0, "%s differs", ex->name);
    }
    free(dx);
    free(dy);
    free(d0);
    return rel;
}

/* Compares the updates of checkpoints a and b (from init), tensor by tensor,
 * against a yardstick (ya against yb, from init too: e.g. the nudged CPU run
 * against the CPU run): each tensor's figure is divided by its tolerance
 * max(FLOOR, NUDGE_K * the yardstick's figure). Returns the worst tensor. */
static diff compare_with(const char *a, const char *b, const char *init, const char *ya,
                         const char *yb)
{
    diff w = {0, 0, 0, ""};
    pp_checkpoint_info ia, ib, i0, iya, iyb;
    pp_error err;
    CHECK_OK(pp_checkpoint_list(a, &ia, &err), &err);
    CHECK_OK(pp_checkpoint_list(b, &ib, &err), &err);
    CHECK_OK(pp_checkpoint_list(init, &i0, &err), &err);
    CHECK_OK(pp_checkpoint_list(ya, &iya, &err), &err);
    CHECK_OK(pp_checkpoint_list(yb, &iyb, &err), &err);
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb"), *f0 = fopen(init, "rb");
    FILE *fya = fopen(ya, "rb"), *fyb = fopen(yb, "rb");
    bool ok = fa && fb && f0 && fya && fyb && ia.n == ib.n && iya.n == ia.n && iyb.n == ia.n;
    CHECK(ok);
    for (size_t i = 0; ok && i < ia.n; i++) {
        double rel = entry_rel(fa, &ia, fb, &ib, f0, &i0, i);
        if (rel < 0) continue;
        double y = entry_rel(fya, &iya, fyb, &iyb, f0, &i0, i);
        double ratio = rel / fmax(FLOOR, NUDGE_K * fmax(y, 0));
        if (ratio > w.ratio || !w.name[0]) {
            w = (diff){ratio, rel, y, ""};
            snprintf(w.name, sizeof w.name, "%s", ia.entries[i].name);
        }
    }
    FILE *fs[] = {fa, fb, f0, fya, fyb};
    for (int k = 0; k < 5; k++)
        if (fs[k]) fclose(fs[k]);
    pp_checkpoint_info *is[] = {&ia, &ib, &i0, &iya, &iyb};
    for (int k = 0; k < 5; k++) pp_checkpoint_info_free(is[k]);
    return w;
}

/* A loss against its reference within NUDGE_K times the yardstick's
 * difference, and at least rel_floor relative. */
static bool loss_ok(double got, double ref, double yard, double rel_floor)
{
    return fabs(got - ref) <= fmax(rel_floor * fabs(ref), NUDGE_K * fabs(yard - ref));
}

#endif
