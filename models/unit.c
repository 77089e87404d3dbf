/*
 * unit.c - layer units: construction and initialisation, shapes and costs,
 * and forward/backward of every unit kind through the op API.
 *
 * Blocks are a chain of n_main (conv, bn) pairs with a relu after every pair
 * but the last, then out = relu(bn_last + identity), where identity is x or
 * downsample(x) = bn(conv1x1(x)). What a training forward keeps per
 * micro-batch lives in a slot: the input copy, each conv output (batch-norm
 * input), each inner relu output (next conv input), the downsample conv
 * output, the block output (for the final relu) and the batch-norm statistics.
 */
#include "models/unit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/rng.h"
#include "runtime/core/ops.h"

#define MAX_ENTRIES 24 /* bottleneck: 3 convs + 3 BNs x 5 + downsample 1 + 5 */
#define MAX_SAVED 16
#define MAX_MB 65536
#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f
#define DS 3 /* index of the downsample conv/bn in a block */

/* Slot indices of saved tensors. */
enum {
    S_X = 0,     /* input copy (delay: per-sample mean) */
    S_C0 = 1,    /* conv outputs 0..2 (maxpool: argmax indices at S_C0) */
    S_A0 = 4,    /* inner relu outputs 0..1 */
    S_CD = 6,    /* downsample conv output */
    S_OUT = 7,   /* unit output (relu, maxpool, blocks) */
    S_MEAN0 = 8, /* batch-norm saved means 0..3 */
    S_INV0 = 12, /* batch-norm saved inverse std 0..3 */
};

typedef struct slot {
    bool live;
    pp_tensor t[MAX_SAVED];
    int in_ndim;
    int64_t in_shape[PP_MAX_DIMS];
} slot;

typedef struct conv_layer {
    int e; /* entry index of the weight (K, C, R, S) */
    int cin, cout, kernel, stride, pad;
} conv_layer;

typedef struct bn_layer {
    int e; /* entries e..e+4: weight, bias, running_mean, running_var, num_batches_tracked */
    int c;
    int64_t pending; /* training forwards not yet added to num_batches_tracked (non-CPU devices) */
} bn_layer;

struct pp_unit {
    pp_unit_spec spec;
    pp_device_ctx *dev;
    int n_entries;
    char names[MAX_ENTRIES][64];
    pp_tensor value[MAX_ENTRIES];
    pp_tensor grad[MAX_ENTRIES];
    pp_named_tensor entry[MAX_ENTRIES];
    int n_main;             /* blocks: main-path (conv, bn) pairs */
    conv_layer conv[4];     /* stem conv at 0; blocks: main path 0..n_main-1, downsample at DS */
    bn_layer bn[4];         /* stem bn at 0; blocks as conv */
    int fc_w, fc_b;         /* fc entries */
    pp_tensor dl_w, dl_b;   /* delay: fixed (D,1) and (D) mixing, not parameters */
    pp_tensor dl_dw, dl_db; /* delay: scratch gradients of those, discarded */
    slot *slots;
    int n_slots;
    int in_flight;
};

/* ---- small helpers ------------------------------------------------------- */

static const char *kind_name(pp_unit_kind k)
{
    switch (k) {
    case PP_UNIT_CONV: return "conv";
    case PP_UNIT_BN: return "batch norm";
    case PP_UNIT_RELU: return "relu";
    case PP_UNIT_MAXPOOL: return "max pool";
    case PP_UNIT_IDENTITY: return "identity";
    case PP_UNIT_BASIC: return "basic block";
    case PP_UNIT_BOTTLENECK: return "bottleneck block";
    case PP_UNIT_AVGPOOL: return "average pool";
    case PP_UNIT_FC: return "linear";
    case PP_UNIT_DELAY: return "delay";
    }
    return "?";
}

/* Per-micro-batch tensors (saved state and temporaries) are allocated in the
 * stream order of the exec the unit runs on, so freeing them never waits for
 * the device. */
static pp_status alloc4(pp_tensor *t, pp_exec *ex, int64_t n, int64_t c, int64_t h, int64_t w,
                        pp_error *err)
{
    return pp_tensor_alloc_on(t, ex, PP_F32, 4, (int64_t[]){n, c, h, w}, err);
}

static pp_status alloc_like(pp_tensor *t, pp_exec *ex, const pp_tensor *like, pp_error *err)
{
    return pp_tensor_alloc_on(t, ex, like->dtype, like->ndim, like->shape, err);
}

/* Allocates dst like src and copies src into it, in ex's stream order. */
static pp_status save_copy(pp_exec *ex, const pp_tensor *src, pp_tensor *dst, pp_error *err)
{
    PP_TRY(alloc_like(dst, ex, src, err));
    return pp_copy(ex, src, dst, err);
}

static void slot_clear(slot *s)
{
    for (int i = 0; i < MAX_SAVED; i++) pp_tensor_free(&s->t[i]);
    s->live = false;
}

/* ---- construction ----------------------------------------------------------- */

static pp_status add_entry(pp_unit *u, const char *module, const char *leaf, pp_dtype dtype,
                           int ndim, const int64_t *shape, bool learnable, int *index,
                           pp_error *err)
{
    if (u->n_entries >= MAX_ENTRIES)
        return pp_error_set(err, PP_ERR_INTERNAL, "%s: too many tensors", u->spec.name);
    int e = u->n_entries;
    int len =
        module && *module
            ? snprintf(u->names[e], sizeof u->names[e], "%s.%s.%s", u->spec.name, module, leaf)
            : snprintf(u->names[e], sizeof u->names[e], "%s.%s", u->spec.name, leaf);
    if (len < 0 || (size_t)len >= sizeof u->names[e])
        return pp_error_set(err, PP_ERR_INVALID, "%s: tensor name too long", u->spec.name);
    PP_TRY(pp_tensor_alloc(&u->value[e], u->dev, dtype, ndim, shape, err));
    u->n_entries++;
    if (learnable) PP_TRY(pp_tensor_zeros(&u->grad[e], u->dev, dtype, ndim, shape, err));
    u->entry[e] = (pp_named_tensor){u->names[e], &u->value[e], learnable ? &u->grad[e] : NULL};
    if (index) *index = e;
    return PP_OK;
}

