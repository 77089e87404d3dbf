/*
 * image.h - encoded images (JPEG, PNG, WebP, TIFF, BMP, PPM/PGM) decoded to
 * 8-bit RGB or gray pixels, as PIL's Image.open(f).convert("RGB") (or
 * .convert("L")) gives them, through a table of decoders per format
 * (pp_image_codec_ops): libjpeg-turbo, libpng, libwebp, libtiff, libgd and
 * libnetpbm do the decoding; nothing here parses a format by hand.
 *
 * The format is found from the first bytes (the file's magic), never from
 * its name, as PIL does: a text file named .jpg is "not an image".
 *
 * Conversions (PIL 9.4's convert, checked by tests/torch/images_check.py):
 *   gray -> RGB        the value in every channel
 *   RGB -> L           (R*19595 + G*38470 + B*7471 + 0x8000) >> 16
 *   alpha              dropped (not composited)
 *   palette            looked up (transparency ignored)
 *   CMYK -> RGB        nk = 255 - K; X = nk - muldiv255(C|M|Y, nk) (CMYK
 *                      JPEGs are read as inverted, Adobe marker or not)
 *   16-bit RGB(A)/LA   the high byte
 *   16-bit gray        min(value, 255) (PIL reads it as mode "I" and clips)
 *   PPM/PGM maxval M   round(v / M * 255), half to even (PIL's PPM decoder);
 *                      a PGM with M > 255: min(round(v / M * 65535), 255)
 *   TIFF               8/16-bit gray, gray+alpha, RGB(A), CMYK read as stored
 *                      (16-bit: the high byte; gray clipped as above;
 *                      associated alpha divided out as PIL's RGBa), the rest
 *                      by libtiff's RGBA reader (which multiplies alpha in);
 *                      the Orientation tag applied as PIL's exif_transpose
 * The other formats are decoded to 8-bit RGB(A) or gray by their library,
 * then converted as above.
 *
 * Regions and layouts: a decode writes only the pixels of a box of the
 * image, where its output says (pp_image_out: interleaved HWC, planes of
 * rows, or planes of columns, the layout the next pass reads). JPEG decodes
 * only the rows and iMCU columns the box needs (jpeg_skip_scanlines,
 * jpeg_crop_scanline), with a margin that keeps the chroma upsampling's
 * neighbours, so the box's pixels are those of the whole image's decode; it
 * stops at the box's last row when the stream ends as JPEGs do. The other
 * formats decode whole, then copy.
 *
 * Work: a decode given a pp_image_work (image_work.h) keeps its decoder
 * objects and buffers there for the next decode on the same thread (libjpeg's
 * decompressor is made once per work); pp_image_size given one leaves the
 * header it read there for a decode of the same bytes that follows.
 *
 * Limits: an image of more than PP_IMAGE_MAX_PIXELS pixels is refused before
 * any pixel is decoded (PIL's decompression-bomb error threshold).
 *
 * Errors: PP_ERR_INPUT with a message that starts with the path given (the
 * caller's name for the bytes): "not an image (...)", "truncated", the
 * decoder's own words for corrupt data, "too large". PP_ERR_OOM when the
 * host is out of memory. Thread safety: every call may run on any number of
 * threads at once (the PPM/PGM decoder serialises itself: libnetpbm reports
 * errors through process-wide state).
 */
#ifndef PP_IMAGE_H
#define PP_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/io/image_work.h"

#define PP_IMAGE_MAX_PIXELS 178956970LL /* 2 * PIL's Image.MAX_IMAGE_PIXELS */

/* A box of an image: left x, top y, width w, height h (torchvision's
 * crop(top=y, left=x, height=h, width=w)). */
typedef struct pp_image_box {
    int x, y, w, h;
} pp_image_box;

/* Where a decode writes channel k of pixel (x, y) of its box (x, y from the
 * box's corner): px[k * plane + x * xstep + y * ystep]. */
typedef struct pp_image_out {
    uint8_t *px;
    int64_t plane, xstep, ystep;
} pp_image_out;

/* Interleaved: w x h pixels of c bytes, row after row (HWC). */
pp_image_out pp_image_out_hwc(uint8_t *px, int w, int h, int c);
/* Planes (CHW): each channel's w x h bytes row after row. */
pp_image_out pp_image_out_rows(uint8_t *px, int w, int h);
/* Planes of columns: each channel's w x h bytes column after column. */
pp_image_out pp_image_out_columns(uint8_t *px, int w, int h);

/* One format's decoder. */
typedef struct pp_image_codec_ops {
    const char *name; /* "jpeg", "png", ... */
    /* whether buf (n bytes, n >= 0) starts as this format's files do */
    bool (*sniff)(const uint8_t *buf, size_t n);
    /* the image's width and height (header only); work may be NULL */
    pp_status (*size)(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                      pp_image_work *work, pp_error *err);
    /* the pixels of box as `channels` (1: L, 3: RGB) bytes a pixel into out;
     * a box not inside the image is PP_ERR_INVALID (pp_px_check_box) */
    pp_status (*decode)(const uint8_t *buf, size_t n, const char *path, const pp_image_box *box,
                        int channels, const pp_image_out *out, pp_image_work *work,
                        pp_error *err);
} pp_image_codec_ops;

/* The codec whose magic buf has; NULL when none. */
const pp_image_codec_ops *pp_image_codec_find(const uint8_t *buf, size_t n);

/* The image's size; PP_ERR_INPUT "not an image" when no codec knows it, or
 * "too large" past PP_IMAGE_MAX_PIXELS. work may be NULL. */
pp_status pp_image_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                        pp_image_work *work, pp_error *err);

/* The pixels of box (which must lie inside the image: PP_ERR_INVALID
 * otherwise) as `channels` (1 or 3) bytes a pixel into out, with work's
 * decoder objects and buffers (NULL: made for this call and freed). */
pp_status pp_image_decode_to(const uint8_t *buf, size_t n, const char *path,
                             const pp_image_box *box, int channels, const pp_image_out *out,
                             pp_image_work *work, pp_error *err);

/* pp_image_decode_to into HWC bytes (box->w * box->h * channels at out). */
pp_status pp_image_decode(const uint8_t *buf, size_t n, const char *path, const pp_image_box *box,
                          int channels, uint8_t *out, pp_error *err);

#endif
