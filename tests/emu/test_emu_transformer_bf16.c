/*
 * test_emu_transformer_bf16.c - the CUDA backend's kernels of the
 * transformer's bf16 entries (runtime/cuda: layernorm.cu's mixed launchers,
 * gelu.cu) run on the CPU by the emulator (cuda_emu.h), against the CPU
 * backend's ops on the same bf16 and f32 tensors (its f32 stand-ins, each
 * bf16 output the f32 result rounded once), with the dtype mixes GPT-2's
 * mixed precision runs (an f32 residual stream into a bf16 layer norm
 * output; a bf16 gradient into an f32 one) and all-bf16 ones, odd sizes,
 * operands 2 bytes off a 16-byte boundary (f32 ones 4), several blocks and
 * grid strides:
 *   - layer norm forward, plain and with the residual add fused (the sum
 *     rounded as the CPU's pp_add rounds it, bit for bit), and backward,
 *     plain and with the residual gradient added: f32 outputs within 1e-7
 *     of the CPU's (both sum in double, in other orders), bf16 outputs the
 *     CPU's bits but for at most one unit in the last place on at most 1%
 *     of the elements (an f32 value a rounding apart can round to the other
 *     bf16 neighbour);
 *   - GELU forward and backward (x, dy and dx of one dtype, as the ops
 *     check), in place too, and the bf16 dense + GELU's end (h rounded from
 *     the f32 pre-activation, GELU(h) rounded): the CPU's bits (the same f32
 *     formula, element by element).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "tests/check.h"
#include "tests/emu/emu_layernorm.h"
#include "tests/emu/emu_rig.h"

#include "emu_transformer.h"

/* grid-stride kernels get few blocks, so that each block loops */
#define MAX_GRID 3

static pp_dtype dt(bool bf16)
{
    return bf16 ? PP_BF16 : PP_F32;
}

/* t's elements (of either dtype) uniform in [lo, lo + span) */
static void fill_any(pp_tensor *t, float lo, float span)
{
    for (int64_t i = 0; i < pp_tensor_numel(t); i++) {
        const float v = lo + (emu_urand() + 1.0f) * 0.5f * span;
        if (t->dtype == PP_BF16)
            ((uint16_t *)t->data)[i] = pp_bf16_from_f32(v);
        else
            emu_f32(t)[i] = v;
    }
}

/* the kernel's copy of t, off bytes past a 16-byte boundary for bf16 and
 * twice that for f32 (whose elements stay 4-byte aligned, as on a GPU) */
static void *copy_off(const pp_tensor *t, size_t off, void **base)
{
    return emu_copy(t, t->dtype == PP_BF16 ? off : 2 * off, base);
}

/* the kernel's k against the CPU's t: f32 as emu_close (tol), bf16 the same
 * bits but for one unit in the last place on at most 1% of the elements
 * (tol 0: every element's bits) */
static void close_any(const pp_tensor *t, const void *k, double tol, const char *what)
{
    if (t->dtype == PP_F32) {
        emu_close(t, k, tol, what);
        return;
    }
    const int64_t n = pp_tensor_numel(t);
    const uint16_t *c = t->data, *kk = k;
    int64_t near = 0, far = 0;
    for (int64_t i = 0; i < n; i++) {
        if (c[i] == kk[i]) continue;
        const int d = (int)c[i] - (int)kk[i];
        if ((c[i] ^ kk[i]) < 0x8000u && (d == 1 || d == -1) && tol > 0)
            near++;
        else
            far++;
    }
    CHECK_MSG(far == 0 && near * 100 <= n, "%s: %lld of %lld bf16 elements a unit off, %lld "
              "further", what, (long long)near, (long long)n, (long long)far);
}

/* ---- layer norm ------------------------------------------------------------------------ */

typedef struct ln_case {
    int rows, c;
    bool x_bf16, y_bf16;   /* forward: x (a, s), y */
    bool dy_bf16, dx_bf16; /* backward: dy, dx (dres; x's dtype, as the op checks) */
    bool beta, fused;
    size_t off;
} ln_case;

