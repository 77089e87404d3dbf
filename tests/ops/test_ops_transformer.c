/*
 * test_ops_transformer.c - the transformer ops of the CPU backend through the
 * checked API (runtime/core/ops.h): dense layers in both weight orders, layer
 * norm, GELU (tanh), causal self-attention from qkv, token and position
 * embeddings, and the fused classifier over many rows. Each forward against
 * a naive double-precision reference, each backward against central finite
 * differences of that reference (odd sizes, several row blocks and tiles),
 * the add-once contract of parameter gradients, results bitwise the same on
 * devices of 1 and 3 worker threads, the dense layer fused with its GELU
 * and the layer norm with its residual add and gradient (the plain ops'
 * bits), a dense layer's whole backward (the data and weight ops' bits),
 * and the boundary checks.
 */
#include "tests/ops/op_check.h"

static pp_device_ctx *g_one, *g_three; /* cpu:2 (1 thread), cpu:3 (3 threads) */

/* L = sum_i y[i] r[i]: the loss whose gradients the finite differences take. */
static double dot_loss(const double *y, const double *r, size_t n)
{
    return dot_r(y, r, n);
}

/* ---- dense ---------------------------------------------------------------------- */

typedef struct dense_case {
    int n, t; /* rows (n, t); t = 0: 2-D (n, in) */
    int in, out;
    pp_weight_order order;
    bool bias;
    const char *what;
} dense_case;

typedef struct dense_ctx {
    const dense_case *c;
    double *x, *w, *b, *r, *y;
} dense_ctx;

static int64_t dense_rows(const dense_case *c)
{
    return c->t ? (int64_t)c->n * c->t : c->n;
}

/* W[i][o] of either order */
static double wat(const dense_case *c, const double *w, int i, int o)
{
    return c->order == PP_WEIGHT_IN_OUT ? w[(size_t)i * c->out + o] : w[(size_t)o * c->in + i];
}

static void ref_dense(const dense_case *c, const double *x, const double *w, const double *b,
                      double *y)
{
    for (int64_t r = 0; r < dense_rows(c); r++)
        for (int o = 0; o < c->out; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < c->in; i++) s += x[r * c->in + i] * wat(c, w, i, o);
            y[r * c->out + o] = s;
        }
}

static double dense_loss(void *p)
{
    dense_ctx *d = p;
    ref_dense(d->c, d->x, d->w, d->c->bias ? d->b : NULL, d->y);
    return dot_loss(d->y, d->r, (size_t)dense_rows(d->c) * d->c->out);
}

static pp_tensor rows_tensor(pp_device_ctx *dev, int n, int t, int c)
{
    return t ? tnew_on(dev, PP_F32, 3, n, t, c, 1) : tnew_on(dev, PP_F32, 2, n, c, 1, 1);
}

