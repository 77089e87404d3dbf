/*
 * attention_check.h - the first call's check of a bf16 attention against
 * ours (attention_bf16.c decides with it which attention a shape runs).
 *
 * A candidate (cuDNN's fused attention, our tensor-core kernels: neither has
 * run on a GPU before they are checked) runs into the call's outputs, ours
 * (attention_bf16.cu, the reference) into device scratch of the same bytes,
 * both on the call's own operands and the exec's stream; the stream is then
 * synchronised and the two compared on the host: y and dqkv within
 * PP_ATTN_TOL_Y of the largest element of ours (two bf16 steps), lse within
 * PP_ATTN_TOL_LSE (absolute, natural log: exp(s - lse) moves by at most
 * 0.1%). Where they differ, ours is copied over the outputs. Not for a
 * stream under CUDA graph capture (it synchronises).
 */
#ifndef PP_CUDA_ATTENTION_CHECK_H
#define PP_CUDA_ATTENTION_CHECK_H

#include <stddef.h>

#include "internal.h"
#include "sdpa.h"

#define PP_ATTN_TOL_Y 8e-3
#define PP_ATTN_TOL_LSE 1e-3

/* One direction of the attention of a call into out: the forward's y
 * (out[0], bf16 (n, t, c)) and lse (out[1], f32 (n, heads, t)), or the
 * backward's dqkv (out[0], bf16 (n, t, 3c)); arg the caller's operands. */
typedef pp_status (*pp_attn_run_fn)(void *arg, void *const out[2], pp_error *err);

typedef enum pp_attn_verdict {
    PP_ATTN_AGREES,   /* the candidate's results are in out, kept */
    PP_ATTN_DIFFERS,  /* ours are in out */
    PP_ATTN_REFUSED,  /* the candidate failed (its message in msg): ours in out */
    PP_ATTN_UNCHECKED /* no device memory for ours' copy: ours in out, nothing decided */
} pp_attn_verdict;

/* Runs cand into out and own into scratch (above), compares, and says so in
 * *v and msg (the figures: "agrees with ours at the first call: y off by
 * ..."). A failure of own, of a copy or of the synchronisation is the
 * returned status (err filled); the candidate's failure is a verdict. */
pp_status pp_cuda_attention_check(pp_exec *ex, pp_cuda_exec *ce, const pp_attention_desc *d,
                                  pp_sdpa_dir dir, pp_attn_run_fn cand, pp_attn_run_fn own,
                                  void *arg, void *const out[2], pp_attn_verdict *v, char *msg,
                                  size_t cap, pp_error *err);

#endif
