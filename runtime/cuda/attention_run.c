/*
 * attention_run.c - the CUDA backend's attention entries (backend.h:
 * attention_forward / attention_backward on f32 operands,
 * attention_forward_bf16 / attention_backward_bf16 on bf16), on the exec's
 * stream, and which kernel each shape runs: on bf16, cuDNN's fused attention
 * (sdpa.h), our tensor-core kernels (attention_mma.h) or our CUDA-core
 * kernels of attention_bf16.cu; on f32, our tensor-core kernels in 3xTF32
 * (attention_tf32.h) or our CUDA-core kernels of attention.cu (cuDNN's fused
 * engines take no f32). The CUDA-core kernels are "ours": the reference and
 * the fallback. A shape ours do not take is declined (PP_ERR_UNSUPPORTED,
 * nothing enqueued): on bf16, ops_transformer.c then runs the f32 entries on
 * stand-ins, which report it.
 *
 * Which one runs, per shape, element type and direction and exec
 * (pp_sdpa_choice), by PP_CUDA_ATTN:
 *   cudnn (or unset: the default)  bf16: cuDNN's where its plan builds and
 *        agrees with ours at the shape's first call, else the tensor-core
 *        kernels where they take the shape and agree, else ours; f32: the
 *        tensor-core kernels where they take the shape and agree, else ours;
 *   mma  the tensor-core kernels where they take the shape and agree, else ours;
 *   own  ours.
 * A forward of the queries from a position on (d->q0 > 0: generation's
 * cache of keys and values, pp_attention_forward_from) runs ours, the
 * kernels that take it, whatever PP_CUDA_ATTN says; nothing is decided.
 * Of the last query alone (a new token's: q0 == t - 1, no dropout) it runs
 * the split-keys kernels (pp_cuda_launch_attention_decode: the keys over
 * many blocks), their partials in the exec's workspace.
 * The first call outside a CUDA graph capture checks each candidate in that
 * order against ours on the call's own operands (attention_check.h: both
 * run, the stream is synchronised, y within the element type's tolerance of
 * the largest element of ours and lse within its own, or dqkv likewise),
 * keeping the first that agrees; ours stays in the outputs where none does.
 * Either backward may take either forward's lse (the same quantity, held to
 * ours by the forward's check), so the directions decide apart. The record
 * says which runs and each check's figures or why not
 * (pp_cuda_sdpa_report); a record decided under another PP_CUDA_ATTN is
 * decided again. Without device memory for the check's copies of ours, ours
 * runs and the shape stays undecided. A call under capture before its shape
 * is decided runs ours (the executor's first run of a step is eager, so this
 * does not happen in a pipeline). Our delta scratch and cuDNN's workspace
 * both come from the exec's workspace (stream ordered, so a step captured in
 * a graph replays them).
 *
 * With dropout on the probabilities (d->drop.p > 0) cuDNN's never runs (its
 * graph does not draw dropout.h's masks): cudnn and mma both run the
 * tensor-core kernels where they take the shape and agree with ours (the
 * same first call's check, both drawing the call's masks), else ours; own
 * runs ours. The record is one per shape, element type and p (not per step
 * or micro-batch: the key and first sample are left out of its key), and a
 * bf16 record's line says "dropout: mma" or "dropout runs ours" and why.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_bf16.h"
#include "attention_check.h"
#include "attention_mma.h"
#include "attention_tf32.h"
#include "internal.h"
#include "sdpa.h"

/* *ce: the exec begun, for a shape the kernels take (else PP_ERR_UNSUPPORTED) */
static pp_status begin(pp_exec *ex, const pp_attention_desc *d, pp_cuda_exec **ce,
                       pp_error *err)
{
    if (d->c / d->heads > PP_CUDA_ATTENTION_HS_MAX || d->n > 65535 || d->heads > 65535)
        return pp_error_set(err, PP_ERR_UNSUPPORTED,
                            "%s: attention: heads of %d columns (the CUDA kernels take up to "
                            "%d), %d samples and %d heads (up to 65535)",
                            ex->dev->name, d->c / d->heads, PP_CUDA_ATTENTION_HS_MAX, d->n,
                            d->heads);
    return pp_cuda_exec_begin(ex, 0, 0, ce, err);
}

