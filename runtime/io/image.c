/*
 * image.c - finds an image's decoder by its magic and checks what it is
 * asked (see image.h); the decoders are codec_*.c.
 */
#include "runtime/io/image.h"

#include "runtime/io/codecs.h"

static const pp_image_codec_ops *const codecs[] = {
    &pp_codec_jpeg, &pp_codec_png, &pp_codec_webp, &pp_codec_tiff, &pp_codec_bmp, &pp_codec_pnm,
};

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
                        pp_error *err)
{
    const pp_image_codec_ops *c;
    PP_TRY(find(buf, n, path, &c, err));
    return c->size(buf, n, path, w, h, err);
}

pp_status pp_image_decode(const uint8_t *buf, size_t n, const char *path, const pp_image_box *box,
                          int channels, uint8_t *out, pp_error *err)
{
    if (!box || !out || (channels != 1 && channels != 3) || box->x < 0 || box->y < 0 ||
        box->w <= 0 || box->h <= 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: bad box or channels for a decode", path);
    const pp_image_codec_ops *c;
    PP_TRY(find(buf, n, path, &c, err));
    return c->decode(buf, n, path, box, channels, out, err); /* it checks the box */
}
