/*
 * stream_cpu.c - streams and events on CPU devices: one worker thread per
 * stream draining a FIFO ring of items.
 *
 * Each stream counts items enqueued and completed; an event is the pair
 * (stream, enqueued count at record time) and is complete once the stream's
 * completed count reaches it. A wait item blocks the worker on the source
 * stream's condition variable. The ring grows by doubling when full and is
 * never shrunk, and timing records go into a buffer that is reused after
 * records_clear, so steady-state launches allocate nothing.
 *
 * Locking: every field below marked (mu) is guarded by that stream's mutex.
 * A thread never holds two stream mutexes at once.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "streams/stream_impl.h"

typedef enum cpu_item_kind {
    CPU_ITEM_LAUNCH,
    CPU_ITEM_COPY,
    CPU_ITEM_WAIT,         /* wait for (src, target) of a CPU event */
    CPU_ITEM_WAIT_FOREIGN, /* wait for an event of another backend */
} cpu_item_kind;

struct cpu_stream;

typedef struct cpu_item {
    cpu_item_kind kind;
    pp_stream_fn fn;
    void *arg;
    pp_copy_args copy;
    struct cpu_stream *wait_src;
    uint64_t wait_target;
    pp_event *foreign;
    char label[PP_STREAM_LABEL_MAX];
} cpu_item;

typedef struct cpu_stream {
    pp_stream *owner;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* worker sleeps here when the ring is empty */
    pthread_cond_t done_cv;  /* waiters for completion sleep here */
    cpu_item *ring;          /* (mu) cap slots, count used from head */
    size_t cap, head, count; /* (mu) */
    uint64_t enqueued;       /* (mu) items ever enqueued */
    uint64_t completed;      /* (mu) items ever completed (run or skipped) */
    bool stop;               /* (mu) destroy requested */
    bool sleeping;           /* (mu) worker waits on work_cv */
    int done_waiters;        /* (mu) threads waiting on done_cv */
    pp_error error;          /* (mu) sticky error; error.code PP_OK if none */
    int64_t error_ns;        /* (mu) when it first occurred */
    uint64_t error_seq;      /* (mu) 1-based index of the item that failed */
    pp_stream_record *recs;  /* (mu) records of completed items */
    size_t nrec, caprec;     /* (mu) */
} cpu_stream;

typedef struct cpu_event {
    cpu_stream *src;   /* NULL until recorded */
    uint64_t target;   /* complete when src->completed >= target */
} cpu_event;

#define CPU_RING_INITIAL 64
#define CPU_RECORDS_INITIAL 64

/* Sets the sticky error under mu if none is set yet. */
static void set_error_locked(cpu_stream *cs, const pp_error *e, int64_t when_ns, uint64_t seq)
{
    if (cs->error.code != PP_OK) return;
    cs->error = *e;
    if (cs->error.code == PP_OK) cs->error.code = PP_ERR_INTERNAL;
    cs->error_ns = when_ns;
    cs->error_seq = seq;
}

/* Waits (blocking) until src has completed target items; on return *inherit
 * holds src's error if the awaited work failed. Called without holding any
 * stream mutex. */
static void wait_point(cpu_stream *src, uint64_t target, pp_error *inherit, int64_t *when_ns)
{
    pthread_mutex_lock(&src->mu);
    if (src->completed < target) {
        src->done_waiters++;
        while (src->completed < target) pthread_cond_wait(&src->done_cv, &src->mu);
        src->done_waiters--;
    }
    if (src->error.code != PP_OK && src->error_seq <= target) {
        *inherit = src->error;
        *when_ns = src->error_ns;
    }
    pthread_mutex_unlock(&src->mu);
}

static void push_record_locked(cpu_stream *cs, const cpu_item *it, int64_t t0, int64_t t1)
{
    if (cs->nrec == cs->caprec) {
        size_t ncap = cs->caprec ? 2 * cs->caprec : CPU_RECORDS_INITIAL;
        pp_stream_record *r = realloc(cs->recs, ncap * sizeof *r);
        if (!r) return; /* out of memory: the timing record is dropped, the work is not */
        cs->recs = r;
        cs->caprec = ncap;
    }
    pp_stream_record *r = &cs->recs[cs->nrec++];
    memcpy(r->label, it->label, sizeof r->label);
    r->kind = it->kind == CPU_ITEM_COPY ? PP_RECORD_COPY : PP_RECORD_LAUNCH;
    r->start_ns = t0;
    r->end_ns = t1;
    r->bytes = it->kind == CPU_ITEM_COPY ? it->copy.bytes : 0;
}

