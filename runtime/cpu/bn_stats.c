/*
 * bn_stats.c - CPU deferred batch-norm statistics (pp_batchnorm_stats_combine):
 * per channel, the micro-batches' means and variances combined in
 * micro-batch order in double (two passes: the mean, then the sum of squared
 * deviations), the running statistics updated once, the slots zeroed. The
 * CUDA kernel does the same arithmetic per channel (the same bits).
 */
#include <string.h>

#include "kernels.h"

pp_status pp_cpu_bn_stats_combine(pp_exec *ex, const pp_bn_stats_desc *d, int count, const int *c,
                                  const int64_t *hw, float *const *slots,
                                  float *const *running_mean, float *const *running_var,
                                  pp_error *err)
{
    (void)ex, (void)err;
    const double mom = d->momentum;
    for (int i = 0; i < count; i++) {
        const int C = c[i];
        float *s = slots[i];
        for (int ch = 0; ch < C; ch++) {
            double total = 0.0, sum = 0.0;
            for (int k = 0; k < d->m; k++) {
                const double nk = (double)d->sizes[k] * (double)hw[i];
                total += nk;
                sum += nk * (double)s[(size_t)k * 2 * C + ch];
            }
            const double mean = sum / total;
            double m2 = 0.0;
            for (int k = 0; k < d->m; k++) {
                const double nk = (double)d->sizes[k] * (double)hw[i];
                const double dm = (double)s[(size_t)k * 2 * C + ch] - mean;
                m2 += (nk - 1.0) * (double)s[(size_t)k * 2 * C + C + ch] + nk * dm * dm;
            }
            const double var = m2 / (total - 1.0);
            running_mean[i][ch] = (float)((1.0 - mom) * running_mean[i][ch] + mom * mean);
            running_var[i][ch] = (float)((1.0 - mom) * running_var[i][ch] + mom * var);
        }
        memset(s, 0, (size_t)d->m * 2 * (size_t)C * sizeof *s);
    }
    return PP_OK;
}
