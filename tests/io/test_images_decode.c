/*
 * test_images_decode.c - the image decoders (runtime/io/image.h): pixels
 * and boxes (tests/torch/images_check.py compares every kind with PIL;
 * bad files, the index and the data source: test_images.c).
 *
 *   jpeg       4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, gray, progressive, CMYK
 *              fixtures written here with libjpeg: every box decoded alone
 *              equals the same box of the whole image's decode (200 boxes
 *              each, as HWC, planes of rows and planes of columns, through
 *              one work kept from image to image)
 *   png        RGB, RGBA, RGB 16-bit, gray, gray 16-bit, gray 2-bit,
 *              palette, gray + alpha 16-bit, interlaced, written with
 *              libpng: pixels equal the values written, converted as PIL's
 *              convert does; boxes in every layout
 *   tiff       RGBA (unassociated alpha) in tiles and in strips, two
 *              orientations: the colours as stored, turned as the tag says,
 *              50 boxes each equal to the whole decode's; RGBA (either
 *              alpha, 8 and 16 bits), gray + alpha, RGB 16-bit and CMYK
 *              (8 and 16 bits) in separate planes equal to the same samples
 *              interleaved, those with alpha PIL's values
 *   bmp        16-bit BMPs written byte by byte (5-5-5, bit fields 5-6-5
 *              and 5-5-5, bottom up and top down, every header size PIL
 *              reads): pixels as PIL widens the fields; palettes of 1, 4
 *              and 8 bits, RLE8 and RLE4 (a delta, an early end of bitmap,
 *              odd absolute runs) and 32-bit ABGR bit fields: the pixels the
 *              file says; boxes in every layout (tests/torch/bmp_check.py
 *              compares every layout with PIL)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>
#include <tiffio.h>

#include "runtime/io/image.h"
#include "tests/check.h"
#include "tests/io/image_files.h"

static char tmpdir[256];

/* ---- fixtures ------------------------------------------------------------------- */

/* What PIL's convert("RGB") gives for pixel (x, y) of the fixture. */
static void png_expected(const png_fixture *f, int x, int y, uint8_t rgb[3])
{
    const int d = f->depth;
    switch (f->color_type) {
    case PNG_COLOR_TYPE_PALETTE: {
        int i = pattern(x, y, 0) % 16;
        rgb[0] = (uint8_t)i, rgb[1] = (uint8_t)(255 - i), rgb[2] = (uint8_t)(3 * i);
        return;
    }
    case PNG_COLOR_TYPE_GRAY:
    case PNG_COLOR_TYPE_GRAY_ALPHA: {
        unsigned v = png_value(x, y, 0, d);
        uint8_t g = d == 16 ? (f->color_type == PNG_COLOR_TYPE_GRAY ? (v > 255 ? 255 : v) : v >> 8)
                    : d < 8 ? (uint8_t)(v * (255 / ((1 << d) - 1)))
                            : (uint8_t)v;
        rgb[0] = rgb[1] = rgb[2] = g;
        return;
    }
    default:
        for (int k = 0; k < 3; k++) {
            unsigned v = png_value(x, y, k, d);
            rgb[k] = (uint8_t)(d == 16 ? v >> 8 : v);
        }
    }
}

/* ---- decode --------------------------------------------------------------------- */

static uint32_t rng_state = 12345;
static int rnd(int n)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return (int)((rng_state >> 8) % (uint32_t)n);
}

/* Whether out (a box decoded in layout `out`) holds the box b of whole (w
 * pixels a row, c channels, HWC); the rows that differ. */
static int box_differs(const uint8_t *whole, int w, int c, pp_image_box b, const pp_image_out *out)
{
    int bad = 0;
    for (int y = 0; y < b.h; y++) {
        int off = 0;
        for (int x = 0; x < b.w; x++)
            for (int k = 0; k < c; k++)
                off |= out->px[k * out->plane + x * out->xstep + y * out->ystep] !=
                       whole[((size_t)(b.y + y) * w + b.x + x) * c + k];
        bad += off;
    }
    return bad;
}

/* Each box of the file (buf, n bytes, named name) decoded as HWC, planes of
 * rows and planes of columns equals that box of whole (w pixels wide, RGB). */
