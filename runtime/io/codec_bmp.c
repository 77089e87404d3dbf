/*
 * codec_bmp.c - BMP (see image.h), read here as PIL 9.4's BmpImagePlugin
 * reads it: every layout it reads, the same pixels, and what it refuses
 * refused, but for the few files it misreads or refuses that are sound
 * (below).
 *
 * The headers: the file's 14 bytes, then an information header of 12
 * bytes (OS/2's: unsigned 16-bit sizes, uncompressed, palette entries of 3
 * bytes) or of 40, 64, 108 or 124 bytes (32-bit sizes; rows top down when
 * the height's top byte is 0xFF, a negative height; palette entries of 4
 * bytes); other sizes are refused. 1, 4, 8, 16, 24 and 32 bits a pixel.
 * Compressions: none (BI_RGB), BI_BITFIELDS of the masks PIL reads (32 bits:
 * BGRX, XBGR, ABGR, RGBA, BGRA and all-zero masks, alpha dropped; 24 bits:
 * BGR; 16 bits: 5-6-5 and 5-5-5), RLE8 and RLE4 (of 1 to 8 bits a pixel,
 * a nibble a pixel for RLE4 whatever the depth, as PIL); others refused.
 * 16-bit fields of b bits are widened to v * 255 / (2^b - 1), truncated, as
 * PIL's BGR;15 and BGR;16 unpackers do (where libgd shifts: white 248).
 *
 * Where the pixels start: bfOffBits, but for 1 to 8 bits an offset that
 * points at the palette itself (14 + the information header) is moved past
 * 4 bytes a colour, and 0 means right after what the headers hold (the 12
 * bytes of masks after a 40-byte header, the palette): PIL's rules. The
 * palette has biClrUsed colours (2^bits when 0; more than 65536 refused);
 * an index past the colours the file holds is the gray (i, i, i), as in
 * PIL's palettes.
 *
 * An uncompressed file must hold every row but the last whole, the last its
 * pixels (not its padding), else it is "truncated" (PIL: "image file is
 * truncated"). More than PP_IMAGE_MAX_PIXELS pixels is refused from the
 * header, before anything is allocated. Only the box's rows are read, each
 * from its place in the file; RLE is decoded whole (its rows depend on
 * those before) into a buffer of an index a pixel.
 *
 * Where this reads otherwise than PIL 9.4 (docs/RUNNING.md lists them):
 * PIL reads a palette of 2 colours black and white as 1 bit a pixel, and a
 * palette whose every colour i is (i, i, i) (a single black one too) as 8
 * bits a pixel, whatever the file's depth: at 4 and 8 bits (black and
 * white) and at 1 and 4 bits (grays) it then misreads the rows or refuses
 * the file ("codec configuration error"); here the palette is read as any
 * other. In RLE,
 * a delta (0, 2) takes its two bytes (PIL takes the two after them); an
 * absolute run of an odd count in RLE4 gives all its pixels (PIL drops the
 * last); runs are aligned to 2 bytes from the pixel data's start (PIL: from
 * the file's); a stream that ends with its end-of-bitmap before all the
 * rows leaves the rest index 0 (PIL refuses it: "not enough image data"),
 * and one that runs out of bytes before is "truncated"; more than 256
 * colours (at any depth) reads the first 256 (PIL refuses the palette).
 */
#include "runtime/io/codecs.h"
#include "runtime/io/pixels.h"

#include <string.h>

static bool bmp_sniff(const uint8_t *buf, size_t n)
{
    return n >= 14 && buf[0] == 'B' && buf[1] == 'M';
}

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }

enum { BMP_RAW = 0, BMP_RLE8 = 1, BMP_RLE4 = 2, BMP_BITFIELDS = 3 };

/* What the headers say. */
typedef struct bmp_info {
    int64_t w, h;
    uint32_t info, bpp, compression;
    uint64_t offset; /* where the pixels start */
    uint64_t stride; /* bytes a row, uncompressed */
    bool top_down;
    unsigned rpos, gpos, bpos; /* 24 and 32 bits: the bytes of red, green, blue in a pixel */
    int green_bits;            /* 16 bits: the green field's (5 or 6), the red's above it */
    uint8_t palette[256][3];   /* 1 to 8 bits: each index's RGB */
} bmp_info;

