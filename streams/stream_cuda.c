/*
 * stream_cuda.c - streams, events and copies on CUDA devices (stream_impl.h).
 *
 * A stream is a non-blocking cudaStream_t on its device with its own pp_exec
 * bound to it. pp_stream_launch calls fn at once on the calling host thread;
 * fn enqueues asynchronous work through the exec. Each launched or copied item
 * is bracketed by a pair of timing events; records_resolve turns them into
 * the generic handle's records after synchronize, against a host-clock
 * reference: the device's time anchor (an event whose completion a
 * synchronize waited for and saw, see cuda_synchronize), else an event
 * completed at that point. Timing events are recycled by
 * records_clear, so a steady state creates none.
 * Events are cudaEvent_t (timing disabled).
 *
 * Graphs are in stream_cuda_graph.c: while a stream captures, its timing
 * events are recorded with cudaEventRecordExternal, so they become the
 * graph's event-record nodes. Copies between devices use
 * cudaMemcpyPeerAsync, with peer access (and pool access for stream-ordered
 * allocations) enabled where cudaDeviceCanAccessPeer allows; copies within a
 * device or with the host use cudaMemcpyAsync.
 *
 * Errors: host-side failures (fn's status, a failed enqueue) and failures
 * reported by the CUDA runtime at synchronize are sticky as stream.h says; an
 * event remembers its stream's sticky error when recorded, and a stream
 * waiting for it inherits that error. The error lives in the generic handle
 * (stream_impl.h), under its own mutex, because a wait for a foreign (CPU)
 * event resolves on CUDA's host-callback thread.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ranges.h"
#include "streams/stream_cuda_internal.h"

typedef struct cuda_event {
    cudaEvent_t ev;
    pp_device_ctx *on;       /* the device ev was created on (CUDA records an event
                                only on a stream of its own device) */
    pp_error error;          /* the recording stream's sticky error at record time */
    int64_t error_ns;
} cuda_event;

/* A wait for a foreign event, run on CUDA's host-callback thread. */
typedef struct foreign_wait {
    pp_stream *s;
    pp_event *ev;
} foreign_wait;

/* Keeps a failure found on the host now as s's sticky error. */
/* ---- timing events ------------------------------------------------------------ */

/* Records a timing event on s: an event-record node while s captures. */
static pp_status record_timing(pp_stream *s, cudaEvent_t ev, pp_error *err)
{
    cuda_stream *cs = s->state;
    return PP_CUDA(s->dev, err,
                   cudaEventRecordWithFlags(ev, cs->st, s->capture ? cudaEventRecordExternal
                                                                   : cudaEventRecordDefault));
}

static pp_status take_event(pp_stream *s, cudaEvent_t *out, pp_error *err)
{
    cuda_stream *cs = s->state;
    if (cs->nspare) {
        *out = cs->spare[--cs->nspare];
        return PP_OK;
    }
    return PP_CUDA(s->dev, err, cudaEventCreate(out));
}

/* Keeps room for every timing event in the spare list, so recycling never fails. */
static pp_status reserve_spares(cuda_stream *cs, pp_stream *s, pp_error *err)
{
    size_t need = 2 * (cs->nitems + 1) + cs->nspare;
    cudaEvent_t *p = pp_stream_grow(cs->spare, &cs->capspare, need, sizeof *p);
    if (!p) return pp_error_set(err, PP_ERR_OOM, "out of host memory (stream '%s')", s->name);
    cs->spare = p;
    return PP_OK;
}

/* Starts a timed item: makes s's device current and records a start event on
 * the stream; returns its slot. */
