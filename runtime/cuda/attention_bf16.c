/*
 * attention_bf16.c - the CUDA backend's attention entries on bf16 operands
 * (backend.h: attention_forward_bf16 / attention_backward_bf16): our tiled
 * kernels of attention_bf16.cu on the exec's stream, the backward's delta
 * scratch from the exec's workspace (stream ordered, so a step captured in
 * a graph replays them). A shape the kernels do not take is declined
 * (PP_ERR_UNSUPPORTED, nothing enqueued): ops_transformer.c then runs the
 * f32 entries on stand-ins, which report it.
 */
#include "attention_bf16.h"
#include "internal.h"

/* *ce: the exec begun, for a shape the kernels take (else PP_ERR_UNSUPPORTED) */
static pp_status begin(pp_exec *ex, const pp_attention_desc *d, pp_cuda_exec **ce,
                       pp_error *err)
{
    if (d->c / d->heads > PP_CUDA_ATTENTION_HS_MAX || d->n > 65535 || d->heads > 65535)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: bf16 attention: shape not taken",
                            ex->dev->name);
    return pp_cuda_exec_begin(ex, 0, 0, ce, err);
}

pp_status pp_cuda_attention_forward_bf16(pp_exec *ex, const pp_attention_desc *d,
                                         const uint16_t *qkv, uint16_t *y, float *lse,
                                         pp_error *err)
{
    if (d->n == 0 || d->t == 0 || d->c == 0) return PP_OK;
    pp_cuda_exec *ce;
    PP_TRY(begin(ex, d, &ce, err));
    const pp_cuda_attention_dims a = {d->n, d->t, d->c, d->heads};
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_attention_forward_bf16(ce->stream, a, qkv, y, lse));
}

pp_status pp_cuda_attention_backward_bf16(pp_exec *ex, const pp_attention_desc *d,
                                          const uint16_t *qkv, const uint16_t *y,
                                          const float *lse, const uint16_t *dy, uint16_t *dqkv,
                                          pp_error *err)
{
    if (d->n == 0 || d->t == 0 || d->c == 0) return PP_OK;
    pp_cuda_exec *ce;
    PP_TRY(begin(ex, d, &ce, err));
    void *delta;
    PP_TRY(pp_exec_workspace(ex, (size_t)d->n * d->heads * d->t * sizeof(float), &delta, err));
    const pp_cuda_attention_dims a = {d->n, d->t, d->c, d->heads};
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_attention_backward_bf16(ce->stream, pp_cuda_max_grid(ex), a,
                                                          qkv, y, lse, dy, delta, dqkv));
}
