/*
 * test_emu_train.c - the training recipe's CUDA kernels (runtime/cuda/train.cu),
 * run on the CPU by the emulator (cuda_emu.h), against the CPU backend, all
 * to the CPU's bits:
 *   - AdamW over several tensors (several tiles, float4 and single-float
 *     paths, a short one), first and later steps, weight decay, a gradient
 *     scale, zero gradients;
 *   - sums of squares in ops.h's order (partial tiles, an empty tensor, huge
 *     values) and scaling;
 *   - deferred batch-norm statistics over layers of different widths and
 *     micro-batches of different sizes: the running statistics, and the
 *     slots zeroed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "tests/check.h"
#include "tests/emu/emu_rig.h"

#include "emu_train.h"

static uint64_t g_rng = 0x853c49e6748fea9bull;

static float urand(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *F(const pp_tensor *t)
{
    return (float *)t->data;
}

static void fill(pp_tensor *t, float lo, float span)
{
    for (int64_t i = 0; i < pp_tensor_numel(t); i++) F(t)[i] = lo + (urand() + 1.0f) * 0.5f * span;
}

/* elements of t whose bits differ from k's */
static int64_t differ(const pp_tensor *t, const float *k)
{
    int64_t d = 0;
    for (int64_t i = 0; i < pp_tensor_numel(t); i++) d += memcmp(&F(t)[i], &k[i], 4) != 0;
    return d;
}

#define LAUNCHED(call, what) CUDA_OK(call, "%s: launch failed", what)

/* ops.h's AdamW scalars, from the descriptor in double */
static pp_emu_cuda_adamw_args adamw_args(const pp_adamw_desc *d)
{
    const double t = (double)d->step;
    return (pp_emu_cuda_adamw_args){(float)(1.0 - d->lr * d->weight_decay),
                                    (float)d->beta1,
                                    (float)(1.0 - d->beta1),
                                    (float)d->beta2,
                                    (float)(1.0 - d->beta2),
                                    (float)sqrt(1.0 - pow(d->beta2, t)),
                                    (float)(d->lr / (1.0 - pow(d->beta1, t))),
                                    (float)d->eps,
                                    d->grad_scale};
}

static void test_adamw(void)
{
    static const pp_adamw_desc descs[] = {
        {1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 1.0f},  {1e-3, 0.9, 0.999, 1e-8, 0.01, 2, 1.0f},
        {3e-4, 0.9, 0.95, 1e-6, 0.1, 17, 0.25f}, {1e-2, 0.0, 0.5, 1e-3, 0.0, 1000, 1.0f},
    };
    static const struct {
        int64_t n;
        size_t off;
        bool zero_grad;
    } ts[] = {{9000, 0, false}, {1037, 4, false}, {3, 0, false}, {4100, 0, true}};
    enum { T = 4 };
    pp_error err;
    char what[96];
    for (size_t di = 0; di < sizeof descs / sizeof descs[0]; di++) {
        const pp_adamw_desc *d = &descs[di];
        pp_tensor p[T], g[T], m[T], v[T];
        pp_tensor *pp[T], *mp[T], *vp[T];
        const pp_tensor *gp[T];
        void *bp[T], *bg[T], *bm[T], *bv[T];
        float *kp[T], *km[T], *kv[T];
        pp_emu_cuda_adamw_list list;
        memset(&list, 0, sizeof list);
        for (int i = 0; i < T; i++) {
            p[i] = emu_tensor(PP_F32, 1, &ts[i].n, PP_NCHW);
            g[i] = emu_tensor(PP_F32, 1, &ts[i].n, PP_NCHW);
            m[i] = emu_tensor(PP_F32, 1, &ts[i].n, PP_NCHW);
            v[i] = emu_tensor(PP_F32, 1, &ts[i].n, PP_NCHW);
            fill(&p[i], -1, 2);
            if (!ts[i].zero_grad) fill(&g[i], -3, 6);
            if (d->step > 1) fill(&m[i], -0.1f, 0.2f), fill(&v[i], 0, 0.01f);
            pp[i] = &p[i], gp[i] = &g[i], mp[i] = &m[i], vp[i] = &v[i];
            kp[i] = emu_copy(&p[i], ts[i].off, &bp[i]);
            km[i] = emu_copy(&m[i], ts[i].off, &bm[i]);
            kv[i] = emu_copy(&v[i], ts[i].off, &bv[i]);
            list.param[i] = kp[i];
            list.grad[i] = emu_copy(&g[i], ts[i].off, &bg[i]);
            list.exp_avg[i] = km[i];
            list.exp_avg_sq[i] = kv[i];
            list.n[i] = ts[i].n;
            list.first_tile[i] = list.tiles;
            list.tiles += (int32_t)((ts[i].n + PP_CUDA_MULTI_TILE - 1) / PP_CUDA_MULTI_TILE);
            list.count++;
        }
        CHECK_OK(pp_adamw_update_multi(&g_ex, d, T, pp, gp, mp, vp, &err), &err);
        LAUNCHED(pp_emu_cuda_launch_adamw_multi(0, 3, &list, adamw_args(d)), "adamw_multi");
        for (int i = 0; i < T; i++) {
            snprintf(what, sizeof what, "adamw case %zu tensor %d (%lld)", di, i,
                     (long long)ts[i].n);
            CHECK_MSG(differ(&p[i], kp[i]) == 0, "%s: params not the CPU's bits", what);
            CHECK_MSG(differ(&m[i], km[i]) == 0, "%s: exp_avg not the CPU's bits", what);
            CHECK_MSG(differ(&v[i], kv[i]) == 0, "%s: exp_avg_sq not the CPU's bits", what);
            free(bp[i]), free(bg[i]), free(bm[i]), free(bv[i]);
            pp_tensor_free(&p[i]), pp_tensor_free(&g[i]), pp_tensor_free(&m[i]),
                pp_tensor_free(&v[i]);
        }
    }
}

