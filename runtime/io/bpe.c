/*
 * bpe.c - GPT-2's byte-level BPE (see io/bpe.h): the two files read into
 * tables of ids (a token's bytes, bytes to id, a pair of ids to its merge),
 * pieces cut by PCRE2, each piece merged by ids, pieces cached; a span of a
 * text encoded with one thread's work (bpe_threads.c runs the spans).
 */
#define _GNU_SOURCE /* memmem */
#include "runtime/io/bpe.h"
#include "runtime/io/bpe_internal.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
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

/* bpe_internal.h */
pp_status pp_bpe_vocab_from_json(pp_bpe *b, const json_t *root, const char *what, pp_error *err)
{
    if (!json_is_object(root) || json_object_size(root) == 0)
        return pp_error_set(err, PP_ERR_INPUT, "%s: not a tokenizer's vocabulary (a JSON object "
                            "of token strings to ids)", what);
    const char *key;
    json_t *v;
    size_t bytes = 0;
    int size = 0;
    json_object_foreach((json_t *)root, key, v) {
        if (!json_is_integer(v))
            return pp_error_set(err, PP_ERR_INPUT, "%s: token \"%.64s\": its id is not an "
                                "integer", what, key);
        const json_int_t id = json_integer_value(v);
        if (id < 0 || id > PP_BPE_MAX_ID)
            return pp_error_set(err, PP_ERR_INPUT, "%s: token \"%.64s\" has id %lld (ids are 0 "
                                "to %d)", what, key, (long long)id, PP_BPE_MAX_ID);
        if ((int)id >= size) size = (int)id + 1;
        bytes += strlen(key);
    }
    b->size = size;
    b->blob = malloc(bytes ? bytes : 1);
    b->off = calloc((size_t)size, sizeof *b->off);
    b->len = malloc((size_t)size * sizeof *b->len);
    b->by_bytes_mask = pow2_above(json_object_size(root)) - 1;
    b->by_bytes = malloc((b->by_bytes_mask + 1) * sizeof *b->by_bytes);
    if (!b->blob || !b->off || !b->len || !b->by_bytes)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
    for (int i = 0; i < size; i++) b->len[i] = UINT32_MAX;
    memset(b->by_bytes, 0xFF, (b->by_bytes_mask + 1) * sizeof *b->by_bytes);
    size_t at = 0;
    json_object_foreach((json_t *)root, key, v) {
        const int32_t id = (int32_t)json_integer_value(v);
        size_t n;
        uint32_t bad = 0xFFFD;
        if (alphabet_bytes(key, b->blob + at, &n, &bad) != 0)
            return pp_error_set(err, PP_ERR_INPUT, "%s: token \"%.64s\" (id %d) has U+%04X, a "
                                "character outside GPT-2's byte alphabet", what, key, (int)id,
                                (unsigned)bad);
        if (b->len[id] != UINT32_MAX)
            return pp_error_set(err, PP_ERR_INPUT, "%s: id %d is given to two tokens (\"%.64s\" "
                                "and another)", what, (int)id, key);
        if (n == 0) return pp_error_set(err, PP_ERR_INPUT, "%s: the empty token (id %d)", what,
                                        (int)id);
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
        if (b->byte_id[c] < 0)
            return pp_error_set(err, PP_ERR_INPUT, "%s: byte 0x%02X has no token of its own (a "
                                "byte-level vocabulary holds all 256)", what, c);
    }
    return PP_OK;
}

/* vocab.json: an object of token string to id. */
static pp_status read_vocab(pp_bpe *b, const char *path, pp_error *err)
{
    json_t *root;
    PP_TRY(pp_bpe_load_json(path, &root, err));
    const pp_status st = pp_bpe_vocab_from_json(b, root, path, err);
    json_decref(root);
    return st;
}

/* bpe_internal.h */
pp_status pp_bpe_load_json(const char *path, json_t **root, pp_error *err)
{
    *root = NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        return pp_error_set(err, errno == ENOENT || errno == EACCES ? PP_ERR_INPUT : PP_ERR_IO,
                            "%s: %s", path, strerror(errno));
    json_error_t je;
    *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!*root)
        return pp_error_set(err, PP_ERR_INPUT, "%s:%d:%d: %s", path, je.line, je.column,
                            je.text);
    return PP_OK;
}

