/*
 * native.c - the CUDA backend's native entry (backend.h): ops on bf16
 * operands and NHWC layouts: convolutions through cuDNN's graph API
 * (gconv.c; the stem's 3 input channels padded to 8), the linear layer
 * through cuBLASLt (blaslt.c), batch norm (bn_nhwc.cu), pooling and
 * elementwise ops by nhwc.cu's kernels; and the layout transposes. Batch
 * norm over f32 NCHW runs here too (bn_nchw.cu, with the fused add and
 * ReLU; PP_CUDA_BN_CUDNN=1 declines it, so that cuDNN's batch norm and the
 * elementwise ops run).
 * Combinations it does not run return PP_ERR_UNSUPPORTED so that ops.c
 * converts the operands to f32 NCHW (ops_adapt.c) and calls the f32 entries.
 *
 * Memory order: a 4-D tensor is in NHWC order when its layout says so, or
 * when both orders coincide (H = W = 1, or C = 1); the kernels need that
 * order, whatever the layout field.
 */
#include "blaslt.h"
#include "bn_nchw.h"
#include "bn_nhwc.h"
#include "gconv.h"
#include "internal.h"
#include "nhwc.h"

static bool bf16(const pp_tensor *t)
{
    return t && t->dtype == PP_BF16;
}

static bool nhwc_order(const pp_tensor *t)
{
    return t && t->ndim == 4 &&
           (t->layout == PP_NHWC || t->shape[1] == 1 || t->shape[2] * t->shape[3] == 1);
}

/* every tensor bf16 in NHWC order */
static bool bf16_nhwc(int n, pp_tensor *const *t)
{
    for (int i = 0; i < n; i++)
        if (!bf16(t[i]) || !nhwc_order(t[i])) return false;
    return true;
}

/* every tensor f32 in NCHW order (the f32 batch norm's kernels, bn_nchw.cu) */
static bool f32_nchw(int n, pp_tensor *const *t)
{
    for (int i = 0; i < n; i++)
        if (!t[i] || t[i]->dtype != PP_F32 || t[i]->ndim != 4 ||
            pp_tensor_effective_layout(t[i]) != PP_NCHW)
            return false;
    return true;
}

/* PP_CUDA_BN_CUDNN (set and not 0): f32 batch norm through cuDNN and the
 * elementwise ops (ops.c's fallback), to compare */
static bool bn_cudnn(void)
{
    static int on = -1;
    return pp_cuda_env_on("PP_CUDA_BN_CUDNN", &on);
}

/* the activations of a batch-norm op in one dtype and order: bf16 NHWC or f32 NCHW */
static bool bn_operands(int n, pp_tensor *const *t)
{
    return bf16_nhwc(n, t) || (!bn_cudnn() && f32_nchw(n, t));
}

static pp_status declined(pp_native_op op, pp_error *err)
{
    return pp_error_set(err, PP_ERR_UNSUPPORTED, "cuda: no native kernel for op %d here", (int)op);
}

pp_status pp_cuda_transpose(pp_exec *ex, int64_t n, int64_t rows, int64_t cols, size_t elem,
                            const void *x, void *y, pp_error *err)
{
    if (elem != 2 && elem != 4)
        return pp_error_set(err, PP_ERR_INVALID, "transpose: %zu-byte elements", elem);
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
    return PP_CUDA(ex->dev, err, pp_cuda_launch_transpose(ce->stream, n, rows, cols, elem, x, y));
}

static pp_status elementwise(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_bf16_ew kind,
                             const pp_tensor *a, const pp_tensor *b, pp_tensor *y, pp_error *err)
{
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_bf16_elementwise(ce->stream, pp_cuda_max_grid(ex), kind,
                                                   pp_tensor_numel(a), a->data,
                                                   b ? b->data : NULL, y->data));
}

/* A batch norm's operands, whichever op carries them (NULL where it has none). */
typedef struct bn_args {
    bool backward, train, relu;
    void *x, *gamma, *beta, *rmean, *rvar, *add, *y, *smean, *sinvstd; /* forward */
    void *dy, *relu_y, *dx, *dgamma, *dbeta, *g;                       /* backward */
} bn_args;

static void *data(const pp_tensor *t)
{
    return t ? t->data : NULL;
}