static pp_status item_begin(pp_stream *s, const char *label, pp_record_kind kind, size_t bytes,
                            timed_item **out, pp_error *err)
{
    cuda_stream *cs = s->state;
    PP_TRY(pp_cuda_set_device(s->dev, err));
    PP_TRY(reserve_spares(cs, s, err));
    timed_item *p = pp_stream_grow(cs->items, &cs->capitems, cs->nitems + 1, sizeof *p);
    if (!p) return pp_error_set(err, PP_ERR_OOM, "out of host memory (stream '%s')", s->name);
    cs->items = p;
    timed_item *it = &cs->items[cs->nitems];
    pp_stream_record_init(&it->rec, label, kind, bytes);
    it->start = it->end = NULL;
    it->borrowed = false;
    PP_TRY(take_event(s, &it->start, err));
    pp_status st = take_event(s, &it->end, err);
    if (st == PP_OK) st = record_timing(s, it->start, err);
    if (st != PP_OK) {
        cs->spare[cs->nspare++] = it->start; /* capacity: spares never exceed 2 * items */
        if (it->end) cs->spare[cs->nspare++] = it->end;
        return st;
    }
    cs->nitems++;
    *out = it;
    return PP_OK;
}

/* Ends a timed item whose work returned st (its error in *e): records the
 * end event even after a failure, so that records_resolve never reads an item
 * whose end was not recorded, on s's device (the work may have switched
 * devices). Returns st, or the end's failure (then in *e) when st is PP_OK. */
static pp_status item_end(pp_stream *s, timed_item *it, pp_status st, pp_error *e)
{
    pp_error e2;
    pp_status end = pp_cuda_set_device(s->dev, &e2);
    if (end == PP_OK) end = record_timing(s, it->end, &e2);
    if (st != PP_OK || end == PP_OK) return st;
    *e = e2;
    return end;
}

/* ---- streams ------------------------------------------------------------------- */

static void drop_anchor(pp_stream *s);

static void cuda_stream_destroy(pp_stream *s)
{
    cuda_stream *cs = s->state;
    if (!cs) return;
    drop_anchor(s); /* first, and even when the device cannot be set: its event goes */
    if (pp_cuda_set_device(s->dev, NULL) == PP_OK) {
        if (cs->st) (void)PP_CUDA(s->dev, NULL, cudaStreamSynchronize(cs->st));
        pp_exec_destroy(&s->exec);
        for (size_t i = 0; i < cs->nitems; i++) {
            if (cs->items[i].borrowed) continue;
            (void)PP_CUDA(s->dev, NULL, cudaEventDestroy(cs->items[i].start));
            (void)PP_CUDA(s->dev, NULL, cudaEventDestroy(cs->items[i].end));
        }
        for (size_t i = 0; i < cs->nspare; i++)
            (void)PP_CUDA(s->dev, NULL, cudaEventDestroy(cs->spare[i]));
        if (cs->sync_ev) (void)PP_CUDA(s->dev, NULL, cudaEventDestroy(cs->sync_ev));
        if (cs->st) (void)PP_CUDA(s->dev, NULL, cudaStreamDestroy(cs->st));
    }
    free(cs->items);
    free(cs->spare);
    free(cs);
    s->state = NULL;
}

static pp_status cuda_stream_init(pp_stream *s, pp_error *err)
{
    cuda_stream *cs = calloc(1, sizeof *cs);
    if (!cs) return pp_error_set(err, PP_ERR_OOM, "out of host memory (stream '%s')", s->name);
    s->state = cs;
    pp_status st = pp_cuda_set_device(s->dev, err);
    if (st == PP_OK)
        st = PP_CUDA(s->dev, err, cudaStreamCreateWithFlags(&cs->st, cudaStreamNonBlocking));
    if (st == PP_OK) st = pp_exec_init(&s->exec, s->dev, cs->st, err);
    if (st != PP_OK) {
        cuda_stream_destroy(s);
        return st;
    }
    return PP_OK;
}

