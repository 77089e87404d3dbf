/*
 * fuzz_index.c - libFuzzer target for the image index's cache files
 * (runtime/io/image_index.h): a file of the cache folder is read back
 * whatever it holds (a damaged disk, another version, a file written by
 * hand), so its reader must refuse anything that is not an index it wrote.
 * The input is the file's body after its root: the harness puts the tag,
 * the checksum and the real path of a small folder (classes a and b, one
 * image each) in front, so that inputs reach the body's parse instead of
 * stopping at the checksum, writes it as that folder's cache file, and
 * opens the folder. The open must succeed (a cache file it refuses is
 * scanned past); from the cache, every sample's label lies within the
 * classes and every name is there; from a scan, the index is the folder's
 * own. Any violation aborts. Built by tests/fuzz/run.sh index; corpus_main.c
 * replays files without libFuzzer (test fuzz_index).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/checksum.h"
#include "runtime/io/image_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The cache file's tag, as image_index.c writes it. */
#define INDEX_TAG "PPIMGIX1"

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_index: %s\n%s\n", what, detail ? detail : "");
    abort();
}

static char g_top[64] = "/tmp/fuzz_index-XXXXXX", g_root[128], g_cache[128];
static char g_file[4096], *g_real;

static void put(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) fail("cannot write", path);
}

static void cleanup(void)
{
    static const char *const rel[] = {"root/a/1.jpg", "root/b/1.jpg", "root/a", "root/b",
                                      "root"};
    char p[256];
    unlink(g_file);
    rmdir(g_cache);
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_top, rel[i]);
        remove(p);
    }
    rmdir(g_top);
    free(g_real);
}

/* The folder, and the name of its cache file (from a first open's write). */
static void setup(void)
{
    if (!mkdtemp(g_top)) fail("mkdtemp", g_top);
    atexit(cleanup);
    snprintf(g_root, sizeof g_root, "%s/root", g_top);
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_top);
    char p[256];
    mkdir(g_root, 0755);
    for (int c = 0; c < 2; c++) {
        snprintf(p, sizeof p, "%s/%c", g_root, 'a' + c);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/%c/1.jpg", g_root, 'a' + c);
        put(p, "x", 1);
    }
    g_real = realpath(g_root, NULL);
    if (!g_real) fail("realpath", g_root);
    const pp_image_index_cache cache = {.dir = g_cache};
    pp_image_index *ix;
    pp_image_index_note note;
    pp_error err;
    if (pp_image_index_open(g_root, &cache, &ix, &note, &err) != PP_OK) fail("setup", err.msg);
    pp_image_index_free(ix);
    if (!note.cache_written) fail("setup: no cache file written", g_cache);
    snprintf(g_file, sizeof g_file, "%s", note.cache_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_real) setup();
    const uint32_t len = (uint32_t)strlen(g_real);
    const size_t head = 16 + 4 + len, n = head + size;
    uint8_t *file = malloc(n);
    if (!file) fail("out of memory", NULL);
    memcpy(file, INDEX_TAG, 8);
    memcpy(file + 16, &len, 4);
    memcpy(file + 20, g_real, len);
    if (size) memcpy(file + head, data, size);
    const uint64_t sum = pp_cksum_data(file + 16, n - 16);
    memcpy(file + 8, &sum, 8);
    put(g_file, file, n);
    free(file);

    /* min_files: no scan writes over the input */
    const pp_image_index_cache cache = {.dir = g_cache, .min_files = INT64_MAX};
    pp_image_index *ix = NULL;
    pp_image_index_note note;
    pp_error err;
    if (pp_image_index_open(g_root, &cache, &ix, &note, &err) != PP_OK)
        fail("the folder did not open", err.msg);
    const int classes = pp_image_index_classes(ix);
    const int64_t samples = pp_image_index_size(ix);
    if (classes < 1 || samples < 1) fail("an index without classes or samples", NULL);
    if (!note.from_cache &&
        (classes != 2 || samples != 2 || strcmp(pp_image_index_relpath(ix, 1), "b/1.jpg") != 0))
        fail("a scan that is not the folder's", NULL);
    for (int c = 0; c < classes; c++)
        if (!pp_image_index_class(ix, c)) fail("a class without a name", NULL);
    char path[8192];
    for (int64_t i = 0; i < samples; i++) {
        const int label = pp_image_index_label(ix, i);
        if (label < 0 || label >= classes) fail("a label beyond the classes", NULL);
        if (!pp_image_index_relpath(ix, i) || !pp_image_index_path(ix, i, path, sizeof path))
            fail("a sample without a name", NULL);
    }
    pp_image_index_free(ix);
    return 0;
}
