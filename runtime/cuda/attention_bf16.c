/*
 * attention_bf16.c - the CUDA backend's attention entries on bf16 operands
 * (backend.h: attention_forward_bf16 / attention_backward_bf16): cuDNN's
 * fused attention (sdpa.h) or our tiled kernels of attention_bf16.cu, on
 * the exec's stream. A shape our kernels do not take is declined
 * (PP_ERR_UNSUPPORTED, nothing enqueued): ops_transformer.c then runs the
 * f32 entries on stand-ins, which report it.
 *
 * Which one runs, per shape and direction and exec (pp_sdpa_choice):
 * with dropout (d->drop.p > 0), ours always (cuDNN's masks are not ours);
 * PP_CUDA_ATTN=own, ours always; PP_CUDA_ATTN=cudnn (or unset: the default),
 * cuDNN's where its plan builds and, at the shape's first call outside a
 * CUDA graph capture, its results agree with ours on the call's own
 * operands: the forward's y within TOL_Y of the largest element of ours and
 * lse within TOL_LSE (the same quantity: either backward may then take it);
 * the backward's dqkv within TOL_Y of its largest, whichever forward made y
 * and lse (cuDNN's backward takes our lse as its stats, the same quantity,
 * and the check holds it to ours on them). That first call runs both,
 * synchronises the stream and keeps ours in the outputs where they differ;
 * the record says why (pp_cuda_sdpa_report). Without device memory for the
 * check's copies of ours, ours runs and the shape stays undecided. A call
 * under capture before its shape is decided runs ours (the executor's first
 * run of a step is eager, so this does not happen in a pipeline). Our delta
 * scratch and cuDNN's workspace both come from the exec's workspace (stream
 * ordered, so a step captured in a graph replays them).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_bf16.h"
#include "internal.h"
#include "sdpa.h"

/* The check's tolerances: y and dqkv two bf16 steps of the largest element;
 * lse (natural log) absolute, so that exp(s - lse) moves by at most 0.1%. */
#define TOL_Y 8e-3
#define TOL_LSE 1e-3

/* *ce: the exec begun, for a shape the kernels take (else PP_ERR_UNSUPPORTED) */
static pp_status begin(pp_exec *ex, const pp_attention_desc *d, pp_cuda_exec **ce,
                       pp_error *err)
{
    if (d->c / d->heads > PP_CUDA_ATTENTION_HS_MAX || d->n > 65535 || d->heads > 65535)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: bf16 attention: shape not taken",
                            ex->dev->name);
    return pp_cuda_exec_begin(ex, 0, 0, ce, err);
}

/* PP_CUDA_ATTN: cudnn (unset or empty too) or own. */
static pp_status switch_cudnn(bool *cudnn, pp_error *err)
{
    const char *v = getenv("PP_CUDA_ATTN");
    *cudnn = !v || !*v || !strcmp(v, "cudnn");
    if (*cudnn || !strcmp(v, "own")) return PP_OK;
    return pp_error_set(err, PP_ERR_INPUT,
                        "PP_CUDA_ATTN is '%s': use cudnn (cuDNN's fused attention where it "
                        "builds and agrees with ours, the default) or own (our kernels)",
                        v);
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

/* *ch: the shape's record, or NULL when the switch says ours. */
static pp_status choice_of(pp_exec *ex, const pp_attention_desc *d, pp_sdpa_choice **ch,
                           pp_error *err)
{
    bool cudnn;
    *ch = NULL;
    PP_TRY(switch_cudnn(&cudnn, err));
    return cudnn ? pp_cuda_sdpa_choice(ex, d, ch, err) : PP_OK;
}

static void decide(pp_sdpa_choice *ch, pp_sdpa_dir dir, pp_sdpa_use use, const char *why)
{
    ch->use[dir] = use;
    snprintf(ch->why[dir], sizeof ch->why[dir], "%s", why);
}

/* ---- ours ---------------------------------------------------------------------- */

static pp_status own_forward(pp_exec *ex, pp_cuda_exec *ce, const pp_attention_desc *d,
                             const uint16_t *qkv, uint16_t *y, float *lse, pp_error *err)
{
    const pp_cuda_attention_dims a = {d->n, d->t, d->c, d->heads};
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_attention_forward_bf16(ce->stream, a, &d->drop, qkv, y, lse));
}

