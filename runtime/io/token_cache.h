/*
 * token_cache.h - the cache of texts tokenized (internal to runtime/io:
 * tokens.c reads a text through GPT-2's tokenizer once, and from then on
 * maps its ids from here).
 *
 * One file per text and tokenizer, in the cache folder (pp_tokens_cache_dir),
 * named after the XXH3-64 of the text's real path xor the tokenizer's
 * fingerprint. The file is an llm.c token file (a header of 256 int32:
 * magic 20240520, version 1, the count; then the ids as uint16), whose
 * header also holds, from its fourth int32 on, a tag, this cache's version,
 * the text's size and XXH3-64, the tokenizer's fingerprint and the ids'
 * XXH3-64. It is read only where all of them hold for the text at hand, so
 * an edited text, another tokenizer (its tables, its special tokens, the
 * cache's version or the encoder's ids) or a damaged file is tokenized
 * again and the file replaced. Written atomically (pp_atomic_open); a cache that
 * cannot be written is skipped. A file read is marked used (its modification
 * time), which is what the cache's bound (pp_cache_trim, called by tokens.c
 * after a write) evicts by.
 */
#ifndef PP_IO_TOKEN_CACHE_H
#define PP_IO_TOKEN_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/io/bpe.h"

/* What the cache is asked for: the text and the tokenizer, and the file. */
typedef struct pp_token_cache_key {
    uint64_t text_bytes, text_sum; /* the text's size and XXH3-64 */
    uint64_t fingerprint;          /* the tokenizer's (pp_token_cache_fingerprint) */
    char path[4096];               /* the cache file */
} pp_token_cache_key;

/* The tokenizer's fingerprint: the cache's version, the vocabulary's
 * bytes, the merges in rank order, the special tokens read as themselves
 * and the ids of a probe text of many kinds of character (so an encoder
 * whose ids changed gives another); 0 where memory ran out (no cache). */
uint64_t pp_token_cache_fingerprint(const pp_bpe *b);

/* The key of text[0, len) at real_path through a tokenizer of that
 * fingerprint, its file in dir. */
void pp_token_cache_key_of(const char *dir, const char *real_path, const void *text, size_t len,
                           uint64_t fingerprint, pp_token_cache_key *key);

/* The cache file of key mapped read-only (*map, *map_bytes; the ids at
 * *tokens, *count of them) where it is whole and of that text and tokenizer;
 * false (nothing mapped) otherwise. */
bool pp_token_cache_read(const pp_token_cache_key *key, void **map, size_t *map_bytes,
                         const uint16_t **tokens, int64_t *count);

/* tokens[0, count) written as the cache file of key (its folder made where
 * missing); false where it could not be (count above INT32_MAX, which an
 * llm.c header cannot count, or the system refused). */
bool pp_token_cache_write(const pp_token_cache_key *key, const uint16_t *tokens, int64_t count);

#endif
