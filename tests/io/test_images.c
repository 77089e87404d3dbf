/*
 * test_images.c - image folders (runtime/io/image*.h, imagefolder.h): bad
 * files, the index and the data source, what can be checked without
 * torchvision (tests/torch/images_check.py compares with it; the decoders'
 * pixels and boxes: test_images_decode.c; the transforms' draws:
 * test_transforms.c).
 *
 *   bad input  empty file, text named .jpg, truncated JPEG (box above the
 *              cut too; after an EXIF thumbnail too) and PNG, corrupt JPEG,
 *              an image too large (header only: a PNG, a BMP, one of two
 *              32-bit sides, the BMP's size refused too), a BMP too short
 *              for its pixels or its
 *              header, 16-bit BMPs cut or of a kind PIL does not read
 *              (their sizes refused too), an unsupported format: each an
 *              error naming the file
 *   index      classes and samples in torchvision's order (nested folders,
 *              a linked folder, extensions in any case, files that are not
 *              images), the cache written, used, and refreshed when a folder
 *              changes; no class, a class without images, a missing root
 *   source     pp_data over an image folder: shape, labels, the same bits
 *              on 1 and 3 reader threads, each sample's values those of its
 *              decode and drawn operations normalised (mirrored as the last
 *              flip says), labels only, on_bad_image error and skip
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <png.h>
#include <zlib.h>

#include "runtime/io/data.h"
#include "runtime/io/image.h"
#include "runtime/io/image_index.h"
#include "runtime/io/reader.h"
#include "runtime/io/transform.h"
#include "tests/check.h"
#include "tests/io/image_files.h"

static char tmpdir[256];

/* ---- bad input ------------------------------------------------------------------ */

/* jpg (n bytes) with an EXIF segment after its start of image holding a
 * thumbnail JPEG (IFD1's JPEGInterchangeFormat), as cameras write it;
 * *out_n its size. */
static uint8_t *with_exif_thumbnail(const uint8_t *jpg, size_t n, const uint8_t *thumb,
                                    size_t tn, size_t *out_n)
{
    /* "Exif\0\0", a little-endian TIFF header, IFD0 (no entry) and IFD1 (the
     * thumbnail's offset and length, from the TIFF header), the thumbnail */
    const size_t thumb_at = 8 + 6 + 2 + 2 * 12 + 4, seg = 4 + 6 + thumb_at + tn;
    uint8_t *f = calloc(1, n + seg);
    memcpy(f, jpg, 2);
    uint8_t *p = f + 2;
    const uint8_t head[] = {0xFF, 0xE1, (uint8_t)((seg - 2) >> 8), (uint8_t)(seg - 2), 'E', 'x',
                            'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, /* IFD0 at 8 */
                            0, 0, 14, 0, 0, 0, /* no entry; IFD1 at 14 */
                            2, 0, 0x01, 0x02, 4, 0, 1, 0, 0, 0, (uint8_t)thumb_at,
                            (uint8_t)(thumb_at >> 8), 0, 0, 0x02, 0x02, 4, 0, 1, 0, 0, 0,
                            (uint8_t)tn, (uint8_t)(tn >> 8), 0, 0, 0, 0, 0, 0};
    memcpy(p, head, sizeof head);
    memcpy(p + sizeof head, thumb, tn);
    memcpy(f + 2 + seg, jpg + 2, n - 2);
    *out_n = n + seg;
    return f;
}

