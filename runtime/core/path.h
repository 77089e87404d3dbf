/*
 * path.h - file helpers shared by the plan parser, checkpoint I/O and the
 * trace writer: the folder of a path, and atomic replacement of a file.
 */
#ifndef PP_PATH_H
#define PP_PATH_H

#include <stdio.h>

#include "status.h"

/* The folder part of path: "a/b.yaml" -> "a", "b.yaml" -> ".", "/b" -> "/".
 * Returns a malloc'ed string the caller frees, or NULL when out of memory. */
char *pp_path_dir(const char *path);

/* A file written under a temporary name beside its final path and moved into
 * place only when complete, so that readers see the old file or the whole new
 * one, never part of it (also after a crash: data and folder are fsynced).
 * Usage: pp_atomic_open, write to af.f, then pp_atomic_commit (on success)
 * or pp_atomic_abort (on any failure; removes the temporary). Every error
 * message starts with the path it concerns. Not thread-safe per object. */
typedef struct pp_atomic_file {
    FILE *f;      /* open for writing ("wb"), mode 0644 */
    char *path;   /* final path (copy) */
    char *tmp;    /* "PATH.tmp-XXXXXX" */
} pp_atomic_file;

pp_status pp_atomic_open(pp_atomic_file *af, const char *path, pp_error *err);
/* Flushes, fsyncs, renames over the final path and fsyncs its folder. The
 * object is released in every case. */
pp_status pp_atomic_commit(pp_atomic_file *af, pp_error *err);
/* Closes and removes the temporary file and releases the object. Safe on a
 * zeroed or already released object. */
void pp_atomic_abort(pp_atomic_file *af);

#endif
