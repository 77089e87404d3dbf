/*
 * reader.h - reads one batch of a data source on several threads
 * (internal: not part of the public API).
 *
 * A reader is a small persistent pool: the calling thread plus threads - 1
 * workers of a host thread pool (runtime/core/thread_pool.h), which sleep on
 * a condition variable between batches. A batch of
 * count samples is cut into chunks of consecutive samples; the threads take
 * chunks from a shared counter and fill them with pp_data_read, which may
 * run concurrently on one source. Every sample's bytes depend only on its
 * position, so the batch is bit for bit the one a single pp_data_read call
 * gives, whatever the thread count or which thread took which chunk.
 *
 * The thread count: PP_READ_THREADS (an integer in [1,
 * PP_DATA_READER_MAX_THREADS]) when set, else the number of online CPUs, at
 * most PP_DATA_READER_DEFAULT_THREADS.
 *
 * Image folders: each thread decodes with a work of its own (image_work.h),
 * kept for the reader's life, so a steady read allocates nothing per image.
 *
 * Errors: a read fails as pp_data_read does (bad arguments, out of memory for
 * a shuffle permutation); when several chunks fail, the error of the first
 * failing chunk in sample order is returned, so errors do not depend on
 * timing either.
 * Thread safety: any thread may call pp_data_reader_read; one batch is read
 * at a time and a second caller waits for the first to finish.
 */
#ifndef PP_DATA_READER_H
#define PP_DATA_READER_H

#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/io/data.h"

#define PP_DATA_READER_MAX_THREADS 64
#define PP_DATA_READER_DEFAULT_THREADS 8 /* the default's cap */

typedef struct pp_data_reader pp_data_reader;

/* Thread count from the environment (see the top of this file);
 * PP_ERR_INPUT naming PP_READ_THREADS when it is set but not valid. */
pp_status pp_data_reader_threads_from_env(int *threads, pp_error *err);

/* A reader of `threads` threads, the caller counting as one (1: every read
 * runs on the caller, no worker is started); fewer when the system refuses
 * to start more (pp_data_reader_threads tells). Free with
 * pp_data_reader_free. */
pp_status pp_data_reader_new(int threads, pp_data_reader **out, pp_error *err);
/* Waits for a read in progress, stops and joins the workers. NULL is a no-op. */
void pp_data_reader_free(pp_data_reader *r);

int pp_data_reader_threads(const pp_data_reader *r);

/* pp_data_read(src, pos, count, images, labels, err) with the samples spread
 * over the reader's threads; returns when all are written. Labels only
 * (images NULL) are read on the caller. */
pp_status pp_data_reader_read(pp_data_reader *r, pp_data *src, int64_t pos, int count,
                              void *images, int32_t *labels, pp_error *err);

#endif
