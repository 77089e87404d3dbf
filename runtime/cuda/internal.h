/*
 * internal.h - state and the error-check macro shared by the CUDA
 * backend's C files in runtime/cuda and by streams/stream_cuda.c.
 *
 * runtime/cuda/ is the CUDA backend: the pp_backend_ops table of
 * pp_backend_cuda() (backend.c) over what every file builds on (exec.c:
 * checks, handles, scratch); convolution, batch norm and pooling through
 * cuDNN (dnn.c), through cuDNN's graph API (gconv.c over gconv_graph.c;
 * gconv_probe.c), the fully connected layer through cuBLAS (blas.c) and
 * cuBLASLt (blaslt.c), the native bf16/NHWC entry (native.c), own kernels
 * (kernels.cu, nhwc.cu), the transformer's ops (dense.c over cuBLASLt,
 * transformer.c over the kernels of transformer.h; the attention,
 * attention_run.c, over our kernels or cuDNN's fused attention, sdpa.c),
 * the algorithm cache (algo_cache.c); absent.c in a build without CUDA. Calls run from backend.c down to exec.c. It includes
 * runtime/core only.
 *
 * Every CUDA runtime, cuDNN and cuBLAS call goes through PP_CUDA, which turns
 * a failure into a pp_status (PP_ERR_OOM for out-of-memory codes,
 * PP_ERR_BACKEND otherwise) and a message naming the call, the device, the
 * library's error name, file and line. Kernel launchers in kernels.cu
 * return cudaGetLastError() so launches are checked the same way.
 *
 * State: pp_cuda_device (dev->backend) is created by device_init and lives
 * until device_destroy; pp_cuda_exec (ex->backend_state) belongs to one exec,
 * which belongs to one stream, so it is never used by two threads at once.
 */
#ifndef PP_CUDA_INTERNAL_H
#define PP_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "algo_cache.h"
#include "runtime/core/backend.h"

typedef struct pp_cuda_device {
    int ordinal;          /* CUDA device ordinal (== dev->id.index) */
    int sm_count;         /* multiprocessors, for sizing grids */
    cudaMemPool_t pool;   /* the device's default pool, release threshold UINT64_MAX */
    cudaStream_t stream;  /* private non-blocking stream: device-level allocations and
                             synchronous copies, and execs made without a native stream */
    char gpu_name[PP_ALGO_GPU_MAX]; /* cudaDeviceProp.name, for the algorithm cache */
    int cudnn_version;    /* cudnnGetVersion() */
    bool find;            /* measure convolution algorithms (PP_CUDNN_FIND, default on) */
    int ws_mb;            /* the most workspace a convolution algorithm, or an execution
                             plan of the graph API (gconv.c), may ask for, MiB
                             (PP_CUDA_CONV_WS_MB, default PP_ALGO_WS_MB_DEFAULT) */
    int conv_plans;       /* the graph API's execution plans a convolution times
                             (PP_CUDA_CONV_PLANS, default PP_ALGO_PLANS_DEFAULT) */
    pp_algo_api conv_api; /* which API runs fp32 and tf32 convolutions
                             (PP_CUDA_CONV_API, default PP_ALGO_API_AUTO: dnn.c) */
    pp_algo_cache algos;  /* the algorithms chosen on this device, shared by its execs;
                             file from PP_CUDNN_CACHE */
    /* The device's time anchor (streams/stream_cuda.c): an event whose
     * completion the host saw when it happened (a synchronize that waited
     * for it), with that host time; every stream of the device reads its
     * timing events against it. Owned by a stream (anchor_owner), valid
     * while that stream's synchronize count is anchor_gen. Under anchor_mu. */
    pthread_mutex_t anchor_mu;
    const void *anchor_owner;
    uint64_t anchor_gen;
    cudaEvent_t anchor_ev;
    int64_t anchor_ns;
} pp_cuda_device;

/* The algorithm of one direction of a convolution plan. */
typedef struct pp_cuda_conv_algo {
    bool graph;           /* runs the graph API's plan (gconv.c); the algorithm below
                             where that plan refuses a call */
    bool have;            /* the legacy algorithm chosen (graph or have: routed) */
    int algo;             /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    cudnnMathType_t math; /* what the descriptor is set to when it runs */
    size_t ws;            /* workspace bytes */
} pp_cuda_conv_algo;

