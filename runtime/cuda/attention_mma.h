/*
 * attention_mma.h - causal self-attention on bf16 operands on the tensor
 * cores (attention_mma.cu: mma.sync m16n8k16 tiles, FlashAttention-2's
 * scheme): the launchers behind the CUDA backend's attention_forward_bf16 /
 * attention_backward_bf16 where PP_CUDA_ATTN picks them (attention_bf16.c).
 * Shapes and lse as attention_bf16.h's: qkv (n, t, 3c), y and dy (n, t, c),
 * dqkv (n, t, 3c) as bf16 bits; lse (n, heads, t) f32, the natural
 * log-sum-exp of a query's scaled, masked scores.
 */
#ifndef PP_CUDA_ATTENTION_MMA_H
#define PP_CUDA_ATTENTION_MMA_H

#include <stdbool.h>
#include <stdint.h>

#include "transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the kernels take d: a head size that is a multiple of 16, at most
 * PP_CUDA_ATTENTION_HS_MAX; n and heads at most 65535; t any. */
bool pp_cuda_attention_mma_takes(pp_cuda_attention_dims d);

/* y (bf16, each element rounded once from its f32 value) and lse from qkv.
 * The probabilities are rounded to bf16 before they multiply v (as
 * FlashAttention and cuDNN do), so y departs from the f32-P spec (the CPU
 * backend) by that rounding; lse is the unrounded sum's. With drop (NULL or
 * p == 0: none, the kernels without dropout, no factor drawn) each
 * probability is multiplied by dropout.h's factor of (sample, head, query,
 * key) before it is rounded (pp_attention_forward_dropout's masks); lse stays
 * the undropped softmax's. cudaErrorInvalidValue (nothing enqueued) for a
 * shape pp_cuda_attention_mma_takes refuses. */
cudaError_t pp_cuda_launch_attention_forward_mma(cudaStream_t s, pp_cuda_attention_dims d,
                                                 const pp_dropout_desc *drop,
                                                 const uint16_t *qkv, uint16_t *y, float *lse);

/* dqkv (=, bf16, rounded once) from dy, qkv, y and lse: delta (n * heads *
 * t floats of scratch) by attention_tile.cuh's kernel on at most max_grid
 * blocks, then one pass per block of 64 keys for dk and dv and one per
 * block of 64 queries for dq, every element written by one block (no
 * atomics, the same bits run to run); P and dS rounded to bf16 where they
 * multiply. With drop (as the forward's; y the dropped forward's) the masks
 * are drawn again in both passes: dv from P M, dS = P (M dP - delta) scale
 * (pp_attention_backward_dropout's formulation); the same refusal. */
cudaError_t pp_cuda_launch_attention_backward_mma(cudaStream_t s, unsigned max_grid,
                                                  pp_cuda_attention_dims d,
                                                  const pp_dropout_desc *drop, const uint16_t *qkv,
                                                  const uint16_t *y, const float *lse,
                                                  const uint16_t *dy, float *delta,
                                                  uint16_t *dqkv);

#ifdef __cplusplus
}
#endif

#endif
