/*
 * sdpa_graph.c - the operation graphs of cuDNN's fused causal attention
 * (sdpa_internal.h) as the runtime-fusion flash-attention engines take
 * them: cuDNN 9.19's SDPA operation nodes have no causal mask, so the
 * attention is a pattern of matmul, pointwise and reduction operations.
 *
 * Forward (every intermediate virtual, f32 unless noted):
 *   S = Q K^T;  S *= SCALE;  row, col = GEN_INDEX(S, axes 2, 3) (int32);
 *   keep = row >= col (boolean);  S = keep ? S : NEG;
 *   m = max_j S (b, h, s, 1);  E = exp(S - m);  l = sum_j E;
 *   STATS = m + log(l);  P = E / l (bf16);  O = P V
 * Backward:
 *   D = sum_d (dO * O) * ONE (b, h, s, 1);
 *   S as the forward's, masked;  P = exp(S - STATS) (bf16);
 *   dV = P^T dO (P^T through a reshape to (b, h, s, s) transposed strides);
 *   dP = dO V^T;  dS = ((dP * ONE) - D) * P * SCALE;
 *   dK = dS^T Q (reshape as P^T);  dQ = dS K (K from K^T by a reshape)
 * (the multiplications by ONE stand where a dropout would be: the engines
 * match the pattern with them).
 *
 * Contract: each function creates and finalizes its descriptors into sg
 * and returns the first failure, named by gfail (gconv_internal.h).
 */
#include <string.h>

#include "sdpa_internal.h"

/* ---- descriptors -------------------------------------------------------------- */

static pp_status new_desc(const gbuild *g, sdpa_graph *sg, cudnnBackendDescriptorType_t type,
                          const char *name, cudnnBackendDescriptor_t *out)
{
    if (sg->n_desc == SDPA_DESC_MAX)
        return pp_error_set(g->err, PP_ERR_INTERNAL, "%s: attention graph: too many descriptors",
                            g->ex->dev->name);
    PP_TRY(pp_gconv_create(g, type, name, out));
    sg->desc[sg->n_desc++] = *out;
    return PP_OK;
}

