/*
 * mpi.c - the MPI transport: the job is MPI_COMM_WORLD.
 *
 * pp_comm_init picks it only when a launcher started this process (mpirun,
 * mpiexec, srun: their environment names a rank; the `launched` entry); a
 * program started by hand is a job of one process (single.c) and never
 * touches MPI, so a plain run costs nothing and needs no MPI runtime at all.
 *
 * Every transfer and collective is started non-blocking and completed by
 * wait_until (MPI_Test, yielding the processor between tests, then short
 * sleeps on long waits), which gives up after the comm's timeout: a dead or
 * stalled peer turns into an error naming it instead of a hang. Errors are returned (MPI_ERRORS_RETURN on MPI_COMM_WORLD).
 *
 * The float sum is MPI_Reduce to rank 0 followed by MPI_Bcast, so every rank
 * holds the bits rank 0 formed, whichever reduction algorithm MPI picks.
 * A group is an MPI_Comm_split of MPI_COMM_WORLD; its sum is formed by
 * member 0 receiving the others' values in member order and adding them one
 * after another (a fixed order, unlike MPI_Reduce's), then MPI_Bcast.
 */
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/comm/transport.h"
#include "runtime/core/clock.h"

/* Whether a launcher started this process as a rank of a job. */
static bool mpi_launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                       "PMI_SIZE", "MPI_LOCALNRANKS", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}

static pp_status mpi_fail(pp_comm *c, pp_error *err, int rc, const char *fmt, const char *what,
                          int peer)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    char head[160];
    snprintf(head, sizeof head, fmt, what, peer);
    return pp_error_set(err, PP_ERR_BACKEND, "rank %d: %s: %s", c->rank, head, s);
}

static pp_status mpi_init(int *argc, char ***argv, pp_comm *c, pp_error *err)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited)
        return pp_error_set(err, PP_ERR_INVALID, "MPI is already initialised in this process");
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS)
        return pp_error_set(err, PP_ERR_BACKEND, "MPI_Init_thread failed (error %d)", rc);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    c->thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    return PP_OK;
}

static void mpi_finalize(pp_comm *c) { MPI_Finalize(); }

/* How a request that timed out is let go: MPI allows cancelling receives
 * and freeing sends; a collective's request may be neither (it is left). */
typedef enum req_kind { REQ_SEND, REQ_RECV, REQ_COLLECTIVE } req_kind;

/* Completes req within the comm's timeout; the error names the operation
 * (fmt is a printf format with %s for what and %d for peer). */
static pp_status wait_until(pp_comm *c, MPI_Request *req, req_kind kind, MPI_Status *st,
                            const char *fmt, const char *what, int peer, pp_error *err)
{
    double start = pp_now_s();
    long sleep_ns = 1000;
    int spins = 0;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, st);
        if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, fmt, what, peer);
        if (done) return PP_OK;
        double waited = pp_now_s() - start;
        if (c->timeout_s > 0 && waited > c->timeout_s) {
            char head[160];
            snprintf(head, sizeof head, fmt, what, peer);
            if (kind == REQ_RECV) MPI_Cancel(req);
            if (kind != REQ_COLLECTIVE) MPI_Request_free(req);
            return pp_error_set(err, PP_ERR_BACKEND, "rank %d: %s: nothing within %g s (the "
                                "process may have stopped)", c->rank, head, c->timeout_s);
        }
        /* MPI progresses a transfer (a long one is cut into fragments) only
         * inside MPI calls: test often, yielding the processor meanwhile,
         * and sleep briefly only once the wait is long */
        if (++spins < 2000) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 100000) sleep_ns *= 2;
    }
}

static pp_status mpi_send(pp_comm *c, int peer, int tag, const void *buf, size_t bytes,
                          pp_error *err)
{
    MPI_Request req;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s to rank %d", "send", peer);
    return wait_until(c, &req, REQ_SEND, MPI_STATUS_IGNORE, "%s to rank %d", "send", peer,
                      err);
}

static pp_status mpi_recv(pp_comm *c, int peer, int tag, void *buf, size_t bytes,
                          pp_error *err)
{
    MPI_Request req;
    MPI_Status st;
    int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s from rank %d", "receive", peer);
    PP_TRY(wait_until(c, &req, REQ_RECV, &st, "%s from rank %d", "receive", peer, err));
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if ((size_t)got != bytes)
        return pp_error_set(err, PP_ERR_BACKEND, "rank %d: receive from rank %d (tag %d): "
                            "expected %zu bytes, got %d", c->rank, peer, tag, bytes, got);
    return PP_OK;
}

