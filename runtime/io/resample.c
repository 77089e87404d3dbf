/*
 * resample.c - PIL's antialiased bilinear resize (see resample.h).
 */
#include "runtime/io/resample.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

/* One pass's weights: for output i (of n), input [lo[i], lo[i] + len[i])
 * with weights k[i * ksize + j] in fixed point. */
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

static void coeffs_free(coeffs *c)
{
    free(c->lo);
    free(c->len);
    free(c->k);
}

/* The weights of outputs first .. first + n - 1 of a pass from in_size to
 * out_size samples. */
static pp_status coeffs_make(int in_size, int out_size, int first, int n, coeffs *c,
                             pp_error *err)
{
    const double scale = (double)in_size / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = 1.0 * filterscale;
    const int ksize = (int)ceil(support) * 2 + 1;
    *c = (coeffs){.n = n, .ksize = ksize};
    c->lo = malloc((size_t)n * sizeof *c->lo);
    c->len = malloc((size_t)n * sizeof *c->len);
    c->k = malloc((size_t)n * (size_t)ksize * sizeof *c->k);
    double *w = malloc((size_t)ksize * sizeof *w);
    if (!c->lo || !c->len || !c->k || !w) {
        free(w);
        coeffs_free(c);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (resize weights)");
    }
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
    free(w);
    return PP_OK;
}

static uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* Horizontal pass: rows [y0, y0 + rows) of src (width sw) into tmp (width
 * hc->n). RGB rows go four at a time, their twelve sums side by side (the
 * same bits as one sample at a time: integer sums in the same order). */
static void pass_h(const uint8_t *src, int sw, int c, int y0, int rows, const coeffs *hc,
                   uint8_t *tmp)
{
    const int64_t in_stride = (int64_t)sw * c, out_stride = (int64_t)hc->n * c;
    int y = 0;
    if (c == 3) /* four rows at a time: each weight loaded once for twelve sums */
        for (; y + 4 <= rows; y += 4) {
            const uint8_t *in = src + (int64_t)(y0 + y) * in_stride;
            uint8_t *out = tmp + (int64_t)y * out_stride;
            for (int i = 0; i < hc->n; i++) {
                const int32_t *k = hc->k + (size_t)i * hc->ksize;
                const uint8_t *p = in + (int64_t)hc->lo[i] * 3;
                int32_t ss[4][3];
                for (int r = 0; r < 4; r++)
                    ss[r][0] = ss[r][1] = ss[r][2] = 1 << (PRECISION_BITS - 1);
                for (int x = 0; x < hc->len[i]; x++) {
                    const int32_t kx = k[x];
                    for (int r = 0; r < 4; r++) {
                        const uint8_t *q = p + r * in_stride + 3 * x;
                        ss[r][0] += q[0] * kx;
                        ss[r][1] += q[1] * kx;
                        ss[r][2] += q[2] * kx;
                    }
                }
                for (int r = 0; r < 4; r++) {
                    uint8_t *o = out + r * out_stride + 3 * i;
                    o[0] = clip8(ss[r][0]);
                    o[1] = clip8(ss[r][1]);
                    o[2] = clip8(ss[r][2]);
                }
            }
        }
    for (; y < rows; y++) {
        const uint8_t *in = src + (int64_t)(y0 + y) * in_stride;
        uint8_t *out = tmp + (int64_t)y * out_stride;
        for (int i = 0; i < hc->n; i++) {
            const int32_t *k = hc->k + (size_t)i * hc->ksize;
            const uint8_t *p = in + (int64_t)hc->lo[i] * c;
            for (int ch = 0; ch < c; ch++) {
                int32_t ss = 1 << (PRECISION_BITS - 1);
                for (int x = 0; x < hc->len[i]; x++) ss += p[x * c + ch] * k[x];
                out[i * c + ch] = clip8(ss);
            }
        }
    }
}

/* Vertical pass: src rows start at row y0 of the pass's input (width w);
 * acc is scratch of w * c sums. Each output row adds its input rows one at a
 * time over the whole row (the same order of terms per sample as PIL). */
static void pass_v(const uint8_t *src, int w, int c, int y0, const coeffs *vc, int32_t *acc,
                   uint8_t *dst)
{
    const int64_t n = (int64_t)w * c;
    for (int i = 0; i < vc->n; i++) {
        const int32_t *k = vc->k + (size_t)i * vc->ksize;
        const uint8_t *base = src + (int64_t)(vc->lo[i] - y0) * n;
        for (int64_t x = 0; x < n; x++) acc[x] = 1 << (PRECISION_BITS - 1);
        for (int y = 0; y < vc->len[i]; y++) {
            const uint8_t *row = base + (int64_t)y * n;
            const int32_t ky = k[y];
            for (int64_t x = 0; x < n; x++) acc[x] += row[x] * ky;
        }
        uint8_t *out = dst + (int64_t)i * n;
        for (int64_t x = 0; x < n; x++) out[x] = clip8(acc[x]);
    }
}

pp_status pp_resample_bilinear(const uint8_t *src, int sw, int sh, int c, int out_w, int out_h,
                               int ox, int oy, int ow, int oh, uint8_t *dst, pp_error *err)
{
    if (sw <= 0 || sh <= 0 || c <= 0 || out_w <= 0 || out_h <= 0 || ox < 0 || oy < 0 ||
        ow <= 0 || oh <= 0 || ox + ow > out_w || oy + oh > out_h)
        return pp_error_set(err, PP_ERR_INVALID, "resize: bad sizes");
    const bool need_h = out_w != sw, need_v = out_h != sh;
    coeffs hc = {0}, vc = {0};
    pp_status s = PP_OK;
    if (need_h) s = coeffs_make(sw, out_w, ox, ow, &hc, err);
    if (s == PP_OK && need_v) s = coeffs_make(sh, out_h, oy, oh, &vc, err);
    /* the input rows the vertical pass reads (all of the window's rows
     * without one) */
    int y0 = oy, y1 = oy + oh;
    if (s == PP_OK && need_v) {
        y0 = vc.lo[0];
        y1 = vc.lo[oh - 1] + vc.len[oh - 1];
    }
    uint8_t *tmp = NULL;
    int32_t *acc = NULL;
    if (s == PP_OK && need_v) {
        tmp = malloc((size_t)(y1 - y0) * (size_t)ow * (size_t)c);
        acc = malloc((size_t)ow * (size_t)c * sizeof *acc);
        if (!tmp || !acc) s = pp_error_set(err, PP_ERR_OOM, "out of host memory (resize)");
    }
    if (s == PP_OK) {
        if (need_h && need_v) {
            pass_h(src, sw, c, y0, y1 - y0, &hc, tmp);
            pass_v(tmp, ow, c, y0, &vc, acc, dst);
        } else if (need_h) {
            pass_h(src, sw, c, oy, oh, &hc, dst);
        } else if (need_v) {
            /* columns ox .. ox + ow of each row: a narrower copy first */
            for (int y = y0; y < y1; y++)
                memcpy(tmp + (int64_t)(y - y0) * ow * c, src + ((int64_t)y * sw + ox) * c,
                       (size_t)ow * c);
            pass_v(tmp, ow, c, y0, &vc, acc, dst);
        } else {
            for (int y = 0; y < oh; y++)
                memcpy(dst + (int64_t)y * ow * c, src + ((int64_t)(oy + y) * sw + ox) * c,
                       (size_t)ow * c);
        }
    }
    free(tmp);
    free(acc);
    coeffs_free(&hc);
    coeffs_free(&vc);
    return s;
}