static void check_box_layouts(const char *kind, const char *name, const uint8_t *buf, size_t n,
                              const uint8_t *whole, int w, const pp_image_box *boxes, int nb)
{
    for (int k = 0; k < nb; k++) {
        const pp_image_box b = boxes[k];
        uint8_t *part = malloc((size_t)b.w * (size_t)b.h * 3);
        const pp_image_out outs[3] = {pp_image_out_hwc(part, b.w, b.h, 3),
                                      pp_image_out_rows(part, b.w, b.h),
                                      pp_image_out_columns(part, b.w, b.h)};
        for (int o = 0; part && o < 3; o++) {
            pp_error err;
            CHECK_OK(pp_image_decode_to(buf, n, name, &b, 3, &outs[o], NULL, &err), &err);
            CHECK_MSG(box_differs(whole, w, 3, b, &outs[o]) == 0, "%s %s: box %d, layout %d",
                      kind, name, k, o);
        }
        free(part);
    }
}

static void test_jpeg_boxes(void)
{
    static const jpeg_fixture fx[] = {
        {"4:4:4", 61, 45, 3, 1, 1, false},  {"4:2:2", 77, 53, 3, 2, 1, false},
        {"4:2:0", 123, 91, 3, 2, 2, false}, {"4:4:0", 70, 66, 3, 1, 2, false},
        {"gray", 50, 41, 1, 1, 1, false},   {"progressive 4:2:0", 97, 83, 3, 2, 2, true},
        {"cmyk", 40, 33, 4, 1, 1, false},   {"4:1:1", 90, 37, 3, 4, 1, false},
        {"4:2:0, many iMCU rows", 260, 190, 3, 2, 2, false},
    };
    /* one work for every decode below, as a reading thread keeps it: its
     * decompressor and buffers carry nothing from one image to the next */
    pp_image_work *work;
    pp_error err;
    CHECK_OK(pp_image_work_new(&work, &err), &err);
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        unsigned long n;
        uint8_t *jpg = make_jpeg(&fx[i], 90, &n);
        int w, h;
        CHECK_OK(pp_image_size(jpg, n, fx[i].name, &w, &h, NULL, &err), &err);
        CHECK(w == fx[i].w && h == fx[i].h);
        for (int ch = 1; ch <= 3; ch += 2) {
            uint8_t *whole = malloc((size_t)w * h * ch), *part = malloc((size_t)w * h * ch);
            pp_image_box all = {0, 0, w, h};
            CHECK_OK(pp_image_decode(jpg, n, fx[i].name, &all, ch, whole, &err), &err);
            int bad = 0;
            for (int t = 0; t < 200; t++) {
                pp_image_box b = {rnd(w), rnd(h), 0, 0};
                b.w = 1 + rnd(w - b.x);
                b.h = 1 + rnd(h - b.y);
                /* in turn: HWC alone, then rows and columns with the work (its
                 * header read by pp_image_size, or not) */
                const pp_image_out outs[3] = {pp_image_out_hwc(part, b.w, b.h, ch),
                                              pp_image_out_rows(part, b.w, b.h),
                                              pp_image_out_columns(part, b.w, b.h)};
                const pp_image_out *o = &outs[t % 3];
                pp_status s;
                if (t % 3 == 0) {
                    s = pp_image_decode(jpg, n, fx[i].name, &b, ch, part, &err);
                } else {
                    int sw, sh;
                    if (t % 2) CHECK_OK(pp_image_size(jpg, n, "x", &sw, &sh, work, &err), &err);
                    s = pp_image_decode_to(jpg, n, fx[i].name, &b, ch, o, work, &err);
                }
                if (s != PP_OK) {
                    bad++;
                    continue;
                }
                bad += box_differs(whole, w, ch, b, o);
            }
            CHECK_MSG(bad == 0, "jpeg %s, %d channel(s): %d box rows differ from the whole decode",
                      fx[i].name, ch, bad);
            /* a header read and not decoded (a sample refused by its size)
             * leaves nothing for the next image's */
            if (i > 0) {
                unsigned long pn;
                uint8_t *prev = make_jpeg(&fx[i - 1], 90, &pn);
                int pw, ph;
                CHECK_OK(pp_image_size(prev, pn, "prev", &pw, &ph, work, &err), &err);
                CHECK_OK(pp_image_size(jpg, n, "this", &pw, &ph, work, &err), &err);
                CHECK(pw == w && ph == h);
                const pp_image_out o = pp_image_out_rows(part, w, h);
                CHECK_OK(pp_image_decode_to(jpg, n, "this", &all, ch, &o, work, &err), &err);
                CHECK(box_differs(whole, w, ch, all, &o) == 0);
                free(prev);
            }
            free(whole);
            free(part);
        }
        free(jpg);
    }
    pp_image_work_free(work);
}