/* A tensor: uid 0 makes a virtual one (the next virtual uid). */
static pp_status tensor(const gbuild *g, sdpa_graph *sg, int64_t uid, cudnnDataType_t dt,
                        const int64_t dims[4], const int64_t strides[4], bool by_value,
                        cudnnBackendDescriptor_t *out)
{
    const char *name = "attention tensor";
    const bool virt = uid == 0;
    const int64_t align = 16;
    if (virt) uid = SDPA_UID_VIRTUAL + sg->next_uid++;
    PP_TRY(new_desc(g, sg, CUDNN_BACKEND_TENSOR_DESCRIPTOR, name, out));
    GSET(g, *out, name, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    GSET(g, *out, name, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    GSET(g, *out, name, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    GSET(g, *out, name, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    GSET(g, *out, name, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    GSET(g, *out, name, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (by_value)
        GSET(g, *out, name, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    return pp_gconv_finalize(g, *out, name);
}

/* Shapes of the virtual tensors. */
typedef enum vshape { V_SS, V_SS_T, V_S1, V_SD } vshape;

/* A virtual tensor of shape k: (b, h, s, s) row-major or (V_SS_T) its
 * transpose's view, (b, h, s, 1), (b, h, s, d) row-major. */
static pp_status virt(const gbuild *g, sdpa_graph *sg, vshape k, cudnnDataType_t dt,
                      cudnnBackendDescriptor_t *out)
{
    const int64_t b = sg->b, h = sg->h, s = sg->s, d = sg->d;
    const int64_t last = k == V_S1 ? 1 : k == V_SD ? d : s;
    const int64_t dims[4] = {b, h, s, last};
    int64_t strides[4] = {h * s * last, s * last, last, 1};
    if (k == V_SS_T) {
        strides[2] = 1;
        strides[3] = s;
    }
    return tensor(g, sg, 0, dt, dims, strides, false, out);
}

/* ---- operations ---------------------------------------------------------------- */

static pp_status add_op(const gbuild *g, sdpa_graph *sg, cudnnBackendDescriptor_t op,
                        const char *name)
{
    PP_TRY(pp_gconv_finalize(g, op, name));
    if (sg->n_ops == SDPA_OPS_MAX)
        return pp_error_set(g->err, PP_ERR_INTERNAL, "%s: attention graph: too many operations",
                            g->ex->dev->name);
    sg->ops[sg->n_ops++] = op;
    return PP_OK;
}

/* y = mode(x[, b[, t]]) with compute type comp; axis >= 0 for GEN_INDEX. */
static pp_status pointwise(const gbuild *g, sdpa_graph *sg, cudnnPointwiseMode_t mode,
                           cudnnDataType_t comp, int64_t axis, cudnnBackendDescriptor_t x,
                           cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                           cudnnBackendDescriptor_t y)
{
    const char *name = "pointwise descriptor", *opn = "pointwise operation";
    const cudnnBackendAttributeType_t bd = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    cudnnBackendDescriptor_t pw, op;
    PP_TRY(new_desc(g, sg, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, name, &pw));
    GSET(g, pw, name, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    GSET(g, pw, name, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    if (axis >= 0) GSET(g, pw, name, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    PP_TRY(pp_gconv_finalize(g, pw, name));
    PP_TRY(new_desc(g, sg, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, opn, &op));
    GSET(g, op, opn, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, bd, 1, &pw);
    GSET(g, op, opn, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, bd, 1, &x);
    if (b) GSET(g, op, opn, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bd, 1, &b);
    if (t) GSET(g, op, opn, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, bd, 1, &t);
    GSET(g, op, opn, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, bd, 1, &y);
    return add_op(g, sg, op, opn);
}

/* pointwise in f32 on one or two inputs */
static pp_status pw(const gbuild *g, sdpa_graph *sg, cudnnPointwiseMode_t mode,
                    cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                    cudnnBackendDescriptor_t y)
{
    return pointwise(g, sg, mode, CUDNN_DATA_FLOAT, -1, x, b, NULL, y);
}

/* An operation of type optype on its descriptor and tensors: val[i] set
 * as attr[i], i < n (val[0] the descriptor, finalized here first). */
static pp_status operation(const gbuild *g, sdpa_graph *sg, const char *name,
                           cudnnBackendDescriptorType_t optype, const char *opn, int n,
                           const cudnnBackendAttributeName_t *attr,
                           const cudnnBackendDescriptor_t *val)
{
    cudnnBackendDescriptor_t op;
    PP_TRY(pp_gconv_finalize(g, val[0], name));
    PP_TRY(new_desc(g, sg, optype, opn, &op));
    for (int i = 0; i < n; i++)
        GSET(g, op, opn, attr[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &val[i]);
    return add_op(g, sg, op, opn);
}

/* *y: a new virtual tensor of shape k and dtype dt = mode(x[, b]) */
static pp_status vpw(const gbuild *g, sdpa_graph *sg, vshape k, cudnnDataType_t dt,
                     cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                     cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t *y)
{
    PP_TRY(virt(g, sg, k, dt, y));
    return pw(g, sg, mode, x, b, *y);
}

/* y (b, h, s, 1) = op over the last dim of x */
static pp_status reduction(const gbuild *g, sdpa_graph *sg, cudnnReduceTensorOp_t mode,
                           cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    static const cudnnBackendAttributeName_t attr[3] = {CUDNN_ATTR_OPERATION_REDUCTION_DESC,
                                                        CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                                        CUDNN_ATTR_OPERATION_REDUCTION_YDESC};
    const char *name = "reduction descriptor";
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd;
    PP_TRY(new_desc(g, sg, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, name, &rd));
    GSET(g, rd, name, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
         &mode);
    GSET(g, rd, name, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    return operation(g, sg, name, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
                     "reduction operation", 3, attr, (const cudnnBackendDescriptor_t[3]){rd, x, y});
}

/* c = a b (batched over b, h), f32 accumulation */
static pp_status matmul(const gbuild *g, sdpa_graph *sg, cudnnBackendDescriptor_t a,
                        cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c)
{
    static const cudnnBackendAttributeName_t attr[4] = {
        CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_ATTR_OPERATION_MATMUL_ADESC,
        CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_ATTR_OPERATION_MATMUL_CDESC};
    const char *name = "matmul descriptor";
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t md;
    PP_TRY(new_desc(g, sg, CUDNN_BACKEND_MATMUL_DESCRIPTOR, name, &md));
    GSET(g, md, name, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    return operation(g, sg, name, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation",
                     4, attr, (const cudnnBackendDescriptor_t[4]){md, a, b, c});
}

/* y = x seen through y's dims and strides (a transpose) */
static pp_status reshape(const gbuild *g, sdpa_graph *sg, cudnnBackendDescriptor_t x,
                         cudnnBackendDescriptor_t y)
{
    const char *opn = "reshape operation";
    const cudnnBackendAttributeType_t bd = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    cudnnBackendDescriptor_t op;
    PP_TRY(new_desc(g, sg, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, opn, &op));
    GSET(g, op, opn, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, bd, 1, &x);
    GSET(g, op, opn, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, bd, 1, &y);
    return add_op(g, sg, op, opn);
}

/* ---- the graphs ------------------------------------------------------------------ */

/* A view of qkv / dqkv (ld 3c) or y / dy (ld c): dims (b, h, s, d), or
 * (b, h, d, s) with transposed. */
static pp_status view(const gbuild *g, sdpa_graph *sg, int64_t uid, int64_t ld, bool transposed,
                      cudnnBackendDescriptor_t *out)
{
    const int64_t b = sg->b, h = sg->h, s = sg->s, d = sg->d;
    const int64_t dims[4] = {b, h, transposed ? d : s, transposed ? s : d};
    const int64_t strides[4] = {s * ld, d, transposed ? 1 : ld, transposed ? ld : 1};
    return tensor(g, sg, uid, CUDNN_DATA_BFLOAT16, dims, strides, false, out);
}

static pp_status scalar(const gbuild *g, sdpa_graph *sg, int64_t uid,
                        cudnnBackendDescriptor_t *out)
{
    const int64_t one[4] = {1, 1, 1, 1};
    return tensor(g, sg, uid, CUDNN_DATA_FLOAT, one, one, true, out);
}

/* *out: S = mask(Q K^T * SCALE), virtual f32 (b, h, s, s) */
static pp_status masked_scores(const gbuild *g, sdpa_graph *sg, cudnnBackendDescriptor_t q,
                               cudnnBackendDescriptor_t kt, cudnnBackendDescriptor_t scale,
                               cudnnBackendDescriptor_t *out)
{
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t s0, s1, row, col, keep, neg;
    PP_TRY(virt(g, sg, V_SS, f, &s0));
    PP_TRY(matmul(g, sg, q, kt, s0));
    PP_TRY(vpw(g, sg, V_SS, f, CUDNN_POINTWISE_MUL, s0, scale, &s1));
    PP_TRY(virt(g, sg, V_SS, CUDNN_DATA_INT32, &row));
    PP_TRY(pointwise(g, sg, CUDNN_POINTWISE_GEN_INDEX, f, 2, s1, NULL, NULL, row));
    PP_TRY(virt(g, sg, V_SS, CUDNN_DATA_INT32, &col));
    PP_TRY(pointwise(g, sg, CUDNN_POINTWISE_GEN_INDEX, f, 3, s1, NULL, NULL, col));
    PP_TRY(virt(g, sg, V_SS, CUDNN_DATA_BOOLEAN, &keep));
    PP_TRY(pointwise(g, sg, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, keep));
    PP_TRY(scalar(g, sg, SDPA_UID_NEG, &neg));
    PP_TRY(virt(g, sg, V_SS, f, out));
    return pointwise(g, sg, CUDNN_POINTWISE_BINARY_SELECT, f, -1, s1, neg, keep, *out);
}

static pp_status forward_ops(const gbuild *g, sdpa_graph *sg)
{
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    const int64_t ld = 3 * sg->c;
    cudnnBackendDescriptor_t q, kt, v, o, stats, scale, s, m, sm, e, l, logl, p;
    PP_TRY(view(g, sg, SDPA_UID_Q, ld, false, &q));
    PP_TRY(view(g, sg, SDPA_UID_K, ld, true, &kt));
    PP_TRY(view(g, sg, SDPA_UID_V, ld, false, &v));
    PP_TRY(view(g, sg, SDPA_UID_O, sg->c, false, &o));
    const int64_t sd[4] = {sg->b, sg->h, sg->s, 1},
                  ss[4] = {sg->h * sg->s, sg->s, 1, 1};
    PP_TRY(tensor(g, sg, SDPA_UID_STATS, f, sd, ss, false, &stats));
    PP_TRY(scalar(g, sg, SDPA_UID_SCALE, &scale));
    PP_TRY(masked_scores(g, sg, q, kt, scale, &s));
    PP_TRY(virt(g, sg, V_S1, f, &m));
    PP_TRY(reduction(g, sg, CUDNN_REDUCE_TENSOR_MAX, s, m));
    PP_TRY(vpw(g, sg, V_SS, f, CUDNN_POINTWISE_SUB, s, m, &sm));
    PP_TRY(vpw(g, sg, V_SS, f, CUDNN_POINTWISE_EXP, sm, NULL, &e));
    PP_TRY(virt(g, sg, V_S1, f, &l));
    PP_TRY(reduction(g, sg, CUDNN_REDUCE_TENSOR_ADD, e, l));
    PP_TRY(vpw(g, sg, V_S1, f, CUDNN_POINTWISE_LOG, l, NULL, &logl));
    PP_TRY(pw(g, sg, CUDNN_POINTWISE_ADD, m, logl, stats));
    PP_TRY(vpw(g, sg, V_SS, CUDNN_DATA_BFLOAT16, CUDNN_POINTWISE_DIV, e, l, &p));
    return matmul(g, sg, p, v, o);
}

static pp_status backward_ops(const gbuild *g, sdpa_graph *sg)
{
    const cudnnDataType_t f = CUDNN_DATA_FLOAT, bf = CUDNN_DATA_BFLOAT16;
    const int64_t ld = 3 * sg->c;
    cudnnBackendDescriptor_t q, kt, vt, o, dout, stats, dq, dk, dv, scale, one;
    PP_TRY(view(g, sg, SDPA_UID_Q, ld, false, &q));
    PP_TRY(view(g, sg, SDPA_UID_K, ld, true, &kt));
    PP_TRY(view(g, sg, SDPA_UID_V, ld, true, &vt));
    PP_TRY(view(g, sg, SDPA_UID_O, sg->c, false, &o));
    PP_TRY(view(g, sg, SDPA_UID_DO, sg->c, false, &dout));
    PP_TRY(view(g, sg, SDPA_UID_DQ, ld, false, &dq));
    PP_TRY(view(g, sg, SDPA_UID_DK, ld, false, &dk));
    PP_TRY(view(g, sg, SDPA_UID_DV, ld, false, &dv));
    const int64_t sd[4] = {sg->b, sg->h, sg->s, 1},
                  ss[4] = {sg->h * sg->s, sg->s, 1, 1};
    PP_TRY(tensor(g, sg, SDPA_UID_STATS, f, sd, ss, false, &stats));
    PP_TRY(scalar(g, sg, SDPA_UID_SCALE, &scale));
    PP_TRY(scalar(g, sg, SDPA_UID_ONE, &one));
    /* D = rowsum(dO * O) * ONE */
    cudnnBackendDescriptor_t dodo, dsum, dd;
    PP_TRY(vpw(g, sg, V_SD, f, CUDNN_POINTWISE_MUL, dout, o, &dodo));
    PP_TRY(virt(g, sg, V_S1, f, &dsum));
    PP_TRY(reduction(g, sg, CUDNN_REDUCE_TENSOR_ADD, dodo, dsum));
    PP_TRY(vpw(g, sg, V_S1, f, CUDNN_POINTWISE_MUL, dsum, one, &dd));
    /* P = exp(S - STATS); dV = P^T dO */
    cudnnBackendDescriptor_t s, sm, p, pt;
    PP_TRY(masked_scores(g, sg, q, kt, scale, &s));
    PP_TRY(vpw(g, sg, V_SS, f, CUDNN_POINTWISE_SUB, s, stats, &sm));
    PP_TRY(vpw(g, sg, V_SS, bf, CUDNN_POINTWISE_EXP, sm, NULL, &p));
    PP_TRY(virt(g, sg, V_SS_T, bf, &pt));
    PP_TRY(reshape(g, sg, p, pt));
    PP_TRY(matmul(g, sg, pt, dout, dv));
    /* dS = ((dO V^T) * ONE - D) * P * SCALE */
    cudnnBackendDescriptor_t dp, dp1, dpd, dpp, ds;
    PP_TRY(virt(g, sg, V_SS, f, &dp));
    PP_TRY(matmul(g, sg, dout, vt, dp));
    PP_TRY(vpw(g, sg, V_SS, f, CUDNN_POINTWISE_MUL, dp, one, &dp1));
    PP_TRY(vpw(g, sg, V_SS, f, CUDNN_POINTWISE_SUB, dp1, dd, &dpd));
    PP_TRY(vpw(g, sg, V_SS, f, CUDNN_POINTWISE_MUL, dpd, p, &dpp));
    PP_TRY(vpw(g, sg, V_SS, f, CUDNN_POINTWISE_MUL, dpp, scale, &ds));
    /* dK = dS^T Q; dQ = dS K */
    cudnnBackendDescriptor_t dst, k;
    PP_TRY(virt(g, sg, V_SS_T, f, &dst));
    PP_TRY(reshape(g, sg, ds, dst));
    PP_TRY(matmul(g, sg, dst, q, dk));
    const int64_t kd[4] = {sg->b, sg->h, sg->s, sg->d}, ks[4] = {sg->s * ld, sg->d, ld, 1};
    PP_TRY(tensor(g, sg, 0, bf, kd, ks, false, &k));
    PP_TRY(reshape(g, sg, kt, k));
    return matmul(g, sg, ds, k, dq);
}

pp_status pp_sdpa_build(const gbuild *g, sdpa_graph *sg, bool bwd)
{
    PP_TRY(bwd ? backward_ops(g, sg) : forward_ops(g, sg));
    const char *name = "attention operation graph";
    PP_TRY(new_desc(g, sg, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, name, &sg->graph));
    GSET(g, sg->graph, name, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
         sg->n_ops, sg->ops);
    if (g->ce) {
        cudnnHandle_t h = g->ce->dnn;
        GSET(g, sg->graph, name, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    }
    return pp_gconv_finalize(g, sg->graph, name);
}

void pp_sdpa_graph_free(sdpa_graph *sg)
{
    /* the graph and operations refer to the tensors: destroyed last first */
    for (int i = sg->n_desc - 1; i >= 0; i--)
        if (sg->desc[i]) (void)cudnnBackendDestroyDescriptor(sg->desc[i]);
    memset(sg, 0, sizeof *sg);
}