static merge_slot *merge_at(const pp_bpe *b, int32_t left, int32_t right)
{
    const uint64_t key = (uint64_t)(left + 1) << 32 | (uint64_t)(right + 1);
    for (size_t i = mix64(key) & b->merges_mask;; i = (i + 1) & b->merges_mask)
        if (b->merges[i].key == key || b->merges[i].key == 0) return &b->merges[i];
}

/* Where a merge was read, for errors: "FILE:LINE" (merges.txt) or
 * "FILE: model.merges[K]" (tokenizer.json). */
static const char *merge_where(char *buf, size_t cap, pp_bpe_at at)
{
    if (at.line > 0) snprintf(buf, cap, "%s:%d", at.file, at.line);
    else snprintf(buf, cap, "%s: model.merges[%d]", at.file, at.index);
    return buf;
}

/* One token of a merge, as bytes (into scratch), to its id; -1 with err set. */
static int32_t merge_token(const pp_bpe *b, pp_bpe_at at, const char *tok, char *scratch,
                           pp_error *err)
{
    size_t n;
    uint32_t bad = 0xFFFD;
    char where[PP_ERROR_MSG_MAX / 2];
    const int r = alphabet_bytes(tok, scratch, &n, &bad);
    if (r == 2) {
        pp_error_set(err, PP_ERR_INPUT, "%s: not UTF-8 text",
                     merge_where(where, sizeof where, at));
        return -1;
    }
    if (r == 1) {
        pp_error_set(err, PP_ERR_INPUT, "%s: \"%.64s\" has U+%04X, a character outside "
                     "GPT-2's byte alphabet", merge_where(where, sizeof where, at), tok,
                     (unsigned)bad);
        return -1;
    }
    const int32_t id = id_of_bytes(b, scratch, n);
    if (id < 0)
        pp_error_set(err, PP_ERR_INPUT, "%s: \"%.64s\" is not a token of the vocabulary",
                     merge_where(where, sizeof where, at), tok);
    return id;
}

/* bpe_internal.h */
pp_status pp_bpe_add_merge(pp_bpe *b, const char *left_tok, const char *right_tok,
                           pp_bpe_at at, pp_error *err)
{
    const size_t need = strlen(left_tok) + strlen(right_tok) + 1;
    if (b->scratch_cap < need) {
        free(b->scratch);
        b->scratch_cap = 2 * need + 16;
        if (!(b->scratch = malloc(b->scratch_cap))) {
            b->scratch_cap = 0;
            return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
        }
    }
    const int32_t left = merge_token(b, at, left_tok, b->scratch, err);
    const int32_t right = left < 0 ? -1 : merge_token(b, at, right_tok, b->scratch, err);
    if (right < 0) return PP_ERR_INPUT;
    /* a token's bytes are no more than its characters */
    const size_t ln = b->len[left], rn = b->len[right];
    memcpy(b->scratch, b->blob + b->off[left], ln);
    memcpy(b->scratch + ln, b->blob + b->off[right], rn);
    const int32_t merged = id_of_bytes(b, b->scratch, ln + rn);
    if (merged < 0) {
        char where[PP_ERROR_MSG_MAX / 2];
        return pp_error_set(err, PP_ERR_INPUT, "%s: \"%.64s %.64s\" merges into a token the "
                            "vocabulary lacks", merge_where(where, sizeof where, at), left_tok,
                            right_tok);
    }
    if ((size_t)b->n_merges * 2 >= b->merges_mask) { /* grow: rehash */
        merge_slot *old = b->merges;
        const size_t old_n = b->merges_mask + 1;
        merge_slot *grown = calloc(old_n * 2, sizeof *grown);
        if (!grown) return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
        b->merges = grown;
        b->merges_mask = old_n * 2 - 1;
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
        s->rank = b->n_merges;
        s->merged = merged;
    }
    b->n_merges++;
    return PP_OK;
}

/* merges.txt: "#version..." lines, then a merge a line: two tokens and a
 * space between, most frequent first. */
static pp_status read_merges(pp_bpe *b, const char *path, pp_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return pp_error_set(err, errno == ENOENT || errno == EACCES ? PP_ERR_INPUT : PP_ERR_IO,
                            "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int lineno = 0;
    pp_status st = PP_OK;
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
        st = pp_bpe_add_merge(b, line, space + 1, (pp_bpe_at){path, lineno, 0}, err);
    }
    if (st == PP_OK && ferror(f))
        st = pp_error_set(err, PP_ERR_IO, "%s: %s", path, strerror(errno));
    free(line);
    fclose(f);
    return st;
}

