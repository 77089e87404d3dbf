/*
 * gconv.h - convolutions through cuDNN's graph (backend) API, in bf16 or
 * fp32, with activations in NHWC or NCHW, and the support probe that lists
 * what cuDNN offers for a geometry.
 *
 * Tensors: a, b and out are device memory of ex's device, 16-byte aligned
 * (a pointer that is not is PP_ERR_UNSUPPORTED), of dtype dt. With nhwc the
 * activations are N,H,W,C in memory and the filters K,R,S,C; without, NCHW
 * and K,C,R,S. Which tensor is which per direction:
 *   PP_GCONV_FWD    a = x (N,C,H,W)  b = w (K,C,R,S)   out = y  (N,K,P,Q)
 *   PP_GCONV_DGRAD  a = dy (N,K,P,Q) b = w (K,C,R,S)   out = dx (N,C,H,W)
 *   PP_GCONV_WGRAD  a = x (N,C,H,W)  b = dy (N,K,P,Q)  out = dw (K,C,R,S)
 * Arithmetic is fp32 (compute type CUDNN_DATA_FLOAT); outputs are rounded to
 * dt once.
 *
 * Plans: one per (geometry, direction, dtype, layout, math mode, alpha,
 * beta) and exec, made at its first use: cuDNN's heuristics (mode A, then
 * the fallback list when A offers nothing), engines refused by their
 * numerical notes (below), up to the device's PP_CUDA_CONV_PLANS (default
 * PP_ALGO_PLANS_DEFAULT, 4; at most PP_GCONV_CANDIDATES) execution plans
 * finalized and each run once untimed and once timed with CUDA events on the
 * exec's stream; the fastest is kept (with PP_CUDNN_FIND=0 the first that
 * runs, in the heuristics' order: no measurement). Timing runs on the caller's own
 * tensors, writing out when beta == 0 (the call then overwrites it anyway)
 * and a scratch output from the exec's stream-ordered pool otherwise, so the
 * caller's data is never changed by it. The first use synchronises the
 * stream (events); later calls only look the plan up and enqueue it, with
 * the workspace from pp_exec_workspace (no allocation once it has grown).
 * The first step must therefore not be captured into a CUDA graph.
 *
 * Numerical notes: bf16 refuses engines that note down-converted inputs or a
 * reduced-precision reduction (accumulation must be fp32); fp32 refuses those
 * too, and also tensor-core engines (TF32) unless the device's math mode is
 * PP_MATH_TF32.
 *
 * Thread safety: as every op, one exec is used by one thread at a time.
 */
#ifndef PP_CUDA_GCONV_H
#define PP_CUDA_GCONV_H

#include <stdbool.h>
#include <stdio.h>

#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "runtime/cuda/algo_cache.h"

/* The most execution plans finalized and timed at a plan's first use (the
 * device's pp_cuda_device.conv_plans says how many). */
#define PP_GCONV_CANDIDATES PP_ALGO_PLANS_MAX
/* The most cuDNN workspace a plan may ask for is its device's cap for
 * convolutions (pp_cuda_device.ws_mb: PP_CUDA_CONV_WS_MB, 512 MiB unless set). */

typedef enum pp_gconv_dir { PP_GCONV_FWD = 0, PP_GCONV_DGRAD = 1, PP_GCONV_WGRAD = 2 } pp_gconv_dir;

/* One convolution of geometry d in direction dir on ex's stream, tensors of
 * dtype dt (PP_BF16 or PP_F32) in layout nhwc (see the top of this file):
 *   FWD:   out(y)  = alpha * conv(a = x, b = w)            + beta * out
 *   DGRAD: out(dx) = alpha * conv_transpose(a = dy, b = w) + beta * out
 *   WGRAD: out(dw) = alpha * correlation(a = x, b = dy)    + beta * out
 * PP_ERR_UNSUPPORTED (with a message) when cuDNN has no acceptable engine
 * for it, or a pointer is not 16-byte aligned, so that the caller can fall
 * back to the legacy path; also, having enqueued nothing of the call, when
 * device memory runs out for choosing the plan (not remembered: a later call
 * tries again), for its workspace (after the candidate that ran with the
 * least workspace, kept for this), or for cuDNN's own allocations when it
 * runs. PP_ERR_INVALID for a bad dtype or direction; other failures
 * PP_ERR_BACKEND or PP_ERR_OOM. */
pp_status pp_cuda_gconv(pp_exec *ex, const pp_conv2d_desc *d, pp_gconv_dir dir, pp_dtype dt,
                        bool nhwc, const void *a, const void *b, void *out, float alpha,
                        float beta, pp_error *err);

/* Makes the plan pp_cuda_gconv runs for these arguments, as its first use
 * would (chosen on the call's tensors, out written when beta == 0), without
 * running the convolution: the call that follows only enqueues it. *ms gets
 * the chosen plan's timed call in milliseconds. Errors as pp_cuda_gconv's
 * (PP_ERR_UNSUPPORTED: no plan; nothing of the call is enqueued but the
 * timing). */
pp_status pp_cuda_gconv_prepare(pp_exec *ex, const pp_conv2d_desc *d, pp_gconv_dir dir,
                                pp_dtype dt, bool nhwc, const void *a, const void *b, void *out,
                                float alpha, float beta, float *ms, pp_error *err);

/* Releases ex's cached graph plans (the exec's destroy calls it). Safe to
 * call more than once. */
void pp_cuda_gconv_cache_free(pp_exec *ex);

/* How a cached plan was chosen. */
typedef struct pp_gconv_plan_info {
    bool fallback;    /* the candidates came from heuristics mode FALLBACK, not mode A */
    int found;        /* engine configs that mode offered */
    int refused;      /* refused by numerical notes */
    int failed;       /* did not finalize */
    int over;         /* wanted more workspace than the cap (PP_CUDA_CONV_WS_MB) */
    long long over_mb; /* the most one of those wanted, MiB rounded up (0: none) */
    int timed;        /* execution plans timed */
    long long engine; /* the chosen engine's global index */
    size_t ws;        /* its workspace bytes */
    float ms;         /* its timed run at the first use */
    bool lean;        /* a candidate with less workspace is kept for when ws cannot be had */
    size_t lean_ws;   /* its workspace bytes */
} pp_gconv_plan_info;

/* *out for the plan ex has cached for these arguments (the device's current
 * math mode); false when there is none. */
bool pp_cuda_gconv_plan_info(pp_exec *ex, const pp_conv2d_desc *d, pp_gconv_dir dir, pp_dtype dt,
                             bool nhwc, float alpha, float beta, pp_gconv_plan_info *out);

/* The support probe (gconv_probe.c): builds the plans of geometry d in every direction, in
 * bf16 and fp32 (the device's current math mode), NHWC and NCHW, on buffers
 * of its own, and writes one line per (direction, dtype, layout) to out:
 * engine configs found (and from which heuristics mode), refused by notes,
 * failed to finalize, timed, the chosen engine's global index, its
 * workspace, its time at the first use and the mean of 10 further calls in
 * ms, or the failure. A failure of one line does not stop the others;
 * returns PP_OK when every line built, else the first failure. */
pp_status pp_cuda_gconv_probe(pp_exec *ex, const pp_conv2d_desc *d, FILE *out, pp_error *err);

#endif
