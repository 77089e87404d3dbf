/*
 * codec_tiff.c - TIFF through libtiff (see image.h): the first page read
 * with TIFFReadRGBAImageOriented (every photometric interpretation libtiff
 * knows, 16-bit samples scaled to 8 by libtiff), alpha dropped, the box
 * copied. libtiff's errors and warnings go to handlers that keep the first
 * error's words per thread (TIFFOpenOptionsSetErrorHandlerExtR needs a
 * newer libtiff than Debian 12's, so the process-wide handlers are set once
 * and write into thread-local storage).
 */
#include "runtime/io/codecs.h"
#include "runtime/io/pixels.h"

#include <pthread.h>
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

static pp_status tiff_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                           pp_image_work *work, pp_error *err)
{
    tiff_mem m;
    TIFF *t = open_tiff(&m, buf, n);
    if (!t) return tiff_fail(path, err);
    uint32_t tw = 0, th = 0;
    TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &tw);
    TIFFGetField(t, TIFFTAG_IMAGELENGTH, &th);
    TIFFClose(t);
    *w = tw > 0x7fffffff ? -1 : (int)tw;
    *h = th > 0x7fffffff ? -1 : (int)th;
    return pp_px_check_size(path, *w, *h, err);
}

static pp_status tiff_decode(const uint8_t *buf, size_t n, const char *path,
                             const pp_image_box *box, int channels, const pp_image_out *out,
                             pp_image_work *work, pp_error *err)
{
    int w, h;
    PP_TRY(tiff_size(buf, n, path, &w, &h, work, err));
    PP_TRY(pp_px_check_box(path, box, w, h, err));
    tiff_mem m;
    TIFF *t = open_tiff(&m, buf, n);
    if (!t) return tiff_fail(path, err);
    uint32_t *img = malloc((size_t)w * (size_t)h * sizeof *img);
    if (!img) {
        TIFFClose(t);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory decoding", path);
    }
    int ok = TIFFReadRGBAImageOriented(t, (uint32_t)w, (uint32_t)h, img, ORIENTATION_TOPLEFT, 0);
    TIFFClose(t);
    if (!ok) {
        free(img);
        return tiff_fail(path, err);
    }
    /* ABGR words: bytes R, G, B, A in memory on a little-endian host */
    uint8_t *rgba = (uint8_t *)img;
    for (int64_t i = 0; i < (int64_t)w * h; i++) {
        const uint32_t p = img[i];
        rgba[4 * i] = (uint8_t)TIFFGetR(p);
        rgba[4 * i + 1] = (uint8_t)TIFFGetG(p);
        rgba[4 * i + 2] = (uint8_t)TIFFGetB(p);
        rgba[4 * i + 3] = (uint8_t)TIFFGetA(p);
    }
    pp_px_copy_box(rgba, (int64_t)w * 4, PP_PX_RGBA, box, channels, out);
    free(img);
    return PP_OK;
}

const pp_image_codec_ops pp_codec_tiff = {
    .name = "tiff", .sniff = tiff_sniff, .size = tiff_size, .decode = tiff_decode};
