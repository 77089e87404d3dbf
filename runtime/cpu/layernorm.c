/*
 * layernorm.c - CPU layer normalisation over the last dimension of rows of
 * features (x (R, C)), torch.nn.LayerNorm's arithmetic:
 *   forward   mean, biased variance in double (reduce.h's lanes), rstd =
 *             1 / sqrt(var + eps); y = (x - mean) rstd gamma + beta, each
 *             element in double, rounded once; mean and rstd kept as f32.
 *   backward  xhat = (x - mean) rstd from the kept statistics; per row
 *             dx = (g - mean(g) - xhat mean(g xhat)) rstd with g = dy gamma
 *             (row sums in double); dgamma += sum dy xhat, dbeta += sum dy.
 * Rows are independent and run in tasks of ROWS_PER_TASK. The parameter
 * gradients are summed in chunks of CHUNK_ROWS rows (a partial sum per chunk,
 * in double), then over the chunks in chunk order, and added once: the
 * cuts depend on the shape alone, so the bits do not depend on the threads.
 */
#include <math.h>

#include "kernels.h"
#include "reduce.h"
#include "workers.h"

#define ROWS_PER_TASK 16
#define CHUNK_ROWS 64
#define COLS_PER_TASK 256

typedef struct ln_job {
    int64_t rows;
    int c;
    float eps;
    const float *x, *dy, *gamma, *beta;
    float *y, *mean, *rstd, *dx, *dgamma, *dbeta;
    const float *kept_mean, *kept_rstd; /* backward: the forward's statistics */
    double *part;  /* backward: (chunks, 2, C) partial sums of dy xhat and dy */
    int64_t chunks;
} ln_job;

static int64_t row_tasks(int64_t rows, int64_t per)
{
    return (rows + per - 1) / per;
}

static void forward_task(void *arg, int64_t t, int worker)
{
    const ln_job *j = arg;
    (void)worker;
    const int64_t r1 = (t + 1) * ROWS_PER_TASK < j->rows ? (t + 1) * ROWS_PER_TASK : j->rows;
    for (int64_t r = t * ROWS_PER_TASK; r < r1; r++) {
        const float *x = j->x + r * j->c;
        float *y = j->y + r * j->c;
        const double mean = pp_sum_f32(x, (size_t)j->c) / j->c;
        const double var = pp_sum_sqdev_f32(x, (size_t)j->c, mean) / j->c;
        const double rstd = 1.0 / sqrt(var + (double)j->eps);
        for (int i = 0; i < j->c; i++) {
            double v = ((double)x[i] - mean) * rstd * (double)j->gamma[i];
            if (j->beta) v += (double)j->beta[i];
            y[i] = (float)v;
        }
        j->mean[r] = (float)mean;
        j->rstd[r] = (float)rstd;
    }
}

pp_status pp_cpu_layernorm_forward(pp_exec *ex, int64_t rows, int c, float eps, const float *x,
                                   const float *gamma, const float *beta, float *y, float *mean,
                                   float *rstd, pp_error *err)
{
    ln_job j = {.rows = rows, .c = c, .eps = eps, .x = x, .gamma = gamma, .beta = beta, .y = y,
                .mean = mean, .rstd = rstd};
    pp_cpu_parallel(ex, row_tasks(rows, ROWS_PER_TASK), forward_task, &j);
    return PP_OK;
}

/* Rows of chunk t: dx, and the chunk's partial parameter sums. */
static void backward_task(void *arg, int64_t t, int worker)
{
    const ln_job *j = arg;
    (void)worker;
    const int c = j->c;
    const int64_t r1 = (t + 1) * CHUNK_ROWS < j->rows ? (t + 1) * CHUNK_ROWS : j->rows;
    double *pg = j->part + t * 2 * c, *pb = pg + c;
    for (int i = 0; i < c; i++) pg[i] = pb[i] = 0.0;
    for (int64_t r = t * CHUNK_ROWS; r < r1; r++) {
        const float *x = j->x + r * c, *dy = j->dy + r * c;
        float *dx = j->dx + r * c;
        const double mean = j->kept_mean[r], rstd = j->kept_rstd[r];
        double sg[PP_REDUCE_LANES] = {0}, sgx[PP_REDUCE_LANES] = {0};
        for (int i = 0; i < c; i++) {
            const double xhat = ((double)x[i] - mean) * rstd;
            const double g = (double)dy[i] * (double)j->gamma[i];
            sg[i % PP_REDUCE_LANES] += g;
            sgx[i % PP_REDUCE_LANES] += g * xhat;
            pg[i] += (double)dy[i] * xhat;
            pb[i] += (double)dy[i];
        }
        const double mg = pp_lanes_total(sg) / c, mgx = pp_lanes_total(sgx) / c;
        for (int i = 0; i < c; i++) {
            const double xhat = ((double)x[i] - mean) * rstd;
            const double g = (double)dy[i] * (double)j->gamma[i];
            dx[i] = (float)((g - mg - xhat * mgx) * rstd);
        }
    }
}

/* Columns of task t: the chunks' partial sums added in chunk order, then to
 * the parameters' gradients. */
static void params_task(void *arg, int64_t t, int worker)
{
    const ln_job *j = arg;
    (void)worker;
    const int c = j->c, i0 = (int)t * COLS_PER_TASK;
    const int i1 = i0 + COLS_PER_TASK < c ? i0 + COLS_PER_TASK : c;
    for (int i = i0; i < i1; i++) {
        double g = 0.0, b = 0.0;
        for (int64_t k = 0; k < j->chunks; k++) {
            g += j->part[k * 2 * c + i];
            b += j->part[k * 2 * c + c + i];
        }
        j->dgamma[i] += (float)g;
        if (j->dbeta) j->dbeta[i] += (float)b;
    }
}

pp_status pp_cpu_layernorm_backward(pp_exec *ex, int64_t rows, int c, const float *x,
                                    const float *dy, const float *gamma, const float *mean,
                                    const float *rstd, float *dx, float *dgamma, float *dbeta,
                                    pp_error *err)
{
    const int64_t chunks = row_tasks(rows, CHUNK_ROWS);
    void *ws = NULL;
    PP_TRY(pp_exec_workspace(ex, (size_t)(chunks ? chunks : 1) * 2 * (size_t)c * sizeof(double),
                             &ws, err));
    ln_job j = {.rows = rows, .c = c, .x = x, .dy = dy, .gamma = gamma, .kept_mean = mean,
                .kept_rstd = rstd, .dx = dx, .dgamma = dgamma, .dbeta = dbeta, .part = ws,
                .chunks = chunks};
    pp_cpu_parallel(ex, chunks, backward_task, &j);
    pp_cpu_parallel(ex, (c + COLS_PER_TASK - 1) / COLS_PER_TASK, params_task, &j);
    return PP_OK;
}
