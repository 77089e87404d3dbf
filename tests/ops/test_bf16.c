/*
 * test_bf16.c - bf16 mixed precision in the op API (runtime/core/ops.h) on the
 * CPU backend:
 *   1. rounding: f32 -> bf16 to nearest, ties to even (NaN quiet, overflow to
 *      infinity, subnormals kept), bf16 -> f32 exact; the host functions and
 *      pp_cast agree bit for bit;
 *   2. the contract of every op that takes bf16 operands: its result is the f32
 *      op's on the same (bf16-representable) values, bf16 outputs rounded once
 *      to nearest even, f32 outputs (parameter gradients) bit for bit, in-place
 *      use included; the same with those operands NHWC (f32 and bf16): the
 *      results, laid out back, are the NCHW op's bit for bit; GPT-2's ops
 *      likewise with bf16 operands (op_cases_transformer.h);
 *   3. accuracy against double references on the unrounded f32 inputs, with
 *      bounds derived from bf16's 8-bit significand (7 bits stored; unit
 *      roundoff u = 2^-8): a
 *      sum of K products of two rounded inputs errs by at most
 *      (2u + u^2 + (K + 2) 2^-24) sum|x||w|, plus u |y| for the rounded output.
 */
#include <math.h>
#include <stdint.h>
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

