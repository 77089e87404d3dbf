/*
 * fuzz_algo.c - libFuzzer target for the convolution algorithm cache's
 * file (PP_CUDNN_CACHE, runtime/cuda/algo_cache.h: versions 1, 2 and 3).
 * The input is the file. A cache reads it at its first lookup; then:
 *   - a file that is not a cache file (foreign) is never replaced: after an
 *     insert its bytes are the input's;
 *   - otherwise a new choice (inserted, or updated where the input holds its
 *     key) writes the file again, and what was written reads back (version
 *     3) with no bad line, every entry read from the input present with its
 *     choice (the times to the six digits written), and the new one; an
 *     update of the first entry to a graph choice reads back as that choice.
 * Any violation aborts. Built by tests/fuzz/run.sh algo; corpus_main.c
 * replays files without libFuzzer (test fuzz_algos).
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp (check_mkdtemp) */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cuda/algo_cache.h"
#define PP_CHECK_SHARED /* its scratch directory only: no checks counted here */
#include "tests/check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, int a, int b)
{
    fprintf(stderr, "fuzz_algo: %s (%d, %d)\n", what, a, b);
    abort();
}

/* A folder of this process's own for the file and the atomic writer's
 * temporary beside it, removed at exit. */
static char g_dir[448], g_path[512];

static void remove_files(void)
{
    unlink(g_path);
    rmdir(g_dir);
}

static const char *file_path(void)
{
    if (!g_path[0]) {
        if (!check_mkdtemp(g_dir, sizeof g_dir, "pp-fuzz-algo"))
            fail("cannot make a temporary folder", 0, 0);
        snprintf(g_path, sizeof g_path, "%s/algos.txt", g_dir);
        atexit(remove_files);
    }
    return g_path;
}

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        fail("cannot write the input's file", (int)size, 0);
}

/* The file's bytes equal data's. */
static bool file_is(const char *path, const uint8_t *data, size_t size)
{
    size_t n;
    unsigned char *text = check_read_file(path, &n);
    const bool same = text && n == size && (size == 0 || memcmp(text, data, size) == 0);
    free(text);
    return same;
}

/* Equal but for the times' rounding to the six digits the file keeps. */
static bool same_choice(const pp_algo_choice *a, const pp_algo_choice *b)
{
    const double tol = 1e-5;
    return a->algo == b->algo && a->math_type == b->math_type && a->over == b->over &&
           a->over_mb == b->over_mb && a->api == b->api &&
           fabs((double)a->ms - b->ms) <= tol * fabs((double)a->ms) &&
           fabs((double)a->graph_ms - b->graph_ms) <= tol * fabs((double)a->graph_ms);
}

/* A key no committed seed holds: a GPU, a cuDNN and a geometry of its own. */
static void new_key(pp_algo_key *k)
{
    pp_conv2d_desc d = {.n = 3, .c = 5, .h = 7, .w = 11, .k = 13, .r = 3, .s = 1,
                        .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 0};
    pp_algo_key_make(k, "fuzz target's GPU", 90100, PP_MATH_TF32, 77, PP_ALGO_BWD_FILTER, &d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = file_path();
    write_file(path, data, size);
    pp_algo_cache a, b;
    pp_error err;
    if (pp_algo_cache_init(&a, path, &err) != PP_OK) fail("init", 0, 0);
    pp_algo_key key;
    new_key(&key);
    pp_algo_choice got;
    const bool had = pp_algo_cache_find(&a, &key, &got); /* reads the file */
    const pp_algo_stats read = pp_algo_cache_stats(&a);
    if (read.file_entries != a.n) fail("entries read and held differ", read.file_entries, a.n);
    /* a new choice written: inserted, or (the input holds the key) updated */
    pp_algo_choice fresh = {5, 1, 0.125f, 2, 600, PP_ALGO_API_LEGACY, 0.0f};
    if (had)
        pp_algo_cache_update(&a, &key, &fresh);
    else
        pp_algo_cache_insert(&a, &key, &fresh);
    const pp_algo_stats after = pp_algo_cache_stats(&a);
    if (read.foreign) {
        if (!file_is(path, data, size)) fail("a foreign file was replaced", (int)size, 0);
        pp_algo_cache_destroy(&a);
        return 0;
    }
    if (after.inserted + after.updated != 1 || after.inserted != !had)
        fail("the new choice was not stored", after.inserted, after.updated);
    if (after.saves != 1 || after.save_failures != 0)
        fail("the new choice was not saved", after.saves, after.save_failures);

    /* what was written reads back: every entry, no bad line */
    if (pp_algo_cache_init(&b, path, &err) != PP_OK) fail("init", 1, 0);
    (void)pp_algo_cache_find(&b, &key, &got);
    pp_algo_stats back = pp_algo_cache_stats(&b);
    if (back.foreign || back.bad_lines != 0 || back.file_entries != a.n)
        fail("the file written does not read back", back.bad_lines, back.file_entries - a.n);
    pp_algo_key first, k;
    pp_algo_choice up, c;
    memset(&first, 0, sizeof first);
    memset(&up, 0, sizeof up);
    for (int i = 0; i < a.n; i++) {
        if (!pp_algo_cache_entry(&a, i, &k, &c)) fail("an entry held is not listed", i, a.n);
        if (!pp_algo_cache_find(&b, &k, &got)) fail("an entry is missing after writing", i, a.n);
        if (!same_choice(&got, &c)) fail("an entry changed in writing", i, a.n);
        if (i == 0) first = k, up = c;
    }
    if (pp_algo_cache_entry(&a, a.n, &k, &c)) fail("an entry past the end is listed", a.n, 0);

    /* an update of the first entry to a graph choice is what reads back */
    up.api = PP_ALGO_API_GRAPH;
    up.graph_ms = 0.75f;
    pp_algo_cache_update(&b, &first, &up);
    back = pp_algo_cache_stats(&b);
    if (back.updated != 1 || back.saves != 1) fail("the update did not save", back.updated,
                                                   back.saves);
    pp_algo_cache_destroy(&b);
    if (pp_algo_cache_init(&b, path, &err) != PP_OK) fail("init", 2, 0);
    if (!pp_algo_cache_find(&b, &first, &got) || !same_choice(&got, &up))
        fail("the updated entry does not read back", got.api, a.n);
    back = pp_algo_cache_stats(&b);
    if (back.bad_lines != 0 || back.file_entries != a.n)
        fail("the updated file does not read back", back.bad_lines, back.file_entries - a.n);
    pp_algo_cache_destroy(&b);
    pp_algo_cache_destroy(&a);
    return 0;
}
