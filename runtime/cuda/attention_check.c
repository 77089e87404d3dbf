/*
 * attention_check.c - the first call's check of an attention against
 * ours (attention_check.h): twins of each output (the candidate's in place,
 * ours in scratch), copied to the host and compared there.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_check.h"

/* One output of both: the candidate's in place, ours in scratch of the same bytes. */
typedef struct twin {
    void *cand, *own;
    size_t bytes;
    bool bf16;
    double off, top; /* max |cand - own|, max |own| (off infinite: not finite) */
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
        s = PP_CUDA(ex->dev, err, cudaMemcpyAsync(h, t->cand, t->bytes, cudaMemcpyDeviceToHost,
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
        PP_TRY(PP_CUDA(ex->dev, err, cudaMemcpyAsync(tw[k].cand, tw[k].own, tw[k].bytes,
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

pp_status pp_cuda_attention_check(pp_exec *ex, pp_cuda_exec *ce, const pp_attention_desc *d,
                                  bool f32, pp_sdpa_dir dir, pp_attn_run_fn cand,
                                  pp_attn_run_fn own, void *arg, void *const out[2],
                                  pp_attn_verdict *v, char *msg, size_t cap, pp_error *err)
{
    pp_error why;
    if (cand(arg, out, &why) != PP_OK) {
        *v = PP_ATTN_REFUSED;
        snprintf(msg, cap, "%s", why.msg);
        return own(arg, out, err);
    }
    const size_t rows = (size_t)d->n * d->t;
    const size_t esize = f32 ? 4 : 2;
    const double tol_y = f32 ? PP_ATTN_TOL_Y_F32 : PP_ATTN_TOL_Y;
    const double tol_lse = f32 ? PP_ATTN_TOL_LSE_F32 : PP_ATTN_TOL_LSE;
    twin tw[2] = {{out[0], NULL, rows * (dir == PP_SDPA_FWD ? 1 : 3) * d->c * esize, !f32, 0, 0},
                  {out[1], NULL, rows * d->heads * 4, false, 0, 0}};
    const int n = dir == PP_SDPA_FWD ? 2 : 1;
    pp_status s = scratch(ex, tw, n, err);
    if (s == PP_ERR_OOM) { /* no room to check: ours this time, undecided */
        scratch_free(ex, tw, n);
        *v = PP_ATTN_UNCHECKED;
        snprintf(msg, cap, "not checked yet (no device memory for the check)");
        return own(arg, out, err);
    }
    void *mine[2] = {tw[0].own, n > 1 ? tw[1].own : NULL};
    if (s == PP_OK) s = own(arg, mine, err);
    if (s == PP_OK) s = compare(ex, ce, tw, n, err);
    if (s == PP_OK) {
        const bool same = tw[0].off <= tol_y * tw[0].top && (n == 1 || tw[1].off <= tol_lse);
        const int w = snprintf(msg, cap,
                               "%s ours at the first call: %s off by %.2e (largest %.3g, "
                               "tolerance %.0e of it)",
                               same ? "agrees with" : "differs from",
                               dir == PP_SDPA_FWD ? "y" : "dqkv", tw[0].off, tw[0].top,
                               tol_y);
        if (n > 1 && w > 0 && (size_t)w < cap)
            snprintf(msg + w, cap - (size_t)w, ", lse off by %.2e (tolerance %.0e)", tw[1].off,
                     tol_lse);
        *v = same ? PP_ATTN_AGREES : PP_ATTN_DIFFERS;
        if (!same) s = keep_own(ex, ce, tw, n, err);
    }
    scratch_free(ex, tw, n);
    return s;
}
