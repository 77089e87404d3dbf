/*
 * test_train_ops.c - the training recipe's ops (runtime/core/ops.h, "the
 * training recipe") on the CPU backend, against naive float64 references:
 *   - pp_softmax_xent_ex: the smoothed loss and its gradient (finite
 *     differences), the top-k count with ties (a sort-free count of the
 *     definition), eps 0 giving pp_softmax_xent's bits, bad descriptors;
 *     on bf16 logits and gradient (aliased or not, smoothing, top-k, rows of
 *     GPT-2's vocabulary and small): the loss and counts of the f32 op on
 *     the widened logits and its gradient rounded once to bf16, bit for bit;
 *   - pp_adamw_update_multi: three steps against torch.optim.AdamW's
 *     arithmetic in double (the first step, a later one, zero gradients,
 *     a large eps, weight decay 0, a gradient scale), each element within
 *     a few float roundings of the update; the list against one call per
 *     tensor and a scale against scaling the gradients first, bit for bit;
 *     misuse refused;
 *   - pp_sumsq_multi: the documented order reproduced (the same bits) and
 *     the exact sum (1e-13), empty tensors, huge and non-finite values;
 *     pp_scale_multi's products;
 *   - pp_batchnorm_stats_combine after real training forwards of the
 *     micro-batches with momentum 1 into zeroed slots: the running
 *     statistics of the whole batch in float64 (1e-6), those of one forward
 *     over the whole batch (the same within fp32 rounding), the slots zeroed;
 *     misuse refused.
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

static pp_registry *g_reg;
static pp_device_ctx *g_dev;
static pp_exec g_ex;
static uint64_t g_rng = 0x2545f4914f6cdd1dull;

static double urand(void) /* [-1, 1) */
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) / 4503599627370496.0 - 1.0;
}

static pp_tensor tnew(pp_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    pp_tensor t;
    pp_error err;
    const int64_t shape[4] = {d0, d1, d2, d3};
    if (pp_tensor_zeros(&t, g_dev, dt, ndim, shape, &err) != PP_OK) {
        fprintf(stderr, "allocation failed: %s\n", err.msg);
        exit(1);
    }
    return t;
}

static float *fp(const pp_tensor *t) { return (float *)t->data; }

static void fill(pp_tensor *t, double offset, double scale)
{
    for (int64_t i = 0; i < pp_tensor_numel(t); i++) fp(t)[i] = (float)(offset + scale * urand());
}

/* ---- softmax cross-entropy with label smoothing and top-k ----------------------- */

typedef struct xent_ref {
    int n, classes;
    double *z;
    const int32_t *labels;
    double divisor, eps;
} xent_ref;

static double xent_loss(void *p)
{
    const xent_ref *c = p;
    double total = 0.0;
    for (int i = 0; i < c->n; i++) {
        const double *z = c->z + (size_t)i * c->classes;
        double m = z[0], s = 0.0, sz = 0.0;
        for (int j = 1; j < c->classes; j++) m = fmax(m, z[j]);
        for (int j = 0; j < c->classes; j++) s += exp(z[j] - m), sz += z[j];
        const double lse = m + log(s);
        /* CrossEntropyLoss: (1 - eps) nll + eps * mean over classes of -log p */
        total += (1 - c->eps) * (lse - z[c->labels[i]]) + c->eps * (lse - sz / c->classes);
    }
    return total / c->divisor;
}

/* torchvision's accuracy(topk): the label among the k largest, ties to the lower index */
static int ref_top_k(const double *z, int classes, int label, int k)
{
    int better = 0;
    for (int j = 0; j < classes; j++) better += z[j] > z[label] || (z[j] == z[label] && j < label);
    return better < k;
}

