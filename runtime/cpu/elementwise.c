/*
 * elementwise.c - CPU ReLU, sigmoid, residual add (with or without its ReLU)
 * and accumulate (f32, flat arrays); conversions between f32 and bf16;
 * batched transposes (layout changes).
 * Plain loops the compiler vectorises, over fixed ranges of ELEMS_PER_TASK
 * elements run on the device's pool (each element is computed alone, so the
 * split cannot change a result). In-place use (y == x, dx == dy, y == a or b)
 * is allowed because each element is read before it is written.
 */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "workers.h"

#define ELEMS_PER_TASK ((int64_t)1 << 16)

typedef enum ew_kind {
    EW_RELU,
    EW_RELU_BACKWARD,
    EW_SIGMOID,
    EW_SIGMOID_BACKWARD,
    EW_ADD,
    EW_ACCUMULATE,
    EW_ACCUMULATE_BF16,
    EW_ADD_RELU,
} ew_kind;

typedef struct ew_job {
    ew_kind kind;
    int64_t n;
    const float *a, *b; /* inputs: x; y, dy; x; y, dy; a, b; x; x; a, b */
    float *y;           /* output */
} ew_job;

static void ew_task(void *arg, int64_t t, int worker)
{
    const ew_job *j = arg;
    (void)worker;
    const int64_t i0 = t * ELEMS_PER_TASK;
    const int64_t n = j->n - i0 < ELEMS_PER_TASK ? j->n - i0 : ELEMS_PER_TASK;
    const float *a = j->a + i0, *b = j->b ? j->b + i0 : NULL;
    float *y = j->y + i0;
    switch (j->kind) {
    case EW_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = a[i] > 0.0f ? a[i] : 0.0f;
        break;
    case EW_RELU_BACKWARD:
        for (int64_t i = 0; i < n; i++) y[i] = a[i] > 0.0f ? b[i] : 0.0f;
        break;
    case EW_SIGMOID:
        for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-a[i]));
        break;
    case EW_SIGMOID_BACKWARD: /* dy * (1 - y) * y, PyTorch's order */
        for (int64_t i = 0; i < n; i++) y[i] = b[i] * (1.0f - a[i]) * a[i];
        break;
    case EW_ADD:
        for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
        break;
    case EW_ACCUMULATE:
        for (int64_t i = 0; i < n; i++) y[i] += a[i];
        break;
    case EW_ACCUMULATE_BF16: /* the bits of bf16_from_f32, f32_from_bf16, accumulate */
        for (int64_t i = 0; i < n; i++) y[i] += pp_f32_from_bf16(pp_bf16_from_f32(a[i]));
        break;
    case EW_ADD_RELU: /* the float sum, then the ReLU of EW_RELU */
        for (int64_t i = 0; i < n; i++) {
            const float s = a[i] + b[i];
            y[i] = s > 0.0f ? s : 0.0f;
        }
        break;
    }
}

