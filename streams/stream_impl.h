/*
 * stream_impl.h - the seam between stream.c (checks, dispatch) and a stream
 * backend (stream_cpu.c; stream_cuda.c in CUDA builds).
 *
 * stream.c owns the generic handle fields and checks arguments; a backend
 * owns `state` and implements the semantics documented in stream.h. Entries
 * marked optional may be NULL (each says what that means); the others are
 * required. Contracts beyond
 * stream.h:
 *   - stream_init fills s->state and initialises s->exec for s->dev with the
 *     backend's native stream (pp_exec_init); stream_destroy drains pending
 *     work, then releases both.
 *   - synchronize waits for the enqueued work and keeps a failure it finds
 *     as the sticky error; stream.c then returns the sticky error.
 *   - Events: stream.c marks an event recorded once event_record succeeds
 *     and answers for a never-recorded one itself (complete, nothing to wait
 *     for), so the event and wait entries below only see recorded events.
 *   - wait_event gets an event of s's own backend, wait_foreign one of
 *     another backend (a CPU stream waiting for a CUDA event or the
 *     reverse). The foreign fallback calls the event's own event_synchronize
 *     when the waiting stream reaches the wait, and a failure it returns
 *     becomes the waiting stream's sticky error; a backend that cannot do
 *     that returns PP_ERR_UNSUPPORTED.
 *   - Sticky errors live in the generic handle (below), shared by every
 *     backend: a backend reports the first failure of an item with
 *     pp_stream_set_error and asks pp_stream_get_error before running work;
 *     pp_stream_error and pp_stream_clear_error need no backend entry.
 *   - Timing records live in the generic handle too: a backend adds the
 *     record of each completed item with pp_stream_push_record. records_resolve
 *     (optional) is called by pp_stream_records first, for a backend that
 *     learns the times only then (CUDA: timed events read against a
 *     host-clock reference); records_clear (optional) releases what a backend
 *     keeps per item before the records are dropped.
 */
#ifndef PP_STREAM_IMPL_H
#define PP_STREAM_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "streams/graph.h"
#include "streams/stream.h"

struct pp_stream_ops;

struct pp_stream {
    const struct pp_stream_ops *ops;
    pp_device_ctx *dev;
    pp_stream_kind kind;
    char name[32];
    pp_exec exec;  /* the stream's own exec; used by its work only */
    void *state;   /* backend-private */
    /* The sticky error and the timing records (stream.h). mu is a leaf lock:
     * backends may take it while holding their own, never the reverse. */
    pthread_mutex_t mu;
    pp_error error;     /* (mu) first failure; code PP_OK if none */
    int64_t error_ns;   /* (mu) when it occurred (pp_stream_clock_ns) */
    uint64_t error_seq; /* (mu) backend's position of the failed item (CPU: 1-based
                           item index), so waits on earlier points do not inherit it */
    pp_stream_record *recs; /* (mu) records of completed items, oldest first */
    size_t nrec, caprec;    /* (mu) */
    pp_graph *capture;      /* the graph being captured on this stream, or NULL (host
                               thread only; graph.c) */
};

struct pp_event {
    const struct pp_stream_ops *ops;
    pp_device_ctx *dev;
    bool recorded; /* event_record succeeded at least once (host thread only) */
    void *state;   /* backend-private */
};

/* One captured item of a recorded graph (graph.c). */
typedef enum pp_graph_item_kind {
    PP_GRAPH_ITEM_LAUNCH,
    PP_GRAPH_ITEM_COPY,
    PP_GRAPH_ITEM_RECORD,
    PP_GRAPH_ITEM_WAIT,
} pp_graph_item_kind;

/* One copy, already checked by stream.c (non-overlapping, bytes > 0). */
typedef struct pp_copy_args {
    void *dst;
    pp_device_ctx *dst_dev;
    const void *src;
    pp_device_ctx *src_dev;
    size_t bytes;
} pp_copy_args;

typedef struct pp_graph_item {
    pp_graph_item_kind kind;
    pp_stream *s;
    pp_event *ev;                    /* RECORD, WAIT */
    pp_stream_fn fn;                 /* LAUNCH */
    void *arg;                       /* LAUNCH */
    pp_copy_args copy;               /* COPY */
    char label[PP_STREAM_LABEL_MAX]; /* LAUNCH, COPY */
} pp_graph_item;

/* A graph (graph.h). native: the backend's graph entries own `state`;
 * otherwise items is the recorded list. */
