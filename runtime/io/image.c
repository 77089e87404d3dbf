/*
 * image.c - finds an image's decoder by its magic and checks what it is
 * asked (see image.h); the decoders are codec_*.c.
 */
#include "runtime/io/image.h"

#include "runtime/io/codecs.h"

static const pp_image_codec_ops *const codecs[] = {
    &pp_codec_jpeg, &pp_codec_png, &pp_codec_webp, &pp_codec_tiff, &pp_codec_bmp, &pp_codec_pnm,
};

pp_image_out pp_image_out_hwc(uint8_t *px, int w, int h, int c)
{
    (void)h;
    return (pp_image_out){.px = px, .plane = 1, .xstep = c, .ystep = (int64_t)w * c};
}

pp_image_out pp_image_out_rows(uint8_t *px, int w, int h)
{
    return (pp_image_out){.px = px, .plane = (int64_t)w * h, .xstep = 1, .ystep = w};
}

pp_image_out pp_image_out_columns(uint8_t *px, int w, int h)
{
    return (pp_image_out){.px = px, .plane = (int64_t)w * h, .xstep = h, .ystep = 1};
}

const pp_image_codec_ops *pp_image_codec_find(const uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++)
        if (codecs[i]->sniff(buf, n)) return codecs[i];
    return NULL;
}

static pp_status find(const uint8_t *buf, size_t n, const char *path,
                      const pp_image_codec_ops **c, pp_error *err)
{
    *c = pp_image_codec_find(buf, n);
    if (*c) return PP_OK;
    if (n == 0) return pp_error_set(err, PP_ERR_INPUT, "%s: not an image (the file is empty)", path);
    return pp_error_set(err, PP_ERR_INPUT, "%s: not an image (no JPEG, PNG, WebP, TIFF, BMP or "
                        "PPM/PGM signature in its first bytes)", path);
}

pp_status pp_image_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                        pp_image_work *work, pp_error *err)
{
    const pp_image_codec_ops *c;
    PP_TRY(find(buf, n, path, &c, err));
    return c->size(buf, n, path, w, h, work, err);
}

pp_status pp_image_decode_to(const uint8_t *buf, size_t n, const char *path,
                             const pp_image_box *box, int channels, const pp_image_out *out,
                             pp_image_work *work, pp_error *err)
{
    if (!box || !out || !out->px || (channels != 1 && channels != 3) || box->x < 0 ||
        box->y < 0 || box->w <= 0 || box->h <= 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: bad box or channels for a decode", path);
    const pp_image_codec_ops *c;
    PP_TRY(find(buf, n, path, &c, err));
    if (work) return c->decode(buf, n, path, box, channels, out, work, err); /* checks the box */
    pp_image_work *own;
    PP_TRY(pp_image_work_new(&own, err));
    pp_status s = c->decode(buf, n, path, box, channels, out, own, err);
    pp_image_work_free(own);
    return s;
}

pp_status pp_image_decode(const uint8_t *buf, size_t n, const char *path, const pp_image_box *box,
                          int channels, uint8_t *out, pp_error *err)
{
    if (!box) return pp_error_set(err, PP_ERR_INVALID, "%s: no box for a decode", path);
    const pp_image_out o = pp_image_out_hwc(out, box->w, box->h, channels);
    return pp_image_decode_to(buf, n, path, box, channels, &o, NULL, err);
}
