/*
 * stream_cpu.c - streams and events on CPU devices: one worker thread per
 * stream draining a FIFO ring of items.
 *
 * Each stream counts items enqueued and completed; an event is the pair
 * (stream, enqueued count at record time) and is complete once the stream's
 * completed count reaches it. An item carries the waits for other streams'
 * points that precede its work: pp_stream_wait_event followed by a launch or
 * a copy becomes one item, unless an event was recorded in between (the
 * record must then see the waits complete before the work). The ring grows
 * by doubling when full and is never shrunk, and the worker adds each item's
 * timing record to the generic handle's records (reused after records_clear),
 * so steady-state launches allocate nothing.
 *
 * Waking: a thread that waits for a point registers a waiter (the count it
 * waits for and a semaphore) on the source stream; the worker that reaches
 * the point unlinks exactly those waiters and posts them after releasing its
 * mutex, so nobody is woken for nothing or into a held lock. The host wakes
 * a sleeping worker the same way, after unlocking. Before blocking, a worker
 * with an empty ring, or a thread waiting for the point that its source
 * stream completes next, spins for at most CPU_SPIN_NS, yielding the
 * processor between checks: the host's next enqueue and a short item arrive
 * within microseconds, and a sleep plus a wake-up costs more than that.
 * Points further away are not spun for, so stages that compute for real
 * keep the processors.
 *
 * Locking: every field below marked (mu) is guarded by that stream's mutex;
 * fields marked (mu, atomic) are written under it and may be read without it
 * (the spins). A thread never holds two stream mutexes at once.
 */
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "runtime/core/ranges.h"
#include "streams/stream_impl.h"

typedef enum cpu_item_kind {
    CPU_ITEM_NONE,         /* waits only */
    CPU_ITEM_LAUNCH,
    CPU_ITEM_COPY,
    CPU_ITEM_WAIT_FOREIGN, /* wait for an event of another backend */
} cpu_item_kind;

struct cpu_stream;

/* A point of another CPU stream: complete when src has completed target items. */
typedef struct cpu_point {
    struct cpu_stream *src;
    uint64_t target;
} cpu_point;

#define CPU_ITEM_WAITS 4

typedef struct cpu_item {
    cpu_item_kind kind;
    int nwaits;
    cpu_point waits[CPU_ITEM_WAITS]; /* run before the work, in order */
    pp_stream_fn fn;
    void *arg;
    pp_copy_args copy;
    pp_event *foreign;
    pp_stream_record rec; /* launches and copies: label, kind, bytes; times when run */
} cpu_item;

/* A thread blocked until a stream reaches target; lives on its stack. The
 * worker that reaches target unlinks it under the stream's mutex and posts
 * sem after unlocking, so the woken thread does not run into a held lock. */
typedef struct cpu_waiter {
    uint64_t target;
    sem_t sem;
    struct cpu_waiter *next;
} cpu_waiter;

typedef struct cpu_stream {
    pp_stream *owner;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;          /* worker sleeps here when the ring is empty */
    cpu_item *ring;                  /* (mu) cap slots, count used from head */
    size_t cap, head, count;         /* (mu) */
    bool tail_open;                  /* (mu) the last ring item may take more waits or work */
    _Atomic uint64_t enqueued;       /* (mu, atomic) items ever enqueued */
    _Atomic uint64_t completed;      /* (mu, atomic) items ever completed (run or skipped) */
    bool stop;                       /* (mu) destroy requested */
    bool sleeping;                   /* (mu) worker waits on work_cv, not yet kicked */
    cpu_waiter *waiters;             /* (mu) threads blocked on completed */
    uint64_t min_target;             /* (mu) smallest target among waiters */
} cpu_stream;

typedef struct cpu_event {
    cpu_stream *src;   /* the stream it was last recorded on */
    uint64_t target;   /* complete when src->completed >= target */
} cpu_event;

