/*
 * codec_jpeg.c - JPEG through libjpeg-turbo's libjpeg API (see image.h).
 *
 * Decoded as PIL decodes it (PIL links the same library with the same
 * defaults: islow DCT, fancy upsampling): gray JPEGs as gray, CMYK and YCCK
 * as CMYK, read as inverted (Adobe's convention, which PIL assumes of every
 * CMYK JPEG, Adobe marker or not), the rest as RGB. A box is decoded from
 * the rows and iMCU columns it needs only: jpeg_crop_scanline
 * and jpeg_skip_scanlines, each widened by MARGIN pixels (clamped to the
 * image) so that the upsampler's neighbours of the box's pixels are real
 * ones (fancy upsampling reaches one chroma sample, two pixels, across the
 * crop's edge, which libjpeg treats as the image's); the box's pixels are
 * then those of the whole image's decode (test_images_decode checks every
 * subsampling against whole decodes; with 3,000 boxes each, a margin of 2
 * gave every pixel, 1 did not). A stream that ends early is an error
 * ("truncated"), as in PIL without LOAD_TRUNCATED_IMAGES, whatever the box:
 * the rows below it are read unless an end-of-image marker lies near the
 * file's end, after the scan's start (has_eoi); the library's other
 * warnings are ignored, as PIL ignores them.
 */
#include "runtime/io/codecs.h"
#include "runtime/io/image_work.h"
#include "runtime/io/pixels.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#define MARGIN 4 /* pixels kept around a box: twice the fancy upsampler's reach */

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

/* Whether the end-of-image marker (FF D9) is in the last EOI_TAIL bytes, at
 * or after byte `from`, where the first scan's data starts: after it, FF D9
 * is a marker (the scan's own FF bytes are followed by 00 or a restart's
 * D0 to D7); before it, in the metadata (an EXIF thumbnail's end of image),
 * it says nothing of where the image ends. */
#define EOI_TAIL 4096
static bool has_eoi(const uint8_t *buf, size_t n, size_t from)
{
    for (size_t i = n >= 2 ? n - 2 : 0; i + 1 < n && n - i <= EOI_TAIL && i >= from; i--) {
        if (buf[i] == 0xFF && buf[i + 1] == 0xD9) return true;
        if (i == 0) break;
    }
    return false;
}

/* A decompressor kept in a work (image_work.h), reused image after image:
 * jpeg_abort_decompress returns it to its start after each image, or after
 * an error. `header` and `header_n` name the bytes whose header it holds
 * ready (pp_image_size with a work), else NULL. */
typedef struct jpeg_state {
    struct jpeg_decompress_struct d;
    jpeg_err e;
    const uint8_t *header;
    size_t header_n;
} jpeg_state;

static void *state_make(void)
{
    jpeg_state *volatile st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->d.err = jpeg_std_error(&st->e.mgr);
    st->e.mgr.error_exit = on_error;
    st->e.mgr.emit_message = on_message;
    if (setjmp(st->e.jump)) { /* out of memory making it */
        free(st);
        return NULL;
    }
    jpeg_create_decompress(&st->d);
    return st;
}

static void state_drop(void *p)
{
    jpeg_state *st = p;
    jpeg_destroy_decompress(&st->d);
    free(st);
}

/* Reads the header of buf into st's decompressor, from its start (a header
 * read before and never decoded is dropped); the caller has set the jump. */
static void read_header(jpeg_state *st, const uint8_t *buf, size_t n)
{
    st->e.msg[0] = '\0';
    st->header = NULL;
    jpeg_abort_decompress(&st->d);
    jpeg_mem_src(&st->d, buf, (unsigned long)n);
    jpeg_read_header(&st->d, TRUE);
    st->header = buf;
    st->header_n = n;
}

static jpeg_state *state_of(pp_image_work *work)
{
    return pp_image_work_state(work, PP_WORK_STATE_JPEG, state_make, state_drop);
}

static pp_status jpeg_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                           pp_image_work *work, pp_error *err)
{
    pp_image_work *own = NULL;
    if (!work) PP_TRY(pp_image_work_new(&own, err));
    jpeg_state *st = state_of(work ? work : own);
    if (!st) {
        pp_image_work_free(own);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (JPEG decoder)", path);
    }
    if (setjmp(st->e.jump)) {
        st->header = NULL;
        jpeg_abort_decompress(&st->d);
        pp_status s = pp_error_set(err, PP_ERR_INPUT, "%s: corrupt JPEG: %s", path, st->e.msg);
        pp_image_work_free(own);
        return s;
    }
    read_header(st, buf, n);
    *w = (int)st->d.image_width;
    *h = (int)st->d.image_height;
    pp_image_work_free(own);
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
        return PP_PX_CMYK_INVERTED; /* as PIL: Adobe's polarity, marker or not */
    default:
        d->out_color_space = JCS_RGB;
        return PP_PX_RGB;
    }
}

#define ROWS_AT_ONCE 16 /* scanlines asked of libjpeg per call */