static pp_status own_backward(pp_exec *ex, pp_cuda_exec *ce, const pp_attention_desc *d,
                              const uint16_t *qkv, const uint16_t *y, const float *lse,
                              const uint16_t *dy, uint16_t *dqkv, pp_error *err)
{
    void *delta;
    PP_TRY(pp_exec_workspace(ex, (size_t)d->n * d->heads * d->t * sizeof(float), &delta, err));
    const pp_cuda_attention_dims a = {d->n, d->t, d->c, d->heads};
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_attention_backward_bf16(ce->stream, pp_cuda_max_grid(ex), a,
                                                          &d->drop, qkv, y, lse, dy, delta,
                                                          dqkv));
}

/* ---- the first call's check ---------------------------------------------------- */

/* One output of both: cuDNN's in place, ours in scratch of the same bytes. */
typedef struct twin {
    void *cudnn, *own;
    size_t bytes;
    bool bf16;
    double off, top; /* max |cudnn - own|, max |own| (off infinite: not finite) */
} twin;

static double value(const void *p, size_t i, bool bf16)
{
    if (!bf16) return ((const float *)p)[i];
    uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Copies both of each twin to the host (the stream synchronised) and fills
 * off and top. */
static pp_status compare(pp_exec *ex, pp_cuda_exec *ce, twin *tw, int n, pp_error *err)
{
    pp_status s = PP_OK;
    for (int k = 0; k < n && s == PP_OK; k++) {
        twin *t = &tw[k];
        char *h = malloc(2 * t->bytes);
        if (!h)
            return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (attention check)",
                                ex->dev->name);
        s = PP_CUDA(ex->dev, err, cudaMemcpyAsync(h, t->cudnn, t->bytes, cudaMemcpyDeviceToHost,
                                                  ce->stream));
        if (s == PP_OK)
            s = PP_CUDA(ex->dev, err, cudaMemcpyAsync(h + t->bytes, t->own, t->bytes,
                                                      cudaMemcpyDeviceToHost, ce->stream));
        if (s == PP_OK) s = PP_CUDA(ex->dev, err, cudaStreamSynchronize(ce->stream));
        const size_t count = t->bytes / (t->bf16 ? 2 : 4);
        t->off = t->top = 0;
        for (size_t i = 0; s == PP_OK && i < count; i++) {
            const double a = value(h, i, t->bf16), b = value(h + t->bytes, i, t->bf16);
            const double e = isfinite(a) ? fabs(a - b) : INFINITY;
            if (!(e <= t->off)) t->off = e;
            if (fabs(b) > t->top) t->top = fabs(b);
        }
        free(h);
    }
    return s;
}

/* Keeps ours (in scratch) in each twin's output. */
static pp_status keep_own(pp_exec *ex, pp_cuda_exec *ce, twin *tw, int n, pp_error *err)
{
    for (int k = 0; k < n; k++)
        PP_TRY(PP_CUDA(ex->dev, err, cudaMemcpyAsync(tw[k].cudnn, tw[k].own, tw[k].bytes,
                                                     cudaMemcpyDeviceToDevice, ce->stream)));
    return PP_OK;
}

static pp_status scratch(pp_exec *ex, twin *tw, int n, pp_error *err)
{
    for (int k = 0; k < n; k++) PP_TRY(pp_cuda_scratch_alloc(ex, tw[k].bytes, &tw[k].own, err));
    return PP_OK;
}

static void scratch_free(pp_exec *ex, twin *tw, int n)
{
    for (int k = 0; k < n; k++) pp_cuda_scratch_free(ex, tw[k].own, tw[k].bytes);
}

