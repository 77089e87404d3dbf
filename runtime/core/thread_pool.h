/*
 * thread_pool.h - a small persistent pool of host threads that runs a
 * function over the indices 0..n-1 (internal: not part of the public API).
 *
 * A pool owns `workers` threads, started by pp_thread_pool_new and joined by
 * pp_thread_pool_free; between jobs they block on a condition variable (they
 * never spin), so idle pools sharing few cores cost nothing. A job is
 * fn(arg, i, worker) for every i in [0, n): each index runs exactly once, on
 * some thread, in no particular order; indices are handed out one at a time
 * from a shared counter, so a thread slowed by other work leaves the rest to
 * the others. `worker` names the running thread: 0 is the caller, 1..workers
 * the pool's threads; it may select per-thread scratch memory, but results
 * that must not depend on timing must not depend on it either.
 *
 * Two ways to run a job:
 *   PP_THREAD_POOL_WITH_CALLER   the caller takes indices too (as worker 0)
 *                                and the workers that wake in time join it;
 *                                for data-parallel loops, where the caller
 *                                would otherwise sit idle. Any number of
 *                                workers, 0 included, completes the job.
 *   PP_THREAD_POOL_WORKERS_ONLY  only the pool's threads take indices; the
 *                                caller waits. A thread takes a new index
 *                                only when its previous one has returned, so
 *                                with workers >= n every index runs on a
 *                                thread of its own, all at once: tasks may
 *                                block waiting for one another (one task per
 *                                rank of a job of threads). A pool with no
 *                                worker runs such a job on the caller, in
 *                                index order.
 * Either way the call returns when every index has returned, and every
 * task's writes are then visible to the caller. A job that needs no worker
 * (one index with the caller taking part, or a pool without workers) runs
 * on the caller at once, in index order, without waiting for other jobs.
 *
 * Ownership: the creator owns the pool and frees it once no job is running;
 * fn and arg stay the caller's and must stay valid until the run returns.
 * Thread safety: any number of threads may submit to one pool; one job runs
 * at a time. pp_thread_pool_run waits for a running job to finish first (so
 * it must not be called from inside one of the same pool's tasks, which
 * would wait for itself); pp_thread_pool_try_run instead returns false at
 * once, having run nothing, so the caller can run the indices itself.
 */
#ifndef PP_THREAD_POOL_H
#define PP_THREAD_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/status.h"

#define PP_THREAD_POOL_MAX_WORKERS 1024

typedef struct pp_thread_pool pp_thread_pool;

/* One index of a job; worker: 0 for the caller, 1..workers for the pool's
 * threads. */
typedef void (*pp_thread_pool_fn)(void *arg, int64_t index, int worker);

typedef enum pp_thread_pool_mode {
    PP_THREAD_POOL_WITH_CALLER,
    PP_THREAD_POOL_WORKERS_ONLY,
} pp_thread_pool_mode;

/* A pool of up to `workers` threads, 0 <= min_workers <= workers <=
 * PP_THREAD_POOL_MAX_WORKERS (PP_ERR_INVALID otherwise). When the system
 * refuses to start a thread the pool keeps the ones it has if there are at
 * least min_workers of them (pp_thread_pool_workers tells how many), else it
 * fails with PP_ERR_BACKEND. Free with pp_thread_pool_free. */
pp_status pp_thread_pool_new(int workers, int min_workers, pp_thread_pool **out,
                             pp_error *err);
/* Waits for a job in progress, then stops and joins the workers. NULL is a
 * no-op. Must not be called from one of the pool's tasks. */
void pp_thread_pool_free(pp_thread_pool *pool);

/* Number of threads the pool started (the largest `worker` a task sees). */
int pp_thread_pool_workers(const pp_thread_pool *pool);

/* Runs fn(arg, i, worker) for every i in [0, n) as `mode` says and returns
 * when all have returned; n <= 0 runs nothing. Waits first for a job that
 * another thread is running on the pool. */
void pp_thread_pool_run(pp_thread_pool *pool, pp_thread_pool_mode mode, int64_t n,
                        pp_thread_pool_fn fn, void *arg);

/* As pp_thread_pool_run when the pool is free (returns true once the job is
 * done); when another job is running, returns false at once having run
 * nothing. n <= 0 returns true. */
bool pp_thread_pool_try_run(pp_thread_pool *pool, pp_thread_pool_mode mode, int64_t n,
                            pp_thread_pool_fn fn, void *arg);

#endif