/* ---- PP_CUDA_ATTN -------------------------------------------------------------- */

/* (MODE_CUDNN 0: a new record's mode) */
typedef enum attn_mode { MODE_CUDNN = 0, MODE_MMA, MODE_OWN } attn_mode;

static pp_status mode_of(attn_mode *m, pp_error *err)
{
    const char *v = getenv("PP_CUDA_ATTN");
    if (!v || !*v || !strcmp(v, "cudnn"))
        *m = MODE_CUDNN;
    else if (!strcmp(v, "mma"))
        *m = MODE_MMA;
    else if (!strcmp(v, "own"))
        *m = MODE_OWN;
    else
        return pp_error_set(err, PP_ERR_INPUT,
                            "PP_CUDA_ATTN is '%s': use cudnn (cuDNN's fused attention where it "
                            "builds and agrees with ours, else mma's; the default), mma (our "
                            "tensor-core kernels where they agree with ours) or own (our "
                            "CUDA-core kernels)",
                            v);
    return PP_OK;
}

static bool capturing(const pp_cuda_exec *ce)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(ce->stream, &st) != cudaSuccess) {
        (void)cudaGetLastError();
        return true; /* unknown: as if capturing, nothing decided */
    }
    return st != cudaStreamCaptureStatusNone;
}

/* ---- the runs: one direction of a call into out (attention_check.h) ------------- */

/* a call's operands */
typedef struct call {
    pp_exec *ex;
    pp_cuda_exec *ce;
    const pp_attention_desc *d;
    bool f32;                 /* f32 operands (else bf16) */
    const void *qkv, *y, *dy; /* y and dy: the backward's */
    const float *lse;         /* the backward's */
} call;

static pp_cuda_attention_dims dims_of(const pp_attention_desc *d)
{
    return (pp_cuda_attention_dims){d->n, d->t, d->c, d->heads, d->q0};
}

/* the backward's delta scratch (n, heads, t) from the exec's workspace */
static pp_status delta_of(const call *c, float **delta, pp_error *err)
{
    return pp_exec_workspace(c->ex, (size_t)c->d->n * c->d->heads * c->d->t * sizeof(float),
                             (void **)delta, err);
}

/* ours and the tensor-core kernels draw the dropout masks of d->drop (p 0: none) */
static pp_status own_fwd(void *arg, void *const out[2], pp_error *err)
{
    const call *c = arg;
    const pp_cuda_attention_dims a = dims_of(c->d);
    const cudaError_t e =
        c->f32 ? pp_cuda_launch_attention_forward(c->ce->stream, a, &c->d->drop, c->qkv, out[0],
                                                  out[1])
               : pp_cuda_launch_attention_forward_bf16(c->ce->stream, a, &c->d->drop, c->qkv,
                                                       out[0], out[1]);
    return PP_CUDA(c->ex->dev, err, e);
}

/* the last query alone (q0 == t - 1, no dropout): the split-keys kernels */
static pp_status decode_fwd(const call *c, void *const out[2], pp_error *err)
{
    const pp_cuda_attention_dims a = dims_of(c->d);
    float *part;
    PP_TRY(pp_exec_workspace(c->ex, pp_cuda_attention_decode_floats(a) * sizeof(float),
                             (void **)&part, err));
    const cudaError_t e =
        c->f32 ? pp_cuda_launch_attention_decode(c->ce->stream, a, c->qkv, out[0], out[1], part)
               : pp_cuda_launch_attention_decode_bf16(c->ce->stream, a, c->qkv, out[0], out[1],
                                                      part);
    return PP_CUDA(c->ex->dev, err, e);
}

static pp_status mma_fwd(void *arg, void *const out[2], pp_error *err)
{
    const call *c = arg;
    const pp_cuda_attention_dims a = dims_of(c->d);
    const cudaError_t e =
        c->f32 ? pp_cuda_launch_attention_forward_tf32(c->ce->stream, a, &c->d->drop, c->qkv,
                                                       out[0], out[1])
               : pp_cuda_launch_attention_forward_mma(c->ce->stream, a, &c->d->drop, c->qkv,
                                                      out[0], out[1]);
    return PP_CUDA(c->ex->dev, err, e);
}

