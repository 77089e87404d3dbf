/*
 * test_ops_elementwise.c - the CPU backend's elementwise ops through the
 * checked API (runtime/core/ops.h): ReLU, add, sigmoid, the fused add + ReLU
 * backward and batch norm's backward through the ReLU's mask, zeroing many
 * tensors at once, against double-precision references and central finite
 * differences; SGD (one tensor and many) against hand-computed steps; the
 * device's math mode on the CPU. Split from test_ops.c, whose helpers
 * (op_check.h) it shares.
 */
#include "tests/ops/op_check.h"

/* ---- elementwise ----------------------------------------------------------------- */

static void test_elementwise(void)
{
    pp_error err;
    const int64_t n = 1003; /* not a multiple of any vector width */
    pp_tensor a = tnew(1, n, 1, 1, 1), b = tnew(1, n, 1, 1, 1), y = tnew(1, n, 1, 1, 1);
    double *ad = fill(&a, 0.0, 1.0), *bd = fill(&b, 0.0, 1.0);
    double *want = dalloc((size_t)n);

    CHECK_OK(pp_relu_forward(&g_ex, &a, &y, &err), &err);
    for (int64_t i = 0; i < n; i++) want[i] = ad[i] > 0 ? ad[i] : 0.0;
    check_close("relu", fp(&y), want, (size_t)n, 0.0);
    /* backward masks by y > 0; in place on the gradient */
    pp_tensor g = tnew(1, n, 1, 1, 1);
    memcpy(g.data, b.data, (size_t)n * sizeof(float));
    CHECK_OK(pp_relu_backward(&g_ex, &y, &g, &g, &err), &err);
    for (int64_t i = 0; i < n; i++) want[i] = ad[i] > 0 ? bd[i] : 0.0;
    check_close("relu backward in place", fp(&g), want, (size_t)n, 0.0);
    /* forward in place */
    CHECK_OK(pp_relu_forward(&g_ex, &g, &g, &err), &err);
    for (int64_t i = 0; i < n; i++) want[i] = want[i] > 0 ? want[i] : 0.0;
    check_close("relu in place", fp(&g), want, (size_t)n, 0.0);

    CHECK_OK(pp_add(&g_ex, &a, &b, &y, &err), &err);
    for (int64_t i = 0; i < n; i++) want[i] = (double)((float)ad[i] + (float)bd[i]);
    check_close("add", fp(&y), want, (size_t)n, 0.0);
    CHECK_OK(pp_add(&g_ex, &a, &b, &a, &err), &err); /* y aliases a */
    check_close("add in place", fp(&a), want, (size_t)n, 0.0);
    CHECK_OK(pp_accumulate(&g_ex, &b, &a, &err), &err);
    for (int64_t i = 0; i < n; i++) want[i] = (double)((float)want[i] + (float)bd[i]);
    check_close("accumulate", fp(&a), want, (size_t)n, 0.0);

    /* add + ReLU in one op: the reference, and the bits of pp_add then pp_relu_forward
     * (a and b fresh: a was overwritten above) */
    free(ad);
    free(bd);
    ad = fill(&a, 0.0, 1.0), bd = fill(&b, 0.0, 1.0);
    pp_tensor two = tnew(1, n, 1, 1, 1);
    CHECK_OK(pp_add_relu(&g_ex, &a, &b, &y, &err), &err);
    for (int64_t i = 0; i < n; i++) {
        double s2 = (double)((float)ad[i] + (float)bd[i]);
        want[i] = s2 > 0 ? s2 : 0.0;
    }
    check_close("add_relu", fp(&y), want, (size_t)n, 0.0);
    CHECK_OK(pp_add(&g_ex, &a, &b, &two, &err), &err);
    CHECK_OK(pp_relu_forward(&g_ex, &two, &two, &err), &err);
    CHECK(memcmp(two.data, y.data, (size_t)n * sizeof(float)) == 0);
    memcpy(two.data, b.data, (size_t)n * sizeof(float));
    CHECK_OK(pp_add_relu(&g_ex, &a, &two, &two, &err), &err); /* y aliases b */
    CHECK(memcmp(two.data, y.data, (size_t)n * sizeof(float)) == 0);
    pp_tensor_free(&two);

    CHECK_OK(pp_copy(&g_ex, &b, &y, &err), &err);
    CHECK(memcmp(y.data, b.data, (size_t)n * sizeof(float)) == 0);
    CHECK_OK(pp_zero(&g_ex, &y, &err), &err);
    for (int64_t i = 0; i < n; i++) want[i] = 0.0;
    check_close("zero", fp(&y), want, (size_t)n, 0.0);

    free(ad);
    free(bd);
    free(want);
    pp_tensor_free(&a);
    pp_tensor_free(&b);
    pp_tensor_free(&y);
    pp_tensor_free(&g);
}

