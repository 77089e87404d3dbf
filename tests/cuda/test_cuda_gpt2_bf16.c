/*
 * test_cuda_gpt2_bf16.c - test_cuda_gpt2's bf16 tables (gpt2_bf16.h): the
 * backend's bf16 entries (cuBLASLt's bf16 GEMMs in dense.c, the mixed layer
 * norms and GELU in transformer.c) on cuda:0 with GPT-2's mixes of bf16 and
 * f32 operands against the CPU's f32 stand-ins: bf16 outputs within TOL_BF16,
 * f32 ones within the suite's tolerances; an f32 dy into bf16 GEMMs rounded
 * once on the GPU (its bias gradient exact, dx and dw the bits of the rounded
 * dy's); a dense layer's whole backward in one call the bits of its data and
 * weight ops one after the other; which arithmetic a bf16 output with a bias
 * took at GPT-2's shapes (cuBLASLt's epilogue or the fp32 composition).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#define PP_CHECK_SHARED /* test_cuda_gpt2.c's counters */
#include "tests/check.h"
/* the rig's convolution and view helpers are not used here */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/cuda/cuda_rig.h"
#pragma GCC diagnostic pop
#include "tests/cuda/gpt2_bf16.h"

/* check_close on a bf16 pair, widened on each device */
void gpt2_close_bf16(rig *r, const pair *h, double tol, const char *what, size_t i)
{
    pair f = pair_rand(r, h->c.ndim, h->c.shape, 0, 0);
    BOTH(r, pp_cast(ex, &h->c, &f.c, err), pp_cast(ex, &h->g, &f.g, err));
    CHECK_CLOSE(r, &f, tol, "%s (bf16) case %zu", what, i);
    pair_free(&f);
}

/* The bias gradient from an f32 dy: the column sums of that dy in double on
 * both devices, an f32 rounding apart (dense.c keeps it exact; the sums of
 * the bf16-rounded copy would be about 1e-3 away at these sizes: 2^-9 / sqrt(3)
 * relative per element, a random walk over the rows, twice) */
#define TOL_DB_F32_DY 1e-5

/* From the f32 dy, the GPU's dx and dw (zeroed first, no bias: with one the
 * bf16 dy's GEMM fuses the bias gradient, another algorithm) have the bits
 * of the same GEMMs on dy rounded by pp_cast: the rounding is the only
 * departure from the bf16 dy's path (dense.c). For shapes cuBLASLt runs in
 * bf16: the stand-ins of a declined GEMM widen two different dy's. */
static void check_rounded_dy(rig *r, pp_weight_order o, const pair *w, const pair *x,
                             const pair *dy, const pair *dyf, pair *dx, pair *dw, size_t i)
{
    pp_error e;
    pp_exec *ex = &r->egpu;
    const size_t nx = pp_tensor_bytes(&dx->g), nw = pp_tensor_bytes(&dw->g);
    unsigned char *a = malloc(nx > nw ? nx : nw), *b = malloc(nx > nw ? nx : nw);
    const pair *dys[2] = {dy, dyf};
    for (int k = 0; k < 2; k++) {
        CHECK_OK(pp_dense_backward_data(ex, o, &w->g, &dys[k]->g, &dx->g, &e), &e);
        CHECK_OK(pp_exec_sync(ex, &e), &e);
        CHECK_OK(pp_tensor_to_host(&dx->g, k ? b : a, nx, &e), &e);
    }
    CHECK_MSG(memcmp(a, b, nx) == 0, "dense backward data case %zu: the f32 dy's dx not the "
              "bits of the rounded dy's", i);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(pp_zero(ex, &dw->g, &e), &e);
        CHECK_OK(pp_dense_backward_weights(ex, o, &x->g, &dys[k]->g, &dw->g, NULL, &e), &e);
        CHECK_OK(pp_exec_sync(ex, &e), &e);
        CHECK_OK(pp_tensor_to_host(&dw->g, k ? b : a, nw, &e), &e);
    }
    CHECK_MSG(memcmp(a, b, nw) == 0, "dense backward dw case %zu: the f32 dy's dw not the "
              "bits of the rounded dy's", i);
    free(a), free(b);
}

