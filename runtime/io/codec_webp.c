/*
 * codec_webp.c - WebP through libwebp (see image.h): decoded whole to RGB
 * (alpha dropped, as PIL's convert("RGB") drops it), then the box copied.
 */
#include "runtime/io/codecs.h"
#include "runtime/io/pixels.h"

#include <string.h>

#include <webp/decode.h>

static bool webp_sniff(const uint8_t *buf, size_t n)
{
    return n >= 12 && memcmp(buf, "RIFF", 4) == 0 && memcmp(buf + 8, "WEBP", 4) == 0;
}

static pp_status webp_size(const uint8_t *buf, size_t n, const char *path, int *w, int *h,
                           pp_image_work *work, pp_error *err)
{
    if (!WebPGetInfo(buf, n, w, h))
        return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt WebP (no readable header)", path);
    return pp_px_check_size(path, *w, *h, err);
}

static pp_status webp_decode(const uint8_t *buf, size_t n, const char *path,
                             const pp_image_box *box, int channels, const pp_image_out *out,
                             pp_image_work *work, pp_error *err)
{
    int w, h;
    PP_TRY(webp_size(buf, n, path, &w, &h, work, err));
    PP_TRY(pp_px_check_box(path, box, w, h, err));
    uint8_t *img = WebPDecodeRGB(buf, n, &w, &h);
    if (!img)
        return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt or truncated WebP (libwebp cannot "
                            "decode it)", path);
    pp_px_copy_box(img, (int64_t)w * 3, PP_PX_RGB, box, channels, out);
    WebPFree(img);
    return PP_OK;
}

const pp_image_codec_ops pp_codec_webp = {
    .name = "webp", .sniff = webp_sniff, .size = webp_size, .decode = webp_decode};
