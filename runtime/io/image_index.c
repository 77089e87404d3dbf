/*
 * image_index.c - an image folder's classes and samples, torchvision's
 * order, and the index cache (see image_index.h).
 *
 * A scan, per class: (1) walk the class folder depth-first, keeping every
 * folder's path (relative to the root) and modification time and the names
 * of its other entries in one string pool; (2) sort the folders by path;
 * (3) per folder, sort its names and keep those with an image extension as
 * samples. Strings live in one growing pool addressed by offsets, so a
 * million samples take a few allocations.
 */
#define _GNU_SOURCE
#include "runtime/io/image_index.h"

#include "runtime/core/clock.h"
#include "runtime/core/path.h"
#include "runtime/io/checksum.h"
#include "runtime/io/idx.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CACHE_MAGIC "PPIMGIX1"
#define MAX_SAMPLES 0x7fffffffLL
#define PATH_BUF 8192 /* a folder's path, root included */

typedef struct pool {
    char *s;
    size_t n, cap;
} pool;

typedef struct dir_rec {
    size_t path;          /* pool offset of the relative path ("" for the root) */
    int64_t sec, nsec;    /* modification time */
    size_t first, count;  /* its entry names: names[first .. first + count) */
} dir_rec;

struct pp_image_index {
    char *root;           /* real path */
    pool str;
    int n_classes;
    size_t *class_name;   /* pool offsets */
    int64_t n;
    size_t *sample_path;  /* pool offsets of relative paths */
    int32_t *label;
    /* folders of the walk, for the cache's check (paths in str) */
    int64_t n_dirs;
    dir_rec *dirs;
    size_t cap_samples, cap_dirs;
};

/* ---- growing arrays ---------------------------------------------------------------- */

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* Appends len bytes of s and a NUL; *off gets its offset. */
static bool pool_add(pool *p, const char *s, size_t len, size_t *off)
{
    if (!grow((void **)&p->s, &p->cap, p->n + len + 1, 1)) return false;
    memcpy(p->s + p->n, s, len);
    p->s[p->n + len] = '\0';
    *off = p->n;
    p->n += len + 1;
    return true;
}

bool pp_image_index_is_image_name(const char *name)
{
    static const char *const exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                       ".pgm", ".tif",  ".tiff", ".webp"};
    const size_t n = strlen(name);
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        const size_t k = strlen(exts[i]);
        if (n >= k && strcasecmp(name + n - k, exts[i]) == 0) return true;
    }
    return false;
}

/* ---- the scan ---------------------------------------------------------------------- */

typedef struct scan {
    const char *root;
    pool names;           /* entry names of the folders walked (this class) */
    size_t *name_off;
    size_t n_names, cap_names;
    dir_rec *dirs;        /* this class's folders */
    size_t n_dirs, cap_dirs;
    struct stat *seen;    /* the folders being walked: the current one and its
                           * ancestors in the class (st_dev, st_ino) */
    size_t n_seen, cap_seen;
    pp_error *err;
    bool oom;
} scan;

static pp_status oom(scan *s)
{
    s->oom = true;
    return pp_error_set(s->err, PP_ERR_OOM, "%s: out of host memory indexing", s->root);
}

/* Whether the folder sb is one of those being walked (it is its own
 * ancestor: a loop of links). The same folder reached twice by paths that
 * are not a loop (two links to it) is walked twice, as os.walk does. */
static bool is_ancestor(const scan *s, const struct stat *sb)
{
    for (size_t i = 0; i < s->n_seen; i++)
        if (s->seen[i].st_dev == sb->st_dev && s->seen[i].st_ino == sb->st_ino) return true;
    return false;
}

static pp_status walk_folder(scan *s, pool *into, size_t rel_off, const char *full,
                             const struct stat *sb);

/* Walks the folder at relative path rel (pool `into`'s string at rel_off). */
static pp_status walk(scan *s, pool *into, size_t rel_off)
{
    char full[PATH_BUF];
    snprintf(full, sizeof full, "%s/%s", s->root, into->s + rel_off);
    struct stat sb;
    if (stat(full, &sb) != 0)
        return pp_error_set(s->err, PP_ERR_INPUT, "%s: cannot read folder '%s': %s", s->root,
                            into->s + rel_off, strerror(errno));
    if (is_ancestor(s, &sb)) return PP_OK; /* a loop of links */
    if (!grow((void **)&s->seen, &s->cap_seen, s->n_seen + 1, sizeof *s->seen)) return oom(s);
    s->seen[s->n_seen++] = sb;
    pp_status st = walk_folder(s, into, rel_off, full, &sb);
    s->n_seen--;
    return st;
}

