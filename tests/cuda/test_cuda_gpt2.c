/*
 * test_cuda_gpt2.c - GPT-2 on CUDA against the CPU backend. Exits 77 (skip)
 * without a GPU.
 *
 *   ops    every transformer op (runtime/core/ops.h) on cuda:0 against
 *          cpu:0 on the same random inputs, at GPT-2's sizes and odd ones:
 *          dense layers in both weight orders (with and without bias; the
 *          vocabulary projection of 50257 rows; TF32 too; fused with a GELU
 *          after them, forward, and before them, backward), layer norm (with
 *          the residual add and gradient fused too), GELU,
 *          attention (heads of 64, 17, 24 and 128 columns, t = 1024, 77
 *          and 64; in f32, ours on tensor cores in 3xTF32 where they take
 *          the shape (the default) and ours (PP_CUDA_ATTN=own); in bf16,
 *          ours, ours on tensor cores (mma) and cuDNN's fused attention,
 *          the bf16 within 8e-3: two bf16 steps), token and position
 *          embeddings, the classifier over 50257 classes in place (f32, and bf16 logits and gradient: within a
 *          bf16 unit, aliased or not, smoothing, top-k); dropout: the elementwise op (f32, bf16, in
 *          place) the CPU's bits, attention with dropout on the
 *          probabilities (f32, bf16: the tensor-core kernels under cudnn and
 *          mma where they take the shape, else ours; ours under own) within
 *          the attention's tolerances; the forward of the queries from a
 *          position on (generation's cache), f32 and bf16, one query over
 *          GPT-2's 1024 keys and many.
 *          Normalised errors within the CUDA suite's tolerances (cuda_rig.h:
 *          1e-4 forward, 1e-3 gradients; TF32 1e-2); the embeddings' sums,
 *          in double in the CPU's order, give its bits; parameter gradients
 *          are added twice (+=). Our own kernels' backwards give the same
 *          bits run to run. In bf16 (test_cuda_gpt2_bf16.c; the backend's
 *          bf16 entries: cuBLASLt's bf16 GEMMs, the mixed layer norms and
 *          GELU) with GPT-2's mixes of
 *          bf16 and f32 operands against the CPU's f32 stand-ins: bf16
 *          outputs within TOL_BF16 (a bf16 unit), f32 ones as above; an f32
 *          dy into bf16 GEMMs (c_proj's, from the f32 stream: rounded once on
 *          the GPU, not on the CPU) within TOL_BF16 too, its bias gradient
 *          exact (TOL_DB_F32_DY), dx and dw the bits of the rounded dy's;
 *          a dense layer's whole backward in one call (dy rounded once)
 *          the bits of its data and weight ops one after the other.
 *   steps  two SGD steps of a small GPT-2 whose head is tied to its token
 *          embedding, on cuda:0 in 1 stage and in 2 stages sharing the GPU
 *          (the tied embedding split: wte on the first, the head's copy on
 *          the second, its gradient summed into the embedding's), against
 *          the CPU's, by what the steps changed (updates.h), each tensor
 *          within NUDGE_K times what one ulp on every weight moves the CPU's
 *          own run (nudge.h), at least FLOOR; 2 stages against 1 likewise;
 *          with two GPUs also 2 stages on cuda:0 and cuda:1 (the tied
 *          gradient and weight by peer copies, pipeline/tied.c).
 *          Then the same in precision bf16 against the CPU's bf16 steps,
 *          each update within TOL_BF16_STEP (norm-wise) of the CPU's; and
 *          in fp32 with model.dropout 0.1 for six steps (the same masks on
 *          both, a new draw each step: the last two steps replay graphs,
 *          whose kernels read the step from memory). Each run's report
 *          says graphs on (with two steps replayed under dropout) or n/a.
 *          `test_cuda_gpt2 cpu` runs the steps with the CPU as the device
 *          under test, without a GPU: every figure 0, the yardstick not.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "runtime/cuda/sdpa.h"
#define PP_CHECK_COUNTERS /* test_cuda_gpt2_bf16.c counts here too */
#include "tests/check.h"
/* the rig's convolution and view helpers are not used here */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/cuda/cuda_rig.h"
#pragma GCC diagnostic pop
#include "tests/cuda/nudge.h"
#include "tests/cuda/updates.h"
#include "tests/cuda/gpt2_bf16.h"

#define TOL_TF32 1e-2

/* ---- ops ------------------------------------------------------------------------------ */