static pp_status truncated_header(const char *path, size_t n, pp_error *err)
{
    return pp_error_set(err, PP_ERR_INPUT, "%s: truncated (a file of %zu bytes, shorter than its "
                        "BMP headers)", path, n);
}

/* The information header: size, depth, compression, direction. */
static pp_status read_info(const uint8_t *buf, size_t n, const char *path, bmp_info *b,
                           pp_error *err)
{
    if (n < 14 + 4) return truncated_header(path, n, err);
    b->info = le32(buf + 14);
    const uint32_t i = b->info;
    if (i != 12 && i != 40 && i != 64 && i != 108 && i != 124)
        return pp_error_set(err, PP_ERR_INPUT, "%s: unsupported BMP (an information header of "
                            "%u bytes; 12, 40, 64, 108 and 124 are read)", path, i);
    if (n < 14 + (size_t)i) return truncated_header(path, n, err);
    if (i == 12) {
        b->w = le16(buf + 18);
        b->h = le16(buf + 20);
        b->bpp = le16(buf + 24);
        b->compression = BMP_RAW;
    } else {
        /* unsigned sizes, the height negative (rows top down) when its top
         * byte is 0xFF: PIL's reading; any other is too large a size */
        b->w = le32(buf + 18);
        b->top_down = buf[25] == 0xFF;
        b->h = b->top_down ? ((int64_t)1 << 32) - le32(buf + 22) : le32(buf + 22);
        b->bpp = le16(buf + 28);
        b->compression = le32(buf + 30);
    }
    const uint32_t d = b->bpp;
    if (d != 1 && d != 4 && d != 8 && d != 16 && d != 24 && d != 32)
        return pp_error_set(err, PP_ERR_INPUT, "%s: unsupported BMP (%u bits a pixel; 1, 4, 8, "
                            "16, 24 and 32 are read)", path, d);
    return pp_px_check_size(path, b->w, b->h, err);
}

/* The layout of 16, 24 and 32 bits a pixel, uncompressed or in bit fields
 * (the masks at byte 54: after a 40-byte header, in a longer one, which
 * alone has alpha's). */
static pp_status read_fields(const uint8_t *buf, size_t n, const char *path, bmp_info *b,
                             pp_error *err)
{
    b->rpos = 2, b->gpos = 1, b->bpos = 0; /* BGR, BGRX */
    b->green_bits = 5;
    if (b->compression == BMP_RAW) return PP_OK;
    if (b->compression != BMP_BITFIELDS)
        return pp_error_set(err, PP_ERR_INPUT, "%s: unsupported BMP (compression %u with %u "
                            "bits a pixel)", path, b->compression, b->bpp);
    if (n < 66) return truncated_header(path, n, err);
    const uint32_t r = le32(buf + 54), g = le32(buf + 58), bl = le32(buf + 62);
    const uint32_t a = b->info >= 64 ? le32(buf + 66) : 0;
    if (b->bpp == 32) {
        /* PIL's six layouts: byte positions of red, green and blue */
        static const struct { uint32_t r, g, b, a; unsigned rp, gp, bp; } known[] = {
            {0xFF0000, 0xFF00, 0xFF, 0, 2, 1, 0},                /* BGRX */
            {0xFF000000, 0xFF0000, 0xFF00, 0, 3, 2, 1},          /* XBGR */
            {0xFF000000, 0xFF0000, 0xFF00, 0xFF, 3, 2, 1},       /* ABGR */
            {0xFF, 0xFF00, 0xFF0000, 0xFF000000, 0, 1, 2},       /* RGBA */
            {0xFF0000, 0xFF00, 0xFF, 0xFF000000, 2, 1, 0},       /* BGRA */
            {0, 0, 0, 0, 2, 1, 0},                               /* BGRA */
        };
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
            if (known[k].r == r && known[k].g == g && known[k].b == bl && known[k].a == a) {
                b->rpos = known[k].rp, b->gpos = known[k].gp, b->bpos = known[k].bp;
                return PP_OK;
            }
        }
    } else if (b->bpp == 24) {
        if (r == 0xFF0000 && g == 0xFF00 && bl == 0xFF) return PP_OK;
    } else if (r == 0xF800 && g == 0x7E0 && bl == 0x1F) {
        b->green_bits = 6;
        return PP_OK;
    } else if (r == 0x7C00 && g == 0x3E0 && bl == 0x1F) {
        return PP_OK;
    }
    return pp_error_set(err, PP_ERR_INPUT, "%s: unsupported BMP (%u bits a pixel in bit fields "
                        "red %#x, green %#x, blue %#x, alpha %#x)", path, b->bpp, r, g, bl, a);
}

