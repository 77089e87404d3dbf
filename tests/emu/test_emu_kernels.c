/*
 * test_emu_kernels.c - the CUDA backend's f32 kernels (runtime/cuda/kernels.cu),
 * run on the CPU by the emulator (cuda_emu.h), against the CPU backend:
 *   - elementwise ops, GELU among them (float4 and single-float paths,
 *     grid-stride loops), SGD (one tensor, and the multi-tensor launch with aligned and unaligned
 *     tensors, momentum, Nesterov, weight decay, the first step): the CPU's
 *     bits, as ops.h promises (sigmoid within 2 ulps: exp is the library's);
 *   - the bf16 casts: pp_bf16_from_f32's bits, specials included, eight at a
 *     time (16-byte aligned) and one at a time;
 *   - multi-tensor zeroing: every byte of every buffer, none beside;
 *   - channel bias, window and global average pooling: within f32
 *     rounding of the CPU (1e-6 normalised; the softmax cross-entropy is
 *     classifier.cu's, test_emu_transformer.c's);
 *   - the delay kernel: it occupies its launch for the time asked;
 *   - the copies between pitches: every element, no padding written.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/emu/emu_rig.h"

#include "emu_kernels.h"


static void test_elementwise(void)
{
    static const struct {
        pp_emu_cuda_ew_kind kind;
        const char *what;
    } kinds[] = {
        {PP_CUDA_EW_RELU, "relu"},       {PP_CUDA_EW_RELU_BACKWARD, "relu backward"},
        {PP_CUDA_EW_SIGMOID, "sigmoid"}, {PP_CUDA_EW_SIGMOID_BACKWARD, "sigmoid backward"},
        {PP_CUDA_EW_ADD, "add"},         {PP_CUDA_EW_ADD_RELU, "add + relu"},
        {PP_CUDA_EW_ADD_BF16, "add of a rounded to bf16"},
        {PP_CUDA_EW_GELU, "gelu"},       {PP_CUDA_EW_GELU_BACKWARD, "gelu backward"},
    };
    const int64_t shape[1] = {1003};
    pp_error err;
    char what[64];
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        for (size_t off = 0; off <= 4; off += 4) {
            pp_tensor a = emu_tensor(PP_F32, 1, shape, PP_NCHW),
                      b = emu_tensor(PP_F32, 1, shape, PP_NCHW);
            pp_tensor y = emu_tensor(PP_F32, 1, shape, PP_NCHW);
            emu_fill(&a, -3, 6), emu_fill(&b, -3, 6);
            void *ba, *bb, *by;
            float *ka = emu_copy(&a, off, &ba), *kb = emu_copy(&b, off, &bb),
                  *ky = emu_copy(&y, off, &by);
            switch (kinds[i].kind) {
            case PP_CUDA_EW_RELU: CHECK_OK(pp_relu_forward(&g_ex, &a, &y, &err), &err); break;
            case PP_CUDA_EW_RELU_BACKWARD:
                CHECK_OK(pp_relu_backward(&g_ex, &a, &b, &y, &err), &err);
                break;
            case PP_CUDA_EW_SIGMOID: CHECK_OK(pp_sigmoid_forward(&g_ex, &a, &y, &err), &err); break;
            case PP_CUDA_EW_SIGMOID_BACKWARD:
                CHECK_OK(pp_sigmoid_backward(&g_ex, &a, &b, &y, &err), &err);
                break;
            case PP_CUDA_EW_ADD: CHECK_OK(pp_add(&g_ex, &a, &b, &y, &err), &err); break;
            case PP_CUDA_EW_ADD_RELU: CHECK_OK(pp_add_relu(&g_ex, &a, &b, &y, &err), &err); break;
            case PP_CUDA_EW_ADD_BF16: { /* the three ops it stands for */
                const float *pa = a.data, *pb = b.data;
                float *py = y.data;
                for (int64_t k = 0; k < shape[0]; k++)
                    py[k] = pp_f32_from_bf16(pp_bf16_from_f32(pa[k])) + pb[k];
                break;
            }
            case PP_CUDA_EW_GELU: CHECK_OK(pp_gelu_forward(&g_ex, &a, &y, &err), &err); break;
            case PP_CUDA_EW_GELU_BACKWARD:
                CHECK_OK(pp_gelu_backward(&g_ex, &a, &b, &y, &err), &err);
                break;
            }
            snprintf(what, sizeof what, "%s%s", kinds[i].what, off ? " (single floats)" : "");
            EMU_LAUNCHED(pp_emu_cuda_launch_elementwise(0, 3, kinds[i].kind, shape[0], ka, kb, ky),
                     what);
            const bool sig = kinds[i].kind == PP_CUDA_EW_SIGMOID;
            emu_close(&y, ky, sig ? 3e-7 : 0, what);
            free(ba), free(bb), free(by);
            pp_tensor_free(&a), pp_tensor_free(&b), pp_tensor_free(&y);
        }
    }
}