/* A kind of TIFF: samples a pixel, bits a sample, photometric, the extra
 * sample's kind (the last sample; 0: none). */
typedef struct tiff_kind {
    const char *name;
    int spp, bps, photometric, extra;
} tiff_kind;

static const tiff_kind rgba_unassoc8 = {"rgba", 4, 8, PHOTOMETRIC_RGB, EXTRASAMPLE_UNASSALPHA};

/* The value stored for sample k of pixel (x, y): the pattern's, in the high
 * byte of a 16-bit sample (its low byte another's). */
static unsigned tiff_value(int x, int y, int k, int bps)
{
    return bps == 16 ? (unsigned)pattern(x, y, k) << 8 | pattern(y, x, k) : pattern(x, y, k);
}

/* A TIFF of the kind, w x h, written to path by libtiff (deflated), its
 * samples interleaved or in separate planes, in tiles of 16 x 16 or strips
 * of 7 rows, orientation `orient`. */
static void write_tiff(const char *path, const tiff_kind *kd, int w, int h, int planar,
                       bool tiled, int orient)
{
    TIFF *t = TIFFOpen(path, "w");
    CHECK(t != NULL);
    if (!t) return;
    const uint16_t extra[] = {(uint16_t)kd->extra};
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, (uint32_t)w);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, (uint32_t)h);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, kd->bps);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, kd->spp);
    if (kd->extra) TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, extra);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, kd->photometric);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, planar);
    TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
    TIFFSetField(t, TIFFTAG_ORIENTATION, (uint16_t)orient);
    /* planes: one of all samples, or one a sample; n: samples a pixel in each */
    const int planes = planar == PLANARCONFIG_SEPARATE ? kd->spp : 1, n = kd->spp / planes;
    const int tw = tiled ? 16 : w, th = tiled ? 16 : 1;
    uint16_t *px = calloc((size_t)tw * th * n, sizeof *px);
    uint8_t *px8 = (uint8_t *)px;
    if (tiled) {
        TIFFSetField(t, TIFFTAG_TILEWIDTH, 16);
        TIFFSetField(t, TIFFTAG_TILELENGTH, 16);
    } else {
        TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 7);
    }
    for (int p = 0; px && p < planes; p++)
        for (int ty = 0; ty < h; ty += th)
            for (int tx = 0; tx < w; tx += tw) {
                for (int y = 0; y < th; y++)
                    for (int x = 0; x < tw; x++)
                        for (int k = 0; k < n; k++) {
                            const unsigned v = tiff_value(tx + x, ty + y, p + k, kd->bps);
                            const size_t i = ((size_t)y * tw + x) * n + k;
                            if (kd->bps == 16)
                                px[i] = (uint16_t)v;
                            else
                                px8[i] = (uint8_t)v;
                        }
                if (tiled)
                    CHECK(TIFFWriteTile(t, px, (uint32_t)tx, (uint32_t)ty, 0, (uint16_t)p) >= 0);
                else
                    CHECK(TIFFWriteScanline(t, px, (uint32_t)ty, (uint16_t)p) == 1);
            }
    free(px);
    TIFFClose(t);
}

/* RGBA TIFFs in tiles and in strips: the colours as stored (alpha dropped,
 * not multiplied in), turned as the Orientation tag says (6: 90 degrees
 * clockwise, the sides swapped), every box equal to the whole decode's. */
