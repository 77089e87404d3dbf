/*
 * tensor.h - dense tensors (up to 4-D, row-major, NCHW for images) on a device.
 *
 * Layout: a 4-D tensor's shape is always given in the logical order
 * (N, C, H, W) (filters: (K, C, R, S)); its layout says how the elements lie in
 * memory: PP_NCHW (the default, row-major over the shape) or PP_NHWC
 * (channels last: row-major over (N, H, W, C); filters (K, R, S, C)). Tensors
 * of other ranks are always row-major and ignore the field.
 *
 * A pp_tensor is a small value type: a data pointer, dtype, shape and the
 * device that holds the data. It either owns its storage (made by
 * pp_tensor_alloc, released by pp_tensor_free) or is a view into another
 * tensor's storage (pp_tensor_view0), which must outlive the view; freeing a
 * view is a no-op. Tensors are not reference counted: ownership is explicit.
 * Thread safety: none of its own; synchronise through streams and events.
 */
#ifndef PP_TENSOR_H
#define PP_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pp_dtype {
    PP_F32 = 0,
    PP_BF16,
    PP_F16,
    PP_I64,
    PP_I32,
    PP_U8,
} pp_dtype;

/* Bytes per element of a dtype. */
size_t pp_dtype_size(pp_dtype t);
/* "F32", "BF16", ... (the safetensors spelling). */
const char *pp_dtype_name(pp_dtype t);

/* bf16 <-> f32 on the host. pp_bf16_from_f32 rounds to nearest, ties to
 * even (NaN stays a quiet NaN of the same sign, infinities stay infinite);
 * pp_f32_from_bf16 is exact. The CPU and CUDA kernels round the same way. */
uint16_t pp_bf16_from_f32(float f);
float pp_f32_from_bf16(uint16_t h);

#define PP_MAX_DIMS 4

typedef enum pp_layout {
    PP_NCHW = 0, /* row-major over the shape */
    PP_NHWC = 1, /* 4-D only: channels last */
} pp_layout;

/* "NCHW", "NHWC". */
const char *pp_layout_name(pp_layout l);

typedef struct pp_tensor {
    void *data;                  /* device pointer; NULL for an empty tensor */
    pp_dtype dtype;
    int ndim;                    /* 0..4; ndim 0 is a scalar */
    int64_t shape[PP_MAX_DIMS];  /* unused entries are 1 */
    pp_device_ctx *dev;          /* where data lives */
    bool owns;                   /* true: pp_tensor_free releases data */
    struct pp_exec *stream;      /* non-NULL: allocated in this exec's stream order
                                  * (pp_tensor_alloc_on) and released in it */
    pp_layout layout;            /* memory order of a 4-D tensor (see above); the
                                  * allocators make PP_NCHW, set it after allocating */
} pp_tensor;

/* Allocates an uninitialised tensor on dev. On failure *t is zeroed. */
pp_status pp_tensor_alloc(pp_tensor *t, pp_device_ctx *dev, pp_dtype dtype, int ndim,
                          const int64_t *shape, pp_error *err);
/* Allocates in ex's stream order: on CUDA the memory comes from the device's
 * pool on ex's stream and pp_tensor_free returns it there, without waiting
 * for the device (work enqueued on ex later may reuse it). For tensors that
 * live between ops of one stream, such as activations saved for backward. ex
 * must outlive the tensor. On the CPU backend this is pp_tensor_alloc. */
pp_status pp_tensor_alloc_on(pp_tensor *t, struct pp_exec *ex, pp_dtype dtype, int ndim,
                             const int64_t *shape, pp_error *err);
/* Same, then fills with zeros (synchronously, on the calling thread). */
pp_status pp_tensor_zeros(pp_tensor *t, pp_device_ctx *dev, pp_dtype dtype, int ndim,
                          const int64_t *shape, pp_error *err);
/* Releases owned storage and zeroes *t (in the allocating exec's stream order
 * for pp_tensor_alloc_on). Safe on a zeroed tensor and on views. */
void pp_tensor_free(pp_tensor *t);
/* Drops *t, zeroing it, without releasing stream-ordered storage: for a
 * tensor pp_tensor_alloc_on made inside a CUDA graph capture that was then
 * discarded, whose memory belonged to the graph and never existed (only its
 * count in the device's memory is taken back; freeing it would hand the pool
 * an address it never gave). Storage of any other kind is released as by
 * pp_tensor_free. */
void pp_tensor_abandon(pp_tensor *t);

/* A view of rows [start, start+len) along dimension 0. */
pp_tensor pp_tensor_view0(const pp_tensor *t, int64_t start, int64_t len);
/* A view of the same data with another shape of equal element count. An
 * NHWC tensor may only be reshaped where its memory order equals NCHW's
 * (H = W = 1, or C = 1); the view is NCHW. */
pp_status pp_tensor_reshape(const pp_tensor *t, int ndim, const int64_t *shape, pp_tensor *out,
                            pp_error *err);

/* Number of elements (1 for a scalar). */
int64_t pp_tensor_numel(const pp_tensor *t);
/* Bytes of data: elements times the dtype's size. */
size_t pp_tensor_bytes(const pp_tensor *t);
/* The layout t's memory order really has: PP_NCHW for tensors other than 4-D
 * and for 4-D tensors whose two orders coincide (H = W = 1 or C = 1). */
pp_layout pp_tensor_effective_layout(const pp_tensor *t);
/* True when a and b have the same rank and dimensions (dtype not compared). */
bool pp_tensor_same_shape(const pp_tensor *a, const pp_tensor *b);
/* Formats the shape as "[2, 3, 4, 4]" into buf; returns buf. */
const char *pp_tensor_shape_str(const pp_tensor *t, char *buf, size_t n);

/* Synchronous host <-> device copies (blocking; for setup, tests, checkpoints). */
pp_status pp_tensor_from_host(pp_tensor *t, const void *src, size_t bytes, pp_error *err);
pp_status pp_tensor_to_host(const pp_tensor *t, void *dst, size_t bytes, pp_error *err);

#ifdef __cplusplus
}
#endif

#endif
