/*
 * bench_conv.c - CPU convolution throughput on ResNet-50's distinct conv
 * shapes (224x224 input), against cblas_sgemm on the matching GEMM.
 *
 * Usage: bench_conv [BATCH [REPS]]   (defaults 16 and 3)
 *
 * For each shape it prints the GFLOP/s of forward, backward-data and
 * backward-filter (best of REPS timed calls after one warm-up call; the ops take turns), then the
 * GFLOP/s of one cblas_sgemm over the whole batch for each op's im2col
 * formulation, with Kout outputs, NPQ = BATCH * P * Q, CRS = C * R * S:
 *   forward          Y (Kout, NPQ)  = W (Kout, CRS) x col (CRS, NPQ)
 *   backward-data    dcol (CRS, NPQ) = W^T (CRS, Kout) x dY (Kout, NPQ)
 *   backward-filter  dW (Kout, CRS) += dY (Kout, NPQ) x col^T (NPQ, CRS)
 * and each op's rate as a fraction of its GEMM's. The reference GEMMs run on
 * OpenBLAS with one thread per online CPU (the convolutions use the CPU
 * backend's pool of the same size, which keeps OpenBLAS itself at one
 * thread). Every one counts
 * 2 * Kout * NPQ * CRS flops. The last line sums the time of all 53
 * convolutions of one ResNet-50 step. A benchmark, not a test: it asserts
 * nothing.
 */
#include <cblas.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"

typedef struct shape {
    const char *name;
    int c, hw, k, kernel, stride, count; /* count: how many convs of ResNet-50 have it */
} shape;

static const shape shapes[] = {
    {"conv1 7x7/2", 3, 224, 64, 7, 2, 1},
    {"l1 1x1 64>64", 64, 56, 64, 1, 1, 1},
    {"l1 3x3 64", 64, 56, 64, 3, 1, 3},
    {"l1 1x1 64>256 (+ds)", 64, 56, 256, 1, 1, 4},
    {"l1 1x1 256>64", 256, 56, 64, 1, 1, 2},
    {"l2 1x1 256>128", 256, 56, 128, 1, 1, 1},
    {"l2 3x3/2 128", 128, 56, 128, 3, 2, 1},
    {"l2 ds 1x1/2 256>512", 256, 56, 512, 1, 2, 1},
    {"l2 1x1 128>512", 128, 28, 512, 1, 1, 4},
    {"l2 1x1 512>128", 512, 28, 128, 1, 1, 3},
    {"l2 3x3 128", 128, 28, 128, 3, 1, 3},
    {"l3 1x1 512>256", 512, 28, 256, 1, 1, 1},
    {"l3 3x3/2 256", 256, 28, 256, 3, 2, 1},
    {"l3 ds 1x1/2 512>1024", 512, 28, 1024, 1, 2, 1},
    {"l3 1x1 256>1024", 256, 14, 1024, 1, 1, 6},
    {"l3 1x1 1024>256", 1024, 14, 256, 1, 1, 5},
    {"l3 3x3 256", 256, 14, 256, 3, 1, 5},
    {"l4 1x1 1024>512", 1024, 14, 512, 1, 1, 1},
    {"l4 3x3/2 512", 512, 14, 512, 3, 2, 1},
    {"l4 ds 1x1/2 1024>2048", 1024, 14, 2048, 1, 2, 1},
    {"l4 1x1 512>2048", 512, 7, 2048, 1, 1, 3},
    {"l4 1x1 2048>512", 2048, 7, 512, 1, 1, 2},
    {"l4 3x3 512", 512, 7, 512, 3, 1, 2},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
}

enum { OP_FWD, OP_BWD_DATA, OP_BWD_FILTER, OP_GEMM_FWD, OP_GEMM_DATA, OP_GEMM_FILTER, OP_COUNT };

typedef struct bench_ctx {
    pp_exec *ex;
    const pp_conv2d_desc *d;
    pp_tensor *x, *w, *y;
    float *ga, *gb, *gc; /* GEMM operands, each big enough for all three GEMMs */
    int kout, npq, crs;
    int gemm_threads; /* OpenBLAS threads for the reference GEMMs */
} bench_ctx;

static int run_op(bench_ctx *b, int op, pp_error *err)
{
    switch (op) {
    case OP_FWD: return pp_conv2d_forward(b->ex, b->d, b->x, b->w, b->y, err) != PP_OK;
    case OP_BWD_DATA: return pp_conv2d_backward_data(b->ex, b->d, b->y, b->w, b->x, err) != PP_OK;
    case OP_BWD_FILTER:
        return pp_conv2d_backward_filter(b->ex, b->d, b->x, b->y, b->w, err) != PP_OK;
    default: break;
    }
    /* the reference: OpenBLAS's own threading over every CPU */
    openblas_set_num_threads(b->gemm_threads);
    switch (op) {
    case OP_GEMM_FWD:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b->kout, b->npq, b->crs, 1.0f,
                    b->ga, b->crs, b->gb, b->npq, 0.0f, b->gc, b->npq);
        return 0;
    case OP_GEMM_DATA:
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, b->crs, b->npq, b->kout, 1.0f,
                    b->ga, b->crs, b->gc, b->npq, 0.0f, b->gb, b->npq);
        return 0;
    default:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b->kout, b->crs, b->npq, 1.0f,
                    b->gc, b->npq, b->gb, b->npq, 1.0f, b->ga, b->crs);
        break;
    }
    openblas_set_num_threads(1);
    return 0;
}

/* Fills t[op] with the best time of reps calls of every op, after one
 * warm-up call each. The ops take turns within each repetition, so load from
 * other processes affects the convolutions and their GEMMs alike; each round
 * starts after a pause that lets OpenBLAS's spinning threads go idle. */
