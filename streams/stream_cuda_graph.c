/*
 * stream_cuda_graph.c - CUDA Graphs of CUDA streams (graph.h, native).
 *
 * Capture is stream capture in thread-local mode from the origin stream, the
 * others forked in and joined back through events. While a stream captures,
 * its timing events are recorded with cudaEventRecordExternal, so they
 * become event-record nodes that every launch records again; the graph
 * takes them over, and each launch lends them back to the streams' items
 * (borrowed), so a replayed item keeps its own span. A capture is refused
 * when a captured item failed on the host (its message names the refused
 * call), when the capture does not end cleanly, when the graph would keep a
 * stream-ordered allocation past its end, or when it does not instantiate.
 * A refused capture gives the captured items' timing events back to their
 * streams' spares and ends any capture still open on them. Destroying an
 * instantiated graph trims its devices' graph memory (cudaDeviceGraphMemTrim).
 */
#include <stdlib.h>
#include <string.h>

#include "streams/stream_cuda_internal.h"

typedef struct cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaEvent_t fork;        /* origin's device: forks the other streams into the capture */
    cudaEvent_t *join;       /* (n) join[i] on stream i's device (i >= 1); at each launch,
                                where stream i is before the launch (the origin waits) */
    cudaEvent_t done;        /* origin's device: recorded after each launch */
    size_t *begin;           /* (n) the stream's nitems when the capture began */
    timed_item **items;      /* (n) the captured items of each stream (events owned) */
    size_t *nitems;          /* (n) */
} cuda_graph;

static cuda_stream *cstream(const pp_graph *g, int i)
{
    return g->streams[i]->state;
}

static void destroy_event(pp_device_ctx *dev, cudaEvent_t *ev)
{
    if (*ev && pp_cuda_set_device(dev, NULL) == PP_OK)
        (void)PP_CUDA(dev, NULL, cudaEventDestroy(*ev));
    *ev = NULL;
}

/* Gives the graph memory no live graph uses back to each device of g (the
 * memory of a graph's allocation nodes stays reserved for graphs after it is
 * destroyed until trimmed: steps recaptured for new shapes, or sweeps over
 * plans, would otherwise keep every destroyed graph's memory). Called with
 * g's streams idle, after its exec is destroyed. */
static void trim_graph_memory(pp_graph *g)
{
    for (int i = 0; i < g->n; i++) {
        pp_device_ctx *dev = g->streams[i]->dev;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = g->streams[j]->dev == dev;
        if (seen || pp_cuda_set_device(dev, NULL) != PP_OK) continue;
        (void)PP_CUDA(dev, NULL, cudaDeviceGraphMemTrim(dev->id.index));
    }
}

void pp_cuda_graph_destroy(pp_graph *g)
{
    cuda_graph *cg = g->state;
    if (!cg) return;
    pp_device_ctx *origin = g->streams[0]->dev;
    const bool instantiated = cg->exec != NULL;
    if (pp_cuda_set_device(origin, NULL) == PP_OK) {
        if (cg->exec) (void)PP_CUDA(origin, NULL, cudaGraphExecDestroy(cg->exec));
        if (cg->graph) (void)PP_CUDA(origin, NULL, cudaGraphDestroy(cg->graph));
    }
    if (instantiated) trim_graph_memory(g);
    destroy_event(origin, &cg->fork);
    destroy_event(origin, &cg->done);
    for (int i = 0; i < g->n; i++) {
        pp_device_ctx *dev = g->streams[i]->dev;
        if (cg->join) destroy_event(dev, &cg->join[i]);
        for (size_t k = 0; cg->items && k < cg->nitems[i]; k++) {
            destroy_event(dev, &cg->items[i][k].start);
            destroy_event(dev, &cg->items[i][k].end);
        }
        if (cg->items) free(cg->items[i]);
    }
    free(cg->join);
    free(cg->begin);
    free(cg->items);
    free(cg->nitems);
    free(cg);
    g->state = NULL;
}

