/*
 * train_ops.h - the CUDA backend's entries for the training recipe
 * (train_ops.c over train.cu's kernels), as backend.c's table takes them;
 * the contracts are runtime/core/backend.h's.
 */
#ifndef PP_CUDA_TRAIN_OPS_H
#define PP_CUDA_TRAIN_OPS_H

#include "runtime/core/backend.h"

pp_status pp_cuda_adamw_update_multi(pp_exec *ex, const pp_adamw_scalars *s, int count,
                                     float *const *param, const float *const *grad,
                                     float *const *exp_avg, float *const *exp_avg_sq,
                                     const int64_t *sizes, pp_error *err);
pp_status pp_cuda_sumsq_multi(pp_exec *ex, int count, const float *const *x,
                              const int64_t *sizes, double *sums, pp_error *err);
pp_status pp_cuda_scale_multi(pp_exec *ex, float s, int count, float *const *x,
                              const int64_t *sizes, pp_error *err);
pp_status pp_cuda_bn_stats_combine(pp_exec *ex, const pp_bn_stats_desc *d, int count,
                                   const int *c, const int64_t *hw, float *const *slots,
                                   float *const *running_mean, float *const *running_var,
                                   pp_error *err);

#endif
