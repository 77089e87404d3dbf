/*
 * kernels.h - launchers of the backend's own CUDA kernels (kernels.cu;
 * dropout: dropout.cu).
 *
 * Each launcher enqueues its kernel on stream (on the calling thread's current
 * device) and returns cudaGetLastError(), to be checked with PP_CUDA. Shapes
 * and contracts are those of runtime/core/ops.h; pointers are device memory.
 * grid is the number of blocks for grid-stride kernels (pp_cuda_grid).
 */
#ifndef PP_CUDA_KERNELS_H
#define PP_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/dropout.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PP_CUDA_BLOCK 256

/* Whether p (NULL too) is 16-byte aligned: the test of every 16-byte path. */
static inline bool pp_cuda_aligned16(const void *p)
{
    return (uintptr_t)p % 16 == 0;
}

/* Whether the environment variable name is set and not "0", read once into
 * *cache (-1: not read yet; a racing first read stores the same value): the
 * switches that pick a kernel path, such as PP_CUDA_BN_SCALAR. */
bool pp_cuda_env_on(const char *name, int *cache);

/* The elementwise ops, y[i] = op(a[i], b[i]) over n elements (b unused by
 * the unary ops); y may alias a or b. */
typedef enum pp_cuda_ew_kind {
    PP_CUDA_EW_RELU,          /* y = max(a, 0) */
    PP_CUDA_EW_RELU_BACKWARD, /* y = a > 0 ? b : 0 (a: the forward output, b: its gradient) */
    PP_CUDA_EW_SIGMOID,       /* y = 1 / (1 + exp(-a)) */
    PP_CUDA_EW_SIGMOID_BACKWARD, /* y = b * (1 - a) * a (a: the forward output, b: its gradient) */
    PP_CUDA_EW_ADD,           /* y = a + b (accumulate: a = x, b = y) */
    PP_CUDA_EW_ADD_BF16,      /* y = f32(bf16(a)) + b: a rounded to bf16 (pp_bf16_from_f32's
                                 bits) then added (mixed precision's parameter gradients) */
    PP_CUDA_EW_ADD_RELU,      /* y = max(a + b, 0), the sum rounded first as pp_add does */
    PP_CUDA_EW_GELU,          /* y = GELU(a), tanh approximation (runtime/cpu/gelu.c's formula) */
    PP_CUDA_EW_GELU_BACKWARD, /* y = b GELU'(a) (a: the forward's input, b: its gradient) */
} pp_cuda_ew_kind;

/* One launch of at most max_grid blocks. When a, b and y are 16-byte aligned,
 * the kernel moves float4s (n / 4 of them, then the n % 4 last elements one
 * by one); otherwise single floats. Each element is computed alone and the
 * same way on both paths, so results do not depend on which runs. */
cudaError_t pp_cuda_launch_elementwise(cudaStream_t s, unsigned max_grid, pp_cuda_ew_kind kind,
                                       int64_t n, const float *a, const float *b, float *y);
/* y = bf16 of x (nearest, ties to even; NaN quiet: pp_bf16_from_f32's bits) and
 * back (exact), n elements as raw 16-bit patterns */
cudaError_t pp_cuda_launch_bf16_from_f32(cudaStream_t s, unsigned grid, int64_t n, const float *x,
                                         uint16_t *y);
cudaError_t pp_cuda_launch_f32_from_bf16(cudaStream_t s, unsigned grid, int64_t n,
                                         const uint16_t *x, float *y);
/* lines x len elements of es bytes (2 or 4) from src at pitch sld to dst at pitch dld
 * (elements; both at least len): line k's len elements, dst's padding untouched. Pointers
 * aligned to es, pitches any (cuBLASLt's operands at a padded pitch, blaslt.c). */
cudaError_t pp_cuda_launch_copy_pitched(cudaStream_t s, unsigned max_grid, int64_t lines,
                                        int64_t len, size_t es, const void *src, int64_t sld,
                                        void *dst, int64_t dld);
/* The same, padded with zeros: lines x fill elements at pitch dld (fill <= dld), line k's
 * first len (<= fill) elements from src where k < src_lines (<= lines; 0: src not read, may
 * be NULL), every other element 0 (the operands of a GEMM whose extents blaslt.c pads: zero
 * rows and columns add nothing to its sums). dst's elements past fill in each line
 * untouched. */
cudaError_t pp_cuda_launch_copy_padded(cudaStream_t s, unsigned max_grid, int64_t lines,
                                       int64_t len, int64_t src_lines, int64_t fill, size_t es,
                                       const void *src, int64_t sld, void *dst, int64_t dld);
/* y (rows, cols) += b (cols) broadcast over rows */
cudaError_t pp_cuda_launch_bias_add(cudaStream_t s, unsigned grid, int64_t rows, int64_t cols,
                                    const float *b, float *y);
/* db (cols) += sum over rows of dy (rows, cols), rows summed in order */
cudaError_t pp_cuda_launch_bias_backward(cudaStream_t s, int64_t rows, int64_t cols,
                                         const float *dy, float *db);
/* y (n, c, hw) += b (c) */
cudaError_t pp_cuda_launch_channel_bias_add(cudaStream_t s, unsigned grid, int64_t n, int64_t c,
                                           int64_t hw, const float *b, float *y);
/* db (c) += sum over n and hw of dy (n, c, hw); one block per channel, in a
 * fixed order */
cudaError_t pp_cuda_launch_channel_bias_backward(cudaStream_t s, int64_t n, int64_t c, int64_t hw,
                                                 const float *dy, float *db);
