/*
 * train_ops.c - the CUDA backend's entries for the training recipe: each
 * cuts its tensors (or layers) into the kernel lists of train.h and
 * launches them on the exec's stream. pp_sumsq_multi's sums come back to
 * the host through a copy that returns once they are there.
 */
#include "train_ops.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "train.h"

_Static_assert(PP_CUDA_SUMSQ_TILE == PP_SUMSQ_TILE && PP_CUDA_SUMSQ_LANES == PP_SUMSQ_LANES,
               "the sums' order is ops.h's");
_Static_assert(PP_CUDA_SUMSQ_TILE == PP_CUDA_MULTI_TILE, "one list cuts for sums and scaling");

#define BEGIN(ex, ce, err)                                                                         \
    pp_cuda_exec *ce;                                                                              \
    PP_TRY(pp_cuda_exec_begin((ex), 0, 0, &ce, (err)))

/* One launch per PP_CUDA_ADAMW_MULTI non-empty tensors. */
pp_status pp_cuda_adamw_update_multi(pp_exec *ex, const pp_adamw_scalars *s, int count,
                                     float *const *param, const float *const *grad,
                                     float *const *exp_avg, float *const *exp_avg_sq,
                                     const int64_t *sizes, pp_error *err)
{
    BEGIN(ex, ce, err);
    const pp_cuda_adamw_args a = {s->decay, s->b1,        s->c1,  s->b2,        s->c2,
                                  s->bc2,   s->step_size, s->eps, s->grad_scale};
    pp_cuda_adamw_list list;
    memset(&list, 0, sizeof list);
    for (int i = 0; i <= count; i++) {
        if (i == count || list.count == PP_CUDA_ADAMW_MULTI) {
            PP_TRY(PP_CUDA(ex->dev, err,
                           pp_cuda_launch_adamw_multi(ce->stream, pp_cuda_max_grid(ex), &list, a)));
            memset(&list, 0, sizeof list);
        }
        if (i == count || sizes[i] == 0) continue;
        const int k = pp_cuda_multi_add(list.first_tile, &list.count, &list.tiles, sizes[i],
                                        PP_CUDA_MULTI_TILE);
        list.param[k] = param[i];
        list.grad[k] = grad[i];
        list.exp_avg[k] = exp_avg[i];
        list.exp_avg_sq[k] = exp_avg_sq[i];
        list.n[k] = sizes[i];
    }
    return PP_OK;
}

/* The sums of one list into sums[idx[k]], through the exec's workspace. */
static pp_status sumsq_list(pp_exec *ex, pp_cuda_exec *ce, const pp_cuda_norm_list *list,
                            const int *idx, double *sums, pp_error *err)
{
    if (list->count == 0) return PP_OK;
    void *ws;
    PP_TRY(pp_exec_workspace(ex, (size_t)(list->tiles + list->count) * sizeof(double), &ws, err));
    double *part = ws, *dev_sums = part + list->tiles, host[PP_CUDA_NORM_MULTI];
    PP_TRY(PP_CUDA(ex->dev, err,
                   pp_cuda_launch_sumsq_multi(ce->stream, pp_cuda_max_grid(ex), list, part,
                                              dev_sums)));
    /* to pageable memory: returns once the sums are on the host */
    PP_TRY(PP_CUDA(ex->dev, err,
                   cudaMemcpyAsync(host, dev_sums, (size_t)list->count * sizeof(double),
                                   cudaMemcpyDeviceToHost, ce->stream)));
    PP_TRY(PP_CUDA(ex->dev, err, cudaStreamSynchronize(ce->stream)));
    for (int k = 0; k < list->count; k++) sums[idx[k]] = host[k];
    return PP_OK;
}

pp_status pp_cuda_sumsq_multi(pp_exec *ex, int count, const float *const *x,
                              const int64_t *sizes, double *sums, pp_error *err)
{
    BEGIN(ex, ce, err);
    pp_cuda_norm_list list;
    int idx[PP_CUDA_NORM_MULTI];
    memset(&list, 0, sizeof list);
    for (int i = 0; i <= count; i++) {
        if (i == count || list.count == PP_CUDA_NORM_MULTI) {
            PP_TRY(sumsq_list(ex, ce, &list, idx, sums, err));
            memset(&list, 0, sizeof list);
        }
        if (i == count) continue;
        if (sizes[i] == 0) {
            sums[i] = 0.0;
            continue;
        }
        const int k = pp_cuda_multi_add(list.first_tile, &list.count, &list.tiles, sizes[i],
                                        PP_CUDA_SUMSQ_TILE);
        list.x[k] = (float *)x[i];
        list.n[k] = sizes[i];
        idx[k] = i;
    }
    return PP_OK;
}

pp_status pp_cuda_scale_multi(pp_exec *ex, float s, int count, float *const *x,
                              const int64_t *sizes, pp_error *err)
{
    BEGIN(ex, ce, err);
    pp_cuda_norm_list list;
    memset(&list, 0, sizeof list);
    for (int i = 0; i <= count; i++) {
        if (i == count || list.count == PP_CUDA_NORM_MULTI) {
            PP_TRY(PP_CUDA(ex->dev, err,
                           pp_cuda_launch_scale_multi(ce->stream, pp_cuda_max_grid(ex), &list, s)));
            memset(&list, 0, sizeof list);
        }
        if (i == count || sizes[i] == 0) continue;
        const int k = pp_cuda_multi_add(list.first_tile, &list.count, &list.tiles, sizes[i],
                                        PP_CUDA_MULTI_TILE);
        list.x[k] = x[i];
        list.n[k] = sizes[i];
    }
    return PP_OK;
}

/* One launch per PP_CUDA_BN_LAYERS layers. */
pp_status pp_cuda_bn_stats_combine(pp_exec *ex, const pp_bn_stats_desc *d, int count,
                                   const int *c, const int64_t *hw, float *const *slots,
                                   float *const *running_mean, float *const *running_var,
                                   pp_error *err)
{
    if (d->m > PP_CUDA_BN_MICRO)
        return pp_error_set(err, PP_ERR_UNSUPPORTED,
                            "%s: deferred batch-norm statistics combine at most %d micro-batches "
                            "of a step on CUDA (%d asked); use fewer micro-batches",
                            ex->dev->name, PP_CUDA_BN_MICRO, d->m);
    BEGIN(ex, ce, err);
    pp_cuda_bn_stats_list list;
    memset(&list, 0, sizeof list);
    for (int i = 0; i <= count; i++) {
        if (i == count || list.count == PP_CUDA_BN_LAYERS) {
            list.m = d->m;
            list.momentum = d->momentum;
            for (int k = 0; k < d->m; k++) list.sizes[k] = d->sizes[k];
            PP_TRY(PP_CUDA(ex->dev, err,
                           pp_cuda_launch_bn_stats(ce->stream, pp_cuda_max_grid(ex), &list)));
            memset(&list, 0, sizeof list);
        }
        if (i == count || c[i] == 0) continue;
        const int k = list.count++;
        list.slots[k] = slots[i];
        list.running_mean[k] = running_mean[i];
        list.running_var[k] = running_var[i];
        list.hw[k] = hw[i];
        list.c[k] = c[i];
        list.first_ch[k] = list.channels;
        list.channels += c[i];
    }
    return PP_OK;
}