/* Lists the folder full (relative path at rel_off in `into`, stat sb), then
 * walks its subfolders. */
static pp_status walk_folder(scan *s, pool *into, size_t rel_off, const char *full,
                             const struct stat *sb)
{
    DIR *d = opendir(full);
    if (!d)
        return pp_error_set(s->err, PP_ERR_INPUT, "%s: cannot read folder '%s': %s", s->root,
                            into->s + rel_off, strerror(errno));
    if (!grow((void **)&s->dirs, &s->cap_dirs, s->n_dirs + 1, sizeof *s->dirs)) {
        closedir(d);
        return oom(s);
    }
    const size_t me = s->n_dirs++;
    s->dirs[me] = (dir_rec){.path = rel_off, .sec = sb->st_mtim.tv_sec,
                            .nsec = sb->st_mtim.tv_nsec, .first = s->n_names};
    /* the subfolders are walked after the listing (their names go to `into`) */
    size_t *subs = NULL, n_subs = 0, cap_subs = 0;
    pp_status st = PP_OK;
    struct dirent *e;
    const size_t rel_len = strlen(into->s + rel_off);
    while (st == PP_OK && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        bool is_dir = e->d_type == DT_DIR;
        if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
            char p[PATH_BUF + sizeof e->d_name + 1];
            snprintf(p, sizeof p, "%s/%s", full, e->d_name);
            struct stat eb;
            is_dir = stat(p, &eb) == 0 && S_ISDIR(eb.st_mode);
        }
        const size_t nl = strlen(e->d_name);
        if (is_dir) {
            char rel[PATH_BUF];
            int k = snprintf(rel, sizeof rel, "%s%s%s", into->s + rel_off, rel_len ? "/" : "",
                             e->d_name);
            size_t off;
            if (k < 0 || (size_t)k >= sizeof rel) {
                st = pp_error_set(s->err, PP_ERR_INPUT, "%s: path too long under '%s'", s->root,
                                  into->s + rel_off);
            } else if (!grow((void **)&subs, &cap_subs, n_subs + 1, sizeof *subs) ||
                       !pool_add(into, rel, (size_t)k, &off)) {
                st = oom(s);
            } else {
                subs[n_subs++] = off;
            }
        } else {
            size_t off;
            if (!grow((void **)&s->name_off, &s->cap_names, s->n_names + 1, sizeof *s->name_off) ||
                !pool_add(&s->names, e->d_name, nl, &off))
                st = oom(s);
            else
                s->name_off[s->n_names++] = off;
        }
    }
    closedir(d);
    s->dirs[me].count = s->n_names - s->dirs[me].first;
    for (size_t i = 0; st == PP_OK && i < n_subs; i++) st = walk(s, into, subs[i]);
    free(subs);
    return st;
}

static int by_string(const void *a, const void *b, void *p)
{
    const char *s = ((const pool *)p)->s;
    return strcmp(s + *(const size_t *)a, s + *(const size_t *)b);
}

static int by_dir_path(const void *a, const void *b, void *p)
{
    const char *s = ((const pool *)p)->s;
    return strcmp(s + ((const dir_rec *)a)->path, s + ((const dir_rec *)b)->path);
}

