/*
 * stream.h - streams, events and stream-ordered copies, backend-neutral.
 *
 * streams/ is the scheduling layer: streams and events (this header;
 * stream.c checks and calls a table of functions per device kind,
 * pp_stream_ops in stream_impl.h: stream_cpu.c, stream_cuda.c), graphs of
 * captured stream work (graph.h), schedules and the programs they compile to
 * (schedule.h, program.h), the executor that runs a program over stages
 * (executor.h), the simulator (simulate.h) and traces (trace.h). It includes
 * runtime/ only (core, comm for the ranks of a job; stream_cuda.c also the
 * CUDA backend's runtime/cuda/internal.h).
 *
 * A stream is a FIFO queue of work bound to one device. Work is a host
 * callback (pp_stream_launch), a copy (pp_stream_copy) or a wait for an event
 * (pp_stream_wait_event). An event marks a point in a stream: recording it
 * captures "everything enqueued on that stream so far"; a stream that waits
 * for it runs nothing further until that point has completed.
 *
 * Semantics follow CUDA streams and events (cudaStream_t / cudaEvent_t):
 *   - Launch returns before the work has run (CPU: it runs later on the
 *     stream's worker thread; CUDA: fn runs at once on the host and enqueues
 *     asynchronous work on the stream). Callers must not assume either.
 *   - pp_stream_wait_event captures the event's most recent record at the time
 *     of the call; an event never recorded counts as complete. Hence the host
 *     must record an event before it enqueues a wait for it.
 *   - Errors are sticky: the first failing item leaves its status and message
 *     on the stream, later items are skipped (they still complete, so events
 *     and waits make progress), and pp_stream_synchronize returns that first
 *     error. A stream that waits for an event whose recorded work failed
 *     inherits that error (with the original message and time).
 *
 * Threading: a stream or event is driven by one host thread at a time (the
 * thread that enqueues into it); the callbacks of one stream never run
 * concurrently with each other, but callbacks of different streams do.
 * Ownership: the caller owns streams and events; free them only after the
 * work that uses them has completed (synchronize first).
 */
#ifndef PP_STREAM_H
#define PP_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pp_stream_kind {
    PP_STREAM_COMPUTE = 0, /* kernels of a stage */
    PP_STREAM_COPY = 1,    /* transfers between devices */
} pp_stream_kind;

typedef struct pp_stream pp_stream;
typedef struct pp_event pp_event;

/* Work launched on a stream. ex is the stream's own exec (device + native
 * stream): ops called with it run in stream order. On failure fn fills err
 * and returns its status; that error becomes the stream's sticky error. */
typedef pp_status (*pp_stream_fn)(pp_exec *ex, void *arg, pp_error *err);

#define PP_STREAM_LABEL_MAX 48

typedef enum pp_record_kind {
    PP_RECORD_LAUNCH = 0,
    PP_RECORD_COPY = 1,
} pp_record_kind;

/* Timing of one launched or copied item. Times are CLOCK_MONOTONIC
 * nanoseconds (pp_stream_clock_ns), comparable across streams. */
typedef struct pp_stream_record {
    char label[PP_STREAM_LABEL_MAX]; /* as given at launch, truncated */
    pp_record_kind kind;
    int64_t start_ns, end_ns;
    size_t bytes;                    /* copies: bytes moved; launches: 0 */
} pp_stream_record;

/* The clock the records use (CLOCK_MONOTONIC, nanoseconds). */
int64_t pp_stream_clock_ns(void);

/* Creates a stream on dev. CPU: starts one worker thread. A CUDA device in a
 * build without the CUDA backend gives PP_ERR_UNSUPPORTED. name (may be NULL)
 * is for traces and messages, truncated to 31 characters. */
pp_status pp_stream_new(pp_device_ctx *dev, pp_stream_kind kind, const char *name,
                        pp_stream **out, pp_error *err);
/* Waits for the stream's pending work, then releases it. NULL is a no-op. */
void pp_stream_free(pp_stream *s);

/* The stream's own exec, the one its launched functions receive. */
pp_exec *pp_stream_exec(pp_stream *s);

/* The device, kind and name a stream was created with. */
pp_device_ctx *pp_stream_device(const pp_stream *s);
pp_stream_kind pp_stream_get_kind(const pp_stream *s);
const char *pp_stream_name(const pp_stream *s);

/* Enqueues fn(ex, arg, err) in stream order. arg must stay valid until the
 * item has run (synchronize, or an event recorded after it completes). label
 * (may be NULL) names the item in the timing records. Fails only on misuse or
 * out of host memory; errors of fn surface at synchronize. */
pp_status pp_stream_launch(pp_stream *s, const char *label, pp_stream_fn fn, void *arg,
                           pp_error *err);

/* Enqueues a copy of bytes from src (on src_dev) to dst (on dst_dev) in
 * stream order (CPU: memcpy on the worker; CUDA: cudaMemcpyPeerAsync or
 * cudaMemcpyAsync). The regions must not overlap and must stay valid until
 * the copy has completed. A CPU stream copies between CPU devices only. */
pp_status pp_stream_copy(pp_stream *s, void *dst, pp_device_ctx *dst_dev, const void *src,
                         pp_device_ctx *src_dev, size_t bytes, const char *label,
                         pp_error *err);
/* Same for whole tensors: dtype and element count must match. */
pp_status pp_stream_copy_tensor(pp_stream *s, pp_tensor *dst, const pp_tensor *src,
                                const char *label, pp_error *err);

/* Blocks until all work enqueued so far has completed; returns the stream's
 * sticky error (code and message in err) or PP_OK. The error stays sticky. */
pp_status pp_stream_synchronize(pp_stream *s, pp_error *err);

/* The sticky error without waiting: PP_OK if none so far. When there is one,
 * err receives it and *when_ns (may be NULL) the time it first occurred
 * (inherited errors keep the original time, so the earliest over several
 * streams is the root cause). */
pp_status pp_stream_error(pp_stream *s, pp_error *err, int64_t *when_ns);
/* Clears the sticky error so the stream can be used again. Call only when
 * the stream is idle (after synchronize). */
void pp_stream_clear_error(pp_stream *s);

/* Timing records of the items completed so far, oldest first. Call after
 * synchronize; *recs stays valid until the next enqueue or clear. */
pp_status pp_stream_records(pp_stream *s, const pp_stream_record **recs, size_t *n,
                            pp_error *err);
/* Drops the records (their storage is kept for reuse). Stream must be idle. */
void pp_stream_records_clear(pp_stream *s);

/* Events. An event belongs to dev's backend; it may be recorded on any stream
 * of that backend and waited for by any stream. */
pp_status pp_event_new(pp_device_ctx *dev, pp_event **out, pp_error *err);
void pp_event_free(pp_event *ev);

/* Marks the current end of s's queue. Re-recording moves the mark; waits
 * already enqueued keep the point they captured. */
pp_status pp_event_record(pp_event *ev, pp_stream *s, pp_error *err);
/* Later work on s waits until ev's recorded point has completed. */
pp_status pp_stream_wait_event(pp_stream *s, pp_event *ev, pp_error *err);
/* *done = whether the recorded point has completed (true if never recorded).
 * Returns the recorded stream's error if that work failed. */
pp_status pp_event_query(pp_event *ev, bool *done, pp_error *err);
/* Blocks until the recorded point has completed; returns the recorded
 * stream's error if that work failed. */
pp_status pp_event_synchronize(pp_event *ev, pp_error *err);

#ifdef __cplusplus
}
#endif

#endif
