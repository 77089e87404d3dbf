/*
 * algo_cache.c - the per-device cache of convolution algorithms and its file
 * (see algo_cache.h for the format and the rules).
 */
#include "algo_cache.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/path.h"

struct pp_algo_entry {
    pp_algo_key key;
    pp_algo_choice choice;
};

static const char *const math_names[] = {"fp32", "tf32"};
static const char *const dir_names[] = {"fwd", "bwd_data", "bwd_filter"};
static const char *const api_names[] = {"legacy", "graph"};

#define FIELDS 13   /* of an entry line */
#define FIELDS_V2 11 /* of a version 2 line: no API, GRAPH_MS */
#define FIELDS_V1 8 /* of a version 1 line: no WS_MB, OVER, OVER_MB, API, GRAPH_MS */

void pp_algo_key_make(pp_algo_key *key, const char *gpu, int cudnn, pp_math_mode math,
                      int ws_mb, pp_algo_dir dir, const pp_conv2d_desc *d)
{
    memset(key, 0, sizeof *key);
    size_t n = 0;
    for (; gpu && gpu[n] && n < PP_ALGO_GPU_MAX - 1; n++) {
        unsigned char ch = (unsigned char)gpu[n];
        key->gpu[n] = ch < 0x20 || ch == 0x7f ? '_' : (char)ch;
    }
    if (n == 0) strcpy(key->gpu, "unknown");
    key->cudnn = cudnn;
    key->math = (int)math;
    key->ws_mb = ws_mb;
    key->dir = (int)dir;
    const int g[PP_ALGO_GEOM] = {d->n, d->c, d->h, d->w, d->k, d->r, d->s,
                                 d->stride_h, d->stride_w, d->pad_h, d->pad_w};
    memcpy(key->geom, g, sizeof g);
}

/* ---- entries ------------------------------------------------------------------- */

static int find_index(const pp_algo_cache *c, const pp_algo_key *key)
{
    for (int i = 0; i < c->n; i++)
        if (memcmp(&c->entries[i].key, key, sizeof *key) == 0) return i;
    return -1;
}

/* Appends an entry; false when out of host memory (the entry is then lost,
 * which only costs a measurement). */
static bool add_entry(pp_algo_cache *c, const pp_algo_key *key, const pp_algo_choice *choice)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        pp_algo_entry *e = realloc(c->entries, (size_t)cap * sizeof *e);
        if (!e) return false;
        c->entries = e;
        c->cap = cap;
    }
    c->entries[c->n++] = (pp_algo_entry){*key, *choice};
    return true;
}

/* ---- parsing ------------------------------------------------------------------- */

/* A decimal integer filling all of s[0, len) (an optional '-', then 1 to 10
 * digits) within [lo, hi]. */
static bool parse_int(const char *s, size_t len, long long lo, long long hi, int *out)
{
    size_t i = 0;
    bool neg = len > 0 && s[0] == '-';
    if (neg) i++;
    if (len - i < 1 || len - i > 10) return false;
    long long v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = 10 * v + (s[i] - '0');
    }
    if (neg) v = -v;
    if (v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static int parse_name(const char *s, size_t len, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strlen(names[i]) == len && memcmp(s, names[i], len) == 0) return i;
    return -1;
}

/* The 11 geometry numbers, separated by single spaces. */
static bool parse_geom(const char *s, size_t len, int *geom)
{
    size_t at = 0;
    for (int i = 0; i < PP_ALGO_GEOM; i++) {
        size_t end = at;
        while (end < len && s[end] != ' ') end++;
        /* n..s and the strides are positive; the paddings may be zero */
        if (!parse_int(s + at, end - at, i >= 9 ? 0 : 1, INT_MAX, &geom[i])) return false;
        if ((i < PP_ALGO_GEOM - 1) != (end < len)) return false;
        at = end + 1;
    }
    return true;
}

static bool parse_ms(const char *s, size_t len, float *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf) return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (*end != '\0' || errno != 0 || !isfinite(v) || v < 0 || v > 1e9) return false;
    *out = (float)v;
    return true;
}

