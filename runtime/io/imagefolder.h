/*
 * imagefolder.h - the samples of an image folder (image_index.h) decoded
 * (image.h) and transformed (transform.h): 8-bit HWC pixels of one shape
 * and a label per sample, the data source of `format: imagefolder`
 * (internal to runtime/io; data.c normalises the pixels).
 *
 * Streaming: nothing is kept but the index; a sample is read from its file,
 * decoded (only the first crop's box, for JPEG) and transformed when asked
 * for, in the calling thread's work (image_work.h: buffers kept from sample
 * to sample, trimmed after each), so the memory used does not grow with the
 * data set and a steady loader allocates nothing per image.
 *
 * The shape: the transforms' output size when it is the same for every
 * input (pp_transform_fixed_size), else the size sample 0 comes out at;
 * then every sample must come out at that size, or it is a bad image
 * ("add a resize or crop transform"). Channels: 3 (RGB) or 1 (L), as asked.
 *
 * Bad images: a file that cannot be read or decoded, or that comes out at
 * another size. By default pp_images_sample fails with PP_ERR_IO and a
 * message that starts with the file's path. With skip_bad the sample is
 * replaced by the next good sample of the data set (index + 1, + 2, ...
 * modulo the size, drawn as that sample), deterministically, and counted
 * (each bad file once, however often it is read);
 * PP_IMAGES_MAX_SKIP bad images in a row fail all the same.
 *
 * Thread safety: pp_images_sample may run on many threads at once.
 */
#ifndef PP_IO_IMAGEFOLDER_H
#define PP_IO_IMAGEFOLDER_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/io/image_index.h"
#include "runtime/io/image_work.h"
#include "runtime/io/transform.h"

#define PP_IMAGES_MAX_SKIP 64
#define PP_IMAGES_MAX_FILE_BYTES ((int64_t)1 << 30) /* larger files are refused */

typedef struct pp_images_config {
    const char *root;               /* the folder */
    pp_image_index_cache cache;     /* the index's cache (dir NULL: none) */
    int channels;                   /* 1 or 3 */
    int n_transforms;
    const pp_transform *transforms;
    bool skip_bad;                  /* on_bad_image: skip */
    uint64_t seed;
} pp_images_config;

typedef struct pp_images pp_images;

/* Indexes the folder and finds the shape. Errors: the index's
 * (PP_ERR_INPUT), or sample 0's when the shape depends on it (with
 * skip_bad: the shape is the first sample's that decodes whole, and the
 * error, naming sample 0's problem, comes when none of the first
 * PP_IMAGES_MAX_SKIP does). */
pp_status pp_images_open(const pp_images_config *cfg, pp_images **out, pp_error *err);
void pp_images_free(pp_images *im);

void pp_images_shape(const pp_images *im, int *c, int *h, int *w);
const pp_image_index *pp_images_index(const pp_images *im);
/* How the index came: from its cache or a scan (seconds, the cache file, evictions). */
const pp_image_index_note *pp_images_index_note(const pp_images *im);

/* Sample `index` as drawn in `epoch`: its pixels, c planes of h x w bytes
 * row after row, at *px in work's memory (until the work's next use), to be
 * read mirrored left to right when *mirror; its label into *label; the
 * index of the sample read into *used (when not NULL): `index`, or the good
 * sample that replaced it. */
pp_status pp_images_sample(pp_images *im, int64_t index, int64_t epoch, pp_image_work *work,
                           const uint8_t **px, bool *mirror, int32_t *label, int64_t *used,
                           pp_error *err);

/* Whether bad images are skipped (on_bad_image: skip). */
bool pp_images_skips(const pp_images *im);

/* Bad images skipped so far (distinct files), and the first one's message
 * (empty when none). */
int64_t pp_images_skipped(pp_images *im, char *first, size_t n);

#endif
