/*
 * test_data_read.c - a batch read on several threads is bit for bit the
 * batch one pp_data_read call gives: the data reader (runtime/io/reader.h)
 * with 1, 2, 3 and 7 threads against single reads, for synthetic, IDX and
 * gzip IDX sources and a text file's token windows, with and without shuffling, over batches that straddle
 * epochs, partial last batches and batches longer than an epoch; plain
 * pp_data_read calls racing on one source; errors; PP_READ_THREADS.
 * Samples are large enough that the reader really cuts batches into chunks
 * (it keeps small ones whole). Files are written into a fresh temporary
 * directory. Run under ThreadSanitizer by CI.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/data.h"
#include "runtime/io/reader.h"
#include "tests/check.h"

static char tmpdir[256];

/* The reads each source is checked on: (pos, count) in samples. */
typedef struct span {
    int64_t pos;
    int count;
} span;

/* Reads every span with one pp_data_read call and with readers of 1, 2, 3
 * and 7 threads, and compares the bytes. */
static void check_source(const char *what, const pp_data_config *cfg, const span *spans,
                         int n_spans)
{
    pp_error err;
    pp_data *d;
    CHECK_OK(pp_data_open(cfg, &d, &err), &err);
    if (!d) return;
    int c, h, w;
    pp_data_shape(d, &c, &h, &w, NULL);
    const size_t values = (size_t)c * h * w, targets = (size_t)pp_data_targets_per_sample(d);
    int max_count = 0;
    for (int i = 0; i < n_spans; i++)
        if (spans[i].count > max_count) max_count = spans[i].count;
    float *want_x = malloc(max_count * values * sizeof(float));
    float *got_x = malloc(max_count * values * sizeof(float));
    int32_t *want_y = malloc(max_count * targets * sizeof(int32_t));
    int32_t *got_y = malloc(max_count * targets * sizeof(int32_t));
    static const int thread_counts[] = {1, 2, 3, 7};
    for (int t = 0; t < 4; t++) {
        pp_data_reader *r;
        CHECK_OK(pp_data_reader_new(thread_counts[t], &r, &err), &err);
        if (!r) continue;
        CHECK(pp_data_reader_threads(r) == thread_counts[t]);
        for (int i = 0; i < n_spans; i++) {
            const int n = spans[i].count;
            CHECK_OK(pp_data_read(d, spans[i].pos, n, want_x, want_y, &err), &err);
            memset(got_x, 0xff, n * values * sizeof(float)); /* NaNs where nothing is written */
            memset(got_y, 0xff, n * targets * sizeof(int32_t));
            CHECK_OK(pp_data_reader_read(r, d, spans[i].pos, n, got_x, got_y, &err), &err);
            CHECK_MSG(memcmp(want_x, got_x, n * values * sizeof(float)) == 0 &&
                          memcmp(want_y, got_y, n * targets * sizeof(int32_t)) == 0,
                      "%s: %d threads, samples %lld + %d differ from one read", what,
                      thread_counts[t], (long long)spans[i].pos, n);
        }
        pp_data_reader_free(r);
    }
    free(want_x);
    free(got_x);
    free(want_y);
    free(got_y);
    pp_data_close(d);
}

/* Batches of `batch` over a few epochs of n samples (each epoch's last batch
 * partial when batch does not divide n, as pipelines with epochs read), then
 * a batch straddling two epochs and one longer than an epoch. */
static int epoch_spans(int64_t n, int batch, span *out, int max)
{
    int k = 0;
    for (int64_t e = 0; e < 3; e++)
        for (int64_t p = 0; p < n && k < max; p += batch)
            out[k++] = (span){e * n + p, (int)(n - p < batch ? n - p : batch)};
    if (k < max) out[k++] = (span){3 * n - batch / 2, batch};
    if (k < max) out[k++] = (span){5 * n + 1, (int)(2 * n + batch)};
    return k;
}

/* A text file as tokens: windows of 4097 bytes, read as 4096 inputs and
 * 4096 targets per sample, with and without shuffling. */
static void test_tokens(void)
{
    char path[320];
    snprintf(path, sizeof path, "%s/corpus.txt", tmpdir);
    const size_t n = 200000;
    uint8_t *text = malloc(n);
    for (size_t i = 0; i < n; i++) text[i] = (uint8_t)(32 + (i * 7919 + i / 13) % 95);
    check_write_file(path, text, n);
    free(text);
    pp_data_config cfg;
    pp_data_config_init(&cfg);
    cfg.format = PP_DATA_TEXT;
    cfg.classes = 256;
    cfg.block_size = 4096;
    snprintf(cfg.file, sizeof cfg.file, "%s", path);
    span spans[32];
    const int k = epoch_spans((int64_t)((n - 1) / 4096), 7, spans, 32);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        cfg.shuffle = shuffle;
        check_source(shuffle ? "text, shuffled windows" : "text", &cfg, spans, k);
    }
}

