/*
 * attention_bf16.h - causal self-attention on bf16 operands (attention_bf16.cu):
 * the launchers behind the CUDA backend's attention_forward_bf16 /
 * attention_backward_bf16 when cuDNN's fused attention does not run them.
 * Shapes and lse as attention.cu's (transformer.h): qkv (n, t, 3c), y and
 * dy (n, t, c), dqkv (n, t, 3c) as bf16 bits; lse (n, heads, t) f32, the
 * natural log-sum-exp of a query's scaled scores.
 */
#ifndef PP_CUDA_ATTENTION_BF16_H
#define PP_CUDA_ATTENTION_BF16_H

#include <stdint.h>

#include "transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y (bf16, each element rounded once from its f32 value) and lse from qkv:
 * tiles of q, k and v loaded as bf16 into shared memory, products, softmax
 * (online) and the output's sums in f32 on the CUDA cores; no (t, t)
 * matrix in memory; drop's masks on the probabilities as
 * pp_cuda_launch_attention_forward's (NULL or p == 0: none).
 * cudaErrorInvalidValue (nothing enqueued) for a head size above
 * PP_CUDA_ATTENTION_HS_MAX. */
cudaError_t pp_cuda_launch_attention_forward_bf16(cudaStream_t s, pp_cuda_attention_dims d,
                                                  const pp_dropout_desc *drop,
                                                  const uint16_t *qkv, uint16_t *y, float *lse);

/* y's one row (bf16, rounded once) and lse of the last query alone: as
 * pp_cuda_launch_attention_decode (transformer.h). */
cudaError_t pp_cuda_launch_attention_decode_bf16(cudaStream_t s, pp_cuda_attention_dims d,
                                                 const uint16_t *qkv, uint16_t *y, float *lse,
                                                 float *part);

/* dqkv (=, bf16, rounded once) from dy, qkv, y and lse: as
 * pp_cuda_launch_attention_backward (the probabilities again from lse, one
 * pass per block of keys for dk and dv, one per block of queries for dq, no
 * atomics, the same bits whatever the launch order; the forward's drop).
 * delta: n * heads * t floats of scratch. */
cudaError_t pp_cuda_launch_attention_backward_bf16(cudaStream_t s, unsigned max_grid,
                                                   pp_cuda_attention_dims d,
                                                   const pp_dropout_desc *drop,
                                                   const uint16_t *qkv, const uint16_t *y,
                                                   const float *lse, const uint16_t *dy,
                                                   float *delta, uint16_t *dqkv);

#ifdef __cplusplus
}
#endif

#endif
