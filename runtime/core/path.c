/* path.c - file path helpers and atomic file replacement (path.h). */
#include "path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char *pp_path_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

/* Whether path's file (links followed) is the one fd writes to. */
static bool same_file_as_fd(const struct stat *st, int fd)
{
    struct stat o;
    return fstat(fd, &o) == 0 && o.st_dev == st->st_dev && o.st_ino == st->st_ino;
}

/* How path is written (path.h): through, in place (*direct), or replaced
 * at *target (malloc'ed: path itself, or the regular file a link leads to). */
static pp_status atomic_target(const char *path, bool *direct, char **target, pp_error *err)
{
    struct stat l, st;
    *direct = false;
    *target = NULL;
    const bool there = lstat(path, &l) == 0, leads = there && stat(path, &st) == 0;
    if (!there || S_ISREG(l.st_mode)) { /* nothing there, or a file */
        *target = strdup(path);
    } else if (leads && S_ISDIR(st.st_mode)) {
        return pp_error_set(err, PP_ERR_IO, "%s: a folder, not a file", path);
    } else if (!S_ISLNK(l.st_mode) || !leads || !S_ISREG(st.st_mode) ||
               same_file_as_fd(&st, STDOUT_FILENO) || same_file_as_fd(&st, STDERR_FILENO)) {
        *direct = true; /* a device, FIFO or socket, a link to one, to nothing or to stdout */
        *target = strdup(path);
    } else if (!(*target = realpath(path, NULL))) { /* a link to a regular file */
        return pp_error_set(err, PP_ERR_IO, "%s: cannot resolve the link: %s", path,
                            strerror(errno));
    }
    if (!*target) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", path);
    return PP_OK;
}

pp_status pp_atomic_open(pp_atomic_file *af, const char *path, pp_error *err)
{
    memset(af, 0, sizeof *af);
    if (!path || !*path)
        return pp_error_set(err, PP_ERR_INVALID, "pp_atomic_open: no path (%s)",
                            path ? "empty" : "NULL");
    bool direct;
    PP_TRY(atomic_target(path, &direct, &af->path, err));
    if (direct) {
        if (!(af->f = fopen(path, "wb"))) {
            pp_status s = pp_error_set(err, PP_ERR_IO, "%s: cannot open for writing: %s", path,
                                       strerror(errno));
            pp_atomic_abort(af);
            return s;
        }
        return PP_OK;
    }
    af->tmp = malloc(strlen(af->path) + 16);
    if (!af->tmp) {
        pp_atomic_abort(af);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", path);
    }
    sprintf(af->tmp, "%s.tmp-XXXXXX", af->path);
    int fd = mkstemp(af->tmp);
    if (fd < 0) {
        pp_status s = pp_error_set(err, PP_ERR_IO, "%s: cannot create a temporary file: %s",
                                   path, strerror(errno));
        free(af->tmp);
        af->tmp = NULL; /* nothing to remove */
        pp_atomic_abort(af);
        return s;
    }
    if (fchmod(fd, 0644) != 0 || !(af->f = fdopen(fd, "wb"))) {
        pp_status s = pp_error_set(err, PP_ERR_IO, "%s: %s", af->tmp, strerror(errno));
        close(fd);
        pp_atomic_abort(af);
        return s;
    }
    return PP_OK;
}

const char *pp_atomic_name(const pp_atomic_file *af)
{
    return af->tmp ? af->tmp : af->path;
}

void pp_atomic_abort(pp_atomic_file *af)
{
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    free(af->tmp);
    free(af->path);
    memset(af, 0, sizeof *af);
}

