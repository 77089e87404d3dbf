/*
 * test_ops_dropout.c - dropout's ops on the CPU backend (runtime/core/ops.h:
 * pp_dropout_forward, pp_dropout_backward, the attention's dropout) and the
 * hash its masks come from (runtime/core/dropout.h):
 *   - each op against a naive reference drawing the same mask (elementwise:
 *     bitwise; attention: a double-precision reference, and its gradient
 *     against central finite differences with the mask fixed);
 *   - p = 0 gives the plain ops' bits; 1 and 3 worker threads the same bits;
 *   - keep rates of p = 0.1 and 0.5 over 2^22 values within 4 sigma, and the
 *     masks of two steps, of two samples and of two sites independent (both
 *     kept at (1 - p)^2 within 4 sigma);
 *   - a tensor cut into micro-batches (first_sample moved along) draws the
 *     masks of the whole tensor: the property pipelines stay bitwise by;
 *   - a step in memory (what replayed kernels read) draws its key's masks, and
 *     one that is not its key's step is refused by name;
 *   - p outside [0, 1) refused.
 */
#include "tests/ops/op_check.h"

static pp_device_ctx *g_one, *g_three; /* cpu:2 (1 thread), cpu:3 (3 threads) */

/* The factor of element i of sample n, written from the definition. */
static double ref_factor(const pp_dropout_desc *d, int64_t n, int64_t i)
{
    const uint64_t t = (uint64_t)((double)d->p * 4294967296.0);
    return pp_dropout_bits(d->key, d->first_sample + n, i) >= t ? 1.0 / (1.0 - (double)d->p)
                                                                 : 0.0;
}

/* ---- elementwise ------------------------------------------------------------------ */