/* Sigmoid against the double reference, its backward from the forward's
 * output against finite differences of L = sum(dy * sigmoid(x)), in place. */
typedef struct sigmoid_ctx {
    double *x, *r;
    size_t n;
} sigmoid_ctx;

static double sigmoid_loss(void *p)
{
    sigmoid_ctx *c = p;
    double l = 0.0;
    for (size_t i = 0; i < c->n; i++) l += c->r[i] / (1.0 + exp(-c->x[i]));
    return l;
}

static void test_sigmoid(void)
{
    pp_error err;
    const size_t n = 1003;
    pp_tensor x = tnew(2, 17, 59, 1, 1), y = tnew(2, 17, 59, 1, 1), dy = tnew(2, 17, 59, 1, 1);
    double *xd = fill(&x, 0.0, 8.0), *rd = fill(&dy, 0.0, 1.0), *want = dalloc(n);
    fp(&x)[0] = 100.0f, xd[0] = 100.0; /* saturates to 1 */
    fp(&x)[1] = -100.0f, xd[1] = -100.0; /* to 0, not NaN */
    for (size_t i = 0; i < n; i++) want[i] = 1.0 / (1.0 + exp(-xd[i]));
    CHECK_OK(pp_sigmoid_forward(&g_ex, &x, &y, &err), &err);
    /* expf and one division: a few ulp of a value in (0, 1) */
    check_close("sigmoid", fp(&y), want, n, 1e-6);
    CHECK(fp(&y)[0] == 1.0f && fp(&y)[1] >= 0.0f && fp(&y)[1] < 1e-30f);
    sigmoid_ctx c = {xd, rd, n};
    double *g = dalloc(n);
    unsigned char *mask = malloc(n);
    fd_grad(sigmoid_loss, &c, xd, n, 1e-4, g, mask);
    CHECK_OK(pp_sigmoid_backward(&g_ex, &y, &dy, &dy, &err), &err); /* dx aliases dy */
    check_grad("sigmoid backward", fp(&dy), NULL, g, mask, n);
    pp_tensor z = tnew(2, 17, 59, 1, 1);
    memcpy(z.data, x.data, n * sizeof(float));
    CHECK_OK(pp_sigmoid_forward(&g_ex, &z, &z, &err), &err); /* in place */
    CHECK(memcmp(z.data, y.data, n * sizeof(float)) == 0);
    free(xd), free(rd), free(want), free(g), free(mask);
    pp_tensor *ts[] = {&x, &y, &dy, &z};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* The backward of y = relu(a + b) is pp_relu_backward(y, dy): the gradient of
 * a and of b, against finite differences of L = sum(dy * relu(a + b)). Points
 * within 2h of the kink (a + b = 0) are skipped: there the function is not
 * differentiable and central differences straddle it. */
typedef struct add_relu_ctx {
    double *a, *b, *r;
    size_t n;
} add_relu_ctx;

static double add_relu_loss(void *p)
{
    add_relu_ctx *c = p;
    double l = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        double s = c->a[i] + c->b[i];
        l += (s > 0 ? s : 0.0) * c->r[i];
    }
    return l;
}

