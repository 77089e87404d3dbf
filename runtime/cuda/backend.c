/*
 * backend.c - the CUDA backend's table: devices, stream-ordered memory,
 * execs (per-stream cuDNN/cuBLAS state, whose handles exec.c makes),
 * synchronous copies and the ops that
 * run the backend's own kernels (kernels.cu). Convolution, batch norm and
 * pooling live in dnn.c, the fully connected layer in blas.c; the
 * transformer's dense layers in dense.c and its other ops in transformer.c;
 * convolutions through cuDNN's graph API (bf16, NHWC) in gconv.c and the
 * bf16 fully connected layer through cuBLASLt in blaslt.c, whose per-exec
 * state the exec's destroy releases.
 *
 * Memory: every allocation comes from the device's default memory pool with
 * its release threshold at UINT64_MAX, so freed memory stays cached and a
 * steady-state step makes no cudaMalloc/cudaFree. Device-level alloc/free
 * (tensors) are ordered on the device's private stream and made safe for any
 * stream (alloc waits for the allocation; free first waits for the device);
 * workspaces use alloc_async/free_async in the exec's stream order.
 *
 * Threading: device-level entries may be called from any thread; an exec is
 * used by one thread at a time (its stream's owner). Every entry makes its
 * device current on the calling thread first.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_profiler_api.h>

#include "blaslt.h"
#include "gconv.h"
#include "internal.h"
#include "kernels.h"
#include "sdpa.h"
#include "train_ops.h"
#include "transformer.h"

/* ---- devices -------------------------------------------------------------- */

