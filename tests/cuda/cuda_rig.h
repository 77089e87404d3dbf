/*
 * cuda_rig.h - what the CUDA tests share: a CPU and a CUDA device with an
 * exec each, tensors held on both ("pairs") with the same random contents,
 * and comparisons of the CUDA copy against the CPU one. Header-only (static
 * functions), included by every test file that uses them.
 */
#ifndef PP_TESTS_CUDA_RIG_H
#define PP_TESTS_CUDA_RIG_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"

#define TOL_FWD 1e-4
#define TOL_BWD 1e-3

typedef struct rig {
    pp_registry *reg;
    pp_device_ctx *cpu, *gpu;
    pp_exec ecpu, egpu;
    uint64_t rng;
} rig;

/* The same tensor on both devices. */
typedef struct pair {
    pp_tensor c, g;
} pair;

static float frand(rig *r)
{
    r->rng = r->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((r->rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* A pair filled from host (dtype F32 or I32 by elem size) */
static pair pair_from(rig *r, pp_dtype dt, int ndim, const int64_t *shape, const void *host)
{
    pair p;
    pp_error err;
    CHECK_OK(pp_tensor_alloc(&p.c, r->cpu, dt, ndim, shape, &err), &err);
    CHECK_OK(pp_tensor_alloc(&p.g, r->gpu, dt, ndim, shape, &err), &err);
    size_t bytes = pp_tensor_bytes(&p.c);
    if (bytes) {
        CHECK_OK(pp_tensor_from_host(&p.c, host, bytes, &err), &err);
        CHECK_OK(pp_tensor_from_host(&p.g, host, bytes, &err), &err);
    }
    return p;
}

/* Uniform [lo, hi) f32 values (lo = hi gives a constant). */
static pair pair_rand(rig *r, int ndim, const int64_t *shape, float lo, float hi)
{
    int64_t n = numel_of(ndim, shape);
    float *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * 0.5f * (frand(r) + 1.0f);
    pair p = pair_from(r, PP_F32, ndim, shape, h);
    free(h);
    return p;
}

static void pair_free(pair *p)
{
    pp_tensor_free(&p->c);
    pp_tensor_free(&p->g);
}

/* Normalised error of the CUDA tensor against the CPU one. */
static double pair_err(rig *r, const pair *p)
{
    pp_error err;
    CHECK_OK(pp_exec_sync(&r->egpu, &err), &err);
    int64_t n = pp_tensor_numel(&p->c);
    float *a = malloc((size_t)(n ? n : 1) * sizeof *a);
    float *b = malloc((size_t)(n ? n : 1) * sizeof *b);
    CHECK_OK(pp_tensor_to_host(&p->c, a, (size_t)n * sizeof *a, &err), &err);
    CHECK_OK(pp_tensor_to_host(&p->g, b, (size_t)n * sizeof *b, &err), &err);
    double scale = 0.0, diff = 0.0;
    for (int64_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(a[i]));
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= diff)) diff = d; /* NaN propagates */
    }
    free(a);
    free(b);
    return scale > 0 ? diff / scale : diff;
}

