/*
 * codecs.h - the decoder tables of runtime/io, one file each (codec_*.c),
 * looked up by image.c (internal to runtime/io; see image.h).
 */
#ifndef PP_IO_CODECS_H
#define PP_IO_CODECS_H

#include "runtime/io/image.h"

extern const pp_image_codec_ops pp_codec_jpeg; /* codec_jpeg.c: libjpeg-turbo */
extern const pp_image_codec_ops pp_codec_png;  /* codec_png.c: libpng */
extern const pp_image_codec_ops pp_codec_webp; /* codec_webp.c: libwebp */
extern const pp_image_codec_ops pp_codec_tiff; /* codec_tiff.c: libtiff */
extern const pp_image_codec_ops pp_codec_bmp;  /* codec_bmp.c: libgd, 16-bit BMPs directly */
extern const pp_image_codec_ops pp_codec_pnm;  /* codec_pnm.c: libnetpbm */

#endif
