/*
 * ops.c - boundary checks of the op API, then dispatch to the exec's backend.
 * Every check names the op and the offending tensor with its shape.
 *
 * bf16 operands: where ops.h allows BF16 (activations, their gradients and
 * the bf16 copies of weights), backends still compute in f32: each bf16
 * input is widened (exactly) into a stream-ordered f32 temporary, each bf16
 * output is computed into one and rounded to nearest even when the op ends.
 * An op on bf16 tensors therefore gives the f32 op's result on the bf16
 * values, rounded once on output. With no bf16 operand nothing changes.
 * The stand-ins and the offer to a backend's native entry are in
 * ops_adapt.c; the batch-norm entries, which call the elementwise ones
 * here, are in ops_batchnorm.c.
 */
#include "ops.h"

#include <stddef.h>

#include "backend.h"
#include "ops_adapt.h"
#include "ops_check.h"

#define ACT PP_OPS_ACT

size_t pp_conv2d_workspace_bytes(pp_device_kind kind, const pp_conv2d_desc *d)
{
    const pp_backend_ops *ops = kind == PP_DEVICE_CUDA ? pp_backend_cuda() : pp_backend_cpu();
    return d && ops && ops->conv2d_workspace ? ops->conv2d_workspace(d) : 0;
}

pp_status pp_conv2d_desc_init(pp_conv2d_desc *d, int n, int c, int h, int w, int k, int kernel,
                              int stride, int pad, pp_error *err)
{
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || k <= 0 || kernel <= 0 || stride <= 0 || pad < 0)
        return pp_error_set(err, PP_ERR_INVALID,
                            "conv2d: bad geometry n=%d c=%d h=%d w=%d k=%d kernel=%d stride=%d "
                            "pad=%d",
                            n, c, h, w, k, kernel, stride, pad);
    int p = (h + 2 * pad - kernel) / stride + 1;
    int q = (w + 2 * pad - kernel) / stride + 1;
    if (h + 2 * pad < kernel || w + 2 * pad < kernel || p <= 0 || q <= 0)
        return pp_error_set(err, PP_ERR_INVALID,
                            "conv2d: %dx%d input with padding %d is smaller than the %dx%d kernel",
                            h, w, pad, kernel, kernel);
    *d = (pp_conv2d_desc){n, c, h, w, k, kernel, kernel, stride, stride, pad, pad, p, q};
    return PP_OK;
}

pp_status pp_pool_desc_init(pp_pool_desc *d, int n, int c, int h, int w, int kernel, int stride,
                            int pad, pp_error *err)
{
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || kernel <= 0 || stride <= 0 || pad < 0 ||
        2 * pad > kernel)
        return pp_error_set(err, PP_ERR_INVALID,
                            "pool: bad geometry n=%d c=%d h=%d w=%d kernel=%d stride=%d pad=%d",
                            n, c, h, w, kernel, stride, pad);
    if (h + 2 * pad < kernel || w + 2 * pad < kernel)
        return pp_error_set(err, PP_ERR_INVALID, "pool: %dx%d input is smaller than the kernel",
                            h, w);
    int p = (h + 2 * pad - kernel) / stride + 1;
    int q = (w + 2 * pad - kernel) / stride + 1;
    *d = (pp_pool_desc){n, c, h, w, kernel, stride, pad, p, q};
    return PP_OK;
}

static pp_status check_conv(pp_exec *ex, const char *op, const pp_conv2d_desc *d, pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!d) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL descriptor", op);
    if (d->n <= 0 || d->c <= 0 || d->k <= 0 || d->p <= 0 || d->q <= 0 || d->stride_h <= 0 ||
        d->stride_w <= 0 || d->pad_h < 0 || d->pad_w < 0 || d->r <= 0 || d->s <= 0 ||
        d->p != (d->h + 2 * d->pad_h - d->r) / d->stride_h + 1 ||
        d->q != (d->w + 2 * d->pad_w - d->s) / d->stride_w + 1)
        return pp_error_set(err, PP_ERR_INVALID, "%s: inconsistent descriptor", op);
    return PP_OK;
}

