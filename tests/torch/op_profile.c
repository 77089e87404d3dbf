/*
 * op_profile.c - per-op timing of the CPU kernels inside a real training
 * step, for the bench_step_ops benchmark (bench_step.c linked with this file
 * and -Wl,--wrap=pp_cpu_<op> for every kernel below).
 *
 * Each wrapper times its kernel (CLOCK_MONOTONIC around the real call) and
 * adds the time to an entry keyed by op and shape. bench_step calls
 * pp_bench_profile_reset after its warm-up steps and pp_bench_profile_print
 * at the end, which prints per step: the time of each op kind with its share
 * of the step, then every convolution shape with the time and GFLOP/s of its
 * forward, backward-data and backward-filter (2*N*K*P*Q*C*R*S flops each),
 * then the batch-norm shapes with ns per element. Kernels run on stream
 * worker threads and the optimizer's thread: the table is guarded by a mutex
 * (held only to add, never during a kernel).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cpu/kernels.h"

void pp_bench_profile_reset(void);
void pp_bench_profile_print(int steps, double mean_step_ms);

enum {
    OP_CONV_FWD, OP_CONV_BWD_DATA, OP_CONV_BWD_FILTER, OP_BN_FWD, OP_BN_BWD, OP_RELU_FWD,
    OP_RELU_BWD, OP_ADD, OP_ACCUMULATE, OP_MAXPOOL_FWD, OP_MAXPOOL_BWD, OP_AVGPOOL_FWD,
    OP_AVGPOOL_BWD, OP_LINEAR_FWD, OP_LINEAR_BWD, OP_XENT, OP_SGD, OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
    "conv forward", "conv backward-data", "conv backward-filter", "bn forward (train)",
    "bn backward", "relu forward", "relu backward", "add (residual)", "accumulate",
    "maxpool forward", "maxpool backward", "avgpool forward", "avgpool backward",
    "linear forward", "linear backward", "softmax xent", "sgd update",
};

#define MAX_ENTRIES 1024

typedef struct entry {
    int op;
    char shape[96];
    double ms;
    long calls;
    double flops;     /* per call (convolution, linear) */
    double elements;  /* per call (batch norm, elementwise) */
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry table[MAX_ENTRIES];
static int n_entries;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void record(int op, const char *shape, double ms, double flops, double elements)
{
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < n_entries && !(table[i].op == op && strcmp(table[i].shape, shape) == 0)) i++;
    if (i == n_entries && n_entries < MAX_ENTRIES) {
        memset(&table[i], 0, sizeof table[i]);
        table[i].op = op;
        snprintf(table[i].shape, sizeof table[i].shape, "%s", shape);
        table[i].flops = flops;
        table[i].elements = elements;
        n_entries++;
    }
    if (i < n_entries) {
        table[i].ms += ms;
        table[i].calls++;
    }
    pthread_mutex_unlock(&lock);
}

void pp_bench_profile_reset(void)
{
    pthread_mutex_lock(&lock);
    n_entries = 0;
    pthread_mutex_unlock(&lock);
}

static void conv_shape(const pp_conv2d_desc *d, char *buf, size_t n)
{
    snprintf(buf, n, "n%d %4d>%-4d %dx%d/%d %3dx%-3d -> %3dx%-3d", d->n, d->c, d->k, d->r, d->s,
             d->stride_h, d->h, d->w, d->p, d->q);
}

static double conv_flops(const pp_conv2d_desc *d)
{
    return 2.0 * d->n * d->k * d->p * d->q * (double)d->c * d->r * d->s;
}

#define TIMED(op, shape, flops, elems, call)                                          \
    do {                                                                            \
        double t0_ = now_ms();                                                      \
        pp_status s_ = (call);                                                      \
        record((op), (shape), now_ms() - t0_, (flops), (elems));                    \
        return s_;                                                                  \
    } while (0)

/* The real kernels (resolved by the linker's --wrap) and their wrappers. */
#define DECLARE(ret, name, ...)                                                     \
    ret __real_##name(__VA_ARGS__);                                                 \
    ret __wrap_##name(__VA_ARGS__);

DECLARE(pp_status, pp_cpu_conv2d_forward, pp_exec *ex, const pp_conv2d_desc *d, const float *x,
        const float *w, float *y, pp_error *err)
DECLARE(pp_status, pp_cpu_conv2d_backward_data, pp_exec *ex, const pp_conv2d_desc *d,
        const float *dy, const float *w, float *dx, pp_error *err)