static void test_dense(void)
{
    static const dense_case cases[] = {
        {3, 5, 7, 9, PP_WEIGHT_IN_OUT, true, "(3, 5, 7) x (7, 9) + b"},
        {2, 3, 6, 6, PP_WEIGHT_OUT_IN, false, "square, (out, in), no bias"},
        {1, 0, 13, 1, PP_WEIGHT_IN_OUT, true, "one row, one output"},
        {2, 35, 11, 300, PP_WEIGHT_IN_OUT, true, "70 rows x 300: several tiles"},
        {150, 0, 17, 129, PP_WEIGHT_OUT_IN, false, "150 x 129 (out, in): tiles of 64"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const dense_case *c = &cases[ci];
        pp_error err;
        char name[160];
        const bool io = c->order == PP_WEIGHT_IN_OUT;
        pp_tensor x = rows_tensor(g_dev, c->n, c->t, c->in);
        pp_tensor y = rows_tensor(g_dev, c->n, c->t, c->out);
        pp_tensor dy = rows_tensor(g_dev, c->n, c->t, c->out);
        pp_tensor dx = rows_tensor(g_dev, c->n, c->t, c->in);
        pp_tensor w = tnew(2, io ? c->in : c->out, io ? c->out : c->in, 1, 1);
        pp_tensor dw = tnew(2, io ? c->in : c->out, io ? c->out : c->in, 1, 1);
        pp_tensor b = tnew(1, c->out, 1, 1, 1), db = tnew(1, c->out, 1, 1, 1);
        const size_t nx = numel(&x), ny = numel(&y), nw = numel(&w);
        double *xd = fill(&x, 0.0, 1.0), *wd = fill(&w, 0.0, 1.0), *bd = fill(&b, 0.0, 1.0);
        double *rd = fill(&dy, 0.0, 1.0), *dw0 = fill(&dw, 0.0, 1.0), *db0 = fill(&db, 0.0, 1.0);
        double *yref = dalloc(ny);
        ref_dense(c, xd, wd, c->bias ? bd : NULL, yref);
        snprintf(name, sizeof name, "dense forward, %s", c->what);
        CHECK_OK(pp_dense_forward(&g_ex, c->order, &x, &w, c->bias ? &b : NULL, &y, &err), &err);
        check_close(name, fp(&y), yref, ny, 1e-5);
        CHECK_OK(pp_dense_backward_data(&g_ex, c->order, &w, &dy, &dx, &err), &err);
        CHECK_OK(pp_dense_backward_weights(&g_ex, c->order, &x, &dy, &dw, c->bias ? &db : NULL,
                                           &err),
                 &err);
        dense_ctx ctx = {c, xd, wd, bd, rd, yref};
        double *g = dalloc(nx > nw ? nx : nw);
        unsigned char *mask = calloc(nx > nw ? nx : nw, 1);
        snprintf(name, sizeof name, "dense dx, %s", c->what);
        fd_grad(dense_loss, &ctx, xd, nx, 1e-3, g, mask);
        check_grad(name, fp(&dx), NULL, g, mask, nx);
        snprintf(name, sizeof name, "dense dw (+=), %s", c->what);
        fd_grad(dense_loss, &ctx, wd, nw, 1e-3, g, mask);
        check_grad(name, fp(&dw), dw0, g, mask, nw);
        if (c->bias) {
            snprintf(name, sizeof name, "dense db (+=), %s", c->what);
            fd_grad(dense_loss, &ctx, bd, (size_t)c->out, 1e-3, g, mask);
            check_grad(name, fp(&db), db0, g, mask, (size_t)c->out);
        } else {
            for (int o = 0; o < c->out; o++) CHECK(fp(&db)[o] == (float)db0[o]);
        }
        free(g);
        free(mask);
        free(xd), free(wd), free(bd), free(rd), free(dw0), free(db0), free(yref);
        pp_tensor *ts[] = {&x, &y, &dy, &dx, &w, &dw, &b, &db};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- layer norm ------------------------------------------------------------------ */

typedef struct ln_ctx {
    int64_t rows;
    int c;
    double *x, *g, *b, *r, *y;
    bool bias;
} ln_ctx;

static void ref_ln(const ln_ctx *l, const double *x, double *y, double *mean, double *rstd)
{
    for (int64_t r = 0; r < l->rows; r++) {
        const double *xr = x + r * l->c;
        double m = 0, v = 0;
        for (int i = 0; i < l->c; i++) m += xr[i];
        m /= l->c;
        for (int i = 0; i < l->c; i++) v += (xr[i] - m) * (xr[i] - m);
        v /= l->c;
        const double s = 1.0 / sqrt(v + 1e-5);
        for (int i = 0; i < l->c; i++)
            y[r * l->c + i] = (xr[i] - m) * s * l->g[i] + (l->bias ? l->b[i] : 0.0);
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
}

static double ln_loss(void *p)
{
    ln_ctx *l = p;
    ref_ln(l, l->x, l->y, NULL, NULL);
    return dot_loss(l->y, l->r, (size_t)l->rows * l->c);
}

static void test_layernorm(void)
{
    static const struct {
        int n, t, c;
        bool bias;
    } cases[] = {{3, 5, 7, true}, {2, 0, 33, false}, {4, 50, 9, true}, {1, 1, 1, true}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        pp_error err;
        char name[128];
        const int n = cases[ci].n, t = cases[ci].t, c = cases[ci].c;
        const int64_t rows = t ? (int64_t)n * t : n;
        pp_tensor x = rows_tensor(g_dev, n, t, c), y = rows_tensor(g_dev, n, t, c);
        pp_tensor dy = rows_tensor(g_dev, n, t, c), dx = rows_tensor(g_dev, n, t, c);
        pp_tensor ga = tnew(1, c, 1, 1, 1), be = tnew(1, c, 1, 1, 1);
        pp_tensor dga = tnew(1, c, 1, 1, 1), dbe = tnew(1, c, 1, 1, 1);
        pp_tensor mean = tnew(1, rows, 1, 1, 1), rstd = tnew(1, rows, 1, 1, 1);
        const size_t nx = numel(&x);
        double *xd = fill(&x, 0.3, 2.0), *gd = fill(&ga, 1.0, 0.5), *bd = fill(&be, 0.0, 1.0);
        double *rd = fill(&dy, 0.0, 1.0), *dg0 = fill(&dga, 0.0, 1.0), *db0 = fill(&dbe, 0.0, 1.0);
        double *yref = dalloc(nx), *mref = dalloc((size_t)rows), *sref = dalloc((size_t)rows);
        ln_ctx l = {rows, c, xd, gd, bd, rd, yref, cases[ci].bias};
        ref_ln(&l, xd, yref, mref, sref);
        snprintf(name, sizeof name, "layernorm forward (%d, %d, %d)", n, t, c);
        CHECK_OK(pp_layernorm_forward(&g_ex, 1e-5f, &x, &ga, l.bias ? &be : NULL, &y, &mean,
                                      &rstd, &err),
                 &err);
        check_close(name, fp(&y), yref, nx, 1e-6);
        check_close("layernorm mean", fp(&mean), mref, (size_t)rows, 1e-6);
        check_close("layernorm rstd", fp(&rstd), sref, (size_t)rows, 1e-6);
        CHECK_OK(pp_layernorm_backward(&g_ex, &x, &dy, &ga, &mean, &rstd, &dx, &dga,
                                       l.bias ? &dbe : NULL, &err),
                 &err);
        double *g = dalloc(nx);
        unsigned char *mask = calloc(nx, 1);
        snprintf(name, sizeof name, "layernorm dx (%d, %d, %d)", n, t, c);
        fd_grad(ln_loss, &l, xd, nx, 1e-4, g, mask);
        check_grad(name, fp(&dx), NULL, g, mask, nx);
        fd_grad(ln_loss, &l, gd, (size_t)c, 1e-4, g, mask);
        check_grad("layernorm dgamma (+=)", fp(&dga), dg0, g, mask, (size_t)c);
        if (l.bias) {
            fd_grad(ln_loss, &l, bd, (size_t)c, 1e-4, g, mask);
            check_grad("layernorm dbeta (+=)", fp(&dbe), db0, g, mask, (size_t)c);
        }
        free(g), free(mask);
        free(xd), free(gd), free(bd), free(rd), free(dg0), free(db0), free(yref), free(mref),
            free(sref);
        pp_tensor *ts[] = {&x, &y, &dy, &dx, &ga, &be, &dga, &dbe, &mean, &rstd};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- GELU ------------------------------------------------------------------------ */

static double ref_gelu1(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

typedef struct gelu_ctx {
    size_t n;
    double *x, *r;
} gelu_ctx;

static double gelu_loss(void *p)
{
    gelu_ctx *g = p;
    double s = 0;
    for (size_t i = 0; i < g->n; i++) s += ref_gelu1(g->x[i]) * g->r[i];
    return s;
}

static void test_gelu(void)
{
    pp_error err;
    const int n = 3, t = 7, c = 41; /* values in [-6, 6] */
    pp_tensor x = rows_tensor(g_dev, n, t, c), y = rows_tensor(g_dev, n, t, c);
    pp_tensor dy = rows_tensor(g_dev, n, t, c), dx = rows_tensor(g_dev, n, t, c);
    const size_t nx = numel(&x);
    double *xd = fill(&x, 0.0, 6.0), *rd = fill(&dy, 0.0, 1.0), *yref = dalloc(nx);
    for (size_t i = 0; i < nx; i++) yref[i] = ref_gelu1(xd[i]);
    CHECK_OK(pp_gelu_forward(&g_ex, &x, &y, &err), &err);
    check_close("gelu forward", fp(&y), yref, nx, 1e-6);
    CHECK_OK(pp_gelu_backward(&g_ex, &x, &dy, &dx, &err), &err);
    gelu_ctx ctx = {nx, xd, rd};
    double *g = dalloc(nx);
    unsigned char *mask = calloc(nx, 1);
    fd_grad(gelu_loss, &ctx, xd, nx, 1e-4, g, mask);
    check_grad("gelu backward", fp(&dx), NULL, g, mask, nx);
    /* in place: y = gelu(y) and dx = dy * gelu'(x) into dy give the same bits */
    memcpy(fp(&y), fp(&x), nx * sizeof(float));
    CHECK_OK(pp_gelu_forward(&g_ex, &y, &y, &err), &err);
    float *ref = malloc(nx * sizeof *ref);
    CHECK_OK(pp_gelu_forward(&g_ex, &x, &dx, &err), &err);
    memcpy(ref, fp(&dx), nx * sizeof *ref);
    CHECK(memcmp(ref, fp(&y), nx * sizeof *ref) == 0);
    free(ref), free(g), free(mask), free(xd), free(rd), free(yref);
    pp_tensor *ts[] = {&x, &y, &dy, &dx};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* ---- attention ------------------------------------------------------------------- */

typedef struct att_ctx {
    int n, t, c, heads;
    double *qkv, *r, *y;
} att_ctx;

static void ref_attention(const att_ctx *a, const double *qkv, double *y, double *lse)
{
    const int hs = a->c / a->heads, ld = 3 * a->c;
    double *s = dalloc((size_t)a->t);
    for (int n = 0; n < a->n; n++)
        for (int h = 0; h < a->heads; h++)
            for (int i = 0; i < a->t; i++) {
                const double *q = qkv + ((size_t)n * a->t + i) * ld + h * hs;
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)n * a->t + j) * ld + a->c + h * hs;
                    double d = 0;
                    for (int e = 0; e < hs; e++) d += q[e] * k[e];
                    s[j] = d / sqrt((double)hs);
                    mx = fmax(mx, s[j]);
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) sum += exp(s[j] - mx);
                if (lse) lse[((size_t)n * a->heads + h) * a->t + i] = mx + log(sum);
                for (int e = 0; e < hs; e++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++)
                        o += exp(s[j] - mx) / sum *
                             qkv[((size_t)n * a->t + j) * ld + 2 * a->c + h * hs + e];
                    y[((size_t)n * a->t + i) * a->c + h * hs + e] = o;
                }
            }
    free(s);
}

static double att_loss(void *p)
{
    att_ctx *a = p;
    ref_attention(a, a->qkv, a->y, NULL);
    return dot_loss(a->y, a->r, (size_t)a->n * a->t * a->c);
}

static void test_attention(void)
{
    static const struct {
        int n, t, c, heads;
        const char *what;
    } cases[] = {
        {2, 5, 12, 3, "3 heads of 4, 5 positions"},
        {1, 70, 8, 2, "70 positions: two row blocks"},
        {3, 1, 4, 1, "one position, one head"},
        {1, 130, 6, 3, "130 positions: a partial third block"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        pp_error err;
        char name[128];
        const int n = cases[ci].n, t = cases[ci].t, c = cases[ci].c, heads = cases[ci].heads;
        pp_tensor qkv = tnew(3, n, t, 3 * c, 1), dqkv = tnew(3, n, t, 3 * c, 1);
        pp_tensor y = tnew(3, n, t, c, 1), dy = tnew(3, n, t, c, 1);
        pp_tensor lse = tnew(3, n, heads, t, 1);
        const size_t nq = numel(&qkv), ny = numel(&y);
        double *qd = fill(&qkv, 0.0, 1.5), *rd = fill(&dy, 0.0, 1.0);
        free(fill(&dqkv, 0.0, 1.0)); /* overwritten */
        double *yref = dalloc(ny), *lref = dalloc(numel(&lse));
        att_ctx a = {n, t, c, heads, qd, rd, yref};
        ref_attention(&a, qd, yref, lref);
        snprintf(name, sizeof name, "attention forward, %s", cases[ci].what);
        CHECK_OK(pp_attention_forward(&g_ex, heads, &qkv, &y, &lse, &err), &err);
        check_close(name, fp(&y), yref, ny, 2e-6);
        check_close("attention lse", fp(&lse), lref, numel(&lse), 2e-6);
        /* the queries from position q0 on (generation's cache): the reference's rows q0.. */
        for (int q0 = t - 1; q0 > 0; q0 = q0 > 1 ? q0 / 2 : 0) {
            const int rows = t - q0;
            pp_tensor yf = tnew(3, n, rows, c, 1), lf = tnew(3, n, heads, rows, 1);
            double *yr = dalloc(numel(&yf)), *lr = dalloc(numel(&lf));
            for (int k = 0; k < n; k++) {
                memcpy(yr + (size_t)k * rows * c, yref + ((size_t)k * t + q0) * c,
                       (size_t)rows * c * sizeof *yr);
                for (int h = 0; h < heads; h++)
                    memcpy(lr + ((size_t)k * heads + h) * rows,
                           lref + ((size_t)k * heads + h) * t + q0, (size_t)rows * sizeof *lr);
            }
            snprintf(name, sizeof name, "attention from position %d, %s", q0, cases[ci].what);
            CHECK_OK(pp_attention_forward_from(&g_ex, heads, q0, &qkv, &yf, &lf, &err), &err);
            check_close(name, fp(&yf), yr, numel(&yf), 2e-6);
            check_close("attention from a position: lse", fp(&lf), lr, numel(&lf), 2e-6);
            free(yr), free(lr);
            pp_tensor_free(&yf), pp_tensor_free(&lf);
        }
        CHECK_OK(pp_attention_backward(&g_ex, heads, &qkv, &y, &lse, &dy, &dqkv, &err), &err);
        double *g = dalloc(nq);
        unsigned char *mask = calloc(nq, 1);
        snprintf(name, sizeof name, "attention dqkv, %s", cases[ci].what);
        fd_grad(att_loss, &a, qd, nq, 1e-4, g, mask);
        check_grad(name, fp(&dqkv), NULL, g, mask, nq);
        free(g), free(mask), free(qd), free(rd), free(yref), free(lref);
        pp_tensor *ts[] = {&qkv, &dqkv, &y, &dy, &lse};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- embeddings ------------------------------------------------------------------ */

static void fill_ids(pp_tensor *ids, int vocab)
{
    int32_t *v = ids->data;
    for (size_t i = 0; i < numel(ids); i++)
        v[i] = (int32_t)((urand() + 1.0) * 0.5 * vocab) % vocab;
}

static void test_embedding(void)
{
    pp_error err;
    const int n = 3, t = 9, vocab = 11, c = 5; /* 27 ids over 11: repeats */
    pp_tensor ids = tnew_on(g_dev, PP_I32, 2, n, t, 1, 1);
    pp_tensor table = tnew(2, vocab, c, 1, 1), dtable = tnew(2, vocab, c, 1, 1);
    pp_tensor y = tnew(3, n, t, c, 1), dy = tnew(3, n, t, c, 1);
    fill_ids(&ids, vocab);
    ((int32_t *)ids.data)[4] = vocab - 1;
    double *td = fill(&table, 0.0, 1.0), *dyd = fill(&dy, 0.0, 1.0);
    double *d0 = fill(&dtable, 0.0, 1.0);
    const int32_t *id = ids.data;
    double *want = dalloc(numel(&y));
    for (int r = 0; r < n * t; r++)
        for (int q = 0; q < c; q++) want[r * c + q] = td[id[r] * c + q];
    CHECK_OK(pp_embedding_forward(&g_ex, &ids, &table, &y, &err), &err);
    check_close("embedding forward", fp(&y), want, numel(&y), 0.0);
    double *grad = dalloc(numel(&table));
    for (int r = 0; r < n * t; r++)
        for (int q = 0; q < c; q++) grad[id[r] * c + q] += dyd[r * c + q];
    for (size_t i = 0; i < numel(&table); i++) grad[i] += d0[i];
    CHECK_OK(pp_embedding_backward(&g_ex, &ids, &dy, &dtable, &err), &err);
    check_close("embedding backward (+=)", fp(&dtable), grad, numel(&table), 1e-6);
    /* an id outside the vocabulary: refused before anything is written, named */
    ((int32_t *)ids.data)[2 * t + 5] = vocab;
    memset(y.data, 0, pp_tensor_bytes(&y));
    pp_status s = pp_embedding_forward(&g_ex, &ids, &table, &y, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "token id 11 at (2, 5) is not below the "
                                                   "vocabulary size 11"),
              "out-of-range id: %s (%s)", pp_status_name(s), err.msg);
    CHECK(fp(&y)[0] == 0.0f);
    s = pp_embedding_backward(&g_ex, &ids, &dy, &dtable, &err);
    CHECK(s == PP_ERR_INPUT);
    ((int32_t *)ids.data)[2 * t + 5] = -1;
    CHECK(pp_embedding_forward(&g_ex, &ids, &table, &y, &err) == PP_ERR_INPUT);

    /* positions: y = x + table[t]; dtable[t] += sum over samples */
    const int p = 12;
    pp_tensor pos = tnew(2, p, c, 1, 1), dpos = tnew(2, p, c, 1, 1), x = tnew(3, n, t, c, 1);
    double *pd = fill(&pos, 0.0, 1.0), *xd = fill(&x, 0.0, 1.0), *dp0 = fill(&dpos, 0.0, 1.0);
    for (int r = 0; r < n * t; r++)
        for (int q = 0; q < c; q++) want[r * c + q] = xd[r * c + q] + pd[(r % t) * c + q];
    CHECK_OK(pp_position_forward(&g_ex, &x, &pos, &y, &err), &err);
    check_close("position forward", fp(&y), want, numel(&y), 1e-7);
    double *pg = dalloc(numel(&pos));
    for (size_t i = 0; i < numel(&pos); i++) pg[i] = dp0[i];
    for (int r = 0; r < n * t; r++)
        for (int q = 0; q < c; q++) pg[(r % t) * c + q] += dyd[r * c + q];
    CHECK_OK(pp_position_backward(&g_ex, &dy, &dpos, &err), &err);
    check_close("position backward (+=)", fp(&dpos), pg, numel(&pos), 1e-6);
    /* a table with fewer positions than the input */
    pp_tensor short_pos = tnew(2, t - 1, c, 1, 1);
    CHECK(pp_position_forward(&g_ex, &x, &short_pos, &y, &err) == PP_ERR_INVALID);
    free(td), free(dyd), free(d0), free(want), free(grad), free(pd), free(xd), free(dp0),
        free(pg);
    pp_tensor *ts[] = {&ids, &table, &dtable, &y, &dy, &pos, &dpos, &x, &short_pos};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* ---- the fused classifier over many rows ------------------------------------------ */

static void test_classifier(void)
{
    pp_error err;
    const int n = 301, v = 257;
    pp_tensor logits = tnew(2, n, v, 1, 1), dl = tnew(2, n, v, 1, 1);
    pp_tensor labels = tnew_on(g_dev, PP_I32, 1, n, 1, 1, 1);
    pp_tensor loss = tnew(0, 1, 1, 1, 1), correct = tnew_on(g_dev, PP_I32, 0, 1, 1, 1, 1);
    double *z = fill(&logits, 0.0, 4.0);
    fill_ids(&labels, v);
    const int32_t *lab = labels.data;
    double total = 0;
    double *want = dalloc(numel(&logits));
    const double div = 2.0 * n;
    for (int i = 0; i < n; i++) {
        double mx = -INFINITY, se = 0;
        for (int c = 0; c < v; c++) mx = fmax(mx, z[i * v + c]);
        for (int c = 0; c < v; c++) se += exp(z[i * v + c] - mx);
        total += mx + log(se) - z[i * v + lab[i]];
        for (int c = 0; c < v; c++)
            want[i * v + c] = (exp(z[i * v + c] - mx) / se - (c == lab[i])) / div;
    }
    CHECK_OK(pp_softmax_xent(&g_ex, &logits, &labels, (float)div, &loss, &correct, &dl, &err),
             &err);
    CHECK_MSG(fabs(fp(&loss)[0] - total / div) <= 1e-6 * fabs(total / div), "loss %.9g vs %.9g",
              fp(&loss)[0], total / div);
    check_close("classifier gradient", fp(&dl), want, numel(&dl), 1e-7);
    /* in place: the gradient over the logits, the same bits */
    const float l0 = fp(&loss)[0];
    CHECK_OK(pp_softmax_xent(&g_ex, &logits, &labels, (float)div, &loss, &correct, &logits, &err),
             &err);
    CHECK(memcmp(logits.data, dl.data, pp_tensor_bytes(&dl)) == 0 && fp(&loss)[0] == l0);
    free(z), free(want);
    pp_tensor *ts[] = {&logits, &dl, &labels, &loss, &correct};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* ---- the same bits on 1 and 3 threads, and the add-once contract ------------------- */

enum { DET_OPS = 8 };

/* Runs op k on dev with the host inputs in (same seeds on every device) and
 * copies its outputs into out (floats). */
static size_t run_det(pp_device_ctx *dev, int k, float *out)
{
    pp_exec ex;
    pp_error err;
    CHECK_OK(pp_exec_init(&ex, dev, NULL, &err), &err);
    g_rng = 0x1234567ull + (uint64_t)k;
    const int n = 3, t = 67, c = 24, heads = 4, out_f = 150, vocab = 40;
    pp_tensor a = tnew_on(dev, PP_F32, 3, n, t, 3 * c, 1), b = tnew_on(dev, PP_F32, 3, n, t, c, 1);
    pp_tensor d = tnew_on(dev, PP_F32, 3, n, t, c, 1), e = tnew_on(dev, PP_F32, 3, n, t, 3 * c, 1);
    pp_tensor w = tnew_on(dev, PP_F32, 2, c, out_f, 1, 1), f = tnew_on(dev, PP_F32, 3, n, t, out_f, 1);
    pp_tensor g = tnew_on(dev, PP_F32, 2, vocab, c, 1, 1), v = tnew_on(dev, PP_F32, 1, out_f, 1, 1, 1);
    pp_tensor l = tnew_on(dev, PP_F32, 3, n, heads, t, 1), m = tnew_on(dev, PP_F32, 1, n * t, 1, 1, 1);
    pp_tensor ids = tnew_on(dev, PP_I32, 2, n, t, 1, 1);
    double *tmp[] = {fill(&a, 0, 1), fill(&b, 0, 1), fill(&d, 0, 1), fill(&w, 0, 1),
                     fill(&f, 0, 1), fill(&g, 0, 1), fill(&v, 0, 1)};
    fill_ids(&ids, vocab);
    pp_tensor *res = NULL, *res2 = NULL;
    switch (k) {
    case 0: /* dense forward, (in, out) with bias */
        CHECK_OK(pp_dense_forward(&ex, PP_WEIGHT_IN_OUT, &b, &w, &v, &f, &err), &err);
        res = &f;
        break;
    case 1: /* dense data and weight gradients */
        CHECK_OK(pp_dense_backward_data(&ex, PP_WEIGHT_IN_OUT, &w, &f, &b, &err), &err);
        CHECK_OK(pp_dense_backward_weights(&ex, PP_WEIGHT_IN_OUT, &d, &f, &w, &v, &err), &err);
        res = &b, res2 = &w;
        break;
    case 2:
    case 3: { /* layer norm forward (case 2), and its backward (case 3) */
        pp_tensor ga = pp_tensor_view0(&v, 0, c), be = pp_tensor_view0(&v, c, c), rstd;
        pp_tensor dga = pp_tensor_view0(&v, 2 * c, c), dbe = pp_tensor_view0(&v, 3 * c, c);
        CHECK_OK(pp_tensor_alloc(&rstd, dev, PP_F32, 1, (int64_t[]){n * t}, &err), &err);
        CHECK_OK(pp_layernorm_forward(&ex, 1e-5f, &b, &ga, &be, &d, &m, &rstd, &err), &err);
        if (k == 3)
            CHECK_OK(pp_layernorm_backward(&ex, &b, &d, &ga, &m, &rstd, &b, &dga, &dbe, &err),
                     &err);
        pp_tensor_free(&rstd);
        res = k == 2 ? &d : &b, res2 = k == 2 ? &m : &v;
        break;
    }
    case 4: /* attention forward and backward */
        CHECK_OK(pp_attention_forward(&ex, heads, &a, &b, &l, &err), &err);
        CHECK_OK(pp_attention_backward(&ex, heads, &a, &b, &l, &d, &e, &err), &err);
        res = &b, res2 = &e;
        break;
    case 5: /* GELU */
        CHECK_OK(pp_gelu_forward(&ex, &a, &e, &err), &err);
        CHECK_OK(pp_gelu_backward(&ex, &a, &e, &a, &err), &err);
        res = &a;
        break;
    case 6: /* token and position embedding gradients */
        CHECK_OK(pp_embedding_backward(&ex, &ids, &b, &g, &err), &err);
        res = &g;
        break;
    default: {
        pp_tensor pos = pp_tensor_view0(&w, 0, c);
        pos.shape[0] = t;
        pos.shape[1] = c;
        CHECK_OK(pp_position_backward(&ex, &b, &pos, &err), &err);
        res = &w;
        break;
    }
    }
    size_t nout = 0;
    if (res) memcpy(out, res->data, pp_tensor_bytes(res)), nout += numel(res);
    if (res2) memcpy(out + nout, res2->data, pp_tensor_bytes(res2)), nout += numel(res2);
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) free(tmp[i]);
    pp_tensor *ts[] = {&a, &b, &d, &e, &w, &f, &g, &v, &l, &m, &ids};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    pp_exec_destroy(&ex);
    return nout;
}

static void test_threads(void)
{
    const size_t cap = (size_t)3 * 67 * 150 + 24 * 150 + 4096;
    float *one = malloc(cap * 2 * sizeof(float)), *three = malloc(cap * 2 * sizeof(float));
    for (int k = 0; k < DET_OPS; k++) {
        size_t a = run_det(g_one, k, one), b = run_det(g_three, k, three);
        CHECK_MSG(a == b && a > 0 && memcmp(one, three, a * sizeof(float)) == 0,
                  "op %d: 1 and 3 threads give different bits", k);
    }
    free(one);
    free(three);
}

/* dw += g equals g computed into zeros, then added (ops.h): the parameter
 * gradients of the dense, layer-norm and embedding backwards. */
static void test_add_once(void)
{
    pp_error err;
    const int n = 2, t = 37, c = 20, out_f = 70, vocab = 9;
    pp_tensor x = tnew(3, n, t, c, 1), dy = tnew(3, n, t, out_f, 1), dyc = tnew(3, n, t, c, 1);
    pp_tensor dw = tnew(2, c, out_f, 1, 1), dw2 = tnew(2, c, out_f, 1, 1);
    pp_tensor db = tnew(1, out_f, 1, 1, 1), db2 = tnew(1, out_f, 1, 1, 1);
    pp_tensor ga = tnew(1, c, 1, 1, 1), dga = tnew(1, c, 1, 1, 1), dga2 = tnew(1, c, 1, 1, 1);
    pp_tensor mean = tnew(1, n * t, 1, 1, 1), rstd = tnew(1, n * t, 1, 1, 1), y = tnew(3, n, t, c, 1);
    pp_tensor ids = tnew_on(g_dev, PP_I32, 2, n, t, 1, 1);
    pp_tensor emb = tnew(2, vocab, c, 1, 1), emb2 = tnew(2, vocab, c, 1, 1);
    pp_tensor pos = tnew(2, t, c, 1, 1), pos2 = tnew(2, t, c, 1, 1);
    double *tmp[] = {fill(&x, 0, 1), fill(&dy, 0, 1), fill(&dyc, 0, 1), fill(&dw, 0, 1),
                     fill(&db, 0, 1), fill(&ga, 1, 0.5), fill(&dga, 0, 1), fill(&emb, 0, 1),
                     fill(&pos, 0, 1)};
    fill_ids(&ids, vocab);
    pp_tensor *acc[] = {&dw, &db, &dga, &emb, &pos}, *zero[] = {&dw2, &db2, &dga2, &emb2, &pos2};
    const int base[] = {3, 4, 6, 7, 8}; /* acc[i]'s starting values: tmp[base[i]] */
    CHECK_OK(pp_layernorm_forward(&g_ex, 1e-5f, &x, &ga, NULL, &y, &mean, &rstd, &err), &err);
    for (int pass = 0; pass < 2; pass++) {
        pp_tensor **o = pass ? zero : acc;
        CHECK_OK(pp_dense_backward_weights(&g_ex, PP_WEIGHT_IN_OUT, &x, &dy, o[0], o[1], &err),
                 &err);
        CHECK_OK(pp_layernorm_backward(&g_ex, &x, &dyc, &ga, &mean, &rstd, &y, o[2], NULL, &err),
                 &err);
        CHECK_OK(pp_embedding_backward(&g_ex, &ids, &dyc, o[3], &err), &err);
        CHECK_OK(pp_position_backward(&g_ex, &dyc, o[4], &err), &err);
    }
    for (int i = 0; i < 5; i++) {
        /* the second pass computed g into zeros: base + g once more is acc */
        for (size_t k = 0; k < numel(acc[i]); k++) fp(zero[i])[k] += (float)tmp[base[i]][k];
        CHECK_MSG(memcmp(acc[i]->data, zero[i]->data, pp_tensor_bytes(acc[i])) == 0,
                  "gradient %d: += g differs from g computed apart, then added", i);
    }
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) free(tmp[i]);
    pp_tensor *ts[] = {&x, &dy, &dyc, &dw, &dw2, &db, &db2, &ga, &dga, &dga2, &mean, &rstd, &y,
                       &ids, &emb, &emb2, &pos, &pos2};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* ---- boundaries ------------------------------------------------------------------- */

/* The dense layer with its GELU, forward and backward data: the bits of the
 * plain ops one after the other (what the CPU runs), and their checks. */
static void test_dense_gelu(void)
{
    pp_error err;
    pp_tensor x = tnew(3, 2, 5, 7, 1), w = tnew(2, 7, 12, 1, 1), b = tnew(1, 12, 1, 1, 1);
    pp_tensor h = tnew(3, 2, 5, 12, 1), g = tnew(3, 2, 5, 12, 1), h2 = tnew(3, 2, 5, 12, 1);
    pp_tensor g2 = tnew(3, 2, 5, 12, 1), dy = tnew(3, 2, 5, 7, 1), dh = tnew(3, 2, 5, 12, 1);
    pp_tensor dh2 = tnew(3, 2, 5, 12, 1), w2 = tnew(2, 12, 7, 1, 1);
    free(fill(&x, 0, 1)), free(fill(&w, 0, 0.5)), free(fill(&b, 0, 1)), free(fill(&dy, 0, 1));
    free(fill(&w2, 0, 0.5));
    for (int bias = 0; bias < 2; bias++) {
        const pp_tensor *bb = bias ? &b : NULL;
        CHECK_OK(pp_dense_gelu_forward(&g_ex, PP_WEIGHT_IN_OUT, &x, &w, bb, &h, &g, &err), &err);
        CHECK_OK(pp_dense_forward(&g_ex, PP_WEIGHT_IN_OUT, &x, &w, bb, &h2, &err), &err);
        CHECK_OK(pp_gelu_forward(&g_ex, &h2, &g2, &err), &err);
        CHECK_MSG(!memcmp(h.data, h2.data, pp_tensor_bytes(&h)) &&
                      !memcmp(g.data, g2.data, pp_tensor_bytes(&g)),
                  "dense + GELU (bias %d): not the plain ops' bits", bias);
    }
    /* the layer after the GELU, (12, 7) in (in, out) order, back into h */
    CHECK_OK(pp_dense_backward_data_gelu(&g_ex, PP_WEIGHT_IN_OUT, &w2, &dy, &h, &dh, &err), &err);
    CHECK_OK(pp_dense_backward_data(&g_ex, PP_WEIGHT_IN_OUT, &w2, &dy, &dh2, &err), &err);
    CHECK_OK(pp_gelu_backward(&g_ex, &h, &dh2, &dh2, &err), &err);
    CHECK_MSG(!memcmp(dh.data, dh2.data, pp_tensor_bytes(&dh)),
              "dense backward data + GELU: not the plain ops' bits");
    CHECK(pp_dense_gelu_forward(&g_ex, PP_WEIGHT_IN_OUT, &x, &w, &b, &h, &dy, &err) ==
          PP_ERR_INVALID); /* g not shaped like h */
    CHECK(pp_dense_gelu_forward(&g_ex, PP_WEIGHT_OUT_IN, &x, &w, &b, &h, &g, &err) ==
          PP_ERR_INVALID);
    CHECK(pp_dense_backward_data_gelu(&g_ex, PP_WEIGHT_IN_OUT, &w2, &dy, &x, &dh, &err) ==
          PP_ERR_INVALID); /* h not the layer's input */
    CHECK(pp_dense_backward_data_gelu(&g_ex, PP_WEIGHT_IN_OUT, &w2, &dy, &h, &x, &err) ==
          PP_ERR_INVALID);
    pp_tensor *ts[] = {&x, &w, &b, &h, &g, &h2, &g2, &dy, &dh, &dh2, &w2};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* A dense layer's whole backward in one call (pp_dense_backward): the bits
 * of the data op (through the GELU with h) then the weight op, in both
 * weight orders, f32 and bf16 operands (GPT-2's mixes: bf16 x, W, h and dx
 * with an f32 or bf16 dy), with and without dx, h and db; and its checks. */
typedef struct dense_bw_case {
    pp_weight_order order;
    bool bf16, dy16;    /* x, w, h and dx bf16; dy bf16 */
    bool dx, gelu, db;  /* a data gradient (through GELU'(h)), a bias gradient */
} dense_bw_case;

static const dense_bw_case dense_bw_cases[] = {
    {PP_WEIGHT_IN_OUT, false, false, true, false, true},
    {PP_WEIGHT_OUT_IN, false, false, true, false, false},
    {PP_WEIGHT_IN_OUT, false, false, true, true, true},
    {PP_WEIGHT_OUT_IN, false, false, false, false, true},
    {PP_WEIGHT_IN_OUT, true, false, true, false, true},  /* attn.c_proj */
    {PP_WEIGHT_IN_OUT, true, false, true, true, true},   /* mlp.c_proj */
    {PP_WEIGHT_OUT_IN, true, false, true, false, false}, /* the head */
    {PP_WEIGHT_OUT_IN, true, false, false, false, false},
    {PP_WEIGHT_IN_OUT, true, true, true, false, true},   /* c_fc, c_attn */
    {PP_WEIGHT_OUT_IN, true, true, true, true, true},
};

/* t of dtype dt filled with scale * U[-1, 1) (bf16: rounded) */
static pp_tensor tfill(pp_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2, double scale)
{
    pp_tensor t = tnew_on(g_dev, dt, ndim, d0, d1, d2, 1);
    for (int64_t i = 0; i < pp_tensor_numel(&t); i++) {
        const float v = (float)(scale * urand());
        if (dt == PP_BF16)
            ((uint16_t *)t.data)[i] = pp_bf16_from_f32(v);
        else
            fp(&t)[i] = v;
    }
    return t;
}

static bool same_bits(const pp_tensor *a, const pp_tensor *b)
{
    return !memcmp(a->data, b->data, pp_tensor_bytes(a));
}

static void test_dense_backward(void)
{
    pp_error err;
    enum { N = 2, T = 5, IN = 7, OUT = 12 };
    for (size_t i = 0; i < sizeof dense_bw_cases / sizeof dense_bw_cases[0]; i++) {
        const dense_bw_case *c = &dense_bw_cases[i];
        const pp_dtype dt = c->bf16 ? PP_BF16 : PP_F32, dyt = c->dy16 ? PP_BF16 : PP_F32;
        const bool io = c->order == PP_WEIGHT_IN_OUT;
        pp_tensor x = tfill(dt, 3, N, T, IN, 1), dy = tfill(dyt, 3, N, T, OUT, 1);
        pp_tensor w = tfill(dt, 2, io ? IN : OUT, io ? OUT : IN, 1, 0.5);
        pp_tensor h = tfill(dt, 3, N, T, IN, 1.5), dx = tfill(dt, 3, N, T, IN, 1);
        pp_tensor dx2 = tnew_on(g_dev, dt, 3, N, T, IN, 1);
        pp_tensor dw = tfill(PP_F32, 2, w.shape[0], w.shape[1], 1, 1);
        pp_tensor dw2 = tnew(2, w.shape[0], w.shape[1], 1, 1), db = tfill(PP_F32, 1, OUT, 1, 1, 1);
        pp_tensor db2 = tnew(1, OUT, 1, 1, 1);
        memcpy(dx2.data, dx.data, pp_tensor_bytes(&dx));
        memcpy(dw2.data, dw.data, pp_tensor_bytes(&dw));
        memcpy(db2.data, db.data, pp_tensor_bytes(&db));
        const pp_tensor *hh = c->gelu ? &h : NULL;
        CHECK_OK(pp_dense_backward(&g_ex, c->order, &w, &x, &dy, hh, c->dx ? &dx : NULL, &dw,
                                   c->db ? &db : NULL, &err), &err);
        if (c->gelu)
            CHECK_OK(pp_dense_backward_data_gelu(&g_ex, c->order, &w, &dy, &h, &dx2, &err), &err);
        else if (c->dx)
            CHECK_OK(pp_dense_backward_data(&g_ex, c->order, &w, &dy, &dx2, &err), &err);
        CHECK_OK(pp_dense_backward_weights(&g_ex, c->order, &x, &dy, &dw2, c->db ? &db2 : NULL,
                                           &err), &err);
        CHECK_MSG(same_bits(&dx, &dx2) && same_bits(&dw, &dw2) && same_bits(&db, &db2),
                  "dense backward (case %zu): dx %s, dw %s, db %s the separate ops' bits", i,
                  same_bits(&dx, &dx2) ? "has" : "has not",
                  same_bits(&dw, &dw2) ? "has" : "has not",
                  same_bits(&db, &db2) ? "has" : "has not");
        if (i == 0) { /* h without dx; dw, dx or h not the layer's */
            CHECK(pp_dense_backward(&g_ex, c->order, &w, &x, &dy, &h, NULL, &dw, NULL, &err) ==
                  PP_ERR_INVALID);
            CHECK(pp_dense_backward(&g_ex, c->order, &w, &x, &dy, NULL, &dx, &db, NULL, &err) ==
                  PP_ERR_INVALID);
            CHECK(pp_dense_backward(&g_ex, c->order, &w, &x, &dy, NULL, &dy, &dw, NULL, &err) ==
                  PP_ERR_INVALID);
            CHECK(pp_dense_backward(&g_ex, c->order, &w, &x, &dy, &dy, &dx, &dw, NULL, &err) ==
                  PP_ERR_INVALID);
        }
        pp_tensor *ts[] = {&x, &dy, &w, &h, &dx, &dx2, &dw, &dw2, &db, &db2};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) pp_tensor_free(ts[j]);
    }
}

/* The layer norm with the residual add before it and the residual gradient
 * beside its backward: the bits of the plain ops one after the other. */
static void test_layernorm_residual(void)
{
    pp_error err;
    pp_tensor a = tnew(3, 2, 5, 9, 1), s = tnew(3, 2, 5, 9, 1), s2 = tnew(3, 2, 5, 9, 1);
    pp_tensor y = tnew(3, 2, 5, 9, 1), y2 = tnew(3, 2, 5, 9, 1), dy = tnew(3, 2, 5, 9, 1);
    pp_tensor res = tnew(3, 2, 5, 9, 1), dx = tnew(3, 2, 5, 9, 1), dx2 = tnew(3, 2, 5, 9, 1);
    pp_tensor g = tnew(1, 9, 1, 1, 1), be = tnew(1, 9, 1, 1, 1), m = tnew(1, 10, 1, 1, 1);
    pp_tensor r = tnew(1, 10, 1, 1, 1), dg = tnew(1, 9, 1, 1, 1), dg2 = tnew(1, 9, 1, 1, 1);
    free(fill(&a, 0, 1)), free(fill(&s, 1, 1)), free(fill(&g, 1, 0.2)), free(fill(&be, 0, 1));
    free(fill(&dy, 0, 1)), free(fill(&res, 0, 1));
    memcpy(s2.data, s.data, pp_tensor_bytes(&s));
    CHECK_OK(pp_add_layernorm_forward(&g_ex, 1e-5f, &a, &s, &g, &be, &s, &y, &m, &r, &err), &err);
    CHECK_OK(pp_add(&g_ex, &a, &s2, &s2, &err), &err);
    CHECK_MSG(!memcmp(s.data, s2.data, pp_tensor_bytes(&s)), "add + layer norm: not pp_add's sum");
    CHECK_OK(pp_layernorm_forward(&g_ex, 1e-5f, &s2, &g, &be, &y2, &m, &r, &err), &err);
    CHECK_MSG(!memcmp(y.data, y2.data, pp_tensor_bytes(&y)), "add + layer norm: not its bits");
    CHECK_OK(pp_layernorm_backward_add(&g_ex, &s, &dy, &g, &m, &r, &res, &dx, &dg, NULL, &err),
             &err);
    CHECK_OK(pp_layernorm_backward(&g_ex, &s, &dy, &g, &m, &r, &dx2, &dg2, NULL, &err), &err);
    CHECK_OK(pp_accumulate(&g_ex, &res, &dx2, &err), &err);
    CHECK_MSG(!memcmp(dx.data, dx2.data, pp_tensor_bytes(&dx)) &&
                  !memcmp(dg.data, dg2.data, pp_tensor_bytes(&dg)),
              "layer norm backward + residual gradient: not the plain ops' bits");
    CHECK(pp_add_layernorm_forward(&g_ex, 1e-5f, &a, &g, &g, &be, &s, &y, &m, &r, &err) ==
          PP_ERR_INVALID); /* b not shaped like s */
    CHECK(pp_layernorm_backward_add(&g_ex, &s, &dy, &g, &m, &r, &dx, &dx, &dg, NULL, &err) ==
          PP_ERR_INVALID); /* dres is dx */
    CHECK(pp_layernorm_backward_add(&g_ex, &s, &dy, &g, &m, &r, &g, &dx, &dg, NULL, &err) ==
          PP_ERR_INVALID);
    pp_tensor *ts[] = {&a, &s, &s2, &y, &y2, &dy, &res, &dx, &dx2, &g, &be, &m, &r, &dg, &dg2};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

static void test_boundaries(void)
{
    pp_error err;
    pp_tensor x = tnew(3, 2, 3, 8, 1), w = tnew(2, 8, 5, 1, 1), y = tnew(3, 2, 3, 5, 1);
    pp_tensor bad = tnew(3, 2, 3, 6, 1), qkv = tnew(3, 2, 3, 24, 1), lse = tnew(3, 2, 2, 3, 1);
    pp_tensor g = tnew(1, 8, 1, 1, 1), st = tnew(1, 5, 1, 1, 1);
    pp_tensor other = tnew_on(g_dev1, PP_F32, 3, 2, 3, 5, 1);
    CHECK(pp_dense_forward(&g_ex, PP_WEIGHT_IN_OUT, &x, &w, NULL, &y, &err) == PP_OK);
    CHECK(pp_dense_forward(&g_ex, PP_WEIGHT_OUT_IN, &x, &w, NULL, &y, &err) == PP_ERR_INVALID);
    CHECK(pp_dense_forward(&g_ex, (pp_weight_order)7, &x, &w, NULL, &y, &err) == PP_ERR_INVALID);
    CHECK(pp_dense_forward(&g_ex, PP_WEIGHT_IN_OUT, &bad, &w, NULL, &y, &err) == PP_ERR_INVALID);
    CHECK(pp_dense_forward(&g_ex, PP_WEIGHT_IN_OUT, &x, &w, NULL, &other, &err) ==
          PP_ERR_INVALID);
    CHECK(pp_dense_forward(&g_ex, PP_WEIGHT_IN_OUT, &x, &w, &g, &y, &err) == PP_ERR_INVALID);
    CHECK(pp_dense_forward(&g_ex, PP_WEIGHT_IN_OUT, NULL, &w, NULL, &y, &err) == PP_ERR_INVALID);
    CHECK(pp_layernorm_forward(&g_ex, 1e-5f, &x, &g, NULL, &x, &st, &st, &err) ==
          PP_ERR_INVALID); /* mean, rstd have 5 entries, x 6 rows */
    CHECK(pp_layernorm_forward(&g_ex, 0.0f, &x, &g, NULL, &x, &st, &st, &err) == PP_ERR_INVALID);
    CHECK(pp_attention_forward(&g_ex, 2, &qkv, &x, &lse, &err) == PP_OK);
    CHECK(pp_attention_forward(&g_ex, 3, &qkv, &x, &lse, &err) == PP_ERR_INVALID); /* 8 / 3 */
    CHECK(pp_attention_forward(&g_ex, 4, &qkv, &x, &lse, &err) == PP_ERR_INVALID); /* lse */
    CHECK(pp_attention_forward(&g_ex, 2, &x, &x, &lse, &err) == PP_ERR_INVALID);
    pp_tensor y1 = tnew(3, 2, 1, 8, 1), l1 = tnew(3, 2, 2, 1, 1);
    CHECK(pp_attention_forward_from(&g_ex, 2, 2, &qkv, &y1, &l1, &err) == PP_OK);
    CHECK(pp_attention_forward_from(&g_ex, 2, 1, &qkv, &y1, &l1, &err) == PP_ERR_INVALID);
    CHECK(pp_attention_forward_from(&g_ex, 2, 3, &qkv, &y1, &l1, &err) == PP_ERR_INVALID);
    CHECK(pp_attention_forward_from(&g_ex, 2, -1, &qkv, &y1, &l1, &err) == PP_ERR_INVALID);
    CHECK(pp_attention_forward_from(&g_ex, 2, 0, &qkv, &x, &lse, &err) == PP_OK);
    pp_tensor_free(&y1), pp_tensor_free(&l1);
    pp_tensor ids = tnew_on(g_dev, PP_F32, 2, 2, 3, 1, 1);
    CHECK(pp_embedding_forward(&g_ex, &ids, &w, &x, &err) == PP_ERR_INVALID); /* F32 ids */
    CHECK(pp_gelu_forward(&g_ex, &x, &y, &err) == PP_ERR_INVALID);
    pp_tensor *ts[] = {&x, &w, &y, &bad, &qkv, &lse, &g, &st, &other, &ids};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

int main(void)
{
    if (!op_check_setup()) return 1;
    if (!op_check_thread_devices(&g_one, &g_three)) return 1;
    test_dense();
    test_layernorm();
    test_gelu();
    test_attention();
    test_embedding();
    test_classifier();
    test_threads();
    test_add_once();
    test_dense_gelu();
    test_dense_backward();
    test_layernorm_residual();
    test_boundaries();
    CHECK(pp_device_bytes_in_use(g_one) == 0 && pp_device_bytes_in_use(g_three) == 0);
    op_check_teardown();
    return check_summary("test_ops_transformer");
}
