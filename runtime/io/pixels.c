/*
 * pixels.c - conversions of decoded rows to RGB or L (pixels.h).
 */
#include "runtime/io/pixels.h"

#include <stdbool.h>
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
    const uint8_t *rows[16];
    for (int y = 0; y < box->h; y += 16) {
        const int n = box->h - y < 16 ? box->h - y : 16;
        for (int r = 0; r < n; r++) rows[r] = img + (int64_t)(box->y + y + r) * stride;
        pp_px_put_rows(rows, n, box->x, layout, box->w, channels, out, y);
    }
}

/* Sixteen bytes (GCC's and Clang's vector extension: one SSE or NEON
 * register, plain code where there is none), and the interleavings of two
 * that a 16 x 16 transpose is made of (SSE2's unpack instructions). */
typedef uint8_t bytes16 __attribute__((vector_size(16)));
#define ZIP8_LO(a, b) __builtin_shufflevector(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, \
                                              6, 22, 7, 23)
#define ZIP8_HI(a, b) __builtin_shufflevector(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, \
                                              29, 14, 30, 15, 31)
#define ZIP16_LO(a, b) __builtin_shufflevector(a, b, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, \
                                               6, 7, 22, 23)
#define ZIP16_HI(a, b) __builtin_shufflevector(a, b, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, \
                                               29, 14, 15, 30, 31)
#define ZIP32_LO(a, b) __builtin_shufflevector(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, \
                                               21, 22, 23)
#define ZIP32_HI(a, b) __builtin_shufflevector(a, b, 8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, \
                                               15, 28, 29, 30, 31)
#define ZIP64_LO(a, b) __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, \
                                               21, 22, 23)
#define ZIP64_HI(a, b) __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, \
                                               27, 28, 29, 30, 31)

/* A 16 x 16 tile of bytes transposed: row i (16 bytes at s + i * ss)
 * becomes column i (byte i of the 16 at d + j * ds, j < 16), in four rounds
 * of interleaving pairs of rows by 1, 2, 4 and 8 bytes. */