/* Checks the normalised error of p against tol; the label says which op and case. */
static void check_close(rig *r, const pair *p, double tol, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void check_close(rig *r, const pair *p, double tol, const char *fmt, ...)
{
    char label[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(label, sizeof label, fmt, ap);
    va_end(ap);
    double e = pair_err(r, p);
    CHECK_MSG(e <= tol, "%s: normalised error %.3g > %.0e", label, e, tol);
}

#define CHECK_CLOSE check_close

/* Runs one op call on both execs; both must succeed. */
#define BOTH(r, call_c, call_g)                                                            \
    do {                                                                                   \
        pp_error e1_, e2_;                                                                 \
        { pp_exec *ex = &(r)->ecpu; pp_error *err = &e1_; CHECK_OK(call_c, err); }       \
        { pp_exec *ex = &(r)->egpu; pp_error *err = &e2_; CHECK_OK(call_g, err); }       \
    } while (0)

/* A bf16 pair holding f's values rounded (pp_cast on each device). */
static pair pair_bf16_of(rig *r, const pair *f)
{
    pair h;
    pp_error e;
    CHECK_OK(pp_tensor_alloc(&h.c, r->cpu, PP_BF16, f->c.ndim, f->c.shape, &e), &e);
    CHECK_OK(pp_tensor_alloc(&h.g, r->gpu, PP_BF16, f->c.ndim, f->c.shape, &e), &e);
    BOTH(r, pp_cast(ex, &f->c, &h.c, err), pp_cast(ex, &f->g, &h.g, err));
    return h;
}

/* n labels below classes drawn from the rig, on both devices (an I32
 * pair); *host, when not NULL, keeps the host copy (the caller frees it). */
static pair pair_labels(rig *r, int n, int classes, int32_t **host)
{
    int32_t *lab = malloc((size_t)n * sizeof *lab);
    for (int j = 0; j < n; j++) lab[j] = (int32_t)((r->rng >> 33) % (uint64_t)classes), frand(r);
    pair p = pair_from(r, PP_I32, 1, (int64_t[]){n}, lab);
    if (host) *host = lab;
    else free(lab);
    return p;
}

/* Rows [off, off + len) of p on both devices (a view: p keeps the storage). */
static pair pair_view(const pair *p, int64_t off, int64_t len)
{
    return (pair){pp_tensor_view0(&p->c, off, len), pp_tensor_view0(&p->g, off, len)};
}

/* Elements of p's storage outside [off, off + len) (a 1-D f32 pair's view)
 * differing bit for bit between the devices: memory outside a view must be
 * left untouched by an op on the view, so the contract there is exact. The
 * view itself is compared by the op's own check, with the op's tolerance. */
static int64_t pair_outside_differs(rig *r, const pair *p, int64_t off, int64_t len)
{
    pp_error err;
    CHECK_OK(pp_exec_sync(&r->egpu, &err), &err);
    const int64_t n = pp_tensor_numel(&p->c);
    float *a = malloc((size_t)(n ? n : 1) * sizeof *a);
    float *b = malloc((size_t)(n ? n : 1) * sizeof *b);
    CHECK_OK(pp_tensor_to_host(&p->c, a, (size_t)n * sizeof *a, &err), &err);
    CHECK_OK(pp_tensor_to_host(&p->g, b, (size_t)n * sizeof *b, &err), &err);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if ((i < off || i >= off + len) && memcmp(&a[i], &b[i], sizeof a[i]) != 0) bad++;
    free(a);
    free(b);
    return bad;
}

/* Copies p's CUDA tensor to the host and compares it with its CPU twin bit
 * for bit; true when equal. */
static bool pair_bitwise(const pair *p)
{
    pp_error e;
    size_t bytes = pp_tensor_bytes(&p->c);
    unsigned char *h = malloc(bytes ? bytes : 1);
    CHECK_OK(pp_tensor_to_host(&p->g, h, bytes, &e), &e);
    bool same = memcmp(h, p->c.data, bytes) == 0;
    free(h);
    return same;
}

/* A square convolution of a test's table. */
typedef struct conv_case {
    int n, c, h, w, k, kernel, stride, pad;
} conv_case;

static pp_conv2d_desc conv_of(const conv_case *cc)
{
    pp_conv2d_desc d;
    pp_error err;
    CHECK_OK(pp_conv2d_desc_init(&d, cc->n, cc->c, cc->h, cc->w, cc->k, cc->kernel, cc->stride,
                                 cc->pad, &err),
             &err);
    return d;
}

/* Opens cpu:0 and cuda:0 of a new registry with an exec each; false (after
 * counting the failure) when that fails. */
static bool rig_open(rig *r, uint64_t seed)
{
    pp_error err;
    *r = (rig){.rng = seed};
    CHECK_OK(pp_registry_new(&r->reg, &err), &err);
    if (!r->reg) return false;
    CHECK_OK(pp_registry_get(r->reg, (pp_device_id){PP_DEVICE_CPU, 0}, &r->cpu, &err), &err);
    CHECK_OK(pp_registry_get(r->reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &r->gpu, &err), &err);
    if (!r->cpu || !r->gpu) return false;
    CHECK_OK(pp_exec_init(&r->ecpu, r->cpu, NULL, &err), &err);
    CHECK_OK(pp_exec_init(&r->egpu, r->gpu, NULL, &err), &err);
    return true;
}

static void rig_close(rig *r)
{
    pp_exec_destroy(&r->ecpu);
    pp_exec_destroy(&r->egpu);
    pp_registry_free(r->reg);
}

#endif