/* the operands of op, in the orders of batchnorm's comment below */
static bn_args bn_unpack(pp_native_op op, const pp_bn_act_desc *a, pp_tensor *const *t)
{
    bn_args o = {0};
    o.x = t[0]->data;
    switch (op) {
    case PP_NATIVE_BN_BACKWARD:
    case PP_NATIVE_BN_BACKWARD_RELU: {
        const int k = op == PP_NATIVE_BN_BACKWARD_RELU; /* relu_y shifts the rest by one */
        o.backward = true;
        o.relu_y = k ? t[1]->data : NULL;
        o.dy = t[1 + k]->data;
        o.gamma = t[2 + k]->data;
        o.smean = t[3 + k]->data;
        o.sinvstd = t[4 + k]->data;
        o.dx = t[5 + k]->data;
        o.dgamma = t[6 + k]->data;
        o.dbeta = t[7 + k]->data;
        o.g = k ? data(t[9]) : NULL;
        return o;
    }
    default: { /* BN_TRAIN, BN_INFER, BN_ACT (add after rvar) */
        const int k = op == PP_NATIVE_BN_ACT;
        o.train = a->train;
        o.relu = a->relu;
        o.gamma = t[1]->data;
        o.beta = t[2]->data;
        o.rmean = t[3]->data;
        o.rvar = t[4]->data;
        o.add = k ? data(t[5]) : NULL;
        o.y = t[5 + k]->data;
        o.smean = a->train ? t[6 + k]->data : NULL;
        o.sinvstd = a->train ? t[7 + k]->data : NULL;
        return o;
    }
    }
}

/* The f32 NCHW batch norms (bn_nchw.cu). */
static cudaError_t batchnorm_f32(pp_cuda_exec *ce, const pp_bn_desc *d, const bn_args *o,
                                 float *s)
{
    const int64_t hw = (int64_t)d->h * d->w;
    if (o->backward)
        return pp_cuda_launch_bn_backward_nchw(ce->stream, d->n, d->c, hw, o->x, o->dy,
                                               o->relu_y, o->gamma, o->smean, o->sinvstd, o->dx,
                                               o->dgamma, o->dbeta, o->g, s);
    if (o->train)
        return pp_cuda_launch_bn_train_nchw(ce->stream, d->n, d->c, hw, d->eps, d->momentum,
                                            o->x, o->gamma, o->beta, o->rmean, o->rvar, o->add,
                                            o->relu, o->y, o->smean, o->sinvstd, s);
    return pp_cuda_launch_bn_infer_nchw(ce->stream, d->n, d->c, hw, d->eps, o->x, o->gamma,
                                        o->beta, o->rmean, o->rvar, o->add, o->relu, o->y, s);
}

/* The bf16 NHWC batch norms (bn_nhwc.cu). */
static cudaError_t batchnorm_bf16(pp_cuda_exec *ce, unsigned g, const pp_bn_desc *d,
                                  const bn_args *o, float *s)
{
    const int64_t rows = (int64_t)d->n * d->h * d->w;
    if (o->backward)
        return pp_cuda_launch_bn_backward_nhwc(ce->stream, g, rows, d->c, o->x, o->dy, o->relu_y,
                                               o->gamma, o->smean, o->sinvstd, o->dx, o->dgamma,
                                               o->dbeta, o->g, s);
    if (o->train)
        return pp_cuda_launch_bn_train_nhwc(ce->stream, g, rows, d->c, d->eps, d->momentum, o->x,
                                            o->gamma, o->beta, o->rmean, o->rvar, o->add,
                                            o->relu, o->y, o->smean, o->sinvstd, s);
    return pp_cuda_launch_bn_infer_nhwc(ce->stream, g, rows, d->c, d->eps, o->x, o->gamma,
                                        o->beta, o->rmean, o->rvar, o->add, o->relu, o->y, s);
}

/* The batch norms: plain (BN_TRAIN: x, gamma, beta, rmean, rvar, y, smean,
 * sinvstd; BN_INFER: x, gamma, beta, rmean, rvar, y; BN_BACKWARD: x, dy,
 * gamma, smean, sinvstd, dx, dgamma, dbeta) and fused (BN_ACT: x, gamma,
 * beta, rmean, rvar, add, y, smean, sinvstd, + add and ReLU; BN_BACKWARD_RELU:
 * x, relu_y, dy, gamma, smean, sinvstd, dx, dgamma, dbeta, g (the ReLU's
 * gradient, written when given)), over bf16 NHWC or
 * f32 NCHW activations, each as its kernels' passes. */
