/*
 * test_ops_bf16_entries.c - how ops_transformer.c offers the transformer ops
 * to a backend's bf16 entries (runtime/core/backend.h, "bf16 transformer
 * entries"), on cpu:0 with its table copied and the entries filled in by
 * this test (the CPU backend has none of its own):
 *   - offered only when an operand is bf16, with each operand's dtype and
 *     data (an all-f32 call never reaches them);
 *   - an entry that declines (PP_ERR_UNSUPPORTED) leaves the op to the f32
 *     stand-ins (a fused op to its plain ops, which offer theirs): the
 *     outputs are the plain CPU backend's bits;
 *   - an entry that runs is the op (its outputs, no stand-in after it); the
 *     dense weight gradient's entry writes the call's f32 gradient, which
 *     the op rounds to bf16 and adds to the master gradient;
 *   - an entry's failure is the op's.
 * The ops: the dense layers (forward, + GELU, backward data, + GELU,
 * weights, the whole backward with and without the GELU), the layer norms (plain, add + norm, backward, backward +
 * residual gradient) and GELU forward and backward, with GPT-2's mixes.
 * The attention's bf16 entries are offered with dropout too (a backend
 * with a dropout entry draws the masks in them), the op's drop in d.
 */
/* op_check.h's finite differences and double references are not used here */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/ops/op_check.h"
#pragma GCC diagnostic pop

#include "runtime/core/backend.h"

typedef enum { DECLINE, RUN, FAIL } mode;

static mode g_mode;
static int g_calls;
static char g_first[32];  /* the entry called first */
static bool g_flags[6];   /* its activations' bf16 flags, in order */
static int g_nflags;

/* what RUN writes into an entry's outputs */
#define SENTINEL 0.375f

static void fill_act(pp_act a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (a.bf16)
            ((uint16_t *)a.data)[i] = pp_bf16_from_f32(SENTINEL);
        else
            ((float *)a.data)[i] = SENTINEL;
    }
}

/* Records the call; the status of the mode (RUN: out, of n elements, filled). */
static pp_status hit(const char *name, int k, const pp_act *acts, pp_act out, int64_t n,
                     pp_error *err)
{
    if (g_calls++ == 0) {
        snprintf(g_first, sizeof g_first, "%s", name);
        g_nflags = k;
        for (int i = 0; i < k; i++) g_flags[i] = acts[i].bf16;
    }
    if (g_mode == DECLINE) return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: declined", name);
    if (g_mode == FAIL) return pp_error_set(err, PP_ERR_BACKEND, "%s: failed", name);
    fill_act(out, n);
    return PP_OK;
}

#define HIT(name, out, n, ...) hit(name, (int)(sizeof((pp_act[]){__VA_ARGS__}) / sizeof(pp_act)), \
                                   (pp_act[]){__VA_ARGS__}, out, n, err)

static pp_status dense_fwd(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in, pp_act x,
                           pp_act w, const float *b, pp_act y, pp_error *err)
{
    (void)ex, (void)in, (void)w_out_in, (void)b;
    return HIT("dense_forward", y, rows * out, x, w, y);
}

static pp_status dense_gelu_fwd(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                pp_act x, pp_act w, const float *b, pp_act h, pp_act g,
                                pp_error *err)
{
    (void)ex, (void)in, (void)w_out_in, (void)b;
    if (g_mode == RUN) fill_act(h, rows * out);
    return HIT("dense_gelu_forward", g, rows * out, x, w, h, g);
}

static pp_status dense_bwd_data(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                pp_act w, pp_act dy, pp_act dx, pp_error *err)
{
    (void)ex, (void)out, (void)w_out_in;
    return HIT("dense_backward_data", dx, rows * in, w, dy, dx);
}

static pp_status dense_bwd_data_gelu(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                     pp_act w, pp_act dy, pp_act h, pp_act dh, pp_error *err)
{
    (void)ex, (void)out, (void)w_out_in;
    return HIT("dense_backward_data_gelu", dh, rows * in, w, dy, h, dh);
}

static pp_status dense_bwd_w(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                             pp_act x, pp_act dy, float *dw, float *db, pp_error *err)
{
    (void)ex, (void)rows, (void)w_out_in, (void)db;
    return HIT("dense_backward_weights", ((pp_act){dw, false}), (int64_t)in * out, x, dy);
}

