/*
 * local.h - jobs whose ranks are threads of this process (local.c), as
 * comm.c makes them for pp_comm_local_new.
 */
#ifndef PP_COMM_LOCAL_H
#define PP_COMM_LOCAL_H

#include "runtime/comm/transport.h"

/* Makes the job of ranks[0..size) (allocated by the caller, each with ops
 * pp_comm_local_ops(), rank r, size, and no state) and gives each rank its
 * state, a hold on the job; the transport's finalize drops it, the last
 * frees the job. On failure no rank has state. */
pp_status pp_comm_local_join(pp_comm *const *ranks, int size, pp_error *err);

/* The job of threads that rank c belongs to (an identity, for tables keyed
 * by job), or NULL when c is not a rank of the local transport. */
const void *pp_comm_local_job(const pp_comm *c);

#endif
