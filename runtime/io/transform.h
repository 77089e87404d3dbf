/*
 * transform.h - torchvision's image transforms on PIL images, as plain
 * data: drawing each sample's parameters (a pure function of the seed, the
 * epoch and the sample's index in the data set) apart from applying them to
 * pixels (a pure function of the image and the drawn operations), as
 * torchvision separates RandomResizedCrop.get_params from F.resized_crop.
 *
 * The transforms (torchvision 0.14, transforms.py and functional.py):
 *   random_resized_crop  size, scale (0.08, 1), ratio (3/4, 4/3): ten tries
 *                        of area * U(scale) and exp(U(log ratio)), w =
 *                        round(sqrt(area * ratio)), h = round(sqrt(area /
 *                        ratio)) (Python's round, half to even), accepted
 *                        when 0 < w <= W and 0 < h <= H, at i = randint(0,
 *                        H - h + 1), j = randint(0, W - w + 1); else the
 *                        central crop of the ratio clamped to its range;
 *                        then a bilinear resize of the box to size
 *   horizontal_flip      p: flips when U(0, 1) < p
 *   random_crop          size, padding (left, top, right, bottom; zeros):
 *                        i = randint(0, H' - h + 1), j = randint(0, W' - w
 *                        + 1) in the padded image
 *   resize               size: [h, w], or the shorter side (the longer
 *                        int(size * long / short), torchvision's truncation;
 *                        unchanged when the shorter side already has it)
 *   center_crop          size: top = round((H - h) / 2), left = round((W -
 *                        w) / 2), zeros where the crop passes the image
 * The uniform draws are float32 as torch's uniform_ gives them (24 random
 * bits), exp and log in float32 as torch.exp and torch.log of float
 * tensors; the random numbers come from a counter-based generator keyed by
 * (seed, epoch, index, transform, draw), so their distributions, not their
 * streams, are torchvision's. A sample's draws never depend on the thread,
 * replica, rank or batch that reads it.
 *
 * Drawing turns a list of transforms and an input size into operations
 * (crop a box, possibly passing the image's edges; resize to a size; flip)
 * and the output size. Applying runs them on 8-bit planes (one per channel):
 * resizes are PIL's bilinear (resample.h), a crop following a resize
 * computes only the crop's pixels of the resize (same bits), a first crop
 * tells the decoder which box of the file to decode
 * (pp_transform_first_box) and a first resize in which layout
 * (pp_transform_wants_columns), and the flips after the last other
 * operation are left to whoever reads the result (it says to read it
 * mirrored), so that the normalisation that reads it anyway does them. The
 * transforms themselves (pp_transform) are plain data of data.h.
 */
#ifndef PP_IO_TRANSFORM_H
#define PP_IO_TRANSFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/io/data.h"
#include "runtime/io/image.h"
#include "runtime/io/image_work.h"

typedef enum pp_tf_op_kind { PP_TF_OP_CROP, PP_TF_OP_RESIZE, PP_TF_OP_FLIP } pp_tf_op_kind;

/* A drawn operation. */
typedef struct pp_tf_op {
    pp_tf_op_kind kind;
    pp_image_box box; /* crop: the box in the input's coordinates (may pass its edges) */
    int w, h;         /* resize: the output size */
    bool fallback;    /* random_resized_crop's box: the central fallback was taken */
} pp_tf_op;

/* A transform with torchvision's defaults for its kind (scale, ratio, p). */
pp_transform pp_transform_default(pp_transform_kind kind);

/* The output size of the list on a w x h input. */
void pp_transform_out_size(const pp_transform *t, int n, int w, int h, int *out_w, int *out_h);

/* Whether the list's output size is the same for every input, and that
 * size: some transform fixes both sides and nothing after it changes them. */
bool pp_transform_fixed_size(const pp_transform *t, int n, int *out_w, int *out_h);

/* Draws sample `index` of `epoch`'s operations for a w x h input: ops gets
 * at most 2 * n entries (*n_ops of them). PP_ERR_INPUT (naming path) when a
 * random_crop is larger than its padded input, as torchvision refuses it. */
pp_status pp_transform_draw(const pp_transform *t, int n, uint64_t seed, int64_t epoch,
                            int64_t index, int w, int h, const char *path, pp_tf_op *ops,
                            int *n_ops, pp_error *err);

/* The box of a w x h image the operations read: the first crop's box
 * clipped to the image, or the whole image. */
pp_image_box pp_transform_first_box(const pp_tf_op *ops, int n_ops, int w, int h);

/* An image between operations: c planes of a w x h image, holding the part
 * `part` of it: channel k of pixel (x, y) of the part (from its corner) at
 * px[k * plane + x * xstep + y * ystep]. */
typedef struct pp_tf_image {
    const uint8_t *px;
    int w, h, c;
    pp_image_box part;
    int64_t plane, xstep, ystep;
} pp_tf_image;

/* Whether the decoder should lay the box `got` (as pp_transform_first_box
 * gave it) out as planes of columns: when the first operation to read it is
 * a resize that changes its width (the horizontal pass reads columns). */
bool pp_transform_wants_columns(const pp_tf_op *ops, int n_ops, const pp_image_box *got, int w,
                                int h);

/* Applies the operations to in (which must not be in the work's
 * PP_WORK_IMAGE_B buffer); the result, c planes of out_w x out_h bytes
 * (out_w and out_h as pp_transform_out_size gives), row after row, at *out
 * in the work's memory (or in's, when no operation changes it) until the
 * work's next use; it is to be read mirrored left to right when *mirror. */
pp_status pp_transform_apply(const pp_tf_op *ops, int n_ops, const pp_tf_image *in, int out_w,
                             int out_h, pp_image_work *work, const uint8_t **out, bool *mirror,
                             pp_error *err);

/* The list as a YAML flow sequence, the plan's form ("[{resize: 256},
 * {center_crop: [224, 224]}]"), into buf (n bytes). */
void pp_transform_describe(const pp_transform *t, int n, char *buf, size_t size);

#endif
