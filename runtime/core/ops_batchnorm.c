/*
 * ops_batchnorm.c - the batch-norm entries of the op API (ops.h): boundary
 * checks, then the backend's native entry or dispatch, as in ops.c (bf16
 * operands widened and rounded the same way, ops_adapt.h). Every batch norm
 * is offered to the native entry whatever its operands (the CUDA backend
 * runs f32 NCHW ones natively too). The fused forms (_forward_act,
 * _backward_relu, _backward_add_relu) fall back to the plain batch norm and
 * the elementwise ops of ops.c when the backend has no native entry for them.
 */
#include "ops.h"

#include "backend.h"
#include "ops_adapt.h"
#include "ops_check.h"

#define ACT PP_OPS_ACT

/* Every batch-norm entry, before any backend runs: statistics over zero
 * values per channel (an empty micro-batch, or images of no pixel) would
 * divide by N*H*W = 0, so zero rows are refused here, the same for every
 * backend (PyTorch refuses them in training too). */
static pp_status check_bn(pp_exec *ex, const char *op, const pp_bn_desc *d, pp_error *err)
{
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!d) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL descriptor", op);
    if (d->c > 0 && d->n >= 0 && d->h >= 0 && d->w >= 0 &&
        (int64_t)d->n * d->h * d->w == 0)
        return pp_error_set(err, PP_ERR_INVALID,
                            "%s: batch norm over zero values per channel (input %dx%dx%dx%d): "
                            "an empty micro-batch or an empty image has nothing to normalise",
                            op, d->n, d->c, d->h, d->w);
    if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || !(d->eps > 0) ||
        !(d->momentum >= 0 && d->momentum <= 1))
        return pp_error_set(err, PP_ERR_INVALID, "%s: bad descriptor", op);
    return PP_OK;
}

#define CHECK_C(name, t) PP_TRY(pp_ops_check(ex, op, name, t, PP_F32, 1, d->c, 1, 1, 1, err))

pp_status pp_batchnorm_forward_train(pp_exec *ex, const pp_bn_desc *d, const pp_tensor *x,
                                     const pp_tensor *gamma, const pp_tensor *beta,
                                     pp_tensor *running_mean, pp_tensor *running_var,
                                     pp_tensor *y, pp_tensor *save_mean, pp_tensor *save_invstd,
                                     pp_error *err)
{
    const char *op = "batchnorm_forward_train";
    PP_TRY(check_bn(ex, op, d, err));
    if ((int64_t)d->n * d->h * d->w < 2)
        return pp_error_set(err, PP_ERR_INVALID,
                            "%s: training batch norm needs more than one value per channel "
                            "(input %dx%dx%dx%d)",
                            op, d->n, d->c, d->h, d->w);
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 4, d->n, d->c, d->h, d->w, err));
    PP_TRY(pp_ops_check_like(ex, op, "y", y, x, err));
    CHECK_C("gamma", gamma);
    CHECK_C("beta", beta);
    CHECK_C("running_mean", running_mean);
    CHECK_C("running_var", running_var);
    CHECK_C("save_mean", save_mean);
    CHECK_C("save_invstd", save_invstd);
    NATIVE_ANY(PP_NATIVE_BN_TRAIN, d, T(x), T(gamma), T(beta), running_mean, running_var, y,
           save_mean, save_invstd);
    wide v = {0};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(batchnorm_forward_train, d, xd, gamma->data, beta->data,
                                running_mean->data, running_var->data, yd, save_mean->data,
                                save_invstd->data, err));
}

pp_status pp_batchnorm_forward_infer(pp_exec *ex, const pp_bn_desc *d, const pp_tensor *x,
                                     const pp_tensor *gamma, const pp_tensor *beta,
                                     const pp_tensor *running_mean, const pp_tensor *running_var,
                                     pp_tensor *y, pp_error *err)
{
    const char *op = "batchnorm_forward_infer";
    PP_TRY(check_bn(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 4, d->n, d->c, d->h, d->w, err));
    PP_TRY(pp_ops_check_like(ex, op, "y", y, x, err));
    CHECK_C("gamma", gamma);
    CHECK_C("beta", beta);
    CHECK_C("running_mean", running_mean);
    CHECK_C("running_var", running_var);
    NATIVE_ANY(PP_NATIVE_BN_INFER, d, T(x), T(gamma), T(beta), T(running_mean),
           T(running_var), y);
    wide v = {0};
    const float *xd = WIDE_IN(v, x);
    float *yd = WIDE_OUT(v, y);
    return WIDE_RUN(v, DISPATCH(batchnorm_forward_infer, d, xd, gamma->data, beta->data,
                                running_mean->data, running_var->data, yd, err));
}