static pp_status own_bwd(void *arg, void *const out[2], pp_error *err)
{
    const call *c = arg;
    const pp_cuda_attention_dims a = dims_of(c->d);
    const unsigned grid = pp_cuda_max_grid(c->ex);
    float *delta;
    PP_TRY(delta_of(c, &delta, err));
    const cudaError_t e =
        c->f32 ? pp_cuda_launch_attention_backward(c->ce->stream, grid, a, &c->d->drop, c->qkv,
                                                   c->y, c->lse, c->dy, delta, out[0])
               : pp_cuda_launch_attention_backward_bf16(c->ce->stream, grid, a, &c->d->drop,
                                                        c->qkv, c->y, c->lse, c->dy, delta,
                                                        out[0]);
    return PP_CUDA(c->ex->dev, err, e);
}

static pp_status mma_bwd(void *arg, void *const out[2], pp_error *err)
{
    const call *c = arg;
    const pp_cuda_attention_dims a = dims_of(c->d);
    const unsigned grid = pp_cuda_max_grid(c->ex);
    float *delta;
    PP_TRY(delta_of(c, &delta, err));
    const cudaError_t e =
        c->f32 ? pp_cuda_launch_attention_backward_tf32(c->ce->stream, grid, a, &c->d->drop,
                                                        c->qkv, c->y, c->lse, c->dy, delta,
                                                        out[0])
               : pp_cuda_launch_attention_backward_mma(c->ce->stream, grid, a, &c->d->drop,
                                                       c->qkv, c->y, c->lse, c->dy, delta,
                                                       out[0]);
    return PP_CUDA(c->ex->dev, err, e);
}

static pp_status cudnn_fwd(void *arg, void *const out[2], pp_error *err)
{
    const call *c = arg;
    return pp_cuda_sdpa_forward(c->ex, c->d, c->qkv, out[0], out[1], err);
}

static pp_status cudnn_bwd(void *arg, void *const out[2], pp_error *err)
{
    const call *c = arg;
    return pp_cuda_sdpa_backward(c->ex, c->d, c->qkv, c->y, c->lse, c->dy, out[0], err);
}

/* by pp_sdpa_use (UNDECIDED unused) and pp_sdpa_dir */
static const pp_attn_run_fn runs[4][2] = {
    [PP_SDPA_CUDNN] = {cudnn_fwd, cudnn_bwd},
    [PP_SDPA_MMA] = {mma_fwd, mma_bwd},
    [PP_SDPA_OWN] = {own_fwd, own_bwd},
};

static const char *name_of(pp_sdpa_use u)
{
    return u == PP_SDPA_CUDNN ? "cuDNN" : u == PP_SDPA_MMA ? "mma" : "ours";
}

/* whether the tensor-core kernels of c's element type take its shape */
static bool mma_takes(const call *c)
{
    return c->f32 ? pp_cuda_attention_tf32_takes(dims_of(c->d))
                  : pp_cuda_attention_mma_takes(dims_of(c->d));
}

/* ---- the first call: the candidates checked in turn ---------------------------- */

static void append(char *why, size_t cap, const char *fmt, ...)
{
    const size_t used = strlen(why);
    if (used + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why + used, cap - used, fmt, ap);
    va_end(ap);
}

/* Direction dir of call c into out at its shape's first call: the mode's
 * candidates (cudnn: cuDNN's, then mma's, on bf16; mma, and cudnn on f32:
 * mma's) each checked against ours until one agrees; ch records it, with
 * every check's figures. */
