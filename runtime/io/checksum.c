/* checksum.c - XXH3 digests of checkpoint data and headers, finite scans (checksum.h). */
#include "runtime/io/checksum.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

struct pp_cksum_stream {
    XXH3_state_t *st;
};

uint64_t pp_cksum_data(const void *p, size_t len)
{
    return (uint64_t)XXH3_64bits(p, len);
}

pp_cksum_stream *pp_cksum_stream_new(void)
{
    pp_cksum_stream *s = malloc(sizeof *s);
    if (!s) return NULL;
    s->st = XXH3_createState();
    if (!s->st || XXH3_64bits_reset(s->st) != XXH_OK) {
        if (s->st) XXH3_freeState(s->st);
        free(s);
        return NULL;
    }
    return s;
}

void pp_cksum_stream_add(pp_cksum_stream *s, const void *p, size_t len)
{
    if (len) XXH3_64bits_update(s->st, p, len);
}

uint64_t pp_cksum_stream_end(pp_cksum_stream *s)
{
    uint64_t v = (uint64_t)XXH3_64bits_digest(s->st);
    XXH3_freeState(s->st);
    free(s);
    return v;
}

/* Feeds a string with its terminating NUL (so "ab","c" differs from "a","bc"). */
static void add_str(XXH3_state_t *st, const char *s)
{
    XXH3_64bits_update(st, s, strlen(s) + 1);
}

uint64_t pp_cksum_header(const pp_checkpoint_meta *meta, size_t n_meta,
                         const pp_checkpoint_entry *entries, size_t n)
{
    XXH3_state_t st; /* on the stack: no allocation to fail */
    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    for (size_t i = 0; i < n_meta; i++) {
        if (strcmp(meta[i].key, PP_CKSUM_HEADER) == 0) continue;
        add_str(&st, meta[i].key);
        add_str(&st, meta[i].value);
    }
    add_str(&st, "\n");
    for (size_t i = 0; i < n; i++) {
        char dims[PP_MAX_DIMS * 24 + 8];
        size_t used = 0;
        for (int d = 0; d < entries[i].ndim; d++)
            used += (size_t)snprintf(dims + used, sizeof dims - used, "%" PRId64 ",",
                                     entries[i].shape[d]);
        dims[used] = '\0';
        add_str(&st, entries[i].name);
        add_str(&st, pp_dtype_name(entries[i].dtype));
        add_str(&st, dims);
    }
    return (uint64_t)XXH3_64bits_digest(&st);
}

void pp_cksum_format(uint64_t v, char *buf)
{
    snprintf(buf, PP_CKSUM_TEXT_LEN + 1, "xxh3-64:%016" PRIx64, v);
}

bool pp_cksum_parse(const char *text, uint64_t *v)
{
    if (strlen(text) != PP_CKSUM_TEXT_LEN || strncmp(text, "xxh3-64:", 8) != 0) return false;
    uint64_t x = 0;
    for (const char *c = text + 8; *c; c++) {
        int d = *c >= '0' && *c <= '9' ? *c - '0' : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10 : -1;
        if (d < 0) return false;
        x = x << 4 | (uint64_t)d;
    }
    *v = x;
    return true;
}

/* Whether any of n words has all the exponent bits of mask set (a branch-free
 * loop the compiler vectorises). */
static bool any32(const unsigned char *p, size_t n, uint32_t mask)
{
    uint32_t hit = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        hit |= (x & mask) == mask;
    }
    return hit != 0;
}

static bool any16(const unsigned char *p, size_t n, uint16_t mask)
{
    uint32_t hit = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t x;
        memcpy(&x, p + 2 * i, 2);
        hit |= (uint16_t)(x & mask) == mask;
    }
    return hit != 0;
}

bool pp_cksum_find_nonfinite(pp_dtype t, const void *p, size_t bytes, size_t *index)
{
    /* an exponent field of all ones is an infinity or a NaN; blocks are scanned
     * without branching, the element found in the block that has one */
    enum { BLOCK = 4096 };
    const unsigned char *b = p;
    if (t == PP_F32) {
        size_t n = bytes / 4;
        for (size_t at = 0; at < n; at += BLOCK) {
            size_t len = n - at < BLOCK ? n - at : BLOCK;
            if (!any32(b + 4 * at, len, 0x7f800000u)) continue;
            for (size_t i = at; i < at + len; i++)
                if (any32(b + 4 * i, 1, 0x7f800000u)) return *index = i, true;
        }
    } else if (t == PP_BF16 || t == PP_F16) {
        const uint16_t mask = t == PP_BF16 ? 0x7f80u : 0x7c00u;
        size_t n = bytes / 2;
        for (size_t at = 0; at < n; at += BLOCK) {
            size_t len = n - at < BLOCK ? n - at : BLOCK;
            if (!any16(b + 2 * at, len, mask)) continue;
            for (size_t i = at; i < at + len; i++)
                if (any16(b + 2 * i, 1, mask)) return *index = i, true;
        }
    }
    return false;
}
