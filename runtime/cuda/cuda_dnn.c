/*
 * cuda_dnn.c - convolution, batch norm and max pooling through cuDNN.
 *
 * Per exec, descriptors are cached by geometry, and the convolution
 * algorithms are chosen once per shape and direction with cuDNN's heuristics
 * (cudnnGet*Algorithm_v7): the first algorithm that succeeds, uses FMA math
 * (fp32 without TF32: CUDNN_FMA_MATH, since CUDNN_DEFAULT_MATH permits TF32 on
 * Ampere and later) and needs at most PP_CUDA_CONV_WS_MAX bytes of workspace.
 * Workspace comes from pp_exec_workspace, so after the first step of a run no
 * allocation happens here.
 *
 * Contracts are those of ops.h: outputs are overwritten (beta = 0), dw, dgamma
 * and dbeta accumulate (beta = 1). Max pooling leaves idx unused: backward
 * recomputes the argmax from x and y.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* Largest cuDNN workspace a convolution algorithm may ask for. */
#define PP_CUDA_CONV_WS_MAX ((size_t)512 << 20)

static const float one = 1.0f, zero = 0.0f;

/* Grows a cache array of elements of size elem to hold one more. */
static pp_status grow(void **arr, int n, int *cap, size_t elem, const pp_device_ctx *dev,
                      pp_error *err)
{
    if (n < *cap) return PP_OK;
    int ncap = *cap ? 2 * *cap : 16;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (cuDNN cache)", dev->name);
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
    *arr = p;
    *cap = ncap;
    return PP_OK;
}

/* ---- descriptor caches ---------------------------------------------------- */

static pp_status tensor_desc(pp_exec *ex, pp_cuda_exec *ce, int n, int c, int h, int w,
                             cudnnTensorDescriptor_t *out, pp_error *err)
{
    for (int i = 0; i < ce->n_tdesc; i++) {
        pp_cuda_tensor_desc *t = &ce->tdesc[i];
        if (t->n == n && t->c == c && t->h == h && t->w == w) {
            *out = t->desc;
            return PP_OK;
        }
    }
    PP_TRY(grow((void **)&ce->tdesc, ce->n_tdesc, &ce->cap_tdesc, sizeof *ce->tdesc, ex->dev,
                err));
    pp_cuda_tensor_desc *t = &ce->tdesc[ce->n_tdesc];
    cudnnTensorDescriptor_t desc;
    PP_TRY(PP_CUDA(ex->dev, err, cudnnCreateTensorDescriptor(&desc)));
    pp_status s = PP_CUDA(ex->dev, err,
                          cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n,
                                                     c, h, w));
    if (s != PP_OK) {
        (void)PP_CUDA(ex->dev, NULL, cudnnDestroyTensorDescriptor(desc));
        return s;
    }
    *t = (pp_cuda_tensor_desc){n, c, h, w, desc};
    ce->n_tdesc++;
    *out = desc;
    return PP_OK;
}

static void conv_plan_free(pp_exec *ex, pp_cuda_conv_plan *p)
{
    if (p->x_desc) (void)PP_CUDA(ex->dev, NULL, cudnnDestroyTensorDescriptor(p->x_desc));
    if (p->y_desc) (void)PP_CUDA(ex->dev, NULL, cudnnDestroyTensorDescriptor(p->y_desc));
    if (p->w_desc) (void)PP_CUDA(ex->dev, NULL, cudnnDestroyFilterDescriptor(p->w_desc));
    if (p->conv_desc)
        (void)PP_CUDA(ex->dev, NULL, cudnnDestroyConvolutionDescriptor(p->conv_desc));
}