static pp_status cuda_launch(pp_stream *s, const char *label, pp_stream_fn fn, void *arg,
                             pp_error *err)
{
    /* skipped: the stream already failed */
    if (pp_stream_get_error(s, UINT64_MAX, NULL, NULL) != PP_OK) return PP_OK;
    pp_error e;
    pp_error_clear(&e);
    timed_item *it = NULL;
    pp_status st = item_begin(s, label, PP_RECORD_LAUNCH, 0, &it, &e);
    if (st == PP_OK) {
        pp_range_push(label); /* the enqueueing: a profiler projects it onto the GPU */
        st = fn(&s->exec, arg, &e);
        pp_range_pop();
        st = item_end(s, it, st, &e);
        if (s->capture) s->capture->n_work++;
    }
    /* like a failing kernel, a host-side failure surfaces at synchronize, so
     * the enqueue itself succeeds */
    if (st != PP_OK) {
        if (label && label[0]) pp_error_prefix(&e, "%s on stream '%s'", label, s->name);
        pp_stream_fail_now(s, &e);
    }
    return PP_OK;
}

/* Enables direct access from device `from` to device `to` (peer mappings and
 * the stream-ordered pool of `to`) when the hardware allows; returns whether
 * it is enabled. Already-enabled access counts as success. */
static bool enable_peer(pp_device_ctx *from, pp_device_ctx *to)
{
    pp_error e;
    bool ok = pp_cuda_peer_access(to, from, &e) == PP_OK;
    (void)cudaGetLastError();
    return ok;
}

/* Before a copy between two GPUs on s: enables peer access between s's device
 * and the other one where the hardware allows, trying once per other GPU
 * (three driver calls). */
static pp_status prepare_peer_copy(pp_stream *s, const pp_copy_args *c, pp_error *e)
{
    cuda_stream *cs = s->state;
    PP_TRY(pp_cuda_set_device(s->dev, e));
    if (!pp_cuda_dev(c->src_dev) || !pp_cuda_dev(c->dst_dev))
        return pp_error_set(e, PP_ERR_INVALID, "copy on stream '%s': device not initialised",
                            s->name);
    pp_device_ctx *other = s->dev == c->src_dev ? c->dst_dev : c->src_dev;
    int oi = other->id.index;
    if (oi >= PEER_CACHE || cs->peer[oi] == 0) {
        bool ok = enable_peer(s->dev, other);
        if (oi < PEER_CACHE) cs->peer[oi] = ok ? 1 : -1;
    }
    return PP_OK;
}

static pp_status cuda_copy(pp_stream *s, const pp_copy_args *c, const char *label,
                           pp_error *err)
{
    cuda_stream *cs = s->state;
    if (pp_stream_get_error(s, UINT64_MAX, NULL, NULL) != PP_OK) return PP_OK;
    pp_error e;
    pp_error_clear(&e);
    timed_item *it = NULL;
    const bool peer = c->src_dev->id.kind == PP_DEVICE_CUDA &&
                      c->dst_dev->id.kind == PP_DEVICE_CUDA && c->src_dev != c->dst_dev;
    pp_status st = peer ? prepare_peer_copy(s, c, &e) : PP_OK;
    if (st == PP_OK) st = item_begin(s, label, PP_RECORD_COPY, c->bytes, &it, &e);
    if (st == PP_OK) {
        pp_range_push(label);
        if (peer)
            st = PP_CUDA(s->dev, &e,
                         cudaMemcpyPeerAsync(c->dst, c->dst_dev->id.index, c->src,
                                             c->src_dev->id.index, c->bytes, cs->st));
        else
            st = PP_CUDA(s->dev, &e,
                         cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDefault, cs->st));
        pp_range_pop();
        st = item_end(s, it, st, &e);
        if (s->capture) s->capture->n_work++;
    }
    if (st != PP_OK) {
        pp_error_prefix(&e, "copy %s on stream '%s'", label ? label : "", s->name);
        pp_stream_fail_now(s, &e);
    }
    return PP_OK;
}

/* ---- the device's time anchor ---------------------------------------------------- */

/* s's sync_ev, whose completion the host has just seen at host_ns, becomes
 * its device's time anchor. */