/* Adds class c's samples (its folder: the pool string at rel_off) to ix. */
static pp_status scan_class(pp_image_index *ix, scan *s, int c, size_t rel_off)
{
    s->n_names = s->n_dirs = s->n_seen = 0;
    s->names.n = 0;
    PP_TRY(walk(s, &ix->str, rel_off));
    qsort_r(s->dirs, s->n_dirs, sizeof *s->dirs, by_dir_path, &ix->str);
    const int64_t before = ix->n;
    for (size_t d = 0; d < s->n_dirs; d++) {
        const dir_rec *dr = &s->dirs[d];
        qsort_r(s->name_off + dr->first, dr->count, sizeof *s->name_off, by_string, &s->names);
        for (size_t k = 0; k < dr->count; k++) {
            const char *name = s->names.s + s->name_off[dr->first + k];
            if (!pp_image_index_is_image_name(name)) continue;
            if (ix->n >= MAX_SAMPLES)
                return pp_error_set(s->err, PP_ERR_INPUT, "%s: more than %lld images", s->root,
                                    MAX_SAMPLES);
            char rel[PATH_BUF];
            int len = snprintf(rel, sizeof rel, "%s/%s", ix->str.s + dr->path, name);
            if (len < 0 || (size_t)len >= sizeof rel)
                return pp_error_set(s->err, PP_ERR_INPUT, "%s: path too long: %s/%s", s->root,
                                    ix->str.s + dr->path, name);
            const size_t need = (size_t)ix->n + 1;
            if (need > ix->cap_samples) {
                size_t c1 = ix->cap_samples, c2 = ix->cap_samples;
                if (!grow((void **)&ix->sample_path, &c1, need, sizeof *ix->sample_path) ||
                    !grow((void **)&ix->label, &c2, need, sizeof *ix->label))
                    return oom(s);
                ix->cap_samples = c1;
            }
            if (!pool_add(&ix->str, rel, (size_t)len, &ix->sample_path[ix->n])) return oom(s);
            ix->label[ix->n++] = c;
        }
        /* keep the folder for the cache's check */
        if (!grow((void **)&ix->dirs, &ix->cap_dirs, (size_t)ix->n_dirs + 1, sizeof *ix->dirs))
            return oom(s);
        ix->dirs[ix->n_dirs++] = *dr;
    }
    if (ix->n == before)
        return pp_error_set(s->err, PP_ERR_INPUT, "%s: class '%s' has no image file (.jpg, "
                            ".jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff or .webp)", s->root,
                            ix->str.s + ix->class_name[c]);
    return PP_OK;
}

