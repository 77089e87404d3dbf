/*
 * prefetch.c - the next training batches are read while the current step
 * runs, into host buffer sets of their own (page-locked on CUDA), so that the
 * devices do not wait for the host to decode, transform or normalise the
 * data between steps; and every batch is read on several threads.
 *
 * Sets: `ahead` batches are read ahead (the plan's data.prefetch), so there
 * are ahead + hold sets: the caller's last `hold` (the step's own, and with
 * an upload the next step's too, being copied to the device while the step
 * runs) and one per batch ahead. A set is free again `hold` gets after it
 * was handed out (by then the step that read it has ended with its streams
 * synchronised). The queue holds the batches ahead in step order;
 * a batch that is not the one asked for (another position or count: after an
 * evaluation's jump, an epoch's short last batch) is dropped with those after
 * it and read again, so results never depend on prefetching.
 *
 * Threads: the prefetcher owns a data reader (runtime/io/reader.h) and one
 * worker thread that reads the queue's batches in order through it (the
 * worker is one of the reader's threads). A batch that was not read ahead is
 * read through it on the caller's thread, and so are evaluation batches
 * (pipe_prefetch_read). The reader spreads a batch's samples over its
 * threads and gives the bytes one thread would, so the thread count never
 * changes results; it reads one batch at a time. A process that runs no
 * first stage reads labels only (no decoding, no image sets).
 */
#include "pipeline/prefetch.h"

#include "runtime/io/reader.h"
#include "streams/stream.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

typedef struct job {
    pipe_window win;
    int set;
    job_state state;
    pp_status st;
    pp_error err;
} job;

struct pipe_prefetch {
    pp_data *data;
    pp_data_reader *reader;
    pp_device_ctx *img_dev, *lbl_dev;
    int sets;                  /* ahead + hold */
    int hold;                  /* sets the caller keeps: its last `hold` gets */
    float *images[PIPE_PREFETCH_MAX_AHEAD + 2];
    int32_t *labels[PIPE_PREFETCH_MAX_AHEAD + 2];
    int held[2];               /* the sets of the caller's last gets, newest first (-1: none) */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
    /* the queue (under mu): jobs[0 .. n_jobs) in step order */
    job jobs[PIPE_PREFETCH_MAX_AHEAD];
    int n_jobs;
};

