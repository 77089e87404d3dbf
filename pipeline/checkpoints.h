/*
 * checkpoints.h - what checkpoints.c offers the other files of pipeline/.
 * Not installed.
 */
#ifndef PP_PIPELINE_CHECKPOINTS_H
#define PP_PIPELINE_CHECKPOINTS_H

#include "pipeline/state.h"

/* One rank's checkpoint saving and loading (see pipeline_impl.h). */
pp_status pipe_save_rank(pp_pipeline *p, const char *path, const pp_pipeline_save_options *o,
                         pp_error *err);
pp_status pipe_load_rank(pp_pipeline *p, const char *path, pp_error *err);

#endif
