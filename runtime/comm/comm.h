/*
 * comm.h - communication between the ranks of one job: ranks, point-to-point
 * messages of host buffers and CPU tensors, a float sum over all ranks,
 * barrier, broadcast and abort.
 *
 * runtime/comm/ holds the job's collectives: this checked API (comm.c) over
 * a table of functions per transport (transport.h: local.c, mpi.c,
 * single.c), and NCCL's stream-ordered collectives on device memory, a
 * separate interface (nccl.h; nccl_absent.c without NCCL). It includes
 * runtime/core only.
 *
 * A job is what `mpirun -np N pipeline-run plan.yaml` starts: N processes
 * (ranks 0..N-1) that read the same plan. One pp_comm per process stands for
 * the whole job; make it with pp_comm_init before anything else reads argv
 * (MPI may remove its own arguments) and free it last.
 *
 * The transport is picked at run time, per comm:
 *   - MPI (Open MPI, MPICH; in a build with the meson option `mpi`), when a
 *     launcher started the process: the job is MPI_COMM_WORLD. MPI is
 *     initialised with MPI_THREAD_MULTIPLE when the library offers it (copy
 *     streams send from their own threads); pp_comm_thread_safe says whether
 *     it did. Errors return statuses (MPI_ERRORS_RETURN), never abort by
 *     themselves.
 *   - single process (built without MPI, or not started by a launcher):
 *     rank 0 of 1. Sends and receives have no peer and fail with
 *     PP_ERR_INVALID; the sum, barrier and broadcast are no-ops.
 *   - threads of this process (pp_comm_local_new, below).
 *
 * Messages: pp_comm_send and pp_comm_recv move `bytes` raw bytes to or from a
 * host buffer; the sizes and tags must match on both sides (a receive of a
 * different size fails with PP_ERR_BACKEND naming both sizes). Messages
 * between two ranks with the same tag arrive in the order they were sent.
 * Tags are 0..PP_COMM_TAG_MAX; callers build them from what the message is
 * (stage, micro-batch, direction) so that concurrent streams never confuse
 * two messages.
 *
 * Waiting: a receive (and a send, whose peer must receive it) waits at most
 * the timeout (pp_comm_set_timeout; default PP_COMM_TIMEOUT_DEFAULT_S seconds,
 * 0 waits for ever), then fails with PP_ERR_BACKEND "rank R: no message from
 * rank P within S s". So a peer that died or stopped never makes a rank hang
 * in a point-to-point transfer.
 *
 * pp_comm_allreduce_sum_f32 sums n floats over all ranks, in place, and every
 * rank receives the same bits (the sum is formed once, then broadcast), so
 * ranks that apply the same update to the same parameters stay identical.
 *
 * Groups: pp_comm_group_new makes, once, a sub-communicator of some ranks
 * (MPI_Comm_split), e.g. the ranks that hold a replica of one pipeline
 * stage. Its float sum is formed in member order on member 0 ((g0 + g1) +
 * g2 ...) and broadcast, so the bits do not depend on MPI's reduction
 * algorithm and every member gets the same ones.
 *
 * Jobs of threads: pp_comm_local_new makes the N ranks of a job inside this
 * process, one pp_comm per rank, each used by its own thread as if it were a
 * process (in-process data-parallel replicas). Messages are copied, sums
 * are formed in the same order as between processes (identical bits), and
 * pp_comm_mark_failed lets a failing rank end the others' waits at once.
 *
 * Thread safety: with pp_comm_thread_safe true, any thread may send and
 * receive concurrently (distinct tags per concurrent pair); collectives
 * (allreduce, barrier, broadcast) are called by one thread per rank, in the
 * same order on every rank. A group's collectives likewise (one thread at a
 * time per group, the same order on every member), but different groups'
 * collectives may run at the same time from different threads, alongside
 * the job's own. pp_comm_init, pp_comm_free and pp_comm_group_new (called
 * by one thread, the same way on every rank) are not thread-safe.
 */
#ifndef PP_COMM_H
#define PP_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PP_COMM_TAG_MAX 32767          /* the MPI standard's smallest MPI_TAG_UB */
#define PP_COMM_TIMEOUT_DEFAULT_S 60.0

typedef struct pp_comm pp_comm;

/* Whether this build can run jobs of several processes (built with MPI). */
bool pp_comm_built_with_mpi(void);

/* Joins the job. argc/argv may be NULL; MPI may consume its own arguments.
 * Without MPI, or when MPI reports a job of one process, *out is a
 * single-process comm. PP_ERR_BACKEND when MPI fails to start. Call once per
 * process. */
pp_status pp_comm_init(int *argc, char ***argv, pp_comm **out, pp_error *err);

/* Leaves the job (MPI_Finalize once every rank gets here). c may be NULL. */
void pp_comm_free(pp_comm *c);