static void test_casts(void)
{
    static const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                       0x00000001u, 0x00400000u, 0x7f7fffffu, 0x3f808000u,
                                       0x3f818000u, 0x80000000u};
    enum { N = 777 };
    /* on 64-byte boundaries (eight at a time, then the tail), and one element
     * off them (one at a time) */
    for (int off = 0; off < 2; off++) {
        void *bx, *by, *bback;
        float *x = emu_alloc(N * sizeof(float), off * sizeof(float), &bx);
        uint16_t *y = emu_alloc(N * sizeof(uint16_t), off * sizeof(uint16_t), &by);
        float *back = emu_alloc(N * sizeof(float), off * sizeof(float), &bback);
        for (int i = 0; i < N; i++) x[i] = ldexpf(emu_urand(), (int)(emu_urand() * 40));
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
            memcpy(&x[i], &special[i], 4);
        const char *how = off ? "one at a time" : "eight at a time";
        EMU_LAUNCHED(pp_emu_cuda_launch_bf16_from_f32(0, 2, N, x, y), how);
        EMU_LAUNCHED(pp_emu_cuda_launch_f32_from_bf16(0, 2, N, y, back), how);
        int bad = 0, bad_back = 0;
        for (int i = 0; i < N; i++) {
            bad += y[i] != pp_bf16_from_f32(x[i]);
            const float want = pp_f32_from_bf16(y[i]);
            bad_back += memcmp(&back[i], &want, 4) != 0;
        }
        CHECK_MSG(bad == 0, "bf16_from_f32 (%s): %d of %d not pp_bf16_from_f32's bits", how, bad,
                  N);
        CHECK_MSG(bad_back == 0, "f32_from_bf16 (%s): %d of %d not exact", how, bad_back, N);
        free(bx), free(by), free(bback);
    }
}