static int time_ops(bench_ctx *b, int reps, double *t, pp_error *err)
{
    for (int op = 0; op < OP_COUNT; op++) {
        t[op] = 1e30;
        if (run_op(b, op, err)) return 1;
    }
    for (int r = 0; r < reps; r++)
        for (int op = 0; op < OP_COUNT; op++) {
            /* OpenBLAS's threads spin for a while after a threaded GEMM: let
             * them go idle before timing a convolution on the pool */
            if (op == 0) usleep(200000);
            double t0 = now_s();
            if (run_op(b, op, err)) return 1;
            double dt = now_s() - t0;
            if (dt < t[op]) t[op] = dt;
        }
    return 0;
}

int main(int argc, char **argv)
{
    int batch = argc > 1 ? atoi(argv[1]) : 16;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    if (batch <= 0 || reps <= 0) {
        fprintf(stderr, "usage: %s [BATCH [REPS]]\n", argv[0]);
        return 2;
    }
    pp_error err;
    pp_registry *reg;
    pp_device_ctx *dev;
    pp_exec ex;
    if (pp_registry_new(&reg, &err) != PP_OK ||
        pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &dev, &err) != PP_OK ||
        pp_exec_init(&ex, dev, NULL, &err) != PP_OK) {
        fprintf(stderr, "setup failed: %s\n", err.msg);
        return 1;
    }
    int gemm_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (gemm_threads < 1) gemm_threads = 1;
    printf("conv2d on cpu, batch %d, best of %d; reference sgemm on %d OpenBLAS threads\n", batch,
           reps, gemm_threads);
    printf("%-21s %5s %6s %5s | %5s %5s %5s | %5s %5s %5s | %4s %4s %4s\n", "shape", "Kout",
           "NPQ", "CRS", "fwd", "bwd-d", "bwd-f", "fwd", "bwd-d", "bwd-f", "fwd", "bwd-d",
           "bwd-f");
    printf("%-21s %5s %6s %5s | %17s | %17s | %14s\n", "", "", "", "", "conv GFLOP/s",
           "sgemm GFLOP/s", "conv / sgemm");
    double total[OP_COUNT] = {0};
    int status = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0] && !status; si++) {
        const shape *sh = &shapes[si];
        pp_conv2d_desc d;
        int pad = sh->kernel / 2;
        if (pp_conv2d_desc_init(&d, batch, sh->c, sh->hw, sh->hw, sh->k, sh->kernel, sh->stride,
                                pad, &err) != PP_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        pp_tensor x, w, y;
        int64_t xs[4] = {batch, sh->c, sh->hw, sh->hw}, ws[4] = {sh->k, sh->c, sh->kernel,
                                                                  sh->kernel};
        int64_t ys[4] = {batch, sh->k, d.p, d.q};
        bench_ctx b = {&ex, &d, &x, &w, &y, NULL, NULL, NULL, sh->k, batch * d.p * d.q,
                       sh->c * sh->kernel * sh->kernel, gemm_threads};
        size_t na = (size_t)b.kout * b.crs, nb = (size_t)b.crs * b.npq,
               nc = (size_t)b.kout * b.npq;
        if (pp_tensor_alloc(&x, dev, PP_F32, 4, xs, &err) != PP_OK ||
            pp_tensor_alloc(&w, dev, PP_F32, 4, ws, &err) != PP_OK ||
            pp_tensor_alloc(&y, dev, PP_F32, 4, ys, &err) != PP_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        fill(x.data, (size_t)pp_tensor_numel(&x), 1);
        fill(w.data, (size_t)pp_tensor_numel(&w), 2);
        fill(y.data, (size_t)pp_tensor_numel(&y), 3);
        b.ga = malloc(sizeof(float) * na);
        b.gb = malloc(sizeof(float) * nb);
        b.gc = malloc(sizeof(float) * nc);
        if (!b.ga || !b.gb || !b.gc) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        fill(b.ga, na, 4);
        fill(b.gb, nb, 5);
        fill(b.gc, nc, 6);

        double flops = 2.0 * b.kout * (double)b.npq * b.crs, t[OP_COUNT];
        if (time_ops(&b, reps, t, &err)) {
            fprintf(stderr, "%s: %s\n", sh->name, err.msg);
            status = 1;
        }
        for (int op = 0; op < OP_COUNT; op++) total[op] += t[op] * sh->count;
        if (!status)
            printf("%-21s %5d %6d %5d | %5.0f %5.0f %5.0f | %5.0f %5.0f %5.0f | %4.2f %4.2f "
                   "%4.2f\n",
                   sh->name, b.kout, b.npq, b.crs, flops / t[0] * 1e-9, flops / t[1] * 1e-9,
                   flops / t[2] * 1e-9, flops / t[3] * 1e-9, flops / t[4] * 1e-9,
                   flops / t[5] * 1e-9, t[3] / t[0], t[4] / t[1], t[5] / t[2]);
        free(b.ga);
        free(b.gb);
        free(b.gc);
        pp_tensor_free(&x);
        pp_tensor_free(&w);
        pp_tensor_free(&y);
    }
    if (!status)
        printf("ResNet-50, all 53 convs: fwd %.3f s, bwd-data %.3f s, bwd-filter %.3f s "
               "(sgemm alone: %.3f, %.3f, %.3f s)\n",
               total[OP_FWD], total[OP_BWD_DATA], total[OP_BWD_FILTER], total[OP_GEMM_FWD],
               total[OP_GEMM_DATA], total[OP_GEMM_FILTER]);
    pp_exec_destroy(&ex);
    pp_registry_free(reg);
    return status;
}
