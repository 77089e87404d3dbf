/*
 * stream_state.c - what stream.c, graph.c and every stream backend share of
 * the generic handles (stream_impl.h), below all of them: the clock, the
 * sticky error, the timing records, the items of a recording graph, and the
 * growth of their arrays. Calls nothing else of streams/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "streams/stream_impl.h"

int64_t pp_stream_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void pp_stream_set_error(pp_stream *s, const pp_error *e, int64_t when_ns, uint64_t seq)
{
    pthread_mutex_lock(&s->mu);
    if (s->error.code == PP_OK) {
        s->error = *e;
        if (s->error.code == PP_OK) s->error.code = PP_ERR_INTERNAL;
        s->error_ns = when_ns;
        s->error_seq = seq;
    }
    pthread_mutex_unlock(&s->mu);
}

pp_status pp_stream_get_error(pp_stream *s, uint64_t seq_max, pp_error *err, int64_t *when_ns)
{
    pthread_mutex_lock(&s->mu);
    pp_status code = s->error_seq <= seq_max ? s->error.code : PP_OK;
    if (code != PP_OK) {
        if (err) *err = s->error;
        if (when_ns) *when_ns = s->error_ns;
    }
    pthread_mutex_unlock(&s->mu);
    return code;
}

void pp_stream_fail_now(pp_stream *s, const pp_error *e)
{
    pp_stream_set_error(s, e, pp_stream_clock_ns(), 0);
}

void *pp_stream_grow(void *buf, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return buf;
    size_t ncap = *cap ? *cap : 64;
    while (ncap < need) ncap *= 2;
    void *p = realloc(buf, ncap * size);
    if (p) *cap = ncap;
    return p;
}

void pp_stream_record_init(pp_stream_record *r, const char *label, pp_record_kind kind,
                           size_t bytes)
{
    size_t n = label ? strnlen(label, sizeof r->label - 1) : 0;
    memcpy(r->label, label ? label : "", n);
    r->label[n] = '\0';
    r->kind = kind;
    r->start_ns = r->end_ns = 0;
    r->bytes = bytes;
}

pp_status pp_stream_push_record(pp_stream *s, const pp_stream_record *r, pp_error *err)
{
    pthread_mutex_lock(&s->mu);
    pp_stream_record *recs = pp_stream_grow(s->recs, &s->caprec, s->nrec + 1, sizeof *recs);
    if (recs) {
        s->recs = recs;
        s->recs[s->nrec++] = *r;
    }
    pthread_mutex_unlock(&s->mu);
    if (!recs)
        return pp_error_set(err, PP_ERR_OOM, "stream '%s': out of host memory (timing records)",
                            s->name);
    return PP_OK;
}

pp_status pp_graph_record(pp_stream *s, const pp_graph_item *it, pp_error *err)
{
    pp_graph *g = s->capture;
    if (g->fail.code != PP_OK) return PP_OK; /* reported once, at capture end */
    if (it->kind == PP_GRAPH_ITEM_WAIT) {
        bool inside = false;
        for (size_t k = 0; k < g->n_items && !inside; k++)
            inside = g->items[k].kind == PP_GRAPH_ITEM_RECORD && g->items[k].ev == it->ev;
        if (!inside) {
            pp_error_set(&g->fail, PP_ERR_UNSUPPORTED,
                         "stream '%s' waits for an event not recorded in the capture "
                         "(pp_stream_wait_event)", s->name);
            return PP_OK;
        }
    }
    pp_graph_item *p = pp_stream_grow(g->items, &g->cap_items, g->n_items + 1, sizeof *p);
    if (!p) return pp_error_set(err, PP_ERR_OOM, "out of host memory (graph '%s')", s->name);
    g->items = p;
    g->items[g->n_items++] = *it;
    if (it->kind == PP_GRAPH_ITEM_LAUNCH || it->kind == PP_GRAPH_ITEM_COPY) g->n_work++;
    return PP_OK;
}