static inline void transpose_tile(const uint8_t *s, int64_t ss, uint8_t *d, int64_t ds)
{
    bytes16 r[16], a[16], b[16];
    for (int i = 0; i < 16; i++) memcpy(&r[i], s + i * ss, 16);
    for (int i = 0; i < 8; i++) { /* a[2i + q]: rows 2i, 2i + 1; columns 8q .. 8q + 7 */
        a[2 * i] = ZIP8_LO(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = ZIP8_HI(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) /* b[4i + 2h + q]: rows 4i .. 4i + 3; columns 8h + 4q .. + 3 */
        for (int h = 0; h < 2; h++) {
            b[4 * i + 2 * h] = ZIP16_LO(a[4 * i + h], a[4 * i + 2 + h]);
            b[4 * i + 2 * h + 1] = ZIP16_HI(a[4 * i + h], a[4 * i + 2 + h]);
        }
    for (int i = 0; i < 2; i++) /* a[8i + 2j + q]: rows 8i .. 8i + 7; columns 4j + 2q, + 1 */
        for (int j = 0; j < 4; j++) {
            a[8 * i + 2 * j] = ZIP32_LO(b[8 * i + j], b[8 * i + 4 + j]);
            a[8 * i + 2 * j + 1] = ZIP32_HI(b[8 * i + j], b[8 * i + 4 + j]);
        }
    for (int j = 0; j < 8; j++) { /* b[2j + q]: every row; column 2j + q */
        b[2 * j] = ZIP64_LO(a[j], a[8 + j]);
        b[2 * j + 1] = ZIP64_HI(a[j], a[8 + j]);
    }
    for (int j = 0; j < 16; j++) memcpy(d + j * ds, &b[j], 16);
}

/* The w x h bytes at src (h rows of w, ss apart) transposed into dst (w
 * rows of h, ds apart): dst[x * ds + y] = src[y * ss + x]. */
static void transpose(const uint8_t *src, int64_t ss, int w, int h, uint8_t *dst, int64_t ds)
{
    int y = 0;
    for (; y + 16 <= h; y += 16) {
        int x = 0;
        for (; x + 16 <= w; x += 16) transpose_tile(src + y * ss + x, ss, dst + x * ds + y, ds);
        for (; x < w; x++)
            for (int r = 0; r < 16; r++) dst[x * ds + y + r] = src[(y + r) * ss + x];
    }
    for (; y < h; y++)
        for (int x = 0; x < w; x++) dst[x * ds + y] = src[y * ss + x];
}

#define TILE 16 /* pixels a side of the tiles of a move with other strides */

void pp_px_move_plane(const uint8_t *src, int64_t sx, int64_t sy, int w, int h, uint8_t *dst,
                      int64_t dx, int64_t dy)
{
    if (sx == 1 && dx == 1) { /* rows to rows */
        for (int y = 0; y < h; y++) memcpy(dst + y * dy, src + y * sy, (size_t)w);
        return;
    }
    if (sx == 1 && dy == 1) { /* rows to columns */
        transpose(src, sy, w, h, dst, dx);
        return;
    }
    if (sy == 1 && dx == 1) { /* columns to rows */
        transpose(src, sx, h, w, dst, dy);
        return;
    }
    for (int y0 = 0; y0 < h; y0 += TILE)
        for (int x0 = 0; x0 < w; x0 += TILE) {
            const int y1 = y0 + TILE < h ? y0 + TILE : h, x1 = x0 + TILE < w ? x0 + TILE : w;
            for (int x = x0; x < x1; x++)
                for (int y = y0; y < y1; y++) dst[x * dx + y * dy] = src[x * sx + y * sy];
        }
}

#define STRIP 64 /* pixels of 16 rows deinterleaved at a time on the stack */

/* 16 rows of n pixels (RGB or L: c samples a pixel, from rows[r] + x0 * c)
 * into planes of columns as rows y .. y + 15: the rows' samples, each
 * channel's gathered into a strip of its own, go as 16 x 16 tiles. */
static void put_tiles(const uint8_t *const *rows, int x0, int c, int n, const pp_image_out *out,
                      int y)
{
    uint8_t strip[3][16][STRIP];
    for (int xs = 0; xs < n; xs += STRIP) {
        const int m = n - xs < STRIP ? n - xs : STRIP;
        for (int r = 0; r < 16; r++) {
            const uint8_t *src = rows[r] + (int64_t)(x0 + xs) * c;
            if (c == 3) /* the three channels of a pixel at once */
                for (int x = 0; x < m; x++) {
                    strip[0][r][x] = src[3 * x];
                    strip[1][r][x] = src[3 * x + 1];
                    strip[2][r][x] = src[3 * x + 2];
                }
            else
                memcpy(strip[0][r], src, (size_t)m);
        }
        for (int k = 0; k < c; k++) {
            uint8_t *dst = out->px + k * out->plane + xs * out->xstep + y;
            int x = 0;
            for (; x + 16 <= m; x += 16)
                transpose_tile(&strip[k][0][x], STRIP, dst + x * out->xstep, out->xstep);
            for (; x < m; x++)
                for (int r = 0; r < 16; r++) dst[x * out->xstep + r] = strip[k][r][x];
        }
    }
}

void pp_px_put_rows(const uint8_t *const *rows, int nrows, int x0, pp_px_layout layout, int n,
                    int channels, const pp_image_out *out, int y)
{
    const int ns = pp_px_samples(layout);
    int r = 0;
    if (out->ystep == 1 &&
        ((layout == PP_PX_RGB && channels == 3) || (layout == PP_PX_GRAY && channels == 1)))
        for (; r + 16 <= nrows; r += 16) put_tiles(rows + r, x0, channels, n, out, y + r);
    for (; r < nrows; r++)
        pp_px_put_row(rows[r] + (int64_t)x0 * ns, layout, n, channels, out, y + r);
}

pp_status pp_px_check_size(const char *path, int64_t w, int64_t h, pp_error *err)
{
    if (w <= 0 || h <= 0)
        return pp_error_set(err, PP_ERR_INPUT, "%s: not an image (size %lld x %lld)", path,
                            (long long)w, (long long)h);
    /* a side past the limit first: the product of two 32-bit sides (BMP's)
     * may not fit in 64 bits */
    if (w > PP_IMAGE_MAX_PIXELS || h > PP_IMAGE_MAX_PIXELS || w * h > PP_IMAGE_MAX_PIXELS)
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
