/*
 * codec_jpeg.c - JPEG through libjpeg-turbo's libjpeg API (see image.h).
 *
 * Decoded as PIL decodes it (PIL links the same library with the same
 * defaults: islow DCT, fancy upsampling): gray JPEGs as gray, CMYK and YCCK
 * as CMYK (inverted when an Adobe marker says so), the rest as RGB. A box is
 * decoded from the rows and iMCU columns it needs only: jpeg_crop_scanline
 * and jpeg_skip_scanlines, each widened by MARGIN pixels (clamped to the
 * image) so that the upsampler's neighbours of the box's pixels are real
 * ones; the box's pixels are then those of the whole image's decode
 * (test_images checks every subsampling against whole decodes). A stream
 * that ends early is an error ("truncated"), as in PIL without
 * LOAD_TRUNCATED_IMAGES; the library's other warnings are ignored, as PIL
 * ignores them.
 */
#include "runtime/io/codecs.h"
#include "runtime/io/pixels.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#define MARGIN 16 /* pixels kept around a box: more than any upsampler's reach */

typedef struct jpeg_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void on_error(j_common_ptr c)
{
    jpeg_err *e = (jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}

/* Warnings: a stream that ends early stops the decode; the rest are ignored. */
static void on_message(j_common_ptr c, int level)
{
    jpeg_err *e = (jpeg_err *)c->err;
    if (level == -1 && c->err->msg_code == JWRN_JPEG_EOF) {
        snprintf(e->msg, sizeof e->msg, "truncated (the JPEG data ends early)");
        longjmp(e->jump, 1);
    }
}

static bool jpeg_sniff(const uint8_t *buf, size_t n)
{
    return n >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF;
}

/* Whether the end-of-image marker (FF D9) is in the last EOI_TAIL bytes. */
#define EOI_TAIL 4096
static bool has_eoi(const uint8_t *buf, size_t n)
{
    for (size_t i = n >= 2 ? n - 2 : 0; i + 1 < n && n - i <= EOI_TAIL; i--) {
        if (buf[i] == 0xFF && buf[i + 1] == 0xD9) return true;
        if (i == 0) break;
    }
    return false;
}

/* Opens the stream and reads the header; the caller has set the jump. */
static void open_header(struct jpeg_decompress_struct *d, jpeg_err *e, const uint8_t *buf,
                        size_t n)
{
    d->err = jpeg_std_error(&e->mgr);
    e->mgr.error_exit = on_error;
    e->mgr.emit_message = on_message;
    e->msg[0] = '\0';
    jpeg_create_decompress(d);
    jpeg_mem_src(d, buf, (unsigned long)n);
    jpeg_read_header(d, TRUE);
}

static pp_status jpeg_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                           pp_error *err)
{
    struct jpeg_decompress_struct d;
    jpeg_err e;
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&d);
        return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt JPEG: %s", path, e.msg);
    }
    open_header(&d, &e, buf, n);
    *w = (int)d.image_width;
    *h = (int)d.image_height;
    jpeg_destroy_decompress(&d);
    return pp_px_check_size(path, *w, *h, err);
}

/* What libjpeg writes for the image's colour space, and how it is laid out. */
static pp_px_layout choose_output(struct jpeg_decompress_struct *d)
{
    switch (d->jpeg_color_space) {
    case JCS_GRAYSCALE:
        d->out_color_space = JCS_GRAYSCALE;
        return PP_PX_GRAY;
    case JCS_CMYK:
    case JCS_YCCK:
        d->out_color_space = JCS_CMYK;
        return d->saw_Adobe_marker ? PP_PX_CMYK_INVERTED : PP_PX_CMYK;
    default:
        d->out_color_space = JCS_RGB;
        return PP_PX_RGB;
    }
}

static pp_status jpeg_decode(const uint8_t *buf, size_t n, const char *path,
                             const pp_image_box *box, int channels, uint8_t *out, pp_error *err)
{
    struct jpeg_decompress_struct d;
    jpeg_err e;
    uint8_t *volatile row = NULL;
    if (setjmp(e.jump)) {
        free(row);
        jpeg_destroy_decompress(&d);
        return pp_error_set(err, PP_ERR_INPUT, "%s: %s%s", path,
                            strncmp(e.msg, "truncated", 9) == 0 ? "" : "corrupt JPEG: ", e.msg);
    }
    open_header(&d, &e, buf, n);
    pp_status s = pp_px_check_size(path, d.image_width, d.image_height, err);
    if (s == PP_OK) s = pp_px_check_box(path, box, (int)d.image_width, (int)d.image_height, err);
    if (s != PP_OK) {
        jpeg_destroy_decompress(&d);
        return s;
    }
    const pp_px_layout layout = choose_output(&d);
    jpeg_start_decompress(&d);
    const int W = (int)d.output_width, H = (int)d.output_height;
    /* the columns: from MARGIN before the box to MARGIN after it */
    int x0 = box->x - MARGIN < 0 ? 0 : box->x - MARGIN;
    int x1 = box->x + box->w + MARGIN > W ? W : box->x + box->w + MARGIN;
    JDIMENSION xoff = (JDIMENSION)x0, width = (JDIMENSION)(x1 - x0);
    if (x0 > 0 || x1 < W) jpeg_crop_scanline(&d, &xoff, &width);
    /* the rows: skip to MARGIN rows before the box, read through its last */
    const int y0 = box->y - MARGIN < 0 ? 0 : box->y - MARGIN;
    if (y0 > 0) jpeg_skip_scanlines(&d, (JDIMENSION)y0);
    const int ns = d.output_components;
    row = malloc((size_t)width * (size_t)ns);
    if (!row) {
        jpeg_destroy_decompress(&d);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory decoding", path);
    }
    const pp_image_box in_row = {.x = box->x - (int)xoff, .y = 0, .w = box->w, .h = 1};
    for (int y = y0; y < box->y + box->h; y++) {
        JSAMPROW rows[1] = {row};
        jpeg_read_scanlines(&d, rows, 1);
        if (y >= box->y)
            pp_px_copy_box(row, 0, layout, &in_row, channels,
                           out + (int64_t)(y - box->y) * box->w * channels);
    }
    /* The rows below the box are not needed, unless the stream looks cut
     * short (no end-of-image marker near its end): then they are read, so
     * that a truncated file fails whatever the box, as it fails in PIL. */
    for (int y = box->y + box->h; y < H && !has_eoi(buf, n); y++) {
        JSAMPROW rows[1] = {row};
        jpeg_read_scanlines(&d, rows, 1);
    }
    free(row);
    row = NULL;
    jpeg_abort_decompress(&d);
    jpeg_destroy_decompress(&d);
    return PP_OK;
}

const pp_image_codec_ops pp_codec_jpeg = {
    .name = "jpeg", .sniff = jpeg_sniff, .size = jpeg_size, .decode = jpeg_decode};
