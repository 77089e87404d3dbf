/*
 * sdpa.h - causal self-attention on bf16 operands through cuDNN's fused
 * flash-attention engines (the graph API, sdpa.c over sdpa_graph.c), and
 * the record of which attention each shape runs (cuDNN's, ours on tensor
 * cores or ours, attention_run.c decides).
 *
 * Operands as attention_bf16.h's: qkv and dqkv (n, t, 3c), y and dy
 * (n, t, c) bf16; lse (n, heads, t) f32, the natural log-sum-exp of a
 * query's scaled, masked scores (max + log(sum)): cuDNN's softmax stats are
 * that quantity by construction (sdpa_graph.c), and the first use of a shape
 * compares them with our kernel's before cuDNN is kept (attention_run.c),
 * so either backward may take either forward's lse.
 *
 * Plans: one per (shape, direction) and exec, made at its first use: the
 * operation graph, cuDNN's heuristics (mode A, then the fallback list), the
 * first engine config that finalizes within the device's workspace cap
 * (PP_CUDA_CONV_WS_MB, 512 MiB unless set). A shape cuDNN cannot take (c or hs not a multiple of 8, hs
 * above 128, no engine, a failed cuDNN call) is remembered with why; every
 * call for it is then PP_ERR_UNSUPPORTED at once. Later calls look the plan
 * up and enqueue it on the exec's stream, with the workspace from
 * pp_exec_workspace (no allocation once it has grown); nothing synchronises,
 * so a step may be captured into a CUDA graph once its shapes have run.
 *
 * Thread safety: as every op, one exec is used by one thread at a time.
 */
#ifndef PP_CUDA_SDPA_H
#define PP_CUDA_SDPA_H

#include <stdint.h>
#include <stdio.h>

#include "runtime/core/backend.h"
#include "runtime/core/exec.h"

typedef enum pp_sdpa_dir { PP_SDPA_FWD = 0, PP_SDPA_BWD = 1 } pp_sdpa_dir;

/* y and lse from qkv (shape d) by cuDNN. PP_ERR_UNSUPPORTED (nothing
 * enqueued, with why) when cuDNN cannot run the shape or a pointer is not
 * 16-byte aligned, or when the workspace cannot be had; other failures
 * PP_ERR_BACKEND or PP_ERR_OOM. */
pp_status pp_cuda_sdpa_forward(pp_exec *ex, const pp_attention_desc *d, const uint16_t *qkv,
                               uint16_t *y, float *lse, pp_error *err);

/* dqkv (=) from qkv, y, lse and dy by cuDNN: the probabilities again from
 * lse. Failures as pp_cuda_sdpa_forward's. */
pp_status pp_cuda_sdpa_backward(pp_exec *ex, const pp_attention_desc *d, const uint16_t *qkv,
                                const uint16_t *y, const float *lse, const uint16_t *dy,
                                uint16_t *dqkv, pp_error *err);

/* Builds and finalizes the operation graph of (d, dir) as a plan would,
 * without a cuDNN handle (no device needed: the engines are not asked), and
 * frees it; *ops its operations. Failures as pp_cuda_sdpa_forward's, naming
 * the cuDNN call and attribute; ex only names the device in messages. */
pp_status pp_cuda_sdpa_graph_check(pp_exec *ex, const pp_attention_desc *d, pp_sdpa_dir dir,
                                   int *ops, pp_error *err);

/* Which attention a shape's direction runs on an exec. */
typedef enum pp_sdpa_use {
    PP_SDPA_UNDECIDED = 0, /* not run yet outside a CUDA graph capture */
    PP_SDPA_CUDNN,         /* cuDNN's, checked against ours at its first use */
    PP_SDPA_OWN,           /* ours (attention_bf16.cu; f32: attention.cu) */
    PP_SDPA_MMA            /* ours on tensor cores (attention_mma.cu; f32: attention_tf32.cu,
                              3xTF32), checked likewise */
} pp_sdpa_use;

typedef struct pp_sdpa_choice {
    pp_sdpa_use use[2];  /* by pp_sdpa_dir */
    int mode;            /* the PP_CUDA_ATTN setting use was decided under (attention_run.c's) */
    char why[2][sizeof(((pp_error *)0)->msg)]; /* the checks' figures, or why not */
} pp_sdpa_choice;

/* *out: the choice record of shape d on f32 operands (f32) or bf16 on ex
 * (made, undecided, at its first lookup; it lives until the exec is
 * destroyed). PP_ERR_OOM only. */
pp_status pp_cuda_sdpa_choice(pp_exec *ex, const pp_attention_desc *d, bool f32,
                              pp_sdpa_choice **out, pp_error *err);

/* One line per shape, element type and direction of ex to out: the shape,
 * which attention runs and why, cuDNN's engine and workspace where it runs.
 * Writes nothing for an exec that ran no attention through a record (f32
 * under PP_CUDA_ATTN=own keeps none). */
void pp_cuda_sdpa_report(pp_exec *ex, FILE *out);

/* Releases ex's plans and records (the exec's destroy calls it). Safe to
 * call more than once. */
void pp_cuda_sdpa_cache_free(pp_exec *ex);

#endif