static void test_layernorm(void)
{
    static const ln_case cases[] = {
        /* GPT-2's: the f32 stream into a bf16 output, a bf16 gradient into the f32 stream */
        {40, 100, false, true, true, false, true, true, 0},
        {17, 768, false, true, true, false, true, false, 2},
        {1, 1, false, true, true, false, false, true, 0},
        /* all bf16 */
        {33, 5, true, true, true, true, true, true, 2},
        {18, 768, true, true, true, true, false, true, 0},
        {3, 33, true, true, true, true, true, false, 2},
        /* bf16 input, f32 output and gradient */
        {21, 64, true, false, false, true, true, true, 2},
    };
    pp_error err;
    char what[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const ln_case *k = &cases[i];
        const int rows = k->rows, c = k->c;
        const size_t off = k->off;
        const int64_t xs[2] = {rows, c}, cs[1] = {c}, rs[1] = {rows};
        const pp_dtype xt = dt(k->x_bf16), yt = dt(k->y_bf16), gt = dt(k->dy_bf16),
                       dxt = dt(k->dx_bf16);
        pp_tensor x = emu_tensor(xt, 2, xs, PP_NCHW), a = emu_tensor(xt, 2, xs, PP_NCHW);
        pp_tensor y = emu_tensor(yt, 2, xs, PP_NCHW), dy = emu_tensor(gt, 2, xs, PP_NCHW);
        pp_tensor dx = emu_tensor(dxt, 2, xs, PP_NCHW), res = emu_tensor(dxt, 2, xs, PP_NCHW);
        pp_tensor gamma = emu_tensor(PP_F32, 1, cs, PP_NCHW), beta = emu_tensor(PP_F32, 1, cs, PP_NCHW);
        pp_tensor dgamma = emu_tensor(PP_F32, 1, cs, PP_NCHW), dbeta = emu_tensor(PP_F32, 1, cs, PP_NCHW);
        pp_tensor mean = emu_tensor(PP_F32, 1, rs, PP_NCHW), rstd = emu_tensor(PP_F32, 1, rs, PP_NCHW);
        fill_any(&x, -2, 4), fill_any(&a, -1, 2), fill_any(&dy, -1, 2), fill_any(&res, -1, 2);
        fill_any(&gamma, 0.5f, 1), fill_any(&beta, -1, 2), fill_any(&dgamma, -1, 2);
        fill_any(&dbeta, -1, 2);
        void *bx, *ba, *by, *bdy, *bdx, *bres, *bm, *br, *bdg, *bdb;
        void *kx = copy_off(&x, off, &bx), *ka = copy_off(&a, off, &ba), *ky = copy_off(&y, off, &by);
        void *kdy = copy_off(&dy, off, &bdy), *kdx = copy_off(&dx, off, &bdx);
        void *kres = copy_off(&res, off, &bres);
        float *km = emu_copy(&mean, 0, &bm), *kr = emu_copy(&rstd, 0, &br);
        float *kdg = emu_copy(&dgamma, 0, &bdg), *kdb = emu_copy(&dbeta, 0, &bdb);
        const pp_tensor *b = k->beta ? &beta : NULL;
        const float *kbeta = b ? emu_f32(&beta) : NULL;
        snprintf(what, sizeof what, "layer norm %d x %d, x %s, y %s%s%s%s", rows, c,
                 pp_dtype_name(xt), pp_dtype_name(yt), b ? "" : ", no bias",
                 k->fused ? ", with the residual add" : "", off ? ", off a 16-byte boundary" : "");
        if (k->fused) { /* x = a + x, in x */
            CHECK_OK(pp_add_layernorm_forward(&g_ex, 1e-5f, &a, &x, &gamma, b, &x, &y, &mean,
                                              &rstd, &err), &err);
            EMU_LAUNCHED(pp_emu_cuda_launch_layernorm_forward_mixed(
                             0, MAX_GRID, rows, c, 1e-5f, k->x_bf16, ka, kx, kx, emu_f32(&gamma),
                             kbeta, k->y_bf16, ky, km, kr), what);
            close_any(&x, kx, 0, "layer norm's residual sum");
        } else {
            CHECK_OK(pp_layernorm_forward(&g_ex, 1e-5f, &x, &gamma, b, &y, &mean, &rstd, &err),
                     &err);
            EMU_LAUNCHED(pp_emu_cuda_launch_layernorm_forward_mixed(
                             0, MAX_GRID, rows, c, 1e-5f, k->x_bf16, kx, NULL, NULL,
                             emu_f32(&gamma), kbeta, k->y_bf16, ky, km, kr), what);
        }
        close_any(&y, ky, 1e-7, what);
        emu_close(&mean, km, 1e-7, what);
        emu_close(&rstd, kr, 1e-7, what);
        snprintf(what, sizeof what, "layer norm backward %d x %d, x %s, dy %s, dx %s%s%s", rows,
                 c, pp_dtype_name(xt), pp_dtype_name(gt), pp_dtype_name(dxt),
                 k->fused ? " + dres" : "", off ? ", off a 16-byte boundary" : "");
        emu_ln_backward_cpu(k->fused, b, &x, &dy, &gamma, &mean, &rstd, &res, &dx, &dgamma,
                            &dbeta);
        double *part = malloc(sizeof(double) * 2 * (size_t)c *
                              (size_t)pp_emu_cuda_layernorm_chunks(rows));
        EMU_LAUNCHED(pp_emu_cuda_launch_layernorm_backward_mixed(
                         0, MAX_GRID, rows, c, k->x_bf16, kx, k->dy_bf16, kdy, emu_f32(&gamma),
                         emu_f32(&mean), emu_f32(&rstd), k->dx_bf16, k->fused ? kres : NULL, kdx,
                         part, kdg, b ? kdb : NULL), what);
        close_any(&dx, kdx, 1e-7, what);
        emu_ln_close_params(&dgamma, kdg, &dbeta, kdb);
        free(part);
        void *bases[] = {bx, ba, by, bdy, bdx, bres, bm, br, bdg, bdb};
        pp_tensor *ts[] = {&x, &a, &y, &dy, &dx, &res, &gamma, &beta, &dgamma, &dbeta, &mean, &rstd};
        EMU_FREE_CASE(bases, ts);
    }
}

