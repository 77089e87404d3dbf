/*
 * gconv_graph.c - the cuDNN backend descriptors of a graph convolution plan
 * (gconv.c, above this file): the checked backend calls every phase uses
 * and phase 1, the operation graph of a key. Tensor descriptors X (N,C,H,W), W (K,C,R,S)
 * and Y (N,K,P,Q), dims in NCHW order, strides giving the layout, not
 * virtual, 16-byte aligned, unique ids UID_X, UID_W, UID_Y; the convolution
 * descriptor (cross-correlation, fp32 compute); the operation of the key's
 * direction with its alpha and beta; the operation graph on the exec's cuDNN
 * handle.
 *
 * Contract: each function creates and finalizes its descriptors into the
 * entry and returns the first failure, named by gfail (gconv_internal.h);
 * descriptors made before a failure stay in the entry for its owner to free.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cudnn_graph.h>

#include "gconv.h"
#include "gconv_internal.h"
#include "internal.h"

static const char *const dir_name[] = {"fwd", "dgrad", "wgrad"};

void pp_gconv_describe(char *buf, size_t n, const gconv_key *k)
{
    const pp_conv2d_desc *d = &k->d;
    snprintf(buf, n,
             "%s %s %s%s x %dx%dx%dx%d w %dx%dx%dx%d y %dx%dx%dx%d (NCHW order) stride %dx%d "
             "pad %dx%d",
             dir_name[k->dir], k->dt == PP_BF16 ? "bf16" : "fp32", k->nhwc ? "NHWC" : "NCHW",
             k->dt == PP_F32 ? (k->math == PP_MATH_TF32 ? " (tf32 allowed)" : " (IEEE)") : "",
             d->n, d->c, d->h, d->w, d->k, d->c, d->r, d->s, d->n, d->k, d->p, d->q, d->stride_h,
             d->stride_w, d->pad_h, d->pad_w);
}

/* ---- checking --------------------------------------------------------------- */

/* A failed cuDNN backend call: names call, descriptor and attribute, status,
 * cuDNN's last error message and the convolution. */
pp_status pp_gconv_fail(const gbuild *g, cudnnStatus_t st, const char *call, const char *desc,
                        const char *attr, const char *file, int line)
{
    char last[256] = "", what[sizeof g->what];
    cudnnGetLastErrorString(last, sizeof last);
    if (g->what[0])
        snprintf(what, sizeof what, "%s", g->what);
    else /* the steady-state call leaves it to the failure */
        pp_gconv_describe(what, sizeof what, g->key);
    /* CUDNN_STATUS_NOT_SUPPORTED and its sub-codes (3000 to 3999): cuDNN
     * cannot do this one, the caller's legacy path may */
    pp_status s = (st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                   st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) ? PP_ERR_OOM
                  : ((int)st >= 3000 && (int)st < 4000)                      ? PP_ERR_UNSUPPORTED
                                                                             : PP_ERR_BACKEND;
    (void)cudaGetLastError(); /* a launch error cuDNN left behind is this failure's */
    return pp_error_set(g->err, s, "%s: %s(%s%s%s) failed: %s (%d)%s%s, for %s at %s:%d",
                        g->ex->dev->name, call, desc, attr ? ", " : "", attr ? attr : "",
                        cudnnGetErrorString(st), (int)st, last[0] ? ": " : "", last, what,
                        file, line);
}

pp_status pp_gconv_create(const gbuild *g, cudnnBackendDescriptorType_t type, const char *desc,
                          cudnnBackendDescriptor_t *out)
{
    *out = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(type, out);
    if (st != CUDNN_STATUS_SUCCESS) {
        *out = NULL;
        return gfail(g, st, "cudnnBackendCreateDescriptor", desc, NULL, __LINE__);
    }
    return PP_OK;
}

pp_status pp_gconv_finalize(const gbuild *g, cudnnBackendDescriptor_t d, const char *desc)
{
    cudnnStatus_t st = cudnnBackendFinalize(d);
    return st == CUDNN_STATUS_SUCCESS ? PP_OK
                                      : gfail(g, st, "cudnnBackendFinalize", desc, NULL, __LINE__);
}

pp_status pp_gconv_set_attr(const gbuild *g, cudnnBackendDescriptor_t d, const char *desc,
                            cudnnBackendAttributeName_t attr, const char *attrn,
                            cudnnBackendAttributeType_t type, const void *val)
{
    cudnnStatus_t st = cudnnBackendSetAttribute(d, attr, type, 1, val);
    return st == CUDNN_STATUS_SUCCESS
               ? PP_OK
               : gfail(g, st, "cudnnBackendSetAttribute", desc, attrn, __LINE__);
}

/* ---- phase 1: the operation graph ------------------------------------------ */

/* dims (A,B,C,D) in NCHW order; strides of NCHW, or of NHWC when nhwc. */
static void dims_strides(int64_t a, int64_t b, int64_t c, int64_t d, bool nhwc, int64_t dims[4],
                         int64_t strides[4])
{
    dims[0] = a;
    dims[1] = b;
    dims[2] = c;
    dims[3] = d;
    if (nhwc) {
        strides[1] = 1;
        strides[3] = b;
        strides[2] = d * b;
        strides[0] = c * d * b;
    } else {
        strides[3] = 1;
        strides[2] = d;
        strides[1] = c * d;
        strides[0] = b * c * d;
    }
}

