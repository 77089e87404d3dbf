/*
 * report.h - what report.c (step statistics, traces) offers the other
 * files of pipeline/. Not installed.
 */
#ifndef PP_PIPELINE_REPORT_H
#define PP_PIPELINE_REPORT_H

#include "pipeline/state.h"

/* A kept step's lanes named with their rank in a job (report.c). */
void pipe_name_rank_lanes(const pp_pipeline *p, pp_step_stats *st);

/* One rank's trace file (see pipeline_impl.h). */
pp_status pipe_write_trace_rank(const pp_pipeline *p, const char *path, pp_error *err);

#endif
