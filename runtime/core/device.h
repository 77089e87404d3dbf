/*
 * device.h - logical devices, the registry that owns their contexts, and
 * per-device memory accounting.
 *
 * runtime/core/ is the device layer every room of runtime/ sits on: logical
 * devices and their registry (this header), tensors, execs (work on one
 * device, in one stream's order), the checked op API (ops.h) over a table of
 * functions per backend (backend.h: pp_backend_ops), statuses and errors,
 * paths, the micro-batch rule and the host thread pool. It includes nothing
 * of the project outside itself.
 *
 * A logical device is "cpu:N" or "cuda:N". Several cpu:N are distinct logical
 * devices that share host memory (each has its own accounting), which lets any
 * plan run on a machine without a GPU.
 *
 * Ownership: a pp_registry owns every pp_device_ctx it hands out; contexts live
 * until pp_registry_free. Thread safety: pp_registry_get is not thread-safe
 * (call it while setting up); memory accounting and allocation through a
 * context are thread-safe.
 */
#ifndef PP_DEVICE_H
#define PP_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pp_device_kind {
    PP_DEVICE_CPU = 0,
    PP_DEVICE_CUDA = 1,
} pp_device_kind;

typedef struct pp_device_id {
    pp_device_kind kind;
    int index;
} pp_device_id;

/* Parses "cpu:N" or "cuda:N" (N a non-negative decimal integer < 1024).
 * "cpu" alone means cpu:0. Returns PP_ERR_INPUT with a message otherwise. */
pp_status pp_device_id_parse(const char *s, pp_device_id *out, pp_error *err);

/* Writes "cpu:N" / "cuda:N" into buf (at least 16 bytes); returns buf. */
const char *pp_device_id_format(pp_device_id id, char *buf, size_t n);

/* True when a and b name the same logical device. */
bool pp_device_id_equal(pp_device_id a, pp_device_id b);

struct pp_backend_ops;

/* How a device computes fp32 convolutions and GEMMs. */
typedef enum pp_math_mode {
    PP_MATH_FP32 = 0, /* IEEE fp32 (CUDA: CUDNN_FMA_MATH, CUBLAS_DEFAULT_MATH) */
    PP_MATH_TF32 = 1, /* CUDA: TF32 tensor-core math for convolutions and GEMMs (10-bit
                         mantissa inputs, fp32 accumulation); CPU: computes as fp32 */
} pp_math_mode;

/* Per-device context: backend, memory counters, backend-private state. */
typedef struct pp_device_ctx {
    pp_device_id id;
    char name[16];                     /* "cpu:0", "cuda:1" */
    const struct pp_backend_ops *ops;  /* kernels and memory of this backend */
    void *backend;                     /* backend-private state (handles), owned by ops */
    size_t bytes_limit;                /* 0 = unlimited; allocations beyond fail with PP_ERR_OOM */
    pp_math_mode math;                 /* read by every convolution and GEMM; change it
                                          with pp_device_set_math */
} pp_device_ctx;

typedef struct pp_registry pp_registry;

/* A registry with no device opened yet. Free it (and every context it made)
 * with pp_registry_free, after everything that uses its devices. */
pp_status pp_registry_new(pp_registry **out, pp_error *err);
void pp_registry_free(pp_registry *reg);

/* Returns the context of a device, creating it on first use. Fails with
 * PP_ERR_INPUT if the device does not exist (no such GPU) and
 * PP_ERR_UNSUPPORTED if its backend was not built. */
pp_status pp_registry_get(pp_registry *reg, pp_device_id id, pp_device_ctx **out, pp_error *err);

/* Number of CUDA devices visible (0 when the CUDA backend is absent or no GPU). */
int pp_cuda_device_count(void);

/* Sets how dev computes fp32 convolutions and GEMMs (the fully connected
 * layer) from the next op on; everything else is IEEE fp32 in both modes.
 * PP_MATH_TF32 on a CUDA device: cuDNN convolutions with tensor-op math
 * (algorithms measured or chosen per mode) and cuBLAS with
 * CUBLAS_TF32_TENSOR_OP_MATH; results then differ from fp32 by about 2^-10
 * of the operands' scale. On a CPU device either mode is accepted and
 * computes IEEE fp32: tf32 runs as fp32 on the CPU, bit for bit.
 * Thread safety: call while no op of the device is running (at setup or
 * between steps). PP_ERR_INVALID for an unknown mode or a NULL device. */
pp_status pp_device_set_math(pp_device_ctx *dev, pp_math_mode mode, pp_error *err);
/* The device's current math mode (PP_MATH_FP32 until set). */
pp_math_mode pp_device_math(const pp_device_ctx *dev);
/* Starts (start) or stops the range an external profiler collects, on dev's
 * backend; a no-op where the backend has none (the CPU). */
pp_status pp_device_profiler(pp_device_ctx *dev, bool start, pp_error *err);
/* Whether bf16 activations compute faster in NHWC than NCHW on dev. */
bool pp_device_prefers_nhwc_bf16(const pp_device_ctx *dev);

/* Raw device memory through the accounting. pp_device_alloc returns memory
 * aligned to 64 bytes (CPU) or 256 bytes (CUDA); size 0 gives NULL and OK. */
pp_status pp_device_alloc(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err);
void pp_device_free(pp_device_ctx *dev, void *ptr, size_t bytes);

/* Host memory the device copies to and from without staging: page-locked on
 * CUDA (cudaMallocHost, so stream-ordered copies run asynchronously), plain
 * aligned memory on the CPU. Not counted as device memory. size 0 gives NULL
 * and OK; pp_device_host_free(dev, NULL) does nothing. */
pp_status pp_device_host_alloc(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err);
void pp_device_host_free(pp_device_ctx *dev, void *ptr);
/* Lets the kernels of peer, and the libraries that run on it (NCCL between
 * devices of one process), read and write dev's memory, stream-ordered pool
 * allocations included (CUDA: peer access, and the access of dev's memory
 * pool). A no-op for the same device and for devices of host memory (the
 * CPU); PP_ERR_UNSUPPORTED where the hardware has no path between the two,
 * PP_ERR_INVALID for devices of different kinds. May change the calling
 * thread's current device. */
pp_status pp_device_peer_access(pp_device_ctx *dev, pp_device_ctx *peer, pp_error *err);

/* Whether pp_device_host_alloc gives dev host memory of its own kind (CUDA:
 * page-locked), rather than plain aligned memory (the CPU). */
bool pp_device_host_pinned(const pp_device_ctx *dev);

/* Accounting without allocation, for memory a backend hands out itself
 * (stream-ordered pools): account fails with PP_ERR_OOM beyond bytes_limit. */
pp_status pp_device_account(pp_device_ctx *dev, size_t bytes, pp_error *err);
void pp_device_unaccount(pp_device_ctx *dev, size_t bytes);

/* The device's free and total memory as its driver reports them (a CUDA
 * card: what other processes and this one's allocations leave). PP_ERR_UNSUPPORTED
 * for devices without memory of their own (the CPU). */
pp_status pp_device_memory_info(pp_device_ctx *dev, size_t *free_bytes, size_t *total_bytes,
                                pp_error *err);

/* Resets the peak to the current usage (for per-step peak measurements). */
void pp_device_reset_peak(pp_device_ctx *dev);
size_t pp_device_peak_bytes(const pp_device_ctx *dev);
size_t pp_device_bytes_in_use(const pp_device_ctx *dev);

#ifdef __cplusplus
}
#endif

#endif