/* One entry line (without its end of line) of a file of version 3, 2 or 1. */
static bool parse_entry(const char *line, size_t len, int version, pp_algo_key *key,
                        pp_algo_choice *choice)
{
    const int fields = version == 1 ? FIELDS_V1 : version == 2 ? FIELDS_V2 : FIELDS;
    const char *f[FIELDS];
    size_t flen[FIELDS];
    int nf = 0;
    size_t at = 0;
    while (nf < fields) {
        size_t end = at;
        while (end < len && line[end] != '\t') end++;
        f[nf] = line + at;
        flen[nf++] = end - at;
        if (end == len) break;
        at = end + 1;
    }
    if (nf != fields || f[fields - 1] + flen[fields - 1] != line + len) return false;

    memset(key, 0, sizeof *key);
    memset(choice, 0, sizeof *choice); /* version 1 and 2: legacy, graph not timed */
    if (flen[0] == 0 || flen[0] >= PP_ALGO_GPU_MAX) return false;
    for (size_t i = 0; i < flen[0]; i++) {
        unsigned char ch = (unsigned char)f[0][i];
        if (ch < 0x20 || ch == 0x7f) return false;
    }
    memcpy(key->gpu, f[0], flen[0]);
    if (!parse_int(f[1], flen[1], 1, INT_MAX, &key->cudnn)) return false;
    key->math = parse_name(f[2], flen[2], math_names, 2);
    key->ws_mb = PP_ALGO_WS_MB_DEFAULT;
    const int d = version == 1 ? 3 : 4; /* the field of DIRECTION */
    if (version > 1 && !parse_int(f[3], flen[3], 1, PP_ALGO_WS_MB_MAX, &key->ws_mb))
        return false;
    key->dir = parse_name(f[d], flen[d], dir_names, 3);
    if (key->math < 0 || key->dir < 0) return false;
    if (!parse_geom(f[d + 1], flen[d + 1], key->geom)) return false;
    if (!parse_int(f[d + 2], flen[d + 2], 0, 63, &choice->algo) ||
        !parse_int(f[d + 3], flen[d + 3], 0, 3, &choice->math_type) ||
        !parse_ms(f[d + 4], flen[d + 4], &choice->ms))
        return false;
    if (version == 1) return true;
    if (!parse_int(f[d + 5], flen[d + 5], 0, 1000, &choice->over) ||
        !parse_int(f[d + 6], flen[d + 6], 0, INT_MAX, &choice->over_mb))
        return false;
    if (version == 2) return true;
    choice->api = parse_name(f[d + 7], flen[d + 7], api_names, 2);
    /* a graph choice has a time: the plan it names was timed */
    return choice->api >= 0 && parse_ms(f[d + 8], flen[d + 8], &choice->graph_ms) &&
           (choice->api == PP_ALGO_API_LEGACY || choice->graph_ms > 0);
}

static bool is_line(const char *line, size_t n, const char *text)
{
    return n == strlen(text) && memcmp(line, text, n) == 0;
}

/* Adds the entries of a cache file's text that c does not hold yet. False
 * when the text does not start with the header (a foreign file); an empty
 * text is an empty cache. */
static bool parse_text(pp_algo_cache *c, const char *text, size_t len, int *entries, int *bad)
{
    if (len == 0) return true;
    size_t at = 0;
    bool first = true;
    int version = 3;
    while (at < len) {
        size_t end = at;
        while (end < len && text[end] != '\n') end++;
        size_t n = end - at;
        if (n > 0 && text[at + n - 1] == '\r') n--;
        const char *line = text + at;
        at = end + 1;
        if (first) {
            if (is_line(line, n, PP_ALGO_FILE_HEADER_V1))
                version = 1;
            else if (is_line(line, n, PP_ALGO_FILE_HEADER_V2))
                version = 2;
            else if (!is_line(line, n, PP_ALGO_FILE_HEADER))
                return false;
            first = false;
            continue;
        }
        if (n == 0 || line[0] == '#') continue;
        pp_algo_key key;
        pp_algo_choice choice;
        if (!parse_entry(line, n, version, &key, &choice)) {
            (*bad)++;
            continue;
        }
        if (find_index(c, &key) < 0 && add_entry(c, &key, &choice)) (*entries)++;
    }
    return !first;
}

/* ---- the file ------------------------------------------------------------------ */

typedef enum file_state { FILE_NONE, FILE_READ, FILE_FOREIGN } file_state;

