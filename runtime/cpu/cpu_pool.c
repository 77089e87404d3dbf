/*
 * cpu_pool.c - the CPU device's worker pool (see cpu_pool.h).
 *
 * One job at a time: the submitter publishes (fn, arg, tasks) under the
 * mutex, wakes the workers and takes tasks itself; tasks are handed out by an
 * atomic counter. When the submitter finds no task left it closes the job, so
 * a worker that wakes late does not join it, and waits only for the workers
 * that did join (`inflight`). The mutex orders every task's writes before the
 * submitter's return. Workers sleep on `wake` between jobs.
 */
#include "cpu_pool.h"

#include "cpu_device.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct pool_worker {
    pp_cpu_pool *pool;
    int index; /* 1..threads-1 */
    pthread_t thread;
} pool_worker;

struct pp_cpu_pool {
    int threads;
    pool_worker *workers; /* threads - 1 */
    int started;          /* workers actually started */

    pthread_mutex_t submit; /* held by the submitter of the running job */
    pthread_mutex_t mu;     /* guards everything below but `next` */
    pthread_cond_t wake;    /* a job was posted, or stop */
    pthread_cond_t idle;    /* inflight dropped to 0 */
    uint64_t job_id;        /* incremented per job */
    bool open;              /* the current job accepts workers */
    bool stop;
    int inflight;           /* workers inside the current job */
    pp_cpu_task_fn fn;
    void *arg;
    int64_t tasks;
    atomic_int_fast64_t next; /* next task to hand out */
};

/* Takes tasks of the current job until none is left. */
static void run_tasks(pp_cpu_pool *p, pp_cpu_task_fn fn, void *arg, int64_t tasks, int worker)
{
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= tasks) return;
        fn(arg, t, worker);
    }
}

static void *worker_main(void *opaque)
{
    pool_worker *w = opaque;
    pp_cpu_pool *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && (!p->open || p->job_id == seen)) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->job_id;
        pp_cpu_task_fn fn = p->fn;
        void *arg = p->arg;
        int64_t tasks = p->tasks;
        p->inflight++;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, fn, arg, tasks, w->index);
        pthread_mutex_lock(&p->mu);
        if (--p->inflight == 0) pthread_cond_signal(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

pp_status pp_cpu_pool_threads_from_env(int *threads, pp_error *err)
{
    const char *s = getenv("PP_CPU_THREADS");
    if (s && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || *end || v < 1 || v > PP_CPU_MAX_THREADS)
            return pp_error_set(err, PP_ERR_INPUT,
                                "PP_CPU_THREADS='%s': expected an integer in [1, %d]", s,
                                PP_CPU_MAX_THREADS);
        *threads = (int)v;
        return PP_OK;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    *threads = n < 1 ? 1 : n > PP_CPU_MAX_THREADS ? PP_CPU_MAX_THREADS : (int)n;
    return PP_OK;
}

void pp_cpu_pool_free(pp_cpu_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->submit);
    free(p->workers);
    free(p);
}

pp_status pp_cpu_pool_new(int threads, pp_cpu_pool **out, pp_error *err)
{
    *out = NULL;
    if (threads < 1 || threads > PP_CPU_MAX_THREADS)
        return pp_error_set(err, PP_ERR_INVALID, "cpu pool: %d threads is outside [1, %d]",
                            threads, PP_CPU_MAX_THREADS);
    pp_cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return pp_error_set(err, PP_ERR_OOM, "out of host memory (cpu pool)");
    p->threads = threads;
    atomic_init(&p->next, 0);
    pthread_mutex_init(&p->submit, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->idle, NULL);
    if (threads > 1) {
        p->workers = calloc((size_t)threads - 1, sizeof *p->workers);
        if (!p->workers) {
            pp_cpu_pool_free(p);
            return pp_error_set(err, PP_ERR_OOM, "out of host memory (cpu pool)");
        }
    }
    for (int i = 0; i < threads - 1; i++) {
        pool_worker *w = &p->workers[i];
        w->pool = p;
        w->index = i + 1;
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            pp_cpu_pool_free(p);
            return pp_error_set(err, PP_ERR_BACKEND, "cpu pool: cannot start thread %d of %d",
                                i + 2, threads);
        }
        p->started++;
    }
    *out = p;
    return PP_OK;
}

int pp_cpu_threads(const pp_exec *ex)
{
    const pp_cpu_device *cd = pp_cpu_device_of(ex->dev);
    return cd ? cd->pool->threads : 1;
}

void pp_cpu_parallel(pp_exec *ex, int64_t tasks, pp_cpu_task_fn fn, void *arg)
{
    pp_cpu_device *cd = pp_cpu_device_of(ex->dev);
    pp_cpu_pool *p = cd ? cd->pool : NULL;
    if (tasks <= 0) return;
    if (!p || p->threads == 1 || tasks == 1 || pthread_mutex_trylock(&p->submit) != 0) {
        for (int64_t t = 0; t < tasks; t++) fn(arg, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->tasks = tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->job_id++;
    p->open = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_tasks(p, fn, arg, tasks, 0);

    pthread_mutex_lock(&p->mu);
    p->open = false;
    while (p->inflight > 0) pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->submit);
}
