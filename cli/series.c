/* series.c - a run's checkpoint series: names, saves with keep, scans, stale temporaries (series.h). */
#include "cli/series.h"
#include "cli/outputs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/signals.h"
#include "runtime/io/checkpoint.h"

void pp_cli_ckpt_files_free(pp_cli_ckpt_file *files, int n)
{
    for (int i = 0; files && i < n; i++) free(files[i].path);
    free(files);
}

void pp_cli_series_init(pp_cli_series *s, const pp_plan *plan, int rank, int64_t steps_per_epoch)
{
    memset(s, 0, sizeof *s);
    s->plan = plan;
    s->rank = rank;
    s->steps_per_epoch = steps_per_epoch > 0 ? steps_per_epoch : 1;
    s->last_steps = -1;
}

void pp_cli_series_free(pp_cli_series *s)
{
    pp_cli_ckpt_files_free(s->kept, s->n);
    free(s->last_path);
    memset(s, 0, sizeof *s);
}

/* The pattern's pieces: the folder before the component holding the tag
 * ("." when none), that component's text before and after the tag, and what
 * follows the component ("" when the tag is in the file's name, else "/..."
 * under a folder named by the tag). false when the plan has no series.
 * Strings malloc'ed; free with pattern_free. */
typedef struct pattern {
    char *dir, *pre, *post, *rest;
} pattern;

static void pattern_free(pattern *pt)
{
    free(pt->dir);
    free(pt->pre);
    free(pt->post);
    free(pt->rest);
    memset(pt, 0, sizeof *pt);
}

static bool pattern_get(const pp_plan *plan, pattern *pt)
{
    memset(pt, 0, sizeof *pt);
    if (!plan->checkpoint.enabled || !plan->checkpoint.path) return false;
    const char *path = plan->checkpoint.path;
    const char *tag = plan->epochs ? "{epoch}" : "{step}";
    const char *at = strstr(path, tag);
    if (!at) return false;
    const char *start = at, *end = strchr(at, '/'); /* the component holding the tag */
    while (start > path && start[-1] != '/') start--;
    if (!end) end = at + strlen(at);
    const char *slash = start > path ? start - 1 : NULL;
    pt->dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    pt->pre = strndup(start, (size_t)(at - start));
    pt->post = strndup(at + strlen(tag), (size_t)(end - at - strlen(tag)));
    pt->rest = strdup(end);
    if (pt->dir && pt->pre && pt->post && pt->rest) return true;
    pattern_free(pt);
    return false;
}

char *pp_cli_series_path(const pp_cli_series *s, int64_t steps)
{
    const pp_plan_checkpoint *c = &s->plan->checkpoint;
    if (!c->enabled) return NULL;
    const char *tag = s->plan->epochs ? "{epoch}" : "{step}";
    const char *at = strstr(c->path, tag);
    if (!at) return NULL;
    char number[48];
    if (!s->plan->epochs)
        snprintf(number, sizeof number, "%lld", (long long)steps);
    else if (steps % s->steps_per_epoch == 0)
        snprintf(number, sizeof number, "%lld", (long long)(steps / s->steps_per_epoch));
    else
        snprintf(number, sizeof number, "%lld+%lld", (long long)(steps / s->steps_per_epoch),
                 (long long)(steps % s->steps_per_epoch));
    size_t len = strlen(c->path) + sizeof number;
    char *path = malloc(len);
    if (path)
        snprintf(path, len, "%.*s%s%s", (int)(at - c->path), c->path, number, at + strlen(tag));
    return path;
}

static bool keep_file(pp_cli_series *s, const char *path, int64_t steps)
{
    pp_cli_ckpt_file *grown = realloc(s->kept, (size_t)(s->n + 1) * sizeof *grown);
    char *copy = strdup(path);
    if (!grown || !copy) {
        free(copy);
        if (grown) s->kept = grown;
        return false;
    }
    s->kept = grown;
    /* a file written anew under a name already counted replaces that entry */
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->kept[i].path, path) != 0) continue;
        free(s->kept[i].path);
        memmove(&s->kept[i], &s->kept[i + 1], (size_t)(s->n - i - 1) * sizeof *s->kept);
        s->n--;
        break;
    }
    s->kept[s->n++] = (pp_cli_ckpt_file){copy, steps};
    return true;
}

/* After file was removed: the folders the series' tag named for it, when
 * now empty (ck/{step}/model.safetensors: ck/4/). */
