/*
 * transformer.h - launchers of the CUDA backend's own kernels for the
 * transformer ops (runtime/core/ops.h, "transformer ops"): layer norm
 * (layernorm.cu), fixed-order column sums (colsum.cu), token and position
 * embeddings (embedding.cu), causal self-attention (attention.cu) and the
 * fused classifier (classifier.cu). GELU is an elementwise kind of
 * kernels.cu (kernels.h) in f32, and gelu.cu's on bf16 operands.
 *
 * runtime/cpu is the spec each kernel matches (dense.c, layernorm.c,
 * attention.c, embedding.c, loss.c): the same arithmetic where it is cheap
 * (sums in double), within f32 rounding elsewhere. Every reduction runs in
 * an order fixed by the shape alone (no float atomics), so results are the
 * same bits run to run.
 *
 * Each launcher enqueues on stream s (on the calling thread's current
 * device) and returns cudaGetLastError(), to be checked with PP_CUDA.
 * Pointers are device memory; scratch arguments are the caller's
 * (pp_exec_workspace), of the sizes stated.
 */
#ifndef PP_CUDA_TRANSFORMER_H
#define PP_CUDA_TRANSFORMER_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/dropout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- fixed-order column sums (colsum.cu) ------------------------------------- */

/* Rows per partial sum. */
#define PP_CUDA_COLSUM_CHUNK 64

/* Chunks of PP_CUDA_COLSUM_CHUNK rows in rows rows (at least 1). */
int64_t pp_cuda_colsum_chunks(int64_t rows);

/* part (chunks, cols) = per chunk of PP_CUDA_COLSUM_CHUNK rows of x (rows,
 * cols), the column sums in double, rows in order. */
cudaError_t pp_cuda_launch_colsum_parts(cudaStream_t s, int64_t rows, int64_t cols,
                                        const float *x, double *part);

/* out[j] += the sum of part[k][j] over the chunks k in order, rounded once,
 * for j < split; out2[j - split] likewise for split <= j < cols (out2 NULL:
 * those columns are not added anywhere). */
cudaError_t pp_cuda_launch_parts_add(cudaStream_t s, unsigned max_grid, int64_t chunks,
                                     int64_t cols, int64_t split, const double *part, float *out,
                                     float *out2);

/* ---- layer norm (layernorm.cu) --------------------------------------------------- */

/* y (rows, c) = (x - mean) rstd gamma + beta (beta may be NULL); mean, rstd
 * (rows) kept. One warp per row; statistics and y in double. With add (not
 * NULL) the rows normalised are x + add, written to sum first (sum may be x
 * or add; y may be x when add is NULL). */
cudaError_t pp_cuda_launch_layernorm_forward(cudaStream_t s, unsigned max_grid, int64_t rows,
                                             int c, float eps, const float *x, const float *add,
                                             float *sum, const float *gamma, const float *beta,
                                             float *y, float *mean, float *rstd);

/* Rows per block of the backward (and per partial sum of its parameters'
 * gradients), and the number of such chunks in rows rows (at least 1). */
#define PP_CUDA_LN_CHUNK 16
int64_t pp_cuda_layernorm_chunks(int64_t rows);

/* dx (=; + dres where dres is not NULL, added in f32), dgamma and dbeta (+=,
 * dbeta may be NULL) from the kept statistics; part:
 * pp_cuda_layernorm_chunks(rows) * 2 * c doubles of scratch. */
cudaError_t pp_cuda_launch_layernorm_backward(cudaStream_t s, unsigned max_grid, int64_t rows,
                                              int c, const float *x, const float *dy,
                                              const float *gamma, const float *mean,
                                              const float *rstd, const float *dres, float *dx,
                                              double *part, float *dgamma, float *dbeta);

/* The same two on activations of either dtype (the bf16 entries): x_bf16
 * for x, add and sum (bf16 bits, else f32), y_bf16 for y; dy_bf16 for dy,
 * dx_bf16 for dx and dres. bf16 elements are widened exactly, bf16 outputs
 * rounded once from the f32 values the f32 launchers write; a bf16 sum is
 * rounded before it is normalised, a bf16 dx before dres is added. */
cudaError_t pp_cuda_launch_layernorm_forward_mixed(cudaStream_t s, unsigned max_grid,
                                                   int64_t rows, int c, float eps, bool x_bf16,
                                                   const void *x, const void *add, void *sum,
                                                   const float *gamma, const float *beta,
                                                   bool y_bf16, void *y, float *mean,
                                                   float *rstd);
