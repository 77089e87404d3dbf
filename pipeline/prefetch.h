/*
 * prefetch.h - the next batches, read while a step runs (prefetch.c). Not
 * installed.
 */
#ifndef PP_PIPELINE_PREFETCH_H
#define PP_PIPELINE_PREFETCH_H

#include "pipeline/state.h"

#define PIPE_PREFETCH_MAX_AHEAD 8 /* batches read ahead at most (plan data.prefetch) */

typedef struct pipe_prefetch pipe_prefetch;

/* A window of the data stream: count samples from position pos. */
typedef struct pipe_window {
    int64_t pos;
    int count;
} pipe_window;

/* A prefetcher over data that reads up to `ahead` batches ahead, into
 * ahead + hold host buffer sets of `batch` samples it allocates (images on
 * img_dev's host memory, labels on lbl_dev's: page-locked for CUDA devices),
 * on `threads` threads (0: PP_READ_THREADS or the default; PP_ERR_INPUT when
 * that variable is not valid). The caller keeps the sets of its last `hold`
 * gets (1, or 2 when a batch's set is still being copied while the next one
 * is taken: upload.h). */
pp_status pipe_prefetch_new(pp_data *data, int ahead, int hold, int threads,
                            pp_device_ctx *img_dev, pp_device_ctx *lbl_dev, int batch,
                            pipe_prefetch **out, pp_error *err);
/* img_dev NULL: this process runs no first stage, and reads labels only (the
 * sets' images are NULL). */
/* Waits for a read in progress, stops the worker, frees the sets. NULL is a
 * no-op. */
void pipe_prefetch_free(pipe_prefetch *pf);
int pipe_prefetch_sets(const pipe_prefetch *pf);
/* Batches read ahead at most (the plan's data.prefetch). */
int pipe_prefetch_ahead(const pipe_prefetch *pf);
int pipe_prefetch_threads(const pipe_prefetch *pf);
/* The batch at `want` in one of the sets (*set): the one read ahead when it
 * is exactly that batch, else read now; *wait_ms (may be NULL) the time the
 * call waited for it. Then queues the windows `ahead` (n_ahead of them, the
 * next steps' in order; those beyond the prefetcher's depth or after one
 * with count <= 0 are ignored) for reading while the step runs. The set
 * stays the caller's until `hold` more calls have returned sets. */
pp_status pipe_prefetch_get(pipe_prefetch *pf, pipe_window want, const pipe_window *ahead,
                            int n_ahead, float **images, int32_t **labels, int *set,
                            double *wait_ms, pp_error *err);
/* pp_data_read of any source (the test set) on the prefetcher's read
 * threads; waits for a read in progress to finish first. A prefetcher of
 * labels only reads the labels only (images is ignored). */
pp_status pipe_prefetch_read(pipe_prefetch *pf, pp_data *src, int64_t pos, int count,
                             float *images, int32_t *labels, pp_error *err);

#endif
