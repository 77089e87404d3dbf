/*
 * image_files.c - the image tests' hand-made files (image_files.h).
 */
#include "tests/io/image_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

/* A smooth, colourful test picture: sample (x, y, ch). */
uint8_t pattern(int x, int y, int ch)
{
    return (uint8_t)((x * (3 + ch) + y * (5 - ch) + ((x * y) >> 3) * (ch + 1)) & 255);
}

/* Writes a JPEG of the pattern to memory; *n its size. */
uint8_t *make_jpeg(const jpeg_fixture *f, int quality, unsigned long *n)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    jpeg_mem_dest(&c, &buf, n);
    c.image_width = (JDIMENSION)f->w;
    c.image_height = (JDIMENSION)f->h;
    c.input_components = f->comps;
    c.in_color_space = f->comps == 1 ? JCS_GRAYSCALE : f->comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    if (f->comps == 3) {
        c.comp_info[0].h_samp_factor = f->hs;
        c.comp_info[0].v_samp_factor = f->vs;
    }
    if (f->progressive) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)f->w * f->comps);
    while (c.next_scanline < c.image_height) {
        for (int x = 0; x < f->w; x++)
            for (int k = 0; k < f->comps; k++)
                row[x * f->comps + k] = pattern(x, (int)c.next_scanline, k);
        JSAMPROW r[1] = {row};
        jpeg_write_scanlines(&c, r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    return buf;
}

static void png_mem_write(png_structp p, png_bytep data, size_t len)
{
    membuf *m = png_get_io_ptr(p);
    if (m->n + len > m->cap) {
        m->cap = (m->n + len) * 2;
        m->b = realloc(m->b, m->cap);
    }
    memcpy(m->b + m->n, data, len);
    m->n += len;
}

static void png_mem_flush(png_structp p)
{
    (void)p;
}

/* The value written for sample (x, y, k) of a PNG of depth bits. */
unsigned png_value(int x, int y, int k, int depth)
{
    unsigned v = pattern(x, y, k);
    if (depth == 16) return v * 256u + (unsigned)((x + y) % 7) * 40u; /* some at most 255 */
    if (depth < 8) return v >> (8 - depth);
    return v;
}

/* Writes a w x h PNG of the fixture to memory. Palette: entry i is
 * (i, 255 - i, 3 * i mod 256), the index pattern(x, y, 0) mod 16. */
membuf make_png(const png_fixture *f, int w, int h)
{
    membuf m = {0};
    png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(p);
    png_set_write_fn(p, &m, png_mem_write, png_mem_flush);
    png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, f->depth, f->color_type,
                 f->interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (f->color_type == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[16];
        for (int i = 0; i < 16; i++)
            pal[i] = (png_color){(png_byte)i, (png_byte)(255 - i), (png_byte)(3 * i)};
        png_set_PLTE(p, info, pal, 16);
    }
    png_write_info(p, info);
    const int ns = f->color_type == PNG_COLOR_TYPE_GRAY ? 1
                   : f->color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                   : f->color_type == PNG_COLOR_TYPE_RGB ? 3
                   : f->color_type == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : 1;
    const size_t rowbytes = ((size_t)w * ns * f->depth + 7) / 8;
    png_bytep *rows = malloc((size_t)h * sizeof *rows);
    for (int y = 0; y < h; y++) {
        rows[y] = calloc(1, rowbytes);
        for (int x = 0; x < w; x++)
            for (int k = 0; k < ns; k++) {
                unsigned v = f->color_type == PNG_COLOR_TYPE_PALETTE ? pattern(x, y, 0) % 16
                                                                     : png_value(x, y, k, f->depth);
                size_t s = (size_t)x * ns + k;
                if (f->depth == 16) {
                    rows[y][2 * s] = (png_byte)(v >> 8);
                    rows[y][2 * s + 1] = (png_byte)v;
                } else if (f->depth == 8) {
                    rows[y][s] = (png_byte)v;
                } else {
                    size_t bit = s * (size_t)f->depth;
                    rows[y][bit / 8] |= (png_byte)(v << (8 - f->depth - bit % 8));
                }
            }
    }
    png_write_image(p, rows);
    png_write_end(p, info);
    png_destroy_write_struct(&p, &info);
    for (int y = 0; y < h; y++) free(rows[y]);
    free(rows);
    return m;
}

static void put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, v);
    put16(p + 2, v >> 16);
}

uint16_t bmp16_value(int x, int y)
{
    /* a field's values in turn, flipped by a row's bits (a bijection of each field) */
    const unsigned k = (unsigned)x % 64, fields = (k & 31) | k << 5 | (k & 31) << 11;
    return (uint16_t)~(fields ^ (unsigned)(x / 64 + y) * 0x9E37u);
}

membuf make_bmp16(const bmp16_fixture *f)
{
    const size_t stride = ((size_t)f->w * 2 + 3) / 4 * 4;
    const size_t head = 14 + f->header + (f->header == 40 && f->compression == 3 ? 12 : 0);
    const size_t n = head + stride * (size_t)f->h;
    membuf m = {calloc(1, n), n, n};
    uint8_t *b = m.b;
    b[0] = 'B', b[1] = 'M';
    put32(b + 2, (uint32_t)n);
    put32(b + 10, f->offset_zero ? 0 : (uint32_t)head);
    put32(b + 14, f->header);
    if (f->header == 12) {
        put16(b + 18, (uint32_t)f->w);
        put16(b + 20, (uint32_t)f->h);
        put16(b + 22, 1);
        put16(b + 24, 16);
    } else {
        put32(b + 18, (uint32_t)f->w);
        put32(b + 22, f->top_down ? (uint32_t)-f->h : (uint32_t)f->h);
        put16(b + 26, 1);
        put16(b + 28, 16);
        put32(b + 30, f->compression);
        put32(b + 34, (uint32_t)(stride * (size_t)f->h));
        if (f->compression == 3)
            for (int k = 0; k < 3; k++) put32(b + 54 + 4 * k, f->masks[k]);
    }
    for (int y = 0; y < f->h; y++) {
        uint8_t *row = b + head + stride * (size_t)(f->top_down ? y : f->h - 1 - y);
        for (int x = 0; x < f->w; x++) put16(row + 2 * x, bmp16_value(x, y));
    }
    return m;
}

/* The file at path, malloc'ed (b NULL if it cannot be read). */
membuf read_whole(const char *path)
{
    membuf m = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return m;
    fseek(f, 0, SEEK_END);
    m.cap = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    m.b = malloc(m.cap + 1);
    m.n = fread(m.b, 1, m.cap, f);
    fclose(f);
    return m;
}