/* t's bytes on the host after ex's work (NULL t: none), appended at *at */
static void snap(pp_exec *ex, const pp_tensor *t, unsigned char **at)
{
    pp_error e;
    if (!t) return;
    CHECK_OK(pp_exec_sync(ex, &e), &e);
    CHECK_OK(pp_tensor_to_host(t, *at, pp_tensor_bytes(t), &e), &e);
    *at += pp_tensor_bytes(t);
}

/* A dense layer's whole backward in one call (pp_dense_backward: the
 * combined bf16 entry, an f32 dy rounded once for both GEMMs) against the
 * data op (through GELU'(h) with h) then the weight op on the GPU, each
 * output zeroed first: dx, dw and db the same bits; plain, with the GELU (h:
 * x) and without dx (the head's). */
static void check_combined(rig *r, pp_weight_order o, const pair *w, const pair *x,
                           const pair *dyf, pair *dx, pair *dw, pair *db, size_t i)
{
    pp_error e;
    pp_exec *ex = &r->egpu;
    const size_t n = pp_tensor_bytes(&dx->g) + pp_tensor_bytes(&dw->g) +
                     (db ? pp_tensor_bytes(&db->g) : 0);
    unsigned char *buf[2] = {malloc(n), malloc(n)};
    static const char *const names[3] = {"", " + GELU", " without dx"};
    pp_tensor *dbg = db ? &db->g : NULL;
    for (int v = 0; v < 3; v++) {
        const pp_tensor *h = v == 1 ? &x->g : NULL;
        pp_tensor *dxg = v == 2 ? NULL : &dx->g;
        for (int k = 0; k < 2; k++) {
            CHECK_OK(pp_zero(ex, &dx->g, &e), &e);
            CHECK_OK(pp_zero(ex, &dw->g, &e), &e);
            if (db) CHECK_OK(pp_zero(ex, dbg, &e), &e);
            if (k == 0)
                CHECK_OK(pp_dense_backward(ex, o, &w->g, &x->g, &dyf->g, h, dxg, &dw->g, dbg, &e),
                         &e);
            else if (h)
                CHECK_OK(pp_dense_backward_data_gelu(ex, o, &w->g, &dyf->g, h, dxg, &e), &e);
            else if (dxg)
                CHECK_OK(pp_dense_backward_data(ex, o, &w->g, &dyf->g, dxg, &e), &e);
            if (k == 1)
                CHECK_OK(pp_dense_backward_weights(ex, o, &x->g, &dyf->g, &dw->g, dbg, &e), &e);
            unsigned char *at = buf[k];
            snap(ex, &dx->g, &at), snap(ex, &dw->g, &at), snap(ex, dbg, &at);
        }
        CHECK_MSG(memcmp(buf[0], buf[1], n) == 0, "dense backward in one call%s (f32 dy) case "
                  "%zu: not the bits of the data and weight ops", names[v], i);
    }
    free(buf[0]), free(buf[1]);
}

/* Which arithmetic a bf16 dense layer with a bias ran (dense.c), told apart
 * by one sum at GPT-2's shapes (R 8192, C 768: c_attn's and c_fc's GEMMs as
 * cuBLASLt's heuristic sees them in the model): x W = 16 x 16 = 256 exactly
 * and b = 1 + 2^-10, so that the fp32 bias added before the one rounding
 * (the CPU's stand-ins; PP_CUDA_BF16_VIA_F32=1) gives bf16(257.0009765625) =
 * 258 and the bias rounded to bf16 first (cuBLASLt's epilogue, torch.autocast's
 * arithmetic) gives bf16(257) = 256, a tie to even; GELU(256) and GELU(258)
 * are themselves, so c_fc's h and g say the same. Either is right, and the
 * line "dense bf16 epilogues: ..." says which ran (part gpt2 prints it);
 * every element must be one of the two, the same throughout, and the fp32
 * one where PP_CUDA_BF16_VIA_F32 or PP_CUDA_BF16_WIDE is set. */