pp_status pp_conv2d_forward(pp_exec *ex, const pp_conv2d_desc *d, const pp_tensor *x,
                            const pp_tensor *w, pp_tensor *y, pp_error *err)
{
    const char *op = "conv2d_forward";
    PP_TRY(check_conv(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 4, d->n, d->c, d->h, d->w, err));
    PP_TRY(pp_ops_check(ex, op, "w", w, ACT, 4, d->k, d->c, d->r, d->s, err));
    PP_TRY(pp_ops_check(ex, op, "y", y, ACT, 4, d->n, d->k, d->p, d->q, err));
    NATIVE(PP_NATIVE_CONV_FWD, d, false, T(x), T(w), y);
    wide v = {0};
    const float *xd = WIDE_IN(v, x), *wd = WIDE_IN(v, w);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(conv2d_forward, d, xd, wd, yd, err));
}

pp_status pp_conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d, const pp_tensor *dy,
                                  const pp_tensor *w, pp_tensor *dx, pp_error *err)
{
    const char *op = "conv2d_backward_data";
    PP_TRY(check_conv(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "dy", dy, ACT, 4, d->n, d->k, d->p, d->q, err));
    PP_TRY(pp_ops_check(ex, op, "w", w, ACT, 4, d->k, d->c, d->r, d->s, err));
    PP_TRY(pp_ops_check(ex, op, "dx", dx, ACT, 4, d->n, d->c, d->h, d->w, err));
    NATIVE(PP_NATIVE_CONV_DGRAD, d, false, T(dy), T(w), dx);
    wide v = {0};
    const float *dyd = WIDE_IN(v, dy), *wd = WIDE_IN(v, w);
    float *dxd = WIDE_OUT(v, dx);
    return WIDE_RUN(v, DISPATCH(conv2d_backward_data, d, dyd, wd, dxd, err));
}

pp_status pp_conv2d_backward_filter(pp_exec *ex, const pp_conv2d_desc *d, const pp_tensor *x,
                                    const pp_tensor *dy, pp_tensor *dw, pp_error *err)
{
    const char *op = "conv2d_backward_filter";
    PP_TRY(check_conv(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 4, d->n, d->c, d->h, d->w, err));
    PP_TRY(pp_ops_check(ex, op, "dy", dy, ACT, 4, d->n, d->k, d->p, d->q, err));
    PP_TRY(pp_ops_check(ex, op, "dw", dw, PP_F32, 4, d->k, d->c, d->r, d->s, err));
    PP_TRY(pp_ops_check_nchw(op, "dw", dw, err));
    NATIVE(PP_NATIVE_CONV_WGRAD, d, false, T(x), T(dy), dw);
    wide v = {0};
    const float *xd = WIDE_IN(v, x), *dyd = WIDE_IN(v, dy);
    if (x->dtype != PP_BF16 && dy->dtype != PP_BF16)
        return WIDE_RUN(v, DISPATCH(conv2d_backward_filter, d, xd, dyd, dw->data, err));
    /* mixed precision: this call's gradient is rounded to bf16, then added */
    pp_tensor part = {0};
    pp_status st = v.st;
    if (st == PP_OK) st = pp_ops_low_begin(ex, dw, &part, err);
    if (st == PP_OK) {
        st = DISPATCH(conv2d_backward_filter, d, xd, dyd, part.data, err);
        st = pp_ops_low_end(ex, &part, dw, st, err);
    }
    return pp_ops_wide_end(&v, ex, st, err);
}

pp_status pp_conv2d_backward_data_accumulate(pp_exec *ex, const pp_conv2d_desc *d,
                                             const pp_tensor *dy, const pp_tensor *w,
                                             pp_tensor *dx, pp_error *err)
{
    const char *op = "conv2d_backward_data_accumulate";
    PP_TRY(check_conv(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "dy", dy, ACT, 4, d->n, d->k, d->p, d->q, err));
    PP_TRY(pp_ops_check(ex, op, "w", w, ACT, 4, d->k, d->c, d->r, d->s, err));
    PP_TRY(pp_ops_check(ex, op, "dx", dx, ACT, 4, d->n, d->c, d->h, d->w, err));
    NATIVE(PP_NATIVE_CONV_DGRAD_ACC, d, false, T(dy), T(w), dx);
    wide v = {0};
    const float *dyd = WIDE_IN(v, dy), *wd = WIDE_IN(v, w);
    float *dxd = WIDE_INOUT(v, dx);
    return WIDE_RUN(v, DISPATCH(conv2d_backward_data_accumulate, d, dyd, wd, dxd, err));
}