/* Bad inputs: each must fail with PP_ERR_INPUT naming the file and saying why. */
static void test_bad_images(void)
{
    unsigned long jn;
    jpeg_fixture jf = {"x", 64, 64, 3, 2, 2, false};
    uint8_t *jpg = make_jpeg(&jf, 90, &jn);
    png_fixture pf = {"p", PNG_COLOR_TYPE_RGB, 8, false};
    membuf png = make_png(&pf, 64, 64);
    /* a PNG header claiming 30000 x 30000 pixels (no data) */
    membuf huge = make_png(&pf, 1, 1);
    const uint8_t side[4] = {0, 0, 0x75, 0x30};
    memcpy(huge.b + 16, side, 4);
    memcpy(huge.b + 20, side, 4);
    const uint32_t crc = (uint32_t)crc32(0, huge.b + 12, 17);
    for (int k = 0; k < 4; k++) huge.b[29 + k] = (uint8_t)(crc >> (24 - 8 * k));
    /* the same JPEG after an EXIF thumbnail, cut as above: the thumbnail's end
     * of image within the last 4 KB says nothing of the image's end */
    jpeg_fixture tf = {"t", 16, 16, 3, 2, 2, false};
    unsigned long tn;
    uint8_t *thumb = make_jpeg(&tf, 75, &tn);
    size_t xn;
    uint8_t *exif = with_exif_thumbnail(jpg, jn, thumb, tn, &xn);
    const size_t xcut = (xn - jn) + jn / 2;
    CHECK(xcut - (xn - jn) < 4096); /* the thumbnail's FF D9 in the cut file's last 4 KB */
    uint8_t *corrupt = malloc(jn);
    memcpy(corrupt, jpg, jn);
    for (unsigned long k = 2; k + 4 < jn; k++) /* the frame header's precision: 99 bits */
        if (corrupt[k] == 0xFF && corrupt[k + 1] == 0xC0) {
            corrupt[k + 4] = 99;
            break;
        }
    /* BMP headers (54 bytes, 24 bits, uncompressed) claiming 9 x 50,356,230 pixels
     * (refused from the header, before anything is allocated) and 1000 x 1000 */
    uint8_t bomb[54] = {'B', 'M', 54, 0, 0, 0, 0, 0, 0, 0, 54, 0, 0, 0, 40, 0, 0, 0,
                        9, 0, 0, 0, 0x06, 0x60, 0x00, 0x03, 1, 0, 24, 0};
    /* sides of 4,177,065,485 and 3,305,110,265 (unsigned, as PIL reads
     * them): their product does not fit in 64 bits */
    uint8_t wide_bmp[54];
    memcpy(wide_bmp, bomb, sizeof bomb);
    const uint8_t sides[8] = {0x0d, 0xf6, 0xf8, 0xf8, 0xf9, 0xfa, 0xff, 0xc4};
    memcpy(wide_bmp + 18, sides, 8);
    uint8_t short_bmp[54];
    memcpy(short_bmp, bomb, sizeof bomb);
    const uint8_t thousand[8] = {0xe8, 3, 0, 0, 0xe8, 3, 0, 0};
    memcpy(short_bmp + 18, thousand, 8);
    /* 16-bit BMPs of 3 x 4 pixels (rows of 8 bytes from byte 54, 66 with bit
     * fields): cut in their pixels, cut in their masks, of masks, a
     * compression and a header size PIL does not read */
    const bmp16_fixture b16 = {"b16", 3, 4, 40, 0, {0}, false, false};
    bmp16_fixture b16f = b16;
    b16f.compression = 3;
    b16f.masks[0] = 0xF00, b16f.masks[1] = 0xF0, b16f.masks[2] = 0xF;
    bmp16_fixture b16h = b16;
    b16h.header = 52;
    membuf bmp16 = make_bmp16(&b16), bmp16_masks = make_bmp16(&b16f),
           bmp16_header = make_bmp16(&b16h), bmp16_rle = make_bmp16(&b16);
    bmp16_rle.b[30] = 1;
    static const char gif[] = "GIF89a\1\0\1\0\0\0\0;";
    static const char text[] = "this is not a picture\n";
    struct {
        const char *what;
        const uint8_t *buf;
        size_t n;
        pp_image_box box;
        const char *says;
    } cases[] = {
        {"empty", (const uint8_t *)"", 0, {0, 0, 1, 1}, "empty"},
        {"text named .jpg", (const uint8_t *)text, sizeof text - 1, {0, 0, 1, 1}, "not an image"},
        {"gif (unsupported)", (const uint8_t *)gif, sizeof gif - 1, {0, 0, 1, 1}, "not an image"},
        {"truncated jpeg", jpg, jn / 2, {0, 0, 64, 64}, "truncated"},
        {"truncated jpeg, box above the cut", jpg, jn / 2, {0, 0, 8, 8}, "truncated"},
        {"truncated jpeg after an exif thumbnail", exif, xcut, {0, 0, 64, 64}, "truncated"},
        {"truncated jpeg after an exif thumbnail, box above the cut", exif, xcut, {0, 0, 8, 8},
         "truncated"},
        {"truncated png", png.b, png.n / 2, {0, 0, 64, 64}, "truncated"},
        {"corrupt jpeg", corrupt, jn, {0, 0, 64, 64}, "JPEG"},
        {"too large png", huge.b, huge.n, {0, 0, 1, 1}, "too large"},
        {"too large bmp", bomb, sizeof bomb, {0, 0, 1, 1}, "too large (9 x 50356230 pixels"},
        {"bmp of two 32-bit sides", wide_bmp, sizeof wide_bmp, {0, 0, 1, 1},
         "too large (4177065485 x 3305110265 pixels"},
        {"truncated bmp", short_bmp, sizeof short_bmp, {0, 0, 1, 1},
         "truncated (1000 x 1000 pixels of 24 bits from byte 54 need 3000054 bytes, the file "
         "has 54)"},
        {"bmp header cut", short_bmp, 20, {0, 0, 1, 1},
         "truncated (a file of 20 bytes, shorter than its BMP headers)"},
        {"16-bit bmp cut in its pixels", bmp16.b, bmp16.n - 3, {0, 0, 1, 1},
         "truncated (3 x 4 pixels of 16 bits from byte 54 need 84 bytes, the file has 83)"},
        {"16-bit bmp cut in its masks", bmp16_masks.b, 60, {0, 0, 1, 1},
         "truncated (a file of 60 bytes, shorter than its BMP headers)"},
        {"16-bit bmp, masks 4-4-4", bmp16_masks.b, bmp16_masks.n, {0, 0, 1, 1},
         "unsupported BMP (16 bits a pixel in bit fields red 0xf00, green 0xf0, blue 0xf, "
         "alpha 0)"},
        {"16-bit bmp, header of 52 bytes", bmp16_header.b, bmp16_header.n, {0, 0, 1, 1},
         "unsupported BMP (an information header of 52 bytes; 12, 40, 64, 108 and 124 "
         "are read)"},
        {"16-bit bmp, run lengths", bmp16_rle.b, bmp16_rle.n, {0, 0, 1, 1},
         "unsupported BMP (compression 1 with 16 bits a pixel)"},
    };
    uint8_t out[64 * 64 * 3];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_error err = {0};
        pp_status s = pp_image_decode(cases[i].buf, cases[i].n, "/data/cat/x.jpg", &cases[i].box,
                                      3, out, &err);
        CHECK_MSG(s == PP_ERR_INPUT, "%s: status %s", cases[i].what, pp_status_name(s));
        CHECK_MSG(strncmp(err.msg, "/data/cat/x.jpg: ", 17) == 0 && strstr(err.msg, cases[i].says),
                  "%s: message '%s' (wanted the path and '%s')", cases[i].what, err.msg,
                  cases[i].says);
    }
    int w = 0, h = 0;
    pp_error err = {0};
    CHECK(pp_image_size(bomb, sizeof bomb, "bomb.bmp", &w, &h, NULL, &err) == PP_ERR_INPUT &&
          strstr(err.msg, "bomb.bmp: too large"));
    uint8_t small[54 + 6 * 28] = {0}; /* 9 x 6 (rows of 28 bytes): its size from the header */
    memcpy(small, bomb, sizeof bomb);
    small[22] = 6, small[23] = small[24] = small[25] = 0;
    CHECK(pp_image_size(small, sizeof small, "small.bmp", &w, &h, NULL, &err) == PP_OK &&
          w == 9 && h == 6);
    CHECK(pp_image_size(small, sizeof small - 29, "small.bmp", &w, &h, NULL, &err) ==
              PP_ERR_INPUT && strstr(err.msg, "small.bmp: truncated"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) { /* the size refused too */
        if (strncmp(cases[i].what, "16-bit", 6) != 0) continue;
        err = (pp_error){0};
        pp_status s = pp_image_size(cases[i].buf, cases[i].n, "b.bmp", &w, &h, NULL, &err);
        CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, cases[i].says), "%s: size %s '%s'",
                  cases[i].what, pp_status_name(s), err.msg);
    }
    free(bmp16.b);
    free(bmp16_masks.b);
    free(bmp16_header.b);
    free(bmp16_rle.b);
    /* whole, it decodes, and its box is the plain JPEG's */
    uint8_t a[8 * 8 * 3], b[8 * 8 * 3];
    const pp_image_box top = {0, 0, 8, 8};
    CHECK_OK(pp_image_decode(exif, xn, "exif.jpg", &top, 3, a, &err), &err);
    CHECK_OK(pp_image_decode(jpg, jn, "plain.jpg", &top, 3, b, &err), &err);
    CHECK(memcmp(a, b, sizeof a) == 0);
    free(thumb);
    free(exif);
    free(corrupt);
    free(jpg);
    free(png.b);
    free(huge.b);
}

