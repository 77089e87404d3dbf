/*
 * transformer.c - the CUDA backend's entries for the transformer ops that
 * run its own kernels (transformer.h): layer norm,
 * token and position embeddings, the fused ones' switch (PP_CUDA_UNFUSED),
 * and the bf16 entries of the layer norms and GELU with their switch
 * (PP_CUDA_BF16_WIDE).
 * Each makes its device current, takes its
 * scratch from the exec's workspace (stream ordered, so a step captured in
 * a graph replays them) and enqueues on the exec's stream. (The dense
 * layers: dense.c; the attention: attention_run.c; GELU and the
 * classifier: backend.c's elementwise and loss entries.)
 */
#include "internal.h"
#include "kernels.h"
#include "transformer.h"

#define BEGIN(ex, ce, err)                                     \
    pp_cuda_exec *ce;                                          \
    PP_TRY(pp_cuda_exec_begin((ex), 0, 0, &ce, (err)))

pp_status pp_cuda_unfused(pp_exec *ex, const char *what, pp_error *err)
{
    static int cache = -1;
    if (!pp_cuda_env_on("PP_CUDA_UNFUSED", &cache)) return PP_OK;
    return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: %s: PP_CUDA_UNFUSED is set",
                        ex->dev->name, what);
}

pp_status pp_cuda_bf16_wide(pp_exec *ex, const char *what, pp_error *err)
{
    static int cache = -1;
    if (!pp_cuda_env_on("PP_CUDA_BF16_WIDE", &cache)) return PP_OK;
    return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: %s in bf16: PP_CUDA_BF16_WIDE is set",
                        ex->dev->name, what);
}

/* The layer norms on activations of either dtype (the f32 entries and the bf16 ones). */
static pp_status ln_forward(pp_exec *ex, int64_t rows, int c, float eps, pp_act a, pp_act add,
                            pp_act s, const float *gamma, const float *beta, pp_act y,
                            float *mean, float *rstd, pp_error *err)
{
    if (add.data) PP_TRY(pp_cuda_unfused(ex, "add + layer norm", err));
    if (rows == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_layernorm_forward_mixed(ce->stream, pp_cuda_max_grid(ex), rows,
                                                          c, eps, a.bf16, a.data, add.data,
                                                          s.data, gamma, beta, y.bf16, y.data,
                                                          mean, rstd));
}

static pp_status ln_backward(pp_exec *ex, int64_t rows, int c, pp_act x, pp_act dy,
                             const float *gamma, const float *mean, const float *rstd,
                             pp_act dres, pp_act dx, float *dgamma, float *dbeta, pp_error *err)
{
    if (dres.data) PP_TRY(pp_cuda_unfused(ex, "layer norm backward + residual gradient", err));
    if (rows == 0 || c == 0) return PP_OK;
    BEGIN(ex, ce, err);
    void *part;
    PP_TRY(pp_exec_workspace(ex, (size_t)pp_cuda_layernorm_chunks(rows) * 2 * (size_t)c *
                                     sizeof(double), &part, err));
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_layernorm_backward_mixed(
                       ce->stream, pp_cuda_max_grid(ex), rows, c, x.bf16, x.data, dy.bf16,
                       dy.data, gamma, mean, rstd, dx.bf16, dres.data, dx.data, part, dgamma,
                       dbeta));
}

/* an f32 operand as the mixed launchers take it */
static pp_act f32(const float *p)
{
    return (pp_act){(void *)p, false};
}

pp_status pp_cuda_add_layernorm_forward(pp_exec *ex, int64_t rows, int c, float eps,
                                        const float *a, const float *b, const float *gamma,
                                        const float *beta, float *s, float *y, float *mean,
                                        float *rstd, pp_error *err)
{
    return ln_forward(ex, rows, c, eps, f32(a), f32(b), f32(s), gamma, beta, f32(y), mean, rstd,
                      err);
}

pp_status pp_cuda_layernorm_forward(pp_exec *ex, int64_t rows, int c, float eps, const float *x,
                                    const float *gamma, const float *beta, float *y, float *mean,
                                    float *rstd, pp_error *err)
{
    return pp_cuda_add_layernorm_forward(ex, rows, c, eps, x, NULL, gamma, beta, NULL, y, mean,
                                         rstd, err);
}

pp_status pp_cuda_layernorm_backward_add(pp_exec *ex, int64_t rows, int c, const float *x,
                                         const float *dy, const float *gamma, const float *mean,
                                         const float *rstd, const float *dres, float *dx,
                                         float *dgamma, float *dbeta, pp_error *err)
{
    return ln_backward(ex, rows, c, f32(x), f32(dy), gamma, mean, rstd, f32(dres), f32(dx),
                       dgamma, dbeta, err);
}