enum { BIAS_NEITHER = -1, BIAS_F32 = 0, BIAS_BF16 = 1 };

static int bias_arithmetic(const pp_tensor *t, const char *what, bool f32_only)
{
    pp_error e;
    const int64_t n = pp_tensor_numel(t);
    uint16_t *h = malloc((size_t)n * sizeof *h);
    CHECK_OK(pp_tensor_to_host(t, h, (size_t)n * sizeof *h, &e), &e);
    int64_t low = 0, high = 0; /* bf16 256 and 258 */
    for (int64_t i = 0; i < n; i++) low += h[i] == 0x4380, high += h[i] == 0x4381;
    free(h);
    const int a = low == n ? BIAS_BF16 : high == n ? BIAS_F32 : BIAS_NEITHER;
    CHECK_MSG(a != BIAS_NEITHER, "%s: %lld of %lld elements 256 (the bias rounded to bf16), "
              "%lld 258 (the fp32 bias): want all one or all the other", what, (long long)low,
              (long long)n, (long long)high);
    CHECK_MSG(!f32_only || a == BIAS_F32, "%s: the bias rounded to bf16 (256) where the fp32 "
              "composition was asked for", what);
    return a;
}

static void check_bias_arithmetic(rig *r)
{
    enum { R = 8192, C = 768 };
    pp_exec *ex = &r->egpu;
    pp_error e;
    const char *via = getenv("PP_CUDA_BF16_VIA_F32"), *wide = getenv("PP_CUDA_BF16_WIDE");
    const bool f32_only =
        (via && *via && strcmp(via, "0")) || (wide && *wide && strcmp(wide, "0"));
    static const char *const names[] = {"the fp32 bias, one rounding (the fp32 composition)",
                                        "the bias rounded to bf16 (cuBLASLt's epilogue)"};
    uint16_t *xh = calloc((size_t)R * C, sizeof *xh);
    uint16_t *wh = calloc((size_t)C * 4 * C, sizeof *wh);
    float *bh = malloc(4 * C * sizeof *bh);
    for (int i = 0; i < R; i++) xh[(size_t)i * C] = 0x4180; /* x[i][0] = 16 */
    for (int j = 0; j < 4 * C; j++) bh[j] = 1.0f + 0x1p-10f;
    pp_tensor x = {0}, w = {0}, b = {0}, y = {0}, g = {0};
    CHECK_OK(pp_tensor_alloc(&x, r->gpu, PP_BF16, 2, (int64_t[]){R, C}, &e), &e);
    CHECK_OK(pp_tensor_from_host(&x, xh, (size_t)R * C * sizeof *xh, &e), &e);
    int got[3] = {BIAS_NEITHER, BIAS_NEITHER, BIAS_NEITHER};
    for (int k = 0; k < 2; k++) { /* c_attn (3C), c_fc (4C) */
        const int out = (3 + k) * C;
        for (int j = 0; j < out; j++) wh[j] = 0x4180; /* w[0][j] = 16: (in, out) */
        CHECK_OK(pp_tensor_alloc(&w, r->gpu, PP_BF16, 2, (int64_t[]){C, out}, &e), &e);
        CHECK_OK(pp_tensor_from_host(&w, wh, (size_t)C * out * sizeof *wh, &e), &e);
        CHECK_OK(pp_tensor_alloc(&b, r->gpu, PP_F32, 1, (int64_t[]){out}, &e), &e);
        CHECK_OK(pp_tensor_from_host(&b, bh, (size_t)out * sizeof *bh, &e), &e);
        CHECK_OK(pp_tensor_alloc(&y, r->gpu, PP_BF16, 2, (int64_t[]){R, out}, &e), &e);
        CHECK_OK(pp_tensor_alloc(&g, r->gpu, PP_BF16, 2, (int64_t[]){R, out}, &e), &e);
        if (k == 0)
            CHECK_OK(pp_dense_forward(ex, PP_WEIGHT_IN_OUT, &x, &w, &b, &y, &e), &e);
        else
            CHECK_OK(pp_dense_gelu_forward(ex, PP_WEIGHT_IN_OUT, &x, &w, &b, &y, &g, &e), &e);
        CHECK_OK(pp_exec_sync(ex, &e), &e);
        got[k] = bias_arithmetic(&y, k ? "c_fc's h" : "c_attn's y", f32_only);
        if (k) got[2] = bias_arithmetic(&g, "c_fc's g", f32_only);
        pp_tensor *all[] = {&w, &b, &y, &g};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pp_tensor_free(all[i]);
    }
    CHECK_MSG(got[1] == got[2], "c_fc's h and g took different arithmetic");
    fprintf(stderr, "dense bf16 epilogues: c_attn's y: %s; c_fc's h: %s\n",
            got[0] < 0 ? "neither" : names[got[0]], got[1] < 0 ? "neither" : names[got[1]]);
    pp_tensor_free(&x);
    free(xh), free(wh), free(bh);
}

