/*
 * attention_tf32.h - causal self-attention on f32 operands on the tensor
 * cores in 3xTF32 (attention_tf32.cu: mma.sync m16n8k8 TF32 tiles, each f32
 * operand split into a TF32 value and remainder, three products per step):
 * the launchers behind the CUDA backend's f32 attention_forward /
 * attention_backward where PP_CUDA_ATTN picks them (attention_run.c).
 * Shapes and lse as transformer.h's pp_cuda_launch_attention_forward: qkv
 * (n, t, 3c), y and dy (n, t, c), dqkv (n, t, 3c), lse (n, heads, t), all f32.
 */
#ifndef PP_CUDA_ATTENTION_TF32_H
#define PP_CUDA_ATTENTION_TF32_H

#include <stdbool.h>
#include <stdint.h>

#include "transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the kernels take d: a head size that is a multiple of 8, at most
 * PP_CUDA_ATTENTION_HS_MAX; n and heads at most 65535; t any. */
bool pp_cuda_attention_tf32_takes(pp_cuda_attention_dims d);

/* y and lse from qkv, f32 throughout (P is not rounded: y departs from the
 * CPU's by the sums' order and 3xTF32's dropped a_lo b_lo term, about f32's
 * rounding). drop as pp_cuda_launch_attention_forward's (NULL or p == 0:
 * none, the kernels without dropout). cudaErrorInvalidValue (nothing
 * enqueued) for a shape pp_cuda_attention_tf32_takes refuses. */
cudaError_t pp_cuda_launch_attention_forward_tf32(cudaStream_t s, pp_cuda_attention_dims d,
                                                  const pp_dropout_desc *drop, const float *qkv,
                                                  float *y, float *lse);

/* dqkv (=) from dy, qkv, y and lse: delta (n * heads * t floats of scratch)
 * by attention_tile.cuh's kernel on at most max_grid blocks, then one pass
 * per block of 64 keys for dk and dv and one per block of 64 queries for dq,
 * every element written by one block (no atomics, the same bits run to
 * run). drop as pp_cuda_launch_attention_backward's; the same refusal. */
cudaError_t pp_cuda_launch_attention_backward_tf32(cudaStream_t s, unsigned max_grid,
                                                   pp_cuda_attention_dims d,
                                                   const pp_dropout_desc *drop, const float *qkv,
                                                   const float *y, const float *lse,
                                                   const float *dy, float *delta, float *dqkv);

#ifdef __cplusplus
}
#endif

#endif
