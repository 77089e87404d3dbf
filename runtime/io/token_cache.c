/*
 * token_cache.c - the cache of texts tokenized (see token_cache.h).
 */
#include "runtime/io/token_cache.h"

#include "runtime/core/path.h"
#include "runtime/io/bpe_internal.h"
#include "runtime/io/checksum.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* llm.c's header, as tokens.c reads it (test_token_cache reads a cache file
 * there as a .bin) */
#define LLMC_MAGIC 20240520
#define LLMC_VERSION 1
#define LLMC_HEADER_INTS 256
#define CACHE_TAG 0x43545050 /* "PPTC" */
/* Raised whenever the ids a tokenizer gives may change (or the file's
 * layout): every file cached before is then tokenized again. */
#define CACHE_VERSION 1

/* The header's int32 slots after llm.c's three; each 64-bit value in two,
 * low half first. */
enum { H_TAG = 3, H_VERSION, H_TEXT_BYTES, H_TEXT_SUM = H_TEXT_BYTES + 2,
       H_FINGERPRINT = H_TEXT_SUM + 2, H_IDS_SUM = H_FINGERPRINT + 2 };

/* Every kind of character the pattern tells apart: contractions, letters
 * and digits of several scripts, punctuation, runs of spaces, tabs and
 * newlines, emoji, bytes that are no UTF-8, and GPT-2's special token. */
static const char probe[] =
    "Hello world, it's 42! I'm we'll they've you'd SHE'S   caf\xC3\xA9 na\xC3\xAFve "
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 "
    "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\t\tx\n\n  y "
    "3.14159 1,000,000 \xFF\xFE\x80 end.<|endoftext|>next\r\n  \n";

static void add64(pp_cksum_stream *s, uint64_t v) { pp_cksum_stream_add(s, &v, sizeof v); }

uint64_t pp_token_cache_fingerprint(const pp_bpe *b)
{
    pp_cksum_stream *s = pp_cksum_stream_new();
    int32_t *by_rank = calloc(b->n_merges > 0 ? (size_t)b->n_merges * 3 : 1, sizeof *by_rank);
    if (!s || !by_rank) {
        if (s) pp_cksum_stream_end(s);
        free(by_rank);
        return 0;
    }
    add64(s, CACHE_VERSION);
    add64(s, (uint64_t)b->size);
    for (int id = 0; id < b->size; id++) { /* each token's bytes (none: UINT32_MAX) */
        pp_cksum_stream_add(s, &b->len[id], sizeof b->len[id]);
        if (b->len[id] != UINT32_MAX) pp_cksum_stream_add(s, b->blob + b->off[id], b->len[id]);
    }
    for (size_t i = 0; b->merges && i <= b->merges_mask; i++) { /* the merges by rank */
        const merge_slot *m = &b->merges[i];
        if (!m->key || m->rank < 0 || m->rank >= b->n_merges) continue;
        by_rank[3 * m->rank] = (int32_t)(m->key >> 32);
        by_rank[3 * m->rank + 1] = (int32_t)(m->key & 0xffffffffu);
        by_rank[3 * m->rank + 2] = m->merged;
    }
    pp_cksum_stream_add(s, by_rank, (size_t)b->n_merges * 3 * sizeof *by_rank);
    add64(s, (uint64_t)b->n_special);
    pp_cksum_stream_add(s, b->special, (size_t)b->n_special * sizeof *b->special);
    ids o = {0};
    pp_error e;
    const bool probed = pp_bpe_encode_span(b, &b->work[0], probe, sizeof probe - 1, 0,
                                           sizeof probe - 1, sizeof probe - 1, &o, "probe",
                                           &e) == PP_OK;
    if (probed) {
        add64(s, o.n);
        pp_cksum_stream_add(s, o.v, o.n * sizeof *o.v);
    }
    free(o.v);
    free(by_rank);
    const uint64_t sum = pp_cksum_stream_end(s);
    return probed && sum ? sum : 0;
}

void pp_token_cache_key_of(const char *dir, const char *real_path, const void *text, size_t len,
                           uint64_t fingerprint, pp_token_cache_key *key)
{
    key->text_bytes = len;
    key->text_sum = pp_cksum_data(text, len);
    key->fingerprint = fingerprint;
    const uint64_t file = pp_cksum_data(real_path, strlen(real_path)) ^ fingerprint;
    snprintf(key->path, sizeof key->path, "%s/%016llx.tokens", dir, (unsigned long long)file);
}

static void put64(int32_t *h, int at, uint64_t v)
{
    h[at] = (int32_t)(uint32_t)(v & 0xffffffffu);
    h[at + 1] = (int32_t)(uint32_t)(v >> 32);
}

static uint64_t get64(const int32_t *h, int at)
{
    return (uint64_t)(uint32_t)h[at] | (uint64_t)(uint32_t)h[at + 1] << 32;
}

bool pp_token_cache_read(const pp_token_cache_key *key, void **map, size_t *map_bytes,
                         const uint16_t **tokens, int64_t *count)
{
    *map = NULL;
    const int fd = open(key->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat sb;
    const size_t header = LLMC_HEADER_INTS * sizeof(int32_t);
    void *m = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (size_t)sb.st_size >= header)
        m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) futimens(fd, NULL); /* used now: the last a full cache evicts */
    close(fd);
    if (m == MAP_FAILED) return false;
    const size_t bytes = (size_t)sb.st_size;
    int32_t h[LLMC_HEADER_INTS];
    memcpy(h, m, header);
    const uint16_t *v = (const uint16_t *)((const uint8_t *)m + header);
    const bool ok = h[0] == LLMC_MAGIC && h[1] == LLMC_VERSION && h[2] >= 0 &&
                    (size_t)h[2] * 2 == bytes - header && h[H_TAG] == CACHE_TAG &&
                    h[H_VERSION] == CACHE_VERSION &&
                    get64(h, H_TEXT_BYTES) == key->text_bytes &&
                    get64(h, H_TEXT_SUM) == key->text_sum &&
                    get64(h, H_FINGERPRINT) == key->fingerprint &&
                    get64(h, H_IDS_SUM) == pp_cksum_data(v, bytes - header);
    if (!ok) {
        munmap(m, bytes);
        return false;
    }
    *map = m;
    *map_bytes = bytes;
    *tokens = v;
    *count = h[2];
    return true;
}

bool pp_token_cache_write(const pp_token_cache_key *key, const uint16_t *tokens, int64_t count)
{
    if (count < 0 || count > INT32_MAX) return false;
    int32_t h[LLMC_HEADER_INTS] = {LLMC_MAGIC, LLMC_VERSION, (int32_t)count};
    h[H_TAG] = CACHE_TAG;
    h[H_VERSION] = CACHE_VERSION;
    put64(h, H_TEXT_BYTES, key->text_bytes);
    put64(h, H_TEXT_SUM, key->text_sum);
    put64(h, H_FINGERPRINT, key->fingerprint);
    put64(h, H_IDS_SUM, pp_cksum_data(tokens, (size_t)count * sizeof *tokens));
    char *dir = pp_path_dir(key->path);
    if (dir) pp_make_dirs(dir);
    free(dir);
    pp_atomic_file af;
    pp_error e;
    if (pp_atomic_open(&af, key->path, &e) != PP_OK) return false;
    if (fwrite(h, sizeof h, 1, af.f) != 1 ||
        (count > 0 && fwrite(tokens, sizeof *tokens, (size_t)count, af.f) != (size_t)count)) {
        pp_atomic_abort(&af);
        return false;
    }
    return pp_atomic_commit(&af, &e) == PP_OK;
}
