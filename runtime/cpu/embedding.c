/*
 * embedding.c - CPU token and position embeddings (GPT-2's wte and wpe).
 *   token forward      y[r] = table[ids[r]], rows in tasks.
 *   token backward     the rows are sorted by id (a stable counting sort on
 *                      the calling thread: positions of one id in increasing
 *                      order); then each id that occurs, in tasks of a run of
 *                      ids, sums its rows of dy in double in position order
 *                      and adds the sum to its table row once. Tasks own
 *                      disjoint table rows: no race, and the bits do not
 *                      depend on the thread count.
 *   position forward   y[n, t] = x[n, t] + table[t].
 *   position backward  table[t] += sum over n of dy[n, t] (in double, sample
 *                      order), one task per run of positions.
 * Scratch (exec workspace): the sort (vocab + 1 counts, rows positions, the
 * ids that occur) and C doubles per pool thread.
 */
#include <string.h>

#include "kernels.h"
#include "workers.h"

#define ROWS_PER_TASK 64
#define IDS_PER_TASK 64
#define POSITIONS_PER_TASK 8

typedef struct emb_job {
    int64_t rows;
    int c, t;
    const int32_t *ids;
    const float *table, *x, *dy;
    float *y, *dtable;
    const int64_t *start;  /* (vocab + 1) first sorted row of each id */
    const int64_t *order;  /* (rows) row indices sorted by id */
    const int32_t *seen;   /* (n_seen) ids that occur, increasing */
    int64_t n_seen, n;
    double *acc;           /* c doubles per worker */
} emb_job;

static void forward_task(void *arg, int64_t task, int worker)
{
    const emb_job *j = arg;
    (void)worker;
    const int64_t r0 = task * ROWS_PER_TASK;
    const int64_t r1 = r0 + ROWS_PER_TASK < j->rows ? r0 + ROWS_PER_TASK : j->rows;
    for (int64_t r = r0; r < r1; r++)
        memcpy(j->y + r * j->c, j->table + (int64_t)j->ids[r] * j->c, sizeof(float) * (size_t)j->c);
}

pp_status pp_cpu_embedding_forward(pp_exec *ex, int64_t rows, int vocab, int c,
                                   const int32_t *ids, const float *table, float *y,
                                   pp_error *err)
{
    (void)vocab;
    emb_job j = {.rows = rows, .c = c, .ids = ids, .table = table, .y = y};
    pp_cpu_parallel(ex, (rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK, forward_task, &j);
    return PP_OK;
}

static void backward_task(void *arg, int64_t task, int worker)
{
    const emb_job *j = arg;
    double *acc = j->acc + (size_t)worker * j->c;
    const int64_t i0 = task * IDS_PER_TASK;
    const int64_t i1 = i0 + IDS_PER_TASK < j->n_seen ? i0 + IDS_PER_TASK : j->n_seen;
    for (int64_t i = i0; i < i1; i++) {
        const int32_t id = j->seen[i];
        for (int q = 0; q < j->c; q++) acc[q] = 0.0;
        for (int64_t k = j->start[id]; k < j->start[id + 1]; k++) {
            const float *g = j->dy + j->order[k] * j->c;
            for (int q = 0; q < j->c; q++) acc[q] += (double)g[q];
        }
        float *row = j->dtable + (int64_t)id * j->c;
        for (int q = 0; q < j->c; q++) row[q] += (float)acc[q];
    }
}

pp_status pp_cpu_embedding_backward(pp_exec *ex, int64_t rows, int vocab, int c,
                                    const int32_t *ids, const float *dy, float *dtable,
                                    pp_error *err)
{
    const int threads = pp_cpu_threads(ex);
    const size_t bytes = ((size_t)vocab + 1) * sizeof(int64_t) + (size_t)rows * sizeof(int64_t) +
                         (size_t)(rows < vocab ? rows : vocab) * sizeof(int32_t) + 8 +
                         (size_t)threads * c * sizeof(double);
    void *ws;
    PP_TRY(pp_exec_workspace(ex, bytes, &ws, err));
    double *acc = ws;
    int64_t *start = (int64_t *)(acc + (size_t)threads * c);
    int64_t *order = start + vocab + 1;
    int32_t *seen = (int32_t *)(order + rows);
    /* counting sort: start[id] = rows of smaller ids, then the positions in order */
    memset(start, 0, ((size_t)vocab + 1) * sizeof *start);
    for (int64_t r = 0; r < rows; r++) start[ids[r] + 1]++;
    int64_t n_seen = 0;
    for (int v = 0; v < vocab; v++) {
        if (start[v + 1]) seen[n_seen++] = v;
        start[v + 1] += start[v];
    }
    for (int64_t r = 0; r < rows; r++) order[start[ids[r]]++] = r;
    for (int v = vocab; v > 0; v--) start[v] = start[v - 1]; /* back to first positions */
    start[0] = 0;
    emb_job j = {.rows = rows, .c = c, .dy = dy, .dtable = dtable, .start = start,
                 .order = order, .seen = seen, .n_seen = n_seen, .acc = acc};
    pp_cpu_parallel(ex, (n_seen + IDS_PER_TASK - 1) / IDS_PER_TASK, backward_task, &j);
    return PP_OK;
}

static void position_forward_task(void *arg, int64_t task, int worker)
{
    const emb_job *j = arg;
    (void)worker;
    const int64_t r0 = task * ROWS_PER_TASK;
    const int64_t r1 = r0 + ROWS_PER_TASK < j->rows ? r0 + ROWS_PER_TASK : j->rows;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->c, *p = j->table + (r % j->t) * j->c;
        float *y = j->y + r * j->c;
        for (int q = 0; q < j->c; q++) y[q] = x[q] + p[q];
    }
}

pp_status pp_cpu_position_forward(pp_exec *ex, int64_t n, int t, int c, const float *x,
                                  const float *table, float *y, pp_error *err)
{
    emb_job j = {.rows = n * t, .c = c, .t = t, .x = x, .table = table, .y = y};
    pp_cpu_parallel(ex, (j.rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK, position_forward_task, &j);
    return PP_OK;
}

static void position_backward_task(void *arg, int64_t task, int worker)
{
    const emb_job *j = arg;
    double *acc = j->acc + (size_t)worker * j->c;
    const int p0 = (int)task * POSITIONS_PER_TASK;
    const int p1 = p0 + POSITIONS_PER_TASK < j->t ? p0 + POSITIONS_PER_TASK : j->t;
    for (int p = p0; p < p1; p++) {
        for (int q = 0; q < j->c; q++) acc[q] = 0.0;
        for (int64_t s = 0; s < j->n; s++) {
            const float *g = j->dy + (s * j->t + p) * j->c;
            for (int q = 0; q < j->c; q++) acc[q] += (double)g[q];
        }
        float *row = j->dtable + (int64_t)p * j->c;
        for (int q = 0; q < j->c; q++) row[q] += (float)acc[q];
    }
}

pp_status pp_cpu_position_backward(pp_exec *ex, int64_t n, int t, int c, const float *dy,
                                   float *dtable, pp_error *err)
{
    void *ws;
    PP_TRY(pp_exec_workspace(ex, (size_t)pp_cpu_threads(ex) * c * sizeof(double), &ws, err));
    emb_job j = {.n = n, .c = c, .t = t, .dy = dy, .dtable = dtable, .acc = ws};
    pp_cpu_parallel(ex, (t + POSITIONS_PER_TASK - 1) / POSITIONS_PER_TASK,
                    position_backward_task, &j);
    return PP_OK;
}