static void set_anchor(pp_stream *s, int64_t host_ns)
{
    cuda_stream *cs = s->state;
    pp_cuda_device *cd = pp_cuda_dev(s->dev);
    pthread_mutex_lock(&cd->anchor_mu);
    cd->anchor_owner = cs;
    cd->anchor_gen = cs->syncs;
    cd->anchor_ev = cs->sync_ev;
    cd->anchor_ns = host_ns;
    pthread_mutex_unlock(&cd->anchor_mu);
}

/* A stream that goes takes its anchor with it. */
static void drop_anchor(pp_stream *s)
{
    pp_cuda_device *cd = pp_cuda_dev(s->dev);
    if (!cd) return;
    pthread_mutex_lock(&cd->anchor_mu);
    if (cd->anchor_owner == s->state) cd->anchor_owner = NULL;
    pthread_mutex_unlock(&cd->anchor_mu);
}

/* A new synchronize of s begins: an anchor s set no longer stands (its event
 * is about to be recorded again). Under the lock, as get_anchor reads it. */
static void age_anchor(pp_stream *s)
{
    cuda_stream *cs = s->state;
    pp_cuda_device *cd = pp_cuda_dev(s->dev);
    pthread_mutex_lock(&cd->anchor_mu);
    cs->syncs++;
    pthread_mutex_unlock(&cd->anchor_mu);
}

/* The device's anchor, if one stands: its event and host time. */
static bool get_anchor(pp_stream *s, cudaEvent_t *ev, int64_t *host_ns)
{
    pp_cuda_device *cd = pp_cuda_dev(s->dev);
    pthread_mutex_lock(&cd->anchor_mu);
    const cuda_stream *owner = cd->anchor_owner;
    bool ok = owner && owner->syncs == cd->anchor_gen;
    if (ok) {
        *ev = cd->anchor_ev;
        *host_ns = cd->anchor_ns;
    }
    pthread_mutex_unlock(&cd->anchor_mu);
    return ok;
}

/* Waits for s's work. A stream whose work has all completed (cudaStreamQuery)
 * needs no wait. Otherwise the host waits for an event recorded at the
 * stream's end and sees it complete: that event and the host's time become
 * the device's time anchor, against which records_resolve reads every
 * stream's timing events without another wait. So an executor that
 * synchronizes its streams in turn waits once, for the one that ends last,
 * and merely checks the others: one host synchronization per device and
 * step. */
static void cuda_synchronize(pp_stream *s)
{
    cuda_stream *cs = s->state;
    pp_error e;
    pp_status st = pp_cuda_set_device(s->dev, &e);
    if (st == PP_OK) {
        age_anchor(s); /* an anchor this stream set is older than this call from here on */
        cudaError_t q = cudaStreamQuery(cs->st);
        if (q == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* not an error: no later check may see it */
            if (!cs->sync_ev) st = PP_CUDA(s->dev, &e, cudaEventCreate(&cs->sync_ev));
            if (st == PP_OK) st = PP_CUDA(s->dev, &e, cudaEventRecord(cs->sync_ev, cs->st));
            if (st == PP_OK) st = PP_CUDA(s->dev, &e, cudaEventSynchronize(cs->sync_ev));
            if (st == PP_OK) set_anchor(s, pp_stream_clock_ns());
        } else if (q != cudaSuccess) {
            st = PP_CUDA(s->dev, &e, q); /* the stream's work failed */
        }
    }
    if (st != PP_OK) {
        pp_error_prefix(&e, "stream '%s'", s->name);
        pp_stream_fail_now(s, &e);
    }
}

/* The signed time in ms from event `from` to event `to` (both completed, one
 * device): negative when `to` came first. Whether cudaEventElapsedTime gives
 * negative times or clamps them to 0 is not promised, so a result that is
 * not positive is checked by asking the other way round. */
static pp_status event_gap_ms(pp_stream *s, cudaEvent_t from, cudaEvent_t to, float *ms,
                              pp_error *err)
{
    PP_TRY(PP_CUDA(s->dev, err, cudaEventElapsedTime(ms, from, to)));
    if (*ms > 0) return PP_OK;
    float back = 0;
    PP_TRY(PP_CUDA(s->dev, err, cudaEventElapsedTime(&back, to, from)));
    if (back > 0) *ms = -back;
    return PP_OK;
}

