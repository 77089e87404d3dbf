/*
 * bpe.c - GPT-2's byte-level BPE (see io/bpe.h): the two files read into
 * tables of ids (a token's bytes, bytes to id, a pair of ids to its merge),
 * pieces cut by PCRE2, each piece merged by ids, pieces cached.
 */
#define _GNU_SOURCE /* memmem */
#include "runtime/io/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pre-tokenizer (OpenAI's encoder.py), case-sensitive as there,
 * with \s spelled out as Unicode's White_Space (tiktoken's and Hugging
 * Face's \s; PCRE2's own leaves out U+0085):
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
#define WS "\\t-\\r\\x{85}\\p{Z}"
static const char PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+"
                              "|[" WS "]+(?![^" WS "])|[" WS "]+";
#undef WS

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
    int32_t *special;        /* with pp_bpe_use_special: the <|...|> tokens */
    int n_special;
    pcre2_code *re;
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
};

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h | 1; /* never 0 (the cache's empty mark) */
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* GPT-2's byte alphabet: the printable bytes stand for themselves, the
 * other 68 (0x00-0x20, 0x7F-0xA0, 0xAD) for U+0100 on, in order. The byte
 * a character stands for, or -1. */
static int byte_of(uint32_t cp)
{
    if (cp < 256) return (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174
                             ? (int)cp : -1;
    const uint32_t k = cp - 256;
    return k < 33 ? (int)k : k < 67 ? (int)(127 + k - 33) : k == 67 ? 173 : -1;
}

/* The UTF-8 character at p (NUL-terminated) into *cp: its length, 0 where
 * p does not start one (a stray or missing continuation, an overlong form,
 * a surrogate, above U+10FFFF). */
static int utf8_char(const unsigned char *p, uint32_t *cp)
{
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    int k;
    uint32_t c;
    if (p[0] < 0x80) {
        *cp = p[0];
        return 1;
    }
    if ((p[0] & 0xE0) == 0xC0) k = 2, c = p[0] & 0x1F;
    else if ((p[0] & 0xF0) == 0xE0) k = 3, c = p[0] & 0x0F;
    else if ((p[0] & 0xF8) == 0xF0) k = 4, c = p[0] & 0x07;
    else return 0;
    for (int i = 1; i < k; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0; /* a NUL stops here too */
        c = c << 6 | (p[i] & 0x3F);
    }
    if (c < least[k] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return k;
}

/* s (NUL-terminated) in the byte alphabet into out (room for strlen(s)
 * bytes); 0 when done, 1 with *bad the first character outside it, 2 where
 * s is not UTF-8. */
static int alphabet_bytes(const char *s, char *out, size_t *n, uint32_t *bad)
{
    const unsigned char *p = (const unsigned char *)s;
    *n = 0;
    while (*p) {
        uint32_t cp;
        const int k = utf8_char(p, &cp);
        if (k == 0) return 2;
        p += k;
        const int b = byte_of(cp);
        if (b < 0) {
            *bad = cp;
            return 1;
        }
        out[(*n)++] = (char)b;
    }
    return 0;
}

static int32_t id_of_bytes(const pp_bpe *b, const char *p, size_t n)
{
    for (size_t i = hash_bytes(p, n) & b->by_bytes_mask;; i = (i + 1) & b->by_bytes_mask) {
        const int32_t id = b->by_bytes[i];
        if (id < 0) return -1;
        if (b->len[id] == n && memcmp(b->blob + b->off[id], p, n) == 0) return id;
    }
}

static size_t pow2_above(size_t n)
{
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

/* vocab.json: an object of token string to id. */
static pp_status read_vocab(pp_bpe *b, const char *path, pp_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return pp_error_set(err, errno == ENOENT || errno == EACCES ? PP_ERR_INPUT : PP_ERR_IO,
                            "%s: %s", path, strerror(errno));
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root)
        return pp_error_set(err, PP_ERR_INPUT, "%s:%d:%d: %s", path, je.line, je.column,
                            je.text);
    pp_status st = PP_OK;
    if (!json_is_object(root) || json_object_size(root) == 0) {
        st = pp_error_set(err, PP_ERR_INPUT, "%s: not a tokenizer's vocabulary (a JSON object "
                          "of token strings to ids)", path);
        goto out;
    }
    const char *key;
    json_t *v;
    size_t bytes = 0;
    int size = 0;
    json_object_foreach(root, key, v) {
        if (!json_is_integer(v)) {
            st = pp_error_set(err, PP_ERR_INPUT, "%s: token \"%.64s\": its id is not an integer",
                              path, key);
            goto out;
        }
        const json_int_t id = json_integer_value(v);
        if (id < 0 || id > PP_BPE_MAX_ID) {
            st = pp_error_set(err, PP_ERR_INPUT, "%s: token \"%.64s\" has id %lld (ids are 0 to "
                              "%d)", path, key, (long long)id, PP_BPE_MAX_ID);
            goto out;
        }
        if ((int)id >= size) size = (int)id + 1;
        bytes += strlen(key);
    }
    b->size = size;
    b->blob = malloc(bytes ? bytes : 1);
    b->off = calloc((size_t)size, sizeof *b->off);
    b->len = malloc((size_t)size * sizeof *b->len);
    b->by_bytes_mask = pow2_above(json_object_size(root)) - 1;
    b->by_bytes = malloc((b->by_bytes_mask + 1) * sizeof *b->by_bytes);
    if (!b->blob || !b->off || !b->len || !b->by_bytes) {
        st = pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
        goto out;
    }
    for (int i = 0; i < size; i++) b->len[i] = UINT32_MAX;
    memset(b->by_bytes, 0xFF, (b->by_bytes_mask + 1) * sizeof *b->by_bytes);
    size_t at = 0;
    json_object_foreach(root, key, v) {
        const int32_t id = (int32_t)json_integer_value(v);
        size_t n;
        uint32_t bad = 0xFFFD;
        if (alphabet_bytes(key, b->blob + at, &n, &bad) != 0) {
            st = pp_error_set(err, PP_ERR_INPUT, "%s: token \"%.64s\" (id %d) has U+%04X, a "
                              "character outside GPT-2's byte alphabet", path, key, (int)id,
                              (unsigned)bad);
            goto out;
        }
        if (b->len[id] != UINT32_MAX) {
            st = pp_error_set(err, PP_ERR_INPUT, "%s: id %d is given to two tokens (\"%.64s\" "
                              "and another)", path, (int)id, key);
            goto out;
        }
        if (n == 0) {
            st = pp_error_set(err, PP_ERR_INPUT, "%s: the empty token (id %d)", path, (int)id);
            goto out;
        }
        b->off[id] = at;
        b->len[id] = (uint32_t)n;
        at += n;
        /* distinct keys (jansson refuses a repeated one) are distinct bytes:
         * the alphabet is one to one */
        size_t i = hash_bytes(b->blob + b->off[id], n) & b->by_bytes_mask;
        while (b->by_bytes[i] >= 0) i = (i + 1) & b->by_bytes_mask;
        b->by_bytes[i] = id;
    }
    for (int c = 0; c < 256; c++) {
        const char byte = (char)c;
        b->byte_id[c] = id_of_bytes(b, &byte, 1);
        if (b->byte_id[c] < 0) {
            st = pp_error_set(err, PP_ERR_INPUT, "%s: byte 0x%02X has no token of its own (a "
                              "byte-level vocabulary holds all 256)", path, c);
            goto out;
        }
    }
out:
    json_decref(root);
    return st;
}

static merge_slot *merge_at(const pp_bpe *b, int32_t left, int32_t right)
{
    const uint64_t key = (uint64_t)(left + 1) << 32 | (uint64_t)(right + 1);
    for (size_t i = mix64(key) & b->merges_mask;; i = (i + 1) & b->merges_mask)
        if (b->merges[i].key == key || b->merges[i].key == 0) return &b->merges[i];
}

/* One token of a merge line, as bytes, to its id; -1 with err set. */
static int32_t merge_token(const pp_bpe *b, const char *path, int line, const char *tok,
                           char *scratch, pp_error *err)
{
    size_t n;
    uint32_t bad = 0xFFFD;
    const int r = alphabet_bytes(tok, scratch, &n, &bad);
    if (r == 2) {
        pp_error_set(err, PP_ERR_INPUT, "%s:%d: not UTF-8 text", path, line);
        return -1;
    }
    if (r == 1) {
        pp_error_set(err, PP_ERR_INPUT, "%s:%d: \"%.64s\" has U+%04X, a character outside "
                     "GPT-2's byte alphabet", path, line, tok, (unsigned)bad);
        return -1;
    }
    const int32_t id = id_of_bytes(b, scratch, n);
    if (id < 0)
        pp_error_set(err, PP_ERR_INPUT, "%s:%d: \"%.64s\" is not a token of the vocabulary",
                     path, line, tok);
    return id;
}

/* merges.txt: "#version..." lines, then a merge a line: two tokens and a
 * space between, most frequent first. */
static pp_status read_merges(pp_bpe *b, const char *path, pp_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return pp_error_set(err, errno == ENOENT || errno == EACCES ? PP_ERR_INPUT : PP_ERR_IO,
                            "%s: %s", path, strerror(errno));
    char *line = NULL, *scratch = NULL;
    size_t cap = 0, scratch_cap = 0;
    ssize_t got;
    int lineno = 0, count = 0;
    pp_status st = PP_OK;
    b->merges_mask = 15;
    b->merges = calloc(16, sizeof *b->merges);
    if (!b->merges) st = pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
    while (st == PP_OK && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if ((lineno == 1 && !strncmp(line, "#version", 8)) || n == 0) continue;
        if (strlen(line) != n) {
            st = pp_error_set(err, PP_ERR_INPUT, "%s:%d: a NUL byte", path, lineno);
            break;
        }
        char *space = strchr(line, ' ');
        if (!space || space == line || !space[1] || strchr(space + 1, ' ')) {
            st = pp_error_set(err, PP_ERR_INPUT, "%s:%d: \"%.64s\" is not a merge (two tokens "
                              "and one space between)", path, lineno, line);
            break;
        }
        *space = '\0';
        if (scratch_cap < n + 1) {
            free(scratch);
            scratch_cap = 2 * n + 16;
            scratch = malloc(scratch_cap);
            if (!scratch) {
                st = pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
                break;
            }
        }
        const int32_t left = merge_token(b, path, lineno, line, scratch, err);
        const int32_t right = left < 0 ? -1 : merge_token(b, path, lineno, space + 1, scratch,
                                                          err);
        if (right < 0) {
            st = PP_ERR_INPUT;
            break;
        }
        const size_t ln = b->len[left], rn = b->len[right];
        memcpy(scratch, b->blob + b->off[left], ln);
        memcpy(scratch + ln, b->blob + b->off[right], rn);
        const int32_t merged = id_of_bytes(b, scratch, ln + rn);
        if (merged < 0) {
            *space = ' ';
            st = pp_error_set(err, PP_ERR_INPUT, "%s:%d: \"%.64s\" merges into a token the "
                              "vocabulary lacks", path, lineno, line);
            break;
        }
        if ((size_t)count * 2 >= b->merges_mask) { /* grow: rehash */
            merge_slot *old = b->merges;
            const size_t old_n = b->merges_mask + 1;
            b->merges_mask = old_n * 2 - 1;
            b->merges = calloc(old_n * 2, sizeof *b->merges);
            if (!b->merges) {
                b->merges = old;
                b->merges_mask = old_n - 1;
                st = pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
                break;
            }
            for (size_t i = 0; i < old_n; i++)
                if (old[i].key) {
                    size_t j = mix64(old[i].key) & b->merges_mask;
                    while (b->merges[j].key) j = (j + 1) & b->merges_mask;
                    b->merges[j] = old[i];
                }
            free(old);
        }
        merge_slot *s = merge_at(b, left, right);
        if (s->key == 0) { /* a pair given twice keeps its first (lower) rank */
            s->key = (uint64_t)(left + 1) << 32 | (uint64_t)(right + 1);
            s->rank = count;
            s->merged = merged;
        }
        count++;
    }
    if (st == PP_OK && ferror(f))
        st = pp_error_set(err, PP_ERR_IO, "%s: %s", path, strerror(errno));
    b->n_merges = count;
    free(line);
    free(scratch);
    fclose(f);
    return st;
}

pp_status pp_bpe_open(const char *vocab_path, const char *merges_path, pp_bpe **out,
                      pp_error *err)
{
    *out = NULL;
    if (!vocab_path || !merges_path)
        return pp_error_set(err, PP_ERR_INVALID, "bpe: NULL path");
    pp_bpe *b = calloc(1, sizeof *b);
    if (!b) return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
    pp_status st = read_vocab(b, vocab_path, err);
    if (st == PP_OK) st = read_merges(b, merges_path, err);
    if (st == PP_OK) {
        int errcode;
        PCRE2_SIZE at;
        b->re = pcre2_compile((PCRE2_SPTR)PATTERN, PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errcode, &at,
                              NULL);
        if (b->re) {
            (void)pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE); /* else interpreted */
            b->md = pcre2_match_data_create_from_pattern(b->re, NULL);
        }
        b->cache = calloc(CACHE_SLOTS, sizeof *b->cache);
        if (!b->re || !b->md || !b->cache)
            st = pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer's pattern)");
    }
    if (st != PP_OK) {
        pp_bpe_close(b);
        return st;
    }
    *out = b;
    return PP_OK;
}

void pp_bpe_close(pp_bpe *b)
{
    if (!b) return;
    pcre2_match_data_free(b->md);
    pcre2_code_free(b->re);
    free(b->blob);
    free(b->off);
    free(b->len);
    free(b->by_bytes);
    free(b->merges);
    free(b->special);
    free(b->sym);
    free(b->next);
    free(b->prev);
    free(b->heap);
    free(b->pending);
    free(b->cache);
    free(b->cache_bytes);
    free(b->cache_ids);
    free(b);
}

int pp_bpe_size(const pp_bpe *b) { return b->size; }

int pp_bpe_merges(const pp_bpe *b) { return b->n_merges; }

const char *pp_bpe_token(const pp_bpe *b, int32_t id, size_t *len)
{
    if (id < 0 || id >= b->size || b->len[id] == UINT32_MAX) return NULL;
    *len = b->len[id];
    return b->blob + b->off[id];
}

/* Grows *p (of *cap elements of elem bytes) to hold need, doubling. */
static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* A growable array of ids. */
typedef struct ids {
    int32_t *v;
    size_t n, cap;
} ids;

static bool ids_reserve(ids *o, size_t more)
{
    return grow((void **)&o->v, &o->cap, o->n + more, sizeof *o->v);
}

static bool heap_less(heap_entry a, heap_entry b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(heap_entry *h, size_t *n, heap_entry e)
{
    size_t i = (*n)++;
    while (i > 0 && heap_less(e, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static heap_entry heap_pop(heap_entry *h, size_t *n)
{
    const heap_entry top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(h[c + 1], h[c])) c++;
        if (!heap_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* The merge of the pair at pos and the symbol after it, NULL for none. */
static const merge_slot *pair_at(const pp_bpe *b, int32_t pos)
{
    const int32_t r = pos >= 0 ? b->next[pos] : -1;
    if (r < 0) return NULL;
    const merge_slot *ms = merge_at(b, b->sym[pos], b->sym[r]);
    return ms->key ? ms : NULL;
}

/* A long piece's symbols (b->sym[0, n)) merged through a heap of its pairs
 * ordered by (rank, place): every pair of the lowest rank, left to right
 * (an occurrence overlapping one just merged is gone: its entry is stale),
 * the pairs those merges make held back until that rank is done, then the
 * next lowest: OpenAI's passes. The count of symbols left. */
static size_t merge_long(pp_bpe *b, size_t n)
{
    int32_t *s = b->sym, *next = b->next, *prev = b->prev;
    size_t hn = 0, pn = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const merge_slot *ms = pair_at(b, (int32_t)i);
        if (ms) heap_push(b->heap, &hn, (heap_entry){ms->rank, (int32_t)i});
    }
    int32_t cur = -1;
    for (;;) {
        if (hn == 0 || b->heap[0].rank != cur) { /* this rank is done */
            for (size_t i = 0; i < pn; i++) heap_push(b->heap, &hn, b->pending[i]);
            pn = 0;
            if (hn == 0) break;
            cur = b->heap[0].rank;
        }
        const heap_entry e = heap_pop(b->heap, &hn);
        const merge_slot *ms = s[e.pos] < 0 ? NULL : pair_at(b, e.pos);
        if (!ms || ms->rank != e.rank) continue; /* stale */
        const int32_t r = next[e.pos];
        s[e.pos] = ms->merged;
        s[r] = -1;
        next[e.pos] = next[r];
        if (next[r] >= 0) prev[next[r]] = e.pos;
        const int32_t around[2] = {prev[e.pos], e.pos};
        for (int k = 0; k < 2; k++) {
            const merge_slot *mk = pair_at(b, around[k]);
            if (mk) b->pending[pn++] = (heap_entry){mk->rank, around[k]};
        }
    }
    size_t m = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) s[m++] = s[i];
    return m;
}

/* Merges piece p[0, n) into b->sym; the count of symbols left, -1 out of
 * memory. */
static int64_t merge_piece(pp_bpe *b, const char *p, size_t n)
{
    if (b->sym_cap < n) {
        free(b->sym);
        b->sym_cap = n * 2;
        b->sym = malloc(b->sym_cap * sizeof *b->sym);
        if (!b->sym) {
            b->sym_cap = 0;
            return -1;
        }
    }
    int32_t *s = b->sym;
    for (size_t i = 0; i < n; i++) s[i] = b->byte_id[(unsigned char)p[i]];
    if (n > SHORT_PIECE) {
        if (b->long_cap < n) {
            free(b->next);
            free(b->prev);
            free(b->heap);
            free(b->pending);
            b->long_cap = n * 2;
            b->next = malloc(b->long_cap * sizeof *b->next);
            b->prev = malloc(b->long_cap * sizeof *b->prev);
            /* the heap: every pair at most once and two for each merge */
            b->heap = malloc(3 * b->long_cap * sizeof *b->heap);
            b->pending = malloc(2 * b->long_cap * sizeof *b->pending);
            if (!b->next || !b->prev || !b->heap || !b->pending) {
                b->long_cap = 0;
                return -1;
            }
        }
        return (int64_t)merge_long(b, n);
    }
    size_t m = n;
    while (m > 1) {
        int32_t best = INT32_MAX, left = -1, right = -1, merged = -1;
        for (size_t i = 0; i + 1 < m; i++) {
            const merge_slot *ms = merge_at(b, s[i], s[i + 1]);
            if (ms->key && ms->rank < best) {
                best = ms->rank;
                left = s[i];
                right = s[i + 1];
                merged = ms->merged;
            }
        }
        if (merged < 0) break;
        size_t j = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && s[i] == left && s[i + 1] == right) {
                s[j++] = merged;
                i += 2;
            } else {
                s[j++] = s[i++];
            }
        }
        m = j;
    }
    return (int64_t)m;
}

/* The piece's ids appended to o, from the cache where it is there. */
static bool encode_piece(pp_bpe *b, const char *p, size_t n, ids *o)
{
    const bool cacheable = n <= CACHE_PIECE_MAX;
    uint64_t h = 0;
    cache_slot *slot = NULL;
    if (cacheable) {
        h = hash_bytes(p, n);
        for (size_t i = h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
            cache_slot *c = &b->cache[i];
            if (c->hash == 0) {
                slot = c;
                break;
            }
            if (c->hash == h && c->key_len == n && !memcmp(b->cache_bytes + c->key_off, p, n)) {
                if (!ids_reserve(o, c->n_ids)) return false;
                memcpy(o->v + o->n, b->cache_ids + c->ids_off, c->n_ids * sizeof *o->v);
                o->n += c->n_ids;
                return true;
            }
        }
    }
    const int64_t m = merge_piece(b, p, n);
    if (m < 0 || !ids_reserve(o, (size_t)m)) return false;
    memcpy(o->v + o->n, b->sym, (size_t)m * sizeof *o->v);
    o->n += m;
    /* cached while the table is at most half full (then lookups stay short) */
    if (slot && b->cache_used < CACHE_SLOTS / 2 &&
        grow((void **)&b->cache_bytes, &b->cache_bytes_cap, b->cache_bytes_len + n, 1) &&
        grow((void **)&b->cache_ids, &b->cache_ids_cap, b->cache_ids_len + (size_t)m,
             sizeof *b->cache_ids)) {
        memcpy(b->cache_bytes + b->cache_bytes_len, p, n);
        memcpy(b->cache_ids + b->cache_ids_len, b->sym, (size_t)m * sizeof *b->cache_ids);
        *slot = (cache_slot){.hash = h, .key_len = (uint32_t)n, .n_ids = (uint32_t)m,
                             .key_off = b->cache_bytes_len, .ids_off = b->cache_ids_len};
        b->cache_bytes_len += n;
        b->cache_ids_len += (size_t)m;
        b->cache_used++;
    }
    return true;
}

int pp_bpe_use_special(pp_bpe *b)
{
    free(b->special);
    b->special = NULL;
    b->n_special = 0;
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t id = 0; id < b->size; id++) {
            const uint32_t len = b->len[id];
            const char *t = b->blob + b->off[id];
            if (len == UINT32_MAX || len < 5 || memcmp(t, "<|", 2) != 0 ||
                memcmp(t + len - 2, "|>", 2) != 0)
                continue;
            if (pass == 1) b->special[b->n_special++] = id;
            else n++;
        }
        if (pass == 0 && (n == 0 || !(b->special = malloc((size_t)n * sizeof *b->special))))
            return n == 0 ? 0 : -1;
    }
    return b->n_special;
}

