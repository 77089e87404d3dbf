/*
 * test_emu_nhwc.c - the CUDA backend's layout and bf16 NHWC kernels
 * (runtime/cuda/nhwc.cu), run on the CPU by the emulator (cuda_emu.h):
 *   - transposes, 2- and 4-byte elements: the narrow kernel (a side of at
 *     most 16, as the input images' 3 channels NCHW -> NHWC and back, and a
 *     3x3 convolution weight's positions) and the
 *     32x32-tile one, against the definition;
 *   - the stem's channel padding (8 channels a thread where the padded
 *     count is a multiple of 8 and y aligned; one element a thread else) and
 *     the padded weight gradient's add, against the definition;
 *   - bf16 elementwise ops, max pooling (8 channels a thread, and one) and
 *     global average pooling (bf16 and f32 outputs) against the CPU backend
 *     on the same bf16 NHWC tensors, which they must match bit for bit
 *     (tests/cuda/test_cuda_native.c holds the GPU to the same).
 * Each runs with a grid of 3 blocks (grid-stride loops) and of 1024.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/emu/emu_rig.h"

#include "emu_nhwc.h"

static uint64_t g_rng = 0xda3e39cb94b95bdbull;
static const unsigned GRIDS[2] = {3, 1024};

static uint32_t rnd(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 32);
}

static float urand(void)
{
    return (float)(rnd() >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

/* ---- transposes ------------------------------------------------------------------- */

static void test_transpose(void)
{
    static const struct {
        int64_t n, rows, cols;
    } cases[] = {
        {2, 3, 50},  /* narrow: 3 channels NCHW -> NHWC */
        {3, 37, 3},  /* narrow: back */
        {1, 8, 8},   /* narrow both ways */
        {6, 20, 9},  /* narrow: a 3x3 convolution weight's KCRS -> KRSC */
        {2, 16, 33}, /* narrow at its limit */
        {2, 17, 33}, /* tiles just past it */
        {2, 1, 300}, /* one row */
        {2, 9, 40},  /* tiles, partial */
        {3, 40, 70}, /* tiles */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t n = cases[i].n, rows = cases[i].rows, cols = cases[i].cols;
        const int64_t total = n * rows * cols;
        for (size_t elem = 2; elem <= 4; elem += 2) {
            void *bx, *by;
            unsigned char *x = emu_alloc((size_t)total * elem, 0, &bx);
            unsigned char *y = emu_alloc((size_t)total * elem, 0, &by);
            for (int64_t k = 0; k < total * (int64_t)elem; k++) x[k] = (unsigned char)rnd();
            CUDA_OK(pp_emu_cuda_launch_transpose(0, n, rows, cols, elem, x, y),
                    "transpose %lldx%lldx%lld, %zu bytes: launch", (long long)n, (long long)rows,
                    (long long)cols, elem);
            int64_t wrong = 0;
            for (int64_t m = 0; m < n; m++)
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t c = 0; c < cols; c++)
                        wrong += memcmp(y + ((m * cols + c) * rows + r) * elem,
                                        x + ((m * rows + r) * cols + c) * elem, elem) != 0;
            CHECK_MSG(wrong == 0, "transpose %lldx%lldx%lld, %zu-byte elements: %lld of %lld wrong",
                      (long long)n, (long long)rows, (long long)cols, elem, (long long)wrong,
                      (long long)total);
            free(bx);
            free(by);
        }
    }
}

/* ---- the stem's padding and its weight gradient ----------------------------------- */

static void test_pad(void)
{
    static const struct {
        int64_t rows;
        int c, cp;
        size_t off;
    } cases[] = {
        {37, 3, 8, 0},   /* the stem: 8 channels a thread */
        {10, 11, 16, 0}, /* two groups of 8 */
        {37, 3, 8, 2},   /* y misaligned: one element a thread */
        {5, 5, 6, 0},    /* not a multiple of 8 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t rows = cases[i].rows;
        const int c = cases[i].c, cp = cases[i].cp;
        for (int gi = 0; gi < 2; gi++) {
            void *bx, *by;
            uint16_t *x = emu_alloc((size_t)rows * c * 2, 0, &bx);
            uint16_t *y = emu_alloc((size_t)rows * cp * 2, cases[i].off, &by);
            for (int64_t k = 0; k < rows * c; k++) x[k] = (uint16_t)(rnd() | 1u);
            for (int64_t k = 0; k < rows * cp; k++) y[k] = 0xffff; /* overwritten, zeros too */
            CUDA_OK(pp_emu_cuda_launch_pad_channels(0, GRIDS[gi], rows, c, cp, x, y),
                    "pad case %zu: launch", i);
            int64_t wrong = 0;
            for (int64_t r = 0; r < rows; r++)
                for (int ch = 0; ch < cp; ch++)
                    wrong += y[r * cp + ch] != (ch < c ? x[r * c + ch] : 0);
            CHECK_MSG(wrong == 0,
                      "pad %lld rows %d -> %d channels (offset %zu, grid %u): %lld wrong",
                      (long long)rows, c, cp, cases[i].off, GRIDS[gi], (long long)wrong);
            free(bx);
            free(by);
        }
    }
    /* dw (k, c, rs) += low (k, rs, cp) widened, channels < c */
    const int k = 5, c = 3, rs = 9, cp = 8;
    void *bl, *bw, *br;
    uint16_t *low = emu_alloc((size_t)k * rs * cp * 2, 0, &bl);
    float *dw = emu_alloc((size_t)k * c * rs * 4, 0, &bw),
          *ref = emu_alloc((size_t)k * c * rs * 4, 0, &br);
    for (int64_t i = 0; i < (int64_t)k * rs * cp; i++) low[i] = pp_bf16_from_f32(urand());
    for (int64_t i = 0; i < (int64_t)k * c * rs; i++) dw[i] = ref[i] = urand();
    for (int kk = 0; kk < k; kk++)
        for (int ch = 0; ch < c; ch++)
            for (int pos = 0; pos < rs; pos++)
                ref[(kk * c + ch) * rs + pos] += pp_f32_from_bf16(low[(kk * rs + pos) * cp + ch]);
    CUDA_OK(pp_emu_cuda_launch_wgrad_add(0, 3, k, c, rs, cp, low, dw), "wgrad_add: launch");
    CHECK_MSG(memcmp(dw, ref, (size_t)k * c * rs * 4) == 0, "wgrad_add: not the definition's bits");
    free(bl), free(bw), free(br);
}