/* ---- the index ------------------------------------------------------------------ */

static void mkdirs(const char *rel)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tmpdir, rel);
    for (char *c = p + strlen(tmpdir) + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            mkdir(p, 0755);
            *c = '/';
        }
    mkdir(p, 0755);
}

static void put_file(const char *rel, const void *data, size_t n)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tmpdir, rel);
    check_write_file(p, data, n);
}

static bool exists(const char *rel)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tmpdir, rel);
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void test_index(void)
{
    /* classes b, a, "a b" (sorted: "a", "a b", "b"); nested folders; linked folders */
    static const char *const files[] = {
        "tree/b/2.png", "tree/b/10.PNG", "tree/b/x/1.jpg", "tree/b/x y/0.jpg", "tree/b/x-y/5.jpeg",
        "tree/b/notes.txt", "tree/a/z.webp", "tree/a/a.TIFF", "tree/a b/k.bmp", "tree/a b/.jpg",
        "tree/a b/sub/p.pgm", "tree/a b/sub/q.ppm.gz", "elsewhere/linked/m.png",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char d[256];
        snprintf(d, sizeof d, "%s", files[i]);
        *strrchr(d, '/') = 0;
        mkdirs(d);
        put_file(files[i], "x", 1);
    }
    char link[512], target[512];
    snprintf(link, sizeof link, "%s/tree/b/linked", tmpdir);
    snprintf(target, sizeof target, "%s/elsewhere/linked", tmpdir);
    CHECK(symlink(target, link) == 0);
    /* a second link to the same folder is walked again (as os.walk does); a
     * link to an ancestor (a loop) is not entered */
    snprintf(link, sizeof link, "%s/tree/b/linked2", tmpdir);
    CHECK(symlink(target, link) == 0);
    snprintf(link, sizeof link, "%s/tree/b/x/up", tmpdir);
    CHECK(symlink("..", link) == 0);
    put_file("tree/stray.jpg", "x", 1); /* a file beside the classes: not a sample */
    static const char *const want[][2] = {
        {"0", "a/a.TIFF"},      {"0", "a/z.webp"},     {"1", "a b/.jpg"},
        {"1", "a b/k.bmp"},     {"1", "a b/sub/p.pgm"}, {"2", "b/10.PNG"},
        {"2", "b/2.png"},       {"2", "b/linked/m.png"}, {"2", "b/linked2/m.png"},
        {"2", "b/x/1.jpg"},
        {"2", "b/x y/0.jpg"},   {"2", "b/x-y/5.jpeg"},
    };
    char root[512], cache[512];
    snprintf(root, sizeof root, "%s/tree", tmpdir);
    snprintf(cache, sizeof cache, "%s/cache/index", tmpdir);
    for (int pass = 0; pass < 3; pass++) {
        pp_image_index *ix;
        pp_image_index_note note;
        pp_error err;
        const pp_image_index_cache ic = {.dir = cache};
        CHECK_OK(pp_image_index_open(root, &ic, &ix, &note, &err), &err);
        if (!ix) return;
        CHECK_MSG(note.from_cache == (pass == 1), "pass %d: from cache %d", pass, note.from_cache);
        CHECK(pass == 1 || note.cache_written);
        CHECK(pp_image_index_classes(ix) == 3);
        CHECK(strcmp(pp_image_index_class(ix, 0), "a") == 0 &&
              strcmp(pp_image_index_class(ix, 1), "a b") == 0 &&
              strcmp(pp_image_index_class(ix, 2), "b") == 0);
        const int64_t n = pp_image_index_size(ix);
        const int64_t nw = (int64_t)(sizeof want / sizeof want[0]) + (pass == 2);
        CHECK_MSG(n == nw, "pass %d: %lld samples, wanted %lld", pass, (long long)n, (long long)nw);
        for (int64_t i = 0, k = 0; i < n && k < nw; i++, k++) {
            if (pass == 2 && i == 2) { /* the file added before this pass */
                CHECK(strcmp(pp_image_index_relpath(ix, i), "a/zz.jpg") == 0);
                k--;
                continue;
            }
            CHECK_MSG(pp_image_index_label(ix, i) == atoi(want[k][0]) &&
                      strcmp(pp_image_index_relpath(ix, i), want[k][1]) == 0,
                      "pass %d sample %lld: %d %s, wanted %s %s", pass, (long long)i,
                      pp_image_index_label(ix, i), pp_image_index_relpath(ix, i), want[k][0],
                      want[k][1]);
        }
        pp_image_index_free(ix);
        if (pass == 1) {
            sleep(0); /* folder times have nanoseconds: a new file changes a's */
            put_file("tree/a/zz.jpg", "x", 1);
        }
    }
    /* errors: no class, a class without images, a missing root */
    mkdirs("empty-root");
    mkdirs("no-images/c1");
    put_file("no-images/c1/readme.txt", "x", 1);
    mkdirs("no-images/c0");
    put_file("no-images/c0/1.png", "x", 1);
    static const struct {
        const char *rel, *says;
    } bad[] = {{"empty-root", "no class folder"},
               {"no-images", "class 'c1' has no image file"},
               {"missing", "cannot open the folder"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", tmpdir, bad[i].rel);
        pp_image_index *ix;
        pp_error err = {0};
        CHECK(pp_image_index_open(p, NULL, &ix, NULL, &err) == PP_ERR_INPUT && !ix);
        CHECK_MSG(strstr(err.msg, bad[i].says) && strstr(err.msg, bad[i].rel),
                  "%s: '%s'", bad[i].rel, err.msg);
    }
}

/* tmpdir/rel, n bytes, last modified `age` seconds ago (n < 0: the file as it is). */
static void aged_file(const char *rel, long n, long age)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    if (n >= 0) {
        char *zeros = calloc(1, (size_t)n + 1);
        put_file(rel, zeros, (size_t)n);
        free(zeros);
    }
    const struct timespec t[2] = {{time(NULL) - age, 0}, {time(NULL) - age, 0}};
    CHECK(utimensat(AT_FDCWD, path, t, 0) == 0);
}

