/*
 * ops.h - the checked op API models compute with.
 *
 * Each op is a forward/backward pair taking an exec (device + stream), a small
 * descriptor with explicit dimensions, and tensors. These functions check
 * dtypes, shapes and devices at the boundary, return PP_ERR_INVALID with a
 * message on mismatch, then dispatch to the exec's backend (runtime/cpu or
 * runtime/cuda), which trusts its arguments.
 *
 * Contracts (all ops):
 *   - f32 NCHW tensors, contiguous; every tensor on ex->dev.
 *   - Layouts: a 4-D activation (and the bf16 copy of a convolution's
 *     weights) may be NHWC instead (tensor.h); the result is the same as for
 *     NCHW operands, laid out as the outputs are. The elementwise ops need
 *     every operand in one layout; parameters, their gradients and the
 *     optimizer's tensors are NCHW. Backends run such operands natively or
 *     ops.c converts them (backend.h, native).
 *   - bf16 mixed precision: activations, their gradients and the weights of
 *     convolutions and linear layers may be BF16 instead (x, y, dx, dy, w,
 *     and the elementwise ops' operands); parameter gradients (dw, db,
 *     dgamma, dbeta), batch-norm parameters and statistics, biases, logits,
 *     the loss and the optimizer's tensors are always F32. Arithmetic is f32
 *     on the exact values of bf16 inputs (sums accumulate in f32), and a bf16
 *     output is the f32 result rounded to nearest, ties to even. A tensor
 *     checked "like" another must have its dtype too.
 *   - Outputs and activation gradients are overwritten (=).
 *   - Parameter gradients (dw, dgamma, dbeta, db) are accumulated (+=), so
 *     micro-batch gradients sum in the order backward is called. Each call
 *     computes its gradient g on its own and adds it once: the result is
 *     grad + g whatever grad held (on the CPU backend bit for bit), so a
 *     gradient computed into a zeroed tensor and added later with
 *     pp_accumulate gives the same bits as the call on grad itself (what
 *     lets micro-batches' weight gradients computed out of order be summed
 *     in order). On CUDA, within the rounding of the library's blend.
 *   - Work runs in ex's stream order; on CUDA the call returns before the work
 *     is done.
 */
#ifndef PP_OPS_H
#define PP_OPS_H

#include <stdbool.h>

#include "dropout.h"
#include "exec.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- descriptors -------------------------------------------------------- */

typedef struct pp_conv2d_desc {
    int n, c, h, w;        /* input  (N, C, H, W) */
    int k, r, s;           /* filter (K, C, R, S): K outputs, R x S kernel */
    int stride_h, stride_w;
    int pad_h, pad_w;
    int p, q;              /* output (N, K, P, Q), filled by pp_conv2d_desc_init */
} pp_conv2d_desc;

/* Fills d for a square kernel/stride/padding; returns PP_ERR_INVALID if the
 * output would be empty or a dimension is not positive. */
pp_status pp_conv2d_desc_init(pp_conv2d_desc *d, int n, int c, int h, int w, int k, int kernel,
                              int stride, int pad, pp_error *err);

/* Bytes of exec workspace the training passes of a convolution of d (forward,
 * backward data, backward filter) ask a stream of a `kind` device for, the
 * largest of the three, on a device opened now (the CPU backend: its thread
 * count from the environment); 0 where the backend chooses at run time (CUDA)
 * or is not built. For predicting memory before anything runs. */
size_t pp_conv2d_workspace_bytes(pp_device_kind kind, const pp_conv2d_desc *d);

typedef struct pp_bn_desc {
    int n, c, h, w;        /* input (N, C, H, W); statistics per channel over N*H*W */
    float eps;             /* 1e-5 in ResNet */
    float momentum;        /* 0.1: running = (1-momentum)*running + momentum*batch */
} pp_bn_desc;

typedef struct pp_pool_desc {
    int n, c, h, w;        /* input */
    int kernel, stride, pad;
    int p, q;              /* output, filled by pp_pool_desc_init */
} pp_pool_desc;

/* Fills d for a square pooling window; PP_ERR_INVALID for a window larger
 * than the padded input or padding over half the window. */
pp_status pp_pool_desc_init(pp_pool_desc *d, int n, int c, int h, int w, int kernel, int stride,
                            int pad, pp_error *err);

typedef struct pp_sgd_desc {
    float lr, momentum, weight_decay;
    bool nesterov;
    bool first_step;       /* true on the first step: momentum buffer = gradient */
} pp_sgd_desc;

/* ---- convolution (no bias) ---------------------------------------------- */
/* x (N,C,H,W), w (K,C,R,S), y (N,K,P,Q) */
pp_status pp_conv2d_forward(pp_exec *ex, const pp_conv2d_desc *d, const pp_tensor *x,
                            const pp_tensor *w, pp_tensor *y, pp_error *err);
