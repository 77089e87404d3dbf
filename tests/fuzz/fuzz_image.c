/*
 * fuzz_image.c - libFuzzer target for the image decoders
 * (runtime/io/image.h: JPEG, PNG, WebP, TIFF, BMP, PPM/PGM by their
 * libraries, PIL's conversions ours): any bytes go through pp_image_size,
 * and an image it sizes (at most 2^20 pixels here, to keep runs short) is
 * decoded whole in RGB and in L, and a box inside it (the centre's quarter,
 * as a crop takes it) into planes, with one pp_image_work reused across
 * inputs as the loader's threads reuse theirs. A failure must be
 * PP_ERR_INPUT; a box inside the image must decode when the whole image
 * did. Any violation aborts. Built by tests/fuzz/run.sh image;
 * corpus_main.c replays files without libFuzzer (test fuzz_images).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/image.h"
#include "runtime/io/image_work.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_image: %s\n%s\n", what, detail ? detail : "");
    abort();
}

static pp_image_work *g_work;

static void cleanup(void)
{
    pp_image_work_free(g_work);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pp_error err;
    if (!g_work) {
        if (pp_image_work_new(&g_work, &err) != PP_OK) fail("work", err.msg);
        atexit(cleanup);
    }
    int w = 0, h = 0;
    pp_status s = pp_image_size(data, size, "input", &w, &h, g_work, &err);
    if (s != PP_OK) {
        if (s != PP_ERR_INPUT) fail("size: unexpected status", err.msg);
        return 0;
    }
    if (w < 1 || h < 1) fail("an image without pixels", NULL);
    if ((int64_t)w * h > (1 << 20)) return 0;
    uint8_t *px = malloc((size_t)w * (size_t)h * 3);
    if (!px) fail("out of memory", NULL);
    const pp_image_box whole = {0, 0, w, h};
    bool ok = true;
    for (int c = 3; c >= 1; c -= 2) {
        const pp_image_out hwc = pp_image_out_hwc(px, w, h, c);
        s = pp_image_decode_to(data, size, "input", &whole, c, &hwc, g_work, &err);
        if (s != PP_OK && s != PP_ERR_INPUT) fail("decode: unexpected status", err.msg);
        ok = ok && s == PP_OK;
    }
    const pp_image_box mid = {w / 4, h / 4, w - w / 2, h - h / 2}; /* at least 1 x 1 */
    const pp_image_out planes = pp_image_out_rows(px, mid.w, mid.h);
    s = pp_image_decode_to(data, size, "input", &mid, 3, &planes, g_work, &err);
    if (s != PP_OK && s != PP_ERR_INPUT) fail("decode of a box: unexpected status", err.msg);
    if (ok && s != PP_OK) fail("the whole image decodes and a box inside it does not", err.msg);
    free(px);
    return 0;
}
