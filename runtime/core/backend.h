/*
 * backend.h - the seam between the checked op API (ops.c) and a backend.
 *
 * A backend is a table of functions over raw device pointers and explicit
 * dimensions. Callers (ops.c, device.c, tensor.c, streams/) have already
 * checked shapes, dtypes and devices; a backend only reports failures of its
 * own (out of memory, library errors) through err. Contracts per op are those
 * of ops.h. Entries that a backend cannot provide are NULL and the caller
 * reports PP_ERR_UNSUPPORTED (optional ones say what NULL means instead).
 *
 * The backend is chosen per device kind at build time: runtime/cpu always,
 * runtime/cuda when meson's `cuda` option enables it (otherwise
 * pp_backend_cuda() returns NULL).
 */
#ifndef PP_BACKEND_H
#define PP_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "exec.h"
#include "ops.h"

/* The ops a backend may run natively on operands other than f32 NCHW (see
 * pp_backend_ops.native). The tensors are passed in the order of the op's
 * function in ops.h, outputs included (NULL where an optional one is absent). */
typedef enum pp_native_op {
    PP_NATIVE_CONV_FWD,          /* x, w, y                                  */
    PP_NATIVE_CONV_DGRAD,        /* dy, w, dx                                */
    PP_NATIVE_CONV_DGRAD_ACC,    /* dy, w, dx (dx +=)                        */
    PP_NATIVE_CONV_WGRAD,        /* x, dy, dw (f32 NCHW, +=)                 */
    PP_NATIVE_BN_TRAIN,          /* x, gamma, beta, rmean, rvar, y, smean, sinvstd */
    PP_NATIVE_BN_INFER,          /* x, gamma, beta, rmean, rvar, y           */
    PP_NATIVE_BN_BACKWARD,       /* x, dy, gamma, smean, sinvstd, dx, dgamma, dbeta */
    PP_NATIVE_RELU_FWD,          /* x, y                                     */
    PP_NATIVE_RELU_BWD,          /* y, dy, dx                                */
    PP_NATIVE_ADD,               /* a, b, y                                  */
    PP_NATIVE_ACCUMULATE,        /* x, y (y +=)                              */
    PP_NATIVE_ADD_RELU,          /* a, b, y                                  */
    PP_NATIVE_MAXPOOL_FWD,       /* x, y, idx                                */
    PP_NATIVE_MAXPOOL_BWD,       /* x, y, dy, idx, dx                        */
    PP_NATIVE_AVGPOOL_FWD,       /* x (N,C,H,W), y (N,C)                     */
    PP_NATIVE_AVGPOOL_BWD,       /* dy (N,C), dx (N,C,H,W)                   */
    PP_NATIVE_LINEAR_FWD,        /* x, w, b, y                               */
    PP_NATIVE_LINEAR_BWD,        /* x, w, dy, dx (may be NULL), dw, db       */
    PP_NATIVE_BN_ACT,            /* x, gamma, beta, rmean, rvar, add (may be NULL), y, smean,
                                    sinvstd; desc: pp_bn_act_desc           */
    PP_NATIVE_BN_BACKWARD_RELU,  /* x, relu_y, dy, gamma, smean, sinvstd, dx, dgamma, dbeta,
                                  * g (may be NULL: the ReLU's gradient, kept) */
    PP_NATIVE_LINEAR_DGRAD,      /* w, dy, dx                                */
    PP_NATIVE_LINEAR_WGRAD,      /* x, dy, dw, db                            */
} pp_native_op;

/* The shape of an attention op (ops.h): qkv (n, t, 3c), y (n, t - q0, c),
 * lse (n, heads, t - q0); c a multiple of heads. q0 > 0 (forward only, no
 * dropout: pp_attention_forward_from): the queries of positions q0..t-1
 * alone, over the keys of positions 0.. up to each. */
typedef struct pp_attention_desc {
    int n, t, c, heads;
    pp_dropout_desc drop; /* dropout on the probabilities (ops.h); p == 0: none */
    int q0;               /* the first query's position (0: every position) */
} pp_attention_desc;

