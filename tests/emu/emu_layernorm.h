/*
 * emu_layernorm.h - the steps the layer-norm cases share: the f32 kernels'
 * (test_emu_transformer.c) and the mixed-precision ones'
 * (test_emu_transformer_bf16.c), each against the CPU backend.
 */
#ifndef PP_TESTS_EMU_LAYERNORM_H
#define PP_TESTS_EMU_LAYERNORM_H

#include <stdbool.h>

#include "runtime/core/ops.h"
#include "tests/check.h"
#include "tests/emu/emu_rig.h"

/* The CPU backend's backward, the spec: dres added to dx when fused; dbeta
 * accumulated when b (the bias) is there, untouched when not. */
static inline void emu_ln_backward_cpu(bool fused, const pp_tensor *b, const pp_tensor *x,
                                       const pp_tensor *dy, const pp_tensor *gamma,
                                       const pp_tensor *mean, const pp_tensor *rstd,
                                       const pp_tensor *dres, pp_tensor *dx, pp_tensor *dgamma,
                                       pp_tensor *dbeta)
{
    pp_error err;
    if (fused)
        CHECK_OK(pp_layernorm_backward_add(&g_ex, x, dy, gamma, mean, rstd, dres, dx, dgamma,
                                           b ? dbeta : NULL, &err), &err);
    else
        CHECK_OK(pp_layernorm_backward(&g_ex, x, dy, gamma, mean, rstd, dx, dgamma,
                                       b ? dbeta : NULL, &err), &err);
}

/* the kernel's dgamma and dbeta (kdg, kdb) against the CPU's */
static inline void emu_ln_close_params(const pp_tensor *dgamma, const float *kdg,
                                       const pp_tensor *dbeta, const float *kdb)
{
    emu_close(dgamma, kdg, 1e-7, "layer norm dgamma (+=)");
    emu_close(dbeta, kdb, 1e-7, "layer norm dbeta (+=, or untouched)");
}

#endif