/* The root's class folders, sorted; records the root itself as a folder. */
static pp_status find_classes(pp_image_index *ix, scan *s)
{
    struct stat sb;
    if (stat(ix->root, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return pp_error_set(s->err, PP_ERR_INPUT, "%s: not a folder", ix->root);
    DIR *d = opendir(ix->root);
    if (!d)
        return pp_error_set(s->err, PP_ERR_INPUT, "%s: cannot read the folder: %s", ix->root,
                            strerror(errno));
    size_t root_off, cap = 0;
    if (!pool_add(&ix->str, "", 0, &root_off) ||
        !grow((void **)&ix->dirs, &ix->cap_dirs, 1, sizeof *ix->dirs)) {
        closedir(d);
        return oom(s);
    }
    ix->dirs[ix->n_dirs++] = (dir_rec){.path = root_off, .sec = sb.st_mtim.tv_sec,
                                       .nsec = sb.st_mtim.tv_nsec};
    pp_status st = PP_OK;
    struct dirent *e;
    while (st == PP_OK && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        bool is_dir = e->d_type == DT_DIR;
        if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
            char p[8192];
            snprintf(p, sizeof p, "%s/%s", ix->root, e->d_name);
            struct stat eb;
            is_dir = stat(p, &eb) == 0 && S_ISDIR(eb.st_mode);
        }
        if (!is_dir) continue;
        size_t off;
        if (!grow((void **)&ix->class_name, &cap, (size_t)ix->n_classes + 1,
                  sizeof *ix->class_name) ||
            !pool_add(&ix->str, e->d_name, strlen(e->d_name), &off))
            st = oom(s);
        else
            ix->class_name[ix->n_classes++] = off;
    }
    closedir(d);
    if (st != PP_OK) return st;
    if (ix->n_classes == 0)
        return pp_error_set(s->err, PP_ERR_INPUT, "%s: no class folder (an image folder holds "
                            "one subfolder of images per class)", ix->root);
    qsort_r(ix->class_name, (size_t)ix->n_classes, sizeof *ix->class_name, by_string, &ix->str);
    return PP_OK;
}

static pp_status scan_all(pp_image_index *ix, pp_error *err)
{
    scan s = {.root = ix->root, .err = err};
    pp_status st = find_classes(ix, &s);
    for (int c = 0; st == PP_OK && c < ix->n_classes; c++) {
        st = scan_class(ix, &s, c, ix->class_name[c]); /* its folder is its name */
    }
    free(s.names.s);
    free(s.name_off);
    free(s.dirs);
    free(s.seen);
    return st;
}

/* ---- the cache ------------------------------------------------------------------- */

bool pp_image_index_cache_dir(char *dir, size_t n)
{
    return pp_cache_dir("PP_IMAGE_INDEX_CACHE", "image-index", dir, n);
}

static void cache_file(const char *dir, const char *root, char *path, size_t n)
{
    snprintf(path, n, "%s/%016llx.idx", dir,
             (unsigned long long)pp_cksum_data(root, strlen(root)));
}

typedef struct wbuf {
    uint8_t *b;
    size_t n, cap;
    bool oom;
} wbuf;

static void put(wbuf *w, const void *p, size_t len)
{
    if (w->oom || !grow((void **)&w->b, &w->cap, w->n + len, 1)) {
        w->oom = true;
        return;
    }
    memcpy(w->b + w->n, p, len);
    w->n += len;
}

static void put_str(wbuf *w, const char *s)
{
    uint32_t len = (uint32_t)strlen(s);
    put(w, &len, 4);
    put(w, s, len);
}

static void cache_write(const pp_image_index *ix, const char *path)
{
    wbuf w = {0};
    put(&w, CACHE_MAGIC, 8);
    uint64_t sum = 0;
    put(&w, &sum, 8); /* filled below */
    put_str(&w, ix->root);
    put(&w, &ix->n_classes, 4);
    for (int c = 0; c < ix->n_classes; c++) put_str(&w, ix->str.s + ix->class_name[c]);
    put(&w, &ix->n_dirs, 8);
    for (int64_t d = 0; d < ix->n_dirs; d++) {
        put_str(&w, ix->str.s + ix->dirs[d].path);
        put(&w, &ix->dirs[d].sec, 8);
        put(&w, &ix->dirs[d].nsec, 8);
    }
    put(&w, &ix->n, 8);
    for (int64_t i = 0; i < ix->n; i++) {
        put(&w, &ix->label[i], 4);
        put_str(&w, ix->str.s + ix->sample_path[i]);
    }
    if (!w.oom) {
        sum = pp_cksum_data(w.b + 16, w.n - 16);
        memcpy(w.b + 8, &sum, 8);
        pp_atomic_file af;
        pp_error e;
        if (pp_atomic_open(&af, path, &e) == PP_OK) {
            if (fwrite(w.b, 1, w.n, af.f) == w.n)
                pp_atomic_commit(&af, &e);
            else
                pp_atomic_abort(&af);
        }
    }
    free(w.b);
}

typedef struct rbuf {
    const uint8_t *b;
    size_t n, at;
    bool bad;
} rbuf;

static void get(rbuf *r, void *p, size_t len)
{
    if (r->bad || len > r->n - r->at) {
        r->bad = true;
        memset(p, 0, len);
        return;
    }
    memcpy(p, r->b + r->at, len);
    r->at += len;
}

/* A string of the cache into the index's pool (*off), or false. */
static bool get_str(rbuf *r, pool *p, size_t *off)
{
    uint32_t len;
    get(r, &len, 4);
    if (r->bad || len > r->n - r->at) return r->bad = true, false;
    if (!pool_add(p, (const char *)r->b + r->at, len, off)) return r->bad = true, false;
    r->at += len;
    return true;
}

/* Loads the cache file into ix (empty) when it is whole, of this root, and
 * every folder still has its time. */
static bool cache_read(pp_image_index *ix, const char *path)
{
    uint8_t *buf;
    int64_t size;
    pp_error e;
    if (pp_file_read_all(path, &buf, &size, &e) != PP_OK) return false;
    rbuf r = {.b = buf, .n = (size_t)size};
    uint64_t sum = 0;
    bool ok = size >= 16 && memcmp(buf, CACHE_MAGIC, 8) == 0;
    if (ok) {
        memcpy(&sum, buf + 8, 8);
        ok = sum == pp_cksum_data(buf + 16, (size_t)size - 16);
    }
    r.at = 16;
    size_t root_off;
    ok = ok && get_str(&r, &ix->str, &root_off) && strcmp(ix->str.s + root_off, ix->root) == 0;
    if (ok) get(&r, &ix->n_classes, 4);
    ok = ok && !r.bad && ix->n_classes > 0 && ix->n_classes <= (int)(r.n / 4);
    if (ok) ok = (ix->class_name = malloc((size_t)ix->n_classes * sizeof *ix->class_name)) != NULL;
    for (int c = 0; ok && c < ix->n_classes; c++) ok = get_str(&r, &ix->str, &ix->class_name[c]);
    if (ok) get(&r, &ix->n_dirs, 8);
    ok = ok && !r.bad && ix->n_dirs >= 0 && (uint64_t)ix->n_dirs <= r.n / 20;
    if (ok) ok = (ix->dirs = calloc((size_t)ix->n_dirs + 1, sizeof *ix->dirs)) != NULL;
    for (int64_t d = 0; ok && d < ix->n_dirs; d++) {
        dir_rec *dr = &ix->dirs[d];
        ok = get_str(&r, &ix->str, &dr->path);
        get(&r, &dr->sec, 8);
        get(&r, &dr->nsec, 8);
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", ix->root, ix->str.s + dr->path);
        struct stat sb;
        ok = ok && !r.bad && stat(full, &sb) == 0 && sb.st_mtim.tv_sec == dr->sec &&
             sb.st_mtim.tv_nsec == dr->nsec;
    }
    if (ok) get(&r, &ix->n, 8);
    ok = ok && !r.bad && ix->n > 0 && (uint64_t)ix->n <= r.n / 8;
    if (ok) {
        ix->sample_path = malloc((size_t)ix->n * sizeof *ix->sample_path);
        ix->label = malloc((size_t)ix->n * sizeof *ix->label);
        ok = ix->sample_path && ix->label;
    }
    for (int64_t i = 0; ok && i < ix->n; i++) {
        get(&r, &ix->label[i], 4);
        ok = get_str(&r, &ix->str, &ix->sample_path[i]) && ix->label[i] >= 0 &&
             ix->label[i] < ix->n_classes;
    }
    ok = ok && !r.bad && r.at == r.n;
    free(buf);
    return ok;
}

/* ---- open ------------------------------------------------------------------------ */

static void clear(pp_image_index *ix)
{
    free(ix->str.s);
    free(ix->class_name);
    free(ix->sample_path);
    free(ix->label);
    free(ix->dirs);
    char *root = ix->root;
    *ix = (pp_image_index){.root = root};
}

pp_status pp_image_index_open(const char *root, const pp_image_index_cache *cache,
                              pp_image_index **out, pp_image_index_note *note, pp_error *err)
{
    *out = NULL;
    pp_image_index_note local;
    if (!note) note = &local;
    memset(note, 0, sizeof *note);
    const double t0 = pp_now_s();
    pp_image_index *ix = calloc(1, sizeof *ix);
    if (!ix) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", root);
    ix->root = realpath(root, NULL);
    if (!ix->root) {
        pp_error_set(err, PP_ERR_INPUT, "%s: cannot open the folder: %s", root, strerror(errno));
        free(ix);
        return PP_ERR_INPUT;
    }
    const char *dir = cache && cache->dir && cache->dir[0] ? cache->dir : NULL;
    char path[4096] = "";
    if (dir) {
        cache_file(dir, ix->root, path, sizeof path);
        note->from_cache = cache_read(ix, path);
        if (note->from_cache)
            utimensat(AT_FDCWD, path, NULL, 0); /* used now: the last the bound evicts */
        else
            clear(ix);
    }
    pp_status s = PP_OK;
    if (!note->from_cache) {
        s = scan_all(ix, err);
        if (s == PP_OK && dir && ix->n >= cache->min_files) {
            pp_make_dirs(dir);
            cache_write(ix, path);
            struct stat sb;
            note->cache_written = stat(path, &sb) == 0;
            if (note->cache_written) {
                const pp_cache_trimmed gone = pp_cache_trim(
                    dir, ".idx", cache->max_bytes > 0 ? cache->max_bytes : INT64_MAX, path);
                note->evicted = gone.files;
                note->evicted_bytes = gone.bytes;
            }
        }
    }
    if (s != PP_OK) {
        pp_image_index_free(ix);
        return s;
    }
    if (note->from_cache || note->cache_written)
        snprintf(note->cache_path, sizeof note->cache_path, "%s", path);
    note->seconds = pp_now_s() - t0;
    *out = ix;
    return PP_OK;
}

void pp_image_index_free(pp_image_index *ix)
{
    if (!ix) return;
    clear(ix);
    free(ix->root);
    free(ix);
}

int64_t pp_image_index_size(const pp_image_index *ix) { return ix->n; }
int pp_image_index_classes(const pp_image_index *ix) { return ix->n_classes; }
const char *pp_image_index_root(const pp_image_index *ix) { return ix->root; }

const char *pp_image_index_class(const pp_image_index *ix, int c)
{
    return ix->str.s + ix->class_name[c];
}

int pp_image_index_label(const pp_image_index *ix, int64_t i) { return ix->label[i]; }

const char *pp_image_index_relpath(const pp_image_index *ix, int64_t i)
{
    return ix->str.s + ix->sample_path[i];
}

const char *pp_image_index_path(const pp_image_index *ix, int64_t i, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", ix->root, ix->str.s + ix->sample_path[i]);
    return buf;
}