typedef enum fill_kind { FILL_NORMAL, FILL_UNIFORM, FILL_CONST } fill_kind;

/* Fills entry e on the host, from the stream of (seed, name), and uploads it. */
static pp_status fill_entry(pp_unit *u, int e, fill_kind how, double a, uint64_t seed,
                            pp_error *err)
{
    pp_tensor *t = &u->value[e];
    int64_t n = pp_tensor_numel(t);
    size_t bytes = pp_tensor_bytes(t);
    void *host = malloc(bytes ? bytes : 1);
    if (!host)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory initialising %s", u->names[e]);
    if (t->dtype == PP_I64) {
        int64_t *p = host;
        for (int64_t i = 0; i < n; i++) p[i] = (int64_t)a;
    } else {
        float *p = host;
        pp_rng rng;
        pp_rng_init(&rng, seed, u->names[e]);
        for (int64_t i = 0; i < n; i++) {
            switch (how) {
            case FILL_NORMAL: p[i] = (float)(a * pp_rng_normal(&rng)); break;
            case FILL_UNIFORM: p[i] = (float)(a * (2.0 * pp_rng_uniform(&rng) - 1.0)); break;
            case FILL_CONST: p[i] = (float)a; break;
            }
        }
    }
    pp_status s = pp_tensor_from_host(t, host, bytes, err);
    free(host);
    return s;
}

static pp_status add_conv(pp_unit *u, int slot_i, const char *module, int cin, int cout, int kernel,
                          int stride, int pad, uint64_t seed, pp_error *err)
{
    conv_layer *c = &u->conv[slot_i];
    *c = (conv_layer){0, cin, cout, kernel, stride, pad};
    PP_TRY(add_entry(u, module, "weight", PP_F32, 4, (int64_t[]){cout, cin, kernel, kernel}, true,
                     &c->e, err));
    /* kaiming_normal_(mode="fan_out", nonlinearity="relu") */
    double fan_out = (double)cout * kernel * kernel;
    return fill_entry(u, c->e, FILL_NORMAL, sqrt(2.0 / fan_out), seed, err);
}

static pp_status add_bn(pp_unit *u, int slot_i, const char *module, int c, uint64_t seed,
                        pp_error *err)
{
    bn_layer *b = &u->bn[slot_i];
    *b = (bn_layer){0, c, 0};
    const int64_t shape[1] = {c};
    PP_TRY(add_entry(u, module, "weight", PP_F32, 1, shape, true, &b->e, err));
    PP_TRY(add_entry(u, module, "bias", PP_F32, 1, shape, true, NULL, err));
    PP_TRY(add_entry(u, module, "running_mean", PP_F32, 1, shape, false, NULL, err));
    PP_TRY(add_entry(u, module, "running_var", PP_F32, 1, shape, false, NULL, err));
    PP_TRY(add_entry(u, module, "num_batches_tracked", PP_I64, 0, shape, false, NULL, err));
    static const double init[5] = {1.0, 0.0, 0.0, 1.0, 0.0};
    for (int i = 0; i < 5; i++) PP_TRY(fill_entry(u, b->e + i, FILL_CONST, init[i], seed, err));
    return PP_OK;
}

static pp_status check_spec(const pp_unit_spec *s, pp_error *err)
{
    bool ok = s->name[0] != '\0' && s->in_c > 0;
    switch (s->kind) {
    case PP_UNIT_CONV:
        ok = ok && s->out_c > 0 && s->kernel > 0 && s->stride > 0 && s->pad >= 0;
        break;
    case PP_UNIT_MAXPOOL:
        ok = ok && s->kernel > 0 && s->stride > 0 && s->pad >= 0 && 2 * s->pad <= s->kernel;
        break;
    case PP_UNIT_BASIC:
        ok = ok && s->planes > 0 && s->out_c == s->planes && s->stride > 0 &&
             (s->downsample || (s->stride == 1 && s->in_c == s->out_c));
        break;
    case PP_UNIT_BOTTLENECK:
        ok = ok && s->planes > 0 && s->out_c == 4 * s->planes && s->stride > 0 &&
             (s->downsample || (s->stride == 1 && s->in_c == s->out_c));
        break;
    case PP_UNIT_FC: ok = ok && s->out_c > 0; break;
    case PP_UNIT_DELAY:
        ok = s->name[0] != '\0' && s->out_c > 0 && s->forward_ms >= 0 && s->backward_ms >= 0 &&
             s->forward_ms <= 3.6e6 && s->backward_ms <= 3.6e6;
        break;
    case PP_UNIT_BN:
    case PP_UNIT_RELU:
    case PP_UNIT_IDENTITY:
    case PP_UNIT_AVGPOOL: break;
    default: ok = false;
    }
    if (!ok)
        return pp_error_set(err, PP_ERR_INVALID,
                            "unit '%s': bad %s spec (in %d, out %d, planes %d, kernel %d, "
                            "stride %d, pad %d, downsample %d)",
                            s->name, kind_name(s->kind), s->in_c, s->out_c, s->planes, s->kernel,
                            s->stride, s->pad, (int)s->downsample);
    return PP_OK;
}

