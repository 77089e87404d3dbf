/*
 * test_path.c - the caches' folder helpers (runtime/core/path.h):
 * pp_make_dirs makes every missing folder; pp_cache_trim bounds a cache
 * folder by evicting its least recently modified files of one suffix down to
 * the limit, never the file kept or a file used within PP_CACHE_RECENT_S,
 * nor files of other names, folders or links; a temporary file of pp_atomic_open's is removed
 * once stale, left while fresh; nothing happens within the limit or in a missing folder.
 * pp_atomic_open replaces nothing but a regular file: a link to a file stays a link, a FIFO,
 * a link to nothing and a link to stdout's file are written in place.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/core/path.h"
#include "tests/check.h"

static char tmpdir[256];

/* dir/name of n bytes, last modified `age` seconds ago. */
static void put(const char *dir, const char *name, size_t n, long age)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    static char zeros[4096];
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot create %s", path);
    for (size_t done = 0; f && done < n;) {
        const size_t k = n - done < sizeof zeros ? n - done : sizeof zeros;
        done += fwrite(zeros, 1, k, f);
    }
    if (f) fclose(f);
    const struct timespec t[2] = {{time(NULL) - age, 0}, {time(NULL) - age, 0}};
    CHECK(utimensat(AT_FDCWD, path, t, 0) == 0);
}

