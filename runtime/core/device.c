/* device.c - device ids, the registry of device contexts, memory accounting. */
#include "device.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define PP_MAX_DEVICE_INDEX 1024

pp_status pp_device_id_parse(const char *s, pp_device_id *out, pp_error *err)
{
    if (!s) return pp_error_set(err, PP_ERR_INPUT, "missing device name");
    const char *rest;
    pp_device_id id;
    if (strncmp(s, "cpu", 3) == 0) {
        id.kind = PP_DEVICE_CPU;
        rest = s + 3;
    } else if (strncmp(s, "cuda", 4) == 0) {
        id.kind = PP_DEVICE_CUDA;
        rest = s + 4;
    } else {
        return pp_error_set(err, PP_ERR_INPUT,
                            "bad device '%s': expected cpu:N or cuda:N", s);
    }
    if (*rest == '\0') {
        id.index = 0;
    } else {
        if (*rest != ':' || rest[1] < '0' || rest[1] > '9')
            return pp_error_set(err, PP_ERR_INPUT,
                                "bad device '%s': expected cpu:N or cuda:N", s);
        char *end;
        errno = 0;
        long v = strtol(rest + 1, &end, 10);
        if (*end != '\0' || errno != 0 || v < 0 || v >= PP_MAX_DEVICE_INDEX)
            return pp_error_set(err, PP_ERR_INPUT,
                                "bad device '%s': index must be an integer in [0, %d)", s,
                                PP_MAX_DEVICE_INDEX);
        id.index = (int)v;
    }
    *out = id;
    return PP_OK;
}

const char *pp_device_id_format(pp_device_id id, char *buf, size_t n)
{
    snprintf(buf, n, "%s:%d", id.kind == PP_DEVICE_CUDA ? "cuda" : "cpu", id.index);
    return buf;
}

bool pp_device_id_equal(pp_device_id a, pp_device_id b)
{
    return a.kind == b.kind && a.index == b.index;
}

struct pp_registry {
    pp_device_ctx *devs[2][PP_MAX_DEVICE_INDEX];
};

/* A context and its byte counters (kept out of the public struct so that
 * the public headers need no C11 atomics). */
typedef struct device_entry {
    pp_device_ctx ctx; /* first: a context's address is its entry's */
    atomic_size_t bytes_in_use;
    atomic_size_t bytes_peak;
} device_entry;

static device_entry *entry_of(pp_device_ctx *dev)
{
    return (device_entry *)dev;
}

pp_status pp_registry_new(pp_registry **out, pp_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return pp_error_set(err, PP_ERR_OOM, "out of host memory (device registry)");
    return PP_OK;
}

void pp_registry_free(pp_registry *reg)
{
    if (!reg) return;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < PP_MAX_DEVICE_INDEX; i++) {
            pp_device_ctx *d = reg->devs[k][i];
            if (!d) continue;
            if (d->ops->device_destroy) d->ops->device_destroy(d);
            free(entry_of(d));
        }
    free(reg);
}

int pp_cuda_device_count(void)
{
    return pp_backend_cuda_device_count();
}

pp_status pp_registry_get(pp_registry *reg, pp_device_id id, pp_device_ctx **out, pp_error *err)
{
    if (id.index < 0 || id.index >= PP_MAX_DEVICE_INDEX)
        return pp_error_set(err, PP_ERR_INPUT, "device index %d out of range", id.index);
    pp_device_ctx **slot = &reg->devs[id.kind == PP_DEVICE_CUDA][id.index];
    if (*slot) {
        *out = *slot;
        return PP_OK;
    }
    const pp_backend_ops *ops;
    char name[16];
    pp_device_id_format(id, name, sizeof name);
    if (id.kind == PP_DEVICE_CUDA) {
        ops = pp_backend_cuda();
        if (!ops)
            return pp_error_set(err, PP_ERR_UNSUPPORTED,
                                "device %s: this build has no CUDA backend (rebuild with "
                                "-Dcuda=enabled, or remap with --device-map cuda:*=cpu)",
                                name);
        int n = pp_backend_cuda_device_count();
        if (id.index >= n)
            return pp_error_set(err, PP_ERR_INPUT,
                                "device %s does not exist (%d CUDA device%s visible; remap with "
                                "--device-map)",
                                name, n, n == 1 ? "" : "s");
    } else {
        ops = pp_backend_cpu();
    }
    device_entry *e = calloc(1, sizeof *e);
    if (!e) return pp_error_set(err, PP_ERR_OOM, "out of host memory (device context)");
    pp_device_ctx *d = &e->ctx;
    d->id = id;
    memcpy(d->name, name, sizeof d->name);
    d->ops = ops;
    atomic_init(&e->bytes_in_use, 0);
    atomic_init(&e->bytes_peak, 0);
    if (ops->device_init) {
        pp_status s = ops->device_init(d, err);
        if (s != PP_OK) {
            free(e);
            return s;
        }
    }
    *slot = d;
    *out = d;
    return PP_OK;
}