static pp_status dense_bwd(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in, pp_act w,
                           pp_act x, pp_act dy, pp_act h, pp_act dx, float *dw, float *db,
                           pp_error *err)
{
    (void)ex, (void)w_out_in, (void)db;
    if (g_mode == RUN && dx.data) fill_act(dx, rows * in);
    return HIT("dense_backward", ((pp_act){dw, false}), (int64_t)in * out, w, x, dy, h, dx);
}

static pp_status ln_fwd(pp_exec *ex, int64_t rows, int c, float eps, pp_act a, pp_act add,
                        pp_act s, const float *gamma, const float *beta, pp_act y, float *mean,
                        float *rstd, pp_error *err)
{
    (void)ex, (void)eps, (void)gamma, (void)beta, (void)mean, (void)rstd;
    return add.data ? HIT("add_layernorm_forward", y, rows * c, a, add, s, y)
                    : HIT("layernorm_forward", y, rows * c, a, y);
}

static pp_status ln_bwd(pp_exec *ex, int64_t rows, int c, pp_act x, pp_act dy,
                        const float *gamma, const float *mean, const float *rstd, pp_act dres,
                        pp_act dx, float *dgamma, float *dbeta, pp_error *err)
{
    (void)ex, (void)gamma, (void)mean, (void)rstd, (void)dgamma, (void)dbeta;
    return dres.data ? HIT("layernorm_backward_add", dx, rows * c, x, dy, dres, dx)
                     : HIT("layernorm_backward", dx, rows * c, x, dy, dx);
}

static pp_status gelu_fwd(pp_exec *ex, int64_t n, pp_act x, pp_act y, pp_error *err)
{
    (void)ex;
    return HIT("gelu_forward", y, n, x, y);
}

static pp_status gelu_bwd(pp_exec *ex, int64_t n, pp_act x, pp_act dy, pp_act dx, pp_error *err)
{
    (void)ex;
    return HIT("gelu_backward", dx, n, x, dy, dx);
}

/* ---- the cases ------------------------------------------------------------------------- */

enum { R = 6, C = 8, H = 12 }; /* rows, features, hidden */

/* The operands of every case, made afresh (the same values) per run. */
typedef struct operands {
    pp_tensor x32, x16, w16, b, y16, y32, h16, g16, dy16, dy32, dx16, dw, db;
    pp_tensor s32, gm, be, mean, rstd, dres32, dx32, dg;
} operands;

static void fill_t(pp_tensor *t, uint64_t seed)
{
    g_rng = seed;
    for (int64_t i = 0; i < pp_tensor_numel(t); i++) {
        const float v = (float)urand();
        if (t->dtype == PP_BF16)
            ((uint16_t *)t->data)[i] = pp_bf16_from_f32(v);
        else
            fp(t)[i] = v;
    }
}

static void make(operands *o)
{
    pp_tensor *all[] = {&o->x32, &o->x16, &o->w16, &o->b,   &o->y16,  &o->y32,  &o->h16,
                        &o->g16, &o->dy16, &o->dy32, &o->dx16, &o->dw, &o->db, &o->s32,
                        &o->gm,  &o->be,  &o->mean, &o->rstd, &o->dres32, &o->dx32, &o->dg};
    o->x32 = tnew(2, R, C, 1, 1), o->x16 = tnew_on(g_dev, PP_BF16, 2, R, C, 1, 1);
    o->w16 = tnew_on(g_dev, PP_BF16, 2, C, H, 1, 1), o->b = tnew(1, H, 1, 1, 1);
    o->y16 = tnew_on(g_dev, PP_BF16, 2, R, H, 1, 1), o->y32 = tnew(2, R, H, 1, 1);
    o->h16 = tnew_on(g_dev, PP_BF16, 2, R, H, 1, 1), o->g16 = tnew_on(g_dev, PP_BF16, 2, R, H, 1, 1);
    o->dy16 = tnew_on(g_dev, PP_BF16, 2, R, H, 1, 1), o->dy32 = tnew(2, R, H, 1, 1);
    o->dx16 = tnew_on(g_dev, PP_BF16, 2, R, C, 1, 1), o->dw = tnew(2, C, H, 1, 1);
    o->db = tnew(1, H, 1, 1, 1), o->s32 = tnew(2, R, C, 1, 1);
    o->gm = tnew(1, C, 1, 1, 1), o->be = tnew(1, C, 1, 1, 1);
    o->mean = tnew(1, R, 1, 1, 1), o->rstd = tnew(1, R, 1, 1, 1);
    o->dres32 = tnew(2, R, C, 1, 1), o->dx32 = tnew(2, R, C, 1, 1), o->dg = tnew(1, C, 1, 1, 1);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fill_t(all[i], 11 + i);
    for (int i = 0; i < R; i++) fp(&o->rstd)[i] = 1.5f; /* a valid saved statistic */
}