static void test_dense(rig *r, bool tf32)
{
    static const struct { int n, t, in, out; pp_weight_order order; bool bias; } cases[] = {
        {4, 33, 64, 192, PP_WEIGHT_IN_OUT, true},     /* c_attn's shape, small */
        {2, 64, 768, 3072, PP_WEIGHT_IN_OUT, true},   /* c_fc */
        {2, 17, 64, 50257, PP_WEIGHT_OUT_IN, false},  /* the tied head: (V, C) */
        {5, 0, 37, 11, PP_WEIGHT_OUT_IN, true},       /* 2-D, odd sizes */
    };
    const double fwd = tf32 ? TOL_TF32 : TOL_FWD, bwd = tf32 ? TOL_TF32 : TOL_BWD;
    pp_error merr;
    CHECK_OK(pp_device_set_math(r->gpu, tf32 ? PP_MATH_TF32 : PP_MATH_FP32, &merr), &merr);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, t = cases[i].t, in = cases[i].in, out = cases[i].out;
        const bool oi = cases[i].order == PP_WEIGHT_OUT_IN;
        const int nd = t ? 3 : 2; /* (n, t, features) or (n, features) */
        const int64_t xsh[3] = {n, t ? t : in, in}, ysh[3] = {n, t ? t : out, out};
        const int64_t ws[2] = {oi ? out : in, oi ? in : out};
        pair x = pair_rand(r, nd, xsh, -1, 1), dx = pair_rand(r, nd, xsh, 0, 0);
        pair y = pair_rand(r, nd, ysh, 0, 0), dy = pair_rand(r, nd, ysh, -1, 1);
        pair w = pair_rand(r, 2, ws, -0.1f, 0.1f), dw = pair_rand(r, 2, ws, -1, 1);
        pair b = pair_rand(r, 1, (int64_t[]){out}, -1, 1), db = pair_rand(r, 1, (int64_t[]){out}, -1, 1);
        const pp_weight_order o = cases[i].order;
        const bool hb = cases[i].bias;
        const char *m = tf32 ? "tf32" : "fp32";
        BOTH(r, pp_dense_forward(ex, o, &x.c, &w.c, hb ? &b.c : NULL, &y.c, err),
             pp_dense_forward(ex, o, &x.g, &w.g, hb ? &b.g : NULL, &y.g, err));
        CHECK_CLOSE(r, &y, fwd, "dense forward (%s) case %zu", m, i);
        BOTH(r, pp_dense_backward_data(ex, o, &w.c, &dy.c, &dx.c, err),
             pp_dense_backward_data(ex, o, &w.g, &dy.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, bwd, "dense backward data (%s) case %zu", m, i);
        for (int rep = 0; rep < 2; rep++)
            BOTH(r, pp_dense_backward_weights(ex, o, &x.c, &dy.c, &dw.c, hb ? &db.c : NULL, err),
                 pp_dense_backward_weights(ex, o, &x.g, &dy.g, &dw.g, hb ? &db.g : NULL, err));
        CHECK_CLOSE(r, &dw, bwd, "dense backward dw (%s, += twice) case %zu", m, i);
        CHECK_CLOSE(r, &db, TOL_BWD, "dense backward db (%s, += twice) case %zu", m, i);
        /* fused with a GELU: after the layer (h = y, g), and before it (x as the GELU's input) */
        pair g = pair_rand(r, nd, ysh, 0, 0);
        BOTH(r, pp_dense_gelu_forward(ex, o, &x.c, &w.c, hb ? &b.c : NULL, &y.c, &g.c, err),
             pp_dense_gelu_forward(ex, o, &x.g, &w.g, hb ? &b.g : NULL, &y.g, &g.g, err));
        CHECK_CLOSE(r, &y, fwd, "dense + GELU forward h (%s) case %zu", m, i);
        CHECK_CLOSE(r, &g, fwd, "dense + GELU forward g (%s) case %zu", m, i);
        BOTH(r, pp_dense_backward_data_gelu(ex, o, &w.c, &dy.c, &x.c, &dx.c, err),
             pp_dense_backward_data_gelu(ex, o, &w.g, &dy.g, &x.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, bwd, "dense backward data + GELU (%s) case %zu", m, i);
        pair_free(&g);
        pair *all[] = {&x, &dx, &y, &dy, &w, &dw, &b, &db};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
    CHECK_OK(pp_device_set_math(r->gpu, PP_MATH_FP32, &merr), &merr);
}

/* Runs call on the GPU into out twice (zeroed first each time when zero):
 * the two results' bits are equal. The GPU's out is then given back the bits
 * it held before, so that the pair's two sides still hold the same values
 * (out may be an accumulator that later checks add to on both sides). */
#define SAME_TWICE(r, out, zero, call, what)                                              \
    do {                                                                                  \
        pp_error e_;                                                                      \
        pp_exec *ex = &(r)->egpu;                                                         \
        pp_error *err = &e_;                                                              \
        const size_t bytes_ = pp_tensor_bytes(&(out)->g);                                 \
        unsigned char *h_ = malloc(bytes_), *h2_ = malloc(bytes_), *h0_ = malloc(bytes_);  \
        CHECK_OK(pp_tensor_to_host(&(out)->g, h0_, bytes_, err), err);                    \
        if (zero) CHECK_OK(pp_zero(ex, &(out)->g, err), err);                             \
        CHECK_OK(call, err);                                                              \
        CHECK_OK(pp_tensor_to_host(&(out)->g, h_, bytes_, err), err);                     \
        if (zero) CHECK_OK(pp_zero(ex, &(out)->g, err), err);                             \
        CHECK_OK(call, err);                                                              \
        CHECK_OK(pp_tensor_to_host(&(out)->g, h2_, bytes_, err), err);                    \
        CHECK_MSG(memcmp(h_, h2_, bytes_) == 0, "%s: two runs differ", what);            \
        CHECK_OK(pp_tensor_from_host(&(out)->g, h0_, bytes_, err), err);                  \
        free(h_), free(h2_), free(h0_);                                                   \
    } while (0)

static void test_layernorm_gelu(rig *r)
{
    static const struct { int rows, c; bool beta; } cases[] = {{8 * 33, 768, true},
                                                               {37, 50, false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int rows = cases[i].rows, c = cases[i].c;
        const int64_t xs[2] = {rows, c}, cs[1] = {c}, rs[1] = {rows};
        pair x = pair_rand(r, 2, xs, -3, 2), y = pair_rand(r, 2, xs, 0, 0);
        pair dy = pair_rand(r, 2, xs, -1, 1), dx = pair_rand(r, 2, xs, 0, 0);
        pair g = pair_rand(r, 1, cs, 0.5f, 1.5f), be = pair_rand(r, 1, cs, -1, 1);
        pair dg = pair_rand(r, 1, cs, -1, 1), dbe = pair_rand(r, 1, cs, -1, 1);
        pair mean = pair_rand(r, 1, rs, 0, 0), rstd = pair_rand(r, 1, rs, 0, 0);
        const bool hb = cases[i].beta;
        BOTH(r, pp_layernorm_forward(ex, 1e-5f, &x.c, &g.c, hb ? &be.c : NULL, &y.c, &mean.c,
                                     &rstd.c, err),
             pp_layernorm_forward(ex, 1e-5f, &x.g, &g.g, hb ? &be.g : NULL, &y.g, &mean.g,
                                  &rstd.g, err));
        CHECK_CLOSE(r, &y, TOL_FWD, "layernorm forward case %zu", i);
        CHECK_CLOSE(r, &mean, TOL_FWD, "layernorm mean case %zu", i);
        CHECK_CLOSE(r, &rstd, TOL_FWD, "layernorm rstd case %zu", i);
        for (int rep = 0; rep < 2; rep++)
            BOTH(r, pp_layernorm_backward(ex, &x.c, &dy.c, &g.c, &mean.c, &rstd.c, &dx.c, &dg.c,
                                          hb ? &dbe.c : NULL, err),
                 pp_layernorm_backward(ex, &x.g, &dy.g, &g.g, &mean.g, &rstd.g, &dx.g, &dg.g,
                                       hb ? &dbe.g : NULL, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "layernorm backward dx case %zu", i);
        CHECK_CLOSE(r, &dg, TOL_BWD, "layernorm backward dgamma (+= twice) case %zu", i);
        CHECK_CLOSE(r, &dbe, TOL_BWD, "layernorm backward dbeta (+= twice) case %zu", i);
        SAME_TWICE(r, &dg, true,
                   pp_layernorm_backward(ex, &x.g, &dy.g, &g.g, &mean.g, &rstd.g, &dx.g, &dg.g,
                                         NULL, err),
                   "layernorm backward dgamma");
        /* with the residual add (x = dx + x, in x) and the residual gradient (dy) */
        BOTH(r, pp_add_layernorm_forward(ex, 1e-5f, &dx.c, &x.c, &g.c, hb ? &be.c : NULL, &x.c,
                                         &y.c, &mean.c, &rstd.c, err),
             pp_add_layernorm_forward(ex, 1e-5f, &dx.g, &x.g, &g.g, hb ? &be.g : NULL, &x.g,
                                      &y.g, &mean.g, &rstd.g, err));
        CHECK_MSG(pair_bitwise(&x), "add + layernorm case %zu: the sum not the CPU's bits", i);
        CHECK_CLOSE(r, &y, TOL_FWD, "add + layernorm forward case %zu", i);
        BOTH(r, pp_layernorm_backward_add(ex, &x.c, &dy.c, &g.c, &mean.c, &rstd.c, &y.c, &dx.c,
                                          &dg.c, hb ? &dbe.c : NULL, err),
             pp_layernorm_backward_add(ex, &x.g, &dy.g, &g.g, &mean.g, &rstd.g, &y.g, &dx.g,
                                       &dg.g, hb ? &dbe.g : NULL, err));
        CHECK_CLOSE(r, &dx, TOL_BWD, "layernorm backward + residual gradient case %zu", i);
        CHECK_CLOSE(r, &dg, TOL_BWD, "layernorm backward + residual gradient dgamma case %zu", i);
        /* GELU on the layer norm's output, in place both ways */
        BOTH(r, pp_gelu_forward(ex, &y.c, &dx.c, err), pp_gelu_forward(ex, &y.g, &dx.g, err));
        CHECK_CLOSE(r, &dx, TOL_FWD, "gelu forward case %zu", i);
        BOTH(r, pp_gelu_backward(ex, &y.c, &dy.c, &dy.c, err),
             pp_gelu_backward(ex, &y.g, &dy.g, &dy.g, err));
        CHECK_CLOSE(r, &dy, TOL_BWD, "gelu backward (in place) case %zu", i);
        pair *all[] = {&x, &y, &dy, &dx, &g, &be, &dg, &dbe, &mean, &rstd};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
}

/* A pair of dtype dt holding f's values cast on each side (pp_cast). */
static pair pair_cast(rig *r, const pair *f, pp_dtype dt)
{
    pair p;
    pp_error aerr;
    CHECK_OK(pp_tensor_alloc(&p.c, r->cpu, dt, f->c.ndim, f->c.shape, &aerr), &aerr);
    CHECK_OK(pp_tensor_alloc(&p.g, r->gpu, dt, f->c.ndim, f->c.shape, &aerr), &aerr);
    BOTH(r, pp_cast(ex, &f->c, &p.c, err), pp_cast(ex, &f->g, &p.g, err));
    return p;
}

/* Attention in f32 (by default our tensor-core kernels in 3xTF32,
 * attention_tf32.cu, where they take the shape and agree with ours,
 * attention.cu, at its first call; ours under PP_CUDA_ATTN=own: both
 * within the suite's f32 tolerances, the record saying mma at heads of 64,
 * 24 and 128 and ours at heads of 17, with dropout too), and in bf16 (qkv,
 * y, dy and dqkv bf16: the CUDA backend's bf16 entries against the CPU's f32 arithmetic on widened
 * operands, each output rounded once) with each PP_CUDA_ATTN: own (our
 * kernels, attention_bf16.cu), mma (our tensor-core kernels,
 * attention_mma.cu, where they agree with ours at a shape's first call) and
 * cudnn (cuDNN's fused attention where it agrees with ours at a shape's
 * first call, sdpa.c; else mma's where they agree): y and dqkv within two
 * bf16 steps of the largest element, lse as f32's. At GPT-2's heads of 64
 * cuDNN must run both directions under cudnn, and the tensor-core kernels
 * under mma (heads of 128 too); at heads of 17 cuDNN must decline (c and hs
 * not multiples of 8) and ours run; at heads of 17 and 24 the tensor-core
 * kernels must decline (not multiples of 16) and ours run. Our backwards
 * give the same bits twice, the tensor-core one too (cuDNN's
 * flash-attention backward may accumulate dq in another order run to run:
 * not asked of it). With drop (dropout on the probabilities, the CPU's
 * masks) the same rows: under cudnn and mma the tensor-core kernels must
 * run where mma's do (heads of 64 and 128; cuDNN's never), ours elsewhere
 * and under own, each record's line saying "dropout: mma" or "dropout runs
 * ours"; every backward the same bits twice. */
#define TOL_ATT_BF16 8e-3

typedef enum attn_mode { ATTN_F32, ATTN_F32_OWN, ATTN_OWN, ATTN_CUDNN, ATTN_MMA } attn_mode;

/* The record of shape d with dropout p on f32 (f32) or bf16 operands on the
 * GPU's exec (attention_run.c keys it so): want (PP_SDPA_UNDECIDED: any)
 * in both directions, the forward's reason holding the words `reason`
 * (NULL: any), printed either way. */
static void check_choice(rig *r, const pp_attention_desc *d, float p, bool f32,
                         pp_sdpa_use want, const char *reason, size_t i)
{
    static const char *const uses[] = {"undecided", "cuDNN's", "ours", "mma's"};
    pp_attention_desc key;
    memset(&key, 0, sizeof key); /* compared bytewise */
    key.n = d->n, key.t = d->t, key.c = d->c, key.heads = d->heads, key.drop.p = p;
    pp_sdpa_choice *ch;
    pp_error err;
    CHECK_OK(pp_cuda_sdpa_choice(&r->egpu, &key, f32, &ch, &err), &err);
    for (int dir = 0; want != PP_SDPA_UNDECIDED && dir < 2; dir++) {
        const char *dn = dir ? "backward" : "forward";
        CHECK_MSG(ch->use[dir] == want && (dir || !reason || strstr(ch->why[dir], reason)),
                  "attention case %zu (%s, dropout %g): %s not %s (for want of '%s'): %s", i,
                  f32 ? "f32" : "bf16", (double)p, dn, uses[want], reason ? reason : "-",
                  ch->why[dir]);
    }
}

/* The bf16 record of shape d with drop's p (attention_run.c keys it so), both
 * directions: the tensor-core kernels ("dropout: mma") where mma, else ours
 * ("dropout runs ours"); never cuDNN's. */
static void check_dropout(rig *r, const pp_attention_desc *d, float p, bool mma, size_t i)
{
    pp_attention_desc key;
    memset(&key, 0, sizeof key); /* compared bytewise */
    key.n = d->n, key.t = d->t, key.c = d->c, key.heads = d->heads, key.drop.p = p;
    pp_sdpa_choice *ch;
    pp_error err;
    CHECK_OK(pp_cuda_sdpa_choice(&r->egpu, &key, false, &ch, &err), &err);
    const pp_sdpa_use want = mma ? PP_SDPA_MMA : PP_SDPA_OWN;
    const char *line = mma ? "dropout: mma" : "dropout runs ours";
    for (int dir = 0; dir < 2; dir++)
        CHECK_MSG(ch->use[dir] == want && strstr(ch->why[dir], line),
                  "attention with dropout, case %zu: not %s for dropout: %s", i,
                  mma ? "mma's" : "ours", ch->why[dir]);
}

static void test_attention(rig *r, attn_mode mode, const pp_dropout_desc *drop)
{
    /* cudnn, own: cuDNN's or ours must run under cudnn; mma: the bf16
     * tensor-core kernels must run under mma (else ours); tf32: the f32
     * ones (3xTF32) must run by default (else ours) */
    static const struct { int n, t, c, heads; bool cudnn, own, mma, tf32; } cases[] = {
        {2, 1024, 768, 12, true, false, true, true}, /* GPT-2 124M's, two samples */
        {4, 64, 768, 12, true, false, true, true},   /* GPT-2's heads at t = 64 */
        {3, 77, 51, 3, false, true, false, false},   /* heads of 17 */
        {3, 77, 96, 4, false, false, false, true},   /* heads of 24, odd t */
        {1, 300, 256, 2, false, false, true, true},  /* heads of 128 */
    };
    static const char *const names[] = {"f32", "f32, PP_CUDA_ATTN=own", "bf16, PP_CUDA_ATTN=own",
                                        "bf16, PP_CUDA_ATTN=cudnn", "bf16, PP_CUDA_ATTN=mma"};
    static const char *const env[] = {NULL, "own", "own", "cudnn", "mma"};
    const bool bf16 = mode >= ATTN_OWN;
    char m[64];
    snprintf(m, sizeof m, "%s%s", names[mode], drop ? ", dropout" : "");
    const double fwd = bf16 ? TOL_ATT_BF16 : TOL_FWD, bwd = bf16 ? TOL_ATT_BF16 : TOL_BWD;
    if (env[mode]) setenv("PP_CUDA_ATTN", env[mode], 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, t = cases[i].t, c = cases[i].c, h = cases[i].heads;
        const int64_t qs[3] = {n, t, 3 * c}, ys[3] = {n, t, c}, ls[3] = {n, h, t};
        /* the f32 operands; the op's own are bf16 casts of them for bf16 */
        pair qkv32 = pair_rand(r, 3, qs, -2, 2), dqkv32 = pair_rand(r, 3, qs, 0, 0);
        pair y32 = pair_rand(r, 3, ys, 0, 0), dy32 = pair_rand(r, 3, ys, -1, 1);
        pair lse = pair_rand(r, 3, ls, 0, 0);
        const pp_dtype dt = bf16 ? PP_BF16 : PP_F32;
        pair qkv = pair_cast(r, &qkv32, dt), dqkv = pair_cast(r, &dqkv32, dt);
        pair y = pair_cast(r, &y32, dt), dy = pair_cast(r, &dy32, dt);
        BOTH(r, pp_attention_forward_dropout(ex, h, drop, &qkv.c, &y.c, &lse.c, err),
             pp_attention_forward_dropout(ex, h, drop, &qkv.g, &y.g, &lse.g, err));
        BOTH(r, pp_cast(ex, &y.c, &y32.c, err), pp_cast(ex, &y.g, &y32.g, err));
        CHECK_CLOSE(r, &y32, fwd, "attention forward y (%s) case %zu", m, i);
        CHECK_CLOSE(r, &lse, TOL_FWD, "attention forward lse (%s) case %zu", m, i);
        BOTH(r,
             pp_attention_backward_dropout(ex, h, drop, &qkv.c, &y.c, &lse.c, &dy.c, &dqkv.c,
                                           err),
             pp_attention_backward_dropout(ex, h, drop, &qkv.g, &y.g, &lse.g, &dy.g, &dqkv.g,
                                           err));
        BOTH(r, pp_cast(ex, &dqkv.c, &dqkv32.c, err), pp_cast(ex, &dqkv.g, &dqkv32.g, err));
        CHECK_CLOSE(r, &dqkv32, bwd, "attention backward (%s) case %zu", m, i);
        if (mode != ATTN_CUDNN || drop) /* with dropout cuDNN's never runs */
            SAME_TWICE(r, &dqkv, false,
                       pp_attention_backward_dropout(ex, h, drop, &qkv.g, &y.g, &lse.g, &dy.g,
                                                     &dqkv.g, err),
                       "attention backward");
        const pp_attention_desc d = {.n = n, .t = t, .c = c, .heads = h};
        if (mode == ATTN_F32) /* 3xTF32 where it takes the shape, dropout or not */
            check_choice(r, &d, drop ? drop->p : 0.0f, true,
                         cases[i].tf32 ? PP_SDPA_MMA : PP_SDPA_OWN,
                         cases[i].tf32 ? NULL : "multiples of 8", i);
        else if (drop && bf16) /* cudnn and mma: mma's where they take the shape */
            check_dropout(r, &d, drop->p, mode != ATTN_OWN && cases[i].mma, i);
        else if (mode == ATTN_CUDNN)
            check_choice(r, &d, 0.0f, false,
                         cases[i].cudnn ? PP_SDPA_CUDNN
                         : cases[i].own ? PP_SDPA_OWN
                                        : PP_SDPA_UNDECIDED,
                         cases[i].own ? "multiples of 8" : NULL, i);
        else if (mode == ATTN_MMA)
            check_choice(r, &d, 0.0f, false, cases[i].mma ? PP_SDPA_MMA : PP_SDPA_OWN,
                         cases[i].mma ? NULL : "multiples of 16", i);
        pair *all[] = {&qkv, &dqkv, &y, &dy, &lse, &qkv32, &dqkv32, &y32, &dy32};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
    if (mode == ATTN_MMA || mode == ATTN_F32) /* which ran (with dropout too) */
        pp_cuda_sdpa_report(&r->egpu, stdout);
    if (mode == ATTN_CUDNN && !drop) { /* which attention ran, and a bad switch refused */
        pp_cuda_sdpa_report(&r->egpu, stdout);
        setenv("PP_CUDA_ATTN", "cuDNN", 1);
        const int64_t qs[3] = {1, 8, 24}, ys[3] = {1, 8, 8}, ls[3] = {1, 1, 8};
        pair qkv = pair_rand(r, 3, qs, -2, 2), y = pair_rand(r, 3, ys, 0, 0);
        pair lse = pair_rand(r, 3, ls, 0, 0);
        pair qkvb = pair_cast(r, &qkv, PP_BF16), yb = pair_cast(r, &y, PP_BF16);
        pp_error err;
        const pp_status s = pp_attention_forward(&r->egpu, 1, &qkvb.g, &yb.g, &lse.g, &err);
        CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "PP_CUDA_ATTN is 'cuDNN'"),
                  "PP_CUDA_ATTN=cuDNN: status %s, '%s'", pp_status_name(s), err.msg);
        pair *all[] = {&qkv, &y, &lse, &qkvb, &yb};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
    if (env[mode]) unsetenv("PP_CUDA_ATTN");
}

/* The forward of the queries from a position on (pp_attention_forward_from:
 * generation's cache of keys and values), f32 and bf16, under the default
 * PP_CUDA_ATTN (only our CUDA-core kernels take it): against the CPU's within
 * the attention's tolerances; one query at GPT-2's t and many. */
static void test_attention_from(rig *r)
{
    static const struct { int n, t, c, heads, q0; } cases[] = {
        {1, 1024, 768, 12, 1023}, /* a new token over GPT-2 124M's whole window */
        {1, 1024, 768, 12, 512},
        {2, 77, 96, 4, 40},       /* heads of 24, two samples */
        {1, 300, 256, 2, 299},    /* heads of 128 */
    };
    for (int bf = 0; bf < 2; bf++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int n = cases[i].n, t = cases[i].t, c = cases[i].c, h = cases[i].heads;
            const int q0 = cases[i].q0;
            const int64_t qs[3] = {n, t, 3 * c}, ys[3] = {n, t - q0, c}, ls[3] = {n, h, t - q0};
            pair qkv32 = pair_rand(r, 3, qs, -2, 2), y32 = pair_rand(r, 3, ys, 0, 0);
            pair lse = pair_rand(r, 3, ls, 0, 0);
            const pp_dtype dt = bf ? PP_BF16 : PP_F32;
            pair qkv = pair_cast(r, &qkv32, dt), y = pair_cast(r, &y32, dt);
            BOTH(r, pp_attention_forward_from(ex, h, q0, &qkv.c, &y.c, &lse.c, err),
                 pp_attention_forward_from(ex, h, q0, &qkv.g, &y.g, &lse.g, err));
            BOTH(r, pp_cast(ex, &y.c, &y32.c, err), pp_cast(ex, &y.g, &y32.g, err));
            CHECK_CLOSE(r, &y32, bf ? TOL_ATT_BF16 : TOL_FWD,
                        "attention from position %d (%s) case %zu", q0, bf ? "bf16" : "f32", i);
            CHECK_CLOSE(r, &lse, TOL_FWD, "attention from position %d lse (%s) case %zu", q0,
                        bf ? "bf16" : "f32", i);
            pair *all[] = {&qkv, &y, &lse, &qkv32, &y32};
            for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
        }
}

static void test_embeddings(rig *r)
{
    const int n = 8, t = 128, v = 50257, c = 768;
    int32_t *ids = malloc(sizeof(int32_t) * n * t);
    for (int i = 0; i < n * t; i++) { /* skewed: a few ids repeat often */
        frand(r);
        const uint64_t b = r->rng;
        ids[i] = (int32_t)((b >> 33) % 7 == 0 ? (b >> 40) % 10 : (b >> 20) % (uint64_t)v);
    }
    pair id = pair_from(r, PP_I32, 2, (int64_t[]){n, t}, ids);
    pair table = pair_rand(r, 2, (int64_t[]){v, c}, -1, 1);
    pair dtable = pair_rand(r, 2, (int64_t[]){v, c}, -1, 1);
    pair pos = pair_rand(r, 2, (int64_t[]){1024, c}, -1, 1);
    pair dpos = pair_rand(r, 2, (int64_t[]){1024, c}, -1, 1);
    pair y = pair_rand(r, 3, (int64_t[]){n, t, c}, 0, 0);
    pair dy = pair_rand(r, 3, (int64_t[]){n, t, c}, -1, 1);
    BOTH(r, pp_embedding_forward(ex, &id.c, &table.c, &y.c, err),
         pp_embedding_forward(ex, &id.g, &table.g, &y.g, err));
    CHECK_MSG(pair_bitwise(&y), "token embedding forward: not the CPU's bits");
    BOTH(r, pp_position_forward(ex, &y.c, &pos.c, &y.c, err),
         pp_position_forward(ex, &y.g, &pos.g, &y.g, err));
    CHECK_MSG(pair_bitwise(&y), "position embedding forward (in place): not the CPU's bits");
    for (int rep = 0; rep < 2; rep++) {
        BOTH(r, pp_embedding_backward(ex, &id.c, &dy.c, &dtable.c, err),
             pp_embedding_backward(ex, &id.g, &dy.g, &dtable.g, err));
        BOTH(r, pp_position_backward(ex, &dy.c, &dpos.c, err),
             pp_position_backward(ex, &dy.g, &dpos.g, err));
    }
    CHECK_MSG(pair_bitwise(&dtable), "token embedding backward (+= twice): not the CPU's bits");
    CHECK_MSG(pair_bitwise(&dpos), "position embedding backward (+= twice): not the CPU's bits");
    free(ids);
    pair *all[] = {&id, &table, &dtable, &pos, &dpos, &y, &dy};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
}

/* The classifier over f32 logits, and over bf16 logits with a bf16 gradient
 * (GPT-2's head in bf16: the CUDA bf16 kernel against the CPU's, which
 * widens, runs the f32 loop and rounds): the loss and counts within the f32
 * tolerances, the f32 gradient within TOL_BWD, the bf16 one within a bf16
 * unit; aliased or not, with label smoothing and top-k. */
static void test_classifier(rig *r)
{
    static const struct {
        int n, v;
        bool bf16, in_place;
        float eps;
        int top_k; /* 0: no top-k count */
    } cases[] = {{8 * 128, 50257, false, true, 0.0f, 0}, {2 * 128, 50257, true, true, 0.0f, 0},
                 {2 * 128, 50257, true, false, 0.1f, 5}, {37, 1000, true, true, 0.1f, 5},
                 {5, 1, true, false, 0.0f, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n, v = cases[i].v;
        const bool bf16 = cases[i].bf16, k = cases[i].top_k > 0;
        const int64_t shape[2] = {n, v};
        pair z = pair_rand(r, 2, shape, -6, 6), dz = pair_rand(r, 2, shape, 0, 0);
        pair zh = bf16 ? pair_bf16_of(r, &z) : z, dzh = bf16 ? pair_bf16_of(r, &z) : dz;
        pair labels = pair_labels(r, n, v, NULL);
        pair loss = pair_rand(r, 0, NULL, 0, 0);
        int32_t zero = 0;
        pair correct = pair_from(r, PP_I32, 0, NULL, &zero);
        pair correct_k = pair_from(r, PP_I32, 0, NULL, &zero);
        const pp_xent_desc d = {(float)n, cases[i].eps, k ? cases[i].top_k : 1};
        pair *dst = cases[i].in_place ? &zh : &dzh;
        BOTH(r,
             pp_softmax_xent_ex(ex, &d, &zh.c, &labels.c, &loss.c, &correct.c,
                                k ? &correct_k.c : NULL, &dst->c, err),
             pp_softmax_xent_ex(ex, &d, &zh.g, &labels.g, &loss.g, &correct.g,
                                k ? &correct_k.g : NULL, &dst->g, err));
        CHECK_CLOSE(r, &loss, TOL_FWD, "classifier loss (%d classes%s) case %zu", v,
                    bf16 ? ", bf16" : "", i);
        if (bf16)
            gpt2_close_bf16(r, dst, TOL_BF16, "classifier dlogits", i);
        else
            CHECK_CLOSE(r, dst, TOL_BWD, "classifier dlogits (%d classes) case %zu", v, i);
        int32_t h[4] = {-5, -6, -7, -8};
        pp_error e;
        CHECK_OK(pp_tensor_to_host(&correct.c, &h[0], sizeof h[0], &e), &e);
        CHECK_OK(pp_tensor_to_host(&correct.g, &h[1], sizeof h[1], &e), &e);
        CHECK_OK(pp_tensor_to_host(&correct_k.c, &h[2], sizeof h[2], &e), &e);
        CHECK_OK(pp_tensor_to_host(&correct_k.g, &h[3], sizeof h[3], &e), &e);
        CHECK_MSG(h[0] == h[1] && h[2] == h[3],
                  "classifier case %zu: correct cpu %d cuda %d, top-k cpu %d cuda %d", i, h[0],
                  h[1], h[2], h[3]);
        if (bf16) pair_free(&zh), pair_free(&dzh);
        pair *all[] = {&z, &dz, &labels, &loss, &correct, &correct_k};
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) pair_free(all[j]);
    }
}

/* ---- dropout --------------------------------------------------------------------------- */

/* The elementwise op (dropout.cu) the CPU's bits, f32 and bf16, in place
 * too, and with its step in device memory (what a replayed graph's kernels
 * read). (Attention with dropout: test_attention's rows with a drop.) */
static void test_dropout(rig *r)
{
    const pp_dropout_desc d = {.p = 0.1f, .key = pp_dropout_key(7, 2, 3), .first_sample = 5};
    const int64_t sh[3] = {3, 77, 101};
    pair x = pair_rand(r, 3, sh, -1, 1), y = pair_rand(r, 3, sh, 0, 0);
    BOTH(r, pp_dropout_forward(ex, &d, &x.c, &y.c, err),
         pp_dropout_forward(ex, &d, &x.g, &y.g, err));
    CHECK_CLOSE(r, &y, 0, "dropout forward");
    BOTH(r, pp_dropout_backward(ex, &d, &y.c, &y.c, err),
         pp_dropout_backward(ex, &d, &y.g, &y.g, err));
    CHECK_CLOSE(r, &y, 0, "dropout backward in place");
    pair xb = pair_bf16_of(r, &x), yb = pair_bf16_of(r, &y);
    BOTH(r, pp_dropout_forward(ex, &d, &xb.c, &yb.c, err),
         pp_dropout_forward(ex, &d, &xb.g, &yb.g, err));
    BOTH(r, pp_cast(ex, &yb.c, &y.c, err), pp_cast(ex, &yb.g, &y.g, err));
    CHECK_CLOSE(r, &y, 0, "dropout forward (bf16)");
    /* as a replayed graph's kernel gets it: the key of another step (the
     * captured one), the step in device memory: the CPU's bits of its key;
     * then the step moved on in memory, the same arguments: the new step's */
    pp_error e;
    pp_tensor step;
    CHECK_OK(pp_tensor_alloc(&step, r->gpu, PP_I64, 1, (const int64_t[]){1}, &e), &e);
    for (int64_t k = 2; k <= 3; k++) {
        const pp_dropout_desc dk = {.p = d.p, .key = pp_dropout_key(7, k, 3),
                                    .first_sample = d.first_sample};
        const pp_dropout_desc replay = {.p = d.p, .key = pp_dropout_key(7, 1, 3),
                                        .first_sample = d.first_sample, .step = &step,
                                        .seed = 7, .site = 3};
        CHECK_OK(pp_copy_from_host(&r->egpu, &k, &step, &e), &e);
        CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
        BOTH(r, pp_dropout_forward(ex, &dk, &x.c, &y.c, err),
             pp_dropout_forward(ex, &replay, &x.g, &y.g, err));
        CHECK_CLOSE(r, &y, 0, k == 2 ? "dropout forward, the step in memory"
                                     : "dropout forward, the next step in memory");
    }
    pp_tensor_free(&step);
    pair *all[] = {&x, &y, &xb, &yb};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
}

/* ---- training steps ------------------------------------------------------------------- */

static const char *const layouts[3] = {
    "  - {device: %s:0, layers: [wte, wpe, h, ln_f, lm_head]}\n",
    "  - {device: %s:0, layers: [wte, wpe, h.0]}\n"
    "  - {device: %s:0, layers: [h.1, ln_f, lm_head]}\n",
    "  - {device: %s:0, layers: [wte, wpe, h.0]}\n"
    "  - {device: %s:1, layers: [h.1, ln_f, lm_head]}\n",
};
static const char *const layout_names[3] = {"1 stage", "2 stages", "2 stages on 2 devices"};

/* The plans' precision: fp32, then bf16 (the bf16 entries in a whole step). */
static const char *g_precision = "fp32";
/* The plans' model.dropout: 0, then 0.1 in fp32 (the masks of both backends). */
static double g_dropout = 0;
/* steps per run: 2, and 6 with dropout (the batches alternate between two
 * host buffers, each a graph key: steps 1 and 2 warm up, 3 and 4 are
 * captured, 5 and 6 replayed, where a graph whose kernels took the step as
 * an argument would repeat steps 3 and 4's masks) */
static int g_steps = 2;

/* bf16 steps against the CPU's bf16 steps: each tensor's update within this
 * norm-wise relative difference (bf16 activations rounded the other way
 * here and there: no one-ulp yardstick), losses within 1e-2 relative. */
#define TOL_BF16_STEP 5e-2

static bool step_ok(const diff *d)
{
    return strcmp(g_precision, "bf16") ? d->ratio <= 1 : d->rel <= TOL_BF16_STEP;
}

/* g_steps steps of the small GPT-2 on kind ("cpu" or "cuda") in layout l. */
static void run_gpt2(const char *dir, int l, const char *kind, const char *init,
                     const char *load, const char *path, double *losses)
{
    char stages[512], text[4096];
    snprintf(stages, sizeof stages, layouts[l], kind, kind);
    snprintf(text, sizeof text,
             "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 256, "
             "block_size: 32, dropout: %g}\n"
             "batch: {size: 8, split_size: 4}\n"
             "schedule: 1f1b\n"
             "precision: %s\n"
             "optimizer: {type: sgd, lr: 0.01, momentum: 0.9, weight_decay: 0.0001}\n"
             "data: {format: text, file: \"%s/corpus.txt\", shuffle: true}\n"
             "seed: 5\nsteps: %d\nstages:\n%s",
             g_dropout, g_precision, dir, g_steps, stages);
    updates_run(text, g_steps, init, load, path, losses);
}

/* The kind of device under test: "cuda", or "cpu" to check the harness
 * without a GPU (then every figure is 0: a CPU pipeline gives the 1-stage
 * run's bits). */
static const char *g_kind = "cuda";

static void test_steps(const char *dir)
{
    char corpus[256], cpu[256], init[256], nudged[256], ycpu[256], gpu[3][256] = {"", "", ""};
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    FILE *f = fopen(corpus, "wb");
    CHECK(f != NULL);
    if (!f) return;
    static const char text[] = "It was the best of times, it was the worst of times, it was "
                               "the age of wisdom, it was the age of foolishness. ";
    for (int i = 0; i < 6000; i++) fputc(text[i % (sizeof text - 1)] ^ (i % 11 == 0), f);
    fclose(f);
    snprintf(cpu, sizeof cpu, "%s/gpt2-cpu.safetensors", dir);
    snprintf(init, sizeof init, "%s/gpt2-init.safetensors", dir);
    snprintf(nudged, sizeof nudged, "%s/gpt2-init-nudged.safetensors", dir);
    snprintf(ycpu, sizeof ycpu, "%s/gpt2-cpu-nudged.safetensors", dir);
    double cpu_loss[8] = {0}, y_loss[8] = {0}, gpu_loss[3][8] = {{0}};
    const int last = g_steps - 1;
    run_gpt2(dir, 0, "cpu", init, NULL, cpu, cpu_loss);
    nudge_checkpoint(init, nudged, 0);
    run_gpt2(dir, 0, "cpu", NULL, nudged, ycpu, y_loss);
    fprintf(stderr, "gpt2 %s cpu: losses %.7f .. %.7f; from the nudged weights %.7f .. %.7f\n",
            g_precision, cpu_loss[0], cpu_loss[last], y_loss[0], y_loss[last]);
    const double loss_floor = strcmp(g_precision, "bf16") ? 1e-4 : 1e-2;
    /* two devices: a peer copy of the tied gradient and weight (pipeline/tied.c) */
    const int layouts_run = !strcmp(g_kind, "cpu") || pp_cuda_device_count() > 1 ? 3 : 2;
    for (int l = 0; l < layouts_run; l++) {
        snprintf(gpu[l], sizeof gpu[l], "%s/gpt2-cuda%d.safetensors", dir, l);
        run_gpt2(dir, l, g_kind, NULL, NULL, gpu[l], gpu_loss[l]);
        /* graphs: on (the plans' default, dropout or not: its steps replayed
         * after two captures), n/a on the CPU */
        const bool cuda = strcmp(g_kind, "cpu") != 0;
        const char *want = !cuda ? "n/a" : "on";
        const int replays = !cuda ? 0 : g_steps - 4 > 0 ? g_steps - 4 : 0;
        CHECK_MSG(!strcmp(updates_graphs.graphs, want) && !updates_graphs.why[0] &&
                      updates_graphs.replays == replays,
                  "gpt2 %s, %s, dropout %g: cuda graphs %s (want %s), %d steps replayed (want "
                  "%d)%s%s", g_precision, layout_names[l], g_dropout, updates_graphs.graphs,
                  want, updates_graphs.replays, replays, updates_graphs.why[0] ? ": " : "",
                  updates_graphs.why);
        for (int i = 0; i < g_steps; i++)
            CHECK_MSG(loss_ok(gpu_loss[l][i], cpu_loss[i], y_loss[i], loss_floor),
                      "gpt2 %s, %s, step %d: loss %.7f on %s, %.7f on cpu (nudged %.7f)",
                      g_precision, layout_names[l], i, gpu_loss[l][i], g_kind, cpu_loss[i],
                      y_loss[i]);
        diff d = compare_with(gpu[l], cpu, init, ycpu, cpu);
        fprintf(stderr, "gpt2 %s %s %s vs cpu: losses %.6f .. %.6f (cpu %.6f .. %.6f), worst "
                        "update %s: %.2e, %.2f of its tolerance (nudge %.2e); graphs %s\n",
                g_kind, g_precision, layout_names[l], gpu_loss[l][0], gpu_loss[l][last],
                cpu_loss[0], cpu_loss[last], d.name, d.rel, d.ratio, d.yard,
                updates_graphs.graphs);
        CHECK_MSG(step_ok(&d), "gpt2 %s, %s vs cpu: %.2e at %s (nudge %.2e)", g_precision,
                  layout_names[l], d.rel, d.name, d.yard);
        if (!strcmp(g_kind, "cpu"))
            CHECK_MSG(d.rel == 0 && d.yard > 0 && gpu_loss[l][last] == cpu_loss[last],
                      "gpt2 on the cpu, %s: %.2e at %s, nudge %.2e (want 0 and > 0)",
                      layout_names[l], d.rel, d.name, d.yard);
        if (l == 0) continue;
        d = compare_with(gpu[l], gpu[0], init, ycpu, cpu);
        fprintf(stderr, "gpt2 %s %s %s (the tied embedding split) vs 1 stage: worst %s: %.2e, "
                        "%.2f of its tolerance\n",
                g_kind, g_precision, layout_names[l], d.name, d.rel, d.ratio);
        CHECK_MSG(step_ok(&d), "gpt2 %s %s vs 1 stage: %.2e at %s (nudge %.2e)", g_precision,
                  layout_names[l], d.rel, d.name, d.yard);
    }
    const char *files[] = {corpus, cpu, init, nudged, ycpu, gpu[0], gpu[1], gpu[2]};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) unlink(files[k]);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "cpu")) { /* the harness alone */
        g_kind = "cpu";
        char dir[200];
        if (!check_mkdtemp(dir, sizeof dir, "pp-cuda-gpt2")) return 1;
        test_steps(dir);
        g_precision = "bf16";
        test_steps(dir);
        g_precision = "fp32", g_dropout = 0.1, g_steps = 6;
        fprintf(stderr, "gpt2 fp32 with model.dropout %g, %d steps:\n", g_dropout, g_steps);
        test_steps(dir);
        rmdir(dir);
        return check_summary("test_cuda_gpt2 cpu");
    }
    if (pp_cuda_device_count() == 0) {
        fprintf(stderr, "test_cuda_gpt2: no CUDA device visible, skipping\n");
        return 77;
    }
    rig r;
    if (!rig_open(&r, 2468)) return check_summary("test_cuda_gpt2");
    test_dense(&r, false);
    test_dense(&r, true);
    test_layernorm_gelu(&r);
    gpt2_test_bf16(&r);
    test_attention(&r, ATTN_F32, NULL);
    test_attention(&r, ATTN_F32_OWN, NULL);
    test_attention(&r, ATTN_OWN, NULL);
    test_attention(&r, ATTN_CUDNN, NULL);
    test_attention(&r, ATTN_MMA, NULL);
    const pp_dropout_desc drop = {.p = 0.1f, .key = pp_dropout_key(7, 2, 4), .first_sample = 3};
    test_attention(&r, ATTN_F32, &drop);
    test_attention(&r, ATTN_F32_OWN, &drop);
    test_attention(&r, ATTN_CUDNN, &drop);
    test_attention(&r, ATTN_MMA, &drop);
    test_attention(&r, ATTN_OWN, &drop);
    test_attention_from(&r);
    test_embeddings(&r);
    test_classifier(&r);
    test_dropout(&r);
    rig_close(&r);
    char dir[200];
    if (!check_mkdtemp(dir, sizeof dir, "pp-cuda-gpt2")) return 1;
    unsetenv("PP_CUDA_GRAPHS"); /* the plans' default: on */
    test_steps(dir);
    g_precision = "bf16";
    test_steps(dir);
    g_precision = "fp32", g_dropout = 0.1, g_steps = 6;
    fprintf(stderr, "gpt2 fp32 with model.dropout %g, %d steps:\n", g_dropout, g_steps);
    test_steps(dir);
    rmdir(dir);
    return check_summary("test_cuda_gpt2");
}