static void test_sgd(void)
{
    static const pp_sgd_desc descs[] = {{0.1f, 0.9f, 1e-4f, false, true},
                                        {0.1f, 0.9f, 1e-4f, false, false},
                                        {0.05f, 0.9f, 0.0f, true, false},
                                        {0.1f, 0.0f, 5e-4f, false, false}};
    /* an aligned tensor of several tiles, an unaligned one, and a short one */
    static const struct {
        int64_t n;
        size_t off;
    } ts[] = {{9000, 0}, {1037, 4}, {3, 0}};
    enum { T = 3 };
    pp_error err;
    char what[96];
    for (size_t di = 0; di < sizeof descs / sizeof descs[0]; di++) {
        const pp_sgd_desc *d = &descs[di];
        pp_tensor p[T], g[T], b[T];
        void *bp[T], *bg[T], *bb[T], *sp[T], *sb[T];
        float *kp[T], *kg[T], *kb[T], *p1[T], *b1[T];
        pp_emu_cuda_sgd_list list;
        memset(&list, 0, sizeof list);
        for (int i = 0; i < T; i++) {
            p[i] = emu_tensor(PP_F32, 1, &ts[i].n, PP_NCHW),
            g[i] = emu_tensor(PP_F32, 1, &ts[i].n, PP_NCHW);
            b[i] = emu_tensor(PP_F32, 1, &ts[i].n, PP_NCHW);
            emu_fill(&p[i], -1, 2), emu_fill(&g[i], -1, 2), emu_fill(&b[i], -1, 2);
            kp[i] = emu_copy(&p[i], ts[i].off, &bp[i]), kg[i] = emu_copy(&g[i], ts[i].off, &bg[i]);
            kb[i] = emu_copy(&b[i], ts[i].off, &bb[i]);
            p1[i] = emu_copy(&p[i], ts[i].off, &sp[i]), b1[i] = emu_copy(&b[i], ts[i].off, &sb[i]);
            list.param[i] = kp[i];
            list.grad[i] = kg[i];
            list.buf[i] = d->momentum != 0 ? kb[i] : NULL;
            list.n[i] = ts[i].n;
            list.first_tile[i] = list.tiles;
            list.tiles += (int32_t)((ts[i].n + PP_CUDA_MULTI_TILE - 1) / PP_CUDA_MULTI_TILE);
            list.count++;
            CHECK_OK(pp_sgd_update(&g_ex, d, &p[i], &g[i], d->momentum != 0 ? &b[i] : NULL, &err),
                     &err);
            EMU_LAUNCHED(pp_emu_cuda_launch_sgd(0, 3, ts[i].n, d->lr, d->momentum, d->weight_decay,
                                            d->nesterov, d->first_step, p1[i], kg[i],
                                            d->momentum != 0 ? b1[i] : NULL),
                     "sgd");
        }
        EMU_LAUNCHED(pp_emu_cuda_launch_sgd_multi(0, 5, &list, d->lr, d->momentum, d->weight_decay,
                                              d->nesterov, d->first_step),
                 "sgd_multi");
        for (int i = 0; i < T; i++) {
            snprintf(what, sizeof what, "sgd (case %zu, tensor %d of %lld)", di, i,
                     (long long)ts[i].n);
            emu_close(&p[i], p1[i], 0, what);
            snprintf(what, sizeof what, "sgd_multi (case %zu, tensor %d of %lld)", di, i,
                     (long long)ts[i].n);
            emu_close(&p[i], kp[i], 0, what);
            if (d->momentum != 0) {
                emu_close(&b[i], kb[i], 0, what);
                emu_close(&b[i], b1[i], 0, what);
            }
            free(bp[i]), free(bg[i]), free(bb[i]), free(sp[i]), free(sb[i]);
            pp_tensor_free(&p[i]), pp_tensor_free(&g[i]), pp_tensor_free(&b[i]);
        }
    }
}

static void test_zero_multi(void)
{
    static const struct {
        size_t bytes, off;
    } bufs[] = {{1, 3}, {17, 1}, {70000, 0}, {16385, 7}, {4096, 8}};
    enum { B = 5, PAD = 32 };
    unsigned char *mem[B];
    pp_emu_cuda_zero_list list;
    memset(&list, 0, sizeof list);
    for (int i = 0; i < B; i++) {
        mem[i] = malloc(bufs[i].bytes + bufs[i].off + 2 * PAD);
        memset(mem[i], 0xa5, bufs[i].bytes + bufs[i].off + 2 * PAD);
        list.ptr[i] = mem[i] + PAD + bufs[i].off;
        list.bytes[i] = (int64_t)bufs[i].bytes;
        list.first_tile[i] = list.tiles;
        list.tiles += (int32_t)(((int64_t)bufs[i].bytes + PP_CUDA_ZERO_TILE_BYTES - 1) /
                                PP_CUDA_ZERO_TILE_BYTES);
        list.count++;
    }
    EMU_LAUNCHED(pp_emu_cuda_launch_zero_multi(0, 3, &list), "zero_multi");
    for (int i = 0; i < B; i++) {
        size_t nonzero = 0, touched = 0;
        const size_t lo = PAD + bufs[i].off, hi = lo + bufs[i].bytes;
        for (size_t k = 0; k < bufs[i].bytes + bufs[i].off + 2 * PAD; k++) {
            if (k >= lo && k < hi)
                nonzero += mem[i][k] != 0;
            else
                touched += mem[i][k] != 0xa5;
        }
        CHECK_MSG(nonzero == 0 && touched == 0,
                  "zero_multi buffer %d (%zu bytes at offset %zu): %zu not zeroed, %zu beside "
                  "written",
                  i, bufs[i].bytes, bufs[i].off, nonzero, touched);
        free(mem[i]);
    }
}

