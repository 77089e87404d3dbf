/*
 * gconv_probe.c - the graph API support probe (gconv.h): for one
 * geometry, every direction, dtype and layout through pp_cuda_gconv on
 * buffers of its own, one line each with how the plan was chosen and its
 * times.
 */
#include <string.h>

#include "gconv.h"
#include "internal.h"

static const char *const dir_name[] = {"fwd", "dgrad", "wgrad"};

/* Mean ms of 10 calls (the plan made already) on the probe's buffers. */
static pp_status mean_ms(pp_exec *ex, pp_cuda_exec *ce, const pp_conv2d_desc *d, pp_gconv_dir dir,
                         pp_dtype dt, bool nhwc, const void *a, const void *b, void *o, float *ms,
                         pp_error *err)
{
    cudaEvent_t ev[2] = {NULL, NULL};
    pp_status s = PP_CUDA(ex->dev, err, cudaEventCreate(&ev[0]));
    if (s == PP_OK) s = PP_CUDA(ex->dev, err, cudaEventCreate(&ev[1]));
    if (s == PP_OK) s = PP_CUDA(ex->dev, err, cudaEventRecord(ev[0], ce->stream));
    for (int i = 0; s == PP_OK && i < 10; i++)
        s = pp_cuda_gconv(ex, d, dir, dt, nhwc, a, b, o, 1.0f, 0.0f, err);
    if (s == PP_OK) s = PP_CUDA(ex->dev, err, cudaEventRecord(ev[1], ce->stream));
    if (s == PP_OK) s = PP_CUDA(ex->dev, err, cudaEventSynchronize(ev[1]));
    if (s == PP_OK) s = PP_CUDA(ex->dev, err, cudaEventElapsedTime(ms, ev[0], ev[1]));
    if (s == PP_OK) *ms /= 10.0f;
    for (int i = 0; i < 2; i++)
        if (ev[i]) (void)PP_CUDA(ex->dev, NULL, cudaEventDestroy(ev[i]));
    return s;
}

/* One line of the probe; buf holds x, w, y, each sized for fp32. */
static pp_status probe_one(pp_exec *ex, pp_cuda_exec *ce, const pp_conv2d_desc *d,
                           pp_gconv_dir dir, pp_dtype dt, bool nhwc, void *buf[3], FILE *out,
                           pp_error *err)
{
    const void *a = dir == PP_GCONV_DGRAD ? buf[2] : buf[0];
    const void *b = dir == PP_GCONV_WGRAD ? buf[2] : buf[1];
    void *o = dir == PP_GCONV_FWD ? buf[2] : dir == PP_GCONV_DGRAD ? buf[0] : buf[1];
    const char *dtn = dt == PP_BF16                                 ? "bf16"
                      : pp_device_math(ex->dev) == PP_MATH_TF32 ? "fp32/tf32"
                                                                : "fp32";
    fprintf(out, "  %-5s %-9s %s  ", dir_name[dir], dtn, nhwc ? "NHWC" : "NCHW");
    pp_status s = pp_cuda_gconv(ex, d, dir, dt, nhwc, a, b, o, 1.0f, 0.0f, err);
    pp_gconv_plan_info info;
    if (s == PP_OK && !pp_cuda_gconv_plan_info(ex, d, dir, dt, nhwc, 1.0f, 0.0f, &info))
        s = pp_error_set(err, PP_ERR_INTERNAL, "%s: graph convolution plan not cached",
                         ex->dev->name);
    float mean = 0.0f;
    if (s == PP_OK) s = mean_ms(ex, ce, d, dir, dt, nhwc, a, b, o, &mean, err);
    if (s != PP_OK) {
        fprintf(out, "FAILED %s: %s\n", pp_status_name(s), err->msg);
        fflush(out);
        return s;
    }
    fprintf(out,
            "heuristics %s: %d configs, %d refused by notes, %d failed, %d over the workspace "
            "cap (largest %lld MiB), %d timed; engine %lld, workspace %zu B, %.4f ms first, "
            "%.4f ms mean of 10\n",
            info.fallback ? "FALLBACK" : "A", info.found, info.refused, info.failed, info.over,
            info.over_mb, info.timed, info.engine, info.ws, info.ms, mean);
    fflush(out);
    return PP_OK;
}

pp_status pp_cuda_gconv_probe(pp_exec *ex, const pp_conv2d_desc *d, FILE *out, pp_error *err)
{
    const size_t bytes[3] = {(size_t)d->n * d->c * d->h * d->w * 4,
                             (size_t)d->k * d->c * d->r * d->s * 4,
                             (size_t)d->n * d->k * d->p * d->q * 4};
    void *buf[3] = {NULL, NULL, NULL};
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, &ce, err));
    pp_status s = PP_OK;
    for (int i = 0; s == PP_OK && i < 3; i++) {
        s = pp_device_alloc(ex->dev, bytes[i], &buf[i], err);
        /* 0x3c3c: about 0.0115 in bf16 and in fp32: small, not zero */
        if (s == PP_OK)
            s = PP_CUDA(ex->dev, err, cudaMemsetAsync(buf[i], 0x3c, bytes[i], ce->stream));
    }
    fprintf(out, "graph API probe: x %dx%dx%dx%d, w %dx%dx%dx%d, stride %d, pad %d\n", d->n, d->c,
            d->h, d->w, d->k, d->c, d->r, d->s, d->stride_h, d->pad_h);
    pp_status first = s;
    for (int dir = 0; s == PP_OK && dir < 3; dir++)
        for (int t = 0; t < 2; t++)
            for (int l = 0; l < 2; l++) {
                pp_error e;
                pp_status si = probe_one(ex, ce, d, (pp_gconv_dir)dir, t ? PP_F32 : PP_BF16,
                                         l == 0, buf, out, &e);
                if (si != PP_OK && first == PP_OK) {
                    first = si;
                    if (err) *err = e;
                }
            }
    /* the buffers' last use is queued on the exec's stream */
    pp_status w = PP_CUDA(ex->dev, first == PP_OK ? err : NULL, cudaStreamSynchronize(ce->stream));
    if (first == PP_OK) first = w;
    for (int i = 0; i < 3; i++) pp_device_free(ex->dev, buf[i], bytes[i]);
    return first;
}
