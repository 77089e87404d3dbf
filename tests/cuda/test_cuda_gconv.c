/*
 * test_cuda_gconv.c - convolutions through cuDNN's graph API (cuda_gconv)
 * and the bf16 linear layer through cuBLASLt (cuda_blaslt) against the CPU
 * backend's fp32 ops, on inputs that are exact in bf16.
 *
 * Convolutions: every direction, bf16 and fp32, NHWC and NCHW, beta 0
 * (output first filled with NaN: it must be overwritten) and beta 1 with
 * alpha 2 (the result added to what the output held, which timing must not
 * have touched), the first call (plans made and timed) and a second one
 * (cached plan), for 1x1, 3x3 stride 2 and 7x7 stride 2 pad 3 with C = 3 and
 * C = 4. PP_ERR_UNSUPPORTED is accepted only where C is not a multiple of 8
 * (cuDNN may have no engine for such rows; the caller falls back), and is
 * counted in the log.
 *
 * The bound (why a right result passes and a wrong one does not): inputs are
 * bf16 (8 significant bits), so every product of two is exact in fp32
 * (16 bits). Each output element is a sum of L such products (L = C*R*S for
 * fwd, at most K*R*S for dgrad, N*P*Q for wgrad; in for the linear forward,
 * out for dx, n for dw and db). Summed in fp32 in any order, it is within
 * L * 2^-24 * M of the exact sum, M = sum |a||b| over its terms, on the GPU
 * and on the CPU alike: 2 * L * 2^-24 * M between them. Engines that
 * transform operands (Winograd, FFT) are bounded over the tensor rather than
 * per element, so M is taken as the tensor's largest and the sum term doubled
 * again: 4 * L * 2^-24 * max M (times |alpha|). A bf16 output is then rounded
 * once: within 2^-9 of its magnitude, allowed 2^-8 (one unit of the last
 * place, in case an epilogue truncates). With beta != 0 a bf16 output is
 * rounded twice: cuDNN's engines round alpha * (the sum) to the output type
 * and then round its blend with beta * (the prior bf16 value) again (seen on
 * an H200 with cuDNN 9.19: one bf16 unit off the nearest value, 1.3-1.7 of a
 * single-rounding bound), so the rounding term there is 2^-8 of |the
 * result| plus 2^-8 of |alpha * the sum|; the CPU backend, which blends in
 * fp32 and rounds once, stays within it. fp32 outputs get 2^-22 of their
 * magnitude for the final blend with beta. A wrong index, layout or
 * direction is off by the order of M, which is 10^3 times the bound at most.
 *
 * Exits 77 (meson's skip) when no CUDA device is visible.
 */
#include <cuda_runtime.h>

#include "runtime/cuda/blaslt.h"
#include "runtime/cuda/gconv.h"
#include "runtime/cuda/internal.h"
/* the rig's pair helpers are not used here */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/cuda/cuda_rig.h"
#pragma GCC diagnostic pop

static const char *const dir_names[] = {"fwd", "dgrad", "wgrad"};

/* ---- host data -------------------------------------------------------------------- */

static float bf16_exact(float f)
{
    return pp_f32_from_bf16(pp_bf16_from_f32(f));
}

/* n values uniform in [lo, hi), rounded to bf16. */
static float *rand_bf16(rig *r, int64_t n, float lo, float hi)
{
    float *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = bf16_exact(lo + (hi - lo) * 0.5f * (frand(r) + 1.0f));
    return h;
}

static float *abs_of(const float *a, int64_t n)
{
    float *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = fabsf(a[i]);
    return h;
}

/* A 4-D array of dims (A,B,C,D) in NCHW order between NCHW memory and the
 * layout's (NHWC: A,C,D,B). */
static void to_layout(const float *src, const int64_t dims[4], bool nhwc, float *dst)
{
    const int64_t A = dims[0], B = dims[1], C = dims[2], D = dims[3];
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t d = 0; d < D; d++) {
                    int64_t i = ((a * B + b) * C + c) * D + d;
                    int64_t j = nhwc ? ((a * C + c) * D + d) * B + b : i;
                    dst[j] = src[i];
                }
}