static void test_bias_pool(void)
{
    pp_error err;
    void *b1, *b2, *b3;
    /* channel bias */
    const int64_t ys[4] = {3, 5, 7, 9}, cs[1] = {5};
    pp_tensor y = emu_tensor(PP_F32, 4, ys, PP_NCHW), bias = emu_tensor(PP_F32, 1, cs, PP_NCHW),
              db = emu_tensor(PP_F32, 1, cs, PP_NCHW);
    emu_fill(&y, -1, 2), emu_fill(&bias, -1, 2), emu_fill(&db, -1, 2);
    float *ky = emu_copy(&y, 0, &b1), *kdb = emu_copy(&db, 0, &b2);
    CHECK_OK(pp_channel_bias_forward(&g_ex, &bias, &y, &err), &err);
    EMU_LAUNCHED(pp_emu_cuda_launch_channel_bias_add(0, 3, 3, 5, 63, emu_f32(&bias), ky), "channel bias");
    emu_close(&y, ky, 0, "channel bias add");
    CHECK_OK(pp_channel_bias_backward(&g_ex, &y, &db, &err), &err);
    EMU_LAUNCHED(pp_emu_cuda_launch_channel_bias_backward(0, 3, 5, 63, ky, kdb),
             "channel bias backward");
    emu_close(&db, kdb, 1e-6, "channel bias backward (+=)");
    free(b1), free(b2);
    pp_tensor_free(&y), pp_tensor_free(&bias), pp_tensor_free(&db);

    /* window average pooling, and global */
    pp_pool_desc d;
    CHECK_OK(pp_pool_desc_init(&d, 2, 3, 9, 8, 3, 2, 1, &err), &err);
    const int64_t xs[4] = {2, 3, 9, 8}, ps[4] = {2, 3, d.p, d.q}, gs[2] = {2, 3};
    pp_tensor x = emu_tensor(PP_F32, 4, xs, PP_NCHW), py = emu_tensor(PP_F32, 4, ps, PP_NCHW),
              pdy = emu_tensor(PP_F32, 4, ps, PP_NCHW);
    pp_tensor pdx = emu_tensor(PP_F32, 4, xs, PP_NCHW), gy = emu_tensor(PP_F32, 2, gs, PP_NCHW),
              gdx = emu_tensor(PP_F32, 4, xs, PP_NCHW);
    emu_fill(&x, -1, 2), emu_fill(&pdy, -1, 2);
    const pp_emu_cuda_pool_geom g = {6, 9, 8, d.p, d.q, 3, 2, 1};
    float *kpy = emu_copy(&py, 0, &b1), *kpdx = emu_copy(&pdx, 0, &b2),
          *kgy = emu_copy(&gy, 0, &b3);
    CHECK_OK(pp_avgpool2d_forward(&g_ex, &d, &x, &py, &err), &err);
    CHECK_OK(pp_avgpool2d_backward(&g_ex, &d, &pdy, &pdx, &err), &err);
    EMU_LAUNCHED(pp_emu_cuda_launch_avgpool2d_forward(0, 3, g, emu_f32(&x), kpy), "avgpool2d");
    EMU_LAUNCHED(pp_emu_cuda_launch_avgpool2d_backward(0, 3, g, emu_f32(&pdy), kpdx), "avgpool2d backward");
    emu_close(&py, kpy, 1e-6, "avgpool2d forward");
    emu_close(&pdx, kpdx, 1e-6, "avgpool2d backward");
    free(b2);
    float *kgdx = emu_copy(&gdx, 0, &b2);
    CHECK_OK(pp_avgpool_forward(&g_ex, &x, &gy, &err), &err);
    CHECK_OK(pp_avgpool_backward(&g_ex, &gy, &gdx, &err), &err);
    EMU_LAUNCHED(pp_emu_cuda_launch_avgpool_forward(0, 6, 72, emu_f32(&x), kgy), "avgpool");
    EMU_LAUNCHED(pp_emu_cuda_launch_avgpool_backward(0, 3, 6, 72, emu_f32(&gy), kgdx), "avgpool backward");
    emu_close(&gy, kgy, 1e-6, "global average pool");
    emu_close(&gdx, kgdx, 1e-6, "global average pool backward");
    free(b1), free(b2), free(b3);
    pp_tensor *ts[] = {&x, &py, &pdy, &pdx, &gy, &gdx};
    for (size_t i = 0; i < 6; i++) pp_tensor_free(ts[i]);
}

