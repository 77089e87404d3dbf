/*
 * image_work.h - the scratch memory and decoder objects of one thread that
 * reads images (internal to runtime/io): a sample is read, decoded and
 * transformed in buffers that are kept and reused from sample to sample, so
 * that a steady loader allocates nothing per image (FFCV's manner).
 *
 * A work holds one buffer per slot, each grown on demand and kept; who uses
 * which slot is fixed (below), so that a buffer being read is never the one
 * being grown. It also holds per-codec state (libjpeg's decompressor),
 * made on first use and freed with the work. pp_image_work_trim frees the
 * buffers grown past PP_IMAGE_WORK_KEEP bytes (a huge image once does not
 * hold its memory for the rest of the run).
 *
 * Ownership: the creator frees it. Thread safety: a work is used by one
 * thread at a time (the data reader keeps one per thread).
 */
#ifndef PP_IO_IMAGE_WORK_H
#define PP_IO_IMAGE_WORK_H

#include <stddef.h>

#include "runtime/core/status.h"

#define PP_IMAGE_WORK_KEEP ((size_t)64 << 20) /* bytes a slot keeps after a trim */

typedef enum pp_image_work_slot {
    PP_WORK_FILE = 0,  /* the file's bytes (imagefolder.c) */
    PP_WORK_ROWS,      /* a decoder's rows or whole image (codec_*.c) */
    PP_WORK_IMAGE_A,   /* the decoded box, and every other image between transforms */
    PP_WORK_IMAGE_B,   /* the images between transforms in turn with A (transform.c) */
    PP_WORK_RESIZE_A,  /* a resize's transposed input, then its intermediate rows */
    PP_WORK_RESIZE_B,  /* a resize's horizontal pass, column by column (resample.c) */
    PP_WORK_WEIGHTS,   /* a resize's weights (resample.c) */
    PP_WORK_SLOTS
} pp_image_work_slot;

typedef enum pp_image_work_state_kind {
    PP_WORK_STATE_JPEG = 0, /* codec_jpeg.c's decompressor */
    PP_WORK_STATES
} pp_image_work_state_kind;

typedef struct pp_image_work pp_image_work;

pp_status pp_image_work_new(pp_image_work **out, pp_error *err);
/* Frees the buffers and drops every state. NULL is a no-op. */
void pp_image_work_free(pp_image_work *w);

/* Slot's buffer of at least n bytes (64-byte aligned), grown when smaller:
 * its contents are then lost; NULL when the host is out of memory. */
void *pp_image_work_buf(pp_image_work *w, pp_image_work_slot slot, size_t n);

/* The state of `kind`, made by make() on first use (NULL: make failed, and
 * is tried again next time) and handed to drop() when the work is freed. */
void *pp_image_work_state(pp_image_work *w, pp_image_work_state_kind kind, void *(*make)(void),
                          void (*drop)(void *));

/* Frees the buffers larger than PP_IMAGE_WORK_KEEP. */
void pp_image_work_trim(pp_image_work *w);

#endif