static double urand(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static pp_tensor talloc(pp_dtype dt, int ndim, const int64_t *shape)
{
    pp_tensor t;
    pp_error err;
    if (pp_tensor_zeros(&t, g_dev, dt, ndim, shape, &err) != PP_OK) {
        fprintf(stderr, "allocation failed: %s\n", err.msg);
        exit(1);
    }
    return t;
}

/* ---- 1. rounding --------------------------------------------------------------- */

static void test_rounding(void)
{
    static const struct {
        uint32_t in;
        uint16_t out;
        const char *what;
    } cases[] = {
        {0x3f800000u, 0x3f80, "1"},
        {0x3f808000u, 0x3f80, "1 + 2^-8: a tie, to even (down)"},
        {0x3f818000u, 0x3f82, "1 + 3 2^-8: a tie, to even (up)"},
        {0x3f808001u, 0x3f81, "just above a tie: up"},
        {0x3f807fffu, 0x3f80, "just below a tie: down"},
        {0xbf80c000u, 0xbf81, "-(1 + 1.5 2^-7): away from zero"},
        {0x80000000u, 0x8000, "-0"},
        {0x00000001u, 0x0000, "smallest subnormal: to zero"},
        {0x00400000u, 0x0040, "a subnormal kept"},
        {0x7f7fffffu, 0x7f80, "largest float: overflows to infinity"},
        {0x7f7f0000u, 0x7f7f, "largest bf16"},
        {0x7f800000u, 0x7f80, "infinity"},
        {0xff800000u, 0xff80, "-infinity"},
        {0x7fc00000u, 0x7fc0, "quiet NaN"},
        {0x7f800001u, 0x7fc0, "signalling NaN with low payload: stays NaN, quiet"},
        {0xffa00000u, 0xffe0, "negative signalling NaN: quiet, sign kept"},
    };
    const int n = (int)(sizeof cases / sizeof cases[0]);
    pp_tensor f = talloc(PP_F32, 1, (int64_t[]){n}), h = talloc(PP_BF16, 1, (int64_t[]){n});
    pp_tensor back = talloc(PP_F32, 1, (int64_t[]){n});
    for (int i = 0; i < n; i++) ((float *)f.data)[i] = from_bits(cases[i].in);
    pp_error err;
    CHECK_OK(pp_cast(&g_ex, &f, &h, &err), &err);
    CHECK_OK(pp_cast(&g_ex, &h, &back, &err), &err);
    for (int i = 0; i < n; i++) {
        uint16_t host = pp_bf16_from_f32(from_bits(cases[i].in));
        uint16_t dev = ((uint16_t *)h.data)[i];
        CHECK_MSG(host == cases[i].out, "%s: host rounds %08x to %04x, expected %04x",
                  cases[i].what, cases[i].in, host, cases[i].out);
        CHECK_MSG(dev == cases[i].out, "%s: pp_cast rounds %08x to %04x, expected %04x",
                  cases[i].what, cases[i].in, dev, cases[i].out);
        CHECK_MSG(bits(((float *)back.data)[i]) == (uint32_t)cases[i].out << 16,
                  "%s: widening is not exact", cases[i].what);
        CHECK(bits(pp_f32_from_bf16(cases[i].out)) == (uint32_t)cases[i].out << 16);
    }
    /* nearest: over random values the rounding error is at most half a step */
    int worst_ok = 1;
    for (int i = 0; i < 100000; i++) {
        float x = (float)(ldexp(urand(), (int)(urand() * 60)));
        double r = pp_f32_from_bf16(pp_bf16_from_f32(x));
        if (x != 0 && !(fabs(r - x) <= ldexp(fabs(x), -8))) worst_ok = 0;
    }
    CHECK_MSG(worst_ok, "a rounding error exceeds 2^-8 relative");
    /* bad casts are refused */
    pp_tensor i32 = talloc(PP_I32, 1, (int64_t[]){n}), shorter = talloc(PP_F32, 1, (int64_t[]){2});
    CHECK(pp_cast(&g_ex, &i32, &h, &err) == PP_ERR_INVALID);
    CHECK(pp_cast(&g_ex, &h, &shorter, &err) == PP_ERR_INVALID);
    pp_tensor_free(&i32);
    pp_tensor_free(&shorter);
    pp_tensor_free(&f);
    pp_tensor_free(&h);
    pp_tensor_free(&back);
}

/* ---- 2. the contract, op by op ------------------------------------------------------- */

#include "tests/ops/op_cases_transformer.h"

/* Runs one case twice: every operand F32 NCHW (holding bf16-representable
 * values where the operand may be bf16), then with the 'a' operands of dtype
 * act and, when 4-D, layout lay; each result must be the first run's (rounded
 * to bf16 for bf16 'a' operands), whatever the layout. */
static void check_case(const op_case *c, pp_dtype act, pp_layout lay)
{
    pp_tensor f[MAX_OPS], h[MAX_OPS];
    pp_tensor *tf[MAX_OPS], *th[MAX_OPS];
    pp_error err;
    const char *mode = act == PP_BF16 ? (lay == PP_NHWC ? "bf16 NHWC" : "bf16") : "f32 NHWC";
    for (int i = 0; i < c->n; i++) {
        const operand *o = &c->o[i];
        tf[i] = &f[i];
        th[i] = &h[i];
        if (c->alias_of[i] > 0) { /* operand i is operand alias_of - 1 */
            tf[i] = tf[c->alias_of[i] - 1];
            th[i] = th[c->alias_of[i] - 1];
            continue;
        }
        f[i] = talloc(o->kind == 'i' ? PP_I32 : PP_F32, o->ndim, o->shape);
        h[i] = talloc(o->kind == 'a' ? act : o->kind == 'i' ? PP_I32 : PP_F32, o->ndim,
                      o->shape);
        /* activations, and the argmax (laid out like the pooled output) */
        if ((o->kind == 'a' || o->kind == 'i') && o->ndim == 4) h[i].layout = lay;
        const int64_t n = pp_tensor_numel(&f[i]);
        for (int64_t k = 0; k < n && o->kind != 'i' && o->kind != 'w'; k++) {
            float v = (float)(urand() * 2.0);
            if (o->kind == 'a') v = pp_f32_from_bf16(pp_bf16_from_f32(v));
            /* variances and inverse deviations must be positive */
            if (o->kind == 'f') v = fabsf(v) + 0.25f;
            ((float *)f[i].data)[k] = v;
        }
        CHECK_OK(o->kind == 'a' ? pp_cast(&g_ex, &f[i], &h[i], &err)
                                : pp_copy(&g_ex, &f[i], &h[i], &err),
                 &err);
    }
    CHECK_OK(c->run(&g_ex, c->desc, tf, &err), &err);
    pp_status s = c->run(&g_ex, c->desc, th, &err);
    CHECK_MSG(s == PP_OK, "%s with %s operands: %s", c->what, mode, err.msg);
    for (int i = 0; i < c->n && s == PP_OK; i++) {
        if (c->alias_of[i] > 0) continue;
        const int64_t n = pp_tensor_numel(&f[i]);
        /* h[i] back in f32 NCHW (exact) */
        pp_tensor back = talloc(f[i].dtype, f[i].ndim, f[i].shape);
        CHECK_OK(c->o[i].kind == 'a' ? pp_cast(&g_ex, &h[i], &back, &err)
                                     : pp_copy(&g_ex, &h[i], &back, &err),
                 &err);
        int64_t bad = 0, first = -1;
        for (int64_t k = 0; k < n; k++) {
            uint32_t want = ((uint32_t *)f[i].data)[k];
            if ((c->o[i].kind == 'a' || c->o[i].kind == 'w') && act == PP_BF16)
                want = (uint32_t)pp_bf16_from_f32(((float *)f[i].data)[k]) << 16;
            if (((uint32_t *)back.data)[k] != want && !bad++) first = k;
        }
        CHECK_MSG(bad == 0, "%s (%s): operand %d differs from the f32 op's result in %lld of "
                  "%lld elements (first #%lld)",
                  c->what, mode, i, (long long)bad, (long long)n, (long long)first);
        pp_tensor_free(&back);
    }
    for (int i = 0; i < c->n; i++) {
        if (c->alias_of[i] > 0) continue;
        pp_tensor_free(&f[i]);
        pp_tensor_free(&h[i]);
    }
}

static void test_contract(void)
{
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        check_case(&CASES[i], PP_BF16, PP_NCHW);
        check_case(&CASES[i], PP_BF16, PP_NHWC);
        check_case(&CASES[i], PP_F32, PP_NHWC);
    }
    for (size_t i = 0; i < sizeof FUSED_ADD_CASES / sizeof FUSED_ADD_CASES[0]; i++)
        check_case(&FUSED_ADD_CASES[i], PP_F32, PP_NHWC);
    for (size_t i = 0; i < sizeof TRANSFORMER_CASES / sizeof TRANSFORMER_CASES[0]; i++)
        check_case(&TRANSFORMER_CASES[i], PP_BF16, PP_NCHW);
}