DECLARE(pp_status, pp_cpu_conv2d_backward_filter, pp_exec *ex, const pp_conv2d_desc *d,
        const float *x, const float *dy, float *dw, pp_error *err)
DECLARE(pp_status, pp_cpu_batchnorm_forward_train, pp_exec *ex, const pp_bn_desc *d,
        const float *x, const float *gamma, const float *beta, float *running_mean,
        float *running_var, float *y, float *save_mean, float *save_invstd, pp_error *err)
DECLARE(pp_status, pp_cpu_batchnorm_backward, pp_exec *ex, const pp_bn_desc *d, const float *x,
        const float *dy, const float *gamma, const float *save_mean, const float *save_invstd,
        float *dx, float *dgamma, float *dbeta, pp_error *err)
DECLARE(pp_status, pp_cpu_relu_forward, pp_exec *ex, int64_t n, const float *x, float *y,
        pp_error *err)
DECLARE(pp_status, pp_cpu_relu_backward, pp_exec *ex, int64_t n, const float *y, const float *dy,
        float *dx, pp_error *err)
DECLARE(pp_status, pp_cpu_add, pp_exec *ex, int64_t n, const float *a, const float *b, float *y,
        pp_error *err)
DECLARE(pp_status, pp_cpu_accumulate, pp_exec *ex, int64_t n, const float *x, float *y,
        pp_error *err)
DECLARE(pp_status, pp_cpu_maxpool_forward, pp_exec *ex, const pp_pool_desc *d, const float *x,
        float *y, int32_t *idx, pp_error *err)
DECLARE(pp_status, pp_cpu_maxpool_backward, pp_exec *ex, const pp_pool_desc *d, const float *x,
        const float *y, const float *dy, const int32_t *idx, float *dx, pp_error *err)
DECLARE(pp_status, pp_cpu_avgpool_forward, pp_exec *ex, int64_t planes, int64_t hw,
        const float *x, float *y, pp_error *err)
DECLARE(pp_status, pp_cpu_avgpool_backward, pp_exec *ex, int64_t planes, int64_t hw,
        const float *dy, float *dx, pp_error *err)
DECLARE(pp_status, pp_cpu_linear_forward, pp_exec *ex, int n, int in, int out, const float *x,
        const float *w, const float *b, float *y, pp_error *err)
DECLARE(pp_status, pp_cpu_linear_backward, pp_exec *ex, int n, int in, int out, const float *x,
        const float *w, const float *dy, float *dx, float *dw, float *db, pp_error *err)
DECLARE(pp_status, pp_cpu_softmax_xent, pp_exec *ex, int n, int classes, const float *logits,
        const int32_t *labels, float divisor, float *loss, int32_t *correct, float *dlogits,
        pp_error *err)
DECLARE(pp_status, pp_cpu_sgd_update, pp_exec *ex, const pp_sgd_desc *d, int64_t n, float *param,
        const float *grad, float *momentum_buf, pp_error *err)

pp_status __wrap_pp_cpu_conv2d_forward(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                       const float *w, float *y, pp_error *err)
{
    char sh[96];
    conv_shape(d, sh, sizeof sh);
    TIMED(OP_CONV_FWD, sh, conv_flops(d), 0, __real_pp_cpu_conv2d_forward(ex, d, x, w, y, err));
}

pp_status __wrap_pp_cpu_conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d,
                                             const float *dy, const float *w, float *dx,
                                             pp_error *err)
{
    char sh[96];
    conv_shape(d, sh, sizeof sh);
    TIMED(OP_CONV_BWD_DATA, sh, conv_flops(d), 0,
          __real_pp_cpu_conv2d_backward_data(ex, d, dy, w, dx, err));
}

pp_status __wrap_pp_cpu_conv2d_backward_filter(pp_exec *ex, const pp_conv2d_desc *d,
                                               const float *x, const float *dy, float *dw,
                                               pp_error *err)
{
    char sh[96];
    conv_shape(d, sh, sizeof sh);
    TIMED(OP_CONV_BWD_FILTER, sh, conv_flops(d), 0,
          __real_pp_cpu_conv2d_backward_filter(ex, d, x, dy, dw, err));
}

pp_status __wrap_pp_cpu_batchnorm_forward_train(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                                const float *gamma, const float *beta,
                                                float *running_mean, float *running_var,
                                                float *y, float *save_mean, float *save_invstd,
                                                pp_error *err)
{
    char sh[96];
    snprintf(sh, sizeof sh, "n%d c%-4d %3dx%-3d", d->n, d->c, d->h, d->w);
    TIMED(OP_BN_FWD, sh, 0, (double)d->n * d->c * d->h * d->w,
          __real_pp_cpu_batchnorm_forward_train(ex, d, x, gamma, beta, running_mean, running_var,
                                                y, save_mean, save_invstd, err));
}