/* Timed sleeps of a worker (the delay op, backends' waits) wake up on time:
 * Linux otherwise lets them overshoot by up to the 50 us default slack. */
static void precise_timers(void)
{
#if defined(__linux__)
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
}

static void *worker_main(void *p)
{
    cpu_stream *cs = p;
    precise_timers();
    pp_stream *s = cs->owner;
    cpu_item it;
    pp_error e;
    pthread_mutex_lock(&cs->mu);
    for (;;) {
        while (cs->count == 0 && !cs->stop) {
            cs->sleeping = true;
            pthread_cond_wait(&cs->work_cv, &cs->mu);
            cs->sleeping = false;
        }
        if (cs->count == 0) break;
        it = cs->ring[cs->head];
        cs->head = (cs->head + 1) % cs->cap;
        cs->count--;
        bool skip = cs->error.code != PP_OK;
        uint64_t seq = cs->completed + 1;
        pthread_mutex_unlock(&cs->mu);

        pp_status st = PP_OK;
        int64_t t0 = 0, t1 = 0, when = 0;
        e.code = PP_OK;
        e.msg[0] = '\0';
        if (!skip) {
            switch (it.kind) {
            case CPU_ITEM_LAUNCH:
                t0 = pp_stream_clock_ns();
                st = it.fn(&s->exec, it.arg, &e);
                t1 = pp_stream_clock_ns();
                if (st != PP_OK && e.code == PP_OK) e.code = st;
                when = t1;
                break;
            case CPU_ITEM_COPY:
                t0 = pp_stream_clock_ns();
                memcpy(it.copy.dst, it.copy.src, it.copy.bytes);
                t1 = pp_stream_clock_ns();
                break;
            case CPU_ITEM_WAIT:
                wait_point(it.wait_src, it.wait_target, &e, &when);
                st = e.code;
                break;
            case CPU_ITEM_WAIT_FOREIGN:
                st = it.foreign->impl->event_synchronize(it.foreign, &e);
                if (st != PP_OK && e.code == PP_OK) e.code = st;
                when = pp_stream_clock_ns();
                break;
            }
        }

        pthread_mutex_lock(&cs->mu);
        if (st != PP_OK) set_error_locked(cs, &e, when, seq);
        else if (!skip && (it.kind == CPU_ITEM_LAUNCH || it.kind == CPU_ITEM_COPY))
            push_record_locked(cs, &it, t0, t1);
        cs->completed++;
        if (cs->done_waiters) pthread_cond_broadcast(&cs->done_cv);
    }
    pthread_mutex_unlock(&cs->mu);
    return NULL;
}

/* Appends an item; grows the ring when full. */
static pp_status enqueue(pp_stream *s, const cpu_item *it, pp_error *err)
{
    cpu_stream *cs = s->state;
    pthread_mutex_lock(&cs->mu);
    if (cs->count == cs->cap) {
        size_t ncap = 2 * cs->cap;
        cpu_item *r = malloc(ncap * sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&cs->mu);
            return pp_error_set(err, PP_ERR_OOM, "stream '%s': out of host memory (queue)",
                                s->name);
        }
        for (size_t i = 0; i < cs->count; i++) r[i] = cs->ring[(cs->head + i) % cs->cap];
        free(cs->ring);
        cs->ring = r;
        cs->cap = ncap;
        cs->head = 0;
    }
    cs->ring[(cs->head + cs->count) % cs->cap] = *it;
    cs->count++;
    cs->enqueued++;
    if (cs->sleeping) pthread_cond_signal(&cs->work_cv);
    pthread_mutex_unlock(&cs->mu);
    return PP_OK;
}