typedef pp_status (*ew1_fn)(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err);
typedef pp_status (*ew2_fn)(pp_exec *ex, int64_t n, const float *a, const float *b, float *y,
                            pp_error *err);

/* The backend's entry fn of ex's device, NULL when ex has none (check_exec reports it). */
#define ENTRY(fn) (ex && ex->dev ? ex->dev->ops->fn : NULL)

/* y = f(x) elementwise (f32 or bf16 activations, computed in f32). */
static pp_status unary(pp_exec *ex, const char *op, ew1_fn fn, int nop, const pp_tensor *x,
                       pp_tensor *y, pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(pp_ops_check_act(ex, op, "x", x, err));
    PP_TRY(pp_ops_check_like(ex, op, "y", y, x, err));
    PP_TRY(pp_ops_check_layout_like(op, "y", y, x, err));
    if (!fn) return pp_ops_unsupported(ex, op, err);
    if (nop >= 0) NATIVE((pp_native_op)nop, NULL, true, T(x), y);
    wide v = {.keep_layout = true};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, fn(ex, pp_tensor_numel(x), xd, yd, err));
}

/* y = f(a, b) elementwise; the names are those of the messages. */
static pp_status binary(pp_exec *ex, const char *op, ew2_fn fn, int nop, const char *an,
                        const pp_tensor *a, const char *bn, const pp_tensor *b, const char *yn,
                        pp_tensor *y, pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(pp_ops_check_act(ex, op, an, a, err));
    PP_TRY(pp_ops_check_like(ex, op, bn, b, a, err));
    PP_TRY(pp_ops_check_like(ex, op, yn, y, a, err));
    PP_TRY(pp_ops_check_layout_like(op, bn, b, a, err));
    PP_TRY(pp_ops_check_layout_like(op, yn, y, a, err));
    if (!fn) return pp_ops_unsupported(ex, op, err);
    if (nop >= 0) NATIVE((pp_native_op)nop, NULL, true, T(a), T(b), y);
    wide v = {.keep_layout = true};
    const float *ad = WIDE_IN(v, a), *bd = WIDE_IN(v, b);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, fn(ex, pp_tensor_numel(a), ad, bd, yd, err));
}

pp_status pp_relu_forward(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    return unary(ex, "relu_forward", ENTRY(relu_forward), PP_NATIVE_RELU_FWD, x, y, err);
}

pp_status pp_relu_backward(pp_exec *ex, const pp_tensor *y, const pp_tensor *dy, pp_tensor *dx,
                           pp_error *err)
{
    return binary(ex, "relu_backward", ENTRY(relu_backward), PP_NATIVE_RELU_BWD, "y", y, "dy",
                  dy, "dx", dx, err);
}

pp_status pp_sigmoid_forward(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    return unary(ex, "sigmoid_forward", ENTRY(sigmoid_forward), -1, x, y, err);
}

pp_status pp_sigmoid_backward(pp_exec *ex, const pp_tensor *y, const pp_tensor *dy, pp_tensor *dx,
                              pp_error *err)
{
    return binary(ex, "sigmoid_backward", ENTRY(sigmoid_backward), -1, "y", y, "dy", dy, "dx",
                  dx, err);
}

pp_status pp_add(pp_exec *ex, const pp_tensor *a, const pp_tensor *b, pp_tensor *y, pp_error *err)
{
    return binary(ex, "add", ENTRY(add), PP_NATIVE_ADD, "a", a, "b", b, "y", y, err);
}

pp_status pp_accumulate(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    const char *op = "accumulate";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(pp_ops_check_act(ex, op, "x", x, err));
    PP_TRY(pp_ops_check_like(ex, op, "y", y, x, err));
    PP_TRY(pp_ops_check_layout_like(op, "y", y, x, err));
    NATIVE(PP_NATIVE_ACCUMULATE, NULL, true, T(x), y);
    wide v = {.keep_layout = true};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_INOUT(v, y);
    return WIDE_RUN(v, DISPATCH(accumulate, pp_tensor_numel(x), xd, yd, err));
}

pp_status pp_add_relu(pp_exec *ex, const pp_tensor *a, const pp_tensor *b, pp_tensor *y,
                      pp_error *err)
{
    return binary(ex, "add_relu", ENTRY(add_relu), PP_NATIVE_ADD_RELU, "a", a, "b", b, "y", y,
                  err);
}

