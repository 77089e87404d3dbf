/*
 * codec_bmp.c - BMP (see image.h): 16-bit files read here, every other
 * kind through libgd: gdImageCreateFromBmpPtr decodes the file (palette or
 * true colour); its pixels are read back as RGB and the box converted.
 * libgd reports problems through a process-wide error method, set once to
 * one that prints nothing.
 *
 * libgd allocates the whole image from the header before it reads a pixel
 * (4 bytes a pixel, up to 2 GB for a 54-byte file), so the header is read
 * here first (its size for pp_image_size, which then decodes nothing):
 * more than PP_IMAGE_MAX_PIXELS pixels is refused as "too large", and an
 * uncompressed file too short for all but its last row of pixels as
 * "truncated" (PIL refuses both: its decompression-bomb error, and "image
 * file is truncated" when it loads), before libgd sees it.
 *
 * 16-bit files are read as PIL 9.4 reads them, the box's rows alone:
 * BI_RGB as 5-5-5 (the top bit unused), BI_BITFIELDS of masks 5-6-5 or
 * 5-5-5, each field of b bits widened to v * 255 / (2^b - 1), truncated
 * (PIL's unpackers BGR;15 and BGR;16; libgd shifts, v << 3, white 248, and
 * reads no bit fields); rows bottom up, or top down for a negative height,
 * padded to 4 bytes, the last needing its pixels only; bfOffBits 0 means
 * the pixels follow the headers (PIL reads on from there). What PIL does
 * not read is refused: other masks, other compressions, information headers
 * of other sizes than 12, 40, 64, 108 and 124 bytes.
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

/* What the headers say. */
typedef struct bmp_info {
    int64_t w, h;
    uint32_t info, offset, bpp, compression;
    bool top_down;
    int green_bits; /* 16 bits: the green field's (5 or 6), the red's above it */
} bmp_info;

/* A 16-bit file's layout as PIL reads it (see above): the compression, the
 * masks, where the pixels start and whether the file holds them. */
static pp_status bmp16_header(const uint8_t *buf, size_t n, const char *path, bmp_info *b,
                              pp_error *err)
{
    const uint32_t i = b->info;
    if (i != 12 && i != 40 && i != 64 && i != 108 && i != 124)
        return pp_error_set(err, PP_ERR_INPUT, "%s: unsupported BMP (16 bits a pixel, an "
                            "information header of %u bytes)", path, i);
    /* the headers' end, where the pixels start when bfOffBits is 0; the
     * masks after a 40-byte header, else in it, at the same place */
    const uint32_t end = 14 + i + (i == 40 && b->compression == 3 ? 12 : 0);
    if (n < end)
        return pp_error_set(err, PP_ERR_INPUT, "%s: truncated (a BMP header of %zu bytes)", path,
                            n);
    b->green_bits = 5;
    if (b->compression == 3) {
        const uint32_t r = le32(buf + 54), g = le32(buf + 58), bl = le32(buf + 62);
        if (r == 0xF800 && g == 0x7E0 && bl == 0x1F)
            b->green_bits = 6;
        else if (!(r == 0x7C00 && g == 0x3E0 && bl == 0x1F))
            return pp_error_set(err, PP_ERR_INPUT, "%s: unsupported BMP (16 bits a pixel, bit "
                                "fields red %#x, green %#x, blue %#x; 5-6-5 and 5-5-5 are read)",
                                path, r, g, bl);
    } else if (b->compression != 0) {
        return pp_error_set(err, PP_ERR_INPUT, "%s: unsupported BMP (16 bits a pixel, "
                            "compression %u)", path, b->compression);
    }
    if (b->offset == 0) b->offset = end;
    const uint64_t row = ((uint64_t)b->w * 16 + 31) / 32 * 4;
    const uint64_t need = b->offset + row * (uint64_t)(b->h - 1) + 2 * (uint64_t)b->w;
    if (need > n)
        return pp_error_set(err, PP_ERR_INPUT, "%s: truncated (%lld x %lld pixels of 16 bits "
                            "from byte %u need %llu bytes, the file has %zu)", path,
                            (long long)b->w, (long long)b->h, b->offset,
                            (unsigned long long)need, n);
    return PP_OK;
}

/* The image's size from its headers (the file's 14 bytes, then the
 * information header: OS/2's 12-byte one of 16-bit sizes, or any longer one
 * of 32-bit signed sizes, a negative height meaning rows top down), checked
 * against the limit and, uncompressed, against the bytes there are. */