pp_status pp_cuda_peer_access(pp_device_ctx *dev, pp_device_ctx *peer, pp_error *err)
{
    if (dev->id.index == peer->id.index) return PP_OK;
    int can = 0;
    PP_TRY(PP_CUDA(peer, err, cudaDeviceCanAccessPeer(&can, peer->id.index, dev->id.index)));
    if (!can)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s cannot reach the memory of %s (no peer "
                            "access between the two GPUs)", peer->name, dev->name);
    PP_TRY(pp_cuda_set_device(peer, err));
    cudaError_t e = cudaDeviceEnablePeerAccess(dev->id.index, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
    else
        PP_TRY(PP_CUDA(peer, err, e));
    if (!pp_cuda_dev(dev))
        return pp_error_set(err, PP_ERR_INVALID, "%s: device not initialised", dev->name);
    struct cudaMemAccessDesc desc = {
        .location = {.type = cudaMemLocationTypeDevice, .id = peer->id.index},
        .flags = cudaMemAccessFlagsProtReadWrite};
    return PP_CUDA(dev, err, cudaMemPoolSetAccess(pp_cuda_dev(dev)->pool, &desc, 1));
}

int pp_backend_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

static void cuda_device_destroy(pp_device_ctx *dev)
{
    pp_cuda_device *cd = pp_cuda_dev(dev);
    if (!cd) return;
    if (PP_CUDA(dev, NULL, cudaSetDevice(cd->ordinal)) == PP_OK && cd->stream) {
        (void)PP_CUDA(dev, NULL, cudaStreamSynchronize(cd->stream));
        (void)PP_CUDA(dev, NULL, cudaStreamDestroy(cd->stream));
    }
    pp_algo_cache_destroy(&cd->algos);
    pthread_mutex_destroy(&cd->anchor_mu);
    free(cd);
    dev->backend = NULL;
}

/* The convolution algorithm settings: PP_CUDNN_FIND (measure or not),
 * PP_CUDNN_CACHE (the cache file; unset or empty: none), PP_CUDA_CONV_WS_MB
 * (the workspace cap), PP_CUDA_CONV_API (which API) and PP_CUDA_CONV_PLANS
 * (the graph API's plans timed), the GPU's name and cuDNN's version
 * for the cache's keys. */
static pp_status algo_init(pp_device_ctx *dev, pp_cuda_device *cd, pp_error *err)
{
    PP_TRY(pp_algo_cache_init(&cd->algos, getenv("PP_CUDNN_CACHE"), err));
    PP_TRY(pp_algo_find_from_env(&cd->find, err));
    PP_TRY(pp_algo_ws_from_env(&cd->ws_mb, err));
    PP_TRY(pp_algo_api_from_env(&cd->conv_api, err));
    PP_TRY(pp_algo_plans_from_env(&cd->conv_plans, err));
    struct cudaDeviceProp prop;
    PP_TRY(PP_CUDA(dev, err, cudaGetDeviceProperties(&prop, cd->ordinal)));
    snprintf(cd->gpu_name, sizeof cd->gpu_name, "%.*s", (int)sizeof cd->gpu_name - 1, prop.name);
    cd->cudnn_version = (int)cudnnGetVersion();
    return PP_OK;
}

static pp_status cuda_device_init(pp_device_ctx *dev, pp_error *err)
{
    pp_cuda_device *cd = calloc(1, sizeof *cd);
    if (!cd) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", dev->name);
    cd->ordinal = dev->id.index;
    pthread_mutex_init(&cd->anchor_mu, NULL);
    dev->backend = cd;
    int pools = 0;
    uint64_t threshold = UINT64_MAX;
    pp_status s = algo_init(dev, cd, err);
    if (s == PP_OK) s = PP_CUDA(dev, err, cudaSetDevice(cd->ordinal));
    if (s == PP_OK)
        s = PP_CUDA(dev, err, cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported,
                                                     cd->ordinal));
    if (s == PP_OK && !pools)
        s = pp_error_set(err, PP_ERR_UNSUPPORTED,
                         "%s: the device or driver does not support stream-ordered memory pools",
                         dev->name);
    if (s == PP_OK)
        s = PP_CUDA(dev, err, cudaDeviceGetAttribute(&cd->sm_count,
                                                     cudaDevAttrMultiProcessorCount, cd->ordinal));
    if (s == PP_OK) s = PP_CUDA(dev, err, cudaDeviceGetDefaultMemPool(&cd->pool, cd->ordinal));
    if (s == PP_OK)
        s = PP_CUDA(dev, err, cudaMemPoolSetAttribute(cd->pool, cudaMemPoolAttrReleaseThreshold,
                                                      &threshold));
    if (s == PP_OK)
        s = PP_CUDA(dev, err, cudaStreamCreateWithFlags(&cd->stream, cudaStreamNonBlocking));
    if (s != PP_OK) {
        cuda_device_destroy(dev);
        return s;
    }
    return PP_OK;
}

/* ---- memory and synchronous copies ------------------------------------------ */

static pp_status cuda_alloc(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err)
{
    pp_cuda_device *cd = pp_cuda_dev(dev);
    *ptr = NULL;
    PP_TRY(pp_cuda_set_device(dev, err));
    PP_TRY(PP_CUDA(dev, err, cudaMallocAsync(ptr, bytes, cd->stream)));
    pp_status s = PP_CUDA(dev, err, cudaStreamSynchronize(cd->stream));
    if (s != PP_OK) *ptr = NULL;
    return s;
}

static void cuda_free(pp_device_ctx *dev, void *ptr)
{
    pp_cuda_device *cd = pp_cuda_dev(dev);
    if (!ptr || pp_cuda_set_device(dev, NULL) != PP_OK) return;
    /* Work on any stream may still use ptr: wait for it, as cudaFree does. */
    (void)PP_CUDA(dev, NULL, cudaDeviceSynchronize());
    (void)PP_CUDA(dev, NULL, cudaFreeAsync(ptr, cd->stream));
}

/* Synchronous copies wait for all work on the device first, so they see (and
 * do not race with) everything enqueued before them, as on the CPU backend. */
