/* tensor.c - tensor allocation, views and host transfers. */
#include "tensor.h"

#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "exec.h"

size_t pp_dtype_size(pp_dtype t)
{
    switch (t) {
    case PP_F32: return 4;
    case PP_BF16: return 2;
    case PP_F16: return 2;
    case PP_I64: return 8;
    case PP_I32: return 4;
    case PP_U8: return 1;
    }
    return 0;
}

const char *pp_dtype_name(pp_dtype t)
{
    switch (t) {
    case PP_F32: return "F32";
    case PP_BF16: return "BF16";
    case PP_F16: return "F16";
    case PP_I64: return "I64";
    case PP_I32: return "I32";
    case PP_U8: return "U8";
    }
    return "?";
}

uint16_t pp_bf16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float pp_f32_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int64_t pp_tensor_numel(const pp_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t pp_tensor_bytes(const pp_tensor *t)
{
    return (size_t)pp_tensor_numel(t) * pp_dtype_size(t->dtype);
}

bool pp_tensor_same_shape(const pp_tensor *a, const pp_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *pp_tensor_shape_str(const pp_tensor *t, char *buf, size_t n)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "",
                                 (long long)t->shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

static pp_status set_shape(pp_tensor *t, int ndim, const int64_t *shape, pp_error *err)
{
    if (ndim < 0 || ndim > PP_MAX_DIMS)
        return pp_error_set(err, PP_ERR_INVALID, "tensor rank %d not in [0, %d]", ndim,
                            PP_MAX_DIMS);
    t->ndim = ndim;
    for (int i = 0; i < PP_MAX_DIMS; i++) t->shape[i] = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || shape[i] > ((int64_t)1 << 40))
            return pp_error_set(err, PP_ERR_INVALID, "tensor dimension %d has bad size %lld", i,
                                (long long)shape[i]);
        t->shape[i] = shape[i];
    }
    return PP_OK;
}

pp_status pp_tensor_alloc(pp_tensor *t, pp_device_ctx *dev, pp_dtype dtype, int ndim,
                          const int64_t *shape, pp_error *err)
{
    memset(t, 0, sizeof *t);
    pp_tensor tmp = {.dtype = dtype, .dev = dev};
    PP_TRY(set_shape(&tmp, ndim, shape, err));
    PP_TRY(pp_device_alloc(dev, pp_tensor_bytes(&tmp), &tmp.data, err));
    tmp.owns = true;
    *t = tmp;
    return PP_OK;
}

pp_status pp_tensor_alloc_on(pp_tensor *t, pp_exec *ex, pp_dtype dtype, int ndim,
                             const int64_t *shape, pp_error *err)
{
    memset(t, 0, sizeof *t);
    pp_device_ctx *dev = ex->dev;
    pp_tensor tmp = {.dtype = dtype, .dev = dev};
    PP_TRY(set_shape(&tmp, ndim, shape, err));
    size_t bytes = pp_tensor_bytes(&tmp);
    if (bytes) {
        PP_TRY(pp_device_account(dev, bytes, err));
        pp_status s = dev->ops->alloc_async(ex, bytes, &tmp.data, err);
        if (s != PP_OK) {
            pp_device_unaccount(dev, bytes);
            return s;
        }
    }
    tmp.owns = true;
    tmp.stream = ex;
    *t = tmp;
    return PP_OK;
}

pp_status pp_tensor_zeros(pp_tensor *t, pp_device_ctx *dev, pp_dtype dtype, int ndim,
                          const int64_t *shape, pp_error *err)
{
    PP_TRY(pp_tensor_alloc(t, dev, dtype, ndim, shape, err));
    pp_exec ex;
    pp_status s = pp_exec_init(&ex, dev, NULL, err);
    if (s == PP_OK) {
        s = dev->ops->zero(&ex, pp_tensor_bytes(t), t->data, err);
        if (s == PP_OK) s = pp_exec_sync(&ex, err);
        pp_exec_destroy(&ex);
    }
    if (s != PP_OK) pp_tensor_free(t);
    return s;
}

void pp_tensor_free(pp_tensor *t)
{
    if (!t) return;
    if (t->owns && t->data) {
        if (t->stream) {
            t->dev->ops->free_async(t->stream, t->data);
            pp_device_unaccount(t->dev, pp_tensor_bytes(t));
        } else {
            pp_device_free(t->dev, t->data, pp_tensor_bytes(t));
        }
    }
    memset(t, 0, sizeof *t);
}

void pp_tensor_abandon(pp_tensor *t)
{
    if (!t) return;
    if (!(t->owns && t->data && t->stream)) {
        pp_tensor_free(t);
        return;
    }
    pp_device_unaccount(t->dev, pp_tensor_bytes(t));
    memset(t, 0, sizeof *t);
}

pp_tensor pp_tensor_view0(const pp_tensor *t, int64_t start, int64_t len)
{
    pp_tensor v = *t;
    v.owns = false;
    if (t->ndim == 0) return v;
    int64_t row = pp_tensor_numel(t) / (t->shape[0] ? t->shape[0] : 1);
    v.shape[0] = len;
    v.data = t->data ? (char *)t->data + (size_t)(start * row) * pp_dtype_size(t->dtype) : NULL;
    return v;
}

const char *pp_layout_name(pp_layout l)
{
    return l == PP_NHWC ? "NHWC" : "NCHW";
}

pp_layout pp_tensor_effective_layout(const pp_tensor *t)
{
    if (t->ndim != 4 || t->layout != PP_NHWC) return PP_NCHW;
    return t->shape[1] == 1 || t->shape[2] * t->shape[3] == 1 ? PP_NCHW : PP_NHWC;
}

pp_status pp_tensor_reshape(const pp_tensor *t, int ndim, const int64_t *shape, pp_tensor *out,
                            pp_error *err)
{
    pp_tensor v = *t;
    v.owns = false;
    v.layout = PP_NCHW;
    if (pp_tensor_effective_layout(t) != PP_NCHW) {
        char a[64];
        return pp_error_set(err, PP_ERR_INVALID,
                            "cannot reshape the NHWC tensor %s: convert it to NCHW first "
                            "(pp_copy into an NCHW tensor)",
                            pp_tensor_shape_str(t, a, sizeof a));
    }
    PP_TRY(set_shape(&v, ndim, shape, err));
    if (pp_tensor_numel(&v) != pp_tensor_numel(t)) {
        char a[64], b[64];
        return pp_error_set(err, PP_ERR_INVALID, "cannot reshape %s to %s",
                            pp_tensor_shape_str(t, a, sizeof a), pp_tensor_shape_str(&v, b, sizeof b));
    }
    *out = v;
    return PP_OK;
}

pp_status pp_tensor_from_host(pp_tensor *t, const void *src, size_t bytes, pp_error *err)
{
    if (bytes != pp_tensor_bytes(t))
        return pp_error_set(err, PP_ERR_INVALID, "host copy of %zu bytes into a %zu-byte tensor",
                            bytes, pp_tensor_bytes(t));
    if (bytes == 0) return PP_OK;
    return t->dev->ops->copy_from_host(t->dev, t->data, src, bytes, err);
}

pp_status pp_tensor_to_host(const pp_tensor *t, void *dst, size_t bytes, pp_error *err)
{
    if (bytes != pp_tensor_bytes(t))
        return pp_error_set(err, PP_ERR_INVALID, "host copy of a %zu-byte tensor into %zu bytes",
                            pp_tensor_bytes(t), bytes);
    if (bytes == 0) return PP_OK;
    return t->dev->ops->copy_to_host(t->dev, dst, t->data, bytes, err);
}