/* One cached convolution geometry: descriptors and the algorithm of each
 * direction, chosen at its first use. */
typedef struct pp_cuda_conv_plan {
    pp_conv2d_desc key;
    int math;             /* the device's pp_math_mode when the plan was made */
    cudnnTensorDescriptor_t x_desc, y_desc;
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    cudnnMathType_t desc_math;   /* the math type conv_desc holds now */
    pp_cuda_conv_algo algo[3];   /* by pp_algo_dir */
} pp_cuda_conv_plan;

/* One cached 4-D f32 tensor descriptor (batch norm, pooling). */
typedef struct pp_cuda_tensor_desc {
    int n, c, h, w;
    cudnnTensorDescriptor_t desc;
} pp_cuda_tensor_desc;

typedef struct pp_cuda_pool_plan {
    int kernel, stride, pad;
    cudnnPoolingDescriptor_t desc;
} pp_cuda_pool_plan;

/* Graph-API convolution plans (gconv.c) and cuBLASLt state
 * (blaslt.c) of one exec, made at first use. */
typedef struct pp_cuda_gconv_cache pp_cuda_gconv_cache;
typedef struct pp_cuda_lt_cache pp_cuda_lt_cache;
/* cuDNN's fused attention plans and the attention choices (sdpa.c). */
typedef struct pp_cuda_sdpa_cache pp_cuda_sdpa_cache;

typedef struct pp_cuda_exec {
    cudaStream_t stream;    /* ex->native_stream, or the device's private stream */
    cudnnHandle_t dnn;      /* created on first use, bound to stream */
    cublasHandle_t blas;    /* created on first use, bound to stream */
    void *blas_ws;          /* (PP_CUDA_BLAS_WS bytes) the workspace blas is given, so that
                               cuBLAS allocates nothing itself (graph capture forbids it) */
    int blas_math;          /* the pp_math_mode blas is set to (-1: not yet) */
    pp_cuda_conv_plan *conv;     /* grows on new shapes (first step only) */
    int n_conv, cap_conv;
    pp_cuda_tensor_desc *tdesc;
    int n_tdesc, cap_tdesc;
    pp_cuda_pool_plan *pool;
    int n_pool, cap_pool;
    pp_cuda_gconv_cache *gconv;  /* NULL until the first graph convolution */
    pp_cuda_lt_cache *lt;        /* NULL until the first cuBLASLt call */
    pp_cuda_sdpa_cache *sdpa;    /* NULL until the first bf16 attention */
} pp_cuda_exec;

/* cuBLAS workspace per handle: what cuBLAS asks for on Hopper (32 MiB). */
#define PP_CUDA_BLAS_WS ((size_t)32 << 20)

/* ---- checking ------------------------------------------------------------- */

pp_status pp_cuda_fail_rt(cudaError_t code, const char *call, const char *file, int line,
                          const pp_device_ctx *dev, pp_error *err);
pp_status pp_cuda_fail_dnn(cudnnStatus_t code, const char *call, const char *file, int line,
                           const pp_device_ctx *dev, pp_error *err);
pp_status pp_cuda_fail_blas(cublasStatus_t code, const char *call, const char *file, int line,
                            const pp_device_ctx *dev, pp_error *err);

static inline pp_status pp_cuda_status_rt(cudaError_t code, const char *call, const char *file,
                                          int line, const pp_device_ctx *dev, pp_error *err)
{
    return code == cudaSuccess ? PP_OK : pp_cuda_fail_rt(code, call, file, line, dev, err);
}

static inline pp_status pp_cuda_status_dnn(cudnnStatus_t code, const char *call, const char *file,
                                           int line, const pp_device_ctx *dev, pp_error *err)
{
    return code == CUDNN_STATUS_SUCCESS ? PP_OK
                                        : pp_cuda_fail_dnn(code, call, file, line, dev, err);
}

static inline pp_status pp_cuda_status_blas(cublasStatus_t code, const char *call,
                                            const char *file, int line, const pp_device_ctx *dev,
                                            pp_error *err)
{
    return code == CUBLAS_STATUS_SUCCESS ? PP_OK
                                         : pp_cuda_fail_blas(code, call, file, line, dev, err);
}

