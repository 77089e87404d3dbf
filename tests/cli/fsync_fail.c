/*
 * fsync_fail.c - an LD_PRELOAD interposer that makes one fsync fail, as a
 * failing disk does: of a folder after a save's rename (the file is then in
 * place, its folder's entry not yet on disk), or of a file being written.
 *
 *   LD_PRELOAD=./fsync_fail.so PP_FSYNC_FAIL_PATH=/abs/ck PP_FSYNC_FAIL_AT=3 pipeline-run ...
 *
 * The fsyncs of PP_FSYNC_FAIL_PATH (an absolute path, as /proc/self/fd names
 * it: a folder or a file) and of its temporary files (PATH.tmp-XXXXXX, as
 * pp_atomic_open names them) are counted; the PP_FSYNC_FAIL_AT-th (1-based)
 * returns -1 with errno EIO. Every other call goes to the next definition of
 * fsync (dlsym(RTLD_NEXT): libc's). Without both variables nothing fails.
 * The count is atomic: any thread may call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int g_seen;

int fsync(int fd)
{
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    const char *path = getenv("PP_FSYNC_FAIL_PATH"), *at = getenv("PP_FSYNC_FAIL_AT");
    if (path && at) {
        char link[64], target[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        const size_t len = strlen(path);
        if (n > 0) {
            target[n] = '\0';
            const bool ours = strncmp(target, path, len) == 0 &&
                              (target[len] == '\0' || strncmp(target + len, ".tmp-", 5) == 0);
            if (ours && atomic_fetch_add(&g_seen, 1) + 1 == atoi(at)) {
                errno = EIO;
                return -1;
            }
        }
    }
    return real ? real(fd) : (errno = ENOSYS, -1);
}