static void from_layout(const float *src, const int64_t dims[4], bool nhwc, float *dst)
{
    const int64_t A = dims[0], B = dims[1], C = dims[2], D = dims[3];
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t d = 0; d < D; d++) {
                    int64_t i = ((a * B + b) * C + c) * D + d;
                    int64_t j = nhwc ? ((a * C + c) * D + d) * B + b : i;
                    dst[i] = src[j];
                }
}

/* ---- device buffers (raw memory of the GPU) ------------------------------------------ */

typedef struct dbuf {
    void *p;
    size_t bytes;
} dbuf;

static size_t elem_size(pp_dtype dt)
{
    return dt == PP_BF16 ? 2 : 4;
}

static dbuf dbuf_new(rig *r, int64_t n, pp_dtype dt)
{
    dbuf b = {NULL, (size_t)n * elem_size(dt)};
    pp_error e;
    CHECK_OK(pp_device_alloc(r->gpu, b.bytes, &b.p, &e), &e);
    return b;
}

static void dbuf_free(rig *r, dbuf *b)
{
    pp_device_free(r->gpu, b->p, b->bytes);
    b->p = NULL;
}

/* Writes n host floats as dt (bf16 values are exact by construction). */
static void dbuf_put(dbuf *b, const float *h, int64_t n, pp_dtype dt)
{
    void *tmp = malloc(b->bytes ? b->bytes : 1);
    for (int64_t i = 0; i < n; i++) {
        if (dt == PP_BF16)
            ((uint16_t *)tmp)[i] = pp_bf16_from_f32(h[i]);
        else
            ((float *)tmp)[i] = h[i];
    }
    CHECK(cudaMemcpy(b->p, tmp, b->bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    free(tmp);
}

/* Fills with NaN (0xff bytes: NaN in bf16 and fp32). */
static void dbuf_nan(dbuf *b)
{
    CHECK(cudaMemset(b->p, 0xff, b->bytes) == cudaSuccess);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

static void dbuf_get(rig *r, const dbuf *b, float *h, int64_t n, pp_dtype dt)
{
    pp_error e;
    CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
    void *tmp = malloc(b->bytes ? b->bytes : 1);
    CHECK(cudaMemcpy(tmp, b->p, b->bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int64_t i = 0; i < n; i++)
        h[i] = dt == PP_BF16 ? pp_f32_from_bf16(((uint16_t *)tmp)[i]) : ((float *)tmp)[i];
    free(tmp);
}

/* ---- the comparison ----------------------------------------------------------------------- */

/* Checks got against want element by element within the bound above; mag is
 * the largest M of the tensor, L the sum length, in_rel how far the engine
 * may round its inputs (0 but in the TF32 test). Returns the worst error
 * relative to its bound (for the log). */
static double check_bound_blend(const float *got, const float *want, const float *sum,
                                int64_t n, double mag, int64_t L, double alpha, pp_dtype dt,
                                double in_rel, const char *label)
{
    const double sum_tol = 4.0 * ((double)L * ldexp(1.0, -24) + in_rel) * fabs(alpha) * mag;
    const double rel = dt == PP_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -22);
    double worst = 0.0;
    int64_t wi = 0;
    for (int64_t i = 0; i < n; i++) {
        double tol = sum_tol + rel * fabs((double)want[i]) + 1e-30;
        /* the second rounding of a blended bf16 output (see the top) */
        if (sum && dt == PP_BF16) tol += rel * fabs(alpha * (double)sum[i]);
        double q = fabs((double)got[i] - (double)want[i]) / tol;
        if (!(q <= worst)) { /* NaN counts as worst */
            worst = q;
            wi = i;
        }
    }
    CHECK_MSG(worst <= 1.0,
              "%s: error %.3g of the bound at #%lld: %.9g, want %.9g (L %lld, max M %.4g)", label,
              worst, (long long)wi, n ? got[wi] : 0.0, n ? want[wi] : 0.0, (long long)L, mag);
    return worst;
}

/* The bound of an output rounded once (beta 0, or an fp32 output). */
static double check_bound(const float *got, const float *want, int64_t n, double mag, int64_t L,
                          double alpha, pp_dtype dt, double in_rel, const char *label)
{
    return check_bound_blend(got, want, NULL, n, mag, L, alpha, dt, in_rel, label);
}

static double max_of(const float *a, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, a[i]);
    return m;
}

/* ---- the CPU reference ---------------------------------------------------------------------- */

/* Roles of a convolution's tensors: X (N,C,H,W), W (K,C,R,S), Y (N,K,P,Q). */
typedef enum role { ROLE_X, ROLE_W, ROLE_Y } role;

static void dims_of(const pp_conv2d_desc *d, role ro, int64_t dims[4])
{
    const int64_t all[3][4] = {{d->n, d->c, d->h, d->w}, {d->k, d->c, d->r, d->s},
                               {d->n, d->k, d->p, d->q}};
    memcpy(dims, all[ro], sizeof all[ro]);
}

static int64_t count_of(const pp_conv2d_desc *d, role ro)
{
    int64_t dims[4];
    dims_of(d, ro, dims);
    return dims[0] * dims[1] * dims[2] * dims[3];
}

static const role role_a[3] = {ROLE_X, ROLE_Y, ROLE_X};
static const role role_b[3] = {ROLE_W, ROLE_W, ROLE_Y};
static const role role_out[3] = {ROLE_Y, ROLE_X, ROLE_W};

/* A CPU tensor of role ro holding h (NULL: zeros). */
static pp_tensor cpu_tensor(rig *r, const pp_conv2d_desc *d, role ro, const float *h)
{
    int64_t dims[4];
    dims_of(d, ro, dims);
    pp_tensor t;
    pp_error e;
    CHECK_OK(pp_tensor_zeros(&t, r->cpu, PP_F32, 4, dims, &e), &e);
    if (h) memcpy(t.data, h, (size_t)count_of(d, ro) * sizeof(float));
    return t;
}

/* The CPU's result of direction dir on NCHW host arrays a, b (malloc'ed). */
static float *cpu_conv(rig *r, const pp_conv2d_desc *d, pp_gconv_dir dir, const float *a,
                       const float *b)
{
    pp_tensor ta = cpu_tensor(r, d, role_a[dir], a), tb = cpu_tensor(r, d, role_b[dir], b);
    pp_tensor to = cpu_tensor(r, d, role_out[dir], NULL);
    pp_error e;
    if (dir == PP_GCONV_FWD)
        CHECK_OK(pp_conv2d_forward(&r->ecpu, d, &ta, &tb, &to, &e), &e);
    else if (dir == PP_GCONV_DGRAD)
        CHECK_OK(pp_conv2d_backward_data(&r->ecpu, d, &ta, &tb, &to, &e), &e);
    else
        CHECK_OK(pp_conv2d_backward_filter(&r->ecpu, d, &ta, &tb, &to, &e), &e);
    int64_t n = count_of(d, role_out[dir]);
    float *h = malloc((size_t)n * sizeof *h);
    memcpy(h, to.data, (size_t)n * sizeof *h);
    pp_tensor_free(&ta);
    pp_tensor_free(&tb);
    pp_tensor_free(&to);
    return h;
}

/* Terms summed per output element. */
static int64_t sum_length(const pp_conv2d_desc *d, pp_gconv_dir dir)
{
    return dir == PP_GCONV_FWD     ? (int64_t)d->c * d->r * d->s
           : dir == PP_GCONV_DGRAD ? (int64_t)d->k * d->r * d->s
                                   : (int64_t)d->n * d->p * d->q;
}

/* ---- convolutions ---------------------------------------------------------------------- */

typedef struct gconv_tally {
    int ran, unsupported;
    double worst;
} gconv_tally;

/* One (direction, dtype, layout, beta) of geometry d: two calls, each
 * checked. */
static void gconv_case(rig *r, const pp_conv2d_desc *d, pp_gconv_dir dir, pp_dtype dt, bool nhwc,
                       float beta, const float *a, const float *b, const float *ref, double mag,
                       double in_rel, bool may_refuse, gconv_tally *t)
{
    const float alpha = beta != 0.0f ? 2.0f : 1.0f;
    int64_t da[4], db[4], dout[4];
    dims_of(d, role_a[dir], da);
    dims_of(d, role_b[dir], db);
    dims_of(d, role_out[dir], dout);
    const int64_t na = count_of(d, role_a[dir]), nb = count_of(d, role_b[dir]),
                  no = count_of(d, role_out[dir]);
    float *tmp = malloc((size_t)(na > nb ? (na > no ? na : no) : (nb > no ? nb : no)) *
                        sizeof *tmp);
    float *o0 = rand_bf16(r, no, -1.0f, 1.0f);
    float *got = malloc((size_t)no * sizeof *got), *want = malloc((size_t)no * sizeof *want);
    for (int64_t i = 0; i < no; i++)
        want[i] = alpha * ref[i] + (beta != 0.0f ? beta * o0[i] : 0.0f);
    dbuf ga = dbuf_new(r, na, dt), gb = dbuf_new(r, nb, dt), go = dbuf_new(r, no, dt);
    to_layout(a, da, nhwc, tmp);
    dbuf_put(&ga, tmp, na, dt);
    to_layout(b, db, nhwc, tmp);
    dbuf_put(&gb, tmp, nb, dt);
    char label[200];
    for (int call = 0; call < 2; call++) {
        snprintf(label, sizeof label,
                 "gconv %s %s %s beta %g, x %dx%dx%dx%d k %d %dx%d stride %d pad %d, call %d",
                 dir_names[dir], dt == PP_BF16 ? "bf16" : "fp32", nhwc ? "NHWC" : "NCHW",
                 (double)beta, d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride_h, d->pad_h,
                 call + 1);
        if (beta != 0.0f) {
            to_layout(o0, dout, nhwc, tmp);
            dbuf_put(&go, tmp, no, dt);
        } else {
            dbuf_nan(&go);
        }
        pp_error e;
        pp_status s = pp_cuda_gconv(&r->egpu, d, dir, dt, nhwc, ga.p, gb.p, go.p, alpha, beta, &e);
        if (s == PP_ERR_UNSUPPORTED && may_refuse) {
            fprintf(stderr, "unsupported (allowed, C %% 8 != 0): %s: %s\n", label, e.msg);
            t->unsupported++;
            break;
        }
        CHECK_MSG(s == PP_OK, "%s: %s: %s", label, pp_status_name(s), e.msg);
        if (s != PP_OK) break;
        pp_gconv_plan_info info;
        bool have = pp_cuda_gconv_plan_info(&r->egpu, d, dir, dt, nhwc, alpha, beta, &info);
        CHECK_MSG(have && info.timed >= 1 && info.timed <= pp_cuda_dev(r->gpu)->conv_plans &&
                      info.engine >= 0 && info.ms >= 0.0f,
                  "%s: plan info: cached %d, timed %d, engine %lld, %.4f ms", label, have,
                  have ? info.timed : 0, have ? info.engine : -1LL, have ? (double)info.ms : 0.0);
        dbuf_get(r, &go, tmp, no, dt);
        from_layout(tmp, dout, nhwc, got);
        double q = check_bound_blend(got, want, beta != 0.0f ? ref : NULL, no, mag,
                                     sum_length(d, dir), alpha, dt, in_rel, label);
        t->worst = fmax(t->worst, q);
        t->ran++;
    }
    dbuf_free(r, &ga);
    dbuf_free(r, &gb);
    dbuf_free(r, &go);
    free(tmp);
    free(o0);
    free(got);
    free(want);
}

static void test_gconv(rig *r)
{
    static const conv_case cases[] = {
        {2, 16, 9, 9, 24, 1, 1, 0},  /* 1x1 */
        {2, 16, 10, 10, 8, 3, 2, 1}, /* 3x3 stride 2 */
        {2, 3, 20, 20, 8, 7, 2, 3},  /* the stem: 7x7 stride 2 pad 3, C = 3 */
        {2, 4, 20, 20, 8, 7, 2, 3},  /* the same, C = 4 */
    };
    gconv_tally t = {0, 0, 0.0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const pp_conv2d_desc d = conv_of(&cases[i]);
        const bool may_refuse = d.c % 8 != 0;
        float *x = rand_bf16(r, count_of(&d, ROLE_X), -1.0f, 1.0f);
        float *w = rand_bf16(r, count_of(&d, ROLE_W), -0.5f, 0.5f);
        float *dy = rand_bf16(r, count_of(&d, ROLE_Y), -1.0f, 1.0f);
        for (int dir = 0; dir < 3; dir++) {
            const float *a = dir == PP_GCONV_DGRAD ? dy : x;
            const float *b = dir == PP_GCONV_WGRAD ? dy : w;
            float *ref = cpu_conv(r, &d, (pp_gconv_dir)dir, a, b);
            float *aa = abs_of(a, count_of(&d, role_a[dir]));
            float *ab = abs_of(b, count_of(&d, role_b[dir]));
            float *m = cpu_conv(r, &d, (pp_gconv_dir)dir, aa, ab);
            const double mag = max_of(m, count_of(&d, role_out[dir]));
            for (int dt = 0; dt < 2; dt++)
                for (int l = 0; l < 2; l++)
                    for (int be = 0; be < 2; be++)
                        gconv_case(r, &d, (pp_gconv_dir)dir, dt ? PP_F32 : PP_BF16, l == 0,
                                   be ? 1.0f : 0.0f, a, b, ref, mag, 0.0, may_refuse, &t);
            free(ref);
            free(aa);
            free(ab);
            free(m);
        }
        free(x);
        free(w);
        free(dy);
    }
    fprintf(stderr,
            "gconv: %d calls checked, %d refused (allowed), worst error %.3g of the bound\n", t.ran,
            t.unsupported, t.worst);
    /* the rows every engine list covers (C multiple of 8) must have run */
    CHECK_MSG(t.ran >= 2 * 2 * 3 * 2 * 2 * 2, "gconv: only %d calls ran", t.ran);
}

/* fp32 means IEEE fp32 unless the device is in tf32 mode: on inputs with all
 * 24 bits, IEEE results stay within the fp32 bound above (4 * L * 2^-24 *
 * max M; L = 16 for fwd and dgrad, 32 for wgrad here: at most 7.6e-6 of max
 * M). A TF32 engine rounds inputs to 11 significant bits: a sum of L products
 * is then off by about 2^-11 * M / sqrt(L), over 10 times that bound. In tf32
 * mode the bound grows by 4 * 2^-9 * max M (as in test_cuda_math: each
 * operand within 2^-10, a product within 2^-9), and the plans are made again
 * (the key holds the mode). */
static void test_gconv_fp32_modes(rig *r)
{
    const conv_case cc = {2, 16, 4, 4, 16, 1, 1, 0};
    const pp_conv2d_desc d = conv_of(&cc);
    float *x = malloc((size_t)count_of(&d, ROLE_X) * sizeof *x);
    float *w = malloc((size_t)count_of(&d, ROLE_W) * sizeof *w);
    float *dy = malloc((size_t)count_of(&d, ROLE_Y) * sizeof *dy);
    for (int64_t i = 0; i < count_of(&d, ROLE_X); i++) x[i] = frand(r);
    for (int64_t i = 0; i < count_of(&d, ROLE_W); i++) w[i] = 0.5f * frand(r);
    for (int64_t i = 0; i < count_of(&d, ROLE_Y); i++) dy[i] = frand(r);
    gconv_tally t = {0, 0, 0.0};
    pp_error e;
    for (int mode = 0; mode < 2; mode++) {
        CHECK_OK(pp_device_set_math(r->gpu, mode ? PP_MATH_TF32 : PP_MATH_FP32, &e), &e);
        for (int dir = 0; dir < 3; dir++) {
            const float *a = dir == PP_GCONV_DGRAD ? dy : x;
            const float *b = dir == PP_GCONV_WGRAD ? dy : w;
            float *ref = cpu_conv(r, &d, (pp_gconv_dir)dir, a, b);
            float *aa = abs_of(a, count_of(&d, role_a[dir]));
            float *ab = abs_of(b, count_of(&d, role_b[dir]));
            float *m = cpu_conv(r, &d, (pp_gconv_dir)dir, aa, ab);
            const double mag = max_of(m, count_of(&d, role_out[dir]));
            for (int l = 0; l < 2; l++)
                gconv_case(r, &d, (pp_gconv_dir)dir, PP_F32, l == 0, 0.0f, a, b, ref, mag,
                           mode ? ldexp(1.0, -9) : 0.0, false, &t);
            free(ref);
            free(aa);
            free(ab);
            free(m);
        }
    }
    CHECK_OK(pp_device_set_math(r->gpu, PP_MATH_FP32, &e), &e);
    CHECK_MSG(t.ran == 2 * 3 * 2 * 2, "gconv fp32 modes: %d calls ran", t.ran);
    fprintf(stderr,
            "gconv fp32 (IEEE, then tf32 mode): %d calls checked, worst error %.3g of the bound\n",
            t.ran, t.worst);
    free(x);
    free(w);
    free(dy);
}

/* Misuse: a bad dtype or direction is PP_ERR_INVALID, an unaligned pointer
 * PP_ERR_UNSUPPORTED (the caller's fallback takes it), before any work. */
static void test_gconv_args(rig *r)
{
    const conv_case cc = {1, 8, 4, 4, 8, 1, 1, 0};
    const pp_conv2d_desc d = conv_of(&cc);
    dbuf x = dbuf_new(r, 1024, PP_F32), w = dbuf_new(r, 1024, PP_F32),
         y = dbuf_new(r, 1024, PP_F32);
    pp_error e;
    pp_status s = pp_cuda_gconv(&r->egpu, &d, PP_GCONV_FWD, PP_F16, true, x.p, w.p, y.p, 1, 0, &e);
    CHECK_MSG(s == PP_ERR_INVALID, "f16: %s", pp_status_name(s));
    s = pp_cuda_gconv(&r->egpu, &d, (pp_gconv_dir)3, PP_BF16, true, x.p, w.p, y.p, 1, 0, &e);
    CHECK_MSG(s == PP_ERR_INVALID, "direction 3: %s", pp_status_name(s));
    s = pp_cuda_gconv(&r->egpu, &d, PP_GCONV_FWD, PP_BF16, true, (char *)x.p + 2, w.p, y.p, 1, 0,
                      &e);
    CHECK_MSG(s == PP_ERR_UNSUPPORTED && strstr(e.msg, "aligned"), "unaligned x: %s: %s",
              pp_status_name(s), e.msg);
    dbuf_free(r, &x);
    dbuf_free(r, &w);
    dbuf_free(r, &y);
}

/* ---- the cuBLASLt linear layer ------------------------------------------------------------- */

static pp_tensor cpu_2d(rig *r, int64_t a, int64_t b, const float *h)
{
    pp_tensor t;
    pp_error e;
    const int64_t shape[2] = {a, b};
    CHECK_OK(pp_tensor_zeros(&t, r->cpu, PP_F32, b ? 2 : 1, b ? shape : (int64_t[]){a}, &e), &e);
    if (h) memcpy(t.data, h, (size_t)(a * (b ? b : 1)) * sizeof(float));
    return t;
}

/* The CPU's forward y and backward dx, dw = dw0 + ..., db = db0 + ... on
 * host arrays; outputs malloc'ed into out[4] (y, dx, dw, db). */
static void cpu_linear(rig *r, int n, int in, int out, const float *x, const float *w,
                       const float *b, const float *dy, const float *dw0, const float *db0,
                       float *res[4])
{
    pp_tensor tx = cpu_2d(r, n, in, x), tw = cpu_2d(r, out, in, w), tb = cpu_2d(r, out, 0, b);
    pp_tensor ty = cpu_2d(r, n, out, NULL), tdy = cpu_2d(r, n, out, dy);
    pp_tensor tdx = cpu_2d(r, n, in, NULL), tdw = cpu_2d(r, out, in, dw0);
    pp_tensor tdb = cpu_2d(r, out, 0, db0);
    pp_error e;
    CHECK_OK(pp_linear_forward(&r->ecpu, &tx, &tw, &tb, &ty, &e), &e);
    CHECK_OK(pp_linear_backward(&r->ecpu, &tx, &tw, &tdy, &tdx, &tdw, &tdb, &e), &e);
    const pp_tensor *src[4] = {&ty, &tdx, &tdw, &tdb};
    for (int i = 0; i < 4; i++) {
        size_t bytes = pp_tensor_bytes(src[i]);
        res[i] = malloc(bytes ? bytes : 1);
        memcpy(res[i], src[i]->data, bytes);
    }
    pp_tensor *all[] = {&tx, &tw, &tb, &ty, &tdy, &tdx, &tdw, &tdb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pp_tensor_free(all[i]);
}

static void lt_case(rig *r, int n, int in, int out)
{
    float *x = rand_bf16(r, (int64_t)n * in, -1, 1);
    float *w = rand_bf16(r, (int64_t)out * in, -0.5f, 0.5f);
    float *b = rand_bf16(r, out, -1, 1), *dy = rand_bf16(r, (int64_t)n * out, -1, 1);
    float *dw0 = rand_bf16(r, (int64_t)out * in, -1, 1), *db0 = rand_bf16(r, out, -1, 1);
    float *zeros = calloc((size_t)out * in + out + 1, sizeof *zeros);
    float *ref[4], *mag[4];
    cpu_linear(r, n, in, out, x, w, b, dy, dw0, db0, ref);
    float *ax = abs_of(x, (int64_t)n * in), *aw = abs_of(w, (int64_t)out * in);
    float *ab = abs_of(b, out), *ady = abs_of(dy, (int64_t)n * out);
    cpu_linear(r, n, in, out, ax, aw, ab, ady, zeros, zeros, mag);
    const int64_t count[4] = {(int64_t)n * out, (int64_t)n * in, (int64_t)out * in, out};
    const int64_t len[4] = {in + 1, out, n, n}; /* the bias is one more term */

    dbuf gx = dbuf_new(r, (int64_t)n * in, PP_BF16), gw = dbuf_new(r, (int64_t)out * in, PP_BF16);
    dbuf gdy = dbuf_new(r, (int64_t)n * out, PP_BF16), gb = dbuf_new(r, out, PP_F32);
    dbuf gy16 = dbuf_new(r, (int64_t)n * out, PP_BF16);
    dbuf gy32 = dbuf_new(r, (int64_t)n * out, PP_F32);
    dbuf gdx = dbuf_new(r, (int64_t)n * in, PP_BF16), gdw = dbuf_new(r, (int64_t)out * in, PP_F32);
    dbuf gdb = dbuf_new(r, out, PP_F32);
    dbuf_put(&gx, x, (int64_t)n * in, PP_BF16);
    dbuf_put(&gw, w, (int64_t)out * in, PP_BF16);
    dbuf_put(&gdy, dy, (int64_t)n * out, PP_BF16);
    dbuf_put(&gb, b, out, PP_F32);
    dbuf_put(&gdw, dw0, (int64_t)out * in, PP_F32);
    dbuf_put(&gdb, db0, out, PP_F32);
    dbuf_nan(&gy16);
    dbuf_nan(&gy32);
    dbuf_nan(&gdx);
    float *got = malloc((size_t)((int64_t)(n > out ? n : out) * (in > out ? in : out) + 1) *
                        sizeof *got);
    char label[128];
    pp_error e;
    for (int f32 = 0; f32 < 2; f32++) {
        dbuf *gy = f32 ? &gy32 : &gy16;
        const pp_dtype dt = f32 ? PP_F32 : PP_BF16;
        snprintf(label, sizeof label, "lt forward n %d in %d out %d, y %s", n, in, out,
                 f32 ? "fp32" : "bf16");
        CHECK_OK(pp_cuda_lt_linear_forward(&r->egpu, n, in, out, gx.p, gw.p, gb.p, gy->p, f32, &e),
                 &e);
        dbuf_get(r, gy, got, count[0], dt);
        check_bound(got, ref[0], count[0], max_of(mag[0], count[0]), len[0], 1.0, dt, 0.0, label);
    }
    CHECK_OK(pp_cuda_lt_linear_backward(&r->egpu, n, in, out, gx.p, gw.p, gdy.p, gdx.p, gdw.p,
                                        gdb.p, &e),
             &e);
    const dbuf *gout[3] = {&gdx, &gdw, &gdb};
    static const char *const names[3] = {"dx", "dw (+=)", "db (+=)"};
    for (int i = 1; i < 4; i++) {
        const pp_dtype dt = i == 1 ? PP_BF16 : PP_F32;
        snprintf(label, sizeof label, "lt backward n %d in %d out %d, %s", n, in, out,
                 names[i - 1]);
        dbuf_get(r, gout[i - 1], got, count[i], dt);
        check_bound(got, ref[i], count[i], max_of(mag[i], count[i]), len[i], 1.0, dt, 0.0, label);
    }
    /* no bias and no gradients but dx: y = x w^T, dw and db untouched */
    float *ref_nb = malloc((size_t)count[0] * sizeof *ref_nb);
    for (int64_t i = 0; i < count[0]; i++) ref_nb[i] = ref[0][i] - b[i % out];
    CHECK_OK(pp_cuda_lt_linear_forward(&r->egpu, n, in, out, gx.p, gw.p, NULL, gy32.p, true, &e),
             &e);
    dbuf_get(r, &gy32, got, count[0], PP_F32);
    snprintf(label, sizeof label, "lt forward n %d in %d out %d, no bias", n, in, out);
    check_bound(got, ref_nb, count[0], max_of(mag[0], count[0]), len[0] + 1, 1.0, PP_F32, 0.0,
                label);
    CHECK_OK(pp_cuda_lt_linear_backward(&r->egpu, n, in, out, gx.p, gw.p, gdy.p, gdx.p, NULL, NULL,
                                        &e),
             &e);
    dbuf_get(r, &gdw, got, count[2], PP_F32);
    snprintf(label, sizeof label, "lt backward n %d in %d out %d, dw untouched", n, in, out);
    check_bound(got, ref[2], count[2], max_of(mag[2], count[2]), len[2], 1.0, PP_F32, 0.0, label);

    free(ref_nb);
    free(got);
    dbuf *all[] = {&gx, &gw, &gdy, &gb, &gy16, &gy32, &gdx, &gdw, &gdb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dbuf_free(r, all[i]);
    float *hs[] = {x, w, b, dy, dw0, db0, zeros, ax, aw, ab, ady};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]);
    for (int i = 0; i < 4; i++) {
        free(ref[i]);
        free(mag[i]);
    }
}

static void test_lt_linear(rig *r)
{
    static const struct { int n, in, out; } cases[] = {{6, 40, 24}, {3, 13, 7}, {128, 2048, 1000}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        lt_case(r, cases[i].n, cases[i].in, cases[i].out);
}

int main(void)
{
    if (pp_cuda_device_count() == 0) {
        fprintf(stderr, "test_cuda_gconv: no CUDA device visible, skipping\n");
        return 77;
    }
    rig r;
    if (!rig_open(&r, 20261122)) return check_summary("test_cuda_gconv");

    test_gconv_args(&r);
    test_gconv(&r);
    test_gconv_fp32_modes(&r);
    test_lt_linear(&r);

    rig_close(&r);
    return check_summary("test_cuda_gconv");
}