static void test_add_relu_backward(void)
{
    pp_error err;
    const double h = 1e-3;
    const size_t n = 777;
    pp_tensor a = tnew(4, 3, 7, 37, 1), b = tnew(4, 3, 7, 37, 1), y = tnew(4, 3, 7, 37, 1);
    pp_tensor dy = tnew(4, 3, 7, 37, 1), g = tnew(4, 3, 7, 37, 1);
    add_relu_ctx c = {fill(&a, 0, 1), fill(&b, 0, 1), fill(&dy, 0, 1), n};
    CHECK_OK(pp_add_relu(&g_ex, &a, &b, &y, &err), &err);
    CHECK_OK(pp_relu_backward(&g_ex, &y, &dy, &g, &err), &err);
    double *fd = dalloc(n);
    unsigned char *mask = malloc(n);
    for (int which = 0; which < 2; which++) {
        fd_grad(add_relu_loss, &c, which ? c.b : c.a, n, h, fd, mask);
        for (size_t i = 0; i < n; i++)
            if (fabs(c.a[i] + c.b[i]) < 2 * h) mask[i] = 0;
        check_grad(which ? "add_relu backward (b)" : "add_relu backward (a)", fp(&g), NULL, fd,
                   mask, n);
    }
    free(fd), free(mask), free(c.a), free(c.b), free(c.r);
    pp_tensor *ts[] = {&a, &b, &y, &dy, &g};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* pp_batchnorm_backward_add_relu: the bits of pp_relu_backward into g then
 * pp_batchnorm_backward from g (g beside dy and in dy's memory); a missing g
 * or one sharing x's, relu_y's or dx's memory refused. */
static void test_bn_backward_add_relu(void)
{
    pp_error err;
    const pp_bn_desc d = {3, 4, 5, 6, 1e-5f, 0.1f};
    pp_tensor x = tnew(4, 3, 4, 5, 6), ry = tnew(4, 3, 4, 5, 6), dy = tnew(4, 3, 4, 5, 6);
    pp_tensor g1 = tnew(4, 3, 4, 5, 6), g2 = tnew(4, 3, 4, 5, 6), dx1 = tnew(4, 3, 4, 5, 6);
    pp_tensor dx2 = tnew(4, 3, 4, 5, 6), v[9];
    for (int i = 0; i < 9; i++) v[i] = tnew(1, 4, 1, 1, 1);
    free(fill(&x, 0, 2)), free(fill(&ry, -0.5, 1)), free(fill(&dy, 0, 1));
    for (int i = 0; i < 9; i++) free(fill(&v[i], 1.5, 1)); /* gamma, mean, invstd, dg, db x2 */
    memcpy(fp(&v[5]), fp(&v[3]), 16), memcpy(fp(&v[6]), fp(&v[4]), 16);
    CHECK_OK(pp_relu_backward(&g_ex, &ry, &dy, &g1, &err), &err);
    CHECK_OK(pp_batchnorm_backward(&g_ex, &d, &x, &g1, &v[0], &v[1], &v[2], &dx1, &v[3], &v[4],
                                   &err),
             &err);
    CHECK_OK(pp_batchnorm_backward_add_relu(&g_ex, &d, &x, &ry, &dy, &v[0], &v[1], &v[2], &dx2,
                                            &v[5], &v[6], &g2, &err),
             &err);
    const size_t n = numel(&x) * sizeof(float);
    CHECK(memcmp(fp(&g1), fp(&g2), n) == 0);
    CHECK(memcmp(fp(&dx1), fp(&dx2), n) == 0);
    CHECK(memcmp(fp(&v[3]), fp(&v[5]), 16) == 0 && memcmp(fp(&v[4]), fp(&v[6]), 16) == 0);
    /* g in dy's memory: the same bits */
    CHECK_OK(pp_batchnorm_backward_add_relu(&g_ex, &d, &x, &ry, &dy, &v[0], &v[1], &v[2], &dx2,
                                            &v[7], &v[8], &dy, &err),
             &err);
    CHECK(memcmp(fp(&g1), fp(&dy), n) == 0);
    CHECK(memcmp(fp(&dx1), fp(&dx2), n) == 0);
    pp_tensor *bad[4] = {NULL, &x, &ry, &dx2};
    for (int i = 0; i < 4; i++)
        CHECK(pp_batchnorm_backward_add_relu(&g_ex, &d, &x, &ry, &dy, &v[0], &v[1], &v[2], &dx2,
                                             &v[7], &v[8], bad[i], &err) == PP_ERR_INVALID);
    pp_tensor *ts[] = {&x, &ry, &dy, &g1, &g2, &dx1, &dx2};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    for (int i = 0; i < 9; i++) pp_tensor_free(&v[i]);
}

/* pp_zero_multi clears tensors of every dtype and odd sizes, views at odd
 * offsets included, without touching their neighbours, and names a bad tensor
 * by its index. */
static void test_zero_multi(void)
{
    pp_error err;
    enum { T = 9 };
    static const pp_dtype dts[T] = {PP_F32, PP_I32, PP_U8, PP_BF16, PP_I64,
                                    PP_F32, PP_U8,  PP_F32, PP_BF16};
    static const int64_t sizes[T] = {1, 3, 7, 5, 2, 70001, 4099, 0, 1};
    pp_tensor store[T], views[T];
    pp_tensor *ys[T];
    for (int i = 0; i < T; i++) {
        store[i] = tnew_on(g_dev, dts[i], 1, sizes[i] + 2, 1, 1, 1);
        memset(store[i].data, 0xab, pp_tensor_bytes(&store[i]));
        views[i] = pp_tensor_view0(&store[i], 1, sizes[i]); /* misaligned by one element */
        ys[i] = &views[i];
    }
    CHECK_OK(pp_zero_multi(&g_ex, T, ys, &err), &err);
    for (int i = 0; i < T; i++) {
        const unsigned char *p = store[i].data;
        size_t es = pp_dtype_size(dts[i]), nb = pp_tensor_bytes(&store[i]);
        size_t bad = 0;
        for (size_t k = 0; k < nb; k++) {
            int inside = k >= es && k < nb - es;
            bad += inside ? p[k] != 0 : p[k] != 0xab;
        }
        CHECK_MSG(bad == 0, "zero_multi tensor %d (%s, %lld elements): %zu bytes wrong", i,
                  pp_dtype_name(dts[i]), (long long)sizes[i], bad);
    }
    pp_tensor other = tnew_on(g_dev1, PP_F32, 1, 4, 1, 1, 1);
    ys[4] = &other;
    pp_status s = pp_zero_multi(&g_ex, T, ys, &err);
    CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "tensor 4") && strstr(err.msg, "cpu:1"),
              "bad tensor: %s", err.msg);
    CHECK(pp_zero_multi(&g_ex, 0, NULL, &err) == PP_OK);
    CHECK(pp_zero_multi(&g_ex, 1, NULL, &err) == PP_ERR_INVALID);
    pp_tensor_free(&other);
    for (int i = 0; i < T; i++) pp_tensor_free(&store[i]);
}