/* PP_CUDA(dev, err, call): evaluates call (a cudaError_t, cudnnStatus_t or
 * cublasStatus_t) and yields PP_OK or the failure status with err filled.
 * dev (may be NULL) names the device in the message. */
#define PP_CUDA(dev, err, call)                                                           \
    _Generic((call), cudaError_t: pp_cuda_status_rt, cudnnStatus_t: pp_cuda_status_dnn, \
             cublasStatus_t: pp_cuda_status_blas)((call), #call, __FILE__, __LINE__, (dev), (err))

/* ---- what every file builds on (exec.c) ------------------------------ */

static inline pp_cuda_device *pp_cuda_dev(const pp_device_ctx *dev)
{
    return (pp_cuda_device *)dev->backend;
}

static inline pp_cuda_exec *pp_cuda_ex(const pp_exec *ex)
{
    return (pp_cuda_exec *)ex->backend_state;
}

/* Makes dev the calling thread's current CUDA device. */
pp_status pp_cuda_set_device(const pp_device_ctx *dev, pp_error *err);

/* The table's peer_access (backend.h): peer's peer mappings of dev (from
 * peer, cudaDeviceEnablePeerAccess; already enabled counts) and read-write
 * access of peer to dev's memory pool (cudaMemPoolSetAccess: pool
 * allocations are not covered by peer mappings). PP_ERR_UNSUPPORTED when
 * peer cannot reach dev (cudaDeviceCanAccessPeer). Leaves peer current. */
pp_status pp_cuda_peer_access(pp_device_ctx *dev, pp_device_ctx *peer, pp_error *err);

/* Makes ex's device current and returns its state; creates the cuDNN (need_dnn)
 * and cuBLAS (need_blas) handles on first use, bound to the exec's stream. */
pp_status pp_cuda_exec_begin(pp_exec *ex, int need_dnn, int need_blas, pp_cuda_exec **out,
                             pp_error *err);

/* The table's alloc_async and free_async: device memory in ex's stream order
 * (not counted). */
pp_status pp_cuda_alloc_async(pp_exec *ex, size_t bytes, void **ptr, pp_error *err);
void pp_cuda_free_async(pp_exec *ex, void *ptr);

/* Temporary device memory in ex's stream order, counted in the device's
 * memory (its cap holds for it); bytes == 0 gives NULL. Free it with
 * pp_cuda_scratch_free (same bytes) in the same stream order: the memory is
 * reused only after the work enqueued before the free. NULL is a no-op. */
pp_status pp_cuda_scratch_alloc(pp_exec *ex, size_t bytes, void **p, pp_error *err);
void pp_cuda_scratch_free(pp_exec *ex, void *p, size_t bytes);

/* The most blocks a grid-stride kernel is given (16 per multiprocessor). */
unsigned pp_cuda_max_grid(const pp_exec *ex);
/* Grid size for n elements with block threads, for grid-stride kernels. */
unsigned pp_cuda_grid(const pp_exec *ex, int64_t n, unsigned block);

/* ---- cuDNN / cuBLAS ops (dnn.c, blas.c) ---------------------------- */

pp_status pp_cuda_conv2d_forward(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                 const float *w, float *y, pp_error *err);
pp_status pp_cuda_conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d, const float *dy,
                                       const float *w, float *dx, pp_error *err);
pp_status pp_cuda_conv2d_backward_data_accumulate(pp_exec *ex, const pp_conv2d_desc *d,
                                                  const float *dy, const float *w, float *dx,
                                                  pp_error *err);
pp_status pp_cuda_conv2d_backward_filter(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                         const float *dy, float *dw, pp_error *err);
pp_status pp_cuda_batchnorm_forward_train(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                          const float *gamma, const float *beta,
                                          float *running_mean, float *running_var, float *y,
                                          float *save_mean, float *save_invstd, pp_error *err);
pp_status pp_cuda_batchnorm_forward_infer(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                          const float *gamma, const float *beta,
                                          const float *running_mean, const float *running_var,
                                          float *y, pp_error *err);
pp_status pp_cuda_batchnorm_backward(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                     const float *dy, const float *gamma, const float *save_mean,
                                     const float *save_invstd, float *dx, float *dgamma,
                                     float *dbeta, pp_error *err);
