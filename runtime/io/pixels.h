/*
 * pixels.h - the conversions of decoded pixels to RGB or L that every
 * decoder shares, as PIL 9.4's Image.convert does them (see image.h), and
 * the copy of decoded rows into a decode's output layout (internal to
 * runtime/io).
 */
#ifndef PP_IO_PIXELS_H
#define PP_IO_PIXELS_H

#include <stdint.h>

#include "runtime/io/image.h"

/* How a decoder's row is laid out, 8 bits a sample. */
typedef enum pp_px_layout {
    PP_PX_GRAY = 0,     /* L */
    PP_PX_GRAY_ALPHA,   /* LA */
    PP_PX_RGB,
    PP_PX_RGBA,
    PP_PX_CMYK,         /* as PIL holds it (0 = no ink) */
    PP_PX_CMYK_INVERTED /* as Adobe JPEGs store it (255 = no ink) */
} pp_px_layout;

/* Samples a pixel of a layout. */
int pp_px_samples(pp_px_layout layout);

/* n pixels of src (in layout) as `channels` (1: L, 3: RGB) bytes a pixel. */
void pp_px_convert(const uint8_t *src, pp_px_layout layout, int n, int channels, uint8_t *out);

/* n pixels of a decoded row (in layout), converted to `channels`, as row y
 * of out (pixels 0 .. n - 1 of it). */
void pp_px_put_row(const uint8_t *row, pp_px_layout layout, int n, int channels,
                   const pp_image_out *out, int y);

/* Rows y .. y + nrows - 1 of out from nrows decoded rows (n pixels each, in
 * layout, from rows[r] + x0 pixels): row by row, or into planes of columns
 * 8 rows at a time as 8 x 8 tiles. */
void pp_px_put_rows(const uint8_t *const *rows, int nrows, int x0, pp_px_layout layout, int n,
                    int channels, const pp_image_out *out, int y);

/* The box of a whole decoded image (rows of `stride` bytes, in layout)
 * converted to `channels` into out. */
void pp_px_copy_box(const uint8_t *img, int64_t stride, pp_px_layout layout,
                    const pp_image_box *box, int channels, const pp_image_out *out);

/* Copies a w x h plane of bytes: pixel (x, y) from src[x * sx + y * sy] to
 * dst[x * dx + y * dy]; in tiles, so that a transpose (columns to rows or
 * back) touches few cache lines at a time. */
void pp_px_move_plane(const uint8_t *src, int64_t sx, int64_t sy, int w, int h, uint8_t *dst,
                      int64_t dx, int64_t dy);

/* PP_ERR_INVALID naming path when box is not inside a w x h image. */
pp_status pp_px_check_box(const char *path, const pp_image_box *box, int w, int h,
                          pp_error *err);

/* "PATH: too large (W x H pixels, at most N)" when w * h passes
 * PP_IMAGE_MAX_PIXELS or a side is not positive. */
pp_status pp_px_check_size(const char *path, int64_t w, int64_t h, pp_error *err);

#endif