/* ---- GELU ------------------------------------------------------------------------------ */

static void test_gelu(void)
{
    static const struct { int n; bool x_bf16, y_bf16, in_place; size_t off; } cases[] = {
        {1, true, true, false, 0},      {1001, true, true, false, 2}, {3 * 256 + 5, true, true, true, 0},
        {777, false, false, false, 2},  {300, true, true, false, 0},  {64, true, true, true, 2},
        /* f32, 16-byte aligned: eight at a time (two 16-byte loads) and the tail */
        {1003, false, false, true, 0},  {259, false, false, false, 0},
    };
    pp_error err;
    char what[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n;
        const bool in_place = cases[i].in_place;
        const size_t off = cases[i].off;
        const int64_t s[1] = {n};
        const pp_dtype xt = dt(cases[i].x_bf16), yt = dt(cases[i].y_bf16);
        pp_tensor x = emu_tensor(xt, 1, s, PP_NCHW), y = emu_tensor(yt, 1, s, PP_NCHW);
        pp_tensor dy = emu_tensor(xt, 1, s, PP_NCHW), dx = emu_tensor(yt, 1, s, PP_NCHW);
        fill_any(&x, -5, 10), fill_any(&dy, -2, 4);
        void *bx, *by, *bdy, *bdx;
        void *kx = copy_off(&x, off, &bx), *ky = copy_off(&y, off, &by);
        void *kdy = copy_off(&dy, off, &bdy), *kdx = copy_off(&dx, off, &bdx);
        snprintf(what, sizeof what, "GELU of %d, x %s, y %s%s", n, pp_dtype_name(xt),
                 pp_dtype_name(yt), off ? ", off a 16-byte boundary" : "");
        CHECK_OK(pp_gelu_forward(&g_ex, &x, &y, &err), &err);
        EMU_LAUNCHED(pp_emu_cuda_launch_gelu_mixed(0, MAX_GRID, n, cases[i].x_bf16, kx, NULL,
                                                   cases[i].y_bf16, ky), what);
        close_any(&y, ky, 0, what);
        snprintf(what, sizeof what, "GELU backward of %d, x %s, dx %s%s%s", n, pp_dtype_name(xt),
                 pp_dtype_name(yt), in_place ? ", in place" : "", off ? ", off a 16-byte boundary" : "");
        if (in_place && xt == yt) { /* dx over dy */
            CHECK_OK(pp_gelu_backward(&g_ex, &x, &dy, &dy, &err), &err);
            EMU_LAUNCHED(pp_emu_cuda_launch_gelu_mixed(0, MAX_GRID, n, cases[i].x_bf16, kx, kdy,
                                                       cases[i].y_bf16, kdy), what);
            close_any(&dy, kdy, 0, what);
        } else {
            CHECK_OK(pp_gelu_backward(&g_ex, &x, &dy, &dx, &err), &err);
            EMU_LAUNCHED(pp_emu_cuda_launch_gelu_mixed(0, MAX_GRID, n, cases[i].x_bf16, kx, kdy,
                                                       cases[i].y_bf16, kdx), what);
            close_any(&dx, kdx, 0, what);
        }
        free(bx), free(by), free(bdy), free(bdx);
        pp_tensor_free(&x), pp_tensor_free(&y), pp_tensor_free(&dy), pp_tensor_free(&dx);
    }
}

