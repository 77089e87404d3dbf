/*
 * image_files.h - the image tests' hand-made files (test_images.c,
 * test_images_decode.c): a smooth, colourful picture, written as JPEG by
 * libjpeg and as PNG by libpng, to memory; 16-bit BMPs written byte by
 * byte; a file read whole.
 */
#ifndef PP_TESTS_IO_IMAGE_FILES_H
#define PP_TESTS_IO_IMAGE_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A smooth, colourful test picture: sample (x, y, ch). */
uint8_t pattern(int x, int y, int ch);

typedef struct jpeg_fixture {
    const char *name;
    int w, h, comps;      /* comps: 1 gray, 3 YCbCr, 4 CMYK */
    int hs, vs;           /* luma sampling factors (chroma 1x1) */
    bool progressive;
} jpeg_fixture;

/* Writes a JPEG of the pattern to memory (malloc'ed); *n its size. */
uint8_t *make_jpeg(const jpeg_fixture *f, int quality, unsigned long *n);

typedef struct png_fixture {
    const char *name;
    int color_type, depth;
    bool interlaced;
} png_fixture;

typedef struct membuf {
    uint8_t *b;
    size_t n, cap;
} membuf;

/* The value written for sample (x, y, k) of a PNG of depth bits. */
unsigned png_value(int x, int y, int k, int depth);

/* Writes a w x h PNG of the fixture to memory. Palette: entry i is
 * (i, 255 - i, 3 * i mod 256), the index pattern(x, y, 0) mod 16. */
membuf make_png(const png_fixture *f, int w, int h);

/* A 16-bit BMP: its headers and how its rows lie. */
typedef struct bmp16_fixture {
    const char *name;
    int w, h;
    uint32_t header;      /* the information header's bytes: 12 (OS/2), 40, 64, 108, 124 */
    uint32_t compression; /* 0 (BI_RGB: 5-5-5) or 3 (BI_BITFIELDS) */
    uint32_t masks[3];    /* red, green, blue (BI_BITFIELDS) */
    bool top_down;        /* a negative height: rows top down */
    bool offset_zero;     /* bfOffBits 0: the pixels follow the headers */
} bmp16_fixture;

/* The 16 bits of pixel (x, y) of a 16-bit BMP: 0xFFFF at (0, 0), every value
 * of every 5- and 6-bit field among the first 64 pixels of any row. */
uint16_t bmp16_value(int x, int y);

/* Writes the BMP to memory: the header's masks after a 40-byte header,
 * else in it; rows padded to 4 bytes. */
membuf make_bmp16(const bmp16_fixture *f);

/* The file at path, malloc'ed (b NULL if it cannot be read). */
membuf read_whole(const char *path);

#endif
