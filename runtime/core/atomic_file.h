/*
 * atomic_file.h - a file written whole or not at all, as the library writes
 * its checkpoints, traces and caches, for an application's own outputs too.
 * Part of the public API (pipeline/pipeline_run.h).
 */
#ifndef PP_ATOMIC_FILE_H
#define PP_ATOMIC_FILE_H

#include <stdio.h>

#include "runtime/core/status.h"

/* A file written under a temporary name beside its final path and moved into
 * place only when complete, so that readers see the old file or the whole new
 * one, never part of it (also after a crash: data and folder are fsynced).
 * Usage: pp_atomic_open, write to af.f, then pp_atomic_commit (on success)
 * or pp_atomic_abort (on any failure; removes the temporary). Every error
 * message starts with the path it concerns. Not thread-safe per object.
 *
 * What is at path is never replaced by anything but a regular file:
 * - a symbolic link to a regular file stays: the file it leads to is
 *   replaced, beside it (`latest.safetensors -> ck-40.safetensors`);
 * - a path that is not a regular file (a device such as /dev/null, a FIFO,
 *   a socket), a link leading to one or to nothing, and a link to the very
 *   file of the process's stdout or stderr (/dev/stdout redirected to a
 *   file) are written through, in place (af.tmp NULL): no temporary, no
 *   rename, so that /dev/stdout stays a link even for root. Opening a FIFO
 *   waits for its reader, who sees the bytes as they come; a writer that
 *   seeks (a checkpoint's header) fails on what cannot seek, naming the
 *   path;
 * - a folder (or a link to one) is refused at once: "PATH: a folder, not a
 *   file". */
typedef struct pp_atomic_file {
    FILE *f;      /* open for writing ("wb"), mode 0644 */
    char *path;   /* final path (copy; a link's target when it is replaced) */
    char *tmp;    /* "PATH.tmp-XXXXXX"; NULL when written in place */
} pp_atomic_file;

/* PP_ERR_INVALID for a NULL or empty path. */
pp_status pp_atomic_open(pp_atomic_file *af, const char *path, pp_error *err);
/* The name of the file being written, for messages: the temporary, or the
 * path itself when written in place. */
const char *pp_atomic_name(const pp_atomic_file *af);
/* Flushes, fsyncs, renames over the final path and fsyncs its folder. The
 * object is released in every case. PP_ERR_UNSYNCED when only the folder's
 * sync failed: the new file is whole and in place (readers see it), but its
 * name may not survive a crash; PP_ERR_IO when the file could not be
 * written, synced or renamed: what was at the path is as it was (written
 * in place, a device or FIFO: what was written reached it). PP_ERR_INVALID
 * on an object not open (zeroed, committed or abandoned already). */
pp_status pp_atomic_commit(pp_atomic_file *af, pp_error *err);
/* Closes and removes the temporary file and releases the object. Safe on a
 * zeroed or already released object. */
void pp_atomic_abort(pp_atomic_file *af);

#endif