static pp_status build(pp_unit *u, uint64_t seed, pp_error *err)
{
    const pp_unit_spec *s = &u->spec;
    switch (s->kind) {
    case PP_UNIT_CONV:
        return add_conv(u, 0, NULL, s->in_c, s->out_c, s->kernel, s->stride, s->pad, seed, err);
    case PP_UNIT_BN: return add_bn(u, 0, NULL, s->in_c, seed, err);
    case PP_UNIT_BASIC:
        u->n_main = 2;
        PP_TRY(add_conv(u, 0, "conv1", s->in_c, s->planes, 3, s->stride, 1, seed, err));
        PP_TRY(add_bn(u, 0, "bn1", s->planes, seed, err));
        PP_TRY(add_conv(u, 1, "conv2", s->planes, s->planes, 3, 1, 1, seed, err));
        PP_TRY(add_bn(u, 1, "bn2", s->planes, seed, err));
        break;
    case PP_UNIT_BOTTLENECK:
        u->n_main = 3;
        PP_TRY(add_conv(u, 0, "conv1", s->in_c, s->planes, 1, 1, 0, seed, err));
        PP_TRY(add_bn(u, 0, "bn1", s->planes, seed, err));
        PP_TRY(add_conv(u, 1, "conv2", s->planes, s->planes, 3, s->stride, 1, seed, err));
        PP_TRY(add_bn(u, 1, "bn2", s->planes, seed, err));
        PP_TRY(add_conv(u, 2, "conv3", s->planes, s->out_c, 1, 1, 0, seed, err));
        PP_TRY(add_bn(u, 2, "bn3", s->out_c, seed, err));
        break;
    case PP_UNIT_FC: {
        double bound = 1.0 / sqrt((double)s->in_c);
        PP_TRY(add_entry(u, NULL, "weight", PP_F32, 2, (int64_t[]){s->out_c, s->in_c}, true,
                         &u->fc_w, err));
        PP_TRY(add_entry(u, NULL, "bias", PP_F32, 1, (int64_t[]){s->out_c}, true, &u->fc_b, err));
        PP_TRY(fill_entry(u, u->fc_w, FILL_UNIFORM, bound, seed, err));
        return fill_entry(u, u->fc_b, FILL_UNIFORM, bound, seed, err);
    }
    case PP_UNIT_DELAY: {
        int d = s->out_c;
        float *host = malloc(2 * (size_t)d * sizeof *host);
        if (!host) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
        for (int j = 0; j < d; j++) {
            host[j] = 1.0f / (float)(j + 1);
            host[d + j] = 0.01f * (float)j;
        }
        pp_status st = pp_tensor_alloc(&u->dl_w, u->dev, PP_F32, 2, (int64_t[]){d, 1}, err);
        if (st == PP_OK) st = pp_tensor_alloc(&u->dl_b, u->dev, PP_F32, 1, (int64_t[]){d}, err);
        if (st == PP_OK) st = pp_tensor_from_host(&u->dl_w, host, (size_t)d * 4, err);
        if (st == PP_OK) st = pp_tensor_from_host(&u->dl_b, host + d, (size_t)d * 4, err);
        free(host);
        PP_TRY(st);
        PP_TRY(pp_tensor_alloc(&u->dl_dw, u->dev, PP_F32, 2, (int64_t[]){d, 1}, err));
        return pp_tensor_alloc(&u->dl_db, u->dev, PP_F32, 1, (int64_t[]){d}, err);
    }
    default: return PP_OK;
    }
    if (s->downsample) {
        PP_TRY(add_conv(u, DS, "downsample.0", s->in_c, s->out_c, 1, s->stride, 0, seed, err));
        PP_TRY(add_bn(u, DS, "downsample.1", s->out_c, seed, err));
    }
    return PP_OK;
}

pp_status pp_unit_new(const pp_unit_spec *spec, uint64_t seed, pp_device_ctx *dev, pp_unit **out,
                      pp_error *err)
{
    *out = NULL;
    if (!spec || !dev) return pp_error_set(err, PP_ERR_INVALID, "pp_unit_new: NULL argument");
    PP_TRY(check_spec(spec, err));
    pp_unit *u = calloc(1, sizeof *u);
    if (!u) return pp_error_set(err, PP_ERR_OOM, "out of host memory (unit)");
    u->spec = *spec;
    u->spec.name[sizeof u->spec.name - 1] = '\0';
    u->dev = dev;
    pp_status s = build(u, seed, err);
    if (s != PP_OK) {
        pp_error_prefix(err, "%s", spec->name);
        pp_unit_free(u);
        return s;
    }
    *out = u;
    return PP_OK;
}

void pp_unit_free(pp_unit *u)
{
    if (!u) return;
    for (int i = 0; i < u->n_slots; i++) slot_clear(&u->slots[i]);
    free(u->slots);
    for (int i = 0; i < u->n_entries; i++) {
        pp_tensor_free(&u->value[i]);
        pp_tensor_free(&u->grad[i]);
    }
    pp_tensor_free(&u->dl_w);
    pp_tensor_free(&u->dl_b);
    pp_tensor_free(&u->dl_dw);
    pp_tensor_free(&u->dl_db);
    free(u);
}

const char *pp_unit_name(const pp_unit *u)
{
    return u->spec.name;
}

const pp_unit_spec *pp_unit_get_spec(const pp_unit *u)
{
    return &u->spec;
}

pp_device_ctx *pp_unit_device(const pp_unit *u)
{
    return u->dev;
}

int pp_unit_state_count(const pp_unit *u)
{
    return u->n_entries;
}

const pp_named_tensor *pp_unit_state(const pp_unit *u, int i)
{
    return i >= 0 && i < u->n_entries ? &u->entry[i] : NULL;
}

/* ---- shapes and costs ------------------------------------------------------- */

