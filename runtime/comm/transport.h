/*
 * transport.h - the seam between the checked communication API (comm.h,
 * comm.c) and a transport: a table of functions, pp_comm_ops, one per way
 * the ranks of a job reach each other, picked at run time per comm.
 *
 *   local.c   ranks that are threads of this process (pp_comm_local_new)
 *   mpi.c     ranks that are processes started by an MPI launcher (built
 *             with the meson option `mpi`; mpi_absent.c otherwise)
 *   single.c  a job of one process: rank 0 of 1, nothing to transfer
 *
 * pp_comm_init joins the MPI transport when this build has it and a
 * launcher started the process (its `launched` entry), else the single one;
 * pp_comm_local_new makes a job of the local transport.
 *
 * comm.c checks every argument and handles a job (or group) of one rank
 * itself, so a transport's transfer entries are only called with c->size > 1
 * (g->size > 1), a valid peer or root other than the caller, a tag in
 * 0..PP_COMM_TAG_MAX, and at most PP_COMM_CHUNK bytes (longer transfers are
 * cut into pieces sent in order under the same tag). Thread safety is that
 * of comm.h. NCCL's stream-ordered collectives on device memory are another
 * contract and another interface (nccl.h), not a transport.
 */
#ifndef PP_COMM_TRANSPORT_H
#define PP_COMM_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/comm/comm.h"

/* Largest single transfer (MPI counts are int). */
#define PP_COMM_CHUNK ((size_t)1 << 30)

typedef struct pp_comm_ops pp_comm_ops;

/* One rank's handle on the job (comm.h's pp_comm). */
struct pp_comm {
    const pp_comm_ops *ops;
    int rank, size;
    bool thread_multiple;  /* several threads may transfer at once */
    double timeout_s;      /* point-to-point and collective wait limit; 0: none */
    void *state;           /* the transport's, per rank (local: the rank's hold on its job) */
};

/* A group (pp_comm_group_new). */
struct pp_comm_group {
    pp_comm *comm;
    int rank, size;        /* this member's place; members */
    int *job_rank;         /* (size) members' ranks in the job, in member order */
    void *state;           /* the transport's (MPI: an MPI_Comm); NULL when alone */
    int tag;               /* the transport's (local: the first of the group's tags) */
    float *scratch;        /* (scratch_n) member 0's receive buffer for the sum */
    size_t scratch_n;
};

struct pp_comm_ops {
    const char *name; /* "local", "mpi", "single" */

    /* optional: whether a launcher started this process as a rank of a job
     * of this transport; pp_comm_init then joins it. NULL: never. */
    bool (*launched)(void);
    /* optional: joins the job (called by pp_comm_init with c->ops and
     * c->timeout_s set, c rank 0 of 1): fills rank, size, thread_multiple,
     * state. NULL: the job is rank 0 of 1. */
    pp_status (*init)(int *argc, char ***argv, pp_comm *c, pp_error *err);
    /* optional: leaves the job, releasing c->state (called once per comm by
     * pp_comm_free). NULL: nothing to release. */
    void (*finalize)(pp_comm *c);

    /* Point to point (comm.h's contract for one piece). */
    pp_status (*send)(pp_comm *c, int peer, int tag, const void *buf, size_t bytes,
                      pp_error *err);
    pp_status (*recv)(pp_comm *c, int peer, int tag, void *buf, size_t bytes, pp_error *err);
    /* Collectives over the job: buf[0..n) summed, every rank the same bits;
     * root's bytes to every rank; every rank arrived. */
    pp_status (*allreduce_sum_f32)(pp_comm *c, float *buf, size_t n, pp_error *err);
    pp_status (*broadcast)(pp_comm *c, int root, void *buf, size_t bytes, pp_error *err);
    pp_status (*barrier)(pp_comm *c, pp_error *err);

    /* Called on every rank of the job (g NULL on ranks that are not
     * members, g->comm set on members): makes the group, filling g's rank,
     * size, job_rank (members ordered by key, ties by rank), state, tag. */
    pp_status (*group_new)(pp_comm *c, pp_comm_group *g, int key, pp_error *err);
    /* optional: releases g->state (non-NULL); comm.c frees the rest. NULL:
     * nothing to release. */
    void (*group_free)(pp_comm_group *g);
    /* The ordered sum over the members (member 0 adds member 1's values,
     * then member 2's, ...; every member the same bits), n <= PP_COMM_CHUNK
     * / 4; member root's bytes to every member. */
    pp_status (*group_sum_f32)(pp_comm_group *g, float *buf, size_t n, pp_error *err);
    pp_status (*group_broadcast)(pp_comm_group *g, int root, void *buf, size_t bytes,
                                 pp_error *err);

    /* optional: this rank failed (msg: why); every wait of the others ends
     * at once naming it, the first failure kept. NULL: a no-op. */
    void (*mark_failed)(pp_comm *c, const char *msg);
    /* optional: whether a rank of c's job failed; if so the first and its
     * message (n bytes of msg at most). NULL: never. */
    bool (*first_failure)(const pp_comm *c, int *rank, char *msg, size_t n);
    /* optional: ends every rank of a job of c->size > 1 with exit status
     * code; does not return. NULL: this process exits, the others see it. */
    void (*abort)(pp_comm *c, int code);
};

/* The transport between threads of this process (local.c). Never NULL. */
const pp_comm_ops *pp_comm_local_ops(void);
/* The MPI transport (mpi.c), or NULL when built without MPI (mpi_absent.c). */
const pp_comm_ops *pp_comm_mpi_ops(void);
/* The job of one process (single.c). Never NULL. */
const pp_comm_ops *pp_comm_single_ops(void);

#endif
