/*
 * loss.c - CPU softmax cross-entropy with label smoothing, its gradient, and
 * the top-1 and top-k counts (pp_softmax_xent_ex). Labels are validated
 * before anything is written. Log-sum-exp, the loss sum, the logits' sum and
 * the softmax normaliser are computed in double; the argmax takes the first
 * maximum. Without smoothing the arithmetic is the plain loss's (the same
 * bits).
 */
#include <math.h>

#include "kernels.h"

/* Classes that rank before the label: larger logits, or equal ones of a
 * lower index (the argmax's tie rule). */
static int label_rank(const float *z, int classes, int label)
{
    const float zl = z[label];
    int r = 0;
    for (int j = 0; j < classes; j++) r += z[j] > zl || (z[j] == zl && j < label);
    return r;
}

pp_status pp_cpu_softmax_xent(pp_exec *ex, const pp_xent_desc *d, int n, int classes,
                              const float *logits, const int32_t *labels, float *loss,
                              int32_t *correct, int32_t *correct_k, float *dlogits, pp_error *err)
{
    (void)ex;
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return pp_error_set(err, PP_ERR_INPUT,
                                "softmax_xent: label %d of sample %d is outside [0, %d)",
                                (int)labels[i], i, classes);
    double total = 0.0;
    int32_t hits = 0, hits_k = 0;
    const double inv_div = 1.0 / (double)d->divisor;
    const double eps = d->label_smoothing, off = eps / (double)classes, on = 1.0 - eps + off;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * classes;
        float *g = dlogits + (size_t)i * classes;
        const int label = labels[i];
        int arg = 0;
        float zmax = z[0];
        for (int j = 1; j < classes; j++)
            if (z[j] > zmax) {
                zmax = z[j];
                arg = j;
            }
        double se = 0.0;
        for (int j = 0; j < classes; j++) se += exp((double)z[j] - (double)zmax);
        const double lse = (double)zmax + log(se);
        hits += arg == label;
        if (correct_k) hits_k += label_rank(z, classes, label) < d->top_k;
        if (eps == 0) {
            total += lse - (double)z[label];
            const double scale = inv_div / se;
            for (int j = 0; j < classes; j++)
                g[j] = (float)(exp((double)z[j] - (double)zmax) * scale);
            g[label] = (float)((exp((double)z[label] - (double)zmax) / se - 1.0) * inv_div);
            continue;
        }
        double sz = 0.0;
        for (int j = 0; j < classes; j++) sz += (double)z[j];
        total += (1.0 - eps) * (lse - (double)z[label]) + eps * (lse - sz / (double)classes);
        for (int j = 0; j < classes; j++)
            g[j] = (float)((exp((double)z[j] - (double)zmax) / se - (j == label ? on : off)) *
                           inv_div);
    }
    *loss = (float)(total / (double)d->divisor);
    *correct = hits;
    if (correct_k) *correct_k = hits_k;
    return PP_OK;
}
