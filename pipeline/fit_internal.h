/*
 * fit_internal.h - internal: the pieces of the memory model (memory.c) that
 * the planner (optimize.c) and the memory checks (limits.c) reuse. Not
 * installed; nothing outside pipeline/ includes it.
 */
#ifndef PP_PIPELINE_FIT_INTERNAL_H
#define PP_PIPELINE_FIT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "models/catalogue.h"
#include "models/unit.h"
#include "partitioner/plan.h"
#include "pipeline/fit.h"
#include "streams/schedule.h"

/* One unit's memory figures, per sample. */
typedef struct pipe_fit_unit {
    pp_unit_spec spec;
    pp_unit_kind kind;
    int64_t in_shape[PP_MAX_DIMS]; /* its input, batch 1 */
    int64_t in_bytes, out_bytes;   /* input and output */
    int64_t fwd_extra;             /* a training forward's temporaries beside what it keeps */
    int64_t bwd_extra;             /* a backward's temporaries beside dy, dx and what it keeps */
    int64_t bwd_extra_first;       /* the same without dx (the first unit of stage 0) */
    int64_t weights;               /* convolution and linear weights (elements) */
    bool fuses_relu;               /* a batch norm followed by a ReLU: run as one */
} pipe_fit_unit;

/* The units of a plan's model in its precision, with their catalogue. */
typedef struct pipe_fit_units {
    int n;
    pipe_fit_unit *units;          /* (n) */
    pp_catalogue cat;              /* in the plan's precision */
} pipe_fit_units;

/* Builds fu for plan's model (nothing for the delay model); free with
 * pipe_fit_units_free. */
pp_status pipe_fit_units_new(const pp_plan *plan, pipe_fit_units *fu, pp_error *err);
void pipe_fit_units_free(pipe_fit_units *fu);

/* One micro-batch on one stage: bytes it keeps from forward to backward (all,
 * or the copy of its input when recomputed) and from the input part of a
 * split backward to its weight part (iw), and its peak bytes while each of
 * its passes runs: a forward keeping all (what it keeps included), a forward
 * keeping nothing (a recomputed micro-batch's first), the forward again
 * before a recomputed backward, a backward, the input part of a split one. */
typedef struct pipe_fit_mb {
    int64_t kept, kept_input, iw;
    int64_t forward, discard, recompute, backward, input;
} pipe_fit_mb;

/* The figures of units first..last for a micro-batch of n samples. */
void pipe_fit_stage_mb(const pipe_fit_units *fu, int first, int last, int64_t n,
                       pipe_fit_mb *out);

/* The schedule one replica of plan runs: the plan's built-in or its file's
 * program (the one the run executes), for replica 0's micro-batches. */
pp_status pipe_fit_schedule(const pp_plan *plan, pp_schedule *sched, pp_error *err);

/* One plan's schedule, lowered, with room for per-micro-batch figures: what
 * predicting a stage needs besides the stage (the planner predicts many
 * stages of one schedule and split). */
typedef struct pipe_fit_run {
    pp_schedule sched;
    int slots;                     /* the executor's buffers per boundary and direction */
    bool *cross;                   /* (S) boundary b joins two devices (it has copies) */
    int n_max;                     /* the largest micro-batch */
    pipe_fit_mb *mbs;              /* (S x m) stage s's figures, set by pipe_fit_stage_predict */
    bool *rec;                     /* (S x m) stage s recomputes micro-batch i */
    int64_t *part;                 /* (S) stage s's parameter gradients: what a backward before
                                      its micro-batch's turn keeps apart until then */
} pipe_fit_run;

pp_status pipe_fit_run_new(const pp_plan *plan, pipe_fit_run *run, pp_error *err);
void pipe_fit_run_free(pipe_fit_run *run);

/* Predicts stage s of plan as if it held units first..last and recomputed
 * by rec (its device, the plan's batch and optimizer; run built from plan),
 * keeping the stage's figures in run for pipe_fit_device_peaks. Fills every
 * field of *o but device_peak; o->activations is the walk over the stage's
 * own actions. */
void pipe_fit_stage_predict(const pp_plan *plan, const pipe_fit_units *fu, pipe_fit_run *run,
                            int s, int first, int last, pp_plan_recompute rec, pp_fit_stage *o);

/* Sets each stage's device_peak: the fixed parts of the stages on its device
 * (out[t].peak - out[t].activations) and the walk over all their actions in
 * the device's order, from the figures the last pipe_fit_stage_predict call
 * for each stage kept in run. */
void pipe_fit_device_peaks(const pp_plan *plan, const pipe_fit_run *run, pp_fit_stage *out);

/* pp_fit_predict with the units built once (the planner predicts many plans). */
pp_status pipe_fit_predict_with(const pp_plan *plan, const pipe_fit_units *fu, pp_fit_stage *out,
                                pp_error *err);

#endif