/* ---- against the CPU backend, bit for bit ------------------------------------------ */

static void fill_bf16(pp_tensor *t)
{
    for (int64_t i = 0; i < pp_tensor_numel(t); i++)
        ((uint16_t *)t->data)[i] = pp_bf16_from_f32(urand() * 2.0f);
}

static void same(const pp_tensor *t, const void *k, const char *what)
{
    const size_t esz = pp_dtype_size(t->dtype);
    int64_t wrong = 0;
    for (int64_t i = 0; i < pp_tensor_numel(t); i++)
        wrong += memcmp((const char *)t->data + i * esz, (const char *)k + i * esz, esz) != 0;
    CHECK_MSG(wrong == 0, "%s: %lld of %lld elements differ from the CPU backend", what,
              (long long)wrong, (long long)pp_tensor_numel(t));
}

static void test_elementwise(void)
{
    static const struct {
        pp_emu_cuda_bf16_ew kind;
        const char *what;
    } kinds[] = {
        {PP_CUDA_BF16_RELU, "relu"},
        {PP_CUDA_BF16_RELU_BACKWARD, "relu backward"},
        {PP_CUDA_BF16_ADD, "add"},
        {PP_CUDA_BF16_ADD_RELU, "add + relu"},
    };
    const int64_t shape[1] = {1003}; /* 125 groups of 8 and a tail */
    pp_error err;
    char what[96];
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        for (size_t off = 0; off <= 2; off += 2) {
            pp_tensor a = emu_tensor(PP_BF16, 1, shape, PP_NCHW),
                      b = emu_tensor(PP_BF16, 1, shape, PP_NCHW);
            pp_tensor y = emu_tensor(PP_BF16, 1, shape, PP_NCHW);
            fill_bf16(&a), fill_bf16(&b);
            void *ba, *bb, *by;
            const void *ka = emu_copy(&a, off, &ba), *kb = emu_copy(&b, off, &bb);
            void *ky = emu_copy(&y, off, &by);
            switch (kinds[i].kind) {
            case PP_CUDA_BF16_RELU: CHECK_OK(pp_relu_forward(&g_ex, &a, &y, &err), &err); break;
            case PP_CUDA_BF16_RELU_BACKWARD:
                CHECK_OK(pp_relu_backward(&g_ex, &a, &b, &y, &err), &err);
                break;
            case PP_CUDA_BF16_ADD: CHECK_OK(pp_add(&g_ex, &a, &b, &y, &err), &err); break;
            case PP_CUDA_BF16_ADD_RELU: CHECK_OK(pp_add_relu(&g_ex, &a, &b, &y, &err), &err); break;
            }
            CUDA_OK(pp_emu_cuda_launch_bf16_elementwise(
                        0, 3, kinds[i].kind, shape[0], ka,
                        kinds[i].kind == PP_CUDA_BF16_RELU ? NULL : kb, ky),
                    "%s: launch", kinds[i].what);
            snprintf(what, sizeof what, "bf16 %s%s", kinds[i].what, off ? " (unaligned)" : "");
            same(&y, ky, what);
            free(ba), free(bb), free(by);
            pp_tensor_free(&a), pp_tensor_free(&b), pp_tensor_free(&y);
        }
    }
}