#define CPU_RING_INITIAL 64
/* Longest spin before blocking. A few microseconds covers the host's next
 * enqueue and an empty item on another stream; longer spins measured no
 * better and only burn a processor that computing stages need. */
#define CPU_SPIN_NS 4000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spins until *v >= target or CPU_SPIN_NS have passed; true if reached. */
static bool spin_until(_Atomic uint64_t *v, uint64_t target)
{
    int64_t end = 0;
    for (int i = 0;; i++) {
        if (atomic_load_explicit(v, memory_order_acquire) >= target) return true;
        if (i < 32) {
            cpu_relax();
            continue;
        }
        int64_t now = pp_stream_clock_ns();
        if (end == 0) end = now + CPU_SPIN_NS;
        else if (now >= end) return false;
        sched_yield();
    }
}

/* Before blocking on a point of cs: spins only when the point is cs's next
 * completion (the item is running or about to); a point further away will
 * take longer than a spin. */
static void spin_for_point(cpu_stream *cs, uint64_t target)
{
    uint64_t done = atomic_load_explicit(&cs->completed, memory_order_acquire);
    if (done + 1 == target) spin_until(&cs->completed, target);
}

/* Called with cs->mu held; returns with it held once cs has completed
 * target items (the mutex is released while blocked). */
static void wait_completed_locked(cpu_stream *cs, uint64_t target)
{
    if (atomic_load_explicit(&cs->completed, memory_order_relaxed) >= target) return;
    cpu_waiter w = {.target = target, .next = cs->waiters};
    sem_init(&w.sem, 0, 0);
    cs->waiters = &w;
    if (target < cs->min_target || !w.next) cs->min_target = target;
    pthread_mutex_unlock(&cs->mu);
    while (sem_wait(&w.sem) != 0) {
    }
    sem_destroy(&w.sem);
    pthread_mutex_lock(&cs->mu);
}

/* Under cs->mu after completed moved: unlinks the waiters whose point is
 * reached and prepends them to *wake, for post_waiters after unlocking. */
static void take_reached_locked(cpu_stream *cs, cpu_waiter **wake)
{
    uint64_t done = atomic_load_explicit(&cs->completed, memory_order_relaxed);
    if (!cs->waiters || cs->min_target > done) return;
    uint64_t mn = UINT64_MAX;
    for (cpu_waiter **pp = &cs->waiters; *pp;) {
        cpu_waiter *w = *pp;
        if (w->target <= done) {
            *pp = w->next;
            w->next = *wake;
            *wake = w;
        } else {
            if (w->target < mn) mn = w->target;
            pp = &w->next;
        }
    }
    cs->min_target = mn;
}

/* Wakes the waiters taken by take_reached_locked; no mutex held. A waiter
 * may return and release its node as soon as it is posted. */
static void post_waiters(cpu_waiter **wake)
{
    for (cpu_waiter *w = *wake; w;) {
        cpu_waiter *next = w->next;
        sem_post(&w->sem);
        w = next;
    }
    *wake = NULL;
}

/* Waits until cs has completed target items, spinning briefly first. Called
 * without holding any stream mutex. */
static void wait_completed(cpu_stream *cs, uint64_t target)
{
    spin_for_point(cs, target);
    pthread_mutex_lock(&cs->mu);
    wait_completed_locked(cs, target);
    pthread_mutex_unlock(&cs->mu);
}

/* Waits until src has completed target items; returns src's error if the
 * awaited work failed (then *inherit and *when_ns, each may be NULL, receive
 * it). Called without holding any stream mutex. */
static pp_status wait_point(cpu_stream *src, uint64_t target, pp_error *inherit, int64_t *when_ns)
{
    wait_completed(src, target);
    return pp_stream_get_error(src->owner, target, inherit, when_ns);
}

/* Timed sleeps of a worker (the delay op, backends' waits) wake up on time:
 * Linux otherwise lets them overshoot by up to the 50 us default slack. */