static void test_elementwise(void)
{
    static const struct {
        int n, per; /* samples, values per sample */
        float p;
        const char *what;
    } cases[] = {
        {3, 7, 0.5f, "3 x 7, p 0.5"},
        {2, 70000, 0.1f, "2 x 70000 (three tasks a sample), p 0.1"},
        {5, 1, 0.9f, "5 x 1, p 0.9"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        pp_error err;
        char name[128];
        const pp_dropout_desc d = {.p = cases[ci].p, .key = pp_dropout_key(11, 3, 4),
                                   .first_sample = 40};
        const int n = cases[ci].n, per = cases[ci].per;
        pp_tensor x = tnew(2, n, per, 1, 1), y = tnew(2, n, per, 1, 1);
        pp_tensor dy = tnew(2, n, per, 1, 1), dx = tnew(2, n, per, 1, 1);
        double *xd = fill(&x, 0.0, 1.0), *dyd = fill(&dy, 0.0, 1.0);
        CHECK_OK(pp_dropout_forward(&g_ex, &d, &x, &y, &err), &err);
        CHECK_OK(pp_dropout_backward(&g_ex, &d, &dy, &dx, &err), &err);
        size_t bad = 0;
        for (int s = 0; s < n; s++)
            for (int i = 0; i < per; i++) {
                const size_t k = (size_t)s * per + i;
                const double f = ref_factor(&d, s, i);
                bad += fp(&y)[k] != (float)(xd[k] * (float)f);
                bad += fp(&dx)[k] != (float)(dyd[k] * (float)f);
            }
        snprintf(name, sizeof name, "dropout against its reference, %s", cases[ci].what);
        CHECK_MSG(bad == 0, "%s: %zu values differ", name, bad);
        /* in place: the same bits */
        CHECK_OK(pp_dropout_forward(&g_ex, &d, &x, &x, &err), &err);
        CHECK(memcmp(fp(&x), fp(&y), numel(&x) * sizeof(float)) == 0);
        /* p = 0: a copy */
        const pp_dropout_desc off = {.p = 0.0f, .key = d.key, .first_sample = d.first_sample};
        CHECK_OK(pp_dropout_forward(&g_ex, &off, &dy, &y, &err), &err);
        CHECK(memcmp(fp(&dy), fp(&y), numel(&y) * sizeof(float)) == 0);
        free(xd), free(dyd);
        pp_tensor *ts[] = {&x, &y, &dy, &dx};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- the masks' statistics ------------------------------------------------------------- */

#define STAT_N ((int64_t)1 << 22)

/* |count / n - rate| within 4 sigma of a binomial(n, rate) */
static void check_rate(const char *what, int64_t count, int64_t n, double rate)
{
    const double sigma = sqrt(rate * (1.0 - rate) / (double)n);
    const double got = (double)count / (double)n;
    CHECK_MSG(fabs(got - rate) <= 4.0 * sigma, "%s: %.6f, expected %.6f (4 sigma %.6f)", what,
              got, rate, 4.0 * sigma);
}

static void test_statistics(void)
{
    static const float ps[] = {0.1f, 0.5f};
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
        const float p = ps[pi];
        const uint32_t t = pp_dropout_threshold(p);
        const uint64_t k = pp_dropout_key(1, 7, 2);
        const uint64_t ks = pp_dropout_key(1, 8, 2), kl = pp_dropout_key(1, 7, 3);
        const uint64_t kseed = pp_dropout_key(2, 7, 2);
        int64_t kept = 0, steps = 0, samples = 0, sites = 0, seeds = 0, odd = 0;
        for (int64_t i = 0; i < STAT_N; i++) {
            const int64_t s = i >> 12, e = i & 4095; /* 1024 samples of 4096 values */
            const bool a = pp_dropout_bits(k, s, e) >= t;
            kept += a;
            steps += a && pp_dropout_bits(ks, s, e) >= t;
            samples += a && pp_dropout_bits(k, s + 1024, e) >= t;
            sites += a && pp_dropout_bits(kl, s, e) >= t;
            seeds += a && pp_dropout_bits(kseed, s, e) >= t;
            odd += a && pp_dropout_bits(k, s, e + 1) >= t; /* neighbours */
        }
        char what[96];
        const double q = 1.0 - (double)p;
        snprintf(what, sizeof what, "keep rate, p %.1f", (double)p);
        check_rate(what, kept, STAT_N, q);
        snprintf(what, sizeof what, "kept at two steps, p %.1f", (double)p);
        check_rate(what, steps, STAT_N, q * q);
        snprintf(what, sizeof what, "kept in two samples, p %.1f", (double)p);
        check_rate(what, samples, STAT_N, q * q);
        snprintf(what, sizeof what, "kept at two sites, p %.1f", (double)p);
        check_rate(what, sites, STAT_N, q * q);
        snprintf(what, sizeof what, "kept under two seeds, p %.1f", (double)p);
        check_rate(what, seeds, STAT_N, q * q);
        snprintf(what, sizeof what, "kept at neighbouring values, p %.1f", (double)p);
        check_rate(what, odd, STAT_N, q * q);
    }
    /* the op's output: the mean of 1s through p = 0.5 is 1 within 4 sigma */
    pp_error err;
    pp_tensor x = tnew(2, 64, 16384, 1, 1);
    for (size_t i = 0; i < numel(&x); i++) fp(&x)[i] = 1.0f;
    const pp_dropout_desc d = {.p = 0.5f, .key = pp_dropout_key(5, 0, 0), .first_sample = 0};
    CHECK_OK(pp_dropout_forward(&g_ex, &d, &x, &x, &err), &err);
    int64_t kept = 0;
    double sum = 0;
    for (size_t i = 0; i < numel(&x); i++) kept += fp(&x)[i] != 0.0f, sum += fp(&x)[i];
    check_rate("the op's keep rate, p 0.5", kept, (int64_t)numel(&x), 0.5);
    CHECK_MSG(fabs(sum / (double)numel(&x) - 1.0) <= 4.0 / sqrt((double)numel(&x)),
              "the op's mean %.6f, expected 1", sum / (double)numel(&x));
    pp_tensor_free(&x);
}

/* A tensor of 6 samples through the op equals its micro-batches of 1, 2 and 3
 * samples through it, each with its first global sample. */
static void test_micro_batches(void)
{
    pp_error err;
    const pp_dropout_desc d = {.p = 0.3f, .key = pp_dropout_key(9, 1, 5), .first_sample = 0};
    pp_tensor x = tnew(3, 6, 5, 7, 1), y = tnew(3, 6, 5, 7, 1), z = tnew(3, 6, 5, 7, 1);
    free(fill(&x, 0.0, 1.0));
    CHECK_OK(pp_dropout_forward(&g_ex, &d, &x, &y, &err), &err);
    static const int cuts[][2] = {{0, 1}, {1, 2}, {3, 3}};
    for (int c = 0; c < 3; c++) {
        const pp_dropout_desc dm = {.p = d.p, .key = d.key, .first_sample = cuts[c][0]};
        pp_tensor xs = pp_tensor_view0(&x, cuts[c][0], cuts[c][1]);
        pp_tensor zs = pp_tensor_view0(&z, cuts[c][0], cuts[c][1]);
        CHECK_OK(pp_dropout_forward(&g_ex, &dm, &xs, &zs, &err), &err);
    }
    CHECK_MSG(memcmp(fp(&y), fp(&z), numel(&y) * sizeof(float)) == 0,
              "micro-batches draw other masks than their mini-batch");
    /* a micro-batch index in place of the global sample would differ */
    const pp_dropout_desc wrong = {.p = d.p, .key = d.key, .first_sample = 1};
    pp_tensor zs = pp_tensor_view0(&z, 3, 3), xs = pp_tensor_view0(&x, 3, 3);
    CHECK_OK(pp_dropout_forward(&g_ex, &wrong, &xs, &zs, &err), &err);
    CHECK(memcmp(fp(&y), fp(&z), numel(&y) * sizeof(float)) != 0);
    pp_tensor *ts[] = {&x, &y, &z};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* ---- attention ---------------------------------------------------------------------- */

typedef struct att_ctx {
    int n, t, c, heads;
    const pp_dropout_desc *d;
    double *qkv, *r, *y;
} att_ctx;

/* y = (softmax(q k^T / sqrt(hs), causal) * M) v per head, in double. */
static void ref_attention(const att_ctx *a, double *y)
{
    const int hs = a->c / a->heads, ld = 3 * a->c, t = a->t;
    double *s = dalloc((size_t)t);
    for (int n = 0; n < a->n; n++)
        for (int h = 0; h < a->heads; h++)
            for (int i = 0; i < t; i++) {
                const double *q = a->qkv + ((size_t)n * t + i) * ld + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    const double *k = a->qkv + ((size_t)n * t + j) * ld + a->c + h * hs;
                    double dot = 0;
                    for (int e = 0; e < hs; e++) dot += q[e] * k[e];
                    s[j] = dot / sqrt((double)hs);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= i; j++) sum += exp(s[j] - mx);
                for (int j = 0; j <= i; j++)
                    s[j] = exp(s[j] - mx) / sum *
                           ref_factor(a->d, n, ((int64_t)h * t + i) * t + j);
                for (int e = 0; e < hs; e++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++)
                        o += s[j] * a->qkv[((size_t)n * t + j) * ld + 2 * a->c + h * hs + e];
                    y[((size_t)n * t + i) * a->c + h * hs + e] = o;
                }
            }
    free(s);
}

static double att_loss(void *p)
{
    att_ctx *a = p;
    ref_attention(a, a->y);
    return dot_r(a->y, a->r, (size_t)a->n * a->t * a->c);
}

/* y, lse and dqkv of the attention with d on dev (fresh tensors; caller frees). */
static void run_attention(pp_device_ctx *dev, int heads, const pp_dropout_desc *d,
                          const pp_tensor *qkv, const pp_tensor *dy, pp_tensor *y,
                          pp_tensor *lse, pp_tensor *dqkv)
{
    pp_error err;
    pp_exec ex;
    CHECK_OK(pp_exec_init(&ex, dev, NULL, &err), &err);
    const int n = (int)qkv->shape[0], t = (int)qkv->shape[1], c = (int)qkv->shape[2] / 3;
    pp_tensor q = tnew_on(dev, PP_F32, 3, n, t, 3 * c, 1), g = tnew_on(dev, PP_F32, 3, n, t, c, 1);
    memcpy(q.data, qkv->data, numel(qkv) * sizeof(float)); /* host memory on every cpu device */
    memcpy(g.data, dy->data, numel(dy) * sizeof(float));
    *y = tnew_on(dev, PP_F32, 3, n, t, c, 1);
    *lse = tnew_on(dev, PP_F32, 3, n, heads, t, 1);
    *dqkv = tnew_on(dev, PP_F32, 3, n, t, 3 * c, 1);
    CHECK_OK(pp_attention_forward_dropout(&ex, heads, d, &q, y, lse, &err), &err);
    CHECK_OK(pp_attention_backward_dropout(&ex, heads, d, &q, y, lse, &g, dqkv, &err), &err);
    pp_exec_destroy(&ex);
    pp_tensor_free(&q);
    pp_tensor_free(&g);
}

static bool same(const pp_tensor *a, const pp_tensor *b)
{
    return memcmp(a->data, b->data, numel(a) * sizeof(float)) == 0;
}

static void test_attention(void)
{
    static const struct {
        int n, t, c, heads;
        float p;
        const char *what;
    } cases[] = {
        {2, 5, 12, 3, 0.5f, "3 heads of 4, 5 positions, p 0.5"},
        {1, 70, 8, 2, 0.1f, "70 positions: two row blocks, p 0.1"},
        {3, 1, 4, 1, 0.5f, "one position, one head, p 0.5"},
        {1, 130, 6, 3, 0.3f, "130 positions: a partial third block, p 0.3"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char name[128];
        const int n = cases[ci].n, t = cases[ci].t, c = cases[ci].c, heads = cases[ci].heads;
        const pp_dropout_desc d = {.p = cases[ci].p, .key = pp_dropout_key(3, 2, 1),
                                   .first_sample = 17};
        pp_tensor qkv = tnew(3, n, t, 3 * c, 1), dy = tnew(3, n, t, c, 1);
        const size_t nq = numel(&qkv), ny = numel(&dy);
        double *qd = fill(&qkv, 0.0, 1.5), *rd = fill(&dy, 0.0, 1.0), *yref = dalloc(ny);
        att_ctx a = {n, t, c, heads, &d, qd, rd, yref};
        ref_attention(&a, yref);
        pp_tensor y, lse, dqkv, y3, lse3, dqkv3;
        run_attention(g_one, heads, &d, &qkv, &dy, &y, &lse, &dqkv);
        snprintf(name, sizeof name, "attention with dropout, %s", cases[ci].what);
        check_close(name, fp(&y), yref, ny, 2e-6);
        double *g = dalloc(nq);
        unsigned char *mask = calloc(nq, 1);
        fd_grad(att_loss, &a, qd, nq, 1e-4, g, mask);
        snprintf(name, sizeof name, "attention dqkv with dropout, %s", cases[ci].what);
        check_grad(name, fp(&dqkv), NULL, g, mask, nq);
        /* 3 threads: the same bits */
        run_attention(g_three, heads, &d, &qkv, &dy, &y3, &lse3, &dqkv3);
        CHECK(same(&y, &y3) && same(&lse, &lse3) && same(&dqkv, &dqkv3));
        /* p = 0 through the dropout entry points: the plain ops' bits */
        pp_tensor *ts3[] = {&y3, &lse3, &dqkv3};
        for (size_t i = 0; i < 3; i++) pp_tensor_free(ts3[i]);
        const pp_dropout_desc off = {.p = 0.0f, .key = d.key, .first_sample = d.first_sample};
        pp_tensor y0, lse0, dqkv0;
        run_attention(g_one, heads, &off, &qkv, &dy, &y3, &lse3, &dqkv3);
        run_attention(g_one, heads, NULL, &qkv, &dy, &y0, &lse0, &dqkv0);
        pp_error err;
        pp_tensor yp = tnew(3, n, t, c, 1), lp = tnew(3, n, heads, t, 1);
        pp_tensor dp = tnew(3, n, t, 3 * c, 1);
        CHECK_OK(pp_attention_forward(&g_ex, heads, &qkv, &yp, &lp, &err), &err);
        CHECK_OK(pp_attention_backward(&g_ex, heads, &qkv, &yp, &lp, &dy, &dp, &err), &err);
        CHECK(same(&y3, &yp) && same(&dqkv3, &dp) && same(&y0, &yp) && same(&dqkv0, &dp));
        CHECK(same(&lse, &lp)); /* lse is the undropped softmax's */
        free(g), free(mask), free(qd), free(rd), free(yref);
        pp_tensor *ts[] = {&qkv, &dy, &y, &lse, &dqkv, &y3, &lse3, &dqkv3,
                           &y0,  &lse0, &dqkv0, &yp, &lp, &dp};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
    }
}

/* ---- the step in memory ------------------------------------------------------------- */

/* A draw whose step is in memory (pp_dropout_desc.step: what a replayed
 * graph's kernels read): the ops draw from pp_dropout_key(seed, *step,
 * site) when they run, the bits of the key passed as a value; a step in
 * memory that is not the key's is refused by name (PP_ERR_INTERNAL), and a
 * step tensor of another dtype, shape or device by the op's checks. */
static void test_step_in_memory(void)
{
    pp_error err;
    const uint64_t seed = 41;
    const int site = 6;
    pp_tensor step = tnew_on(g_dev, PP_I64, 1, 1, 1, 1, 1);
    *(int64_t *)step.data = 9;
    const pp_dropout_desc by_key = {.p = 0.3f, .key = pp_dropout_key(seed, 9, site),
                                    .first_sample = 2};
    pp_dropout_desc at = by_key;
    at.step = &step, at.seed = seed, at.site = site;
    pp_tensor x = tnew(2, 3, 50, 1, 1), y = tnew(2, 3, 50, 1, 1), ym = tnew(2, 3, 50, 1, 1);
    double *xd = fill(&x, 0.0, 1.0);
    CHECK_OK(pp_dropout_forward(&g_ex, &by_key, &x, &y, &err), &err);
    CHECK_OK(pp_dropout_forward(&g_ex, &at, &x, &ym, &err), &err);
    CHECK_MSG(same(&y, &ym), "dropout: the step in memory draws another mask than its key");
    const int n = 2, t = 9, c = 8, heads = 2;
    pp_tensor qkv = tnew(3, n, t, 3 * c, 1), dy = tnew(3, n, t, c, 1);
    double *qd = fill(&qkv, 0.0, 1.5), *rd = fill(&dy, 0.0, 1.0);
    pp_tensor ay, al, ad, my, ml, md;
    run_attention(g_dev, heads, &by_key, &qkv, &dy, &ay, &al, &ad);
    run_attention(g_dev, heads, &at, &qkv, &dy, &my, &ml, &md);
    CHECK_MSG(same(&ay, &my) && same(&al, &ml) && same(&ad, &md),
              "attention: the step in memory draws other masks than its key");
    /* the step moved on, the key not: refused by name */
    *(int64_t *)step.data = 10;
    pp_status s = pp_dropout_forward(&g_ex, &at, &x, &ym, &err);
    CHECK_MSG(s == PP_ERR_INTERNAL && strstr(err.msg, "step in memory (10)"), "dropout: %s",
              s == PP_OK ? "a stale key ran" : err.msg);
    pp_tensor yl = tnew(3, n, t, c, 1), ll = tnew(3, n, heads, t, 1);
    s = pp_attention_forward_dropout(&g_ex, heads, &at, &qkv, &yl, &ll, &err);
    CHECK_MSG(s == PP_ERR_INTERNAL && strstr(err.msg, "attention_forward"), "attention: %s",
              s == PP_OK ? "a stale key ran" : err.msg);
    /* p 0 draws nothing, whatever the step says */
    pp_dropout_desc off = at;
    off.p = 0.0f;
    CHECK_OK(pp_dropout_forward(&g_ex, &off, &x, &ym, &err), &err);
    CHECK(same(&x, &ym));
    /* the step tensor checked like an operand */
    pp_tensor f32 = tnew(1, 1, 1, 1, 1), two = tnew_on(g_dev, PP_I64, 1, 2, 1, 1, 1);
    pp_tensor other = tnew_on(g_dev1, PP_I64, 1, 1, 1, 1, 1);
    const pp_tensor *bad[] = {&f32, &two, &other};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pp_dropout_desc b = at;
        b.step = bad[i];
        s = pp_dropout_forward(&g_ex, &b, &x, &ym, &err);
        CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "the dropout's step"), "dropout: %s",
                  s == PP_OK ? "a bad step tensor ran" : err.msg);
        s = pp_attention_forward_dropout(&g_ex, heads, &b, &qkv, &yl, &ll, &err);
        CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "the dropout's step"), "attention: %s",
                  s == PP_OK ? "a bad step tensor ran" : err.msg);
    }
    free(xd), free(qd), free(rd);
    pp_tensor *ts[] = {&step, &x, &y, &ym, &qkv, &dy, &ay, &al, &ad, &my, &ml, &md,
                       &yl, &ll, &f32, &two, &other};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