/* Window average pooling (count_include_pad) over planes of h x w into p x q. */
typedef struct pp_cuda_pool_geom {
    int planes, h, w, p, q, kernel, stride, pad;
} pp_cuda_pool_geom;
cudaError_t pp_cuda_launch_avgpool2d_forward(cudaStream_t s, unsigned grid, pp_cuda_pool_geom g,
                                             const float *x, float *y);
/* dx fully written: each input gathers the windows covering it */
cudaError_t pp_cuda_launch_avgpool2d_backward(cudaStream_t s, unsigned grid, pp_cuda_pool_geom g,
                                              const float *dy, float *dx);
/* y[p] = mean of x[p*hw .. p*hw+hw) */
cudaError_t pp_cuda_launch_avgpool_forward(cudaStream_t s, int64_t planes, int64_t hw,
                                           const float *x, float *y);
/* dx[i] = dy[i / hw] / hw */
cudaError_t pp_cuda_launch_avgpool_backward(cudaStream_t s, unsigned grid, int64_t planes,
                                            int64_t hw, const float *dy, float *dx);
/* Multi-tensor launches cut their tensors into tiles of PP_CUDA_MULTI_TILE
 * elements (bytes for zeroing); block b takes tiles b, b + gridDim.x, ...
 * and finds a tile's tensor by binary search over first_tile. The tensor list
 * is passed by value as the kernel's parameter (no host-to-device upload, so
 * a launch can be captured in a CUDA graph), and each list stays under 4 KiB
 * with the other parameters, the kernel-parameter limit of every toolchain. */
#define PP_CUDA_MULTI_TILE 4096

/* Appends a tensor of units (elements or bytes) to a multi-tensor list, cut
 * in tiles of tile units: its index in the list. */
static inline int pp_cuda_multi_add(int32_t *first_tile, int32_t *count, int32_t *tiles,
                                    int64_t units, int64_t tile)
{
    const int k = (*count)++;
    first_tile[k] = *tiles;
    *tiles += (int32_t)((units + tile - 1) / tile);
    return k;
}

/* torch.optim.SGD on up to PP_CUDA_SGD_MULTI tensors of one step. */
#define PP_CUDA_SGD_MULTI 96
typedef struct pp_cuda_sgd_list {
    float *param[PP_CUDA_SGD_MULTI];
    const float *grad[PP_CUDA_SGD_MULTI];
    float *buf[PP_CUDA_SGD_MULTI];       /* NULL entries when momentum is 0 */
    int64_t n[PP_CUDA_SGD_MULTI];        /* elements, > 0 */
    int32_t first_tile[PP_CUDA_SGD_MULTI]; /* tiles of the tensors before this one */
    int32_t count, tiles;                /* tensors in the list, tiles in all */
} pp_cuda_sgd_list;

/* Zeroing up to PP_CUDA_ZERO_MULTI buffers of any dtype, in tiles of
 * PP_CUDA_ZERO_TILE_BYTES. */
#define PP_CUDA_ZERO_MULTI 192
#define PP_CUDA_ZERO_TILE_BYTES ((int64_t)4 * PP_CUDA_MULTI_TILE)
typedef struct pp_cuda_zero_list {
    void *ptr[PP_CUDA_ZERO_MULTI];
    int64_t bytes[PP_CUDA_ZERO_MULTI];     /* > 0 */
    int32_t first_tile[PP_CUDA_ZERO_MULTI];
    int32_t count, tiles;
} pp_cuda_zero_list;

/* torch.optim.SGD on n elements (see pp_sgd_update); momentum_buf NULL when
 * momentum == 0. Products and sums are rounded one at a time, never fused
 * into FMAs, in runtime/cpu/sgd.c's order: the results equal the CPU
 * backend's bit for bit. */
cudaError_t pp_cuda_launch_sgd(cudaStream_t s, unsigned grid, int64_t n, float lr, float momentum,
                               float weight_decay, int nesterov, int first_step, float *param,
                               const float *grad, float *momentum_buf);
/* The same step on every tensor of list in one launch of min(tiles, max_grid)
 * blocks: float4 loads and stores on a tensor whose param, grad and buf are
 * 16-byte aligned (its last n % 4 elements one by one), single floats
 * otherwise; the arithmetic of pp_cuda_launch_sgd on both paths. */
cudaError_t pp_cuda_launch_sgd_multi(cudaStream_t s, unsigned max_grid,
                                     const pp_cuda_sgd_list *list, float lr, float momentum,
                                     float weight_decay, int nesterov, int first_step);
/* Zeroes every buffer of list in one launch of min(tiles, max_grid) blocks
 * (16-byte stores between the unaligned head and tail bytes of a tile). */
cudaError_t pp_cuda_launch_zero_multi(cudaStream_t s, unsigned max_grid,
                                      const pp_cuda_zero_list *list);
/* Occupies the stream for ns nanoseconds of GPU time (one thread spinning on
 * %globaltimer). */
cudaError_t pp_cuda_launch_delay(cudaStream_t s, uint64_t ns);

/* Inverted dropout (dropout.cu): y = x * pp_dropout_factor(d.key,
 * d.first_sample + k, i, ...) for element i of sample k, over n samples of
 * per_sample floats (the forward and, with dy and dx, the backward); y may
 * be x; d.p > 0. The CPU's bits. float4s when x and y are 16-byte aligned,
 * else single floats; at most max_grid blocks. */
cudaError_t pp_cuda_launch_dropout(cudaStream_t s, unsigned max_grid, pp_dropout_desc d,
                                   int64_t n, int64_t per_sample, const float *x, float *y);

#ifdef __cplusplus
}
#endif

#endif
