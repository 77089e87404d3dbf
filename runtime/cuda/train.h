/*
 * train.h - launchers of the training recipe's CUDA kernels (train.cu):
 * AdamW over many tensors, sums of squares and scaling of many tensors
 * (gradient clipping), the deferred batch-norm statistics. Contracts are
 * those of runtime/core/ops.h ("the training recipe"); runtime/cpu's
 * adamw.c, grad_norm.c and bn_stats.c are the reference, and every kernel
 * here gives their bits (no contracted arithmetic, the same order). Each
 * launcher enqueues on stream s and returns cudaGetLastError(); the lists
 * are passed by value as kernel parameters (kernels.h says why), each with
 * what else is passed under 4 KiB.
 */
#ifndef PP_CUDA_TRAIN_H
#define PP_CUDA_TRAIN_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pp_adamw_update_multi's scalars (runtime/core/backend.h's pp_adamw_scalars). */
typedef struct pp_cuda_adamw_args {
    float decay, b1, c1, b2, c2, bc2, step_size, eps, grad_scale;
} pp_cuda_adamw_args;

/* AdamW on up to PP_CUDA_ADAMW_MULTI tensors, tiles of PP_CUDA_MULTI_TILE. */
#define PP_CUDA_ADAMW_MULTI 80
typedef struct pp_cuda_adamw_list {
    float *param[PP_CUDA_ADAMW_MULTI];
    const float *grad[PP_CUDA_ADAMW_MULTI];
    float *exp_avg[PP_CUDA_ADAMW_MULTI];
    float *exp_avg_sq[PP_CUDA_ADAMW_MULTI];
    int64_t n[PP_CUDA_ADAMW_MULTI];          /* elements, > 0 */
    int32_t first_tile[PP_CUDA_ADAMW_MULTI];
    int32_t count, tiles;
} pp_cuda_adamw_list;

/* min(tiles, max_grid) blocks; float4 loads and stores on a tensor whose four
 * pointers are 16-byte aligned, single floats otherwise (the same bits). */
cudaError_t pp_cuda_launch_adamw_multi(cudaStream_t s, unsigned max_grid,
                                       const pp_cuda_adamw_list *list, pp_cuda_adamw_args a);

/* Sums of squares (pp_sumsq_multi) and scaling of up to PP_CUDA_NORM_MULTI
 * tensors; tiles of PP_CUDA_SUMSQ_TILE elements for the sums (the order of
 * runtime/core/ops.h, whose PP_SUMSQ_TILE and PP_SUMSQ_LANES these equal),
 * PP_CUDA_MULTI_TILE for the scaling. */
#define PP_CUDA_NORM_MULTI 160
#define PP_CUDA_SUMSQ_TILE 4096
#define PP_CUDA_SUMSQ_LANES 256
typedef struct pp_cuda_norm_list {
    float *x[PP_CUDA_NORM_MULTI];
    int64_t n[PP_CUDA_NORM_MULTI];           /* elements, > 0 */
    int32_t first_tile[PP_CUDA_NORM_MULTI];
    int32_t count, tiles;
} pp_cuda_norm_list;

/* sums[j] (device) = the sum of squares of list tensor j in ops.h's order:
 * one block of PP_CUDA_SUMSQ_LANES threads per tile writes the tile's sum to
 * part[tile] (list->tiles doubles of device memory), then one thread per
 * tensor adds its tiles in order. */
cudaError_t pp_cuda_launch_sumsq_multi(cudaStream_t s, unsigned max_grid,
                                       const pp_cuda_norm_list *list, double *part,
                                       double *sums);
/* x *= scale on every tensor of the list (tiles of PP_CUDA_MULTI_TILE) */
cudaError_t pp_cuda_launch_scale_multi(cudaStream_t s, unsigned max_grid,
                                       const pp_cuda_norm_list *list, float scale);

/* The deferred batch-norm statistics of up to PP_CUDA_BN_LAYERS layers of
 * one step of up to PP_CUDA_BN_MICRO micro-batches: one thread per channel
 * (runtime/cpu/bn_stats.c's arithmetic in double, each operation rounded
 * on its own), which updates the running statistics and zeroes its slots. */
#define PP_CUDA_BN_LAYERS 32
#define PP_CUDA_BN_MICRO 512
typedef struct pp_cuda_bn_stats_list {
    float *slots[PP_CUDA_BN_LAYERS];         /* (>= m, 2, c) */
    float *running_mean[PP_CUDA_BN_LAYERS];  /* (c) */
    float *running_var[PP_CUDA_BN_LAYERS];
    int64_t hw[PP_CUDA_BN_LAYERS];           /* values per channel and sample */
    int32_t c[PP_CUDA_BN_LAYERS];
    int32_t first_ch[PP_CUDA_BN_LAYERS];     /* channels of the layers before */
    int32_t count, channels;                 /* layers, channels of them all */
    int32_t m;                               /* micro-batches */
    int32_t sizes[PP_CUDA_BN_MICRO];         /* their samples */
    float momentum;
} pp_cuda_bn_stats_list;

cudaError_t pp_cuda_launch_bn_stats(cudaStream_t s, unsigned max_grid,
                                    const pp_cuda_bn_stats_list *list);

#ifdef __cplusplus
}
#endif

#endif