static bool exists(const char *dir, const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void test_make_dirs(void)
{
    char deep[400];
    snprintf(deep, sizeof deep, "%s/a/b/c", tmpdir);
    pp_make_dirs(deep);
    struct stat sb;
    CHECK(stat(deep, &sb) == 0 && S_ISDIR(sb.st_mode));
    pp_make_dirs(deep); /* already there */
    CHECK(stat(deep, &sb) == 0 && S_ISDIR(sb.st_mode));
}

static void test_trim(void)
{
    char dir[400], keep[600];
    snprintf(dir, sizeof dir, "%s/cache", tmpdir);
    pp_make_dirs(dir);
    put(dir, "old.tokens", 3000, 4000);    /* least recently used */
    put(dir, "mid.tokens", 2000, 3000);
    put(dir, "new.tokens", 1000, 2000);
    put(dir, "kept.tokens", 5000, 5000);   /* the oldest, but kept */
    put(dir, "other.index", 9000, 9000);   /* another suffix: not counted */
    put(dir, "x.tokens.tmp-a1B2c3", 7000, 2 * PP_CACHE_TEMPORARY_S); /* a write that died */
    put(dir, "y.tokens.tmp-d4E5f6", 7000, 10); /* a write under way */
    char sub[500];
    snprintf(sub, sizeof sub, "%s/folder.tokens", dir);
    pp_make_dirs(sub); /* a folder of that suffix: left */
    char link[500], target[600];
    snprintf(link, sizeof link, "%s/link.tokens", dir);
    snprintf(target, sizeof target, "%s/other.index", dir);
    CHECK(symlink(target, link) == 0); /* a link: left, its target too */
    snprintf(keep, sizeof keep, "%s/kept.tokens", dir);

    /* 11000 bytes of .tokens: within 11000 only the dead temporary goes */
    pp_cache_trimmed t = pp_cache_trim(dir, ".tokens", 11000, keep);
    CHECK_MSG(t.files == 0 && t.bytes == 0 && t.temporaries == 1 && t.temporary_bytes == 7000,
              "within the limit: %d files, %lld bytes; %d temporaries, %lld bytes", t.files,
              (long long)t.bytes, t.temporaries, (long long)t.temporary_bytes);
    CHECK(!exists(dir, "x.tokens.tmp-a1B2c3") && exists(dir, "y.tokens.tmp-d4E5f6"));
    CHECK(exists(dir, "old.tokens") && exists(dir, "mid.tokens") && exists(dir, "new.tokens"));

    /* 9000: the least recently used goes first, and no more than needed */
    t = pp_cache_trim(dir, ".tokens", 9000, keep);
    CHECK_MSG(t.files == 1 && t.bytes == 3000, "to 9000: %d files, %lld bytes", t.files,
              (long long)t.bytes);
    CHECK(!exists(dir, "old.tokens") && exists(dir, "mid.tokens") && exists(dir, "new.tokens"));

    /* a file used since outlives one used before it */
    put(dir, "mid.tokens", 2000, 1000);
    t = pp_cache_trim(dir, ".tokens", 7500, keep);
    CHECK_MSG(t.files == 1 && t.bytes == 1000, "to 7500: %d files, %lld bytes", t.files,
              (long long)t.bytes);
    CHECK(exists(dir, "mid.tokens") && !exists(dir, "new.tokens"));

    /* a file used within PP_CACHE_RECENT_S (a run under way may read it) is
     * not evicted, whatever the limit */
    put(dir, "mid.tokens", 2000, PP_CACHE_RECENT_S / 2);
    t = pp_cache_trim(dir, ".tokens", 1, keep);
    CHECK_MSG(t.files == 0 && exists(dir, "mid.tokens"), "a recent file: %d files evicted",
              t.files);

    /* a limit below the kept file alone: everything else goes, it stays */
    put(dir, "mid.tokens", 2000, PP_CACHE_RECENT_S + 100);
    t = pp_cache_trim(dir, ".tokens", 1, keep);
    CHECK_MSG(t.files == 1 && t.bytes == 2000, "to 1: %d files, %lld bytes", t.files,
              (long long)t.bytes);
    CHECK(exists(dir, "kept.tokens") && !exists(dir, "mid.tokens"));
    CHECK(exists(dir, "other.index") && exists(dir, "folder.tokens") &&
          exists(dir, "link.tokens") && exists(dir, "y.tokens.tmp-d4E5f6"));

    /* without a file kept, the last goes too */
    t = pp_cache_trim(dir, ".tokens", 1, NULL);
    CHECK(t.files == 1 && t.bytes == 5000 && !exists(dir, "kept.tokens"));

    /* a folder that is not there: nothing */
    char missing[500];
    snprintf(missing, sizeof missing, "%s/missing", tmpdir);
    t = pp_cache_trim(missing, ".tokens", 1, NULL);
    CHECK(t.files == 0 && t.bytes == 0);
}

/* More files than the listing's first allocation, evicted in the order of
 * their use. */
static void test_many(void)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/many", tmpdir);
    pp_make_dirs(dir);
    enum { N = 40 };
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%02d.tokens", i);
        put(dir, name, 100, 1000 - i); /* f00 the least recently used */
    }
    const pp_cache_trimmed t = pp_cache_trim(dir, ".tokens", 25 * 100, NULL);
    CHECK_MSG(t.files == N - 25 && t.bytes == (N - 25) * 100, "%d files, %lld bytes", t.files,
              (long long)t.bytes);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%02d.tokens", i);
        CHECK_MSG(exists(dir, name) == (i >= N - 25), "%s %s", name,
                  exists(dir, name) ? "kept" : "evicted");
    }
}