static void test_sumsq_scale(void)
{
    static const struct {
        int64_t n;
        size_t off;
        float mag;
    } ts[] = {{1, 0, 1}, {4095, 4, 1}, {4096, 0, 3e18f}, {4097, 8, 1e-20f}, {70001, 0, 1}};
    enum { T = 5 };
    pp_error err;
    pp_tensor x[T];
    const pp_tensor *xc[T];
    pp_tensor *xs[T];
    void *bx[T];
    float *kx[T];
    pp_emu_cuda_norm_list list;
    memset(&list, 0, sizeof list);
    for (int i = 0; i < T; i++) {
        x[i] = emu_tensor(PP_F32, 1, &ts[i].n, PP_NCHW);
        fill(&x[i], -ts[i].mag, 2 * ts[i].mag);
        xc[i] = xs[i] = &x[i];
        kx[i] = emu_copy(&x[i], ts[i].off, &bx[i]);
        list.x[i] = kx[i];
        list.n[i] = ts[i].n;
        list.first_tile[i] = list.tiles;
        list.tiles += (int32_t)((ts[i].n + PP_CUDA_SUMSQ_TILE - 1) / PP_CUDA_SUMSQ_TILE);
        list.count++;
    }
    double cpu[T], emu[T], *part = malloc(sizeof(double) * (size_t)list.tiles);
    CHECK_OK(pp_sumsq_multi(&g_ex, T, xc, cpu, &err), &err);
    LAUNCHED(pp_emu_cuda_launch_sumsq_multi(0, 4, &list, part, emu), "sumsq_multi");
    for (int i = 0; i < T; i++) {
        double naive = 0;
        for (int64_t k = 0; k < ts[i].n; k++) naive += (double)F(&x[i])[k] * F(&x[i])[k];
        CHECK_MSG(memcmp(&cpu[i], &emu[i], sizeof(double)) == 0,
                  "sumsq tensor %d (%lld): %.17g, the CPU's %.17g", i, (long long)ts[i].n,
                  emu[i], cpu[i]);
        CHECK_MSG(fabs(cpu[i] - naive) <= 1e-12 * naive, "sumsq tensor %d: %.17g, naive %.17g", i,
                  cpu[i], naive);
    }
    CHECK_OK(pp_scale_multi(&g_ex, 0.3f, T, xs, &err), &err);
    LAUNCHED(pp_emu_cuda_launch_scale_multi(0, 3, &list, 0.3f), "scale_multi");
    for (int i = 0; i < T; i++) {
        CHECK_MSG(differ(&x[i], kx[i]) == 0, "scale tensor %d: not the CPU's bits", i);
        free(bx[i]);
        pp_tensor_free(&x[i]);
    }
    free(part);
}

