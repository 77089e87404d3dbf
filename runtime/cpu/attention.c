/*
 * attention.c - CPU causal multi-head self-attention from a qkv projection
 * (GPT-2's layout: qkv (N, T, 3C), q k v side by side, each of `heads` heads
 * of hs = C / heads columns; y (N, T, C); lse (N, heads, T)).
 *
 * One task per (sample, head), writing only that head's columns of y (or
 * dqkv) and its rows of lse, so tasks never share an output. A task walks
 * its queries in blocks of BLOCK rows; a block's queries see the keys up to
 * its last row only (the causal mask), so the scores S = q k^T / sqrt(hs) of
 * a block are a (rows, keys) product of that width, about half of T x T in
 * all.
 *   forward   per query row: the softmax of its scores up to its own position
 *             (max, then exponentials in f32 summed in double), lse = max +
 *             log(sum) kept; P = exp(S - max) / sum; y = P v.
 *   backward  per block: P = exp(S - lse) again from the kept lse (no T x T
 *             tensor lives between forward and backward); dv += P^T dy;
 *             dP = dy v^T; dS = P (dP - D) / sqrt(hs), D the row dot product
 *             of dy and y; dq = dS k; dk += dS^T q. dk and dv gather the
 *             blocks in block order.
 * With d->q0 > 0 the blocks start at query q0 and y and lse hold the rows
 * of positions q0.. alone (pp_attention_forward_from).
 * Dropout (d->drop.p > 0): each probability of (sample, head, query, key)
 * is multiplied by its factor from dropout.h's hash (index (h T + i) T + j)
 * before P v in the forward; the backward draws the same factors: dv +=
 * (P M)^T dy, dS = P (M dP - D) / sqrt(hs), D still the row dot product of
 * dy and the (dropped) y. With p == 0 none of it runs.
 * Scratch: two (BLOCK, T) float matrices per pool thread, in the exec's
 * workspace. The products are single-threaded cblas_sgemm calls on strided
 * views of qkv; every cut depends on the shape alone, so the bits do not
 * depend on the thread count.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "workers.h"

#define BLOCK 64

typedef struct att_job {
    const pp_attention_desc *d;
    const float *qkv, *y, *lse, *dy;
    float *out, *out_lse, *dqkv;
    float *scratch; /* 2 * BLOCK * t floats per worker */
} att_job;

/* S (rb, kn; row stride kn) = scale q[r0..r0+rb) k[0..kn)^T */
static void scores(const att_job *j, const float *q, const float *k, int r0, int rb, int kn,
                   float scale, float *s)
{
    const int ld = 3 * j->d->c, hs = j->d->c / j->d->heads;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, kn, hs, scale, q + (size_t)r0 * ld,
                ld, k, ld, 0.0f, s, kn);
}

/* row[0..keys) *= the dropout factors of query i of (sample n, head h). */
static void drop_row(const pp_attention_desc *d, int n, int h, int i, float *row, int keys)
{
    const uint32_t threshold = pp_dropout_threshold(d->drop.p);
    const float scale = pp_dropout_scale(d->drop.p);
    const int64_t sample = d->drop.first_sample + n, base = ((int64_t)h * d->t + i) * d->t;
    for (int c = 0; c < keys; c++)
        row[c] *= pp_dropout_factor(d->drop.key, sample, base + c, threshold, scale);
}

