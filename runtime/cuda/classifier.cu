/*
 * classifier.cu - the fused classifier: softmax, cross-entropy with label
 * smoothing and the logits' gradient, with the top-1 and top-k counts
 * (ops.h: pp_softmax_xent_ex), runtime/cpu/loss.c's arithmetic, for a
 * batch's classes and a language model's vocabulary alike, in place where
 * the caller asks (the token model's last stage writes its logits over
 * their gradient).
 *   rows   one block per row. Every thread reads the label's logit first;
 *          each then walks its logits once keeping the running maximum (its
 *          first index), the sum of exp(z - maximum) rescaled whenever the
 *          maximum grows (double; each run of 16 or 8 logits' exponentials
 *          summed in f32 first, at most that many terms of at most 1, then
 *          added: one conversion to double a run), with label smoothing the
 *          sum of the logits (double), with a top-k count the classes that
 *          rank before the label (larger logits, equal ones of a lower
 *          index); the block combines the threads' in a fixed tree. Nothing
 *          is written before the __syncthreads that ends the walk. Then each
 *          thread writes its elements' gradients, exp(z - max) / sum /
 *          divisor less (1 - eps + eps / classes) / divisor at the label and
 *          eps / classes / divisor elsewhere: without smoothing in f32 (the
 *          scale 1 / (sum divisor) rounded once, each product once), with it
 *          in double (the exponentials in f32). The conversions between f32
 *          and double run at a sixteenth of the f32 rate on sm_90: three a
 *          logit made them, not the bytes, what the sixth run's 1.37 ms for
 *          GPT-2's 8192 x 50257 bf16 logits took (1.8 TB/s); now about one
 *          in sixteen. The loss within 1e-6 of the CPU's, the gradient within
 *          its normalised 1e-6 (test_emu_transformer). A row reads its
 *          logits twice (the second time mostly from L2: a block's row of
 *          50257 logits is 201 KB) and writes them once. Each thread loads
 *          its next 32 bytes of logits (16 bf16 or 8 f32) before it uses the
 *          first (the run above). Two blocks fit an
 *          SM (at most 64 registers a thread), so one 2-byte bf16 logit in
 *          flight a thread kept 2 KB of loads in flight per SM, where HBM's
 *          bandwidth needs ~32 KB (4.8 TB/s x ~0.9 us over 132 SMs); 32
 *          bytes a thread keep 32 KB.
 *          bf16 logits (the kernel is a template on the element type, as
 *          layernorm.cu's): each element widened exactly as it is read,
 *          the f32 arithmetic, each gradient element rounded once to bf16
 *          as it is stored (a row then reads and writes half the bytes).
 *   total  one block: the rows' losses and hits summed by thread in row
 *          order, then in a fixed tree; correct (and correct_k) = -1 if a
 *          label was out of range (then read as the nearest class).
 */
#include "transformer.h"

#include <cmath>

#include "bf16.cuh"
#include "kernels.h"