static void set_label(cpu_item *it, const char *label)
{
    if (label) {
        size_t n = strnlen(label, sizeof it->label - 1);
        memcpy(it->label, label, n);
        it->label[n] = '\0';
    } else {
        it->label[0] = '\0';
    }
}

static pp_status cpu_stream_init(pp_stream *s, pp_error *err)
{
    cpu_stream *cs = calloc(1, sizeof *cs);
    if (!cs) return pp_error_set(err, PP_ERR_OOM, "out of host memory (stream)");
    cs->owner = s;
    cs->cap = CPU_RING_INITIAL;
    cs->ring = malloc(cs->cap * sizeof *cs->ring);
    if (!cs->ring) {
        free(cs);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (stream queue)");
    }
    pp_status st = pp_exec_init(&s->exec, s->dev, NULL, err);
    if (st != PP_OK) {
        free(cs->ring);
        free(cs);
        return st;
    }
    pthread_mutex_init(&cs->mu, NULL);
    pthread_cond_init(&cs->work_cv, NULL);
    pthread_cond_init(&cs->done_cv, NULL);
    s->state = cs;
    if (pthread_create(&cs->thread, NULL, worker_main, cs) != 0) {
        pthread_cond_destroy(&cs->done_cv);
        pthread_cond_destroy(&cs->work_cv);
        pthread_mutex_destroy(&cs->mu);
        pp_exec_destroy(&s->exec);
        free(cs->ring);
        free(cs);
        s->state = NULL;
        return pp_error_set(err, PP_ERR_BACKEND, "stream '%s': cannot start a worker thread",
                            s->name);
    }
    return PP_OK;
}

static void cpu_stream_destroy(pp_stream *s)
{
    cpu_stream *cs = s->state;
    pthread_mutex_lock(&cs->mu);
    cs->stop = true;
    pthread_cond_signal(&cs->work_cv);
    pthread_mutex_unlock(&cs->mu);
    pthread_join(cs->thread, NULL);
    pthread_cond_destroy(&cs->done_cv);
    pthread_cond_destroy(&cs->work_cv);
    pthread_mutex_destroy(&cs->mu);
    pp_exec_destroy(&s->exec);
    free(cs->recs);
    free(cs->ring);
    free(cs);
    s->state = NULL;
}

static pp_status cpu_launch(pp_stream *s, const char *label, pp_stream_fn fn, void *arg,
                            pp_error *err)
{
    cpu_item it;
    it.kind = CPU_ITEM_LAUNCH;
    it.fn = fn;
    it.arg = arg;
    set_label(&it, label);
    return enqueue(s, &it, err);
}

static pp_status cpu_copy(pp_stream *s, const pp_copy_args *c, const char *label, pp_error *err)
{
    if (c->dst_dev->id.kind != PP_DEVICE_CPU || c->src_dev->id.kind != PP_DEVICE_CPU)
        return pp_error_set(err, PP_ERR_UNSUPPORTED,
                            "stream '%s' (%s): cannot copy %s -> %s on a CPU stream", s->name,
                            s->dev->name, c->src_dev->name, c->dst_dev->name);
    cpu_item it;
    it.kind = CPU_ITEM_COPY;
    it.copy = *c;
    set_label(&it, label);
    return enqueue(s, &it, err);
}

static pp_status cpu_synchronize(pp_stream *s, pp_error *err)
{
    cpu_stream *cs = s->state;
    pthread_mutex_lock(&cs->mu);
    if (cs->completed < cs->enqueued) {
        cs->done_waiters++;
        while (cs->completed < cs->enqueued) pthread_cond_wait(&cs->done_cv, &cs->mu);
        cs->done_waiters--;
    }
    pp_status st = cs->error.code;
    if (st != PP_OK && err) *err = cs->error;
    pthread_mutex_unlock(&cs->mu);
    return st;
}

static pp_status cpu_error(pp_stream *s, pp_error *err, int64_t *when_ns)
{
    cpu_stream *cs = s->state;
    pthread_mutex_lock(&cs->mu);
    pp_status st = cs->error.code;
    if (st != PP_OK) {
        if (err) *err = cs->error;
        if (when_ns) *when_ns = cs->error_ns;
    }
    pthread_mutex_unlock(&cs->mu);
    return st;
}