/* A job of `size` ranks (1..4096) that are threads of this process:
 * comms[r] is rank r's comm, for one thread; free each with pp_comm_free
 * (the job goes with the last). Timeouts as for processes. */
pp_status pp_comm_local_new(int size, pp_comm **comms, pp_error *err);

/* Whether c's ranks are threads of this process (pp_comm_local_new). */
bool pp_comm_is_local(const pp_comm *c);

/* In a job of threads: this rank failed (msg says why); every wait of the
 * other ranks, current or later, fails at once naming it. The first rank
 * to fail is kept. A no-op in a job of processes (they end it with
 * pp_comm_abort). */
void pp_comm_mark_failed(pp_comm *c, const char *msg);

/* In a job of threads: whether a rank failed; if so the first one and its
 * message (n bytes of msg at most). Always false in a job of processes. */
bool pp_comm_first_failure(const pp_comm *c, int *rank, char *msg, size_t n);

int pp_comm_rank(const pp_comm *c);  /* 0..size-1 */
int pp_comm_size(const pp_comm *c);  /* >= 1 */

/* Whether several threads may send and receive at once (see the header). */
bool pp_comm_thread_safe(const pp_comm *c);

/* Seconds a point-to-point transfer may wait for its peer; 0: for ever.
 * Negative values are PP_ERR_INVALID. */
pp_status pp_comm_set_timeout(pp_comm *c, double seconds, pp_error *err);
double pp_comm_timeout(const pp_comm *c);  /* the current limit; NULL: the default */

/* Sends bytes from buf to rank peer (peer != own rank) with tag. Returns
 * when buf may be reused. */
pp_status pp_comm_send(pp_comm *c, int peer, int tag, const void *buf, size_t bytes,
                       pp_error *err);

/* Receives exactly bytes from rank peer with tag into buf. */
pp_status pp_comm_recv(pp_comm *c, int peer, int tag, void *buf, size_t bytes, pp_error *err);

/* The same for a tensor in host memory (a CPU device): its pp_tensor_bytes
 * bytes. The receiving tensor has the sender's dtype and shape (the caller
 * agrees them beforehand; only the byte count is checked). Tensors on other
 * devices are PP_ERR_INVALID. */
pp_status pp_comm_send_tensor(pp_comm *c, int peer, int tag, const pp_tensor *t, pp_error *err);
pp_status pp_comm_recv_tensor(pp_comm *c, int peer, int tag, pp_tensor *t, pp_error *err);

/* Sums buf[0..n) over all ranks in place; every rank gets identical bits. */
pp_status pp_comm_allreduce_sum_f32(pp_comm *c, float *buf, size_t n, pp_error *err);

/* Copies bytes of root's buf into every other rank's buf. */
pp_status pp_comm_broadcast(pp_comm *c, int root, void *buf, size_t bytes, pp_error *err);

/* Returns once every rank has called it. */
pp_status pp_comm_barrier(pp_comm *c, pp_error *err);

/* A set of ranks of the job with collectives of its own. */
typedef struct pp_comm_group pp_comm_group;

/* Collective over every rank of c (call it in the same order on all): the
 * ranks passing member true form one group, its members ordered by key
 * (ties: by rank). *out is the group on a member, NULL elsewhere; free with
 * pp_comm_group_free (before pp_comm_free). Without MPI or in a job of one
 * process the group is that process alone. */
pp_status pp_comm_group_new(pp_comm *c, bool member, int key, pp_comm_group **out,
                            pp_error *err);
void pp_comm_group_free(pp_comm_group *g);  /* NULL is a no-op */

int pp_comm_group_size(const pp_comm_group *g);  /* members, >= 1 */
int pp_comm_group_rank(const pp_comm_group *g);  /* this member's place, 0..size-1 */
int pp_comm_group_job_rank(const pp_comm_group *g, int member); /* its rank in the job; -1 */

/* Sums buf[0..n) over the members in place: member 0 adds member 1's values
 * to its own, then member 2's, and so on, then sends the sum to every
 * member, so all get identical bits, the same on every run. A member that
 * stopped makes the others fail after the comm's timeout, naming it. */
pp_status pp_comm_group_allreduce_sum_f32(pp_comm_group *g, float *buf, size_t n,
                                          pp_error *err);

/* Copies bytes of member root's buf into every other member's buf. */
pp_status pp_comm_group_broadcast(pp_comm_group *g, int root, void *buf, size_t bytes,
                                  pp_error *err);

/* Ends the whole job at once with exit status code (MPI_Abort; exit without
 * MPI), after writing "rank R: msg" to stderr when msg is non-NULL. For a
 * rank that cannot go on while others may wait on it. Does not return. */
void pp_comm_abort(pp_comm *c, int code, const char *msg) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif

#endif
