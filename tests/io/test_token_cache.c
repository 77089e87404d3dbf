/*
 * test_token_cache.c - the cache of texts tokenized (runtime/io/token_cache.h
 * through pp_tokens_open): a text is tokenized and cached once, then mapped
 * from the cache with the same ids; the cache file is an llm.c token file
 * (read as `format: tokens`, the same ids); a text edited in place (the
 * same size), a damaged cache (an id, the header's sums, a truncated file)
 * and another tokenizer (special tokens on) are tokenized again, each with
 * the ids of a run without the cache; a text under min_bytes, a vocabulary
 * beyond 16 bits and a cache folder that cannot be made are not cached and
 * still open; the folder from PP_TOKEN_CACHE, XDG_CACHE_HOME and HOME; the
 * cache's bound (a read marks its file used, a write evicts the least
 * recently used others).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/io/bpe.h"
#include "runtime/io/tokens.h"
#include "tests/check.h"
#include "tests/io/bpe_files.h"

static char tmpdir[256], vocab[320], merges[320], text[320], cache_dir[400];

enum { LEN = 60000, T = 8 };

/* Every token of t, in order (each window's inputs, then the last target). */
static int32_t *all_ids(const pp_tokens *t, int64_t *n)
{
    *n = pp_tokens_count(t);
    int32_t *v = malloc((size_t)*n * sizeof *v);
    const int64_t w = pp_tokens_windows(t);
    int32_t in[T], out[T];
    for (int64_t i = 0; v && i < w; i++) {
        pp_tokens_read(t, false, 0, 0, i, in, out);
        memcpy(v + i * T, in, sizeof in);
        v[i * T + T] = out[T - 1];
    }
    *n = w * T + 1; /* the tokens the windows cover */
    return v;
}

/* Opens the text through b with the cache (NULL: none); its ids into *ids. */
static pp_status open_text(pp_bpe *b, pp_tokens_cache *cache, int32_t **ids, int64_t *n)
{
    pp_tokens *t = NULL;
    pp_error err;
    const pp_status s = pp_tokens_open(text, true, b, 1 << 20, T, cache, &t, &err);
    CHECK_MSG(s == PP_OK, "open: %s", err.msg);
    *ids = t ? all_ids(t, n) : NULL;
    pp_tokens_close(t);
    return s;
}

static bool same(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    return a && b && na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

/* One open through the cache against the same open without it: the ids
 * equal, and from the cache (1), written (2) or neither (0). */
static void expect(pp_bpe *b, int64_t min_bytes, int how, const char *what)
{
    int32_t *want, *got;
    int64_t nw, ng;
    open_text(b, NULL, &want, &nw);
    pp_tokens_cache c = {.dir = cache_dir, .min_bytes = min_bytes};
    open_text(b, &c, &got, &ng);
    CHECK_MSG(same(want, nw, got, ng), "%s: the ids differ from a run without the cache", what);
    const int was = c.from_cache ? 1 : c.written ? 2 : 0;
    CHECK_MSG(was == how && (how == 0) == (c.path[0] == '\0') && c.seconds >= 0,
              "%s: %s (path '%s'), not %s", what,
              was == 1 ? "from the cache" : was == 2 ? "written" : "neither", c.path,
              how == 1 ? "from the cache" : how == 2 ? "written" : "neither");
    free(want);
    free(got);
}

/* The one cache file in cache_dir (or the first of several): its path;
 * how many there are. */
static int cache_files(char *path, size_t n)
{
    DIR *d = opendir(cache_dir);
    int count = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        if (len < 7 || strcmp(e->d_name + len - 7, ".tokens") != 0) continue;
        if (count++ == 0) snprintf(path, n, "%s/%s", cache_dir, e->d_name);
    }
    if (d) closedir(d);
    return count;
}

/* Byte `at` of the file at path turned into its complement. */
static void flip(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, at, SEEK_SET);
    const int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0xff, f);
    fclose(f);
}