pp_status pp_cuda_graph_begin(pp_graph *g, pp_error *err)
{
    cuda_graph *cg = calloc(1, sizeof *cg);
    if (cg) {
        cg->join = calloc((size_t)g->n, sizeof *cg->join);
        cg->begin = calloc((size_t)g->n, sizeof *cg->begin);
        cg->items = calloc((size_t)g->n, sizeof *cg->items);
        cg->nitems = calloc((size_t)g->n, sizeof *cg->nitems);
    }
    g->state = cg;
    if (!cg || !cg->join || !cg->begin || !cg->items || !cg->nitems) {
        pp_cuda_graph_destroy(g);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (graph)");
    }
    pp_stream *o = g->streams[0];
    /* The graph's allocations come from the device's graph memory, not from the
     * default pool, which keeps what eager steps freed (release threshold
     * UINT64_MAX): give that back first, or the step's activations would be
     * held twice. The streams are idle; the pool regrows if eager work needs it. */
    for (int i = 0; i < g->n; i++) {
        pp_device_ctx *dev = g->streams[i]->dev;
        if (pp_cuda_dev(dev) && pp_cuda_set_device(dev, NULL) == PP_OK)
            (void)PP_CUDA(dev, NULL, cudaMemPoolTrimTo(pp_cuda_dev(dev)->pool, 0));
    }
    pp_status st = pp_cuda_set_device(o->dev, err);
    if (st == PP_OK)
        st = PP_CUDA(o->dev, err, cudaEventCreateWithFlags(&cg->fork, cudaEventDisableTiming));
    if (st == PP_OK)
        st = PP_CUDA(o->dev, err, cudaStreamBeginCapture(cstream(g, 0)->st,
                                                         cudaStreamCaptureModeThreadLocal));
    if (st != PP_OK) {
        pp_cuda_graph_destroy(g);
        return st;
    }
    st = PP_CUDA(o->dev, err, cudaEventRecord(cg->fork, cstream(g, 0)->st));
    for (int i = 1; i < g->n && st == PP_OK; i++) {
        st = pp_cuda_set_device(g->streams[i]->dev, err);
        if (st == PP_OK)
            st = PP_CUDA(g->streams[i]->dev, err,
                         cudaStreamWaitEvent(cstream(g, i)->st, cg->fork, 0));
    }
    for (int i = 0; i < g->n; i++) cg->begin[i] = cstream(g, i)->nitems;
    if (st != PP_OK) {
        cudaGraph_t dropped = NULL;
        if (pp_cuda_set_device(o->dev, NULL) == PP_OK &&
            cudaStreamEndCapture(cstream(g, 0)->st, &dropped) == cudaSuccess && dropped)
            (void)cudaGraphDestroy(dropped);
        (void)cudaGetLastError();
        pp_cuda_graph_destroy(g);
    }
    return st;
}

/* Ends any capture still open on g's streams (after a failed end). */
static void end_stray_captures(pp_graph *g)
{
    for (int i = 0; i < g->n; i++) {
        enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        if (pp_cuda_set_device(g->streams[i]->dev, NULL) != PP_OK) continue;
        if (cudaStreamIsCapturing(cstream(g, i)->st, &cap) != cudaSuccess ||
            cap == cudaStreamCaptureStatusNone) {
            (void)cudaGetLastError();
            continue;
        }
        cudaGraph_t dropped = NULL;
        if (cudaStreamEndCapture(cstream(g, i)->st, &dropped) == cudaSuccess && dropped)
            (void)cudaGraphDestroy(dropped);
        (void)cudaGetLastError();
    }
}

/* Moves each stream's items captured since the capture began into the graph. */
static pp_status take_items(pp_graph *g, pp_error *err)
{
    cuda_graph *cg = g->state;
    for (int i = 0; i < g->n; i++) {
        cuda_stream *cs = cstream(g, i);
        size_t n = cs->nitems > cg->begin[i] ? cs->nitems - cg->begin[i] : 0;
        if (n) {
            cg->items[i] = malloc(n * sizeof **cg->items);
            if (!cg->items[i]) return pp_error_set(err, PP_ERR_OOM, "out of host memory (graph)");
            memcpy(cg->items[i], cs->items + cg->begin[i], n * sizeof **cg->items);
        }
        cg->nitems[i] = n;
        cs->nitems = cg->begin[i];
        if (cs->nresolved > cs->nitems) cs->nresolved = cs->nitems;
    }
    return PP_OK;
}