static pp_status first_call(call *c, pp_sdpa_choice *ch, pp_sdpa_dir dir, attn_mode mode,
                            void *const out[2], pp_error *err)
{
    const bool cudnn = mode == MODE_CUDNN && !c->f32;
    const pp_sdpa_use order[2] = {cudnn ? PP_SDPA_CUDNN : PP_SDPA_MMA,
                                  cudnn ? PP_SDPA_MMA : PP_SDPA_OWN};
    char why[sizeof ch->why[0]] = "";
    bool ours_in_out = false;
    for (int k = 0; k < 2 && order[k] != PP_SDPA_OWN; k++) {
        const pp_sdpa_use u = order[k];
        const char *sep = why[0] ? "; " : "";
        if (u == PP_SDPA_MMA && !mma_takes(c)) {
            append(why, sizeof why, "%smma: heads of %d columns (it takes multiples of %d up "
                   "to %d)", sep, c->d->c / c->d->heads, c->f32 ? 8 : 16,
                   PP_CUDA_ATTENTION_HS_MAX);
            continue;
        }
        pp_attn_verdict v;
        char msg[sizeof ch->why[0]];
        PP_TRY(pp_cuda_attention_check(c->ex, c->ce, c->d, c->f32, dir, runs[u][dir],
                                       runs[PP_SDPA_OWN][dir], c, out, &v, msg, sizeof msg, err));
        append(why, sizeof why, "%s%s: %s", sep, name_of(u), msg);
        ours_in_out = true;
        if (v == PP_ATTN_UNCHECKED) return PP_OK; /* ours this time, undecided */
        if (v == PP_ATTN_AGREES) {
            ch->use[dir] = u;
            snprintf(ch->why[dir], sizeof ch->why[dir], "%s", why);
            return PP_OK;
        }
    }
    ch->use[dir] = PP_SDPA_OWN;
    snprintf(ch->why[dir], sizeof ch->why[dir], "%s", why);
    return ours_in_out ? PP_OK : runs[PP_SDPA_OWN][dir](c, out, err);
}

/* ---- the record of a shape (and dropout's p) --------------------------------------- */

/* *ch: the record of d's shape, element type and dropout p, one per shape,
 * type and p (not per step or micro-batch: the key and first sample left out) */
static pp_status choice_of(const pp_attention_desc *d, bool f32, pp_exec *ex,
                           pp_sdpa_choice **ch, pp_error *err)
{
    pp_attention_desc shape;
    memset(&shape, 0, sizeof shape); /* the record's key is compared bytewise */
    shape.n = d->n, shape.t = d->t, shape.c = d->c, shape.heads = d->heads;
    shape.drop.p = d->drop.p;
    return pp_cuda_sdpa_choice(ex, &shape, f32, ch, err);
}

/* A decided record of direction dir under dropout says so first, then the
 * checks' figures or why not (why): "dropout: " before why's "mma: agrees
 * ..." where the tensor-core kernels run (under dropout they are the only
 * candidate, so why begins with them), else "dropout runs ours (cuDNN's
 * masks are not ours): ". */
static void dropout_why(pp_sdpa_choice *ch, pp_sdpa_dir dir, const char *why)
{
    char rest[sizeof ch->why[0]];
    snprintf(rest, sizeof rest, "%s", why); /* why may be ch->why[dir] */
    snprintf(ch->why[dir], sizeof ch->why[dir], "%s",
             ch->use[dir] == PP_SDPA_MMA ? "dropout: "
                                         : "dropout runs ours (cuDNN's masks are not ours): ");
    append(ch->why[dir], sizeof ch->why[dir], "%s", rest);
}

/* ---- the entries ------------------------------------------------------------------ */

/* Direction dir of call c into out: ours (PP_CUDA_ATTN=own, or the first
 * call inside a CUDA graph capture), the first call's checks, or the
 * decided one (cuDNN's falling back to ours where its workspace cannot be
 * had this time: ours needs none). With dropout, and on f32, cuDNN's is
 * never a candidate: cudnn checks the tensor-core kernels as mma does. */
