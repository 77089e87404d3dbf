/*
 * model_rig.h - what the models' tests share (test_units.c, test_models.c,
 * test_stages.c): the CPU device and exec they run on, tensors to and from
 * host memory, seeded normal fills, the bytes in use less the exec's
 * workspace, a stage's state by name and a clock.
 * Header-only (static inline functions), included by one test file each.
 */
#ifndef PP_TESTS_MODEL_RIG_H
#define PP_TESTS_MODEL_RIG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/rng.h"
#include "models/stage.h"
#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"

static pp_registry *rig_reg;
static pp_device_ctx *dev; /* cpu:0 */
static pp_exec ex;

/* cpu:0 and its exec; exits 1 when they cannot be had */
static inline void model_rig_open(void)
{
    pp_error err;
    if (pp_registry_new(&rig_reg, &err) != PP_OK ||
        pp_registry_get(rig_reg, (pp_device_id){PP_DEVICE_CPU, 0}, &dev, &err) != PP_OK ||
        pp_exec_init(&ex, dev, NULL, &err) != PP_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        exit(1);
    }
}

/* the rig closed; the test's exit code */
static inline int model_rig_close(const char *test)
{
    pp_exec_destroy(&ex);
    pp_registry_free(rig_reg);
    return check_summary(test);
}

/* Bytes in use on the device, less the exec's workspace (scratch that grows
 * to the largest op seen and stays with the exec). */
static inline int64_t used(void)
{
    return (int64_t)pp_device_bytes_in_use(dev) - (int64_t)ex.ws_bytes;
}

/* t's contents in a new host buffer (the caller frees it) */
static inline float *host_copy(const pp_tensor *t)
{
    size_t bytes = pp_tensor_bytes(t);
    float *h = malloc(bytes ? bytes : 4);
    pp_error err;
    CHECK_OK(pp_tensor_to_host(t, h, bytes, &err), &err);
    return h;
}

static inline void host_store(pp_tensor *t, const float *h)
{
    pp_error err;
    CHECK_OK(pp_tensor_from_host(t, h, pp_tensor_bytes(t), &err), &err);
}

static inline void fill_normal(float *p, int64_t n, uint64_t seed, double scale)
{
    pp_rng r;
    pp_rng_init(&r, seed, "test");
    for (int64_t i = 0; i < n; i++) p[i] = (float)(scale * pp_rng_normal(&r));
}

/* an f32 tensor on the rig's device */
static inline pp_status alloc_shape(pp_tensor *t, int ndim, const int64_t *shape, pp_error *err)
{
    return pp_tensor_alloc(t, dev, PP_F32, ndim, shape, err);
}

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* the stage's parameter or buffer of that state_dict name, NULL if none */
static inline const pp_named_tensor *find_state(const pp_stage *st, const char *name)
{
    for (int i = 0; i < pp_stage_state_count(st); i++)
        if (strcmp(pp_stage_state(st, i)->name, name) == 0) return pp_stage_state(st, i);
    return NULL;
}

#endif