/* The headers (see the top of the file): the size, checked against the
 * limit and, uncompressed, against the bytes there are; the layout; the
 * palette; where the pixels start. */
static pp_status bmp_header(const uint8_t *buf, size_t n, const char *path, bmp_info *b,
                            pp_error *err)
{
    memset(b, 0, sizeof *b);
    PP_TRY(read_info(buf, n, path, b, err));
    const bool rle = b->compression == BMP_RLE8 || b->compression == BMP_RLE4;
    /* where the headers end: the pixels when bfOffBits is 0 */
    uint64_t end = 14 + (uint64_t)b->info;
    b->offset = le32(buf + 10);
    if (b->bpp > 8) {
        PP_TRY(read_fields(buf, n, path, b, err));
        if (b->info == 40 && b->compression == BMP_BITFIELDS) end += 12;
    } else {
        if (b->compression != BMP_RAW && !rle)
            return pp_error_set(err, PP_ERR_INPUT, "%s: unsupported BMP (compression %u with %u "
                                "bits a pixel)", path, b->compression, b->bpp);
        const uint32_t used = b->info == 12 ? 0 : le32(buf + 46);
        const uint64_t colors = used ? used : 1u << b->bpp;
        if (colors > 65536)
            return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt BMP (a palette of %llu colours)",
                                path, (unsigned long long)colors);
        if (b->offset == end) b->offset += 4 * colors;
        const unsigned entry = b->info == 12 ? 3 : 4;
        const uint64_t there = n > end ? (n - end) / entry : 0;
        const uint64_t held = colors < there ? colors : there;
        for (unsigned k = 0; k < 256; k++) {
            const uint8_t gray[3] = {(uint8_t)k, (uint8_t)k, (uint8_t)k};
            const uint8_t *e = k < held ? buf + end + (uint64_t)k * entry : gray; /* B G R */
            b->palette[k][0] = e[2], b->palette[k][1] = e[1], b->palette[k][2] = e[0];
        }
        end = n - end < colors * entry ? n : end + colors * entry;
    }
    if (b->offset == 0) b->offset = end;
    if (rle) {
        if (b->offset >= n)
            return pp_error_set(err, PP_ERR_INPUT, "%s: truncated (no RLE data after byte %llu)",
                                path, (unsigned long long)b->offset);
        return PP_OK;
    }
    const uint64_t bits = (uint64_t)b->w * b->bpp;
    b->stride = (bits + 31) / 32 * 4;
    const uint64_t need = b->offset + b->stride * (uint64_t)(b->h - 1) + (bits + 7) / 8;
    if (need > n)
        return pp_error_set(err, PP_ERR_INPUT, "%s: truncated (%lld x %lld pixels of %u bits "
                            "from byte %llu need %llu bytes, the file has %zu)", path,
                            (long long)b->w, (long long)b->h, b->bpp,
                            (unsigned long long)b->offset, (unsigned long long)need, n);
    return PP_OK;
}

/* The RLE8 or RLE4 stream at b->offset into idx (w * h indices, in the
 * file's row order), as PIL's BmpRleDecoder but for the differences at the
 * top of the file: an encoded run stops at its row's end; an absolute run
 * may pass it. */