/* dx = conv_transpose(dy, w) */
pp_status pp_conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d, const pp_tensor *dy,
                                  const pp_tensor *w, pp_tensor *dx, pp_error *err);
/* dx += conv_transpose(dy, w): the data gradient added to what dx holds, for
 * a tensor that gathers the gradients of several branches (a residual
 * block's input: let the identity branch's gradient be written into dx
 * first, then the main branch's convolution adds its part, which saves the
 * separate pp_accumulate pass over dx). The same sum as
 * pp_conv2d_backward_data into a temporary, then pp_accumulate into dx (on
 * the CPU backend bit for bit; on CUDA, cuDNN's blend with beta = 1). */
pp_status pp_conv2d_backward_data_accumulate(pp_exec *ex, const pp_conv2d_desc *d,
                                             const pp_tensor *dy, const pp_tensor *w,
                                             pp_tensor *dx, pp_error *err);
/* dw += correlation(x, dy). With bf16 x or dy (mixed precision) the
 * correlation of this call is rounded to bf16 before it is added to the f32
 * dw: the weight gradient tensor-core engines produce, and what
 * torch.autocast's bf16 convolution hands to the f32 parameter. */
pp_status pp_conv2d_backward_filter(pp_exec *ex, const pp_conv2d_desc *d, const pp_tensor *x,
                                    const pp_tensor *dy, pp_tensor *dw, pp_error *err);

/* ---- batch norm ---------------------------------------------------------- */
/* Every batch-norm op refuses (PP_ERR_INVALID, before anything runs) an input
 * with zero values per channel (N*H*W == 0: an empty micro-batch), on every
 * backend; training also one with a single value per channel. */
/* Training: normalises with batch statistics, writes save_mean/save_invstd (C)
 * for backward, and updates running_mean/running_var (C) with momentum, using
 * the unbiased batch variance (N*H*W / (N*H*W - 1)) as PyTorch does. */
pp_status pp_batchnorm_forward_train(pp_exec *ex, const pp_bn_desc *d, const pp_tensor *x,
                                     const pp_tensor *gamma, const pp_tensor *beta,
                                     pp_tensor *running_mean, pp_tensor *running_var,
                                     pp_tensor *y, pp_tensor *save_mean, pp_tensor *save_invstd,
                                     pp_error *err);
/* Inference: normalises with running statistics. */
pp_status pp_batchnorm_forward_infer(pp_exec *ex, const pp_bn_desc *d, const pp_tensor *x,
                                     const pp_tensor *gamma, const pp_tensor *beta,
                                     const pp_tensor *running_mean, const pp_tensor *running_var,
                                     pp_tensor *y, pp_error *err);
/* dx =; dgamma +=; dbeta += (training-mode backward through batch statistics). */
pp_status pp_batchnorm_backward(pp_exec *ex, const pp_bn_desc *d, const pp_tensor *x,
                                const pp_tensor *dy, const pp_tensor *gamma,
                                const pp_tensor *save_mean, const pp_tensor *save_invstd,
                                pp_tensor *dx, pp_tensor *dgamma, pp_tensor *dbeta,
                                pp_error *err);
/* Batch norm with what follows it in a residual block, as one op:
 *   y = relu?(bn(x) [+ add])
 * where bn(x) is first rounded to y's dtype (add may be NULL, relu false):
 * the bits of pp_batchnorm_forward_train (train) or _infer into y, then
 * pp_add_relu, pp_add or pp_relu_forward in place. A backend may run it as
 * one pass over the activations. add has y's dtype, shape and layout. */
pp_status pp_batchnorm_forward_act(pp_exec *ex, const pp_bn_desc *d, bool train,
                                   const pp_tensor *x, const pp_tensor *gamma,
                                   const pp_tensor *beta, pp_tensor *running_mean,
                                   pp_tensor *running_var, const pp_tensor *add, bool relu,
                                   pp_tensor *y, pp_tensor *save_mean, pp_tensor *save_invstd,
                                   pp_error *err);
/* The backward of y = relu(bn(x)) from relu_y (that ReLU's output) and dy
 * (the gradient of relu_y): the bits of pp_relu_backward into a temporary,
 * then pp_batchnorm_backward. */
pp_status pp_batchnorm_backward_relu(pp_exec *ex, const pp_bn_desc *d, const pp_tensor *x,
                                     const pp_tensor *relu_y, const pp_tensor *dy,
                                     const pp_tensor *gamma, const pp_tensor *save_mean,
                                     const pp_tensor *save_invstd, pp_tensor *dx,
                                     pp_tensor *dgamma, pp_tensor *dbeta, pp_error *err);
/* The backward of y = relu(bn(x) + add) (pp_batchnorm_forward_act with an
 * add and the ReLU) from relu_y and dy: as pp_batchnorm_backward_relu, with
 * the ReLU's gradient kept in g (like dy), which is the add's gradient as
 * well as bn(x)'s: the bits of pp_relu_backward(relu_y, dy, g) then
 * pp_batchnorm_backward from g. g may be dy. */
