/*
 * image_index.h - the samples of an image folder as torchvision's
 * ImageFolder finds them (datasets/folder.py, find_classes and
 * make_dataset), and a cache of that index for large folders.
 *
 * Classes are the sorted names (byte order, which is Python's code-point
 * order for UTF-8 names) of the root's subfolders, links followed, labelled
 * 0..C-1. A class's samples are the files found by walking its folder
 * recursively (links followed: a folder reached by two links is walked
 * twice, as os.walk(followlinks=True) walks it; a link to a folder's own
 * ancestor, a loop, is not entered, where os.walk follows the loop until the
 * system refuses the path, 40 links deep, listing its files again each
 * time), visited as sorted(os.walk(...)) does:
 * folders by their whole path, files by name within a folder; a file is a
 * sample when its name ends, ignoring case, in one of torchvision's
 * IMG_EXTENSIONS: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp. Samples
 * are numbered in class order.
 *
 * Errors (PP_ERR_INPUT, the message starts with the root): a root that is
 * not a readable folder, a root with no class folder, a class with no
 * image ("class 'cat' has no image file (.jpg ...)"), a folder inside a
 * class that cannot be read (torchvision would skip it silently; here it
 * is an error, so that nothing is lost unseen), more than 2^31 - 1 samples.
 *
 * The cache: after a scan of at least `cache_min_files` samples the index is
 * written to the cache folder as one file named after the XXH3-64 of the
 * root's real path (written atomically, with a checksum); an open finds it
 * there and uses it when the root is the same and every folder of the walk
 * still has the modification time it had (adding, removing or renaming a
 * file changes its folder's time), and otherwise scans again and replaces
 * it. A damaged or foreign cache file is ignored (and replaced). The cache
 * folder is created when missing; a cache that cannot be written is skipped
 * silently (the index is right without it). The folder is bounded: after a
 * write, the least recently used other index files (a read marks its file
 * used) are evicted until the folder's index files fit max_bytes
 * (pp_cache_trim, runtime/core/path.h: never a file used in the last ten
 * minutes).
 *
 * Ownership: the index owns its strings; free with pp_image_index_free.
 * Thread safety: after open, every call may run on many threads at once.
 */
#ifndef PP_IO_IMAGE_INDEX_H
#define PP_IO_IMAGE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

/* The smallest folder whose index the plan and the pipeline cache. */
#define PP_IMAGE_INDEX_CACHE_MIN_FILES 10000
/* The cache folder's default bound (an index takes 8 bytes a file and its
 * relative path: ImageNet's training set's, 1.28 M files of 30-byte paths,
 * about 50 MB). */
#define PP_IMAGE_INDEX_CACHE_MAX_BYTES (INT64_C(1) << 30)

typedef struct pp_image_index pp_image_index;

/* Where an index is cached. */
typedef struct pp_image_index_cache {
    const char *dir;   /* the cache folder, or NULL for none */
    int64_t min_files; /* the smallest scan that is cached */
    int64_t max_bytes; /* the folder's bound, kept after each write; 0: none */
} pp_image_index_cache;

/* How an open went: from the cache or a scan, and the cache file (empty
 * when none was used or written). */
typedef struct pp_image_index_note {
    bool from_cache;
    bool cache_written;
    int evicted;           /* index files evicted after the write */
    int64_t evicted_bytes; /* and their sizes */
    double seconds;
    char cache_path[4096];
} pp_image_index_note;

/* Opens the index of root (a folder). cache: NULL for none. note may be
 * NULL. */
pp_status pp_image_index_open(const char *root, const pp_image_index_cache *cache,
                              pp_image_index **out, pp_image_index_note *note, pp_error *err);
void pp_image_index_free(pp_image_index *ix);

/* The default cache folder: PP_IMAGE_INDEX_CACHE when set ("off": none,
 * returns false), else $XDG_CACHE_HOME/pipeline-run/image-index, else
 * ~/.cache/pipeline-run/image-index. */
bool pp_image_index_cache_dir(char *dir, size_t n);

int64_t pp_image_index_size(const pp_image_index *ix);
int pp_image_index_classes(const pp_image_index *ix);
/* Class c's name (0 <= c < classes). */
const char *pp_image_index_class(const pp_image_index *ix, int c);
/* Sample i's label. */
int pp_image_index_label(const pp_image_index *ix, int64_t i);
/* Sample i's path relative to the root ("cat/a/1.jpg"). */
const char *pp_image_index_relpath(const pp_image_index *ix, int64_t i);
/* Sample i's full path into buf (root + "/" + relative path). */
const char *pp_image_index_path(const pp_image_index *ix, int64_t i, char *buf, size_t n);
/* The root's real path. */
const char *pp_image_index_root(const pp_image_index *ix);
/* Whether a file name ends in one of the image extensions. */
bool pp_image_index_is_image_name(const char *name);

#endif
