/*
 * schedule_util.h - what the schedule tests share: shapes of the built-in
 * placements, one-line texts of device lists, and unit-cost simulation
 * (F = I = W = 1 per device, so 1/V per stage with V stages per device).
 */
#ifndef PP_TESTS_SCHEDULE_UTIL_H
#define PP_TESTS_SCHEDULE_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streams/schedule.h"
#include "streams/simulate.h"

#define UT_MAX_STAGES 32

/* A shape of S = D*V stages on D devices placed as kind wants (ANY: looped). */
typedef struct ut_shape {
    int dev[UT_MAX_STAGES];
    pp_schedule_shape shape;
} ut_shape;

static inline int ut_shape_make(ut_shape *u, pp_schedule_kind kind, int D, int V, int m)
{
    pp_schedule_placement pl = pp_schedule_kind_placement(kind);
    if (pl == PP_PLACEMENT_ANY) pl = PP_PLACEMENT_LOOP;
    if (D * V > UT_MAX_STAGES) return -1;
    pp_error err;
    if (pp_schedule_place(pl, D * V, D, u->dev, &err) != PP_OK) return -1;
    u->shape = (pp_schedule_shape){D * V, D, m, u->dev, NULL};
    return 0;
}

/* Device d's compute actions as "0F0 0F1 (0F3;3B1) 0I2" (malloc'ed). */
static inline char *ut_compute_list(const pp_schedule *s, int d)
{
    size_t cap = 16 * (size_t)s->n_actions[d] + 16, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = '\0';
    for (int p = 0; p < s->n_actions[d]; p++) {
        pp_action a = s->actions[d][p];
        if (a.kind != PP_ACT_F && a.kind != PP_ACT_B && a.kind != PP_ACT_I && a.kind != PP_ACT_W)
            continue;
        char b[48];
        pp_action_format(a, b, sizeof b);
        const char *open = a.overlap == PP_OVERLAP_FIRST ? "(" : "";
        const char *close = a.overlap == PP_OVERLAP_SECOND ? ")" : "";
        const char *sep = len == 0 ? "" : a.overlap == PP_OVERLAP_SECOND ? ";" : " ";
        len += (size_t)snprintf(out + len, cap - len, "%s%s%s%s", sep, open, b, close);
    }
    return out;
}

/* Unit-cost step of s with V stages per device (costs per stage 1/V). */
static inline double ut_unit_step(const pp_schedule *s, double *bubble)
{
    int S = s->stages;
    double V = (double)S / s->devices;
    double f[UT_MAX_STAGES], b[UT_MAX_STAGES], w[UT_MAX_STAGES];
    for (int k = 0; k < S && k < UT_MAX_STAGES; k++) f[k] = 1 / V, b[k] = 2 / V, w[k] = 1 / V;
    pp_sim_costs c = {.stages = S, .forward_ms = f, .backward_ms = b, .input_ms = w,
                      .weight_ms = w};
    pp_sim_result r;
    pp_error err;
    if (pp_simulate(s, &c, &r, &err) != PP_OK) {
        fprintf(stderr, "simulate %s: %s\n", s->name, err.msg);
        return -1;
    }
    double step = r.step_ms;
    if (bubble) *bubble = r.bubble;
    pp_sim_result_free(&r);
    return step;
}

#endif
