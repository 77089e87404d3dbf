/*
 * graph.c - captured work replayed as one unit (graph.h): argument checks,
 * the recorded implementation, and dispatch to a backend's native graphs
 * (stream_impl.h).
 *
 * Recorded graphs: while s->capture is set, stream.c hands every launch,
 * copy, event record and wait on s to pp_graph_record (stream_state.c)
 * instead of the backend. The list is in the host's enqueue order over all streams, which
 * is a valid issue order (every record precedes the waits for it), so a
 * launch replays it through the public functions unchanged and the backend
 * sees exactly what eager execution gives it.
 */
#include "streams/graph.h"

#include <stdlib.h>
#include <string.h>

#include "streams/stream_impl.h"

static bool native_of(const pp_stream_ops *ops)
{
    return ops->graph_begin && ops->graph_end && ops->graph_launch && ops->graph_destroy;
}

static pp_status check_streams(pp_stream *const *streams, int n, bool capturing, pp_error *err)
{
    if (!streams || n < 1)
        return pp_error_set(err, PP_ERR_INVALID, "graph: no streams to capture");
    for (int i = 0; i < n; i++) {
        if (!streams[i]) return pp_error_set(err, PP_ERR_INVALID, "graph: stream %d is NULL", i);
        if (streams[i]->ops != streams[0]->ops)
            return pp_error_set(err, PP_ERR_UNSUPPORTED,
                                "graph: streams '%s' (%s) and '%s' (%s) belong to different "
                                "backends; a graph captures streams of one backend",
                                streams[0]->name, streams[0]->dev->name, streams[i]->name,
                                streams[i]->dev->name);
        if (capturing ? streams[i]->capture != streams[0]->capture || !streams[i]->capture
                      : streams[i]->capture != NULL)
            return pp_error_set(err, PP_ERR_INVALID, "graph: stream '%s' is %s", streams[i]->name,
                                capturing ? "not in this capture" : "already capturing");
        for (int j = 0; j < i; j++)
            if (streams[j] == streams[i])
                return pp_error_set(err, PP_ERR_INVALID, "graph: stream '%s' given twice",
                                    streams[i]->name);
    }
    return PP_OK;
}

void pp_graph_free(pp_graph *g)
{
    if (!g) return;
    for (int i = 0; i < g->n; i++) {
        if (g->streams[i]->capture == g) g->streams[i]->capture = NULL;
        pp_stream_records_clear(g->streams[i]);
    }
    if (g->native && g->state) g->ops->graph_destroy(g);
    free(g->items);
    free(g->streams);
    free(g);
}

pp_status pp_graph_capture_begin(pp_stream *const *streams, int n, pp_error *err)
{
    PP_TRY(check_streams(streams, n, false, err));
    pp_graph *g = calloc(1, sizeof *g);
    if (g) g->streams = malloc((size_t)n * sizeof *g->streams);
    if (!g || !g->streams) {
        free(g);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (graph)");
    }
    memcpy(g->streams, streams, (size_t)n * sizeof *streams);
    g->n = n;
    g->ops = streams[0]->ops;
    g->native = native_of(g->ops);
    pp_error_clear(&g->fail);
    if (g->native) {
        pp_status st = g->ops->graph_begin(g, err);
        if (st != PP_OK) {
            pp_graph_free(g);
            return st;
        }
    }
    for (int i = 0; i < n; i++) streams[i]->capture = g;
    return PP_OK;
}

pp_status pp_graph_capture_end(pp_stream *const *streams, int n, pp_graph **out, pp_error *err)
{
    *out = NULL;
    PP_TRY(check_streams(streams, n, true, err));
    pp_graph *g = streams[0]->capture;
    if (g->n != n)
        return pp_error_set(err, PP_ERR_INVALID, "graph: capture of %d streams ended on %d",
                            g->n, n);
    for (int i = 0; i < n; i++) streams[i]->capture = NULL;
    pp_status st = PP_OK;
    if (g->native) {
        st = g->ops->graph_end(g, err);
    } else if (g->fail.code != PP_OK) {
        if (err) *err = g->fail;
        st = g->fail.code;
    }
    if (st != PP_OK) {
        pp_graph_free(g);
        return pp_error_prefix(err, "graph capture refused, running eagerly");
    }
    *out = g;
    return PP_OK;
}

pp_status pp_graph_launch(pp_graph *g, pp_error *err)
{
    if (!g) return pp_error_set(err, PP_ERR_INVALID, "graph launch: NULL graph");
    if (g->native) return g->ops->graph_launch(g, err);
    for (size_t k = 0; k < g->n_items; k++) {
        const pp_graph_item *it = &g->items[k];
        switch (it->kind) {
        case PP_GRAPH_ITEM_LAUNCH:
            PP_TRY(pp_stream_launch(it->s, it->label, it->fn, it->arg, err));
            break;
        case PP_GRAPH_ITEM_COPY:
            PP_TRY(pp_stream_copy(it->s, it->copy.dst, it->copy.dst_dev, it->copy.src,
                                  it->copy.src_dev, it->copy.bytes, it->label, err));
            break;
        case PP_GRAPH_ITEM_RECORD: PP_TRY(pp_event_record(it->ev, it->s, err)); break;
        case PP_GRAPH_ITEM_WAIT: PP_TRY(pp_stream_wait_event(it->s, it->ev, err)); break;
        }
    }
    return PP_OK;
}

bool pp_graph_replays_host(const pp_graph *g)
{
    return g && !g->native;
}

int pp_graph_items(const pp_graph *g)
{
    return g ? g->n_work : 0;
}