static pp_status conv_plan(pp_exec *ex, pp_cuda_exec *ce, const pp_conv2d_desc *d,
                           pp_cuda_conv_plan **out, pp_error *err)
{
    for (int i = 0; i < ce->n_conv; i++)
        if (memcmp(&ce->conv[i].key, d, sizeof *d) == 0 && ce->conv[i].math == (int)ex->dev->math) {
            *out = &ce->conv[i];
            return PP_OK;
        }
    PP_TRY(grow((void **)&ce->conv, ce->n_conv, &ce->cap_conv, sizeof *ce->conv, ex->dev, err));
    pp_cuda_conv_plan *p = &ce->conv[ce->n_conv];
    memset(p, 0, sizeof *p);
    pp_device_ctx *dev = ex->dev;
    pp_status s = PP_CUDA(dev, err, cudnnCreateTensorDescriptor(&p->x_desc));
    if (s == PP_OK) s = PP_CUDA(dev, err, cudnnCreateTensorDescriptor(&p->y_desc));
    if (s == PP_OK) s = PP_CUDA(dev, err, cudnnCreateFilterDescriptor(&p->w_desc));
    if (s == PP_OK) s = PP_CUDA(dev, err, cudnnCreateConvolutionDescriptor(&p->conv_desc));
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnSetTensor4dDescriptor(p->x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                               d->n, d->c, d->h, d->w));
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnSetTensor4dDescriptor(p->y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                               d->n, d->k, d->p, d->q));
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnSetFilter4dDescriptor(p->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                               d->k, d->c, d->r, d->s));
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnSetConvolution2dDescriptor(p->conv_desc, d->pad_h, d->pad_w,
                                                    d->stride_h, d->stride_w, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnSetConvolutionMathType(p->conv_desc, dev->math == PP_MATH_TF32
                                                                  ? CUDNN_TENSOR_OP_MATH
                                                                  : CUDNN_FMA_MATH));
    int on = 0, oc = 0, oh = 0, ow = 0;
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnGetConvolution2dForwardOutputDim(p->conv_desc, p->x_desc, p->w_desc,
                                                          &on, &oc, &oh, &ow));
    if (s == PP_OK && (on != d->n || oc != d->k || oh != d->p || ow != d->q))
        s = pp_error_set(err, PP_ERR_INTERNAL,
                         "%s: cuDNN computes a %dx%dx%dx%d convolution output, expected "
                         "%dx%dx%dx%d",
                         dev->name, on, oc, oh, ow, d->n, d->k, d->p, d->q);
    if (s != PP_OK) {
        conv_plan_free(ex, p);
        memset(p, 0, sizeof *p);
        return s;
    }
    p->key = *d;
    p->math = (int)dev->math;
    ce->n_conv++;
    *out = p;
    return PP_OK;
}

/* Index of the algorithm to use among count heuristic results: the first that
 * succeeds within the workspace limit, preferring CUDNN_FMA_MATH (IEEE fp32;
 * then CUDNN_DEFAULT_MATH), or under TF32 tensor-op math (then the others);
 * -1 if none. */
#define PICK_ALGO(dev, perf, count, out)                                                    \
    do {                                                                                    \
        static const cudnnMathType_t fp32_[] = {CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH};          \
        static const cudnnMathType_t tf32_[] = {CUDNN_TENSOR_OP_MATH,                         \
                                                CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,        \
                                                CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH};          \
        const bool tf32 = (dev)->math == PP_MATH_TF32;                                      \
        const cudnnMathType_t *order_ = tf32 ? tf32_ : fp32_;                               \
        const int passes_ = tf32 ? 4 : 2;                                                   \
        (out) = -1;                                                                         \
        for (int pass_ = 0; pass_ < passes_ && (out) < 0; pass_++)                          \
            for (int i_ = 0; i_ < (count) && (out) < 0; i_++)                               \
                if ((perf)[i_].status == CUDNN_STATUS_SUCCESS &&                            \
                    (perf)[i_].memory <= PP_CUDA_CONV_WS_MAX &&                             \
                    (perf)[i_].mathType == order_[pass_])                                   \
                    (out) = i_;                                                             \
    } while (0)

static pp_status no_algo(pp_exec *ex, const char *what, const pp_conv2d_desc *d, pp_error *err)
{
    return pp_error_set(err, PP_ERR_BACKEND,
                        "%s: cuDNN offers no %s %s algorithm within %zu MiB of "
                        "workspace for x %dx%dx%dx%d, w %dx%dx%dx%d, stride %d, pad %d",
                        ex->dev->name, ex->dev->math == PP_MATH_TF32 ? "tf32" : "fp32 (non-TF32)",
                        what, PP_CUDA_CONV_WS_MAX >> 20, d->n, d->c, d->h, d->w,
                        d->k, d->c, d->r, d->s, d->stride_h, d->pad_h);
}

