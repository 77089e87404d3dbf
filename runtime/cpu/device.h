/*
 * device.h - the CPU backend's per-device state (dev->backend), internal
 * to runtime/cpu: the worker pool and the host-memory cache. Created by the
 * backend's device_init, freed by device_destroy; a context made without
 * device_init (dev->backend NULL) runs every kernel on the caller and
 * allocates straight from the C library.
 *
 * runtime/cpu/ is the CPU backend: the pp_backend_ops table of
 * pp_backend_cpu() (backend.c), its kernels over OpenBLAS, this per-device
 * state with its workers and host-memory cache. It includes runtime/core
 * only.
 */
#ifndef PP_CPU_DEVICE_H
#define PP_CPU_DEVICE_H

#include "cache.h"
#include "workers.h"
#include "runtime/core/device.h"

typedef struct pp_cpu_device {
    pp_cpu_pool *pool;
    pp_cpu_cache cache;
} pp_cpu_device;

static inline pp_cpu_device *pp_cpu_device_of(const pp_device_ctx *dev)
{
    return dev ? (pp_cpu_device *)dev->backend : NULL;
}

#endif
