/*
 * replicas.h - data-parallel replicas (replicas.c): which ranks hold which
 * replica, and the gradient sums over them. Not installed.
 */
#ifndef PP_PIPELINE_REPLICAS_H
#define PP_PIPELINE_REPLICAS_H

#include "pipeline/state.h"

/* The replica whose stages include one on this rank; -1 when none does. */
int pipe_replica_of(const pp_plan *plan, int rank);

/* Rank of stage s in replica r. */
int pipe_rank_in(const pp_plan *plan, int s, int r);

/* Piece r of a batch of `count` samples cut over the replicas (the
 * micro-batch rule by count): its first sample and size. */
void pipe_replica_piece(int count, int replicas, int r, int *off, int *size);

/* What summing gradients over replicas needs; nothing without replicas.
 * Buckets (the default): a group per stage (collective: every rank calls it
 * in the same order) and a host buffer per stage of this rank, summed from
 * the stage's grads_ready (bucket_in_lane: CPU stages, MPI threads allowed)
 * or after the run; p->grads_whole: the one buffer of every gradient.
 * PP_ERR_UNSUPPORTED for gradients not in fp32. Before pp_executor_new. */
pp_status pipe_replicas_init(struct pp_pipeline *p, pp_error *err);
void pipe_replicas_free(struct pp_pipeline *p);

/* Sums stage st's gradients over its replicas; every replica gets the same
 * bits. Host path: through its bucket, in replica order. NCCL: enqueued on
 * ex (the stage's gradient lane, after its backward). */
pp_status pipe_sum_bucket(pipe_stage *st, pp_exec *ex, pp_error *err);

/* After a fault: stops the stages' NCCL communicators (their peers may never
 * join the pending sums). */
void pipe_replicas_abort(struct pp_pipeline *p);

/* Gives every replica the batch-norm statistics of rank 0's replica (before
 * an evaluation and a checkpoint); every rank calls it. */
pp_status pipe_sync_replica_state(struct pp_pipeline *p, pp_error *err);

/* After this replica's run: sums the gradients not yet summed over the
 * replicas (all of them with grads_whole; else the buckets summed outside
 * the executor). Every replica gets the same bits. Every rank calls it.
 * Sets each stage's grads_after_ms (the time of its sum here, else 0). */
pp_status pipe_sum_replica_grads(struct pp_pipeline *p, pp_error *err);

#endif