pp_status __wrap_pp_cpu_batchnorm_backward(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                           const float *dy, const float *gamma,
                                           const float *save_mean, const float *save_invstd,
                                           float *dx, float *dgamma, float *dbeta, pp_error *err)
{
    char sh[96];
    snprintf(sh, sizeof sh, "n%d c%-4d %3dx%-3d", d->n, d->c, d->h, d->w);
    TIMED(OP_BN_BWD, sh, 0, (double)d->n * d->c * d->h * d->w,
          __real_pp_cpu_batchnorm_backward(ex, d, x, dy, gamma, save_mean, save_invstd, dx,
                                           dgamma, dbeta, err));
}

pp_status __wrap_pp_cpu_relu_forward(pp_exec *ex, int64_t n, const float *x, float *y,
                                     pp_error *err)
{
    TIMED(OP_RELU_FWD, "", 0, (double)n, __real_pp_cpu_relu_forward(ex, n, x, y, err));
}

pp_status __wrap_pp_cpu_relu_backward(pp_exec *ex, int64_t n, const float *y, const float *dy,
                                      float *dx, pp_error *err)
{
    TIMED(OP_RELU_BWD, "", 0, (double)n, __real_pp_cpu_relu_backward(ex, n, y, dy, dx, err));
}

pp_status __wrap_pp_cpu_add(pp_exec *ex, int64_t n, const float *a, const float *b, float *y,
                            pp_error *err)
{
    TIMED(OP_ADD, "", 0, (double)n, __real_pp_cpu_add(ex, n, a, b, y, err));
}

pp_status __wrap_pp_cpu_accumulate(pp_exec *ex, int64_t n, const float *x, float *y,
                                   pp_error *err)
{
    TIMED(OP_ACCUMULATE, "", 0, (double)n, __real_pp_cpu_accumulate(ex, n, x, y, err));
}

pp_status __wrap_pp_cpu_maxpool_forward(pp_exec *ex, const pp_pool_desc *d, const float *x,
                                        float *y, int32_t *idx, pp_error *err)
{
    TIMED(OP_MAXPOOL_FWD, "", 0, 0, __real_pp_cpu_maxpool_forward(ex, d, x, y, idx, err));
}

pp_status __wrap_pp_cpu_maxpool_backward(pp_exec *ex, const pp_pool_desc *d, const float *x,
                                         const float *y, const float *dy, const int32_t *idx,
                                         float *dx, pp_error *err)
{
    TIMED(OP_MAXPOOL_BWD, "", 0, 0,
          __real_pp_cpu_maxpool_backward(ex, d, x, y, dy, idx, dx, err));
}

pp_status __wrap_pp_cpu_avgpool_forward(pp_exec *ex, int64_t planes, int64_t hw, const float *x,
                                        float *y, pp_error *err)
{
    TIMED(OP_AVGPOOL_FWD, "", 0, 0, __real_pp_cpu_avgpool_forward(ex, planes, hw, x, y, err));
}

pp_status __wrap_pp_cpu_avgpool_backward(pp_exec *ex, int64_t planes, int64_t hw,
                                         const float *dy, float *dx, pp_error *err)
{
    TIMED(OP_AVGPOOL_BWD, "", 0, 0, __real_pp_cpu_avgpool_backward(ex, planes, hw, dy, dx, err));
}

pp_status __wrap_pp_cpu_linear_forward(pp_exec *ex, int n, int in, int out, const float *x,
                                       const float *w, const float *b, float *y, pp_error *err)
{
    TIMED(OP_LINEAR_FWD, "", 2.0 * n * in * out, 0,
          __real_pp_cpu_linear_forward(ex, n, in, out, x, w, b, y, err));
}

pp_status __wrap_pp_cpu_linear_backward(pp_exec *ex, int n, int in, int out, const float *x,
                                        const float *w, const float *dy, float *dx, float *dw,
                                        float *db, pp_error *err)
{
    TIMED(OP_LINEAR_BWD, "", 4.0 * n * in * out, 0,
          __real_pp_cpu_linear_backward(ex, n, in, out, x, w, dy, dx, dw, db, err));
}

