/*
 * test_emu_dropout.c - the CUDA backend's dropout (runtime/cuda:
 * dropout.cu) run on the CPU by the emulator (cuda_emu.h), against the CPU
 * backend's pp_dropout_forward / _backward on the same inputs:
 *   - the elementwise kernel: the CPU's bits (the factor is exactly 0 or
 *     1 / (1 - p)), p 0.1 and 0.5, samples of sizes that are not multiples
 *     of 4 (a float4 straddles two samples), operands 4 bytes off a 16-byte
 *     boundary (the single-float path), in place, first_sample not 0, a
 *     grid of few blocks (grid strides); about p of the values dropped.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "tests/check.h"
#include "tests/emu/emu_rig.h"

#include "emu_kernels.h"

/* ---- the elementwise kernel ------------------------------------------------------------ */

static void test_dropout(void)
{
    static const struct {
        float p;
        int n, per_sample;
        size_t off;
        int64_t first_sample;
        bool in_place;
        unsigned max_grid;
    } cases[] = {
        {0.1f, 3, 1001, 0, 0, false, 3},   /* float4s across samples' ends */
        {0.5f, 2, 1003, 4, 5, false, 2},   /* single floats */
        {0.1f, 4, 7, 0, 11, true, 1},      /* in place, one block */
        {0.5f, 1, 4099, 0, 1, true, 64},   /* a tail of 3 */
        {0.5f, 5, 3, 4, 100, false, 3},    /* samples shorter than a float4 */
    };
    pp_error err;
    char what[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t shape[2] = {cases[i].n, cases[i].per_sample};
        const size_t off = cases[i].off;
        const pp_dropout_desc d = {cases[i].p, pp_dropout_key(1234, 7, (int)i),
                                   cases[i].first_sample};
        pp_tensor x = emu_tensor(PP_F32, 2, shape, PP_NCHW), y = emu_tensor(PP_F32, 2, shape, PP_NCHW);
        pp_tensor dx = emu_tensor(PP_F32, 2, shape, PP_NCHW);
        emu_fill(&x, 0.5f, 1), emu_fill(&y, -1, 2);
        void *bx, *by, *bdx;
        float *kx = emu_copy(&x, off, &bx), *ky = emu_copy(&y, off, &by);
        float *kdx = emu_copy(&dx, off, &bdx);
        snprintf(what, sizeof what, "dropout %g, %d x %d%s%s, first sample %lld",
                 (double)cases[i].p, cases[i].n, cases[i].per_sample, off ? ", 4 bytes off" : "",
                 cases[i].in_place ? ", in place" : "", (long long)cases[i].first_sample);
        /* the backward first, from y as its dy (dx = dy * M), then the forward */
        CHECK_OK(pp_dropout_backward(&g_ex, &d, &y, &dx, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_dropout(0, cases[i].max_grid, d, shape[0], shape[1], ky,
                                                kdx),
                     what);
        emu_close(&dx, kdx, 0, what);
        float *kout = cases[i].in_place ? kx : ky;
        pp_tensor *out = cases[i].in_place ? &x : &y;
        CHECK_OK(pp_dropout_forward(&g_ex, &d, &x, out, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_dropout(0, cases[i].max_grid, d, shape[0], shape[1], kx,
                                                kout),
                     what);
        emu_close(out, kout, 0, what);
        /* x was in [0.5, 1.5): a zero is a dropped value, the rest scaled */
        const int64_t total = shape[0] * shape[1];
        int64_t dropped = 0;
        for (int64_t k = 0; k < total; k++) dropped += emu_f32(out)[k] == 0.0f;
        const double sd = sqrt(total * cases[i].p * (1 - cases[i].p));
        CHECK_MSG(fabs(dropped - total * cases[i].p) <= 5 * sd + 1,
                  "%s: %lld of %lld dropped, p %g", what, (long long)dropped, (long long)total,
                  (double)cases[i].p);
        void *bases[] = {bx, by, bdx};
        pp_tensor *ts[] = {&x, &y, &dx};
        EMU_FREE_CASE(bases, ts);
    }
}

int main(void)
{
    emu_rig_open();
    test_dropout();
    return emu_rig_close("test_emu_dropout");
}
