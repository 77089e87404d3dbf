/*
 * plan_walk.c - the typed getters of the plan walk (plan_walk.h): mappings
 * with unknown/duplicate key checks, strings, integers with overflow and
 * range checks, finite numbers, booleans, choices; data paths; byte sizes
 * and the shortest exact double format (plan_walk_internal.h).
 */
#include "partitioner/plan_walk.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "partitioner/plan_walk_internal.h"

/* ------------------------------------------------------------------ */
/* reporting and typed getters                                          */

void pp_walk_error(pp_walk *w, const pp_ynode *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (n)
        pp_diag_addv(w->diag, PP_ERR_INPUT, w->file, n->line, n->col, fmt, ap);
    else
        pp_diag_addv(w->diag, PP_ERR_INPUT, w->file, 0, 0, fmt, ap);
    va_end(ap);
    w->errors++;
}

pp_mark pp_walk_mark(const pp_ynode *n)
{
    pp_mark m = {0, 0};
    if (n) {
        m.line = n->line;
        m.col = n->col;
    }
    return m;
}

const char *pp_walk_describe(const pp_ynode *n)
{
    if (!n) return "nothing";
    switch (n->kind) {
    case PP_YNODE_SEQ: return "a list";
    case PP_YNODE_MAP: return "a mapping";
    case PP_YNODE_SCALAR:
        if (pp_ynode_is_null(n)) return "an empty value";
        return n->quoted ? "a quoted string" : "a plain value";
    }
    return "something else";
}

/* Edit distance of two short strings (for "did you mean"); large when long. */
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 31 || lb > 31) return 99;
    int prev[32], cur[32];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            int m = sub < del ? sub : del;
            cur[j] = m < ins ? m : ins;
        }
        memcpy(prev, cur, sizeof cur);
    }
    return prev[lb];
}

bool pp_walk_map(pp_walk *w, const pp_ynode *n, const char *what, const char *const *keys,
                 int n_keys, const pp_ynode **found)
{
    for (int k = 0; k < n_keys; k++) found[k] = NULL;
    if (!n || n->kind != PP_YNODE_MAP) {
        pp_walk_error(w, n, "%s must be a mapping, got %s", what, pp_walk_describe(n));
        return false;
    }
    const pp_ynode *keynodes[PP_WALK_MAX_KEYS] = {0};
    for (int i = 0; i < n->n; i++) {
        const pp_ynode *key = n->kids[2 * i];
        const pp_ynode *val = n->kids[2 * i + 1];
        if (key->kind != PP_YNODE_SCALAR) {
            pp_walk_error(w, key, "keys in %s must be names, got %s", what,
                          pp_walk_describe(key));
            continue;
        }
        int hit = -1;
        for (int k = 0; k < n_keys; k++)
            if (strcmp(key->str, keys[k]) == 0) hit = k;
        if (hit < 0) {
            int best = -1, best_d = 3;
            for (int k = 0; k < n_keys; k++) {
                int dist = edit_distance(key->str, keys[k]);
                if (dist < best_d) {
                    best_d = dist;
                    best = k;
                }
            }
            if (best >= 0)
                pp_walk_error(w, key, "unknown key '%.64s' in %s (did you mean '%s'?)", key->str,
                              what, keys[best]);
            else
                pp_walk_error(w, key, "unknown key '%.64s' in %s", key->str, what);
            continue;
        }
        if (found[hit]) {
            pp_walk_error(w, key, "duplicate key '%s' in %s (first at line %d)", keys[hit], what,
                          keynodes[hit]->line);
            continue;
        }
        found[hit] = val;
        keynodes[hit] = key;
    }
    return true;
}

bool pp_walk_str(pp_walk *w, const pp_ynode *n, const char *what, const char **out)
{
    if (!n || n->kind != PP_YNODE_SCALAR || pp_ynode_is_null(n)) {
        pp_walk_error(w, n, "%s must be a string, got %s", what, pp_walk_describe(n));
        return false;
    }
    *out = n->str;
    return true;
}