/* ---- SGD --------------------------------------------------------------------------- */

static void test_sgd(void)
{
    /* Two steps on param [1, -2] with gradient [0.5, 0.25] each step; the
     * expected values are worked out by hand from torch.optim.SGD's rules. */
    static const struct {
        const char *what;
        float lr, momentum, wd;
        bool nesterov;
        float after1[2], after2[2];
    } cases[] = {
        /* p -= 0.1 * g */
        {"plain", 0.1f, 0.0f, 0.0f, false, {0.95f, -2.025f}, {0.9f, -2.05f}},
        /* g' = g + 0.01 p: [0.51, 0.23] -> [0.949, -2.023]; then
         * [0.5 + 0.00949, 0.25 - 0.02023] = [0.50949, 0.22977] -> [0.898051, -2.045977] */
        {"weight decay", 0.1f, 0.0f, 0.01f, false, {0.949f, -2.023f}, {0.898051f, -2.045977f}},
        /* buf = g = [0.5, 0.25] -> [0.95, -2.025]; buf = 0.9 buf + g = [0.95, 0.475]
         * -> [0.855, -2.0725] */
        {"momentum", 0.1f, 0.9f, 0.0f, false, {0.95f, -2.025f}, {0.855f, -2.0725f}},
        /* buf = [0.5, 0.25]; g = g + 0.9 buf = [0.95, 0.475] -> [0.905, -2.0475];
         * buf = [0.95, 0.475]; g = [0.5 + 0.855, 0.25 + 0.4275] -> [0.7695, -2.11525] */
        {"nesterov", 0.1f, 0.9f, 0.0f, true, {0.905f, -2.0475f}, {0.7695f, -2.11525f}},
        /* g' = [0.6, 0.05], buf = g' -> [0.94, -2.005]; g' = [0.594, 0.0495],
         * buf = [0.54 + 0.594, 0.045 + 0.0495] = [1.134, 0.0945] -> [0.8266, -2.01445] */
        {"momentum + weight decay", 0.1f, 0.9f, 0.1f, false, {0.94f, -2.005f},
         {0.8266f, -2.01445f}},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        pp_error err;
        pp_tensor p = tnew(1, 2, 1, 1, 1), g = tnew(1, 2, 1, 1, 1), buf = tnew(1, 2, 1, 1, 1);
        fp(&p)[0] = 1.0f;
        fp(&p)[1] = -2.0f;
        fp(&g)[0] = 0.5f;
        fp(&g)[1] = 0.25f;
        fp(&buf)[0] = fp(&buf)[1] = 123.0f; /* must be ignored on the first step */
        pp_sgd_desc d = {cases[ci].lr, cases[ci].momentum, cases[ci].wd, cases[ci].nesterov, true};
        pp_tensor *bufp = cases[ci].momentum != 0 ? &buf : NULL;
        CHECK_OK(pp_sgd_update(&g_ex, &d, &p, &g, bufp, &err), &err);
        for (int i = 0; i < 2; i++)
            CHECK_MSG(fabsf(fp(&p)[i] - cases[ci].after1[i]) <= 1e-6f, "sgd %s step 1: %.8g vs %.8g",
                      cases[ci].what, (double)fp(&p)[i], (double)cases[ci].after1[i]);
        d.first_step = false;
        CHECK_OK(pp_sgd_update(&g_ex, &d, &p, &g, bufp, &err), &err);
        for (int i = 0; i < 2; i++)
            CHECK_MSG(fabsf(fp(&p)[i] - cases[ci].after2[i]) <= 1e-6f, "sgd %s step 2: %.8g vs %.8g",
                      cases[ci].what, (double)fp(&p)[i], (double)cases[ci].after2[i]);
        CHECK(fp(&g)[0] == 0.5f && fp(&g)[1] == 0.25f); /* grad is read only */
        pp_tensor_free(&p);
        pp_tensor_free(&g);
        pp_tensor_free(&buf);
    }
}