/* bpe_internal.h */
bool pp_bpe_work_init(const pp_bpe *b, bpe_work *w)
{
    memset(w, 0, sizeof *w);
    w->md = pcre2_match_data_create_from_pattern(b->re, NULL);
    w->cache = calloc(CACHE_SLOTS, sizeof *w->cache);
    return w->md && w->cache;
}

void pp_bpe_work_free(bpe_work *w)
{
    pcre2_match_data_free(w->md);
    free(w->sym);
    free(w->next);
    free(w->prev);
    free(w->heap);
    free(w->pending);
    free(w->cache);
    free(w->cache_bytes);
    free(w->cache_ids);
}

/* bpe_internal.h */
pp_status pp_bpe_new(pp_bpe **out, pp_error *err)
{
    pp_bpe *b = calloc(1, sizeof *b);
    if (b) {
        b->merges_mask = 15;
        b->merges = calloc(16, sizeof *b->merges);
    }
    if (!b || !b->merges) {
        free(b);
        *out = NULL;
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
    }
    b->threads = 1;
    b->span = PP_BPE_SPAN_DEFAULT;
    b->n_added = -1;
    *out = b;
    return PP_OK;
}

/* bpe_internal.h */
pp_status pp_bpe_ready(pp_bpe *b, pp_error *err)
{
    free(b->scratch); /* the readers' */
    b->scratch = NULL;
    b->scratch_cap = 0;
    int errcode;
    PCRE2_SIZE at;
    b->re = pcre2_compile((PCRE2_SPTR)PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errcode, &at, NULL);
    if (b->re) (void)pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE); /* else interpreted */
    if (!b->re || !(b->work = calloc(1, sizeof *b->work)) || !pp_bpe_work_init(b, &b->work[0]))
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer's pattern)");
    b->n_work = 1;
    return PP_OK;
}

pp_status pp_bpe_open(const char *vocab_path, const char *merges_path, pp_bpe **out,
                      pp_error *err)
{
    *out = NULL;
    if (!vocab_path || !merges_path)
        return pp_error_set(err, PP_ERR_INVALID, "bpe: NULL path");
    pp_bpe *b;
    PP_TRY(pp_bpe_new(&b, err));
    pp_status st = read_vocab(b, vocab_path, err);
    if (st == PP_OK) st = read_merges(b, merges_path, err);
    if (st == PP_OK) st = pp_bpe_ready(b, err);
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
    pp_thread_pool_free(b->pool);
    for (int k = 0; k < b->n_work; k++) pp_bpe_work_free(&b->work[k]);
    if (b->work && b->n_work == 0) pp_bpe_work_free(&b->work[0]); /* open failed half way */
    free(b->work);
    pcre2_code_free(b->re);
    free(b->blob);
    free(b->off);
    free(b->len);
    free(b->by_bytes);
    free(b->merges);
    free(b->special);
    free(b->added);
    free(b->scratch);
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
static const merge_slot *pair_at(const pp_bpe *b, const bpe_work *w, int32_t pos)
{
    const int32_t r = pos >= 0 ? w->next[pos] : -1;
    if (r < 0) return NULL;
    const merge_slot *ms = merge_at(b, w->sym[pos], w->sym[r]);
    return ms->key ? ms : NULL;
}

/* A long piece's symbols (w->sym[0, n)) merged through a heap of its pairs
 * ordered by (rank, place): every pair of the lowest rank, left to right
 * (an occurrence overlapping one just merged is gone: its entry is stale),
 * the pairs those merges make held back until that rank is done, then the
 * next lowest: OpenAI's passes. The count of symbols left. */
static size_t merge_long(const pp_bpe *b, bpe_work *w, size_t n)
{
    int32_t *s = w->sym, *next = w->next, *prev = w->prev;
    size_t hn = 0, pn = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const merge_slot *ms = pair_at(b, w, (int32_t)i);
        if (ms) heap_push(w->heap, &hn, (heap_entry){ms->rank, (int32_t)i});
    }
    int32_t cur = -1;
    for (;;) {
        if (hn == 0 || w->heap[0].rank != cur) { /* this rank is done */
            for (size_t i = 0; i < pn; i++) heap_push(w->heap, &hn, w->pending[i]);
            pn = 0;
            if (hn == 0) break;
            cur = w->heap[0].rank;
        }
        const heap_entry e = heap_pop(w->heap, &hn);
        const merge_slot *ms = s[e.pos] < 0 ? NULL : pair_at(b, w, e.pos);
        if (!ms || ms->rank != e.rank) continue; /* stale */
        const int32_t r = next[e.pos];
        s[e.pos] = ms->merged;
        s[r] = -1;
        next[e.pos] = next[r];
        if (next[r] >= 0) prev[next[r]] = e.pos;
        const int32_t around[2] = {prev[e.pos], e.pos};
        for (int k = 0; k < 2; k++) {
            const merge_slot *mk = pair_at(b, w, around[k]);
            if (mk) w->pending[pn++] = (heap_entry){mk->rank, around[k]};
        }
    }
    size_t m = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) s[m++] = s[i];
    return m;
}