pp_status pp_cuda_layernorm_backward(pp_exec *ex, int64_t rows, int c, const float *x,
                                     const float *dy, const float *gamma, const float *mean,
                                     const float *rstd, float *dx, float *dgamma, float *dbeta,
                                     pp_error *err)
{
    return pp_cuda_layernorm_backward_add(ex, rows, c, x, dy, gamma, mean, rstd, NULL, dx,
                                          dgamma, dbeta, err);
}

pp_status pp_cuda_embedding_forward(pp_exec *ex, int64_t rows, int vocab, int c,
                                    const int32_t *ids, const float *table, float *y,
                                    pp_error *err)
{
    if (rows == 0 || c == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_embedding_forward(ce->stream, pp_cuda_max_grid(ex), rows, vocab,
                                                    c, ids, table, y));
}

pp_status pp_cuda_embedding_backward(pp_exec *ex, int64_t rows, int vocab, int c,
                                     const int32_t *ids, const float *dy, float *dtable,
                                     pp_error *err)
{
    if (rows == 0 || c == 0) return PP_OK;
    BEGIN(ex, ce, err);
    void *ws;
    PP_TRY(pp_exec_workspace(ex, pp_cuda_embedding_backward_ws(rows, vocab), &ws, err));
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_embedding_backward(ce->stream, pp_cuda_max_grid(ex), rows,
                                                     vocab, c, ids, dy, dtable, ws));
}

pp_status pp_cuda_position_forward(pp_exec *ex, int64_t n, int t, int c, const float *x,
                                   const float *table, float *y, pp_error *err)
{
    if (n == 0 || t == 0 || c == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_position_forward(ce->stream, pp_cuda_max_grid(ex), n, t, c, x,
                                                   table, y));
}

/* dtable[t] += the sum over n of dy[n, t]: the column sums of dy seen as (n, t c) */
pp_status pp_cuda_position_backward(pp_exec *ex, int64_t n, int t, int c, const float *dy,
                                    float *dtable, pp_error *err)
{
    if (n == 0 || t == 0 || c == 0) return PP_OK;
    BEGIN(ex, ce, err);
    const int64_t cols = (int64_t)t * c, chunks = pp_cuda_colsum_chunks(n);
    void *part;
    PP_TRY(pp_exec_workspace(ex, (size_t)chunks * (size_t)cols * sizeof(double), &part, err));
    PP_TRY(PP_CUDA(ex->dev, err, pp_cuda_launch_colsum_parts(ce->stream, n, cols, dy, part)));
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_parts_add(ce->stream, pp_cuda_max_grid(ex), chunks, cols, cols,
                                            part, dtable, NULL));
}

/* ---- the bf16 entries of mixed precision (backend.h) --------------------------------- */

pp_status pp_cuda_layernorm_forward_bf16(pp_exec *ex, int64_t rows, int c, float eps, pp_act a,
                                         pp_act add, pp_act s, const float *gamma,
                                         const float *beta, pp_act y, float *mean, float *rstd,
                                         pp_error *err)
{
    PP_TRY(pp_cuda_bf16_wide(ex, "layer norm", err));
    return ln_forward(ex, rows, c, eps, a, add, s, gamma, beta, y, mean, rstd, err);
}

pp_status pp_cuda_layernorm_backward_bf16(pp_exec *ex, int64_t rows, int c, pp_act x, pp_act dy,
                                          const float *gamma, const float *mean,
                                          const float *rstd, pp_act dres, pp_act dx,
                                          float *dgamma, float *dbeta, pp_error *err)
{
    PP_TRY(pp_cuda_bf16_wide(ex, "layer norm backward", err));
    return ln_backward(ex, rows, c, x, dy, gamma, mean, rstd, dres, dx, dgamma, dbeta, err);
}

pp_status pp_cuda_gelu_forward_bf16(pp_exec *ex, int64_t n, pp_act x, pp_act y, pp_error *err)
{
    PP_TRY(pp_cuda_bf16_wide(ex, "GELU", err));
    if (n == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_gelu_mixed(ce->stream, pp_cuda_max_grid(ex), n, x.bf16, x.data,
                                             NULL, y.bf16, y.data));
}

/* x and dy of one dtype (the op's checks: dy is like x) */
pp_status pp_cuda_gelu_backward_bf16(pp_exec *ex, int64_t n, pp_act x, pp_act dy, pp_act dx,
                                     pp_error *err)
{
    PP_TRY(pp_cuda_bf16_wide(ex, "GELU backward", err));
    if (n == 0) return PP_OK;
    if (dy.bf16 != x.bf16)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: GELU backward: x and dy differ in "
                            "dtype", ex->dev->name);
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_gelu_mixed(ce->stream, pp_cuda_max_grid(ex), n, x.bf16, x.data,
                                             dy.data, dx.bf16, dx.data));
}