cudaError_t pp_cuda_launch_layernorm_backward_mixed(cudaStream_t s, unsigned max_grid,
                                                    int64_t rows, int c, bool x_bf16,
                                                    const void *x, bool dy_bf16, const void *dy,
                                                    const float *gamma, const float *mean,
                                                    const float *rstd, bool dx_bf16,
                                                    const void *dres, void *dx, double *part,
                                                    float *dgamma, float *dbeta);

/* ---- GELU of mixed precision (gelu.cu) ----------------------------------------------- */

/* y = GELU(x) (dy NULL), or y = dy GELU'(x), over n elements: x (and dy)
 * bf16 bits where x_bf16, else f32; y likewise by y_bf16. In f32 (the f32
 * kernels' formula), a bf16 y rounded once; y may alias x or dy. */
cudaError_t pp_cuda_launch_gelu_mixed(cudaStream_t s, unsigned max_grid, int64_t n, bool x_bf16,
                                      const void *x, const void *dy, bool y_bf16, void *y);

/* h = bf16(pre), then g = bf16(GELU(h)) over n elements (h and g bf16 bits):
 * the bf16 dense + GELU's end, from the GEMM's f32 pre-activation. */
cudaError_t pp_cuda_launch_gelu_from_f32(cudaStream_t s, unsigned max_grid, int64_t n,
                                         const float *pre, void *h, void *g);

/* ---- embeddings (embedding.cu) ---------------------------------------------------- */

/* y (rows, c) = table rows ids (rows) name; an id outside [0, vocab) reads
 * the nearest row instead (the host checks ids where it reads them). */
cudaError_t pp_cuda_launch_embedding_forward(cudaStream_t s, unsigned max_grid, int64_t rows,
                                             int vocab, int c, const int32_t *ids,
                                             const float *table, float *y);

/* dtable (vocab, c) += the sums of dy's rows per id, in double in position
 * order, each table row added once: a counting sort of the positions by id,
 * then a block per id and 256 columns (embedding.cu). ws: stream-ordered
 * scratch of pp_cuda_embedding_backward_ws bytes, 4-byte aligned; after the
 * call pp_cuda_embedding_order(ws, vocab) holds the valid positions sorted
 * by id, each id's in increasing order. An id outside [0, vocab) is
 * skipped. cudaErrorInvalidValue where rows exceeds 2^31 - 1. */
size_t pp_cuda_embedding_backward_ws(int64_t rows, int vocab);
const uint32_t *pp_cuda_embedding_order(const void *ws, int vocab);
cudaError_t pp_cuda_launch_embedding_backward(cudaStream_t s, unsigned max_grid, int64_t rows,
                                              int vocab, int c, const int32_t *ids,
                                              const float *dy, float *dtable, void *ws);

/* y (n, t, c) = x + table[t] (table (>= t, c)); y may be x. The backward,
 * dtable[t] += the sum over n of dy[n, t], is a column sum of dy seen as
 * (n, t * c): pp_cuda_launch_colsum_parts then _parts_add. */
cudaError_t pp_cuda_launch_position_forward(cudaStream_t s, unsigned max_grid, int64_t n, int t,
                                            int c, const float *x, const float *table, float *y);

/* ---- causal self-attention (attention.cu) ------------------------------------------- */

/* qkv (n, t, 3c): q, k, v side by side, heads of hs = c / heads columns;
 * y (n, t - q0, c); lse (n, heads, t - q0). q0 > 0 (the forward of our
 * CUDA-core kernels alone, without dropout): the queries of positions
 * q0..t-1 only, over the keys up to each (generation's cache). */
typedef struct pp_cuda_attention_dims {
    int n, t, c, heads;
    int q0; /* the first query's position (0: every position) */
} pp_cuda_attention_dims;

/* The largest head size the kernels take. */
#define PP_CUDA_ATTENTION_HS_MAX 128

/* Keys a block of the one-query forward takes (attention_tile.cuh: decode_k). */
#define PP_CUDA_ATTENTION_DECODE_KEYS 64

/* Floats of scratch the one-query forward of d needs: per sample, head and
 * chunk of PP_CUDA_ATTENTION_DECODE_KEYS keys, a softmax's partials (2 and
 * a padded head of 32, 64 or 128 columns). */