static pp_status shape_error(const pp_unit_spec *s, int ndim, const int64_t *shape, const char *why,
                             pp_error *err)
{
    pp_tensor t = {.ndim = ndim < 0 ? 0 : ndim > PP_MAX_DIMS ? PP_MAX_DIMS : ndim};
    for (int i = 0; i < t.ndim; i++) t.shape[i] = shape[i];
    char buf[64];
    return pp_error_set(err, PP_ERR_INVALID, "%s (%s): input %s %s", s->name, kind_name(s->kind),
                        pp_tensor_shape_str(&t, buf, sizeof buf), why);
}

static int64_t conv_out(int64_t h, int kernel, int stride, int pad)
{
    return h + 2 * pad < kernel ? 0 : (h + 2 * pad - kernel) / stride + 1;
}

pp_status pp_unit_output_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                               int64_t *out, pp_error *err)
{
    if (in_ndim < 1 || in_ndim > PP_MAX_DIMS || in[0] < 1)
        return shape_error(s, in_ndim, in, "has no batch dimension", err);
    for (int i = 0; i < PP_MAX_DIMS; i++) out[i] = 1;
    out[0] = in[0];
    if (s->kind == PP_UNIT_DELAY) {
        *out_ndim = 2;
        out[1] = s->out_c;
        return PP_OK;
    }
    if (s->kind == PP_UNIT_FC) {
        if (in_ndim != 2 || in[1] != s->in_c)
            return shape_error(s, in_ndim, in, "is not (N, in_features)", err);
        *out_ndim = 2;
        out[1] = s->out_c;
        return PP_OK;
    }
    if (in_ndim != 4 || in[1] != s->in_c || in[2] < 1 || in[3] < 1)
        return shape_error(s, in_ndim, in, "does not have the unit's channels (N, C, H, W)", err);
    int64_t h = in[2], w = in[3];
    *out_ndim = 4;
    out[1] = s->in_c;
    out[2] = h;
    out[3] = w;
    switch (s->kind) {
    case PP_UNIT_CONV:
    case PP_UNIT_MAXPOOL:
        out[1] = s->kind == PP_UNIT_CONV ? s->out_c : s->in_c;
        out[2] = conv_out(h, s->kernel, s->stride, s->pad);
        out[3] = conv_out(w, s->kernel, s->stride, s->pad);
        break;
    case PP_UNIT_BASIC:
    case PP_UNIT_BOTTLENECK:
        out[1] = s->out_c;
        out[2] = conv_out(h, 3, s->stride, 1);
        out[3] = conv_out(w, 3, s->stride, 1);
        break;
    case PP_UNIT_AVGPOOL:
        *out_ndim = 2;
        out[2] = out[3] = 1;
        break;
    default: break;
    }
    if (out[2] < 1 || out[3] < 1) return shape_error(s, in_ndim, in, "is too small", err);
    return PP_OK;
}

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

pp_status pp_unit_costs(const pp_unit_spec *s, int in_ndim, const int64_t *in, pp_unit_info *info,
                        pp_error *err)
{
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", s->name);
    PP_TRY(check_spec(s, err));
    int out_ndim;
    int64_t out[PP_MAX_DIMS];
    PP_TRY(pp_unit_output_shape(s, in_ndim, in, &out_ndim, out, err));
    const int64_t n = in[0];
    const int64_t in_e = numel(in_ndim, in) / n, out_e = numel(out_ndim, out) / n;
    const int64_t bn_buffers = 8; /* num_batches_tracked */
    int64_t macs = 0, elementwise = 0, params = 0, buffer_bytes = 0, kept = 0, kept_fixed = 0;
    switch (s->kind) {
    case PP_UNIT_CONV:
        macs = out_e * s->in_c * s->kernel * s->kernel;
        params = (int64_t)s->out_c * s->in_c * s->kernel * s->kernel;
        kept = in_e;
        break;
    case PP_UNIT_BN:
        elementwise = 2 * in_e;
        params = 2 * s->in_c;
        buffer_bytes = 2 * 4 * s->in_c + bn_buffers;
        kept = in_e;
        kept_fixed = 2 * 4 * s->in_c;
        break;
    case PP_UNIT_RELU:
        elementwise = in_e;
        kept = out_e;
        break;
    case PP_UNIT_MAXPOOL:
        elementwise = out_e * s->kernel * s->kernel;
        kept = in_e + 2 * out_e; /* x, y and the I32 argmax indices */
        break;
    case PP_UNIT_IDENTITY: break;
    case PP_UNIT_BASIC:
    case PP_UNIT_BOTTLENECK: {
        const bool bottle = s->kind == PP_UNIT_BOTTLENECK;
        const int64_t hw = in[2] * in[3], pq = out[2] * out[3];
        const int64_t p = s->planes, o = s->out_c, c = s->in_c;
        /* per main conv: input channels, output channels, kernel, output spatial size */
        const int64_t mc[3][4] = {
            {c, p, bottle ? 1 : 3, bottle ? hw : pq},
            {p, bottle ? p : o, 3, pq},
            {p, o, 1, pq},
        };
        const int nm = bottle ? 3 : 2;
        kept = in_e + out_e; /* input copy, block output */
        for (int i = 0; i < nm; i++) {
            int64_t conv_out_e = mc[i][1] * mc[i][3];
            macs += conv_out_e * mc[i][0] * mc[i][2] * mc[i][2];
            params += mc[i][1] * mc[i][0] * mc[i][2] * mc[i][2] + 2 * mc[i][1];
            buffer_bytes += 2 * 4 * mc[i][1] + bn_buffers;
            elementwise += 2 * conv_out_e;  /* batch norm */
            kept += conv_out_e;             /* conv output */
            kept_fixed += 2 * 4 * mc[i][1]; /* batch-norm statistics */
            if (i < nm - 1) {
                elementwise += conv_out_e; /* relu */
                kept += conv_out_e;        /* relu output */
            }
        }
        if (s->downsample) {
            macs += out_e * c;
            params += o * c + 2 * o;
            buffer_bytes += 2 * 4 * o + bn_buffers;
            elementwise += 2 * out_e;
            kept += out_e;
            kept_fixed += 2 * 4 * o;
        }
        elementwise += 2 * out_e; /* residual add, relu */
        break;
    }
    case PP_UNIT_AVGPOOL: elementwise = in_e; break;
    case PP_UNIT_FC:
        macs = (int64_t)s->in_c * s->out_c;
        elementwise = s->out_c;
        params = (int64_t)s->in_c * s->out_c + s->out_c;
        kept = in_e;
        break;
    case PP_UNIT_DELAY: kept = 1; break;
    }
    info->fwd_macs = macs;
    info->fwd_flops = 2 * macs + elementwise;
    info->param_count = params;
    info->param_bytes = 4 * params + buffer_bytes;
    info->act_bytes = 4 * kept;
    info->act_fixed_bytes = kept_fixed;
    info->out_bytes = 4 * out_e;
    return PP_OK;
}