static void test_cache(void)
{
    pp_bpe *b = NULL;
    pp_error err;
    CHECK_OK(pp_bpe_open(vocab, merges, &b, &err), &err);
    if (!b) return;
    pp_bpe_set_threads(b, 3, 1000);
    char *body = malloc(LEN);
    bpe_test_mixed_text(body, LEN, 5);
    check_write_file(text, body, LEN);

    expect(b, LEN + 1, 0, "a text under min_bytes");
    char file[512];
    CHECK(cache_files(file, sizeof file) == 0);
    expect(b, LEN, 2, "the first open");
    expect(b, 0, 1, "the second open");
    CHECK(cache_files(file, sizeof file) == 1);

    /* the cache file read as an llm.c token file: the same ids */
    pp_tokens *t = NULL, *u = NULL;
    CHECK_OK(pp_tokens_open(file, false, NULL, 1 << 20, T, NULL, &t, &err), &err);
    CHECK_OK(pp_tokens_open(text, true, b, 1 << 20, T, NULL, &u, &err), &err);
    if (t && u) {
        int64_t nt, nu;
        int32_t *a = all_ids(t, &nt), *c = all_ids(u, &nu);
        CHECK_MSG(same(a, nt, c, nu), "the cache file as format: tokens gives other ids");
        free(a);
        free(c);
    }
    pp_tokens_close(t);
    pp_tokens_close(u);

    /* the text edited in place, the same size: tokenized again, the file replaced */
    body[LEN / 2] = body[LEN / 2] == 'q' ? 'z' : 'q';
    check_write_file(text, body, LEN);
    expect(b, 0, 2, "an edited text");
    expect(b, 0, 1, "the edited text again");
    CHECK(cache_files(file, sizeof file) == 1);

    /* damage: an id, each of the header's sums and sizes, the tag, a cut */
    const long at[] = {1024 + 2 * 100, 4 * 5, 4 * 7, 4 * 9, 4 * 11, 4 * 3, 4 * 2};
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
        flip(file, at[k]);
        char what[64];
        snprintf(what, sizeof what, "byte %ld of the cache file changed", at[k]);
        expect(b, 0, 2, what);
    }
    if (truncate(file, 1024 + 10) == 0) expect(b, 0, 2, "a cut cache file");
    if (truncate(file, 100) == 0) expect(b, 0, 2, "a cache file cut in its header");
    expect(b, 0, 1, "the rewritten cache");

    /* another tokenizer: its own file */
    CHECK(pp_bpe_use_special(b) == 1);
    expect(b, 0, 2, "special tokens on");
    expect(b, 0, 1, "special tokens on, again");
    CHECK(cache_files(file, sizeof file) == 2);
    pp_bpe_close(b);

    /* a cache folder that cannot be made (below a regular file): not cached, opened */
    CHECK_OK(pp_bpe_open(vocab, merges, &b, &err), &err);
    char saved[400];
    snprintf(saved, sizeof saved, "%s", cache_dir);
    snprintf(cache_dir, sizeof cache_dir, "%s/sub", text);
    if (b) expect(b, 0, 0, "a cache folder below a file");
    snprintf(cache_dir, sizeof cache_dir, "%s", saved);
    pp_bpe_close(b);
    free(body);
}

/* An open of the text through b with the cache bounded to max_bytes (0:
 * no bound): what it did. */
static pp_tokens_cache open_cached(pp_bpe *b, int64_t max_bytes)
{
    pp_tokens_cache c = {.dir = cache_dir, .min_bytes = 0, .max_bytes = max_bytes};
    int32_t *ids = NULL;
    int64_t n;
    open_text(b, &c, &ids, &n);
    free(ids);
    return c;
}

static time_t mtime_of(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_mtim.tv_sec : -1;
}

static void make_older(const char *path, long seconds)
{
    const struct timespec t[2] = {{time(NULL) - seconds, 0}, {time(NULL) - seconds, 0}};
    CHECK(utimensat(AT_FDCWD, path, t, 0) == 0);
}

/* The cache's bound: a read marks its file used; a write evicts the least
 * recently used files down to the bound, never its own. */