static pp_status cuda_copy_sync(pp_device_ctx *dev, void *dst, const void *src, size_t bytes,
                                enum cudaMemcpyKind kind, pp_error *err)
{
    pp_cuda_device *cd = pp_cuda_dev(dev);
    if (bytes == 0) return PP_OK;
    PP_TRY(pp_cuda_set_device(dev, err));
    PP_TRY(PP_CUDA(dev, err, cudaDeviceSynchronize()));
    PP_TRY(PP_CUDA(dev, err, cudaMemcpyAsync(dst, src, bytes, kind, cd->stream)));
    return PP_CUDA(dev, err, cudaStreamSynchronize(cd->stream));
}

static pp_status cuda_copy_from_host(pp_device_ctx *dev, void *dst, const void *src, size_t bytes,
                                     pp_error *err)
{
    return cuda_copy_sync(dev, dst, src, bytes, cudaMemcpyHostToDevice, err);
}

static pp_status cuda_copy_to_host(pp_device_ctx *dev, void *dst, const void *src, size_t bytes,
                                   pp_error *err)
{
    return cuda_copy_sync(dev, dst, src, bytes, cudaMemcpyDeviceToHost, err);
}

/* Page-locked host memory: stream-ordered copies from and to it run without the
 * host waiting (copies from pageable memory are staged and block the host). */
static pp_status cuda_host_alloc(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err)
{
    *ptr = NULL;
    PP_TRY(pp_cuda_set_device(dev, err));
    pp_status s = PP_CUDA(dev, err, cudaMallocHost(ptr, bytes));
    if (s != PP_OK) *ptr = NULL;
    return s;
}

static void cuda_host_free(pp_device_ctx *dev, void *ptr)
{
    if (!ptr) return;
    /* cudaFreeHost waits for the device: called only when buffers are released */
    (void)PP_CUDA(dev, NULL, cudaFreeHost(ptr));
}

/* ---- execs ------------------------------------------------------------------ */

static pp_status cuda_exec_init(pp_exec *ex, pp_error *err)
{
    pp_cuda_exec *ce = calloc(1, sizeof *ce);
    if (!ce) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", ex->dev->name);
    ce->stream = ex->native_stream ? (cudaStream_t)ex->native_stream
                                   : pp_cuda_dev(ex->dev)->stream;
    ex->backend_state = ce;
    return PP_OK;
}

static void cuda_exec_destroy(pp_exec *ex)
{
    pp_cuda_exec *ce = pp_cuda_ex(ex);
    if (!ce) return;
    if (pp_cuda_set_device(ex->dev, NULL) == PP_OK) {
        pp_cuda_dnn_cache_free(ex);
        pp_cuda_gconv_cache_free(ex);
        pp_cuda_sdpa_cache_free(ex);
        pp_cuda_lt_cache_free(ex);
        if (ce->dnn) (void)PP_CUDA(ex->dev, NULL, cudnnDestroy(ce->dnn));
        if (ce->blas) (void)PP_CUDA(ex->dev, NULL, cublasDestroy(ce->blas));
        if (ce->blas_ws) (void)PP_CUDA(ex->dev, NULL, cudaFree(ce->blas_ws));
    }
    if (ce->blas_ws) pp_device_unaccount(ex->dev, PP_CUDA_BLAS_WS);
    free(ce);
    ex->backend_state = NULL;
}

static pp_status cuda_profiler(pp_device_ctx *dev, bool start, pp_error *err)
{
    PP_TRY(pp_cuda_set_device(dev, err));
    if (start) return PP_CUDA(dev, err, cudaProfilerStart());
    return PP_CUDA(dev, err, cudaProfilerStop());
}

static pp_status cuda_mem_info(pp_device_ctx *dev, size_t *free_bytes, size_t *total_bytes,
                               pp_error *err)
{
    PP_TRY(pp_cuda_set_device(dev, err));
    return PP_CUDA(dev, err, cudaMemGetInfo(free_bytes, total_bytes));
}