/* ---- conv and batch-norm pieces ------------------------------------------------ */

static pp_status conv_desc(const conv_layer *c, const pp_tensor *x, pp_conv2d_desc *d,
                           pp_error *err)
{
    return pp_conv2d_desc_init(d, (int)x->shape[0], (int)x->shape[1], (int)x->shape[2],
                               (int)x->shape[3], c->cout, c->kernel, c->stride, c->pad, err);
}

/* y = conv(x); allocates y when alloc is true. */
static pp_status conv_fwd(pp_unit *u, pp_exec *ex, const conv_layer *c, const pp_tensor *x,
                          pp_tensor *y, bool alloc, pp_error *err)
{
    pp_conv2d_desc d;
    PP_TRY(conv_desc(c, x, &d, err));
    if (alloc) PP_TRY(alloc4(y, ex, d.n, d.k, d.p, d.q, err));
    return pp_conv2d_forward(ex, &d, x, &u->value[c->e], y, err);
}

/* dw += corr(x, dy); dx = conv_transpose(dy) when dx is not NULL. */
static pp_status conv_bwd(pp_unit *u, pp_exec *ex, const conv_layer *c, const pp_tensor *x,
                          const pp_tensor *dy, pp_tensor *dx, pp_error *err)
{
    pp_conv2d_desc d;
    PP_TRY(conv_desc(c, x, &d, err));
    PP_TRY(pp_conv2d_backward_filter(ex, &d, x, dy, &u->grad[c->e], err));
    if (dx) PP_TRY(pp_conv2d_backward_data(ex, &d, dy, &u->value[c->e], dx, err));
    return PP_OK;
}

static pp_bn_desc bn_desc(const pp_tensor *x)
{
    return (pp_bn_desc){.n = (int)x->shape[0],
                        .c = (int)x->shape[1],
                        .h = (int)x->shape[2],
                        .w = (int)x->shape[3],
                        .eps = BN_EPS,
                        .momentum = BN_MOMENTUM};
}

/* Adds one training forward to num_batches_tracked: at once on CPU devices
 * (ops there run synchronously on this thread), later in sync_buffers on
 * others (no stream-ordered integer op exists; a host round trip per batch
 * norm would stall the stream). */
static pp_status bn_count(pp_unit *u, bn_layer *b, pp_error *err)
{
    b->pending++;
    if (u->dev->id.kind != PP_DEVICE_CPU) return PP_OK;
    pp_tensor *nbt = &u->value[b->e + 4];
    int64_t v;
    PP_TRY(pp_tensor_to_host(nbt, &v, sizeof v, err));
    v += b->pending;
    PP_TRY(pp_tensor_from_host(nbt, &v, sizeof v, err));
    b->pending = 0;
    return PP_OK;
}

/* y = bn(x) into an allocated y; in training the statistics go to
 * s->t[S_MEAN0 + i], s->t[S_INV0 + i] (allocated here). */
static pp_status bn_fwd(pp_unit *u, pp_exec *ex, int i, const pp_tensor *x, pp_tensor *y,
                        bool train, slot *s, pp_error *err)
{
    bn_layer *b = &u->bn[i];
    pp_tensor *v = &u->value[b->e];
    pp_bn_desc d = bn_desc(x);
    if (!train) return pp_batchnorm_forward_infer(ex, &d, x, &v[0], &v[1], &v[2], &v[3], y, err);
    const int64_t c = b->c;
    PP_TRY(pp_tensor_alloc_on(&s->t[S_MEAN0 + i], ex, PP_F32, 1, &c, err));
    PP_TRY(pp_tensor_alloc_on(&s->t[S_INV0 + i], ex, PP_F32, 1, &c, err));
    PP_TRY(pp_batchnorm_forward_train(ex, &d, x, &v[0], &v[1], &v[2], &v[3], y, &s->t[S_MEAN0 + i],
                                      &s->t[S_INV0 + i], err));
    return bn_count(u, b, err);
}

static pp_status bn_bwd(pp_unit *u, pp_exec *ex, int i, const pp_tensor *x, const pp_tensor *dy,
                        const slot *s, pp_tensor *dx, pp_error *err)
{
    const bn_layer *b = &u->bn[i];
    pp_bn_desc d = bn_desc(x);
    return pp_batchnorm_backward(ex, &d, x, dy, &u->value[b->e], &s->t[S_MEAN0 + i],
                                 &s->t[S_INV0 + i], dx, &u->grad[b->e], &u->grad[b->e + 1], err);
}

/* ---- blocks -------------------------------------------------------------------- */

