/*
 * schedules.h - what schedules.c offers the other files of pipeline/: the
 * plan's schedule program for any batch (pipe_sched), and the batches run
 * with it (batch_run: the training batch, an epoch's partial last batch,
 * evaluation batches). Not installed.
 */
#ifndef PP_PIPELINE_SCHEDULES_H
#define PP_PIPELINE_SCHEDULES_H

#include "pipeline/state.h"

/* Reads the plan's schedule for batches of m micro-batches of sizes: its
 * placement, the file's program (validated) or the built-in (its placement
 * checked). Plan problems are PP_ERR_INPUT at the plan's or the file's place. */
pp_status pipe_sched_init(pipe_sched *ps, const pp_plan *plan, int m, const int *sizes,
                          pp_error *err);
void pipe_sched_free(pipe_sched *ps);
/* The program for a batch of m micro-batches (m at most init's for a file);
 * forward_only: the evaluation pass over the same placement. */
pp_status pipe_sched_make(const pipe_sched *ps, int m, const int *sizes, bool forward_only,
                          pp_schedule *out, pp_error *err);

/* The schedule and micro-batches of a batch of another size: an epoch's
 * partial last batch, evaluation batches (forward_only). */
pp_status pipe_batch_run_make(const struct pp_pipeline *p, batch_run *r, int batch,
                              bool forward_only, pp_error *err);

/* Fills first_bw (s->stages entries) from s (see batch_run); false when out
 * of memory. */
bool pipe_first_backward(const pp_schedule *s, int **first_bw);
/* Frees what a batch_run made by pipe_batch_run_make owns and zeroes it. */
void pipe_batch_run_free(batch_run *r);

#endif
