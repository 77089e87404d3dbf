/*
 * test_thread_pool.c - the host thread pool (runtime/core/thread_pool.h):
 * every index runs exactly once in either mode, jobs back to back and from
 * several submitters, empty jobs, pools freed while idle, a busy pool refusing
 * a try, and, without the caller, n tasks that wait for one another all
 * running at once on threads of their own.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "runtime/core/thread_pool.h"
#include "tests/check.h"

#define MAX_N 4096

typedef struct count_job {
    _Atomic int hits[MAX_N];
    _Atomic int bad_worker;
    int workers;      /* of the pool */
    bool caller_ok;   /* whether worker 0 may appear */
} count_job;

static void count_fn(void *arg, int64_t i, int worker)
{
    count_job *j = arg;
    j->hits[i]++;
    if (worker < (j->caller_ok ? 0 : 1) || worker > j->workers) j->bad_worker++;
}

/* Runs a job of n indices and checks each ran once on a valid thread. */
static void run_counted(pp_thread_pool *p, pp_thread_pool_mode mode, int64_t n)
{
    static count_job j;
    memset(&j, 0, sizeof j);
    j.workers = pp_thread_pool_workers(p);
    j.caller_ok = mode == PP_THREAD_POOL_WITH_CALLER || j.workers == 0;
    pp_thread_pool_run(p, mode, n, count_fn, &j);
    int wrong = 0;
    for (int64_t i = 0; i < MAX_N; i++)
        if (j.hits[i] != (i < n ? 1 : 0)) wrong++;
    CHECK_MSG(wrong == 0, "mode %d, n %lld: %d indices not run exactly once", (int)mode,
              (long long)n, wrong);
    CHECK_MSG(j.bad_worker == 0, "mode %d, n %lld: worker index out of range", (int)mode,
              (long long)n);
}

static void test_exactly_once(void)
{
    static const int worker_counts[] = {0, 1, 3, 8};
    static const int64_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, MAX_N};
    pp_error err;
    for (size_t w = 0; w < sizeof worker_counts / sizeof *worker_counts; w++) {
        pp_thread_pool *p = NULL;
        CHECK_OK(pp_thread_pool_new(worker_counts[w], worker_counts[w], &p, &err), &err);
        if (!p) continue;
        CHECK(pp_thread_pool_workers(p) == worker_counts[w]);
        /* several jobs in a row, both modes interleaved */
        for (int round = 0; round < 20; round++)
            for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
                run_counted(p, PP_THREAD_POOL_WITH_CALLER, sizes[s]);
                run_counted(p, PP_THREAD_POOL_WORKERS_ONLY, sizes[s]);
            }
        pp_thread_pool_free(p);
    }
}

static _Atomic int never_calls;

static void never_fn(void *arg, int64_t i, int worker) { never_calls++; }

static void test_empty_and_idle(void)
{
    pp_error err;
    pp_thread_pool *p = NULL;
    /* freed while idle, never having run a job */
    CHECK_OK(pp_thread_pool_new(4, 4, &p, &err), &err);
    pp_thread_pool_free(p);
    CHECK_OK(pp_thread_pool_new(0, 0, &p, &err), &err);
    pp_thread_pool_free(p);
    pp_thread_pool_free(NULL);

    CHECK_OK(pp_thread_pool_new(2, 2, &p, &err), &err);
    pp_thread_pool_run(p, PP_THREAD_POOL_WITH_CALLER, 0, never_fn, NULL);
    pp_thread_pool_run(p, PP_THREAD_POOL_WORKERS_ONLY, 0, never_fn, NULL);
    pp_thread_pool_run(p, PP_THREAD_POOL_WORKERS_ONLY, -3, never_fn, NULL);
    CHECK(pp_thread_pool_try_run(p, PP_THREAD_POOL_WITH_CALLER, 0, never_fn, NULL));
    CHECK(pp_thread_pool_try_run(p, PP_THREAD_POOL_WORKERS_ONLY, 0, never_fn, NULL));
    CHECK(never_calls == 0);
    /* freed while idle after jobs */
    run_counted(p, PP_THREAD_POOL_WORKERS_ONLY, 10);
    pp_thread_pool_free(p);

    CHECK(pp_thread_pool_new(-1, 0, &p, &err) == PP_ERR_INVALID && !p);
    CHECK(pp_thread_pool_new(2, 3, &p, &err) == PP_ERR_INVALID && !p);
    CHECK(pp_thread_pool_new(PP_THREAD_POOL_MAX_WORKERS + 1, 0, &p, &err) == PP_ERR_INVALID);
}

/* Without a pool's workers the caller runs every index, in order. */
static int64_t order_seen[16];
static int order_len;

static void order_fn(void *arg, int64_t i, int worker)
{
    if (worker == 0 && order_len < 16) order_seen[order_len++] = i;
}

static void test_no_workers_in_order(void)
{
    pp_error err;
    pp_thread_pool *p = NULL;
    CHECK_OK(pp_thread_pool_new(0, 0, &p, &err), &err);
    for (int mode = 0; mode < 2 && p; mode++) {
        order_len = 0;
        pp_thread_pool_run(p, (pp_thread_pool_mode)mode, 5, order_fn, NULL);
        CHECK(order_len == 5);
        for (int i = 0; i < order_len; i++) CHECK(order_seen[i] == i);
    }
    pp_thread_pool_free(p);
}

