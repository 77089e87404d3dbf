/*
 * stream_cuda_internal.h - what the CUDA streams (stream_cuda.c) and their
 * graphs (stream_cuda_graph.c) share: a stream's backend state and its timed
 * items (internal: built only with the CUDA backend).
 *
 * A cuda_stream is pp_stream.state of a stream on a CUDA device; it is used
 * by one host thread at a time, as every stream. Graph capture takes over
 * the items a stream enqueues while it captures (their events become the
 * graph's event-record nodes) and lends them back at each launch.
 */
#ifndef PP_STREAM_CUDA_INTERNAL_H
#define PP_STREAM_CUDA_INTERNAL_H

#include "runtime/cuda/internal.h"
#include "streams/stream_impl.h"

typedef struct timed_item {
    pp_stream_record rec;    /* label, kind, bytes; times once resolved */
    cudaEvent_t start, end;
    bool borrowed;           /* the events belong to a graph (its event-record nodes):
                                never recycled or destroyed by the stream */
} timed_item;

/* GPUs (by index) whose peer-access outcome a copy stream remembers; copies to
 * higher indices try to enable it on every copy. */
#define PEER_CACHE 64

typedef struct cuda_stream {
    cudaStream_t st;
    timed_item *items;       /* items enqueued since the last records_clear */
    size_t nitems, capitems;
    size_t nresolved;        /* items[0 .. nresolved) are in the generic records */
    cudaEvent_t *spare;      /* recycled timing events */
    size_t nspare, capspare;
    signed char peer[PEER_CACHE]; /* by the other GPU's index: 0 peer access not tried
                                     yet, 1 enabled, -1 not possible */
    cudaEvent_t sync_ev;     /* recorded at the stream's end by a synchronize that waits */
    uint64_t syncs;          /* synchronizes so far: an anchor's generation (anchor_mu) */
} cuda_stream;


/* The graph functions of the CUDA stream table (stream_impl.h). */
pp_status pp_cuda_graph_begin(pp_graph *g, pp_error *err);
pp_status pp_cuda_graph_end(pp_graph *g, pp_error *err);
pp_status pp_cuda_graph_launch(pp_graph *g, pp_error *err);
void pp_cuda_graph_destroy(pp_graph *g);

#endif
