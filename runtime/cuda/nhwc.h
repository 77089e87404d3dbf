/*
 * nhwc.h - launchers of the kernels on bf16 operands and NHWC layouts
 * (nhwc.cu; batch norm: bn_nhwc.h), for the backend's native entry (native.c).
 *
 * As kernels.h: each enqueues on stream and returns cudaGetLastError().
 * bf16 data are raw 16-bit patterns; "rows" of an NHWC tensor are its
 * N * H * W positions of C channels each.
 */
#ifndef PP_CUDA_NHWC_H
#define PP_CUDA_NHWC_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* n batched transposes of rows x cols matrices of elem-byte (2 or 4) elements */
cudaError_t pp_cuda_launch_transpose(cudaStream_t s, int64_t n, int64_t rows, int64_t cols,
                                     size_t elem, const void *x, void *y);

typedef enum pp_cuda_bf16_ew {
    PP_CUDA_BF16_RELU,          /* y = max(a, 0) */
    PP_CUDA_BF16_RELU_BACKWARD, /* y = a > 0 ? b : 0 */
    PP_CUDA_BF16_ADD,           /* y = a + b (accumulate: a = x, b = y) */
    PP_CUDA_BF16_ADD_RELU,      /* y = max(a + b, 0) */
} pp_cuda_bf16_ew;

/* y[i] = op(a[i], b[i]) computed in f32 and rounded once; y may alias a or b */
cudaError_t pp_cuda_launch_bf16_elementwise(cudaStream_t s, unsigned max_grid,
                                            pp_cuda_bf16_ew kind, int64_t n, const uint16_t *a,
                                            const uint16_t *b, uint16_t *y);

/* Max pooling over bf16 NHWC; idx (n, p, q, c order, like y) holds h * W + w. */
typedef struct pp_cuda_pool_geom4 {
    int n, c, h, w, p, q, kernel, stride, pad;
} pp_cuda_pool_geom4;
cudaError_t pp_cuda_launch_maxpool_nhwc(cudaStream_t s, unsigned max_grid, pp_cuda_pool_geom4 g,
                                        const uint16_t *x, uint16_t *y, int32_t *idx);
cudaError_t pp_cuda_launch_maxpool_backward_nhwc(cudaStream_t s, unsigned max_grid,
                                                 pp_cuda_pool_geom4 g, const uint16_t *dy,
                                                 const int32_t *idx, uint16_t *dx);

/* Global average pooling of bf16 NHWC x (n, hw, c) into y (n, c), bf16 or f32,
 * and back */
cudaError_t pp_cuda_launch_gap_nhwc(cudaStream_t s, unsigned max_grid, int64_t n, int c,
                                    int64_t hw, const uint16_t *x, void *y, bool y_bf16);
cudaError_t pp_cuda_launch_gap_backward_nhwc(cudaStream_t s, unsigned max_grid, int64_t n, int c,
                                             int64_t hw, const void *dy, bool dy_bf16,
                                             uint16_t *dx);

/* Convolution helpers: y (rows, cp) = x (rows, c) padded with zero channels
 * (cp >= c: the stem's 3 input channels widened for tensor-core engines);
 * dw (K, C, R*S; f32, the master gradient's order) += a bf16 weight gradient
 * laid out (K, R*S, cp), its first c channels. */
cudaError_t pp_cuda_launch_pad_channels(cudaStream_t s, unsigned max_grid, int64_t rows, int c,
                                        int cp, const uint16_t *x, uint16_t *y);
cudaError_t pp_cuda_launch_wgrad_add(cudaStream_t s, unsigned max_grid, int k, int c, int rs,
                                     int cp, const uint16_t *low, float *dw);

#ifdef __cplusplus
}
#endif

#endif