static long file_age(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)(time(NULL) - sb.st_mtime) : -1;
}

/* The cache folder's bound: a write evicts the least recently used other
 * index files down to it; a read marks its file used; 0 bounds nothing. */
static void test_index_cache_bound(void)
{
    char root[512], cache[512];
    snprintf(root, sizeof root, "%s/tree", tmpdir); /* test_index's folder */
    snprintf(cache, sizeof cache, "%s/cache/bounded", tmpdir);
    mkdirs("cache/bounded");
    aged_file("cache/bounded/0000000000000001.idx", 4000, 7200);
    aged_file("cache/bounded/0000000000000002.idx", 4000, 3600);
    aged_file("cache/bounded/notes.txt", 100000, 9999); /* not an index: left */
    pp_image_index_cache ic = {.dir = cache, .max_bytes = 4000 + 4096};
    pp_image_index *ix = NULL;
    pp_image_index_note note;
    pp_error err;
    CHECK_OK(pp_image_index_open(root, &ic, &ix, &note, &err), &err);
    pp_image_index_free(ix);
    struct stat sb;
    CHECK(note.cache_written && stat(note.cache_path, &sb) == 0 && sb.st_size < 4096);
    CHECK_MSG(note.evicted == 1 && note.evicted_bytes == 4000, "evicted %d files, %lld bytes",
              note.evicted, (long long)note.evicted_bytes);
    CHECK(!exists("cache/bounded/0000000000000001.idx")); /* the least recently used */
    CHECK(exists("cache/bounded/0000000000000002.idx") && exists("cache/bounded/notes.txt"));
    /* a read marks its file used (and evicts nothing) */
    aged_file(note.cache_path + strlen(tmpdir) + 1, -1, 5000);
    CHECK(file_age(note.cache_path) >= 4999);
    CHECK_OK(pp_image_index_open(root, &ic, &ix, &note, &err), &err);
    pp_image_index_free(ix);
    CHECK(note.from_cache && note.evicted == 0 && file_age(note.cache_path) < 100);
    /* no bound */
    remove(note.cache_path);
    aged_file("cache/bounded/0000000000000003.idx", 100000, 7200);
    ic.max_bytes = 0;
    CHECK_OK(pp_image_index_open(root, &ic, &ix, &note, &err), &err);
    pp_image_index_free(ix);
    CHECK(note.cache_written && note.evicted == 0);
    CHECK(exists("cache/bounded/0000000000000002.idx") &&
          exists("cache/bounded/0000000000000003.idx"));
}