/* Adds the records of the items completed since the last call, their times
 * read against a host-clock reference: the device's time anchor (set by the
 * synchronize that waited), else an event completed now, read with the host
 * clock. cudaEventElapsedTime compares events of any streams of one device. */
static pp_status cuda_records_resolve(pp_stream *s, pp_error *err)
{
    cuda_stream *cs = s->state;
    if (cs->nresolved == cs->nitems) return PP_OK;
    cudaEvent_t ref;
    int64_t host_ref;
    PP_TRY(pp_cuda_set_device(s->dev, err));
    pp_status st = PP_OK;
    bool own = !get_anchor(s, &ref, &host_ref);
    if (own) { /* no anchor on the device: an event completed now, read with the host clock */
        /* ref may be a new event that goes to the spares below: keep room for it */
        PP_TRY(reserve_spares(cs, s, err));
        PP_TRY(take_event(s, &ref, err));
        st = PP_CUDA(s->dev, err, cudaEventRecord(ref, cs->st));
        if (st == PP_OK) st = PP_CUDA(s->dev, err, cudaEventSynchronize(ref));
        host_ref = pp_stream_clock_ns();
    }
    while (st == PP_OK && cs->nresolved < cs->nitems) {
        timed_item *it = &cs->items[cs->nresolved];
        float to_start = 0, to_end = 0;
        st = event_gap_ms(s, it->start, ref, &to_start, err);
        if (st == PP_OK) st = event_gap_ms(s, it->end, ref, &to_end, err);
        if (st != PP_OK) break;
        it->rec.start_ns = host_ref - (int64_t)((double)to_start * 1e6);
        it->rec.end_ns = host_ref - (int64_t)((double)to_end * 1e6);
        st = pp_stream_push_record(s, &it->rec, err);
        if (st == PP_OK) cs->nresolved++;
    }
    if (own) cs->spare[cs->nspare++] = ref;
    return st;
}

static void cuda_records_clear(pp_stream *s)
{
    cuda_stream *cs = s->state;
    for (size_t i = 0; i < cs->nitems; i++) {
        if (cs->items[i].borrowed) continue;
        cs->spare[cs->nspare++] = cs->items[i].start;
        cs->spare[cs->nspare++] = cs->items[i].end;
    }
    cs->nitems = 0;
    cs->nresolved = 0;
}

/* ---- events ----------------------------------------------------------------------- */

static void cuda_event_destroy(pp_event *ev)
{
    cuda_event *ce = ev->state;
    if (!ce) return;
    if (ce->ev && pp_cuda_set_device(ce->on, NULL) == PP_OK)
        (void)PP_CUDA(ce->on, NULL, cudaEventDestroy(ce->ev));
    free(ce);
    ev->state = NULL;
}

static pp_status cuda_event_init(pp_event *ev, pp_error *err)
{
    cuda_event *ce = calloc(1, sizeof *ce);
    if (!ce) return pp_error_set(err, PP_ERR_OOM, "out of host memory (event)");
    ev->state = ce;
    ce->on = ev->dev;
    pp_status st = pp_cuda_set_device(ev->dev, err);
    if (st == PP_OK)
        st = PP_CUDA(ev->dev, err, cudaEventCreateWithFlags(&ce->ev, cudaEventDisableTiming));
    if (st != PP_OK) cuda_event_destroy(ev);
    return st;
}

