/*
 * pixels.c - conversions of decoded rows to RGB or L (pixels.h).
 */
#include "runtime/io/pixels.h"

#include <string.h>

int pp_px_samples(pp_px_layout layout)
{
    static const int samples[] = {1, 2, 3, 4, 4, 4};
    return samples[layout];
}

/* PIL's L24: the luma of an RGB pixel with ITU-R 601-2 weights, rounded. */
static uint8_t luma(uint8_t r, uint8_t g, uint8_t b)
{
    return (uint8_t)(((uint32_t)r * 19595 + (uint32_t)g * 38470 + (uint32_t)b * 7471 + 0x8000)
                     >> 16);
}

/* PIL's MULDIV255: a * b / 255, rounded, in integers. */
static uint8_t muldiv255(uint32_t a, uint32_t b)
{
    uint32_t t = a * b + 128;
    return (uint8_t)((t + (t >> 8)) >> 8);
}

void pp_px_convert(const uint8_t *src, pp_px_layout layout, int n, int channels, uint8_t *out)
{
    const int ns = pp_px_samples(layout);
    for (int i = 0; i < n; i++, src += ns) {
        uint8_t r, g, b;
        switch (layout) {
        case PP_PX_GRAY:
        case PP_PX_GRAY_ALPHA:
            if (channels == 1) {
                out[i] = src[0];
                continue;
            }
            r = g = b = src[0];
            break;
        case PP_PX_CMYK:
        case PP_PX_CMYK_INVERTED: {
            const uint8_t flip = layout == PP_PX_CMYK_INVERTED ? 255 : 0;
            const uint32_t nk = 255u - (uint8_t)(src[3] ^ flip);
            r = (uint8_t)(nk - muldiv255((uint8_t)(src[0] ^ flip), nk));
            g = (uint8_t)(nk - muldiv255((uint8_t)(src[1] ^ flip), nk));
            b = (uint8_t)(nk - muldiv255((uint8_t)(src[2] ^ flip), nk));
            break;
        }
        default: /* RGB, RGBA */
            r = src[0];
            g = src[1];
            b = src[2];
            break;
        }
        if (channels == 1) {
            out[i] = luma(r, g, b);
        } else {
            out[3 * i] = r;
            out[3 * i + 1] = g;
            out[3 * i + 2] = b;
        }
    }
}

/* n samples of one channel (src, every `step`-th byte) to dst (every
 * `xstep`-th byte); the common strides spelled out so that the compiler
 * vectorises them. */
static void put_channel(const uint8_t *src, int step, int n, uint8_t *dst, int64_t xstep)
{
    if (xstep == 1 && step == 3)
        for (int x = 0; x < n; x++) dst[x] = src[3 * x];
    else if (xstep == 1 && step == 1)
        memcpy(dst, src, (size_t)n);
    else
        for (int x = 0; x < n; x++) dst[x * xstep] = src[x * step];
}

#define CONVERT_CHUNK 256 /* pixels converted at a time on the stack */

void pp_px_put_row(const uint8_t *row, pp_px_layout layout, int n, int channels,
                   const pp_image_out *out, int y)
{
    if ((layout == PP_PX_RGB && channels == 3) || (layout == PP_PX_GRAY && channels == 1)) {
        uint8_t *dst = out->px + (int64_t)y * out->ystep;
        if (out->plane == 1 && out->xstep == channels) {
            memcpy(dst, row, (size_t)n * channels); /* HWC */
            return;
        }
        for (int k = 0; k < channels; k++)
            put_channel(row + k, channels, n, dst + k * out->plane, out->xstep);
        return;
    }
    uint8_t tmp[CONVERT_CHUNK * 3];
    const int ns = pp_px_samples(layout);
    pp_image_out part = *out;
    for (int x = 0; x < n; x += CONVERT_CHUNK) {
        const int m = n - x < CONVERT_CHUNK ? n - x : CONVERT_CHUNK;
        pp_px_convert(row + (int64_t)x * ns, layout, m, channels, tmp);
        part.px = out->px + (int64_t)x * out->xstep;
        pp_px_put_row(tmp, channels == 3 ? PP_PX_RGB : PP_PX_GRAY, m, channels, &part, y);
    }
}

void pp_px_copy_box(const uint8_t *img, int64_t stride, pp_px_layout layout,
                    const pp_image_box *box, int channels, const pp_image_out *out)
{
    const int ns = pp_px_samples(layout);
    for (int y = 0; y < box->h; y++)
        pp_px_put_row(img + (int64_t)(box->y + y) * stride + (int64_t)box->x * ns, layout,
                      box->w, channels, out, y);
}

#define TILE 16 /* pixels a side of the tiles a transposing move goes by */

void pp_px_move_plane(const uint8_t *src, int64_t sx, int64_t sy, int w, int h, uint8_t *dst,
                      int64_t dx, int64_t dy)
{
    if (sx == 1 && dx == 1) { /* rows to rows */
        for (int y = 0; y < h; y++) memcpy(dst + y * dy, src + y * sy, (size_t)w);
        return;
    }
    for (int y0 = 0; y0 < h; y0 += TILE)
        for (int x0 = 0; x0 < w; x0 += TILE) {
            const int y1 = y0 + TILE < h ? y0 + TILE : h, x1 = x0 + TILE < w ? x0 + TILE : w;
            for (int x = x0; x < x1; x++)
                for (int y = y0; y < y1; y++) dst[x * dx + y * dy] = src[x * sx + y * sy];
        }
}

pp_status pp_px_check_size(const char *path, int64_t w, int64_t h, pp_error *err)
{
    if (w <= 0 || h <= 0)
        return pp_error_set(err, PP_ERR_INPUT, "%s: not an image (size %lld x %lld)", path,
                            (long long)w, (long long)h);
    if (w * h > PP_IMAGE_MAX_PIXELS)
        return pp_error_set(err, PP_ERR_INPUT, "%s: too large (%lld x %lld pixels, at most %lld "
                            "in all)", path, (long long)w, (long long)h, PP_IMAGE_MAX_PIXELS);
    return PP_OK;
}

pp_status pp_px_check_box(const char *path, const pp_image_box *box, int w, int h,
                          pp_error *err)
{
    if (box->x < 0 || box->y < 0 || box->w <= 0 || box->h <= 0 || box->x + box->w > w ||
        box->y + box->h > h)
        return pp_error_set(err, PP_ERR_INVALID, "%s: box %dx%d at (%d, %d) outside the %dx%d "
                            "image", path, box->w, box->h, box->x, box->y, w, h);
    return PP_OK;
}