static pp_status batchnorm(pp_exec *ex, pp_cuda_exec *ce, pp_native_op op, const void *desc,
                           pp_tensor *const *t, pp_error *err)
{
    const pp_bn_act_desc plain = {op == PP_NATIVE_BN_ACT ? ((const pp_bn_act_desc *)desc)->bn
                                                         : *(const pp_bn_desc *)desc,
                                  op != PP_NATIVE_BN_INFER, false};
    const pp_bn_act_desc *a = op == PP_NATIVE_BN_ACT ? desc : &plain;
    const pp_bn_desc *d = &a->bn;
    const bool f32 = t[0]->dtype == PP_F32;
    const size_t s_bytes =
        (f32 ? pp_cuda_bn_nchw_scratch_floats(d->n, d->c)
             : pp_cuda_bn_scratch_floats((int64_t)d->n * d->h * d->w, d->c)) *
        sizeof(float);
    void *s = NULL;
    PP_TRY(pp_cuda_scratch_alloc(ex, s_bytes, &s, err));
    const bn_args o = bn_unpack(op, a, t);
    const cudaError_t rc = f32 ? batchnorm_f32(ce, d, &o, s)
                               : batchnorm_bf16(ce, pp_cuda_max_grid(ex), d, &o, s);
    pp_status st = PP_CUDA(ex->dev, err, rc);
    pp_cuda_scratch_free(ex, s, s_bytes);
    return st;
}

static pp_cuda_pool_geom4 geom(const pp_pool_desc *d)
{
    return (pp_cuda_pool_geom4){d->n, d->c, d->h, d->w, d->p, d->q, d->kernel, d->stride, d->pad};
}

/* ---- convolutions through the graph API (gconv.c) ---------------------------- */

/* Channels the stem's input is padded to: cuDNN's bf16 NHWC engines want
 * C % 8 == 0 (tensor-core loads of 16 bytes). */
static int padded_channels(int c)
{
    return (c + 7) / 8 * 8;
}

/* a bf16 NHWC weight (K, R, S, C) padded to cp channels, in ex's stream order */
static pp_status pad(pp_exec *ex, pp_cuda_exec *ce, int64_t rows, int c, int cp, const void *x,
                     void **out, pp_error *err)
{
    PP_TRY(pp_cuda_scratch_alloc(ex, (size_t)rows * cp * 2, out, err));
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_pad_channels(ce->stream, pp_cuda_max_grid(ex), rows, c, cp, x,
                                               *out));
}

static pp_status conv(pp_exec *ex, pp_cuda_exec *ce, pp_native_op op, const pp_conv2d_desc *d,
                      pp_tensor *const *t, pp_error *err)
{
    pp_conv2d_desc dp = *d;
    const int cp = padded_channels(d->c);
    const bool padded = cp != d->c;
    const size_t x_bytes = (size_t)d->n * d->h * d->w * cp * 2,
                 w_bytes = (size_t)d->k * d->r * d->s * cp * 2;
    void *xp = NULL, *wp = NULL, *low = NULL;
    pp_status st = PP_OK;
    const unsigned g = pp_cuda_max_grid(ex);
    dp.c = cp;
    switch (op) {
    case PP_NATIVE_CONV_FWD: /* x, w, y */
        if (!padded)
            return pp_cuda_gconv(ex, d, PP_GCONV_FWD, PP_BF16, true, t[0]->data, t[1]->data,
                                 t[2]->data, 1.0f, 0.0f, err);
        /* the graph API's refusal of an unaligned y, before any padding is enqueued */
        if (!pp_cuda_aligned16(t[2]->data)) return declined(op, err);
        st = pad(ex, ce, (int64_t)d->n * d->h * d->w, d->c, cp, t[0]->data, &xp, err);
        if (st == PP_OK)
            st = pad(ex, ce, (int64_t)d->k * d->r * d->s, d->c, cp, t[1]->data, &wp, err);
        if (st == PP_OK)
            st = pp_cuda_gconv(ex, &dp, PP_GCONV_FWD, PP_BF16, true, xp, wp, t[2]->data, 1.0f,
                               0.0f, err);
        break;
    case PP_NATIVE_CONV_DGRAD: /* dy, w, dx */
    case PP_NATIVE_CONV_DGRAD_ACC:
        if (padded) return declined(op, err); /* the stem's input gradient: never asked for */
        return pp_cuda_gconv(ex, d, PP_GCONV_DGRAD, PP_BF16, true, t[0]->data, t[1]->data,
                             t[2]->data, 1.0f, op == PP_NATIVE_CONV_DGRAD_ACC ? 1.0f : 0.0f, err);
    default: /* CONV_WGRAD: x, dy, dw (f32 KCRS, +=): a bf16 KRSC gradient, then added */
        if (padded && !pp_cuda_aligned16(t[1]->data)) return declined(op, err);
        if (padded)
            st = pad(ex, ce, (int64_t)d->n * d->h * d->w, d->c, cp, t[0]->data, &xp, err);
        if (st == PP_OK) st = pp_cuda_scratch_alloc(ex, w_bytes, &low, err);
        if (st == PP_OK)
            st = pp_cuda_gconv(ex, &dp, PP_GCONV_WGRAD, PP_BF16, true, padded ? xp : t[0]->data,
                               t[1]->data, low, 1.0f, 0.0f, err);
        if (st == PP_OK)
            st = PP_CUDA(ex->dev, err,
                         pp_cuda_launch_wgrad_add(ce->stream, g, d->k, d->c, d->r * d->s, cp, low,
                                                  t[2]->data));
        break;
    }
    pp_cuda_scratch_free(ex, xp, x_bytes);
    pp_cuda_scratch_free(ex, wp, w_bytes);
    pp_cuda_scratch_free(ex, low, w_bytes);
    return st;
}