struct pp_graph {
    const struct pp_stream_ops *ops;
    bool native;
    pp_stream **streams;      /* (n) streams[0] is the origin */
    int n;
    pp_graph_item *items;     /* (n_items) recorded graphs: in capture order */
    size_t n_items, cap_items;
    int n_work;               /* launches and copies captured */
    pp_error fail;            /* the first failure during the capture (code PP_OK if none) */
    void *state;              /* native graphs: backend-private */
};

typedef struct pp_stream_ops {
    const char *name; /* "cpu", "cuda" */

    pp_status (*stream_init)(pp_stream *s, pp_error *err);
    void (*stream_destroy)(pp_stream *s);
    pp_status (*launch)(pp_stream *s, const char *label, pp_stream_fn fn, void *arg,
                        pp_error *err);
    pp_status (*copy)(pp_stream *s, const pp_copy_args *c, const char *label, pp_error *err);
    void (*synchronize)(pp_stream *s);
    /* optional (see above): NULL: the records' times are known when pushed */
    pp_status (*records_resolve)(pp_stream *s, pp_error *err);
    /* optional (see above): NULL: nothing kept per item */
    void (*records_clear)(pp_stream *s);

    pp_status (*event_init)(pp_event *ev, pp_error *err);
    void (*event_destroy)(pp_event *ev);
    pp_status (*event_record)(pp_event *ev, pp_stream *s, pp_error *err);
    pp_status (*wait_event)(pp_stream *s, pp_event *ev, pp_error *err);
    pp_status (*wait_foreign)(pp_stream *s, pp_event *ev, pp_error *err);
    pp_status (*event_query)(pp_event *ev, bool *done, pp_error *err);
    pp_status (*event_synchronize)(pp_event *ev, pp_error *err);

    /* Native graphs (optional: all four or none; NULL: graph.c records the
     * items). graph_begin starts capturing on g->streams and sets g->state;
     * graph_end ends it and on failure releases everything it made, leaves
     * the streams out of capture and returns PP_ERR_UNSUPPORTED (refused) or
     * another code, err naming the refused call. launch enqueues the graph;
     * destroy releases g->state (NULL state: nothing to do). launch, copy
     * and event_record of a capturing stream (s->capture set) capture their
     * work; each captured launch or copy adds one to g->n_work. */
    pp_status (*graph_begin)(pp_graph *g, pp_error *err);
    pp_status (*graph_end)(pp_graph *g, pp_error *err);
    pp_status (*graph_launch)(pp_graph *g, pp_error *err);
    void (*graph_destroy)(pp_graph *g);
} pp_stream_ops;

/* ---- stream_state.c: what stream.c, graph.c and the backends share ---- */

/* A recorded graph's capture (graph.h): keeps it as item of s->capture, the
 * first failure in s->capture->fail. Returns PP_OK or the failure. */
pp_status pp_graph_record(pp_stream *s, const pp_graph_item *it, pp_error *err);

/* Keeps e (a PP_OK code becomes PP_ERR_INTERNAL), its time and the item's
 * position seq as s's sticky error, unless s already has one. Thread-safe. */
void pp_stream_set_error(pp_stream *s, const pp_error *e, int64_t when_ns, uint64_t seq);

/* Keeps a failure found on the host now as s's sticky error (at no item's
 * position). */
void pp_stream_fail_now(pp_stream *s, const pp_error *e);

/* The code of s's sticky error if it was set at a position <= seq_max
 * (UINT64_MAX: any), else PP_OK; when there is one, *err and *when_ns (each
 * may be NULL) receive it. Thread-safe. */
pp_status pp_stream_get_error(pp_stream *s, uint64_t seq_max, pp_error *err, int64_t *when_ns);

/* Fills r for an item about to be enqueued: label (may be NULL) truncated to
 * PP_STREAM_LABEL_MAX - 1 characters, kind, bytes; times zero. */
void pp_stream_record_init(pp_stream_record *r, const char *label, pp_record_kind kind,
                           size_t bytes);
/* Appends a completed item's record to s's records. Thread-safe. Fails only
 * out of host memory; the record is then dropped. */
pp_status pp_stream_push_record(pp_stream *s, const pp_stream_record *r, pp_error *err);

/* buf (an array of *cap elements of size bytes) grown to hold at least need
 * elements, doubling from 64, and *cap updated; buf itself when it already
 * fits; NULL out of host memory (buf and *cap unchanged). */
void *pp_stream_grow(void *buf, size_t *cap, size_t need, size_t size);

/* ---- the tables ---- */

/* The CPU implementation (stream_cpu.c). Never NULL. */
const pp_stream_ops *pp_stream_cpu_ops(void);
/* The CUDA implementation (stream_cuda.c), or NULL in builds without CUDA
 * (stream_cuda_absent.c). */
const pp_stream_ops *pp_stream_cuda_ops(void);

#endif