static pp_status cuda_exec_sync(pp_exec *ex, pp_error *err)
{
    PP_TRY(pp_cuda_set_device(ex->dev, err));
    return PP_CUDA(ex->dev, err, cudaStreamSynchronize(pp_cuda_ex(ex)->stream));
}

/* ---- elementwise and small ops -------------------------------------------- */

#define BEGIN(ex, ce, err)                                     \
    pp_cuda_exec *ce;                                          \
    PP_TRY(pp_cuda_exec_begin((ex), 0, 0, &ce, (err)))

static pp_status cuda_elementwise(pp_exec *ex, pp_cuda_ew_kind kind, int64_t n, const float *a,
                                  const float *b, float *y, pp_error *err)
{
    if (n == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_elementwise(ce->stream, pp_cuda_max_grid(ex), kind, n, a, b, y));
}

static pp_status cuda_relu_forward(pp_exec *ex, int64_t n, const float *x, float *y,
                                   pp_error *err)
{
    return cuda_elementwise(ex, PP_CUDA_EW_RELU, n, x, NULL, y, err);
}

static pp_status cuda_relu_backward(pp_exec *ex, int64_t n, const float *y, const float *dy,
                                    float *dx, pp_error *err)
{
    return cuda_elementwise(ex, PP_CUDA_EW_RELU_BACKWARD, n, y, dy, dx, err);
}

static pp_status cuda_sigmoid_forward(pp_exec *ex, int64_t n, const float *x, float *y,
                                      pp_error *err)
{
    return cuda_elementwise(ex, PP_CUDA_EW_SIGMOID, n, x, NULL, y, err);
}

static pp_status cuda_sigmoid_backward(pp_exec *ex, int64_t n, const float *y, const float *dy,
                                       float *dx, pp_error *err)
{
    return cuda_elementwise(ex, PP_CUDA_EW_SIGMOID_BACKWARD, n, y, dy, dx, err);
}

static pp_status cuda_add(pp_exec *ex, int64_t n, const float *a, const float *b, float *y,
                          pp_error *err)
{
    return cuda_elementwise(ex, PP_CUDA_EW_ADD, n, a, b, y, err);
}

/* y += x is y = x + y (a sum of two floats does not depend on their order) */
static pp_status cuda_accumulate(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err)
{
    return cuda_elementwise(ex, PP_CUDA_EW_ADD, n, x, y, y, err);
}

/* y += f32(bf16(x)), one pass (kernels.cu's add_bf16_op) */
static pp_status cuda_accumulate_bf16(pp_exec *ex, int64_t n, const float *x, float *y,
                                      pp_error *err)
{
    return cuda_elementwise(ex, PP_CUDA_EW_ADD_BF16, n, x, y, y, err);
}

static pp_status cuda_gelu_forward(pp_exec *ex, int64_t n, const float *x, float *y,
                                   pp_error *err)
{
    return cuda_elementwise(ex, PP_CUDA_EW_GELU, n, x, NULL, y, err);
}

static pp_status cuda_gelu_backward(pp_exec *ex, int64_t n, const float *x, const float *dy,
                                    float *dx, pp_error *err)
{
    return cuda_elementwise(ex, PP_CUDA_EW_GELU_BACKWARD, n, x, dy, dx, err);
}

/* the forward and the backward alike: y = x * the mask (dropout.cu) */
static pp_status cuda_dropout(pp_exec *ex, const pp_dropout_desc *d, int64_t n,
                              int64_t per_sample, const float *x, float *y, pp_error *err)
{
    if (n == 0 || per_sample == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_dropout(ce->stream, pp_cuda_max_grid(ex), *d, n, per_sample, x,
                                          y));
}

static pp_status cuda_bf16_from_f32(pp_exec *ex, int64_t n, const float *x, uint16_t *y,
                                   pp_error *err)
{
    if (n == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_bf16_from_f32(ce->stream, pp_cuda_grid(ex, n, PP_CUDA_BLOCK), n,
                                                x, y));
}

