/*
 * planning.h - what planning.c offers the other files of pipeline/: the
 * simulated step of a schedule and the plan's checks against cuDNN's
 * limits. Not installed.
 */
#ifndef PP_PIPELINE_PLANNING_H
#define PP_PIPELINE_PLANNING_H

#include "pipeline/state.h"

/* Simulates sched with per-stage costs of one micro-batch of ref_mb samples
 * (in, wt: the split backward's parts, NULL: halves of b). res is the
 * caller's to free. */
pp_status pipe_simulate(const pp_schedule *sched, int n, const double *f, const double *b,
                        const double *in, const double *wt, const double *copy, int ref_mb,
                        int slots, pp_sim_result *res, pp_error *err);

/* PP_ERR_INPUT at the plan's batch section when a micro-batch's tensors exceed
 * what a cuDNN descriptor indexes (planning.c). */
pp_status pipe_check_cudnn_limits(const pp_plan *plan, pp_error *err);

#endif