static void test_tiff(void)
{
    const int w = 37, h = 21;
    for (int tiled = 0; tiled < 2; tiled++)
        for (int orient = 1; orient <= 6; orient += 5) {
            char path[512];
            snprintf(path, sizeof path, "%s/t%d-%d.tif", tmpdir, tiled, orient);
            write_tiff(path, &rgba_unassoc8, w, h, PLANARCONFIG_CONTIG, tiled, orient);
            membuf f = read_whole(path);
            int iw = 0, ih = 0;
            pp_error err;
            CHECK_OK(pp_image_size(f.b, f.n, path, &iw, &ih, NULL, &err), &err);
            const int ow = orient == 6 ? h : w, oh = orient == 6 ? w : h;
            CHECK_MSG(iw == ow && ih == oh, "%s: %d x %d", path, iw, ih);
            uint8_t *whole = malloc((size_t)ow * oh * 3);
            const pp_image_box all = {0, 0, ow, oh};
            CHECK_OK(pp_image_decode(f.b, f.n, path, &all, 3, whole, &err), &err);
            int bad = 0;
            for (int y = 0; y < oh; y++)
                for (int x = 0; x < ow; x++)
                    for (int k = 0; k < 3; k++) { /* 6: stored (sx, sy) = (y, h - 1 - x) */
                        const int sx = orient == 6 ? y : x, sy = orient == 6 ? h - 1 - x : y;
                        bad += whole[(y * ow + x) * 3 + k] != pattern(sx, sy, k);
                    }
            CHECK_MSG(bad == 0, "%s: %d samples differ from those stored", path, bad);
            for (int i = 0; i < 50; i++) {
                pp_image_box b = {rnd(ow), rnd(oh), 0, 0};
                b.w = 1 + rnd(ow - b.x);
                b.h = 1 + rnd(oh - b.y);
                uint8_t *part = malloc((size_t)b.w * b.h * 3);
                CHECK_OK(pp_image_decode(f.b, f.n, path, &b, 3, part, &err), &err);
                const pp_image_out out = pp_image_out_hwc(part, b.w, b.h, 3);
                CHECK_MSG(!box_differs(whole, ow, 3, b, &out), "%s: box %d %d %d %d", path, b.x,
                          b.y, b.w, b.h);
                free(part);
            }
            free(whole);
            free(f.b);
        }
}

/* What PIL's convert("RGB") gives for pixel (x, y) of a TIFF of the kind
 * (RGB or gray, with alpha or not): the stored values (the high bytes of
 * 16-bit ones), divided by an associated alpha (min(255, v * 255 / a), 0
 * where a is 0: PIL's RGBa and RGBa;16), alpha dropped. */
static void tiff_expected(const tiff_kind *kd, int x, int y, uint8_t rgb[3])
{
    const int colours = kd->photometric == PHOTOMETRIC_RGB ? 3 : 1;
    const unsigned a = pattern(x, y, colours);
    for (int k = 0; k < 3; k++) {
        unsigned v = pattern(x, y, colours == 3 ? k : 0);
        if (kd->extra == EXTRASAMPLE_ASSOCALPHA) {
            v = a == 0 ? 0 : v * 255 / a;
            if (v > 255) v = 255;
        }
        rgb[k] = (uint8_t)v;
    }
}

/* TIFFs of separate planes (PLANARCONFIG_SEPARATE), in strips and in
 * tiles, equal the same samples interleaved, as RGB and as L (PIL reads
 * both alike), and boxes equal the whole decode's; the interleaved ones of
 * alpha, RGB 16-bit included, equal PIL's values (alpha dropped, never
 * multiplied in; associated alpha divided out, 16-bit as 8-bit). */
