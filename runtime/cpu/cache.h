/*
 * cache.h - the CPU device's host-memory cache (internal to runtime/cpu).
 *
 * Training allocates and frees the same activation and gradient sizes every
 * micro-batch. Handing those blocks straight back to the C library returns
 * large ones to the kernel, and every step then pays a page fault and a page
 * clear per 4 KiB on first touch. The cache keeps freed blocks in size
 * classes (at most 25% rounding) and hands them out again, up to
 * PP_CPU_CACHE_MAX bytes per device; beyond that, and when the build uses
 * AddressSanitizer (so use-after-free stays visible), blocks go back to the
 * C library. Cached blocks are not counted by the device's accounting, which
 * counts what callers hold.
 *
 * Every block carries a 64-byte header, keeping the 64-byte alignment of
 * pp_device_alloc. Thread safety: all functions may be called from any thread.
 */
#ifndef PP_CPU_CACHE_H
#define PP_CPU_CACHE_H

#include <pthread.h>
#include <stddef.h>

#define PP_CPU_CACHE_MAX ((size_t)1 << 30)
#define PP_CPU_CACHE_CLASSES 232

typedef struct pp_cpu_cache {
    pthread_mutex_t mu;
    void *free_list[PP_CPU_CACHE_CLASSES]; /* singly linked through the headers */
    size_t cached_bytes;                   /* bytes held in free lists */
    size_t max_bytes;
} pp_cpu_cache;

void pp_cpu_cache_init(pp_cpu_cache *c);
/* Frees every cached block. No block may be in use through the cache after. */
void pp_cpu_cache_destroy(pp_cpu_cache *c);
/* A block of at least bytes (> 0), 64-byte aligned, or NULL when out of memory. */
void *pp_cpu_cache_alloc(pp_cpu_cache *c, size_t bytes);
/* Returns a block from pp_cpu_cache_alloc (NULL is ignored). */
void pp_cpu_cache_free(pp_cpu_cache *c, void *ptr);

#endif