/* The descriptor of PP_NATIVE_BN_ACT (pp_batchnorm_forward_act). */
typedef struct pp_bn_act_desc {
    pp_bn_desc bn;
    bool train, relu;
} pp_bn_act_desc;

/* pp_adamw_update_multi's scalars as the kernels take them (ops.h says how
 * each comes from the descriptor, in double, rounded once). */
typedef struct pp_adamw_scalars {
    float decay;      /* 1 - lr * weight_decay */
    float b1, c1;     /* beta1, 1 - beta1 */
    float b2, c2;     /* beta2, 1 - beta2 */
    float bc2;        /* sqrt(1 - beta2^step) */
    float step_size;  /* lr / (1 - beta1^step) */
    float eps;
    float grad_scale;
} pp_adamw_scalars;

/* An activation operand of the transformer's bf16 entries (pp_backend_ops,
 * "bf16 transformer entries"): its data, bf16 bit patterns (uint16_t) or
 * f32, as the tensor's dtype says. NULL data: the optional operand is absent. */
typedef struct pp_act {
    void *data;
    bool bf16;
} pp_act;

typedef struct pp_backend_ops {
    const char *name; /* "cpu", "cuda" */
    /* bf16 activations run faster NHWC than NCHW here (natively, see native) */
    bool prefers_nhwc_bf16;

    /* device lifetime: create backend-private state for dev (dev->backend) */
    pp_status (*device_init)(pp_device_ctx *dev, pp_error *err);
    void (*device_destroy)(pp_device_ctx *dev);

    /* memory (accounting is done by the caller) */
    pp_status (*alloc)(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err);
    void (*free)(pp_device_ctx *dev, void *ptr);
    /* synchronous copies, for setup and tests */
    pp_status (*copy_from_host)(pp_device_ctx *dev, void *dst, const void *src, size_t bytes,
                                pp_error *err);
    pp_status (*copy_to_host)(pp_device_ctx *dev, void *dst, const void *src, size_t bytes,
                              pp_error *err);

    /* optional: host memory the device copies without staging (CUDA: page-locked);
     * NULL: aligned malloc/free */
    pp_status (*host_alloc)(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err);
    void (*host_free)(pp_device_ctx *dev, void *ptr);

    /* optional: lets peer (another device of this backend) read and write dev's
     * memory, its stream-ordered pool allocations included; PP_ERR_UNSUPPORTED
     * where the hardware has no path between them; NULL entry: nothing to do */
    pp_status (*peer_access)(pp_device_ctx *dev, pp_device_ctx *peer, pp_error *err);

    /* exec (per-stream) state */
    pp_status (*exec_init)(pp_exec *ex, pp_error *err);
    void (*exec_destroy)(pp_exec *ex);
    pp_status (*exec_sync)(pp_exec *ex, pp_error *err);
    /* stream-ordered allocation for workspaces; may equal alloc/free on CPU */
    pp_status (*alloc_async)(pp_exec *ex, size_t bytes, void **ptr, pp_error *err);
    void (*free_async)(pp_exec *ex, void *ptr);

    /* kernels (stream ordered on ex) */
    pp_status (*conv2d_forward)(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                const float *w, float *y, pp_error *err);
    pp_status (*conv2d_backward_data)(pp_exec *ex, const pp_conv2d_desc *d, const float *dy,
                                      const float *w, float *dx, pp_error *err);
    pp_status (*conv2d_backward_filter)(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                        const float *dy, float *dw, pp_error *err);
    /* (optional) bytes of workspace the largest training pass of a convolution of d asks
     * an exec of a device opened now for (defaults to 0: chosen at run time) */
    size_t (*conv2d_workspace)(const pp_conv2d_desc *d);
    /* dx += conv_transpose(dy, w): the sum backward_data then accumulate give (the
     * CPU backend's bit for bit) */
    pp_status (*conv2d_backward_data_accumulate)(pp_exec *ex, const pp_conv2d_desc *d,
                                                 const float *dy, const float *w, float *dx,
                                                 pp_error *err);

    pp_status (*batchnorm_forward_train)(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                         const float *gamma, const float *beta,
                                         float *running_mean, float *running_var, float *y,
                                         float *save_mean, float *save_invstd, pp_error *err);
    pp_status (*batchnorm_forward_infer)(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                         const float *gamma, const float *beta,
                                         const float *running_mean, const float *running_var,
                                         float *y, pp_error *err);
    pp_status (*batchnorm_backward)(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                    const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_invstd, float *dx, float *dgamma,
                                    float *dbeta, pp_error *err);

    pp_status (*relu_forward)(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err);
    pp_status (*relu_backward)(pp_exec *ex, int64_t n, const float *y, const float *dy, float *dx,
                               pp_error *err);
    pp_status (*sigmoid_forward)(pp_exec *ex, int64_t n, const float *x, float *y,
                                 pp_error *err);
    pp_status (*sigmoid_backward)(pp_exec *ex, int64_t n, const float *y, const float *dy,
                                  float *dx, pp_error *err);
    pp_status (*add)(pp_exec *ex, int64_t n, const float *a, const float *b, float *y,
                     pp_error *err);
    pp_status (*accumulate)(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err);
    /* y += f32(bf16(x)): x rounded to bf16 (pp_bf16_from_f32's bits), then added: what
     * bf16_from_f32, f32_from_bf16 and accumulate give, in one pass (mixed precision's
     * parameter gradients, ops_adapt.h's pp_ops_low_end); NULL: those three */
    pp_status (*accumulate_bf16)(pp_exec *ex, int64_t n, const float *x, float *y,
                                 pp_error *err);
    pp_status (*add_relu)(pp_exec *ex, int64_t n, const float *a, const float *b, float *y,
                          pp_error *err);
    /* stream-ordered copies between host memory and the device (the host memory
     * must stay valid until the exec's work up to here has run) */
    pp_status (*copy_from_host_async)(pp_exec *ex, void *dst, const void *src, size_t bytes,
                                      pp_error *err);
    pp_status (*copy_to_host_async)(pp_exec *ex, void *dst, const void *src, size_t bytes,
                                    pp_error *err);
    /* bytes-level copy and zero within the device */
    pp_status (*copy)(pp_exec *ex, size_t bytes, const void *src, void *dst, pp_error *err);
    pp_status (*zero)(pp_exec *ex, size_t bytes, void *dst, pp_error *err);
    /* optional: count buffers of bytes[i] bytes at once; NULL: the caller
     * runs zero per buffer */
    pp_status (*zero_multi)(pp_exec *ex, int count, void *const *dst, const size_t *bytes,
                            pp_error *err);

    /* y = x rounded to bf16 (nearest, ties to even; NaN quiet), and back
     * (exact); n elements, y may not alias x */
    pp_status (*bf16_from_f32)(pp_exec *ex, int64_t n, const float *x, uint16_t *y,
                               pp_error *err);
    pp_status (*f32_from_bf16)(pp_exec *ex, int64_t n, const uint16_t *x, float *y,
                               pp_error *err);

    pp_status (*maxpool_forward)(pp_exec *ex, const pp_pool_desc *d, const float *x, float *y,
                                 int32_t *idx, pp_error *err);
    pp_status (*maxpool_backward)(pp_exec *ex, const pp_pool_desc *d, const float *x,
                                  const float *y, const float *dy, const int32_t *idx, float *dx,
                                  pp_error *err);
    /* x (n*c planes of hw elements) -> y (n*c) */
    pp_status (*avgpool_forward)(pp_exec *ex, int64_t planes, int64_t hw, const float *x, float *y,
                                 pp_error *err);
    pp_status (*avgpool_backward)(pp_exec *ex, int64_t planes, int64_t hw, const float *dy,
                                  float *dx, pp_error *err);

    /* window average pool (count_include_pad): x (n,c,h,w) -> y (n,c,p,q) */
    pp_status (*avgpool2d_forward)(pp_exec *ex, const pp_pool_desc *d, const float *x, float *y,
                                   pp_error *err);
    pp_status (*avgpool2d_backward)(pp_exec *ex, const pp_pool_desc *d, const float *dy,
                                    float *dx, pp_error *err);
    /* y (n, c, hw) += b (c); db (c) += sum over n and hw of dy */
    pp_status (*channel_bias_forward)(pp_exec *ex, int64_t n, int64_t c, int64_t hw,
                                      const float *b, float *y, pp_error *err);
    pp_status (*channel_bias_backward)(pp_exec *ex, int64_t n, int64_t c, int64_t hw,
                                       const float *dy, float *db, pp_error *err);

    /* x (n,in), w (out,in), b (out), y (n,out) */
    pp_status (*linear_forward)(pp_exec *ex, int n, int in, int out, const float *x,
                                const float *w, const float *b, float *y, pp_error *err);
    /* dx may be NULL */
    pp_status (*linear_backward)(pp_exec *ex, int n, int in, int out, const float *x,
                                 const float *w, const float *dy, float *dx, float *dw, float *db,
                                 pp_error *err);
    /* linear_backward's halves: dx = dy w; dw += dy^T x, db += sum dy (each with the
     * bits of linear_backward's part) */
    pp_status (*linear_backward_data)(pp_exec *ex, int n, int in, int out, const float *w,
                                      const float *dy, float *dx, pp_error *err);
    pp_status (*linear_backward_weights)(pp_exec *ex, int n, int in, int out, const float *x,
                                         const float *dy, float *dw, float *db, pp_error *err);

    /* pp_softmax_xent_ex; correct_k NULL when not asked for */
    pp_status (*softmax_xent)(pp_exec *ex, const pp_xent_desc *d, int n, int classes,
                              const float *logits, const int32_t *labels, float *loss,
                              int32_t *correct, int32_t *correct_k, float *dlogits,
                              pp_error *err);
    /* (optional) softmax_xent on bf16 logits with a bf16 gradient (bit
     * patterns, uint16_t; dlogits may be logits): the f32 entry's arithmetic
     * on the logits widened exactly, each gradient element rounded once
     * (nearest, ties to even) as it is stored; loss and counts as the f32
     * entry's. NULL: bf16 logits are PP_ERR_UNSUPPORTED */
    pp_status (*softmax_xent_bf16)(pp_exec *ex, const pp_xent_desc *d, int n, int classes,
                                   const uint16_t *logits, const int32_t *labels, float *loss,
                                   int32_t *correct, int32_t *correct_k, uint16_t *dlogits,
                                   pp_error *err);

    pp_status (*sgd_update)(pp_exec *ex, const pp_sgd_desc *d, int64_t n, float *param,
                            const float *grad, float *momentum_buf, pp_error *err);
    /* optional: count tensors of sizes[i] elements at once (buf[i] NULL when momentum
     * is 0); NULL: the caller runs sgd_update per tensor */
    pp_status (*sgd_update_multi)(pp_exec *ex, const pp_sgd_desc *d, int count,
                                  float *const *param, const float *const *grad,
                                  float *const *buf, const int64_t *sizes, pp_error *err);

    /* the training recipe (ops.h): count tensors of sizes[i] elements each */
    pp_status (*adamw_update_multi)(pp_exec *ex, const pp_adamw_scalars *s, int count,
                                    float *const *param, const float *const *grad,
                                    float *const *exp_avg, float *const *exp_avg_sq,
                                    const int64_t *sizes, pp_error *err);
    pp_status (*sumsq_multi)(pp_exec *ex, int count, const float *const *x,
                             const int64_t *sizes, double *sums, pp_error *err);
    pp_status (*scale_multi)(pp_exec *ex, float s, int count, float *const *x,
                             const int64_t *sizes, pp_error *err);
    /* layer i: c[i] channels, hw[i] values per channel and sample, slots[i] (m or more
     * rows of 2 x c[i]), running_mean[i] and running_var[i] (c[i]) */
    pp_status (*bn_stats_combine)(pp_exec *ex, const pp_bn_stats_desc *d, int count,
                                  const int *c, const int64_t *hw, float *const *slots,
                                  float *const *running_mean, float *const *running_var,
                                  pp_error *err);

    pp_status (*delay)(pp_exec *ex, double ms, pp_error *err);

    /* transformer ops (ops.h), f32; optional: NULL in a backend that has none
     * (the op is then PP_ERR_UNSUPPORTED). rows: the product of the leading
     * dimensions; w_out_in: the weight is (out, in), else (in, out); b, beta,
     * db and dbeta may be NULL */
    pp_status (*dense_forward)(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                               const float *x, const float *w, const float *b, float *y,
                               pp_error *err);
    pp_status (*dense_backward_data)(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                     const float *w, const float *dy, float *dx, pp_error *err);
    pp_status (*dense_backward_weights)(pp_exec *ex, int64_t rows, int in, int out,
                                        bool w_out_in, const float *x, const float *dy,
                                        float *dw, float *db, pp_error *err);
    /* f32 dense_backward_data then dense_backward_weights (with db) in one call, for a
     * backend that shares work between them (CUDA: one copy of a dy whose pitch its
     * GEMMs pad); the same results. PP_ERR_UNSUPPORTED, nothing written, where it has
     * nothing to share: the caller runs the two entries. NULL: always those. */
    pp_status (*dense_backward)(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                const float *w, const float *x, const float *dy, float *dx,
                                float *dw, float *db, pp_error *err);
    /* (optional) the dense layer with its GELU, h = x W + b, g = GELU(h), and
     * the data gradient through a GELU, dh = (dy W^T) GELU'(h) (ops.h); NULL,
     * or PP_ERR_UNSUPPORTED having enqueued nothing: the caller runs the
     * dense and GELU entries one after the other */
    pp_status (*dense_gelu_forward)(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                    const float *x, const float *w, const float *b, float *h,
                                    float *g, pp_error *err);
    pp_status (*dense_backward_data_gelu)(pp_exec *ex, int64_t rows, int in, int out,
                                          bool w_out_in, const float *w, const float *dy,
                                          const float *h, float *dh, pp_error *err);
    pp_status (*layernorm_forward)(pp_exec *ex, int64_t rows, int c, float eps, const float *x,
                                   const float *gamma, const float *beta, float *y, float *mean,
                                   float *rstd, pp_error *err);
    pp_status (*layernorm_backward)(pp_exec *ex, int64_t rows, int c, const float *x,
                                    const float *dy, const float *gamma, const float *mean,
                                    const float *rstd, float *dx, float *dgamma, float *dbeta,
                                    pp_error *err);
    /* (optional) the layer norm with the residual add before it (s = a + b
     * written, then y from s) and its backward with a residual gradient added
     * (dx = through the norm + dres) (ops.h); NULL, or PP_ERR_UNSUPPORTED
     * having enqueued nothing: the caller composes add / accumulate and the
     * plain entries */
    pp_status (*add_layernorm_forward)(pp_exec *ex, int64_t rows, int c, float eps,
                                       const float *a, const float *b, const float *gamma,
                                       const float *beta, float *s, float *y, float *mean,
                                       float *rstd, pp_error *err);
    pp_status (*layernorm_backward_add)(pp_exec *ex, int64_t rows, int c, const float *x,
                                        const float *dy, const float *gamma, const float *mean,
                                        const float *rstd, const float *dres, float *dx,
                                        float *dgamma, float *dbeta, pp_error *err);
    pp_status (*gelu_forward)(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err);
    pp_status (*gelu_backward)(pp_exec *ex, int64_t n, const float *x, const float *dy,
                               float *dx, pp_error *err);
    pp_status (*attention_forward)(pp_exec *ex, const pp_attention_desc *d, const float *qkv,
                                   float *y, float *lse, pp_error *err);
    pp_status (*attention_backward)(pp_exec *ex, const pp_attention_desc *d, const float *qkv,
                                    const float *y, const float *lse, const float *dy,
                                    float *dqkv, pp_error *err);
    /* (optional) the attention entries in bf16: qkv, y, dy, dqkv bf16 bits
     * (uint16_t), lse f32, shapes as above; f32 arithmetic inside, each bf16
     * output rounded once from its f32 value. Within bf16 rounding of what
     * the f32 entries give on the widened operands (the fallback, which
     * also runs where these are NULL or return PP_ERR_UNSUPPORTED having
     * enqueued nothing). lse is the natural log-sum-exp of the scaled
     * scores as above, whichever algorithm the backend runs. */
    pp_status (*attention_forward_bf16)(pp_exec *ex, const pp_attention_desc *d,
                                        const uint16_t *qkv, uint16_t *y, float *lse,
                                        pp_error *err);
    pp_status (*attention_backward_bf16)(pp_exec *ex, const pp_attention_desc *d,
                                         const uint16_t *qkv, const uint16_t *y,
                                         const float *lse, const uint16_t *dy, uint16_t *dqkv,
                                         pp_error *err);
    /* (optional) y = x * the mask of d (pp_dropout_forward): x and y (y may be
     * x) hold n samples of per_sample values each. NULL: the backend has no
     * dropout, and its attention entries ignore d->drop (the op refuses
     * p > 0 before it dispatches); else its attention entries, the bf16
     * ones too, draw d->drop's masks (ops.h: pp_attention_forward_dropout) */
    pp_status (*dropout)(pp_exec *ex, const pp_dropout_desc *d, int64_t n, int64_t per_sample,
                         const float *x, float *y, pp_error *err);
    /* ids (rows) already checked to lie in [0, vocab) */
    pp_status (*embedding_forward)(pp_exec *ex, int64_t rows, int vocab, int c,
                                   const int32_t *ids, const float *table, float *y,
                                   pp_error *err);
    pp_status (*embedding_backward)(pp_exec *ex, int64_t rows, int vocab, int c,
                                    const int32_t *ids, const float *dy, float *dtable,
                                    pp_error *err);
    /* x, y (n, t, c); table (>= t, c) */
    pp_status (*position_forward)(pp_exec *ex, int64_t n, int t, int c, const float *x,
                                  const float *table, float *y, pp_error *err);
    pp_status (*position_backward)(pp_exec *ex, int64_t n, int t, int c, const float *dy,
                                   float *dtable, pp_error *err);

    /* ---- bf16 transformer entries (optional) ----
     * The transformer ops above with activations of mixed dtypes (pp_act: each
     * bf16 or f32, at least one bf16), run natively. Each must give what
     * ops_transformer.c's stand-ins give from the f32 entries: every input
     * widened exactly, the f32 entry's arithmetic, each bf16 output the f32
     * result rounded once (nearest, ties to even), within the rounding of the
     * f32 accumulation order; an op the stand-ins compose (an add then a
     * layer norm, a layer norm's gradient then the residual's accumulate)
     * rounds each step's bf16 output as they do. Parameters, statistics and
     * parameter gradients stay f32. Returns PP_ERR_UNSUPPORTED, having
     * enqueued nothing, for a combination it does not run (the stand-ins
     * then run); NULL: always the stand-ins. */
    /* dense_forward (b may be NULL) and dense_gelu_forward (h = x W + b kept, g = GELU(h)) */
    pp_status (*dense_forward_bf16)(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                    pp_act x, pp_act w, const float *b, pp_act y, pp_error *err);
    pp_status (*dense_gelu_forward_bf16)(pp_exec *ex, int64_t rows, int in, int out,
                                         bool w_out_in, pp_act x, pp_act w, const float *b,
                                         pp_act h, pp_act g, pp_error *err);
    /* dx = dy W^T, and dh = (dy W^T) GELU'(h) */
    pp_status (*dense_backward_data_bf16)(pp_exec *ex, int64_t rows, int in, int out,
                                          bool w_out_in, pp_act w, pp_act dy, pp_act dx,
                                          pp_error *err);
    pp_status (*dense_backward_data_gelu_bf16)(pp_exec *ex, int64_t rows, int in, int out,
                                               bool w_out_in, pp_act w, pp_act dy, pp_act h,
                                               pp_act dh, pp_error *err);
    /* dw += dy^T x (or x^T dy) in f32, db += the column sums of dy (f32, may be NULL);
     * ops_transformer.c hands a zeroed f32 dw of this call alone, which it
     * rounds to bf16 and adds to the master gradient (torch.autocast's) */
    pp_status (*dense_backward_weights_bf16)(pp_exec *ex, int64_t rows, int in, int out,
                                             bool w_out_in, pp_act x, pp_act dy, float *dw,
                                             float *db, pp_error *err);
    /* a dense layer's whole backward (pp_dense_backward): dense_backward_data_bf16
     * into dx (dx.data NULL: none), or with h (h.data not NULL)
     * dense_backward_data_gelu_bf16 into dx, then dense_backward_weights_bf16
     * (dw as there), the same bits as those entries one after the other, an
     * f32 dy rounded once for both GEMMs. Declines where either would: having
     * written nothing, or dx alone where the weight GEMM is refused after the
     * data GEMM ran (the caller then runs the separate ops, which write dx
     * again with the same bits) */
    pp_status (*dense_backward_bf16)(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                     pp_act w, pp_act x, pp_act dy, pp_act h, pp_act dx,
                                     float *dw, float *db, pp_error *err);
    /* the layer norm of a (add.data NULL), or of s = a + add written first (a,
     * add and s of one dtype); y, mean and rstd as layernorm_forward */
    pp_status (*layernorm_forward_bf16)(pp_exec *ex, int64_t rows, int c, float eps, pp_act a,
                                        pp_act add, pp_act s, const float *gamma,
                                        const float *beta, pp_act y, float *mean, float *rstd,
                                        pp_error *err);
    /* layernorm_backward; with dres (data not NULL, dx's dtype) dx = the
     * norm's gradient rounded as dx, then dres added (layernorm_backward_add) */
    pp_status (*layernorm_backward_bf16)(pp_exec *ex, int64_t rows, int c, pp_act x, pp_act dy,
                                         const float *gamma, const float *mean,
                                         const float *rstd, pp_act dres, pp_act dx,
                                         float *dgamma, float *dbeta, pp_error *err);
    pp_status (*gelu_forward_bf16)(pp_exec *ex, int64_t n, pp_act x, pp_act y, pp_error *err);
    pp_status (*gelu_backward_bf16)(pp_exec *ex, int64_t n, pp_act x, pp_act dy, pp_act dx,
                                    pp_error *err);
    /* ---- end of the bf16 transformer entries ---- */

    /* Layout change of a 4-D tensor as n batched matrix transposes: each of the n
     * rows x cols matrices of x (elements of elem bytes, 2 or 4) is written
     * transposed to y (NCHW -> NHWC: rows C, cols H*W; NHWC -> NCHW: rows H*W,
     * cols C). y may not alias x. */
    pp_status (*transpose)(pp_exec *ex, int64_t n, int64_t rows, int64_t cols, size_t elem,
                           const void *x, void *y, pp_error *err);

    /* optional: runs op on its operands as they are when they are not all f32
     * NCHW (bf16 data, NHWC layouts); desc is the op's descriptor (pp_conv2d_desc,
     * pp_bn_desc, pp_pool_desc) or NULL. The result must equal, within the
     * rounding of the f32 accumulation order, what ops.c's fallback (ops_adapt.c)
     * gives: every operand converted to an f32 NCHW stand-in, the f32 entry
     * above, each output rounded (bf16) and laid out back. Returns PP_ERR_UNSUPPORTED,
     * having enqueued nothing, for a combination it does not run natively (the
     * fallback then runs); NULL: always the fallback. */
    pp_status (*native)(pp_exec *ex, pp_native_op op, const void *desc, pp_tensor *const *t,
                        pp_error *err);

    /* optional: starts or stops the range an external profiler collects (CUDA:
     * cudaProfilerStart/Stop, which `ncu --profile-from-start off` and
     * `nsys --capture-range=cudaProfilerApi` follow); process-wide. NULL: no
     * profiler to drive (a no-op) */
    pp_status (*profiler)(pp_device_ctx *dev, bool start, pp_error *err);

    /* (optional) the device's free and total memory as its driver reports them (CUDA:
     * cudaMemGetInfo); none on the CPU, which has no memory of its own */
    pp_status (*mem_info)(pp_device_ctx *dev, size_t *free_bytes, size_t *total_bytes,
                          pp_error *err);
} pp_backend_ops;

/* The CPU backend (runtime/cpu). Never NULL. */
const pp_backend_ops *pp_backend_cpu(void);
/* The CUDA backend (runtime/cuda), or NULL when built without CUDA. */
const pp_backend_ops *pp_backend_cuda(void);
/* Number of visible CUDA devices as the CUDA backend sees them (0 without it). */
int pp_backend_cuda_device_count(void);

#endif
