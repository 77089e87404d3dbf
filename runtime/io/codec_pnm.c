/*
 * codec_pnm.c - PPM, PGM and PBM through libnetpbm (see image.h): the
 * header is read first (pnm_readpnminit: a size past PP_IMAGE_MAX_PIXELS is
 * refused before any pixel is read), then the file with pnm_readpnm from
 * memory; samples of another maximum than 255 are scaled as PIL 9.4 scales
 * them (see scale). libnetpbm reports a problem by calling a
 * process-wide message function and jumping to a process-wide buffer, so
 * decodes take a lock (these formats are rare in image folders); the lock
 * also covers the message.
 */
#define _GNU_SOURCE
#include "runtime/io/codecs.h"
#include "runtime/io/pixels.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netpbm/pnm.h>

static pthread_mutex_t pnm_mu = PTHREAD_MUTEX_INITIALIZER;
static char pnm_msg[200]; /* under pnm_mu */

static void on_error(const char *msg)
{
    if (!pnm_msg[0]) snprintf(pnm_msg, sizeof pnm_msg, "%s", msg);
}

static void on_message(const char *msg)
{
    (void)msg;
}

static bool pnm_sniff(const uint8_t *buf, size_t n)
{
    return n >= 3 && buf[0] == 'P' && buf[1] >= '1' && buf[1] <= '6' &&
           (buf[2] == ' ' || buf[2] == '\t' || buf[2] == '\n' || buf[2] == '\r' ||
            buf[2] == '#');
}

/* Reads the header, and the whole image when xels is not NULL (rows of
 * cols xels, after the header's size passed pp_px_check_size), under
 * pnm_mu; *gray: a PGM or PBM. */
static pp_status read_pnm(const uint8_t *buf, size_t n, const char *path, xel ***xels, int *cols,
                          int *rows, xelval *maxval, bool *gray, pp_error *err)
{
    FILE *f = fmemopen((void *)buf, n, "rb");
    if (!f) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", path);
    pthread_mutex_lock(&pnm_mu);
    jmp_buf jump, *saved;
    pnm_msg[0] = '\0';
    pm_setusererrormsgfn(on_error);
    pm_setusermessagefn(on_message);
    pm_setjmpbufsave(&jump, &saved);
    xel **volatile got = NULL;
    volatile int stage = 0; /* 1: the header read; 2: its size refused; 3: the image read */
    int format = 0;
    if (setjmp(jump) == 0) {
        pnm_readpnminit(f, cols, rows, maxval, &format);
        stage = pp_px_check_size(path, *cols, *rows, err) == PP_OK ? 1 : 2;
        if (stage == 1 && xels) {
            rewind(f);
            got = pnm_readpnm(f, cols, rows, maxval, &format);
            stage = 3;
        }
    }
    pm_setjmpbuf(saved);
    pp_status s = PP_OK;
    if (stage == 2)
        s = PP_ERR_INPUT; /* "too large", set by pp_px_check_size */
    else if (stage == 0 || (xels && !got))
        s = pp_error_set(err, PP_ERR_INPUT, "%s: corrupt or truncated PPM/PGM: %s", path,
                         pnm_msg[0] ? pnm_msg : "libnetpbm cannot read it");
    pthread_mutex_unlock(&pnm_mu);
    fclose(f);
    if (xels) *xels = got;
    *gray = PNM_FORMAT_TYPE(format) != PPM_TYPE;
    return s;
}

static pp_status pnm_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                          pp_image_work *work, pp_error *err)
{
    xelval maxval;
    bool gray;
    return read_pnm(buf, n, path, NULL, w, h, &maxval, &gray, err);
}

/* A sample as PIL 9.4's PPM decoder gives it, then converted to 8 bits:
 * round(v / maxval * out_max) in doubles, half to even (Python's round), with
 * out_max 255, except a PGM of maxval above 255 (PIL's mode I: out_max
 * 65535), which convert clips to 255. */
static uint8_t scale(xelval v, xelval maxval, bool gray)
{
    if (maxval == 255) return (uint8_t)v;
    const double out_max = gray && maxval > 255 ? 65535.0 : 255.0;
    const double r = nearbyint((double)v / (double)maxval * out_max);
    return (uint8_t)(r > 255.0 ? 255.0 : r);
}

static pp_status pnm_decode(const uint8_t *buf, size_t n, const char *path,
                            const pp_image_box *box, int channels, const pp_image_out *out,
                            pp_image_work *work, pp_error *err)
{
    xel **xels;
    int w, h;
    xelval maxval;
    bool gray;
    PP_TRY(read_pnm(buf, n, path, &xels, &w, &h, &maxval, &gray, err));
    if (pp_px_check_box(path, box, w, h, err) != PP_OK) {
        pnm_freearray(xels, h);
        return PP_ERR_INVALID;
    }
    uint8_t *row = malloc((size_t)box->w * 3);
    if (!row) {
        pnm_freearray(xels, h);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory decoding", path);
    }
    for (int y = 0; y < box->h; y++) {
        const xel *src = xels[box->y + y] + box->x;
        for (int x = 0; x < box->w; x++) {
            if (gray) {
                row[x] = scale(PNM_GET1(src[x]), maxval, true);
            } else {
                row[3 * x] = scale(PPM_GETR(src[x]), maxval, false);
                row[3 * x + 1] = scale(PPM_GETG(src[x]), maxval, false);
                row[3 * x + 2] = scale(PPM_GETB(src[x]), maxval, false);
            }
        }
        pp_px_put_row(row, gray ? PP_PX_GRAY : PP_PX_RGB, box->w, channels, out, y);
    }
    free(row);
    pnm_freearray(xels, h);
    return PP_OK;
}

const pp_image_codec_ops pp_codec_pnm = {
    .name = "pnm", .sniff = pnm_sniff, .size = pnm_size, .decode = pnm_decode};
