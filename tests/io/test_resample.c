/*
 * test_resample.c - PIL's bilinear resize (runtime/io/resample.h) and the
 * transforms' application (transform.h) against a naive reference: PIL
 * 9.4's ImagingResample restated as plainly as it reads (weights per
 * output, horizontal pass over every row into 8-bit samples, then the
 * vertical pass, one sample at a time), on interleaved pixels.
 *
 *   planes      every source layout (planes of rows, planes of columns, a
 *               channel of interleaved pixels), shrinking, enlarging, one
 *               side unchanged, both unchanged, whole results and random
 *               windows of them: the reference's bits
 *   constant    a constant image resizes to the same constant
 *   transforms  random_resized_crop's operations (crop, resize, flip) and
 *               evaluation's (resize of the shorter side, center crop) on
 *               a source given as rows and as columns: the reference's
 *               crop, resize and mirror, bit for bit; one work for all
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/image.h"
#include "runtime/io/resample.h"
#include "runtime/io/transform.h"
#include "tests/check.h"

/* ---- the reference ------------------------------------------------------------- */

#define PREC 22

/* PIL's precompute_coeffs and normalize_coeffs_8bpc for one output xx. */
static int ref_weights(int in_size, int out_size, int xx, int *xmin_out, int32_t *k)
{
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = filterscale, center = (xx + 0.5) * scale, ww = 0.0, w[4096];
    int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
    if (xmin < 0) xmin = 0;
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    for (int x = 0; x < xmax; x++) {
        double t = fabs((x + xmin - center + 0.5) / filterscale);
        w[x] = t < 1.0 ? 1.0 - t : 0.0;
        ww += w[x];
    }
    for (int x = 0; x < xmax; x++) {
        double v = ww != 0.0 ? w[x] / ww : w[x];
        k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PREC)) : (int32_t)(0.5 + v * (1 << PREC));
    }
    *xmin_out = xmin;
    return xmax;
}

static uint8_t ref_clip(int32_t v)
{
    v >>= PREC;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* src (sw x sh, c bytes a pixel, HWC) resized to ow x oh into dst (HWC). */
static void ref_resize(const uint8_t *src, int sw, int sh, int c, int ow, int oh, uint8_t *dst)
{
    uint8_t *tmp = malloc((size_t)ow * sh * c);
    int32_t k[4096];
    const uint8_t *h_out = src;
    if (ow != sw) {
        for (int y = 0; y < sh; y++)
            for (int xx = 0; xx < ow; xx++) {
                int xmin, n = ref_weights(sw, ow, xx, &xmin, k);
                for (int ch = 0; ch < c; ch++) {
                    int32_t ss = 1 << (PREC - 1);
                    for (int x = 0; x < n; x++) ss += src[((size_t)y * sw + xmin + x) * c + ch] * k[x];
                    tmp[((size_t)y * ow + xx) * c + ch] = ref_clip(ss);
                }
            }
        h_out = tmp;
    }
    if (oh != sh) {
        for (int yy = 0; yy < oh; yy++) {
            int ymin, n = ref_weights(sh, oh, yy, &ymin, k);
            for (int x = 0; x < ow * c; x++) {
                int32_t ss = 1 << (PREC - 1);
                for (int y = 0; y < n; y++) ss += h_out[(size_t)(ymin + y) * ow * c + x] * k[y];
                dst[(size_t)yy * ow * c + x] = ref_clip(ss);
            }
        }
    } else {
        memcpy(dst, h_out, (size_t)ow * oh * c);
    }
    free(tmp);
}

/* ---- fixtures ------------------------------------------------------------------ */

static uint32_t rng_state = 777;
static int rnd(int n)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return (int)((rng_state >> 8) % (uint32_t)n);
}

/* A picture with detail and noise: HWC, c channels. */
static uint8_t *picture(int w, int h, int c)
{
    uint8_t *p = malloc((size_t)w * h * c);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                p[((size_t)y * w + x) * c + k] =
                    (uint8_t)(128 + 100 * sin(x / (7.0 + k) + y / 13.0) + rnd(40) - 20);
    return p;
}

/* Channel k of hwc (w x h, c channels) as a plane of rows or of columns. */
static void to_plane(const uint8_t *hwc, int w, int h, int c, int k, bool columns, uint8_t *out)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            out[columns ? (size_t)x * h + y : (size_t)y * w + x] = hwc[((size_t)y * w + x) * c + k];
}

/* ---- planes -------------------------------------------------------------------- */

/* Three planes at once from each layout, whole results and windows. */