/* Where special token k next stands in text[0, len) at or after at;
 * SIZE_MAX where it does not. */
static size_t special_at(const pp_bpe *b, int k, const char *text, size_t len, size_t at)
{
    const int32_t id = b->special[k];
    const size_t tl = b->len[id];
    const char *f = len - at >= tl ? memmem(text + at, len - at, b->blob + b->off[id], tl) : NULL;
    return f ? (size_t)(f - text) : SIZE_MAX;
}

/* The ids of text[at, end) into o, piece by piece. */
static pp_status encode_text(pp_bpe *b, const char *text, size_t at, size_t end, ids *o,
                             const char *what, pp_error *err)
{
    while (at < end) {
        /* bytes that are not UTF-8 match nothing (PCRE2_MATCH_INVALID_UTF):
         * they are the gaps between the pattern's pieces, a piece each run */
        const int rc = pcre2_match(b->re, (PCRE2_SPTR)text, end, at, 0, b->md, NULL);
        size_t start = end, stop = end;
        if (rc > 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md);
            start = ov[0];
            stop = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return pp_error_set(err, PP_ERR_INTERNAL, "%s: the tokenizer's pattern at byte %zu: "
                                "%s", what, at, (char *)msg);
        }
        if ((start > at && !encode_piece(b, text + at, start - at, o)) ||
            (stop > start && !encode_piece(b, text + start, stop - start, o)))
            return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizing %s)", what);
        at = stop > at ? stop : end;
    }
    return PP_OK;
}

