/*
 * replicas.c - data-parallel replicas of the pipeline: which replica a rank
 * belongs to, each replica's piece of a batch, the sum of the parameter
 * gradients over the replicas before the optimizer step, and the batch-norm
 * statistics every replica takes from rank 0's (see replicas.h).
 */
#include <stdlib.h>
#include <string.h>

#include "pipeline/replicas.h"
#include "runtime/core/batch_split.h"
#include "streams/stream.h"

/* The replica whose stages include one on this rank; -1 when none does.
 * Replicas in one process (replicas_in_process): replica r is rank r of the
 * process's job of threads. */
int pipe_replica_of(const pp_plan *plan, int rank)
{
    int R = plan->replicas > 1 ? plan->replicas : 1;
    if (plan->replicas_in_process) return rank >= 0 && rank < R ? rank : -1;
    for (int r = 0; r < R; r++)
        for (int s = 0; s < plan->n_stages; s++)
            if ((r ? plan->stages[s].replica_rank[r] : plan->stages[s].rank) == rank) return r;
    return -1;
}

/* Rank of stage s in replica r. */
int pipe_rank_in(const pp_plan *plan, int s, int r)
{
    if (plan->replicas_in_process) return r;
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

/* Every gradient must be fp32 (the sum is of floats). */
static pp_status check_fp32_grads(const struct pp_pipeline *p, pp_error *err)
{
    for (int s = 0; s < p->n_stages; s++)
        for (int i = 0; i < pp_stage_param_count(p->stages[s].model); i++) {
            const pp_named_tensor *nt = pp_stage_param(p->stages[s].model, i);
            if (nt->grad->dtype != PP_F32)
                return pp_error_set(err, PP_ERR_UNSUPPORTED, "replicas: gradient %s is %s; "
                                    "replicas sum fp32 gradients", nt->name,
                                    pp_dtype_name(nt->grad->dtype));
        }
    return PP_OK;
}

/* The host buffer in which replicas sum all their gradients at once: every
 * stage's parameters in stage order (each rank fills its own stages, zeros
 * elsewhere, so the sum over all ranks is the sum over replicas). */
static pp_status alloc_grad_sum(struct pp_pipeline *p, pp_error *err)
{
    size_t n = 0;
    for (int s = 0; s < p->n_stages; s++)
        for (int i = 0; i < pp_stage_param_count(p->stages[s].model); i++)
            n += (size_t)pp_tensor_numel(pp_stage_param(p->stages[s].model, i)->grad);
    p->grad_n = n;
    p->grad_buf = malloc((n ? n : 1) * sizeof *p->grad_buf);
    if (!p->grad_buf) return pp_error_set(err, PP_ERR_OOM, "out of host memory (gradient sum)");
    return PP_OK;
}

/* Whether every member of stage s's group sums through NCCL: all want it
 * (a CUDA stage in a build with NCCL), and all made the communicator (NCCL
 * refuses, e.g., two members on one GPU: then all keep to the host path).
 * Collective over the group, the same calls on every member. */
static pp_status try_nccl(struct pp_pipeline *p, pipe_stage *st, pp_error *err)
{
    int size = pp_comm_group_size(st->group);
    float want = st->dev->id.kind == PP_DEVICE_CUDA && pp_nccl_built() ? 1.0f : 0.0f;
    PP_TRY(pp_comm_group_allreduce_sum_f32(st->group, &want, 1, err));
    if (want != (float)size) return PP_OK;
    pp_error why;
    float failed = pp_nccl_new(st->group, st->dev, &st->nccl, &why) != PP_OK ? 1.0f : 0.0f;
    PP_TRY(pp_comm_group_allreduce_sum_f32(st->group, &failed, 1, err));
    if (failed > 0) {
        pp_nccl_abort(st->nccl);
        st->nccl = NULL;
    }
    return PP_OK;
}

/* Stage s's group (the ranks of its replicas, in replica order) and, where
 * it runs here, its NCCL communicator or its host bucket. Every rank calls
 * it for every stage in order. */
static pp_status make_bucket(struct pp_pipeline *p, int s, pp_error *err)
{
    pipe_stage *st = &p->stages[s];
    pp_status rc = pp_comm_group_new(p->comm, stage_here(p, s), p->replica, &st->group, err);
    if (rc != PP_OK) return pp_error_prefix(err, "stage %d (%s) replicas", s, st->device_name);
    if (!stage_here(p, s)) return PP_OK;
    if (try_nccl(p, st, err) != PP_OK)
        return pp_error_prefix(err, "stage %d (%s) replicas", s, st->dev->name);
    if (st->nccl) {
        st->bucket_in_lane = true;
        return PP_OK;
    }
    for (int i = 0; i < st->n_grads; i++) st->bucket_n += (size_t)pp_tensor_numel(st->grads[i]);
    st->bucket = malloc((st->bucket_n ? st->bucket_n : 1) * sizeof *st->bucket);
    if (!st->bucket)
        return pp_error_set(err, PP_ERR_OOM, "stage %d (%s): out of host memory (gradient "
                            "bucket of %zu floats)", s, st->dev->name, st->bucket_n);
    /* the executor's lanes are host threads on CPU devices; each stage's
     * group then sums from its own thread, which MPI must allow */
    st->bucket_in_lane = st->dev->id.kind == PP_DEVICE_CPU && pp_comm_thread_safe(p->comm);
    return PP_OK;
}

pp_status pipe_replicas_init(struct pp_pipeline *p, pp_error *err)
{
    if (p->replicas < 2) return PP_OK;
    PP_TRY(check_fp32_grads(p, err));
    if (p->grads_whole) return alloc_grad_sum(p, err);
    for (int s = 0; s < p->n_stages; s++) PP_TRY(make_bucket(p, s, err));
    return PP_OK;
}

void pipe_replicas_abort(struct pp_pipeline *p)
{
    for (int s = 0; p->stages && s < p->n_stages; s++) {
        pp_nccl_abort(p->stages[s].nccl);
        p->stages[s].nccl = NULL;
    }
}

void pipe_replicas_free(struct pp_pipeline *p)
{
    for (int s = 0; p->stages && s < p->n_stages; s++) {
        pp_nccl_free(p->stages[s].nccl);
        p->stages[s].nccl = NULL;
        pp_comm_group_free(p->stages[s].group);
        free(p->stages[s].bucket);
        free(p->stages[s].grads_ms); /* grown with the other timings (pipeline.c) */
        p->stages[s].group = NULL;
        p->stages[s].bucket = NULL;
        p->stages[s].grads_ms = NULL;
    }
    free(p->grad_buf);
    p->grad_buf = NULL;
}

/* The NCCL path: every gradient summed in place, as one NCCL group. */
static pp_status sum_nccl(pipe_stage *st, pp_exec *ex, pp_error *err)
{
    float **bufs = malloc((size_t)(st->n_grads + 1) * sizeof *bufs);
    size_t *ns = malloc((size_t)(st->n_grads + 1) * sizeof *ns);
    pp_status rc = PP_OK;
    if (!bufs || !ns) {
        rc = pp_error_set(err, PP_ERR_OOM, "out of host memory (NCCL sum)");
    } else {
        for (int i = 0; i < st->n_grads; i++) {
            bufs[i] = st->grads[i]->data;
            ns[i] = (size_t)pp_tensor_numel(st->grads[i]);
        }
        rc = pp_nccl_allreduce_many_f32(st->nccl, ex, bufs, ns, st->n_grads, err);
    }
    free(bufs);
    free(ns);
    return rc;
}

pp_status pipe_sum_bucket(pipe_stage *st, pp_exec *ex, pp_error *err)
{
    if (st->nccl) return sum_nccl(st, ex, err);
    size_t off = 0;
    for (int i = 0; i < st->n_grads; i++) {
        size_t n = (size_t)pp_tensor_numel(st->grads[i]);
        PP_TRY(pp_tensor_to_host(st->grads[i], st->bucket + off, n * sizeof(float), err));
        off += n;
    }
    PP_TRY(pp_comm_group_allreduce_sum_f32(st->group, st->bucket, st->bucket_n, err));
    off = 0;
    for (int i = 0; i < st->n_grads; i++) {
        size_t n = (size_t)pp_tensor_numel(st->grads[i]);
        PP_TRY(pp_tensor_from_host(st->grads[i], st->bucket + off, n * sizeof(float), err));
        off += n;
    }
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

/* Sums the parameter gradients over the replicas, so that every replica's
 * optimizer applies the same update. With grads_whole, all of them in one
 * allreduce over the job after the whole backward (formed on rank 0 and
 * broadcast); else the buckets the executor did not sum during the run, one
 * per stage over its group. Either way every replica gets the same bits. */
static pp_status sum_buckets_left(struct pp_pipeline *p, pp_error *err)
{
    for (int s = 0; s < p->n_stages; s++) {
        pipe_stage *st = &p->stages[s];
        if (!stage_here(p, s) || st->bucket_in_lane) continue;
        int64_t t0 = pp_stream_clock_ns();
        if (pipe_sum_bucket(st, NULL, err) != PP_OK)
            return pp_error_prefix(err, "stage %d (%s) gradients", s, st->dev->name);
        st->grads_after_ms = (double)(pp_stream_clock_ns() - t0) / 1e6;
    }
    return PP_OK;
}

/* The one sum of every gradient (grads_whole). */
static pp_status sum_whole(struct pp_pipeline *p, pp_error *err)
{
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

pp_status pipe_sum_replica_grads(struct pp_pipeline *p, pp_error *err)
{
    for (int s = 0; s < p->n_stages; s++) p->stages[s].grads_after_ms = 0;
    if (p->replicas < 2) return PP_OK;
    if (!p->grads_whole) return sum_buckets_left(p, err);
    int64_t t0 = pp_stream_clock_ns();
    PP_TRY(sum_whole(p, err));
    double ms = (double)(pp_stream_clock_ns() - t0) / 1e6;
    for (int s = 0; s < p->n_stages; s++)
        if (stage_here(p, s)) p->stages[s].grads_after_ms = ms;
    return PP_OK;
}
