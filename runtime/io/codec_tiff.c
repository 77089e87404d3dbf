/*
 * codec_tiff.c - TIFF through libtiff (see image.h): the first page, as
 * PIL 9.4 reads it. Gray, gray and alpha (8 bits, unassociated), RGB, RGB
 * and alpha and CMYK of 8 or 16 unsigned bits a sample, interleaved or in
 * separate planes, are read as stored (strips or tiles decoded by libtiff,
 * a plane's samples put among the others') and taken to 8 bits as PIL's
 * unpackers take them (to_8bit: alpha dropped, never multiplied in, an
 * associated one divided out); every other kind (palette, YCbCr, bits other
 * than 8 and 16, gray with associated or 16-bit alpha, which PIL 9.4 does
 * not open, ...) through TIFFReadRGBAImageOriented (16-bit samples scaled
 * to 8 bits by libtiff, unassociated alpha multiplied into the colours).
 * PIL reads separate planes as interleaved ones, except its own reader of
 * uncompressed files (libtiff reads the compressed ones), which refuses
 * associated alpha, gray and alpha, and 16-bit gray, and misreads other
 * 16-bit samples as 8-bit ones: those files are read here as PIL reads
 * their compressed twins. The Orientation tag is applied as PIL's
 * exif_transpose applies it (5 to 8 swap the sides), then the box copied.
 * libtiff's errors and warnings go to handlers that keep the first
 * error's words per thread (TIFFOpenOptionsSetErrorHandlerExtR needs a
 * newer libtiff than Debian 12's, so the process-wide handlers are set once
 * and write into thread-local storage).
 */
#include "runtime/io/codecs.h"
#include "runtime/io/pixels.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tiffio.h>

typedef struct tiff_mem {
    const uint8_t *buf;
    toff_t n, at;
} tiff_mem;

static _Thread_local char tiff_msg[200];

static void on_error(const char *module, const char *fmt, va_list ap)
{
    (void)module;
    if (!tiff_msg[0]) vsnprintf(tiff_msg, sizeof tiff_msg, fmt, ap);
}

static void on_warning(const char *module, const char *fmt, va_list ap)
{
    (void)module;
    (void)fmt;
    (void)ap;
}

static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;

static void set_handlers(void)
{
    TIFFSetErrorHandler(on_error);
    TIFFSetWarningHandler(on_warning);
}

static tmsize_t mem_read(thandle_t h, void *out, tmsize_t len)
{
    tiff_mem *m = (tiff_mem *)h;
    toff_t left = m->at < m->n ? m->n - m->at : 0;
    if ((toff_t)len > left) len = (tmsize_t)left;
    memcpy(out, m->buf + m->at, (size_t)len);
    m->at += (toff_t)len;
    return len;
}

static tmsize_t mem_write(thandle_t h, void *in, tmsize_t len)
{
    (void)h;
    (void)in;
    (void)len;
    return -1;
}

static toff_t mem_seek(thandle_t h, toff_t off, int whence)
{
    tiff_mem *m = (tiff_mem *)h;
    toff_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->at : m->n;
    m->at = base + off;
    return m->at;
}

static int mem_close(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t mem_size(thandle_t h)
{
    return ((tiff_mem *)h)->n;
}

static bool tiff_sniff(const uint8_t *buf, size_t n)
{
    return n >= 4 && ((buf[0] == 'I' && buf[1] == 'I' && buf[2] == 42 && buf[3] == 0) ||
                      (buf[0] == 'M' && buf[1] == 'M' && buf[2] == 0 && buf[3] == 42));
}

static TIFF *open_tiff(tiff_mem *m, const uint8_t *buf, size_t n)
{
    pthread_once(&handlers_once, set_handlers);
    tiff_msg[0] = '\0';
    *m = (tiff_mem){.buf = buf, .n = (toff_t)n};
    return TIFFClientOpen("image", "rm", (thandle_t)m, mem_read, mem_write, mem_seek, mem_close,
                          mem_size, NULL, NULL);
}

static pp_status tiff_fail(const char *path, pp_error *err)
{
    return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt TIFF: %s", path,
                        tiff_msg[0] ? tiff_msg : "libtiff cannot read it");
}

