/*
 * replicas.c - data-parallel replicas of the pipeline: which replica a rank
 * belongs to, each replica's piece of a batch, the sum of the parameter
 * gradients over the replicas before the optimizer step, and the batch-norm
 * statistics every replica takes from rank 0's (see pipeline_internal.h).
 */
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_internal.h"
#include "runtime/core/batch_split.h"

/* The replica whose stages include one on this rank; -1 when none does. */
int pipe_replica_of(const pp_plan *plan, int rank)
{
    int R = plan->replicas > 1 ? plan->replicas : 1;
    for (int r = 0; r < R; r++)
        for (int s = 0; s < plan->n_stages; s++)
            if ((r ? plan->stages[s].replica_rank[r] : plan->stages[s].rank) == rank) return r;
    return -1;
}

/* Rank of stage s in replica r. */
int pipe_rank_in(const pp_plan *plan, int s, int r)
{
    return r ? plan->stages[s].replica_rank[r] : plan->stages[s].rank;
}

/* Piece r of a batch of `count` samples cut over the replicas (the
 * micro-batch rule by count): its first sample and size. */
void pipe_replica_piece(int count, int replicas, int r, int *off, int *size)
{
    int sizes[PP_PLAN_MAX_REPLICAS];
    int R = replicas > count ? count : replicas;
    pp_batch_split_sizes(count, 0, R, sizes);
    *off = 0;
    *size = r < R ? sizes[r] : 0;
    for (int i = 0; i < r && i < R; i++) *off += sizes[i];
}

/* The host buffer in which replicas sum their gradients: every stage's
 * parameters in stage order (each rank fills its own stages, zeros elsewhere,
 * so the sum over all ranks is the sum over replicas). */
pp_status pipe_alloc_grad_sum(struct pp_pipeline *p, pp_error *err)
{
    if (p->replicas < 2) return PP_OK;
    size_t n = 0;
    for (int s = 0; s < p->n_stages; s++)
        for (int i = 0; i < pp_stage_param_count(p->stages[s].model); i++) {
            const pp_named_tensor *nt = pp_stage_param(p->stages[s].model, i);
            if (nt->grad->dtype != PP_F32)
                return pp_error_set(err, PP_ERR_UNSUPPORTED, "replicas: gradient %s is %s; "
                                    "replicas sum fp32 gradients", nt->name,
                                    pp_dtype_name(nt->grad->dtype));
            n += (size_t)pp_tensor_numel(nt->grad);
        }
    p->grad_n = n;
    p->grad_buf = malloc((n ? n : 1) * sizeof *p->grad_buf);
    if (!p->grad_buf) return pp_error_set(err, PP_ERR_OOM, "out of host memory (gradient sum)");
    return PP_OK;
}

#define TAG_BUFFERS 30001

/* Gives every replica the batch-norm statistics (and the parameters, equal
 * anyway) of rank 0's replica, as DDP's broadcast_buffers does: each replica
 * updated its running statistics from its own micro-batches. Before an
 * evaluation and a checkpoint; every rank calls it. */
pp_status pipe_sync_replica_state(struct pp_pipeline *p, pp_error *err)
{
    if (p->replicas < 2) return PP_OK;
    int home = -1;
    for (int r = 0; r < p->replicas && home < 0; r++)
        for (int s = 0; s < p->n_stages; s++)
            if (p->rep_rank[r * p->n_stages + s] == 0) home = r;
    for (int s = 0; s < p->n_stages; s++) {
        pp_stage *m = p->stages[s].model;
        int from = p->home_rank[s];
        bool send = p->rank == from, recv = stage_here(p, s) && p->replica != home;
        if (!send && !recv) continue;
        PP_TRY(pp_stage_sync_buffers(m, err));
        for (int i = 0; i < pp_stage_state_count(m); i++) {
            pp_tensor *t = pp_stage_state(m, i)->value;
            size_t bytes = pp_tensor_bytes(t);
            void *tmp = malloc(bytes ? bytes : 1);
            if (!tmp) return pp_error_set(err, PP_ERR_OOM, "out of host memory (replicas)");
            pp_status st = PP_OK;
            if (send) {
                st = pp_tensor_to_host(t, tmp, bytes, err);
                for (int r = 0; st == PP_OK && r < p->replicas; r++)
                    if (r != home)
                        st = pp_comm_send(p->comm, p->rep_rank[r * p->n_stages + s], TAG_BUFFERS,
                                          tmp, bytes, err);
            } else {
                st = pp_comm_recv(p->comm, from, TAG_BUFFERS, tmp, bytes, err);
                if (st == PP_OK) st = pp_tensor_from_host(t, tmp, bytes, err);
            }
            free(tmp);
            PP_TRY(st);
        }
    }
    return PP_OK;
}

/* Sums the parameter gradients over the replicas (allreduce), so that every
 * replica's optimizer applies the same update. After the whole backward of
 * this replica; the sum is formed on rank 0 and broadcast, so every replica
 * gets the same bits. */
pp_status pipe_sum_replica_grads(struct pp_pipeline *p, pp_error *err)
{
    if (p->replicas < 2) return PP_OK;
    size_t off = 0;
    for (int s = 0; s < p->n_stages; s++)
        for (int i = 0; i < pp_stage_param_count(p->stages[s].model); i++) {
            pp_tensor *g = pp_stage_param(p->stages[s].model, i)->grad;
            size_t n = (size_t)pp_tensor_numel(g);
            if (stage_here(p, s))
                PP_TRY(pp_tensor_to_host(g, p->grad_buf + off, n * sizeof(float), err));
            else
                memset(p->grad_buf + off, 0, n * sizeof(float));
            off += n;
        }
    PP_TRY(pp_comm_allreduce_sum_f32(p->comm, p->grad_buf, p->grad_n, err));
    off = 0;
    for (int s = 0; s < p->n_stages; s++)
        for (int i = 0; i < pp_stage_param_count(p->stages[s].model); i++) {
            pp_tensor *g = pp_stage_param(p->stages[s].model, i)->grad;
            size_t n = (size_t)pp_tensor_numel(g);
            if (stage_here(p, s))
                PP_TRY(pp_tensor_from_host(g, p->grad_buf + off, n * sizeof(float), err));
            off += n;
        }
    return PP_OK;
}
