/*
 * codec_png.c - PNG through libpng (see image.h): decoded whole, then the
 * box is converted as PIL's convert does. libpng expands palettes (a
 * transparency chunk becomes alpha, dropped as PIL's convert("RGB") drops
 * it) and gray
 * of 1, 2 or 4 bits (scaled to 8, as PIL unpacks it), strips 16-bit samples
 * to their high byte (PIL's "RGB;16B" and "LA;16B"), except 16-bit gray
 * without alpha, which PIL reads as 32-bit integers and clips to 255 in
 * convert: that one is read at 16 bits and clipped here. Gamma and colour
 * profiles are ignored, as PIL ignores them. Interlaced images are read
 * whole through libpng's interlace handling.
 */
#include "runtime/io/codecs.h"
#include "runtime/io/pixels.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

typedef struct png_src {
    const uint8_t *buf;
    size_t n, at;
    char msg[200];
} png_src;

static void on_read(png_structp png, png_bytep out, size_t len)
{
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->at) {
        snprintf(s->msg, sizeof s->msg, "truncated (the PNG data ends early)");
        png_longjmp(png, 1);
    }
    memcpy(out, s->buf + s->at, len);
    s->at += len;
}

static void on_error(png_structp png, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(png);
    if (!s->msg[0]) snprintf(s->msg, sizeof s->msg, "corrupt PNG: %s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static bool png_sniff(const uint8_t *buf, size_t n)
{
    return n >= 8 && png_sig_cmp(buf, 0, 8) == 0;
}

/* Starts a read of the PNG in s; the caller sets the jump. */
static png_structp open_png(png_src *s, png_infop *info)
{
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, s, on_error, on_warning);
    if (!png) return NULL;
    *info = png_create_info_struct(png);
    if (!*info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return NULL;
    }
    png_set_read_fn(png, s, on_read);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    return png;
}

/* The error of a read that stopped (setjmp): a header already read that
 * claims too many pixels says so first (the data of such a file is often
 * missing too), else the decoder's words. */
static pp_status png_fail(png_structp png, png_infop info, const png_src *s, const char *path,
                          pp_error *err)
{
    const int64_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (w > 0 && h > 0 && pp_px_check_size(path, w, h, err) != PP_OK) return PP_ERR_INPUT;
    return pp_error_set(err, PP_ERR_INPUT, "%s: %s", path, s->msg);
}

static pp_status png_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                          pp_image_work *work, pp_error *err)
{
    png_src s = {.buf = buf, .n = n};
    png_infop info = NULL;
    png_structp png = open_png(&s, &info);
    if (!png) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", path);
    if (setjmp(png_jmpbuf(png))) {
        pp_status st = png_fail(png, info, &s, path, err);
        png_destroy_read_struct(&png, &info, NULL);
        return st;
    }
    png_read_info(png, info);
    *w = (int)png_get_image_width(png, info);
    *h = (int)png_get_image_height(png, info);
    png_destroy_read_struct(&png, &info, NULL);
    return pp_px_check_size(path, *w, *h, err);
}

/* Sets libpng's transformations; returns the layout of the rows it gives
 * (8 bits a sample; *gray16: 16-bit gray to be clipped instead). */
static pp_px_layout set_transforms(png_structp png, png_infop info, bool *gray16)
{
    const int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    *gray16 = type == PNG_COLOR_TYPE_GRAY && depth == 16;
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16 && !*gray16) png_set_strip_16(png);
    if (*gray16) png_set_swap(png); /* host order: little-endian 16-bit values */
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    /* what libpng will give (a palette with a transparency chunk comes out
     * with alpha) */
    switch (png_get_channels(png, info)) {
    case 1: return PP_PX_GRAY;
    case 2: return PP_PX_GRAY_ALPHA;
    case 4: return PP_PX_RGBA;
    default: return PP_PX_RGB;
    }
}

static pp_status png_decode(const uint8_t *buf, size_t n, const char *path,
                            const pp_image_box *box, int channels, const pp_image_out *out,
                            pp_image_work *work, pp_error *err)
{
    png_src s = {.buf = buf, .n = n};
    png_infop info = NULL;
    png_structp png = open_png(&s, &info);
    if (!png) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", path);
    if (setjmp(png_jmpbuf(png))) {
        pp_status st = png_fail(png, info, &s, path, err);
        png_destroy_read_struct(&png, &info, NULL);
        return st;
    }
    png_read_info(png, info);
    const int W = (int)png_get_image_width(png, info), H = (int)png_get_image_height(png, info);
    pp_status st = pp_px_check_size(path, W, H, err);
    if (st == PP_OK) st = pp_px_check_box(path, box, W, H, err);
    if (st != PP_OK) {
        png_destroy_read_struct(&png, &info, NULL);
        return st;
    }
    bool gray16;
    const pp_px_layout layout = set_transforms(png, info, &gray16);
    /* the rows' pointers, then the image, in the work's rows buffer */
    const size_t stride = png_get_rowbytes(png, info);
    const size_t table = ((size_t)H * sizeof(png_bytep) + 63) / 64 * 64;
    uint8_t *mem = pp_image_work_buf(work, PP_WORK_ROWS, table + stride * (size_t)H);
    if (!mem) {
        png_destroy_read_struct(&png, &info, NULL);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory decoding", path);
    }
    png_bytep *rows = (png_bytep *)(void *)mem;
    uint8_t *img = mem + table;
    for (int y = 0; y < H; y++) rows[y] = img + (size_t)y * stride;
    png_read_image(png, rows);
    png_destroy_read_struct(&png, &info, NULL);
    if (gray16) { /* clip each 16-bit value to 255, in place, to 8 bits */
        for (int y = 0; y < H; y++) {
            const uint16_t *v = (const uint16_t *)(const void *)rows[y];
            uint8_t *o = rows[y];
            for (int x = 0; x < W; x++) o[x] = v[x] > 255 ? 255 : (uint8_t)v[x];
        }
    }
    pp_px_copy_box(img, (int64_t)stride, layout, box, channels, out);
    return PP_OK;
}

const pp_image_codec_ops pp_codec_png = {
    .name = "png", .sniff = png_sniff, .size = png_size, .decode = png_decode};
