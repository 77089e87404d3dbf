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
 * Rows and columns may be produced in part: the output window (ox, oy, ow,
 * oh) of the out_w x out_h resize is computed alone, with the same bits it
 * has in the whole resize (each output sample depends on its own weights
 * only); a resize followed by a crop computes only the crop.
 */
#ifndef PP_IO_RESAMPLE_H
#define PP_IO_RESAMPLE_H

#include <stdint.h>

#include "runtime/core/status.h"

/* Resizes src (sw x sh pixels of c bytes, HWC) to out_w x out_h and writes
 * the window ow x oh at (ox, oy) of the result into dst (ow * oh * c bytes).
 * The window must lie inside the result. PP_ERR_OOM when scratch memory
 * cannot be had. */
pp_status pp_resample_bilinear(const uint8_t *src, int sw, int sh, int c, int out_w, int out_h,
                               int ox, int oy, int ow, int oh, uint8_t *dst, pp_error *err);

#endif