/* Gives a refused capture's timing events back to their streams' spares. */
static void return_items(pp_graph *g)
{
    cuda_graph *cg = g->state;
    for (int i = 0; i < g->n; i++) {
        cuda_stream *cs = cstream(g, i);
        if (!cg->items[i]) { /* not taken: still the stream's own */
            for (size_t k = cg->begin[i]; k < cs->nitems; k++) {
                cs->spare[cs->nspare++] = cs->items[k].start;
                cs->spare[cs->nspare++] = cs->items[k].end;
            }
            if (cs->nitems > cg->begin[i]) cs->nitems = cg->begin[i];
            if (cs->nresolved > cs->nitems) cs->nresolved = cs->nitems;
            continue;
        }
        for (size_t k = 0; k < cg->nitems[i]; k++) {
            cs->spare[cs->nspare++] = cg->items[i][k].start;
            cs->spare[cs->nspare++] = cg->items[i][k].end;
        }
        free(cg->items[i]);
        cg->items[i] = NULL;
        cg->nitems[i] = 0;
    }
}

/* Refuses a graph that keeps stream-ordered allocations past its end: a
 * launch would fail (or leak) while they are live. */
static pp_status check_memory_nodes(pp_graph *g, pp_error *err)
{
    cuda_graph *cg = g->state;
    pp_device_ctx *o = g->streams[0]->dev;
    size_t n = 0;
    PP_TRY(PP_CUDA(o, err, cudaGraphGetNodes(cg->graph, NULL, &n)));
    if (n == 0) return PP_OK;
    cudaGraphNode_t *nodes = malloc(n * sizeof *nodes);
    if (!nodes) return pp_error_set(err, PP_ERR_OOM, "out of host memory (graph)");
    pp_status st = PP_CUDA(o, err, cudaGraphGetNodes(cg->graph, nodes, &n));
    long allocs = 0, frees = 0;
    for (size_t k = 0; k < n && st == PP_OK; k++) {
        enum cudaGraphNodeType t;
        st = PP_CUDA(o, err, cudaGraphNodeGetType(nodes[k], &t));
        allocs += t == cudaGraphNodeTypeMemAlloc;
        frees += t == cudaGraphNodeTypeMemFree;
    }
    free(nodes);
    if (st == PP_OK && allocs > frees)
        st = pp_error_set(err, PP_ERR_UNSUPPORTED,
                          "%s: the captured work keeps %ld stream-ordered allocation%s past its "
                          "end (cudaMallocAsync without its cudaFreeAsync in the capture)",
                          o->name, allocs - frees, allocs - frees == 1 ? "" : "s");
    return st;
}

pp_status pp_cuda_graph_end(pp_graph *g, pp_error *err)
{
    cuda_graph *cg = g->state;
    pp_stream *o = g->streams[0];
    pp_error e;
    pp_error_clear(&e);
    /* 1. join every stream back into the origin */
    pp_status st = PP_OK;
    for (int i = 1; i < g->n && st == PP_OK; i++) {
        pp_device_ctx *dev = g->streams[i]->dev;
        st = pp_cuda_set_device(dev, &e);
        if (st == PP_OK)
            st = PP_CUDA(dev, &e, cudaEventCreateWithFlags(&cg->join[i], cudaEventDisableTiming));
        if (st == PP_OK) st = PP_CUDA(dev, &e, cudaEventRecord(cg->join[i], cstream(g, i)->st));
        if (st == PP_OK) st = pp_cuda_set_device(o->dev, &e);
        if (st == PP_OK)
            st = PP_CUDA(o->dev, &e, cudaStreamWaitEvent(cstream(g, 0)->st, cg->join[i], 0));
    }
    /* 2. end the capture on the origin, whatever happened */
    pp_error e_end;
    pp_status end = pp_cuda_set_device(o->dev, &e_end);
    if (end == PP_OK)
        end = PP_CUDA(o->dev, &e_end, cudaStreamEndCapture(cstream(g, 0)->st, &cg->graph));
    if (st == PP_OK && end != PP_OK) {
        st = end;
        e = e_end;
    }
    end_stray_captures(g);
    /* 3. a captured item that failed on the host names the refused call: the
     *    earliest such failure comes first */
    int64_t first_ns = 0;
    pp_error first;
    pp_status failed = PP_OK;
    for (int i = 0; i < g->n; i++) {
        pp_error fe;
        int64_t when = 0;
        if (pp_stream_get_error(g->streams[i], UINT64_MAX, &fe, &when) != PP_OK &&
            (failed == PP_OK || when < first_ns)) {
            failed = fe.code;
            first = fe;
            first_ns = when;
        }
    }
    if (failed != PP_OK) {
        st = failed;
        e = first;
    }
    /* 4. the graph takes the timing events; check and instantiate it */
    if (st == PP_OK) st = take_items(g, &e);
    if (st == PP_OK && !cg->graph)
        st = pp_error_set(&e, PP_ERR_BACKEND, "%s: cudaStreamEndCapture gave no graph",
                          o->dev->name);
    if (st == PP_OK) st = check_memory_nodes(g, &e);
    if (st == PP_OK)
        st = PP_CUDA(o->dev, &e, cudaGraphInstantiateWithFlags(&cg->exec, cg->graph, 0));
    if (st == PP_OK)
        st = PP_CUDA(o->dev, &e, cudaEventCreateWithFlags(&cg->done, cudaEventDisableTiming));
    if (st == PP_OK) return PP_OK;
    return_items(g);
    pp_cuda_graph_destroy(g);
    if (err) *err = e;
    /* out of memory stays itself; anything else is a refusal */
    if (st != PP_ERR_OOM && err) err->code = PP_ERR_UNSUPPORTED;
    return st == PP_ERR_OOM ? st : PP_ERR_UNSUPPORTED;
}