/* The per-channel tensors of a batch-norm backward. */
static pp_status check_bn_backward_c(pp_exec *ex, const char *op, const pp_bn_desc *d,
                                     const pp_tensor *gamma, const pp_tensor *save_mean,
                                     const pp_tensor *save_invstd, const pp_tensor *dgamma,
                                     const pp_tensor *dbeta, pp_error *err)
{
    CHECK_C("gamma", gamma);
    CHECK_C("save_mean", save_mean);
    CHECK_C("save_invstd", save_invstd);
    CHECK_C("dgamma", dgamma);
    CHECK_C("dbeta", dbeta);
    return PP_OK;
}

pp_status pp_batchnorm_backward(pp_exec *ex, const pp_bn_desc *d, const pp_tensor *x,
                                const pp_tensor *dy, const pp_tensor *gamma,
                                const pp_tensor *save_mean, const pp_tensor *save_invstd,
                                pp_tensor *dx, pp_tensor *dgamma, pp_tensor *dbeta, pp_error *err)
{
    const char *op = "batchnorm_backward";
    PP_TRY(check_bn(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 4, d->n, d->c, d->h, d->w, err));
    PP_TRY(pp_ops_check_like(ex, op, "dy", dy, x, err));
    PP_TRY(pp_ops_check_like(ex, op, "dx", dx, x, err));
    PP_TRY(check_bn_backward_c(ex, op, d, gamma, save_mean, save_invstd, dgamma, dbeta, err));
    NATIVE_ANY(PP_NATIVE_BN_BACKWARD, d, T(x), T(dy), T(gamma), T(save_mean), T(save_invstd),
           dx, dgamma, dbeta);
    wide v = {0};
    const float *xd = WIDE_IN(v, x), *dyd = WIDE_IN(v, dy);
    float *dxd = WIDE_OUT(v, dx);
    return WIDE_RUN(v, DISPATCH(batchnorm_backward, d, xd, dyd, gamma->data, save_mean->data,
                                save_invstd->data, dxd, dgamma->data, dbeta->data, err));
}

pp_status pp_batchnorm_forward_act(pp_exec *ex, const pp_bn_desc *d, bool train,
                                   const pp_tensor *x, const pp_tensor *gamma,
                                   const pp_tensor *beta, pp_tensor *running_mean,
                                   pp_tensor *running_var, const pp_tensor *add, bool relu,
                                   pp_tensor *y, pp_tensor *save_mean, pp_tensor *save_invstd,
                                   pp_error *err)
{
    const char *op = "batchnorm_forward_act";
    PP_TRY(check_bn(ex, op, d, err));
    if (train && (int64_t)d->n * d->h * d->w < 2)
        return pp_error_set(err, PP_ERR_INVALID,
                            "%s: training batch norm needs more than one value per channel", op);
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 4, d->n, d->c, d->h, d->w, err));
    PP_TRY(pp_ops_check_like(ex, op, "y", y, x, err));
    if (add) {
        PP_TRY(pp_ops_check_like(ex, op, "add", add, y, err));
        PP_TRY(pp_ops_check_layout_like(op, "add", add, y, err));
    }
    CHECK_C("gamma", gamma);
    CHECK_C("beta", beta);
    CHECK_C("running_mean", running_mean);
    CHECK_C("running_var", running_var);
    if (train) {
        CHECK_C("save_mean", save_mean);
        CHECK_C("save_invstd", save_invstd);
    }
    if (add || relu) {
        const pp_bn_act_desc ad = {*d, train, relu};
        NATIVE_ANY(PP_NATIVE_BN_ACT, &ad, T(x), T(gamma), T(beta), running_mean, running_var,
               T(add), y, save_mean, save_invstd);
    }
    PP_TRY(train ? pp_batchnorm_forward_train(ex, d, x, gamma, beta, running_mean, running_var, y,
                                              save_mean, save_invstd, err)
                 : pp_batchnorm_forward_infer(ex, d, x, gamma, beta, running_mean, running_var, y,
                                              err));
    if (add) return relu ? pp_add_relu(ex, y, add, y, err) : pp_add(ex, y, add, y, err);
    return relu ? pp_relu_forward(ex, y, y, err) : PP_OK;
}