/* Plain scalar of decimal digits with an optional sign. */
static bool is_integer_text(const char *s)
{
    if (*s == '+' || *s == '-') s++;
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

/* YAML 1.2 core float syntax (no .inf/.nan; those are rejected as not finite). */
static bool is_number_text(const char *s)
{
    if (*s == '+' || *s == '-') s++;
    int digits = 0;
    while (*s >= '0' && *s <= '9') {
        s++;
        digits++;
    }
    if (*s == '.') {
        s++;
        while (*s >= '0' && *s <= '9') {
            s++;
            digits++;
        }
    }
    if (!digits) return false;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (*s < '0' || *s > '9') return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    return *s == '\0';
}

static bool is_nonfinite_text(const char *s)
{
    if (*s == '+' || *s == '-') s++;
    return strcmp(s, ".inf") == 0 || strcmp(s, ".Inf") == 0 || strcmp(s, ".INF") == 0 ||
           strcmp(s, ".nan") == 0 || strcmp(s, ".NaN") == 0 || strcmp(s, ".NAN") == 0;
}

bool pp_walk_int(pp_walk *w, const pp_ynode *n, const char *what, int64_t lo, int64_t hi,
                 int64_t *out)
{
    if (!n || n->kind != PP_YNODE_SCALAR || n->quoted || pp_ynode_is_null(n)) {
        pp_walk_error(w, n, "%s must be an integer, got %s", what, pp_walk_describe(n));
        return false;
    }
    if (!is_integer_text(n->str)) {
        pp_walk_error(w, n, "%s must be an integer, got '%.64s'", what, n->str);
        return false;
    }
    errno = 0;
    long long v = strtoll(n->str, NULL, 10);
    if (errno == ERANGE || v > hi) {
        pp_walk_error(w, n, "%s is too large: %.64s (at most %lld)", what, n->str, (long long)hi);
        return false;
    }
    if (v < lo) {
        if (lo == 1)
            pp_walk_error(w, n, "%s must be positive, got %lld", what, v);
        else
            pp_walk_error(w, n, "%s must be at least %lld, got %lld", what, (long long)lo, v);
        return false;
    }
    *out = v;
    return true;
}

bool pp_walk_int32(pp_walk *w, const pp_ynode *n, const char *what, int lo, int hi, int *out)
{
    int64_t v;
    if (!pp_walk_int(w, n, what, lo, hi, &v)) return false;
    *out = (int)v;
    return true;
}

bool pp_walk_num(pp_walk *w, const pp_ynode *n, const char *what, double lo, double hi,
                 double *out)
{
    if (!n || n->kind != PP_YNODE_SCALAR || n->quoted || pp_ynode_is_null(n)) {
        pp_walk_error(w, n, "%s must be a number, got %s", what, pp_walk_describe(n));
        return false;
    }
    if (is_nonfinite_text(n->str)) {
        pp_walk_error(w, n, "%s must be a finite number, got '%s'", what, n->str);
        return false;
    }
    if (!is_number_text(n->str)) {
        pp_walk_error(w, n, "%s must be a number, got '%.64s'", what, n->str);
        return false;
    }
    double v = strtod(n->str, NULL);
    if (!isfinite(v)) {
        pp_walk_error(w, n, "%s must be a finite number, got '%.64s'", what, n->str);
        return false;
    }
    if (v < lo || v > hi) {
        if (lo == 0 && v < 0)
            pp_walk_error(w, n, "%s must not be negative, got %.64s", what, n->str);
        else
            pp_walk_error(w, n, "%s must be between %g and %g, got %.64s", what, lo, hi, n->str);
        return false;
    }
    *out = v;
    return true;
}

bool pp_walk_bool(pp_walk *w, const pp_ynode *n, const char *what, bool *out)
{
    if (n && n->kind == PP_YNODE_SCALAR && !n->quoted) {
        const char *s = n->str;
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
            *out = true;
            return true;
        }
        if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
            *out = false;
            return true;
        }
        if (!pp_ynode_is_null(n)) {
            pp_walk_error(w, n, "%s must be true or false, got '%.64s'", what, s);
            return false;
        }
    }
    pp_walk_error(w, n, "%s must be true or false, got %s", what, pp_walk_describe(n));
    return false;
}

int pp_walk_choice(pp_walk *w, const pp_ynode *n, const char *what, const char *const *names,
                   int n_names, const char *expected)
{
    const char *s;
    if (!pp_walk_str(w, n, what, &s)) return -1;
    for (int i = 0; i < n_names; i++)
        if (strcmp(s, names[i]) == 0) return i;
    pp_walk_error(w, n, "unknown %s '%.64s' (expected %s)", what, s, expected);
    return -1;
}

int pp_walk_recompute(pp_walk *w, const pp_ynode *n, const char *what)
{
    static const char *const names[] = {"never", "except_last", "always"};
    return pp_walk_choice(w, n, what, names, 3, "never, except_last or always");
}

/* ------------------------------------------------------------------ */
/* sizes and numbers                                                    */

int pp_plan_size_parse(const char *s, int64_t *out)
{
    static const struct {
        const char *unit;
        double mult;
    } units[] = {
        {"", 1.0},
        {"B", 1.0},
        {"kB", 1e3},
        {"KB", 1e3},
        {"MB", 1e6},
        {"GB", 1e9},
        {"TB", 1e12},
        {"KiB", 1024.0},
        {"MiB", 1048576.0},
        {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0},
    };
    const char *p = s;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            p++;
            digits++;
        }
    }
    if (!digits || digits > 30) return -1;
    size_t numlen = (size_t)(p - s);
    char num[40];
    memcpy(num, s, numlen);
    num[numlen] = '\0';
    while (*p == ' ') p++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].unit) != 0) continue;
        if (strchr(num, '.') == NULL && units[i].mult == 1.0) {
            errno = 0;
            long long v = strtoll(num, NULL, 10);
            if (errno == ERANGE || v > PP_PLAN_MAX_MEMORY_BYTES || v < 1) return -2;
            *out = v;
            return 0;
        }
        double v = strtod(num, NULL) * units[i].mult;
        if (!(v >= 1.0) || v > (double)PP_PLAN_MAX_MEMORY_BYTES) return -2;
        *out = (int64_t)llround(v);
        return 0;
    }
    return -1;
}

