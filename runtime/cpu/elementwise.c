/*
 * elementwise.c - CPU ReLU, residual add and accumulate (f32, flat arrays).
 * Plain loops the compiler vectorises; in-place use (y == x, dx == dy,
 * y == a or b) is allowed because each element is read before it is written.
 */
#include "cpu_kernels.h"

pp_status pp_cpu_relu_forward(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err)
{
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return PP_OK;
}

pp_status pp_cpu_relu_backward(pp_exec *ex, int64_t n, const float *y, const float *dy, float *dx,
                               pp_error *err)
{
    for (int64_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    return PP_OK;
}

pp_status pp_cpu_add(pp_exec *ex, int64_t n, const float *a, const float *b, float *y,
                     pp_error *err)
{
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    return PP_OK;
}

pp_status pp_cpu_accumulate(pp_exec *ex, int64_t n, const float *x, float *y, pp_error *err)
{
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
    return PP_OK;
}
