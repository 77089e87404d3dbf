/*
 * pooling.c - CPU max pooling (with argmax indices), window average pooling and
 * global average pooling.
 *
 * Max pool: padded positions never win; within a window the first maximum in
 * row-major order wins and a NaN wins over anything, the last NaN if several
 * (PyTorch's rule: take v when v > max or v is NaN). idx holds
 * the flat ih*W+iw position inside the input plane. Average pool sums in
 * double. Window average pooling divides by the window's size clipped to the
 * padded input (PyTorch's count_include_pad). Max and window average pooling
 * run fixed runs of planes on the device's pool (planes are independent);
 * global average pooling is single-threaded. Deterministic.
 */
#include <string.h>

#include "kernels.h"
#include "workers.h"
#include "reduce.h"

/* Range [*q0, *q1) of output columns q whose input column q*stride - pad + j
 * lies inside [0, w). */
static void pool_valid_range(const pp_pool_desc *d, int j, int *q0, int *q1)
{
    int lo = d->pad - j, hi = d->w - 1 + d->pad - j;
    int a = lo <= 0 ? 0 : (lo + d->stride - 1) / d->stride;
    int b = hi < 0 ? 0 : hi / d->stride + 1;
    *q0 = a < d->q ? a : d->q;
    *q1 = b < d->q ? b : d->q;
    if (*q1 < *q0) *q1 = *q0;
}

/* One output row: the window maxima of every column q are updated together,
 * visiting the window in row-major order, so each column's first maximum
 * wins and the loop over q has no carried dependency. */
static void maxpool_row(const pp_pool_desc *d, const float *xp, int p, float *restrict yr,
                        int32_t *restrict ir)
{
    int h0 = p * d->stride - d->pad, h1 = h0 + d->kernel;
    if (h0 < 0) h0 = 0;
    if (h1 > d->h) h1 = d->h;
    for (int q = 0; q < d->q; q++) {
        int w0 = q * d->stride - d->pad;
        if (w0 < 0) w0 = 0;
        yr[q] = xp[(size_t)h0 * d->w + w0];
        ir[q] = h0 * d->w + w0;
    }
    for (int ih = h0; ih < h1; ih++) {
        const float *row = xp + (size_t)ih * d->w;
        for (int j = 0; j < d->kernel; j++) {
            int q0, q1;
            pool_valid_range(d, j, &q0, &q1);
            for (int q = q0; q < q1; q++) {
                int iw = q * d->stride - d->pad + j;
                float v = row[iw];
                /* branch-free select; v != v is isnan(v) */
                int take = (v > yr[q]) | (v != v);
                yr[q] = take ? v : yr[q];
                ir[q] = take ? ih * d->w + iw : ir[q];
            }
        }
    }
}

/* Planes handed to one task. */
#define POOL_PLANES_PER_TASK 16

typedef struct maxpool_job {
    const pp_pool_desc *d;
    const float *x, *dy;
    float *y, *dx;
    int32_t *idx_out;
    const int32_t *idx;
    size_t planes;
} maxpool_job;

/* Planes [*p0, *p1) of task t. */
/* The planes [*p0, *p1) of task t over planes in all. */
static void task_planes(size_t planes, int64_t t, size_t *p0, size_t *p1)
{
    *p0 = (size_t)t * POOL_PLANES_PER_TASK;
    *p1 = *p0 + POOL_PLANES_PER_TASK < planes ? *p0 + POOL_PLANES_PER_TASK : planes;
}

static void maxpool_forward_task(void *arg, int64_t t, int worker)
{
    const maxpool_job *j = arg;
    const pp_pool_desc *d = j->d;
    (void)worker;
    const size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q;
    size_t p0, p1;
    task_planes(j->planes, t, &p0, &p1);
    for (size_t pl = p0; pl < p1; pl++)
        for (int p = 0; p < d->p; p++)
            maxpool_row(d, j->x + pl * hw, p, j->y + pl * pq + (size_t)p * d->q,
                        j->idx_out + pl * pq + (size_t)p * d->q);
}

static void maxpool_backward_task(void *arg, int64_t t, int worker)
{
    const maxpool_job *j = arg;
    const pp_pool_desc *d = j->d;
    (void)worker;
    const size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q;
    size_t p0, p1;
    task_planes(j->planes, t, &p0, &p1);
    memset(j->dx + p0 * hw, 0, sizeof(float) * (p1 - p0) * hw);
    for (size_t pl = p0; pl < p1; pl++) {
        float *dxp = j->dx + pl * hw;
        const float *dyp = j->dy + pl * pq;
        const int32_t *ip = j->idx + pl * pq;
        for (size_t o = 0; o < pq; o++) dxp[ip[o]] += dyp[o];
    }
}

static int64_t pool_tasks(size_t planes)
{
    return (int64_t)((planes + POOL_PLANES_PER_TASK - 1) / POOL_PLANES_PER_TASK);
}

