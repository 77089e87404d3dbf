/*
 * codec_bmp.c - BMP through libgd (see image.h): gdImageCreateFromBmpPtr
 * decodes the file (palette or true colour); its pixels are read back as
 * RGB and the box converted. libgd reports problems through a process-wide
 * error method, set once to one that prints nothing.
 *
 * libgd allocates the whole image from the header before it reads a pixel
 * (4 bytes a pixel, up to 2 GB for a 54-byte file), so the header is read
 * here first (its size for pp_image_size, which then decodes nothing):
 * more than PP_IMAGE_MAX_PIXELS pixels is refused as "too large", and an
 * uncompressed file too short for all but its last row of pixels as
 * "truncated" (PIL refuses both: its decompression-bomb error, and "image
 * file is truncated" when it loads), before libgd sees it.
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

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }

/* The image's size from its headers (the file's 14 bytes, then the
 * information header: OS/2's 12-byte one of 16-bit sizes, or any longer one
 * of 32-bit signed sizes, a negative height meaning rows top down), checked
 * against the limit and, uncompressed, against the bytes there are. */
static pp_status bmp_header(const uint8_t *buf, size_t n, const char *path, int64_t *w,
                            int64_t *h, pp_error *err)
{
    if (n < 14 + 12)
        return pp_error_set(err, PP_ERR_INPUT, "%s: truncated (a BMP header of %zu bytes)", path,
                            n);
    const uint32_t info = le32(buf + 14), offset = le32(buf + 10);
    uint32_t bpp, compression = 0;
    if (info == 12) {
        *w = le16(buf + 18);
        *h = le16(buf + 20);
        bpp = le16(buf + 24);
    } else if (info >= 16 && n >= 14 + 16) {
        *w = (int32_t)le32(buf + 18);
        *h = (int32_t)le32(buf + 22);
        if (*h < 0) *h = -*h; /* top down */
        bpp = le16(buf + 28);
        if (info >= 20 && n >= 14 + 20) compression = le32(buf + 30);
    } else {
        return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt BMP (an information header of %u "
                            "bytes)", path, info);
    }
    PP_TRY(pp_px_check_size(path, *w, *h, err));
    /* uncompressed (BI_RGB, BI_BITFIELDS, BI_ALPHABITFIELDS): rows of whole
     * 32-bit words; the last one may be short */
    const bool plain = compression == 0 || compression == 3 || compression == 6;
    const uint64_t row = ((uint64_t)*w * bpp + 31) / 32 * 4;
    if (plain && bpp > 0 && bpp <= 32 && (uint64_t)offset + row * (uint64_t)(*h - 1) > n)
        return pp_error_set(err, PP_ERR_INPUT, "%s: truncated (%lld x %lld pixels of %u bits "
                            "from byte %u need %llu bytes, the file has %zu)", path,
                            (long long)*w, (long long)*h, bpp, offset,
                            (unsigned long long)(offset + row * (uint64_t)*h), n);
    return PP_OK;
}

static pp_status open_bmp(const uint8_t *buf, size_t n, const char *path, gdImagePtr *out,
                          pp_error *err)
{
    pthread_once(&quiet_once, set_quiet);
    *out = NULL;
    if (n > 0x7fffffff) return pp_error_set(err, PP_ERR_INPUT, "%s: too large a BMP file", path);
    int64_t w = 0, h = 0;
    PP_TRY(bmp_header(buf, n, path, &w, &h, err));
    *out = gdImageCreateFromBmpPtr((int)n, (void *)buf);
    if (!*out)
        return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt or truncated BMP (libgd cannot "
                            "decode it)", path);
    if (gdImageSX(*out) != w || gdImageSY(*out) != h)
        return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt BMP (its header says %lld x %lld "
                            "pixels, libgd decoded %d x %d)", path, (long long)w, (long long)h,
                            gdImageSX(*out), gdImageSY(*out));
    return PP_OK;
}

/* The header's size: nothing decoded. */
static pp_status bmp_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                          pp_image_work *work, pp_error *err)
{
    (void)work;
    int64_t w64 = 0, h64 = 0;
    PP_TRY(bmp_header(buf, n, path, &w64, &h64, err));
    *w = (int)w64;
    *h = (int)h64;
    return PP_OK;
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