/* What decides how a TIFF's first page is read. */
typedef struct tiff_info {
    uint32_t w, h;                   /* as stored */
    uint16_t orientation;            /* 1 .. 8 (another value: 1) */
    uint16_t photometric, bps, spp, planar, format, inkset;
    uint16_t n_extra, extra_type;    /* extra samples, and the first one's kind */
    bool has_photometric;
} tiff_info;

static void read_info(TIFF *t, tiff_info *i)
{
    *i = (tiff_info){0};
    TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &i->w);
    TIFFGetField(t, TIFFTAG_IMAGELENGTH, &i->h);
    TIFFGetFieldDefaulted(t, TIFFTAG_ORIENTATION, &i->orientation);
    if (i->orientation < 1 || i->orientation > 8) i->orientation = 1;
    i->has_photometric = TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &i->photometric) == 1;
    TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &i->bps);
    TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &i->spp);
    TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &i->planar);
    TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLEFORMAT, &i->format);
    TIFFGetFieldDefaulted(t, TIFFTAG_INKSET, &i->inkset);
    uint16_t *types = NULL;
    TIFFGetFieldDefaulted(t, TIFFTAG_EXTRASAMPLES, &i->n_extra, &types);
    i->extra_type = i->n_extra > 0 && types ? types[0] : EXTRASAMPLE_UNSPECIFIED;
}

/* Orientations 5 to 8 swap the sides (PIL transposes the image as its
 * exif_transpose does). */
static bool transposed(const tiff_info *i)
{
    return i->orientation >= 5;
}

/* Whether the samples lie in separate planes (one strip or tile a sample). */
static bool separate(const tiff_info *i)
{
    return i->spp > 1 && i->planar == PLANARCONFIG_SEPARATE;
}

/* The layout of the samples when they are read as stored (8 or 16 bits,
 * unsigned, interleaved or in separate planes; gray, gray and alpha, RGB,
 * RGB and alpha, CMYK), or -1: libtiff's RGBA reader reads the rest. */
static int direct_layout(const tiff_info *i)
{
    if (!i->has_photometric || i->format != SAMPLEFORMAT_UINT || (i->bps != 8 && i->bps != 16))
        return -1;
    if (i->spp > 1 && i->planar != PLANARCONFIG_CONTIG && i->planar != PLANARCONFIG_SEPARATE)
        return -1;
    switch (i->photometric) {
    case PHOTOMETRIC_MINISBLACK:
        if (i->spp == 1) return PP_PX_GRAY;
        if (i->spp == 2 && i->bps == 8 && i->n_extra == 1 &&
            i->extra_type == EXTRASAMPLE_UNASSALPHA)
            return PP_PX_GRAY_ALPHA;
        return -1;
    case PHOTOMETRIC_RGB:
        if (i->spp == 3) return PP_PX_RGB;
        if (i->spp == 4 && i->n_extra <= 1) return PP_PX_RGBA;
        return -1;
    case PHOTOMETRIC_SEPARATED:
        return i->spp == 4 && i->n_extra == 0 && i->inkset == INKSET_CMYK ? PP_PX_CMYK : -1;
    default:
        return -1;
    }
}

/* cols pixels of unit bytes from src to dst, px bytes apart there (a
 * plane's samples into their places among the others'). */
static void scatter(uint8_t *dst, const uint8_t *src, size_t cols, size_t unit, size_t px)
{
    if (unit == px) {
        memcpy(dst, src, cols * unit);
        return;
    }
    for (size_t c = 0; c < cols; c++) memcpy(dst + c * px, src + c * unit, unit);
}

/* The first page's samples as stored, interleaved in rows of row_bytes,
 * into raw: strips or tiles of every sample, or of one sample each
 * (separate planes: each put in its place). */
