/*
 * loss.c - CPU softmax cross-entropy with label smoothing, its gradient, and
 * the top-1 and top-k counts (pp_softmax_xent_ex), in one pass over the
 * logits per row (the fused classifier: no second tensor of probabilities).
 * Labels are validated before anything is written. Log-sum-exp, the loss,
 * the logits' sum and the softmax normaliser are computed in double; the
 * argmax takes the first maximum. Without smoothing the arithmetic is the
 * plain loss's (the same bits). Rows are independent and run in tasks on the
 * device's pool, each row's loss and counts kept in the exec's workspace; the
 * losses are then summed in row order on the calling thread, so the result
 * does not depend on the thread count. dlogits may be logits itself (each
 * row reads its logits before it writes its gradient). bf16 logits: each
 * row is widened into the worker's f32 scratch row, runs the f32 row's
 * arithmetic there in place, and its gradient is rounded once into the bf16
 * dlogits: the f32 op's bits on the widened logits, no whole f32 copy.
 */
#include <math.h>

#include "kernels.h"
#include "workers.h"

/* Work of a task: about this many logits. */
#define LOGITS_PER_TASK ((int64_t)1 << 16)

typedef struct xent_job {
    int n, classes, rows_per_task, top_k;
    bool want_k;
    const float *logits;
    const uint16_t *logits16; /* bf16 logits (logits NULL) */
    const int32_t *labels;
    double inv_div, eps;
    float *dlogits;
    uint16_t *dlogits16; /* bf16 gradient (dlogits NULL) */
    float *scratch;      /* bf16: (threads, classes) f32 rows, one per worker */
    double *loss;  /* (n) each row's loss */
    char *hit;     /* (n) its argmax is its label */
    char *hit_k;   /* (n) its label ranks below top_k */
} xent_job;

/* Classes that rank before the label: larger logits, or equal ones of a
 * lower index (the argmax's tie rule). */
static int label_rank(const float *z, int classes, int label)
{
    const float zl = z[label];
    int r = 0;
    for (int j = 0; j < classes; j++) r += z[j] > zl || (z[j] == zl && j < label);
    return r;
}

/* Row i over f32 logits z (classes) into its gradient g (may be z). */
static void xent_row(const xent_job *j, int i, const float *z, float *g)
{
    const int classes = j->classes;
    const double eps = j->eps, off = eps / (double)classes, on = 1.0 - eps + off;
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
    const double zl = (double)z[label], lse = (double)zmax + log(se);
    j->hit[i] = best == label;
    j->hit_k[i] = j->want_k && label_rank(z, classes, label) < j->top_k;
    if (eps == 0) {
        j->loss[i] = lse - zl;
        const double scale = j->inv_div / se;
        for (int c = 0; c < classes; c++)
            g[c] = (float)(exp((double)z[c] - (double)zmax) * scale);
        g[label] = (float)((exp(zl - (double)zmax) / se - 1.0) * j->inv_div);
        return;
    }
    double sz = 0.0;
    for (int c = 0; c < classes; c++) sz += (double)z[c];
    j->loss[i] = (1.0 - eps) * (lse - zl) + eps * (lse - sz / (double)classes);
    for (int c = 0; c < classes; c++)
        g[c] = (float)((exp((double)z[c] - (double)zmax) / se - (c == label ? on : off)) *
                       j->inv_div);
}

static void xent_task(void *arg, int64_t t, int worker)
{
    const xent_job *j = arg;
    const int i0 = (int)t * j->rows_per_task;
    const int i1 = i0 + j->rows_per_task < j->n ? i0 + j->rows_per_task : j->n;
    const size_t classes = (size_t)j->classes;
    for (int i = i0; i < i1; i++) {
        if (!j->logits16) {
            xent_row(j, i, j->logits + i * classes, j->dlogits + i * classes);
            continue;
        }
        const uint16_t *z = j->logits16 + i * classes;
        uint16_t *g = j->dlogits16 + i * classes;
        float *row = j->scratch + (size_t)worker * classes;
        for (size_t c = 0; c < classes; c++) row[c] = pp_f32_from_bf16(z[c]);
        xent_row(j, i, row, row);
        for (size_t c = 0; c < classes; c++) g[c] = pp_bf16_from_f32(row[c]);
    }
}

/* Runs j's rows (logits or logits16 set) and sums their losses and counts. */
static pp_status xent_run(pp_exec *ex, const pp_xent_desc *d, xent_job *j, float *loss,
                          int32_t *correct, int32_t *correct_k, pp_error *err)
{
    const int n = j->n, classes = j->classes;
    for (int i = 0; i < n; i++)
        if (j->labels[i] < 0 || j->labels[i] >= classes)
            return pp_error_set(err, PP_ERR_INPUT,
                                "softmax_xent: label %d of sample %d is outside [0, %d)",
                                (int)j->labels[i], i, classes);
    /* per row its loss (double); bf16: an f32 scratch row per worker; per row two hits */
    const size_t rows = (size_t)(n > 0 ? n : 1);
    const size_t scratch = !j->logits16 ? 0 : (size_t)pp_cpu_threads(ex) * (size_t)classes;
    void *ws;
    PP_TRY(pp_exec_workspace(ex, scratch * sizeof(float) + rows * (sizeof(double) + 2), &ws,
                             err));
    int per = (int)(LOGITS_PER_TASK / (classes > 0 ? classes : 1));
    j->rows_per_task = per > 1 ? per : 1;
    j->top_k = d->top_k;
    j->want_k = correct_k != NULL;
    j->inv_div = 1.0 / (double)d->divisor;
    j->eps = d->label_smoothing;
    j->loss = ws;
    j->scratch = (float *)(j->loss + rows);
    j->hit = (char *)(j->scratch + scratch);
    j->hit_k = j->hit + n;
    pp_cpu_parallel(ex, (n + j->rows_per_task - 1) / j->rows_per_task, xent_task, j);
    double total = 0.0;
    int32_t hits = 0, hits_k = 0;
    for (int i = 0; i < n; i++) {
        total += j->loss[i];
        hits += j->hit[i];
        hits_k += j->hit_k[i];
    }
    *loss = (float)(total / (double)d->divisor);
    *correct = hits;
    if (correct_k) *correct_k = hits_k;
    return PP_OK;
}

pp_status pp_cpu_softmax_xent(pp_exec *ex, const pp_xent_desc *d, int n, int classes,
                              const float *logits, const int32_t *labels, float *loss,
                              int32_t *correct, int32_t *correct_k, float *dlogits, pp_error *err)
{
    xent_job j = {.n = n, .classes = classes, .logits = logits, .labels = labels,
                  .dlogits = dlogits};
    return xent_run(ex, d, &j, loss, correct, correct_k, err);
}

pp_status pp_cpu_softmax_xent_bf16(pp_exec *ex, const pp_xent_desc *d, int n, int classes,
                                   const uint16_t *logits, const int32_t *labels, float *loss,
                                   int32_t *correct, int32_t *correct_k, uint16_t *dlogits,
                                   pp_error *err)
{
    xent_job j = {.n = n, .classes = classes, .logits16 = logits, .labels = labels,
                  .dlogits16 = dlogits};
    return xent_run(ex, d, &j, loss, correct, correct_k, err);
}
