/*
 * kernels.h - the CPU backend's kernels (f32, NCHW), one forward/backward
 * pair per op. Arguments are already checked (ops.c); contracts are those of
 * runtime/core/ops.h: outputs and activation gradients are overwritten,
 * parameter gradients accumulate (+=). Each runs synchronously on the calling
 * thread and may use ex's workspace. GEMMs go through OpenBLAS cblas_sgemm.
 */
#ifndef PP_CPU_KERNELS_H
#define PP_CPU_KERNELS_H

#include "runtime/core/backend.h"

pp_status pp_cpu_conv2d_forward(pp_exec *ex, const pp_conv2d_desc *d, const float *x, const float *w, float *y, pp_error *err);
pp_status pp_cpu_conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d, const float *dy, const float *w, float *dx, pp_error *err);
pp_status pp_cpu_conv2d_backward_data_accumulate(pp_exec *ex, const pp_conv2d_desc *d, const float *dy, const float *w, float *dx, pp_error *err);
pp_status pp_cpu_conv2d_backward_filter(pp_exec *ex, const pp_conv2d_desc *d, const float *x, const float *dy, float *dw, pp_error *err);
/* Bytes of workspace the largest of a convolution's forward, backward-data
 * (accumulating) and backward-filter passes asks its exec for on a device of
 * `threads` workers: the same sizing the kernels use. */
size_t pp_cpu_conv2d_workspace_bytes(const pp_conv2d_desc *d, int threads);
pp_status pp_cpu_batchnorm_forward_train(pp_exec *ex, const pp_bn_desc *d, const float *x, const float *gamma, const float *beta, float *running_mean, float *running_var, float *y, float *save_mean, float *save_invstd, pp_error *err);
pp_status pp_cpu_batchnorm_forward_infer(pp_exec *ex, const pp_bn_desc *d, const float *x, const float *gamma, const float *beta, const float *running_mean, const float *running_var, float *y, pp_error *err);
pp_status pp_cpu_batchnorm_backward(pp_exec *ex, const pp_bn_desc *d, const float *x, const float *dy, const float *gamma, const float *save_mean, const float *save_invstd, float *dx, float *dgamma, float *dbeta, pp_error *err);
pp_status pp_cpu_relu_forward(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err);
pp_status pp_cpu_relu_backward(pp_exec *ex, int64_t n, const float *y, const float *dy, float *dx, pp_error *err);
pp_status pp_cpu_sigmoid_forward(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err);
pp_status pp_cpu_sigmoid_backward(pp_exec *ex, int64_t n, const float *y, const float *dy, float *dx, pp_error *err);
pp_status pp_cpu_add(pp_exec *ex, int64_t n, const float *a, const float *b, float *y, pp_error *err);
pp_status pp_cpu_accumulate(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err);
pp_status pp_cpu_accumulate_bf16(pp_exec *ex, int64_t n, const float *x, float *y,
                                 pp_error *err);
pp_status pp_cpu_add_relu(pp_exec *ex, int64_t n, const float *a, const float *b, float *y, pp_error *err);
pp_status pp_cpu_bf16_from_f32(pp_exec *ex, int64_t n, const float *x, uint16_t *y, pp_error *err);
pp_status pp_cpu_f32_from_bf16(pp_exec *ex, int64_t n, const uint16_t *x, float *y, pp_error *err);
pp_status pp_cpu_transpose(pp_exec *ex, int64_t n, int64_t rows, int64_t cols, size_t elem,
                           const void *x, void *y, pp_error *err);
