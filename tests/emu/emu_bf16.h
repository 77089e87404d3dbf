/*
 * emu_bf16.h - what the emulator's tests of bf16 kernels share
 * (test_emu_transformer.c, test_emu_dropout.c): bf16 tensors' random fills
 * and the comparison of a kernel's bf16 output with the CPU backend's.
 * Include after emu_rig.h.
 */
#ifndef PP_TESTS_EMU_BF16_H
#define PP_TESTS_EMU_BF16_H

#include <math.h>
#include <stdint.h>

#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/emu/emu_rig.h"

/* The kernel's bf16 k against the CPU's bf16 t: every element within one
 * bf16 step of the CPU's (both round an f32 result once; the f32 sums' order
 * differs), or within 1e-5 of the largest (a sum that cancels), and at most
 * one element in 200, and one more, not the CPU's bits, counting only
 * elements above that floor: a row whose sum cancels to rounding noise (in
 * the attention backward's dq, the first query's, whose one probability is
 * 1 so that dP - delta is 0 but for rounding) holds noise on both sides,
 * a whole row of a head at once (130 or 260 of the 30,720 elements of dqkv
 * at 40 positions and heads of 128 with most draws of the inputs, 66 of
 * 53,760 at heads of 64), where the elements above the floor differ in 0
 * to 10. A near-tie may fall either way in a tensor of any size (1 of the
 * 192 of a decode's row, 3 heads of 64, with one seed's draws). How many
 * differ also depends on the order of the CPU's sums, which OpenBLAS picks
 * by the CPU it runs on; an arithmetic of the kernel's own that departs
 * from the CPU's is off on most elements. */
static inline void emu_close_bf16(const pp_tensor *t, const uint16_t *k, const char *what)
{
    const int64_t n = pp_tensor_numel(t);
    const uint16_t *c = t->data;
    double scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(pp_f32_from_bf16(c[i])));
    int64_t differ = 0, far = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        const double cv = pp_f32_from_bf16(c[i]), kv = pp_f32_from_bf16(k[i]);
        int e = 0;
        frexp(cv, &e);
        const double step = ldexp(1.0, e - 8), diff = fabs(kv - cv);
        /* both within 1e-5 of the largest: a sum that cancels, noise on both sides */
        differ += c[i] != k[i] && !(fabs(cv) <= 1e-5 * scale && fabs(kv) <= 1e-5 * scale);
        if (diff > step && diff > 1e-5 * scale) {
            if (!far) worst = i;
            far++;
        }
    }
    CHECK_MSG(far == 0, "%s: %lld of %lld elements more than a bf16 step off (element %lld: "
              "%.6g, the CPU's %.6g)", what, (long long)far, (long long)n, (long long)worst,
              pp_f32_from_bf16(k[worst]), pp_f32_from_bf16(c[worst]));
    CHECK_MSG(differ <= n / 200 + 1, "%s: %lld of %lld elements not the CPU's bits", what,
              (long long)differ, (long long)n);
}

/* t's bf16 elements: rounded from uniform in [lo, lo + span) */
static inline void emu_fill_bf16(pp_tensor *t, float lo, float span)
{
    for (int64_t i = 0; i < pp_tensor_numel(t); i++)
        ((uint16_t *)t->data)[i] = pp_bf16_from_f32(lo + (emu_urand() + 1.0f) * 0.5f * span);
}

#endif