static void test_delay(void)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    EMU_LAUNCHED(pp_emu_cuda_launch_delay(0, 3000000), "delay");
    clock_gettime(CLOCK_MONOTONIC, &b);
    const double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
    CHECK_MSG(ms >= 3.0, "a 3 ms delay returned after %.2f ms", ms);
}

/* The copies between pitches (cuBLASLt's operands at a padded pitch, blaslt.c): every
 * line's elements at the new pitch, the padding and the bytes past the last line
 * untouched, at 2- and 4-byte elements, bases an element off 16 bytes, lines a warp takes (at most
 * 256 elements) and lines a block takes, more lines than the grid has groups, from an
 * unaligned pitch to a padded one and back. */
static void test_copy_pitched(void)
{
    static const struct {
        int64_t lines, len, sld, dld;
        unsigned grid;
    } cases[] = {
        {11, 37, 37, 40, 2},      /* the tied test head's shape, padded */
        {11, 37, 40, 37, 2},      /* and back */
        {40, 5, 7, 8, 2},         /* short lines, 8 a block, 16 a pass of the grid */
        {9, 256, 259, 264, 1},    /* the longest a warp takes */
        {5, 257, 257, 264, 2},    /* the shortest a block takes */
        {3, 5000, 5001, 5008, 2}, /* runs of 8 x 256 and a tail */
        {3, 5000, 5008, 5001, 64},
        {0, 5, 5, 8, 2},          /* nothing to copy */
    };
    enum { SENT = 0xa5 };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t es = 2; es <= 4; es += 2) {
            const int64_t L = cases[c].lines, n = cases[c].len, sld = cases[c].sld,
                          dld = cases[c].dld;
            const size_t sbytes = (size_t)(L * sld + 8) * es, dbytes = (size_t)(L * dld + 8) * es;
            void *bs, *bd;
            /* bases an element off 16 bytes (an element's own alignment, as tensors have) */
            unsigned char *src = emu_alloc(sbytes, es, &bs), *dst = emu_alloc(dbytes, es, &bd);
            for (size_t i = 0; i < sbytes; i++) src[i] = (unsigned char)(i * 2654435761u >> 13);
            memset(dst, SENT, dbytes);
            char what[96];
            snprintf(what, sizeof what, "copy_pitched %lld x %lld, pitch %lld to %lld, %zu bytes",
                     (long long)L, (long long)n, (long long)sld, (long long)dld, es);
            EMU_LAUNCHED(pp_emu_cuda_launch_copy_pitched(0, cases[c].grid, L, n, es, src, sld,
                                                         dst, dld),
                         what);
            int64_t bad = 0, touched = 0;
            for (int64_t l = 0; l < L; l++)
                for (int64_t i = 0; i < dld; i++) {
                    const unsigned char *d = dst + (size_t)(l * dld + i) * es;
                    if (i < n)
                        bad += memcmp(d, src + (size_t)(l * sld + i) * es, es) != 0;
                    else
                        for (size_t b = 0; b < es; b++) touched += d[b] != SENT;
                }
            for (size_t b = (size_t)(L * dld) * es; b < dbytes; b++) touched += dst[b] != SENT;
            CHECK_MSG(bad == 0, "%s: %lld elements not the source's", what, (long long)bad);
            CHECK_MSG(touched == 0, "%s: %lld bytes of padding written", what, (long long)touched);
            free(bs), free(bd);
        }
    }
    /* refused: an element size of 3 bytes, a pitch shorter than a line, 4-byte
     * elements off their alignment */
    CHECK(pp_emu_cuda_launch_copy_pitched(0, 2, 2, 8, 3, NULL, 8, NULL, 8) != cudaSuccess);
    static uint32_t words[4];
    CHECK(pp_emu_cuda_launch_copy_pitched(0, 2, 1, 1, 4, (const char *)words + 2, 1, words + 2,
                                          1) != cudaSuccess);
    CHECK(pp_emu_cuda_launch_copy_pitched(0, 2, 2, 8, 2, NULL, 7, NULL, 8) != cudaSuccess);
    CHECK(pp_emu_cuda_launch_copy_pitched(0, 2, 2, 8, 2, NULL, 8, NULL, 7) != cudaSuccess);
}