static void forward_task(void *arg, int64_t task, int worker)
{
    const att_job *j = arg;
    const pp_attention_desc *d = j->d;
    const int n = (int)(task / d->heads), h = (int)(task % d->heads), t = d->t;
    const int hs = d->c / d->heads, ld = 3 * d->c;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *q = j->qkv + (size_t)n * t * ld + (size_t)h * hs;
    const float *k = q + d->c, *v = q + 2 * d->c;
    /* y and lse hold the rows of positions q0.. (every position where q0 is 0) */
    const int q0 = d->q0, rows = t - q0;
    float *y = j->out + (size_t)n * rows * d->c + (size_t)h * hs;
    float *lse = j->out_lse + ((size_t)n * d->heads + h) * rows;
    float *s = j->scratch + (size_t)worker * 2 * BLOCK * t;
    for (int r0 = q0; r0 < t; r0 += BLOCK) {
        const int rb = t - r0 < BLOCK ? t - r0 : BLOCK, kn = r0 + rb;
        scores(j, q, k, r0, rb, kn, scale, s);
        for (int i = 0; i < rb; i++) {
            float *row = s + (size_t)i * kn;
            const int keys = r0 + i + 1;
            float mx = row[0];
            for (int c = 1; c < keys; c++) mx = row[c] > mx ? row[c] : mx;
            double sum = 0.0;
            for (int c = 0; c < keys; c++) {
                row[c] = expf(row[c] - mx);
                sum += (double)row[c];
            }
            const float inv = (float)(1.0 / sum);
            for (int c = 0; c < keys; c++) row[c] *= inv;
            for (int c = keys; c < kn; c++) row[c] = 0.0f;
            lse[r0 - q0 + i] = (float)((double)mx + log(sum));
            if (d->drop.p > 0.0f) drop_row(d, n, h, r0 + i, row, keys);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rb, hs, kn, 1.0f, s, kn, v, ld,
                    0.0f, y + (size_t)(r0 - q0) * d->c, d->c);
    }
}

pp_status pp_cpu_attention_forward(pp_exec *ex, const pp_attention_desc *d, const float *qkv,
                                   float *y, float *lse, pp_error *err)
{
    void *ws;
    PP_TRY(pp_exec_workspace(ex, (size_t)pp_cpu_threads(ex) * 2 * BLOCK * (size_t)d->t *
                                     sizeof(float), &ws, err));
    pp_attention_desc dd = *d;
    PP_TRY(pp_cpu_dropout_resolve(&d->drop, "attention_forward", &dd.drop, err));
    att_job j = {.d = &dd, .qkv = qkv, .out = y, .out_lse = lse, .scratch = ws};
    pp_cpu_parallel(ex, (int64_t)d->n * d->heads, forward_task, &j);
    return PP_OK;
}

/* D of the block's row i: the dot product (in double) of dy's and y's rows. */
static float row_delta(const pp_attention_desc *d, const float *y, const float *dyb, int r0,
                       int i)
{
    const int hs = d->c / d->heads;
    const float *yr = y + (size_t)(r0 + i) * d->c, *dyr = dyb + (size_t)i * d->c;
    double dot = 0.0;
    for (int c = 0; c < hs; c++) dot += (double)yr[c] * (double)dyr[c];
    return (float)dot;
}

/* A block's dS into dp and dv's part: p holds P; dv += P^T dy, dP = dy v^T,
 * dS = P (dP - D) scale. */
static void plain_block(const att_job *j, int r0, int rb, int kn, const float *y,
                        const float *dyb, const float *v, float *p, float *dp, float *dv)
{
    const pp_attention_desc *d = j->d;
    const int hs = d->c / d->heads, ld = 3 * d->c;
    const float scale = 1.0f / sqrtf((float)hs);
    /* dv[0..kn) += P^T dy_block */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, hs, rb, 1.0f, p, kn, dyb, d->c,
                1.0f, dv, ld);
    /* dP = dy_block v[0..kn)^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, kn, hs, 1.0f, dyb, d->c, v, ld,
                0.0f, dp, kn);
    for (int i = 0; i < rb; i++) {
        const float D = row_delta(d, y, dyb, r0, i);
        float *prow = p + (size_t)i * kn, *dprow = dp + (size_t)i * kn;
        for (int c = 0; c < kn; c++) dprow[c] = prow[c] * (dprow[c] - D) * scale;
    }
}

/* A block's dS into dp and dv's part, with dropout: p holds P; dP = dy v^T
 * first, then per value dS = P (M dP - D) scale and p = P M, then dv +=
 * (P M)^T dy. */
