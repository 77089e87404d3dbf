/*
 * prefetch.h - the next batch, read while a step runs (prefetch.c). Not
 * installed.
 */
#ifndef PP_PIPELINE_PREFETCH_H
#define PP_PIPELINE_PREFETCH_H

#include "pipeline/state.h"

typedef struct pipe_prefetch pipe_prefetch;

/* A prefetcher over data filling the two host buffer sets images[i],
 * labels[i] (borrowed; each holds a whole batch), reading on PP_READ_THREADS
 * threads (PP_ERR_INPUT when that variable is not valid). */
pp_status pipe_prefetch_new(pp_data *data, float *const images[2], int32_t *const labels[2],
                            pipe_prefetch **out, pp_error *err);
/* Waits for a pending read, stops the worker. NULL is a no-op. */
void pipe_prefetch_free(pipe_prefetch *pf);
/* The batch of count samples at pos in one of the sets (*slot: 0 or 1,
 * alternating from call to call): the prefetched one when it is exactly
 * that batch, else read now. Then starts reading (next_pos, next_count) into
 * the other set on the worker (next_count <= 0: nothing). */
pp_status pipe_prefetch_get(pipe_prefetch *pf, int64_t pos, int count, int64_t next_pos,
                            int next_count, float **images, int32_t **labels, int *slot,
                            pp_error *err);
/* pp_data_read of any source (the test set) on the prefetcher's read
 * threads; waits for a prefetch in progress to finish first. */
pp_status pipe_prefetch_read(pipe_prefetch *pf, pp_data *src, int64_t pos, int count,
                             float *images, int32_t *labels, pp_error *err);

#endif