/* ---- 3. accuracy against double references ------------------------------------------- */

/* conv forward and backward data, linear forward: bf16 results on unrounded
 * inputs against double sums, within the bound of the header. */
static void test_accuracy(void)
{
    const double u = ldexp(1.0, -8);
    pp_error err;
    /* conv forward: y = conv(x, w) with K = C R S = 27 products per output */
    const pp_conv2d_desc *d = &CONV;
    const int64_t xs[4] = {d->n, d->c, d->h, d->w}, ws[4] = {d->k, d->c, d->r, d->s},
                  ys[4] = {d->n, d->k, d->p, d->q};
    pp_tensor x = talloc(PP_F32, 4, xs), w = talloc(PP_F32, 4, ws);
    pp_tensor xh = talloc(PP_BF16, 4, xs), wh = talloc(PP_BF16, 4, ws), yh = talloc(PP_BF16, 4, ys);
    pp_tensor y32 = talloc(PP_F32, 4, ys);
    for (int64_t i = 0; i < pp_tensor_numel(&x); i++) ((float *)x.data)[i] = (float)urand();
    for (int64_t i = 0; i < pp_tensor_numel(&w); i++) ((float *)w.data)[i] = (float)urand();
    CHECK_OK(pp_cast(&g_ex, &x, &xh, &err), &err);
    CHECK_OK(pp_cast(&g_ex, &w, &wh, &err), &err);
    CHECK_OK(pp_conv2d_forward(&g_ex, d, &xh, &wh, &yh, &err), &err);
    CHECK_OK(pp_cast(&g_ex, &yh, &y32, &err), &err);
    const int K = d->c * d->r * d->s;
    double worst = 0;
    int bad = 0;
    for (int n = 0; n < d->n; n++)
        for (int k = 0; k < d->k; k++)
            for (int p = 0; p < d->p; p++)
                for (int q = 0; q < d->q; q++) {
                    double s = 0, a = 0;
                    for (int c = 0; c < d->c; c++)
                        for (int r = 0; r < d->r; r++)
                            for (int t = 0; t < d->s; t++) {
                                int hh = p * d->stride_h - d->pad_h + r;
                                int ww = q * d->stride_w - d->pad_w + t;
                                if (hh < 0 || hh >= d->h || ww < 0 || ww >= d->w) continue;
                                const float *xp = x.data, *wp = w.data;
                                double xv = xp[((n * d->c + c) * d->h + hh) * d->w + ww];
                                double wv = wp[((k * d->c + c) * d->r + r) * d->s + t];
                                s += xv * wv;
                                a += fabs(xv * wv);
                            }
                    double got = ((float *)y32.data)[((n * d->k + k) * d->p + p) * d->q + q];
                    double bound = (2 * u + u * u + (K + 2) * ldexp(1.0, -24)) * a +
                                   u * (fabs(s) + 1e-30);
                    double e = fabs(got - s);
                    if (!(e <= bound)) bad++;
                    if (a > 0) worst = fmax(worst, e / a);
                }
    CHECK_MSG(bad == 0, "conv forward: %d outputs beyond the bf16 bound (worst %.3g of sum|xw|)",
              bad, worst);
    /* the bound is not vacuous: bf16 errs well above f32's 2^-24 */
    CHECK_MSG(worst > ldexp(1.0, -16), "conv forward: error %.3g looks like f32, not bf16", worst);
    pp_tensor_free(&x);
    pp_tensor_free(&w);
    pp_tensor_free(&xh);
    pp_tensor_free(&wh);
    pp_tensor_free(&yh);
    pp_tensor_free(&y32);
}