static void remove_empty_folders(const pp_plan *plan, const char *file)
{
    const char *at = strstr(plan->checkpoint.path, plan->epochs ? "{epoch}" : "{step}");
    const char *rest = at ? strchr(at, '/') : NULL;
    size_t lf = strlen(file), lr = rest ? strlen(rest) : 0;
    if (!rest || lf <= lr || strcmp(file + lf - lr, rest) != 0) return;
    char *buf = strdup(file);
    const size_t stop = lf - lr; /* where the tag's folder's name ends */
    for (char *slash = buf ? strrchr(buf, '/') : NULL; slash && (size_t)(slash - buf) >= stop;
         slash = strrchr(buf, '/')) {
        *slash = '\0';
        if (rmdir(buf) != 0) break; /* not empty: something else is there */
    }
    free(buf);
}

/* Drops the oldest files beyond keep (rank 0 deletes them). */
static void trim(pp_cli_series *s)
{
    int keep = s->plan->checkpoint.keep;
    while (keep > 0 && s->n > keep) {
        if (s->rank == 0 && unlink(s->kept[0].path) != 0 && errno != ENOENT)
            fprintf(stderr, "pipeline-run: cannot remove %s: %s\n", s->kept[0].path,
                    strerror(errno));
        else if (s->rank == 0)
            remove_empty_folders(s->plan, s->kept[0].path);
        free(s->kept[0].path);
        memmove(s->kept, s->kept + 1, (size_t)(--s->n) * sizeof *s->kept);
    }
}

pp_status pp_cli_series_save(pp_cli_series *s, pp_pipeline *p, const pp_pipeline_save_options *o,
                             const char **path_out, bool *written, pp_error *err)
{
    if (path_out) *path_out = NULL;
    *written = false;
    int64_t steps = pp_pipeline_steps_done(p);
    if (steps == s->last_steps && s->last_path) { /* this state is on disk already */
        if (path_out) *path_out = s->last_path;
        return PP_OK;
    }
    char *path = pp_cli_series_path(s, steps);
    if (!path) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    if (s->rank == 0) pp_cli_outputs_make_parent(path); /* {step} may name a folder */
    pp_pipeline_save_options so = *o;
    so.with_optimizer = true;
    so.cancelled = pp_cli_signal_again;
    pp_cli_signal_saving(true);
    pp_status st = pp_pipeline_save_with(p, path, &so, err);
    pp_cli_signal_saving(false);
    s->failed_in_place = st == PP_ERR_UNSYNCED; /* whole and in place: keep counts it */
    if (s->failed_in_place && keep_file(s, path, steps)) trim(s);
    if (st != PP_OK) {
        if (s->rank == 0 && !s->failed_in_place)
            remove_empty_folders(s->plan, path); /* ck/{step}/ made for nothing */
        free(path);
        return st;
    }
    if (!keep_file(s, path, steps)) {
        free(path);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    }
    free(s->last_path);
    s->last_path = path;
    s->last_steps = steps;
    trim(s);
    *written = true;
    if (path_out) *path_out = s->last_path;
    return PP_OK;
}

/* Whether name is pre + number + post, the number digits or (epochs) "E+S". */
static bool name_matches(const char *name, const char *pre, const char *post, bool epochs)
{
    size_t lp = strlen(pre), ls = strlen(post), ln = strlen(name);
    if (ln <= lp + ls || strncmp(name, pre, lp) != 0 || strcmp(name + ln - ls, post) != 0)
        return false;
    const char *c = name + lp, *end = name + ln - ls;
    bool digits = false, plus = false;
    for (; c < end; c++) {
        if (isdigit((unsigned char)*c)) {
            digits = true;
        } else if (*c == '+' && epochs && digits && !plus) {
            plus = true;
            digits = false;
        } else {
            return false;
        }
    }
    return digits;
}

static int by_steps(const void *a, const void *b)
{
    const pp_cli_ckpt_file *x = a, *y = b;
    if (x->steps != y->steps) return x->steps < y->steps ? -1 : 1;
    return strcmp(x->path, y->path);
}

static char *join(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    if (p) snprintf(p, len, "%s/%s", dir, name);
    return p;
}

