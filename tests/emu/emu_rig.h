/*
 * emu_rig.h - what the emulator's tests against the CPU backend share
 * (test_emu_bn.c, test_emu_nhwc.c, test_emu_kernels.c): the CPU device and
 * exec the reference ops run on, its tensors, the kernels' own copies of
 * operands at chosen alignments, and the checks that end a test.
 */
#ifndef PP_TESTS_EMU_RIG_H
#define PP_TESTS_EMU_RIG_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/emu/emu.h"

static pp_registry *g_reg;
static pp_device_ctx *g_dev; /* cpu:0 */
static pp_exec g_ex;

static inline void emu_rig_open(void)
{
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

#endif