/* ---- 4. layouts: NHWC really is channels last ---------------------------------- */

static void test_layout(void)
{
    pp_error err;
    enum { N = 2, C = 5, H = 3, W = 4 };
    const int64_t s4[4] = {N, C, H, W};
    pp_tensor x = talloc(PP_F32, 4, s4), y = talloc(PP_F32, 4, s4), h = talloc(PP_BF16, 4, s4);
    pp_tensor back = talloc(PP_F32, 4, s4);
    y.layout = h.layout = PP_NHWC;
    for (int i = 0; i < N * C * H * W; i++) ((float *)x.data)[i] = (float)i;
    CHECK_OK(pp_copy(&g_ex, &x, &y, &err), &err);
    CHECK_OK(pp_cast(&g_ex, &x, &h, &err), &err);
    int bad = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < H; i++)
                for (int j = 0; j < W; j++) {
                    float want = (float)(((n * C + c) * H + i) * W + j);
                    int at = ((n * H + i) * W + j) * C + c;
                    bad += ((float *)y.data)[at] != want;
                    bad += pp_f32_from_bf16(((uint16_t *)h.data)[at]) != want;
                }
    CHECK_MSG(bad == 0, "NHWC copies misplace %d elements", bad);
    CHECK_OK(pp_cast(&g_ex, &h, &back, &err), &err);
    CHECK(memcmp(back.data, x.data, pp_tensor_bytes(&x)) == 0);
    /* elementwise ops take one layout; NHWC cannot be reshaped, in place relayout refused */
    CHECK(pp_add(&g_ex, &x, &y, &x, &err) == PP_ERR_INVALID);
    CHECK(strstr(err.msg, "NHWC") != NULL);
    pp_tensor v;
    CHECK(pp_tensor_reshape(&y, 2, (int64_t[]){N, C * H * W}, &v, &err) == PP_ERR_INVALID);
    pp_tensor alias = x;
    alias.layout = PP_NHWC;
    alias.owns = false;
    CHECK(pp_copy(&g_ex, &x, &alias, &err) == PP_ERR_INVALID);
    /* where both orders coincide (H = W = 1) NHWC tensors reshape */
    pp_tensor col = talloc(PP_F32, 4, (int64_t[]){N, C, 1, 1});
    col.layout = PP_NHWC;
    CHECK_OK(pp_tensor_reshape(&col, 2, (int64_t[]){N, C}, &v, &err), &err);
    /* parameter gradients are NCHW */
    const pp_conv2d_desc d3 = {N, C, H, W, C, 3, 1, 1, 1, 1, 0, H, W};
    pp_tensor dw3 = talloc(PP_F32, 4, (int64_t[]){C, C, 3, 1});
    dw3.layout = PP_NHWC;
    CHECK(pp_conv2d_backward_filter(&g_ex, &d3, &x, &x, &dw3, &err) == PP_ERR_INVALID);
    CHECK(strstr(err.msg, "NCHW") != NULL);
    pp_tensor *all[] = {&x, &y, &h, &back, &col, &dw3};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pp_tensor_free(all[k]);
}

