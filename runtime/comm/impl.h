/*
 * impl.h - what runtime/comm/comm.c asks of a communication backend. Exactly
 * one backend between processes is built: comm/mpi.c (meson option `mpi`
 * found) or comm/single.c; comm/local.c (jobs whose ranks are threads of one
 * process) is always built. comm/comm.c checks every argument and handles the job
 * of one rank itself, so the transfer functions are only called with a job
 * of several ranks (c->local set: the pp_comm_local_* ones, else c->mpi true:
 * the pp_comm_impl_* ones), a valid peer or root, and bytes <= PP_COMM_CHUNK.
 */
#ifndef PP_COMM_IMPL_H
#define PP_COMM_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/comm/comm.h"

/* Largest single message (MPI counts are int); longer transfers are cut into
 * chunks of this size, sent in order under the same tag. */
#define PP_COMM_CHUNK ((size_t)1 << 30)

typedef struct pp_local_job pp_local_job;

struct pp_comm {
    int rank, size;
    pp_local_job *local;   /* a job of threads (comm/local.c); NULL: of processes */
    int local_groups;      /* groups this rank made in its job of threads */
    float *local_scratch;  /* (local_scratch_n) rank 0's receive buffer for the job's sums,
                              kept between them (fresh pages are slow) */
    size_t local_scratch_n;
    bool mpi;              /* MPI was initialised by this process (finalize on free) */
    bool thread_multiple;  /* MPI_THREAD_MULTIPLE provided (always true without MPI) */
    double timeout_s;      /* point-to-point and collective wait limit; 0: none */
};

/* A group (pp_comm_group_new). */
struct pp_comm_group {
    pp_comm *comm;
    int rank, size;        /* this member's place; members */
    int *job_rank;         /* (size) members' ranks in the job, in member order */
    void *impl;            /* the backend's handle (MPI: an MPI_Comm); NULL when alone */
    float *scratch;        /* (scratch_n) member 0's receive buffer for the sum */
    size_t scratch_n;
    int local_tag;         /* a job of threads: the first of the group's tags */
};

bool pp_comm_impl_built(void);
/* Fills rank, size, mpi, thread_multiple; c->timeout_s is already set. */
pp_status pp_comm_impl_init(int *argc, char ***argv, pp_comm *c, pp_error *err);
void pp_comm_impl_finalize(pp_comm *c);
pp_status pp_comm_impl_send(pp_comm *c, int peer, int tag, const void *buf, size_t bytes,
                            pp_error *err);
pp_status pp_comm_impl_recv(pp_comm *c, int peer, int tag, void *buf, size_t bytes,
                            pp_error *err);
pp_status pp_comm_impl_allreduce_sum_f32(pp_comm *c, float *buf, size_t n, pp_error *err);
pp_status pp_comm_impl_broadcast(pp_comm *c, int root, void *buf, size_t bytes, pp_error *err);
pp_status pp_comm_impl_barrier(pp_comm *c, pp_error *err);
/* Called on every rank of a job of several processes (g NULL on ranks that
 * are not members): makes the group and fills g's rank, size, job_rank and
 * impl. */
pp_status pp_comm_impl_group_new(pp_comm *c, pp_comm_group *g, int key, pp_error *err);
void pp_comm_impl_group_free(pp_comm_group *g);
/* The ordered sum over g->size > 1 members, n <= PP_COMM_CHUNK / 4. */
pp_status pp_comm_impl_group_sum_f32(pp_comm_group *g, float *buf, size_t n, pp_error *err);
/* Member root's bytes (<= PP_COMM_CHUNK) to every member, g->size > 1. */
pp_status pp_comm_impl_group_broadcast(pp_comm_group *g, int root, void *buf, size_t bytes,
                                       pp_error *err);
void pp_comm_impl_abort(pp_comm *c, int code) __attribute__((noreturn));

/* comm/local.c: the same operations in a job of threads (any tag >= 0; the
 * collectives use tags above PP_COMM_TAG_MAX). */
pp_status pp_comm_local_send(pp_comm *c, int peer, int tag, const void *buf, size_t bytes,
                             pp_error *err);
pp_status pp_comm_local_recv(pp_comm *c, int peer, int tag, void *buf, size_t bytes,
                             pp_error *err);
pp_status pp_comm_local_allreduce_sum_f32(pp_comm *c, float *buf, size_t n, pp_error *err);
pp_status pp_comm_local_broadcast(pp_comm *c, int root, void *buf, size_t bytes, pp_error *err);
pp_status pp_comm_local_barrier(pp_comm *c, pp_error *err);
pp_status pp_comm_local_group_new(pp_comm *c, pp_comm_group *g, int key, pp_error *err);
pp_status pp_comm_local_group_sum_f32(pp_comm_group *g, float *buf, size_t n, pp_error *err);
pp_status pp_comm_local_group_broadcast(pp_comm_group *g, int root, void *buf, size_t bytes,
                                        pp_error *err);
void pp_comm_local_mark_failed(pp_comm *c, const char *msg);
bool pp_comm_local_failure(const pp_comm *c, int *rank, char *msg, size_t n);
/* Drops one rank's hold on the job; the last frees it. */
void pp_comm_local_release(pp_local_job *job);

#endif