/* ---- the data source ------------------------------------------------------------- */

static void test_source(void)
{
    /* 3 classes x 5 JPEGs of several sizes, plus (in a copy) a bad one */
    jpeg_fixture f = {"j", 0, 0, 3, 2, 2, false};
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 5; i++) {
            char rel[128];
            snprintf(rel, sizeof rel, "src/c%d", c);
            mkdirs(rel);
            f.w = 40 + 13 * i + c;
            f.h = 30 + 7 * i;
            unsigned long n;
            uint8_t *jpg = make_jpeg(&f, 90, &n);
            snprintf(rel, sizeof rel, "src/c%d/%d.jpg", c, i);
            put_file(rel, jpg, n);
            snprintf(rel, sizeof rel, "srcbad/c%d", c);
            mkdirs(rel);
            snprintf(rel, sizeof rel, "srcbad/c%d/%d.jpg", c, i);
            if (c == 1 && i == 2)
                put_file(rel, "not a jpeg", 10);
            else
                put_file(rel, jpg, n);
            free(jpg);
        }
    pp_data_config cfg;
    pp_data_config_init(&cfg);
    cfg.format = PP_DATA_IMAGEFOLDER;
    cfg.classes = 0;
    snprintf(cfg.root, sizeof cfg.root, "%s/src", tmpdir);
    cfg.n_transforms = 2;
    cfg.transforms[0] = pp_transform_default(PP_TF_RANDOM_RESIZED_CROP);
    cfg.transforms[0].h = cfg.transforms[0].w = 24;
    cfg.transforms[1] = pp_transform_default(PP_TF_HORIZONTAL_FLIP);
    cfg.shuffle = true;
    cfg.n_mean = cfg.n_std = 3;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    memcpy(cfg.mean, mean, sizeof mean);
    memcpy(cfg.std, sd, sizeof sd);
    pp_data *d;
    pp_error err;
    CHECK_OK(pp_data_open(&cfg, &d, &err), &err);
    if (!d) return;
    int c, h, w, classes;
    pp_data_shape(d, &c, &h, &w, &classes);
    CHECK(c == 3 && h == 24 && w == 24 && classes == 3 && pp_data_size(d) == 15);
    const int count = 22; /* straddles two epochs */
    const size_t vals = (size_t)count * 3 * 24 * 24;
    float *a = malloc(vals * sizeof(float)), *b = malloc(vals * sizeof(float));
    int32_t la[22], lb[22];
    CHECK_OK(pp_data_read(d, 4, count, a, la, &err), &err);
    pp_data_reader *r;
    CHECK_OK(pp_data_reader_new(3, &r, &err), &err);
    CHECK_OK(pp_data_reader_read(r, d, 4, count, b, lb, &err), &err);
    CHECK(memcmp(a, b, vals * sizeof(float)) == 0 && memcmp(la, lb, sizeof la) == 0);
    for (int j = 0; j < count; j++) {
        const int64_t idx = pp_data_sample_index(d, 4 + j);
        CHECK(la[j] == (int)(idx / 5));
        /* the sample's values: its file decoded whole, the operations drawn
         * for it applied, (v / 255 - mean) / std in float, mirrored as said */
        char path[512], rel[256];
        snprintf(path, sizeof path, "%s/src/%s", tmpdir, pp_data_sample_name(d, idx, rel, 256));
        membuf file = read_whole(path);
        int iw, ih, n_ops;
        pp_tf_op ops[4];
        CHECK_OK(pp_image_size(file.b, file.n, path, &iw, &ih, NULL, &err), &err);
        CHECK_OK(pp_transform_draw(cfg.transforms, 2, cfg.seed, (4 + j) / 15, idx, iw, ih, path,
                                   ops, &n_ops, &err), &err);
        uint8_t *px = malloc((size_t)iw * ih * 3);
        const pp_image_box all = {0, 0, iw, ih};
        const pp_image_out rows = pp_image_out_rows(px, iw, ih);
        CHECK_OK(pp_image_decode_to(file.b, file.n, path, &all, 3, &rows, NULL, &err), &err);
        const pp_tf_image in = {.px = px, .w = iw, .h = ih, .c = 3, .part = all,
                                .plane = (int64_t)iw * ih, .xstep = 1, .ystep = iw};
        pp_image_work *work;
        const uint8_t *out;
        bool mirror;
        CHECK_OK(pp_image_work_new(&work, &err), &err);
        CHECK_OK(pp_transform_apply(ops, n_ops, &in, 24, 24, work, &out, &mirror, &err), &err);
        int off = 0;
        for (int k = 0; k < 3 * 24 * 24; k++) {
            const int x = k % 24, y = k / 24 % 24, ch = k / 576;
            const float v = ((float)out[ch * 576 + y * 24 + (mirror ? 23 - x : x)] / 255.0f -
                             mean[ch]) / sd[ch];
            off += memcmp(&v, &a[(size_t)j * 1728 + k], sizeof v) != 0;
        }
        CHECK_MSG(off == 0, "sample %lld: %d values differ from its transforms' bytes normalised",
                  (long long)idx, off);
        pp_image_work_free(work);
        free(px);
        free(file.b);
    }
    CHECK_OK(pp_data_read(d, 4, count, NULL, lb, &err), &err); /* labels only, no decoding */
    CHECK(memcmp(la, lb, sizeof la) == 0);
    char name[256];
    CHECK(strcmp(pp_data_sample_name(d, 7, name, sizeof name), "c1/2.jpg") == 0);
    CHECK(strcmp(pp_data_class_name(d, 2, name, sizeof name), "c2") == 0);
    pp_data_close(d);
    /* a bad image: an error naming it (PP_ERR_IO, a failure of the run) */
    snprintf(cfg.root, sizeof cfg.root, "%s/srcbad", tmpdir);
    cfg.shuffle = false;
    CHECK_OK(pp_data_open(&cfg, &d, &err), &err);
    if (d) {
        pp_status s = pp_data_reader_read(r, d, 0, 15, a, la, &err);
        CHECK(s == PP_ERR_IO && strstr(err.msg, "c1/2.jpg") && strstr(err.msg, "not an image"));
        pp_data_close(d);
    }
    /* skipped: replaced by the next sample, counted */
    cfg.skip_bad_images = true;
    CHECK_OK(pp_data_open(&cfg, &d, &err), &err);
    if (d) {
        CHECK_OK(pp_data_reader_read(r, d, 0, 15, a, la, &err), &err);
        /* sample 7 is bad: replaced by sample 8 as drawn for itself */
        CHECK(la[7] == 1 && memcmp(a + 7 * 3 * 24 * 24, a + 8 * 3 * 24 * 24,
                                   3 * 24 * 24 * sizeof(float)) == 0);
        /* labels only (a process without the first stage): the same labels */
        int32_t only[15];
        CHECK_OK(pp_data_read(d, 0, 15, NULL, only, &err), &err);
        CHECK(memcmp(only, la, sizeof only) == 0);
        char first[512];
        CHECK(pp_data_bad_images(d, first, sizeof first) == 1 && strstr(first, "c1/2.jpg"));
        pp_data_close(d);
    }
    pp_data_reader_free(r);
    free(a);
    free(b);
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "test_images")) return 1;
    test_bad_images();
    test_index();
    test_index_cache_bound();
    test_source();
    check_rmtree(tmpdir);
    return check_summary("test_images");
}
