/*
 * classifier.cu - the fused classifier: softmax, cross-entropy and the
 * logits' gradient (ops.h: pp_softmax_xent), runtime/cpu/loss.c's
 * arithmetic, for a batch's classes and a language model's vocabulary
 * alike, in place where the caller asks (the token model's last stage
 * writes its logits over their gradient).
 *   rows   one block per row. Each thread walks its logits once keeping
 *          the running maximum (its first index), and the sum of
 *          exp(z - maximum) rescaled whenever the maximum grows (double);
 *          the block combines the threads' in a fixed tree. The label's
 *          logit is read before the __syncthreads that precedes the first
 *          write. Then each thread writes its elements' gradients,
 *          exp(z - max) / sum / divisor, less 1 / divisor at the label (the
 *          exponentials in f32, their scaling in double). A row reads its
 *          logits twice (the second time mostly from L2: a block's row of
 *          50257 logits is 201 KB) and writes them once.
 *   total  one block: the rows' losses and hits summed by thread in row
 *          order, then in a fixed tree; correct = -1 if a label was out of
 *          range (then read as the nearest class).
 */
#include "transformer.h"

#include <cmath>

#include "kernels.h"

namespace {

constexpr int ROW_THREADS = 512;
constexpr int TOTAL_THREADS = 256;

/* a thread's (or a group's) running maximum, its first index, and the sum
 * of exp(z - max) */
struct run_max {
    float m;
    int arg;
    double s;
};

/* a then b merged: b's elements come after a's in a fixed order; ties keep
 * the smaller index */
__device__ __forceinline__ run_max merge(run_max a, run_max b)
{
    if (b.arg < 0) return a;
    if (a.arg < 0) return b;
    run_max r;
    if (b.m > a.m || (b.m == a.m && b.arg < a.arg)) {
        r.m = b.m;
        r.arg = b.arg;
    } else {
        r.m = a.m;
        r.arg = a.arg;
    }
    r.s = a.s * (double)expf(a.m - r.m) + b.s * (double)expf(b.m - r.m);
    return r;
}

__global__ void __launch_bounds__(ROW_THREADS)
    rows_k(int classes, const float *logits, const int32_t *labels, float divisor,
           double *row_loss, int32_t *row_correct, float *dlogits)
{
    __shared__ float s_m[ROW_THREADS];
    __shared__ int s_arg[ROW_THREADS];
    __shared__ double s_s[ROW_THREADS];
    __shared__ float s_label;
    const int tid = threadIdx.x;
    const int64_t row = blockIdx.x;
    const float *z = logits + row * classes;
    float *g = dlogits + row * classes;
    int label = labels[row];
    const bool bad = label < 0 || label >= classes;
    if (bad) label = label < 0 ? 0 : classes - 1;

    run_max mine = {-INFINITY, -1, 0.0};
    for (int j = tid; j < classes; j += ROW_THREADS) {
        const float v = z[j];
        if (mine.arg < 0) {
            mine.m = v;
            mine.arg = j;
            mine.s = 1.0;
        } else if (v > mine.m) {
            mine.s = mine.s * (double)expf(mine.m - v) + 1.0;
            mine.m = v;
            mine.arg = j;
        } else {
            mine.s += (double)expf(v - mine.m);
        }
    }
    if (tid == 0) s_label = z[label]; /* before any thread writes the row */
    s_m[tid] = mine.m;
    s_arg[tid] = mine.arg;
    s_s[tid] = mine.s;
    __syncthreads();
    for (int half = ROW_THREADS / 2; half > 0; half /= 2) {
        if (tid < half) {
            const run_max a = {s_m[tid], s_arg[tid], s_s[tid]};
            const run_max b = {s_m[tid + half], s_arg[tid + half], s_s[tid + half]};
            const run_max r = merge(a, b);
            s_m[tid] = r.m;
            s_arg[tid] = r.arg;
            s_s[tid] = r.s;
        }
        __syncthreads();
    }
    const float zmax = s_m[0];
    const double se = s_s[0];
    const double inv_div = 1.0 / (double)divisor, scale = inv_div / se;
    for (int j = tid; j < classes; j += ROW_THREADS)
        g[j] = (float)((double)expf(z[j] - zmax) * scale);
    __syncthreads(); /* the label's element last, by one thread */
    if (tid == 0) {
        const double zl = (double)s_label;
        g[label] = (float)(((double)expf(s_label - zmax) / se - 1.0) * inv_div);
        row_loss[row] = (double)zmax + log(se) - zl;
        row_correct[row] = bad ? -1 : s_arg[0] == label;
    }
}

__global__ void __launch_bounds__(TOTAL_THREADS)
    total_k(int64_t n, float divisor, const double *row_loss, const int32_t *row_correct,
            float *loss, int32_t *correct)
{
    __shared__ double s_loss[TOTAL_THREADS];
    __shared__ int64_t s_hits[TOTAL_THREADS];
    __shared__ int s_bad[TOTAL_THREADS];
    const int tid = threadIdx.x;
    double l = 0.0;
    int64_t hits = 0;
    int bad = 0;
    for (int64_t i = tid; i < n; i += TOTAL_THREADS) {
        l += row_loss[i];
        if (row_correct[i] < 0)
            bad = 1;
        else
            hits += row_correct[i];
    }
    s_loss[tid] = l;
    s_hits[tid] = hits;
    s_bad[tid] = bad;
    __syncthreads();
    for (int half = TOTAL_THREADS / 2; half > 0; half /= 2) {
        if (tid < half) {
            s_loss[tid] += s_loss[tid + half];
            s_hits[tid] += s_hits[tid + half];
            s_bad[tid] |= s_bad[tid + half];
        }
        __syncthreads();
    }
    if (tid == 0) {
        *loss = (float)(s_loss[0] / (double)divisor);
        *correct = s_bad[0] ? -1 : (int32_t)s_hits[0];
    }
}

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_classifier(cudaStream_t s, int64_t n, int classes,
                                      const float *logits, const int32_t *labels, float divisor,
                                      double *row_loss, int32_t *row_correct, float *loss,
                                      int32_t *correct, float *dlogits)
{
    if (n > 2147483647 || classes <= 0) return cudaErrorInvalidValue;
    if (n > 0) {
        rows_k<<<(unsigned)n, ROW_THREADS, 0, s>>>(classes, logits, labels, divisor, row_loss,
                                                   row_correct, dlogits);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    total_k<<<1, TOTAL_THREADS, 0, s>>>(n, divisor, row_loss, row_correct, loss, correct);
    return cudaGetLastError();
}

} // extern "C"