static pp_status cuda_f32_from_bf16(pp_exec *ex, int64_t n, const uint16_t *x, float *y,
                                   pp_error *err)
{
    if (n == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_f32_from_bf16(ce->stream, pp_cuda_grid(ex, n, PP_CUDA_BLOCK), n,
                                                x, y));
}

static pp_status cuda_add_relu(pp_exec *ex, int64_t n, const float *a, const float *b, float *y,
                               pp_error *err)
{
    return cuda_elementwise(ex, PP_CUDA_EW_ADD_RELU, n, a, b, y, err);
}

static pp_status cuda_copy(pp_exec *ex, size_t bytes, const void *src, void *dst, pp_error *err)
{
    if (bytes == 0 || src == dst) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ce->stream));
}

static pp_status cuda_copy_from_host_async(pp_exec *ex, void *dst, const void *src,
                                           size_t bytes, pp_error *err)
{
    if (bytes == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ce->stream));
}

static pp_status cuda_copy_to_host_async(pp_exec *ex, void *dst, const void *src, size_t bytes,
                                         pp_error *err)
{
    if (bytes == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ce->stream));
}

static pp_status cuda_zero(pp_exec *ex, size_t bytes, void *dst, pp_error *err)
{
    if (bytes == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err, cudaMemsetAsync(dst, 0, bytes, ce->stream));
}

static pp_status cuda_avgpool_forward(pp_exec *ex, int64_t planes, int64_t hw, const float *x,
                                      float *y, pp_error *err)
{
    if (planes == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err, pp_cuda_launch_avgpool_forward(ce->stream, planes, hw, x, y));
}

static pp_status cuda_avgpool_backward(pp_exec *ex, int64_t planes, int64_t hw, const float *dy,
                                       float *dx, pp_error *err)
{
    if (planes == 0 || hw == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_avgpool_backward(
                       ce->stream, pp_cuda_grid(ex, planes * hw, PP_CUDA_BLOCK), planes, hw, dy,
                       dx));
}

static pp_cuda_pool_geom pool_geom(const pp_pool_desc *d)
{
    return (pp_cuda_pool_geom){.planes = d->n * d->c, .h = d->h, .w = d->w, .p = d->p,
                               .q = d->q, .kernel = d->kernel, .stride = d->stride,
                               .pad = d->pad};
}

static pp_status cuda_avgpool2d_forward(pp_exec *ex, const pp_pool_desc *d, const float *x,
                                        float *y, pp_error *err)
{
    BEGIN(ex, ce, err);
    const int64_t total = (int64_t)d->n * d->c * d->p * d->q;
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_avgpool2d_forward(
                       ce->stream, pp_cuda_grid(ex, total, PP_CUDA_BLOCK), pool_geom(d), x, y));
}

static pp_status cuda_avgpool2d_backward(pp_exec *ex, const pp_pool_desc *d, const float *dy,
                                         float *dx, pp_error *err)
{
    BEGIN(ex, ce, err);
    const int64_t total = (int64_t)d->n * d->c * d->h * d->w;
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_avgpool2d_backward(
                       ce->stream, pp_cuda_grid(ex, total, PP_CUDA_BLOCK), pool_geom(d), dy, dx));
}

static pp_status cuda_channel_bias_forward(pp_exec *ex, int64_t n, int64_t c, int64_t hw,
                                           const float *b, float *y, pp_error *err)
{
    if (n * c * hw == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_channel_bias_add(
                       ce->stream, pp_cuda_grid(ex, n * c * hw, PP_CUDA_BLOCK), n, c, hw, b, y));
}

static pp_status cuda_channel_bias_backward(pp_exec *ex, int64_t n, int64_t c, int64_t hw,
                                            const float *dy, float *db, pp_error *err)
{
    if (c == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_channel_bias_backward(ce->stream, n, c, hw, dy, db));
}

