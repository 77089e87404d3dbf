/*
 * pixels.h - the conversions of decoded pixels to RGB or L that every
 * decoder shares, as PIL 9.4's Image.convert does them (see image.h), and
 * the copy of a box out of a whole decoded image (internal to runtime/io).
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

/* The box of a whole decoded image (width w, rows of `stride` bytes, in
 * layout) converted to `channels` into out (HWC). */
void pp_px_copy_box(const uint8_t *img, int64_t stride, pp_px_layout layout,
                    const pp_image_box *box, int channels, uint8_t *out);

/* PP_ERR_INVALID naming path when box is not inside a w x h image. */
pp_status pp_px_check_box(const char *path, const pp_image_box *box, int w, int h,
                          pp_error *err);

/* "PATH: too large (W x H pixels, at most N)" when w * h passes
 * PP_IMAGE_MAX_PIXELS or a side is not positive. */
pp_status pp_px_check_size(const char *path, int64_t w, int64_t h, pp_error *err);

#endif