pp_status pp_batchnorm_backward_add_relu(pp_exec *ex, const pp_bn_desc *d, const pp_tensor *x,
                                         const pp_tensor *relu_y, const pp_tensor *dy,
                                         const pp_tensor *gamma, const pp_tensor *save_mean,
                                         const pp_tensor *save_invstd, pp_tensor *dx,
                                         pp_tensor *dgamma, pp_tensor *dbeta, pp_tensor *g,
                                         pp_error *err);

/* ---- elementwise ---------------------------------------------------------- */
/* y = max(x, 0); y may be x. */
pp_status pp_relu_forward(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err);
/* dx = dy where y > 0 else 0; dx may be dy. */
pp_status pp_relu_backward(pp_exec *ex, const pp_tensor *y, const pp_tensor *dy, pp_tensor *dx,
                           pp_error *err);
/* y = 1 / (1 + exp(-x)); y may be x. */
pp_status pp_sigmoid_forward(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err);
/* dx = dy * y * (1 - y) from the forward's output y; dx may be dy. */
pp_status pp_sigmoid_backward(pp_exec *ex, const pp_tensor *y, const pp_tensor *dy, pp_tensor *dx,
                              pp_error *err);
/* y = a + b (residual add); y may alias a or b. */
pp_status pp_add(pp_exec *ex, const pp_tensor *a, const pp_tensor *b, pp_tensor *y, pp_error *err);
/* y += x */
pp_status pp_accumulate(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err);
/* y = max(a + b, 0): a residual add and its ReLU in one pass, bit for bit
 * pp_add then pp_relu_forward; y may alias a or b. Its backward is
 * pp_relu_backward(y, dy, g): g = dy where y > 0, the gradient of both a and
 * b (no separate op is needed). */
pp_status pp_add_relu(pp_exec *ex, const pp_tensor *a, const pp_tensor *b, pp_tensor *y,
                      pp_error *err);
/* y = x (same device); with another layout than x's, laid out anew */
pp_status pp_copy(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err);
/* y = the first pp_tensor_bytes(y) bytes at host src, in ex's stream order
 * (src must stay unchanged until the exec's work up to here has run: after
 * its stream or exec is synchronised). With page-locked memory from
 * pp_device_host_alloc the CUDA copy runs without the host waiting. */
pp_status pp_copy_from_host(pp_exec *ex, const void *src, pp_tensor *y, pp_error *err);
/* host dst = x's bytes, in ex's stream order: dst holds them once the exec's
 * work up to here has run (read it after synchronising). */
pp_status pp_copy_to_host(pp_exec *ex, const pp_tensor *x, void *dst, pp_error *err);
/* y = 0 */
pp_status pp_zero(pp_exec *ex, pp_tensor *y, pp_error *err);
/* y = x converted between F32 and BF16 (same shape; rounded to nearest,
 * ties to even, towards BF16; exact towards F32; a copy for equal dtypes),
 * and between the layouts of x and y. */
pp_status pp_cast(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err);
/* ys[i] = 0 for n tensors of any dtype on ex's device (CUDA: one launch per
 * 192 tensors instead of one memset each); each is checked as by pp_zero. */
pp_status pp_zero_multi(pp_exec *ex, int n, pp_tensor *const *ys, pp_error *err);

/* ---- pooling ----------------------------------------------------------------- */
/* Max pool; idx (I32, same shape as y, laid out like y) receives the flat
 * h*W+w argmax within each input plane (first maximum wins, as PyTorch). The
 * CUDA backend may leave idx unused and recompute from x and y in backward. */
pp_status pp_maxpool_forward(pp_exec *ex, const pp_pool_desc *d, const pp_tensor *x, pp_tensor *y,
                             pp_tensor *idx, pp_error *err);
/* dx = scatter of dy to the argmax positions (dx fully overwritten). */
pp_status pp_maxpool_backward(pp_exec *ex, const pp_pool_desc *d, const pp_tensor *x,
                              const pp_tensor *y, const pp_tensor *dy, const pp_tensor *idx,
                              pp_tensor *dx, pp_error *err);
/* Adaptive average pool to 1x1: x (N,C,H,W) -> y (N,C). */
pp_status pp_avgpool_forward(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err);
/* dy (N,C) -> dx (N,C,H,W), each element dy/(H*W). */
pp_status pp_avgpool_backward(pp_exec *ex, const pp_tensor *dy, pp_tensor *dx, pp_error *err);

/* Average pool over square windows (torch.nn.AvgPool2d, ceil_mode false,
 * count_include_pad true): y = sum of the window's inputs / the window's size
 * clipped to the padded input (padded positions count as zeros). */