static pp_status make_tensor(const gbuild *g, int64_t uid, const int64_t dims[4],
                             const int64_t strides[4], cudnnBackendDescriptor_t *out)
{
    static const char *const names[] = {"", "tensor X", "tensor W", "tensor Y"};
    const char *desc = names[uid];
    cudnnDataType_t dt = g->key->dt == PP_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    const int64_t align = 16;
    const bool virt = false;
    PP_TRY(pp_gconv_create(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, desc, out));
    GSET(g, *out, desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    GSET(g, *out, desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    GSET(g, *out, desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    GSET(g, *out, desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    GSET(g, *out, desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    GSET(g, *out, desc, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    return pp_gconv_finalize(g, *out, desc);
}

pp_status pp_gconv_make_tensors(const gbuild *g, gconv_entry *e)
{
    const pp_conv2d_desc *d = &g->key->d;
    const bool nhwc = g->key->nhwc;
    int64_t dims[4], strides[4];
    dims_strides(d->n, d->c, d->h, d->w, nhwc, dims, strides);
    PP_TRY(make_tensor(g, UID_X, dims, strides, &e->tensor[0]));
    dims_strides(d->k, d->c, d->r, d->s, nhwc, dims, strides);
    PP_TRY(make_tensor(g, UID_W, dims, strides, &e->tensor[1]));
    dims_strides(d->n, d->k, d->p, d->q, nhwc, dims, strides);
    return make_tensor(g, UID_Y, dims, strides, &e->tensor[2]);
}

pp_status pp_gconv_make_conv(const gbuild *g, cudnnBackendDescriptor_t *out)
{
    const pp_conv2d_desc *d = &g->key->d;
    const char *desc = "convolution descriptor";
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, dil[2] = {1, 1}, stride[2] = {d->stride_h, d->stride_w},
                  pad[2] = {d->pad_h, d->pad_w};
    PP_TRY(pp_gconv_create(g, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, desc, out));
    GSET(g, *out, desc, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    GSET(g, *out, desc, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    GSET(g, *out, desc, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    GSET(g, *out, desc, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
    GSET(g, *out, desc, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
    GSET(g, *out, desc, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    GSET(g, *out, desc, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    return pp_gconv_finalize(g, *out, desc);
}

/* The attributes of one direction's operation. */
typedef struct op_attrs {
    cudnnBackendDescriptorType_t type;
    const char *desc;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
    const char *xn, *wn, *yn, *convn, *alphan, *betan;
} op_attrs;

#define OP_ATTRS(type, x, w, y, pre)                                                     \
    {type,      #type,        x,          w,          y,          pre##_CONV_DESC,     \
     pre##_ALPHA, pre##_BETA, #x,         #w,         #y,         #pre "_CONV_DESC",   \
     #pre "_ALPHA", #pre "_BETA"}

static const op_attrs ops_of[3] = {
    OP_ATTRS(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
             CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
             CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD),
    OP_ATTRS(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
             CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
             CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
             CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
             CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA),
    OP_ATTRS(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
             CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
             CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
             CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
             CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER),
};

pp_status pp_gconv_make_op(const gbuild *g, gconv_entry *e)
{
    const op_attrs *a = &ops_of[g->key->dir];
    float alpha, beta;
    memcpy(&alpha, &g->key->alpha, sizeof alpha);
    memcpy(&beta, &g->key->beta, sizeof beta);
    PP_TRY(pp_gconv_create(g, a->type, a->desc, &e->op));
    const cudnnBackendAttributeType_t bd = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    PP_TRY(pp_gconv_set_attr(g, e->op, a->desc, a->x, a->xn, bd, &e->tensor[0]));
    PP_TRY(pp_gconv_set_attr(g, e->op, a->desc, a->w, a->wn, bd, &e->tensor[1]));
    PP_TRY(pp_gconv_set_attr(g, e->op, a->desc, a->y, a->yn, bd, &e->tensor[2]));
    PP_TRY(pp_gconv_set_attr(g, e->op, a->desc, a->conv, a->convn, bd, &e->conv));
    /* compute type FLOAT: the scalars are floats */
    PP_TRY(pp_gconv_set_attr(g, e->op, a->desc, a->alpha, a->alphan, CUDNN_TYPE_FLOAT, &alpha));
    PP_TRY(pp_gconv_set_attr(g, e->op, a->desc, a->beta, a->betan, CUDNN_TYPE_FLOAT, &beta));
    return pp_gconv_finalize(g, e->op, a->desc);
}

pp_status pp_gconv_make_graph(const gbuild *g, gconv_entry *e)
{
    const char *desc = "operation graph";
    cudnnHandle_t h = g->ce->dnn;
    PP_TRY(pp_gconv_create(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, desc, &e->graph));
    GSET(g, e->graph, desc, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
         &e->op);
    GSET(g, e->graph, desc, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    return pp_gconv_finalize(g, e->graph, desc);
}
