/*
 * comm.c - the job-wide communication API of comm/comm.h: the checked
 * wrapper over the comm's transport (comm/transport.h): argument checks, the
 * job (or group) of one rank, chunking of long transfers and the tensor
 * wrappers here, then one call through c->ops.
 */
#include "runtime/comm/comm.h"

#include <stdio.h>
#include <stdlib.h>

#include "runtime/comm/local.h"
#include "runtime/comm/transport.h"

bool pp_comm_built_with_mpi(void) { return pp_comm_mpi_ops() != NULL; }

/* A comm of ops, rank 0 of 1, with the default timeout; NULL out of memory. */
static pp_comm *comm_new(const pp_comm_ops *ops)
{
    pp_comm *c = calloc(1, sizeof *c);
    if (c)
        *c = (pp_comm){.ops = ops, .rank = 0, .size = 1, .thread_multiple = true,
                       .timeout_s = PP_COMM_TIMEOUT_DEFAULT_S};
    return c;
}

pp_status pp_comm_init(int *argc, char ***argv, pp_comm **out, pp_error *err)
{
    if (!out) return pp_error_set(err, PP_ERR_INVALID, "pp_comm_init: out is NULL");
    *out = NULL;
    const pp_comm_ops *ops = pp_comm_single_ops(), *mpi = pp_comm_mpi_ops();
    if (mpi && mpi->launched && mpi->launched()) ops = mpi;
    pp_comm *c = comm_new(ops);
    if (!c) return pp_error_set(err, PP_ERR_OOM, "pp_comm_init: out of host memory");
    pp_status s = ops->init ? ops->init(argc, argv, c, err) : PP_OK;
    if (s != PP_OK) {
        free(c);
        return s;
    }
    *out = c;
    return PP_OK;
}

pp_status pp_comm_local_new(int size, pp_comm **comms, pp_error *err)
{
    if (!comms) return pp_error_set(err, PP_ERR_INVALID, "pp_comm_local_new: comms is NULL");
    if (size < 1 || size > 4096)
        return pp_error_set(err, PP_ERR_INVALID, "a job of threads needs 1..4096 ranks, got %d",
                            size);
    pp_status s = PP_OK;
    int made = 0;
    for (; made < size; made++) {
        comms[made] = comm_new(pp_comm_local_ops());
        if (!comms[made]) {
            s = pp_error_set(err, PP_ERR_OOM, "out of host memory (a job of threads)");
            break;
        }
        comms[made]->rank = made;
        comms[made]->size = size;
    }
    if (s == PP_OK) s = pp_comm_local_join(comms, size, err);
    if (s != PP_OK)
        for (int r = 0; r < made; r++) {
            free(comms[r]); /* no state: the job was not made */
            comms[r] = NULL;
        }
    return s;
}

void pp_comm_free(pp_comm *c)
{
    if (!c) return;
    if (c->ops->finalize) c->ops->finalize(c);
    free(c);
}

bool pp_comm_is_local(const pp_comm *c) { return c && c->ops == pp_comm_local_ops(); }

void pp_comm_mark_failed(pp_comm *c, const char *msg)
{
    if (c && c->ops->mark_failed) c->ops->mark_failed(c, msg);
}

bool pp_comm_first_failure(const pp_comm *c, int *rank, char *msg, size_t n)
{
    return c && rank && msg && c->ops->first_failure && c->ops->first_failure(c, rank, msg, n);
}

int pp_comm_rank(const pp_comm *c) { return c ? c->rank : 0; }
int pp_comm_size(const pp_comm *c) { return c ? c->size : 1; }
bool pp_comm_thread_safe(const pp_comm *c) { return !c || c->thread_multiple; }

pp_status pp_comm_set_timeout(pp_comm *c, double seconds, pp_error *err)
{
    if (!c) return pp_error_set(err, PP_ERR_INVALID, "pp_comm_set_timeout: comm is NULL");
    if (!(seconds >= 0))
        return pp_error_set(err, PP_ERR_INVALID, "communication timeout must be >= 0 seconds, "
                            "got %g", seconds);
    c->timeout_s = seconds;
    return PP_OK;
}

double pp_comm_timeout(const pp_comm *c) { return c ? c->timeout_s : PP_COMM_TIMEOUT_DEFAULT_S; }