pp_status pp_cuda_maxpool_forward(pp_exec *ex, const pp_pool_desc *d, const float *x, float *y,
                                  int32_t *idx, pp_error *err);
pp_status pp_cuda_maxpool_backward(pp_exec *ex, const pp_pool_desc *d, const float *x,
                                   const float *y, const float *dy, const int32_t *idx, float *dx,
                                   pp_error *err);
/* The native entry and the layout transposes (native.c, backend.h). */
pp_status pp_cuda_native(pp_exec *ex, pp_native_op op, const void *desc, pp_tensor *const *t,
                         pp_error *err);
pp_status pp_cuda_transpose(pp_exec *ex, int64_t n, int64_t rows, int64_t cols, size_t elem,
                            const void *x, void *y, pp_error *err);
/* Releases the descriptor caches of an exec (dnn.c). */
void pp_cuda_dnn_cache_free(pp_exec *ex);

pp_status pp_cuda_linear_forward(pp_exec *ex, int n, int in, int out, const float *x,
                                 const float *w, const float *b, float *y, pp_error *err);
pp_status pp_cuda_linear_backward(pp_exec *ex, int n, int in, int out, const float *x,
                                  const float *w, const float *dy, float *dx, float *dw,
                                  float *db, pp_error *err);
pp_status pp_cuda_linear_backward_data(pp_exec *ex, int n, int in, int out, const float *w,
                                       const float *dy, float *dx, pp_error *err);
pp_status pp_cuda_linear_backward_weights(pp_exec *ex, int n, int in, int out, const float *x,
                                          const float *dy, float *dw, float *db, pp_error *err);

/* ---- the transformer ops (dense.c, transformer.c; ops.h, backend.h) ---- */

/* PP_CUDA_UNFUSED (set and not "0"): the fused transformer entries (a dense
 * layer with its GELU, a layer norm with its residual add) decline with
 * PP_ERR_UNSUPPORTED, having enqueued nothing, so that the plain ops run
 * instead, to compare. */
pp_status pp_cuda_unfused(pp_exec *ex, const char *what, pp_error *err);
/* PP_CUDA_BF16_WIDE (set and not "0"): the bf16 entries of mixed precision
 * decline likewise, so that ops_transformer.c's f32 stand-ins run, to
 * compare (what the native bf16 path gains). */
pp_status pp_cuda_bf16_wide(pp_exec *ex, const char *what, pp_error *err);

pp_status pp_cuda_dense_forward(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                const float *x, const float *w, const float *b, float *y,
                                pp_error *err);
pp_status pp_cuda_dense_backward_data(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                      const float *w, const float *dy, float *dx, pp_error *err);
pp_status pp_cuda_dense_backward_weights(pp_exec *ex, int64_t rows, int in, int out,
                                         bool w_out_in, const float *x, const float *dy,
                                         float *dw, float *db, pp_error *err);
pp_status pp_cuda_dense_backward(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                 const float *w, const float *x, const float *dy, float *dx,
                                 float *dw, float *db, pp_error *err);
pp_status pp_cuda_dense_gelu_forward(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                     const float *x, const float *w, const float *b, float *h,
                                     float *g, pp_error *err);
pp_status pp_cuda_dense_backward_data_gelu(pp_exec *ex, int64_t rows, int in, int out,
                                           bool w_out_in, const float *w, const float *dy,
                                           const float *h, float *dh, pp_error *err);
pp_status pp_cuda_layernorm_forward(pp_exec *ex, int64_t rows, int c, float eps, const float *x,
                                    const float *gamma, const float *beta, float *y, float *mean,
                                    float *rstd, pp_error *err);
pp_status pp_cuda_add_layernorm_forward(pp_exec *ex, int64_t rows, int c, float eps,
                                        const float *a, const float *b, const float *gamma,
                                        const float *beta, float *s, float *y, float *mean,
                                        float *rstd, pp_error *err);
pp_status pp_cuda_layernorm_backward_add(pp_exec *ex, int64_t rows, int c, const float *x,
                                         const float *dy, const float *gamma, const float *mean,
                                         const float *rstd, const float *dres, float *dx,
                                         float *dgamma, float *dbeta, pp_error *err);