pp_status pp_avgpool2d_forward(pp_exec *ex, const pp_pool_desc *d, const pp_tensor *x,
                               pp_tensor *y, pp_error *err);
/* dx = each window's dy / its size, summed over the windows covering each
 * input (dx fully overwritten). */
pp_status pp_avgpool2d_backward(pp_exec *ex, const pp_pool_desc *d, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err);

/* ---- per-channel bias (a convolution's bias) ---------------------------------- */
/* y (N,C,H,W) += b (C) broadcast over N, H, W. */
pp_status pp_channel_bias_forward(pp_exec *ex, const pp_tensor *b, pp_tensor *y, pp_error *err);
/* db (C) += sum over N, H, W of dy (N,C,H,W). */
pp_status pp_channel_bias_backward(pp_exec *ex, const pp_tensor *dy, pp_tensor *db,
                                   pp_error *err);

/* ---- linear ----------------------------------------------------------------- */
/* x (N,IN), w (OUT,IN), b (OUT), y (N,OUT): y = x w^T + b */
pp_status pp_linear_forward(pp_exec *ex, const pp_tensor *x, const pp_tensor *w,
                            const pp_tensor *b, pp_tensor *y, pp_error *err);
/* dx = dy w (skipped if dx is NULL); dw += dy^T x; db += sum_n dy */
pp_status pp_linear_backward(pp_exec *ex, const pp_tensor *x, const pp_tensor *w,
                             const pp_tensor *dy, pp_tensor *dx, pp_tensor *dw, pp_tensor *db,
                             pp_error *err);
/* The two halves of pp_linear_backward, for a backward split into its input
 * part and its weight part; each gives the bits of that part of
 * pp_linear_backward. _data: dx = dy w. _weights: dw += dy^T x; db += sum_n dy
 * (no w needed). */
pp_status pp_linear_backward_data(pp_exec *ex, const pp_tensor *w, const pp_tensor *dy,
                                  pp_tensor *dx, pp_error *err);
pp_status pp_linear_backward_weights(pp_exec *ex, const pp_tensor *x, const pp_tensor *dy,
                                     pp_tensor *dw, pp_tensor *db, pp_error *err);

/* ---- loss ----------------------------------------------------------------- */
/* Softmax cross-entropy over logits (N,CLASSES) with labels (I32, N).
 * loss (F32, scalar) = sum_n -log softmax(logits_n)[label_n] / divisor;
 * correct (I32, scalar) = number of n whose argmax equals the label;
 * dlogits (N,CLASSES) = (softmax - onehot) / divisor. loss and correct live on
 * ex->dev. A label outside [0, CLASSES) is PP_ERR_INPUT (checked on the host
 * for CPU; the CUDA kernel clamps and reports through correct = -1).
 * Logits and dlogits F32, or both BF16 (pp_softmax_xent_ex). */
pp_status pp_softmax_xent(pp_exec *ex, const pp_tensor *logits, const pp_tensor *labels,
                          float divisor, pp_tensor *loss, pp_tensor *correct, pp_tensor *dlogits,
                          pp_error *err);

/* ---- optimizer ------------------------------------------------------------- */
/* torch.optim.SGD on one parameter tensor (dampening 0):
 *   g = grad + weight_decay * param
 *   if momentum != 0: buf = first_step ? g : momentum * buf + g
 *                     g = nesterov ? g + momentum * buf : buf
 *   param -= lr * g
 * momentum_buf may be NULL when momentum == 0. grad is not modified. Every
 * product and sum is rounded on its own (no fused multiply-add), in this
 * order, so the CPU and CUDA backends give the same bits. */
pp_status pp_sgd_update(pp_exec *ex, const pp_sgd_desc *d, pp_tensor *param, const pp_tensor *grad,
                        pp_tensor *momentum_buf, pp_error *err);

/* pp_sgd_update over n parameter tensors of one device at once (CUDA: one
 * kernel launch per 96 tensors instead of one per tensor): params[i],
 * grads[i] and (momentum != 0) bufs[i] as for pp_sgd_update, all with the
 * same descriptor; each tensor is checked as there. Results are identical to
 * n calls of pp_sgd_update. bufs may be NULL when momentum == 0. */
pp_status pp_sgd_update_multi(pp_exec *ex, const pp_sgd_desc *d, int n, pp_tensor *const *params,
                              const pp_tensor *const *grads, pp_tensor *const *bufs,
                              pp_error *err);

