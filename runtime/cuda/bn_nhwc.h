/*
 * bn_nhwc.h - launchers of the batch norm over bf16 NHWC activations
 * (bn_nhwc.cu), for the backend's native entry (native.c).
 *
 * As kernels.h: each enqueues on stream and returns cudaGetLastError().
 * bf16 data are raw 16-bit patterns; "rows" are the N * H * W positions of
 * C channels each.
 */
#ifndef PP_CUDA_BN_NHWC_H
#define PP_CUDA_BN_NHWC_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Floats of device scratch the launches below need for rows x c. */
size_t pp_cuda_bn_scratch_floats(int64_t rows, int c);

/* Batch norm over bf16 NHWC x (rows x c): the contracts of ops.h, with
 * pp_batchnorm_forward_act's add (NULL: none) and relu, and
 * pp_batchnorm_backward_relu's relu_y (NULL: plain backward), with
 * pp_batchnorm_backward_add_relu's g (NULL: not kept; g may be dy) */
cudaError_t pp_cuda_launch_bn_train_nhwc(cudaStream_t s, unsigned max_grid, int64_t rows, int c,
                                         float eps, float momentum, const uint16_t *x,
                                         const float *gamma, const float *beta,
                                         float *running_mean, float *running_var,
                                         const uint16_t *add, bool relu, uint16_t *y,
                                         float *save_mean, float *save_invstd, float *scratch);
cudaError_t pp_cuda_launch_bn_infer_nhwc(cudaStream_t s, unsigned max_grid, int64_t rows, int c,
                                         float eps, const uint16_t *x, const float *gamma,
                                         const float *beta, const float *running_mean,
                                         const float *running_var, const uint16_t *add,
                                         bool relu, uint16_t *y, float *scratch);
cudaError_t pp_cuda_launch_bn_backward_nhwc(cudaStream_t s, unsigned max_grid, int64_t rows,
                                            int c, const uint16_t *x, const uint16_t *dy,
                                            const uint16_t *relu_y, const float *gamma,
                                            const float *save_mean, const float *save_invstd,
                                            uint16_t *dx, float *dgamma, float *dbeta,
                                            uint16_t *g, float *scratch);

#ifdef __cplusplus
}
#endif

#endif