/* pp_batchnorm_backward_relu (g NULL: a temporary) and _add_relu (g kept) */
static pp_status backward_relu(pp_exec *ex, const char *op, const pp_bn_desc *d,
                               const pp_tensor *x, const pp_tensor *relu_y, const pp_tensor *dy,
                               const pp_tensor *gamma, const pp_tensor *save_mean,
                               const pp_tensor *save_invstd, pp_tensor *dx, pp_tensor *dgamma,
                               pp_tensor *dbeta, pp_tensor *g, pp_error *err)
{
    PP_TRY(check_bn(ex, op, d, err));
    PP_TRY(pp_ops_check(ex, op, "x", x, ACT, 4, d->n, d->c, d->h, d->w, err));
    PP_TRY(pp_ops_check_like(ex, op, "relu_y", relu_y, x, err));
    PP_TRY(pp_ops_check_like(ex, op, "dy", dy, x, err));
    PP_TRY(pp_ops_check_layout_like(op, "dy", dy, relu_y, err));
    PP_TRY(pp_ops_check_like(ex, op, "dx", dx, x, err));
    if (g) {
        PP_TRY(pp_ops_check_like(ex, op, "g", g, dy, err));
        PP_TRY(pp_ops_check_layout_like(op, "g", g, dy, err));
        if (g->data == x->data || g->data == dx->data || g->data == relu_y->data)
            return pp_error_set(err, PP_ERR_INVALID, "%s: g may share only dy's memory", op);
    }
    PP_TRY(check_bn_backward_c(ex, op, d, gamma, save_mean, save_invstd, dgamma, dbeta, err));
    NATIVE_ANY(PP_NATIVE_BN_BACKWARD_RELU, d, T(x), T(relu_y), T(dy), T(gamma), T(save_mean),
               T(save_invstd), dx, dgamma, dbeta, g);
    pp_tensor tmp = {0};
    if (!g) {
        PP_TRY(pp_tensor_alloc_on(&tmp, ex, dy->dtype, dy->ndim, dy->shape, err));
        tmp.layout = dy->layout;
        g = &tmp;
    }
    pp_status st = pp_relu_backward(ex, relu_y, dy, g, err);
    if (st == PP_OK)
        st = pp_batchnorm_backward(ex, d, x, g, gamma, save_mean, save_invstd, dx, dgamma, dbeta,
                                   err);
    pp_tensor_free(&tmp);
    return st;
}

pp_status pp_batchnorm_backward_relu(pp_exec *ex, const pp_bn_desc *d, const pp_tensor *x,
                                     const pp_tensor *relu_y, const pp_tensor *dy,
                                     const pp_tensor *gamma, const pp_tensor *save_mean,
                                     const pp_tensor *save_invstd, pp_tensor *dx,
                                     pp_tensor *dgamma, pp_tensor *dbeta, pp_error *err)
{
    return backward_relu(ex, "batchnorm_backward_relu", d, x, relu_y, dy, gamma, save_mean,
                         save_invstd, dx, dgamma, dbeta, NULL, err);
}

pp_status pp_batchnorm_backward_add_relu(pp_exec *ex, const pp_bn_desc *d, const pp_tensor *x,
                                         const pp_tensor *relu_y, const pp_tensor *dy,
                                         const pp_tensor *gamma, const pp_tensor *save_mean,
                                         const pp_tensor *save_invstd, pp_tensor *dx,
                                         pp_tensor *dgamma, pp_tensor *dbeta, pp_tensor *g,
                                         pp_error *err)
{
    const char *op = "batchnorm_backward_add_relu";
    if (!g) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL g", op);
    return backward_relu(ex, op, d, x, relu_y, dy, gamma, save_mean, save_invstd, dx, dgamma,
                         dbeta, g, err);
}
