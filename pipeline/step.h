/*
 * step.h - what step.c (a rank's training step and evaluation) offers the
 * other files of pipeline/. Not installed.
 */
#ifndef PP_PIPELINE_STEP_H
#define PP_PIPELINE_STEP_H

#include "pipeline/state.h"

/* Waits for the last step's optimizer on the stages' streams, if it may
 * still run (step.c): before the host reads or writes parameters. */
pp_status pipe_settle(struct pp_pipeline *p, pp_error *err);

/* The parameters may have changed since the stages last ran (an optimizer
 * step, a load, the replicas' state shared): every stage of this rank makes
 * its bf16 weight copies anew at their next use. Called before a step, an
 * evaluation and a generation. */
void pipe_params_changed(struct pp_pipeline *p);

/* PP_ERR_INVALID ("WHAT: an earlier step or evaluation of this pipeline
 * failed ...") once a step or an evaluation failed midway: the pipeline's
 * links are freed and its state may be half updated, so it neither steps,
 * evaluates, saves nor loads again. */
pp_status pipe_check_links(const pp_pipeline *p, const char *what, pp_error *err);

/* pipe_check_links, and PP_ERR_INVALID ("WHAT: an earlier load failed after
 * it began writing the parameters ...") while a failed load has left the
 * parameters partly a file's: no step, evaluation, save or generation
 * until a load succeeds. */
pp_status pipe_check_usable(const pp_pipeline *p, const char *what, pp_error *err);

/* One rank's step and evaluation (see pipeline_impl.h). */
pp_status pipe_step_rank(pp_pipeline *p, pp_step_result *res, pp_error *err);
pp_status pipe_evaluate_rank(pp_pipeline *p, pp_eval_result *out, pp_error *err);

#endif