/* Any dtype and shape, on ex's device, with data. */
pp_status pp_copy(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    const char *op = "copy";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!x || !y) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL tensor", op);
    PP_TRY(pp_ops_check_any(ex, op, "x", x, err));
    PP_TRY(pp_ops_check_like(ex, op, "y", y, x, err));
    if (x->data == y->data) {
        if (pp_tensor_effective_layout(x) == pp_tensor_effective_layout(y)) return PP_OK;
        return pp_error_set(err, PP_ERR_INVALID, "%s: cannot change the layout in place", op);
    }
    if (pp_tensor_effective_layout(x) != pp_tensor_effective_layout(y))
        return pp_ops_relayout(ex, x, pp_tensor_effective_layout(y), x->data, y->data, err);
    return DISPATCH(copy, pp_tensor_bytes(x), x->data, y->data, err);
}

pp_status pp_copy_from_host(pp_exec *ex, const void *src, pp_tensor *y, pp_error *err)
{
    const char *op = "copy_from_host";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(pp_ops_check_any(ex, op, "y", y, err));
    size_t bytes = pp_tensor_bytes(y);
    if (bytes == 0) return PP_OK;
    if (!src) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL host source", op);
    return DISPATCH(copy_from_host_async, y->data, src, bytes, err);
}

pp_status pp_copy_to_host(pp_exec *ex, const pp_tensor *x, void *dst, pp_error *err)
{
    const char *op = "copy_to_host";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(pp_ops_check_any(ex, op, "x", x, err));
    size_t bytes = pp_tensor_bytes(x);
    if (bytes == 0) return PP_OK;
    if (!dst) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL host destination", op);
    return DISPATCH(copy_to_host_async, dst, x->data, bytes, err);
}

pp_status pp_zero(pp_exec *ex, pp_tensor *y, pp_error *err)
{
    const char *op = "zero";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(pp_ops_check_any(ex, op, "y", y, err));
    return DISPATCH(zero, pp_tensor_bytes(y), y->data, err);
}

/* y = x in y's dtype, element by element (the same layout) */
static pp_status convert(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    if (x->dtype == PP_F32)
        return DISPATCH(bf16_from_f32, pp_tensor_numel(x), x->data, y->data, err);
    return DISPATCH(f32_from_bf16, pp_tensor_numel(x), x->data, y->data, err);
}

pp_status pp_cast(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    const char *op = "cast";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(pp_ops_check_act(ex, op, "x", x, err));
    PP_TRY(pp_ops_check(ex, op, "y", y, ACT, x->ndim, x->shape[0], x->shape[1], x->shape[2],
                        x->shape[3], err));
    if (x->dtype == y->dtype) return pp_copy(ex, x, y, err);
    if (pp_tensor_effective_layout(x) == pp_tensor_effective_layout(y))
        return convert(ex, x, y, err);
    /* another dtype and another layout: convert in x's layout, then lay out */
    pp_tensor tmp;
    PP_TRY(pp_tensor_alloc_on(&tmp, ex, y->dtype, x->ndim, x->shape, err));
    tmp.layout = x->layout;
    pp_status st = convert(ex, x, &tmp, err);
    if (st == PP_OK) st = pp_copy(ex, &tmp, y, err);
    pp_tensor_free(&tmp);
    return st;
}

/* Host-side groups of a multi-tensor call handed to a backend at once. */
enum { MULTI_CHUNK = 256 };

pp_status pp_zero_multi(pp_exec *ex, int n, pp_tensor *const *ys, pp_error *err)
{
    const char *op = "zero_multi";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (n < 0 || (n > 0 && !ys))
        return pp_error_set(err, PP_ERR_INVALID, "%s: NULL tensor list", op);
    for (int i = 0; i < n; i++) {
        pp_status s = pp_ops_check_any(ex, op, "y", ys[i], err);
        if (s != PP_OK) {
            pp_error_prefix(err, "tensor %d", i);
            return s;
        }
    }
    if (!ex->dev->ops->zero_multi) {
        for (int i = 0; i < n; i++)
            PP_TRY(DISPATCH(zero, pp_tensor_bytes(ys[i]), ys[i]->data, err));
        return PP_OK;
    }
    void *dst[MULTI_CHUNK];
    size_t bytes[MULTI_CHUNK];
    for (int i0 = 0; i0 < n; i0 += MULTI_CHUNK) {
        int k = n - i0 < MULTI_CHUNK ? n - i0 : MULTI_CHUNK;
        for (int i = 0; i < k; i++) {
            dst[i] = ys[i0 + i]->data;
            bytes[i] = pp_tensor_bytes(ys[i0 + i]);
        }
        PP_TRY(ex->dev->ops->zero_multi(ex, k, dst, bytes, err));
    }
    return PP_OK;
}