static void dropped_block(const att_job *j, int n, int h, int r0, int rb, int kn,
                          const float *y, const float *dyb, const float *v, float *p, float *dp,
                          float *dv)
{
    const pp_attention_desc *d = j->d;
    const int hs = d->c / d->heads, ld = 3 * d->c;
    const float scale = 1.0f / sqrtf((float)hs);
    const uint32_t threshold = pp_dropout_threshold(d->drop.p);
    const float keep_scale = pp_dropout_scale(d->drop.p);
    const int64_t sample = d->drop.first_sample + n;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, kn, hs, 1.0f, dyb, d->c, v, ld,
                0.0f, dp, kn);
    for (int i = 0; i < rb; i++) {
        const float D = row_delta(d, y, dyb, r0, i);
        const int64_t base = ((int64_t)h * d->t + r0 + i) * d->t;
        float *prow = p + (size_t)i * kn, *dprow = dp + (size_t)i * kn;
        for (int c = 0; c < kn; c++) {
            const float m = c <= r0 + i ? pp_dropout_factor(d->drop.key, sample, base + c,
                                                            threshold, keep_scale)
                                        : 0.0f;
            dprow[c] = prow[c] * (m * dprow[c] - D) * scale;
            prow[c] *= m;
        }
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, hs, rb, 1.0f, p, kn, dyb, d->c,
                1.0f, dv, ld);
}

static void backward_task(void *arg, int64_t task, int worker)
{
    const att_job *j = arg;
    const pp_attention_desc *d = j->d;
    const int n = (int)(task / d->heads), h = (int)(task % d->heads), t = d->t;
    const int hs = d->c / d->heads, ld = 3 * d->c;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t base = (size_t)n * t * ld + (size_t)h * hs;
    const float *q = j->qkv + base, *k = q + d->c, *v = q + 2 * d->c;
    float *dq = j->dqkv + base, *dk = dq + d->c, *dv = dq + 2 * d->c;
    const size_t ybase = (size_t)n * t * d->c + (size_t)h * hs;
    const float *y = j->y + ybase, *dy = j->dy + ybase;
    const float *lse = j->lse + ((size_t)n * d->heads + h) * t;
    float *p = j->scratch + (size_t)worker * 2 * BLOCK * t, *dp = p + (size_t)BLOCK * t;
    for (int r = 0; r < t; r++) {
        memset(dk + (size_t)r * ld, 0, sizeof(float) * (size_t)hs);
        memset(dv + (size_t)r * ld, 0, sizeof(float) * (size_t)hs);
    }
    for (int r0 = 0; r0 < t; r0 += BLOCK) {
        const int rb = t - r0 < BLOCK ? t - r0 : BLOCK, kn = r0 + rb;
        scores(j, q, k, r0, rb, kn, scale, p);
        for (int i = 0; i < rb; i++) {
            float *row = p + (size_t)i * kn;
            const int keys = r0 + i + 1;
            const float l = lse[r0 + i];
            for (int c = 0; c < keys; c++) row[c] = expf(row[c] - l);
            for (int c = keys; c < kn; c++) row[c] = 0.0f;
        }
        const float *dyb = dy + (size_t)r0 * d->c;
        if (d->drop.p > 0.0f)
            dropped_block(j, n, h, r0, rb, kn, y, dyb, v, p, dp, dv);
        else
            plain_block(j, r0, rb, kn, y, dyb, v, p, dp, dv);
        /* dq_block = dS k[0..kn) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rb, hs, kn, 1.0f, dp, kn, k, ld,
                    0.0f, dq + (size_t)r0 * ld, ld);
        /* dk[0..kn) += dS^T q_block */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, hs, rb, 1.0f, dp, kn,
                    q + (size_t)r0 * ld, ld, 1.0f, dk, ld);
    }
}

pp_status pp_cpu_attention_backward(pp_exec *ex, const pp_attention_desc *d, const float *qkv,
                                    const float *y, const float *lse, const float *dy,
                                    float *dqkv, pp_error *err)
{
    void *ws;
    PP_TRY(pp_exec_workspace(ex, (size_t)pp_cpu_threads(ex) * 2 * BLOCK * (size_t)d->t *
                                     sizeof(float), &ws, err));
    pp_attention_desc dd = *d;
    PP_TRY(pp_cpu_dropout_resolve(&d->drop, "attention_backward", &dd.drop, err));
    att_job j = {.d = &dd, .qkv = qkv, .y = y, .lse = lse, .dy = dy, .dqkv = dqkv,
                 .scratch = ws};
    pp_cpu_parallel(ex, (int64_t)d->n * d->heads, backward_task, &j);
    return PP_OK;
}