/* The classifier's n rows of f32 (bf16 NULL) or bf16 (f32 NULL) logits. */
static pp_status xent(pp_exec *ex, const pp_xent_desc *d, int n, int classes, const float *f32,
                      const uint16_t *bf16, const int32_t *labels, float *loss, int32_t *correct,
                      int32_t *correct_k, void *dlogits, pp_error *err)
{
    BEGIN(ex, ce, err);
    if (n == 0) {
        PP_TRY(PP_CUDA(ex->dev, err, cudaMemsetAsync(loss, 0, sizeof(float), ce->stream)));
        if (correct_k)
            PP_TRY(PP_CUDA(ex->dev, err,
                           cudaMemsetAsync(correct_k, 0, sizeof(int32_t), ce->stream)));
        return PP_CUDA(ex->dev, err, cudaMemsetAsync(correct, 0, sizeof(int32_t), ce->stream));
    }
    void *ws;
    PP_TRY(pp_exec_workspace(ex, (size_t)(n > 0 ? n : 1) * (sizeof(double) + sizeof(int32_t)),
                             &ws, err));
    double *row_loss = ws;
    int32_t *row_correct = (int32_t *)(row_loss + (n > 0 ? n : 1));
    if (bf16)
        return PP_CUDA(ex->dev, err,
                       pp_cuda_launch_classifier_bf16(ce->stream, n, classes, bf16, labels,
                                                      d->divisor, d->label_smoothing, d->top_k,
                                                      row_loss, row_correct, loss, correct,
                                                      correct_k, dlogits));
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_classifier(ce->stream, n, classes, f32, labels, d->divisor,
                                             d->label_smoothing, d->top_k, row_loss, row_correct,
                                             loss, correct, correct_k, dlogits));
}

static pp_status cuda_softmax_xent(pp_exec *ex, const pp_xent_desc *d, int n, int classes,
                                   const float *logits, const int32_t *labels, float *loss,
                                   int32_t *correct, int32_t *correct_k, float *dlogits,
                                   pp_error *err)
{
    return xent(ex, d, n, classes, logits, NULL, labels, loss, correct, correct_k, dlogits, err);
}

static pp_status cuda_softmax_xent_bf16(pp_exec *ex, const pp_xent_desc *d, int n, int classes,
                                        const uint16_t *logits, const int32_t *labels,
                                        float *loss, int32_t *correct, int32_t *correct_k,
                                        uint16_t *dlogits, pp_error *err)
{
    return xent(ex, d, n, classes, NULL, logits, labels, loss, correct, correct_k, dlogits, err);
}

static pp_status cuda_sgd_update(pp_exec *ex, const pp_sgd_desc *d, int64_t n, float *param,
                                 const float *grad, float *momentum_buf, pp_error *err)
{
    if (n == 0) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_sgd(ce->stream, pp_cuda_grid(ex, n, PP_CUDA_BLOCK), n, d->lr,
                                      d->momentum, d->weight_decay, d->nesterov, d->first_step,
                                      param, grad, momentum_buf));
}

/* One launch per PP_CUDA_SGD_MULTI non-empty tensors. */
static pp_status cuda_sgd_update_multi(pp_exec *ex, const pp_sgd_desc *d, int count,
                                       float *const *param, const float *const *grad,
                                       float *const *buf, const int64_t *sizes, pp_error *err)
{
    BEGIN(ex, ce, err);
    pp_cuda_sgd_list list;
    memset(&list, 0, sizeof list);
    for (int i = 0; i <= count; i++) {
        if (i == count || list.count == PP_CUDA_SGD_MULTI) {
            PP_TRY(PP_CUDA(ex->dev, err,
                           pp_cuda_launch_sgd_multi(ce->stream, pp_cuda_max_grid(ex), &list,
                                                    d->lr, d->momentum, d->weight_decay,
                                                    d->nesterov, d->first_step)));
            memset(&list, 0, sizeof list);
        }
        if (i == count || sizes[i] == 0) continue;
        const int k = pp_cuda_multi_add(list.first_tile, &list.count, &list.tiles, sizes[i],
                                        PP_CUDA_MULTI_TILE);
        list.param[k] = param[i];
        list.grad[k] = grad[i];
        list.buf[k] = buf[i];
        list.n[k] = sizes[i];
    }
    return PP_OK;
}