static void test_tiff_planes(void)
{
    static const tiff_kind kinds[] = {
        {"rgba", 4, 8, PHOTOMETRIC_RGB, EXTRASAMPLE_UNASSALPHA},
        {"rgba associated", 4, 8, PHOTOMETRIC_RGB, EXTRASAMPLE_ASSOCALPHA},
        {"rgba 16-bit", 4, 16, PHOTOMETRIC_RGB, EXTRASAMPLE_UNASSALPHA},
        {"rgba 16-bit associated", 4, 16, PHOTOMETRIC_RGB, EXTRASAMPLE_ASSOCALPHA},
        {"rgb + unspecified", 4, 8, PHOTOMETRIC_RGB, EXTRASAMPLE_UNSPECIFIED},
        {"gray + alpha", 2, 8, PHOTOMETRIC_MINISBLACK, EXTRASAMPLE_UNASSALPHA},
        {"rgb 16-bit", 3, 16, PHOTOMETRIC_RGB, 0},
        {"cmyk", 4, 8, PHOTOMETRIC_SEPARATED, 0},
        {"cmyk 16-bit", 4, 16, PHOTOMETRIC_SEPARATED, 0},
    };
    const int w = 37, h = 21;
    const pp_image_box all = {0, 0, w, h};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const tiff_kind *kd = &kinds[i];
        uint8_t *want[2] = {malloc((size_t)w * h * 3), malloc((size_t)w * h)};
        uint8_t *got[2] = {malloc((size_t)w * h * 3), malloc((size_t)w * h)};
        for (int f = 0; f < 3; f++) { /* interleaved strips, separate strips, separate tiles */
            char path[512];
            snprintf(path, sizeof path, "%s/planes-%zu-%d.tif", tmpdir, i, f);
            write_tiff(path, kd, w, h, f ? PLANARCONFIG_SEPARATE : PLANARCONFIG_CONTIG, f == 2, 1);
            membuf m = read_whole(path);
            pp_error err;
            for (int c = 0; c < 2; c++)
                CHECK_OK(pp_image_decode(m.b, m.n, path, &all, c ? 1 : 3, f ? got[c] : want[c],
                                         &err), &err);
            if (f == 0 && kd->photometric != PHOTOMETRIC_SEPARATED) {
                int bad = 0;
                for (int y = 0; y < h; y++)
                    for (int x = 0; x < w; x++) {
                        uint8_t e[3];
                        tiff_expected(kd, x, y, e);
                        bad += memcmp(want[0] + ((size_t)y * w + x) * 3, e, 3) != 0;
                    }
                CHECK_MSG(bad == 0, "tiff %s: %d pixels differ from PIL's", kd->name, bad);
            }
            if (f > 0) {
                int bad = 0;
                for (size_t k = 0; k < (size_t)w * h * 3; k++)
                    bad += got[0][k] != want[0][k] ||
                           (k < (size_t)w * h && got[1][k] != want[1][k]);
                CHECK_MSG(bad == 0, "tiff %s in separate %s: %d samples differ from interleaved",
                          kd->name, f == 2 ? "tiles" : "strips", bad);
                for (int t = 0; t < 10; t++) {
                    pp_image_box b = {rnd(w), rnd(h), 0, 0};
                    b.w = 1 + rnd(w - b.x);
                    b.h = 1 + rnd(h - b.y);
                    uint8_t part[37 * 21 * 3];
                    const pp_image_out o = pp_image_out_rows(part, b.w, b.h);
                    CHECK_OK(pp_image_decode_to(m.b, m.n, path, &b, 3, &o, NULL, &err), &err);
                    CHECK_MSG(!box_differs(got[0], w, 3, b, &o), "%s: box %d %d %d %d", path,
                              b.x, b.y, b.w, b.h);
                }
            }
            free(m.b);
        }
        for (int c = 0; c < 2; c++) {
            free(want[c]);
            free(got[c]);
        }
    }
}

static void test_png(void)
{
    static const png_fixture fx[] = {
        {"rgb", PNG_COLOR_TYPE_RGB, 8, false},
        {"rgba", PNG_COLOR_TYPE_RGB_ALPHA, 8, false},
        {"rgb16", PNG_COLOR_TYPE_RGB, 16, false},
        {"gray", PNG_COLOR_TYPE_GRAY, 8, false},
        {"gray16", PNG_COLOR_TYPE_GRAY, 16, false},
        {"gray2", PNG_COLOR_TYPE_GRAY, 2, false},
        {"gray-alpha16", PNG_COLOR_TYPE_GRAY_ALPHA, 16, false},
        {"palette", PNG_COLOR_TYPE_PALETTE, 8, false},
        {"interlaced", PNG_COLOR_TYPE_RGB, 8, true},
    };
    const int w = 37, h = 29;
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        membuf m = make_png(&fx[i], w, h);
        pp_error err;
        uint8_t rgb[37 * 29 * 3], l[37 * 29];
        pp_image_box all = {0, 0, w, h};
        CHECK_OK(pp_image_decode(m.b, m.n, fx[i].name, &all, 3, rgb, &err), &err);
        CHECK_OK(pp_image_decode(m.b, m.n, fx[i].name, &all, 1, l, &err), &err);
        int bad = 0;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                uint8_t e[3];
                png_expected(&fx[i], x, y, e);
                const uint8_t *g = rgb + (y * w + x) * 3;
                const uint8_t le =
                    (uint8_t)((e[0] * 19595u + e[1] * 38470u + e[2] * 7471u + 0x8000u) >> 16);
                int off = g[0] != e[0] || g[1] != e[1] || g[2] != e[2] || l[y * w + x] != le;
                if (off && bad < 3)
                    fprintf(stderr, "png %s (%d, %d): got %d %d %d / %d, wanted %d %d %d / %d\n",
                            fx[i].name, x, y, g[0], g[1], g[2], l[y * w + x], e[0], e[1], e[2], le);
                bad += off;
            }
        CHECK_MSG(bad == 0, "png %s: %d pixels differ from what was written", fx[i].name, bad);
        /* a box, as HWC, planes of rows and planes of columns */
        const pp_image_box boxes[2] = {{5, 7, 20, 11}, {3, 1, 33, 27}};
        check_box_layouts("png", fx[i].name, m.b, m.n, rgb, w, boxes, 2);
        free(m.b);
    }
}

