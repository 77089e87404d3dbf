/*
 * nccl.c - NCCL communicators of comm/nccl.h: the unique id travels
 * over the group's host communication, ncclCommInitRank on the member's
 * device, ncclAllReduce on the caller's stream, ncclCommAbort on faults.
 * Every NCCL and CUDA call is checked; messages name the call, the rank of
 * the job, the device and NCCL's own words.
 *
 * Making one, in numbered phases (every member makes the same calls):
 *   1. the member claims its device for its rank (comm/devices.h) and the
 *      group agrees: if any member's claim fails, every member refuses
 *      (PP_ERR_UNSUPPORTED) before any NCCL call;
 *   2. in a job of threads, the members' devices reach each other's memory
 *      pools (pp_comm_group_share_devices): NCCL between devices of one
 *      process reads and writes peer buffers directly;
 *   3. the unique id, ncclCommInitRank.
 *
 * One order: every collective, send and receive of every communicator of
 * this process on one device waits for the one enqueued before it on that
 * device (an event per device, recorded after each), so a device runs them
 * one at a time in the order they were enqueued, whatever stream each is on.
 * Its one rank (the claim) enqueues them in its program's order, the same on
 * every rank, so no device ever runs one communicator's kernel while a peer
 * waits in another's. (Inside a CUDA graph capture the order is left to the
 * graph; the pipeline never captures steps of jobs of several ranks.)
 */
#include "runtime/comm/nccl.h"

#include <cuda_runtime.h>
/* nccl.h declares a few functions without prototypes */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <pthread.h>
#include <stdlib.h>

#include "runtime/comm/devices.h"

/* The order of one device's NCCL work (see the top of the file). */
typedef struct nccl_order {
    int ordinal;           /* CUDA device ordinal */
    int users;             /* communicators on it; 0: free (orders_mu) */
    pthread_mutex_t mu;    /* held from the wait to the record of one call: the device's
                              own lock, never held across devices (NCCL may wait for its
                              peers inside a call) */
    cudaEvent_t last;      /* (mu) recorded after the latest NCCL call enqueued on the device */
    bool recorded;         /* (mu) */
} nccl_order;

#define ORDERS_MAX 64

static pthread_mutex_t orders_mu = PTHREAD_MUTEX_INITIALIZER;
static nccl_order orders[ORDERS_MAX];

struct pp_nccl {
    ncclComm_t comm;
    pp_device_ctx *dev;
    pp_comm_group *group;  /* its claim on dev is released with it */
    nccl_order *order;     /* of dev */
    int job_rank;          /* for messages */
    int rank, size;        /* this member's place; members */
};

bool pp_nccl_built(void) { return true; }

static pp_status nccl_fail(pp_error *err, int rank, const pp_device_ctx *dev, const char *call,
                           ncclResult_t r)
{
    return pp_error_set(err, PP_ERR_BACKEND, "rank %d (%s): %s failed: %s", rank, dev->name, call,
                        ncclGetErrorString(r));
}

static pp_status cuda_fail(pp_error *err, int rank, const pp_device_ctx *dev, const char *call,
                           cudaError_t e)
{
    return pp_error_set(err, e == cudaErrorMemoryAllocation ? PP_ERR_OOM : PP_ERR_BACKEND,
                        "rank %d (%s): %s failed: %s", rank, dev->name, call,
                        cudaGetErrorString(e));
}

/* dev's order, counted (NULL when the table is full). */
static nccl_order *order_take(const pp_device_ctx *dev)
{
    pthread_mutex_lock(&orders_mu);
    nccl_order *o = NULL, *spare = NULL;
    for (int i = 0; i < ORDERS_MAX && !o; i++) {
        if (orders[i].users > 0 && orders[i].ordinal == dev->id.index) o = &orders[i];
        if (orders[i].users == 0 && !spare) spare = &orders[i];
    }
    if (!o && spare) {
        *(o = spare) = (nccl_order){.ordinal = dev->id.index};
        pthread_mutex_init(&o->mu, NULL);
    }
    if (o) o->users++;
    pthread_mutex_unlock(&orders_mu);
    return o;
}

static void order_drop(nccl_order *o)
{
    if (!o) return;
    pthread_mutex_lock(&orders_mu);
    if (--o->users == 0) {
        int cur = -1;
        if (o->last && cudaGetDevice(&cur) == cudaSuccess &&
            cudaSetDevice(o->ordinal) == cudaSuccess) {
            (void)cudaEventDestroy(o->last);
            if (cur >= 0) (void)cudaSetDevice(cur);
        }
        (void)cudaGetLastError();
        o->last = NULL;
        o->recorded = false;
        pthread_mutex_destroy(&o->mu);
    }
    pthread_mutex_unlock(&orders_mu);
}

/* Before an NCCL call on st: st waits for the device's previous NCCL call.
 * Holds the device's order lock until order_end (the call and its record are one
 * step of the device's order). *skip: st is capturing (no order kept). */
