/*
 * outputs.c - the folders of a run's outputs, made or checked before it
 * trains, and its tables and charts written whole (outputs.h).
 */
#include "cli/outputs.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The folder part of path: "a/b" -> "a", "b" -> ".", "/b" -> "/"; malloc'ed. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* The folder's state: 0 a folder, ENOENT missing, ENOTDIR not a folder, or
 * stat's errno. */
static int dir_state(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

/* mkdir -p dir (mode 0777 less the umask); *made: whether it made one. A
 * folder another process makes at the same time is no error. Fills why. */
static bool make_dirs(const char *dir, bool *made, char *why, size_t n_why)
{
    *made = false;
    char *buf = strdup(dir);
    if (!buf) return snprintf(why, n_why, "out of host memory"), false;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    bool ok = true;
    for (size_t i = 1; i <= n && ok; i++) { /* each prefix, shortest first */
        if (i < n && buf[i] != '/') continue;
        char keep = buf[i];
        buf[i] = '\0';
        int state = dir_state(buf);
        if (state == ENOENT) {
            if (mkdir(buf, 0777) == 0)
                *made = true;
            else if (errno != EEXIST || dir_state(buf) != 0)
                ok = false, snprintf(why, n_why, "%s: cannot make the folder: %s", buf,
                                     strerror(errno));
        } else if (state != 0) {
            ok = false;
            snprintf(why, n_why, "%s: %s", buf,
                     state == ENOTDIR ? "not a folder" : strerror(state));
        }
        buf[i] = keep;
    }
    free(buf);
    return ok;
}

/* Whether a file could be made in dir: it is a folder this process may write
 * in, or (missing: *missing) the nearest folder above it that exists is one.
 * Fills why. */
static bool check_dir(const char *dir, bool *missing, char *why, size_t n_why)
{
    *missing = false;
    char *buf = strdup(dir);
    bool ok = buf != NULL;
    if (!buf) snprintf(why, n_why, "out of host memory");
    while (buf) {
        int state = dir_state(buf);
        if (state == 0) {
            if (access(buf, W_OK | X_OK) != 0)
                ok = false, snprintf(why, n_why, "%s: cannot write in this folder: %s", buf,
                                     strerror(errno));
            break;
        }
        if (state != ENOENT) {
            ok = false;
            snprintf(why, n_why, "%s: %s", buf,
                     state == ENOTDIR ? "not a folder" : strerror(state));
            break;
        }
        *missing = true;
        char *up = dir_of(buf);
        const bool top = !up || strcmp(up, buf) == 0;
        free(buf);
        buf = up;
        if (top) break; /* "." or "/" missing: nothing above to make it in */
    }
    free(buf);
    return ok;
}

char *pp_cli_outputs_series_dir(const pp_plan *plan)
{
    const pp_plan_checkpoint *c = &plan->checkpoint;
    if (!c->enabled || !c->path) return NULL;
    const char *at = strstr(c->path, plan->epochs ? "{epoch}" : "{step}");
    size_t n = at ? (size_t)(at - c->path) : strlen(c->path);
    while (n > 0 && c->path[n - 1] != '/') n--; /* the components before the tag's */
    if (n == 0) return strdup(".");
    if (n == 1) return strdup("/");
    return strndup(c->path, n - 1);
}

/* How a missing folder is taken: made, left for the run to make, or refused. */
typedef enum { MAKE, LATER, MUST_EXIST } missing_rule;

/* One output's folder: made, checked, or (MUST_EXIST) required. what names
 * the output. */
static int one(const char *what, const char *dir, const pp_plan *plan, const pp_mark *mark,
               missing_rule rule)
{
    char why[1024];
    bool missing = false, made = false;
    bool ok = check_dir(dir, &missing, why, sizeof why);
    if (ok && missing && rule == MAKE) ok = make_dirs(dir, &made, why, sizeof why);
    if (ok && missing && rule == MUST_EXIST) {
        ok = false;
        snprintf(why, sizeof why, "%s: no such folder (it is not made for %s)", dir, what);
    }
    if (ok) {
        if (made) fprintf(stderr, "made folder %s/ for %s\n", dir, what);
        return 0;
    }
    if (mark && mark->line > 0)
        fprintf(stderr, "%s:%d:%d: %s: %s\n", plan->path ? plan->path : "<plan>", mark->line,
                mark->col, what, why);
    else
        fprintf(stderr, "pipeline-run: %s: %s\n", what, why);
    return 2;
}

/* An output file given on the command line: not a folder itself, and its
 * folder made or checked as rule says. */
static int file(const char *what, const char *path, const pp_plan *plan, missing_rule rule)
{
    if (!path) return 0;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "pipeline-run: %s: %s: is a folder (give a file's name)\n", what, path);
        return 2;
    }
    char *dir = dir_of(path);
    if (!dir) {
        fprintf(stderr, "pipeline-run: out of host memory\n");
        return 1;
    }
    int rc = one(what, dir, plan, NULL, rule);
    free(dir);
    return rc;
}

int pp_cli_outputs_prepare(const pp_plan *plan, const pp_cli_outputs *o, bool make)
{
    int rc = 0;
    const missing_rule made = make ? MAKE : LATER;
    char *dir = pp_cli_outputs_series_dir(plan);
    if (dir) rc = one("checkpoint.path", dir, plan, &plan->checkpoint.mark, made);
    free(dir);
    if (!rc && o) {
        rc = file("--save", o->save, plan, made);
        if (!rc) rc = file("--trace", o->trace, plan, MUST_EXIST);
        if (!rc) rc = file("--metrics", o->metrics, plan, MUST_EXIST);
        if (!rc) rc = file("--plot", o->plot, plan, MUST_EXIST);
        if (!rc) rc = file("--csv", o->csv, plan, MUST_EXIST);
        if (!rc) rc = file("--svg", o->svg, plan, MUST_EXIST);
        if (!rc) rc = file("-o", o->output, plan, MUST_EXIST);
    }
    return rc;
}

void pp_cli_outputs_make_parent(const char *path)
{
    char *dir = dir_of(path);
    char why[256];
    bool made;
    if (dir && dir_state(dir) == ENOENT) make_dirs(dir, &made, why, sizeof why);
    free(dir);
}

FILE *pp_cli_output_open(pp_cli_output *o, const char *path)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    pp_error err; /* (a link, a device, a FIFO: atomic_file.h says how each is written) */
    if (pp_atomic_open(&o->af, path, &err) == PP_OK) return o->af.f;
    fprintf(stderr, "pipeline-run: %s\n", err.msg);
    return NULL;
}

bool pp_cli_output_commit(pp_cli_output *o)
{
    pp_error err;
    if (pp_atomic_commit(&o->af, &err) == PP_OK) return true;
    fprintf(stderr, "pipeline-run: %s\n", err.msg);
    return false;
}