static void precise_timers(void)
{
#if defined(__linux__)
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
}

/* Runs one popped item: its waits, then its work (unless a wait inherited an
 * error), timing the work in it->rec. Returns the item's status; e and *when
 * describe a failure. */
static pp_status run_item(pp_stream *s, cpu_item *it, pp_error *e, int64_t *when)
{
    for (int k = 0; k < it->nwaits; k++)
        if (wait_point(it->waits[k].src, it->waits[k].target, e, when) != PP_OK) return e->code;
    pp_status st = PP_OK;
    switch (it->kind) {
    case CPU_ITEM_NONE:
        break;
    case CPU_ITEM_LAUNCH:
        pp_range_push(it->rec.label); /* on this stream's thread, while it runs */
        it->rec.start_ns = pp_stream_clock_ns();
        st = it->fn(&s->exec, it->arg, e);
        it->rec.end_ns = pp_stream_clock_ns();
        pp_range_pop();
        if (st != PP_OK && e->code == PP_OK) e->code = st;
        *when = it->rec.end_ns;
        break;
    case CPU_ITEM_COPY:
        pp_range_push(it->rec.label);
        it->rec.start_ns = pp_stream_clock_ns();
        memcpy(it->copy.dst, it->copy.src, it->copy.bytes);
        it->rec.end_ns = pp_stream_clock_ns();
        pp_range_pop();
        break;
    case CPU_ITEM_WAIT_FOREIGN:
        st = it->foreign->ops->event_synchronize(it->foreign, e);
        if (st != PP_OK && e->code == PP_OK) e->code = st;
        *when = pp_stream_clock_ns();
        break;
    }
    return st;
}

static void *worker_main(void *p)
{
    cpu_stream *cs = p;
    precise_timers();
    pp_stream *s = cs->owner;
    cpu_item it;
    pp_error e;
    cpu_waiter *wake = NULL;
    pthread_mutex_lock(&cs->mu);
    for (;;) {
        if (cs->count == 0) {
            if (cs->stop) break;
            uint64_t seen = atomic_load_explicit(&cs->enqueued, memory_order_relaxed);
            pthread_mutex_unlock(&cs->mu);
            post_waiters(&wake);
            spin_until(&cs->enqueued, seen + 1);
            pthread_mutex_lock(&cs->mu);
            while (cs->count == 0 && !cs->stop) {
                cs->sleeping = true;
                pthread_cond_wait(&cs->work_cv, &cs->mu);
                cs->sleeping = false;
            }
            continue;
        }
        it = cs->ring[cs->head];
        cs->head = (cs->head + 1) % cs->cap;
        cs->count--;
        if (cs->count == 0) cs->tail_open = false;
        bool skip = pp_stream_get_error(s, UINT64_MAX, NULL, NULL) != PP_OK;
        uint64_t seq = atomic_load_explicit(&cs->completed, memory_order_relaxed) + 1;
        pthread_mutex_unlock(&cs->mu);
        post_waiters(&wake);

        pp_status st = PP_OK;
        int64_t when = 0;
        pp_error_clear(&e);
        if (!skip) st = run_item(s, &it, &e, &when);
        /* before the item counts as completed, so that a synchronized host
         * finds it; out of host memory, the record is dropped, not the work */
        if (st == PP_OK && !skip && (it.kind == CPU_ITEM_LAUNCH || it.kind == CPU_ITEM_COPY))
            (void)pp_stream_push_record(s, &it.rec, NULL);

        pthread_mutex_lock(&cs->mu);
        if (st != PP_OK) pp_stream_set_error(s, &e, when, seq);
        atomic_store_explicit(&cs->completed, seq, memory_order_release);
        take_reached_locked(cs, &wake);
    }
    pthread_mutex_unlock(&cs->mu);
    post_waiters(&wake);
    return NULL;
}

/* The last ring item if it is still waiting to run and may be extended:
 * nothing was recorded or synchronized after it. Under mu. */
