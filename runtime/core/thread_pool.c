/*
 * thread_pool.c - a persistent pool of host threads (see thread_pool.h).
 *
 * One job at a time (`submit`): the submitter publishes (fn, arg, n) under
 * `mu`, bumps the job id and wakes the workers; indices are handed out by an
 * atomic counter. A worker that wakes while the job is open joins it
 * (`inflight`), takes indices until none is left, then adds how many it ran
 * to `done` and leaves. With the caller taking part, the caller closes the
 * job as soon as it finds no index left, so a worker that wakes late does not
 * join it, and waits only for the workers that did join. Without it, the
 * caller waits until every index has run (`done == n`) and no worker is left
 * inside, then closes the job. Either way the mutex orders every task's
 * writes before the submitter's return. Workers sleep on `wake` between jobs.
 */
#include "runtime/core/thread_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct pool_worker {
    pp_thread_pool *pool;
    int index; /* 1..workers */
    pthread_t thread;
} pool_worker;

struct pp_thread_pool {
    pool_worker *workers; /* (capacity) */
    int started;          /* workers actually started */

    pthread_mutex_t submit; /* held by the submitter of the running job */
    pthread_mutex_t mu;     /* guards everything below but `next` */
    pthread_cond_t wake;    /* a job was posted, or stop */
    pthread_cond_t idle;    /* inflight dropped to 0 */
    uint64_t job_id;        /* incremented per job */
    bool open;              /* the current job accepts workers */
    bool stop;
    int inflight;           /* workers inside the current job */
    int64_t done;           /* indices of the current job the workers have run */
    pp_thread_pool_fn fn;
    void *arg;
    int64_t n;
    atomic_int_fast64_t next; /* next index to hand out */
};

/* Runs indices of the current job until none is left; returns how many. */
static int64_t run_indices(pp_thread_pool *p, pp_thread_pool_fn fn, void *arg, int64_t n,
                           int worker)
{
    int64_t ran = 0;
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= n) return ran;
        fn(arg, i, worker);
        ran++;
    }
}

static void *worker_main(void *opaque)
{
    pool_worker *w = opaque;
    pp_thread_pool *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && (!p->open || p->job_id == seen)) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->job_id;
        pp_thread_pool_fn fn = p->fn;
        void *arg = p->arg;
        int64_t n = p->n;
        p->inflight++;
        pthread_mutex_unlock(&p->mu);
        int64_t ran = run_indices(p, fn, arg, n, w->index);
        pthread_mutex_lock(&p->mu);
        p->done += ran;
        if (--p->inflight == 0) pthread_cond_signal(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void pp_thread_pool_free(pp_thread_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->submit); /* a job in progress finishes first */
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_mutex_unlock(&p->submit);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->submit);
    free(p->workers);
    free(p);
}

pp_status pp_thread_pool_new(int workers, int min_workers, pp_thread_pool **out,
                             pp_error *err)
{
    *out = NULL;
    if (workers < 0 || workers > PP_THREAD_POOL_MAX_WORKERS || min_workers < 0 ||
        min_workers > workers)
        return pp_error_set(err, PP_ERR_INVALID,
                            "thread pool: %d workers (at least %d) is outside [0, %d]", workers,
                            min_workers, PP_THREAD_POOL_MAX_WORKERS);
    pp_thread_pool *p = calloc(1, sizeof *p);
    if (!p) return pp_error_set(err, PP_ERR_OOM, "out of host memory (thread pool)");
    atomic_init(&p->next, 0);
    pthread_mutex_init(&p->submit, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->idle, NULL);
    if (workers > 0) {
        p->workers = calloc((size_t)workers, sizeof *p->workers);
        if (!p->workers) {
            pp_thread_pool_free(p);
            return pp_error_set(err, PP_ERR_OOM, "out of host memory (thread pool)");
        }
    }
    for (int i = 0; i < workers; i++) {
        pool_worker *w = &p->workers[i];
        w->pool = p;
        w->index = i + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) break;
        p->started++;
    }
    if (p->started < min_workers) {
        int started = p->started;
        pp_thread_pool_free(p);
        return pp_error_set(err, PP_ERR_BACKEND,
                            "thread pool: cannot start thread %d of %d", started + 1, workers);
    }
    *out = p;
    return PP_OK;
}

int pp_thread_pool_workers(const pp_thread_pool *p) { return p->started; }

/* The job itself; the caller holds `submit`. */
static void run_job(pp_thread_pool *p, pp_thread_pool_mode mode, int64_t n,
                    pp_thread_pool_fn fn, void *arg)
{
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->done = 0;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->job_id++;
    p->open = true;
    pthread_cond_broadcast(&p->wake);
    if (mode == PP_THREAD_POOL_WITH_CALLER) {
        pthread_mutex_unlock(&p->mu);
        run_indices(p, fn, arg, n, 0);
        pthread_mutex_lock(&p->mu);
        p->open = false; /* every index is taken: late wakers stay out */
        while (p->inflight > 0) pthread_cond_wait(&p->idle, &p->mu);
    } else {
        /* inflight reaches 0 with done < n only before any worker joined */
        while (p->done < n || p->inflight > 0) pthread_cond_wait(&p->idle, &p->mu);
        p->open = false;
    }
    pthread_mutex_unlock(&p->mu);
}

/* Whether the job needs no worker: it runs on the caller, in index order,
 * without touching the pool's state (so such jobs never wait for another). */
static bool caller_alone(const pp_thread_pool *p, pp_thread_pool_mode mode, int64_t n)
{
    return p->started == 0 || (mode == PP_THREAD_POOL_WITH_CALLER && n == 1);
}

static void run_on_caller(int64_t n, pp_thread_pool_fn fn, void *arg)
{
    for (int64_t i = 0; i < n; i++) fn(arg, i, 0);
}

void pp_thread_pool_run(pp_thread_pool *p, pp_thread_pool_mode mode, int64_t n,
                        pp_thread_pool_fn fn, void *arg)
{
    if (n <= 0) return;
    if (caller_alone(p, mode, n)) {
        run_on_caller(n, fn, arg);
        return;
    }
    pthread_mutex_lock(&p->submit);
    run_job(p, mode, n, fn, arg);
    pthread_mutex_unlock(&p->submit);
}

bool pp_thread_pool_try_run(pp_thread_pool *p, pp_thread_pool_mode mode, int64_t n,
                            pp_thread_pool_fn fn, void *arg)
{
    if (n <= 0) return true;
    if (caller_alone(p, mode, n)) {
        run_on_caller(n, fn, arg);
        return true;
    }
    if (pthread_mutex_trylock(&p->submit) != 0) return false;
    run_job(p, mode, n, fn, arg);
    pthread_mutex_unlock(&p->submit);
    return true;
}
