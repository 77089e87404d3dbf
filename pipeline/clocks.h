/*
 * clocks.h - the job's clocks on one time base (clocks.c). Not installed.
 */
#ifndef PP_PIPELINE_CLOCKS_H
#define PP_PIPELINE_CLOCKS_H

#include "pipeline/state.h"

/* In a job of several processes: estimates this rank's clock offset to
 * rank 0's and the job's trace origin (collective: every rank calls it once,
 * after the comm exists). Nothing in one process. */
pp_status pipe_clocks_sync(struct pp_pipeline *p, pp_error *err);

#endif