static void test_xent_smoothing(void)
{
    static const struct {
        int n, classes, top_k;
        float divisor, eps;
        double offset, scale;
        bool ties;
    } cases[] = {
        {4, 10, 5, 4.0f, 0.1f, 0.0, 3.0, false},    {1, 3, 1, 1.0f, 0.3f, 0.0, 1.0, false},
        {7, 1000, 5, 16.0f, 0.1f, 0.0, 4.0, false}, {3, 5, 2, 8.0f, 0.05f, 1000.0, 2.0, false},
        {6, 8, 3, 6.0f, 0.2f, 0.0, 1.0, true},      {5, 4, 9, 5.0f, 0.0f, 0.0, 1.0, true},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int n = cases[ci].n, k = cases[ci].classes;
        pp_error err;
        pp_tensor z = tnew(PP_F32, 2, n, k, 1, 1), dz = tnew(PP_F32, 2, n, k, 1, 1);
        pp_tensor lab = tnew(PP_I32, 1, n, 1, 1, 1), loss = tnew(PP_F32, 0, 1, 1, 1, 1);
        pp_tensor corr = tnew(PP_I32, 0, 1, 1, 1, 1), corr_k = tnew(PP_I32, 0, 1, 1, 1, 1);
        fill(&z, cases[ci].offset, cases[ci].scale);
        int32_t *labels = lab.data;
        for (int i = 0; i < n; i++) {
            labels[i] = (int32_t)((urand() + 1.0) * 0.5 * k) % k;
            if (cases[ci].ties) /* the label's logit repeated at a lower and a higher class */
                fp(&z)[i * k + (labels[i] + 1) % k] = fp(&z)[i * k + (labels[i] + k - 1) % k] =
                    fp(&z)[i * k + labels[i]];
        }
        double *zd = malloc(sizeof(double) * (size_t)n * k);
        for (int i = 0; i < n * k; i++) zd[i] = fp(&z)[i];
        int hits = 0, hits_k = 0;
        for (int i = 0; i < n; i++) {
            hits += ref_top_k(zd + (size_t)i * k, k, labels[i], 1);
            hits_k += ref_top_k(zd + (size_t)i * k, k, labels[i], cases[ci].top_k);
        }
        const pp_xent_desc d = {cases[ci].divisor, cases[ci].eps, cases[ci].top_k};
        CHECK_OK(pp_softmax_xent_ex(&g_ex, &d, &z, &lab, &loss, &corr, &corr_k, &dz, &err), &err);
        xent_ref c = {n, k, zd, labels, cases[ci].divisor, cases[ci].eps};
        const double want = xent_loss(&c);
        CHECK_MSG(fabs(*fp(&loss) - want) <= 1e-6 * fmax(1.0, fabs(want)),
                  "xent case %zu: loss %.9g, expected %.9g", ci, (double)*fp(&loss), want);
        CHECK_MSG(*(int32_t *)corr.data == hits && *(int32_t *)corr_k.data == hits_k,
                  "xent case %zu: top-1 %d top-%d %d, expected %d and %d", ci,
                  *(int32_t *)corr.data, cases[ci].top_k, *(int32_t *)corr_k.data, hits, hits_k);
        /* the gradient against central differences of the double loss */
        double worst = 0;
        for (int i = 0; i < n * k; i += (n * k > 300 ? 37 : 1)) {
            const double s = zd[i], h = 1e-5;
            zd[i] = s + h;
            const double lp = xent_loss(&c);
            zd[i] = s - h;
            const double lm = xent_loss(&c);
            zd[i] = s;
            worst = fmax(worst, fabs((lp - lm) / (2 * h) - fp(&dz)[i]));
        }
        CHECK_MSG(worst <= 2e-5, "xent case %zu: dlogits off finite differences by %.3g", ci,
                  worst);
        /* without smoothing: pp_softmax_xent's bits */
        if (cases[ci].eps == 0) {
            pp_tensor loss0 = tnew(PP_F32, 0, 1, 1, 1, 1), corr0 = tnew(PP_I32, 0, 1, 1, 1, 1);
            pp_tensor dz0 = tnew(PP_F32, 2, n, k, 1, 1);
            CHECK_OK(pp_softmax_xent(&g_ex, &z, &lab, d.divisor, &loss0, &corr0, &dz0, &err), &err);
            CHECK(memcmp(loss0.data, loss.data, 4) == 0 &&
                  memcmp(dz0.data, dz.data, pp_tensor_bytes(&dz)) == 0);
            pp_tensor_free(&loss0), pp_tensor_free(&corr0), pp_tensor_free(&dz0);
        }
        free(zd);
        pp_tensor *ts[] = {&z, &dz, &lab, &loss, &corr, &corr_k};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
    /* bad descriptors */
    pp_tensor z = tnew(PP_F32, 2, 2, 4, 1, 1), dz = tnew(PP_F32, 2, 2, 4, 1, 1);
    pp_tensor lab = tnew(PP_I32, 1, 2, 1, 1, 1), loss = tnew(PP_F32, 0, 1, 1, 1, 1);
    pp_tensor corr = tnew(PP_I32, 0, 1, 1, 1, 1);
    static const pp_xent_desc bad[] = {{1.0f, 1.0f, 1}, {1.0f, -0.1f, 1}, {1.0f, NAN, 1},
                                       {1.0f, 0.1f, 0}, {0.0f, 0.1f, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pp_error err;
        pp_status s = pp_softmax_xent_ex(&g_ex, &bad[i], &z, &lab, &loss, &corr, &corr, &dz, &err);
        CHECK_MSG(s == PP_ERR_INVALID, "bad xent descriptor %zu: %s", i, pp_status_name(s));
    }
    pp_tensor *ts[] = {&z, &dz, &lab, &loss, &corr};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* bf16 logits: the bits of the f32 op on the logits widened, with its
 * gradient rounded once (ops.h); the rows' logits drawn as bf16 values */
static void test_xent_bf16(void)
{
    static const struct {
        int n, classes, top_k; /* top_k 0: no top-k count */
        float divisor, eps;
        double offset, scale;
        bool in_place, ties;
    } cases[] = {
        {4, 10, 5, 4.0f, 0.1f, 0.0, 3.0, false, false},
        {4, 10, 0, 4.0f, 0.0f, 0.0, 3.0, true, true},
        {1, 3, 1, 1.0f, 0.3f, 0.0, 1.0, true, false},
        {6, 8, 3, 6.0f, 0.2f, 0.0, 1.0, false, true},
        {3, 50257, 5, 24.0f, 0.0f, 0.0, 6.0, true, true},
        {2, 50257, 0, 2.0f, 0.1f, 0.0, 6.0, false, false},
        {5, 1000, 5, 5.0f, 0.0f, 100.0, 4.0, false, false},
        {2, 1, 1, 2.0f, 0.0f, 0.0, 1.0, true, false},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int n = cases[ci].n, k = cases[ci].classes, top_k = cases[ci].top_k;
        pp_error err;
        pp_tensor z = tnew(PP_F32, 2, n, k, 1, 1), dz = tnew(PP_F32, 2, n, k, 1, 1);
        pp_tensor h = tnew(PP_BF16, 2, n, k, 1, 1), dh = tnew(PP_BF16, 2, n, k, 1, 1);
        pp_tensor lab = tnew(PP_I32, 1, n, 1, 1, 1);
        pp_tensor loss[2], corr[2], corr_k[2];
        for (int v = 0; v < 2; v++) {
            loss[v] = tnew(PP_F32, 0, 1, 1, 1, 1);
            corr[v] = tnew(PP_I32, 0, 1, 1, 1, 1);
            corr_k[v] = tnew(PP_I32, 0, 1, 1, 1, 1);
        }
        fill(&z, cases[ci].offset, cases[ci].scale);
        uint16_t *hz = h.data;
        int32_t *labels = lab.data;
        for (int64_t i = 0; i < (int64_t)n * k; i++) { /* bf16 values, widened */
            hz[i] = pp_bf16_from_f32(fp(&z)[i]);
            fp(&z)[i] = pp_f32_from_bf16(hz[i]);
        }
        for (int i = 0; i < n; i++) {
            labels[i] = (int32_t)((urand() + 1.0) * 0.5 * k) % k;
            if (cases[ci].ties) { /* the label's logit at a lower class, the maximum twice */
                const int64_t r = (int64_t)i * k;
                hz[r + (labels[i] + k - 1) % k] = hz[r + labels[i]];
                hz[r + k / 2] = hz[r + k - 1] = pp_bf16_from_f32(10.0f);
                for (int j = 0; j < k; j++) fp(&z)[r + j] = pp_f32_from_bf16(hz[r + j]);
            }
        }
        const pp_xent_desc d = {cases[ci].divisor, cases[ci].eps, top_k > 0 ? top_k : 1};
        CHECK_OK(pp_softmax_xent_ex(&g_ex, &d, &z, &lab, &loss[0], &corr[0],
                                    top_k ? &corr_k[0] : NULL, &dz, &err),
                 &err);
        pp_tensor *dst = cases[ci].in_place ? &h : &dh;
        CHECK_OK(pp_softmax_xent_ex(&g_ex, &d, &h, &lab, &loss[1], &corr[1],
                                    top_k ? &corr_k[1] : NULL, dst, &err),
                 &err);
        int64_t differ = 0;
        const uint16_t *g = dst->data;
        for (int64_t i = 0; i < (int64_t)n * k; i++)
            differ += g[i] != pp_bf16_from_f32(fp(&dz)[i]);
        CHECK_MSG(differ == 0, "xent bf16 case %zu: %lld of %lld gradient elements not the f32 "
                  "op's rounded", ci, (long long)differ, (long long)n * k);
        CHECK_MSG(memcmp(loss[0].data, loss[1].data, 4) == 0, "xent bf16 case %zu: loss %.9g, "
                  "the f32 op's %.9g", ci, (double)*fp(&loss[1]), (double)*fp(&loss[0]));
        CHECK_MSG(*(int32_t *)corr[0].data == *(int32_t *)corr[1].data &&
                      *(int32_t *)corr_k[0].data == *(int32_t *)corr_k[1].data,
                  "xent bf16 case %zu: counts %d and %d, the f32 op's %d and %d", ci,
                  *(int32_t *)corr[1].data, *(int32_t *)corr_k[1].data, *(int32_t *)corr[0].data,
                  *(int32_t *)corr_k[0].data);
        pp_tensor *ts[] = {&z, &dz, &h, &dh, &lab, &loss[0], &loss[1], &corr[0], &corr[1],
                           &corr_k[0], &corr_k[1]};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- AdamW ---------------------------------------------------------------------- */

/* torch.optim.AdamW's step on one element in double */
static void ref_adamw(const pp_adamw_desc *d, double *p, double g, double *m, double *v)
{
    g *= d->grad_scale;
    *p *= 1 - d->lr * d->weight_decay;
    *m = *m * d->beta1 + (1 - d->beta1) * g;
    *v = *v * d->beta2 + (1 - d->beta2) * g * g;
    const double bc1 = 1 - pow(d->beta1, (double)d->step), bc2 = 1 - pow(d->beta2, (double)d->step);
    *p -= d->lr / bc1 * *m / (sqrt(*v) / sqrt(bc2) + d->eps);
}

static void test_adamw(void)
{
    static const struct {
        double lr, b1, b2, eps, wd;
        float scale;
        bool zero_grad;
    } cases[] = {
        {1e-3, 0.9, 0.999, 1e-8, 0.01, 1.0f, false}, {1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0f, false},
        {1e-3, 0.9, 0.999, 1e-8, 0.0, 1.0f, false},  {1e-3, 0.9, 0.999, 1e-8, 0.05, 1.0f, true},
        {1e-3, 0.8, 0.99, 10.0, 0.01, 1.0f, false},  {3e-4, 0.9, 0.999, 1e-8, 0.01, 0.125f, false},
    };
    enum { T = 3, STEPS = 3 };
    static const int64_t sizes[T] = {70000, 5, 1};
    pp_error err;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        pp_tensor p[T], g[T], m[T], v[T], p1[T], m1[T], v1[T];
        pp_tensor *pl[T], *ml[T], *vl[T];
        const pp_tensor *gl[T];
        double *rp[T], *rm[T], *rv[T];
        for (int i = 0; i < T; i++) {
            pp_tensor *all[] = {&p[i], &g[i], &m[i], &v[i], &p1[i], &m1[i], &v1[i]};
            for (int a = 0; a < 7; a++) *all[a] = tnew(PP_F32, 1, sizes[i], 1, 1, 1);
            fill(&p[i], 0, 1);
            memcpy(p1[i].data, p[i].data, pp_tensor_bytes(&p[i]));
            pl[i] = &p[i], gl[i] = &g[i], ml[i] = &m[i], vl[i] = &v[i];
            rp[i] = malloc(sizeof(double) * (size_t)sizes[i]);
            rm[i] = calloc((size_t)sizes[i], sizeof(double));
            rv[i] = calloc((size_t)sizes[i], sizeof(double));
            for (int64_t e = 0; e < sizes[i]; e++) rp[i][e] = fp(&p[i])[e];
        }
        for (int step = 1; step <= STEPS; step++) {
            const pp_adamw_desc d = {cases[ci].lr, cases[ci].b1, cases[ci].b2, cases[ci].eps,
                                     cases[ci].wd, step, cases[ci].scale};
            for (int i = 0; i < T; i++) {
                if (!cases[ci].zero_grad) fill(&g[i], 0, step == 2 ? 1e3 : 1e-2);
                for (int64_t e = 0; e < sizes[i]; e++)
                    ref_adamw(&d, &rp[i][e], fp(&g[i])[e], &rm[i][e], &rv[i][e]);
                /* the same step one tensor at a time */
                pp_tensor *p1p = &p1[i], *m1p = &m1[i], *v1p = &v1[i];
                CHECK_OK(pp_adamw_update_multi(&g_ex, &d, 1, &p1p, &gl[i], &m1p, &v1p, &err),
                         &err);
            }
            CHECK_OK(pp_adamw_update_multi(&g_ex, &d, T, pl, gl, ml, vl, &err), &err);
            for (int i = 0; i < T; i++) {
                CHECK_MSG(memcmp(p[i].data, p1[i].data, pp_tensor_bytes(&p[i])) == 0 &&
                              memcmp(v[i].data, v1[i].data, pp_tensor_bytes(&v[i])) == 0,
                          "adamw case %zu step %d tensor %d: the list differs from one call", ci,
                          step, i);
                /* each element within a few roundings of its update, and two of the
                 * parameter per step taken (the decay's product, the update's difference; an
                 * ulp each at a binade's bottom) */
                double worst = 0;
                for (int64_t e = 0; e < sizes[i]; e++) {
                    const double upd = d.lr * (1.0 + fabs(rp[i][e]) * d.weight_decay);
                    worst = fmax(worst, fabs(fp(&p[i])[e] - rp[i][e]) /
                                            (upd * 1e-5 + fabs(rp[i][e]) * 2.4e-7 * step));
                }
                CHECK_MSG(worst <= 1.0, "adamw case %zu step %d tensor %d: error %.3g of the bound",
                          ci, step, i, worst);
            }
        }
        for (int i = 0; i < T; i++) {
            pp_tensor *all[] = {&p[i], &g[i], &m[i], &v[i], &p1[i], &m1[i], &v1[i]};
            for (int a = 0; a < 7; a++) pp_tensor_free(all[a]);
            free(rp[i]), free(rm[i]), free(rv[i]);
        }
    }
}

/* a gradient scale equals scaling the gradients first; misuse is refused */
static void test_adamw_scale_misuse(void)
{
    pp_error err;
    pp_tensor p = tnew(PP_F32, 1, 1000, 1, 1, 1), q = tnew(PP_F32, 1, 1000, 1, 1, 1);
    pp_tensor g = tnew(PP_F32, 1, 1000, 1, 1, 1), m = tnew(PP_F32, 1, 1000, 1, 1, 1);
    pp_tensor v = tnew(PP_F32, 1, 1000, 1, 1, 1), m2 = tnew(PP_F32, 1, 1000, 1, 1, 1);
    pp_tensor v2 = tnew(PP_F32, 1, 1000, 1, 1, 1), small = tnew(PP_F32, 1, 999, 1, 1, 1);
    fill(&p, 0, 1), fill(&g, 0, 1);
    memcpy(q.data, p.data, pp_tensor_bytes(&p));
    pp_tensor *pp = &p, *qp = &q, *mp = &m, *vp = &v, *m2p = &m2, *v2p = &v2, *gp = &g;
    const pp_tensor *gc = &g;
    pp_adamw_desc d = {1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 0.3f};
    CHECK_OK(pp_adamw_update_multi(&g_ex, &d, 1, &pp, &gc, &mp, &vp, &err), &err);
    CHECK_OK(pp_scale_multi(&g_ex, 0.3f, 1, &gp, &err), &err);
    d.grad_scale = 1.0f;
    CHECK_OK(pp_adamw_update_multi(&g_ex, &d, 1, &qp, &gc, &m2p, &v2p, &err), &err);
    CHECK_MSG(memcmp(p.data, q.data, pp_tensor_bytes(&p)) == 0,
              "adamw with grad_scale s differs from scaling the gradient by s first");
    static const pp_adamw_desc bad[] = {
        {1e-3, 0.9, 0.999, 1e-8, 0.01, 0, 1.0f},  {1e-3, 1.0, 0.999, 1e-8, 0.01, 1, 1.0f},
        {1e-3, 0.9, -0.1, 1e-8, 0.01, 1, 1.0f},   {-1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 1.0f},
        {1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 0.0f},  {1e-3, 0.9, 0.999, NAN, 0.01, 1, 1.0f},
        {1e-3, 0.9, 0.999, 1e-8, -0.01, 1, 1.0f},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pp_status s = pp_adamw_update_multi(&g_ex, &bad[i], 1, &pp, &gc, &mp, &vp, &err);
        CHECK_MSG(s == PP_ERR_INVALID, "bad adamw descriptor %zu: %s", i, pp_status_name(s));
    }
    pp_tensor *sp = &small;
    pp_status s = pp_adamw_update_multi(&g_ex, &d, 1, &pp, &gc, &mp, &sp, &err);
    CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "tensor 0") && strstr(err.msg, "exp_avg_sq"),
              "a state of another shape: %s '%s'", pp_status_name(s), err.msg);
    pp_tensor *ts[] = {&p, &q, &g, &m, &v, &m2, &v2, &small};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* ---- sums of squares and scaling ------------------------------------------------ */

/* ops.h's order, written out again */
static double ordered_sumsq(const float *x, int64_t n)
{
    double total = 0;
    for (int64_t t0 = 0; t0 < n; t0 += PP_SUMSQ_TILE) {
        double lane[PP_SUMSQ_LANES] = {0};
        for (int64_t i = t0; i < n && i < t0 + PP_SUMSQ_TILE; i++)
            lane[(i - t0) % PP_SUMSQ_LANES] += (double)x[i] * (double)x[i];
        for (int o = PP_SUMSQ_LANES / 2; o > 0; o /= 2)
            for (int l = 0; l < o; l++) lane[l] += lane[l + o];
        total += lane[0];
    }
    return total;
}

static void test_sumsq_scale(void)
{
    static const struct {
        int64_t n;
        double scale;
    } ts[] = {{0, 1}, {1, 1}, {4095, 1}, {4097, 1}, {300001, 1}, {5000, 1e30}, {777, 1e-30}};
    enum { T = 7 };
    pp_error err;
    pp_tensor x[T];
    const pp_tensor *xc[T];
    pp_tensor *xs[T];
    double sums[T];
    for (int i = 0; i < T; i++) {
        x[i] = tnew(PP_F32, 1, ts[i].n, 1, 1, 1);
        fill(&x[i], 0, ts[i].scale);
        xc[i] = xs[i] = &x[i];
    }
    CHECK_OK(pp_sumsq_multi(&g_ex, T, xc, sums, &err), &err);
    for (int i = 0; i < T; i++) {
        const double want = ordered_sumsq(fp(&x[i]), ts[i].n);
        long double exact = 0;
        for (int64_t k = 0; k < ts[i].n; k++) exact += (long double)fp(&x[i])[k] * fp(&x[i])[k];
        CHECK_MSG(memcmp(&sums[i], &want, sizeof want) == 0,
                  "sumsq tensor %d (%lld): %.17g, the documented order gives %.17g", i,
                  (long long)ts[i].n, sums[i], want);
        CHECK_MSG(fabsl(sums[i] - exact) <= 1e-13L * exact, "sumsq tensor %d: %.17g, exact %.17Lg",
                  i, sums[i], exact);
    }
    CHECK(sums[0] == 0.0);
    /* a non-finite value makes a non-finite sum */
    fp(&x[3])[17] = INFINITY;
    fp(&x[2])[4000] = NAN;
    CHECK_OK(pp_sumsq_multi(&g_ex, T, xc, sums, &err), &err);
    CHECK_MSG(isinf(sums[3]) && isnan(sums[2]), "sumsq of inf %g, of NaN %g", sums[3], sums[2]);
    /* scaling: each product rounded once */
    float before[64];
    memcpy(before, x[4].data, sizeof before);
    CHECK_OK(pp_scale_multi(&g_ex, 0.7f, T, xs, &err), &err);
    int bad = 0;
    for (int k = 0; k < 64; k++) bad += fp(&x[4])[k] != before[k] * 0.7f;
    CHECK_MSG(bad == 0, "scale: %d of 64 products differ", bad);
    CHECK(pp_scale_multi(&g_ex, INFINITY, T, xs, &err) == PP_ERR_INVALID);
    for (int i = 0; i < T; i++) pp_tensor_free(&x[i]);
}

/* ---- deferred batch-norm statistics --------------------------------------------- */

static void test_bn_stats(void)
{
    enum { C = 5, H = 3, W = 4, M = 4, N = 10 };
    static const int sizes[M] = {3, 3, 2, 2};
    pp_error err;
    pp_tensor x = tnew(PP_F32, 4, N, C, H, W), y = tnew(PP_F32, 4, N, C, H, W);
    pp_tensor gamma = tnew(PP_F32, 1, C, 1, 1, 1), beta = tnew(PP_F32, 1, C, 1, 1, 1);
    pp_tensor sm = tnew(PP_F32, 1, C, 1, 1, 1), si = tnew(PP_F32, 1, C, 1, 1, 1);
    pp_tensor slots = tnew(PP_F32, 3, M + 1, 2, C, 1);
    pp_tensor rm = tnew(PP_F32, 1, C, 1, 1, 1), rv = tnew(PP_F32, 1, C, 1, 1, 1);
    pp_tensor rm1 = tnew(PP_F32, 1, C, 1, 1, 1), rv1 = tnew(PP_F32, 1, C, 1, 1, 1);
    fill(&x, 3, 2), fill(&gamma, 1, 0.1), fill(&rm, 0, 0.1), fill(&rv, 1, 0.1);
    memcpy(rm1.data, rm.data, C * 4);
    memcpy(rv1.data, rv.data, C * 4);
    double rm0[C], rv0[C];
    for (int c = 0; c < C; c++) rm0[c] = fp(&rm)[c], rv0[c] = fp(&rv)[c];
    /* each micro-batch's forward with momentum 1 into its zeroed rows */
    for (int k = 0, off = 0; k < M; off += sizes[k], k++) {
        pp_bn_desc d = {sizes[k], C, H, W, 1e-5f, 1.0f};
        pp_tensor xk = pp_tensor_view0(&x, off, sizes[k]), yk = pp_tensor_view0(&y, off, sizes[k]);
        pp_tensor row = pp_tensor_view0(&slots, k, 1), mean, var;
        CHECK_OK(pp_tensor_reshape(&row, 2, (int64_t[]){2, C}, &row, &err), &err);
        mean = pp_tensor_view0(&row, 0, 1), var = pp_tensor_view0(&row, 1, 1);
        CHECK_OK(pp_tensor_reshape(&mean, 1, (int64_t[]){C}, &mean, &err), &err);
        CHECK_OK(pp_tensor_reshape(&var, 1, (int64_t[]){C}, &var, &err), &err);
        CHECK_OK(pp_batchnorm_forward_train(&g_ex, &d, &xk, &gamma, &beta, &mean, &var, &yk, &sm,
                                            &si, &err),
                 &err);
    }
    const int64_t hw = H * W;
    pp_tensor *sp = &slots, *rmp = &rm, *rvp = &rv;
    const pp_bn_stats_desc bd = {M, sizes, 0.1f};
    CHECK_OK(pp_batchnorm_stats_combine(&g_ex, &bd, 1, &hw, &sp, &rmp, &rvp, &err), &err);
    /* one forward over the whole batch, and the statistics in double */
    pp_bn_desc whole = {N, C, H, W, 1e-5f, 0.1f};
    CHECK_OK(pp_batchnorm_forward_train(&g_ex, &whole, &x, &gamma, &beta, &rm1, &rv1, &y, &sm, &si,
                                        &err),
             &err);
    for (int c = 0; c < C; c++) {
        double s = 0, ss = 0;
        const double cnt = (double)N * H * W;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < H * W; i++) s += fp(&x)[(n * C + c) * H * W + i];
        const double mean = s / cnt;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < H * W; i++) {
                const double dv = fp(&x)[(n * C + c) * H * W + i] - mean;
                ss += dv * dv;
            }
        const double want_m = 0.9 * rm0[c] + 0.1 * mean;
        const double want_v = 0.9 * rv0[c] + 0.1 * ss / (cnt - 1);
        CHECK_MSG(fabs(fp(&rm)[c] - want_m) <= 1e-6 * fabs(want_m) &&
                      fabs(fp(&rv)[c] - want_v) <= 1e-6 * want_v,
                  "channel %d: deferred running statistics %.9g %.9g, the batch's %.9g %.9g", c,
                  fp(&rm)[c], fp(&rv)[c], want_m, want_v);
        CHECK_MSG(fabs(fp(&rm)[c] - fp(&rm1)[c]) <= 1e-6 * fabs(fp(&rm1)[c]) &&
                      fabs(fp(&rv)[c] - fp(&rv1)[c]) <= 1e-6 * fabs(fp(&rv1)[c]),
                  "channel %d: deferred running statistics %.9g %.9g, one forward's %.9g %.9g", c,
                  fp(&rm)[c], fp(&rv)[c], fp(&rm1)[c], fp(&rv1)[c]);
    }
    float left = 0;
    for (int i = 0; i < 2 * M * C; i++) left += fabsf(fp(&slots)[i]);
    CHECK_MSG(left == 0, "slots not zeroed after combining");
    /* misuse */
    const pp_bn_stats_desc too_many = {M + 2, (int[]){1, 1, 1, 1, 1, 1}, 0.1f};
    CHECK(pp_batchnorm_stats_combine(&g_ex, &too_many, 1, &hw, &sp, &rmp, &rvp, &err) ==
          PP_ERR_INVALID);
    const pp_bn_stats_desc empty = {2, (int[]){1, 0}, 0.1f};
    CHECK(pp_batchnorm_stats_combine(&g_ex, &empty, 1, &hw, &sp, &rmp, &rvp, &err) ==
          PP_ERR_INVALID);
    pp_tensor *ts[] = {&x, &y, &gamma, &beta, &sm, &si, &slots, &rm, &rv, &rm1, &rv1};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

int main(void)
{
    pp_error err;
    if (pp_registry_new(&g_reg, &err) != PP_OK ||
        pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CPU, 0}, &g_dev, &err) != PP_OK ||
        pp_exec_init(&g_ex, g_dev, NULL, &err) != PP_OK) {
        fprintf(stderr, "setup failed: %s\n", err.msg);
        return 1;
    }
    test_xent_smoothing();
    test_xent_bf16();
    test_adamw();
    test_adamw_scale_misuse();
    test_sumsq_scale();
    test_bn_stats();
    pp_exec_destroy(&g_ex);
    pp_registry_free(g_reg);
    return check_summary("test_train_ops");
}