static void ew_run(pp_exec *ex, ew_job *j)
{
    pp_cpu_parallel(ex, (j->n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, ew_task, j);
}

pp_status pp_cpu_relu_forward(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err)
{
    ew_job j = {.kind = EW_RELU, .n = n, .a = x, .y = y};
    ew_run(ex, &j);
    return PP_OK;
}

pp_status pp_cpu_relu_backward(pp_exec *ex, int64_t n, const float *y, const float *dy, float *dx,
                               pp_error *err)
{
    ew_job j = {.kind = EW_RELU_BACKWARD, .n = n, .a = y, .b = dy, .y = dx};
    ew_run(ex, &j);
    return PP_OK;
}

pp_status pp_cpu_sigmoid_forward(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err)
{
    ew_job j = {.kind = EW_SIGMOID, .n = n, .a = x, .y = y};
    ew_run(ex, &j);
    return PP_OK;
}

pp_status pp_cpu_sigmoid_backward(pp_exec *ex, int64_t n, const float *y, const float *dy,
                                  float *dx, pp_error *err)
{
    ew_job j = {.kind = EW_SIGMOID_BACKWARD, .n = n, .a = y, .b = dy, .y = dx};
    ew_run(ex, &j);
    return PP_OK;
}

pp_status pp_cpu_add(pp_exec *ex, int64_t n, const float *a, const float *b, float *y,
                     pp_error *err)
{
    ew_job j = {.kind = EW_ADD, .n = n, .a = a, .b = b, .y = y};
    ew_run(ex, &j);
    return PP_OK;
}

pp_status pp_cpu_accumulate(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err)
{
    ew_job j = {.kind = EW_ACCUMULATE, .n = n, .a = x, .y = y};
    ew_run(ex, &j);
    return PP_OK;
}

pp_status pp_cpu_accumulate_bf16(pp_exec *ex, int64_t n, const float *x, float *y,
                                 pp_error *err)
{
    ew_job j = {.kind = EW_ACCUMULATE_BF16, .n = n, .a = x, .y = y};
    ew_run(ex, &j);
    return PP_OK;
}

pp_status pp_cpu_add_relu(pp_exec *ex, int64_t n, const float *a, const float *b, float *y,
                          pp_error *err)
{
    ew_job j = {.kind = EW_ADD_RELU, .n = n, .a = a, .b = b, .y = y};
    ew_run(ex, &j);
    return PP_OK;
}

/* The conversions, over the same task ranges. */
typedef struct cast_job {
    int64_t n;
    const float *f;  /* bf16_from_f32: input */
    uint16_t *h;     /* bf16_from_f32: output */
    const uint16_t *hin;
    float *fout;
} cast_job;

static void cast_task(void *arg, int64_t t, int worker)
{
    const cast_job *j = arg;
    (void)worker;
    const int64_t i0 = t * ELEMS_PER_TASK;
    const int64_t n = j->n - i0 < ELEMS_PER_TASK ? j->n - i0 : ELEMS_PER_TASK;
    if (j->f)
        for (int64_t i = i0; i < i0 + n; i++) j->h[i] = pp_bf16_from_f32(j->f[i]);
    else
        for (int64_t i = i0; i < i0 + n; i++) j->fout[i] = pp_f32_from_bf16(j->hin[i]);
}

pp_status pp_cpu_bf16_from_f32(pp_exec *ex, int64_t n, const float *x, uint16_t *y, pp_error *err)
{
    (void)err;
    cast_job j = {.n = n, .f = x, .h = y};
    pp_cpu_parallel(ex, (n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, cast_task, &j);
    return PP_OK;
}

pp_status pp_cpu_f32_from_bf16(pp_exec *ex, int64_t n, const uint16_t *x, float *y, pp_error *err)
{
    (void)err;
    cast_job j = {.n = n, .hin = x, .fout = y};
    pp_cpu_parallel(ex, (n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK, cast_task, &j);
    return PP_OK;
}

/* Batched transpose for layout changes: one task per (matrix, tile row) of
 * TILE x TILE tiles, so reads and writes both stay within a few cache lines. */
enum { TILE = 32 };

typedef struct transpose_job {
    int64_t rows, cols, tile_rows;
    size_t elem;
    const char *x;
    char *y;
} transpose_job;

static void transpose_task(void *arg, int64_t t, int worker)
{
    const transpose_job *j = arg;
    (void)worker;
    const int64_t m = t / j->tile_rows, r0 = (t % j->tile_rows) * TILE;
    const int64_t r1 = r0 + TILE < j->rows ? r0 + TILE : j->rows;
    const size_t e = j->elem, plane = (size_t)(j->rows * j->cols) * e;
    const char *x = j->x + (size_t)m * plane;
    char *y = j->y + (size_t)m * plane;
    for (int64_t c0 = 0; c0 < j->cols; c0 += TILE) {
        const int64_t c1 = c0 + TILE < j->cols ? c0 + TILE : j->cols;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = c0; c < c1; c++)
                memcpy(y + (size_t)(c * j->rows + r) * e, x + (size_t)(r * j->cols + c) * e, e);
    }
}

pp_status pp_cpu_transpose(pp_exec *ex, int64_t n, int64_t rows, int64_t cols, size_t elem,
                           const void *x, void *y, pp_error *err)
{
    if (elem != 2 && elem != 4)
        return pp_error_set(err, PP_ERR_INVALID, "transpose: %zu-byte elements", elem);
    if (n <= 0 || rows <= 0 || cols <= 0) return PP_OK;
    transpose_job j = {.rows = rows, .cols = cols, .tile_rows = (rows + TILE - 1) / TILE,
                       .elem = elem, .x = x, .y = y};
    pp_cpu_parallel(ex, n * j.tile_rows, transpose_task, &j);
    return PP_OK;
}