static void test_synthetic(void)
{
    static pp_data_config cfg;
    span spans[64];
    pp_data_config_init(&cfg);
    cfg.channels = 3;
    cfg.height = 61; /* H * W not a multiple of 8: hashes straddle channels */
    cfg.width = 67;
    cfg.classes = 13;
    cfg.samples = 100;
    cfg.seed = 5;
    cfg.n_mean = 3;
    cfg.n_std = 3;
    for (int i = 0; i < 3; i++) {
        cfg.mean[i] = 0.4f + 0.05f * (float)i;
        cfg.std[i] = 0.2f + 0.01f * (float)i;
    }
    int n = epoch_spans(cfg.samples, 48, spans, 64);
    check_source("synthetic", &cfg, spans, n);
    cfg.shuffle = true;
    check_source("synthetic, shuffled", &cfg, spans, n);
    /* an epoch of 7: one batch spans several epochs, more than the cached
     * permutations, so threads wait for one another's */
    cfg.samples = 7;
    n = epoch_spans(cfg.samples, 40, spans, 64);
    check_source("synthetic, shuffled, tiny epoch", &cfg, spans, n);
    /* the default epoch; 1 channel */
    cfg.samples = 0;
    cfg.channels = 1;
    cfg.n_mean = cfg.n_std = 1;
    check_source("synthetic, 50000 samples", &cfg, (span[]){{49990, 33}, {123456, 64}}, 2);
}

static void test_idx(void)
{
    static pp_data_config cfg;
    enum { N = 90, H = 96, W = 96 };
    static uint8_t img[N * H * W], lab[N];
    for (int i = 0; i < N; i++) {
        lab[i] = (uint8_t)(i % 10);
        for (int k = 0; k < H * W; k++) img[i * H * W + k] = (uint8_t)((i * 37 + k * 11) % 256);
    }
    char ip[512], lp[512], cmd[2200];
    snprintf(ip, sizeof ip, "%s/img.idx", tmpdir);
    snprintf(lp, sizeof lp, "%s/lab.idx", tmpdir);
    CHECK(check_write_idx(ip, 3, (uint32_t[]){N, H, W}, img, sizeof img) == 0);
    CHECK(check_write_idx(lp, 1, (uint32_t[]){N}, lab, sizeof lab) == 0);
    pp_data_config_init(&cfg);
    cfg.format = PP_DATA_IDX;
    cfg.classes = 0;
    cfg.n_mean = cfg.n_std = 1;
    cfg.mean[0] = 0.2860f;
    cfg.std[0] = 0.3530f;
    snprintf(cfg.images, sizeof cfg.images, "%s", ip);
    snprintf(cfg.labels, sizeof cfg.labels, "%s", lp);
    span spans[64];
    const int n = epoch_spans(N, 64, spans, 64);
    check_source("idx", &cfg, spans, n);
    cfg.shuffle = true;
    cfg.seed = 11;
    check_source("idx, shuffled", &cfg, spans, n);
    snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s.gz' && gzip -c '%s' > '%s.gz'", ip, ip, lp, lp);
    CHECK(system(cmd) == 0);
    snprintf(cfg.images, sizeof cfg.images, "%s.gz", ip);
    snprintf(cfg.labels, sizeof cfg.labels, "%s.gz", lp);
    check_source("gzip idx, shuffled", &cfg, spans, n);
}

/* Plain pp_data_read calls racing on one shuffled source, each thread
 * reading its own positions across epochs, against the same reads made
 * one at a time. */
typedef struct racer {
    pp_data *d;
    int64_t first;
    float *x;
    int32_t *y;
    pp_status st;
} racer;

enum { RACERS = 4, RACE_READS = 12, RACE_COUNT = 5 };

static void *race(void *arg)
{
    racer *rc = arg;
    pp_error err;
    rc->st = PP_OK;
    for (int i = 0; i < RACE_READS && rc->st == PP_OK; i++)
        rc->st = pp_data_read(rc->d, rc->first + i * 9, RACE_COUNT, rc->x + i * RACE_COUNT * 48,
                              rc->y + i * RACE_COUNT, &err);
    return NULL;
}