static bool read_stored(TIFF *t, const tiff_info *i, uint8_t *raw, size_t row_bytes)
{
    const size_t px_bytes = row_bytes / i->w, sample = i->bps / 8;
    const size_t unit = separate(i) ? sample : px_bytes; /* bytes a pixel in a strip or tile */
    const uint16_t planes = separate(i) ? i->spp : 1;
    if ((uint64_t)TIFFScanlineSize64(t) != (uint64_t)i->w * unit) return false;
    if (!TIFFIsTiled(t)) {
        uint32_t rps = i->h;
        TIFFGetFieldDefaulted(t, TIFFTAG_ROWSPERSTRIP, &rps);
        if (rps == 0) return false;
        if (rps > i->h) rps = i->h;
        /* interleaved strips are read in place; a plane's through a strip's buffer */
        uint8_t *strip = separate(i) ? malloc((size_t)rps * i->w * unit) : NULL;
        if (separate(i) && !strip) return false;
        bool ok = true;
        for (uint16_t p = 0; ok && p < planes; p++)
            for (uint64_t y = 0; ok && y < i->h; y += rps) {
                const uint64_t rows = i->h - y < rps ? i->h - y : rps;
                const tmsize_t want = (tmsize_t)(rows * i->w * unit);
                const uint32_t s = TIFFComputeStrip(t, (uint32_t)y, p);
                uint8_t *to = strip ? strip : raw + y * row_bytes;
                ok = s < TIFFNumberOfStrips(t) && TIFFReadEncodedStrip(t, s, to, want) == want;
                for (uint64_t r = 0; ok && strip && r < rows; r++)
                    scatter(raw + (y + r) * row_bytes + p * sample, strip + r * i->w * unit,
                            i->w, unit, px_bytes);
            }
        free(strip);
        return ok;
    }
    uint32_t tw = 0, th = 0;
    TIFFGetField(t, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(t, TIFFTAG_TILELENGTH, &th);
    const tmsize_t tile_bytes = TIFFTileSize(t), tile_row = TIFFTileRowSize(t);
    if (tw == 0 || th == 0 || tile_bytes <= 0 || tile_row <= 0) return false;
    uint8_t *tile = malloc((size_t)tile_bytes);
    if (!tile) return false;
    bool ok = true;
    for (uint16_t p = 0; ok && p < planes; p++)
        for (uint32_t y = 0; ok && y < i->h; y += th)
            for (uint32_t x = 0; ok && x < i->w; x += tw) {
                ok = TIFFReadTile(t, tile, x, y, 0, p) >= 0;
                const uint32_t rows = i->h - y < th ? i->h - y : th;
                const uint32_t cols = i->w - x < tw ? i->w - x : tw;
                for (uint32_t r = 0; ok && r < rows; r++)
                    scatter(raw + (size_t)(y + r) * row_bytes + (size_t)x * px_bytes + p * sample,
                            tile + (size_t)r * (size_t)tile_row, cols, unit, px_bytes);
                if (y > UINT32_MAX - th || x > UINT32_MAX - tw) ok = false;
            }
    free(tile);
    return ok;
}

/* n samples of raw (as stored) to 8 bits in place, as PIL's unpackers take
 * them: 16-bit gray clipped to 255 (PIL's mode I;16, clipped by convert),
 * other 16-bit samples their high byte; RGB with associated alpha then
 * unpremultiplied (min(255, v * 255 / a), 0 where a is 0: PIL's RGBa, and
 * RGBa;16 on the high bytes). */
static void to_8bit(uint8_t *raw, int64_t n, const tiff_info *i, pp_px_layout layout)
{
    if (i->bps == 16) {
        const uint16_t *v = (const uint16_t *)raw; /* libtiff gives native byte order */
        for (int64_t k = 0; k < n; k++)
            raw[k] = layout == PP_PX_GRAY ? (uint8_t)(v[k] > 255 ? 255 : v[k])
                                          : (uint8_t)(v[k] >> 8);
    }
    if (layout == PP_PX_RGBA && i->n_extra > 0 && i->extra_type == EXTRASAMPLE_ASSOCALPHA)
        for (int64_t k = 0; k + 4 <= n; k += 4) {
            const unsigned a = raw[k + 3];
            for (int c = 0; c < 3; c++) {
                const unsigned v = a == 0 ? 0 : raw[k + c] * 255u / a;
                raw[k + c] = (uint8_t)(v > 255 ? 255 : v);
            }
        }
}

/* The box (in the image as PIL shows it, orientation applied) of img (w x h
 * pixels as stored, ns bytes each) into out. */
static pp_status put_oriented(const uint8_t *img, const tiff_info *i, pp_px_layout layout,
                              const pp_image_box *box, int channels, const pp_image_out *out)
{
    const int64_t W = i->w, H = i->h, ns = pp_px_samples(layout);
    if (i->orientation == 1) {
        pp_px_copy_box(img, W * ns, layout, box, channels, out);
        return PP_OK;
    }
    uint8_t *row = malloc((size_t)box->w * (size_t)ns);
    if (!row) return PP_ERR_OOM;
    for (int j = 0; j < box->h; j++) {
        const int64_t y = box->y + j;
        for (int k = 0; k < box->w; k++) {
            const int64_t x = box->x + k;
            int64_t sx = x, sy = y;
            switch (i->orientation) {
            case 2: sx = W - 1 - x; break;                    /* FLIP_LEFT_RIGHT */
            case 3: sx = W - 1 - x; sy = H - 1 - y; break;    /* ROTATE_180 */
            case 4: sy = H - 1 - y; break;                    /* FLIP_TOP_BOTTOM */
            case 5: sx = y; sy = x; break;                    /* TRANSPOSE */
            case 6: sx = y; sy = H - 1 - x; break;            /* ROTATE_270 */
            case 7: sx = W - 1 - y; sy = H - 1 - x; break;    /* TRANSVERSE */
            case 8: sx = W - 1 - y; sy = x; break;            /* ROTATE_90 */
            default: break;
            }
            memcpy(row + k * ns, img + (sy * W + sx) * ns, (size_t)ns);
        }
        pp_px_put_row(row, layout, box->w, channels, out, j);
    }
    free(row);
    return PP_OK;
}

static pp_status tiff_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                           pp_image_work *work, pp_error *err)
{
    tiff_mem m;
    TIFF *t = open_tiff(&m, buf, n);
    if (!t) return tiff_fail(path, err);
    tiff_info i;
    read_info(t, &i);
    TIFFClose(t);
    const uint32_t tw = transposed(&i) ? i.h : i.w, th = transposed(&i) ? i.w : i.h;
    *w = tw > 0x7fffffff ? -1 : (int)tw;
    *h = th > 0x7fffffff ? -1 : (int)th;
    return pp_px_check_size(path, *w, *h, err);
}

