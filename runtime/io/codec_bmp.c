/*
 * codec_bmp.c - BMP through libgd (see image.h): gdImageCreateFromBmpPtr
 * decodes the file (palette or true colour); its pixels are read back as
 * RGB and the box converted. libgd reports problems through a process-wide
 * error method, set once to one that prints nothing.
 */
#include "runtime/io/codecs.h"
#include "runtime/io/pixels.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <gd.h>

static void quiet(int priority, const char *fmt, va_list ap)
{
    (void)priority;
    (void)fmt;
    (void)ap;
}

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static void set_quiet(void)
{
    gdSetErrorMethod(quiet);
}

static bool bmp_sniff(const uint8_t *buf, size_t n)
{
    return n >= 14 && buf[0] == 'B' && buf[1] == 'M';
}

static pp_status open_bmp(const uint8_t *buf, size_t n, const char *path, gdImagePtr *out,
                          pp_error *err)
{
    pthread_once(&quiet_once, set_quiet);
    *out = NULL;
    if (n > 0x7fffffff) return pp_error_set(err, PP_ERR_INPUT, "%s: too large a BMP file", path);
    *out = gdImageCreateFromBmpPtr((int)n, (void *)buf);
    if (!*out)
        return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt or truncated BMP (libgd cannot "
                            "decode it)", path);
    return pp_px_check_size(path, gdImageSX(*out), gdImageSY(*out), err);
}

static pp_status bmp_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                          pp_image_work *work, pp_error *err)
{
    gdImagePtr im;
    pp_status s = open_bmp(buf, n, path, &im, err);
    if (im) {
        *w = gdImageSX(im);
        *h = gdImageSY(im);
        gdImageDestroy(im);
    }
    return s;
}

static pp_status bmp_decode(const uint8_t *buf, size_t n, const char *path,
                            const pp_image_box *box, int channels, const pp_image_out *out,
                            pp_image_work *work, pp_error *err)
{
    gdImagePtr im;
    pp_status s = open_bmp(buf, n, path, &im, err);
    if (s == PP_OK) s = pp_px_check_box(path, box, gdImageSX(im), gdImageSY(im), err);
    if (s != PP_OK) {
        if (im) gdImageDestroy(im);
        return s;
    }
    uint8_t *row = malloc((size_t)box->w * 3);
    if (!row) {
        gdImageDestroy(im);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory decoding", path);
    }
    for (int y = 0; y < box->h; y++) {
        for (int x = 0; x < box->w; x++) {
            const int c = gdImageGetTrueColorPixel(im, box->x + x, box->y + y);
            row[3 * x] = (uint8_t)gdTrueColorGetRed(c);
            row[3 * x + 1] = (uint8_t)gdTrueColorGetGreen(c);
            row[3 * x + 2] = (uint8_t)gdTrueColorGetBlue(c);
        }
        pp_px_put_row(row, PP_PX_RGB, box->w, channels, out, y);
    }
    free(row);
    gdImageDestroy(im);
    return PP_OK;
}

const pp_image_codec_ops pp_codec_bmp = {
    .name = "bmp", .sniff = bmp_sniff, .size = bmp_size, .decode = bmp_decode};
