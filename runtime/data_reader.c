/*
 * data_reader.c - one batch read on several threads (see data_reader.h).
 *
 * One read at a time (`submit`): the submitter publishes the job under `mu`,
 * wakes the workers and takes chunks itself; chunks are handed out by an
 * atomic counter. When the submitter finds no chunk left it closes the job,
 * so a worker that wakes late does not join it, and waits only for the
 * workers that did join (`inflight`). The mutex orders every chunk's writes
 * before the submitter's return. This is the CPU backend's pool pattern
 * (runtime/cpu/cpu_pool.c), which lives below the device API and cannot be
 * shared with a data source.
 *
 * Chunks: about four per thread, so a thread slowed by other work on its
 * core leaves its share to the others, but never below MIN_CHUNK_VALUES
 * values, so small batches (MNIST) are not cut finer than waking a thread is
 * worth. A batch of one chunk runs on the caller alone.
 */
#include "runtime/data_reader.h"

#include <errno.h>
#include <stdint.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define CHUNKS_PER_THREAD 4
#define MIN_CHUNK_VALUES ((int64_t)1 << 16)

typedef struct reader_worker {
    pp_data_reader *reader;
    pthread_t thread;
} reader_worker;

/* One batch read: its arguments, how it is cut, and its first failure. */
typedef struct reader_job {
    pp_data *src;
    int64_t pos;
    int count;
    float *images;
    int32_t *labels;
    int64_t sample_values; /* C * H * W */
    int chunk;             /* samples per chunk (the last may have fewer) */
    int n_chunks;
    int fail_chunk;        /* the first failed chunk, n_chunks when none (under mu) */
    pp_status fail_status;
    pp_error fail_err;
} reader_job;

struct pp_data_reader {
    int threads;
    reader_worker *workers; /* threads - 1 */
    int started;            /* workers actually started */

    pthread_mutex_t submit; /* held by the submitter of the running read */
    pthread_mutex_t mu;     /* guards everything below but `next` */
    pthread_cond_t wake;    /* a job was posted, or stop */
    pthread_cond_t idle;    /* inflight dropped to 0 */
    uint64_t job_id;        /* incremented per job */
    bool open;              /* the current job accepts workers */
    bool stop;
    int inflight;           /* workers inside the current job */
    reader_job job;
    atomic_int next;        /* next chunk to hand out */
};

/* Reads chunks of the current job until none is left. */
static void run_chunks(pp_data_reader *r, reader_job *job)
{
    for (;;) {
        const int k = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
        if (k >= job->n_chunks) return;
        const int first = k * job->chunk;
        const int n = job->count - first < job->chunk ? job->count - first : job->chunk;
        pp_error err;
        pp_status st = pp_data_read(job->src, job->pos + first, n,
                                    job->images + (int64_t)first * job->sample_values,
                                    job->labels + first, &err);
        if (st != PP_OK) {
            pthread_mutex_lock(&r->mu);
            if (k < job->fail_chunk) {
                job->fail_chunk = k;
                job->fail_status = st;
                job->fail_err = err;
            }
            pthread_mutex_unlock(&r->mu);
        }
    }
}

static void *worker_main(void *opaque)
{
    pp_data_reader *r = ((reader_worker *)opaque)->reader;
    uint64_t seen = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && (!r->open || r->job_id == seen)) pthread_cond_wait(&r->wake, &r->mu);
        if (r->stop) break;
        seen = r->job_id;
        r->inflight++;
        pthread_mutex_unlock(&r->mu);
        run_chunks(r, &r->job); /* the job's fields stay put while inflight > 0 */
        pthread_mutex_lock(&r->mu);
        if (--r->inflight == 0) pthread_cond_signal(&r->idle);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
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
    pthread_mutex_lock(&r->submit); /* a read in progress finishes first */
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->started; i++) pthread_join(r->workers[i].thread, NULL);
    pthread_mutex_unlock(&r->submit);
    pthread_cond_destroy(&r->idle);
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->submit);
    free(r->workers);
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
    r->threads = threads;
    atomic_init(&r->next, 0);
    pthread_mutex_init(&r->submit, NULL);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->wake, NULL);
    pthread_cond_init(&r->idle, NULL);
    if (threads > 1) {
        r->workers = calloc((size_t)threads - 1, sizeof *r->workers);
        if (!r->workers) {
            pp_data_reader_free(r);
            return pp_error_set(err, PP_ERR_OOM, "out of host memory (data reader)");
        }
    }
    for (int i = 0; i < threads - 1; i++) {
        r->workers[i].reader = r;
        if (pthread_create(&r->workers[i].thread, NULL, worker_main, &r->workers[i]) != 0)
            break; /* reads with the threads it has */
        r->started++;
    }
    r->threads = r->started + 1;
    *out = r;
    return PP_OK;
}

int pp_data_reader_threads(const pp_data_reader *r) { return r->threads; }

pp_status pp_data_reader_read(pp_data_reader *r, pp_data *src, int64_t pos, int count,
                              float *images, int32_t *labels, pp_error *err)
{
    if (!r) return pp_error_set(err, PP_ERR_INVALID, "data reader: NULL reader");
    if (!src || !images || !labels || pos < 0 || count <= 0 || pos > INT64_MAX - count)
        return pp_data_read(src, pos, count, images, labels, err); /* names the problem */
    int c, h, w;
    pp_data_shape(src, &c, &h, &w, NULL);
    const int64_t sample_values = (int64_t)c * h * w;
    int64_t chunk = (count + (int64_t)r->threads * CHUNKS_PER_THREAD - 1) /
                    ((int64_t)r->threads * CHUNKS_PER_THREAD);
    const int64_t min_chunk = (MIN_CHUNK_VALUES + sample_values - 1) / sample_values;
    if (chunk < min_chunk) chunk = min_chunk;
    if (r->threads == 1 || chunk >= count)
        return pp_data_read(src, pos, count, images, labels, err);

    pthread_mutex_lock(&r->submit);
    pthread_mutex_lock(&r->mu);
    r->job = (reader_job){.src = src, .pos = pos, .count = count, .images = images,
                          .labels = labels, .sample_values = sample_values, .chunk = (int)chunk,
                          .n_chunks = (int)((count + chunk - 1) / chunk)};
    r->job.fail_chunk = r->job.n_chunks;
    atomic_store_explicit(&r->next, 0, memory_order_relaxed);
    r->job_id++;
    r->open = true;
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->mu);

    run_chunks(r, &r->job);

    pthread_mutex_lock(&r->mu);
    r->open = false;
    while (r->inflight > 0) pthread_cond_wait(&r->idle, &r->mu);
    pp_status st = PP_OK;
    if (r->job.fail_chunk < r->job.n_chunks) {
        st = r->job.fail_status;
        if (err) *err = r->job.fail_err;
    }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->submit);
    return st;
}
