/*
 * ops_train.c - the checked ops of the training recipe (ops.h, "the training
 * recipe"): the smoothed loss with its top-k count, AdamW over many tensors,
 * gradient sums of squares and scaling, and the deferred batch-norm
 * statistics. Each checks its operands, naming the op, the tensor and its
 * index in a list, then dispatches to the exec's backend; lists go to the
 * backend in chunks (the backend may cut them further).
 */
#include "ops.h"

#include <math.h>
#include <stddef.h>

#include "backend.h"
#include "ops_adapt.h"
#include "ops_check.h"

enum { CHUNK = 256 };

pp_status pp_softmax_xent_ex(pp_exec *ex, const pp_xent_desc *d, const pp_tensor *logits,
                             const pp_tensor *labels, pp_tensor *loss, pp_tensor *correct,
                             pp_tensor *correct_k, pp_tensor *dlogits, pp_error *err)
{
    const char *op = "softmax_xent";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!d) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL descriptor", op);
    if (!logits || logits->ndim != 2)
        return pp_error_set(err, PP_ERR_INVALID, "%s: logits must be 2-D (N,CLASSES)", op);
    if (!(d->divisor > 0))
        return pp_error_set(err, PP_ERR_INVALID, "%s: divisor must be positive", op);
    if (!(d->label_smoothing >= 0 && d->label_smoothing < 1))
        return pp_error_set(err, PP_ERR_INVALID, "%s: label smoothing %g is not in [0, 1)", op,
                            (double)d->label_smoothing);
    if (correct_k && d->top_k < 1)
        return pp_error_set(err, PP_ERR_INVALID, "%s: top_k %d must be >= 1", op, d->top_k);
    int64_t n = logits->shape[0], classes = logits->shape[1];
    PP_TRY(pp_ops_check(ex, op, "logits", logits, PP_OPS_ACT, 2, n, classes, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "labels", labels, PP_I32, 1, n, 1, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "loss", loss, PP_F32, 0, 1, 1, 1, 1, err));
    PP_TRY(pp_ops_check(ex, op, "correct", correct, PP_I32, 0, 1, 1, 1, 1, err));
    if (correct_k)
        PP_TRY(pp_ops_check(ex, op, "correct_k", correct_k, PP_I32, 0, 1, 1, 1, 1, err));
    PP_TRY(pp_ops_check_like(ex, op, "dlogits", dlogits, logits, err));
    if (logits->dtype == PP_BF16)
        return DISPATCH(softmax_xent_bf16, d, (int)n, (int)classes, logits->data, labels->data,
                        loss->data, correct->data, correct_k ? correct_k->data : NULL,
                        dlogits->data, err);
    return DISPATCH(softmax_xent, d, (int)n, (int)classes, logits->data, labels->data, loss->data,
                    correct->data, correct_k ? correct_k->data : NULL, dlogits->data, err);
}

/* The AdamW scalars of ops.h, from the descriptor in double. */
static pp_adamw_scalars adamw_scalars(const pp_adamw_desc *d)
{
    const double step = (double)d->step;
    return (pp_adamw_scalars){
        .decay = (float)(1.0 - d->lr * d->weight_decay),
        .b1 = (float)d->beta1,
        .c1 = (float)(1.0 - d->beta1),
        .b2 = (float)d->beta2,
        .c2 = (float)(1.0 - d->beta2),
        .bc2 = (float)sqrt(1.0 - pow(d->beta2, step)),
        .step_size = (float)(d->lr / (1.0 - pow(d->beta1, step))),
        .eps = (float)d->eps,
        .grad_scale = d->grad_scale,
    };
}

static pp_status check_adamw_desc(const char *op, const pp_adamw_desc *d, pp_error *err)
{
    if (!d) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL descriptor", op);
    if (!(d->lr >= 0) || !(d->eps >= 0) || !(d->weight_decay >= 0) || !isfinite(d->lr) ||
        !isfinite(d->eps) || !isfinite(d->weight_decay))
        return pp_error_set(err, PP_ERR_INVALID,
                            "%s: lr, eps and weight decay must be finite and >= 0", op);
    if (!(d->beta1 >= 0 && d->beta1 < 1) || !(d->beta2 >= 0 && d->beta2 < 1))
        return pp_error_set(err, PP_ERR_INVALID, "%s: betas (%g, %g) must be in [0, 1)", op,
                            d->beta1, d->beta2);
    if (d->step < 1)
        return pp_error_set(err, PP_ERR_INVALID, "%s: step %lld must be >= 1", op,
                            (long long)d->step);
    if (!(d->grad_scale > 0) || !isfinite(d->grad_scale))
        return pp_error_set(err, PP_ERR_INVALID, "%s: gradient scale %g must be finite and > 0",
                            op, (double)d->grad_scale);
    return PP_OK;
}