static pp_status block_forward(pp_unit *u, pp_exec *ex, slot *s, const pp_tensor *x, pp_tensor *y,
                               bool train, pp_error *err)
{
    pp_tensor last = {0}, ds = {0};
    pp_status st = PP_OK;
    const pp_tensor *in = x;
    const int n = u->n_main;
    for (int i = 0; i < n && st == PP_OK; i++) {
        pp_tensor *c = &s->t[S_C0 + i];
        pp_tensor *a = i < n - 1 ? &s->t[S_A0 + i] : &last;
        st = conv_fwd(u, ex, &u->conv[i], in, c, true, err);
        if (st == PP_OK) st = alloc_like(a, ex, c, err);
        if (st == PP_OK) st = bn_fwd(u, ex, i, c, a, train, s, err);
        if (st == PP_OK && i < n - 1) st = pp_relu_forward(ex, a, a, err);
        in = a;
    }
    const pp_tensor *identity = x;
    if (st == PP_OK && u->spec.downsample) {
        st = conv_fwd(u, ex, &u->conv[DS], x, &s->t[S_CD], true, err);
        if (st == PP_OK) st = alloc_like(&ds, ex, &s->t[S_CD], err);
        if (st == PP_OK) st = bn_fwd(u, ex, DS, &s->t[S_CD], &ds, train, s, err);
        identity = &ds;
    }
    if (st == PP_OK) st = pp_add(ex, &last, identity, y, err);
    if (st == PP_OK) st = pp_relu_forward(ex, y, y, err);
    if (st == PP_OK && train) st = save_copy(ex, x, &s->t[S_X], err);
    if (st == PP_OK && train) st = save_copy(ex, y, &s->t[S_OUT], err);
    pp_tensor_free(&last);
    pp_tensor_free(&ds);
    return st;
}

static pp_status block_backward(pp_unit *u, pp_exec *ex, slot *s, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    pp_tensor g = {0}, dcd = {0}, didentity = {0}, d = {0}, dc = {0};
    const pp_tensor *x = &s->t[S_X];
    /* g = dL/d(bn_last + identity) */
    pp_status st = alloc_like(&g, ex, &s->t[S_OUT], err);
    if (st == PP_OK) st = pp_relu_backward(ex, &s->t[S_OUT], dy, &g, err);
    if (st == PP_OK && u->spec.downsample) {
        st = alloc_like(&dcd, ex, &s->t[S_CD], err);
        if (st == PP_OK) st = bn_bwd(u, ex, DS, &s->t[S_CD], &g, s, &dcd, err);
        if (st == PP_OK && dx) st = alloc_like(&didentity, ex, x, err);
        if (st == PP_OK) st = conv_bwd(u, ex, &u->conv[DS], x, &dcd, dx ? &didentity : NULL, err);
        pp_tensor_free(&dcd);
    }
    /* d holds dL/d(relu output i) for i < n-1; the last pair's gradient is g */
    for (int i = u->n_main - 1; i >= 0 && st == PP_OK; i--) {
        const pp_tensor *dcur = &g;
        if (i < u->n_main - 1) {
            st = pp_relu_backward(ex, &s->t[S_A0 + i], &d, &d, err);
            dcur = &d;
        }
        if (st == PP_OK) st = alloc_like(&dc, ex, &s->t[S_C0 + i], err);
        if (st == PP_OK) st = bn_bwd(u, ex, i, &s->t[S_C0 + i], dcur, s, &dc, err);
        pp_tensor_free(&d);
        const pp_tensor *in = i > 0 ? &s->t[S_A0 + i - 1] : x;
        pp_tensor *din = NULL;
        if (i > 0) {
            if (st == PP_OK) st = alloc_like(&d, ex, in, err);
            din = &d;
        } else {
            din = dx;
        }
        if (st == PP_OK) st = conv_bwd(u, ex, &u->conv[i], in, &dc, din, err);
        pp_tensor_free(&dc);
    }
    if (st == PP_OK && dx) st = pp_accumulate(ex, u->spec.downsample ? &didentity : &g, dx, err);
    pp_tensor_free(&d);
    pp_tensor_free(&g);
    pp_tensor_free(&didentity);
    return st;
}

/* ---- other kinds ----------------------------------------------------------------- */

static pp_status pool_desc(const pp_unit *u, const pp_tensor *x, pp_pool_desc *d, pp_error *err)
{
    return pp_pool_desc_init(d, (int)x->shape[0], (int)x->shape[1], (int)x->shape[2],
                             (int)x->shape[3], u->spec.kernel, u->spec.stride, u->spec.pad, err);
}

/* Views any (N, ...) tensor as (N, 1, F, 1) for the delay unit's per-sample mean. */
static pp_status delay_view(const pp_tensor *t, pp_tensor *v, pp_error *err)
{
    int64_t n = t->shape[0];
    return pp_tensor_reshape(t, 4, (int64_t[]){n, 1, pp_tensor_numel(t) / n, 1}, v, err);
}

