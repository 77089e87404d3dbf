/*
 * tokens.c - token streams (see io/tokens.h): a mapped file, validated at
 * open, read as windows.
 */
#include "runtime/io/tokens.h"

#include "runtime/core/clock.h"
#include "runtime/core/path.h"
#include "runtime/io/token_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* llm.c's header for Llama 3 (uint32 tokens): named when met */
#define LLAMA3_MAGIC 20240801

struct pp_tokens {
    void *map;             /* the file (text through a tokenizer: its cache file, or none) */
    size_t map_bytes;
    const uint8_t *bytes;  /* text: the tokens */
    const uint16_t *ids;   /* .bin, or a text's ids from the cache: the tokens */
    int32_t *owned;        /* text through a tokenizer: the tokens */
    uint16_t *owned16;     /* the same in 2 bytes each, where every id fits (GPT-2's) */
    int64_t count;
    int block;
};

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int64_t token_at(const pp_tokens *t, int64_t i)
{
    return t->owned16 ? t->owned16[i] : t->owned ? t->owned[i] : t->bytes ? t->bytes[i]
                                                                         : t->ids[i];
}

/* The header of a .bin: where the tokens start and how many (headerless:
 * the whole file). */
static pp_status read_header(const char *path, const uint8_t *p, size_t size, size_t *start,
                             int64_t *count, pp_error *err)
{
    int32_t h[3] = {0, 0, 0};
    if (size >= sizeof h) memcpy(h, p, sizeof h);
    if (h[0] == LLAMA3_MAGIC)
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: an llm.c token file of another model (magic %d, version %d: "
                            "uint32 tokens); GPT-2's (magic %d, version %d) are read",
                            path, h[0], h[1], PP_TOKENS_MAGIC, PP_TOKENS_VERSION);
    if (h[0] != PP_TOKENS_MAGIC) { /* nanoGPT's: uint16 tokens, no header */
        if (size % 2)
            return pp_error_set(err, PP_ERR_INPUT,
                                "%s: %zu bytes is not a whole number of uint16 tokens", path,
                                size);
        *start = 0;
        *count = (int64_t)(size / 2);
        return PP_OK;
    }
    const size_t header = PP_TOKENS_HEADER_INTS * sizeof(int32_t);
    if (size < header)
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: truncated llm.c header (%zu of its %zu bytes)", path, size,
                            header);
    if (h[1] != PP_TOKENS_VERSION)
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: llm.c token file version %d (version %d, uint16 tokens, is "
                            "read)",
                            path, h[1], PP_TOKENS_VERSION);
    if (h[2] < 0 || (uint64_t)h[2] * 2 != size - header)
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: the header counts %d tokens but the file holds %zu bytes of "
                            "tokens (%s)",
                            path, h[2], size - header,
                            (uint64_t)h[2] * 2 > size - header ? "truncated" : "trailing bytes");
    *start = header;
    *count = h[2];
    return PP_OK;
}

bool pp_tokens_cache_dir(char *dir, size_t n)
{
    return pp_cache_dir("PP_TOKEN_CACHE", "tokens", dir, n);
}

/* The ids of the mapped text (t->map) through bpe, the text let go: from
 * the cache where it holds them, else tokenized (in 2 bytes an id where the
 * vocabulary allows), and cached where the text is large enough. */
static pp_status tokenize(pp_tokens *t, const char *path, pp_bpe *bpe, pp_tokens_cache *cache,
                          pp_error *err)
{
    const double t0 = pp_now_s();
    const bool narrow = pp_bpe_size(bpe) <= 65536;
    pp_token_cache_key key = {0};
    bool cached = false;
    if (cache && cache->dir && cache->dir[0] && narrow &&
        t->map_bytes >= (size_t)(cache->min_bytes > 0 ? cache->min_bytes : 0)) {
        char *real = realpath(path, NULL);
        const uint64_t fp = real ? pp_token_cache_fingerprint(bpe) : 0;
        if (fp) {
            pp_token_cache_key_of(cache->dir, real, t->map, t->map_bytes, fp, &key);
            cached = true;
        }
        free(real);
    }
    void *ids_map = NULL;
    size_t ids_bytes = 0;
    if (cached &&
        pp_token_cache_read(&key, &ids_map, &ids_bytes, &t->ids, &t->count)) { /* mapped */
        cache->from_cache = true;
        snprintf(cache->path, sizeof cache->path, "%s", key.path);
    }
    pp_status st = PP_OK;
    if (!ids_map) {
        st = narrow ? pp_bpe_encode16(bpe, t->map, t->map_bytes, path, &t->owned16, &t->count, err)
                    : pp_bpe_encode(bpe, t->map, t->map_bytes, path, &t->owned, &t->count, err);
        if (st == PP_OK && cached && pp_token_cache_write(&key, t->owned16, t->count)) {
            cache->written = true;
            snprintf(cache->path, sizeof cache->path, "%s", key.path);
            const pp_cache_trimmed gone = pp_cache_trim(
                cache->dir, ".tokens", cache->max_bytes > 0 ? cache->max_bytes : INT64_MAX,
                key.path);
            cache->evicted = gone.files;
            cache->evicted_bytes = gone.bytes;
        }
    }
    if (t->map) munmap(t->map, t->map_bytes); /* the text */
    t->map = ids_map;
    t->map_bytes = ids_bytes;
    if (cache) cache->seconds = pp_now_s() - t0;
    return st;
}

