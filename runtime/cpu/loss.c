/*
 * loss.c - CPU softmax cross-entropy with its gradient and a correct count,
 * in one pass over the logits per row (the fused classifier: no second
 * tensor of probabilities). Labels are validated before anything is written.
 * Log-sum-exp, the loss and the softmax normaliser are computed in double;
 * the argmax takes the first maximum. Rows are independent and run in tasks
 * on the device's pool, each row's loss kept in the exec's workspace; the
 * losses are then summed in row order on the calling thread, so the result
 * does not depend on the thread count. dlogits may be logits itself (each
 * row reads its logits before it writes its gradient).
 */
#include <math.h>

#include "kernels.h"
#include "workers.h"

/* Work of a task: about this many logits. */
#define LOGITS_PER_TASK ((int64_t)1 << 16)

typedef struct xent_job {
    int n, classes, rows_per_task;
    const float *logits;
    const int32_t *labels;
    double inv_div;
    float *dlogits;
    double *loss;  /* (n) each row's loss */
    char *hit;     /* (n) its argmax is its label */
} xent_job;

static void xent_task(void *arg, int64_t t, int worker)
{
    const xent_job *j = arg;
    (void)worker;
    const int i0 = (int)t * j->rows_per_task;
    const int i1 = i0 + j->rows_per_task < j->n ? i0 + j->rows_per_task : j->n;
    const int classes = j->classes;
    for (int i = i0; i < i1; i++) {
        const float *z = j->logits + (size_t)i * classes;
        float *g = j->dlogits + (size_t)i * classes;
        const int32_t label = j->labels[i];
        int best = 0;
        float zmax = z[0];
        for (int c = 1; c < classes; c++)
            if (z[c] > zmax) {
                zmax = z[c];
                best = c;
            }
        double se = 0.0;
        for (int c = 0; c < classes; c++) se += exp((double)z[c] - (double)zmax);
        const double zl = (double)z[label];
        j->loss[i] = (double)zmax + log(se) - zl;
        j->hit[i] = best == label;
        const double scale = j->inv_div / se;
        for (int c = 0; c < classes; c++) g[c] = (float)(exp((double)z[c] - (double)zmax) * scale);
        g[label] = (float)((exp(zl - (double)zmax) / se - 1.0) * j->inv_div);
    }
}

pp_status pp_cpu_softmax_xent(pp_exec *ex, int n, int classes, const float *logits,
                              const int32_t *labels, float divisor, float *loss, int32_t *correct,
                              float *dlogits, pp_error *err)
{
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return pp_error_set(err, PP_ERR_INPUT,
                                "softmax_xent: label %d of sample %d is outside [0, %d)",
                                (int)labels[i], i, classes);
    void *ws;
    PP_TRY(pp_exec_workspace(ex, (size_t)(n > 0 ? n : 1) * (sizeof(double) + 1), &ws, err));
    int per = (int)(LOGITS_PER_TASK / (classes > 0 ? classes : 1));
    xent_job j = {.n = n, .classes = classes, .rows_per_task = per > 1 ? per : 1,
                  .logits = logits, .labels = labels, .inv_div = 1.0 / (double)divisor,
                  .dlogits = dlogits, .loss = ws, .hit = (char *)((double *)ws + n)};
    pp_cpu_parallel(ex, (n + j.rows_per_task - 1) / j.rows_per_task, xent_task, &j);
    double total = 0.0;
    int32_t hits = 0;
    for (int i = 0; i < n; i++) {
        total += j.loss[i];
        hits += j.hit[i];
    }
    *loss = (float)(total / (double)divisor);
    *correct = hits;
    return PP_OK;
}
