/*
 * backend.c - the CPU backend's table: host memory, execs, the device's
 * worker pool and the kernels of the other files in runtime/cpu.
 *
 * Ops run synchronously on the calling thread (a stream's worker), which
 * shares their work with the device's pool (workers.h; dev->backend, made in
 * device_init): PP_CPU_THREADS threads, by default one per online CPU.
 * Host memory comes through the device's block cache (cache.h).
 *
 * OpenBLAS: the first CPU device sets OpenBLAS to one thread for the whole
 * process (openblas_set_num_threads(1), once). Kernels cut their GEMMs into
 * tiles by shape and run the tiles on the pool, so results do not depend on
 * the thread count, and OpenBLAS's own threads (which spin between calls)
 * no longer compete with the pool. OPENBLAS_NUM_THREADS has no effect on
 * this backend; code elsewhere in the process that calls cblas directly then
 * runs single-threaded unless it sets the thread count itself.
 */
#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "device.h"
#include "runtime/core/backend.h"

/* Byte ranges of zero and copy handed to one task. */
#define BYTES_PER_TASK ((size_t)1 << 20)

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_single_thread(void)
{
    openblas_set_num_threads(1);
}

static pp_status cpu_device_init(pp_device_ctx *dev, pp_error *err)
{
    int threads;
    PP_TRY(pp_cpu_pool_threads_from_env(&threads, err));
    pthread_once(&blas_once, blas_single_thread);
    pp_cpu_device *cd = calloc(1, sizeof *cd);
    if (!cd) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (device state)", dev->name);
    pp_status s = pp_cpu_pool_new(threads, &cd->pool, err);
    if (s != PP_OK) {
        free(cd);
        return s;
    }
    pp_cpu_cache_init(&cd->cache);
    dev->backend = cd;
    return PP_OK;
}

/* A device opened now gets the environment's thread count (1 when it is not
 * valid: opening the device would then fail anyway). */
static size_t cpu_conv2d_workspace(const pp_conv2d_desc *d)
{
    int threads = 1;
    if (pp_cpu_pool_threads_from_env(&threads, NULL) != PP_OK) threads = 1;
    return pp_cpu_conv2d_workspace_bytes(d, threads);
}

static void cpu_device_destroy(pp_device_ctx *dev)
{
    pp_cpu_device *cd = pp_cpu_device_of(dev);
    if (!cd) return;
    pp_cpu_pool_free(cd->pool);
    pp_cpu_cache_destroy(&cd->cache);
    free(cd);
    dev->backend = NULL;
}

static pp_status cpu_alloc(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err)
{
    pp_cpu_device *cd = pp_cpu_device_of(dev);
    *ptr = cd ? pp_cpu_cache_alloc(&cd->cache, bytes)
              : aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!*ptr)
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory allocating %zu bytes",
                            dev->name, bytes);
    return PP_OK;
}

static void cpu_free(pp_device_ctx *dev, void *ptr)
{
    pp_cpu_device *cd = pp_cpu_device_of(dev);
    if (cd)
        pp_cpu_cache_free(&cd->cache, ptr);
    else
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
    cpu_free(ex->dev, ptr);
}

typedef struct bytes_job {
    const char *src; /* NULL: zero */
    char *dst;
    size_t bytes;
} bytes_job;

static void bytes_task(void *arg, int64_t t, int worker)
{
    const bytes_job *j = arg;
    (void)worker;
    size_t off = (size_t)t * BYTES_PER_TASK;
    size_t len = j->bytes - off < BYTES_PER_TASK ? j->bytes - off : BYTES_PER_TASK;
    if (j->src)
        memcpy(j->dst + off, j->src + off, len);
    else
        memset(j->dst + off, 0, len);
}

static int64_t bytes_tasks(size_t bytes)
{
    return (int64_t)((bytes + BYTES_PER_TASK - 1) / BYTES_PER_TASK);
}

static pp_status cpu_copy(pp_exec *ex, size_t bytes, const void *src, void *dst, pp_error *err)
{
    const char *s = src;
    char *d = dst;
    if (s < d + bytes && d < s + bytes) { /* overlapping: one ordered move */
        memmove(dst, src, bytes);
        return PP_OK;
    }
    bytes_job j = {.src = s, .dst = d, .bytes = bytes};
    pp_cpu_parallel(ex, bytes_tasks(bytes), bytes_task, &j);
    return PP_OK;
}

/* Host and device memory are the same on the CPU: the stream-ordered host
 * copies are the device copy, run where the exec's work runs. */
static pp_status cpu_copy_from_host_async(pp_exec *ex, void *dst, const void *src, size_t bytes,
                                          pp_error *err)
{
    return cpu_copy(ex, bytes, src, dst, err);
}

static pp_status cpu_copy_to_host_async(pp_exec *ex, void *dst, const void *src, size_t bytes,
                                        pp_error *err)
{
    return cpu_copy(ex, bytes, src, dst, err);
}