/* The first page through libtiff's RGBA reader (rows as stored: the
 * orientation asked for is the file's own), as RGBA bytes into img. */
static bool read_rgba(TIFF *t, const tiff_info *i, uint8_t *img)
{
    uint32_t *px = (uint32_t *)img;
    if (!TIFFReadRGBAImageOriented(t, i->w, i->h, px, i->orientation, 0)) return false;
    for (int64_t k = 0; k < (int64_t)i->w * i->h; k++) {
        const uint32_t p = px[k];
        img[4 * k] = (uint8_t)TIFFGetR(p);
        img[4 * k + 1] = (uint8_t)TIFFGetG(p);
        img[4 * k + 2] = (uint8_t)TIFFGetB(p);
        img[4 * k + 3] = (uint8_t)TIFFGetA(p);
    }
    return true;
}

static pp_status tiff_decode(const uint8_t *buf, size_t n, const char *path,
                             const pp_image_box *box, int channels, const pp_image_out *out,
                             pp_image_work *work, pp_error *err)
{
    int w = 0, h = 0;
    PP_TRY(tiff_size(buf, n, path, &w, &h, work, err));
    PP_TRY(pp_px_check_box(path, box, w, h, err));
    tiff_mem m;
    TIFF *t = open_tiff(&m, buf, n);
    if (!t) return tiff_fail(path, err);
    tiff_info i;
    read_info(t, &i);
    const int direct = direct_layout(&i);
    const pp_px_layout layout = direct >= 0 ? (pp_px_layout)direct : PP_PX_RGBA;
    const size_t samples = (size_t)i.w * i.h * (direct >= 0 ? i.spp : 4);
    uint8_t *img = malloc(samples * (direct >= 0 && i.bps == 16 ? 2 : 1));
    if (!img) {
        TIFFClose(t);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory decoding", path);
    }
    bool ok;
    if (direct >= 0) {
        ok = read_stored(t, &i, img, (size_t)i.w * i.spp * (i.bps / 8));
        if (ok) to_8bit(img, (int64_t)samples, &i, layout);
    } else {
        ok = read_rgba(t, &i, img);
    }
    TIFFClose(t);
    pp_status s = ok ? put_oriented(img, &i, layout, box, channels, out) : tiff_fail(path, err);
    free(img);
    if (s == PP_ERR_OOM) return pp_error_set(err, s, "%s: out of host memory decoding", path);
    return s;
}

const pp_image_codec_ops pp_codec_tiff = {
    .name = "tiff", .sniff = tiff_sniff, .size = tiff_size, .decode = tiff_decode};
