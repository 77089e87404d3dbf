/*
 * nccl.h - NCCL communicators for the gradient sums of CUDA stages:
 * one per group of ranks (pp_comm_group), each member on one CUDA device.
 *
 * A contract of its own, apart from the transports of comm.h (transport.h):
 * stream-ordered collectives on device memory, enqueued on an exec's stream
 * rather than completed on the host. nccl.c implements it; nccl_absent.c, in
 * a build without NCCL, refuses every communicator.
 *
 * Making one is collective over the group: member 0 creates an
 * ncclUniqueId, the group's host communication (MPI) carries it to the
 * others, and every member calls ncclCommInitRank on its device. A sum is
 * ncclAllReduce, enqueued on the caller's CUDA stream (so it runs after
 * what that stream already waits for, e.g. an event recorded after a
 * stage's backward); every member receives the same bits. Sends and
 * receives (ncclSend/ncclRecv) carry activations and gradients between CUDA
 * stages of different ranks, on the copy stream of their boundary.
 *
 * NCCL refuses two members on one GPU in one communicator: such a group
 * (replicas sharing a GPU) gets PP_ERR_BACKEND from pp_nccl_new, and its
 * callers keep to the host path (pp_comm_group_allreduce_sum_f32).
 *
 * Built with the meson option `nccl` (a feature, auto: found in the
 * cudatoolkit option's folders, with the CUDA backend); otherwise every
 * function here answers PP_ERR_UNSUPPORTED and pp_nccl_built is false.
 *
 * Thread safety: one thread at a time per communicator; pp_nccl_abort may be
 * called from any thread to stop a communicator whose peers failed.
 */
#ifndef PP_COMM_NCCL_H
#define PP_COMM_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/comm/comm.h"
#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pp_nccl pp_nccl;

/* Whether this build has NCCL. */
bool pp_nccl_built(void);

/* Collective over the members of g (each calls it once, in the same order
 * as its other group calls): a communicator of the members, this one on
 * dev (a CUDA device). Errors name the rank, device and NCCL's message. */
pp_status pp_nccl_new(pp_comm_group *g, pp_device_ctx *dev, pp_nccl **out, pp_error *err);

/* Enqueues the sum of buf[0..n) (device memory of the communicator's
 * device) over the members, in place, on ex's CUDA stream. */
pp_status pp_nccl_allreduce_sum_f32(pp_nccl *nc, pp_exec *ex, float *buf, size_t n,
                                    pp_error *err);

/* Several sums as one NCCL group (ncclGroupStart/End): bufs[i][0..ns[i]). */
pp_status pp_nccl_allreduce_many_f32(pp_nccl *nc, pp_exec *ex, float *const *bufs,
                                     const size_t *ns, int count, pp_error *err);

/* This member's place in the communicator, 0..size-1 (-1 for NULL). */
int pp_nccl_rank(const pp_nccl *nc);

/* Enqueues on ex's CUDA stream a send of bytes from buf (device memory) to
 * member peer, or a receive of exactly bytes from it into buf. Sends and
 * receives between two members match in the order they were enqueued. */
pp_status pp_nccl_send(pp_nccl *nc, pp_exec *ex, int peer, const void *buf, size_t bytes,
                       pp_error *err);
pp_status pp_nccl_recv(pp_nccl *nc, pp_exec *ex, int peer, void *buf, size_t bytes,
                       pp_error *err);

/* Stops the communicator's pending work (ncclCommAbort) and frees it: after
 * a fault, when peers may never join. NULL is a no-op. */
void pp_nccl_abort(pp_nccl *nc);

/* Frees the communicator (ncclCommDestroy) once its work is done. NULL is a
 * no-op. */
void pp_nccl_free(pp_nccl *nc);

#ifdef __cplusplus
}
#endif

#endif
