/*
 * fuzz_data.c - libFuzzer target for the data files a plan names
 * (runtime/io/data.h): the input's first byte picks the format, the rest
 * is the file(s): 0 an llm.c or nanoGPT token file, 1 text read as bytes, 2
 * a CIFAR-10 batch, 3 an IDX image file and an IDX label file (the two
 * bytes after the first say where the images end). Each is opened (blocks
 * of 8 tokens; IDX and CIFAR normalised, shuffled), and one that opens is
 * read: its first samples, a batch of a later step, and the last sample of
 * the second epoch. A failure must be PP_ERR_INPUT; one that opens has a
 * shape and a size, and its labels lie within its classes. Any violation
 * aborts. Built by tests/fuzz/run.sh data; corpus_main.c replays files
 * without libFuzzer (test fuzz_data).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/io/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_data: %s\n%s\n", what, detail ? detail : "");
    abort();
}

static char g_a[4096], g_b[4096];

static void cleanup(void)
{
    unlink(g_a);
    unlink(g_b);
}

static void put(const char *path, const uint8_t *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) fail("cannot write", path);
}

static void check(pp_status s, const pp_error *err, const char *what)
{
    if (s != PP_OK && s != PP_ERR_INPUT) fail(what, err->msg);
}

/* Reads count samples at pos (images as floats or token ids) and checks
 * the labels. */
static void read_at(pp_data *d, int64_t pos, int count)
{
    int c, h, w, classes;
    pp_data_shape(d, &c, &h, &w, &classes);
    const int targets = pp_data_targets_per_sample(d);
    const size_t per = (size_t)c * h * w;
    float *images = malloc((per ? per : 1) * (size_t)count * sizeof(float));
    int32_t *labels = malloc((size_t)targets * count * sizeof *labels);
    if (!images || !labels) fail("out of memory", NULL);
    pp_error err;
    pp_status s = pp_data_read(d, pos, count, images, labels, &err);
    check(s, &err, "read: unexpected status");
    if (s == PP_OK)
        for (int64_t i = 0; i < (int64_t)targets * count; i++)
            if (labels[i] < 0 || labels[i] >= classes) fail("a label outside the classes", NULL);
    free(images);
    free(labels);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_a[0]) {
        const char *tmp = getenv("TMPDIR");
        tmp = tmp && tmp[0] ? tmp : "/tmp";
        snprintf(g_a, sizeof g_a, "%s/fuzz-data-%d-a", tmp, (int)getpid());
        snprintf(g_b, sizeof g_b, "%s/fuzz-data-%d-b", tmp, (int)getpid());
        atexit(cleanup);
    }
    if (size < 1) return 0;
    pp_data_config cfg;
    pp_data_config_init(&cfg);
    cfg.shuffle = true;
    cfg.seed = 7;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    switch (data[0] % 4) {
    case 0:
    case 1:
        cfg.format = data[0] % 4 == 0 ? PP_DATA_TOKENS : PP_DATA_TEXT;
        cfg.block_size = 8;
        put(g_a, rest, n);
        snprintf(cfg.file, sizeof cfg.file, "%s", g_a);
        break;
    case 2:
        cfg.format = PP_DATA_CIFAR10;
        cfg.n_files = 1;
        put(g_a, rest, n);
        snprintf(cfg.files[0], sizeof cfg.files[0], "%s", g_a);
        cfg.n_mean = 3, cfg.mean[0] = 0.5f, cfg.mean[1] = 0.25f, cfg.mean[2] = 0.125f;
        break;
    default: {
        if (n < 2) return 0;
        size_t split = (size_t)rest[0] << 8 | rest[1];
        rest += 2, n -= 2;
        if (split > n) split = n;
        cfg.format = PP_DATA_IDX;
        put(g_a, rest, split);
        put(g_b, rest + split, n - split);
        snprintf(cfg.images, sizeof cfg.images, "%s", g_a);
        snprintf(cfg.labels, sizeof cfg.labels, "%s", g_b);
        cfg.n_std = 1, cfg.std[0] = 0.5f;
        break;
    }
    }
    pp_data *d = NULL;
    pp_error err;
    pp_status s = pp_data_open(&cfg, &d, &err);
    check(s, &err, "open: unexpected status");
    if (s != PP_OK) {
        if (d) fail("a failed open returned a source", err.msg);
        return 0;
    }
    int c, h, w, classes;
    pp_data_shape(d, &c, &h, &w, &classes);
    const int64_t samples = pp_data_size(d);
    if (c < 1 || h < 1 || w < 1 || classes < 1 || samples < 1)
        fail("a source without samples or shape", NULL);
    if ((int64_t)c * h * w <= (1 << 16)) {
        read_at(d, 0, samples < 3 ? (int)samples : 3);
        read_at(d, 2 * samples - 1, 1);
        const int batch = samples < 2 ? 1 : 2;
        float *images = malloc((size_t)c * h * w * batch * sizeof(float));
        int32_t *labels = malloc((size_t)pp_data_targets_per_sample(d) * batch * sizeof *labels);
        if (!images || !labels) fail("out of memory", NULL);
        check(pp_data_batch(d, 5, batch, images, labels, &err), &err, "batch: unexpected status");
        free(images);
        free(labels);
    }
    pp_data_close(d);
    return 0;
}