/* The checks every point-to-point call shares. */
static pp_status check_p2p(const pp_comm *c, const char *what, int peer, int tag,
                           const void *buf, size_t bytes, pp_error *err)
{
    if (!c) return pp_error_set(err, PP_ERR_INVALID, "%s: comm is NULL", what);
    if (peer < 0 || peer >= c->size)
        return pp_error_set(err, PP_ERR_INVALID, "%s: rank %d does not exist (the job has %d "
                            "process%s)", what, peer, c->size, c->size == 1 ? "" : "es");
    if (peer == c->rank)
        return pp_error_set(err, PP_ERR_INVALID, "%s: rank %d to itself", what, peer);
    if (tag < 0 || tag > PP_COMM_TAG_MAX)
        return pp_error_set(err, PP_ERR_INVALID, "%s: tag %d outside 0..%d", what, tag,
                            PP_COMM_TAG_MAX);
    if (!buf && bytes)
        return pp_error_set(err, PP_ERR_INVALID, "%s: buffer is NULL", what);
    return PP_OK;
}

/* One transfer of comm/comm.h, cut into pieces of at most PP_COMM_CHUNK bytes
 * (whole floats for sums) sent in order, each through the comm's transport. */
typedef enum xfer_op { X_SEND, X_RECV, X_SUM, X_BCAST, X_GSUM, X_GBCAST } xfer_op;

typedef struct xfer {
    xfer_op op;
    pp_comm *c;
    pp_comm_group *g;
    int peer;  /* send, receive: the peer; broadcasts: the root */
    int tag;
} xfer;

static pp_status xfer_piece(const xfer *x, char *p, size_t bytes, pp_error *err)
{
    const pp_comm_ops *ops = (x->g ? x->g->comm : x->c)->ops;
    float *f = (float *)(void *)p;
    size_t n = bytes / sizeof(float);
    switch (x->op) {
    case X_SEND: return ops->send(x->c, x->peer, x->tag, p, bytes, err);
    case X_RECV: return ops->recv(x->c, x->peer, x->tag, p, bytes, err);
    case X_SUM: return ops->allreduce_sum_f32(x->c, f, n, err);
    case X_BCAST: return ops->broadcast(x->c, x->peer, p, bytes, err);
    case X_GSUM: return ops->group_sum_f32(x->g, f, n, err);
    case X_GBCAST: return ops->group_broadcast(x->g, x->peer, p, bytes, err);
    }
    return pp_error_set(err, PP_ERR_INTERNAL, "comm: unknown transfer %d", (int)x->op);
}

/* The whole buffer in pieces; an empty message is still sent and received,
 * an empty collective does nothing. */
static pp_status xfer_all(const xfer *x, void *buf, size_t bytes, pp_error *err)
{
    bool p2p = x->op == X_SEND || x->op == X_RECV;
    if (!bytes && !p2p) return PP_OK;
    char *p = buf;
    size_t done = 0;
    do {
        size_t n = bytes - done < PP_COMM_CHUNK ? bytes - done : PP_COMM_CHUNK;
        PP_TRY(xfer_piece(x, p + done, n, err));
        done += n;
    } while (done < bytes);
    return PP_OK;
}

pp_status pp_comm_send(pp_comm *c, int peer, int tag, const void *buf, size_t bytes,
                       pp_error *err)
{
    PP_TRY(check_p2p(c, "send", peer, tag, buf, bytes, err));
    return xfer_all(&(xfer){X_SEND, c, NULL, peer, tag}, (void *)buf, bytes, err);
}

pp_status pp_comm_recv(pp_comm *c, int peer, int tag, void *buf, size_t bytes, pp_error *err)
{
    PP_TRY(check_p2p(c, "receive", peer, tag, buf, bytes, err));
    return xfer_all(&(xfer){X_RECV, c, NULL, peer, tag}, buf, bytes, err);
}

static pp_status check_host_tensor(const pp_tensor *t, const char *what, pp_error *err)
{
    if (!t) return pp_error_set(err, PP_ERR_INVALID, "%s: tensor is NULL", what);
    if (t->dev && t->dev->id.kind != PP_DEVICE_CPU)
        return pp_error_set(err, PP_ERR_INVALID, "%s: the tensor is not in host memory", what);
    return PP_OK;
}

pp_status pp_comm_send_tensor(pp_comm *c, int peer, int tag, const pp_tensor *t, pp_error *err)
{
    PP_TRY(check_host_tensor(t, "send", err));
    return pp_comm_send(c, peer, tag, t->data, pp_tensor_bytes(t), err);
}

pp_status pp_comm_recv_tensor(pp_comm *c, int peer, int tag, pp_tensor *t, pp_error *err)
{
    PP_TRY(check_host_tensor(t, "receive", err));
    return pp_comm_recv(c, peer, tag, t->data, pp_tensor_bytes(t), err);
}