pp_status pp_adamw_update_multi(pp_exec *ex, const pp_adamw_desc *d, int n,
                                pp_tensor *const *params, const pp_tensor *const *grads,
                                pp_tensor *const *exp_avgs, pp_tensor *const *exp_avg_sqs,
                                pp_error *err)
{
    const char *op = "adamw_update_multi";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    PP_TRY(check_adamw_desc(op, d, err));
    if (n < 0 || (n > 0 && (!params || !grads || !exp_avgs || !exp_avg_sqs)))
        return pp_error_set(err, PP_ERR_INVALID, "%s: NULL tensor list", op);
    for (int i = 0; i < n; i++) {
        pp_status s = pp_ops_check_f32(ex, op, "param", params[i], err);
        if (s == PP_OK) s = pp_ops_check_nchw(op, "param", params[i], err);
        if (s == PP_OK) s = pp_ops_check_like(ex, op, "grad", grads[i], params[i], err);
        if (s == PP_OK) s = pp_ops_check_like(ex, op, "exp_avg", exp_avgs[i], params[i], err);
        if (s == PP_OK)
            s = pp_ops_check_like(ex, op, "exp_avg_sq", exp_avg_sqs[i], params[i], err);
        if (s != PP_OK) {
            pp_error_prefix(err, "tensor %d", i);
            return s;
        }
    }
    if (!ex->dev->ops->adamw_update_multi) return pp_ops_unsupported(ex, op, err);
    const pp_adamw_scalars sc = adamw_scalars(d);
    float *p[CHUNK], *m[CHUNK], *v[CHUNK];
    const float *g[CHUNK];
    int64_t sizes[CHUNK];
    for (int i0 = 0; i0 < n; i0 += CHUNK) {
        const int k = n - i0 < CHUNK ? n - i0 : CHUNK;
        for (int i = 0; i < k; i++) {
            p[i] = params[i0 + i]->data;
            g[i] = grads[i0 + i]->data;
            m[i] = exp_avgs[i0 + i]->data;
            v[i] = exp_avg_sqs[i0 + i]->data;
            sizes[i] = pp_tensor_numel(params[i0 + i]);
        }
        PP_TRY(ex->dev->ops->adamw_update_multi(ex, &sc, k, p, g, m, v, sizes, err));
    }
    return PP_OK;
}

pp_status pp_sumsq_multi(pp_exec *ex, int n, const pp_tensor *const *xs, double *sums,
                         pp_error *err)
{
    const char *op = "sumsq_multi";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (n < 0 || (n > 0 && (!xs || !sums)))
        return pp_error_set(err, PP_ERR_INVALID, "%s: NULL tensor list", op);
    for (int i = 0; i < n; i++) {
        pp_status st = pp_ops_check_f32(ex, op, "x", xs[i], err);
        if (st != PP_OK) {
            pp_error_prefix(err, "tensor %d", i);
            return st;
        }
    }
    if (!ex->dev->ops->sumsq_multi) return pp_ops_unsupported(ex, op, err);
    const float *x[CHUNK];
    int64_t sizes[CHUNK];
    for (int i0 = 0; i0 < n; i0 += CHUNK) {
        const int k = n - i0 < CHUNK ? n - i0 : CHUNK;
        for (int i = 0; i < k; i++) {
            x[i] = xs[i0 + i]->data;
            sizes[i] = pp_tensor_numel(xs[i0 + i]);
        }
        PP_TRY(ex->dev->ops->sumsq_multi(ex, k, x, sizes, sums + i0, err));
    }
    return PP_OK;
}

