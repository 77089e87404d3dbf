/*
 * nccl.c - NCCL communicators of comm/nccl.h: the unique id travels
 * over the group's host communication, ncclCommInitRank on the member's
 * device, ncclAllReduce on the caller's stream, ncclCommAbort on faults.
 * Every NCCL and CUDA call is checked; messages name the call, the rank of
 * the job, the device and NCCL's own words.
 */
#include "runtime/comm/nccl.h"

#include <cuda_runtime.h>
/* nccl.h declares a few functions without prototypes */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdlib.h>

struct pp_nccl {
    ncclComm_t comm;
    pp_device_ctx *dev;
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

pp_status pp_nccl_new(pp_comm_group *g, pp_device_ctx *dev, pp_nccl **out, pp_error *err)
{
    if (!out) return pp_error_set(err, PP_ERR_INVALID, "NCCL: out is NULL");
    *out = NULL;
    if (!g || !dev) return pp_error_set(err, PP_ERR_INVALID, "NCCL: group or device is NULL");
    int rank = pp_comm_group_job_rank(g, pp_comm_group_rank(g));
    if (dev->id.kind != PP_DEVICE_CUDA)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "rank %d (%s): NCCL needs a CUDA device",
                            rank, dev->name);
    ncclUniqueId id;
    if (pp_comm_group_rank(g) == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) return nccl_fail(err, rank, dev, "ncclGetUniqueId", r);
    }
    PP_TRY(pp_comm_group_broadcast(g, 0, &id, sizeof id, err));
    cudaError_t e = cudaSetDevice(dev->id.index);
    if (e != cudaSuccess) return cuda_fail(err, rank, dev, "cudaSetDevice", e);
    pp_nccl *nc = calloc(1, sizeof *nc);
    if (!nc) return pp_error_set(err, PP_ERR_OOM, "rank %d: out of host memory (NCCL)", rank);
    nc->dev = dev;
    nc->job_rank = rank;
    nc->rank = pp_comm_group_rank(g);
    nc->size = pp_comm_group_size(g);
    ncclResult_t r = ncclCommInitRank(&nc->comm, pp_comm_group_size(g), id,
                                      pp_comm_group_rank(g));
    if (r != ncclSuccess) {
        free(nc);
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
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return nccl_fail(err, nc->job_rank, nc->dev, "ncclGroupStart", r);
    for (int i = 0; i < count && r == ncclSuccess; i++)
        if (ns[i]) r = ncclAllReduce(bufs[i], bufs[i], ns[i], ncclFloat32, ncclSum, nc->comm, st);
    ncclResult_t end = ncclGroupEnd();
    if (r != ncclSuccess) return nccl_fail(err, nc->job_rank, nc->dev, "ncclAllReduce", r);
    if (end != ncclSuccess) return nccl_fail(err, nc->job_rank, nc->dev, "ncclGroupEnd", end);
    return PP_OK;
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
    ncclResult_t r = ncclSend(buf, bytes, ncclUint8, peer, nc->comm,
                              (cudaStream_t)ex->native_stream);
    return r == ncclSuccess ? PP_OK : nccl_fail(err, nc->job_rank, nc->dev, "ncclSend", r);
}

pp_status pp_nccl_recv(pp_nccl *nc, pp_exec *ex, int peer, void *buf, size_t bytes,
                       pp_error *err)
{
    PP_TRY(check_peer(nc, ex, peer, buf, bytes, err));
    ncclResult_t r = ncclRecv(buf, bytes, ncclUint8, peer, nc->comm,
                              (cudaStream_t)ex->native_stream);
    return r == ncclSuccess ? PP_OK : nccl_fail(err, nc->job_rank, nc->dev, "ncclRecv", r);
}

void pp_nccl_abort(pp_nccl *nc)
{
    if (!nc) return;
    ncclCommAbort(nc->comm);
    free(nc);
}

void pp_nccl_free(pp_nccl *nc)
{
    if (!nc) return;
    ncclCommDestroy(nc->comm);
    free(nc);
}