static pp_status bmp_header(const uint8_t *buf, size_t n, const char *path, bmp_info *b,
                            pp_error *err)
{
    *b = (bmp_info){0};
    if (n < 14 + 12)
        return pp_error_set(err, PP_ERR_INPUT, "%s: truncated (a BMP header of %zu bytes)", path,
                            n);
    b->info = le32(buf + 14);
    b->offset = le32(buf + 10);
    if (b->info == 12) {
        b->w = le16(buf + 18);
        b->h = le16(buf + 20);
        b->bpp = le16(buf + 24);
    } else if (b->info >= 16 && n >= 14 + 16) {
        b->w = (int32_t)le32(buf + 18);
        b->h = (int32_t)le32(buf + 22);
        b->top_down = b->h < 0;
        if (b->h < 0) b->h = -b->h;
        b->bpp = le16(buf + 28);
        if (b->info >= 20 && n >= 14 + 20) b->compression = le32(buf + 30);
    } else {
        return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt BMP (an information header of %u "
                            "bytes)", path, b->info);
    }
    PP_TRY(pp_px_check_size(path, b->w, b->h, err));
    if (b->bpp == 16) return bmp16_header(buf, n, path, b, err);
    /* uncompressed (BI_RGB, BI_BITFIELDS, BI_ALPHABITFIELDS): rows of whole
     * 32-bit words; the last one may be short */
    const bool plain = b->compression == 0 || b->compression == 3 || b->compression == 6;
    const uint64_t row = ((uint64_t)b->w * b->bpp + 31) / 32 * 4;
    if (plain && b->bpp > 0 && b->bpp <= 32 &&
        (uint64_t)b->offset + row * (uint64_t)(b->h - 1) > n)
        return pp_error_set(err, PP_ERR_INPUT, "%s: truncated (%lld x %lld pixels of %u bits "
                            "from byte %u need %llu bytes, the file has %zu)", path,
                            (long long)b->w, (long long)b->h, b->bpp, b->offset,
                            (unsigned long long)(b->offset + row * (uint64_t)b->h), n);
    return PP_OK;
}

/* The box of a 16-bit file (its header read by bmp_header) into out. */
static pp_status bmp16_decode(const uint8_t *buf, const char *path, const bmp_info *b,
                              const pp_image_box *box, int channels, const pp_image_out *out,
                              pp_image_work *work, pp_error *err)
{
    uint8_t *row = pp_image_work_buf(work, PP_WORK_ROWS, (size_t)box->w * 3);
    if (!row) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory decoding", path);
    const uint64_t stride = ((uint64_t)b->w * 16 + 31) / 32 * 4;
    const unsigned gshift = 5, rshift = 5 + (unsigned)b->green_bits;
    const unsigned gmax = (1u << b->green_bits) - 1;
    for (int y = 0; y < box->h; y++) {
        const int64_t iy = box->y + y, fy = b->top_down ? iy : b->h - 1 - iy;
        const uint8_t *px = buf + b->offset + (uint64_t)fy * stride + 2 * (uint64_t)box->x;
        for (int x = 0; x < box->w; x++) {
            const unsigned v = le16(px + 2 * x);
            row[3 * x] = (uint8_t)(((v >> rshift) & 31) * 255 / 31);
            row[3 * x + 1] = (uint8_t)(((v >> gshift) & gmax) * 255 / gmax);
            row[3 * x + 2] = (uint8_t)((v & 31) * 255 / 31);
        }
        pp_px_put_row(row, PP_PX_RGB, box->w, channels, out, y);
    }
    return PP_OK;
}

/* The file through libgd; b its header as bmp_header read it. */
static pp_status open_bmp(const uint8_t *buf, size_t n, const char *path, const bmp_info *b,
                          gdImagePtr *out, pp_error *err)
{
    pthread_once(&quiet_once, set_quiet);
    *out = NULL;
    if (n > 0x7fffffff) return pp_error_set(err, PP_ERR_INPUT, "%s: too large a BMP file", path);
    const int64_t w = b->w, h = b->h;
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
    bmp_info b;
    PP_TRY(bmp_header(buf, n, path, &b, err));
    *w = (int)b.w;
    *h = (int)b.h;
    return PP_OK;
}

static pp_status bmp_decode(const uint8_t *buf, size_t n, const char *path,
                            const pp_image_box *box, int channels, const pp_image_out *out,
                            pp_image_work *work, pp_error *err)
{
    bmp_info b;
    PP_TRY(bmp_header(buf, n, path, &b, err));
    if (b.bpp == 16) {
        PP_TRY(pp_px_check_box(path, box, (int)b.w, (int)b.h, err));
        return bmp16_decode(buf, path, &b, box, channels, out, work, err);
    }
    gdImagePtr im;
    pp_status s = open_bmp(buf, n, path, &b, &im, err);
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