/* One launch per PP_CUDA_ZERO_MULTI non-empty buffers. */
static pp_status cuda_zero_multi(pp_exec *ex, int count, void *const *dst, const size_t *bytes,
                                 pp_error *err)
{
    BEGIN(ex, ce, err);
    pp_cuda_zero_list list;
    memset(&list, 0, sizeof list);
    for (int i = 0; i <= count; i++) {
        if (i == count || list.count == PP_CUDA_ZERO_MULTI) {
            PP_TRY(PP_CUDA(ex->dev, err,
                           pp_cuda_launch_zero_multi(ce->stream, pp_cuda_max_grid(ex), &list)));
            memset(&list, 0, sizeof list);
        }
        if (i == count || bytes[i] == 0) continue;
        const int k = pp_cuda_multi_add(list.first_tile, &list.count, &list.tiles,
                                        (int64_t)bytes[i], PP_CUDA_ZERO_TILE_BYTES);
        list.ptr[k] = dst[i];
        list.bytes[k] = (int64_t)bytes[i];
    }
    return PP_OK;
}

static pp_status cuda_delay(pp_exec *ex, double ms, pp_error *err)
{
    if (!(ms > 0)) return PP_OK;
    BEGIN(ex, ce, err);
    return PP_CUDA(ex->dev, err, pp_cuda_launch_delay(ce->stream, (uint64_t)(ms * 1e6)));
}

