/*
 * links.h - links between the CUDA stages of ranks (links.c). Not installed.
 */
#ifndef PP_PIPELINE_LINKS_H
#define PP_PIPELINE_LINKS_H

#include "pipeline/state.h"

/* The plan's device of stage s in replica r. */
pp_device_id pipe_plan_device(const pp_plan *plan, int s, int r);

/* Whether boundary b of replica r joins CUDA stages of two ranks, which an
 * NCCL link carries (in a build with NCCL). */
bool pipe_cuda_link(const pp_plan *plan, int b, int r);

/* Makes the links of every such boundary (collective over the job: every
 * rank calls it) and hands this rank's to the executor. After
 * pp_executor_set_ranks. */
pp_status pipe_links_init(struct pp_pipeline *p, const pp_plan *plan, pp_error *err);

/* Frees the links; abort: stops their pending transfers (after a fault),
 * and pipe_links_free(p, false) still frees the rest later. */
void pipe_links_free(struct pp_pipeline *p, bool abort);

#endif