/* Lends the graph's timing events to stream i's items for this launch. */
static pp_status lend_items(pp_graph *g, int i, pp_error *err)
{
    cuda_graph *cg = g->state;
    cuda_stream *cs = cstream(g, i);
    size_t n = cg->nitems[i];
    if (!n) return PP_OK;
    timed_item *p = pp_stream_grow(cs->items, &cs->capitems, cs->nitems + n, sizeof *p);
    if (!p) return pp_error_set(err, PP_ERR_OOM, "out of host memory (stream '%s')",
                                g->streams[i]->name);
    cs->items = p;
    for (size_t k = 0; k < n; k++) {
        timed_item *it = &cs->items[cs->nitems++];
        *it = cg->items[i][k];
        it->borrowed = true;
        it->rec.start_ns = it->rec.end_ns = 0;
    }
    return PP_OK;
}

pp_status pp_cuda_graph_launch(pp_graph *g, pp_error *err)
{
    cuda_graph *cg = g->state;
    pp_stream *o = g->streams[0];
    for (int i = 0; i < g->n; i++)
        if (pp_stream_get_error(g->streams[i], UINT64_MAX, NULL, NULL) != PP_OK)
            return PP_OK; /* skipped, like any work on a failed stream */
    for (int i = 0; i < g->n; i++) PP_TRY(lend_items(g, i, err));
    /* the work captured on stream i follows what stream i holds already, as it
     * would eagerly: the origin, where the graph runs, waits for every stream */
    for (int i = 1; i < g->n; i++) {
        pp_device_ctx *dev = g->streams[i]->dev;
        PP_TRY(pp_cuda_set_device(dev, err));
        PP_TRY(PP_CUDA(dev, err, cudaEventRecord(cg->join[i], cstream(g, i)->st)));
        PP_TRY(pp_cuda_set_device(o->dev, err));
        PP_TRY(PP_CUDA(o->dev, err, cudaStreamWaitEvent(cstream(g, 0)->st, cg->join[i], 0)));
    }
    PP_TRY(pp_cuda_set_device(o->dev, err));
    PP_TRY(PP_CUDA(o->dev, err, cudaGraphLaunch(cg->exec, cstream(g, 0)->st)));
    /* From here the work is enqueued: a failure is the streams' sticky error
     * (as for failing work), not a refused launch. Later work on any stream of
     * the graph, and its synchronize, follow the launch. */
    pp_error e;
    pp_status st = PP_CUDA(o->dev, &e, cudaEventRecord(cg->done, cstream(g, 0)->st));
    for (int i = 1; i < g->n && st == PP_OK; i++) {
        st = pp_cuda_set_device(g->streams[i]->dev, &e);
        if (st == PP_OK)
            st = PP_CUDA(g->streams[i]->dev, &e,
                         cudaStreamWaitEvent(cstream(g, i)->st, cg->done, 0));
    }
    if (st != PP_OK) {
        pp_error_prefix(&e, "graph launch on stream '%s'", o->name);
        for (int i = 0; i < g->n; i++) pp_stream_fail_now(g->streams[i], &e);
    }
    return PP_OK;
}
