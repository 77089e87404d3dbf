/*
 * single.c - the communication backend of a build without MPI: every job
 * is one process (rank 0 of 1). comm/comm.c never asks it to transfer anything.
 */
#include <stdlib.h>

#include "runtime/comm/impl.h"

bool pp_comm_impl_built(void) { return false; }

pp_status pp_comm_impl_init(int *argc, char ***argv, pp_comm *c, pp_error *err)
{
    c->rank = 0;
    c->size = 1;
    c->mpi = false;
    c->thread_multiple = true;
    return PP_OK;
}

void pp_comm_impl_finalize(pp_comm *c) {}

static pp_status no_peer(pp_error *err)
{
    return pp_error_set(err, PP_ERR_INTERNAL, "communication without MPI: no other process");
}

pp_status pp_comm_impl_send(pp_comm *c, int peer, int tag, const void *buf, size_t bytes,
                            pp_error *err)
{
    return no_peer(err);
}

pp_status pp_comm_impl_recv(pp_comm *c, int peer, int tag, void *buf, size_t bytes,
                            pp_error *err)
{
    return no_peer(err);
}

pp_status pp_comm_impl_allreduce_sum_f32(pp_comm *c, float *buf, size_t n, pp_error *err)
{
    return no_peer(err);
}

pp_status pp_comm_impl_broadcast(pp_comm *c, int root, void *buf, size_t bytes, pp_error *err)
{
    return no_peer(err);
}

pp_status pp_comm_impl_barrier(pp_comm *c, pp_error *err) { return no_peer(err); }

pp_status pp_comm_impl_group_new(pp_comm *c, pp_comm_group *g, int key, pp_error *err)
{
    return no_peer(err);
}

void pp_comm_impl_group_free(pp_comm_group *g) {}

pp_status pp_comm_impl_group_sum_f32(pp_comm_group *g, float *buf, size_t n, pp_error *err)
{
    return no_peer(err);
}

pp_status pp_comm_impl_group_broadcast(pp_comm_group *g, int root, void *buf, size_t bytes,
                                       pp_error *err)
{
    return no_peer(err);
}

void pp_comm_impl_abort(pp_comm *c, int code) { exit(code); }