static cpu_item *open_tail_locked(cpu_stream *cs)
{
    if (cs->count == 0 || !cs->tail_open) return NULL;
    return &cs->ring[(cs->head + cs->count - 1) % cs->cap];
}

/* Appends an item; grows the ring when full. open: later waits or work may
 * still be merged into it. */
static pp_status enqueue_locked(pp_stream *s, const cpu_item *it, bool open, pp_error *err)
{
    cpu_stream *cs = s->state;
    if (cs->count == cs->cap) {
        size_t ncap = 2 * cs->cap;
        cpu_item *r = malloc(ncap * sizeof *r);
        if (!r)
            return pp_error_set(err, PP_ERR_OOM, "stream '%s': out of host memory (queue)",
                                s->name);
        for (size_t i = 0; i < cs->count; i++) r[i] = cs->ring[(cs->head + i) % cs->cap];
        free(cs->ring);
        cs->ring = r;
        cs->cap = ncap;
        cs->head = 0;
    }
    cs->ring[(cs->head + cs->count) % cs->cap] = *it;
    cs->count++;
    cs->tail_open = open;
    atomic_store_explicit(&cs->enqueued, atomic_load_explicit(&cs->enqueued, memory_order_relaxed) + 1,
                          memory_order_release);
    return PP_OK;
}

/* Releases cs->mu, then wakes the worker if it sleeps while work waits
 * (signalled outside the lock so that it does not wake into a held mutex). */
static void unlock_and_kick(cpu_stream *cs)
{
    bool kick = cs->sleeping && cs->count > 0;
    if (kick) cs->sleeping = false;
    pthread_mutex_unlock(&cs->mu);
    if (kick) pthread_cond_signal(&cs->work_cv);
}

/* Enqueues work (a launch or a copy described by w, its record filled):
 * merged into a pending waits-only tail item when there is one. */
static pp_status enqueue_work(pp_stream *s, cpu_item *w, pp_error *err)
{
    cpu_stream *cs = s->state;
    pthread_mutex_lock(&cs->mu);
    cpu_item *tail = open_tail_locked(cs);
    pp_status st = PP_OK;
    if (tail && tail->kind == CPU_ITEM_NONE) {
        tail->kind = w->kind;
        tail->fn = w->fn;
        tail->arg = w->arg;
        tail->copy = w->copy;
        tail->rec = w->rec;
        cs->tail_open = false;
    } else {
        w->nwaits = 0;
        st = enqueue_locked(s, w, false, err);
    }
    unlock_and_kick(cs);
    return st;
}

/* Releases what cpu_stream_init made, once the worker has stopped (or never
 * started). */