static void test_bn_stats(void)
{
    enum { L = 3, M = 5, CAP = 6 };
    static const int c[L] = {3, 64, 1};
    static const int64_t hw[L] = {49, 4, 1};
    static const int sizes[M] = {3, 3, 2, 7, 1};
    pp_error err;
    pp_tensor slots[L], rm[L], rv[L];
    pp_tensor *sp[L], *rmp[L], *rvp[L];
    float *ks[L], *krm[L], *krv[L];
    void *b1[L], *b2[L], *b3[L];
    pp_emu_cuda_bn_stats_list list;
    memset(&list, 0, sizeof list);
    for (int i = 0; i < L; i++) {
        const int64_t ss[3] = {CAP, 2, c[i]}, cs[1] = {c[i]};
        slots[i] = emu_tensor(PP_F32, 3, ss, PP_NCHW);
        rm[i] = emu_tensor(PP_F32, 1, cs, PP_NCHW);
        rv[i] = emu_tensor(PP_F32, 1, cs, PP_NCHW);
        for (int k = 0; k < M; k++)
            for (int ch = 0; ch < c[i]; ch++) {
                F(&slots[i])[(k * 2) * c[i] + ch] = 3.0f + urand();
                F(&slots[i])[(k * 2 + 1) * c[i] + ch] = 2.0f + urand();
            }
        fill(&rm[i], -1, 2), fill(&rv[i], 0.5f, 1);
        sp[i] = &slots[i], rmp[i] = &rm[i], rvp[i] = &rv[i];
        ks[i] = emu_copy(&slots[i], 0, &b1[i]);
        krm[i] = emu_copy(&rm[i], 4, &b2[i]);
        krv[i] = emu_copy(&rv[i], 0, &b3[i]);
        list.slots[i] = ks[i], list.running_mean[i] = krm[i], list.running_var[i] = krv[i];
        list.hw[i] = hw[i], list.c[i] = c[i], list.first_ch[i] = list.channels;
        list.channels += c[i];
        list.count++;
    }
    /* the reference: the combined moments over the whole batch */
    const pp_tensor *s1 = &slots[1];
    double n = 0, sum = 0, m2 = 0;
    for (int k = 0; k < M; k++)
        n += sizes[k] * hw[1], sum += sizes[k] * hw[1] * F(s1)[k * 2 * 64 + 5];
    const double mean = sum / n;
    for (int k = 0; k < M; k++) {
        const double nk = sizes[k] * hw[1], dm = F(s1)[k * 2 * 64 + 5] - mean;
        m2 += (nk - 1) * F(s1)[(k * 2 + 1) * 64 + 5] + nk * dm * dm;
    }
    const double want_m = 0.9 * F(&rm[1])[5] + 0.1 * mean;
    const double want_v = 0.9 * F(&rv[1])[5] + 0.1 * m2 / (n - 1);
    list.m = M;
    list.momentum = 0.1f;
    for (int k = 0; k < M; k++) list.sizes[k] = sizes[k];
    const pp_bn_stats_desc d = {M, sizes, 0.1f};
    CHECK_OK(pp_batchnorm_stats_combine(&g_ex, &d, L, hw, sp, rmp, rvp, &err), &err);
    LAUNCHED(pp_emu_cuda_launch_bn_stats(0, 2, &list), "bn_stats");
    CHECK_MSG(fabs(F(&rm[1])[5] - want_m) <= 1e-6 * fabs(want_m) &&
                  fabs(F(&rv[1])[5] - want_v) <= 1e-6 * fabs(want_v),
              "bn_stats: running %.9g %.9g, the combined moments %.9g %.9g", F(&rm[1])[5],
              F(&rv[1])[5], want_m, want_v);
    for (int i = 0; i < L; i++) {
        CHECK_MSG(differ(&rm[i], krm[i]) == 0 && differ(&rv[i], krv[i]) == 0,
                  "bn_stats layer %d: running statistics not the CPU's bits", i);
        int64_t left = 0, kleft = 0;
        for (int64_t k = 0; k < pp_tensor_numel(&slots[i]); k++)
            left += F(&slots[i])[k] != 0, kleft += ks[i][k] != 0;
        CHECK_MSG(left == 0 && kleft == 0, "bn_stats layer %d: %lld (CPU) and %lld slots left",
                  i, (long long)left, (long long)kleft);
        free(b1[i]), free(b2[i]), free(b3[i]);
        pp_tensor_free(&slots[i]), pp_tensor_free(&rm[i]), pp_tensor_free(&rv[i]);
    }
}

int main(void)
{
    emu_rig_open();
    test_adamw();
    test_sumsq_scale();
    test_bn_stats();
    return emu_rig_close("test_emu_train");
}