static void unmake(operands *o)
{
    pp_tensor *all[] = {&o->x32, &o->x16, &o->w16, &o->b,   &o->y16,  &o->y32,  &o->h16,
                        &o->g16, &o->dy16, &o->dy32, &o->dx16, &o->dw, &o->db, &o->s32,
                        &o->gm,  &o->be,  &o->mean, &o->rstd, &o->dres32, &o->dx32, &o->dg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pp_tensor_free(all[i]);
}

typedef struct op_case {
    const char *entry;                  /* the entry it must reach */
    bool flags[6];                      /* the activations' bf16 flags it must pass */
    int nflags;
    pp_status (*run)(operands *o, pp_error *err);
    pp_tensor *(*out)(operands *o);     /* the output the entry writes */
} op_case;

#define EX (&g_ex)
static pp_status c_dense(operands *o, pp_error *err)
{
    return pp_dense_forward(EX, PP_WEIGHT_IN_OUT, &o->x16, &o->w16, &o->b, &o->y16, err);
}
static pp_status c_dense_f32y(operands *o, pp_error *err)
{
    return pp_dense_forward(EX, PP_WEIGHT_IN_OUT, &o->x16, &o->w16, &o->b, &o->y32, err);
}
static pp_status c_dense_gelu(operands *o, pp_error *err)
{
    return pp_dense_gelu_forward(EX, PP_WEIGHT_IN_OUT, &o->x16, &o->w16, &o->b, &o->h16,
                                 &o->g16, err);
}
static pp_status c_bwd_data(operands *o, pp_error *err)
{
    return pp_dense_backward_data(EX, PP_WEIGHT_IN_OUT, &o->w16, &o->dy16, &o->dx16, err);
}
static pp_status c_bwd_data_gelu(operands *o, pp_error *err)
{
    return pp_dense_backward_data_gelu(EX, PP_WEIGHT_IN_OUT, &o->w16, &o->dy32, &o->x16,
                                       &o->dx16, err);
}
static pp_status c_bwd_w(operands *o, pp_error *err)
{
    return pp_dense_backward_weights(EX, PP_WEIGHT_IN_OUT, &o->x16, &o->dy16, &o->dw, &o->db,
                                     err);
}
static pp_status c_bwd(operands *o, pp_error *err)
{
    return pp_dense_backward(EX, PP_WEIGHT_IN_OUT, &o->w16, &o->x16, &o->dy32, NULL, &o->dx16,
                             &o->dw, &o->db, err);
}
static pp_status c_bwd_gelu(operands *o, pp_error *err)
{
    return pp_dense_backward(EX, PP_WEIGHT_IN_OUT, &o->w16, &o->x16, &o->dy32, &o->x16,
                             &o->dx16, &o->dw, NULL, err);
}
static pp_status c_ln(operands *o, pp_error *err)
{
    return pp_layernorm_forward(EX, 1e-5f, &o->x32, &o->gm, &o->be, &o->dx16, &o->mean, &o->rstd,
                                err);
}
static pp_status c_add_ln(operands *o, pp_error *err)
{
    return pp_add_layernorm_forward(EX, 1e-5f, &o->x32, &o->s32, &o->gm, &o->be, &o->s32,
                                    &o->dx16, &o->mean, &o->rstd, err);
}
static pp_status c_ln_bwd(operands *o, pp_error *err)
{
    return pp_layernorm_backward(EX, &o->x32, &o->dx16, &o->gm, &o->mean, &o->rstd, &o->dx32,
                                 &o->dg, &o->be, err);
}
static pp_status c_ln_bwd_add(operands *o, pp_error *err)
{
    return pp_layernorm_backward_add(EX, &o->x32, &o->dx16, &o->gm, &o->mean, &o->rstd,
                                     &o->dres32, &o->dx32, &o->dg, &o->be, err);
}
static pp_status c_gelu(operands *o, pp_error *err)
{
    return pp_gelu_forward(EX, &o->h16, &o->g16, err);
}
static pp_status c_gelu_bwd(operands *o, pp_error *err)
{
    return pp_gelu_backward(EX, &o->h16, &o->dy16, &o->dy16, err);
}

static pp_tensor *o_y16(operands *o) { return &o->y16; }
static pp_tensor *o_y32(operands *o) { return &o->y32; }
static pp_tensor *o_g16(operands *o) { return &o->g16; }
static pp_tensor *o_dx16(operands *o) { return &o->dx16; }
static pp_tensor *o_dw(operands *o) { return &o->dw; }
static pp_tensor *o_dx32(operands *o) { return &o->dx32; }
static pp_tensor *o_dy16(operands *o) { return &o->dy16; }

static const op_case cases[] = {
    {"dense_forward", {1, 1, 1}, 3, c_dense, o_y16},
    {"dense_forward", {1, 1, 0}, 3, c_dense_f32y, o_y32},
    {"dense_gelu_forward", {1, 1, 1, 1}, 4, c_dense_gelu, o_g16},
    {"dense_backward_data", {1, 1, 1}, 3, c_bwd_data, o_dx16},
    {"dense_backward_data_gelu", {1, 0, 1, 1}, 4, c_bwd_data_gelu, o_dx16},
    {"dense_backward_weights", {1, 1}, 2, c_bwd_w, o_dw},
    {"dense_backward", {1, 1, 0, 0, 1}, 5, c_bwd, o_dw},
    {"dense_backward", {1, 1, 0, 1, 1}, 5, c_bwd_gelu, o_dx16},
    {"layernorm_forward", {0, 1}, 2, c_ln, o_dx16},
    {"add_layernorm_forward", {0, 0, 0, 1}, 4, c_add_ln, o_dx16},
    {"layernorm_backward", {0, 1, 0}, 3, c_ln_bwd, o_dx32},
    {"layernorm_backward_add", {0, 1, 0, 0}, 4, c_ln_bwd_add, o_dx32},
    {"gelu_forward", {1, 1}, 2, c_gelu, o_g16},
    {"gelu_backward", {1, 1, 1}, 3, c_gelu_bwd, o_dy16},
};

/* t's element i as f32 */
static float at(const pp_tensor *t, int64_t i)
{
    return t->dtype == PP_BF16 ? pp_f32_from_bf16(((uint16_t *)t->data)[i]) : fp(t)[i];
}

static void test_entries(const pp_backend_ops *cpu, const pp_backend_ops *with)
{
    pp_error err;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const op_case *k = &cases[i];
        /* the plain CPU backend: the stand-ins' bits */
        operands ref, o;
        make(&ref);
        g_dev->ops = cpu;
        CHECK_OK(k->run(&ref, &err), &err);
        const pp_tensor *want = k->out(&ref);
        /* declined: the stand-ins run, once offered with the operands' dtypes */
        g_dev->ops = with;
        g_mode = DECLINE, g_calls = 0;
        make(&o);
        CHECK_OK(k->run(&o, &err), &err);
        CHECK_MSG(g_calls >= 1 && !strcmp(g_first, k->entry), "%s (case %zu): %d calls, the "
                  "first to %s", k->entry, i, g_calls, g_calls ? g_first : "none");
        bool same = g_nflags == k->nflags;
        for (int j = 0; same && j < k->nflags; j++) same = g_flags[j] == k->flags[j];
        CHECK_MSG(same, "%s (case %zu): the operands' dtypes are not passed as they are",
                  k->entry, i);
        CHECK_MSG(memcmp(k->out(&o)->data, want->data, pp_tensor_bytes(want)) == 0,
                  "%s (case %zu) declined: not the stand-ins' bits", k->entry, i);
        unmake(&o);
        /* run: the entry's output is the op's */
        g_mode = RUN;
        make(&o);
        const pp_tensor *out = k->out(&o);
        float before = at(out, 1);
        CHECK_OK(k->run(&o, &err), &err);
        const float expect = out == &o.dw ? before + SENTINEL : SENTINEL;
        bool all = true;
        for (int64_t j = 0; j < pp_tensor_numel(out); j++)
            if (j == 1) all = all && at(out, j) == expect;
            else all = all && (out == &o.dw || at(out, j) == SENTINEL);
        CHECK_MSG(all, "%s (case %zu) run: the output is not the entry's", k->entry, i);
        unmake(&o);
        /* failed: the op's status */
        g_mode = FAIL;
        make(&o);
        CHECK(k->run(&o, &err) == PP_ERR_BACKEND);
        unmake(&o);
        unmake(&ref);
    }
    /* all f32: never offered */
    g_mode = FAIL, g_calls = 0;
    operands o;
    make(&o);
    CHECK_OK(pp_dense_forward(EX, PP_WEIGHT_IN_OUT, &o.s32, &o.dw, &o.b, &o.y32, &err), &err);
    CHECK_OK(pp_layernorm_forward(EX, 1e-5f, &o.x32, &o.gm, &o.be, &o.s32, &o.mean, &o.rstd,
                                  &err), &err);
    CHECK_OK(pp_gelu_forward(EX, &o.x32, &o.s32, &err), &err);
    CHECK_MSG(g_calls == 0, "an all-f32 op reached a bf16 entry (%s)", g_first);
    unmake(&o);
    g_dev->ops = cpu;
}