pp_status pp_device_set_math(pp_device_ctx *dev, pp_math_mode mode, pp_error *err)
{
    if (!dev) return pp_error_set(err, PP_ERR_INVALID, "set math: NULL device");
    if (mode != PP_MATH_FP32 && mode != PP_MATH_TF32)
        return pp_error_set(err, PP_ERR_INVALID, "%s: unknown math mode %d", dev->name, (int)mode);
    dev->math = mode;
    return PP_OK;
}

pp_status pp_device_profiler(pp_device_ctx *dev, bool start, pp_error *err)
{
    if (!dev) return pp_error_set(err, PP_ERR_INVALID, "pp_device_profiler: no device (NULL)");
    return dev->ops->profiler ? dev->ops->profiler(dev, start, err) : PP_OK;
}

bool pp_device_prefers_nhwc_bf16(const pp_device_ctx *dev)
{
    return dev->ops->prefers_nhwc_bf16;
}

pp_status pp_device_memory_info(pp_device_ctx *dev, size_t *free_bytes, size_t *total_bytes,
                                pp_error *err)
{
    if (!dev || !free_bytes || !total_bytes)
        return pp_error_set(err, PP_ERR_INVALID, "memory info: NULL argument");
    if (!dev->ops->mem_info)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: no memory of its own to report",
                            dev->name);
    return dev->ops->mem_info(dev, free_bytes, total_bytes, err);
}

pp_math_mode pp_device_math(const pp_device_ctx *dev)
{
    return dev ? dev->math : PP_MATH_FP32;
}

pp_status pp_device_account(pp_device_ctx *dev, size_t bytes, pp_error *err)
{
    device_entry *e = entry_of(dev);
    size_t now = atomic_fetch_add(&e->bytes_in_use, bytes) + bytes;
    if (dev->bytes_limit && now > dev->bytes_limit) {
        atomic_fetch_sub(&e->bytes_in_use, bytes);
        return pp_error_set(err, PP_ERR_OOM,
                            "%s: out of memory allocating %zu bytes (%zu in use, limit %zu)",
                            dev->name, bytes, now - bytes, dev->bytes_limit);
    }
    size_t peak = atomic_load(&e->bytes_peak);
    while (now > peak && !atomic_compare_exchange_weak(&e->bytes_peak, &peak, now)) {
    }
    return PP_OK;
}

void pp_device_unaccount(pp_device_ctx *dev, size_t bytes)
{
    atomic_fetch_sub(&entry_of(dev)->bytes_in_use, bytes);
}

pp_status pp_device_alloc(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err)
{
    *ptr = NULL;
    if (bytes == 0) return PP_OK;
    PP_TRY(pp_device_account(dev, bytes, err));
    pp_status s = dev->ops->alloc(dev, bytes, ptr, err);
    if (s != PP_OK) {
        pp_device_unaccount(dev, bytes);
        *ptr = NULL;
    }
    return s;
}

void pp_device_free(pp_device_ctx *dev, void *ptr, size_t bytes)
{
    if (!ptr) return;
    dev->ops->free(dev, ptr);
    pp_device_unaccount(dev, bytes);
}

pp_status pp_device_host_alloc(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err)
{
    *ptr = NULL;
    if (bytes == 0) return PP_OK;
    if (dev->ops->host_alloc) return dev->ops->host_alloc(dev, bytes, ptr, err);
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0)
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (%zu bytes)", dev->name,
                            bytes);
    *ptr = p;
    return PP_OK;
}

void pp_device_host_free(pp_device_ctx *dev, void *ptr)
{
    if (!ptr) return;
    if (dev->ops->host_free)
        dev->ops->host_free(dev, ptr);
    else
        free(ptr);
}

pp_status pp_device_peer_access(pp_device_ctx *dev, pp_device_ctx *peer, pp_error *err)
{
    if (!dev || !peer)
        return pp_error_set(err, PP_ERR_INVALID, "peer access: device or peer is NULL");
    if (dev->id.kind != peer->id.kind)
        return pp_error_set(err, PP_ERR_INVALID, "peer access: %s and %s are of different kinds",
                            dev->name, peer->name);
    if (dev == peer || pp_device_id_equal(dev->id, peer->id) || !dev->ops->peer_access)
        return PP_OK;
    return dev->ops->peer_access(dev, peer, err);
}

bool pp_device_host_pinned(const pp_device_ctx *dev)
{
    return dev && dev->ops && dev->ops->host_alloc;
}

void pp_device_reset_peak(pp_device_ctx *dev)
{
    device_entry *e = entry_of(dev);
    atomic_store(&e->bytes_peak, atomic_load(&e->bytes_in_use));
}

size_t pp_device_peak_bytes(const pp_device_ctx *dev)
{
    return atomic_load(&entry_of((pp_device_ctx *)dev)->bytes_peak);
}

size_t pp_device_bytes_in_use(const pp_device_ctx *dev)
{
    return atomic_load(&entry_of((pp_device_ctx *)dev)->bytes_in_use);
}