static inline size_t pp_cuda_attention_decode_floats(pp_cuda_attention_dims d)
{
    const int hs = d.heads > 0 ? d.c / d.heads : 0;
    const size_t pad = hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
    const size_t chunks = ((size_t)d.t + PP_CUDA_ATTENTION_DECODE_KEYS - 1) /
                          PP_CUDA_ATTENTION_DECODE_KEYS;
    return (size_t)d.n * (size_t)d.heads * chunks * (pad + 2);
}

/* y and lse from qkv: per (sample, head, block of queries) one block walks
 * the causal keys in tiles, the softmax kept online (flash-attention's
 * scheme); no (t, t) matrix in memory. drop (NULL or p == 0: none): each
 * probability of (sample k, head h, query i, key j) times
 * pp_dropout_factor(drop->key, drop->first_sample + k, (h t + i) t + j,
 * ...), drawn where it is formed; lse stays the undropped softmax's.
 * cudaErrorInvalidValue (nothing enqueued) for a head size above
 * PP_CUDA_ATTENTION_HS_MAX. */
cudaError_t pp_cuda_launch_attention_forward(cudaStream_t s, pp_cuda_attention_dims d,
                                             const pp_dropout_desc *drop, const float *qkv,
                                             float *y, float *lse);

/* y's one row (n, 1, c) and lse (n, heads, 1) of the last query alone (d.q0
 * == d.t - 1: generation's new token over the cache), without dropout: the
 * keys split in chunks over blocks of their own, then the chunks combined
 * (flash-decoding's scheme), within rounding of the forward's row. part:
 * pp_cuda_attention_decode_floats(d) floats of scratch.
 * cudaErrorInvalidValue (nothing enqueued) for other dimensions. */
cudaError_t pp_cuda_launch_attention_decode(cudaStream_t s, pp_cuda_attention_dims d,
                                            const float *qkv, float *y, float *lse, float *part);

/* dqkv (=) from dy, qkv, y and lse: the probabilities computed again from
 * lse, tile by tile; one pass per block of keys (dk, dv) and one per block
 * of queries (dq), so that no element is added to from two blocks (no
 * atomics). drop: the forward's (its masks drawn again; dS = P (M dP -
 * delta) / sqrt(hs), as runtime/cpu/attention.c). delta: n * heads * t
 * floats of scratch (the row dot products of dy and y). Head sizes as the
 * forward. */
cudaError_t pp_cuda_launch_attention_backward(cudaStream_t s, unsigned max_grid,
                                              pp_cuda_attention_dims d,
                                              const pp_dropout_desc *drop, const float *qkv,
                                              const float *y, const float *lse, const float *dy,
                                              float *delta, float *dqkv);

/* ---- the fused classifier (classifier.cu) --------------------------------------------- */

/* Softmax cross-entropy with label smoothing eps over logits (n, classes)
 * with labels (n) (pp_softmax_xent_ex): per row one block reads the logits
 * once for the maximum (first index wins), the sum of exponentials
 * (online), the logits' sum and the label's rank, then writes dlogits =
 * (softmax - (1 - eps) onehot - eps / classes) / divisor; dlogits may be
 * logits (each row's logits are read before its gradient is written).
 * row_loss (n doubles), row_correct (n) are scratch; loss, correct and
 * correct_k (may be NULL: no top-k count; else the labels ranking below
 * top_k) get their sums in a fixed order (-1 if a label was outside [0,
 * classes), which reads the nearest class). */
cudaError_t pp_cuda_launch_classifier(cudaStream_t s, int64_t n, int classes,
                                      const float *logits, const int32_t *labels, float divisor,
                                      float eps, int top_k, double *row_loss,
                                      int32_t *row_correct, float *loss, int32_t *correct,
                                      int32_t *correct_k, float *dlogits);
/* The same on bf16 logits (bit patterns) with a bf16 gradient (may be
 * logits): each logit widened exactly as it is read, the f32 kernel's
 * arithmetic, each gradient element rounded once (nearest, ties to even). */
cudaError_t pp_cuda_launch_classifier_bf16(cudaStream_t s, int64_t n, int classes,
                                           const uint16_t *logits, const int32_t *labels,
                                           float divisor, float eps, int top_k,
                                           double *row_loss, int32_t *row_correct, float *loss,
                                           int32_t *correct, int32_t *correct_k,
                                           uint16_t *dlogits);

#ifdef __cplusplus
}
#endif

#endif