static pp_status run(call *c, pp_sdpa_dir dir, void *const out[2], pp_error *err)
{
    attn_mode mode;
    pp_sdpa_choice *ch;
    PP_TRY(begin(c->ex, c->d, &c->ce, err));
    if (c->d->q0 > 0) { /* the queries from a position on (generation's cache): ours take it */
        if (dir == PP_SDPA_FWD && c->d->q0 == c->d->t - 1 && !(c->d->drop.p > 0.0f))
            return decode_fwd(c, out, err);
        return runs[PP_SDPA_OWN][dir](c, out, err);
    }
    PP_TRY(mode_of(&mode, err));
    const bool drop = c->d->drop.p > 0.0f;
    if (mode == MODE_OWN && (!drop || c->f32)) return runs[PP_SDPA_OWN][dir](c, out, err);
    if (drop && mode == MODE_CUDNN) mode = MODE_MMA;
    PP_TRY(choice_of(c->d, c->f32, c->ex, &ch, err));
    if (ch->mode != (int)mode) /* decided under another setting: decided again */
        *ch = (pp_sdpa_choice){.mode = (int)mode};
    if (mode == MODE_OWN) { /* bf16 with dropout: the record says so */
        ch->use[dir] = PP_SDPA_OWN;
        dropout_why(ch, dir, "PP_CUDA_ATTN=own");
        return runs[PP_SDPA_OWN][dir](c, out, err);
    }
    const pp_sdpa_use u = ch->use[dir];
    if (u == PP_SDPA_UNDECIDED) {
        /* a backward whose forward's first call was captured, or captured itself */
        if (capturing(c->ce) || (dir == PP_SDPA_BWD && ch->use[PP_SDPA_FWD] == PP_SDPA_UNDECIDED))
            return runs[PP_SDPA_OWN][dir](c, out, err);
        PP_TRY(first_call(c, ch, dir, mode, out, err));
        if (drop && !c->f32 && ch->use[dir] != PP_SDPA_UNDECIDED)
            dropout_why(ch, dir, ch->why[dir]);
        return PP_OK;
    }
    const pp_status s = runs[u][dir](c, out, err);
    return s == PP_ERR_UNSUPPORTED && u == PP_SDPA_CUDNN ? runs[PP_SDPA_OWN][dir](c, out, err)
                                                         : s;
}

pp_status pp_cuda_attention_forward(pp_exec *ex, const pp_attention_desc *d, const float *qkv,
                                    float *y, float *lse, pp_error *err)
{
    if (d->n == 0 || d->t == 0 || d->c == 0) return PP_OK;
    call c = {.ex = ex, .d = d, .f32 = true, .qkv = qkv};
    void *const out[2] = {y, lse};
    return run(&c, PP_SDPA_FWD, out, err);
}

pp_status pp_cuda_attention_backward(pp_exec *ex, const pp_attention_desc *d, const float *qkv,
                                     const float *y, const float *lse, const float *dy,
                                     float *dqkv, pp_error *err)
{
    if (d->n == 0 || d->t == 0 || d->c == 0) return PP_OK;
    call c = {.ex = ex, .d = d, .f32 = true, .qkv = qkv, .y = y, .dy = dy, .lse = lse};
    void *const out[2] = {dqkv, NULL};
    return run(&c, PP_SDPA_BWD, out, err);
}

pp_status pp_cuda_attention_forward_bf16(pp_exec *ex, const pp_attention_desc *d,
                                         const uint16_t *qkv, uint16_t *y, float *lse,
                                         pp_error *err)
{
    if (d->n == 0 || d->t == 0 || d->c == 0) return PP_OK;
    call c = {.ex = ex, .d = d, .qkv = qkv};
    void *const out[2] = {y, lse};
    return run(&c, PP_SDPA_FWD, out, err);
}

pp_status pp_cuda_attention_backward_bf16(pp_exec *ex, const pp_attention_desc *d,
                                          const uint16_t *qkv, const uint16_t *y,
                                          const float *lse, const uint16_t *dy, uint16_t *dqkv,
                                          pp_error *err)
{
    if (d->n == 0 || d->t == 0 || d->c == 0) return PP_OK;
    call c = {.ex = ex, .d = d, .qkv = qkv, .y = y, .dy = dy, .lse = lse};
    void *const out[2] = {dqkv, NULL};
    return run(&c, PP_SDPA_BWD, out, err);
}