static pp_status check_pool(pp_exec *ex, const char *op, const pp_pool_desc *d, pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!d) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL descriptor", op);
    if (d->n <= 0 || d->c <= 0 || d->kernel <= 0 || d->stride <= 0 || d->pad < 0 ||
        2 * d->pad > d->kernel || d->p != (d->h + 2 * d->pad - d->kernel) / d->stride + 1 ||
        d->q != (d->w + 2 * d->pad - d->kernel) / d->stride + 1 || d->p <= 0 || d->q <= 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: inconsistent descriptor", op);
    return PP_OK;
}

pp_status pp_maxpool_forward(pp_exec *ex, const pp_pool_desc *d, const pp_tensor *x, pp_tensor *y,
                             pp_tensor *idx, pp_error *err)
{
    const char *op = "maxpool_forward";
    PP_TRY(check_pool(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 4, d->n, d->c, d->h, d->w, err));
    PP_TRY(pp_ops_check(ex, op, "y", y, ACT, 4, d->n, d->c, d->p, d->q, err));
    PP_TRY(pp_ops_check(ex, op, "idx", idx, PP_I32, 4, d->n, d->c, d->p, d->q, err));
    NATIVE(PP_NATIVE_MAXPOOL_FWD, d, false, T(x), y, idx);
    pp_tensor id;
    PP_TRY(pp_ops_idx_nchw(ex, y, idx, false, &id, err));
    wide v = {0};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_OUT(v, y);
    pp_status st = WIDE_RUN(v, DISPATCH(maxpool_forward, d, xd, yd, id.data, err));
    return pp_ops_idx_done(ex, &id, idx, true, st, err);
}

pp_status pp_maxpool_backward(pp_exec *ex, const pp_pool_desc *d, const pp_tensor *x,
                              const pp_tensor *y, const pp_tensor *dy, const pp_tensor *idx,
                              pp_tensor *dx, pp_error *err)
{
    const char *op = "maxpool_backward";
    PP_TRY(check_pool(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 4, d->n, d->c, d->h, d->w, err));
    PP_TRY(pp_ops_check(ex, op, "y", y, ACT, 4, d->n, d->c, d->p, d->q, err));
    PP_TRY(pp_ops_check(ex, op, "dy", dy, ACT, 4, d->n, d->c, d->p, d->q, err));
    PP_TRY(pp_ops_check(ex, op, "idx", idx, PP_I32, 4, d->n, d->c, d->p, d->q, err));
    PP_TRY(pp_ops_check(ex, op, "dx", dx, ACT, 4, d->n, d->c, d->h, d->w, err));
    NATIVE(PP_NATIVE_MAXPOOL_BWD, d, false, T(x), T(y), T(dy), T(idx), dx);
    pp_tensor id;
    PP_TRY(pp_ops_idx_nchw(ex, y, idx, true, &id, err));
    wide v = {0};
    const float *xd = WIDE_IN(v, x), *yd = WIDE_IN(v, y), *dyd = WIDE_IN(v, dy);
    float *dxd = WIDE_OUT(v, dx);
    pp_status st = WIDE_RUN(v, DISPATCH(maxpool_backward, d, xd, yd, dyd, id.data, dxd, err));
    return pp_ops_idx_done(ex, &id, idx, false, st, err);
}

pp_status pp_avgpool_forward(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    const char *op = "avgpool_forward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!x || x->ndim != 4)
        return pp_error_set(err, PP_ERR_INVALID, "%s: x must be 4-D (N,C,H,W)", op);
    PP_TRY(pp_ops_check_act(ex, op, "x", x, err));
    PP_TRY(pp_ops_check(ex, op, "y", y, ACT, 2, x->shape[0], x->shape[1], 1, 1, err));
    NATIVE(PP_NATIVE_AVGPOOL_FWD, NULL, false, T(x), y);
    wide v = {0};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(avgpool_forward, x->shape[0] * x->shape[1],
                                x->shape[2] * x->shape[3], xd, yd, err));
}

