/*
 * cache.c - size-class cache of host blocks for one CPU device (see
 * cache.h). Classes: multiples of 64 bytes up to 1 KiB, then four classes
 * per power of two.
 */
#include "cache.h"

#include <stdint.h>
#include <stdlib.h>

#define HEADER 64

typedef struct block_header {
    size_t bytes; /* usable bytes (the class size) */
    int cls;
    void *next; /* next free block of the class (user pointer) */
} block_header;

_Static_assert(sizeof(block_header) <= HEADER, "block header must fit its 64 bytes");

static block_header *header_of(void *ptr)
{
    return (block_header *)((char *)ptr - HEADER);
}

/* Class index and rounded size of a request; -1 when it is too large to round. */
static int size_class(size_t bytes, size_t *rounded)
{
    if (bytes <= 1024) {
        size_t s = (bytes + 63) / 64;
        if (s == 0) s = 1;
        *rounded = s * 64;
        return (int)s - 1; /* 0..15 */
    }
    int e = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^e < bytes <= 2^(e+1) */
    size_t step = (size_t)1 << (e - 2);
    size_t units = (bytes + step - 1) / step; /* 5..8 */
    if (e > 61) return -1;
    *rounded = units * step;
    return 16 + (e - 10) * 4 + (int)(units - 5);
}

void pp_cpu_cache_init(pp_cpu_cache *c)
{
    pthread_mutex_init(&c->mu, NULL);
    for (int i = 0; i < PP_CPU_CACHE_CLASSES; i++) c->free_list[i] = NULL;
    c->cached_bytes = 0;
#if defined(__SANITIZE_ADDRESS__)
    c->max_bytes = 0;
#else
    c->max_bytes = PP_CPU_CACHE_MAX;
#endif
}

void pp_cpu_cache_destroy(pp_cpu_cache *c)
{
    for (int i = 0; i < PP_CPU_CACHE_CLASSES; i++) {
        void *p = c->free_list[i];
        while (p) {
            void *next = header_of(p)->next;
            free(header_of(p));
            p = next;
        }
        c->free_list[i] = NULL;
    }
    c->cached_bytes = 0;
    pthread_mutex_destroy(&c->mu);
}

void *pp_cpu_cache_alloc(pp_cpu_cache *c, size_t bytes)
{
    size_t rounded = 0;
    int cls = size_class(bytes, &rounded);
    if (cls < 0 || rounded > SIZE_MAX - HEADER) return NULL;
    pthread_mutex_lock(&c->mu);
    void *p = c->free_list[cls];
    if (p) {
        c->free_list[cls] = header_of(p)->next;
        c->cached_bytes -= rounded;
    }
    pthread_mutex_unlock(&c->mu);
    if (p) return p;
    char *raw = aligned_alloc(64, rounded + HEADER);
    if (!raw) return NULL;
    block_header *h = (block_header *)raw;
    h->bytes = rounded;
    h->cls = cls;
    h->next = NULL;
    return raw + HEADER;
}

void pp_cpu_cache_free(pp_cpu_cache *c, void *ptr)
{
    if (!ptr) return;
    block_header *h = header_of(ptr);
    pthread_mutex_lock(&c->mu);
    if (c->cached_bytes + h->bytes <= c->max_bytes) {
        h->next = c->free_list[h->cls];
        c->free_list[h->cls] = ptr;
        c->cached_bytes += h->bytes;
        ptr = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (ptr) free(h);
}
