/*
 * grid.h - a picture of samples as a model sees them: a grid of tiles, one
 * per sample, each captioned, written as PNG through libgd (internal to
 * runtime/io; `--show-data` draws with it).
 */
#ifndef PP_IO_GRID_H
#define PP_IO_GRID_H

#include <stdint.h>

#include "runtime/core/status.h"

/* Writes n samples of c (1 or 3) x h x w bytes (CHW, u8) as a grid of tiles,
 * each scaled up (nearest neighbour) to at least PP_GRID_MIN_TILE pixels a
 * side and captioned with captions[i] (cut to the tile's width), to path as
 * PNG. PP_ERR_IO naming path when it cannot be written. */
#define PP_GRID_MIN_TILE 96
pp_status pp_grid_write_png(const char *path, const uint8_t *pixels, int n, int c, int h, int w,
                            const char *const *captions, pp_error *err);

#endif