static void test_evict(void)
{
    pp_bpe *plain = NULL, *special = NULL;
    pp_error err;
    CHECK_OK(pp_bpe_open(vocab, merges, &plain, &err), &err);
    CHECK_OK(pp_bpe_open(vocab, merges, &special, &err), &err);
    if (!plain || !special || pp_bpe_use_special(special) != 1) goto done;
    pp_tokens_cache a = open_cached(plain, 0), s = open_cached(special, 0);
    CHECK_MSG(a.from_cache && s.from_cache && strcmp(a.path, s.path) != 0,
              "test_cache's two files: %s, %s", a.path, s.path);
    make_older(a.path, 1000);
    make_older(s.path, 2000);
    a = open_cached(plain, 0);
    CHECK_MSG(a.from_cache && mtime_of(a.path) > time(NULL) - 100,
              "a read marks its file used (%lld s ago)", (long long)(time(NULL) -
                                                                    mtime_of(a.path)));
    CHECK(mtime_of(s.path) <= time(NULL) - 2000);

    struct stat ss;
    CHECK(stat(s.path, &ss) == 0);
    flip(text, 100); /* tokenized again: a write, with a bound below its own file */
    a = open_cached(plain, 1);
    CHECK_MSG(a.written && a.evicted == 1 && a.evicted_bytes == ss.st_size,
              "the write evicted %d files, %lld bytes (want 1, %lld)", a.evicted,
              (long long)a.evicted_bytes, (long long)ss.st_size);
    CHECK(access(s.path, F_OK) != 0 && access(a.path, F_OK) == 0);
    char file[512];
    CHECK(cache_files(file, sizeof file) == 1);

    s = open_cached(special, 0); /* written again; no bound, nothing evicted */
    CHECK(s.written && s.evicted == 0 && s.evicted_bytes == 0);
    CHECK(cache_files(file, sizeof file) == 2);
    s = open_cached(special, INT64_MAX / 2); /* read: never evicts */
    CHECK(s.from_cache && s.evicted == 0);
done:
    pp_bpe_close(plain);
    pp_bpe_close(special);
}

/* A vocabulary with an id beyond 16 bits is not cached. */
static void test_wide(void)
{
    char wide[320];
    snprintf(wide, sizeof wide, "%s/wide.json", tmpdir);
    bpe_test_write_bytes_vocab(wide, "<|w|>", 70000);
    char empty[320];
    snprintf(empty, sizeof empty, "%s/empty.txt", tmpdir);
    check_write_file(empty, "", 0);
    pp_bpe *b = NULL;
    pp_error err;
    CHECK_OK(pp_bpe_open(wide, empty, &b, &err), &err);
    if (b) expect(b, 0, 0, "a vocabulary beyond 16 bits");
    pp_bpe_close(b);
}

static void test_dir(void)
{
    char dir[4096];
    setenv("PP_TOKEN_CACHE", "off", 1);
    CHECK(!pp_tokens_cache_dir(dir, sizeof dir));
    setenv("PP_TOKEN_CACHE", "/some/where", 1);
    CHECK(pp_tokens_cache_dir(dir, sizeof dir) && strcmp(dir, "/some/where") == 0);
    unsetenv("PP_TOKEN_CACHE");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    CHECK(pp_tokens_cache_dir(dir, sizeof dir) && strcmp(dir, "/xdg/pipeline-run/tokens") == 0);
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    CHECK(pp_tokens_cache_dir(dir, sizeof dir) &&
          strcmp(dir, "/home/u/.cache/pipeline-run/tokens") == 0);
    unsetenv("HOME");
    CHECK(!pp_tokens_cache_dir(dir, sizeof dir));
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "test_token_cache")) return 1;
    snprintf(vocab, sizeof vocab, "%s/vocab.json", tmpdir);
    snprintf(merges, sizeof merges, "%s/merges.txt", tmpdir);
    snprintf(text, sizeof text, "%s/corpus.txt", tmpdir);
    snprintf(cache_dir, sizeof cache_dir, "%s/cache/tokens", tmpdir); /* made when written */
    bpe_test_write_files(vocab, merges, 0);
    test_cache();
    test_evict();
    test_wide();
    test_dir();
    check_rmtree(tmpdir);
    return check_summary("test_token_cache");
}