/* ---- transformer ops (GPT-2) ------------------------------------------------ */
/* Every operand contiguous (row-major). Activations, their gradients and
 * the dense layers' weights may be BF16 (mixed precision, as above: an F32
 * y of a dense layer from BF16 x and w is the logits' case); parameter
 * gradients, layer norms' parameters and statistics, biases, embedding
 * tables and lse are F32; a layer norm's y and dy may differ in dtype from
 * its x (an F32 residual stream normalised into BF16). A "rows" tensor (..., C) is
 * any tensor of rank 2 or 3 whose last dimension is C: its leading
 * dimensions together are its R rows ((N, T, C): N*T rows of C features).
 * A backend without these ops refuses them with PP_ERR_UNSUPPORTED before
 * anything runs (the CPU and CUDA backends have them all). Each op's result
 * does not depend on the number of threads a CPU device has; on CUDA the
 * same inputs give the same bits run to run (no float atomics), within f32
 * rounding of the CPU's (the dense layers in TF32 where the device's math
 * mode is PP_MATH_TF32). */

/* How a dense layer's weight is laid out. */
typedef enum pp_weight_order {
    PP_WEIGHT_IN_OUT = 0, /* (in, out): Hugging Face's Conv1D (GPT-2's c_attn, c_proj, c_fc) */
    PP_WEIGHT_OUT_IN = 1, /* (out, in): torch.nn.Linear's, and a tied output head's (the token
                             embedding (V, C) as the weight of logits = x E^T) */
} pp_weight_order;

/* y (..., out) = x (..., in) W + b, W laid out as order says; b (out) may be
 * NULL (no bias). y has x's leading dimensions. */
pp_status pp_dense_forward(pp_exec *ex, pp_weight_order order, const pp_tensor *x,
                           const pp_tensor *w, const pp_tensor *b, pp_tensor *y, pp_error *err);
/* dx (..., in) = dy (..., out) W^T */
pp_status pp_dense_backward_data(pp_exec *ex, pp_weight_order order, const pp_tensor *w,
                                 const pp_tensor *dy, pp_tensor *dx, pp_error *err);
/* dw += x^T dy (laid out as order says); db (out, may be NULL) += the column
 * sums of dy (in double, in row order). */
pp_status pp_dense_backward_weights(pp_exec *ex, pp_weight_order order, const pp_tensor *x,
                                    const pp_tensor *dy, pp_tensor *dw, pp_tensor *db,
                                    pp_error *err);
/* A dense layer and the GELU after it as one op (a transformer's MLP): h
 * (..., out) = x W + b, kept for the backward, and g = GELU(h) (shaped like
 * h): the bits of pp_dense_forward into h then pp_gelu_forward(h, g), which
 * is what runs where the backend has no fused entry or declines the shape.
 * (CUDA: one GEMM with the GELU in its epilogue, within its rounding.) */
pp_status pp_dense_gelu_forward(pp_exec *ex, pp_weight_order order, const pp_tensor *x,
                                const pp_tensor *w, const pp_tensor *b, pp_tensor *h,
                                pp_tensor *g, pp_error *err);
/* The data gradient of a dense layer whose input was GELU(h), taken back
 * through the GELU: dh (..., in) = (dy W^T) GELU'(h): the bits of
 * pp_dense_backward_data into dh then pp_gelu_backward(h, dh, dh) where the
 * backend has no fused entry or declines. (CUDA: the GELU's derivative in
 * the GEMM's epilogue.) */
pp_status pp_dense_backward_data_gelu(pp_exec *ex, pp_weight_order order, const pp_tensor *w,
                                      const pp_tensor *dy, const pp_tensor *h, pp_tensor *dh,
                                      pp_error *err);
/* A dense layer's whole backward in one call: dx (..., in) = dy W^T, or
 * with h (the pre-activation of the layer's input x = GELU(h), shaped like
 * x) dx = (dy W^T) GELU'(h); then dw += x^T dy and db += the column sums of
 * dy as pp_dense_backward_weights. dx may be NULL (no data gradient; then h
 * must be NULL too), db may be NULL; w and dw have the same shape. The bits of
 * pp_dense_backward_data (pp_dense_backward_data_gelu with h) then
 * pp_dense_backward_weights, which is what runs where the backend has no
 * combined entry or declines. (CUDA, bf16 x and W with an f32 dy: dy rounded
 * to bf16 once for both GEMMs, where the separate ops round it once each.) */
pp_status pp_dense_backward(pp_exec *ex, pp_weight_order order, const pp_tensor *w,
                            const pp_tensor *x, const pp_tensor *dy, const pp_tensor *h,
                            pp_tensor *dx, pp_tensor *dw, pp_tensor *db, pp_error *err);

/* Layer normalisation over the last dimension C of x (..., C) (torch.nn.LayerNorm):
 * y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps) with the
 * biased variance; beta (C) may be NULL (no bias). Each row's statistics are
 * computed in double and kept for the backward: mean and rstd (R), f32. */
pp_status pp_layernorm_forward(pp_exec *ex, float eps, const pp_tensor *x, const pp_tensor *gamma,
                               const pp_tensor *beta, pp_tensor *y, pp_tensor *mean,
                               pp_tensor *rstd, pp_error *err);
