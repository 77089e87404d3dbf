/*
 * workers.h - the CPU backend's per-device worker pool (internal to
 * runtime/cpu).
 *
 * Each cpu:N device owns one pool (dev->backend), created by the backend's
 * device_init and freed by device_destroy. A pool of T threads is the caller
 * plus T-1 workers of a host thread pool (runtime/core/thread_pool.h); idle
 * workers block on a condition variable (they never spin), so several
 * devices sharing few cores do not compete while idle.
 * T is the number of online CPUs, or PP_CPU_THREADS (an integer in
 * [1, PP_CPU_MAX_THREADS]) when that variable is set.
 *
 * Determinism contract: pp_cpu_parallel runs fn(arg, t, worker) exactly once
 * for each task t in [0, tasks), on some thread, in no particular order.
 * Kernels make results independent of the thread count by choosing tasks from
 * the shape alone and by having each task write outputs no other task
 * writes; `worker` (in [0, T)) may only select scratch memory, never change
 * what is computed.
 *
 * Thread safety: any number of threads may call pp_cpu_parallel on one pool;
 * one job runs on the workers at a time, and a caller that finds the pool
 * busy (another stream of the device, or a call from inside a task) runs its
 * tasks itself, in order, as worker 0.
 */
#ifndef PP_CPU_POOL_H
#define PP_CPU_POOL_H

#include <stdint.h>

#include "runtime/core/exec.h"
#include "runtime/core/status.h"

#define PP_CPU_MAX_THREADS 256

typedef struct pp_cpu_pool pp_cpu_pool;

/* One task of a parallel job; worker is the index of the running thread. */
typedef void (*pp_cpu_task_fn)(void *arg, int64_t task, int worker);

/* A pool of `threads` threads (the caller counts as one), 1 <= threads <=
 * PP_CPU_MAX_THREADS. Free with pp_cpu_pool_free. */
pp_status pp_cpu_pool_new(int threads, pp_cpu_pool **out, pp_error *err);
/* Stops and joins the workers. No job may be running. NULL is allowed. */
void pp_cpu_pool_free(pp_cpu_pool *pool);

/* Thread count from the environment: PP_CPU_THREADS if set (PP_ERR_INPUT
 * when it is not an integer in [1, PP_CPU_MAX_THREADS]), else the number of
 * online CPUs (at most PP_CPU_MAX_THREADS). */
pp_status pp_cpu_pool_threads_from_env(int *threads, pp_error *err);

/* Number of threads of ex's device pool (1 when the device has none): the
 * number of distinct `worker` values a task may see, for sizing scratch. */
int pp_cpu_threads(const pp_exec *ex);

/* Runs fn(arg, t, worker) for every t in [0, tasks) on ex's device pool and
 * returns when all have finished (their writes are then visible to the
 * caller). Without a pool, or with one task, it runs them on the caller. */
void pp_cpu_parallel(pp_exec *ex, int64_t tasks, pp_cpu_task_fn fn, void *arg);

#endif