pp_status pp_plan_parse_bytes(const char *text, int64_t *out, pp_error *err)
{
    int r = text && out ? pp_plan_size_parse(text, out) : -1;
    if (r == -2)
        return pp_error_set(err, PP_ERR_INPUT, "'%.64s' is out of range (1 byte to 1 EiB)", text);
    if (r != 0)
        return pp_error_set(err, PP_ERR_INPUT,
                            "'%.64s' is not a size (e.g. 12GiB, 512MiB, 8GB or a byte count)",
                            text ? text : "");
    return PP_OK;
}

pp_status pp_plan_cache_max(const char *env, int64_t dflt, int64_t *max, pp_error *err)
{
    const char *s = getenv(env);
    *max = dflt;
    if (!s || !*s) return PP_OK;
    if (strcmp(s, "none") == 0) {
        *max = 0;
        return PP_OK;
    }
    if (pp_plan_parse_bytes(s, max, err) == PP_OK) return PP_OK;
    return pp_error_set(err, PP_ERR_INPUT,
                        "%s='%.64s': expected a size (e.g. 16GiB, 512MiB, a byte count) or none",
                        env, s);
}

void pp_plan_size_format(int64_t bytes, char *buf, size_t n)
{
    static const struct {
        const char *unit;
        int64_t mult;
    } units[] = {
        {"TiB", (int64_t)1 << 40},
        {"GiB", (int64_t)1 << 30},
        {"MiB", (int64_t)1 << 20},
        {"KiB", (int64_t)1 << 10},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (bytes > 0 && bytes % units[i].mult == 0) {
            snprintf(buf, n, "%lld%s", (long long)(bytes / units[i].mult), units[i].unit);
            return;
        }
    }
    snprintf(buf, n, "%lld", (long long)bytes);
}

void pp_plan_double_format(double v, char *buf, size_t n)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* Keep it a number to every YAML reader: YAML 1.1 (PyYAML) takes a float
     * only with a dot in its mantissa ("2e+01" is a string there). Within
     * the range plans use, write it without exponent ("20.0"), else give the
     * mantissa a dot ("1.0e-07"). */
    if (strpbrk(buf, "eE") && fabs(v) >= 1e-4 && fabs(v) < 1e15) {
        for (int dec = 0; dec <= 17; dec++) {
            snprintf(buf, n, "%.*f", dec, v);
            if (strtod(buf, NULL) == v) break;
        }
    }
    char *e = strpbrk(buf, "eE");
    if (e && !memchr(buf, '.', (size_t)(e - buf)) && strlen(buf) + 3 <= n) {
        memmove(e + 2, e, strlen(e) + 1);
        e[0] = '.';
        e[1] = '0';
    }
    if (!strpbrk(buf, ".eEn") && strlen(buf) + 3 <= n) strcat(buf, ".0");
}

/* A path of the plan, resolved against its folder (plan_walk.h). */
char *pp_walk_path(pp_walk *w, const pp_ynode *n, const char *what, bool folder)
{
    const char *rel;
    if (!pp_walk_str(w, n, what, &rel)) return NULL;
    size_t need = strlen(w->dir) + strlen(rel) + 2;
    char *joined = malloc(need);
    if (!joined) {
        w->oom = true;
        return NULL;
    }
    if (rel[0] == '/')
        snprintf(joined, need, "%s", rel);
    else
        snprintf(joined, need, "%s/%s", w->dir, rel);
    struct stat sb;
    char *abs = NULL;
    if (stat(joined, &sb) != 0) {
        pp_walk_error(w, n, "%s: cannot open '%.200s': %s", what, joined, strerror(errno));
    } else if (!folder && S_ISDIR(sb.st_mode)) {
        pp_walk_error(w, n, "%s: '%.200s' is a folder, not a file", what, joined);
    } else if (folder && !S_ISDIR(sb.st_mode)) {
        pp_walk_error(w, n, "%s: '%.200s' is a file, not a folder", what, joined);
    } else if (access(joined, folder ? R_OK | X_OK : R_OK) != 0) {
        pp_walk_error(w, n, "%s: cannot read '%.200s': %s", what, joined, strerror(errno));
    } else {
        abs = realpath(joined, NULL);
        if (!abs) pp_walk_error(w, n, "%s: cannot resolve '%.200s': %s", what, joined,
                                strerror(errno));
    }
    free(joined);
    return abs;
}

const char *pp_plan_data_format_name(pp_plan_data_format f)
{
    switch (f) {
    case PP_PLAN_DATA_IDX: return "idx";
    case PP_PLAN_DATA_CIFAR10: return "cifar10";
    case PP_PLAN_DATA_IMAGEFOLDER: return "imagefolder";
    case PP_PLAN_DATA_TOKENS: return "tokens";
    case PP_PLAN_DATA_TEXT: return "text";
    default: return "synthetic";
    }
}