/* What PIL 9.4 gives for pixel (x, y) of a 16-bit BMP: 5-5-5 (BI_RGB, the
 * top bit unused) or the masks' 5-6-5 or 5-5-5, each field of b bits
 * widened to v * 255 / (2^b - 1), truncated (its unpackers BGR;15 and
 * BGR;16: white is 255). */
static void bmp16_expected(const bmp16_fixture *f, int x, int y, uint8_t rgb[3])
{
    const unsigned v = bmp16_value(x, y);
    const unsigned gbits = f->compression == 3 && f->masks[1] == 0x7E0 ? 6 : 5;
    const unsigned gmax = (1u << gbits) - 1;
    rgb[0] = (uint8_t)(((v >> (5 + gbits)) & 31) * 255 / 31);
    rgb[1] = (uint8_t)(((v >> 5) & gmax) * 255 / gmax);
    rgb[2] = (uint8_t)((v & 31) * 255 / 31);
}

/* Whether pixel (x, y) of a BMP's decode, g as RGB and l as L, differs
 * from the RGB e and PIL's L of it; printed while fewer than 3 (bad) have. */
static int bmp_pixel_differs(const char *name, int x, int y, const uint8_t *g, uint8_t l,
                             const uint8_t e[3], int bad)
{
    const uint8_t le = (uint8_t)((e[0] * 19595u + e[1] * 38470u + e[2] * 7471u + 0x8000u) >> 16);
    const int off = g[0] != e[0] || g[1] != e[1] || g[2] != e[2] || l != le;
    if (off && bad < 3)
        fprintf(stderr, "bmp %s (%d, %d): got %d %d %d / %d, wanted %d %d %d / %d\n", name, x, y,
                g[0], g[1], g[2], l, e[0], e[1], e[2], le);
    return off;
}

/* 16-bit BMPs as PIL reads them: 5-5-5 and bit fields 5-6-5 and 5-5-5, rows
 * bottom up and top down (an odd width: rows padded), every header size PIL
 * reads, bfOffBits 0 (the pixels after the headers), the last row's padding
 * cut (PIL needs no more than its pixels); as RGB and L, and boxes in every
 * layout equal to the whole decode's. */
static void test_bmp16(void)
{
    static const bmp16_fixture fx[] = {
        {"5-5-5", 37, 29, 40, 0, {0}, false, false},
        {"5-5-5 top down", 37, 29, 40, 0, {0}, true, false},
        {"5-5-5 OS/2 header", 37, 29, 12, 0, {0}, false, false},
        {"5-5-5 v4 header, bfOffBits 0", 70, 29, 108, 0, {0}, false, true},
        {"5-6-5", 37, 29, 40, 3, {0xF800, 0x7E0, 0x1F}, false, false},
        {"5-6-5 v5 header, top down", 37, 29, 124, 3, {0xF800, 0x7E0, 0x1F}, true, false},
        {"5-6-5 OS/2 v2 header", 38, 29, 64, 3, {0xF800, 0x7E0, 0x1F}, false, false},
        {"bit fields 5-5-5, bfOffBits 0", 37, 29, 40, 3, {0x7C00, 0x3E0, 0x1F}, false, true},
    };
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        const int w = fx[i].w, h = fx[i].h;
        membuf m = make_bmp16(&fx[i]);
        pp_error err;
        int iw = 0, ih = 0;
        CHECK_OK(pp_image_size(m.b, m.n, fx[i].name, &iw, &ih, NULL, &err), &err);
        CHECK(iw == w && ih == h);
        uint8_t *rgb = malloc((size_t)w * h * 3), *l = malloc((size_t)w * h);
        const pp_image_box all = {0, 0, w, h};
        /* the whole image with the last row's padding cut (the boxes below
         * have it): the same pixels */
        const size_t n = m.n - (w % 2 ? 2 : 0);
        CHECK_OK(pp_image_decode(m.b, n, fx[i].name, &all, 3, rgb, &err), &err);
        CHECK_OK(pp_image_decode(m.b, n, fx[i].name, &all, 1, l, &err), &err);
        int bad = 0;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                uint8_t e[3];
                bmp16_expected(&fx[i], x, y, e);
                bad += bmp_pixel_differs(fx[i].name, x, y, rgb + (y * w + x) * 3, l[y * w + x],
                                         e, bad);
            }
        CHECK_MSG(bad == 0, "bmp %s: %d pixels differ from PIL's", fx[i].name, bad);
        CHECK_MSG(rgb[0] == 255 && rgb[1] == 255 && rgb[2] == 255, "bmp %s: white is %d %d %d",
                  fx[i].name, rgb[0], rgb[1], rgb[2]);
        const pp_image_box boxes[2] = {{5, 7, 20, 11}, {1, 3, w - 1, h - 4}};
        check_box_layouts("bmp", fx[i].name, m.b, m.n, rgb, w, boxes, 2);
        free(rgb);
        free(l);
        free(m.b);
    }
}

