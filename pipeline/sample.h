/*
 * sample.h - generation's sampler (sample.c). Not installed.
 */
#ifndef PP_PIPELINE_SAMPLE_H
#define PP_PIPELINE_SAMPLE_H

#include <stdint.h>

#include "pipeline/pipeline.h"

/* *out = the id drawn from logits z[0..v) at u in [0, 1): temperature 0,
 * the first most likely id; else the ids in order of their logits (higher
 * first, of equal ones the lower id), the first k of them (top_k 0 or at
 * least v: all), each with probability exp((z - z_first) / temperature) /
 * their sum (in double; summed in that order among the top k, in id order
 * among all), the first id whose running sum of probabilities passes u (the
 * last if none does). PP_ERR_NUMERIC for a logit that is not finite;
 * PP_ERR_OOM. */
pp_status pipe_draw(const float *z, int v, int top_k, double temperature, double u,
                    int32_t *out, pp_error *err);

/* pipe_draw at the u of token index i: o's seed and i through a counter
 * hash, so that a run repeats. */
pp_status pipe_sample(const float *z, int v, const pp_generate_options *o, int64_t i,
                      int32_t *out, pp_error *err);

#endif