static void test_pooling(void)
{
    static const pp_pool_desc cases[] = {
        {2, 16, 9, 9, 3, 2, 1, 0, 0},   /* 8 channels a thread */
        {2, 5, 7, 6, 3, 2, 1, 0, 0},    /* one */
        {1, 64, 12, 12, 3, 2, 1, 0, 0}, /* the stem's window on 64 channels */
    };
    pp_error err;
    char what[96];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_pool_desc d = cases[i];
        CHECK_OK(pp_pool_desc_init(&d, d.n, d.c, d.h, d.w, d.kernel, d.stride, d.pad, &err), &err);
        const int64_t xs[4] = {d.n, d.c, d.h, d.w}, ys[4] = {d.n, d.c, d.p, d.q};
        for (int gi = 0; gi < 2; gi++) {
            pp_tensor x = emu_tensor(PP_BF16, 4, xs, PP_NHWC),
                      y = emu_tensor(PP_BF16, 4, ys, PP_NHWC);
            pp_tensor idx = emu_tensor(PP_I32, 4, ys, PP_NHWC),
                      dy = emu_tensor(PP_BF16, 4, ys, PP_NHWC);
            pp_tensor dx = emu_tensor(PP_BF16, 4, xs, PP_NHWC);
            fill_bf16(&x), fill_bf16(&dy);
            void *bx, *by, *bi, *bd, *bdx;
            const void *kx = emu_copy(&x, 0, &bx), *kdy = emu_copy(&dy, 0, &bd);
            void *ky = emu_copy(&y, 0, &by), *ki = emu_copy(&idx, 0, &bi),
                 *kdx = emu_copy(&dx, 0, &bdx);
            CHECK_OK(pp_maxpool_forward(&g_ex, &d, &x, &y, &idx, &err), &err);
            CHECK_OK(pp_maxpool_backward(&g_ex, &d, &x, &y, &dy, &idx, &dx, &err), &err);
            const pp_emu_cuda_pool_geom4 g = {d.n, d.c,      d.h,      d.w,  d.p,
                                              d.q, d.kernel, d.stride, d.pad};
            CUDA_OK(pp_emu_cuda_launch_maxpool_nhwc(0, GRIDS[gi], g, kx, ky, ki),
                    "maxpool: launch");
            CUDA_OK(pp_emu_cuda_launch_maxpool_backward_nhwc(0, GRIDS[gi], g, kdy, ki, kdx),
                    "maxpool backward: launch");
            snprintf(what, sizeof what, "maxpool %dx%dx%dx%d, grid %u", d.n, d.c, d.h, d.w,
                     GRIDS[gi]);
            same(&y, ky, what);
            same(&idx, ki, what);
            same(&dx, kdx, what);
            free(bx), free(by), free(bi), free(bd), free(bdx);
            pp_tensor *all[] = {&x, &y, &idx, &dy, &dx};
            for (int k = 0; k < 5; k++) pp_tensor_free(all[k]);
        }
    }
    /* global average pooling, into bf16 and into f32 */
    const int64_t xs[4] = {3, 24, 5, 7};
    for (int f32 = 0; f32 < 2; f32++) {
        const int64_t ys[2] = {xs[0], xs[1]};
        pp_tensor x = emu_tensor(PP_BF16, 4, xs, PP_NHWC), dx = emu_tensor(PP_BF16, 4, xs, PP_NHWC);
        pp_tensor y = emu_tensor(f32 ? PP_F32 : PP_BF16, 2, ys, PP_NCHW);
        pp_tensor dy = emu_tensor(f32 ? PP_F32 : PP_BF16, 2, ys, PP_NCHW);
        fill_bf16(&x);
        for (int64_t i = 0; i < pp_tensor_numel(&dy); i++) {
            if (f32)
                ((float *)dy.data)[i] = urand();
            else
                ((uint16_t *)dy.data)[i] = pp_bf16_from_f32(urand());
        }
        void *bx, *by, *bd, *bdx;
        const void *kx = emu_copy(&x, 0, &bx), *kdy = emu_copy(&dy, 0, &bd);
        void *ky = emu_copy(&y, 0, &by), *kdx = emu_copy(&dx, 0, &bdx);
        CHECK_OK(pp_avgpool_forward(&g_ex, &x, &y, &err), &err);
        CHECK_OK(pp_avgpool_backward(&g_ex, &dy, &dx, &err), &err);
        CUDA_OK(pp_emu_cuda_launch_gap_nhwc(0, 3, xs[0], (int)xs[1], xs[2] * xs[3], kx, ky, !f32),
                "gap: launch");
        CUDA_OK(pp_emu_cuda_launch_gap_backward_nhwc(0, 3, xs[0], (int)xs[1], xs[2] * xs[3], kdy,
                                                     !f32, kdx),
                "gap backward: launch");
        same(&y, ky, f32 ? "global average pool into f32" : "global average pool into bf16");
        same(&dx, kdx,
             f32 ? "global average pool backward from f32"
                 : "global average pool backward from bf16");
        free(bx), free(by), free(bd), free(bdx);
        pp_tensor_free(&x), pp_tensor_free(&dx), pp_tensor_free(&y), pp_tensor_free(&dy);
    }
}

int main(void)
{
    emu_rig_open();
    test_transpose();
    test_pad();
    test_elementwise();
    test_pooling();
    return emu_rig_close("test_emu_nhwc");
}