pp_status pp_avgpool_backward(pp_exec *ex, const pp_tensor *dy, pp_tensor *dx, pp_error *err)
{
    const char *op = "avgpool_backward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!dx || dx->ndim != 4)
        return pp_error_set(err, PP_ERR_INVALID, "%s: dx must be 4-D (N,C,H,W)", op);
    PP_TRY(pp_ops_check_act(ex, op, "dx", dx, err));
    PP_TRY(pp_ops_check(ex, op, "dy", dy, ACT, 2, dx->shape[0], dx->shape[1], 1, 1, err));
    NATIVE(PP_NATIVE_AVGPOOL_BWD, NULL, false, T(dy), dx);
    wide v = {0};
    const float *dyd = WIDE_IN(v, dy);
    float *dxd = WIDE_OUT(v, dx);
    return WIDE_RUN(v, DISPATCH(avgpool_backward, dx->shape[0] * dx->shape[1],
                                dx->shape[2] * dx->shape[3], dyd, dxd, err));
}

pp_status pp_avgpool2d_forward(pp_exec *ex, const pp_pool_desc *d, const pp_tensor *x,
                               pp_tensor *y, pp_error *err)
{
    const char *op = "avgpool2d_forward";
    PP_TRY(check_pool(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 4, d->n, d->c, d->h, d->w, err));
    PP_TRY(pp_ops_check(ex, op, "y", y, ACT, 4, d->n, d->c, d->p, d->q, err));
    wide v = {0};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(avgpool2d_forward, d, xd, yd, err));
}

pp_status pp_avgpool2d_backward(pp_exec *ex, const pp_pool_desc *d, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err)
{
    const char *op = "avgpool2d_backward";
    PP_TRY(check_pool(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "dy", dy, ACT, 4, d->n, d->c, d->p, d->q, err));
    PP_TRY(pp_ops_check(ex, op, "dx", dx, ACT, 4, d->n, d->c, d->h, d->w, err));
    wide v = {0};
    const float *dyd = WIDE_IN(v, dy);
    float *dxd = WIDE_OUT(v, dx);
    return WIDE_RUN(v, DISPATCH(avgpool2d_backward, d, dyd, dxd, err));
}

/* A 4-D (N,C,H,W) f32 tensor and a (C) bias on ex's device. */
static pp_status check_channel_bias(pp_exec *ex, const char *op, const pp_tensor *t,
                                    const char *what, const pp_tensor *b, const char *bwhat,
                                    pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!t || t->ndim != 4)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %s must be 4-D (N,C,H,W)", op, what);
    PP_TRY(pp_ops_check_act(ex, op, what, t, err));
    return pp_ops_check(ex, op, bwhat, b, PP_F32, 1, t->shape[1], 1, 1, 1, err);
}

pp_status pp_channel_bias_forward(pp_exec *ex, const pp_tensor *b, pp_tensor *y, pp_error *err)
{
    const char *op = "channel_bias_forward";
    PP_TRY(check_channel_bias(ex, op, y, "y", b, "b", err));
    wide v = {0};
    float *yd = WIDE_INOUT(v, y);
    return WIDE_RUN(v, DISPATCH(channel_bias_forward, y->shape[0], y->shape[1],
                                y->shape[2] * y->shape[3], b->data, yd, err));
}

pp_status pp_channel_bias_backward(pp_exec *ex, const pp_tensor *dy, pp_tensor *db, pp_error *err)
{
    const char *op = "channel_bias_backward";
    PP_TRY(check_channel_bias(ex, op, dy, "dy", db, "db", err));
    wide v = {0};
    const float *dyd = WIDE_IN(v, dy);
    return WIDE_RUN(v, DISPATCH(channel_bias_backward, dy->shape[0], dy->shape[1],
                                dy->shape[2] * dy->shape[3], dyd, db->data, err));
}