pp_status pp_comm_allreduce_sum_f32(pp_comm *c, float *buf, size_t n, pp_error *err)
{
    if (!c) return pp_error_set(err, PP_ERR_INVALID, "allreduce: comm is NULL");
    if (!buf && n) return pp_error_set(err, PP_ERR_INVALID, "allreduce: buffer is NULL");
    if (c->size == 1) return PP_OK;
    return xfer_all(&(xfer){X_SUM, c, NULL, 0, 0}, buf, n * sizeof *buf, err);
}

pp_status pp_comm_broadcast(pp_comm *c, int root, void *buf, size_t bytes, pp_error *err)
{
    if (!c) return pp_error_set(err, PP_ERR_INVALID, "broadcast: comm is NULL");
    if (root < 0 || root >= c->size)
        return pp_error_set(err, PP_ERR_INVALID, "broadcast: rank %d does not exist (the job "
                            "has %d process%s)", root, c->size, c->size == 1 ? "" : "es");
    if (!buf && bytes) return pp_error_set(err, PP_ERR_INVALID, "broadcast: buffer is NULL");
    if (c->size == 1) return PP_OK;
    return xfer_all(&(xfer){X_BCAST, c, NULL, root, 0}, buf, bytes, err);
}

pp_status pp_comm_barrier(pp_comm *c, pp_error *err)
{
    if (!c) return pp_error_set(err, PP_ERR_INVALID, "barrier: comm is NULL");
    if (c->size == 1) return PP_OK;
    return c->ops->barrier(c, err);
}

pp_status pp_comm_group_new(pp_comm *c, bool member, int key, pp_comm_group **out,
                            pp_error *err)
{
    if (!c || !out) return pp_error_set(err, PP_ERR_INVALID, "group: comm or out is NULL");
    *out = NULL;
    pp_comm_group *g = NULL;
    if (member) {
        g = calloc(1, sizeof *g);
        if (!g) return pp_error_set(err, PP_ERR_OOM, "rank %d: out of host memory (group)",
                                    c->rank);
        g->comm = c;
    }
    if (c->size > 1) {
        pp_status s = c->ops->group_new(c, g, key, err);
        if (s != PP_OK) {
            pp_comm_group_free(g);
            return s;
        }
    } else if (g) {
        g->size = 1;
        g->job_rank = malloc(sizeof *g->job_rank);
        if (!g->job_rank) {
            free(g);
            return pp_error_set(err, PP_ERR_OOM, "rank 0: out of host memory (group)");
        }
        g->job_rank[0] = 0;
    }
    *out = g;
    return PP_OK;
}

void pp_comm_group_free(pp_comm_group *g)
{
    if (!g) return;
    if (g->state && g->comm->ops->group_free) g->comm->ops->group_free(g);
    free(g->job_rank);
    free(g->scratch);
    free(g);
}

int pp_comm_group_size(const pp_comm_group *g) { return g ? g->size : 1; }
int pp_comm_group_rank(const pp_comm_group *g) { return g ? g->rank : 0; }

int pp_comm_group_job_rank(const pp_comm_group *g, int member)
{
    return g && member >= 0 && member < g->size ? g->job_rank[member] : -1;
}

pp_status pp_comm_group_allreduce_sum_f32(pp_comm_group *g, float *buf, size_t n, pp_error *err)
{
    if (!g) return pp_error_set(err, PP_ERR_INVALID, "group sum: group is NULL");
    if (!buf && n) return pp_error_set(err, PP_ERR_INVALID, "group sum: buffer is NULL");
    if (g->size == 1) return PP_OK;
    return xfer_all(&(xfer){X_GSUM, NULL, g, 0, 0}, buf, n * sizeof *buf, err);
}

pp_status pp_comm_group_broadcast(pp_comm_group *g, int root, void *buf, size_t bytes,
                                  pp_error *err)
{
    if (!g) return pp_error_set(err, PP_ERR_INVALID, "group broadcast: group is NULL");
    if (root < 0 || root >= g->size)
        return pp_error_set(err, PP_ERR_INVALID, "group broadcast: member %d does not exist (the "
                            "group has %d)", root, g->size);
    if (!buf && bytes) return pp_error_set(err, PP_ERR_INVALID, "group broadcast: buffer is NULL");
    if (g->size == 1) return PP_OK;
    return xfer_all(&(xfer){X_GBCAST, NULL, g, root, 0}, buf, bytes, err);
}

void pp_comm_abort(pp_comm *c, int code, const char *msg)
{
    if (msg) fprintf(stderr, "rank %d: %s\n", pp_comm_rank(c), msg);
    fflush(stderr);
    if (c && c->size > 1 && c->ops->abort) c->ops->abort(c, code);
    exit(code);
}