static void test_racing_reads(void)
{
    static pp_data_config cfg;
    pp_data_config_init(&cfg);
    cfg.channels = 3;
    cfg.height = 4;
    cfg.width = 4;
    cfg.samples = 20;
    cfg.shuffle = true;
    pp_error err;
    pp_data *d;
    CHECK_OK(pp_data_open(&cfg, &d, &err), &err);
    if (!d) return;
    static float x[RACERS][RACE_READS * RACE_COUNT * 48], want[RACE_READS * RACE_COUNT * 48];
    static int32_t y[RACERS][RACE_READS * RACE_COUNT], want_y[RACE_READS * RACE_COUNT];
    racer rc[RACERS];
    pthread_t th[RACERS];
    for (int t = 0; t < RACERS; t++) {
        rc[t] = (racer){.d = d, .first = 13 * t, .x = x[t], .y = y[t]};
        CHECK(pthread_create(&th[t], NULL, race, &rc[t]) == 0);
    }
    for (int t = 0; t < RACERS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < RACERS; t++) {
        CHECK(rc[t].st == PP_OK);
        racer one = {.d = d, .first = 13 * t, .x = want, .y = want_y};
        race(&one);
        CHECK_MSG(memcmp(want, x[t], sizeof want) == 0 && memcmp(want_y, y[t], sizeof want_y) == 0,
                  "racing reader %d read other samples than alone", t);
    }
    for (int64_t pos = 0; pos < 100; pos += 7) {
        int32_t label;
        CHECK_OK(pp_data_read(d, pos, 1, want, &label, &err), &err);
        CHECK(pp_data_sample_index(d, pos) >= 0 && pp_data_sample_index(d, pos) < 20);
    }
    pp_data_close(d);
}

static void test_errors_and_env(void)
{
    static pp_data_config cfg;
    pp_data_config_init(&cfg);
    cfg.height = cfg.width = 64;
    pp_error err;
    pp_data *d;
    pp_data_reader *r;
    CHECK_OK(pp_data_open(&cfg, &d, &err), &err);
    CHECK_OK(pp_data_reader_new(3, &r, &err), &err);
    static float x[32 * 3 * 64 * 64];
    int32_t y[32];
    CHECK(pp_data_reader_read(r, d, -5, 32, x, y, &err) == PP_ERR_INVALID &&
          strstr(err.msg, "bad position -5"));
    CHECK(pp_data_reader_read(r, d, 0, 0, x, y, &err) == PP_ERR_INVALID);
    CHECK(pp_data_reader_read(r, NULL, 0, 32, x, y, &err) == PP_ERR_INVALID);
    CHECK(pp_data_reader_read(r, d, 0, 32, x, NULL, &err) == PP_ERR_INVALID);
    int32_t only[32];
    CHECK_OK(pp_data_reader_read(r, d, 0, 32, NULL, only, &err), &err); /* labels only */
    CHECK_OK(pp_data_reader_read(r, d, 0, 32, x, y, &err), &err); /* still usable */
    CHECK(memcmp(only, y, sizeof y) == 0);
    pp_data_reader_free(r);
    pp_data_close(d);
    CHECK(pp_data_reader_new(0, &r, &err) == PP_ERR_INVALID && !r);
    CHECK(pp_data_reader_new(PP_DATA_READER_MAX_THREADS + 1, &r, &err) == PP_ERR_INVALID);

    int threads = 0;
    unsetenv("PP_READ_THREADS");
    CHECK_OK(pp_data_reader_threads_from_env(&threads, &err), &err);
    CHECK(threads >= 1 && threads <= PP_DATA_READER_DEFAULT_THREADS);
    setenv("PP_READ_THREADS", "5", 1);
    CHECK_OK(pp_data_reader_threads_from_env(&threads, &err), &err);
    CHECK(threads == 5);
    static const char *const bad[] = {"0", "-1", "65", "two", "3x"};
    for (int i = 0; i < 5; i++) {
        setenv("PP_READ_THREADS", bad[i], 1);
        CHECK_MSG(pp_data_reader_threads_from_env(&threads, &err) == PP_ERR_INPUT &&
                      strstr(err.msg, "PP_READ_THREADS"),
                  "PP_READ_THREADS=%s: %s", bad[i], err.msg);
    }
    unsetenv("PP_READ_THREADS");
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "test_data_read")) return 1;
    test_synthetic();
    test_tokens();
    test_idx();
    test_racing_reads();
    test_errors_and_env();
    check_rmtree(tmpdir);
    return check_summary("test_data_read");
}