static pp_status check_forward(pp_exec *ex, pp_cuda_exec *ce, const pp_attention_desc *d,
                               pp_sdpa_choice *ch, const uint16_t *qkv, uint16_t *y,
                               float *lse, pp_error *err)
{
    pp_error why;
    if (pp_cuda_sdpa_forward(ex, d, qkv, y, lse, &why) != PP_OK) {
        decide(ch, PP_SDPA_FWD, PP_SDPA_OWN, why.msg);
        return own_forward(ex, ce, d, qkv, y, lse, err);
    }
    twin tw[2] = {{y, NULL, (size_t)d->n * d->t * d->c * 2, true, 0, 0},
                  {lse, NULL, (size_t)d->n * d->heads * d->t * 4, false, 0, 0}};
    pp_status s = scratch(ex, tw, 2, err);
    if (s == PP_ERR_OOM) { /* no room to check: ours this time, undecided */
        scratch_free(ex, tw, 2);
        return own_forward(ex, ce, d, qkv, y, lse, err);
    }
    if (s == PP_OK) s = own_forward(ex, ce, d, qkv, tw[0].own, tw[1].own, err);
    if (s == PP_OK) s = compare(ex, ce, tw, 2, err);
    if (s == PP_OK) {
        const bool same = tw[0].off <= TOL_Y * tw[0].top && tw[1].off <= TOL_LSE;
        char msg[sizeof ch->why[0]];
        snprintf(msg, sizeof msg,
                 "%s ours at the first call: y off by %.2e (largest %.3g, tolerance %.0e of "
                 "it), lse off by %.2e (tolerance %.0e)%s",
                 same ? "agrees with" : "differs from", tw[0].off, tw[0].top, TOL_Y, tw[1].off,
                 TOL_LSE, same ? "" : ", so ours runs");
        decide(ch, PP_SDPA_FWD, same ? PP_SDPA_CUDNN : PP_SDPA_OWN, msg);
        if (!same) s = keep_own(ex, ce, tw, 2, err);
    }
    scratch_free(ex, tw, 2);
    return s;
}

static pp_status check_backward(pp_exec *ex, pp_cuda_exec *ce, const pp_attention_desc *d,
                                pp_sdpa_choice *ch, const uint16_t *qkv, const uint16_t *y,
                                const float *lse, const uint16_t *dy, uint16_t *dqkv,
                                pp_error *err)
{
    pp_error why;
    if (ch->use[PP_SDPA_FWD] == PP_SDPA_UNDECIDED) /* its first call was captured */
        return own_backward(ex, ce, d, qkv, y, lse, dy, dqkv, err);
    if (pp_cuda_sdpa_backward(ex, d, qkv, y, lse, dy, dqkv, &why) != PP_OK) {
        decide(ch, PP_SDPA_BWD, PP_SDPA_OWN, why.msg);
        return own_backward(ex, ce, d, qkv, y, lse, dy, dqkv, err);
    }
    twin tw = {dqkv, NULL, (size_t)d->n * d->t * 3 * d->c * 2, true, 0, 0};
    pp_status s = scratch(ex, &tw, 1, err);
    if (s == PP_ERR_OOM) { /* no room to check: ours this time, undecided */
        scratch_free(ex, &tw, 1);
        return own_backward(ex, ce, d, qkv, y, lse, dy, dqkv, err);
    }
    if (s == PP_OK) s = own_backward(ex, ce, d, qkv, y, lse, dy, tw.own, err);
    if (s == PP_OK) s = compare(ex, ce, &tw, 1, err);
    if (s == PP_OK) {
        const bool same = tw.off <= TOL_Y * tw.top;
        char msg[sizeof ch->why[0]];
        snprintf(msg, sizeof msg,
                 "%s ours at the first call: dqkv off by %.2e (largest %.3g, tolerance %.0e "
                 "of it)%s",
                 same ? "agrees with" : "differs from", tw.off, tw.top, TOL_Y,
                 same ? "" : ", so ours runs");
        decide(ch, PP_SDPA_BWD, same ? PP_SDPA_CUDNN : PP_SDPA_OWN, msg);
        if (!same) s = keep_own(ex, ce, &tw, 1, err);
    }
    scratch_free(ex, &tw, 1);
    return s;
}

/* ---- dropout runs ours: cuDNN's masks are not ours ------------------------------------- */

/* With dropout on the probabilities (d->drop.p > 0) ours runs, whatever
 * PP_CUDA_ATTN says: no other route draws dropout.h's masks. The record of
 * the shape and p (one per shape and p, not per step or micro-batch: the
 * key and first sample left out) says so in pp_cuda_sdpa_report. */