static pp_status kind_forward(pp_unit *u, pp_exec *ex, slot *s, const pp_tensor *x, pp_tensor *y,
                              bool train, pp_error *err)
{
    switch (u->spec.kind) {
    case PP_UNIT_CONV:
        PP_TRY(conv_fwd(u, ex, &u->conv[0], x, y, false, err));
        return train ? save_copy(ex, x, &s->t[S_X], err) : PP_OK;
    case PP_UNIT_BN:
        PP_TRY(bn_fwd(u, ex, 0, x, y, train, s, err));
        return train ? save_copy(ex, x, &s->t[S_X], err) : PP_OK;
    case PP_UNIT_RELU:
        PP_TRY(pp_relu_forward(ex, x, y, err));
        return train ? save_copy(ex, y, &s->t[S_OUT], err) : PP_OK;
    case PP_UNIT_MAXPOOL: {
        pp_pool_desc d;
        PP_TRY(pool_desc(u, x, &d, err));
        PP_TRY(pp_tensor_alloc_on(&s->t[S_C0], ex, PP_I32, 4, y->shape, err));
        PP_TRY(pp_maxpool_forward(ex, &d, x, y, &s->t[S_C0], err));
        if (!train) return PP_OK;
        PP_TRY(save_copy(ex, x, &s->t[S_X], err));
        return save_copy(ex, y, &s->t[S_OUT], err);
    }
    case PP_UNIT_IDENTITY: return pp_copy(ex, x, y, err);
    case PP_UNIT_BASIC:
    case PP_UNIT_BOTTLENECK: return block_forward(u, ex, s, x, y, train, err);
    case PP_UNIT_AVGPOOL: return pp_avgpool_forward(ex, x, y, err);
    case PP_UNIT_FC:
        PP_TRY(pp_linear_forward(ex, x, &u->value[u->fc_w], &u->value[u->fc_b], y, err));
        return train ? save_copy(ex, x, &s->t[S_X], err) : PP_OK;
    case PP_UNIT_DELAY: {
        PP_TRY(pp_delay(ex, u->spec.forward_ms, err));
        pp_tensor v;
        PP_TRY(delay_view(x, &v, err));
        PP_TRY(pp_tensor_alloc_on(&s->t[S_X], ex, PP_F32, 2, (int64_t[]){x->shape[0], 1}, err));
        PP_TRY(pp_avgpool_forward(ex, &v, &s->t[S_X], err));
        return pp_linear_forward(ex, &s->t[S_X], &u->dl_w, &u->dl_b, y, err);
    }
    }
    return pp_error_set(err, PP_ERR_INTERNAL, "unknown unit kind");
}

static pp_status kind_backward(pp_unit *u, pp_exec *ex, slot *s, const pp_tensor *dy, pp_tensor *dx,
                               pp_error *err)
{
    switch (u->spec.kind) {
    case PP_UNIT_CONV: return conv_bwd(u, ex, &u->conv[0], &s->t[S_X], dy, dx, err);
    case PP_UNIT_BN: {
        pp_tensor tmp = {0};
        pp_tensor *out = dx;
        if (!out) {
            PP_TRY(alloc_like(&tmp, ex, &s->t[S_X], err));
            out = &tmp;
        }
        pp_status st = bn_bwd(u, ex, 0, &s->t[S_X], dy, s, out, err);
        pp_tensor_free(&tmp);
        return st;
    }
    case PP_UNIT_RELU: return dx ? pp_relu_backward(ex, &s->t[S_OUT], dy, dx, err) : PP_OK;
    case PP_UNIT_MAXPOOL: {
        if (!dx) return PP_OK;
        pp_pool_desc d;
        PP_TRY(pool_desc(u, &s->t[S_X], &d, err));
        return pp_maxpool_backward(ex, &d, &s->t[S_X], &s->t[S_OUT], dy, &s->t[S_C0], dx, err);
    }
    case PP_UNIT_IDENTITY: return dx ? pp_copy(ex, dy, dx, err) : PP_OK;
    case PP_UNIT_BASIC:
    case PP_UNIT_BOTTLENECK: return block_backward(u, ex, s, dy, dx, err);
    case PP_UNIT_AVGPOOL: return dx ? pp_avgpool_backward(ex, dy, dx, err) : PP_OK;
    case PP_UNIT_FC:
        return pp_linear_backward(ex, &s->t[S_X], &u->value[u->fc_w], dy, dx, &u->grad[u->fc_w],
                                  &u->grad[u->fc_b], err);
    case PP_UNIT_DELAY: {
        PP_TRY(pp_delay(ex, u->spec.backward_ms, err));
        if (!dx) return PP_OK;
        pp_tensor dmean = {0}, v;
        pp_status st = pp_tensor_alloc_on(&dmean, ex, PP_F32, 2, s->t[S_X].shape, err);
        if (st == PP_OK) st = pp_zero(ex, &u->dl_dw, err);
        if (st == PP_OK) st = pp_zero(ex, &u->dl_db, err);
        if (st == PP_OK)
            st =
                pp_linear_backward(ex, &s->t[S_X], &u->dl_w, dy, &dmean, &u->dl_dw, &u->dl_db, err);
        if (st == PP_OK) st = delay_view(dx, &v, err);
        if (st == PP_OK) st = pp_avgpool_backward(ex, &dmean, &v, err);
        pp_tensor_free(&dmean);
        return st;
    }
    }
    return pp_error_set(err, PP_ERR_INTERNAL, "unknown unit kind");
}

/* ---- public forward / backward ------------------------------------------------------ */

static pp_status check_tensor(const pp_unit *u, const char *what, const pp_tensor *t, int ndim,
                              const int64_t *shape, pp_error *err)
{
    if (!t) return pp_error_set(err, PP_ERR_INVALID, "%s is NULL", what);
    if (t->dtype != PP_F32 || t->dev != u->dev)
        return pp_error_set(err, PP_ERR_INVALID, "%s must be F32 on %s (is %s on %s)", what,
                            u->dev->name, pp_dtype_name(t->dtype), t->dev ? t->dev->name : "none");
    if (ndim < 0) return PP_OK;
    pp_tensor want = {.ndim = ndim};
    for (int i = 0; i < ndim; i++) want.shape[i] = shape[i];
    if (!pp_tensor_same_shape(t, &want)) {
        char a[64], b[64];
        return pp_error_set(err, PP_ERR_INVALID, "%s has shape %s, expected %s", what,
                            pp_tensor_shape_str(t, a, sizeof a),
                            pp_tensor_shape_str(&want, b, sizeof b));
    }
    return PP_OK;
}