static const pp_backend_ops cuda_ops = {
    .name = "cuda",
    .prefers_nhwc_bf16 = true, /* bf16 NHWC convolutions, batch norm and pooling run natively */
    .device_init = cuda_device_init,
    .device_destroy = cuda_device_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .peer_access = pp_cuda_peer_access,
    .copy_from_host = cuda_copy_from_host,
    .copy_to_host = cuda_copy_to_host,
    .exec_init = cuda_exec_init,
    .exec_destroy = cuda_exec_destroy,
    .exec_sync = cuda_exec_sync,
    .alloc_async = pp_cuda_alloc_async,
    .free_async = pp_cuda_free_async,
    .conv2d_forward = pp_cuda_conv2d_forward,
    .conv2d_backward_data = pp_cuda_conv2d_backward_data,
    .conv2d_backward_filter = pp_cuda_conv2d_backward_filter,
    .conv2d_backward_data_accumulate = pp_cuda_conv2d_backward_data_accumulate,
    .batchnorm_forward_train = pp_cuda_batchnorm_forward_train,
    .batchnorm_forward_infer = pp_cuda_batchnorm_forward_infer,
    .batchnorm_backward = pp_cuda_batchnorm_backward,
    .relu_forward = cuda_relu_forward,
    .relu_backward = cuda_relu_backward,
    .add = cuda_add,
    .accumulate = cuda_accumulate,
    .accumulate_bf16 = cuda_accumulate_bf16,
    .add_relu = cuda_add_relu,
    .bf16_from_f32 = cuda_bf16_from_f32,
    .f32_from_bf16 = cuda_f32_from_bf16,
    .sigmoid_forward = cuda_sigmoid_forward,
    .sigmoid_backward = cuda_sigmoid_backward,
    .avgpool2d_forward = cuda_avgpool2d_forward,
    .avgpool2d_backward = cuda_avgpool2d_backward,
    .channel_bias_forward = cuda_channel_bias_forward,
    .channel_bias_backward = cuda_channel_bias_backward,
    .copy = cuda_copy,
    .copy_from_host_async = cuda_copy_from_host_async,
    .copy_to_host_async = cuda_copy_to_host_async,
    .zero = cuda_zero,
    .zero_multi = cuda_zero_multi,
    .maxpool_forward = pp_cuda_maxpool_forward,
    .maxpool_backward = pp_cuda_maxpool_backward,
    .avgpool_forward = cuda_avgpool_forward,
    .avgpool_backward = cuda_avgpool_backward,
    .linear_forward = pp_cuda_linear_forward,
    .linear_backward = pp_cuda_linear_backward,
    .linear_backward_data = pp_cuda_linear_backward_data,
    .linear_backward_weights = pp_cuda_linear_backward_weights,
    .softmax_xent = cuda_softmax_xent,
    .softmax_xent_bf16 = cuda_softmax_xent_bf16,
    .sgd_update = cuda_sgd_update,
    .sgd_update_multi = cuda_sgd_update_multi,
    .adamw_update_multi = pp_cuda_adamw_update_multi,
    .sumsq_multi = pp_cuda_sumsq_multi,
    .scale_multi = pp_cuda_scale_multi,
    .bn_stats_combine = pp_cuda_bn_stats_combine,
    .delay = cuda_delay,
    .transpose = pp_cuda_transpose,
    .profiler = cuda_profiler,
    .mem_info = cuda_mem_info,
    .native = pp_cuda_native,
    /* the transformer ops: dense.c, transformer.c, GELU and dropout above */
    .dense_forward = pp_cuda_dense_forward,
    .dense_backward_data = pp_cuda_dense_backward_data,
    .dense_backward_weights = pp_cuda_dense_backward_weights,
    .dense_backward = pp_cuda_dense_backward,
    .dense_gelu_forward = pp_cuda_dense_gelu_forward,
    .dense_backward_data_gelu = pp_cuda_dense_backward_data_gelu,
    .layernorm_forward = pp_cuda_layernorm_forward,
    .layernorm_backward = pp_cuda_layernorm_backward,
    .add_layernorm_forward = pp_cuda_add_layernorm_forward,
    .layernorm_backward_add = pp_cuda_layernorm_backward_add,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .attention_forward = pp_cuda_attention_forward,
    .attention_backward = pp_cuda_attention_backward,
    .attention_forward_bf16 = pp_cuda_attention_forward_bf16,
    .attention_backward_bf16 = pp_cuda_attention_backward_bf16,
    .dropout = cuda_dropout,
    .embedding_forward = pp_cuda_embedding_forward,
    .embedding_backward = pp_cuda_embedding_backward,
    .position_forward = pp_cuda_position_forward,
    .position_backward = pp_cuda_position_backward,
    /* the bf16 entries of mixed precision: transformer.c, dense.c */
    .layernorm_forward_bf16 = pp_cuda_layernorm_forward_bf16,
    .layernorm_backward_bf16 = pp_cuda_layernorm_backward_bf16,
    .gelu_forward_bf16 = pp_cuda_gelu_forward_bf16,
    .gelu_backward_bf16 = pp_cuda_gelu_backward_bf16,
    .dense_forward_bf16 = pp_cuda_dense_forward_bf16,
    .dense_gelu_forward_bf16 = pp_cuda_dense_gelu_forward_bf16,
    .dense_backward_data_bf16 = pp_cuda_dense_backward_data_bf16,
    .dense_backward_data_gelu_bf16 = pp_cuda_dense_backward_data_gelu_bf16,
    .dense_backward_weights_bf16 = pp_cuda_dense_backward_weights_bf16,
    .dense_backward_bf16 = pp_cuda_dense_backward_bf16,
};

const pp_backend_ops *pp_backend_cuda(void)
{
    return &cuda_ops;
}