/* dx = the gradient of x (=); dgamma += and dbeta (may be NULL) += the
 * parameters' gradients, each summed over the rows in double in row order. */
pp_status pp_layernorm_backward(pp_exec *ex, const pp_tensor *x, const pp_tensor *dy,
                                const pp_tensor *gamma, const pp_tensor *mean,
                                const pp_tensor *rstd, pp_tensor *dx, pp_tensor *dgamma,
                                pp_tensor *dbeta, pp_error *err);

/* A residual add and the layer norm after it (a transformer block's second
 * norm): s = a + b, written (the residual stream, (..., C) like a), and y =
 * the layer norm of s as pp_layernorm_forward gives it (mean, rstd kept):
 * the bits of pp_add(a, b, s) then pp_layernorm_forward(s, ...), which is
 * what runs where the backend has no fused entry. s may alias a or b. */
pp_status pp_add_layernorm_forward(pp_exec *ex, float eps, const pp_tensor *a,
                                   const pp_tensor *b, const pp_tensor *gamma,
                                   const pp_tensor *beta, pp_tensor *s, pp_tensor *y,
                                   pp_tensor *mean, pp_tensor *rstd, pp_error *err);
/* The layer norm's backward with a residual branch's gradient added: dx =
 * the gradient through the norm + dres (dgamma, dbeta as
 * pp_layernorm_backward): the bits of pp_layernorm_backward into dx then
 * pp_accumulate(dres, dx), which is what runs where the backend has no fused
 * entry. dres has x's shape and may not alias dx. */
pp_status pp_layernorm_backward_add(pp_exec *ex, const pp_tensor *x, const pp_tensor *dy,
                                    const pp_tensor *gamma, const pp_tensor *mean,
                                    const pp_tensor *rstd, const pp_tensor *dres,
                                    pp_tensor *dx, pp_tensor *dgamma, pp_tensor *dbeta,
                                    pp_error *err);

/* GELU, tanh approximation (GPT-2's; torch's gelu(approximate="tanh")):
 * y = x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), any shape; y may be x. */
pp_status pp_gelu_forward(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err);
/* dx = dy * gelu'(x), from the forward's input x; dx may be dy. */
pp_status pp_gelu_backward(pp_exec *ex, const pp_tensor *x, const pp_tensor *dy, pp_tensor *dx,
                           pp_error *err);

/* Causal multi-head self-attention from the output of a qkv projection, as
 * GPT-2 computes it: qkv (N, T, 3C) holds q, k and v side by side (columns
 * [0, C), [C, 2C), [2C, 3C)), each split into `heads` heads of C / heads
 * columns. y (N, T, C) = per head softmax(q k^T / sqrt(C / heads), masked to
 * keys at or before the query) v, the heads side by side. lse (N, heads, T)
 * receives each query row's log-sum-exp of its scaled scores: the backward
 * computes the probabilities again from it, so no (T, T) matrix is kept
 * between the two (the backward's scratch holds a block of rows of one head
 * at a time). */
pp_status pp_attention_forward(pp_exec *ex, int heads, const pp_tensor *qkv, pp_tensor *y,
                               pp_tensor *lse, pp_error *err);
/* The forward for the queries of positions q0..T-1 alone (0 <= q0 < T),
 * each over the keys of positions 0 up to its own: y (N, T - q0, C) and lse
 * (N, heads, T - q0) are the rows q0.. of pp_attention_forward's, within
 * rounding (the products are of other shapes). For generation with a cache
 * of keys and values: qkv holds the cached rows of the earlier positions and
 * the new ones after them. Inference only (no dropout, no backward). */
pp_status pp_attention_forward_from(pp_exec *ex, int heads, int q0, const pp_tensor *qkv,
                                    pp_tensor *y, pp_tensor *lse, pp_error *err);
/* dqkv (N, T, 3C) = the gradient of qkv (=) from dy (N, T, C), the forward's
 * qkv, output y and lse. */
pp_status pp_attention_backward(pp_exec *ex, int heads, const pp_tensor *qkv, const pp_tensor *y,
                                const pp_tensor *lse, const pp_tensor *dy, pp_tensor *dqkv,
                                pp_error *err);

/* The same with dropout on the probabilities (drop NULL or drop->p == 0:
 * the ops above, the same bits): y = (P * M) v, where M of (sample n, head h,
 * query i, key j) is pp_dropout_factor(drop->key, drop->first_sample + n,
 * (h T + i) T + j, ...) (dropout.h), drawn from the hash in both passes and
 * never stored; lse stays that of the undropped softmax. The backward takes
 * the forward's drop and y. A backend without pp_dropout_forward's entry
 * gets PP_ERR_UNSUPPORTED for p > 0. */
pp_status pp_attention_forward_dropout(pp_exec *ex, int heads, const pp_dropout_desc *drop,
                                       const pp_tensor *qkv, pp_tensor *y, pp_tensor *lse,
                                       pp_error *err);