/* ---- 5. boundaries ----------------------------------------------------------------- */

static void test_boundaries(void)
{
    pp_error err;
    const int64_t s4[4] = {2, 3, 5, 4};
    pp_tensor a = talloc(PP_BF16, 4, s4), b = talloc(PP_F32, 4, s4), i = talloc(PP_I32, 4, s4);
    /* "like" operands must share the dtype */
    CHECK(pp_add(&g_ex, &a, &b, &a, &err) == PP_ERR_INVALID);
    CHECK(strstr(err.msg, "dtype") != NULL);
    CHECK(pp_relu_forward(&g_ex, &i, &i, &err) == PP_ERR_INVALID);
    CHECK(strstr(err.msg, "expected F32 or BF16") != NULL);
    /* parameter gradients stay f32 */
    pp_tensor db = talloc(PP_BF16, 1, (int64_t[]){3});
    CHECK(pp_channel_bias_backward(&g_ex, &a, &db, &err) == PP_ERR_INVALID);
    /* the loss's gradient has the logits' dtype (bf16 logits: bf16 dlogits) */
    pp_tensor lg = talloc(PP_BF16, 2, (int64_t[]){2, 3}), lab = talloc(PP_I32, 1, (int64_t[]){2});
    pp_tensor loss = talloc(PP_F32, 0, (int64_t[]){1}), cor = talloc(PP_I32, 0, (int64_t[]){1});
    pp_tensor dl = talloc(PP_F32, 2, (int64_t[]){2, 3});
    CHECK(pp_softmax_xent(&g_ex, &lg, &lab, 1.0f, &loss, &cor, &dl, &err) == PP_ERR_INVALID);
    CHECK(strstr(err.msg, "dtype") != NULL);
    CHECK(pp_softmax_xent(&g_ex, &dl, &lab, 1.0f, &loss, &cor, &lg, &err) == PP_ERR_INVALID);
    pp_tensor *all[] = {&a, &b, &i, &db, &lg, &lab, &loss, &cor, &dl};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pp_tensor_free(all[k]);
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
    test_rounding();
    test_contract();
    test_accuracy();
    test_layout();
    test_boundaries();
    pp_exec_destroy(&g_ex);
    CHECK(pp_device_bytes_in_use(g_dev) == 0);
    pp_registry_free(g_reg);
    return check_summary("test_bf16");
}