/* Merges the entries of c's file into c; counts them in the statistics when
 * count is set (the first read). */
static file_state read_file(pp_algo_cache *c, bool count)
{
    FILE *f = fopen(c->path, "rb");
    if (!f) return errno == ENOENT ? FILE_NONE : FILE_FOREIGN;
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size >= 0 && (size_t)size <= PP_ALGO_FILE_MAX && fseek(f, 0, SEEK_SET) == 0)
        text = malloc((size_t)size + 1);
    bool ok = text && fread(text, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    int entries = 0, bad = 0;
    ok = ok && parse_text(c, text, (size_t)size, &entries, &bad);
    free(text);
    if (!ok) return FILE_FOREIGN;
    if (count) {
        c->stats.file_entries += entries;
        c->stats.bad_lines += bad;
    }
    return FILE_READ;
}

static void load_once(pp_algo_cache *c)
{
    if (c->loaded) return;
    c->loaded = true;
    if (c->path && read_file(c, true) == FILE_FOREIGN) c->stats.foreign = true;
}

static void write_entry(FILE *f, const pp_algo_entry *e)
{
    const int *g = e->key.geom;
    const pp_algo_choice *c = &e->choice;
    fprintf(f,
            "%s\t%d\t%s\t%d\t%s\t%d %d %d %d %d %d %d %d %d %d %d\t%d\t%d\t%.6g\t%d\t%d\t%s\t"
            "%.6g\n",
            e->key.gpu, e->key.cudnn, math_names[e->key.math], e->key.ws_mb,
            dir_names[e->key.dir], g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9],
            g[10], c->algo, c->math_type, (double)c->ms, c->over, c->over_mb,
            api_names[c->api == PP_ALGO_API_GRAPH], (double)c->graph_ms);
}

static void save(pp_algo_cache *c)
{
    if (!c->path || c->stats.foreign) return;
    if (read_file(c, false) == FILE_FOREIGN) { /* replaced by something else meanwhile */
        c->stats.foreign = true;
        return;
    }
    pp_atomic_file af;
    pp_error err;
    pp_status s = pp_atomic_open(&af, c->path, &err);
    if (s == PP_OK) {
        fprintf(af.f, "%s\n", PP_ALGO_FILE_HEADER);
        for (int i = 0; i < c->n; i++) write_entry(af.f, &c->entries[i]);
        s = pp_atomic_commit(&af, &err);
    }
    if (s == PP_OK) {
        c->stats.saves++;
        return;
    }
    c->stats.save_failures++;
    size_t n = strlen(err.msg);
    if (n >= sizeof c->stats.save_error) n = sizeof c->stats.save_error - 1;
    memcpy(c->stats.save_error, err.msg, n);
    c->stats.save_error[n] = '\0';
}

/* ---- the cache ----------------------------------------------------------------- */

pp_status pp_algo_cache_init(pp_algo_cache *c, const char *path, pp_error *err)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    if (path && path[0] && !(c->path = strdup(path)))
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (algorithm cache)");
    return PP_OK;
}

void pp_algo_cache_destroy(pp_algo_cache *c)
{
    if (!c) return;
    pthread_mutex_destroy(&c->lock);
    free(c->path);
    free(c->entries);
    memset(c, 0, sizeof *c);
}

bool pp_algo_cache_find(pp_algo_cache *c, const pp_algo_key *key, pp_algo_choice *out)
{
    pthread_mutex_lock(&c->lock);
    load_once(c);
    int i = find_index(c, key);
    if (i >= 0) {
        *out = c->entries[i].choice;
        c->stats.hits++;
    }
    pthread_mutex_unlock(&c->lock);
    return i >= 0;
}

void pp_algo_cache_insert(pp_algo_cache *c, const pp_algo_key *key, pp_algo_choice *choice)
{
    pthread_mutex_lock(&c->lock);
    load_once(c);
    int i = find_index(c, key);
    if (i >= 0) {
        *choice = c->entries[i].choice;
    } else if (add_entry(c, key, choice)) {
        c->stats.inserted++;
        c->stats.over += choice->over;
        if (choice->over_mb > c->stats.over_mb) c->stats.over_mb = choice->over_mb;
        save(c);
    }
    pthread_mutex_unlock(&c->lock);
}

