/*
 * test_ops_linear.c - the CPU backend's linear layer and softmax
 * cross-entropy through the checked API (runtime/core/ops.h): forward against
 * naive double-precision references, backward against central finite
 * differences; the accumulate (+=) contract of every weight gradient (conv,
 * linear, bias, batch norm: added once, never overwritten); and the boundary
 * checks (bad shape, dtype, device, NULL -> PP_ERR_INVALID).
 *
 * Tensors live on cpu:0, whose memory is host memory, so the test reads and
 * writes tensor data directly.
 */
#include "tests/ops/op_check.h"

/* ---- linear ------------------------------------------------------------------- */

typedef struct lin_ctx {
    int n, in, out;
    double *x, *w, *b, *r, *y;
} lin_ctx;

static void ref_linear(const lin_ctx *c, double *y)
{
    for (int i = 0; i < c->n; i++)
        for (int o = 0; o < c->out; o++) {
            double s = c->b[o];
            for (int j = 0; j < c->in; j++) s += c->x[(size_t)i * c->in + j] * c->w[(size_t)o * c->in + j];
            y[(size_t)i * c->out + o] = s;
        }
}

static double linear_loss(void *p)
{
    lin_ctx *c = p;
    ref_linear(c, c->y);
    return dot_r(c->y, c->r, (size_t)c->n * c->out);
}