static pp_status cpu_zero(pp_exec *ex, size_t bytes, void *dst, pp_error *err)
{
    bytes_job j = {.src = NULL, .dst = dst, .bytes = bytes};
    pp_cpu_parallel(ex, bytes_tasks(bytes), bytes_task, &j);
    return PP_OK;
}

/* Sleeps to an absolute deadline less a margin, then yields until the
 * deadline: a plain sleep overshoots by tens of microseconds, which would
 * skew the delay model against the simulator. */
#define DELAY_SPIN_NS 100000

static pp_status cpu_delay(pp_exec *ex, double ms, pp_error *err)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t deadline = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec + (int64_t)(ms * 1e6);
    int64_t wake = deadline - DELAY_SPIN_NS;
    struct timespec until = {.tv_sec = (time_t)(wake / 1000000000),
                             .tv_nsec = (long)(wake % 1000000000)};
    if (wake > (int64_t)now.tv_sec * 1000000000 + now.tv_nsec)
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) != 0) {
        }
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((int64_t)now.tv_sec * 1000000000 + now.tv_nsec >= deadline) break;
        sched_yield();
    }
    return PP_OK;
}

static const pp_backend_ops cpu_ops = {
    .name = "cpu",
    .device_init = cpu_device_init,
    .device_destroy = cpu_device_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_from_host = cpu_copy_host,
    .copy_to_host = cpu_copy_host,
    .alloc_async = cpu_alloc_async,
    .free_async = cpu_free_async,
    .copy = cpu_copy,
    .copy_from_host_async = cpu_copy_from_host_async,
    .copy_to_host_async = cpu_copy_to_host_async,
    .zero = cpu_zero,
    .delay = cpu_delay,
    .conv2d_forward = pp_cpu_conv2d_forward,
    .conv2d_workspace = cpu_conv2d_workspace,
    .conv2d_backward_data = pp_cpu_conv2d_backward_data,
    .conv2d_backward_filter = pp_cpu_conv2d_backward_filter,
    .conv2d_backward_data_accumulate = pp_cpu_conv2d_backward_data_accumulate,
    .batchnorm_forward_train = pp_cpu_batchnorm_forward_train,
    .batchnorm_forward_infer = pp_cpu_batchnorm_forward_infer,
    .batchnorm_backward = pp_cpu_batchnorm_backward,
    .relu_forward = pp_cpu_relu_forward,
    .relu_backward = pp_cpu_relu_backward,
    .add = pp_cpu_add,
    .accumulate = pp_cpu_accumulate,
    .accumulate_bf16 = pp_cpu_accumulate_bf16,
    .add_relu = pp_cpu_add_relu,
    .bf16_from_f32 = pp_cpu_bf16_from_f32,
    .f32_from_bf16 = pp_cpu_f32_from_bf16,
    .transpose = pp_cpu_transpose,
    .sigmoid_forward = pp_cpu_sigmoid_forward,
    .sigmoid_backward = pp_cpu_sigmoid_backward,
    .avgpool2d_forward = pp_cpu_avgpool2d_forward,
    .avgpool2d_backward = pp_cpu_avgpool2d_backward,
    .channel_bias_forward = pp_cpu_channel_bias_forward,
    .channel_bias_backward = pp_cpu_channel_bias_backward,
    .maxpool_forward = pp_cpu_maxpool_forward,
    .maxpool_backward = pp_cpu_maxpool_backward,
    .avgpool_forward = pp_cpu_avgpool_forward,
    .avgpool_backward = pp_cpu_avgpool_backward,
    .linear_forward = pp_cpu_linear_forward,
    .linear_backward = pp_cpu_linear_backward,
    .linear_backward_data = pp_cpu_linear_backward_data,
    .linear_backward_weights = pp_cpu_linear_backward_weights,
    .softmax_xent = pp_cpu_softmax_xent,
    .softmax_xent_bf16 = pp_cpu_softmax_xent_bf16,
    .sgd_update = pp_cpu_sgd_update,
    .dense_forward = pp_cpu_dense_forward,
    .dense_backward_data = pp_cpu_dense_backward_data,
    .dense_backward_weights = pp_cpu_dense_backward_weights,
    .layernorm_forward = pp_cpu_layernorm_forward,
    .layernorm_backward = pp_cpu_layernorm_backward,
    .gelu_forward = pp_cpu_gelu_forward,
    .gelu_backward = pp_cpu_gelu_backward,
    .attention_forward = pp_cpu_attention_forward,
    .attention_backward = pp_cpu_attention_backward,
    .dropout = pp_cpu_dropout,
    .embedding_forward = pp_cpu_embedding_forward,
    .embedding_backward = pp_cpu_embedding_backward,
    .position_forward = pp_cpu_position_forward,
    .position_backward = pp_cpu_position_backward,
    .adamw_update_multi = pp_cpu_adamw_update_multi,
    .sumsq_multi = pp_cpu_sumsq_multi,
    .scale_multi = pp_cpu_scale_multi,
    .bn_stats_combine = pp_cpu_bn_stats_combine,
};

const pp_backend_ops *pp_backend_cpu(void)
{
    return &cpu_ops;
}
