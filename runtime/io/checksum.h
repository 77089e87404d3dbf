/*
 * checksum.h - the integrity records of a checkpoint (io/ internal): XXH3
 * digests of tensor data and of the header, as the safetensors metadata
 * carries them, and the scan for values that are not finite.
 *
 * Metadata entries (all or none; io/checkpoint.h states the format):
 *   "checksum.<tensor name>": "xxh3-64:<16 lowercase hex digits>"
 *       XXH3-64 (seed 0) of the tensor's data bytes as stored;
 *   "checksum.__header__": the same form, over the header: every other
 *       metadata entry (key and value, sorted by key) and every tensor's
 *       name, dtype and shape (sorted by name), not the data offsets, so a
 *       file laid out anew by another writer still verifies.
 * Leaf of io/: calls nothing of checkpoint*.c. Functions are pure and
 * thread-safe.
 */
#ifndef PP_IO_CHECKSUM_H
#define PP_IO_CHECKSUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/io/checkpoint.h"

#define PP_CKSUM_PREFIX "checksum."          /* metadata key prefix */
#define PP_CKSUM_HEADER "checksum.__header__" /* the header's entry */
#define PP_CKSUM_TEXT_LEN 24                 /* "xxh3-64:" + 16 hex digits */

/* XXH3-64 of len bytes. */
uint64_t pp_cksum_data(const void *p, size_t len);

/* Incremental form of pp_cksum_data, for data written piece by piece. */
typedef struct pp_cksum_stream pp_cksum_stream;
pp_cksum_stream *pp_cksum_stream_new(void); /* NULL when out of memory */
void pp_cksum_stream_add(pp_cksum_stream *s, const void *p, size_t len);
uint64_t pp_cksum_stream_end(pp_cksum_stream *s); /* frees s */

/* The header digest. meta[0..n_meta) sorted by key (the "checksum.__header__"
 * entry, if there, is skipped); entries[0..n) sorted by name. */
uint64_t pp_cksum_header(const pp_checkpoint_meta *meta, size_t n_meta,
                         const pp_checkpoint_entry *entries, size_t n);

/* "xxh3-64:0123456789abcdef" into buf (at least PP_CKSUM_TEXT_LEN + 1 bytes). */
void pp_cksum_format(uint64_t v, char *buf);
/* Parses that form; false for anything else. */
bool pp_cksum_parse(const char *text, uint64_t *v);

/* Whether bytes of dtype t hold a NaN or an infinity (float dtypes only;
 * integers are always finite); *index is the first such element. */
bool pp_cksum_find_nonfinite(pp_dtype t, const void *p, size_t bytes, size_t *index);

#endif
