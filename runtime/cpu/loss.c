/*
 * loss.c - CPU softmax cross-entropy with its gradient and a correct count.
 * Labels are validated before anything is written. Log-sum-exp, the loss sum
 * and the softmax normaliser are computed in double; the argmax takes the
 * first maximum.
 */
#include <math.h>

#include "kernels.h"

pp_status pp_cpu_softmax_xent(pp_exec *ex, int n, int classes, const float *logits,
                              const int32_t *labels, float divisor, float *loss, int32_t *correct,
                              float *dlogits, pp_error *err)
{
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return pp_error_set(err, PP_ERR_INPUT,
                                "softmax_xent: label %d of sample %d is outside [0, %d)",
                                (int)labels[i], i, classes);
    double total = 0.0;
    int32_t hits = 0;
    const double inv_div = 1.0 / (double)divisor;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * classes;
        float *g = dlogits + (size_t)i * classes;
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
        total += lse - (double)z[labels[i]];
        hits += arg == labels[i];
        const double scale = inv_div / se;
        for (int j = 0; j < classes; j++)
            g[j] = (float)(exp((double)z[j] - (double)zmax) * scale);
        g[labels[i]] = (float)((exp((double)z[labels[i]] - (double)zmax) / se - 1.0) * inv_div);
    }
    *loss = (float)(total / (double)divisor);
    *correct = hits;
    return PP_OK;
}
