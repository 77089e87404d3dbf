/*
 * resample.c - PIL's antialiased bilinear resize, a plane at a time, both
 * passes by one vectorised kernel (see resample.h).
 */
#include "runtime/io/resample.h"

#include "runtime/io/pixels.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)
#define HALF (1 << (PRECISION_BITS - 1))
#define BLOCK 32 /* samples of a line summed in registers at a time */

/* One pass's weights: output i (of n) sums input lines [lo[i], lo[i] +
 * len[i]) with weights k[i * ksize + j] in fixed point. */
typedef struct coeffs {
    int n, ksize;
    int *lo, *len;
    int32_t *k;
} coeffs;

static double triangle(double x)
{
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static int ksize_of(int in_size, int out_size)
{
    const double scale = (double)in_size / out_size;
    return (int)ceil(scale < 1.0 ? 1.0 : scale) * 2 + 1;
}

/* Bytes coeffs_make needs for n outputs of a pass from in_size to out_size. */
static size_t coeffs_bytes(int in_size, int out_size, int n)
{
    const size_t ksize = (size_t)ksize_of(in_size, out_size);
    return ksize * sizeof(double) + (size_t)n * (2 * sizeof(int) + ksize * sizeof(int32_t));
}

/* The weights of outputs first .. first + n - 1 of a pass from in_size to
 * out_size samples, in mem (coeffs_bytes of them). */
static void coeffs_make(int in_size, int out_size, int first, int n, void *mem, coeffs *c)
{
    const double scale = (double)in_size / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = 1.0 * filterscale;
    const int ksize = ksize_of(in_size, out_size);
    double *w = mem; /* doubles first: mem is aligned for them */
    c->n = n;
    c->ksize = ksize;
    c->k = (int32_t *)(void *)(w + ksize);
    c->lo = (int *)(void *)(c->k + (size_t)n * ksize);
    c->len = c->lo + n;
    const double ss = 1.0 / filterscale;
    for (int i = 0; i < n; i++) {
        const double center = (first + i + 0.5) * scale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        double ww = 0.0;
        for (int x = 0; x < xmax; x++) {
            w[x] = triangle((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        int32_t *k = c->k + (size_t)i * ksize;
        for (int x = 0; x < ksize; x++) {
            double v = x < xmax && ww != 0.0 ? w[x] / ww : 0.0;
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
                         : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
        }
        c->lo[i] = xmin;
        c->len[i] = xmax;
    }
}

static uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* m (<= BLOCK) samples of one output line: the sum of len input lines from
 * `in`, `stride` bytes apart, weighted by k. */
static inline void sum_block(const uint8_t *in, int64_t stride, const int32_t *k, int len, int m,
                             uint8_t *out)
{
    int32_t a[BLOCK];
    if (m == BLOCK) { /* fixed trip counts: the compiler keeps a[] in vector registers */
        for (int q = 0; q < BLOCK; q++) a[q] = HALF;
        for (int t = 0; t < len; t++) {
            const uint8_t *r = in + t * stride;
            const int32_t kt = k[t];
            for (int q = 0; q < BLOCK; q++) a[q] += r[q] * kt;
        }
        for (int q = 0; q < BLOCK; q++) { /* clip8, spelled as max and min */
            int32_t v = a[q] >> PRECISION_BITS;
            v = v < 0 ? 0 : v;
            v = v > 255 ? 255 : v;
            out[q] = (uint8_t)v;
        }
        return;
    }
    for (int q = 0; q < m; q++) a[q] = HALF;
    for (int t = 0; t < len; t++) {
        const uint8_t *r = in + t * stride;
        const int32_t kt = k[t];
        for (int q = 0; q < m; q++) a[q] += r[q] * kt;
    }
    for (int q = 0; q < m; q++) out[q] = clip8(a[q]);
}

/* One pass: output line i (of c->n, each n bytes, out_stride apart) from
 * the input lines lo[i] .. lo[i] + len[i] - 1, line l at in + (l - first) *
 * stride. Whole blocks only, where a line allows: its last block overlaps
 * the one before (each sample depends on its own inputs only, so samples
 * computed twice come out the same). */
static void sum_lines(const uint8_t *in, int64_t stride, int first, int64_t n, const coeffs *c,
                      uint8_t *out, int64_t out_stride)
{
    for (int i = 0; i < c->n; i++) {
        const int32_t *k = c->k + (size_t)i * c->ksize;
        const uint8_t *base = in + (int64_t)(c->lo[i] - first) * stride;
        uint8_t *o = out + (int64_t)i * out_stride;
        if (n < BLOCK) {
            sum_block(base, stride, k, c->len[i], (int)n, o);
            continue;
        }
        int64_t x = 0;
        for (; x + BLOCK <= n; x += BLOCK) sum_block(base + x, stride, k, c->len[i], BLOCK, o + x);
        if (x < n) sum_block(base + n - BLOCK, stride, k, c->len[i], BLOCK, o + n - BLOCK);
    }
}

pp_status pp_resample_planes(const uint8_t *src, int c, int64_t src_plane, int sw, int sh,
                             int64_t xstep, int64_t ystep, int out_w, int out_h, int ox, int oy,
                             int ow, int oh, uint8_t *dst, int64_t dst_plane, int64_t dst_stride,
                             pp_image_work *work, pp_error *err)
{
    if (c <= 0 || sw <= 0 || sh <= 0 || out_w <= 0 || out_h <= 0 || ox < 0 || oy < 0 ||
        ow <= 0 || oh <= 0 || ox + ow > out_w || oy + oh > out_h || dst_stride < ow)
        return pp_error_set(err, PP_ERR_INVALID, "resize: bad sizes");
    const bool need_h = out_w != sw, need_v = out_h != sh;
    if (!need_h && !need_v) { /* the window of the image itself */
        for (int k = 0; k < c; k++)
            pp_px_move_plane(src + k * src_plane + ox * xstep + oy * ystep, xstep, ystep, ow, oh,
                             dst + k * dst_plane, 1, dst_stride);
        return PP_OK;
    }
    /* the weights, once for every plane */
    const size_t hb = need_h ? coeffs_bytes(sw, out_w, ow) : 0;
    const size_t vb = need_v ? coeffs_bytes(sh, out_h, oh) : 0;
    uint8_t *mem = pp_image_work_buf(work, PP_WORK_WEIGHTS, (hb + 7) / 8 * 8 + vb);
    if (!mem) return pp_error_set(err, PP_ERR_OOM, "out of host memory (resize weights)");
    coeffs hc = {0}, vc = {0};
    if (need_h) coeffs_make(sw, out_w, ox, ow, mem, &hc);
    if (need_v) coeffs_make(sh, out_h, oy, oh, mem + (hb + 7) / 8 * 8, &vc);
    /* the input rows the vertical pass reads (the window's rows without one) */
    const int y0 = need_v ? vc.lo[0] : oy;
    const int y1 = need_v ? vc.lo[oh - 1] + vc.len[oh - 1] : oy + oh;
    const int rows = y1 - y0;
    /* the horizontal pass's columns x0 .. x1 - 1 */
    const int x0 = need_h ? hc.lo[0] : ox, x1 = need_h ? hc.lo[ow - 1] + hc.len[ow - 1] : ox + ow;
    /* scratch: the transposed source, then the intermediate rows; the
     * horizontal pass's columns */
    const bool need_t = need_h ? ystep != 1 || need_v : xstep != 1;
    const int tw = x1 - x0 > ow ? x1 - x0 : ow;
    uint8_t *t = need_t ? pp_image_work_buf(work, PP_WORK_RESIZE_A, (size_t)rows * tw) : NULL;
    uint8_t *hcols = need_h ? pp_image_work_buf(work, PP_WORK_RESIZE_B, (size_t)ow * rows) : NULL;
    if ((need_t && !t) || (need_h && !hcols))
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (resize)");
    for (int k = 0; k < c; k++) {
        const uint8_t *plane = src + k * src_plane;
        uint8_t *out = dst + k * dst_plane;
        if (!need_h) { /* the vertical pass alone, over the window's columns as rows */
            if (xstep == 1) {
                sum_lines(plane + ox + y0 * ystep, ystep, y0, ow, &vc, out, dst_stride);
            } else {
                pp_px_move_plane(plane + ox * xstep + y0 * ystep, xstep, ystep, ow, rows, t, 1,
                                 ow);
                sum_lines(t, ow, y0, ow, &vc, out, dst_stride);
            }
            continue;
        }
        /* the horizontal pass, over columns: the source's own, or transposed */
        const uint8_t *cols = plane + x0 * xstep + y0 * ystep;
        int64_t col_stride = xstep;
        if (ystep != 1) {
            pp_px_move_plane(cols, xstep, ystep, x1 - x0, rows, t, rows, 1);
            cols = t;
            col_stride = rows;
        }
        sum_lines(cols, col_stride, x0, rows, &hc, hcols, rows);
        if (!need_v) { /* its columns are the window */
            pp_px_move_plane(hcols, rows, 1, ow, oh, out, 1, dst_stride);
            continue;
        }
        pp_px_move_plane(hcols, rows, 1, ow, rows, t, 1, ow); /* to rows */
        sum_lines(t, ow, y0, ow, &vc, out, dst_stride);
    }
    return PP_OK;
}
