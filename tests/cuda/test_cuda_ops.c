/*
 * test_cuda_ops.c - the CUDA backend against the CPU backend, op by op, on
 * random inputs; page-locked host copies; the steady-state "no new device
 * memory" property. (TF32 and the algorithm cache: test_cuda_math.c;
 * streams, events, the delay and device errors: test_cuda_streams.c.)
 *
 * Exits 77 (meson's skip) when no CUDA device is visible. Errors are
 * normalised: max |cuda - cpu| / max |cpu| over each output tensor, which must
 * stay within 1e-4 for forward outputs and 1e-3 for gradients (fp32, TF32 off).
 * Kernels whose arithmetic is the CPU's (elementwise, SGD, zeroing) must give
 * its bits.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"
#include "tests/cuda/cuda_rig.h"

/* ---- convolution ------------------------------------------------------------ */

static void test_conv(rig *r)
{
    static const conv_case cases[] = {
        {2, 3, 23, 23, 8, 7, 2, 3},  /* stem */
        {2, 16, 9, 9, 16, 3, 1, 1},  /* 3x3 */
        {2, 16, 8, 8, 32, 1, 2, 0},  /* downsample 1x1/2 */
        {3, 8, 7, 7, 12, 3, 2, 1},   /* 3x3/2, odd size */
        {1, 64, 4, 4, 256, 1, 1, 0}, /* bottleneck expand */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_conv2d_desc d = conv_of(&cases[i]);
        pair x = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, -1, 1);
        pair w = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, -0.5f, 0.5f);
        pair y = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, 0, 0);
        pair dy = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, -1, 1);
        pair dx = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, 0, 0);
        pair dw = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, -1, 1); /* += target */
        BOTH(r, pp_conv2d_forward(ex, &d, &x.c, &w.c, &y.c, err),
             pp_conv2d_forward(ex, &d, &x.g, &w.g, &y.g, err));
        CHECK_CLOSE(r, &y, TOL_FWD, "conv forward case %zu", i);
        BOTH(r, pp_conv2d_backward_data(ex, &d, &dy.c, &w.c, &dx.c, err),
             pp_conv2d_backward_data(ex, &d, &dy.g, &w.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "conv backward data case %zu", i);
        /* dx += the same gradient: cuDNN's beta = 1 against the CPU's sum */
        BOTH(r, pp_conv2d_backward_data_accumulate(ex, &d, &dy.c, &w.c, &dx.c, err),
             pp_conv2d_backward_data_accumulate(ex, &d, &dy.g, &w.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "conv backward data accumulate case %zu", i);
        for (int rep = 0; rep < 2; rep++)
            BOTH(r, pp_conv2d_backward_filter(ex, &d, &x.c, &dy.c, &dw.c, err),
                 pp_conv2d_backward_filter(ex, &d, &x.g, &dy.g, &dw.g, err));
        CHECK_CLOSE(r, &dw, TOL_BWD, "conv backward filter (accumulating twice) case %zu", i);
        pair_free(&x), pair_free(&w), pair_free(&y), pair_free(&dy), pair_free(&dx),
            pair_free(&dw);
    }
}

/* ---- batch norm -------------------------------------------------------------- */

/* The f32 NCHW batch norm (runtime/cuda/bn_nchw.cu; PP_CUDA_BN_CUDNN=1, the
 * suite's cuda_ops_cudnn_bn, runs cuDNN's): planes of 1, 25, 63 and 1225
 * floats (one per thread step), of 36 and 1024 (16-byte steps), and blocks of
 * images per channel: one, or two (16x8x32x32, 4x8x35x35). Each case runs
 * plain and fused (+ add, ReLU; the backward through the ReLU's mask). */