static pp_status rle_decode(const uint8_t *buf, size_t n, const char *path, const bmp_info *b,
                            uint8_t *idx, pp_error *err)
{
    const bool rle4 = b->compression == BMP_RLE4;
    const uint64_t w = (uint64_t)b->w, total = w * (uint64_t)b->h;
    memset(idx, 0, total);
    uint64_t pos = 0, x = 0, p = b->offset;
    while (pos < total) {
        if (n - p < 2) goto short_data;
        const unsigned count = buf[p], v = buf[p + 1];
        p += 2;
        if (count) { /* a run of one index, or for RLE4 of two in turn */
            const uint64_t k = x + count <= w ? count : x < w ? w - x : 0;
            for (uint64_t i = 0; i < k && pos + i < total; i++)
                idx[pos + i] = (uint8_t)(!rle4 ? v : i % 2 ? v & 15 : v >> 4);
            pos += k, x += k;
        } else if (v == 0) { /* end of line */
            pos = (pos + w - 1) / w * w;
            x = 0;
        } else if (v == 1) { /* end of bitmap: the rest stays 0 */
            break;
        } else if (v == 2) { /* delta: right, then rows on */
            if (n - p < 2) goto short_data;
            pos += buf[p] + (uint64_t)buf[p + 1] * w;
            p += 2;
            x = pos % w;
        } else { /* absolute: v indices, padded to 2 bytes; cut by the
                  * file's end, those there (short only if more are due) */
            const uint64_t bytes = rle4 ? (v + 1) / 2 : v, there = n - p < bytes ? n - p : bytes;
            const uint64_t k = there == bytes ? v : rle4 ? 2 * there : there;
            for (uint64_t i = 0; i < k && pos + i < total; i++) {
                const uint8_t c = buf[p + (rle4 ? i / 2 : i)];
                idx[pos + i] = !rle4 ? c : i % 2 ? c & 15 : c >> 4;
            }
            p += there;
            pos += k, x += k;
            if (there < bytes) {
                if (pos < total) goto short_data;
                break;
            }
            if ((p - b->offset) % 2 && p < n) p++;
        }
    }
    return PP_OK;
short_data:
    return pp_error_set(err, PP_ERR_INPUT, "%s: truncated (the RLE data ends at byte %zu, in "
                        "row %llu of %lld, with no end of bitmap)", path, n,
                        (unsigned long long)(pos / w), (long long)b->h);
}

/* Pixel x of a file row as RGB. */
static void bmp_pixel(const bmp_info *b, const uint8_t *row, int64_t x, uint8_t *rgb)
{
    switch (b->bpp) {
    case 1:
    case 4:
    case 8: {
        const unsigned v = b->bpp == 8 ? row[x]
                           : b->bpp == 4 ? (row[x / 2] >> (x % 2 ? 0 : 4)) & 15
                                         : (row[x / 8] >> (7 - x % 8)) & 1;
        memcpy(rgb, b->palette[v], 3);
        return;
    }
    case 16: {
        const unsigned v = le16(row + 2 * x);
        const unsigned rshift = 5 + (unsigned)b->green_bits, gmax = (1u << b->green_bits) - 1;
        rgb[0] = (uint8_t)(((v >> rshift) & 31) * 255 / 31);
        rgb[1] = (uint8_t)(((v >> 5) & gmax) * 255 / gmax);
        rgb[2] = (uint8_t)((v & 31) * 255 / 31);
        return;
    }
    default: {
        const uint8_t *p = row + x * (b->bpp / 8);
        rgb[0] = p[b->rpos], rgb[1] = p[b->gpos], rgb[2] = p[b->bpos];
        return;
    }
    }
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
    PP_TRY(pp_px_check_box(path, box, (int)b.w, (int)b.h, err));
    const bool rle = b.compression == BMP_RLE8 || b.compression == BMP_RLE4;
    const size_t line = (size_t)box->w * 3, indices = rle ? (size_t)(b.w * b.h) : 0;
    uint8_t *rgb = pp_image_work_buf(work, PP_WORK_ROWS, line + indices);
    if (!rgb) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory decoding", path);
    uint8_t *idx = rgb + line;
    if (rle) {
        PP_TRY(rle_decode(buf, n, path, &b, idx, err));
        b.bpp = 8; /* the indices, a byte each, in rows of w */
        b.stride = (uint64_t)b.w;
    }
    const uint8_t *data = rle ? idx : buf + b.offset;
    for (int y = 0; y < box->h; y++) {
        const int64_t iy = box->y + y, fy = b.top_down ? iy : b.h - 1 - iy;
        const uint8_t *row = data + (uint64_t)fy * b.stride;
        for (int x = 0; x < box->w; x++) bmp_pixel(&b, row, box->x + x, rgb + 3 * x);
        pp_px_put_row(rgb, PP_PX_RGB, box->w, channels, out, y);
    }
    return PP_OK;
}

const pp_image_codec_ops pp_codec_bmp = {
    .name = "bmp", .sniff = bmp_sniff, .size = bmp_size, .decode = bmp_decode};
