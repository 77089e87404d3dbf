/*
 * idx.h - IDX files (the MNIST / Fashion-MNIST format), plain or
 * gzip-compressed, and whole-file reads for the data sources.
 *
 * An IDX file is a 4-byte magic (00 00 08 ND: unsigned bytes, ND dimensions),
 * ND big-endian 32-bit dimensions, then the elements. Limits, the same for
 * every reader: the first dimension (the sample count) is 1..2^32-1, every
 * other one 1..65535, and the data at most 2^46 bytes. A file whose first
 * two bytes are the gzip magic (1f 8b) is decompressed on the fly (zlib);
 * a truncated or corrupt stream is an error naming the file.
 *
 * Errors are PP_ERR_INPUT (malformed content) or PP_ERR_IO (the system
 * refused a read), with a message that starts with the path.
 */
#ifndef PP_IDX_H
#define PP_IDX_H

#include <stdint.h>

#include "runtime/core/status.h"

#define PP_IDX_MAX_DIMS 4

/* A whole IDX file in memory. */
typedef struct pp_idx {
    uint8_t *buf;          /* the decompressed file; owned */
    int64_t size;          /* bytes in buf */
    int nd;                /* dimensions */
    int64_t dims[PP_IDX_MAX_DIMS];
    const uint8_t *data;   /* the elements: buf + header, dims[0] * ... * dims[nd-1] bytes */
} pp_idx;

/* Reads path whole (decompressing gzip) into *buf (malloc'd, the caller
 * frees it) and *size. */
pp_status pp_file_read_all(const char *path, uint8_t **buf, int64_t *size, pp_error *err);

/* Reads and validates an IDX file of unsigned bytes with min_nd..max_nd
 * dimensions; what ("image", "label") names it in messages. The size must
 * match the header exactly. Release with pp_idx_free. */
pp_status pp_idx_read(const char *path, int min_nd, int max_nd, const char *what, pp_idx *out,
                      pp_error *err);
void pp_idx_free(pp_idx *idx);

/* Reads only the header: *nd and dims (PP_IDX_MAX_DIMS entries) of an IDX
 * file with min_nd..max_nd dimensions, under the same limits. */
pp_status pp_idx_peek(const char *path, int min_nd, int max_nd, const char *what, int *nd,
                      int64_t *dims, pp_error *err);

#endif
