/* path.c - file path helpers and atomic file replacement (path.h). */
#include "path.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

pp_status pp_atomic_open(pp_atomic_file *af, const char *path, pp_error *err)
{
    memset(af, 0, sizeof *af);
    af->path = strdup(path);
    af->tmp = malloc(strlen(path) + 16);
    if (!af->path || !af->tmp) {
        pp_atomic_abort(af);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", path);
    }
    sprintf(af->tmp, "%s.tmp-XXXXXX", path);
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
    pp_status s = PP_OK;
    if (ferror(af->f) || fflush(af->f) != 0 || fsync(fileno(af->f)) != 0)
        s = pp_error_set(err, PP_ERR_IO, "%s: cannot write or flush: %s", af->tmp,
                         strerror(errno));
    int rc = fclose(af->f);
    af->f = NULL;
    if (s == PP_OK && rc != 0)
        s = pp_error_set(err, PP_ERR_IO, "%s: cannot close: %s", af->tmp, strerror(errno));
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
    if (dfd < 0 || fsync(dfd) != 0)
        s = pp_error_set(err, PP_ERR_IO, "%s: cannot sync directory '%s': %s", af->path,
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
