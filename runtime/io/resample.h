/*
 * resample.h - PIL's bilinear resize of 8-bit images with antialiasing
 * (Image.resize(size, Image.BILINEAR), the resize of torchvision's
 * transforms on PIL images), bit for bit (internal to runtime/io).
 *
 * PIL 9.4's algorithm (libImaging/Resample.c, restated): for each output
 * column xx of a pass from in_size to out_size, scale = in/out, filterscale
 * = max(scale, 1), support = filterscale (the triangle's support is 1),
 * center = (xx + 0.5) * scale, the input range [(int)(center - support +
 * 0.5), (int)(center + support + 0.5)) clamped to the image, weights
 * tri((x - center + 0.5) / filterscale) normalised to sum 1 and turned into
 * 22-bit fixed point (rounded away from zero); each output sample is
 * (2^21 + sum(in * weight)) >> 22 clamped to [0, 255]. The horizontal pass
 * runs first, over the rows the vertical pass reads, into 8-bit samples;
 * then the vertical pass. A side of unchanged size skips its pass.
 *
 * How it is computed here: one plane (channel) at a time, both passes by one
 * kernel that adds whole lines of its input, each times its weight, into a
 * line of the output: rows for the vertical pass, columns for the
 * horizontal one, so that the compiler vectorises both (the sums are of
 * integers, which no order of the terms changes). The horizontal pass reads
 * the source's columns, as they are when the source is laid out column
 * after column (pp_image_out_columns: a decoder can write them so), else
 * from a transposed copy; its result, columns, is transposed into the rows
 * the vertical pass reads. Scratch memory is the work's (image_work.h):
 * nothing is allocated per resize once the work has grown.
 *
 * Rows and columns may be produced in part: the output window (ox, oy, ow,
 * oh) of the out_w x out_h resize is computed alone, with the same bits it
 * has in the whole resize (each output sample depends on its own weights
 * only); a resize followed by a crop computes only the crop.
 */
#ifndef PP_IO_RESAMPLE_H
#define PP_IO_RESAMPLE_H

#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/io/image_work.h"

/* Resizes the c planes at src (plane k at src + k * src_plane; each sw x sh
 * bytes, pixel (x, y) at x * xstep + y * ystep) to out_w x out_h and writes
 * the window ow x oh at (ox, oy) of each result into dst (plane k at dst +
 * k * dst_plane, row after row, rows dst_stride bytes apart). The window
 * must lie inside the result (PP_ERR_INVALID otherwise). PP_ERR_OOM when
 * the work's scratch memory cannot grow. */
pp_status pp_resample_planes(const uint8_t *src, int c, int64_t src_plane, int sw, int sh,
                             int64_t xstep, int64_t ystep, int out_w, int out_h, int ox, int oy,
                             int ow, int oh, uint8_t *dst, int64_t dst_plane, int64_t dst_stride,
                             pp_image_work *work, pp_error *err);

#endif