static pp_status order_begin(pp_nccl *nc, cudaStream_t st, bool *skip, pp_error *err)
{
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaSetDevice(nc->dev->id.index); /* the event's device */
    if (e != cudaSuccess) return cuda_fail(err, nc->job_rank, nc->dev, "cudaSetDevice", e);
    e = cudaStreamIsCapturing(st, &cap);
    if (e != cudaSuccess) return cuda_fail(err, nc->job_rank, nc->dev, "cudaStreamIsCapturing", e);
    *skip = cap != cudaStreamCaptureStatusNone;
    if (*skip) return PP_OK;
    nccl_order *o = nc->order;
    pthread_mutex_lock(&o->mu);
    e = o->last ? cudaSuccess : cudaEventCreateWithFlags(&o->last, cudaEventDisableTiming);
    if (e == cudaSuccess && o->recorded) e = cudaStreamWaitEvent(st, o->last, 0);
    if (e != cudaSuccess) {
        pthread_mutex_unlock(&o->mu);
        return cuda_fail(err, nc->job_rank, nc->dev, "ordering NCCL work (event)", e);
    }
    return PP_OK;
}

/* After the NCCL call (ok: it was enqueued): the device's order moves on. */
static pp_status order_end(pp_nccl *nc, cudaStream_t st, bool skip, bool ok, pp_error *err)
{
    if (skip) return PP_OK;
    nccl_order *o = nc->order;
    cudaError_t e = ok ? cudaEventRecord(o->last, st) : cudaSuccess;
    if (e == cudaSuccess && ok) o->recorded = true;
    pthread_mutex_unlock(&o->mu);
    if (e == cudaSuccess) return PP_OK;
    return cuda_fail(err, nc->job_rank, nc->dev, "cudaEventRecord (NCCL order)", e);
}

/* Phase 1: every member's claim, agreed over the group. */
static pp_status claim_agreed(pp_comm_group *g, pp_device_ctx *dev, int rank, pp_error *err)
{
    pp_error why;
    pp_error_clear(&why);
    pp_status mine = pp_comm_group_claim_device(g, dev, &why);
    float refused = mine != PP_OK ? 1.0f : 0.0f;
    pp_status st = pp_comm_group_allreduce_sum_f32(g, &refused, 1, err);
    if (st == PP_OK && refused == 0.0f) return PP_OK;
    if (mine == PP_OK) pp_comm_group_release_device(g, dev);
    if (st != PP_OK) return st;
    if (mine != PP_OK) {
        if (err) *err = why;
        pp_error_prefix(err, "NCCL");
        return mine;
    }
    return pp_error_set(err, PP_ERR_UNSUPPORTED, "rank %d (%s): NCCL: another member's GPU "
                        "carries the collectives of another rank of its process", rank,
                        dev->name);
}

pp_status pp_nccl_new(pp_comm_group *g, pp_device_ctx *dev, pp_nccl **out, pp_error *err)
{
    if (!out) return pp_error_set(err, PP_ERR_INVALID, "NCCL: out is NULL");
    *out = NULL;
    if (!g || !dev) return pp_error_set(err, PP_ERR_INVALID, "NCCL: group or device is NULL");
    int rank = pp_comm_group_job_rank(g, pp_comm_group_rank(g));
    if (dev->id.kind != PP_DEVICE_CUDA)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "rank %d (%s): NCCL needs a CUDA device",
                            rank, dev->name);
    PP_TRY(claim_agreed(g, dev, rank, err));
    pp_nccl *nc = calloc(1, sizeof *nc);
    nccl_order *order = nc ? order_take(dev) : NULL;
    pp_status st = nc && order ? PP_OK
                               : pp_error_set(err, PP_ERR_OOM, "rank %d: out of host memory "
                                              "(NCCL)", rank);
    /* the phases below are collective: a member that failed above still takes part */
    pp_status shared = pp_comm_group_share_devices(g, dev, st == PP_OK ? err : NULL);
    if (st == PP_OK) st = shared;
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (pp_comm_group_rank(g) == 0) r = ncclGetUniqueId(&id);
    pp_status sent = pp_comm_group_broadcast(g, 0, &id, sizeof id, st == PP_OK ? err : NULL);
    if (st == PP_OK && r != ncclSuccess) st = nccl_fail(err, rank, dev, "ncclGetUniqueId", r);
    if (st == PP_OK) st = sent;
    cudaError_t e = cudaSetDevice(dev->id.index);
    if (st == PP_OK && e != cudaSuccess) st = cuda_fail(err, rank, dev, "cudaSetDevice", e);
    if (st != PP_OK) {
        order_drop(order);
        free(nc);
        pp_comm_group_release_device(g, dev);
        return st;
    }
    nc->dev = dev;
    nc->group = g;
    nc->order = order;
    nc->job_rank = rank;
    nc->rank = pp_comm_group_rank(g);
    nc->size = pp_comm_group_size(g);
    r = ncclCommInitRank(&nc->comm, pp_comm_group_size(g), id, pp_comm_group_rank(g));
    if (r != ncclSuccess) {
        order_drop(order);
        free(nc);
        pp_comm_group_release_device(g, dev);
        return nccl_fail(err, rank, dev, "ncclCommInitRank", r);
    }
    *out = nc;
    return PP_OK;
}