static void test_linear(void)
{
    static const int cases[][3] = {{3, 5, 4}, {1, 7, 10}, {5, 33, 17}, {8, 64, 3}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int n = cases[ci][0], in = cases[ci][1], out = cases[ci][2];
        pp_error err;
        pp_tensor x = tnew(2, n, in, 1, 1), w = tnew(2, out, in, 1, 1), b = tnew(1, out, 1, 1, 1);
        pp_tensor y = tnew(2, n, out, 1, 1), dy = tnew(2, n, out, 1, 1);
        pp_tensor dx = tnew(2, n, in, 1, 1), dw = tnew(2, out, in, 1, 1);
        pp_tensor db = tnew(1, out, 1, 1, 1);
        lin_ctx c = {n, in, out, fill(&x, 0, 1), fill(&w, 0, 1), fill(&b, 0, 1), fill(&dy, 0, 1),
                     dalloc((size_t)n * out)};
        double *dw0 = fill(&dw, 0, 1), *db0 = fill(&db, 0, 1);
        double *yref = dalloc((size_t)n * out);
        ref_linear(&c, yref);
        CHECK_OK(pp_linear_forward(&g_ex, &x, &w, &b, &y, &err), &err);
        check_close("linear forward", fp(&y), yref, (size_t)n * out, 1e-5);

        memset(dx.data, 0x7f, numel(&dx) * sizeof(float));
        CHECK_OK(pp_linear_backward(&g_ex, &x, &w, &dy, &dx, &dw, &db, &err), &err);
        size_t big = (size_t)out * in > (size_t)n * in ? (size_t)out * in : (size_t)n * in;
        double *g = dalloc(big);
        unsigned char *mask = malloc(big);
        fd_grad(linear_loss, &c, c.x, numel(&x), 1e-3, g, mask);
        check_grad("linear dx", fp(&dx), NULL, g, mask, numel(&x));
        fd_grad(linear_loss, &c, c.w, numel(&w), 1e-3, g, mask);
        check_grad("linear dw +=", fp(&dw), dw0, g, mask, numel(&w));
        fd_grad(linear_loss, &c, c.b, numel(&b), 1e-3, g, mask);
        check_grad("linear db +=", fp(&db), db0, g, mask, numel(&b));
        /* dx may be omitted; dw and db still accumulate */
        for (size_t i = 0; i < numel(&b); i++) db0[i] += g[i];
        CHECK_OK(pp_linear_backward(&g_ex, &x, &w, &dy, NULL, &dw, &db, &err), &err);
        check_grad("linear db twice", fp(&db), db0, g, mask, numel(&b));

        /* the halves: the data part alone against finite differences, the weight
         * part alone adding to dw and db; each gives the whole backward's bits */
        pp_tensor dx2 = tnew(2, n, in, 1, 1), dw2 = tnew(2, out, in, 1, 1);
        pp_tensor db2 = tnew(1, out, 1, 1, 1);
        double *dw20 = fill(&dw2, 0, 1), *db20 = fill(&db2, 0, 1);
        memcpy(dw.data, dw2.data, pp_tensor_bytes(&dw));
        memcpy(db.data, db2.data, pp_tensor_bytes(&db));
        memset(dx2.data, 0x7f, numel(&dx2) * sizeof(float));
        CHECK_OK(pp_linear_backward_data(&g_ex, &w, &dy, &dx2, &err), &err);
        fd_grad(linear_loss, &c, c.x, numel(&x), 1e-3, g, mask);
        check_grad("linear backward_data dx", fp(&dx2), NULL, g, mask, numel(&x));
        CHECK_OK(pp_linear_backward_weights(&g_ex, &x, &dy, &dw2, &db2, &err), &err);
        fd_grad(linear_loss, &c, c.w, numel(&w), 1e-3, g, mask);
        check_grad("linear backward_weights dw +=", fp(&dw2), dw20, g, mask, numel(&w));
        fd_grad(linear_loss, &c, c.b, numel(&b), 1e-3, g, mask);
        check_grad("linear backward_weights db +=", fp(&db2), db20, g, mask, numel(&b));
        CHECK_OK(pp_linear_backward(&g_ex, &x, &w, &dy, &dx, &dw, &db, &err), &err);
        CHECK_MSG(memcmp(dx.data, dx2.data, pp_tensor_bytes(&dx)) == 0 &&
                      memcmp(dw.data, dw2.data, pp_tensor_bytes(&dw)) == 0 &&
                      memcmp(db.data, db2.data, pp_tensor_bytes(&db)) == 0,
                  "linear %dx%dx%d: the halves differ from the whole backward", n, in, out);
        free(dw20);
        free(db20);
        pp_tensor_free(&dx2);
        pp_tensor_free(&dw2);
        pp_tensor_free(&db2);

        free(g);
        free(mask);
        double *arrs[] = {c.x, c.w, c.b, c.r, c.y, dw0, db0, yref};
        for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) free(arrs[i]);
        pp_tensor *ts[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- weight gradients add once ------------------------------------------------- */

/* Each op that accumulates a parameter gradient computes it on its own and
 * adds it once (ops.h): the op on a gradient g0 gives the bits of the op on
 * zeros followed by pp_accumulate into g0. Covers every path of the
 * convolution's weight gradient (grouped GEMMs in one or several groups of
 * samples, per-sample GEMMs with one or several chunks, pointwise), the linear
 * layer (whole backward and its weight half), the convolution bias and batch
 * norm. */
typedef enum grad_op { GRAD_CONV, GRAD_LINEAR, GRAD_LINEAR_W, GRAD_BIAS, GRAD_BN } grad_op;

/* Runs op into dw (and db); one call. */
static void run_grad_op(grad_op op, const int *sh, pp_tensor *in, pp_tensor *dy, pp_tensor *dw,
                        pp_tensor *db)
{
    pp_error err;
    pp_conv2d_desc d;
    switch (op) {
    case GRAD_CONV:
        CHECK_OK(pp_conv2d_desc_init(&d, sh[0], sh[1], sh[2], sh[2], sh[3], sh[4], 1, sh[4] / 2,
                                     &err),
                 &err);
        CHECK_OK(pp_conv2d_backward_filter(&g_ex, &d, in, dy, dw, &err), &err);
        break;
    case GRAD_LINEAR: {
        pp_tensor w = tnew(2, sh[2], sh[1], 1, 1);
        free(fill(&w, 0, 1));
        CHECK_OK(pp_linear_backward(&g_ex, in, &w, dy, NULL, dw, db, &err), &err);
        pp_tensor_free(&w);
        break;
    }
    case GRAD_LINEAR_W: CHECK_OK(pp_linear_backward_weights(&g_ex, in, dy, dw, db, &err), &err); break;
    case GRAD_BIAS: CHECK_OK(pp_channel_bias_backward(&g_ex, dy, dw, &err), &err); break;
    case GRAD_BN: {
        pp_bn_desc bd = {sh[0], sh[1], sh[2], sh[2], 1e-5f, 0.1f};
        pp_tensor gamma = tnew(1, sh[1], 1, 1, 1), sm = tnew(1, sh[1], 1, 1, 1);
        pp_tensor si = tnew(1, sh[1], 1, 1, 1), dx = tnew(4, sh[0], sh[1], sh[2], sh[2]);
        for (int c = 0; c < sh[1]; c++) { /* the same in both calls */
            fp(&gamma)[c] = 1.0f + 0.25f * (float)c;
            fp(&sm)[c] = 0.1f * (float)c - 0.2f;
            fp(&si)[c] = 2.0f - 0.125f * (float)c;
        }
        CHECK_OK(pp_batchnorm_backward(&g_ex, &bd, in, dy, &gamma, &sm, &si, &dx, dw, db, &err),
                 &err);
        pp_tensor *ts[] = {&gamma, &sm, &si, &dx};
        for (size_t i = 0; i < 4; i++) pp_tensor_free(ts[i]);
        break;
    }
    }
}

static void test_weight_grads_add_once(void)
{
    static const struct {
        grad_op op;
        int sh[5]; /* conv: n, c, hw, k, kernel (stride 1); linear: n, in, out;
                      bias, bn: n, c, hw */
        const char *what;
    } cases[] = {
        {GRAD_CONV, {2, 3, 7, 4, 3}, "conv, grouped GEMM, several chunks"},
        {GRAD_CONV, {4, 32, 8, 64, 3}, "conv, grouped GEMM, one chunk"},
        {GRAD_CONV, {70, 64, 10, 64, 3}, "conv, grouped GEMMs in two groups"},
        {GRAD_CONV, {3, 4, 12, 8, 3}, "conv, per-sample GEMMs, several chunks"},
        {GRAD_CONV, {3, 64, 12, 512, 3}, "conv, per-sample GEMMs, one chunk"},
        {GRAD_CONV, {60, 64, 12, 16, 3}, "conv, per-sample GEMMs in two groups"},
        {GRAD_CONV, {3, 16, 16, 32, 1}, "conv, pointwise per-sample"},
        {GRAD_CONV, {16, 96, 7, 200, 1}, "conv, pointwise grouped"},
        {GRAD_LINEAR, {8, 64, 10}, "linear backward"},
        {GRAD_LINEAR, {700, 96, 40}, "linear backward, long reduction"},
        {GRAD_LINEAR_W, {700, 96, 40}, "linear backward_weights"},
        {GRAD_BIAS, {3, 17, 5}, "channel bias"},
        {GRAD_BN, {3, 6, 5}, "batch norm dgamma, dbeta"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *sh = cases[ci].sh;
        pp_tensor in, dy, dw[2], db[2];
        pp_error err;
        switch (cases[ci].op) {
        case GRAD_CONV:
            in = tnew(4, sh[0], sh[1], sh[2], sh[2]);
            dy = tnew(4, sh[0], sh[3], sh[2], sh[2]);
            for (int k = 0; k < 2; k++) {
                dw[k] = tnew(4, sh[3], sh[1], sh[4], sh[4]);
                db[k] = tnew(1, 1, 1, 1, 1);
            }
            break;
        case GRAD_LINEAR:
        case GRAD_LINEAR_W:
            in = tnew(2, sh[0], sh[1], 1, 1);
            dy = tnew(2, sh[0], sh[2], 1, 1);
            for (int k = 0; k < 2; k++) {
                dw[k] = tnew(2, sh[2], sh[1], 1, 1);
                db[k] = tnew(1, sh[2], 1, 1, 1);
            }
            break;
        default:
            in = tnew(4, sh[0], sh[1], sh[2], sh[2]);
            dy = tnew(4, sh[0], sh[1], sh[2], sh[2]);
            for (int k = 0; k < 2; k++) {
                dw[k] = tnew(1, sh[1], 1, 1, 1);
                db[k] = tnew(1, sh[1], 1, 1, 1);
            }
        }
        free(fill(&in, 0, 1));
        free(fill(&dy, 0, 1));
        /* 0: on g0 directly; 1: on zeros, then added to g0 */
        free(fill(&dw[0], 0, 3));
        free(fill(&db[0], 0, 3));
        pp_tensor g0w = tnew(dw[0].ndim, dw[0].shape[0], dw[0].shape[1], dw[0].shape[2],
                             dw[0].shape[3]);
        pp_tensor g0b = tnew(db[0].ndim, db[0].shape[0], 1, 1, 1);
        memcpy(g0w.data, dw[0].data, pp_tensor_bytes(&dw[0]));
        memcpy(g0b.data, db[0].data, pp_tensor_bytes(&db[0]));
        run_grad_op(cases[ci].op, sh, &in, &dy, &dw[0], &db[0]);
        run_grad_op(cases[ci].op, sh, &in, &dy, &dw[1], &db[1]);
        CHECK_OK(pp_accumulate(&g_ex, &dw[1], &g0w, &err), &err);
        CHECK_OK(pp_accumulate(&g_ex, &db[1], &g0b, &err), &err);
        CHECK_MSG(memcmp(g0w.data, dw[0].data, pp_tensor_bytes(&g0w)) == 0 &&
                      memcmp(g0b.data, db[0].data, pp_tensor_bytes(&g0b)) == 0,
                  "%s: the gradient on g0 differs from g0 + the gradient on zeros",
                  cases[ci].what);
        pp_tensor *ts[] = {&in, &dy, &dw[0], &dw[1], &db[0], &db[1], &g0w, &g0b};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- softmax cross-entropy ------------------------------------------------------ */

typedef struct xent_ctx {
    int n, classes;
    double *z;
    const int32_t *labels;
    double divisor;
} xent_ctx;

static double xent_loss(void *p)
{
    xent_ctx *c = p;
    double total = 0.0;
    for (int i = 0; i < c->n; i++) {
        const double *z = c->z + (size_t)i * c->classes;
        double m = z[0], s = 0.0;
        for (int j = 1; j < c->classes; j++) m = fmax(m, z[j]);
        for (int j = 0; j < c->classes; j++) s += exp(z[j] - m);
        total += m + log(s) - z[c->labels[i]];
    }
    return total / c->divisor;
}

static void test_softmax_xent(void)
{
    static const struct {
        int n, classes;
        float divisor;
        double offset, scale;
    } cases[] = {
        {4, 10, 4.0f, 0.0, 3.0}, {1, 3, 1.0f, 0.0, 1.0}, {7, 1000, 16.0f, 0.0, 4.0},
        {3, 5, 8.0f, 1000.0, 2.0}, /* large logits: must not overflow */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int n = cases[ci].n, k = cases[ci].classes;
        pp_error err;
        pp_tensor z = tnew(2, n, k, 1, 1), dz = tnew(2, n, k, 1, 1);
        pp_tensor lab = tnew_on(g_dev, PP_I32, 1, n, 1, 1, 1);
        pp_tensor loss = tnew_on(g_dev, PP_F32, 0, 1, 1, 1, 1);
        pp_tensor corr = tnew_on(g_dev, PP_I32, 0, 1, 1, 1, 1);
        double *zd = fill(&z, cases[ci].offset, cases[ci].scale);
        int32_t *labels = lab.data;
        int hits = 0;
        for (int i = 0; i < n; i++) {
            labels[i] = (int32_t)((urand() + 1.0) * 0.5 * k) % k;
            if (i == 0) { /* make sample 0 correct: its label is its first argmax */
                int a = 0;
                for (int j = 1; j < k; j++)
                    if (zd[j] > zd[a]) a = j;
                labels[0] = a;
            }
            int a = 0;
            for (int j = 1; j < k; j++)
                if (zd[(size_t)i * k + j] > zd[(size_t)i * k + a]) a = j;
            hits += a == labels[i];
        }
        xent_ctx c = {n, k, zd, labels, cases[ci].divisor};
        CHECK_OK(pp_softmax_xent(&g_ex, &z, &lab, cases[ci].divisor, &loss, &corr, &dz, &err),
                 &err);
        double want = xent_loss(&c);
        CHECK_MSG(fabs(*fp(&loss) - want) <= 1e-6 * fmax(1.0, fabs(want)),
                  "xent loss %.9g, expected %.9g", (double)*fp(&loss), want);
        CHECK_MSG(*(int32_t *)corr.data == hits, "xent correct %d, expected %d",
                  *(int32_t *)corr.data, hits);
        CHECK(hits >= 1);
        size_t nz = numel(&z);
        double *g = dalloc(nz);
        unsigned char *mask = malloc(nz);
        fd_grad(xent_loss, &c, zd, nz, 1e-5, g, mask);
        /* gradients are O(1/divisor); compare relative to a unit scale */
        check_grad("xent dlogits", fp(&dz), NULL, g, mask, nz);
        free(g);
        free(mask);
        free(zd);
        pp_tensor *ts[] = {&z, &dz, &lab, &loss, &corr};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }

    /* labels out of range are bad input, reported before anything is written */
    static const int32_t bad_labels[] = {-1, 10, 1000};
    for (size_t i = 0; i < sizeof bad_labels / sizeof bad_labels[0]; i++) {
        pp_error err;
        pp_tensor z = tnew(2, 2, 10, 1, 1), dz = tnew(2, 2, 10, 1, 1);
        pp_tensor lab = tnew_on(g_dev, PP_I32, 1, 2, 1, 1, 1);
        pp_tensor loss = tnew_on(g_dev, PP_F32, 0, 1, 1, 1, 1);
        pp_tensor corr = tnew_on(g_dev, PP_I32, 0, 1, 1, 1, 1);
        ((int32_t *)lab.data)[0] = 3;
        ((int32_t *)lab.data)[1] = bad_labels[i];
        *fp(&loss) = 42.0f;
        pp_status s = pp_softmax_xent(&g_ex, &z, &lab, 2.0f, &loss, &corr, &dz, &err);
        CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "label") != NULL,
                  "label %d: status %s, message '%s'", (int)bad_labels[i], pp_status_name(s),
                  s != PP_OK ? err.msg : "");
        CHECK(*fp(&loss) == 42.0f);
        pp_tensor *ts[] = {&z, &dz, &lab, &loss, &corr};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) pp_tensor_free(ts[k]);
    }
}

/* ---- boundary checks through the checked API ------------------------------------- */

typedef enum misuse {
    MISUSE_CONV_Y_SHAPE,
    MISUSE_CONV_X_DTYPE,
    MISUSE_CONV_W_DEVICE,
    MISUSE_CONV_X_NULL,
    MISUSE_CONV_BAD_DESC,
    MISUSE_CONV_DESC_INIT,
    MISUSE_BN_SINGLE_VALUE,
    MISUSE_BN_GAMMA_SHAPE,
    MISUSE_RELU_SHAPE,
    MISUSE_ADD_DTYPE,
    MISUSE_POOL_IDX_DTYPE,
    MISUSE_AVGPOOL_RANK,
    MISUSE_LINEAR_BIAS,
    MISUSE_XENT_LABEL_DTYPE,
    MISUSE_XENT_DIVISOR,
    MISUSE_SGD_NESTEROV,
    MISUSE_SGD_NO_BUFFER,
} misuse;

static pp_status run_misuse(misuse m, pp_error *err)
{
    pp_conv2d_desc cd;
    pp_conv2d_desc_init(&cd, 2, 3, 8, 8, 4, 3, 1, 1, NULL);
    pp_tensor x = tnew(4, 2, 3, 8, 8), w = tnew(4, 4, 3, 3, 3), y = tnew(4, 2, 4, 8, 8);
    pp_tensor small = tnew(4, 2, 4, 7, 8), xi = tnew_on(g_dev, PP_I32, 4, 2, 3, 8, 8);
    pp_tensor w1 = tnew_on(g_dev1, PP_F32, 4, 4, 3, 3, 3);
    pp_tensor v3 = tnew(1, 3, 1, 1, 1), v4 = tnew(1, 4, 1, 1, 1);
    pp_tensor lab = tnew(1, 2, 1, 1, 1), scalar = tnew(0, 1, 1, 1, 1);
    pp_tensor iscalar = tnew_on(g_dev, PP_I32, 0, 1, 1, 1, 1);
    pp_tensor logits = tnew(2, 2, 5, 1, 1);
    pp_status s = PP_OK;
    switch (m) {
    case MISUSE_CONV_Y_SHAPE: s = pp_conv2d_forward(&g_ex, &cd, &x, &w, &small, err); break;
    case MISUSE_CONV_X_DTYPE: s = pp_conv2d_forward(&g_ex, &cd, &xi, &w, &y, err); break;
    case MISUSE_CONV_W_DEVICE: s = pp_conv2d_backward_data(&g_ex, &cd, &y, &w1, &x, err); break;
    case MISUSE_CONV_X_NULL: s = pp_conv2d_backward_filter(&g_ex, &cd, NULL, &y, &w, err); break;
    case MISUSE_CONV_BAD_DESC:
        cd.p = 9;
        s = pp_conv2d_forward(&g_ex, &cd, &x, &w, &y, err);
        break;
    case MISUSE_CONV_DESC_INIT:
        s = pp_conv2d_desc_init(&cd, 2, 3, 2, 2, 4, 7, 1, 1, err);
        break;
    case MISUSE_BN_SINGLE_VALUE: {
        pp_bn_desc bd = {1, 3, 1, 1, 1e-5f, 0.1f};
        pp_tensor x1 = tnew(4, 1, 3, 1, 1), y1 = tnew(4, 1, 3, 1, 1);
        s = pp_batchnorm_forward_train(&g_ex, &bd, &x1, &v3, &v3, &v3, &v3, &y1, &v3, &v3, err);
        pp_tensor_free(&x1);
        pp_tensor_free(&y1);
        break;
    }
    case MISUSE_BN_GAMMA_SHAPE: {
        pp_bn_desc bd = {2, 3, 8, 8, 1e-5f, 0.1f};
        s = pp_batchnorm_forward_train(&g_ex, &bd, &x, &v4, &v3, &v3, &v3, &x, &v3, &v3, err);
        break;
    }
    case MISUSE_RELU_SHAPE: s = pp_relu_forward(&g_ex, &y, &small, err); break;
    case MISUSE_ADD_DTYPE: s = pp_add(&g_ex, &x, &xi, &x, err); break;
    case MISUSE_POOL_IDX_DTYPE: {
        pp_pool_desc pd;
        pp_pool_desc_init(&pd, 2, 3, 8, 8, 2, 2, 0, NULL);
        pp_tensor py = tnew(4, 2, 3, 4, 4), pidx = tnew(4, 2, 3, 4, 4);
        s = pp_maxpool_forward(&g_ex, &pd, &x, &py, &pidx, err);
        pp_tensor_free(&py);
        pp_tensor_free(&pidx);
        break;
    }
    case MISUSE_AVGPOOL_RANK: s = pp_avgpool_forward(&g_ex, &v3, &v3, err); break;
    case MISUSE_LINEAR_BIAS: {
        pp_tensor lw = tnew(2, 4, 5, 1, 1), ly = tnew(2, 2, 4, 1, 1);
        s = pp_linear_forward(&g_ex, &logits, &lw, &v3, &ly, err);
        pp_tensor_free(&lw);
        pp_tensor_free(&ly);
        break;
    }
    case MISUSE_XENT_LABEL_DTYPE:
        s = pp_softmax_xent(&g_ex, &logits, &lab, 2.0f, &scalar, &iscalar, &logits, err);
        break;
    case MISUSE_XENT_DIVISOR: {
        pp_tensor il = tnew_on(g_dev, PP_I32, 1, 2, 1, 1, 1);
        s = pp_softmax_xent(&g_ex, &logits, &il, 0.0f, &scalar, &iscalar, &logits, err);
        pp_tensor_free(&il);
        break;
    }
    case MISUSE_SGD_NESTEROV: {
        pp_sgd_desc sd = {0.1f, 0.0f, 0.0f, true, true};
        s = pp_sgd_update(&g_ex, &sd, &v3, &v3, NULL, err);
        break;
    }
    case MISUSE_SGD_NO_BUFFER: {
        pp_sgd_desc sd = {0.1f, 0.9f, 0.0f, false, true};
        s = pp_sgd_update(&g_ex, &sd, &v3, &v3, NULL, err);
        break;
    }
    }
    pp_tensor *ts[] = {&x, &w, &y, &small, &xi, &w1, &v3, &v4, &lab, &scalar, &iscalar, &logits};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    return s;
}

static void test_boundaries(void)
{
    static const struct {
        misuse m;
        const char *needle; /* a fragment the message must contain */
    } cases[] = {
        {MISUSE_CONV_Y_SHAPE, "y has shape [2, 4, 7, 8], expected [2, 4, 8, 8]"},
        {MISUSE_CONV_X_DTYPE, "x has dtype I32"},
        {MISUSE_CONV_W_DEVICE, "w is on cpu:1"},
        {MISUSE_CONV_X_NULL, "x is NULL"},
        {MISUSE_CONV_BAD_DESC, "inconsistent descriptor"},
        {MISUSE_CONV_DESC_INIT, "smaller than"},
        {MISUSE_BN_SINGLE_VALUE, "more than one value"},
        {MISUSE_BN_GAMMA_SHAPE, "gamma has shape [4]"},
        {MISUSE_RELU_SHAPE, "relu_forward: y has shape"},
        {MISUSE_ADD_DTYPE, "b has dtype I32"},
        {MISUSE_POOL_IDX_DTYPE, "idx has dtype F32"},
        {MISUSE_AVGPOOL_RANK, "4-D"},
        {MISUSE_LINEAR_BIAS, "b has shape [3]"},
        {MISUSE_XENT_LABEL_DTYPE, "labels has dtype F32"},
        {MISUSE_XENT_DIVISOR, "divisor"},
        {MISUSE_SGD_NESTEROV, "Nesterov"},
        {MISUSE_SGD_NO_BUFFER, "momentum_buf"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_error err;
        pp_error_clear(&err);
        pp_status s = run_misuse(cases[i].m, &err);
        CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, cases[i].needle) != NULL,
                  "misuse %zu: status %s, message '%s', expected '%s'", i, pp_status_name(s),
                  err.msg, cases[i].needle);
    }
}

int main(void)
{
    if (!op_check_setup()) return 1;
    test_linear();
    test_weight_grads_add_once();
    test_softmax_xent();
    test_boundaries();
    op_check_teardown();
    return check_summary("test_ops_linear");
}