/* Merges piece p[0, n) into w->sym; the count of symbols left, -1 out of
 * memory. */
static int64_t merge_piece(const pp_bpe *b, bpe_work *w, const char *p, size_t n)
{
    if (w->sym_cap < n) {
        free(w->sym);
        w->sym_cap = n * 2;
        w->sym = malloc(w->sym_cap * sizeof *w->sym);
        if (!w->sym) {
            w->sym_cap = 0;
            return -1;
        }
    }
    int32_t *s = w->sym;
    for (size_t i = 0; i < n; i++) s[i] = b->byte_id[(unsigned char)p[i]];
    if (n > SHORT_PIECE) {
        if (w->long_cap < n) {
            free(w->next);
            free(w->prev);
            free(w->heap);
            free(w->pending);
            w->long_cap = n * 2;
            w->next = malloc(w->long_cap * sizeof *w->next);
            w->prev = malloc(w->long_cap * sizeof *w->prev);
            /* the heap: every pair at most once and two for each merge */
            w->heap = malloc(3 * w->long_cap * sizeof *w->heap);
            w->pending = malloc(2 * w->long_cap * sizeof *w->pending);
            if (!w->next || !w->prev || !w->heap || !w->pending) {
                w->long_cap = 0;
                return -1;
            }
        }
        return (int64_t)merge_long(b, w, n);
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
static bool encode_piece(const pp_bpe *b, bpe_work *w, const char *p, size_t n, ids *o)
{
    const bool cacheable = n <= CACHE_PIECE_MAX;
    uint64_t h = 0;
    cache_slot *slot = NULL;
    if (cacheable) {
        h = hash_bytes(p, n);
        for (size_t i = h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
            cache_slot *c = &w->cache[i];
            if (c->hash == 0) {
                slot = c;
                break;
            }
            if (c->hash == h && c->key_len == n && !memcmp(w->cache_bytes + c->key_off, p, n)) {
                if (!ids_reserve(o, c->n_ids)) return false;
                memcpy(o->v + o->n, w->cache_ids + c->ids_off, c->n_ids * sizeof *o->v);
                o->n += c->n_ids;
                return true;
            }
        }
    }
    const int64_t m = merge_piece(b, w, p, n);
    if (m < 0 || !ids_reserve(o, (size_t)m)) return false;
    memcpy(o->v + o->n, w->sym, (size_t)m * sizeof *o->v);
    o->n += m;
    /* cached while the table is at most half full (then lookups stay short) */
    if (slot && w->cache_used < CACHE_SLOTS / 2 &&
        grow((void **)&w->cache_bytes, &w->cache_bytes_cap, w->cache_bytes_len + n, 1) &&
        grow((void **)&w->cache_ids, &w->cache_ids_cap, w->cache_ids_len + (size_t)m,
             sizeof *w->cache_ids)) {
        memcpy(w->cache_bytes + w->cache_bytes_len, p, n);
        memcpy(w->cache_ids + w->cache_ids_len, w->sym, (size_t)m * sizeof *w->cache_ids);
        *slot = (cache_slot){.hash = h, .key_len = (uint32_t)n, .n_ids = (uint32_t)m,
                             .key_off = w->cache_bytes_len, .ids_off = w->cache_ids_len};
        w->cache_bytes_len += n;
        w->cache_ids_len += (size_t)m;
        w->cache_used++;
    }
    return true;
}

int pp_bpe_use_special(pp_bpe *b)
{
    free(b->special);
    b->special = NULL;
    b->n_special = 0;
    if (b->n_added >= 0) { /* tokenizer.json's added tokens */
        if (b->n_added == 0) return 0;
        if (!(b->special = malloc((size_t)b->n_added * sizeof *b->special))) return -1;
        memcpy(b->special, b->added, (size_t)b->n_added * sizeof *b->special);
        return b->n_special = b->n_added;
    }
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

/* bpe_internal.h */
size_t pp_bpe_special_in(const pp_bpe *b, int k, const char *text, size_t len, size_t at,
                         size_t to)
{
    const int32_t id = b->special[k];
    const size_t tl = b->len[id], hi = to + tl - 1 < len ? to + tl - 1 : len;
    const char *f = hi > at && hi - at >= tl ? memmem(text + at, hi - at, b->blob + b->off[id], tl)
                                             : NULL;
    return f ? (size_t)(f - text) : SIZE_MAX;
}

/* The ids of text[at, stop) into o, piece by piece, the pattern matched
 * against text[0, end) (end >= stop: the next special token, or the text's
 * end). Where stop < end, stop is a place where a piece starts (see the
 * top of the file): a piece found across it is a fault of ours, refused. */
static pp_status encode_text(const pp_bpe *b, bpe_work *w, const char *text, size_t at,
                             size_t stop, size_t end, ids *o, const char *what, pp_error *err)
{
    while (at < stop) {
        /* bytes that are not UTF-8 match nothing (PCRE2_MATCH_INVALID_UTF):
         * they are the gaps between the pattern's pieces, a piece each run */
        const int rc = pcre2_match(b->re, (PCRE2_SPTR)text, end, at, 0, w->md, NULL);
        size_t start = end, past = end;
        if (rc > 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
            start = ov[0];
            past = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return pp_error_set(err, PP_ERR_INTERNAL, "%s: the tokenizer's pattern at byte %zu: "
                                "%s", what, at, (char *)msg);
        }
        if (start < stop && past > stop)
            return pp_error_set(err, PP_ERR_INTERNAL, "%s: a piece of bytes %zu to %zu crosses "
                                "the cut between two threads' spans at byte %zu", what, start,
                                past, stop);
        if (start > stop) { /* no piece starts before stop: a gap of invalid bytes up to it */
            if (stop < end)
                return pp_error_set(err, PP_ERR_INTERNAL, "%s: bytes that are not UTF-8 cross "
                                    "the cut between two threads' spans at byte %zu", what, stop);
            start = past = stop;
        }
        if ((start > at && !encode_piece(b, w, text + at, start - at, o)) ||
            (past > start && !encode_piece(b, w, text + start, past - start, o)))
            return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizing %s)", what);
        at = past > at ? past : stop;
    }
    return PP_OK;
}

/* bpe_internal.h */
pp_status pp_bpe_encode_span(const pp_bpe *b, bpe_work *w, const char *text, size_t len,
                             size_t from, size_t to, size_t after, ids *o, const char *what,
                             pp_error *err)
{
    pp_status st = PP_OK;
    size_t at = from;
    /* each special token's next place at or after at, before to; SIZE_MAX none */
    size_t *next = NULL;
    if (b->n_special > 0 && !(next = malloc((size_t)b->n_special * sizeof *next)))
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizing %s)", what);
    for (int k = 0; k < b->n_special; k++)
        next[k] = pp_bpe_special_in(b, k, text, len, from, to);
    while (st == PP_OK && at < to) {
        size_t cut = SIZE_MAX, cut_len = 0; /* the first special token (the longest there) */
        int32_t cut_id = -1;
        for (int k = 0; k < b->n_special; k++) {
            if (next[k] != SIZE_MAX && next[k] < at)
                next[k] = pp_bpe_special_in(b, k, text, len, at, to);
            const size_t tl = b->len[b->special[k]];
            if (next[k] != SIZE_MAX && (next[k] < cut || (next[k] == cut && tl > cut_len))) {
                cut = next[k];
                cut_len = tl;
                cut_id = b->special[k];
            }
        }
        st = cut_id >= 0 ? encode_text(b, w, text, at, cut, cut, o, what, err)
                         : encode_text(b, w, text, at, to, after, o, what, err);
        if (st == PP_OK && cut_id >= 0) {
            if (!ids_reserve(o, 1)) {
                st = pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizing %s)", what);
            } else {
                o->v[o->n++] = cut_id;
            }
        }
        at = cut_id >= 0 ? cut + cut_len : to;
    }
    free(next);
    return st;
}
