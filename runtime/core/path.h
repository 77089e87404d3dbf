/*
 * path.h - file helpers shared by the plan parser, checkpoint I/O, the
 * trace writer and the data caches: the folder of a path, atomic replacement
 * of a file, and the caches' folder.
 */
#ifndef PP_PATH_H
#define PP_PATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "atomic_file.h"
#include "status.h"

/* The folder part of path: "a/b.yaml" -> "a", "b.yaml" -> ".", "/b" -> "/".
 * Returns a malloc'ed string the caller frees, or NULL when out of memory. */
char *pp_path_dir(const char *path);

/* Files written whole (pp_atomic_open ...): runtime/core/atomic_file.h. */

/* A cache's folder: the environment variable env where set ("off": no
 * cache, false), else $XDG_CACHE_HOME/pipeline-run/SUB, else
 * ~/.cache/pipeline-run/SUB (false without HOME either). */
bool pp_cache_dir(const char *env, const char *sub, char *dir, size_t n);
/* mkdir -p: each missing folder of dir made (0755); failures are left to
 * the file written there next to report. */
void pp_make_dirs(const char *dir);

/* What pp_cache_trim removed. */
typedef struct pp_cache_trimmed {
    int files;               /* cache files evicted */
    int64_t bytes;           /* their sizes */
    int temporaries;         /* stale temporary files removed */
    int64_t temporary_bytes; /* their sizes */
} pp_cache_trimmed;

/* A temporary file of pp_atomic_open's in a cache folder, unchanged for this
 * long, is a write that died with its process. */
#define PP_CACHE_TEMPORARY_S 3600
/* A cache file used this recently may belong to a run under way (a text and
 * its test set, read one after the other): never evicted. */
#define PP_CACHE_RECENT_S 600

/* Bounds a cache folder: of the regular files in dir whose names end in
 * suffix, the least recently modified are removed, one at a time, until those
 * left (keep among them) total at most max_bytes; keep (a path in dir, or
 * NULL) and the files modified in the last PP_CACHE_RECENT_S are never
 * removed, however large (the folder then stays above max_bytes until they
 * age). A cache marks a file it reads as used by its modification time
 * (futimens). Temporary files of those names (pp_atomic_open's
 * "NAME.tmp-XXXXXX") unchanged for PP_CACHE_TEMPORARY_S are removed too,
 * whatever max_bytes. Best effort: a file that cannot be read or removed is
 * left (another process may be removing it too). */
pp_cache_trimmed pp_cache_trim(const char *dir, const char *suffix, int64_t max_bytes,
                               const char *keep);

#endif
