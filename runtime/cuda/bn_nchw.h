/*
 * bn_nchw.h - launchers of the batch norm over f32 NCHW activations
 * (bn_nchw.cu), for the backend's native entry (native.c): the contracts of
 * ops.h, with pp_batchnorm_forward_act's add (NULL: none) and relu and
 * pp_batchnorm_backward_relu's relu_y (NULL: plain backward) fused in, and
 * pp_batchnorm_backward_add_relu's g (the ReLU's gradient; NULL: not kept;
 * g may be dy).
 *
 * As kernels.h: each enqueues on stream and returns cudaGetLastError().
 * x is (n, c, hw) of f32; scratch holds pp_cuda_bn_nchw_scratch_floats floats
 * of device memory.
 */
#ifndef PP_CUDA_BN_NCHW_H
#define PP_CUDA_BN_NCHW_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

size_t pp_cuda_bn_nchw_scratch_floats(int n, int c);

cudaError_t pp_cuda_launch_bn_train_nchw(cudaStream_t s, int n, int c, int64_t hw, float eps,
                                         float momentum, const float *x, const float *gamma,
                                         const float *beta, float *running_mean,
                                         float *running_var, const float *add, bool relu,
                                         float *y, float *save_mean, float *save_invstd,
                                         float *scratch);
cudaError_t pp_cuda_launch_bn_infer_nchw(cudaStream_t s, int n, int c, int64_t hw, float eps,
                                         const float *x, const float *gamma, const float *beta,
                                         const float *running_mean, const float *running_var,
                                         const float *add, bool relu, float *y, float *scratch);
cudaError_t pp_cuda_launch_bn_backward_nchw(cudaStream_t s, int n, int c, int64_t hw,
                                            const float *x, const float *dy, const float *relu_y,
                                            const float *gamma, const float *save_mean,
                                            const float *save_invstd, float *dx, float *dgamma,
                                            float *dbeta, float *g, float *scratch);

#ifdef __cplusplus
}
#endif

#endif
