/*
 * simulate.h - predicts the step time and bubble of a schedule from per-stage
 * costs, before anything runs.
 *
 * The schedule is lowered exactly as the executor lowers it (same lanes, same
 * slot count, same dependencies: see program.h), then timed by list
 * scheduling: each lane runs its items in issue order, an item starts when
 * its lane is free and the items it waits for have ended. Compute items take
 * the stage's forward/backward cost, copies take the boundary's copy cost on
 * their own lanes, per-action overheads are not modelled.
 *
 * For S uniform stages (forward f, backward b, no copy cost) both GPipe and
 * 1F1B give step = (m + S - 1)(f + b) and bubble = (S - 1)/(m + S - 1).
 */
#ifndef PP_SIMULATE_H
#define PP_SIMULATE_H

#include "runtime/core/status.h"
#include "streams/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pp_sim_costs {
    int stages;                 /* must equal the schedule's S */
    const double *forward_ms;   /* (S) forward of one micro-batch on each stage */
    const double *backward_ms;  /* (S) backward of one micro-batch */
    const double *step_ms;      /* (S) optimizer step per stage, or NULL for 0 */
    const double *copy_act_ms;  /* (S-1) activation copy per boundary, or NULL for 0 */
    const double *copy_grad_ms; /* (S-1) gradient copy per boundary, or NULL for 0 */
    int ref_mb_size;            /* > 0: costs are for micro-batches of this size and scale
                                   linearly with each micro-batch's size; 0: per micro-batch */
    int slots;                  /* buffers per boundary and direction, as the executor's
                                   (0 = the executor's default, 2) */
} pp_sim_costs;

/* One predicted item, for predicted traces. */
typedef struct pp_sim_item {
    char name[48];              /* as the executor labels it: "F3 stage1", "copy act 3 s0->s1" */
    int lane;                   /* 0..S-1 stage compute, then copy lanes (program.h) */
    double start_ms, end_ms;
} pp_sim_item;

typedef struct pp_sim_result {
    double step_ms;             /* end of the last item */
    double bubble;              /* 1 - sum(busy_ms) / (S * step_ms) */
    int stages;
    double *busy_ms;            /* (S) compute time per stage */
    int n_items;
    pp_sim_item *items;         /* (n_items) in issue order */
} pp_sim_result;

/* Validates the schedule and predicts one step. res is caller-owned; release
 * with pp_sim_result_free. */
pp_status pp_simulate(const pp_schedule *s, const pp_sim_costs *c, pp_sim_result *res,
                      pp_error *err);
void pp_sim_result_free(pp_sim_result *res);

#ifdef __cplusplus
}
#endif

#endif
