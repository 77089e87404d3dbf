/*
 * pipeline_impl.h - what pipeline.c (building a rank's pipeline) offers
 * the other files of pipeline/. Not installed.
 */
#ifndef PP_PIPELINE_PIPELINE_IMPL_H
#define PP_PIPELINE_PIPELINE_IMPL_H

#include "pipeline/state.h"

/* One rank's pipeline (pipeline.c, step.c, checkpoints.c, report.c): what
 * the public calls of the same names do for a job of processes; inprocess.c
 * runs them on every rank of a job of threads when replicas share this
 * process. */
pp_status pipe_new_rank(const pp_plan *plan, const pp_pipeline_options *opts, pp_pipeline **out,
                        pp_error *err);
void pipe_free_rank(pp_pipeline *p);

#endif