pp_status pp_linear_forward(pp_exec *ex, const pp_tensor *x, const pp_tensor *w,
                            const pp_tensor *b, pp_tensor *y, pp_error *err)
{
    const char *op = "linear_forward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!x || x->ndim != 2 || !w || w->ndim != 2)
        return pp_error_set(err, PP_ERR_INVALID, "%s: x and w must be 2-D", op);
    int64_t n = x->shape[0], in = x->shape[1], out = w->shape[0];
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 2, n, in, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "w", w, ACT, 2, out, in, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "b", b, PP_F32, 1, out, 1, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "y", y, ACT, 2, n, out, 1, 1, err));
    NATIVE(PP_NATIVE_LINEAR_FWD, NULL, false, T(x), T(w), T(b), y);
    wide v = {0};
    const float *xd = WIDE_IN(v, x), *wd = WIDE_IN(v, w);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(linear_forward, (int)n, (int)in, (int)out, xd, wd, b->data, yd,
                                err));
}

pp_status pp_linear_backward(pp_exec *ex, const pp_tensor *x, const pp_tensor *w,
                             const pp_tensor *dy, pp_tensor *dx, pp_tensor *dw, pp_tensor *db,
                             pp_error *err)
{
    const char *op = "linear_backward";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!x || x->ndim != 2 || !w || w->ndim != 2)
        return pp_error_set(err, PP_ERR_INVALID, "%s: x and w must be 2-D", op);
    int64_t n = x->shape[0], in = x->shape[1], out = w->shape[0];
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 2, n, in, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "w", w, ACT, 2, out, in, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "dy", dy, ACT, 2, n, out, 1, 1, err));
    if (dx) PP_TRY(pp_ops_check(ex, op, "dx", dx, ACT, 2, n, in, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "dw", dw, PP_F32, 2, out, in, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "db", db, PP_F32, 1, out, 1, 1, 1, err));
    NATIVE(PP_NATIVE_LINEAR_BWD, NULL, false, T(x), T(w), T(dy), dx, dw, db);
    wide v = {0};
    const float *xd = WIDE_IN(v, x), *wd = WIDE_IN(v, w), *dyd = WIDE_IN(v, dy);
    float *dxd = dx ? WIDE_OUT(v, dx) : NULL;
    return WIDE_RUN(v, DISPATCH(linear_backward, (int)n, (int)in, (int)out, xd, wd, dyd, dxd,
                                dw->data, db->data, err));
}

pp_status pp_linear_backward_data(pp_exec *ex, const pp_tensor *w, const pp_tensor *dy,
                                  pp_tensor *dx, pp_error *err)
{
    const char *op = "linear_backward_data";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!w || w->ndim != 2 || !dy || dy->ndim != 2)
        return pp_error_set(err, PP_ERR_INVALID, "%s: w and dy must be 2-D", op);
    int64_t n = dy->shape[0], in = w->shape[1], out = w->shape[0];
    PP_TRY(pp_ops_check(ex, op, "w", w, ACT, 2, out, in, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "dy", dy, ACT, 2, n, out, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "dx", dx, ACT, 2, n, in, 1, 1, err));
    NATIVE(PP_NATIVE_LINEAR_DGRAD, NULL, false, T(w), T(dy), dx);
    wide v = {0};
    const float *wd = WIDE_IN(v, w), *dyd = WIDE_IN(v, dy);
    float *dxd = WIDE_OUT(v, dx);
    return WIDE_RUN(v, DISPATCH(linear_backward_data, (int)n, (int)in, (int)out, wd, dyd, dxd,
                                err));
}

pp_status pp_linear_backward_weights(pp_exec *ex, const pp_tensor *x, const pp_tensor *dy,
                                     pp_tensor *dw, pp_tensor *db, pp_error *err)
{
    const char *op = "linear_backward_weights";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!x || x->ndim != 2 || !dy || dy->ndim != 2)
        return pp_error_set(err, PP_ERR_INVALID, "%s: x and dy must be 2-D", op);
    int64_t n = x->shape[0], in = x->shape[1], out = dy->shape[1];
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 2, n, in, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "dy", dy, ACT, 2, n, out, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "dw", dw, PP_F32, 2, out, in, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "db", db, PP_F32, 1, out, 1, 1, 1, err));
    NATIVE(PP_NATIVE_LINEAR_WGRAD, NULL, false, T(x), T(dy), dw, db);
    wide v = {0};
    const float *xd = WIDE_IN(v, x), *dyd = WIDE_IN(v, dy);
    return WIDE_RUN(v, DISPATCH(linear_backward_weights, (int)n, (int)in, (int)out, xd, dyd,
                                dw->data, db->data, err));
}