pp_status __wrap_pp_cpu_softmax_xent(pp_exec *ex, int n, int classes, const float *logits,
                                     const int32_t *labels, float divisor, float *loss,
                                     int32_t *correct, float *dlogits, pp_error *err)
{
    TIMED(OP_XENT, "", 0, 0,
          __real_pp_cpu_softmax_xent(ex, n, classes, logits, labels, divisor, loss, correct,
                                     dlogits, err));
}

pp_status __wrap_pp_cpu_sgd_update(pp_exec *ex, const pp_sgd_desc *d, int64_t n, float *param,
                                   const float *grad, float *momentum_buf, pp_error *err)
{
    TIMED(OP_SGD, "", 0, (double)n,
          __real_pp_cpu_sgd_update(ex, d, n, param, grad, momentum_buf, err));
}

static int by_op_then_time(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->op != y->op) return x->op - y->op;
    return (x->ms < y->ms) - (x->ms > y->ms);
}

void pp_bench_profile_print(int steps, double mean_step_ms)
{
    pthread_mutex_lock(&lock);
    qsort(table, (size_t)n_entries, sizeof table[0], by_op_then_time);
    double op_ms[OP_COUNT] = {0}, op_flops[OP_COUNT] = {0}, total = 0;
    for (int i = 0; i < n_entries; i++) {
        op_ms[table[i].op] += table[i].ms / steps;
        op_flops[table[i].op] += table[i].flops * table[i].calls / steps;
        total += table[i].ms / steps;
    }
    printf("\nper step (means over %d timed steps; mean step %.1f ms):\n", steps, mean_step_ms);
    printf("  %-22s %9s %6s %9s\n", "op", "ms", "share", "GFLOP/s");
    for (int o = 0; o < OP_COUNT; o++) {
        if (op_ms[o] <= 0) continue;
        if (op_flops[o] > 0)
            printf("  %-22s %9.2f %5.1f%% %9.1f\n", op_names[o], op_ms[o], 100 * op_ms[o] / mean_step_ms,
                   op_flops[o] / op_ms[o] * 1e-6);
        else
            printf("  %-22s %9.2f %5.1f%%\n", op_names[o], op_ms[o], 100 * op_ms[o] / mean_step_ms);
    }
    printf("  %-22s %9.2f %5.1f%%\n", "all kernels", total, 100 * total / mean_step_ms);
    printf("  %-22s %9.2f %5.1f%%\n", "outside kernels", mean_step_ms - total,
           100 * (mean_step_ms - total) / mean_step_ms);

    printf("\nconvolutions per step: ms (GFLOP/s); x = calls per step\n");
    printf("  %-40s %3s %9s %16s %16s %16s\n", "shape", "x", "MFLOP", "forward", "backward-data",
           "backward-filter");
    /* one line per shape: look the shape up in the three conv ops */
    for (int i = 0; i < n_entries; i++) {
        if (table[i].op != OP_CONV_FWD) continue;
        const entry *e[3] = {&table[i], NULL, NULL};
        for (int j = 0; j < n_entries; j++) {
            if (table[j].op == OP_CONV_BWD_DATA && !strcmp(table[j].shape, table[i].shape))
                e[1] = &table[j];
            if (table[j].op == OP_CONV_BWD_FILTER && !strcmp(table[j].shape, table[i].shape))
                e[2] = &table[j];
        }
        printf("  %-40s %3ld %9.1f", table[i].shape, table[i].calls / steps,
               table[i].flops * 1e-6);
        for (int k = 0; k < 3; k++) {
            if (!e[k]) {
                printf(" %16s", "-");
                continue;
            }
            double ms = e[k]->ms / steps;
            printf(" %7.2f (%5.1f) ", ms, e[k]->flops * e[k]->calls / steps / ms * 1e-6);
        }
        printf("\n");
    }
    printf("\nbatch norm per step: ms (ns per element)\n");
    for (int i = 0; i < n_entries; i++) {
        if (table[i].op != OP_BN_FWD) continue;
        const entry *b = NULL;
        for (int j = 0; j < n_entries; j++)
            if (table[j].op == OP_BN_BWD && !strcmp(table[j].shape, table[i].shape)) b = &table[j];
        double fms = table[i].ms / steps;
        printf("  %-22s x%-3ld forward %6.2f (%5.2f)", table[i].shape, table[i].calls / steps, fms,
               fms * 1e6 / (table[i].elements * table[i].calls / steps));
        if (b)
            printf("  backward %6.2f (%5.2f)", b->ms / steps,
                   b->ms / steps * 1e6 / (b->elements * b->calls / steps));
        printf("\n");
    }
    pthread_mutex_unlock(&lock);
}