/* ---- the linear layer through cuBLASLt (blaslt.c) ------------------------------ */

static pp_status linear(pp_exec *ex, pp_native_op op, pp_tensor *const *t, pp_error *err)
{
    if (op == PP_NATIVE_LINEAR_DGRAD) { /* w, dy, dx */
        const pp_tensor *w = t[0], *dy = t[1];
        return pp_cuda_lt_linear_backward(ex, (int)dy->shape[0], (int)w->shape[1],
                                          (int)w->shape[0], NULL, w->data, dy->data, t[2]->data,
                                          NULL, NULL, err);
    }
    if (op == PP_NATIVE_LINEAR_WGRAD) { /* x, dy, dw, db */
        const pp_tensor *x = t[0], *dy = t[1];
        return pp_cuda_lt_linear_backward(ex, (int)x->shape[0], (int)x->shape[1],
                                          (int)dy->shape[1], x->data, NULL, dy->data, NULL,
                                          t[2]->data, t[3]->data, err);
    }
    const pp_tensor *x = t[0], *w = t[1];
    const int n = (int)x->shape[0], in = (int)x->shape[1], out = (int)w->shape[0];
    if (op == PP_NATIVE_LINEAR_FWD) /* x, w, b, y */
        return pp_cuda_lt_linear_forward(ex, n, in, out, x->data, w->data, t[2]->data,
                                         t[3]->data, t[3]->dtype == PP_F32, err);
    /* x, w, dy, dx (may be NULL), dw, db */
    return pp_cuda_lt_linear_backward(ex, n, in, out, x->data, w->data, t[2]->data,
                                      t[3] ? t[3]->data : NULL, t[4]->data, t[5]->data, err);
}

/* A convolution's bf16 weight copy in K,R,S,C order (NHWC layout, or orders
 * that coincide). */
static bool krsc(const pp_tensor *w)
{
    return bf16(w) && w->ndim == 4 &&
           (w->layout == PP_NHWC || w->shape[1] == 1 || w->shape[2] * w->shape[3] == 1);
}

/* b in a's dtype and order, for the batch norms (a passed bn_operands) */
static bool same_kind(const pp_tensor *a, const pp_tensor *b)
{
    pp_tensor *const p[] = {(pp_tensor *)b};
    return a->dtype == PP_BF16 ? bf16_nhwc(1, p) : f32_nchw(1, p);
}

/* Whether op on t runs here (the layouts and dtypes its kernels take). */
static bool supported(pp_native_op op, pp_tensor *const *t)
{
    switch (op) {
    case PP_NATIVE_RELU_FWD:
    case PP_NATIVE_ACCUMULATE: return bf16(t[0]) && bf16(t[1]);
    case PP_NATIVE_RELU_BWD:
    case PP_NATIVE_ADD:
    case PP_NATIVE_ADD_RELU: return bf16(t[0]) && bf16(t[1]) && bf16(t[2]);
    case PP_NATIVE_BN_TRAIN:
    case PP_NATIVE_BN_INFER: return bn_operands(1, t) && same_kind(t[0], t[5]);
    case PP_NATIVE_BN_BACKWARD: return bn_operands(2, t) && same_kind(t[0], t[5]);
    case PP_NATIVE_BN_ACT: return bn_operands(1, t) && (!t[5] || same_kind(t[0], t[5])) &&
                                  same_kind(t[0], t[6]);
    case PP_NATIVE_BN_BACKWARD_RELU:
        return bn_operands(3, t) && same_kind(t[0], t[6]) && (!t[9] || same_kind(t[0], t[9]));
    case PP_NATIVE_MAXPOOL_FWD: return bf16_nhwc(2, t);
    case PP_NATIVE_MAXPOOL_BWD: return bf16_nhwc(3, t) && bf16_nhwc(1, t + 4);
    case PP_NATIVE_AVGPOOL_FWD: return bf16_nhwc(1, t);
    case PP_NATIVE_AVGPOOL_BWD: return bf16_nhwc(1, t + 1);
    case PP_NATIVE_CONV_FWD: /* x, w, y */
    case PP_NATIVE_CONV_DGRAD: /* dy, w, dx */
    case PP_NATIVE_CONV_DGRAD_ACC: return bf16_nhwc(1, t) && krsc(t[1]) && bf16_nhwc(1, t + 2);
    case PP_NATIVE_CONV_WGRAD: return bf16_nhwc(2, t); /* x, dy; dw f32 */
    case PP_NATIVE_LINEAR_FWD: return bf16(t[0]) && bf16(t[1]); /* y bf16 or f32 */
    case PP_NATIVE_LINEAR_BWD: return bf16(t[0]) && bf16(t[1]) && bf16(t[2]) &&
                                      (!t[3] || bf16(t[3]));
    case PP_NATIVE_LINEAR_DGRAD: return bf16(t[0]) && bf16(t[1]) && bf16(t[2]); /* w, dy, dx */
    case PP_NATIVE_LINEAR_WGRAD: return bf16(t[0]) && bf16(t[1]); /* x, dy; dw, db f32 */
    default: return false;
    }
}