void pp_algo_cache_update(pp_algo_cache *c, const pp_algo_key *key, const pp_algo_choice *choice)
{
    pthread_mutex_lock(&c->lock);
    load_once(c);
    int i = find_index(c, key);
    bool stored = true;
    if (i >= 0)
        c->entries[i].choice = *choice;
    else
        stored = add_entry(c, key, choice);
    if (stored) {
        c->stats.updated++;
        save(c);
    }
    pthread_mutex_unlock(&c->lock);
}

void pp_algo_cache_remove(pp_algo_cache *c, const pp_algo_key *key)
{
    pthread_mutex_lock(&c->lock);
    int i = find_index(c, key);
    if (i >= 0) {
        c->n--;
        memmove(&c->entries[i], &c->entries[i + 1], (size_t)(c->n - i) * sizeof *c->entries);
    }
    pthread_mutex_unlock(&c->lock);
}

pp_algo_stats pp_algo_cache_stats(pp_algo_cache *c)
{
    pthread_mutex_lock(&c->lock);
    pp_algo_stats s = c->stats;
    pthread_mutex_unlock(&c->lock);
    return s;
}

bool pp_algo_cache_entry(pp_algo_cache *c, int i, pp_algo_key *key, pp_algo_choice *choice)
{
    pthread_mutex_lock(&c->lock);
    const bool ok = i >= 0 && i < c->n;
    if (ok) {
        *key = c->entries[i].key;
        *choice = c->entries[i].choice;
    }
    pthread_mutex_unlock(&c->lock);
    return ok;
}

pp_status pp_algo_find_from_env(bool *on, pp_error *err)
{
    const char *v = getenv("PP_CUDNN_FIND");
    *on = true;
    if (!v || strcmp(v, "1") == 0) return PP_OK;
    if (strcmp(v, "0") == 0) {
        *on = false;
        return PP_OK;
    }
    return pp_error_set(err, PP_ERR_INPUT,
                        "PP_CUDNN_FIND is '%s': use 1 to measure convolution algorithms (the "
                        "default) or 0 for cuDNN's heuristics only",
                        v);
}

pp_status pp_algo_api_from_env(pp_algo_api *api, pp_error *err)
{
    const char *v = getenv("PP_CUDA_CONV_API");
    *api = PP_ALGO_API_AUTO;
    if (!v || strcmp(v, "auto") == 0) return PP_OK;
    if (strcmp(v, "legacy") == 0 || strcmp(v, "graph") == 0) {
        *api = v[0] == 'l' ? PP_ALGO_API_LEGACY : PP_ALGO_API_GRAPH;
        return PP_OK;
    }
    return pp_error_set(err, PP_ERR_INPUT,
                        "PP_CUDA_CONV_API is '%s': use auto (fp32 and tf32 convolutions run "
                        "cuDNN's legacy algorithm or its graph API's plan, whichever timed "
                        "faster; the default), legacy or graph",
                        v);
}

/* The decimal number in the variable name, hi at most, into *n (def when
 * unset); otherwise PP_ERR_INPUT naming the variable, its value and use. */
static pp_status int_from_env(const char *name, int hi, int def, const char *use, int *n,
                              pp_error *err)
{
    const char *v = getenv(name);
    *n = def;
    if (!v) return PP_OK;
    if (parse_int(v, strlen(v), 1, hi, n)) return PP_OK;
    *n = def;
    return pp_error_set(err, PP_ERR_INPUT, "%s is '%s': use %s, 1 to %d (default %d)", name, v,
                        use, hi, def);
}

pp_status pp_algo_plans_from_env(int *n, pp_error *err)
{
    return int_from_env("PP_CUDA_CONV_PLANS", PP_ALGO_PLANS_MAX, PP_ALGO_PLANS_DEFAULT,
                        "how many of cuDNN's graph API's execution plans a convolution times",
                        n, err);
}

pp_status pp_algo_ws_from_env(int *mb, pp_error *err)
{
    return int_from_env("PP_CUDA_CONV_WS_MB", PP_ALGO_WS_MB_MAX, PP_ALGO_WS_MB_DEFAULT,
                        "the most cuDNN workspace a convolution algorithm may ask for, in MiB",
                        mb, err);
}
