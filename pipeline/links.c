/*
 * links.c - device-to-device links between the CUDA stages of one replica
 * on different ranks: per boundary and direction, a group of the two ranks
 * and its NCCL communicator (runtime/comm/nccl.h), made once at start and handed to
 * the executor (pp_executor_set_link), which sends activations and
 * gradients over them with ncclSend/ncclRecv on the boundary's copy
 * streams. Every rank walks the same (replica, boundary, direction) list
 * in the same order, since making a group is collective over the job.
 */
#include <stdlib.h>

#include "pipeline/links.h"
#include "pipeline/replicas.h"

pp_device_id pipe_plan_device(const pp_plan *plan, int s, int r)
{
    return r ? plan->stages[s].replica_device[r] : plan->stages[s].device;
}

bool pipe_cuda_link(const pp_plan *plan, int b, int r)
{
    return pp_nccl_built() && pipe_rank_in(plan, b, r) != pipe_rank_in(plan, b + 1, r) &&
           pipe_plan_device(plan, b, r).kind == PP_DEVICE_CUDA &&
           pipe_plan_device(plan, b + 1, r).kind == PP_DEVICE_CUDA;
}

/* One direction of boundary b of replica r: the group of its two ranks
 * (the rank of stage b first) and, on them, the communicator. */
static pp_status make_link(struct pp_pipeline *p, const pp_plan *plan, int b, int r,
                           pp_nccl **out, pp_error *err)
{
    int lo = pipe_rank_in(plan, b, r), hi = pipe_rank_in(plan, b + 1, r);
    bool member = p->rank == lo || p->rank == hi;
    pp_comm_group *g = NULL;
    *out = NULL;
    PP_TRY(pp_comm_group_new(p->comm, member, p->rank == hi, &g, err));
    if (!g) return PP_OK;
    p->link_groups[p->n_links] = g;
    pipe_stage *st = &p->stages[p->rank == lo ? b : b + 1];
    pp_status rc = pp_nccl_new(g, st->dev, &p->link_nccl[p->n_links++], err);
    if (rc != PP_OK)
        return pp_error_prefix(err, "stage %d (%s) and stage %d: NCCL link (two ranks on one GPU "
                               "cannot link)", b, st->dev->name, b + 1);
    *out = p->link_nccl[p->n_links - 1];
    return PP_OK;
}

pp_status pipe_links_init(struct pp_pipeline *p, const pp_plan *plan, pp_error *err)
{
    if (pp_comm_size(p->comm) < 2) return PP_OK;
    size_t cap = (size_t)(2 * p->n_stages * p->replicas);
    p->link_groups = calloc(cap, sizeof *p->link_groups);
    p->link_nccl = calloc(cap, sizeof *p->link_nccl);
    if (!p->link_groups || !p->link_nccl)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (links)");
    for (int r = 0; r < p->replicas; r++)
        for (int b = 0; b + 1 < p->n_stages; b++) {
            if (!pipe_cuda_link(plan, b, r)) continue;
            pp_nccl *act, *grad;
            PP_TRY(make_link(p, plan, b, r, &act, err));
            PP_TRY(make_link(p, plan, b, r, &grad, err));
            if (act && grad) PP_TRY(pp_executor_set_link(p->exec, b, act, grad, err));
        }
    return PP_OK;
}

void pipe_links_free(struct pp_pipeline *p, bool abort)
{
    for (int i = 0; i < p->n_links; i++) {
        if (abort)
            pp_nccl_abort(p->link_nccl[i]);
        else
            pp_nccl_free(p->link_nccl[i]);
        p->link_nccl[i] = NULL;
        if (!abort) pp_comm_group_free(p->link_groups[i]);
    }
    if (abort) return;
    free(p->link_groups);
    free(p->link_nccl);
    p->link_groups = NULL;
    p->link_nccl = NULL;
    p->n_links = 0;
}