pp_status pp_cuda_layernorm_backward(pp_exec *ex, int64_t rows, int c, const float *x,
                                     const float *dy, const float *gamma, const float *mean,
                                     const float *rstd, float *dx, float *dgamma, float *dbeta,
                                     pp_error *err);
/* attention_run.c */
pp_status pp_cuda_attention_forward(pp_exec *ex, const pp_attention_desc *d, const float *qkv,
                                    float *y, float *lse, pp_error *err);
pp_status pp_cuda_attention_backward(pp_exec *ex, const pp_attention_desc *d, const float *qkv,
                                     const float *y, const float *lse, const float *dy,
                                     float *dqkv, pp_error *err);
pp_status pp_cuda_attention_forward_bf16(pp_exec *ex, const pp_attention_desc *d,
                                         const uint16_t *qkv, uint16_t *y, float *lse,
                                         pp_error *err);
pp_status pp_cuda_attention_backward_bf16(pp_exec *ex, const pp_attention_desc *d,
                                          const uint16_t *qkv, const uint16_t *y,
                                          const float *lse, const uint16_t *dy, uint16_t *dqkv,
                                          pp_error *err);
pp_status pp_cuda_embedding_forward(pp_exec *ex, int64_t rows, int vocab, int c,
                                    const int32_t *ids, const float *table, float *y,
                                    pp_error *err);
pp_status pp_cuda_embedding_backward(pp_exec *ex, int64_t rows, int vocab, int c,
                                     const int32_t *ids, const float *dy, float *dtable,
                                     pp_error *err);
pp_status pp_cuda_position_forward(pp_exec *ex, int64_t n, int t, int c, const float *x,
                                   const float *table, float *y, pp_error *err);
pp_status pp_cuda_position_backward(pp_exec *ex, int64_t n, int t, int c, const float *dy,
                                    float *dtable, pp_error *err);

/* the bf16 entries of mixed precision (backend.h): transformer.c's layer
 * norms and GELU, dense.c's dense layers */
pp_status pp_cuda_layernorm_forward_bf16(pp_exec *ex, int64_t rows, int c, float eps, pp_act a,
                                         pp_act add, pp_act s, const float *gamma,
                                         const float *beta, pp_act y, float *mean, float *rstd,
                                         pp_error *err);
pp_status pp_cuda_layernorm_backward_bf16(pp_exec *ex, int64_t rows, int c, pp_act x, pp_act dy,
                                          const float *gamma, const float *mean,
                                          const float *rstd, pp_act dres, pp_act dx,
                                          float *dgamma, float *dbeta, pp_error *err);
pp_status pp_cuda_gelu_forward_bf16(pp_exec *ex, int64_t n, pp_act x, pp_act y, pp_error *err);
pp_status pp_cuda_gelu_backward_bf16(pp_exec *ex, int64_t n, pp_act x, pp_act dy, pp_act dx,
                                     pp_error *err);
pp_status pp_cuda_dense_forward_bf16(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                     pp_act x, pp_act w, const float *b, pp_act y,
                                     pp_error *err);
pp_status pp_cuda_dense_gelu_forward_bf16(pp_exec *ex, int64_t rows, int in, int out,
                                          bool w_out_in, pp_act x, pp_act w, const float *b,
                                          pp_act h, pp_act g, pp_error *err);
pp_status pp_cuda_dense_backward_data_bf16(pp_exec *ex, int64_t rows, int in, int out,
                                           bool w_out_in, pp_act w, pp_act dy, pp_act dx,
                                           pp_error *err);
pp_status pp_cuda_dense_backward_data_gelu_bf16(pp_exec *ex, int64_t rows, int in, int out,
                                                bool w_out_in, pp_act w, pp_act dy, pp_act h,
                                                pp_act dh, pp_error *err);
pp_status pp_cuda_dense_backward_weights_bf16(pp_exec *ex, int64_t rows, int in, int out,
                                              bool w_out_in, pp_act x, pp_act dy, float *dw,
                                              float *db, pp_error *err);
pp_status pp_cuda_dense_backward_bf16(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                      pp_act w, pp_act x, pp_act dy, pp_act h, pp_act dx,
                                      float *dw, float *db, pp_error *err);

#endif