pp_status pp_softmax_xent(pp_exec *ex, const pp_tensor *logits, const pp_tensor *labels,
                          float divisor, pp_tensor *loss, pp_tensor *correct, pp_tensor *dlogits,
                          pp_error *err)
{
    const pp_xent_desc d = {.divisor = divisor};
    return pp_softmax_xent_ex(ex, &d, logits, labels, loss, correct, NULL, dlogits, err);
}

static pp_status check_sgd_desc(const char *op, const pp_sgd_desc *d, pp_error *err)
{
    if (!d) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL descriptor", op);
    if (!(d->lr >= 0) || !(d->momentum >= 0) || !(d->weight_decay >= 0))
        return pp_error_set(err, PP_ERR_INVALID, "%s: lr, momentum and weight decay must be >= 0",
                            op);
    if (d->nesterov && d->momentum <= 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: Nesterov momentum requires momentum > 0",
                            op);
    return PP_OK;
}

static pp_status check_sgd_tensors(pp_exec *ex, const char *op, const pp_sgd_desc *d,
                                   const pp_tensor *param, const pp_tensor *grad,
                                   const pp_tensor *momentum_buf, pp_error *err)
{
    PP_TRY(pp_ops_check_f32(ex, op, "param", param, err));
    PP_TRY(pp_ops_check_like(ex, op, "grad", grad, param, err));
    if (d->momentum != 0)
        PP_TRY(pp_ops_check_like(ex, op, "momentum_buf", momentum_buf, param, err));
    return PP_OK;
}

pp_status pp_sgd_update(pp_exec *ex, const pp_sgd_desc *d, pp_tensor *param, const pp_tensor *grad,
                        pp_tensor *momentum_buf, pp_error *err)
{
    const char *op = "sgd_update";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(check_sgd_desc(op, d, err));
    PP_TRY(check_sgd_tensors(ex, op, d, param, grad, momentum_buf, err));
    return DISPATCH(sgd_update, d, pp_tensor_numel(param), param->data, grad->data,
                    d->momentum != 0 ? momentum_buf->data : NULL, err);
}

pp_status pp_sgd_update_multi(pp_exec *ex, const pp_sgd_desc *d, int n, pp_tensor *const *params,
                              const pp_tensor *const *grads, pp_tensor *const *bufs,
                              pp_error *err)
{
    const char *op = "sgd_update_multi";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(check_sgd_desc(op, d, err));
    if (n < 0 || (n > 0 && (!params || !grads || (d->momentum != 0 && !bufs))))
        return pp_error_set(err, PP_ERR_INVALID, "%s: NULL tensor list", op);
    for (int i = 0; i < n; i++) {
        pp_status s = check_sgd_tensors(ex, op, d, params[i], grads[i],
                                        d->momentum != 0 ? bufs[i] : NULL, err);
        if (s != PP_OK) {
            pp_error_prefix(err, "tensor %d", i);
            return s;
        }
    }
    if (!ex->dev->ops->sgd_update_multi) { /* one call per tensor, same arithmetic */
        for (int i = 0; i < n; i++)
            PP_TRY(DISPATCH(sgd_update, d, pp_tensor_numel(params[i]), params[i]->data,
                            grads[i]->data, d->momentum != 0 ? bufs[i]->data : NULL, err));
        return PP_OK;
    }
    float *p[MULTI_CHUNK], *b[MULTI_CHUNK];
    const float *g[MULTI_CHUNK];
    int64_t sizes[MULTI_CHUNK];
    for (int i0 = 0; i0 < n; i0 += MULTI_CHUNK) {
        int k = n - i0 < MULTI_CHUNK ? n - i0 : MULTI_CHUNK;
        for (int i = 0; i < k; i++) {
            p[i] = params[i0 + i]->data;
            g[i] = grads[i0 + i]->data;
            b[i] = d->momentum != 0 ? bufs[i0 + i]->data : NULL;
            sizes[i] = pp_tensor_numel(params[i0 + i]);
        }
        PP_TRY(ex->dev->ops->sgd_update_multi(ex, d, k, p, g, b, sizes, err));
    }
    return PP_OK;
}

pp_status pp_delay(pp_exec *ex, double ms, pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, "delay", err));
    if (!(ms >= 0) || ms > 3.6e6)
        return pp_error_set(err, PP_ERR_INVALID, "delay: %g ms is not in [0, 3600000]", ms);
    return DISPATCH(delay, ms, err);
}