/* The bf16 dense + GELU's end (dense.c): the f32 pre-activation rounded to
 * h, g = GELU(h) rounded, against the CPU's rounding and pp_gelu_forward. */
static void test_gelu_from_f32(void)
{
    static const int sizes[] = {1, 7, 3 * 256 + 1, 4000};
    pp_error err;
    char what[96];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const int n = sizes[i];
        const int64_t s[1] = {n};
        pp_tensor pre = emu_tensor(PP_F32, 1, s, PP_NCHW);
        pp_tensor h = emu_tensor(PP_BF16, 1, s, PP_NCHW), g = emu_tensor(PP_BF16, 1, s, PP_NCHW);
        fill_any(&pre, -6, 12);
        for (int j = 0; j < n; j++) ((uint16_t *)h.data)[j] = pp_bf16_from_f32(emu_f32(&pre)[j]);
        CHECK_OK(pp_gelu_forward(&g_ex, &h, &g, &err), &err);
        void *bh, *bg, *bpre;
        const size_t off = i % 2 ? 2 : 0;
        void *kh = copy_off(&h, off, &bh), *kg = copy_off(&g, off, &bg);
        void *kpre = copy_off(&pre, off, &bpre);
        snprintf(what, sizeof what, "h and GELU(h) from the f32 pre-activation, %d%s", n,
                 off ? ", off a 16-byte boundary" : "");
        EMU_LAUNCHED(pp_emu_cuda_launch_gelu_from_f32(0, MAX_GRID, n, kpre, kh, kg), what);
        close_any(&h, kh, 0, "h, rounded from the f32 pre-activation");
        close_any(&g, kg, 0, what);
        free(bh), free(bg), free(bpre);
        pp_tensor_free(&pre), pp_tensor_free(&h), pp_tensor_free(&g);
    }
}

int main(void)
{
    emu_rig_open();
    test_layernorm();
    test_gelu();
    test_gelu_from_f32();
    return emu_rig_close("test_emu_transformer_bf16");
}