pp_status pp_cpu_maxpool_forward(pp_exec *ex, const pp_pool_desc *d, const float *x, float *y, int32_t *idx, pp_error *err);
pp_status pp_cpu_maxpool_backward(pp_exec *ex, const pp_pool_desc *d, const float *x, const float *y, const float *dy, const int32_t *idx, float *dx, pp_error *err);
pp_status pp_cpu_avgpool_forward(pp_exec *ex, int64_t planes, int64_t hw, const float *x, float *y, pp_error *err);
pp_status pp_cpu_avgpool_backward(pp_exec *ex, int64_t planes, int64_t hw, const float *dy, float *dx, pp_error *err);
pp_status pp_cpu_avgpool2d_forward(pp_exec *ex, const pp_pool_desc *d, const float *x, float *y, pp_error *err);
pp_status pp_cpu_avgpool2d_backward(pp_exec *ex, const pp_pool_desc *d, const float *dy, float *dx, pp_error *err);
pp_status pp_cpu_channel_bias_forward(pp_exec *ex, int64_t n, int64_t c, int64_t hw, const float *b, float *y, pp_error *err);
pp_status pp_cpu_channel_bias_backward(pp_exec *ex, int64_t n, int64_t c, int64_t hw, const float *dy, float *db, pp_error *err);
pp_status pp_cpu_linear_forward(pp_exec *ex, int n, int in, int out, const float *x, const float *w, const float *b, float *y, pp_error *err);
pp_status pp_cpu_linear_backward(pp_exec *ex, int n, int in, int out, const float *x, const float *w, const float *dy, float *dx, float *dw, float *db, pp_error *err);
pp_status pp_cpu_linear_backward_data(pp_exec *ex, int n, int in, int out, const float *w, const float *dy, float *dx, pp_error *err);
pp_status pp_cpu_linear_backward_weights(pp_exec *ex, int n, int in, int out, const float *x, const float *dy, float *dw, float *db, pp_error *err);
pp_status pp_cpu_softmax_xent(pp_exec *ex, const pp_xent_desc *d, int n, int classes, const float *logits, const int32_t *labels, float *loss, int32_t *correct, int32_t *correct_k, float *dlogits, pp_error *err);
pp_status pp_cpu_softmax_xent_bf16(pp_exec *ex, const pp_xent_desc *d, int n, int classes, const uint16_t *logits, const int32_t *labels, float *loss, int32_t *correct, int32_t *correct_k, uint16_t *dlogits, pp_error *err);
pp_status pp_cpu_dense_forward(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in, const float *x, const float *w, const float *b, float *y, pp_error *err);
pp_status pp_cpu_dense_backward_data(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in, const float *w, const float *dy, float *dx, pp_error *err);
pp_status pp_cpu_dense_backward_weights(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in, const float *x, const float *dy, float *dw, float *db, pp_error *err);
pp_status pp_cpu_layernorm_forward(pp_exec *ex, int64_t rows, int c, float eps, const float *x, const float *gamma, const float *beta, float *y, float *mean, float *rstd, pp_error *err);
pp_status pp_cpu_layernorm_backward(pp_exec *ex, int64_t rows, int c, const float *x, const float *dy, const float *gamma, const float *mean, const float *rstd, float *dx, float *dgamma, float *dbeta, pp_error *err);
pp_status pp_cpu_gelu_forward(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err);
pp_status pp_cpu_gelu_backward(pp_exec *ex, int64_t n, const float *x, const float *dy, float *dx, pp_error *err);
pp_status pp_cpu_attention_forward(pp_exec *ex, const pp_attention_desc *d, const float *qkv, float *y, float *lse, pp_error *err);
pp_status pp_cpu_attention_backward(pp_exec *ex, const pp_attention_desc *d, const float *qkv, const float *y, const float *lse, const float *dy, float *dqkv, pp_error *err);
pp_status pp_cpu_dropout(pp_exec *ex, const pp_dropout_desc *d, int64_t n, int64_t per_sample, const float *x, float *y, pp_error *err);
/* *out = *d with the key drawn from d's step in memory where it has one (and
 * no step): PP_ERR_INTERNAL naming op where that key is not d->key. */
pp_status pp_cpu_dropout_resolve(const pp_dropout_desc *d, const char *op, pp_dropout_desc *out, pp_error *err);
pp_status pp_cpu_embedding_forward(pp_exec *ex, int64_t rows, int vocab, int c, const int32_t *ids, const float *table, float *y, pp_error *err);
pp_status pp_cpu_embedding_backward(pp_exec *ex, int64_t rows, int vocab, int c, const int32_t *ids, const float *dy, float *dtable, pp_error *err);
pp_status pp_cpu_position_forward(pp_exec *ex, int64_t n, int t, int c, const float *x, const float *table, float *y, pp_error *err);
pp_status pp_cpu_position_backward(pp_exec *ex, int64_t n, int t, int c, const float *dy, float *dtable, pp_error *err);
pp_status pp_cpu_sgd_update(pp_exec *ex, const pp_sgd_desc *d, int64_t n, float *param, const float *grad, float *momentum_buf, pp_error *err);
/* the training recipe (adamw.c, grad_norm.c, bn_stats.c) */
pp_status pp_cpu_adamw_update_multi(pp_exec *ex, const pp_adamw_scalars *s, int count, float *const *param, const float *const *grad, float *const *exp_avg, float *const *exp_avg_sq, const int64_t *sizes, pp_error *err);
pp_status pp_cpu_sumsq_multi(pp_exec *ex, int count, const float *const *x, const int64_t *sizes, double *sums, pp_error *err);
pp_status pp_cpu_scale_multi(pp_exec *ex, float s, int count, float *const *x, const int64_t *sizes, pp_error *err);
pp_status pp_cpu_bn_stats_combine(pp_exec *ex, const pp_bn_stats_desc *d, int count, const int *c, const int64_t *hw, float *const *slots, float *const *running_mean, float *const *running_var, pp_error *err);

#endif