pp_status pp_tokens_open(const char *path, bool text, pp_bpe *bpe, int vocab, int block_size,
                         pp_tokens_cache *cache, pp_tokens **out, pp_error *err)
{
    *out = NULL;
    if (cache) {
        cache->from_cache = cache->written = false;
        cache->seconds = 0;
        cache->path[0] = '\0';
        cache->evicted = 0;
        cache->evicted_bytes = 0;
    }
    if (!path || vocab < 1 || block_size < 1)
        return pp_error_set(err, PP_ERR_INVALID, "tokens: bad arguments");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pp_error_set(err, errno == ENOENT ? PP_ERR_INPUT : PP_ERR_IO, "%s: %s", path,
                            strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pp_error_set(err, PP_ERR_INPUT, "%s: not a regular file", path);
    }
    pp_tokens *t = calloc(1, sizeof *t);
    if (!t) {
        close(fd);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokens)");
    }
    t->block = block_size;
    t->map_bytes = (size_t)sb.st_size;
    if (t->map_bytes > 0) {
        t->map = mmap(NULL, t->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (t->map == MAP_FAILED) {
            t->map = NULL;
            close(fd);
            pp_tokens_close(t);
            return pp_error_set(err, PP_ERR_IO, "%s: cannot map the file: %s", path,
                                strerror(errno));
        }
    }
    close(fd);
    size_t start = 0;
    pp_status st = PP_OK;
    if (text && bpe) {
        st = tokenize(t, path, bpe, cache, err);
    } else if (text) {
        t->bytes = t->map;
        t->count = (int64_t)t->map_bytes;
    } else {
        st = read_header(path, t->map, t->map_bytes, &start, &t->count, err);
        /* an empty file maps nothing: no pointer to offset */
        t->ids = t->map ? (const uint16_t *)((const uint8_t *)t->map + start) : NULL;
    }
    if (st == PP_OK && t->count < (int64_t)block_size + 1)
        st = pp_error_set(err, PP_ERR_INPUT,
                          "%s: %lld tokens are fewer than one window of block_size + 1 = %d",
                          path, (long long)t->count, block_size + 1);
    for (int64_t i = 0; st == PP_OK && i < t->count; i++)
        if (token_at(t, i) >= vocab)
            st = pp_error_set(err, PP_ERR_INPUT,
                              "%s: token %lld at position %lld is not below the vocabulary "
                              "size %d",
                              path, (long long)token_at(t, i), (long long)i, vocab);
    if (st != PP_OK) {
        pp_tokens_close(t);
        return st;
    }
    *out = t;
    return PP_OK;
}

pp_status pp_tokens_check(const char *path, bool text, pp_bpe *bpe, int vocab, int block_size,
                          pp_error *err)
{
    if (text && bpe && path && block_size > 0) {
        size_t longest = 1, len;
        for (int32_t id = 0; id < pp_bpe_size(bpe); id++)
            if (pp_bpe_token(bpe, id, &len) && len > longest) longest = len;
        const int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat sb;
        if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && pp_bpe_size(bpe) <= vocab &&
            (uint64_t)sb.st_size / longest >= (uint64_t)block_size + 1) {
            close(fd);
            return PP_OK; /* at least block_size + 1 tokens, every id below vocab */
        }
        if (fd >= 0) close(fd);
    }
    pp_tokens *t;
    PP_TRY(pp_tokens_open(path, text, bpe, vocab, block_size, NULL, &t, err));
    pp_tokens_close(t);
    return PP_OK;
}

void pp_tokens_close(pp_tokens *t)
{
    if (!t) return;
    if (t->map) munmap(t->map, t->map_bytes);
    free(t->owned);
    free(t->owned16);
    free(t);
}

int64_t pp_tokens_count(const pp_tokens *t)
{
    return t->count;
}

int64_t pp_tokens_windows(const pp_tokens *t)
{
    return (t->count - 1) / t->block;
}

void pp_tokens_read(const pp_tokens *t, bool shuffle, uint64_t seed, int64_t epoch, int64_t i,
                    int32_t *inputs, int32_t *targets)
{
    const int64_t span = t->count - t->block; /* starts 0 .. span - 1 leave a whole window */
    const int64_t start =
        shuffle ? (int64_t)(mix(mix(mix(seed) ^ (uint64_t)epoch) ^ (uint64_t)i) % (uint64_t)span)
                : i * t->block;
    for (int k = 0; k < t->block; k++) {
        inputs[k] = (int32_t)token_at(t, start + k);
        targets[k] = (int32_t)token_at(t, start + k + 1);
    }
}
