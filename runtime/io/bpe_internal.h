/*
 * bpe_internal.h - the tokenizer's tables and a thread's work (internal to
 * runtime/io: bpe.c reads vocab.json and merges.txt and encodes a span of a
 * text; bpe_json.c reads Hugging Face's tokenizer.json into the same
 * tables; bpe_threads.c cuts a text into spans and runs them on threads).
 */
#ifndef PP_IO_BPE_INTERNAL_H
#define PP_IO_BPE_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/thread_pool.h"
#include "runtime/io/bpe.h"

/* Pieces of up to SHORT_PIECE bytes merge by OpenAI's loop (each pass finds
 * the lowest rank among the pairs); longer ones by a heap of pairs, the
 * same merges in O(n log n). */
enum { CACHE_SLOTS = 1 << 16, CACHE_PIECE_MAX = 64, SHORT_PIECE = 32 };

typedef struct heap_entry {
    int32_t rank, pos; /* a pair's rank; its left symbol's place in the piece */
} heap_entry;

typedef struct merge_slot {
    uint64_t key;   /* (left id + 1) << 32 | (right id + 1); 0 empty */
    int32_t rank;   /* its line among the merges, 0 first */
    int32_t merged; /* the id of left's bytes then right's */
} merge_slot;

typedef struct cache_slot {
    uint64_t hash;           /* 0 empty */
    uint32_t key_len, n_ids; /* the piece's bytes; its ids */
    size_t key_off, ids_off; /* into cache_bytes, cache_ids */
} cache_slot;

/* One thread's scratch and cache while encoding. */
typedef struct bpe_work {
    pcre2_match_data *md;
    int32_t *sym;            /* a piece's symbols while merging */
    size_t sym_cap;
    int32_t *next, *prev;    /* long pieces: the symbols as a list (-1 ends; sym -1: gone) */
    heap_entry *heap, *pending;
    size_t long_cap;
    cache_slot *cache;       /* pieces already encoded */
    int cache_used;
    char *cache_bytes;
    size_t cache_bytes_len, cache_bytes_cap;
    int32_t *cache_ids;
    size_t cache_ids_len, cache_ids_cap;
    char pad[64]; /* no cache line shared with the next thread's work */
} bpe_work;

struct pp_bpe {
    int size;                /* the largest id + 1 */
    char *blob;              /* every token's bytes */
    size_t *off;             /* token id's bytes at blob + off[id]; */
    uint32_t *len;           /* len[id] of them; UINT32_MAX: no token */
    int32_t *by_bytes;       /* ids hashed by their bytes (open addressing), -1 empty */
    size_t by_bytes_mask;
    int32_t byte_id[256];    /* each byte's own token */
    merge_slot *merges;      /* pairs hashed (open addressing) */
    size_t merges_mask;
    int n_merges;
    int32_t *special;        /* with pp_bpe_use_special: the special tokens */
    int32_t *added;          /* tokenizer.json's added tokens */
    int n_added;             /* how many; -1 from vocab.json (none read) */
    int n_special;
    pcre2_code *re;          /* read-only once compiled: shared by the threads */
    bpe_work *work;          /* work[0] the caller's, work[k] pool worker k's */
    int n_work;              /* set up (work[0] always) */
    int threads;             /* pp_bpe_set_threads */
    size_t span;             /* the least bytes a thread's span holds */
    pp_thread_pool *pool;    /* threads - 1 workers, started by the first long text */
    char *scratch;           /* while the merges are read */
    size_t scratch_cap;
};

/* Opening, in this order: pp_bpe_new, the vocabulary (pp_bpe_vocab_from_json),
 * the merges one by one (pp_bpe_add_merge), then pp_bpe_ready; on any error
 * pp_bpe_close frees what was made. */
pp_status pp_bpe_new(pp_bpe **out, pp_error *err);
/* A JSON file read whole (PP_ERR_INPUT at FILE:LINE:COL where it is not
 * JSON or repeats a key). */
pp_status pp_bpe_load_json(const char *path, json_t **root, pp_error *err);
/* An object of token strings (GPT-2's byte alphabet) to ids; `what` starts
 * each error (the file, and the key within it). */
pp_status pp_bpe_vocab_from_json(pp_bpe *b, const json_t *vocab, const char *what,
                                 pp_error *err);
/* Where a merge was read: merges.txt's line (line > 0), or tokenizer.json's
 * model.merges[index]. */
typedef struct pp_bpe_at {
    const char *file;
    int line, index;
} pp_bpe_at;
/* The next merge (its rank: the merges before it), of two tokens in GPT-2's
 * byte alphabet that the vocabulary holds, as is their concatenation. */
pp_status pp_bpe_add_merge(pp_bpe *b, const char *left, const char *right, pp_bpe_at at,
                           pp_error *err);
/* The pattern compiled and the caller's work made. */
pp_status pp_bpe_ready(pp_bpe *b, pp_error *err);

/* A growable array of ids. */
typedef struct ids {
    int32_t *v;
    size_t n, cap;
} ids;

/* w's match data and cache (false: out of memory; pp_bpe_work_free frees
 * what was made). */
bool pp_bpe_work_init(const pp_bpe *b, bpe_work *w);
void pp_bpe_work_free(bpe_work *w);

/* Where special token k first starts in text[0, len) at or after at and
 * before `to`; SIZE_MAX where it does not. */
size_t pp_bpe_special_in(const pp_bpe *b, int k, const char *text, size_t len, size_t at,
                         size_t to);

/* The ids of text[from, to) (of text[0, len)) into o: the special tokens
 * that start in it cut it (the longest where two start at one place), the
 * text between them encoded apart; `to` starts a piece and no special
 * token stands across it; `after`: where the next special token after it
 * starts (len: none), the end of the text its last part is matched in. */
pp_status pp_bpe_encode_span(const pp_bpe *b, bpe_work *w, const char *text, size_t len,
                             size_t from, size_t to, size_t after, ids *o, const char *what,
                             pp_error *err);

#endif