static pp_status dropout_own(pp_exec *ex, const pp_attention_desc *d, pp_sdpa_dir dir,
                             pp_cuda_exec **ce, pp_error *err)
{
    PP_TRY(begin(ex, d, ce, err));
    pp_attention_desc shape;
    memset(&shape, 0, sizeof shape); /* the record's key is compared bytewise */
    shape.n = d->n, shape.t = d->t, shape.c = d->c, shape.heads = d->heads;
    shape.drop.p = d->drop.p;
    pp_sdpa_choice *ch;
    PP_TRY(pp_cuda_sdpa_choice(ex, &shape, &ch, err));
    decide(ch, dir, PP_SDPA_OWN, "dropout runs ours: cuDNN's masks are not ours");
    return PP_OK;
}

/* ---- the entries ------------------------------------------------------------------ */

typedef enum route { RUN_OWN, RUN_CHECK, RUN_CUDNN } route;

/* Which runs direction dir of the attention of d: ours (no choice for the
 * shape, ours chosen, or the first call inside a CUDA graph capture), the
 * first call's check of cuDNN's against ours, or cuDNN's; the stream's exec
 * and the shape's choice into *ce and *ch. */
static pp_status route_of(pp_exec *ex, const pp_attention_desc *d, pp_sdpa_dir dir,
                          pp_cuda_exec **ce, pp_sdpa_choice **ch, route *r, pp_error *err)
{
    PP_TRY(begin(ex, d, ce, err));
    PP_TRY(choice_of(ex, d, ch, err));
    if (!*ch || (*ch)->use[dir] == PP_SDPA_OWN)
        *r = RUN_OWN;
    else if ((*ch)->use[dir] == PP_SDPA_UNDECIDED)
        *r = capturing(*ce) ? RUN_OWN : RUN_CHECK;
    else
        *r = RUN_CUDNN;
    return PP_OK;
}

pp_status pp_cuda_attention_forward_bf16(pp_exec *ex, const pp_attention_desc *d,
                                         const uint16_t *qkv, uint16_t *y, float *lse,
                                         pp_error *err)
{
    if (d->n == 0 || d->t == 0 || d->c == 0) return PP_OK;
    pp_cuda_exec *ce;
    if (d->drop.p > 0.0f) {
        PP_TRY(dropout_own(ex, d, PP_SDPA_FWD, &ce, err));
        return own_forward(ex, ce, d, qkv, y, lse, err);
    }
    pp_sdpa_choice *ch;
    route r;
    PP_TRY(route_of(ex, d, PP_SDPA_FWD, &ce, &ch, &r, err));
    if (r == RUN_OWN) return own_forward(ex, ce, d, qkv, y, lse, err);
    if (r == RUN_CHECK) return check_forward(ex, ce, d, ch, qkv, y, lse, err);
    pp_status s = pp_cuda_sdpa_forward(ex, d, qkv, y, lse, err);
    /* no workspace for cuDNN's plan this time: ours, which needs none */
    return s == PP_ERR_UNSUPPORTED ? own_forward(ex, ce, d, qkv, y, lse, err) : s;
}

pp_status pp_cuda_attention_backward_bf16(pp_exec *ex, const pp_attention_desc *d,
                                          const uint16_t *qkv, const uint16_t *y,
                                          const float *lse, const uint16_t *dy, uint16_t *dqkv,
                                          pp_error *err)
{
    if (d->n == 0 || d->t == 0 || d->c == 0) return PP_OK;
    pp_cuda_exec *ce;
    if (d->drop.p > 0.0f) {
        PP_TRY(dropout_own(ex, d, PP_SDPA_BWD, &ce, err));
        return own_backward(ex, ce, d, qkv, y, lse, dy, dqkv, err);
    }
    pp_sdpa_choice *ch;
    route r;
    PP_TRY(route_of(ex, d, PP_SDPA_BWD, &ce, &ch, &r, err));
    if (r == RUN_OWN) return own_backward(ex, ce, d, qkv, y, lse, dy, dqkv, err);
    if (r == RUN_CHECK) return check_backward(ex, ce, d, ch, qkv, y, lse, dy, dqkv, err);
    pp_status s = pp_cuda_sdpa_backward(ex, d, qkv, y, lse, dy, dqkv, err);
    return s == PP_ERR_UNSUPPORTED ? own_backward(ex, ce, d, qkv, y, lse, dy, dqkv, err) : s;
}