pp_status pp_cpu_maxpool_forward(pp_exec *ex, const pp_pool_desc *d, const float *x, float *y,
                                 int32_t *idx, pp_error *err)
{
    maxpool_job j = {.d = d, .x = x, .y = y, .idx_out = idx, .planes = (size_t)d->n * d->c};
    pp_cpu_parallel(ex, pool_tasks(j.planes), maxpool_forward_task, &j);
    return PP_OK;
}

pp_status pp_cpu_maxpool_backward(pp_exec *ex, const pp_pool_desc *d, const float *x,
                                  const float *y, const float *dy, const int32_t *idx, float *dx,
                                  pp_error *err)
{
    maxpool_job j = {.d = d, .x = x, .dy = dy, .dx = dx, .idx = idx,
                     .planes = (size_t)d->n * d->c};
    pp_cpu_parallel(ex, pool_tasks(j.planes), maxpool_backward_task, &j);
    return PP_OK;
}

pp_status pp_cpu_avgpool_forward(pp_exec *ex, int64_t planes, int64_t hw, const float *x, float *y,
                                 pp_error *err)
{
    for (int64_t pl = 0; pl < planes; pl++)
        y[pl] = (float)(pp_sum_f32(x + pl * hw, (size_t)hw) / (double)hw);
    return PP_OK;
}

pp_status pp_cpu_avgpool_backward(pp_exec *ex, int64_t planes, int64_t hw, const float *dy,
                                  float *dx, pp_error *err)
{
    for (int64_t pl = 0; pl < planes; pl++) {
        const float g = (float)((double)dy[pl] / (double)hw);
        float *out = dx + pl * hw;
        for (int64_t i = 0; i < hw; i++) out[i] = g;
    }
    return PP_OK;
}

/* ---- window average pool ---------------------------------------------------- */

/* The window of output (p, q): rows [*h0, *h1) and columns [*w0, *w1) of the
 * input, and the divisor (the window clipped to the padded input). */
static int avg_window(const pp_pool_desc *d, int p, int q, int *h0, int *h1, int *w0, int *w1)
{
    int hs = p * d->stride - d->pad, ws = q * d->stride - d->pad;
    int he = hs + d->kernel, we = ws + d->kernel;
    if (he > d->h + d->pad) he = d->h + d->pad;
    if (we > d->w + d->pad) we = d->w + d->pad;
    int size = (he - hs) * (we - ws);
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = he > d->h ? d->h : he;
    *w1 = we > d->w ? d->w : we;
    return size;
}

typedef struct avgpool2d_job {
    const pp_pool_desc *d;
    const float *x; /* forward: x; backward: dy */
    float *y;       /* forward: y; backward: dx */
    size_t planes;
} avgpool2d_job;

static void avgpool2d_forward_task(void *arg, int64_t t, int worker)
{
    const avgpool2d_job *j = arg;
    const pp_pool_desc *d = j->d;
    (void)worker;
    const size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q;
    size_t p0, p1;
    task_planes(j->planes, t, &p0, &p1);
    for (size_t pl = p0; pl < p1; pl++) {
        const float *xp = j->x + pl * hw;
        float *yp = j->y + pl * pq;
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++) {
                int h0, h1, w0, w1;
                int size = avg_window(d, p, q, &h0, &h1, &w0, &w1);
                double sum = 0.0;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) sum += (double)xp[(size_t)ih * d->w + iw];
                yp[(size_t)p * d->q + q] = (float)(sum / size);
            }
    }
}

static void avgpool2d_backward_task(void *arg, int64_t t, int worker)
{
    const avgpool2d_job *j = arg;
    const pp_pool_desc *d = j->d;
    (void)worker;
    const size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q;
    size_t p0, p1;
    task_planes(j->planes, t, &p0, &p1);
    memset(j->y + p0 * hw, 0, sizeof(float) * (p1 - p0) * hw);
    for (size_t pl = p0; pl < p1; pl++) {
        const float *dyp = j->x + pl * pq;
        float *dxp = j->y + pl * hw;
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++) {
                int h0, h1, w0, w1;
                int size = avg_window(d, p, q, &h0, &h1, &w0, &w1);
                const float g = dyp[(size_t)p * d->q + q] / (float)size;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) dxp[(size_t)ih * d->w + iw] += g;
            }
    }
}

pp_status pp_cpu_avgpool2d_forward(pp_exec *ex, const pp_pool_desc *d, const float *x, float *y,
                                   pp_error *err)
{
    avgpool2d_job j = {.d = d, .x = x, .y = y, .planes = (size_t)d->n * d->c};
    pp_cpu_parallel(ex, pool_tasks(j.planes), avgpool2d_forward_task, &j);
    return PP_OK;
}

pp_status pp_cpu_avgpool2d_backward(pp_exec *ex, const pp_pool_desc *d, const float *dy,
                                    float *dx, pp_error *err)
{
    avgpool2d_job j = {.d = d, .x = dy, .y = dx, .planes = (size_t)d->n * d->c};
    pp_cpu_parallel(ex, pool_tasks(j.planes), avgpool2d_backward_task, &j);
    return PP_OK;
}