static pp_status check_call(pp_nccl *nc, pp_exec *ex, pp_error *err)
{
    if (!nc || !ex) return pp_error_set(err, PP_ERR_INVALID, "NCCL sum: communicator or exec "
                                        "is NULL");
    if (ex->dev != nc->dev || !ex->native_stream)
        return pp_error_set(err, PP_ERR_INVALID, "rank %d (%s): NCCL sum on a stream of another "
                            "device (%s)", nc->job_rank, nc->dev->name,
                            ex->dev ? ex->dev->name : "none");
    return PP_OK;
}

pp_status pp_nccl_allreduce_sum_f32(pp_nccl *nc, pp_exec *ex, float *buf, size_t n,
                                    pp_error *err)
{
    return pp_nccl_allreduce_many_f32(nc, ex, &buf, &n, 1, err);
}

pp_status pp_nccl_allreduce_many_f32(pp_nccl *nc, pp_exec *ex, float *const *bufs,
                                     const size_t *ns, int count, pp_error *err)
{
    PP_TRY(check_call(nc, ex, err));
    for (int i = 0; i < count; i++)
        if (!bufs[i] && ns[i])
            return pp_error_set(err, PP_ERR_INVALID, "rank %d (%s): NCCL sum %d: buffer is NULL",
                                nc->job_rank, nc->dev->name, i);
    cudaStream_t st = (cudaStream_t)ex->native_stream;
    bool skip;
    PP_TRY(order_begin(nc, st, &skip, err));
    ncclResult_t r = ncclGroupStart(), end = ncclSuccess;
    if (r == ncclSuccess) {
        for (int i = 0; i < count && r == ncclSuccess; i++)
            if (ns[i])
                r = ncclAllReduce(bufs[i], bufs[i], ns[i], ncclFloat32, ncclSum, nc->comm, st);
        end = ncclGroupEnd();
    }
    pp_status ord = order_end(nc, st, skip, r == ncclSuccess && end == ncclSuccess, err);
    if (r != ncclSuccess) return nccl_fail(err, nc->job_rank, nc->dev, "ncclAllReduce", r);
    if (end != ncclSuccess) return nccl_fail(err, nc->job_rank, nc->dev, "ncclGroupEnd", end);
    return ord;
}

int pp_nccl_rank(const pp_nccl *nc) { return nc ? nc->rank : -1; }

static pp_status check_peer(pp_nccl *nc, pp_exec *ex, int peer, const void *buf, size_t bytes,
                            pp_error *err)
{
    PP_TRY(check_call(nc, ex, err));
    if (peer < 0 || peer >= nc->size || peer == nc->rank)
        return pp_error_set(err, PP_ERR_INVALID, "rank %d (%s): NCCL peer %d of %d members",
                            nc->job_rank, nc->dev->name, peer, nc->size);
    if (!buf && bytes)
        return pp_error_set(err, PP_ERR_INVALID, "rank %d (%s): NCCL transfer: buffer is NULL",
                            nc->job_rank, nc->dev->name);
    return PP_OK;
}

pp_status pp_nccl_send(pp_nccl *nc, pp_exec *ex, int peer, const void *buf, size_t bytes,
                       pp_error *err)
{
    PP_TRY(check_peer(nc, ex, peer, buf, bytes, err));
    cudaStream_t st = (cudaStream_t)ex->native_stream;
    bool skip;
    PP_TRY(order_begin(nc, st, &skip, err));
    ncclResult_t r = ncclSend(buf, bytes, ncclUint8, peer, nc->comm, st);
    pp_status ord = order_end(nc, st, skip, r == ncclSuccess, err);
    return r == ncclSuccess ? ord : nccl_fail(err, nc->job_rank, nc->dev, "ncclSend", r);
}

pp_status pp_nccl_recv(pp_nccl *nc, pp_exec *ex, int peer, void *buf, size_t bytes,
                       pp_error *err)
{
    PP_TRY(check_peer(nc, ex, peer, buf, bytes, err));
    cudaStream_t st = (cudaStream_t)ex->native_stream;
    bool skip;
    PP_TRY(order_begin(nc, st, &skip, err));
    ncclResult_t r = ncclRecv(buf, bytes, ncclUint8, peer, nc->comm, st);
    pp_status ord = order_end(nc, st, skip, r == ncclSuccess, err);
    return r == ncclSuccess ? ord : nccl_fail(err, nc->job_rank, nc->dev, "ncclRecv", r);
}

void pp_nccl_abort(pp_nccl *nc)
{
    if (!nc) return;
    ncclCommAbort(nc->comm);
    order_drop(nc->order);
    pp_comm_group_release_device(nc->group, nc->dev);
    free(nc);
}

void pp_nccl_free(pp_nccl *nc)
{
    if (!nc) return;
    ncclCommDestroy(nc->comm);
    order_drop(nc->order);
    pp_comm_group_release_device(nc->group, nc->dev);
    free(nc);
}