static pp_status cuda_event_record(pp_event *ev, pp_stream *s, pp_error *err)
{
    cuda_event *ce = ev->state;
    cuda_stream *cs = s->state;
    PP_TRY(pp_cuda_set_device(s->dev, err));
    if (ce->on != s->dev) {
        /* stream.h allows recording on a stream of another device; CUDA does not:
         * move the event to that device. Waits already enqueued keep the old one,
         * which CUDA releases once they are done. */
        cudaEvent_t moved;
        PP_TRY(PP_CUDA(s->dev, err, cudaEventCreateWithFlags(&moved, cudaEventDisableTiming)));
        if (pp_cuda_set_device(ce->on, NULL) == PP_OK)
            (void)PP_CUDA(ce->on, NULL, cudaEventDestroy(ce->ev));
        ce->ev = moved;
        ce->on = s->dev;
        PP_TRY(pp_cuda_set_device(s->dev, err));
    }
    PP_TRY(PP_CUDA(s->dev, err, cudaEventRecord(ce->ev, cs->st)));
    pp_error_clear(&ce->error);
    ce->error_ns = 0;
    (void)pp_stream_get_error(s, UINT64_MAX, &ce->error, &ce->error_ns);
    return PP_OK;
}

static void CUDART_CB foreign_wait_cb(void *p)
{
    foreign_wait *w = p;
    pp_error e;
    pp_error_clear(&e);
    if (w->ev->ops->event_synchronize(w->ev, &e) != PP_OK) pp_stream_fail_now(w->s, &e);
    free(w);
}

static pp_status cuda_wait_foreign(pp_stream *s, pp_event *ev, pp_error *err)
{
    cuda_stream *cs = s->state;
    PP_TRY(pp_cuda_set_device(s->dev, err));
    foreign_wait *w = malloc(sizeof *w);
    if (!w) return pp_error_set(err, PP_ERR_OOM, "out of host memory (stream '%s')", s->name);
    w->s = s;
    w->ev = ev;
    pp_status st = PP_CUDA(s->dev, err, cudaLaunchHostFunc(cs->st, foreign_wait_cb, w));
    if (st != PP_OK) free(w);
    return st;
}

static pp_status cuda_wait_event(pp_stream *s, pp_event *ev, pp_error *err)
{
    cuda_stream *cs = s->state;
    cuda_event *ce = ev->state;
    PP_TRY(pp_cuda_set_device(s->dev, err));
    if (ce->error.code != PP_OK) pp_stream_set_error(s, &ce->error, ce->error_ns, 0);
    return PP_CUDA(s->dev, err, cudaStreamWaitEvent(cs->st, ce->ev, 0));
}

/* The event's status once its point has completed: the recording stream's
 * sticky error at record time, if any. */
static pp_status recorded_error(const cuda_event *ce, pp_error *err)
{
    if (ce->error.code != PP_OK && err) *err = ce->error;
    return ce->error.code;
}

static pp_status cuda_event_query(pp_event *ev, bool *done, pp_error *err)
{
    cuda_event *ce = ev->state;
    *done = true;
    PP_TRY(pp_cuda_set_device(ce->on, err));
    cudaError_t e = cudaEventQuery(ce->ev);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        *done = false;
        return PP_OK;
    }
    PP_TRY(PP_CUDA(ce->on, err, e));
    return recorded_error(ce, err);
}

static pp_status cuda_event_synchronize(pp_event *ev, pp_error *err)
{
    cuda_event *ce = ev->state;
    PP_TRY(pp_cuda_set_device(ce->on, err));
    PP_TRY(PP_CUDA(ce->on, err, cudaEventSynchronize(ce->ev)));
    return recorded_error(ce, err);
}

static const pp_stream_ops cuda_ops = {
    .name = "cuda",
    .stream_init = cuda_stream_init,
    .stream_destroy = cuda_stream_destroy,
    .launch = cuda_launch,
    .copy = cuda_copy,
    .synchronize = cuda_synchronize,
    .records_resolve = cuda_records_resolve,
    .records_clear = cuda_records_clear,
    .event_init = cuda_event_init,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .wait_event = cuda_wait_event,
    .wait_foreign = cuda_wait_foreign,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .graph_begin = pp_cuda_graph_begin,
    .graph_end = pp_cuda_graph_end,
    .graph_launch = pp_cuda_graph_launch,
    .graph_destroy = pp_cuda_graph_destroy,
};

const pp_stream_ops *pp_stream_cuda_ops(void)
{
    return &cuda_ops;
}
