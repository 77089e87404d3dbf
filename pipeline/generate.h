/*
 * generate.h - a token model continuing a sequence (generate.c). Not
 * installed.
 */
#ifndef PP_PIPELINE_GENERATE_H
#define PP_PIPELINE_GENERATE_H

#include "pipeline/state.h"

/* pp_generate_options.window_step's default: a forward computes the
 * sequence's positions rounded up to a multiple of 64 (at most block_size). */
#define PP_GENERATE_WINDOW_STEP 64

/* One rank's pp_pipeline_generate (pipeline.h). */
pp_status pipe_generate_rank(struct pp_pipeline *p, const int32_t *prompt, int n_prompt,
                             const pp_generate_options *o, int32_t *out, pp_error *err);

#endif