namespace {

constexpr int ROW_THREADS = 512;
constexpr int TOTAL_THREADS = 256;
/* the loads a row's thread issues before it uses the first of them: 32
 * bytes, 16 bf16 or 8 f32 logits */
template <class T>
constexpr int IN_FLIGHT = 32 / (int)sizeof(T);

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

/* f(j, logit j) for the thread's logits of the row in order, IN_FLIGHT<T>
 * loaded at a time */
template <class T, class F>
__device__ __forceinline__ void each_logit(const T *z, int classes, int tid, F f)
{
    for (int j0 = tid; j0 < classes; j0 += IN_FLIGHT<T> * ROW_THREADS) {
        float vs[IN_FLIGHT<T>]; /* j0, j0 + ROW_THREADS, ... (bf16.cuh) */
        strided_run(z, classes, j0, ROW_THREADS, vs);
        for (int u = 0; u < IN_FLIGHT<T>; u++) {
            const int j = j0 + u * ROW_THREADS;
            if (j >= classes) break;
            f(j, vs[u]);
        }
    }
}

template <class T>
__global__ void __launch_bounds__(ROW_THREADS, 2) /* two blocks an SM: at most 64 registers */
    rows_k(int classes, const T *logits, const int32_t *labels, float divisor, float eps,
           int top_k, double *row_loss, int32_t *row_correct, T *dlogits)
{
    __shared__ float s_m[ROW_THREADS];
    __shared__ int s_arg[ROW_THREADS];
    __shared__ double s_s[ROW_THREADS];
    __shared__ double s_z[ROW_THREADS]; /* the logits' sum (label smoothing) */
    __shared__ int s_rank[ROW_THREADS]; /* classes before the label (top-k) */
    const int tid = threadIdx.x;
    const int64_t row = blockIdx.x;
    const T *z = logits + row * classes;
    T *g = dlogits + row * classes;
    int label = labels[row];
    const bool bad = label < 0 || label >= classes;
    if (bad) label = label < 0 ? 0 : classes - 1;
    const float zl = ld_f32(z, label); /* before any thread writes the row */

    run_max mine = {-INFINITY, -1, 0.0};
    double sz = 0.0; /* only with label smoothing: a conversion and an add an element */
    int rank = 0;
    const bool smooth = eps != 0.0f, ranks = top_k > 0;
    /* a run of IN_FLIGHT logits at a time: its maximum (first index) merged into the
     * thread's, then its exponentials summed in f32 (at most 16 terms of at most 1) and
     * that sum added in double: one conversion to double a run, not one a logit */
    for (int j0 = tid; j0 < classes; j0 += IN_FLIGHT<T> * ROW_THREADS) {
        float vs[IN_FLIGHT<T>];
        strided_run(z, classes, j0, ROW_THREADS, vs);
        float rm = -INFINITY;
        int ra = -1, n = 0;
        for (int u = 0; u < IN_FLIGHT<T>; u++) {
            const int j = j0 + u * ROW_THREADS;
            if (j >= classes) break;
            const float v = vs[u];
            n = u + 1;
            if (ra < 0 || v > rm) {
                rm = v;
                ra = j;
            }
            if (smooth) sz += (double)v;
            if (ranks) rank += v > zl || (v == zl && j < label);
        }
        if (mine.arg < 0) {
            mine.m = rm;
            mine.arg = ra;
        } else if (rm > mine.m) {
            mine.s *= (double)expf(mine.m - rm);
            mine.m = rm;
            mine.arg = ra;
        }
        float part = 0.0f;
        for (int u = 0; u < n; u++) part += vs[u] == mine.m ? 1.0f : expf(vs[u] - mine.m);
        mine.s += (double)part;
    }
    s_m[tid] = mine.m;
    s_arg[tid] = mine.arg;
    s_s[tid] = mine.s;
    s_z[tid] = sz;
    s_rank[tid] = rank;
    __syncthreads();
    for (int half = ROW_THREADS / 2; half > 0; half /= 2) {
        if (tid < half) {
            const run_max a = {s_m[tid], s_arg[tid], s_s[tid]};
            const run_max b = {s_m[tid + half], s_arg[tid + half], s_s[tid + half]};
            const run_max r = merge(a, b);
            s_m[tid] = r.m;
            s_arg[tid] = r.arg;
            s_s[tid] = r.s;
            s_z[tid] += s_z[tid + half];
            s_rank[tid] += s_rank[tid + half];
        }
        __syncthreads();
    }
    const float zmax = s_m[0];
    const double se = s_s[0];
    const double inv_div = 1.0 / (double)divisor;
    if (eps == 0.0f) { /* in f32: the scale rounded once, each product once */
        const float scale = (float)(inv_div / se);
        each_logit(z, classes, tid, [&](int j, float v) { st_f32(g, j, expf(v - zmax) * scale); });
        __syncthreads(); /* the label's element last, by one thread */
        if (tid == 0) st_f32(g, label, (float)(((double)expf(zl - zmax) / se - 1.0) * inv_div));
    } else {
        const double e = eps, off = e / (double)classes, on = 1.0 - e + off, inv_se = 1.0 / se;
        each_logit(z, classes, tid, [&](int j, float v) {
            st_f32(g, j,
                   (float)(((double)expf(v - zmax) * inv_se - (j == label ? on : off)) * inv_div));
        });
    }
    if (tid == 0) {
        const double lse = (double)zmax + log(se);
        double loss = lse - (double)zl;
        if (eps != 0.0f)
            loss = (1.0 - (double)eps) * loss + (double)eps * (lse - s_z[0] / (double)classes);
        row_loss[row] = loss;
        row_correct[row] = bad ? -1 : (s_arg[0] == label) | (top_k > 0 && s_rank[0] < top_k) << 1;
    }
}

__global__ void __launch_bounds__(TOTAL_THREADS)
    total_k(int64_t n, float divisor, const double *row_loss, const int32_t *row_correct,
            float *loss, int32_t *correct, int32_t *correct_k)
{
    __shared__ double s_loss[TOTAL_THREADS];
    __shared__ int64_t s_hits[TOTAL_THREADS], s_hits_k[TOTAL_THREADS];
    __shared__ int s_bad[TOTAL_THREADS];
    const int tid = threadIdx.x;
    double l = 0.0;
    int64_t hits = 0, hits_k = 0;
    int bad = 0;
    for (int64_t i = tid; i < n; i += TOTAL_THREADS) {
        l += row_loss[i];
        if (row_correct[i] < 0) {
            bad = 1;
        } else {
            hits += row_correct[i] & 1;
            hits_k += row_correct[i] >> 1 & 1;
        }
    }
    s_loss[tid] = l;
    s_hits[tid] = hits;
    s_hits_k[tid] = hits_k;
    s_bad[tid] = bad;
    __syncthreads();
    for (int half = TOTAL_THREADS / 2; half > 0; half /= 2) {
        if (tid < half) {
            s_loss[tid] += s_loss[tid + half];
            s_hits[tid] += s_hits[tid + half];
            s_hits_k[tid] += s_hits_k[tid + half];
            s_bad[tid] |= s_bad[tid + half];
        }
        __syncthreads();
    }
    if (tid == 0) {
        *loss = (float)(s_loss[0] / (double)divisor);
        *correct = s_bad[0] ? -1 : (int32_t)s_hits[0];
        if (correct_k) *correct_k = s_bad[0] ? -1 : (int32_t)s_hits_k[0];
    }
}

template <class T>
cudaError_t classifier(cudaStream_t s, int64_t n, int classes, const T *logits,
                       const int32_t *labels, float divisor, float eps, int top_k,
                       double *row_loss, int32_t *row_correct, float *loss, int32_t *correct,
                       int32_t *correct_k, T *dlogits)
{
    if (n > 2147483647 || classes <= 0) return cudaErrorInvalidValue;
    if (n > 0) {
        rows_k<T><<<(unsigned)n, ROW_THREADS, 0, s>>>(classes, logits, labels, divisor, eps,
                                                      correct_k ? top_k : 0, row_loss,
                                                      row_correct, dlogits);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    total_k<<<1, TOTAL_THREADS, 0, s>>>(n, divisor, row_loss, row_correct, loss, correct,
                                        correct_k);
    return cudaGetLastError();
}

} // namespace

extern "C" {

cudaError_t pp_cuda_launch_classifier(cudaStream_t s, int64_t n, int classes,
                                      const float *logits, const int32_t *labels, float divisor,
                                      float eps, int top_k, double *row_loss,
                                      int32_t *row_correct, float *loss, int32_t *correct,
                                      int32_t *correct_k, float *dlogits)
{
    return classifier(s, n, classes, logits, labels, divisor, eps, top_k, row_loss, row_correct,
                      loss, correct, correct_k, dlogits);
}

cudaError_t pp_cuda_launch_classifier_bf16(cudaStream_t s, int64_t n, int classes,
                                           const uint16_t *logits, const int32_t *labels,
                                           float divisor, float eps, int top_k,
                                           double *row_loss, int32_t *row_correct, float *loss,
                                           int32_t *correct, int32_t *correct_k,
                                           uint16_t *dlogits)
{
    return classifier(s, n, classes, logits, labels, divisor, eps, top_k, row_loss, row_correct,
                      loss, correct, correct_k, dlogits);
}

} // extern "C"