/* ---- attention: the bf16 entries get the op's drop ---------------------------------- */

static pp_dropout_desc g_drop; /* the drop of the last attention entry called */

static pp_status att_fwd(pp_exec *ex, const pp_attention_desc *d, const uint16_t *qkv,
                         uint16_t *y, float *lse, pp_error *err)
{
    (void)ex, (void)qkv, (void)y, (void)lse, (void)err;
    g_calls++, g_drop = d->drop;
    return PP_OK;
}

static pp_status att_bwd(pp_exec *ex, const pp_attention_desc *d, const uint16_t *qkv,
                         const uint16_t *y, const float *lse, const uint16_t *dy,
                         uint16_t *dqkv, pp_error *err)
{
    (void)ex, (void)qkv, (void)y, (void)lse, (void)dy, (void)dqkv, (void)err;
    g_calls++, g_drop = d->drop;
    return PP_OK;
}

static void test_attention(const pp_backend_ops *cpu, pp_backend_ops *with)
{
    pp_error err;
    const int64_t qs[3] = {2, 5, 12}, ys[3] = {2, 5, 4}, ls[3] = {2, 2, 5};
    pp_tensor qkv, y, lse;
    CHECK_OK(pp_tensor_zeros(&qkv, g_dev, PP_BF16, 3, qs, &err), &err);
    CHECK_OK(pp_tensor_zeros(&y, g_dev, PP_BF16, 3, ys, &err), &err);
    CHECK_OK(pp_tensor_zeros(&lse, g_dev, PP_F32, 3, ls, &err), &err);
    with->attention_forward_bf16 = att_fwd;
    with->attention_backward_bf16 = att_bwd;
    g_dev->ops = with;
    const pp_dropout_desc drop = {.p = 0.25f, .key = 0x1234, .first_sample = 7};
    static const struct { bool drop; } rows[] = {{false}, {true}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const pp_dropout_desc *dp = rows[i].drop ? &drop : NULL;
        g_calls = 0, g_drop = (pp_dropout_desc){.p = -1.0f, .key = 0, .first_sample = -1};
        CHECK_OK(pp_attention_forward_dropout(EX, 2, dp, &qkv, &y, &lse, &err), &err);
        CHECK_OK(pp_attention_backward_dropout(EX, 2, dp, &qkv, &y, &lse, &y, &qkv, &err), &err);
        const pp_dropout_desc want = rows[i].drop ? drop : (pp_dropout_desc){0};
        CHECK_MSG(g_calls == 2 && g_drop.p == want.p && g_drop.key == want.key &&
                      g_drop.first_sample == want.first_sample,
                  "attention %s dropout: %d calls of the bf16 entries, drop p %g first %lld",
                  rows[i].drop ? "with" : "without", g_calls, (double)g_drop.p,
                  (long long)g_drop.first_sample);
    }
    g_dev->ops = cpu;
    pp_tensor_free(&qkv), pp_tensor_free(&y), pp_tensor_free(&lse);
}

int main(void)
{
    if (!op_check_setup()) return 1;
    const pp_backend_ops *cpu = g_dev->ops;
    pp_backend_ops with = *cpu;
    with.dense_forward_bf16 = dense_fwd;
    with.dense_gelu_forward_bf16 = dense_gelu_fwd;
    with.dense_backward_data_bf16 = dense_bwd_data;
    with.dense_backward_data_gelu_bf16 = dense_bwd_data_gelu;
    with.dense_backward_weights_bf16 = dense_bwd_w;
    with.dense_backward_bf16 = dense_bwd;
    with.layernorm_forward_bf16 = ln_fwd;
    with.layernorm_backward_bf16 = ln_bwd;
    with.gelu_forward_bf16 = gelu_fwd;
    with.gelu_backward_bf16 = gelu_bwd;
    test_entries(cpu, &with);
    test_attention(cpu, &with);
    op_check_teardown();
    return check_summary("test_ops_bf16_entries");
}