pp_status pp_attention_backward_dropout(pp_exec *ex, int heads, const pp_dropout_desc *drop,
                                        const pp_tensor *qkv, const pp_tensor *y,
                                        const pp_tensor *lse, const pp_tensor *dy,
                                        pp_tensor *dqkv, pp_error *err);

/* Inverted dropout (torch's semantics): y = x * M with M of element i of
 * sample n (x's dimension 0) pp_dropout_factor(d->key, d->first_sample + n,
 * i, ...): 1 / (1 - p) where kept, 0 where dropped (dropout.h). Any shape
 * (N, ...), F32 or BF16; y may be x. d->p == 0: y = x. */
pp_status pp_dropout_forward(pp_exec *ex, const pp_dropout_desc *d, const pp_tensor *x,
                             pp_tensor *y, pp_error *err);
/* dx = dy * M with the forward's mask (the same d); dx may be dy. */
pp_status pp_dropout_backward(pp_exec *ex, const pp_dropout_desc *d, const pp_tensor *dy,
                              pp_tensor *dx, pp_error *err);

/* Token embedding: y (N, T, C) = the rows of table (V, C) that the token ids
 * (I32, (N, T)) name. An id outside [0, V) is PP_ERR_INPUT where the host
 * can read the ids (a CPU device: checked before anything is written:
 * "token id 300 at (2, 17) is not below the vocabulary size 256"); a CUDA
 * device's kernels read the nearest row instead, and the backward skips the
 * id (token data is checked when it is read: runtime/io/tokens.c). */
pp_status pp_embedding_forward(pp_exec *ex, const pp_tensor *ids, const pp_tensor *table,
                               pp_tensor *y, pp_error *err);
/* dtable += the scatter of dy's rows to the rows of their ids: each table
 * row gets the sum, in double and in the order of the positions, of the
 * rows of its id, added once (no race, whatever the thread count). */
pp_status pp_embedding_backward(pp_exec *ex, const pp_tensor *ids, const pp_tensor *dy,
                                pp_tensor *dtable, pp_error *err);
/* Position embedding: y (N, T, C) = x + table[t] for position t (table (P, C),
 * P >= T); y may be x. */
pp_status pp_position_forward(pp_exec *ex, const pp_tensor *x, const pp_tensor *table,
                              pp_tensor *y, pp_error *err);
/* dtable[t] += sum over n of dy[n, t] (in double, in sample order) for t < T. */
pp_status pp_position_backward(pp_exec *ex, const pp_tensor *dy, pp_tensor *dtable,
                               pp_error *err);
/* ---- the training recipe (ops_train.c): the smoothed loss with top-k, AdamW,
 * gradient norms and scaling, deferred batch-norm statistics ------------------- */

typedef struct pp_xent_desc {
    float divisor;         /* > 0: the loss and its gradient are row sums / divisor */
    float label_smoothing; /* eps in [0, 1): torch.nn.CrossEntropyLoss(label_smoothing) */
    int top_k;             /* >= 1 where correct_k is asked for */
} pp_xent_desc;

/* pp_softmax_xent with label smoothing eps and a top-k count, over logits
 * (N,CLASSES) and labels (I32, N); lse_n = log sum_j exp z_nj:
 *   loss     = sum_n [(1 - eps) (lse_n - z_n,label) + eps (lse_n - sum_j z_nj / CLASSES)]
 *              / divisor
 *   dlogits  = (softmax - (1 - eps) onehot(label) - eps / CLASSES) / divisor
 *   correct  = rows whose first maximum is the label (pp_softmax_xent's)
 *   correct_k (I32 scalar, or NULL) = rows whose label ranks below top_k: fewer
 *              than top_k classes j have z_j > z_label or z_j == z_label with
 *              j < label (ties to the lower index, as the argmax; top_k 1
 *              counts what correct counts), torchvision's top-k accuracy.
 * Computed in double per row and rounded once; with eps = 0 the loss, correct
 * and dlogits are pp_softmax_xent's bits. The CPU and CUDA backends differ
 * within the rounding of the row sums' order. Labels as pp_softmax_xent's.
 * Logits F32, or BF16 (a mixed-precision language model's head, as
 * torch.autocast's: cross-entropy widens): dlogits then BF16 too (it may be
 * logits), the bits of the f32 op on the logits widened exactly with each
 * gradient element rounded once to bf16 (nearest, ties to even); loss and
 * counts those of the f32 op on the widened logits. */
pp_status pp_softmax_xent_ex(pp_exec *ex, const pp_xent_desc *d, const pp_tensor *logits,
                             const pp_tensor *labels, pp_tensor *loss, pp_tensor *correct,
                             pp_tensor *correct_k, pp_tensor *dlogits, pp_error *err);