pp_status pp_bpe_encode(pp_bpe *b, const char *text, size_t len, const char *what, int32_t **out,
                        int64_t *n, pp_error *err)
{
    *out = NULL;
    *n = 0;
    ids o = {0};
    pp_status st = PP_OK;
    size_t at = 0;
    /* special tokens cut the text; the parts between them are encoded apart */
    size_t *next = NULL; /* each special token's next place at or after at; SIZE_MAX none */
    if (b->n_special > 0 && !(next = malloc((size_t)b->n_special * sizeof *next)))
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizing %s)", what);
    for (int k = 0; k < b->n_special; k++) next[k] = special_at(b, k, text, len, 0);
    while (st == PP_OK && at < len) {
        size_t cut = len, cut_len = 0; /* the first special token (the longest there) */
        int32_t cut_id = -1;
        for (int k = 0; k < b->n_special; k++) {
            if (next[k] != SIZE_MAX && next[k] < at) next[k] = special_at(b, k, text, len, at);
            const size_t tl = b->len[b->special[k]];
            if (next[k] != SIZE_MAX && (next[k] < cut || (next[k] == cut && tl > cut_len))) {
                cut = next[k];
                cut_len = tl;
                cut_id = b->special[k];
            }
        }
        st = encode_text(b, text, at, cut, &o, what, err);
        if (st == PP_OK && cut_id >= 0) {
            if (!ids_reserve(&o, 1)) {
                st = pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizing %s)", what);
            } else {
                o.v[o.n++] = cut_id;
            }
        }
        at = cut_id >= 0 ? cut + cut_len : len;
    }
    free(next);
    if (st != PP_OK) {
        free(o.v);
        return st;
    }
    *out = o.v;
    *n = (int64_t)o.n;
    return PP_OK;
}
