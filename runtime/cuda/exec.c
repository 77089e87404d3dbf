/*
 * exec.c - what every file of the CUDA backend builds on, below all of
 * them: the failure reports of the PP_CUDA check, making a device current,
 * an exec's cuDNN and cuBLAS handles (pp_cuda_exec_begin), stream-ordered
 * and counted scratch memory, and launch grids (internal.h). Calls nothing
 * else of runtime/cuda.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* ---- error reporting ------------------------------------------------------ */

static const char *dev_name(const pp_device_ctx *dev)
{
    return dev ? dev->name : "cuda";
}

pp_status pp_cuda_fail_rt(cudaError_t code, const char *call, const char *file, int line,
                          const pp_device_ctx *dev, pp_error *err)
{
    pp_status s = code == cudaErrorMemoryAllocation ? PP_ERR_OOM : PP_ERR_BACKEND;
    /* The failure is reported here: clear it from the thread's last error, or the
     * next kernel launcher's cudaGetLastError() would report it again. */
    (void)cudaGetLastError();
    return pp_error_set(err, s, "%s: %s failed: %s (%s) at %s:%d", dev_name(dev), call,
                        cudaGetErrorName(code), cudaGetErrorString(code), file, line);
}

pp_status pp_cuda_fail_dnn(cudnnStatus_t code, const char *call, const char *file, int line,
                           const pp_device_ctx *dev, pp_error *err)
{
    pp_status s = (code == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                   code == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
                      ? PP_ERR_OOM
                      : PP_ERR_BACKEND;
    (void)cudaGetLastError(); /* a launch error cuDNN left behind is this failure's */
    return pp_error_set(err, s, "%s: %s failed: %s at %s:%d", dev_name(dev), call,
                        cudnnGetErrorString(code), file, line);
}

pp_status pp_cuda_fail_blas(cublasStatus_t code, const char *call, const char *file, int line,
                            const pp_device_ctx *dev, pp_error *err)
{
    pp_status s = code == CUBLAS_STATUS_ALLOC_FAILED ? PP_ERR_OOM : PP_ERR_BACKEND;
    (void)cudaGetLastError(); /* a launch error cuBLAS left behind is this failure's */
    return pp_error_set(err, s, "%s: %s failed: %s (%s) at %s:%d", dev_name(dev), call,
                        cublasGetStatusName(code), cublasGetStatusString(code), file, line);
}

/* ---- devices and execs ------------------------------------------------------ */

pp_status pp_cuda_set_device(const pp_device_ctx *dev, pp_error *err)
{
    return PP_CUDA(dev, err, cudaSetDevice(dev->id.index));
}

pp_status pp_cuda_exec_begin(pp_exec *ex, int need_dnn, int need_blas, pp_cuda_exec **out,
                             pp_error *err)
{
    pp_cuda_exec *ce = pp_cuda_ex(ex);
    pp_device_ctx *dev = ex->dev;
    PP_TRY(pp_cuda_set_device(dev, err));
    /* A handle is kept only once it is fully set up: one left half-configured
     * (not bound to the exec's stream) would run later work on the wrong stream. */
    if (need_dnn && !ce->dnn) {
        cudnnHandle_t h;
        PP_TRY(PP_CUDA(dev, err, cudnnCreate(&h)));
        pp_status s = PP_CUDA(dev, err, cudnnSetStream(h, ce->stream));
        if (s != PP_OK) {
            (void)PP_CUDA(dev, NULL, cudnnDestroy(h));
            return s;
        }
        ce->dnn = h;
    }
    if (need_blas && !ce->blas) {
        /* An explicit workspace, set once: cuBLAS then makes no allocation of its
         * own on the stream, which a graph capture of the step would refuse. */
        if (!ce->blas_ws) {
            PP_TRY(pp_device_account(dev, PP_CUDA_BLAS_WS, err));
            pp_status a = PP_CUDA(dev, err, cudaMalloc(&ce->blas_ws, PP_CUDA_BLAS_WS));
            if (a != PP_OK) {
                pp_device_unaccount(dev, PP_CUDA_BLAS_WS);
                ce->blas_ws = NULL;
                return a;
            }
        }
        cublasHandle_t h;
        PP_TRY(PP_CUDA(dev, err, cublasCreate(&h)));
        pp_status s = PP_CUDA(dev, err, cublasSetStream(h, ce->stream));
        if (s == PP_OK) s = PP_CUDA(dev, err, cublasSetWorkspace(h, ce->blas_ws, PP_CUDA_BLAS_WS));
        if (s == PP_OK)
            s = PP_CUDA(dev, err, cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
        if (s != PP_OK) {
            (void)PP_CUDA(dev, NULL, cublasDestroy(h));
            return s;
        }
        ce->blas = h;
        ce->blas_math = -1;
    }
    /* The handle follows the device's math mode. fp32: CUBLAS_DEFAULT_MATH keeps
     * the precision asked for (sgemm never uses TF32 in it); tf32 allows TF32
     * tensor cores. */
    if (need_blas && ce->blas_math != (int)dev->math) {
        PP_TRY(PP_CUDA(dev, err,
                       cublasSetMathMode(ce->blas, dev->math == PP_MATH_TF32
                                                       ? CUBLAS_TF32_TENSOR_OP_MATH
                                                       : CUBLAS_DEFAULT_MATH)));
        ce->blas_math = (int)dev->math;
    }
    *out = ce;
    return PP_OK;
}

/* ---- stream-ordered memory and grids ------------------------------------- */

pp_status pp_cuda_alloc_async(pp_exec *ex, size_t bytes, void **ptr, pp_error *err)
{
    *ptr = NULL;
    PP_TRY(pp_cuda_set_device(ex->dev, err));
    return PP_CUDA(ex->dev, err, cudaMallocAsync(ptr, bytes, pp_cuda_ex(ex)->stream));
}

void pp_cuda_free_async(pp_exec *ex, void *ptr)
{
    if (!ptr || pp_cuda_set_device(ex->dev, NULL) != PP_OK) return;
    (void)PP_CUDA(ex->dev, NULL, cudaFreeAsync(ptr, pp_cuda_ex(ex)->stream));
}

pp_status pp_cuda_scratch_alloc(pp_exec *ex, size_t bytes, void **p, pp_error *err)
{
    *p = NULL;
    if (bytes == 0) return PP_OK;
    PP_TRY(pp_device_account(ex->dev, bytes, err));
    pp_status s = pp_cuda_alloc_async(ex, bytes, p, err);
    if (s != PP_OK) {
        pp_device_unaccount(ex->dev, bytes);
        *p = NULL;
    }
    return s;
}

void pp_cuda_scratch_free(pp_exec *ex, void *p, size_t bytes)
{
    if (!p) return;
    pp_cuda_free_async(ex, p);
    pp_device_unaccount(ex->dev, bytes);
}

unsigned pp_cuda_max_grid(const pp_exec *ex)
{
    return (unsigned)pp_cuda_dev(ex->dev)->sm_count * 16;
}

unsigned pp_cuda_grid(const pp_exec *ex, int64_t n, unsigned block)
{
    const int64_t cap = pp_cuda_max_grid(ex);
    int64_t g = (n + block - 1) / block;
    if (g > cap) g = cap;
    return g < 1 ? 1u : (unsigned)g;
}
