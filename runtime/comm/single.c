/*
 * single.c - the transport of a job of one process (rank 0 of 1): a plain
 * run, or any run of a build without MPI. comm.c handles every transfer of
 * a job of one rank itself, so the entries here are never called with a
 * peer; each says so if it were.
 */
#include "runtime/comm/transport.h"

static pp_status no_peer(pp_error *err)
{
    return pp_error_set(err, PP_ERR_INTERNAL, "a job of one process has no other rank");
}

static pp_status single_send(pp_comm *c, int peer, int tag, const void *buf, size_t bytes,
                             pp_error *err)
{
    return no_peer(err);
}

static pp_status single_recv(pp_comm *c, int peer, int tag, void *buf, size_t bytes,
                             pp_error *err)
{
    return no_peer(err);
}

static pp_status single_sum(pp_comm *c, float *buf, size_t n, pp_error *err)
{
    return no_peer(err);
}

static pp_status single_broadcast(pp_comm *c, int root, void *buf, size_t bytes, pp_error *err)
{
    return no_peer(err);
}

static pp_status single_barrier(pp_comm *c, pp_error *err) { return no_peer(err); }

static pp_status single_group_new(pp_comm *c, pp_comm_group *g, int key, pp_error *err)
{
    return no_peer(err);
}

static pp_status single_group_sum(pp_comm_group *g, float *buf, size_t n, pp_error *err)
{
    return no_peer(err);
}

static pp_status single_group_broadcast(pp_comm_group *g, int root, void *buf, size_t bytes,
                                        pp_error *err)
{
    return no_peer(err);
}

static const pp_comm_ops single_ops = {
    .name = "single",
    .send = single_send,
    .recv = single_recv,
    .allreduce_sum_f32 = single_sum,
    .broadcast = single_broadcast,
    .barrier = single_barrier,
    .group_new = single_group_new,
    .group_sum_f32 = single_group_sum,
    .group_broadcast = single_group_broadcast,
};

const pp_comm_ops *pp_comm_single_ops(void) { return &single_ops; }