/* pp_sgd_update_multi equals pp_sgd_update per tensor, bit for bit, for every
 * kind of step (several sizes, with and without momentum, Nesterov, first and
 * later steps), and refuses a bad tensor naming its index. */
static void test_sgd_multi(void)
{
    static const pp_sgd_desc descs[] = {
        {0.1f, 0.0f, 0.0f, false, true},   {0.1f, 0.9f, 1e-4f, false, true},
        {0.05f, 0.9f, 1e-4f, false, false}, {0.1f, 0.9f, 5e-4f, true, false},
    };
    enum { T = 200 }; /* more than one CUDA launch of 96 tensors */
    pp_error err;
    for (size_t c = 0; c < sizeof descs / sizeof descs[0]; c++) {
        pp_tensor pa[T], pb[T], g[T], ba[T], bb[T];
        pp_tensor *pas[T], *pbs[T], *bbs[T];
        const pp_tensor *gs[T];
        for (int i = 0; i < T; i++) {
            int64_t n = 1 + (i * 37) % 301;
            pa[i] = tnew(1, n, 1, 1, 1);
            g[i] = tnew(1, n, 1, 1, 1);
            ba[i] = tnew(1, n, 1, 1, 1);
            free(fill(&pa[i], 0, 1));
            free(fill(&g[i], 0, 1));
            free(fill(&ba[i], 0, 1));
            pb[i] = tnew(1, n, 1, 1, 1);
            bb[i] = tnew(1, n, 1, 1, 1);
            memcpy(pb[i].data, pa[i].data, pp_tensor_bytes(&pa[i]));
            memcpy(bb[i].data, ba[i].data, pp_tensor_bytes(&ba[i]));
            pas[i] = &pa[i], pbs[i] = &pb[i], bbs[i] = &bb[i], gs[i] = &g[i];
        }
        for (int step = 0; step < 2; step++) {
            for (int i = 0; i < T; i++)
                CHECK_OK(pp_sgd_update(&g_ex, &descs[c], pas[i], gs[i], &ba[i], &err), &err);
            CHECK_OK(pp_sgd_update_multi(&g_ex, &descs[c], T, pbs, gs,
                                         descs[c].momentum != 0 ? bbs : NULL, &err),
                     &err);
        }
        for (int i = 0; i < T; i++) {
            CHECK_MSG(memcmp(pa[i].data, pb[i].data, pp_tensor_bytes(&pa[i])) == 0,
                      "sgd_update_multi case %zu tensor %d: params differ from sgd_update", c, i);
            if (descs[c].momentum != 0)
                CHECK_MSG(memcmp(ba[i].data, bb[i].data, pp_tensor_bytes(&ba[i])) == 0,
                          "sgd_update_multi case %zu tensor %d: momentum differs", c, i);
        }
        /* a gradient of the wrong shape is refused, naming the tensor */
        pp_tensor wrong = tnew(1, 2, 1, 1, 1);
        const pp_tensor *saved = gs[5];
        gs[5] = &wrong;
        pp_status s = pp_sgd_update_multi(&g_ex, &descs[c], T, pbs, gs, bbs, &err);
        CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "tensor 5"), "bad tensor: %s", err.msg);
        gs[5] = saved;
        pp_tensor_free(&wrong);
        for (int i = 0; i < T; i++) {
            pp_tensor_free(&pa[i]), pp_tensor_free(&pb[i]), pp_tensor_free(&g[i]);
            pp_tensor_free(&ba[i]), pp_tensor_free(&bb[i]);
        }
    }
    CHECK(pp_sgd_update_multi(&g_ex, &descs[0], 0, NULL, NULL, NULL, &err) == PP_OK);
}