/* n tasks that each wait (up to 20 s) until all n have arrived: a barrier
 * that only opens when every task runs at the same time. */
typedef struct meet_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, arrived;
    int timed_out;
    int worker_of[64];
} meet_job;

static void meet_fn(void *arg, int64_t i, int worker)
{
    meet_job *m = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&m->mu);
    m->worker_of[i] = worker;
    if (++m->arrived == m->n) pthread_cond_broadcast(&m->cv);
    while (m->arrived < m->n)
        if (pthread_cond_timedwait(&m->cv, &m->mu, &until) == ETIMEDOUT) {
            m->timed_out++;
            break;
        }
    pthread_mutex_unlock(&m->mu);
}

static void test_workers_meet(void)
{
    static const int shapes[][2] = {{1, 1}, {2, 2}, {4, 4}, {4, 6}, {8, 8}}; /* {n, workers} */
    pp_error err;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int n = shapes[s][0], workers = shapes[s][1];
        pp_thread_pool *p = NULL;
        CHECK_OK(pp_thread_pool_new(workers, workers, &p, &err), &err);
        if (!p) continue;
        for (int round = 0; round < 25; round++) {
            meet_job m = {.n = n};
            pthread_mutex_init(&m.mu, NULL);
            pthread_cond_init(&m.cv, NULL);
            pp_thread_pool_run(p, PP_THREAD_POOL_WORKERS_ONLY, n, meet_fn, &m);
            CHECK_MSG(m.arrived == n && m.timed_out == 0,
                      "%d tasks on %d workers: %d arrived, %d timed out", n, workers, m.arrived,
                      m.timed_out);
            /* each on a distinct pool thread, never the caller */
            bool used[65] = {false};
            for (int i = 0; i < n; i++) {
                int w = m.worker_of[i];
                CHECK_MSG(w >= 1 && w <= workers && !used[w], "task %d ran on worker %d", i, w);
                if (w >= 1 && w <= workers) used[w] = true;
            }
            pthread_cond_destroy(&m.cv);
            pthread_mutex_destroy(&m.mu);
        }
        pp_thread_pool_free(p);
    }
}

/* A try from inside a task of the same pool finds it busy. */
typedef struct nested_job {
    pp_thread_pool *pool;
    _Atomic int refused, ran;
} nested_job;

static void nested_inner(void *arg, int64_t i, int worker) { ((nested_job *)arg)->ran++; }

static void nested_outer(void *arg, int64_t i, int worker)
{
    nested_job *j = arg;
    if (!pp_thread_pool_try_run(j->pool, PP_THREAD_POOL_WITH_CALLER, 4, nested_inner, j))
        j->refused++;
}

static void test_try_busy(void)
{
    pp_error err;
    nested_job j = {0};
    CHECK_OK(pp_thread_pool_new(2, 2, &j.pool, &err), &err);
    if (!j.pool) return;
    pp_thread_pool_run(j.pool, PP_THREAD_POOL_WITH_CALLER, 6, nested_outer, &j);
    CHECK(j.refused == 6 && j.ran == 0);
    CHECK(pp_thread_pool_try_run(j.pool, PP_THREAD_POOL_WORKERS_ONLY, 6, nested_outer, &j));
    CHECK(j.refused == 12 && j.ran == 0);
    pp_thread_pool_free(j.pool);
}

/* Several threads submitting to one pool: their jobs take turns. */
typedef struct submitter {
    pp_thread_pool *pool;
    pp_thread_pool_mode mode;
    _Atomic int64_t sum;
} submitter;

static void add_fn(void *arg, int64_t i, int worker) { ((submitter *)arg)->sum += i + 1; }

static void *submit_thread(void *arg)
{
    submitter *s = arg;
    for (int k = 0; k < 200; k++) pp_thread_pool_run(s->pool, s->mode, 1 + k % 37, add_fn, s);
    return NULL;
}

static void test_concurrent_submitters(void)
{
    pp_error err;
    pp_thread_pool *p = NULL;
    CHECK_OK(pp_thread_pool_new(3, 3, &p, &err), &err);
    if (!p) return;
    submitter subs[4];
    pthread_t th[4];
    int64_t want = 0;
    for (int k = 0; k < 200; k++) {
        int64_t n = 1 + k % 37;
        want += n * (n + 1) / 2;
    }
    for (int t = 0; t < 4; t++) {
        subs[t] = (submitter){.pool = p, .mode = t % 2 ? PP_THREAD_POOL_WORKERS_ONLY
                                                       : PP_THREAD_POOL_WITH_CALLER};
        CHECK(pthread_create(&th[t], NULL, submit_thread, &subs[t]) == 0);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        CHECK_MSG(subs[t].sum == want, "submitter %d: sum %lld, want %lld", t,
                  (long long)subs[t].sum, (long long)want);
    }
    pp_thread_pool_free(p);
}

int main(void)
{
    test_exactly_once();
    test_empty_and_idle();
    test_no_workers_in_order();
    test_workers_meet();
    test_try_busy();
    test_concurrent_submitters();
    return check_summary("thread_pool");
}