/* The whole of path as a string (at most 255 bytes; "" when unreadable). */
static const char *slurp(const char *path)
{
    static char buf[256];
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* text into path by pp_atomic_open; returns whether it went in place (no
 * temporary) and checks that it succeeded. */
static bool atomic_write(const char *path, const char *text)
{
    pp_atomic_file af;
    pp_error err;
    if (pp_atomic_open(&af, path, &err) != PP_OK) {
        CHECK_MSG(false, "pp_atomic_open(%s): %s", path, err.msg);
        return false;
    }
    const bool in_place = af.tmp == NULL;
    fputs(text, af.f);
    CHECK_MSG(pp_atomic_commit(&af, &err) == PP_OK, "commit %s: %s", path, err.msg);
    return in_place;
}

static bool is(const char *path, mode_t type)
{
    struct stat st;
    return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == type;
}

/* pp_atomic_open never replaces anything at a path but a regular file: a
 * link to a file keeps its link (the file is replaced beside it); a FIFO, a
 * link to nothing and a link to the process's stdout are written in place. */
static void test_atomic_kinds(void)
{
    char dir[400], file[500], link[500], other[500], fifo[500];
    snprintf(dir, sizeof dir, "%s/atomic", tmpdir);
    pp_make_dirs(dir);
    /* a plain file: replaced through a temporary */
    snprintf(file, sizeof file, "%s/f.txt", dir);
    CHECK(!atomic_write(file, "one"));
    CHECK(strcmp(slurp(file), "one") == 0 && is(file, S_IFREG));
    /* a link to it: the link stays, the file takes the text */
    snprintf(link, sizeof link, "%s/latest.txt", dir);
    CHECK(symlink("f.txt", link) == 0);
    CHECK(!atomic_write(link, "two"));
    CHECK_MSG(is(link, S_IFLNK), "%s is no longer a link", link);
    CHECK_MSG(strcmp(slurp(file), "two") == 0, "%s holds '%s'", file, slurp(file));
    /* a link to nothing: written through it */
    snprintf(link, sizeof link, "%s/dangling.txt", dir);
    snprintf(other, sizeof other, "%s/new.txt", dir);
    CHECK(symlink("new.txt", link) == 0);
    CHECK(atomic_write(link, "three"));
    CHECK(is(link, S_IFLNK) && strcmp(slurp(other), "three") == 0);
    /* a FIFO with a reader: the reader gets the bytes, the FIFO stays */
    snprintf(fifo, sizeof fifo, "%s/pipe", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    int r = open(fifo, O_RDONLY | O_NONBLOCK);
    CHECK(r >= 0);
    CHECK(atomic_write(fifo, "four"));
    char got[16] = "";
    CHECK(r >= 0 && read(r, got, sizeof got - 1) == 4 && strcmp(got, "four") == 0);
    if (r >= 0) close(r);
    CHECK_MSG(is(fifo, S_IFIFO), "%s is no longer a FIFO", fifo);
    /* a link to the file stdout writes to (/dev/stdout redirected): in place */
    snprintf(other, sizeof other, "%s/stdout.txt", dir);
    snprintf(link, sizeof link, "%s/stdout", dir);
    fflush(stdout);
    const int saved = dup(STDOUT_FILENO), fd = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(saved >= 0 && fd >= 0 && dup2(fd, STDOUT_FILENO) == STDOUT_FILENO);
    CHECK(symlink(other, link) == 0);
    const bool in_place = atomic_write(link, "five");
    CHECK(dup2(saved, STDOUT_FILENO) == STDOUT_FILENO);
    close(saved);
    close(fd);
    CHECK_MSG(in_place, "a link to stdout's file was replaced through a temporary");
    CHECK(is(link, S_IFLNK) && strcmp(slurp(other), "five") == 0);
    /* a folder: refused at once; one made there while the file is written:
     * the rename fails, the temporary is removed */
    pp_atomic_file af;
    pp_error err;
    CHECK(pp_atomic_open(&af, dir, &err) == PP_ERR_IO && strstr(err.msg, "a folder, not a file"));
    snprintf(file, sizeof file, "%s/late", dir);
    if (pp_atomic_open(&af, file, &err) == PP_OK) {
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s", af.tmp);
        fputs("six", af.f);
        CHECK(mkdir(file, 0755) == 0);
        put(file, "x", 1, 0);
        CHECK(pp_atomic_commit(&af, &err) == PP_ERR_IO && strstr(err.msg, "cannot rename"));
        CHECK_MSG(access(tmp, F_OK) != 0, "%s left behind", tmp);
    }
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "test_path")) return 1;
    test_make_dirs();
    test_trim();
    test_many();
    test_atomic_kinds();
    check_rmtree(tmpdir);
    return check_summary("test_path");
}