/* GPT-2's mixes: bf16 activations and weight copies through the dense
 * layers (an f32 y too: a projection into the f32 stream; an f32 dy: the
 * stream's gradient into c_proj, rounded once on the GPU; the head's dy,
 * the logits' gradient, is bf16), the f32 stream into bf16 layer norm outputs and a bf16
 * gradient back into it, GELU. */
void gpt2_test_bf16(rig *r)
{
    static const struct {
        int n, t, in, out;
        pp_weight_order order;
        bool bias, lt; /* lt: leading dimensions cuBLASLt's bf16 GEMMs take (multiples of 8) */
    } cases[] = {
        {2, 64, 768, 3072, PP_WEIGHT_IN_OUT, true, true},   /* c_fc */
        {2, 64, 3072, 768, PP_WEIGHT_IN_OUT, true, true},   /* mlp.c_proj: an f32 dy */
        {4, 33, 64, 192, PP_WEIGHT_IN_OUT, true, true},     /* c_attn's shape, small */
        {2, 17, 64, 50257, PP_WEIGHT_OUT_IN, false, false}, /* the tied head */
        {5, 0, 37, 11, PP_WEIGHT_OUT_IN, true, false},      /* odd sizes (declined: the
                                                               stand-ins) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, t = cases[i].t, in = cases[i].in, out = cases[i].out;
        const bool oi = cases[i].order == PP_WEIGHT_OUT_IN, hb = cases[i].bias;
        const pp_weight_order o = cases[i].order;
        const int nd = t ? 3 : 2;
        const int64_t xsh[3] = {n, t ? t : in, in}, ysh[3] = {n, t ? t : out, out};
        const int64_t ws[2] = {oi ? out : in, oi ? in : out};
        pair xf = pair_rand(r, nd, xsh, -1, 1), dyf = pair_rand(r, nd, ysh, -1, 1);
        pair wf = pair_rand(r, 2, ws, -0.1f, 0.1f), yf = pair_rand(r, nd, ysh, 0, 0);
        pair x = pair_bf16_of(r, &xf), dy = pair_bf16_of(r, &dyf), w = pair_bf16_of(r, &wf);
        pair y = pair_bf16_of(r, &yf), g = pair_bf16_of(r, &yf), dx = pair_bf16_of(r, &xf);
        pair dw = pair_rand(r, 2, ws, -1, 1), db = pair_rand(r, 1, (int64_t[]){out}, -1, 1);
        pair b = pair_rand(r, 1, (int64_t[]){out}, -1, 1);
        BOTH(r, pp_dense_forward(ex, o, &x.c, &w.c, hb ? &b.c : NULL, &y.c, err),
             pp_dense_forward(ex, o, &x.g, &w.g, hb ? &b.g : NULL, &y.g, err));
        gpt2_close_bf16(r, &y, TOL_BF16, "dense forward", i);
        BOTH(r, pp_dense_forward(ex, o, &x.c, &w.c, hb ? &b.c : NULL, &yf.c, err),
             pp_dense_forward(ex, o, &x.g, &w.g, hb ? &b.g : NULL, &yf.g, err));
        CHECK_CLOSE(r, &yf, TOL_FWD, "dense forward (bf16 in, f32 out) case %zu", i);
        BOTH(r, pp_dense_backward_data(ex, o, &w.c, &dy.c, &dx.c, err),
             pp_dense_backward_data(ex, o, &w.g, &dy.g, &dx.g, err));
        gpt2_close_bf16(r, &dx, TOL_BF16, "dense backward data", i);
        for (int rep = 0; rep < 2; rep++)
            BOTH(r, pp_dense_backward_weights(ex, o, &x.c, &dy.c, &dw.c, hb ? &db.c : NULL, err),
                 pp_dense_backward_weights(ex, o, &x.g, &dy.g, &dw.g, hb ? &db.g : NULL, err));
        CHECK_CLOSE(r, &dw, TOL_BF16, "dense backward dw (bf16, += twice) case %zu", i);
        CHECK_CLOSE(r, &db, TOL_BWD, "dense backward db (bf16, += twice) case %zu", i);
        BOTH(r, pp_dense_gelu_forward(ex, o, &x.c, &w.c, hb ? &b.c : NULL, &y.c, &g.c, err),
             pp_dense_gelu_forward(ex, o, &x.g, &w.g, hb ? &b.g : NULL, &y.g, &g.g, err));
        gpt2_close_bf16(r, &y, TOL_BF16, "dense + GELU forward h", i);
        gpt2_close_bf16(r, &g, TOL_BF16, "dense + GELU forward g", i);
        BOTH(r, pp_dense_backward_data_gelu(ex, o, &w.c, &dy.c, &x.c, &dx.c, err),
             pp_dense_backward_data_gelu(ex, o, &w.g, &dy.g, &x.g, &dx.g, err));
        gpt2_close_bf16(r, &dx, TOL_BF16, "dense backward data + GELU", i);
        /* the f32 dy with the bf16 w and x: the GPU rounds it (dense.c), the CPU not */
        pair dxf = pair_rand(r, nd, xsh, 0, 0), dw2 = pair_rand(r, 2, ws, -1, 1);
        pair db2 = pair_rand(r, 1, (int64_t[]){out}, -1, 1);
        BOTH(r, pp_dense_backward_data(ex, o, &w.c, &dyf.c, &dx.c, err),
             pp_dense_backward_data(ex, o, &w.g, &dyf.g, &dx.g, err));
        gpt2_close_bf16(r, &dx, TOL_BF16, "dense backward data, f32 dy", i);
        BOTH(r, pp_dense_backward_data(ex, o, &w.c, &dyf.c, &dxf.c, err),
             pp_dense_backward_data(ex, o, &w.g, &dyf.g, &dxf.g, err));
        CHECK_CLOSE(r, &dxf, TOL_BF16, "dense backward data (f32 dy, f32 dx) case %zu", i);
        for (int rep = 0; rep < 2; rep++)
            BOTH(r, pp_dense_backward_weights(ex, o, &x.c, &dyf.c, &dw2.c, hb ? &db2.c : NULL,
                                              err),
                 pp_dense_backward_weights(ex, o, &x.g, &dyf.g, &dw2.g, hb ? &db2.g : NULL,
                                           err));
        CHECK_CLOSE(r, &dw2, TOL_BF16, "dense backward dw (f32 dy, += twice) case %zu", i);
        CHECK_CLOSE(r, &db2, TOL_DB_F32_DY, "dense backward db (f32 dy, += twice) case %zu", i);
        BOTH(r, pp_dense_backward_data_gelu(ex, o, &w.c, &dyf.c, &x.c, &dx.c, err),
             pp_dense_backward_data_gelu(ex, o, &w.g, &dyf.g, &x.g, &dx.g, err));
        gpt2_close_bf16(r, &dx, TOL_BF16, "dense backward data + GELU, f32 dy", i);
        if (cases[i].lt) check_rounded_dy(r, o, &w, &x, &dy, &dyf, &dx, &dw2, i);
        check_combined(r, o, &w, &x, &dyf, &dx, &dw2, hb ? &db2 : NULL, i);
        pair *all[] = {&xf, &dyf, &wf, &yf, &x, &dy, &w, &y, &g, &dx, &dw, &db, &b, &dxf, &dw2,
                       &db2};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
    check_bias_arithmetic(r);
    /* layer norms: the f32 stream in, bf16 out; a bf16 gradient into the f32 stream */
    const int rows = 8 * 33, c = 768;
    const int64_t xs[2] = {rows, c}, cs[1] = {c}, rs[1] = {rows};
    pair x = pair_rand(r, 2, xs, -3, 2), a = pair_rand(r, 2, xs, -1, 1);
    pair dx = pair_rand(r, 2, xs, 0, 0), res = pair_rand(r, 2, xs, -1, 1);
    pair gm = pair_rand(r, 1, cs, 0.5f, 1.5f), be = pair_rand(r, 1, cs, -1, 1);
    pair dg = pair_rand(r, 1, cs, -1, 1), dbe = pair_rand(r, 1, cs, -1, 1);
    pair mean = pair_rand(r, 1, rs, 0, 0), rstd = pair_rand(r, 1, rs, 0, 0);
    pair y = pair_bf16_of(r, &dx), dy = pair_bf16_of(r, &res), gl = pair_bf16_of(r, &dx);
    BOTH(r, pp_layernorm_forward(ex, 1e-5f, &x.c, &gm.c, &be.c, &y.c, &mean.c, &rstd.c, err),
         pp_layernorm_forward(ex, 1e-5f, &x.g, &gm.g, &be.g, &y.g, &mean.g, &rstd.g, err));
    gpt2_close_bf16(r, &y, TOL_BF16, "layernorm forward, f32 in", 0);
    CHECK_CLOSE(r, &rstd, TOL_FWD, "layernorm rstd (bf16 y)");
    BOTH(r, pp_add_layernorm_forward(ex, 1e-5f, &a.c, &x.c, &gm.c, &be.c, &x.c, &y.c, &mean.c,
                                     &rstd.c, err),
         pp_add_layernorm_forward(ex, 1e-5f, &a.g, &x.g, &gm.g, &be.g, &x.g, &y.g, &mean.g,
                                  &rstd.g, err));
    CHECK_MSG(pair_bitwise(&x), "add + layernorm (bf16 y): the f32 sum not the CPU's bits");
    gpt2_close_bf16(r, &y, TOL_BF16, "add + layernorm forward, f32 in", 0);
    for (int rep = 0; rep < 2; rep++)
        BOTH(r, pp_layernorm_backward_add(ex, &x.c, &dy.c, &gm.c, &mean.c, &rstd.c, &res.c,
                                          &dx.c, &dg.c, &be.c, err),
             pp_layernorm_backward_add(ex, &x.g, &dy.g, &gm.g, &mean.g, &rstd.g, &res.g,
                                       &dx.g, &dg.g, &be.g, err));
    CHECK_CLOSE(r, &dx, TOL_BWD, "layernorm backward + residual gradient (bf16 dy)");
    CHECK_CLOSE(r, &dg, TOL_BWD, "layernorm backward dgamma (bf16 dy, += twice)");
    /* GELU on bf16, and its backward in place */
    BOTH(r, pp_gelu_forward(ex, &y.c, &gl.c, err), pp_gelu_forward(ex, &y.g, &gl.g, err));
    gpt2_close_bf16(r, &gl, TOL_BF16, "gelu forward", 0);
    BOTH(r, pp_gelu_backward(ex, &y.c, &dy.c, &dy.c, err),
         pp_gelu_backward(ex, &y.g, &dy.g, &dy.g, err));
    gpt2_close_bf16(r, &dy, TOL_BF16, "gelu backward in place", 0);
    pair *all[] = {&x, &a, &dx, &res, &gm, &be, &dg, &dbe, &mean, &rstd, &y, &dy, &gl};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
}