static void *worker(void *arg)
{
    pipe_prefetch *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        job *j = NULL;
        for (int i = 0; i < pf->n_jobs && !j; i++)
            if (pf->jobs[i].state == JOB_QUEUED) j = &pf->jobs[i];
        if (pf->quit) break;
        if (!j) {
            pthread_cond_wait(&pf->cv, &pf->mu);
            continue;
        }
        j->state = JOB_RUNNING;
        const pipe_window w = j->win;
        const int set = j->set;
        pthread_mutex_unlock(&pf->mu);
        pp_error err;
        pp_status st = pp_data_reader_read(pf->reader, pf->data, w.pos, w.count,
                                           pf->images[set], pf->labels[set], &err);
        pthread_mutex_lock(&pf->mu);
        /* the queue may have moved (drops wait for running jobs, so j is ours) */
        for (int i = 0; i < pf->n_jobs; i++)
            if (pf->jobs[i].state == JOB_RUNNING) {
                pf->jobs[i].st = st;
                pf->jobs[i].err = err;
                pf->jobs[i].state = JOB_DONE;
            }
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

pp_status pipe_prefetch_new(pp_data *data, int ahead, int hold, int threads,
                            pp_device_ctx *img_dev, pp_device_ctx *lbl_dev, int batch,
                            pipe_prefetch **out, pp_error *err)
{
    *out = NULL;
    if (ahead < 1 || ahead > PIPE_PREFETCH_MAX_AHEAD)
        return pp_error_set(err, PP_ERR_INVALID, "prefetch: %d batches ahead (1 to %d)", ahead,
                            PIPE_PREFETCH_MAX_AHEAD);
    if (hold < 1 || hold > 2)
        return pp_error_set(err, PP_ERR_INVALID, "prefetch: %d sets held (1 or 2)", hold);
    if (threads <= 0) PP_TRY(pp_data_reader_threads_from_env(&threads, err));
    pipe_prefetch *pf = calloc(1, sizeof *pf);
    if (!pf) return pp_error_set(err, PP_ERR_OOM, "out of host memory (prefetch)");
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    pf->data = data;
    pf->img_dev = img_dev;
    pf->lbl_dev = lbl_dev;
    pf->sets = ahead + hold;
    pf->hold = hold;
    pf->held[0] = pf->held[1] = -1;
    int c, h, w;
    pp_data_shape(data, &c, &h, &w, NULL);
    const size_t floats = (size_t)batch * c * h * w; /* (token ids: int32, as large) */
    const size_t labels = (size_t)batch * (size_t)pp_data_targets_per_sample(data);
    pp_status s = pp_data_reader_new(threads, &pf->reader, err);
    for (int i = 0; s == PP_OK && i < pf->sets; i++) {
        if (img_dev)
            s = pp_device_host_alloc(img_dev, floats * sizeof(float), (void **)&pf->images[i],
                                     err);
        if (s == PP_OK)
            s = pp_device_host_alloc(lbl_dev, labels * sizeof(int32_t), (void **)&pf->labels[i],
                                     err);
    }
    if (s != PP_OK) {
        pipe_prefetch_free(pf);
        return s;
    }
    *out = pf;
    return PP_OK;
}

/* Drops jobs[from ..], waiting for a running one. Called with mu held. */
static void drop_from(pipe_prefetch *pf, int from)
{
    for (int i = from; i < pf->n_jobs; i++) /* not started: never will be */
        if (pf->jobs[i].state == JOB_QUEUED) pf->jobs[i].state = JOB_DONE;
    for (;;) {
        bool running = false;
        for (int i = from; i < pf->n_jobs; i++) running |= pf->jobs[i].state == JOB_RUNNING;
        if (!running) break;
        pthread_cond_wait(&pf->cv, &pf->mu);
    }
    if (pf->n_jobs > from) pf->n_jobs = from;
}

void pipe_prefetch_free(pipe_prefetch *pf)
{
    if (!pf) return;
    pthread_mutex_lock(&pf->mu);
    drop_from(pf, 0);
    pf->quit = true;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    if (pf->started) pthread_join(pf->thread, NULL);
    pp_data_reader_free(pf->reader);
    for (int i = 0; i < pf->sets; i++) {
        if (pf->img_dev) pp_device_host_free(pf->img_dev, pf->images[i]);
        pp_device_host_free(pf->lbl_dev, pf->labels[i]);
    }
    pthread_cond_destroy(&pf->cv);
    pthread_mutex_destroy(&pf->mu);
    free(pf);
}

int pipe_prefetch_sets(const pipe_prefetch *pf)
{
    return pf->sets;
}

int pipe_prefetch_ahead(const pipe_prefetch *pf)
{
    return pf->sets - pf->hold;
}

int pipe_prefetch_threads(const pipe_prefetch *pf)
{
    return pp_data_reader_threads(pf->reader);
}

static bool same(pipe_window a, pipe_window b)
{
    return a.pos == b.pos && a.count == b.count;
}

/* A set neither the caller (its last `hold` sets) nor a queued job uses.
 * Called with mu held. */
static int free_set(const pipe_prefetch *pf)
{
    for (int s = 0; s < pf->sets; s++) {
        bool used = false;
        for (int h = 0; h < pf->hold && !used; h++) used = pf->held[h] == s;
        for (int i = 0; i < pf->n_jobs && !used; i++) used = pf->jobs[i].set == s;
        if (!used) return s;
    }
    return -1; /* cannot happen: sets = ahead + hold */
}

pp_status pipe_prefetch_get(pipe_prefetch *pf, pipe_window want, const pipe_window *ahead,
                            int n_ahead, float **images, int32_t **labels, int *set,
                            double *wait_ms, pp_error *err)
{
    const int64_t t0 = pp_stream_clock_ns();
    pthread_mutex_lock(&pf->mu);
    if (pf->n_jobs > 0 && !same(pf->jobs[0].win, want)) drop_from(pf, 0);
    bool hit = false;
    int use;
    if (pf->n_jobs > 0) {
        while (pf->jobs[0].state != JOB_DONE) pthread_cond_wait(&pf->cv, &pf->mu);
        hit = pf->jobs[0].st == PP_OK;
        use = pf->jobs[0].set;
        memmove(&pf->jobs[0], &pf->jobs[1], (size_t)(pf->n_jobs - 1) * sizeof pf->jobs[0]);
        pf->n_jobs--;
    } else {
        pf->held[pf->hold - 1] = -1; /* the oldest held set is the caller's no more */
        use = free_set(pf);
    }
    pf->held[1] = pf->held[0];
    pf->held[0] = use;
    pthread_mutex_unlock(&pf->mu);
    pp_status s = PP_OK;
    if (!hit) /* read now (a failed read ahead is read again: its error, now) */
        s = pp_data_reader_read(pf->reader, pf->data, want.pos, want.count, pf->images[use],
                                pf->labels[use], err);
    if (wait_ms) *wait_ms = (double)(pp_stream_clock_ns() - t0) / 1e6;
    if (s != PP_OK) return s;
    *images = pf->images[use];
    *labels = pf->labels[use];
    *set = use;
    /* the batches ahead: keep the queue's that match, queue the rest */
    if (n_ahead > pf->sets - pf->hold) n_ahead = pf->sets - pf->hold;
    pthread_mutex_lock(&pf->mu);
    int keep = 0;
    while (keep < pf->n_jobs && keep < n_ahead && same(pf->jobs[keep].win, ahead[keep])) keep++;
    drop_from(pf, keep);
    for (int i = keep; i < n_ahead; i++) {
        if (ahead[i].count <= 0) break;
        pf->jobs[pf->n_jobs++] = (job){.win = ahead[i], .set = free_set(pf),
                                       .state = JOB_QUEUED};
    }
    if (pf->n_jobs > 0 && !pf->started) {
        pf->started = pthread_create(&pf->thread, NULL, worker, pf) == 0;
        if (!pf->started) pf->n_jobs = 0; /* no worker: every batch is read when asked for */
    }
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    return PP_OK;
}

pp_status pipe_prefetch_read(pipe_prefetch *pf, pp_data *src, int64_t pos, int count,
                             float *images, int32_t *labels, pp_error *err)
{
    return pp_data_reader_read(pf->reader, src, pos, count, pf->img_dev ? images : NULL, labels,
                               err);
}
