/*
 * graph.h - capture the work enqueued on a set of streams once, replay it
 * many times (CUDA Graphs on CUDA; a recorded item list elsewhere).
 *
 * Between pp_graph_capture_begin and pp_graph_capture_end, the work the
 * calling thread enqueues on the captured streams (launches, copies, event
 * records, waits) is captured instead of run. pp_graph_launch then enqueues
 * all of it again, in the captured order and with the captured dependencies,
 * as one unit; pp_stream_synchronize on any captured stream waits for it.
 *
 * Two implementations, chosen by the streams' backend:
 *   - native (CUDA): stream capture into a cudaGraph_t, instantiated once.
 *     The first stream is the origin: capture begins on it, an event recorded
 *     there forks the others into the capture, and each of them joins back
 *     through an event before the capture ends. fn of a captured launch runs
 *     on the host during the capture (as it always does on CUDA) and never
 *     again: a launch replays only the device work fn enqueued, on the same
 *     addresses with the same kernel arguments. Anything fn does on the host
 *     (counters, bookkeeping) happens once, at capture.
 *   - recorded (CPU, and any backend without native graphs): the items are
 *     kept in a list and nothing runs during the capture; a launch calls the
 *     public enqueue functions again in the captured order, so fn runs again
 *     at every launch, on the stream's worker, as in eager execution.
 *   pp_graph_replays_host tells the two apart.
 *
 * Rules for captured work (what CUDA stream capture allows, kept for both):
 *   - a wait inside the capture must be for an event recorded inside the same
 *     capture (PP_ERR_UNSUPPORTED otherwise);
 *   - no synchronize, query or event synchronize of captured streams or
 *     events until the capture has ended;
 *   - on CUDA, nothing that synchronises the device or allocates outside
 *     stream order (cudaMalloc, cudaMallocHost, cudaDeviceSynchronize) may run
 *     on the capturing thread: the capture is then refused (see below).
 * Every captured stream must belong to one backend.
 *
 * Refusal: when the backend refuses a capture (a forbidden call, an
 * allocation kept beyond the captured work, a failed instantiation), or a
 * captured item fails on the host, pp_graph_capture_end returns
 * PP_ERR_UNSUPPORTED with a message naming what was refused and by which
 * call, leaves the streams out of capture, idle and error-free, and gives no
 * graph. None of the captured device work has run then; the caller runs it
 * eagerly instead.
 *
 * Timing records: each item of a launch adds its timing record to its
 * stream, as eager execution does (CUDA: the timing events are event-record
 * nodes of the graph, so every replayed item keeps its own span).
 *
 * Threading and ownership as for streams: one host thread drives a capture
 * and its streams; the caller owns the graph and frees it while idle. A
 * graph keeps pointers to the streams and to the events recorded in it: they
 * must outlive it.
 */
#ifndef PP_GRAPH_H
#define PP_GRAPH_H

#include <stdbool.h>

#include "streams/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pp_graph pp_graph;

/* Starts capturing the work enqueued on streams[0..n) (n >= 1, distinct,
 * one backend, none already capturing, all idle). streams[0] is the origin.
 * On failure nothing is capturing. */
pp_status pp_graph_capture_begin(pp_stream *const *streams, int n, pp_error *err);

/* Ends the capture begun on the same streams; *out receives
 * the graph, or NULL on failure: PP_ERR_UNSUPPORTED, refused (see above), or
 * out of memory, and the streams are no longer capturing; PP_ERR_INVALID
 * when the streams are not those of one capture, which then goes on. */
pp_status pp_graph_capture_end(pp_stream *const *streams, int n, pp_graph **out, pp_error *err);

/* Enqueues the captured work once more: the part captured on each stream
 * follows what that stream holds already, and later work on any captured
 * stream follows the whole launch. Errors of the work surface at
 * synchronize, as for eager work. A failed return: on CUDA nothing was
 * enqueued; a recorded graph may have enqueued the items before the failing
 * one (as a failing enqueue in eager execution). */
pp_status pp_graph_launch(pp_graph *g, pp_error *err);

/* Whether a launch runs the captured functions again on the host (recorded
 * graphs) or replays only the device work they enqueued at capture (CUDA). */
bool pp_graph_replays_host(const pp_graph *g);

/* Items captured (launches and copies), for reports and tests. */
int pp_graph_items(const pp_graph *g);

/* Releases the graph and drops the timing records of its streams. NULL is a
 * no-op. Call only while its streams are idle. */
void pp_graph_free(pp_graph *g);

#ifdef __cplusplus
}
#endif

#endif