/* ---- boundaries --------------------------------------------------------------------- */

static void test_boundaries(void)
{
    pp_error err;
    pp_tensor x = tnew(2, 2, 3, 1, 1), y = tnew(2, 2, 3, 1, 1), z = tnew(2, 3, 3, 1, 1);
    pp_tensor qkv = tnew(3, 1, 2, 6, 1), a = tnew(3, 1, 2, 2, 1), lse = tnew(3, 1, 1, 2, 1);
    static const float bad[] = {1.0f, -0.1f, 1.5f, NAN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const pp_dropout_desc d = {.p = bad[i], .key = 0, .first_sample = 0};
        CHECK(pp_dropout_forward(&g_ex, &d, &x, &y, &err) == PP_ERR_INVALID);
        CHECK(pp_attention_forward_dropout(&g_ex, 1, &d, &qkv, &a, &lse, &err) ==
              PP_ERR_INVALID);
    }
    const pp_dropout_desc d = {.p = 0.5f, .key = 0, .first_sample = 0};
    CHECK(pp_dropout_forward(&g_ex, &d, &x, &z, &err) == PP_ERR_INVALID); /* shapes */
    CHECK(pp_dropout_forward(&g_ex, NULL, &x, &y, &err) == PP_ERR_INVALID);
    pp_tensor *ts[] = {&x, &y, &z, &qkv, &a, &lse};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) pp_tensor_free(ts[i]);
}

int main(void)
{
    if (!op_check_setup()) return 1;
    if (!op_check_thread_devices(&g_one, &g_three)) return 1;
    test_elementwise();
    test_statistics();
    test_micro_batches();
    test_attention();
    test_step_in_memory();
    test_boundaries();
    CHECK(pp_device_bytes_in_use(g_one) == 0 && pp_device_bytes_in_use(g_three) == 0);
    op_check_teardown();
    return check_summary("test_ops_dropout");
}