pp_status pp_scale_multi(pp_exec *ex, float s, int n, pp_tensor *const *xs, pp_error *err)
{
    const char *op = "scale_multi";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!isfinite(s)) return pp_error_set(err, PP_ERR_INVALID, "%s: scale %g is not finite", op,
                                          (double)s);
    if (n < 0 || (n > 0 && !xs))
        return pp_error_set(err, PP_ERR_INVALID, "%s: NULL tensor list", op);
    for (int i = 0; i < n; i++) {
        pp_status st = pp_ops_check_f32(ex, op, "x", xs[i], err);
        if (st != PP_OK) {
            pp_error_prefix(err, "tensor %d", i);
            return st;
        }
    }
    if (!ex->dev->ops->scale_multi) return pp_ops_unsupported(ex, op, err);
    float *x[CHUNK];
    int64_t sizes[CHUNK];
    for (int i0 = 0; i0 < n; i0 += CHUNK) {
        const int k = n - i0 < CHUNK ? n - i0 : CHUNK;
        for (int i = 0; i < k; i++) {
            x[i] = xs[i0 + i]->data;
            sizes[i] = pp_tensor_numel(xs[i0 + i]);
        }
        PP_TRY(ex->dev->ops->scale_multi(ex, s, k, x, sizes, err));
    }
    return PP_OK;
}

pp_status pp_batchnorm_stats_combine(pp_exec *ex, const pp_bn_stats_desc *d, int n,
                                     const int64_t *hw, pp_tensor *const *slots,
                                     pp_tensor *const *running_mean,
                                     pp_tensor *const *running_var, pp_error *err)
{
    const char *op = "batchnorm_stats_combine";
    PP_TRY(pp_ops_check_exec(ex, op, err));
    if (!d || d->m < 1 || !d->sizes)
        return pp_error_set(err, PP_ERR_INVALID, "%s: no micro-batches", op);
    for (int k = 0; k < d->m; k++)
        if (d->sizes[k] < 1)
            return pp_error_set(err, PP_ERR_INVALID, "%s: micro-batch %d has %d samples", op, k,
                                d->sizes[k]);
    if (!(d->momentum >= 0 && d->momentum <= 1))
        return pp_error_set(err, PP_ERR_INVALID, "%s: momentum %g is not in [0, 1]", op,
                            (double)d->momentum);
    if (n < 0 || (n > 0 && (!hw || !slots || !running_mean || !running_var)))
        return pp_error_set(err, PP_ERR_INVALID, "%s: NULL list", op);
    for (int i = 0; i < n; i++) {
        const pp_tensor *s = slots[i];
        pp_status st = PP_OK;
        if (!s || s->ndim != 3 || s->shape[0] < d->m || s->shape[1] != 2)
            st = pp_error_set(err, PP_ERR_INVALID,
                              "%s: slots must be (M, 2, C) with M >= %d micro-batches", op, d->m);
        if (st == PP_OK && hw[i] < 1)
            st = pp_error_set(err, PP_ERR_INVALID, "%s: %lld values per sample", op,
                              (long long)hw[i]);
        const int64_t c = st == PP_OK ? s->shape[2] : 0;
        if (st == PP_OK)
            st = pp_ops_check(ex, op, "slots", s, PP_F32, 3, s->shape[0], 2, c, 1, err);
        if (st == PP_OK)
            st = pp_ops_check(ex, op, "running_mean", running_mean[i], PP_F32, 1, c, 1, 1, 1, err);
        if (st == PP_OK)
            st = pp_ops_check(ex, op, "running_var", running_var[i], PP_F32, 1, c, 1, 1, 1, err);
        if (st != PP_OK) {
            pp_error_prefix(err, "layer %d", i);
            return st;
        }
    }
    if (!ex->dev->ops->bn_stats_combine) return pp_ops_unsupported(ex, op, err);
    int c[CHUNK];
    float *s[CHUNK], *rm[CHUNK], *rv[CHUNK];
    for (int i0 = 0; i0 < n; i0 += CHUNK) {
        const int k = n - i0 < CHUNK ? n - i0 : CHUNK;
        for (int i = 0; i < k; i++) {
            c[i] = (int)slots[i0 + i]->shape[2];
            s[i] = slots[i0 + i]->data;
            rm[i] = running_mean[i0 + i]->data;
            rv[i] = running_var[i0 + i]->data;
        }
        PP_TRY(ex->dev->ops->bn_stats_combine(ex, d, k, c, hw + i0, s, rm, rv, err));
    }
    return PP_OK;
}