static void cpu_clear_error(pp_stream *s)
{
    cpu_stream *cs = s->state;
    pthread_mutex_lock(&cs->mu);
    pp_error_clear(&cs->error);
    cs->error_ns = 0;
    cs->error_seq = 0;
    pthread_mutex_unlock(&cs->mu);
}

static pp_status cpu_records(pp_stream *s, const pp_stream_record **recs, size_t *n,
                             pp_error *err)
{
    cpu_stream *cs = s->state;
    pthread_mutex_lock(&cs->mu);
    *recs = cs->recs;
    *n = cs->nrec;
    pthread_mutex_unlock(&cs->mu);
    return PP_OK;
}

static void cpu_records_clear(pp_stream *s)
{
    cpu_stream *cs = s->state;
    pthread_mutex_lock(&cs->mu);
    cs->nrec = 0;
    pthread_mutex_unlock(&cs->mu);
}

static pp_status cpu_event_init(pp_event *ev, pp_error *err)
{
    cpu_event *ce = calloc(1, sizeof *ce);
    if (!ce) return pp_error_set(err, PP_ERR_OOM, "out of host memory (event)");
    ev->state = ce;
    return PP_OK;
}

static void cpu_event_destroy(pp_event *ev)
{
    free(ev->state);
    ev->state = NULL;
}

static pp_status cpu_event_record(pp_event *ev, pp_stream *s, pp_error *err)
{
    cpu_event *ce = ev->state;
    cpu_stream *cs = s->state;
    pthread_mutex_lock(&cs->mu);
    ce->target = cs->enqueued;
    pthread_mutex_unlock(&cs->mu);
    ce->src = cs;
    return PP_OK;
}

static pp_status cpu_wait_event(pp_stream *s, pp_event *ev, pp_error *err)
{
    cpu_item it;
    it.label[0] = '\0';
    if (ev->impl != s->impl) {
        it.kind = CPU_ITEM_WAIT_FOREIGN;
        it.foreign = ev;
        return enqueue(s, &it, err);
    }
    cpu_event *ce = ev->state;
    if (!ce->src || ce->src == s->state) return PP_OK; /* never recorded, or FIFO already orders it */
    it.kind = CPU_ITEM_WAIT;
    it.wait_src = ce->src;
    it.wait_target = ce->target;
    return enqueue(s, &it, err);
}

static pp_status event_error(cpu_stream *src, uint64_t target, pp_error *err)
{
    pp_status st = PP_OK;
    if (src->error.code != PP_OK && src->error_seq <= target) {
        st = src->error.code;
        if (err) *err = src->error;
    }
    return st;
}

static pp_status cpu_event_query(pp_event *ev, bool *done, pp_error *err)
{
    cpu_event *ce = ev->state;
    if (!ce->src) {
        *done = true;
        return PP_OK;
    }
    pthread_mutex_lock(&ce->src->mu);
    *done = ce->src->completed >= ce->target;
    pp_status st = *done ? event_error(ce->src, ce->target, err) : PP_OK;
    pthread_mutex_unlock(&ce->src->mu);
    return st;
}

static pp_status cpu_event_synchronize(pp_event *ev, pp_error *err)
{
    cpu_event *ce = ev->state;
    if (!ce->src) return PP_OK;
    pp_error e;
    int64_t when = 0;
    e.code = PP_OK;
    wait_point(ce->src, ce->target, &e, &when);
    if (e.code != PP_OK && err) *err = e;
    return e.code;
}

static const pp_stream_impl cpu_impl = {
    .name = "cpu",
    .stream_init = cpu_stream_init,
    .stream_destroy = cpu_stream_destroy,
    .launch = cpu_launch,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .error = cpu_error,
    .clear_error = cpu_clear_error,
    .records = cpu_records,
    .records_clear = cpu_records_clear,
    .event_init = cpu_event_init,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .wait_event = cpu_wait_event,
    .event_query = cpu_event_query,
    .event_synchronize = cpu_event_synchronize,
};

const pp_stream_impl *pp_stream_impl_cpu(void)
{
    return &cpu_impl;
}