static pp_status mpi_sum(pp_comm *c, float *buf, size_t n, pp_error *err)
{
    MPI_Request req;
    int rc = c->rank == 0
                 ? MPI_Ireduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD,
                               &req)
                 : MPI_Ireduce(buf, NULL, (int)n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s (root rank %d)", "gradient sum", 0);
    PP_TRY(wait_until(c, &req, REQ_COLLECTIVE, MPI_STATUS_IGNORE, "%s (root rank %d)",
                      "gradient sum", 0, err));
    rc = MPI_Ibcast(buf, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s (root rank %d)", "gradient sum", 0);
    return wait_until(c, &req, REQ_COLLECTIVE, MPI_STATUS_IGNORE, "%s (root rank %d)",
                      "gradient sum", 0, err);
}

static pp_status mpi_broadcast(pp_comm *c, int root, void *buf, size_t bytes, pp_error *err)
{
    MPI_Request req;
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s from rank %d", "broadcast", root);
    return wait_until(c, &req, REQ_COLLECTIVE, MPI_STATUS_IGNORE, "%s from rank %d",
                      "broadcast", root, err);
}

static pp_status mpi_barrier(pp_comm *c, pp_error *err)
{
    MPI_Request req;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s%.0d", "barrier", 0);
    return wait_until(c, &req, REQ_COLLECTIVE, MPI_STATUS_IGNORE, "%s%.0d", "barrier", 0,
                      err);
}

static pp_status mpi_group_new(pp_comm *c, pp_comm_group *g, int key, pp_error *err)
{
    MPI_Comm sub = MPI_COMM_NULL;
    int rc = MPI_Comm_split(MPI_COMM_WORLD, g ? 0 : MPI_UNDEFINED, key, &sub);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s (key %d)", "making a group", key);
    if (!g) return PP_OK;
    MPI_Comm *h = malloc(sizeof *h);
    if (!h) {
        MPI_Comm_free(&sub);
        return pp_error_set(err, PP_ERR_OOM, "rank %d: out of host memory (group)", c->rank);
    }
    *h = sub;
    g->state = h;
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    MPI_Comm_rank(sub, &g->rank);
    MPI_Comm_size(sub, &g->size);
    g->job_rank = malloc((size_t)g->size * sizeof *g->job_rank);
    if (!g->job_rank)
        return pp_error_set(err, PP_ERR_OOM, "rank %d: out of host memory (group)", c->rank);
    MPI_Request req;
    rc = MPI_Iallgather(&c->rank, 1, MPI_INT, g->job_rank, 1, MPI_INT, sub, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s (key %d)", "making a group", key);
    return wait_until(c, &req, REQ_COLLECTIVE, MPI_STATUS_IGNORE, "%s (key %d)",
                      "making a group", key, err);
}

static void mpi_group_free(pp_comm_group *g)
{
    MPI_Comm *h = g->state;
    MPI_Comm_free(h);
    free(h);
    g->state = NULL;
}

/* Member 0's half of the ordered sum: the others' values, added in order. */
static pp_status group_gather_add(pp_comm_group *g, MPI_Comm sub, float *buf, size_t n,
                                  pp_error *err)
{
    pp_comm *c = g->comm;
    if (g->scratch_n < n) {
        float *t = realloc(g->scratch, n * sizeof *t);
        if (!t) return pp_error_set(err, PP_ERR_OOM, "rank %d: out of host memory (group sum "
                                    "of %zu floats)", c->rank, n);
        g->scratch = t;
        g->scratch_n = n;
    }
    for (int k = 1; k < g->size; k++) {
        MPI_Request req;
        int peer = g->job_rank[k];
        int rc = MPI_Irecv(g->scratch, (int)n, MPI_FLOAT, k, 0, sub, &req);
        if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s from rank %d", "group sum", peer);
        PP_TRY(wait_until(c, &req, REQ_RECV, MPI_STATUS_IGNORE, "%s from rank %d", "group sum",
                          peer, err));
        for (size_t i = 0; i < n; i++) buf[i] += g->scratch[i];
    }
    return PP_OK;
}

static pp_status mpi_group_sum(pp_comm_group *g, float *buf, size_t n, pp_error *err)
{
    pp_comm *c = g->comm;
    MPI_Comm sub = *(MPI_Comm *)g->state;
    int root = g->job_rank[0];
    MPI_Request req;
    if (g->rank == 0) {
        PP_TRY(group_gather_add(g, sub, buf, n, err));
    } else {
        int rc = MPI_Isend(buf, (int)n, MPI_FLOAT, 0, 0, sub, &req);
        if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s to rank %d", "group sum", root);
        PP_TRY(wait_until(c, &req, REQ_SEND, MPI_STATUS_IGNORE, "%s to rank %d", "group sum",
                          root, err));
    }
    int rc = MPI_Ibcast(buf, (int)n, MPI_FLOAT, 0, sub, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(c, err, rc, "%s from rank %d", "group sum", root);
    return wait_until(c, &req, REQ_COLLECTIVE, MPI_STATUS_IGNORE, "%s from rank %d",
                      "group sum", root, err);
}

static pp_status mpi_group_broadcast(pp_comm_group *g, int root, void *buf, size_t bytes,
                                     pp_error *err)
{
    MPI_Request req;
    int from = g->job_rank[root];
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, *(MPI_Comm *)g->state, &req);
    if (rc != MPI_SUCCESS)
        return mpi_fail(g->comm, err, rc, "%s from rank %d", "group broadcast", from);
    return wait_until(g->comm, &req, REQ_COLLECTIVE, MPI_STATUS_IGNORE, "%s from rank %d",
                      "group broadcast", from, err);
}

static void mpi_abort(pp_comm *c, int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static const pp_comm_ops mpi_ops = {
    .name = "mpi",
    .launched = mpi_launched,
    .init = mpi_init,
    .finalize = mpi_finalize,
    .send = mpi_send,
    .recv = mpi_recv,
    .allreduce_sum_f32 = mpi_sum,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .group_new = mpi_group_new,
    .group_free = mpi_group_free,
    .group_sum_f32 = mpi_group_sum,
    .group_broadcast = mpi_group_broadcast,
    .abort = mpi_abort,
};

const pp_comm_ops *pp_comm_mpi_ops(void) { return &mpi_ops; }