/* A BMP written here: the 40-byte header (v4's 108 with bit fields), a
 * palette of ncolors (colour i = pal_rgb(i)), then the pixel bytes. */
typedef struct bmp_file {
    uint8_t b[1 << 16];
    size_t n;
} bmp_file;

static void pal_rgb(int i, uint8_t rgb[3])
{
    rgb[0] = (uint8_t)(40 + 37 * i), rgb[1] = (uint8_t)(200 - 23 * i), rgb[2] = (uint8_t)(7 * i);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> 8 * k);
}

static void bmp_start(bmp_file *f, int w, int h, int bpp, int compression, int ncolors,
                      const uint32_t *masks)
{
    const uint32_t info = masks ? 108 : 40;
    memset(f->b, 0, 14 + info);
    f->b[0] = 'B', f->b[1] = 'M';
    put32(f->b + 10, 14 + info + 4 * (uint32_t)ncolors);
    put32(f->b + 14, info);
    put32(f->b + 18, (uint32_t)w);
    put32(f->b + 22, (uint32_t)h);
    f->b[26] = 1, f->b[28] = (uint8_t)bpp;
    put32(f->b + 30, (uint32_t)compression);
    put32(f->b + 46, (uint32_t)ncolors);
    for (int k = 0; masks && k < 4; k++) put32(f->b + 54 + 4 * k, masks[k]);
    f->n = 14 + info;
    for (int i = 0; i < ncolors; i++) {
        uint8_t rgb[3];
        pal_rgb(i, rgb);
        f->b[f->n++] = rgb[2], f->b[f->n++] = rgb[1], f->b[f->n++] = rgb[0], f->b[f->n++] = 0;
    }
}

/* Palette BMPs of 1, 4 and 8 bits (an odd width: rows end inside a byte
 * and are padded; 8 bits with indices past its 5 colours, which are grays),
 * RLE8 (encoded runs, a delta, an end of bitmap before the last rows: index
 * 0 there) and RLE4 (encoded runs of two indices in turn, absolute runs of 3
 * indices: all three, where PIL 9.4 drops the last), and 32 bits in bit
 * fields ABGR: every pixel as the file says, as RGB and L; boxes in every
 * layout equal to the whole decode's. */
