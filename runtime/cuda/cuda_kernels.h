/*
 * cuda_kernels.h - launchers of the backend's own CUDA kernels (cuda_kernels.cu).
 *
 * Each launcher enqueues its kernel on stream (on the calling thread's current
 * device) and returns cudaGetLastError(), to be checked with PP_CUDA. Shapes
 * and contracts are those of runtime/core/ops.h; pointers are device memory.
 * grid is the number of blocks for grid-stride kernels (pp_cuda_grid).
 */
#ifndef PP_CUDA_KERNELS_H
#define PP_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PP_CUDA_BLOCK 256

/* The elementwise ops, y[i] = op(a[i], b[i]) over n elements (b unused by
 * the unary ops); y may alias a or b. */
typedef enum pp_cuda_ew_kind {
    PP_CUDA_EW_RELU,          /* y = max(a, 0) */
    PP_CUDA_EW_RELU_BACKWARD, /* y = a > 0 ? b : 0 (a: the forward output, b: its gradient) */
    PP_CUDA_EW_ADD,           /* y = a + b (accumulate: a = x, b = y) */
    PP_CUDA_EW_ADD_RELU,      /* y = max(a + b, 0), the sum rounded first as pp_add does */
} pp_cuda_ew_kind;

/* One launch of at most max_grid blocks. When a, b and y are 16-byte aligned,
 * the kernel moves float4s (n / 4 of them, then the n % 4 last elements one
 * by one); otherwise single floats. Each element is computed alone and the
 * same way on both paths, so results do not depend on which runs. */
cudaError_t pp_cuda_launch_elementwise(cudaStream_t s, unsigned max_grid, pp_cuda_ew_kind kind,
                                       int64_t n, const float *a, const float *b, float *y);
/* y (rows, cols) += b (cols) broadcast over rows */
cudaError_t pp_cuda_launch_bias_add(cudaStream_t s, unsigned grid, int64_t rows, int64_t cols,
                                    const float *b, float *y);
/* db (cols) += sum over rows of dy (rows, cols), rows summed in order */
cudaError_t pp_cuda_launch_bias_backward(cudaStream_t s, int64_t rows, int64_t cols,
                                         const float *dy, float *db);
/* y[p] = mean of x[p*hw .. p*hw+hw) */
cudaError_t pp_cuda_launch_avgpool_forward(cudaStream_t s, int64_t planes, int64_t hw,
                                           const float *x, float *y);
/* dx[i] = dy[i / hw] / hw */
cudaError_t pp_cuda_launch_avgpool_backward(cudaStream_t s, unsigned grid, int64_t planes,
                                            int64_t hw, const float *dy, float *dx);
/* Softmax cross-entropy. row_loss (n doubles) and row_correct (n ints) are
 * scratch; loss/correct get the in-order sums (correct = -1 if a label was
 * outside [0, classes)). */
cudaError_t pp_cuda_launch_softmax_xent(cudaStream_t s, int n, int classes, const float *logits,
                                        const int32_t *labels, float divisor, double *row_loss,
                                        int32_t *row_correct, float *loss, int32_t *correct,
                                        float *dlogits);
/* torch.optim.SGD on n elements (see pp_sgd_update); momentum_buf NULL when
 * momentum == 0. */
/* The tensors of one multi-tensor SGD launch, passed by value as the kernel's
 * parameter (no host-to-device upload, so the launch can be captured in a CUDA
 * graph); 64 tensors keep it at 2 KiB, under every toolchain's parameter limit. */
#define PP_CUDA_SGD_MULTI 64
typedef struct pp_cuda_sgd_list {
    float *param[PP_CUDA_SGD_MULTI];
    const float *grad[PP_CUDA_SGD_MULTI];
    float *buf[PP_CUDA_SGD_MULTI]; /* NULL entries when momentum is 0 */
    int64_t n[PP_CUDA_SGD_MULTI];
} pp_cuda_sgd_list;

/* torch.optim.SGD on count (<= PP_CUDA_SGD_MULTI) tensors in one launch: a
 * grid of grid_x x count blocks, blockIdx.y picks the tensor; the arithmetic
 * of pp_cuda_launch_sgd. */
cudaError_t pp_cuda_launch_sgd_multi(cudaStream_t s, unsigned grid_x, int count,
                                     const pp_cuda_sgd_list *list, float lr, float momentum,
                                     float weight_decay, int nesterov, int first_step);

cudaError_t pp_cuda_launch_sgd(cudaStream_t s, unsigned grid, int64_t n, float lr, float momentum,
                               float weight_decay, int nesterov, int first_step, float *param,
                               const float *grad, float *momentum_buf);
/* Occupies the stream for ns nanoseconds of GPU time (one thread spinning on
 * %globaltimer). */
cudaError_t pp_cuda_launch_delay(cudaStream_t s, uint64_t ns);

#ifdef __cplusplus
}
#endif

#endif