/* ---- math mode ------------------------------------------------------------------ */

/* tf32 runs as fp32 on the CPU: convolutions and the linear layer give the
 * same bits in both modes. */
static void test_math_mode_cpu(void)
{
    pp_error err;
    pp_conv2d_desc d;
    CHECK_OK(pp_conv2d_desc_init(&d, 2, 5, 9, 9, 6, 3, 2, 1, &err), &err);
    pp_tensor x = tnew(4, d.n, d.c, d.h, d.w), w = tnew(4, d.k, d.c, d.r, d.s);
    pp_tensor dy = tnew(4, d.n, d.k, d.p, d.q);
    pp_tensor lx = tnew(2, 3, 17, 1, 1), lw = tnew(2, 5, 17, 1, 1), lb = tnew(1, 5, 1, 1, 1);
    pp_tensor ldy = tnew(2, 3, 5, 1, 1);
    pp_tensor *ins[] = {&x, &w, &dy, &lx, &lw, &lb, &ldy};
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) free(fill(ins[i], 0.0, 1.0));
    enum { OUTS = 7 };
    pp_tensor out[2][OUTS];
    for (int m = 0; m < 2; m++) {
        CHECK_OK(pp_device_set_math(g_dev, m ? PP_MATH_TF32 : PP_MATH_FP32, &err), &err);
        pp_tensor *o = out[m];
        o[0] = tnew(4, d.n, d.k, d.p, d.q), o[1] = tnew(4, d.n, d.c, d.h, d.w);
        o[2] = tnew(4, d.k, d.c, d.r, d.s), o[3] = tnew(2, 3, 5, 1, 1);
        o[4] = tnew(2, 3, 17, 1, 1), o[5] = tnew(2, 5, 17, 1, 1), o[6] = tnew(1, 5, 1, 1, 1);
        CHECK_OK(pp_conv2d_forward(&g_ex, &d, &x, &w, &o[0], &err), &err);
        CHECK_OK(pp_conv2d_backward_data(&g_ex, &d, &dy, &w, &o[1], &err), &err);
        CHECK_OK(pp_conv2d_backward_filter(&g_ex, &d, &x, &dy, &o[2], &err), &err);
        CHECK_OK(pp_linear_forward(&g_ex, &lx, &lw, &lb, &o[3], &err), &err);
        CHECK_OK(pp_linear_backward(&g_ex, &lx, &lw, &ldy, &o[4], &o[5], &o[6], &err), &err);
    }
    CHECK_OK(pp_device_set_math(g_dev, PP_MATH_FP32, &err), &err);
    for (int i = 0; i < OUTS; i++) {
        CHECK_MSG(memcmp(out[0][i].data, out[1][i].data, pp_tensor_bytes(&out[0][i])) == 0,
                  "output %d differs between fp32 and tf32 on the CPU", i);
        pp_tensor_free(&out[0][i]);
        pp_tensor_free(&out[1][i]);
    }
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) pp_tensor_free(ins[i]);
}

int main(void)
{
    if (!op_check_setup()) return 1;
    test_elementwise();
    test_add_relu_backward();
    test_bn_backward_add_relu();
    test_sigmoid();
    test_zero_multi();
    test_sgd();
    test_sgd_multi();
    test_math_mode_cpu();
    op_check_teardown();
    return check_summary("test_ops_elementwise");
}