static void test_bmp_palettes(void)
{
    enum { W = 37, H = 29 };
    static bmp_file f;
    static uint8_t idx[H][W]; /* the indices the file holds, image rows top down */
    const uint32_t abgr[4] = {0xFF000000u, 0xFF0000u, 0xFF00u, 0xFFu};
    for (int kind = 0; kind < 6; kind++) {
        static const char *const names[] = {"1 bit", "4 bits", "8 bits, 5 colours", "RLE8",
                                            "RLE4", "32 bits ABGR"};
        static const int bpps[] = {1, 4, 8, 8, 4, 32}, comps[] = {0, 0, 0, 1, 2, 3};
        static const int colors[] = {2, 16, 5, 12, 16, 0};
        const int bpp = bpps[kind];
        bmp_start(&f, W, H, bpp, comps[kind], colors[kind], kind == 5 ? abgr : NULL);
        memset(idx, 0, sizeof idx);
        const int stride = (W * bpp + 31) / 32 * 4;
        for (int fy = 0; fy < H; fy++) { /* file rows, bottom up */
            const int y = H - 1 - fy;
            uint8_t *row = f.b + f.n;
            if (kind <= 2 || kind == 5) {
                memset(row, 0, (size_t)stride);
                for (int x = 0; x < W; x++) {
                    const int v = (x * 7 + y * 3 + x * y) % (kind == 0 ? 2 : kind == 1 ? 16 : 10);
                    idx[y][x] = (uint8_t)v;
                    if (bpp == 1) row[x / 8] |= (uint8_t)(v << (7 - x % 8));
                    if (bpp == 4) row[x / 2] |= (uint8_t)(v << (x % 2 ? 0 : 4));
                    if (bpp == 8) row[x] = (uint8_t)v;
                    if (bpp == 32) { /* A B G R, alpha ignored */
                        row[4 * x] = (uint8_t)(x * 5), row[4 * x + 1] = (uint8_t)(y * 8);
                        row[4 * x + 2] = (uint8_t)(x + y), row[4 * x + 3] = (uint8_t)(255 - x);
                    }
                }
                f.n += (size_t)stride;
            } else if (kind == 3) { /* RLE8 */
                if (fy == H - 3) { /* the last 3 rows (the image's first) are left out */
                    f.b[f.n++] = 0, f.b[f.n++] = 1;
                    break;
                }
                int x = 0;
                if (fy == 4) { /* a delta: 5 right, 0 up */
                    f.b[f.n++] = 0, f.b[f.n++] = 2, f.b[f.n++] = 5, f.b[f.n++] = 0;
                    x = 5;
                }
                while (x < W) {
                    const int k = x + 6 <= W ? 6 : W - x, v = (x / 6 + fy) % 12;
                    f.b[f.n++] = (uint8_t)k, f.b[f.n++] = (uint8_t)v;
                    memset(&idx[y][x], v, (size_t)k);
                    x += k;
                }
                f.b[f.n++] = 0, f.b[f.n++] = 0;
            } else { /* RLE4: encoded runs of 8, absolute runs of 3, a short run last */
                int x = 0;
                while (x < W) {
                    const int a = (x + fy) % 16, c = (x * 3 + 1) % 16;
                    if ((x % 2 == 0 && x + 8 <= W) || x + 3 > W) { /* (0, 1 or 2): escapes */
                        const int k = x + 8 <= W ? 8 : W - x;
                        f.b[f.n++] = (uint8_t)k, f.b[f.n++] = (uint8_t)(a << 4 | c);
                        for (int i = 0; i < k; i++) idx[y][x + i] = (uint8_t)(i % 2 ? c : a);
                        x += k;
                    } else {
                        const int k = 3;
                        f.b[f.n++] = 0, f.b[f.n++] = (uint8_t)k;
                        f.b[f.n++] = (uint8_t)(a << 4 | c), f.b[f.n++] = (uint8_t)(a << 4);
                        const uint8_t v3[3] = {(uint8_t)a, (uint8_t)c, (uint8_t)a};
                        memcpy(&idx[y][x], v3, (size_t)k);
                        x += k;
                    }
                }
                f.b[f.n++] = 0, f.b[f.n++] = 0;
            }
        }
        if (kind == 4) f.b[f.n++] = 0, f.b[f.n++] = 1;
        uint8_t *rgb = malloc((size_t)W * H * 3), *l = malloc((size_t)W * H);
        const pp_image_box all = {0, 0, W, H};
        pp_error err;
        CHECK_OK(pp_image_decode(f.b, f.n, names[kind], &all, 3, rgb, &err), &err);
        CHECK_OK(pp_image_decode(f.b, f.n, names[kind], &all, 1, l, &err), &err);
        int bad = 0;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                uint8_t e[3];
                const int v = idx[y][x];
                if (kind == 5) {
                    const uint8_t *px = f.b + f.n - (size_t)(y + 1) * W * 4 + 4 * x;
                    e[0] = px[3], e[1] = px[2], e[2] = px[1];
                } else if (v < colors[kind]) {
                    pal_rgb(v, e);
                } else {
                    e[0] = e[1] = e[2] = (uint8_t)v;
                }
                bad += bmp_pixel_differs(names[kind], x, y, rgb + (y * W + x) * 3, l[y * W + x],
                                         e, bad);
            }
        CHECK_MSG(bad == 0, "bmp %s: %d pixels differ from the file's", names[kind], bad);
        const pp_image_box boxes[2] = {{5, 7, 20, 11}, {1, 3, W - 1, H - 4}};
        check_box_layouts("bmp", names[kind], f.b, f.n, rgb, W, boxes, 2);
        free(rgb);
        free(l);
    }
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "test_images_decode")) return 1;
    test_jpeg_boxes();
    test_png();
    test_tiff();
    test_tiff_planes();
    test_bmp16();
    test_bmp_palettes();
    check_rmtree(tmpdir);
    return check_summary("test_images_decode");
}