bool pp_cli_series_scan(const pp_plan *plan, pp_cli_ckpt_file **files, int *n)
{
    *files = NULL;
    *n = 0;
    pattern pt;
    if (!pattern_get(plan, &pt)) return true;
    bool ok = true;
    DIR *d = opendir(pt.dir);
    struct dirent *e;
    while (ok && d && (e = readdir(d))) {
        if (!name_matches(e->d_name, pt.pre, pt.post, plan->epochs > 0)) continue;
        char *named = join(pt.dir, e->d_name);
        char *path = named && pt.rest[0] ? join(named, pt.rest + 1) : named;
        if (path != named) free(named);
        struct stat st; /* under a folder named by the tag: the file, when there */
        if (path && pt.rest[0] && (stat(path, &st) != 0 || !S_ISREG(st.st_mode))) {
            free(path);
            continue;
        }
        pp_cli_ckpt_file *grown = path ? realloc(*files, (size_t)(*n + 1) * sizeof *grown)
                                       : NULL;
        if (!grown) {
            free(path);
            ok = false;
            break;
        }
        *files = grown;
        pp_checkpoint_info info;
        pp_error err;
        int64_t steps = -1;
        if (pp_checkpoint_list(path, &info, &err) == PP_OK) {
            const char *v = pp_checkpoint_info_meta(&info, "pipeline-run.steps");
            steps = v ? atoll(v) : 0;
            pp_checkpoint_info_free(&info);
        }
        (*files)[(*n)++] = (pp_cli_ckpt_file){path, steps};
    }
    if (d) closedir(d);
    if (*n) qsort(*files, (size_t)*n, sizeof **files, by_steps);
    pattern_free(&pt);
    return ok;
}

static bool same_file(const char *a, const char *b)
{
    struct stat x, y;
    return a && b && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev &&
           x.st_ino == y.st_ino;
}

void pp_cli_series_adopt(pp_cli_series *s, const pp_cli_ckpt_file *files, int n, int64_t upto,
                         const char *resumed)
{
    for (int i = 0; i < n; i++) {
        if (files[i].steps < 0 || files[i].steps > upto) continue;
        if (!keep_file(s, files[i].path, files[i].steps)) return;
        if (files[i].steps == upto && same_file(files[i].path, resumed)) {
            free(s->last_path);
            s->last_path = strdup(files[i].path);
            s->last_steps = s->last_path ? upto : -1;
        }
    }
}

/* Whether name is base + ".tmp-" + six characters of mkstemp's alphabet. */
static bool is_temporary_of(const char *name, const char *base)
{
    size_t lb = strlen(base);
    if (strncmp(name, base, lb) != 0 || strncmp(name + lb, ".tmp-", 5) != 0) return false;
    const char *x = name + lb + 5;
    if (strlen(x) != 6) return false;
    for (; *x; x++)
        if (!isalnum((unsigned char)*x)) return false;
    return true;
}

static int remove_temp(const char *dir, const char *name, FILE *log)
{
    char *path = join(dir, name);
    if (!path) return 0;
    int removed = 0;
    if (unlink(path) == 0) {
        fprintf(log, "removed %s (the temporary file of a save that did not finish)\n", path);
        removed = 1;
    } else if (errno != ENOENT) {
        fprintf(log, "pipeline-run: cannot remove %s: %s\n", path, strerror(errno));
    }
    free(path);
    return removed;
}

/* Removes the temporaries of path's saves, beside it. */
static int clean_beside(const char *path, FILE *log)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    const char *base = slash ? slash + 1 : path;
    int removed = 0;
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (is_temporary_of(e->d_name, base)) removed += remove_temp(dir, e->d_name, log);
    if (d) closedir(d);
    free(dir);
    return removed;
}

int pp_cli_clean_temporaries(const pp_plan *plan, const char *save_path, FILE *log)
{
    int removed = 0;
    pattern pt;
    if (pattern_get(plan, &pt)) {
        DIR *d = opendir(pt.dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (pt.rest[0]) { /* a folder named by the tag: the temporaries in it */
                if (!name_matches(e->d_name, pt.pre, pt.post, plan->epochs > 0)) continue;
                char *named = join(pt.dir, e->d_name);
                char *path = named ? join(named, pt.rest + 1) : NULL;
                if (path) removed += clean_beside(path, log);
                free(named);
                free(path);
                continue;
            }
            const char *tmp = strstr(e->d_name, ".tmp-");
            if (!tmp) continue;
            char *base = strndup(e->d_name, (size_t)(tmp - e->d_name));
            if (base && name_matches(base, pt.pre, pt.post, plan->epochs > 0) &&
                is_temporary_of(e->d_name, base))
                removed += remove_temp(pt.dir, e->d_name, log);
            free(base);
        }
        if (d) closedir(d);
        pattern_free(&pt);
    }
    if (save_path && save_path[0]) removed += clean_beside(save_path, log);
    return removed;
}