pp_status pp_cuda_native(pp_exec *ex, pp_native_op op, const void *desc, pp_tensor *const *t,
                         pp_error *err)
{
    if (!supported(op, t)) return declined(op, err);
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
    const unsigned g = pp_cuda_max_grid(ex);
    switch (op) {
    case PP_NATIVE_RELU_FWD: return elementwise(ex, ce, PP_CUDA_BF16_RELU, t[0], NULL, t[1], err);
    case PP_NATIVE_RELU_BWD:
        return elementwise(ex, ce, PP_CUDA_BF16_RELU_BACKWARD, t[0], t[1], t[2], err);
    case PP_NATIVE_ADD: return elementwise(ex, ce, PP_CUDA_BF16_ADD, t[0], t[1], t[2], err);
    case PP_NATIVE_ADD_RELU:
        return elementwise(ex, ce, PP_CUDA_BF16_ADD_RELU, t[0], t[1], t[2], err);
    case PP_NATIVE_ACCUMULATE: /* y = x + y */
        return elementwise(ex, ce, PP_CUDA_BF16_ADD, t[0], t[1], t[1], err);
    case PP_NATIVE_BN_TRAIN:
    case PP_NATIVE_BN_INFER:
    case PP_NATIVE_BN_BACKWARD:
    case PP_NATIVE_BN_ACT:
    case PP_NATIVE_BN_BACKWARD_RELU: return batchnorm(ex, ce, op, desc, t, err);
    case PP_NATIVE_MAXPOOL_FWD: /* x, y, idx */
        return PP_CUDA(ex->dev, err,
                       pp_cuda_launch_maxpool_nhwc(ce->stream, g, geom(desc), t[0]->data,
                                                   t[1]->data, t[2]->data));
    case PP_NATIVE_MAXPOOL_BWD: /* x, y, dy, idx, dx */
        return PP_CUDA(ex->dev, err,
                       pp_cuda_launch_maxpool_backward_nhwc(ce->stream, g, geom(desc), t[2]->data,
                                                            t[3]->data, t[4]->data));
    case PP_NATIVE_AVGPOOL_FWD: /* x (N,C,H,W), y (N,C) */
        return PP_CUDA(ex->dev, err,
                       pp_cuda_launch_gap_nhwc(ce->stream, g, t[0]->shape[0], (int)t[0]->shape[1],
                                               t[0]->shape[2] * t[0]->shape[3], t[0]->data,
                                               t[1]->data, bf16(t[1])));
    case PP_NATIVE_AVGPOOL_BWD: /* dy (N,C), dx (N,C,H,W) */
        return PP_CUDA(ex->dev, err,
                       pp_cuda_launch_gap_backward_nhwc(
                           ce->stream, g, t[1]->shape[0], (int)t[1]->shape[1],
                           t[1]->shape[2] * t[1]->shape[3], t[0]->data, bf16(t[0]), t[1]->data));
    case PP_NATIVE_CONV_FWD:
    case PP_NATIVE_CONV_DGRAD:
    case PP_NATIVE_CONV_DGRAD_ACC:
    case PP_NATIVE_CONV_WGRAD: return conv(ex, ce, op, desc, t, err);
    case PP_NATIVE_LINEAR_FWD:
    case PP_NATIVE_LINEAR_BWD:
    case PP_NATIVE_LINEAR_DGRAD:
    case PP_NATIVE_LINEAR_WGRAD: return linear(ex, op, t, err);
    default: return declined(op, err);
    }
}
