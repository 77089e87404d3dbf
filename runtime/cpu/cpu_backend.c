/*
 * cpu_backend.c - the CPU backend's table: host memory, execs and the kernels
 * of the other files in runtime/cpu. Ops run synchronously on the calling thread.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_kernels.h"
#include "runtime/core/backend.h"

static pp_status cpu_alloc(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err)
{
    size_t rounded = (bytes + 63) & ~(size_t)63;
    *ptr = aligned_alloc(64, rounded);
    if (!*ptr)
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory allocating %zu bytes",
                            dev->name, bytes);
    return PP_OK;
}

static void cpu_free(pp_device_ctx *dev, void *ptr)
{
    free(ptr);
}

static pp_status cpu_copy_host(pp_device_ctx *dev, void *dst, const void *src, size_t bytes,
                               pp_error *err)
{
    memcpy(dst, src, bytes);
    return PP_OK;
}

static pp_status cpu_alloc_async(pp_exec *ex, size_t bytes, void **ptr, pp_error *err)
{
    return cpu_alloc(ex->dev, bytes, ptr, err);
}

static void cpu_free_async(pp_exec *ex, void *ptr)
{
    free(ptr);
}

static pp_status cpu_copy(pp_exec *ex, size_t bytes, const void *src, void *dst, pp_error *err)
{
    memmove(dst, src, bytes);
    return PP_OK;
}

static pp_status cpu_zero(pp_exec *ex, size_t bytes, void *dst, pp_error *err)
{
    memset(dst, 0, bytes);
    return PP_OK;
}

static pp_status cpu_delay(pp_exec *ex, double ms, pp_error *err)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000.0),
                          .tv_nsec = (long)((ms - 1000.0 * (double)(time_t)(ms / 1000.0)) * 1e6)};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return PP_OK;
}

static const pp_backend_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_from_host = cpu_copy_host,
    .copy_to_host = cpu_copy_host,
    .alloc_async = cpu_alloc_async,
    .free_async = cpu_free_async,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .delay = cpu_delay,
    .conv2d_forward = pp_cpu_conv2d_forward,
    .conv2d_backward_data = pp_cpu_conv2d_backward_data,
    .conv2d_backward_filter = pp_cpu_conv2d_backward_filter,
    .batchnorm_forward_train = pp_cpu_batchnorm_forward_train,
    .batchnorm_forward_infer = pp_cpu_batchnorm_forward_infer,
    .batchnorm_backward = pp_cpu_batchnorm_backward,
    .relu_forward = pp_cpu_relu_forward,
    .relu_backward = pp_cpu_relu_backward,
    .add = pp_cpu_add,
    .accumulate = pp_cpu_accumulate,
    .maxpool_forward = pp_cpu_maxpool_forward,
    .maxpool_backward = pp_cpu_maxpool_backward,
    .avgpool_forward = pp_cpu_avgpool_forward,
    .avgpool_backward = pp_cpu_avgpool_backward,
    .linear_forward = pp_cpu_linear_forward,
    .linear_backward = pp_cpu_linear_backward,
    .softmax_xent = pp_cpu_softmax_xent,
    .sgd_update = pp_cpu_sgd_update,
};

const pp_backend_ops *pp_backend_cpu(void)
{
    return &cpu_ops;
}
