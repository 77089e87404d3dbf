/*
 * grid.c - samples drawn as a captioned grid, PNG through libgd (grid.h).
 */
#include "runtime/io/grid.h"
#include "runtime/core/path.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <gd.h>
#include <gdfonts.h>

#define PAD 4

pp_status pp_grid_write_png(const char *path, const uint8_t *pixels, int n, int c, int h, int w,
                            const char *const *captions, pp_error *err)
{
    if (n <= 0 || (c != 1 && c != 3) || h <= 0 || w <= 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: nothing to draw", path);
    const int scale = (PP_GRID_MIN_TILE + (h < w ? h : w) - 1) / (h < w ? h : w);
    const int64_t tw64 = (int64_t)w * (scale > 1 ? scale : 1);
    const int64_t th64 = (int64_t)h * (scale > 1 ? scale : 1);
    const gdFontPtr font = gdFontGetSmall();
    const int cols = (int)ceil(sqrt((double)n)), rows = (n + cols - 1) / cols;
    /* the picture's sides in int (libgd's coordinates); a tile too long for
     * them cannot be drawn */
    if ((tw64 + PAD) * cols + PAD > INT_MAX || (th64 + font->h + 2 * PAD) * rows + PAD > INT_MAX)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %d x %d samples too large to draw", path,
                            w, h);
    const int tw = (int)tw64, th = (int)th64;
    const int cell_w = tw + PAD, cell_h = th + font->h + 2 * PAD;
    gdImagePtr im = gdImageCreateTrueColor(cols * cell_w + PAD, rows * cell_h + PAD);
    if (!im) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory drawing", path);
    gdImageFilledRectangle(im, 0, 0, gdImageSX(im) - 1, gdImageSY(im) - 1,
                           gdTrueColor(255, 255, 255));
    const int64_t plane = (int64_t)h * w;
    for (int i = 0; i < n; i++) {
        const uint8_t *s = pixels + (int64_t)i * c * plane;
        const int x0 = PAD + (i % cols) * cell_w, y0 = PAD + (i / cols) * cell_h;
        for (int y = 0; y < th; y++)
            for (int x = 0; x < tw; x++) {
                const int64_t q = (int64_t)y * h / th * w + (int64_t)x * w / tw;
                const int r = s[q], g = s[c == 3 ? plane + q : q];
                const int b = s[c == 3 ? 2 * plane + q : q];
                gdImageSetPixel(im, x0 + x, y0 + y, gdTrueColor(r, g, b));
            }
        char cap[256];
        snprintf(cap, sizeof cap, "%s", captions && captions[i] ? captions[i] : "");
        const int fit = tw / font->w;
        if ((int)strlen(cap) > fit && fit >= 0) cap[fit] = '\0';
        gdImageString(im, font, x0, y0 + th + PAD / 2, (unsigned char *)cap, gdTrueColor(0, 0, 0));
    }
    pp_atomic_file af; /* written whole, then renamed: never half a picture at path */
    pp_status s = pp_atomic_open(&af, path, err);
    if (s == PP_OK) {
        gdImagePng(im, af.f);
        s = pp_atomic_commit(&af, err);
    }
    gdImageDestroy(im);
    return s;
}