static void release(pp_stream *s)
{
    cpu_stream *cs = s->state;
    pthread_cond_destroy(&cs->work_cv);
    pthread_mutex_destroy(&cs->mu);
    pp_exec_destroy(&s->exec);
    free(cs->ring);
    free(cs);
    s->state = NULL;
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
    atomic_init(&cs->enqueued, 0);
    atomic_init(&cs->completed, 0);
    pp_status st = pp_exec_init(&s->exec, s->dev, NULL, err);
    if (st != PP_OK) {
        free(cs->ring);
        free(cs);
        return st;
    }
    pthread_mutex_init(&cs->mu, NULL);
    pthread_cond_init(&cs->work_cv, NULL);
    s->state = cs;
    if (pthread_create(&cs->thread, NULL, worker_main, cs) != 0) {
        release(s);
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
    release(s);
}

static pp_status cpu_launch(pp_stream *s, const char *label, pp_stream_fn fn, void *arg,
                            pp_error *err)
{
    cpu_item it = {.kind = CPU_ITEM_LAUNCH, .fn = fn, .arg = arg};
    pp_stream_record_init(&it.rec, label, PP_RECORD_LAUNCH, 0);
    return enqueue_work(s, &it, err);
}

static pp_status cpu_copy(pp_stream *s, const pp_copy_args *c, const char *label, pp_error *err)
{
    if (c->dst_dev->id.kind != PP_DEVICE_CPU || c->src_dev->id.kind != PP_DEVICE_CPU)
        return pp_error_set(err, PP_ERR_UNSUPPORTED,
                            "stream '%s' (%s): cannot copy %s -> %s on a CPU stream", s->name,
                            s->dev->name, c->src_dev->name, c->dst_dev->name);
    cpu_item it = {.kind = CPU_ITEM_COPY, .copy = *c};
    pp_stream_record_init(&it.rec, label, PP_RECORD_COPY, c->bytes);
    return enqueue_work(s, &it, err);
}

static void cpu_synchronize(pp_stream *s)
{
    cpu_stream *cs = s->state;
    wait_completed(cs, atomic_load_explicit(&cs->enqueued, memory_order_relaxed));
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
    ce->target = atomic_load_explicit(&cs->enqueued, memory_order_relaxed);
    cs->tail_open = false; /* the point must not move past later work */
    pthread_mutex_unlock(&cs->mu);
    ce->src = cs;
    return PP_OK;
}

static pp_status cpu_wait_event(pp_stream *s, pp_event *ev, pp_error *err)
{
    cpu_stream *cs = s->state;
    cpu_event *ce = ev->state;
    if (ce->src == cs) return PP_OK; /* FIFO already orders it */
    cpu_item it = {.kind = CPU_ITEM_NONE};
    cpu_point pt = {ce->src, ce->target};
    pthread_mutex_lock(&cs->mu);
    cpu_item *tail = open_tail_locked(cs);
    pp_status st = PP_OK;
    if (tail && tail->kind == CPU_ITEM_NONE && tail->nwaits < CPU_ITEM_WAITS) {
        int k = 0;
        while (k < tail->nwaits && tail->waits[k].src != pt.src) k++;
        if (k == tail->nwaits) tail->waits[tail->nwaits++] = pt;
        else if (tail->waits[k].target < pt.target) tail->waits[k].target = pt.target;
    } else {
        it.nwaits = 1;
        it.waits[0] = pt;
        st = enqueue_locked(s, &it, true, err);
    }
    unlock_and_kick(cs);
    return st;
}

static pp_status cpu_wait_foreign(pp_stream *s, pp_event *ev, pp_error *err)
{
    cpu_stream *cs = s->state;
    cpu_item it = {.kind = CPU_ITEM_WAIT_FOREIGN, .foreign = ev};
    pthread_mutex_lock(&cs->mu);
    pp_status st = enqueue_locked(s, &it, false, err);
    unlock_and_kick(cs);
    return st;
}

static pp_status cpu_event_query(pp_event *ev, bool *done, pp_error *err)
{
    cpu_event *ce = ev->state;
    pthread_mutex_lock(&ce->src->mu);
    *done = atomic_load_explicit(&ce->src->completed, memory_order_relaxed) >= ce->target;
    pthread_mutex_unlock(&ce->src->mu);
    return *done ? pp_stream_get_error(ce->src->owner, ce->target, err, NULL) : PP_OK;
}

static pp_status cpu_event_synchronize(pp_event *ev, pp_error *err)
{
    cpu_event *ce = ev->state;
    return wait_point(ce->src, ce->target, err, NULL);
}

static const pp_stream_ops cpu_ops = {
    .name = "cpu",
    .stream_init = cpu_stream_init,
    .stream_destroy = cpu_stream_destroy,
    .launch = cpu_launch,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .event_init = cpu_event_init,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .wait_event = cpu_wait_event,
    .wait_foreign = cpu_wait_foreign,
    .event_query = cpu_event_query,
    .event_synchronize = cpu_event_synchronize,
};

const pp_stream_ops *pp_stream_cpu_ops(void)
{
    return &cpu_ops;
}