static void test_batchnorm(rig *r)
{
    static const struct { int n, c, h, w; } cases[] = {
        {4, 8, 5, 5},   {2, 3, 7, 9},     {16, 32, 1, 1}, {1, 4, 6, 6},
        {16, 8, 32, 32}, {4, 8, 35, 35}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_bn_desc d = {cases[i].n, cases[i].c, cases[i].h, cases[i].w, 1e-5f, 0.1f};
        const int64_t xs[4] = {d.n, d.c, d.h, d.w}, cs[1] = {d.c};
        pair x = pair_rand(r, 4, xs, -2, 3), y = pair_rand(r, 4, xs, 0, 0);
        pair gamma = pair_rand(r, 1, cs, 0.5f, 1.5f), beta = pair_rand(r, 1, cs, -1, 1);
        pair rm = pair_rand(r, 1, cs, -0.1f, 0.1f), rv = pair_rand(r, 1, cs, 0.9f, 1.1f);
        pair sm = pair_rand(r, 1, cs, 0, 0), si = pair_rand(r, 1, cs, 0, 0);
        pair dy = pair_rand(r, 4, xs, -1, 1), dx = pair_rand(r, 4, xs, 0, 0);
        pair dg = pair_rand(r, 1, cs, -1, 1), db = pair_rand(r, 1, cs, -1, 1); /* += targets */
        for (int rep = 0; rep < 2; rep++) /* two updates of the running statistics */
            BOTH(r,
                 pp_batchnorm_forward_train(ex, &d, &x.c, &gamma.c, &beta.c, &rm.c, &rv.c, &y.c,
                                            &sm.c, &si.c, err),
                 pp_batchnorm_forward_train(ex, &d, &x.g, &gamma.g, &beta.g, &rm.g, &rv.g, &y.g,
                                            &sm.g, &si.g, err));
        CHECK_CLOSE(r, &y, TOL_FWD, "bn train y case %zu", i);
        CHECK_CLOSE(r, &sm, TOL_FWD, "bn save_mean case %zu", i);
        CHECK_CLOSE(r, &si, TOL_FWD, "bn save_invstd case %zu", i);
        CHECK_CLOSE(r, &rm, TOL_FWD, "bn running_mean case %zu", i);
        CHECK_CLOSE(r, &rv, TOL_FWD, "bn running_var (unbiased) case %zu", i);
        BOTH(r,
             pp_batchnorm_backward(ex, &d, &x.c, &dy.c, &gamma.c, &sm.c, &si.c, &dx.c, &dg.c,
                                   &db.c, err),
             pp_batchnorm_backward(ex, &d, &x.g, &dy.g, &gamma.g, &sm.g, &si.g, &dx.g, &dg.g,
                                   &db.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "bn backward dx case %zu", i);
        CHECK_CLOSE(r, &dg, TOL_BWD, "bn backward dgamma (+=) case %zu", i);
        CHECK_CLOSE(r, &db, TOL_BWD, "bn backward dbeta (+=) case %zu", i);
        BOTH(r,
             pp_batchnorm_forward_infer(ex, &d, &x.c, &gamma.c, &beta.c, &rm.c, &rv.c, &y.c,
                                        err),
             pp_batchnorm_forward_infer(ex, &d, &x.g, &gamma.g, &beta.g, &rm.g, &rv.g, &y.g,
                                        err));
        CHECK_CLOSE(r, &y, TOL_FWD, "bn infer case %zu", i);

        pair add = pair_rand(r, 4, xs, -1, 1), ry = pair_rand(r, 4, xs, 0, 0);
        BOTH(r,
             pp_batchnorm_forward_act(ex, &d, true, &x.c, &gamma.c, &beta.c, &rm.c, &rv.c, &add.c,
                                      true, &ry.c, &sm.c, &si.c, err),
             pp_batchnorm_forward_act(ex, &d, true, &x.g, &gamma.g, &beta.g, &rm.g, &rv.g, &add.g,
                                      true, &ry.g, &sm.g, &si.g, err));
        CHECK_CLOSE(r, &ry, TOL_FWD, "bn train + add + relu case %zu", i);
        CHECK_CLOSE(r, &rv, TOL_FWD, "bn train + add + relu running_var case %zu", i);
        BOTH(r,
             pp_batchnorm_backward_relu(ex, &d, &x.c, &ry.c, &dy.c, &gamma.c, &sm.c, &si.c, &dx.c,
                                        &dg.c, &db.c, err),
             pp_batchnorm_backward_relu(ex, &d, &x.g, &ry.g, &dy.g, &gamma.g, &sm.g, &si.g, &dx.g,
                                        &dg.g, &db.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "bn backward through relu dx case %zu", i);
        CHECK_CLOSE(r, &dg, TOL_BWD, "bn backward through relu dgamma (+=) case %zu", i);
        CHECK_CLOSE(r, &db, TOL_BWD, "bn backward through relu dbeta (+=) case %zu", i);
        /* the same keeping the ReLU's gradient (pp_batchnorm_backward_add_relu) */
        pair gk = pair_rand(r, 4, xs, 0, 0);
        BOTH(r,
             pp_batchnorm_backward_add_relu(ex, &d, &x.c, &ry.c, &dy.c, &gamma.c, &sm.c, &si.c,
                                            &dx.c, &dg.c, &db.c, &gk.c, err),
             pp_batchnorm_backward_add_relu(ex, &d, &x.g, &ry.g, &dy.g, &gamma.g, &sm.g, &si.g,
                                            &dx.g, &dg.g, &db.g, &gk.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "bn backward keeping g dx case %zu", i);
        CHECK_CLOSE(r, &dg, TOL_BWD, "bn backward keeping g dgamma (+=) case %zu", i);
        CHECK_CLOSE(r, &db, TOL_BWD, "bn backward keeping g dbeta (+=) case %zu", i);
        CHECK_CLOSE(r, &gk, TOL_BWD, "bn backward keeping g: g case %zu", i);
        pair_free(&gk);
        BOTH(r,
             pp_batchnorm_forward_act(ex, &d, false, &x.c, &gamma.c, &beta.c, &rm.c, &rv.c, NULL,
                                      true, &ry.c, NULL, NULL, err),
             pp_batchnorm_forward_act(ex, &d, false, &x.g, &gamma.g, &beta.g, &rm.g, &rv.g, NULL,
                                      true, &ry.g, NULL, NULL, err));
        CHECK_CLOSE(r, &ry, TOL_FWD, "bn infer + relu case %zu", i);
        pair *all[] = {&x,  &y,  &gamma, &beta, &rm, &rv,  &sm,
                       &si, &dy, &dx,    &dg,   &db, &add, &ry};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
}

/* ---- pooling ------------------------------------------------------------------- */

static void test_pool(rig *r)
{
    static const struct { int n, c, h, w, kernel, stride, pad; } cases[] = {
        {2, 4, 16, 16, 3, 2, 1}, {1, 3, 9, 7, 3, 2, 1}, {2, 2, 8, 8, 2, 2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_pool_desc d;
        pp_error pe;
        CHECK_OK(pp_pool_desc_init(&d, cases[i].n, cases[i].c, cases[i].h, cases[i].w,
                                   cases[i].kernel, cases[i].stride, cases[i].pad, &pe),
                 &pe);
        const int64_t xs[4] = {d.n, d.c, d.h, d.w}, ys[4] = {d.n, d.c, d.p, d.q};
        pair x = pair_rand(r, 4, xs, -1, 1), y = pair_rand(r, 4, ys, 0, 0);
        pair dy = pair_rand(r, 4, ys, -1, 1), dx = pair_rand(r, 4, xs, 5, 5);
        int32_t *zi = calloc((size_t)numel_of(4, ys), sizeof *zi);
        pair idx = pair_from(r, PP_I32, 4, ys, zi);
        free(zi);
        BOTH(r, pp_maxpool_forward(ex, &d, &x.c, &y.c, &idx.c, err),
             pp_maxpool_forward(ex, &d, &x.g, &y.g, &idx.g, err));
        CHECK_CLOSE(r, &y, TOL_FWD, "maxpool forward case %zu (negative inputs, padding)", i);
        BOTH(r, pp_maxpool_backward(ex, &d, &x.c, &y.c, &dy.c, &idx.c, &dx.c, err),
             pp_maxpool_backward(ex, &d, &x.g, &y.g, &dy.g, &idx.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "maxpool backward case %zu", i);
        pair_free(&x), pair_free(&y), pair_free(&dy), pair_free(&dx), pair_free(&idx);
    }
    /* adaptive average pool to 1x1 */
    const int64_t xs[4] = {3, 5, 7, 7}, ys[2] = {3, 5};
    pair x = pair_rand(r, 4, xs, -1, 1), y = pair_rand(r, 2, ys, 0, 0);
    pair dy = pair_rand(r, 2, ys, -1, 1), dx = pair_rand(r, 4, xs, 0, 0);
    BOTH(r, pp_avgpool_forward(ex, &x.c, &y.c, err), pp_avgpool_forward(ex, &x.g, &y.g, err));
    CHECK_CLOSE(r, &y, TOL_FWD, "avgpool forward");
    BOTH(r, pp_avgpool_backward(ex, &dy.c, &dx.c, err),
         pp_avgpool_backward(ex, &dy.g, &dx.g, err));
    CHECK_CLOSE(r, &dx, TOL_BWD, "avgpool backward");
    pair_free(&x), pair_free(&y), pair_free(&dy), pair_free(&dx);
    /* window average pooling (count_include_pad), LeNet's and padded windows */
    static const struct { int n, c, h, w, kernel, stride, pad; } avg[] = {
        {4, 20, 26, 26, 2, 2, 0}, {2, 3, 9, 7, 3, 2, 1}, {1, 2, 6, 6, 4, 3, 2}};
    for (size_t i = 0; i < sizeof avg / sizeof avg[0]; i++) {
        pp_pool_desc d;
        pp_error pe;
        CHECK_OK(pp_pool_desc_init(&d, avg[i].n, avg[i].c, avg[i].h, avg[i].w, avg[i].kernel,
                                   avg[i].stride, avg[i].pad, &pe),
                 &pe);
        const int64_t as[4] = {d.n, d.c, d.h, d.w}, bs[4] = {d.n, d.c, d.p, d.q};
        pair ax = pair_rand(r, 4, as, -1, 1), ay = pair_rand(r, 4, bs, 0, 0);
        pair ady = pair_rand(r, 4, bs, -1, 1), adx = pair_rand(r, 4, as, 5, 5);
        BOTH(r, pp_avgpool2d_forward(ex, &d, &ax.c, &ay.c, err),
             pp_avgpool2d_forward(ex, &d, &ax.g, &ay.g, err));
        CHECK_CLOSE(r, &ay, TOL_FWD, "avgpool2d forward case %zu", i);
        BOTH(r, pp_avgpool2d_backward(ex, &d, &ady.c, &adx.c, err),
             pp_avgpool2d_backward(ex, &d, &ady.g, &adx.g, err));
        CHECK_CLOSE(r, &adx, TOL_BWD, "avgpool2d backward case %zu", i);
        pair_free(&ax), pair_free(&ay), pair_free(&ady), pair_free(&adx);
    }
}

/* ---- per-channel bias -------------------------------------------------------------- */

static void test_channel_bias(rig *r)
{
    static const int64_t shapes[][4] = {{256, 20, 24, 24}, {3, 5, 7, 9}, {1, 300, 1, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t cs[1] = {shapes[i][1]};
        pair y = pair_rand(r, 4, shapes[i], -1, 1), b = pair_rand(r, 1, cs, -1, 1);
        pair db = pair_rand(r, 1, cs, -1, 1);
        BOTH(r, pp_channel_bias_forward(ex, &b.c, &y.c, err),
             pp_channel_bias_forward(ex, &b.g, &y.g, err));
        CHECK_CLOSE(r, &y, 0.0, "channel bias forward case %zu (one float add)", i);
        BOTH(r, pp_channel_bias_backward(ex, &y.c, &db.c, err),
             pp_channel_bias_backward(ex, &y.g, &db.g, err));
        CHECK_CLOSE(r, &db, TOL_BWD, "channel bias backward case %zu", i);
        pair_free(&y), pair_free(&b), pair_free(&db);
    }
}

/* ---- elementwise --------------------------------------------------------------- */

/* Every kernel against the CPU bit for bit, on sizes around the float4 width
 * and on views one element off 16-byte alignment (the single-float path). */
static void test_elementwise(rig *r)
{
    static const int64_t sizes[] = {1, 3, 4, 5, 255, 4096, 100003};
    for (size_t i = 0; i < 2 * sizeof sizes / sizeof sizes[0]; i++) {
        const int64_t n = sizes[i / 2], off = (int64_t)(i % 2); /* odd i: misaligned views */
        const int64_t s[1] = {n + off};
        pair sa = pair_rand(r, 1, s, -1, 1), sb = pair_rand(r, 1, s, -1, 1);
        pair sy = pair_rand(r, 1, s, 0, 0), sdy = pair_rand(r, 1, s, -1, 1);
        pair sdx = pair_rand(r, 1, s, 0, 0);
        pair a = pair_view(&sa, off, n), b = pair_view(&sb, off, n), y = pair_view(&sy, off, n);
        pair dy = pair_view(&sdy, off, n), dx = pair_view(&sdx, off, n);
        char tag[48];
        snprintf(tag, sizeof tag, "n=%lld offset=%lld", (long long)n, (long long)off);
        BOTH(r, pp_relu_forward(ex, &a.c, &y.c, err), pp_relu_forward(ex, &a.g, &y.g, err));
        CHECK_CLOSE(r, &y, 0.0, "relu forward %s", tag);
        BOTH(r, pp_relu_backward(ex, &y.c, &dy.c, &dx.c, err),
             pp_relu_backward(ex, &y.g, &dy.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, 0.0, "relu backward %s", tag);
        BOTH(r, pp_relu_forward(ex, &b.c, &b.c, err), pp_relu_forward(ex, &b.g, &b.g, err));
        CHECK_CLOSE(r, &b, 0.0, "relu forward in place %s", tag);
        BOTH(r, pp_add(ex, &a.c, &dy.c, &y.c, err), pp_add(ex, &a.g, &dy.g, &y.g, err));
        CHECK_CLOSE(r, &y, 0.0, "add %s", tag);
        BOTH(r, pp_add(ex, &a.c, &y.c, &y.c, err), pp_add(ex, &a.g, &y.g, &y.g, err));
        CHECK_CLOSE(r, &y, 0.0, "add aliased %s", tag);
        BOTH(r, pp_accumulate(ex, &a.c, &dx.c, err), pp_accumulate(ex, &a.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, 0.0, "accumulate %s", tag);
        BOTH(r, pp_copy(ex, &dy.c, &a.c, err), pp_copy(ex, &dy.g, &a.g, err));
        CHECK_CLOSE(r, &a, 0.0, "copy %s", tag);
        BOTH(r, pp_add_relu(ex, &a.c, &dy.c, &y.c, err), pp_add_relu(ex, &a.g, &dy.g, &y.g, err));
        CHECK_CLOSE(r, &y, 0.0, "add_relu %s", tag);
        BOTH(r, pp_add_relu(ex, &y.c, &dx.c, &dx.c, err),
             pp_add_relu(ex, &y.g, &dx.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, 0.0, "add_relu aliased %s", tag);
        /* sigmoid: expf may differ by an ulp between the CPU's libm and CUDA */
        BOTH(r, pp_sigmoid_forward(ex, &a.c, &y.c, err), pp_sigmoid_forward(ex, &a.g, &y.g, err));
        CHECK_CLOSE(r, &y, 1e-6, "sigmoid forward %s", tag);
        BOTH(r, pp_sigmoid_backward(ex, &y.c, &dy.c, &dx.c, err),
             pp_sigmoid_backward(ex, &y.g, &dy.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, 1e-6, "sigmoid backward %s", tag);
        BOTH(r, pp_zero(ex, &a.c, err), pp_zero(ex, &a.g, err));
        CHECK_CLOSE(r, &a, 0.0, "zero %s", tag);
        /* the storage outside the views is untouched, bit for bit (inside, dx
         * holds sigmoid backward's result, equal within 1e-6 only: the whole
         * storage compared exactly failed on a correct kernel) */
        CHECK_MSG(pair_outside_differs(r, &sa, off, n) == 0,
                  "storage around view a written to (%s)", tag);
        CHECK_MSG(pair_outside_differs(r, &sdx, off, n) == 0,
                  "storage around view dx written to (%s)", tag);
        CHECK_MSG(pair_outside_differs(r, &sy, off, n) == 0,
                  "storage around view y written to (%s)", tag);
        CHECK_MSG(pair_outside_differs(r, &sb, off, n) == 0,
                  "storage around view b written to (%s)", tag);
        pair_free(&sa), pair_free(&sb), pair_free(&sy), pair_free(&sdy), pair_free(&sdx);
    }
}

/* ---- bf16 mixed precision ----------------------------------------------------------- */

/* Conversions bit for bit as the CPU's (specials included); ops on bf16
 * operands as on the CPU: exact ones bitwise, sums within one bf16 step
 * (2^-7 relative: f32 sums in another order may round the other way). */
static void test_bf16(rig *r)
{
    const int64_t n = 100003;
    pair f = pair_rand(r, 1, (int64_t[]){n}, -3, 3);
    static const uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800001u,
                                        0xffa00000u, 0x00000001u, 0x00400000u, 0x80000000u};
    pp_error e;
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        pp_tensor vc = pp_tensor_view0(&f.c, (int64_t)i, 1);
        pp_tensor vg = pp_tensor_view0(&f.g, (int64_t)i, 1);
        CHECK_OK(pp_tensor_from_host(&vc, &specials[i], 4, &e), &e);
        CHECK_OK(pp_tensor_from_host(&vg, &specials[i], 4, &e), &e);
    }
    pair h = pair_bf16_of(r, &f);
    CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
    CHECK_MSG(pair_bitwise(&h), "bf16 rounding differs from the CPU's");
    pair back = pair_rand(r, 1, (int64_t[]){n}, 0, 0);
    BOTH(r, pp_cast(ex, &h.c, &back.c, err), pp_cast(ex, &h.g, &back.g, err));
    CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
    CHECK_MSG(pair_bitwise(&back), "bf16 widening differs from the CPU's");
    BOTH(r, pp_relu_forward(ex, &h.c, &h.c, err), pp_relu_forward(ex, &h.g, &h.g, err));
    CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
    CHECK_MSG(pair_bitwise(&h), "bf16 relu in place differs from the CPU's");
    pair_free(&f), pair_free(&h), pair_free(&back);

    /* conv forward and backward data in bf16, the filter gradient in f32 */
    const conv_case cc = {4, 16, 14, 14, 32, 3, 1, 1};
    const pp_conv2d_desc d = conv_of(&cc);
    pair x = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, -1, 1);
    pair w = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, -0.2f, 0.2f);
    pair dy = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, -1, 1);
    pair dw = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, 0, 0);
    pair xh = pair_bf16_of(r, &x), wh = pair_bf16_of(r, &w), dyh = pair_bf16_of(r, &dy);
    pair yh = pair_bf16_of(r, &dy), dxh = pair_bf16_of(r, &x);
    pair y32 = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, 0, 0);
    pair dx32 = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, 0, 0);
    BOTH(r, pp_conv2d_forward(ex, &d, &xh.c, &wh.c, &yh.c, err),
         pp_conv2d_forward(ex, &d, &xh.g, &wh.g, &yh.g, err));
    BOTH(r, pp_cast(ex, &yh.c, &y32.c, err), pp_cast(ex, &yh.g, &y32.g, err));
    CHECK_CLOSE(r, &y32, 0x1p-7, "bf16 conv forward");
    BOTH(r, pp_conv2d_backward_data(ex, &d, &dyh.c, &wh.c, &dxh.c, err),
         pp_conv2d_backward_data(ex, &d, &dyh.g, &wh.g, &dxh.g, err));
    BOTH(r, pp_cast(ex, &dxh.c, &dx32.c, err), pp_cast(ex, &dxh.g, &dx32.g, err));
    CHECK_CLOSE(r, &dx32, 0x1p-7, "bf16 conv backward data");
    BOTH(r, pp_conv2d_backward_filter(ex, &d, &xh.c, &dyh.c, &dw.c, err),
         pp_conv2d_backward_filter(ex, &d, &xh.g, &dyh.g, &dw.g, err));
    CHECK_CLOSE(r, &dw, TOL_BWD, "bf16 conv backward filter (f32 dw)");
    pair *all[] = {&x, &w, &dy, &dw, &xh, &wh, &dyh, &yh, &dxh, &y32, &dx32};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);

    /* linear: bf16 input and weight, f32 logits */
    pair lx = pair_rand(r, 2, (int64_t[]){8, 64}, -1, 1);
    pair lw = pair_rand(r, 2, (int64_t[]){10, 64}, -0.1f, 0.1f);
    pair lb = pair_rand(r, 1, (int64_t[]){10}, -1, 1);
    pair ly = pair_rand(r, 2, (int64_t[]){8, 10}, 0, 0);
    pair lxh = pair_bf16_of(r, &lx), lwh = pair_bf16_of(r, &lw);
    BOTH(r, pp_linear_forward(ex, &lxh.c, &lwh.c, &lb.c, &ly.c, err),
         pp_linear_forward(ex, &lxh.g, &lwh.g, &lb.g, &ly.g, err));
    CHECK_CLOSE(r, &ly, TOL_FWD, "bf16 linear forward (f32 logits)");
    pair *lall[] = {&lx, &lw, &lb, &ly, &lxh, &lwh};
    for (size_t k = 0; k < sizeof lall / sizeof lall[0]; k++) pair_free(lall[k]);
}

/* ---- linear, loss, optimizer ------------------------------------------------------ */

static void test_linear(rig *r)
{
    static const struct { int n, in, out; } cases[] = {{5, 37, 11}, {32, 2048, 1000}, {1, 3, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, in = cases[i].in, out = cases[i].out;
        pair x = pair_rand(r, 2, (int64_t[]){n, in}, -1, 1);
        pair w = pair_rand(r, 2, (int64_t[]){out, in}, -0.1f, 0.1f);
        pair b = pair_rand(r, 1, (int64_t[]){out}, -1, 1);
        pair y = pair_rand(r, 2, (int64_t[]){n, out}, 0, 0);
        pair dy = pair_rand(r, 2, (int64_t[]){n, out}, -1, 1);
        pair dx = pair_rand(r, 2, (int64_t[]){n, in}, 0, 0);
        pair dw = pair_rand(r, 2, (int64_t[]){out, in}, -1, 1);
        pair db = pair_rand(r, 1, (int64_t[]){out}, -1, 1);
        BOTH(r, pp_linear_forward(ex, &x.c, &w.c, &b.c, &y.c, err),
             pp_linear_forward(ex, &x.g, &w.g, &b.g, &y.g, err));
        CHECK_CLOSE(r, &y, TOL_FWD, "linear forward case %zu", i);
        BOTH(r, pp_linear_backward(ex, &x.c, &w.c, &dy.c, &dx.c, &dw.c, &db.c, err),
             pp_linear_backward(ex, &x.g, &w.g, &dy.g, &dx.g, &dw.g, &db.g, err));
        BOTH(r, pp_linear_backward(ex, &x.c, &w.c, &dy.c, NULL, &dw.c, &db.c, err),
             pp_linear_backward(ex, &x.g, &w.g, &dy.g, NULL, &dw.g, &db.g, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "linear backward dx case %zu", i);
        CHECK_CLOSE(r, &dw, TOL_BWD, "linear backward dw (+= twice) case %zu", i);
        CHECK_CLOSE(r, &db, TOL_BWD, "linear backward db (+= twice) case %zu", i);
        pair *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
}

static void test_softmax_xent(rig *r)
{
    static const struct { int n, classes; float divisor; } cases[] = {
        {7, 1000, 16.0f}, {1, 10, 1.0f}, {64, 3, 128.0f}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, k = cases[i].classes;
        pair z = pair_rand(r, 2, (int64_t[]){n, k}, -4, 4);
        int32_t *lab;
        pair labels = pair_labels(r, n, k, &lab);
        pair loss = pair_rand(r, 0, NULL, 0, 0);
        int32_t zero = 0;
        pair correct = pair_from(r, PP_I32, 0, NULL, &zero);
        pair dz = pair_rand(r, 2, (int64_t[]){n, k}, 0, 0);
        BOTH(r,
             pp_softmax_xent(ex, &z.c, &labels.c, cases[i].divisor, &loss.c, &correct.c, &dz.c,
                             err),
             pp_softmax_xent(ex, &z.g, &labels.g, cases[i].divisor, &loss.g, &correct.g, &dz.g,
                             err));
        CHECK_CLOSE(r, &loss, TOL_FWD, "softmax_xent loss case %zu", i);
        CHECK_CLOSE(r, &dz, TOL_BWD, "softmax_xent dlogits case %zu", i);
        int32_t hc = -5, hg = -6;
        pp_error pe;
        CHECK_OK(pp_tensor_to_host(&correct.c, &hc, sizeof hc, &pe), &pe);
        CHECK_OK(pp_tensor_to_host(&correct.g, &hg, sizeof hg, &pe), &pe);
        CHECK_MSG(hc == hg, "softmax_xent correct case %zu: cpu %d cuda %d", i, hc, hg);
        /* a label out of range: the kernel clamps and reports correct = -1 */
        lab[0] = k;
        CHECK_OK(pp_tensor_from_host(&labels.g, lab, (size_t)n * sizeof *lab, &pe), &pe);
        CHECK_OK(pp_softmax_xent(&r->egpu, &z.g, &labels.g, cases[i].divisor, &loss.g,
                                 &correct.g, &dz.g, &pe),
                 &pe);
        CHECK_OK(pp_tensor_to_host(&correct.g, &hg, sizeof hg, &pe), &pe);
        CHECK_MSG(hg == -1, "softmax_xent bad label case %zu: correct %d, expected -1", i, hg);
        free(lab);
        pair *all[] = {&z, &labels, &loss, &correct, &dz};
        for (size_t m = 0; m < sizeof all / sizeof all[0]; m++) pair_free(all[m]);
    }
}

/* SGD rounds each product and sum on its own on both backends (no FMA), in
 * the same order: the CUDA kernels give the CPU's bits. */
static void test_sgd(rig *r)
{
    static const pp_sgd_desc cases[] = {
        {0.1f, 0.0f, 0.0f, false, true},   {0.1f, 0.9f, 1e-4f, false, true},
        {0.05f, 0.9f, 1e-4f, false, false}, {0.1f, 0.9f, 5e-4f, true, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t s[1] = {1000};
        pair p = pair_rand(r, 1, s, -1, 1), g = pair_rand(r, 1, s, -1, 1);
        pair buf = pair_rand(r, 1, s, -1, 1);
        for (int step = 0; step < 3; step++)
            BOTH(r, pp_sgd_update(ex, &cases[i], &p.c, &g.c, &buf.c, err),
                 pp_sgd_update(ex, &cases[i], &p.g, &g.g, &buf.g, err));
        CHECK_CLOSE(r, &p, 0.0, "sgd param case %zu", i);
        CHECK_CLOSE(r, &buf, 0.0, "sgd momentum buffer case %zu", i);
        CHECK_MSG(pair_bitwise(&p) && pair_bitwise(&buf), "sgd case %zu: not the CPU's bits", i);
        pair_free(&p), pair_free(&g), pair_free(&buf);
    }
}

/* The multi-tensor SGD (one launch per 96 tensors, float4s where aligned)
 * against the CPU's per-tensor steps bit for bit, and against the CUDA
 * per-tensor kernel: 211 tensors (three launches) of odd sizes, some larger
 * than a tile, views one element off alignment in param, grad or buffer,
 * empty tensors, for every kind of step over three steps. */
static void test_sgd_multi(rig *r)
{
    static const pp_sgd_desc descs[] = {
        {0.1f, 0.0f, 1e-4f, false, false},  {0.1f, 0.9f, 1e-4f, false, true},
        {0.05f, 0.9f, 1e-4f, false, false}, {0.05f, 0.9f, 5e-4f, true, true},
    };
    enum { T = 211 };
    pp_error e;
    for (size_t c = 0; c < sizeof descs / sizeof descs[0]; c++) {
        pair ps[T], gs[T], bs[T], pv[T], gv[T], bv[T]; /* storage and the views used */
        pp_tensor q[T], qb[T];                          /* the per-tensor kernel's copies */
        pp_tensor *mp[T], *mb[T];
        const pp_tensor *mg[T];
        for (int i = 0; i < T; i++) {
            static const int64_t special[] = {1000003, 4097, 8192, 0}; /* tensors 7..10 */
            int64_t n = i >= 7 && i <= 10 ? special[i - 7] : 1 + (i * 37) % 3001;
            const int64_t s[1] = {n + 1};
            ps[i] = pair_rand(r, 1, s, -1, 1), gs[i] = pair_rand(r, 1, s, -1, 1);
            bs[i] = pair_rand(r, 1, s, -1, 1);
            pv[i] = pair_view(&ps[i], i % 4 == 1, n), gv[i] = pair_view(&gs[i], i % 4 == 2, n);
            bv[i] = pair_view(&bs[i], i % 4 == 3, n);
            CHECK_OK(pp_tensor_alloc(&q[i], r->gpu, PP_F32, 1, &n, &e), &e);
            CHECK_OK(pp_tensor_alloc(&qb[i], r->gpu, PP_F32, 1, &n, &e), &e);
            CHECK_OK(pp_copy(&r->egpu, &pv[i].g, &q[i], &e), &e);
            CHECK_OK(pp_copy(&r->egpu, &bv[i].g, &qb[i], &e), &e);
            mp[i] = &pv[i].g, mg[i] = &gv[i].g, mb[i] = &bv[i].g;
        }
        const bool mom = descs[c].momentum != 0;
        for (int step = 0; step < 3; step++) {
            pp_sgd_desc d = descs[c];
            d.first_step = d.first_step && step == 0;
            for (int i = 0; i < T; i++) {
                CHECK_OK(pp_sgd_update(&r->ecpu, &d, &pv[i].c, &gv[i].c, mom ? &bv[i].c : NULL,
                                       &e),
                         &e);
                CHECK_OK(pp_sgd_update(&r->egpu, &d, &q[i], &gv[i].g, mom ? &qb[i] : NULL, &e),
                         &e);
            }
            CHECK_OK(pp_sgd_update_multi(&r->egpu, &d, T, mp, mg, mom ? mb : NULL, &e), &e);
        }
        CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
        int bad = 0, bad1 = 0;
        for (int i = 0; i < T; i++) {
            bad += !pair_bitwise(&ps[i]) || !pair_bitwise(&bs[i]);
            pair one = {pv[i].c, q[i]}, oneb = {bv[i].c, qb[i]};
            bad1 += !pair_bitwise(&one) || (mom && !pair_bitwise(&oneb));
        }
        CHECK_MSG(bad == 0, "sgd_update_multi case %zu: %d of %d tensors (or the storage around "
                  "their views) differ from the CPU's bits", c, bad, T);
        CHECK_MSG(bad1 == 0, "sgd_update case %zu: %d of %d tensors differ from the CPU's bits",
                  c, bad1, T);
        for (int i = 0; i < T; i++) {
            pair_free(&ps[i]), pair_free(&gs[i]), pair_free(&bs[i]);
            pp_tensor_free(&q[i]), pp_tensor_free(&qb[i]);
        }
    }
}

/* Page-locked host buffers and stream-ordered copies on the GPU's exec: a view
 * at an offset filled from the host, read back to another host buffer after
 * a synchronisation, its neighbours untouched. */
static void test_host_copies(rig *r)
{
    pp_error err;
    const size_t n = 4096;
    float *host = NULL, *back = NULL;
    CHECK_OK(pp_device_host_alloc(r->gpu, n * sizeof(float), (void **)&host, &err), &err);
    CHECK_OK(pp_device_host_alloc(r->gpu, n * sizeof(float), (void **)&back, &err), &err);
    if (!host || !back) return;
    for (size_t i = 0; i < n; i++) host[i] = (float)i, back[i] = -1.0f;
    const int64_t shape[2] = {8, 1024};
    pair t = pair_rand(r, 2, shape, 0, 0);
    pp_tensor rows = pp_tensor_view0(&t.g, 2, 4); /* elements 2048..6143 */
    CHECK_OK(pp_copy_from_host(&r->egpu, host, &rows, &err), &err);
    CHECK_OK(pp_copy_to_host(&r->egpu, &rows, back, &err), &err);
    CHECK_OK(pp_exec_sync(&r->egpu, &err), &err);
    CHECK_MSG(memcmp(back, host, n * sizeof(float)) == 0, "host -> device -> host round trip");
    float *all = malloc(8 * 1024 * sizeof(float));
    CHECK_OK(pp_tensor_to_host(&t.g, all, 8 * 1024 * sizeof(float), &err), &err);
    CHECK(all[2047] == 0.0f && all[2048] == 0.0f && all[2049] == 1.0f && all[6143] == 4095.0f &&
          all[6144] == 0.0f);
    free(all);
    pair_free(&t);
    pp_device_host_free(r->gpu, host);
    pp_device_host_free(r->gpu, back);
}

/* Zeroing 250 tensors (two launches) of every dtype, odd byte counts and
 * views at every misalignment: exactly the view's bytes become zero. */
static void test_zero_multi(rig *r)
{
    enum { T = 250 };
    static const pp_dtype dts[] = {PP_F32, PP_U8, PP_BF16, PP_I32, PP_I64};
    pp_error e;
    pair st[T], v[T];
    pp_tensor *ys[T];
    for (int i = 0; i < T; i++) {
        pp_dtype dt = dts[i % 5];
        int64_t n = i == 3 ? 300001 : i == 4 ? 0 : 1 + (i * 53) % 5000, off = (i / 5) % 17;
        const int64_t s[1] = {n + off + 3};
        size_t bytes = (size_t)s[0] * pp_dtype_size(dt);
        unsigned char *h = malloc(bytes);
        memset(h, 0x5a, bytes);
        st[i] = pair_from(r, dt, 1, s, h);
        free(h);
        v[i] = pair_view(&st[i], off, n);
        ys[i] = &v[i].g;
        CHECK_OK(pp_zero(&r->ecpu, &v[i].c, &e), &e);
    }
    CHECK_OK(pp_zero_multi(&r->egpu, T, ys, &e), &e);
    CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
    int bad = 0;
    for (int i = 0; i < T; i++) {
        bad += !pair_bitwise(&st[i]);
        pair_free(&st[i]);
    }
    CHECK_MSG(bad == 0, "zero_multi: %d of %d tensors (with the bytes around them) wrong", bad, T);
}

/* ---- steady state: no device allocation after warm-up ------------------------------ */

typedef struct step_bufs {
    pp_conv2d_desc cd;
    pp_bn_desc bd;
    pp_tensor x, w, y, dy, dx, dw, g, b, rm, rv, sm, si, z, feat, fw, fb, logits, dlogits,
        dfeat, dfw, dfb, labels, loss, correct, buf, dg, db, dxin;
} step_bufs;

static pp_status train_step(pp_exec *ex, step_bufs *t, bool first, pp_error *err)
{
    pp_sgd_desc sgd = {0.1f, 0.9f, 1e-4f, false, first};
    PP_TRY(pp_conv2d_forward(ex, &t->cd, &t->x, &t->w, &t->y, err));
    PP_TRY(pp_batchnorm_forward_train(ex, &t->bd, &t->y, &t->g, &t->b, &t->rm, &t->rv, &t->z,
                                      &t->sm, &t->si, err));
    PP_TRY(pp_relu_forward(ex, &t->z, &t->z, err));
    PP_TRY(pp_avgpool_forward(ex, &t->z, &t->feat, err));
    PP_TRY(pp_linear_forward(ex, &t->feat, &t->fw, &t->fb, &t->logits, err));
    PP_TRY(pp_softmax_xent(ex, &t->logits, &t->labels, 8.0f, &t->loss, &t->correct,
                           &t->dlogits, err));
    PP_TRY(pp_linear_backward(ex, &t->feat, &t->fw, &t->dlogits, &t->dfeat, &t->dfw, &t->dfb,
                              err));
    PP_TRY(pp_avgpool_backward(ex, &t->dfeat, &t->dy, err));
    PP_TRY(pp_relu_backward(ex, &t->z, &t->dy, &t->dy, err));
    PP_TRY(pp_batchnorm_backward(ex, &t->bd, &t->y, &t->dy, &t->g, &t->sm, &t->si, &t->dx,
                                 &t->dg, &t->db, err));
    PP_TRY(pp_conv2d_backward_data(ex, &t->cd, &t->dx, &t->w, &t->dxin, err));
    PP_TRY(pp_conv2d_backward_filter(ex, &t->cd, &t->x, &t->dx, &t->dw, err));
    PP_TRY(pp_sgd_update(ex, &sgd, &t->w, &t->dw, &t->buf, err));
    return pp_exec_sync(ex, err);
}

static void test_steady_state(rig *r)
{
    pp_error err;
    step_bufs t;
    memset(&t, 0, sizeof t);
    pp_device_ctx *g = r->gpu;
    CHECK_OK(pp_conv2d_desc_init(&t.cd, 8, 3, 32, 32, 16, 3, 1, 1, &err), &err);
    t.bd = (pp_bn_desc){8, 16, 32, 32, 1e-5f, 0.1f};
    const int64_t xs[4] = {8, 3, 32, 32}, ws[4] = {16, 3, 3, 3}, ys[4] = {8, 16, 32, 32};
    const int64_t c16[1] = {16}, f[2] = {8, 16}, fw[2] = {10, 16}, c10[1] = {10}, l[2] = {8, 10};
    struct { pp_tensor *t; int nd; const int64_t *s; pp_dtype dt; } all[] = {
        {&t.x, 4, xs, PP_F32},     {&t.w, 4, ws, PP_F32},      {&t.y, 4, ys, PP_F32},
        {&t.dy, 4, ys, PP_F32},    {&t.dx, 4, ys, PP_F32},     {&t.dw, 4, ws, PP_F32},
        {&t.g, 1, c16, PP_F32},    {&t.b, 1, c16, PP_F32},     {&t.rm, 1, c16, PP_F32},
        {&t.rv, 1, c16, PP_F32},   {&t.sm, 1, c16, PP_F32},    {&t.si, 1, c16, PP_F32},
        {&t.z, 4, ys, PP_F32},     {&t.feat, 2, f, PP_F32},    {&t.fw, 2, fw, PP_F32},
        {&t.fb, 1, c10, PP_F32},   {&t.logits, 2, l, PP_F32},  {&t.dlogits, 2, l, PP_F32},
        {&t.dfeat, 2, f, PP_F32},  {&t.dfw, 2, fw, PP_F32},    {&t.dfb, 1, c10, PP_F32},
        {&t.labels, 1, xs, PP_I32}, {&t.loss, 0, NULL, PP_F32}, {&t.correct, 0, NULL, PP_I32},
        {&t.buf, 4, ws, PP_F32},   {&t.dg, 1, c16, PP_F32},    {&t.db, 1, c16, PP_F32},
        {&t.dxin, 4, xs, PP_F32},
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        CHECK_OK(pp_tensor_zeros(all[i].t, g, all[i].dt, all[i].nd, all[i].s, &err), &err);
    float ones[16];
    for (int i = 0; i < 16; i++) ones[i] = 1.0f;
    CHECK_OK(pp_tensor_from_host(&t.g, ones, sizeof ones, &err), &err);
    CHECK_OK(pp_tensor_from_host(&t.rv, ones, sizeof ones, &err), &err);

    pp_exec ex;
    cudaStream_t cs;
    CHECK(cudaSetDevice(0) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) == cudaSuccess);
    CHECK_OK(pp_exec_init(&ex, g, cs, &err), &err);
    for (int s = 0; s < 2; s++) CHECK_OK(train_step(&ex, &t, s == 0, &err), &err);

    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
    uint64_t reserved0 = 0, high0 = 0, reserved1 = 0, high1 = 0;
    size_t free0 = 0, free1 = 0, total = 0;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved0) ==
          cudaSuccess);
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high0) == cudaSuccess);
    CHECK(cudaMemGetInfo(&free0, &total) == cudaSuccess);
    size_t in_use0 = pp_device_bytes_in_use(g);
    for (int s = 0; s < 5; s++) CHECK_OK(train_step(&ex, &t, false, &err), &err);
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved1) ==
          cudaSuccess);
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high1) == cudaSuccess);
    CHECK(cudaMemGetInfo(&free1, &total) == cudaSuccess);
    CHECK_MSG(reserved1 == reserved0 && high1 == high0,
              "steady state grew the pool: reserved %llu -> %llu, high %llu -> %llu",
              (unsigned long long)reserved0, (unsigned long long)reserved1,
              (unsigned long long)high0, (unsigned long long)high1);
    CHECK_MSG(free1 == free0, "steady state allocated device memory: free %zu -> %zu", free0,
              free1);
    CHECK(pp_device_bytes_in_use(g) == in_use0);
    float loss = NAN;
    CHECK_OK(pp_tensor_to_host(&t.loss, &loss, sizeof loss, &err), &err);
    CHECK_MSG(isfinite(loss), "steady-state loss %g", loss);

    pp_exec_destroy(&ex);
    CHECK(cudaStreamDestroy(cs) == cudaSuccess);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pp_tensor_free(all[i].t);
}

int main(void)
{
    if (pp_cuda_device_count() == 0) {
        fprintf(stderr, "test_cuda_ops: no CUDA device visible, skipping\n");
        return 77;
    }
    rig r;
    if (!rig_open(&r, 12345)) return check_summary("test_cuda_ops");

    test_conv(&r);
    test_batchnorm(&r);
    test_pool(&r);
    test_channel_bias(&r);
    test_host_copies(&r);
    test_elementwise(&r);
    test_linear(&r);
    test_bf16(&r);
    test_softmax_xent(&r);
    test_sgd(&r);
    test_sgd_multi(&r);
    test_zero_multi(&r);
    test_steady_state(&r);

    rig_close(&r);
    return check_summary("test_cuda_ops");
}
