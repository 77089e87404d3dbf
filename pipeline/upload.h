/*
 * upload.h - the first stage's batches go up to its device ahead (upload.c).
 * Not installed.
 *
 * A training step's images reach stage 0's device on a copy stream of that
 * device ("upload"), into one of two device buffers of the upload's own
 * (step k's in buffer k % 2), while the step before runs: the step that
 * takes the batch makes stage 0's stream wait for the copy's event (a wait
 * enqueued before the run, so a step replayed as a graph follows it too; no
 * host wait) and its forwards read the buffer instead of copying from host
 * memory. The labels go to a page-locked host buffer of the last stage's
 * device per device buffer (the last stage copies them in, as before), so
 * that a graph of step k reads fixed addresses: buffer k % 2 (the graphs'
 * key). Nothing is allocated per step.
 *
 * Ordering, all by stream order and events: the copy into buffer k % 2 is
 * enqueued at the start of step k - 1 (or of step k, when the batch was not
 * sent ahead), after step k - 2, the last reader of that buffer, has ended
 * (every step ends with its streams synchronised); step k's stage-0 work
 * waits for the copy's event; the host memory the copy reads stays the
 * caller's until step k has ended (prefetch.h: two sets held).
 *
 * Threading: driven by the thread that runs the steps.
 */
#ifndef PP_PIPELINE_UPLOAD_H
#define PP_PIPELINE_UPLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/prefetch.h"
#include "runtime/core/device.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "streams/executor.h"
#include "streams/stream.h"

typedef struct pipe_upload pipe_upload;

/* Two buffers of `batch` images (c x h x w f32) on dev, a copy stream there,
 * and two page-locked label buffers on lbl_dev's host memory. */
pp_status pipe_upload_new(pp_device_ctx *dev, pp_device_ctx *lbl_dev, int batch, int c, int h,
                          int w, pipe_upload **out, pp_error *err);
/* Waits for a copy in flight, then frees everything. NULL is a no-op. */
void pipe_upload_free(pipe_upload *u);

/* Whether step's batch (window win) was sent: its copy enqueued. */
bool pipe_upload_sent(const pipe_upload *u, int64_t step, pipe_window win);

/* Sends step's batch: win.count images from host memory (page-locked where
 * the device copies it; it must stay valid until step has ended) copied
 * into buffer step % 2 on the copy stream, an event recorded after; its
 * labels copied on the host into that buffer's label set. */
pp_status pipe_upload_send(pipe_upload *u, int64_t step, pipe_window win, const float *images,
                           const int32_t *labels, pp_error *err);

/* For running step (its batch sent): stage 0's stream waits for the copy;
 * *images, the device buffer holding the batch (its first count samples),
 * *labels the host labels, and *key the buffer's number (0 or 1). */
pp_status pipe_upload_take(pipe_upload *u, int64_t step, pp_stream *stage0, pp_tensor **images,
                           const int32_t **labels, int *key, pp_error *err);

/* Once a step has run: when every copy sent has completed (never waits),
 * their timing records go to stats as a lane "upload" on the upload's
 * device (stats NULL: dropped); else they stay for a later call. */
pp_status pipe_upload_collect(pipe_upload *u, pp_step_stats *stats, pp_error *err);

#endif
