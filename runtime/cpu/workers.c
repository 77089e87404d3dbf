/*
 * workers.c - the CPU device's worker pool (see workers.h): the shared
 * host thread pool (runtime/core/thread_pool.h) with threads - 1 workers,
 * the caller taking part in every job as worker 0. A caller that finds the
 * pool busy runs its tasks itself.
 */
#include "workers.h"

#include "device.h"

#include "runtime/core/thread_pool.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

struct pp_cpu_pool {
    int threads;
    pp_thread_pool *workers; /* threads - 1 of them */
};

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
    pp_thread_pool_free(p->workers);
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
    pp_status s = pp_thread_pool_new(threads - 1, threads - 1, &p->workers, err);
    if (s != PP_OK) {
        free(p);
        return s;
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
    /* one task, or no worker, runs on the caller inside try_run itself */
    if (!p || !pp_thread_pool_try_run(p->workers, PP_THREAD_POOL_WITH_CALLER, tasks, fn, arg))
        for (int64_t t = 0; t < tasks; t++) fn(arg, t, 0);
}
