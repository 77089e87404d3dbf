/*
 * prefetch.c - the next training batch is read while the current step runs,
 * into the second of two host buffer sets (page-locked on CUDA), so that the
 * devices do not wait for the host to decode, generate or normalise the data
 * between steps; and every batch is read on several threads.
 *
 * Buffers alternate step by step: step k uses set k % 2 (whether its batch
 * was prefetched or, on a miss, read at once), and the worker fills the other
 * set, which the previous step's copies no longer read (a step ends with its
 * streams synchronised). A prefetched batch is used only when it is exactly
 * the one asked for (position and count); otherwise it is dropped and read
 * again, so results never depend on prefetching. One job at a time; the
 * caller's thread never reads the data source while a job is pending.
 *
 * Threads: the prefetcher owns a data reader (runtime/io/reader.h) of
 * PP_READ_THREADS threads (default: online CPUs, at most 8). The worker
 * thread reads a prefetched batch through it (the worker is one of those
 * threads), a miss is read through it on the caller's thread, and so are
 * evaluation batches (pipe_prefetch_read). The reader spreads a batch's
 * samples over its threads and gives the bytes one thread would, so the
 * thread count never changes results. It reads one batch at a time: an
 * evaluation read waits for a prefetch in progress to end.
 */
#include "pipeline/prefetch.h"

#include "runtime/io/reader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct pipe_prefetch {
    pp_data *data;
    pp_data_reader *reader;
    float *images[2];
    int32_t *labels[2];
    int last;                  /* the set the last step used */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
    /* the job (under mu) */
    bool pending;              /* the worker is reading it */
    bool done;                 /* read, and not used yet */
    int slot;
    int64_t pos;
    int count;
    pp_status st;
    pp_error err;
};

static void *worker(void *arg)
{
    pipe_prefetch *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->pending && !pf->quit) pthread_cond_wait(&pf->cv, &pf->mu);
        if (pf->quit) break;
        const int slot = pf->slot, count = pf->count;
        const int64_t pos = pf->pos;
        pthread_mutex_unlock(&pf->mu);
        pp_error err;
        pp_status st = pp_data_reader_read(pf->reader, pf->data, pos, count, pf->images[slot],
                                           pf->labels[slot], &err);
        pthread_mutex_lock(&pf->mu);
        pf->st = st;
        pf->err = err;
        pf->pending = false;
        pf->done = true;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

pp_status pipe_prefetch_new(pp_data *data, float *const images[2], int32_t *const labels[2],
                            pipe_prefetch **out, pp_error *err)
{
    *out = NULL;
    int threads;
    PP_TRY(pp_data_reader_threads_from_env(&threads, err));
    pipe_prefetch *pf = calloc(1, sizeof *pf);
    if (!pf) return pp_error_set(err, PP_ERR_OOM, "out of host memory (prefetch)");
    pp_status s = pp_data_reader_new(threads, &pf->reader, err);
    if (s != PP_OK) {
        free(pf);
        return s;
    }
    pf->data = data;
    for (int i = 0; i < 2; i++) {
        pf->images[i] = images[i];
        pf->labels[i] = labels[i];
    }
    pf->last = 1; /* the first step uses set 0 */
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    *out = pf;
    return PP_OK;
}

/* Waits until no job is pending. Called with mu held. */
static void wait_idle(pipe_prefetch *pf)
{
    while (pf->pending) pthread_cond_wait(&pf->cv, &pf->mu);
}

void pipe_prefetch_free(pipe_prefetch *pf)
{
    if (!pf) return;
    pthread_mutex_lock(&pf->mu);
    wait_idle(pf);
    pf->quit = true;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    if (pf->started) pthread_join(pf->thread, NULL);
    pp_data_reader_free(pf->reader);
    pthread_cond_destroy(&pf->cv);
    pthread_mutex_destroy(&pf->mu);
    free(pf);
}

pp_status pipe_prefetch_get(pipe_prefetch *pf, int64_t pos, int count, int64_t next_pos,
                            int next_count, float **images, int32_t **labels, int *slot,
                            pp_error *err)
{
    const int use = pf->last ^ 1;
    pthread_mutex_lock(&pf->mu);
    wait_idle(pf);
    const bool hit = pf->done && pf->slot == use && pf->pos == pos && pf->count == count &&
                     pf->st == PP_OK;
    pf->done = false;
    pthread_mutex_unlock(&pf->mu);
    if (!hit)
        PP_TRY(pp_data_reader_read(pf->reader, pf->data, pos, count, pf->images[use],
                                   pf->labels[use], err));
    pf->last = use;
    *images = pf->images[use];
    *labels = pf->labels[use];
    *slot = use;
    if (next_count <= 0) return PP_OK;
    if (!pf->started) {
        if (pthread_create(&pf->thread, NULL, worker, pf) != 0) return PP_OK; /* reads later */
        pf->started = true;
    }
    pthread_mutex_lock(&pf->mu);
    pf->slot = use ^ 1;
    pf->pos = next_pos;
    pf->count = next_count;
    pf->pending = true;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    return PP_OK;
}

pp_status pipe_prefetch_read(pipe_prefetch *pf, pp_data *src, int64_t pos, int count,
                             float *images, int32_t *labels, pp_error *err)
{
    return pp_data_reader_read(pf->reader, src, pos, count, images, labels, err);
}