static void test_planes(pp_image_work *work)
{
    static const int cases[][4] = { /* sw, sh, out_w, out_h */
        {53, 41, 17, 13}, {53, 41, 53, 20}, {53, 41, 20, 41}, {53, 41, 100, 77},
        {53, 41, 53, 41}, {53, 41, 7, 90},  {500, 375, 224, 224}, {137, 301, 224, 224},
        {300, 40, 224, 224}, {1000, 9, 31, 5}, {1, 1, 5, 3}, {6, 700, 2, 224},
    };
    const int c = 3;
    int checked = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int sw = cases[i][0], sh = cases[i][1], ow = cases[i][2], oh = cases[i][3];
        uint8_t *src = picture(sw, sh, c), *want = malloc((size_t)ow * oh * c);
        uint8_t *planes = malloc((size_t)sw * sh * c), *got = malloc((size_t)ow * oh * c);
        ref_resize(src, sw, sh, c, ow, oh, want);
        for (int layout = 0; layout < 3; layout++) { /* rows, columns, interleaved */
            const uint8_t *s = planes;
            int64_t plane = (int64_t)sw * sh, xs = 1, ys = sw;
            if (layout == 2) {
                s = src;
                plane = 1;
                xs = c;
                ys = (int64_t)sw * c;
            } else {
                for (int k = 0; k < c; k++)
                    to_plane(src, sw, sh, c, k, layout == 1, planes + k * plane);
                if (layout == 1) {
                    xs = sh;
                    ys = 1;
                }
            }
            for (int t = 0; t < 6; t++) { /* the whole result, then windows */
                int x = 0, y = 0, w = ow, h = oh;
                if (t) {
                    x = rnd(ow);
                    y = rnd(oh);
                    w = 1 + rnd(ow - x);
                    h = 1 + rnd(oh - y);
                }
                pp_error err;
                CHECK_OK(pp_resample_planes(s, c, plane, sw, sh, xs, ys, ow, oh, x, y, w, h, got,
                                            (int64_t)w * h, w, work, &err), &err);
                int bad = 0;
                for (int k = 0; k < c; k++)
                    for (int r = 0; r < h; r++)
                        for (int q = 0; q < w; q++)
                            bad += got[((size_t)k * h + r) * w + q] !=
                                   want[((size_t)(y + r) * ow + x + q) * c + k];
                CHECK_MSG(bad == 0, "%dx%d to %dx%d, layout %d, window %dx%d at (%d, %d): %d "
                          "samples differ from PIL's", sw, sh, ow, oh, layout, w, h, x, y, bad);
                checked++;
            }
        }
        free(src);
        free(want);
        free(planes);
        free(got);
    }
    CHECK(checked == 12 * 3 * 6);
    /* constant in, constant out (the weights sum to one in fixed point) */
    uint8_t flat[53 * 41], out[31 * 19];
    memset(flat, 200, sizeof flat);
    pp_error err;
    CHECK_OK(pp_resample_planes(flat, 1, 0, 53, 41, 1, 53, 31, 19, 0, 0, 31, 19, out, 0, 31, work,
                                &err), &err);
    int off = 0;
    for (size_t k = 0; k < sizeof out; k++) off += out[k] != 200;
    CHECK(off == 0);
    /* a window outside the result is refused */
    CHECK(pp_resample_planes(flat, 1, 0, 53, 41, 1, 53, 31, 19, 20, 0, 12, 19, out, 0, 31, work,
                             &err) == PP_ERR_INVALID);
}

/* ---- transforms ---------------------------------------------------------------- */

/* The reference of ops on src (w x h, c channels, HWC): crops (zeros outside),
 * resizes, flips, one after another on whole images; the result (ow x oh)
 * into dst as planes. */
static void ref_apply(const pp_tf_op *ops, int n, const uint8_t *src, int w, int h, int c,
                      uint8_t *dst)
{
    uint8_t *cur = malloc((size_t)w * h * c);
    memcpy(cur, src, (size_t)w * h * c);
    for (int i = 0; i < n; i++) {
        const pp_tf_op *op = &ops[i];
        int nw = w, nh = h;
        if (op->kind == PP_TF_OP_CROP) {
            nw = op->box.w;
            nh = op->box.h;
        } else if (op->kind == PP_TF_OP_RESIZE) {
            nw = op->w;
            nh = op->h;
        }
        uint8_t *next = calloc((size_t)nw * nh * c, 1);
        for (int y = 0; y < nh; y++)
            for (int x = 0; x < nw; x++)
                for (int k = 0; k < c; k++) {
                    uint8_t *o = &next[((size_t)y * nw + x) * c + k];
                    if (op->kind == PP_TF_OP_FLIP) {
                        *o = cur[((size_t)y * w + (w - 1 - x)) * c + k];
                    } else if (op->kind == PP_TF_OP_CROP) {
                        const int sx = op->box.x + x, sy = op->box.y + y;
                        if (sx >= 0 && sy >= 0 && sx < w && sy < h)
                            *o = cur[((size_t)sy * w + sx) * c + k];
                    }
                }
        if (op->kind == PP_TF_OP_RESIZE) ref_resize(cur, w, h, c, nw, nh, next);
        free(cur);
        cur = next;
        w = nw;
        h = nh;
    }
    for (int k = 0; k < c; k++) to_plane(cur, w, h, c, k, false, dst + (size_t)k * w * h);
    free(cur);
}