/* ---- convolution ------------------------------------------------------------- */

pp_status pp_cuda_conv2d_forward(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                 const float *w, float *y, pp_error *err)
{
    pp_cuda_exec *ce;
    pp_cuda_conv_plan *p;
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, &ce, err));
    PP_TRY(conv_plan(ex, ce, d, &p, err));
    if (!p->have_fwd) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int count = 0, pick;
        PP_TRY(PP_CUDA(ex->dev, err,
                       cudnnGetConvolutionForwardAlgorithm_v7(
                           ce->dnn, p->x_desc, p->w_desc, p->conv_desc, p->y_desc,
                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf)));
        PICK_ALGO(ex->dev, perf, count, pick);
        if (pick < 0) return no_algo(ex, "forward convolution", d, err);
        p->fwd = perf[pick].algo;
        PP_TRY(PP_CUDA(ex->dev, err,
                       cudnnGetConvolutionForwardWorkspaceSize(ce->dnn, p->x_desc, p->w_desc,
                                                               p->conv_desc, p->y_desc, p->fwd,
                                                               &p->fwd_ws)));
        p->have_fwd = 1;
    }
    void *ws;
    PP_TRY(pp_exec_workspace(ex, p->fwd_ws, &ws, err));
    return PP_CUDA(ex->dev, err,
                   cudnnConvolutionForward(ce->dnn, &one, p->x_desc, x, p->w_desc, w,
                                           p->conv_desc, p->fwd, ws, p->fwd_ws, &zero, p->y_desc,
                                           y));
}

/* dx = beta * dx + conv_transpose(dy, w), beta 0 or 1 */
static pp_status conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d, const float *dy,
                                      const float *w, const float *beta, float *dx, pp_error *err)
{
    pp_cuda_exec *ce;
    pp_cuda_conv_plan *p;
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, &ce, err));
    PP_TRY(conv_plan(ex, ce, d, &p, err));
    if (!p->have_bwd_data) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int count = 0, pick;
        PP_TRY(PP_CUDA(ex->dev, err,
                       cudnnGetConvolutionBackwardDataAlgorithm_v7(
                           ce->dnn, p->w_desc, p->y_desc, p->conv_desc, p->x_desc,
                           CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf)));
        PICK_ALGO(ex->dev, perf, count, pick);
        if (pick < 0) return no_algo(ex, "backward-data convolution", d, err);
        p->bwd_data = perf[pick].algo;
        PP_TRY(PP_CUDA(ex->dev, err,
                       cudnnGetConvolutionBackwardDataWorkspaceSize(
                           ce->dnn, p->w_desc, p->y_desc, p->conv_desc, p->x_desc, p->bwd_data,
                           &p->bwd_data_ws)));
        p->have_bwd_data = 1;
    }
    void *ws;
    PP_TRY(pp_exec_workspace(ex, p->bwd_data_ws, &ws, err));
    return PP_CUDA(ex->dev, err,
                   cudnnConvolutionBackwardData(ce->dnn, &one, p->w_desc, w, p->y_desc, dy,
                                                p->conv_desc, p->bwd_data, ws, p->bwd_data_ws,
                                                beta, p->x_desc, dx));
}

pp_status pp_cuda_conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d, const float *dy,
                                       const float *w, float *dx, pp_error *err)
{
    return conv2d_backward_data(ex, d, dy, w, &zero, dx, err);
}

/* beta = 1: cuDNN adds the result to dx */
pp_status pp_cuda_conv2d_backward_data_accumulate(pp_exec *ex, const pp_conv2d_desc *d,
                                                  const float *dy, const float *w, float *dx,
                                                  pp_error *err)
{
    return conv2d_backward_data(ex, d, dy, w, &one, dx, err);
}