pp_status pp_atomic_commit(pp_atomic_file *af, pp_error *err)
{
    if (!af->f) /* never opened, or committed or abandoned already */
        return pp_error_set(err, PP_ERR_INVALID, "pp_atomic_commit: no file open");
    pp_status s = PP_OK;
    const char *name = pp_atomic_name(af);
    /* written in place: a device or FIFO need not sync (EINVAL), a file must */
    if (ferror(af->f) || fflush(af->f) != 0 ||
        (fsync(fileno(af->f)) != 0 && (af->tmp || errno != EINVAL)))
        s = pp_error_set(err, PP_ERR_IO, "%s: cannot write or flush: %s", name, strerror(errno));
    int rc = fclose(af->f);
    af->f = NULL;
    if (s == PP_OK && rc != 0)
        s = pp_error_set(err, PP_ERR_IO, "%s: cannot close: %s", name, strerror(errno));
    if (!af->tmp) { /* in place: nothing to rename */
        pp_atomic_abort(af);
        return s;
    }
    if (s == PP_OK && rename(af->tmp, af->path) != 0)
        s = pp_error_set(err, PP_ERR_IO, "%s: cannot rename the temporary file into place: %s",
                         af->path, strerror(errno));
    if (s != PP_OK) {
        pp_atomic_abort(af);
        return s;
    }
    free(af->tmp);
    af->tmp = NULL; /* renamed: nothing to remove */
    char *dir = pp_path_dir(af->path);
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd < 0 || fsync(dfd) != 0) /* the file is whole and in place */
        s = pp_error_set(err, PP_ERR_UNSYNCED, "%s: cannot sync directory '%s': %s", af->path,
                         dir ? dir : "?", strerror(errno));
    if (dfd >= 0) close(dfd);
    free(dir);
    pp_atomic_abort(af);
    return s;
}

bool pp_cache_dir(const char *env, const char *sub, char *dir, size_t n)
{
    const char *set = getenv(env);
    if (set && *set) {
        if (strcmp(set, "off") == 0) return false;
        snprintf(dir, n, "%s", set);
        return true;
    }
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(dir, n, "%s/pipeline-run/%s", xdg, sub);
    else if (home && *home)
        snprintf(dir, n, "%s/.cache/pipeline-run/%s", home, sub);
    else
        return false;
    return true;
}

void pp_make_dirs(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = '\0';
        mkdir(p, 0755);
        *c = '/';
    }
    mkdir(p, 0755);
}

/* A file of a cache folder: its name, size and last use. */
typedef struct cache_file {
    char *name;
    int64_t bytes;
    struct timespec used;
} cache_file;

static int least_recent_first(const void *a, const void *b)
{
    const cache_file *x = a, *y = b;
    if (x->used.tv_sec != y->used.tv_sec) return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    if (x->used.tv_nsec != y->used.tv_nsec) return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

static bool ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

/* NAME + suffix + ".tmp-XXXXXX": a temporary file of pp_atomic_open's */
static bool is_temporary(const char *name, const char *suffix)
{
    const size_t n = strlen(name), k = strlen(suffix), t = sizeof ".tmp-XXXXXX" - 1;
    return n > k + t && strncmp(name + n - t, ".tmp-", 5) == 0 &&
           strncmp(name + n - t - k, suffix, k) == 0;
}

pp_cache_trimmed pp_cache_trim(const char *dir, const char *suffix, int64_t max_bytes,
                               const char *keep)
{
    pp_cache_trimmed out = {0};
    DIR *d = opendir(dir);
    if (!d) return out;
    const char *keep_name = keep ? strrchr(keep, '/') : NULL;
    keep_name = keep_name ? keep_name + 1 : keep;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    cache_file *files = NULL;
    size_t n = 0, cap = 0;
    int64_t total = 0;
    for (struct dirent *e; (e = readdir(d));) {
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (is_temporary(e->d_name, suffix)) {
            if (now.tv_sec - sb.st_mtim.tv_sec > PP_CACHE_TEMPORARY_S &&
                unlinkat(dirfd(d), e->d_name, 0) == 0) {
                out.temporaries++;
                out.temporary_bytes += sb.st_size;
            }
            continue;
        }
        if (!ends_with(e->d_name, suffix)) continue;
        total += sb.st_size;
        if ((keep_name && strcmp(e->d_name, keep_name) == 0) ||
            now.tv_sec - sb.st_mtim.tv_sec < PP_CACHE_RECENT_S)
            continue;
        if (n == cap) {
            cache_file *more = realloc(files, (cap = cap ? 2 * cap : 16) * sizeof *more);
            if (!more) break;
            files = more;
        }
        files[n] = (cache_file){strdup(e->d_name), sb.st_size, sb.st_mtim};
        if (files[n].name) n++;
    }
    if (files) qsort(files, n, sizeof *files, least_recent_first);
    for (size_t i = 0; i < n; i++) {
        if (total > max_bytes && unlinkat(dirfd(d), files[i].name, 0) == 0) {
            total -= files[i].bytes;
            out.files++;
            out.bytes += files[i].bytes;
        }
        free(files[i].name);
    }
    free(files);
    closedir(d);
    return out;
}
