/*
 * sdpa_internal.h - what sdpa.c (plans, the cache, the calls) and, below it,
 * sdpa_graph.c (the operation graphs of cuDNN's fused causal attention)
 * share. Not installed; only runtime/cuda/sdpa*.c include it.
 *
 * Tensors of the graphs, dims (b, h, s, d) = (n, heads, t, hs), bf16 unless
 * noted, non-virtual ones mapped straight onto our buffers (no copies):
 *   Q, K, V   views of qkv (n, t, 3c): strides (t * 3c, hs, 3c, 1) at qkv,
 *             qkv + c, qkv + 2c; K and V^T enter the matmuls transposed
 *             (dims (b, h, d, s), the last two strides swapped)
 *   O, dO     y and dy (n, t, c): strides (t * c, hs, c, 1)
 *   STATS     lse (n, heads, t), f32, dims (b, h, s, 1): max + log(sum) of
 *             the scaled, masked scores in natural log
 *   dQ dK dV  views of dqkv, as Q, K, V
 *   SCALE     1 / sqrt(hs), f32 by value; NEG the masked score (-FLT_MAX),
 *             ONE 1.0f, both f32 by value
 */
#ifndef PP_CUDA_SDPA_INTERNAL_H
#define PP_CUDA_SDPA_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <cudnn_graph.h>

#include "gconv_internal.h"
#include "sdpa.h"

enum {
    SDPA_UID_Q = 1,
    SDPA_UID_K,
    SDPA_UID_V,
    SDPA_UID_O,
    SDPA_UID_STATS,
    SDPA_UID_SCALE,
    SDPA_UID_NEG,
    SDPA_UID_DO,
    SDPA_UID_DQ,
    SDPA_UID_DK,
    SDPA_UID_DV,
    SDPA_UID_ONE,
    SDPA_UID_VIRTUAL = 100 /* virtual tensors count up from here */
};

/* Descriptors one graph makes at most (tensors, op descriptors, operations). */
#define SDPA_DESC_MAX 160
#define SDPA_OPS_MAX 40

/* One operation graph and every descriptor made for it (freed together). */
typedef struct sdpa_graph {
    int64_t b, h, s, d, c; /* n, heads, t, hs, c */
    cudnnBackendDescriptor_t desc[SDPA_DESC_MAX];
    int n_desc;
    cudnnBackendDescriptor_t ops[SDPA_OPS_MAX];
    int n_ops;
    cudnnBackendDescriptor_t graph;
    int64_t next_uid;
} sdpa_graph;

/* sg->graph for the forward (bwd false: Q, K, V -> O, STATS) or the
 * backward (bwd true: Q, K, V, O, dO, STATS -> dQ, dK, dV) of the causal
 * attention of shape (b, h, s, d) in sg (set by the caller, the rest zero),
 * on g's exec's cuDNN handle (none when g->ce is NULL: the graph then
 * finalizes without a device, but cannot be planned). Failures named by gfail; descriptors made
 * before one stay in sg for sdpa_graph_free. */
pp_status pp_sdpa_build(const gbuild *g, sdpa_graph *sg, bool bwd);
void pp_sdpa_graph_free(sdpa_graph *sg);

#endif
