/*
 * attention_check.h - the first call's check of an attention against ours
 * (attention_run.c decides with it which attention a shape runs).
 *
 * A candidate (cuDNN's fused attention, our tensor-core kernels: neither has
 * run on a GPU before they are checked) runs into the call's outputs, ours
 * (attention_bf16.cu or attention.cu, the reference) into device scratch of
 * the same bytes,
 * both on the call's own operands and the exec's stream; the stream is then
 * synchronised and the two compared on the host: y and dqkv within
 * PP_ATTN_TOL_Y of the largest element of ours, lse within PP_ATTN_TOL_LSE
 * (absolute, natural log: exp(s - lse) moves by at most 0.1%); on f32
 * operands PP_ATTN_TOL_Y_F32 and PP_ATTN_TOL_LSE_F32 (below). Where they
 * differ, ours is copied over the outputs. Not for a stream under CUDA graph
 * capture (it synchronises).
 *
 * PP_ATTN_TOL_Y is 1.6e-2: a bf16 unit at the largest element is 2^-8 to
 * 2^-7 of it (3.9e-3 to 7.8e-3), so this admits two to four units. Both
 * sides round every output once, and the candidates also round P to bf16
 * before P V (ours keeps it f32), so one element may sit a unit or two away
 * with every kernel correct (the emulator reached 7.4e-3 with the
 * tensor-core kernels against the CPU, a hair under one unit at the bottom
 * of a binade). What the check exists to catch, a fragment layout, a scale,
 * a mask or a statistic the device reads differently, moves elements by
 * tens of percent. The kernels' own tests hold them to the CPU at 8e-3.
 *
 * On f32 (the 3xTF32 kernels against attention.cu) both sides are f32's
 * arithmetic in different orders, and the candidate drops 3xTF32's
 * a_lo b_lo term (2^-22 of a product or so): the emulator's runs differ
 * from ours by at most about 1e-6 of the largest element (dqkv) and 1e-6
 * in lse. PP_ATTN_TOL_Y_F32 (1e-4) leaves room for a device's sums and
 * exp and still refuses what the check exists to catch, and a kernel that
 * multiplied in plain TF32 (one rounding of 2^-11 a product: the emulator
 * measured 2.4e-4 to 1.3e-3 in y, lse and dqkv).
 */
#ifndef PP_CUDA_ATTENTION_CHECK_H
#define PP_CUDA_ATTENTION_CHECK_H

#include <stddef.h>

#include "internal.h"
#include "sdpa.h"

#define PP_ATTN_TOL_Y 1.6e-2
#define PP_ATTN_TOL_LSE 1e-3
#define PP_ATTN_TOL_Y_F32 1e-4
#define PP_ATTN_TOL_LSE_F32 1e-4

/* One direction of the attention of a call into out: the forward's y
 * (out[0], (n, t, c)) and lse (out[1], f32 (n, heads, t)), or the
 * backward's dqkv (out[0], (n, t, 3c)), y and dqkv bf16 or f32; arg the
 * caller's operands. */
typedef pp_status (*pp_attn_run_fn)(void *arg, void *const out[2], pp_error *err);

typedef enum pp_attn_verdict {
    PP_ATTN_AGREES,   /* the candidate's results are in out, kept */
    PP_ATTN_DIFFERS,  /* ours are in out */
    PP_ATTN_REFUSED,  /* the candidate failed (its message in msg): ours in out */
    PP_ATTN_UNCHECKED /* no device memory for ours' copy: ours in out, nothing decided */
} pp_attn_verdict;

/* Runs cand into out and own into scratch (above), compares, and says so in
 * *v and msg (the figures: "agrees with ours at the first call: y off by
 * ..."); y and dqkv f32 (f32) or bf16. A failure of own, of a copy or of the
 * synchronisation is the returned status (err filled); the candidate's
 * failure is a verdict. */
pp_status pp_cuda_attention_check(pp_exec *ex, pp_cuda_exec *ce, const pp_attention_desc *d,
                                  bool f32, pp_sdpa_dir dir, pp_attn_run_fn cand,
                                  pp_attn_run_fn own, void *arg, void *const out[2],
                                  pp_attn_verdict *v, char *msg, size_t cap, pp_error *err);

#endif