typedef struct pp_adamw_desc {
    double lr;             /* >= 0 */
    double beta1, beta2;   /* in [0, 1) */
    double eps;            /* >= 0 */
    double weight_decay;   /* >= 0, decoupled: the parameter shrinks by lr * weight_decay */
    int64_t step;          /* the step being taken, >= 1 (bias corrections 1 - beta^step) */
    float grad_scale;      /* > 0: every gradient is multiplied by it first (clipping's
                            * coefficient); 1 for none */
} pp_adamw_desc;

/* torch.optim.AdamW (amsgrad false, maximize false) on n parameter tensors
 * of one device: params[i], grads[i] and the state exp_avgs[i] (m) and
 * exp_avg_sqs[i] (v), all F32 of one shape, zeros before the first step.
 * The scalars are computed on the host in double, as torch.optim.AdamW's
 * Python does, and rounded to float once:
 *   decay = 1 - lr * weight_decay, b1 = beta1, c1 = 1 - beta1, b2 = beta2,
 *   c2 = 1 - beta2, bc2 = sqrt(1 - beta2^step), step_size = lr / (1 - beta1^step)
 * then per element, each product, quotient, square root and sum rounded on
 * its own (no fused multiply-add), in this order:
 *   p = p * decay; g = grad * grad_scale
 *   m = m * b1 + c1 * g;  v = v * b2 + (c2 * g) * g
 *   p = p - step_size * (m / (sqrt(v) / bc2 + eps))
 * so the CPU and CUDA backends give the same bits (CUDA: one launch per 80
 * tensors). grads are not modified. */
pp_status pp_adamw_update_multi(pp_exec *ex, const pp_adamw_desc *d, int n,
                                pp_tensor *const *params, const pp_tensor *const *grads,
                                pp_tensor *const *exp_avgs, pp_tensor *const *exp_avg_sqs,
                                pp_error *err);

/* The order of pp_sumsq_multi's sums: a tensor is cut in tiles of
 * PP_SUMSQ_TILE elements (the last one shorter); in a tile, lane l of
 * PP_SUMSQ_LANES adds the squares of elements l, l + LANES, l + 2 LANES, ...
 * in order, then the lanes are added as a tree (lane l += lane l + o for o =
 * LANES/2, LANES/4, ..., 1); the tiles' sums are added in order. */
#define PP_SUMSQ_TILE 4096
#define PP_SUMSQ_LANES 256

/* sums[i] = sum of squares of xs[i]'s elements (F32, any shape; 0 when
 * empty), each square exact in double and every sum a double in the order
 * above, so that every backend gives the same bits. sums is host memory (n
 * doubles) written in ex's stream order: read it after synchronising ex. */
pp_status pp_sumsq_multi(pp_exec *ex, int n, const pp_tensor *const *xs, double *sums,
                         pp_error *err);

/* xs[i] *= s for n F32 tensors of ex's device (CUDA: one launch per 192). */
pp_status pp_scale_multi(pp_exec *ex, float s, int n, pp_tensor *const *xs, pp_error *err);

typedef struct pp_bn_stats_desc {
    int m;                 /* micro-batches of the step, >= 1 */
    const int *sizes;      /* (m) their samples, > 0 (host memory) */
    float momentum;        /* running = (1 - momentum) * running + momentum * batch */
} pp_bn_stats_desc;

/* Deferred batch-norm statistics (torchgpipe's DeferredBatchNorm): each
 * micro-batch's training forward ran with momentum 1 into its row of a
 * layer's slots (F32, (M, 2, C), M >= m), whose rows were zero: row (k, 0)
 * holds micro-batch k's mean, row (k, 1) its unbiased variance, over its
 * sizes[k] * hw[i] values per channel. For each of the n layers this
 * combines them in micro-batch order, in double, into the statistics of
 * the whole mini-batch (N = sum of the counts):
 *   mean = sum_k n_k mean_k / N
 *   var  = sum_k [(n_k - 1) var_k + n_k (mean_k - mean)^2] / (N - 1)
 * updates running_mean[i] and running_var[i] (F32, (C)) once, as a training
 * forward over the whole mini-batch would ((1 - momentum) * running +
 * momentum * statistic, in double, rounded once), and zeroes rows 0..m-1 of
 * the slots for the next step. Both backends give the same bits. */
pp_status pp_batchnorm_stats_combine(pp_exec *ex, const pp_bn_stats_desc *d, int n,
                                     const int64_t *hw, pp_tensor *const *slots,
                                     pp_tensor *const *running_mean,
                                     pp_tensor *const *running_var, pp_error *err);

/* ---- misc ------------------------------------------------------------------- */
/* Busy-waits or sleeps for ms milliseconds in stream order (delay model). */
pp_status pp_delay(pp_exec *ex, double ms, pp_error *err);

#ifdef __cplusplus
}
#endif

#endif