pp_status pp_cuda_conv2d_backward_filter(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                         const float *dy, float *dw, pp_error *err)
{
    pp_cuda_exec *ce;
    pp_cuda_conv_plan *p;
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, &ce, err));
    PP_TRY(conv_plan(ex, ce, d, &p, err));
    if (!p->have_bwd_filter) {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int count = 0, pick;
        PP_TRY(PP_CUDA(ex->dev, err,
                       cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                           ce->dnn, p->x_desc, p->y_desc, p->conv_desc, p->w_desc,
                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf)));
        PICK_ALGO(ex->dev, perf, count, pick);
        if (pick < 0) return no_algo(ex, "backward-filter convolution", d, err);
        p->bwd_filter = perf[pick].algo;
        PP_TRY(PP_CUDA(ex->dev, err,
                       cudnnGetConvolutionBackwardFilterWorkspaceSize(
                           ce->dnn, p->x_desc, p->y_desc, p->conv_desc, p->w_desc, p->bwd_filter,
                           &p->bwd_filter_ws)));
        p->have_bwd_filter = 1;
    }
    void *ws;
    PP_TRY(pp_exec_workspace(ex, p->bwd_filter_ws, &ws, err));
    /* beta = 1: dw accumulates over micro-batches */
    return PP_CUDA(ex->dev, err,
                   cudnnConvolutionBackwardFilter(ce->dnn, &one, p->x_desc, x, p->y_desc, dy,
                                                  p->conv_desc, p->bwd_filter, ws,
                                                  p->bwd_filter_ws, &one, p->w_desc, dw));
}

/* ---- batch norm ------------------------------------------------------------- */

/* Descriptors of the activation (N,C,H,W) and of the per-channel parameters
 * (1,C,1,1), spatial mode. */
static pp_status bn_descs(pp_exec *ex, const pp_bn_desc *d, pp_cuda_exec **ce,
                          cudnnTensorDescriptor_t *xd, cudnnTensorDescriptor_t *pd, pp_error *err)
{
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, ce, err));
    PP_TRY(tensor_desc(ex, *ce, d->n, d->c, d->h, d->w, xd, err));
    return tensor_desc(ex, *ce, 1, d->c, 1, 1, pd, err);
}

pp_status pp_cuda_batchnorm_forward_train(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                          const float *gamma, const float *beta,
                                          float *running_mean, float *running_var, float *y,
                                          float *save_mean, float *save_invstd, pp_error *err)
{
    pp_cuda_exec *ce;
    cudnnTensorDescriptor_t xd, pd;
    PP_TRY(bn_descs(ex, d, &ce, &xd, &pd, err));
    /* running = (1 - momentum) * running + momentum * batch, with the unbiased
     * batch variance for running_var (cuDNN's definition, as PyTorch) */
    return PP_CUDA(ex->dev, err,
                   cudnnBatchNormalizationForwardTraining(
                       ce->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x, xd, y, pd, gamma,
                       beta, (double)d->momentum, running_mean, running_var, (double)d->eps,
                       save_mean, save_invstd));
}

pp_status pp_cuda_batchnorm_forward_infer(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                          const float *gamma, const float *beta,
                                          const float *running_mean, const float *running_var,
                                          float *y, pp_error *err)
{
    pp_cuda_exec *ce;
    cudnnTensorDescriptor_t xd, pd;
    PP_TRY(bn_descs(ex, d, &ce, &xd, &pd, err));
    return PP_CUDA(ex->dev, err,
                   cudnnBatchNormalizationForwardInference(
                       ce->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x, xd, y, pd, gamma,
                       beta, running_mean, running_var, (double)d->eps));
}

pp_status pp_cuda_batchnorm_backward(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                     const float *dy, const float *gamma, const float *save_mean,
                                     const float *save_invstd, float *dx, float *dgamma,
                                     float *dbeta, pp_error *err)
{
    pp_cuda_exec *ce;
    cudnnTensorDescriptor_t xd, pd;
    PP_TRY(bn_descs(ex, d, &ce, &xd, &pd, err));
    /* betaDataDiff = 0: dx overwritten; betaParamDiff = 1: dgamma, dbeta accumulate */
    return PP_CUDA(ex->dev, err,
                   cudnnBatchNormalizationBackward(
                       ce->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &one, xd, x, xd, dy,
                       xd, dx, pd, gamma, dgamma, dbeta, (double)d->eps, save_mean,
                       save_invstd));
}

/* ---- max pooling ------------------------------------------------------------- */

