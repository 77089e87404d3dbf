/*
 * tokens.h - token streams for language models: a file of token ids read as
 * windows of block_size + 1 tokens (a sample's inputs and, shifted by one,
 * its targets). Internal to runtime/io (data.c serves them as a data
 * source, the plan checks them when it is read).
 *
 * Formats:
 *   - llm.c's .bin: a header of 256 little-endian int32 (magic 20240520,
 *     version 1, the token count), then that many uint16 tokens;
 *   - nanoGPT's .bin: uint16 tokens, no header (a file whose first int32 is
 *     not a known magic);
 *   - text: any file, each byte one token (vocabulary 256), or, with GPT-2's
 *     tokenizer (io/bpe.h), the file's text in its tokens, tokenized when
 *     opened (the ids kept in memory, 2 bytes a token where every id fits in
 *     16 bits, else 4), or mapped from the cache of texts tokenized where it
 *     holds them (io/token_cache.h: a text of at least min_bytes, cached
 *     once tokenized).
 * The file is mapped read-only and validated whole when opened: the header
 * (a truncated file, another llm.c format), the count (at least one window),
 * every id below the vocabulary (the first one that is not is named by its
 * position).
 *
 * Samples: an epoch holds (count - 1) / T windows (T = block_size). Without
 * shuffling, window i of any epoch starts at token i * T; with shuffling at
 * hash(seed, epoch, i) mod (count - T), a pure function of (seed, epoch,
 * sample index), as nanoGPT draws its random offsets.
 *
 * Errors: PP_ERR_INPUT (malformed content) or PP_ERR_IO (the system refused),
 * with a message that starts with the path. Thread safety: after
 * pp_tokens_open everything is read-only; reads may run concurrently.
 */
#ifndef PP_IO_TOKENS_H
#define PP_IO_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/io/bpe.h"

#define PP_TOKENS_MAGIC 20240520     /* llm.c's GPT-2 token files */
#define PP_TOKENS_VERSION 1
#define PP_TOKENS_HEADER_INTS 256
#define PP_TOKENS_TEXT_VOCAB 256

typedef struct pp_tokens pp_tokens;

/* The cache of texts tokenized: where, from what size; and what an open
 * did with it. */
typedef struct pp_tokens_cache {
    const char *dir;   /* the cache folder (made when missing); NULL or "": none */
    int64_t min_bytes; /* the smallest text cached */
    int64_t max_bytes; /* the cache's size: after a file is written, the least recently
                          used others are evicted down to it (pp_cache_trim: not those
                          used in the last PP_CACHE_RECENT_S); 0: no limit */
    /* set by pp_tokens_open */
    bool from_cache;   /* the ids mapped from the cache */
    bool written;      /* the text tokenized and its ids cached */
    double seconds;    /* tokenizing, or checking and mapping the cache */
    char path[4096];   /* the cache file read or written ("": neither) */
    int evicted;           /* files evicted after the write */
    int64_t evicted_bytes; /* their sizes */
} pp_tokens_cache;

/* The text of the smallest size cached by the data sources: tokenizing a
 * megabyte takes about a tenth of a second on one core. */
#define PP_TOKENS_CACHE_MIN_BYTES (1 << 20)
/* The cache's size by default (PP_TOKEN_CACHE_MAX): 2 bytes a token, so the
 * ids of some 8 G tokens of text. */
#define PP_TOKENS_CACHE_MAX_BYTES (INT64_C(16) << 30)

/* The cache folder: PP_TOKEN_CACHE where set ("off": none, false), else
 * $XDG_CACHE_HOME/pipeline-run/tokens, else ~/.cache/pipeline-run/tokens. */
bool pp_tokens_cache_dir(char *dir, size_t n);

/* Opens path (text: bytes as tokens, or bpe's tokens where bpe is not NULL;
 * else a .bin of either kind) for windows of block_size + 1 tokens with ids
 * below vocab. cache: NULL for none; read and set only for a text through
 * bpe. */
pp_status pp_tokens_open(const char *path, bool text, pp_bpe *bpe, int vocab, int block_size,
                         pp_tokens_cache *cache, pp_tokens **out, pp_error *err);
void pp_tokens_close(pp_tokens *t);

/* What pp_tokens_open would refuse, as cheaply as can be told: a text
 * that bpe encodes is tokenized only when its size leaves its count in
 * doubt (fewer than (block_size + 1) times the longest token's bytes: the
 * ids are bpe's, all below its size, and each token holds at most that many
 * of the text's bytes); otherwise the file is only opened. Every other
 * file is opened as pp_tokens_open opens it. The plan's check, which
 * would otherwise tokenize a large text once more before the run does. */
pp_status pp_tokens_check(const char *path, bool text, pp_bpe *bpe, int vocab, int block_size,
                          pp_error *err);

/* Tokens in the stream; windows (samples) per epoch. */
int64_t pp_tokens_count(const pp_tokens *t);
int64_t pp_tokens_windows(const pp_tokens *t);

/* Sample i of epoch e (see the top): its block_size inputs and the
 * block_size targets after them, as int32. */
void pp_tokens_read(const pp_tokens *t, bool shuffle, uint64_t seed, int64_t epoch, int64_t i,
                    int32_t *inputs, int32_t *targets);

#endif