/* The padded copies (the operands of a GEMM whose extents blaslt.c pads): line k's first
 * len elements the source's where k < src_lines, every other element up to fill zero, the
 * bytes past fill in each line and past the last line untouched; no source read at all
 * where src_lines is 0 (NULL given); refused: fill under len, a pitch under fill, more
 * source lines than lines. */
static void test_copy_padded(void)
{
    static const struct {
        int64_t lines, len, src_lines, fill, sld, dld;
        unsigned grid;
    } cases[] = {
        {12, 37, 11, 40, 37, 40, 2},     /* the head's weight: rows to the pitch, a zero column */
        {11, 37, 11, 40, 40, 48, 2},     /* an aligned source, a wider pitch */
        {3, 5000, 3, 5008, 5001, 5008, 2}, /* runs of 8 x 256 and a tail */
        {9, 256, 2, 256, 256, 264, 1},   /* whole zero lines a warp takes */
        {4, 0, 0, 9, 1, 16, 2},          /* zeros only */
        {1, 37, 1, 40, 37, 40, 1},       /* a bias vector */
    };
    enum { SENT = 0xa5 };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t es = 2; es <= 4; es += 2) {
            const int64_t L = cases[c].lines, n = cases[c].len, S = cases[c].src_lines,
                          F = cases[c].fill, sld = cases[c].sld, dld = cases[c].dld;
            const size_t sbytes = (size_t)(S * sld + 8) * es, dbytes = (size_t)(L * dld + 8) * es;
            void *bs, *bd;
            unsigned char *src = emu_alloc(sbytes, es, &bs), *dst = emu_alloc(dbytes, es, &bd);
            for (size_t i = 0; i < sbytes; i++) src[i] = (unsigned char)(i * 2654435761u >> 13 | 1);
            memset(dst, SENT, dbytes);
            char what[128];
            snprintf(what, sizeof what, "copy_padded %lld (%lld from the source) x %lld to %lld, "
                     "pitch %lld to %lld, %zu bytes", (long long)L, (long long)S, (long long)n,
                     (long long)F, (long long)sld, (long long)dld, es);
            EMU_LAUNCHED(pp_emu_cuda_launch_copy_padded(0, cases[c].grid, L, n, S, F, es,
                                                        S ? src : NULL, sld, dst, dld),
                         what);
            int64_t bad = 0, nonzero = 0, touched = 0;
            for (int64_t l = 0; l < L; l++)
                for (int64_t i = 0; i < dld; i++) {
                    const unsigned char *d = dst + (size_t)(l * dld + i) * es;
                    if (l < S && i < n)
                        bad += memcmp(d, src + (size_t)(l * sld + i) * es, es) != 0;
                    else if (i < F)
                        for (size_t b = 0; b < es; b++) nonzero += d[b] != 0;
                    else
                        for (size_t b = 0; b < es; b++) touched += d[b] != SENT;
                }
            for (size_t b = (size_t)(L * dld) * es; b < dbytes; b++) touched += dst[b] != SENT;
            CHECK_MSG(bad == 0, "%s: %lld elements not the source's", what, (long long)bad);
            CHECK_MSG(nonzero == 0, "%s: %lld padding bytes not zero", what, (long long)nonzero);
            CHECK_MSG(touched == 0, "%s: %lld bytes past fill written", what, (long long)touched);
            free(bs), free(bd);
        }
    }
    CHECK(pp_emu_cuda_launch_copy_padded(0, 2, 2, 8, 2, 7, 2, NULL, 8, NULL, 8) != cudaSuccess);
    CHECK(pp_emu_cuda_launch_copy_padded(0, 2, 2, 8, 2, 9, 2, NULL, 8, NULL, 8) != cudaSuccess);
    CHECK(pp_emu_cuda_launch_copy_padded(0, 2, 2, 8, 3, 8, 2, NULL, 8, NULL, 8) != cudaSuccess);
    CHECK(pp_emu_cuda_launch_copy_padded(0, 2, 2, 8, 2, 8, 2, NULL, 7, NULL, 8) != cudaSuccess);
}

int main(void)
{
    emu_rig_open();
    test_elementwise();
    test_casts();
    test_sgd();
    test_zero_multi();
    test_bias_pool();
    test_delay();
    test_copy_pitched();
    test_copy_padded();
    return emu_rig_close("test_emu_kernels");
}