static pp_status get_slot(pp_unit *u, int mb, slot **out, pp_error *err)
{
    if (mb < 0 || mb >= MAX_MB)
        return pp_error_set(err, PP_ERR_INVALID, "micro-batch index %d not in [0, %d)", mb, MAX_MB);
    if (mb >= u->n_slots) {
        int n = u->n_slots ? u->n_slots : 4;
        while (n <= mb) n *= 2;
        slot *grown = realloc(u->slots, (size_t)n * sizeof *grown);
        if (!grown) return pp_error_set(err, PP_ERR_OOM, "out of host memory (slots)");
        memset(grown + u->n_slots, 0, (size_t)(n - u->n_slots) * sizeof *grown);
        u->slots = grown;
        u->n_slots = n;
    }
    *out = &u->slots[mb];
    return PP_OK;
}

static pp_status forward_impl(pp_unit *u, pp_exec *ex, int mb, const pp_tensor *x, pp_tensor *y,
                              bool train, pp_error *err)
{
    if (!ex || ex->dev != u->dev)
        return pp_error_set(err, PP_ERR_INVALID, "exec is not on the unit's device %s",
                            u->dev->name);
    PP_TRY(check_tensor(u, "x", x, -1, NULL, err));
    int out_ndim;
    int64_t out[PP_MAX_DIMS];
    PP_TRY(pp_unit_output_shape(&u->spec, x->ndim, x->shape, &out_ndim, out, err));
    PP_TRY(check_tensor(u, "y", y, out_ndim, out, err));
    slot local = {0};
    slot *s = &local;
    if (train) {
        PP_TRY(get_slot(u, mb, &s, err));
        if (s->live)
            return pp_error_set(err, PP_ERR_INVALID,
                                "micro-batch %d is already in flight (forward twice without "
                                "backward)",
                                mb);
    }
    pp_status st = kind_forward(u, ex, s, x, y, train, err);
    if (st != PP_OK || !train) {
        slot_clear(s);
        return st;
    }
    s->live = true;
    s->in_ndim = x->ndim;
    memcpy(s->in_shape, x->shape, sizeof s->in_shape);
    u->in_flight++;
    return PP_OK;
}

pp_status pp_unit_forward(pp_unit *u, pp_exec *ex, int mb, const pp_tensor *x, pp_tensor *y,
                          bool train, pp_error *err)
{
    if (!u) return pp_error_set(err, PP_ERR_INVALID, "pp_unit_forward: NULL unit");
    pp_status st = forward_impl(u, ex, mb, x, y, train, err);
    if (st != PP_OK) pp_error_prefix(err, "%s forward (micro-batch %d)", u->spec.name, mb);
    return st;
}

static pp_status backward_impl(pp_unit *u, pp_exec *ex, int mb, const pp_tensor *dy, pp_tensor *dx,
                               pp_error *err)
{
    if (!ex || ex->dev != u->dev)
        return pp_error_set(err, PP_ERR_INVALID, "exec is not on the unit's device %s",
                            u->dev->name);
    if (mb < 0 || mb >= u->n_slots || !u->slots[mb].live)
        return pp_error_set(err, PP_ERR_INVALID, "micro-batch %d has no training forward in flight",
                            mb);
    slot *s = &u->slots[mb];
    int out_ndim;
    int64_t out[PP_MAX_DIMS];
    PP_TRY(pp_unit_output_shape(&u->spec, s->in_ndim, s->in_shape, &out_ndim, out, err));
    PP_TRY(check_tensor(u, "dy", dy, out_ndim, out, err));
    if (dx) PP_TRY(check_tensor(u, "dx", dx, s->in_ndim, s->in_shape, err));
    pp_status st = kind_backward(u, ex, s, dy, dx, err);
    slot_clear(s);
    u->in_flight--;
    return st;
}

pp_status pp_unit_backward(pp_unit *u, pp_exec *ex, int mb, const pp_tensor *dy, pp_tensor *dx,
                           pp_error *err)
{
    if (!u) return pp_error_set(err, PP_ERR_INVALID, "pp_unit_backward: NULL unit");
    pp_status st = backward_impl(u, ex, mb, dy, dx, err);
    if (st != PP_OK) pp_error_prefix(err, "%s backward (micro-batch %d)", u->spec.name, mb);
    return st;
}

void pp_unit_release(pp_unit *u, int mb)
{
    if (!u || mb < 0 || mb >= u->n_slots || !u->slots[mb].live) return;
    slot_clear(&u->slots[mb]);
    u->in_flight--;
}

int pp_unit_in_flight(const pp_unit *u)
{
    return u->in_flight;
}

bool pp_unit_saved_input(const pp_unit *u, int mb, int *ndim, int64_t *shape)
{
    if (!u || mb < 0 || mb >= u->n_slots || !u->slots[mb].live) return false;
    if (ndim) *ndim = u->slots[mb].in_ndim;
    if (shape) memcpy(shape, u->slots[mb].in_shape, sizeof u->slots[mb].in_shape);
    return true;
}

pp_status pp_unit_zero_grads(pp_unit *u, pp_exec *ex, pp_error *err)
{
    for (int i = 0; i < u->n_entries; i++)
        if (u->entry[i].grad) PP_TRY(pp_zero(ex, &u->grad[i], err));
    return PP_OK;
}

pp_status pp_unit_sync_buffers(pp_unit *u, pp_error *err)
{
    for (int i = 0; i < 4; i++) {
        bn_layer *b = &u->bn[i];
        if (b->pending == 0) continue;
        pp_tensor *nbt = &u->value[b->e + 4];
        int64_t v;
        PP_TRY(pp_tensor_to_host(nbt, &v, sizeof v, err));
        v += b->pending;
        PP_TRY(pp_tensor_from_host(nbt, &v, sizeof v, err));
        b->pending = 0;
    }
    return PP_OK;
}
