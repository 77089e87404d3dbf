/*
 * data_internal.h - what data.c offers the rest of runtime/io beside its
 * public data.h (internal: not installed).
 */
#ifndef PP_IO_DATA_INTERNAL_H
#define PP_IO_DATA_INTERNAL_H

#include "runtime/io/data.h"
#include "runtime/io/image_work.h"

/* pp_data_read with the calling thread's work for image folders (its
 * decoders and buffers kept for the next read; NULL only for sources that
 * are not image folders). The data reader keeps one work per thread. */
pp_status pp_data_read_work(pp_data *src, pp_image_work *work, int64_t pos, int count,
                            void *images, int32_t *labels, pp_error *err);

#endif
