/*
 * reader.c - one batch read on several threads (see io/reader.h).
 *
 * The threads are a host thread pool (runtime/core/thread_pool.h) of
 * threads - 1 workers, the caller taking part in every read; the pool runs
 * one read at a time and hands the chunks out. The job (arguments, how the
 * batch is cut, first failure) lives on the reading caller's stack for the
 * duration of the read. Each thread reads images with a work of its own
 * (image_work.h, chosen by the pool's worker number, made on its first
 * read), kept for the reader's life: its decoders and buffers serve sample
 * after sample. A lock makes reads one at a time, a batch read on the
 * caller alone included, so no two threads use one work.
 *
 * Chunks: about four per thread, so a thread slowed by other work on its
 * core leaves its share to the others, but never below MIN_CHUNK_VALUES
 * values, so small batches (MNIST) are not cut finer than waking a thread is
 * worth. A batch of one chunk runs on the caller alone.
 */
#include "runtime/io/reader.h"

#include "runtime/io/data_internal.h"

#include <errno.h>
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/core/thread_pool.h"

#define CHUNKS_PER_THREAD 4
#define MIN_CHUNK_VALUES ((int64_t)1 << 16)

/* One batch read: its arguments, how it is cut, and its first failure. */
typedef struct reader_job {
    pp_data_reader *reader;
    pp_data *src;
    int64_t pos;
    int count;
    void *images;
    int32_t *labels;
    int64_t sample_values; /* C * H * W (4-byte values: pixels, or token ids) */
    int targets;           /* labels per sample */
    int chunk;             /* samples per chunk (the last may have fewer) */
    int n_chunks;
    pthread_mutex_t fail_mu; /* guards the three below */
    int fail_chunk;          /* the first failed chunk, n_chunks when none */
    pp_status fail_status;
    pp_error fail_err;
} reader_job;

struct pp_data_reader {
    int threads;          /* the caller and the pool's workers */
    pp_thread_pool *pool;
    pthread_mutex_t mu;   /* held by a read from start to end */
    pp_image_work *work[PP_DATA_READER_MAX_THREADS]; /* per worker number, made on first use */
};

/* Worker number w's work; NULL when it cannot be made (a read then makes
 * one of its own). Called under the reader's lock, by worker w only. */
static pp_image_work *work_of(pp_data_reader *r, int w)
{
    if (!r->work[w] && pp_image_work_new(&r->work[w], NULL) != PP_OK) r->work[w] = NULL;
    return r->work[w];
}

/* Reads chunk k of the job. */
static void read_chunk(void *arg, int64_t index, int worker)
{
    reader_job *job = arg;
    const int k = (int)index;
    const int first = k * job->chunk;
    const int n = job->count - first < job->chunk ? job->count - first : job->chunk;
    pp_error err;
    pp_status st = pp_data_read_work(job->src, work_of(job->reader, worker), job->pos + first, n,
                                     (float *)job->images + (int64_t)first * job->sample_values,
                                     job->labels + (int64_t)first * job->targets, &err);
    if (st != PP_OK) {
        pthread_mutex_lock(&job->fail_mu);
        if (k < job->fail_chunk) {
            job->fail_chunk = k;
            job->fail_status = st;
            job->fail_err = err;
        }
        pthread_mutex_unlock(&job->fail_mu);
    }
}

pp_status pp_data_reader_threads_from_env(int *threads, pp_error *err)
{
    const char *s = getenv("PP_READ_THREADS");
    if (s && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || *end || v < 1 || v > PP_DATA_READER_MAX_THREADS)
            return pp_error_set(err, PP_ERR_INPUT,
                                "PP_READ_THREADS='%s': expected an integer in [1, %d]", s,
                                PP_DATA_READER_MAX_THREADS);
        *threads = (int)v;
        return PP_OK;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    *threads = n < 1 ? 1 : n > PP_DATA_READER_DEFAULT_THREADS ? PP_DATA_READER_DEFAULT_THREADS
                                                               : (int)n;
    return PP_OK;
}

void pp_data_reader_free(pp_data_reader *r)
{
    if (!r) return;
    pp_thread_pool_free(r->pool); /* a read in progress finishes first */
    for (int i = 0; i < r->threads; i++) pp_image_work_free(r->work[i]);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

pp_status pp_data_reader_new(int threads, pp_data_reader **out, pp_error *err)
{
    *out = NULL;
    if (threads < 1 || threads > PP_DATA_READER_MAX_THREADS)
        return pp_error_set(err, PP_ERR_INVALID, "data reader: %d threads is outside [1, %d]",
                            threads, PP_DATA_READER_MAX_THREADS);
    pp_data_reader *r = calloc(1, sizeof *r);
    if (!r) return pp_error_set(err, PP_ERR_OOM, "out of host memory (data reader)");
    /* min 0: reads with the threads the system lets it start */
    pp_status s = pp_thread_pool_new(threads - 1, 0, &r->pool, err);
    if (s != PP_OK) {
        free(r);
        return s;
    }
    r->threads = pp_thread_pool_workers(r->pool) + 1;
    pthread_mutex_init(&r->mu, NULL);
    *out = r;
    return PP_OK;
}

int pp_data_reader_threads(const pp_data_reader *r) { return r->threads; }

pp_status pp_data_reader_read(pp_data_reader *r, pp_data *src, int64_t pos, int count,
                              void *images, int32_t *labels, pp_error *err)
{
    if (!r) return pp_error_set(err, PP_ERR_INVALID, "data reader: NULL reader");
    if (!src || !labels || pos < 0 || count <= 0 || pos > INT64_MAX - count)
        return pp_data_read(src, pos, count, images, labels, err); /* names the problem */
    pp_status st = PP_OK;
    if (!images) { /* labels only: on the caller */
        pthread_mutex_lock(&r->mu);
        st = pp_data_read_work(src, work_of(r, 0), pos, count, NULL, labels, err);
        pthread_mutex_unlock(&r->mu);
        return st;
    }
    int c, h, w;
    pp_data_shape(src, &c, &h, &w, NULL);
    const int64_t sample_values = (int64_t)c * h * w;
    int64_t chunk = (count + (int64_t)r->threads * CHUNKS_PER_THREAD - 1) /
                    ((int64_t)r->threads * CHUNKS_PER_THREAD);
    const int64_t min_chunk = (MIN_CHUNK_VALUES + sample_values - 1) / sample_values;
    if (chunk < min_chunk) chunk = min_chunk;
    pthread_mutex_lock(&r->mu);
    if (r->threads == 1 || chunk >= count) {
        st = pp_data_read_work(src, work_of(r, 0), pos, count, images, labels, err);
        pthread_mutex_unlock(&r->mu);
        return st;
    }
    reader_job job = {.reader = r, .src = src, .pos = pos, .count = count, .images = images,
                      .labels = labels, .sample_values = sample_values,
                      .targets = pp_data_targets_per_sample(src), .chunk = (int)chunk,
                      .n_chunks = (int)((count + chunk - 1) / chunk)};
    job.fail_chunk = job.n_chunks;
    pthread_mutex_init(&job.fail_mu, NULL);
    pp_thread_pool_run(r->pool, PP_THREAD_POOL_WITH_CALLER, job.n_chunks, read_chunk, &job);
    pthread_mutex_destroy(&job.fail_mu);
    if (job.fail_chunk < job.n_chunks) {
        if (err) *err = job.fail_err;
        st = job.fail_status;
    }
    pthread_mutex_unlock(&r->mu);
    return st;
}
