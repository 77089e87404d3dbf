/*
 * path.h - file path helpers shared by the plan parser and checkpoint I/O.
 */
#ifndef PP_PATH_H
#define PP_PATH_H

/* The folder part of path: "a/b.yaml" -> "a", "b.yaml" -> ".", "/b" -> "/".
 * Returns a malloc'ed string the caller frees, or NULL when out of memory. */
char *pp_path_dir(const char *path);

#endif