static pp_status pool_plan(pp_exec *ex, pp_cuda_exec *ce, const pp_pool_desc *d,
                           cudnnPoolingDescriptor_t *out, pp_error *err)
{
    for (int i = 0; i < ce->n_pool; i++) {
        pp_cuda_pool_plan *p = &ce->pool[i];
        if (p->kernel == d->kernel && p->stride == d->stride && p->pad == d->pad) {
            *out = p->desc;
            return PP_OK;
        }
    }
    PP_TRY(grow((void **)&ce->pool, ce->n_pool, &ce->cap_pool, sizeof *ce->pool, ex->dev, err));
    pp_cuda_pool_plan *p = &ce->pool[ce->n_pool];
    cudnnPoolingDescriptor_t desc;
    PP_TRY(PP_CUDA(ex->dev, err, cudnnCreatePoolingDescriptor(&desc)));
    /* padding never wins (as PyTorch's -inf padding); NaN propagates as on the CPU */
    pp_status s = PP_CUDA(ex->dev, err,
                          cudnnSetPooling2dDescriptor(desc, CUDNN_POOLING_MAX_DETERMINISTIC,
                                                      CUDNN_PROPAGATE_NAN, d->kernel, d->kernel,
                                                      d->pad, d->pad, d->stride, d->stride));
    if (s != PP_OK) {
        (void)PP_CUDA(ex->dev, NULL, cudnnDestroyPoolingDescriptor(desc));
        return s;
    }
    *p = (pp_cuda_pool_plan){d->kernel, d->stride, d->pad, desc};
    ce->n_pool++;
    *out = desc;
    return PP_OK;
}

static pp_status pool_descs(pp_exec *ex, const pp_pool_desc *d, pp_cuda_exec **ce,
                            cudnnPoolingDescriptor_t *pd, cudnnTensorDescriptor_t *xd,
                            cudnnTensorDescriptor_t *yd, pp_error *err)
{
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, ce, err));
    PP_TRY(pool_plan(ex, *ce, d, pd, err));
    PP_TRY(tensor_desc(ex, *ce, d->n, d->c, d->h, d->w, xd, err));
    return tensor_desc(ex, *ce, d->n, d->c, d->p, d->q, yd, err);
}

pp_status pp_cuda_maxpool_forward(pp_exec *ex, const pp_pool_desc *d, const float *x, float *y,
                                  int32_t *idx, pp_error *err)
{
    pp_cuda_exec *ce;
    cudnnPoolingDescriptor_t pd;
    cudnnTensorDescriptor_t xd, yd;
    PP_TRY(pool_descs(ex, d, &ce, &pd, &xd, &yd, err));
    return PP_CUDA(ex->dev, err, cudnnPoolingForward(ce->dnn, pd, &one, xd, x, &zero, yd, y));
}

pp_status pp_cuda_maxpool_backward(pp_exec *ex, const pp_pool_desc *d, const float *x,
                                   const float *y, const float *dy, const int32_t *idx, float *dx,
                                   pp_error *err)
{
    pp_cuda_exec *ce;
    cudnnPoolingDescriptor_t pd;
    cudnnTensorDescriptor_t xd, yd;
    PP_TRY(pool_descs(ex, d, &ce, &pd, &xd, &yd, err));
    return PP_CUDA(ex->dev, err,
                   cudnnPoolingBackward(ce->dnn, pd, &one, yd, y, yd, dy, xd, x, &zero, xd, dx));
}

void pp_cuda_dnn_cache_free(pp_exec *ex)
{
    pp_cuda_exec *ce = pp_cuda_ex(ex);
    for (int i = 0; i < ce->n_conv; i++) conv_plan_free(ex, &ce->conv[i]);
    for (int i = 0; i < ce->n_tdesc; i++)
        (void)PP_CUDA(ex->dev, NULL, cudnnDestroyTensorDescriptor(ce->tdesc[i].desc));
    for (int i = 0; i < ce->n_pool; i++)
        (void)PP_CUDA(ex->dev, NULL, cudnnDestroyPoolingDescriptor(ce->pool[i].desc));
    free(ce->conv);
    free(ce->tdesc);
    free(ce->pool);
    ce->conv = NULL;
    ce->tdesc = NULL;
    ce->pool = NULL;
    ce->n_conv = ce->cap_conv = ce->n_tdesc = ce->cap_tdesc = ce->n_pool = ce->cap_pool = 0;
}