static void test_transforms(pp_image_work *work)
{
    pp_transform train[2] = {pp_transform_default(PP_TF_RANDOM_RESIZED_CROP),
                             pp_transform_default(PP_TF_HORIZONTAL_FLIP)};
    train[0].w = train[0].h = 64;
    pp_transform eval[2] = {pp_transform_default(PP_TF_RESIZE),
                            pp_transform_default(PP_TF_CENTER_CROP)};
    eval[0].h = 72;
    eval[1].w = eval[1].h = 64;
    static const int sizes[][2] = {{200, 150}, {150, 200}, {71, 333}, {64, 64}, {40, 30}};
    const int c = 3;
    int bad_lists = 0, runs = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int w = sizes[s][0], h = sizes[s][1];
        uint8_t *src = picture(w, h, c);
        uint8_t *planes = malloc((size_t)w * h * c);
        for (int list = 0; list < 2; list++)
            for (int index = 0; index < 12; index++) {
                const pp_transform *t = list ? eval : train;
                pp_tf_op ops[4];
                int n, ow, oh;
                pp_error err;
                CHECK_OK(pp_transform_draw(t, 2, 5, 0, index, w, h, "x", ops, &n, &err), &err);
                pp_transform_out_size(t, 2, w, h, &ow, &oh);
                uint8_t *want = malloc((size_t)ow * oh * c);
                ref_apply(ops, n, src, w, h, c, want);
                /* the decoder's box, in the layout the operations ask for, and
                 * also in the other one */
                const pp_image_box got = pp_transform_first_box(ops, n, w, h);
                const bool wants = pp_transform_wants_columns(ops, n, &got, w, h);
                for (int columns = 0; columns < 2; columns++) {
                    uint8_t *box = malloc((size_t)got.w * got.h * c);
                    for (int y = 0; y < got.h; y++)
                        for (int x = 0; x < got.w; x++)
                            for (int k = 0; k < c; k++)
                                box[(size_t)k * got.w * got.h +
                                    (columns ? (size_t)x * got.h + y : (size_t)y * got.w + x)] =
                                    src[((size_t)(got.y + y) * w + got.x + x) * c + k];
                    pp_tf_image in = {.px = box, .w = w, .h = h, .c = c, .part = got,
                                      .plane = (int64_t)got.w * got.h, .xstep = columns ? got.h : 1,
                                      .ystep = columns ? 1 : got.w};
                    const uint8_t *out;
                    bool mirror;
                    CHECK_OK(pp_transform_apply(ops, n, &in, ow, oh, work, &out, &mirror, &err),
                             &err);
                    int bad = 0;
                    for (int k = 0; k < c; k++)
                        for (int y = 0; y < oh; y++)
                            for (int x = 0; x < ow; x++)
                                bad += out[((size_t)k * oh + y) * ow + (mirror ? ow - 1 - x : x)] !=
                                       want[((size_t)k * oh + y) * ow + x];
                    bad_lists += bad != 0;
                    CHECK_MSG(bad == 0, "%s list, %dx%d image, sample %d, box as %s (wanted %s): "
                              "%d samples differ", list ? "eval" : "train", w, h, index,
                              columns ? "columns" : "rows", wants ? "columns" : "rows", bad);
                    runs++;
                    free(box);
                }
                free(want);
            }
        free(src);
        free(planes);
    }
    CHECK(runs == 5 * 2 * 12 * 2 && bad_lists == 0);
    /* the train list asks the decoder for columns (its resize reads them) */
    pp_tf_op ops[4];
    int n;
    pp_error err;
    CHECK_OK(pp_transform_draw(train, 2, 5, 0, 0, 200, 150, "x", ops, &n, &err), &err);
    const pp_image_box got = pp_transform_first_box(ops, n, 200, 150);
    CHECK(ops[1].kind == PP_TF_OP_RESIZE &&
          pp_transform_wants_columns(ops, n, &got, 200, 150) == (got.w != 64));
}

int main(void)
{
    pp_image_work *work;
    pp_error err;
    CHECK_OK(pp_image_work_new(&work, &err), &err);
    test_planes(work);
    test_transforms(work);
    pp_image_work_free(work);
    return check_summary("test_resample");
}
