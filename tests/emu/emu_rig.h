/*
 * emu_rig.h - what the emulator's tests against the CPU backend share
 * (test_emu_bn.c, test_emu_nhwc.c, test_emu_kernels.c): the CPU device and
 * exec the reference ops run on, its tensors, the kernels' own copies of
 * operands at chosen alignments, random fills, the comparison of a
 * kernel's output with the CPU's, and the checks that end a test.
 */
#ifndef PP_TESTS_EMU_RIG_H
#define PP_TESTS_EMU_RIG_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/dropout.h"
#include "runtime/core/exec.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/emu/emu.h"

static pp_registry *g_reg;
static pp_device_ctx *g_dev; /* cpu:0 */
static pp_exec g_ex;

static inline void emu_rig_open(void)
{
#ifdef PP_EMU_CONTRACT /* kernels built as nvcc builds them, with FMAs (meson.build) */
    if (!__builtin_cpu_supports("fma")) {
        fprintf(stderr, "this CPU has no FMA instructions: skipped\n");
        exit(77);
    }
#endif
    pp_error err;
    if (pp_registry_new(&g_reg, &err) != PP_OK ||
        pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CPU, 0}, &g_dev, &err) != PP_OK ||
        pp_exec_init(&g_ex, g_dev, NULL, &err) != PP_OK) {
        fprintf(stderr, "setup failed: %s\n", err.msg);
        exit(1);
    }
}

/* the emulator's faults checked (none), the rig closed; the test's exit code */
static inline int emu_rig_close(const char *test)
{
    CHECK_MSG(pp_emu_faults() == 0, "the emulator reported %ld faults", pp_emu_faults());
    pp_exec_destroy(&g_ex);
    pp_registry_free(g_reg);
    return check_summary(test);
}

/* A zeroed CPU tensor (a 4-D one in layout lay). */
static inline pp_tensor emu_tensor(pp_dtype dt, int ndim, const int64_t *shape, pp_layout lay)
{
    pp_tensor t;
    pp_error err;
    if (pp_tensor_zeros(&t, g_dev, dt, ndim, shape, &err) != PP_OK) {
        fprintf(stderr, "allocation failed: %s\n", err.msg);
        exit(1);
    }
    if (ndim == 4) t.layout = lay;
    return t;
}

/* bytes of zeroed memory off bytes past a 64-byte boundary; free *base */
static inline void *emu_alloc(size_t bytes, size_t off, void **base)
{
    const size_t total = (bytes + off + 64) / 64 * 64;
    *base = aligned_alloc(64, total);
    memset(*base, 0, total);
    return (char *)*base + off;
}

/* the kernel's copy of t's bytes, off bytes past a 64-byte boundary */
static inline void *emu_copy(const pp_tensor *t, size_t off, void **base)
{
    void *p = emu_alloc(pp_tensor_bytes(t), off, base);
    memcpy(p, t->data, pp_tensor_bytes(t));
    return p;
}

/* a launcher's cudaError_t must be cudaSuccess; printf-style message */
#define CUDA_OK(call, ...)                                                                         \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        CHECK_MSG(e_ == cudaSuccess, __VA_ARGS__);                                                 \
    } while (0)

/* a launcher's cudaError_t must be cudaSuccess, naming what launched */
#define EMU_LAUNCHED(call, what) CUDA_OK(call, "%s: launch failed", what)

/* uniform in [-1, 1), the same sequence in every run */
static inline float emu_urand(void)
{
    static uint64_t rng = 0x2c1b3c6d4e5f6a7bull;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static inline float *emu_f32(const pp_tensor *t)
{
    return (float *)t->data;
}

/* t's f32 elements uniform in [lo, lo + span) */
static inline void emu_fill(pp_tensor *t, float lo, float span)
{
    for (int64_t i = 0; i < pp_tensor_numel(t); i++)
        emu_f32(t)[i] = lo + (emu_urand() + 1.0f) * 0.5f * span;
}

/* the kernel's k against the CPU's t: normalised error max |k - cpu| / max
 * |cpu| within tol (0: the same bits) */
static inline void emu_close(const pp_tensor *t, const float *k, double tol, const char *what)
{
    const int64_t n = pp_tensor_numel(t);
    const float *c = emu_f32(t);
    if (tol == 0) {
        int64_t differ = 0;
        for (int64_t i = 0; i < n; i++) differ += memcmp(&c[i], &k[i], sizeof(float)) != 0;
        CHECK_MSG(differ == 0, "%s: %lld of %lld elements not the CPU's bits", what,
                  (long long)differ, (long long)n);
        return;
    }
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(c[i]));
        const double d = fabs((double)c[i] - k[i]);
        if (!(d <= diff)) diff = d;
    }
    CHECK_MSG(diff <= tol * (scale > 0 ? scale : 1), "%s: normalised error %.3g > %.3g", what,
              scale > 0 ? diff / scale : diff, tol);
}

/* frees a case's copies (the bases emu_copy and emu_alloc gave) and its
 * tensors; EMU_FREE_CASE(bases, ts) over two arrays */
static inline void emu_free_case(void *const *bases, size_t nb, pp_tensor *const *ts, size_t nt)
{
    for (size_t k = 0; k < nb; k++) free(bases[k]);
    for (size_t k = 0; k < nt; k++) pp_tensor_free(ts[k]);
}
#define EMU_FREE_CASE(bases, ts)                                                                  \
    emu_free_case(bases, sizeof bases / sizeof bases[0], ts, sizeof ts / sizeof ts[0])

/* One I64 element: a dropout step in memory (emu_replayed). */
static inline pp_tensor emu_step_tensor(void)
{
    return emu_tensor(PP_I64, 1, (const int64_t[]){1}, PP_NCHW);
}

/* d as a replayed CUDA graph hands it to a kernel: the key captured at an
 * earlier step (step - 1: stale), the step itself in memory (*mem, set to
 * step here), from which the kernel must form its key. d's key must be
 * pp_dropout_key(seed, step, site): the replayed draw gives d's masks only
 * where the kernel reads the memory. */
static inline pp_dropout_desc emu_replayed(const pp_dropout_desc *d, uint64_t seed, int64_t step,
                                           int site, pp_tensor *mem)
{
    *(int64_t *)mem->data = step;
    pp_dropout_desc r = *d;
    r.key = pp_dropout_key(seed, step - 1, site);
    r.step = mem, r.seed = seed, r.site = site;
    return r;
}

#endif