/* Reads scanlines y0 .. y1 - 1 (the next ones) ROWS_AT_ONCE at a time (in
 * as many calls as libjpeg needs), handing those from box->y on to out
 * (none when out is NULL). Returns PP_ERR_OOM when the rows' memory cannot
 * be had, PP_ERR_INPUT when the decoder gives no row. */
static pp_status read_rows(jpeg_state *st, int y0, int y1, const pp_image_box *box, int xoff,
                           pp_px_layout layout, int channels, const pp_image_out *out,
                           pp_image_work *work)
{
    struct jpeg_decompress_struct *d = &st->d;
    const size_t row_bytes = (size_t)d->output_width * (size_t)d->output_components;
    uint8_t *rows = pp_image_work_buf(work, PP_WORK_ROWS, row_bytes * ROWS_AT_ONCE);
    if (!rows) return PP_ERR_OOM;
    JSAMPROW ptr[ROWS_AT_ONCE];
    for (int i = 0; i < ROWS_AT_ONCE; i++) ptr[i] = rows + (size_t)i * row_bytes;
    for (int y = y0; y < y1;) {
        /* a group: the margin above the box alone, then the box's rows */
        const int end = y < box->y && box->y < y1 ? box->y : y1;
        const int want = end - y < ROWS_AT_ONCE ? end - y : ROWS_AT_ONCE;
        for (int got = 0; got < want;) {
            const int k = (int)jpeg_read_scanlines(d, ptr + got, (JDIMENSION)(want - got));
            if (k <= 0) return PP_ERR_INPUT;
            got += k;
        }
        if (out && y >= box->y)
            pp_px_put_rows((const uint8_t *const *)ptr, want, box->x - xoff, layout, box->w,
                           channels, out, y - box->y);
        y += want;
    }
    return PP_OK;
}

static pp_status jpeg_decode(const uint8_t *buf, size_t n, const char *path,
                             const pp_image_box *box, int channels, const pp_image_out *out,
                             pp_image_work *work, pp_error *err)
{
    jpeg_state *st = state_of(work);
    if (!st) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (JPEG decoder)", path);
    if (setjmp(st->e.jump)) {
        st->header = NULL;
        jpeg_abort_decompress(&st->d);
        return pp_error_set(err, PP_ERR_INPUT, "%s: %s%s", path,
                            strncmp(st->e.msg, "truncated", 9) == 0 ? "" : "corrupt JPEG: ",
                            st->e.msg);
    }
    struct jpeg_decompress_struct *d = &st->d;
    if (st->header != buf || st->header_n != n) read_header(st, buf, n);
    st->header = NULL; /* used now */
    pp_status s = pp_px_check_size(path, d->image_width, d->image_height, err);
    if (s == PP_OK) s = pp_px_check_box(path, box, (int)d->image_width, (int)d->image_height, err);
    if (s != PP_OK) {
        jpeg_abort_decompress(d);
        return s;
    }
    /* where the first scan's data starts: the source stands there after the
     * header (its buffer, unless libjpeg has put its own end marker there) */
    const uintptr_t at = (uintptr_t)d->src->next_input_byte, b0 = (uintptr_t)buf;
    const size_t scan = at >= b0 && at - b0 <= n ? (size_t)(at - b0) : n;
    const pp_px_layout layout = choose_output(d);
    jpeg_start_decompress(d);
    const int W = (int)d->output_width, H = (int)d->output_height;
    /* the columns: from MARGIN before the box to MARGIN after it */
    int x0 = box->x - MARGIN < 0 ? 0 : box->x - MARGIN;
    int x1 = box->x + box->w + MARGIN > W ? W : box->x + box->w + MARGIN;
    JDIMENSION xoff = (JDIMENSION)x0, width = (JDIMENSION)(x1 - x0);
    if (x0 > 0 || x1 < W) jpeg_crop_scanline(d, &xoff, &width);
    /* the rows: skip to MARGIN rows before the box, read through its last */
    const int y0 = box->y - MARGIN < 0 ? 0 : box->y - MARGIN;
    if (y0 > 0) jpeg_skip_scanlines(d, (JDIMENSION)y0);
    s = read_rows(st, y0, box->y + box->h, box, (int)xoff, layout, channels, out, work);
    /* The rows below the box are not needed, unless the stream looks cut
     * short (no end-of-image marker near its end, after the scan's start):
     * then they are read, so that a truncated file fails whatever the box,
     * as it fails in PIL. (A stream of several scans, progressive, has been
     * read whole by jpeg_start_decompress.) */
    if (s == PP_OK && box->y + box->h < H && !has_eoi(buf, n, scan))
        s = read_rows(st, box->y + box->h, H, box, (int)xoff, layout, channels, NULL, work);
    jpeg_abort_decompress(d);
    if (s == PP_ERR_OOM) return pp_error_set(err, s, "%s: out of host memory decoding", path);
    if (s != PP_OK) return pp_error_set(err, s, "%s: corrupt JPEG: no scanline decoded", path);
    return PP_OK;
}

const pp_image_codec_ops pp_codec_jpeg = {
    .name = "jpeg", .sniff = jpeg_sniff, .size = jpeg_size, .decode = jpeg_decode};
