/*
 * dense.c - the transformer's dense layers on CUDA (ops.h: pp_dense_*),
 * x (R, in), y (R, out), the weight (in, out) or (out, in): GEMMs through
 * cuBLASLt (blaslt.c), IEEE fp32, or TF32 tensor cores where the device's
 * math mode is PP_MATH_TF32 (the plan's precision: tf32).
 *
 * Row-major x (R, in), W, y (R, out) are the column-major x^T (in, R), y^T
 * (out, R), and W^T (out, in) for the (in, out) order (ld out) or W (in,
 * out) for the (out, in) order (ld in), so (column-major, m n k):
 *   forward          y^T  = op(W) x^T (+ bias per row)        out  R    in
 *   backward data    dx^T = op(W)' dy^T                       in   R    out
 *   backward weights (in, out): dW^T += dy^T x                out  in   R
 *                    (out, in): dW^T += x^T dy                in   out  R
 * The forward's bias rides the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS), and
 * so does a GELU after the layer (the fused entries: GELU_AUX_BIAS keeps the
 * pre-activation h and writes GELU(h); the backward's DGELU multiplies dy
 * W^T by GELU'(h)); where cuBLASLt refuses those, the fused entries decline
 * (PP_ERR_UNSUPPORTED, nothing enqueued) and ops_transformer.c runs the plain
 * ops. The weight gradient is added by the GEMM (beta 1: "within the
 * rounding of the library's blend", ops.h); the bias gradient is a
 * fixed-order column sum of dy in double (colsum.cu), as the CPU's. Where
 * cuBLASLt refuses a plain shape, cublasSgemm (the exec's handle, in the same
 * math mode) runs it and the bias is added by a kernel of its own.
 */
#include <limits.h>

#include "blaslt.h"
#include "internal.h"
#include "kernels.h"
#include "transformer.h"

static bool tf32(const pp_exec *ex)
{
    return pp_device_math(ex->dev) == PP_MATH_TF32;
}

/* mm through cuBLASLt, or cublasSgemm (epilogue NONE or BIAS: the bias by
 * a kernel) where cuBLASLt refuses it. */
static pp_status matmul(pp_exec *ex, const pp_cuda_lt_matmul *mm, const float *a,
                        const float *b, float *d, pp_error *err)
{
    pp_status s = pp_cuda_lt_matmul_f32(ex, mm, a, b, d, err);
    if (s != PP_ERR_UNSUPPORTED || (mm->epi != PP_LT_EPI_NONE && mm->epi != PP_LT_EPI_BIAS))
        return s;
    if (mm->m > INT_MAX || mm->n > INT_MAX || mm->k > INT_MAX || mm->lda > INT_MAX ||
        mm->ldb > INT_MAX || mm->ldd > INT_MAX)
        return s; /* cuBLASLt's refusal stands: cuBLAS takes int sizes */
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 1, &ce, err));
    const float one = 1.0f;
    PP_TRY(PP_CUDA(ex->dev, err,
                   cublasSgemm(ce->blas, mm->ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                               mm->tb ? CUBLAS_OP_T : CUBLAS_OP_N, (int)mm->m, (int)mm->n,
                               (int)mm->k, &one, a, (int)mm->lda, b, (int)mm->ldb, &mm->beta, d,
                               (int)mm->ldd)));
    if (mm->epi != PP_LT_EPI_BIAS) return PP_OK;
    /* y^T (m, n) column-major is y (n, m) row-major: the bias per column */
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_bias_add(ce->stream, pp_cuda_grid(ex, mm->m * mm->n,
                                                                    PP_CUDA_BLOCK),
                                           mm->n, mm->m, mm->bias, d));
}

pp_status pp_cuda_dense_forward(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                const float *x, const float *w, const float *b, float *y,
                                pp_error *err)
{
    if (rows == 0 || out == 0) return PP_OK;
    if (in == 0) { /* an empty product: y = b (or 0) */
        pp_cuda_exec *ce;
        PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
        PP_TRY(PP_CUDA(ex->dev, err, cudaMemsetAsync(y, 0, (size_t)rows * out * sizeof *y,
                                                     ce->stream)));
        if (!b) return PP_OK;
        return PP_CUDA(ex->dev, err,
                       pp_cuda_launch_bias_add(ce->stream, pp_cuda_grid(ex, rows * out,
                                                                        PP_CUDA_BLOCK),
                                               rows, out, b, y));
    }
    const pp_cuda_lt_matmul mm = {.ta = w_out_in, .m = out, .n = rows, .k = in,
                                  .lda = w_out_in ? in : out, .ldb = in, .ldd = out,
                                  .tf32 = tf32(ex), .epi = b ? PP_LT_EPI_BIAS : PP_LT_EPI_NONE,
                                  .bias = b};
    return matmul(ex, &mm, w, x, y, err);
}

pp_status pp_cuda_dense_gelu_forward(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                     const float *x, const float *w, const float *b, float *h,
                                     float *g, pp_error *err)
{
    PP_TRY(pp_cuda_unfused(ex, "dense + GELU", err));
    if (rows == 0 || out == 0 || in == 0)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: dense + GELU: an empty product",
                            ex->dev->name);
    const pp_cuda_lt_matmul mm = {.ta = w_out_in, .m = out, .n = rows, .k = in,
                                  .lda = w_out_in ? in : out, .ldb = in, .ldd = out,
                                  .tf32 = tf32(ex),
                                  .epi = b ? PP_LT_EPI_GELU_AUX_BIAS : PP_LT_EPI_GELU_AUX,
                                  .bias = b, .aux = h, .ld_aux = out};
    return matmul(ex, &mm, w, x, g, err);
}

pp_status pp_cuda_dense_backward_data_gelu(pp_exec *ex, int64_t rows, int in, int out,
                                           bool w_out_in, const float *w, const float *dy,
                                           const float *h, float *dh, pp_error *err)
{
    PP_TRY(pp_cuda_unfused(ex, "dense backward + GELU", err));
    if (rows == 0 || in == 0 || out == 0)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: dense backward + GELU: an empty "
                            "product", ex->dev->name);
    const pp_cuda_lt_matmul mm = {.ta = !w_out_in, .m = in, .n = rows, .k = out,
                                  .lda = w_out_in ? in : out, .ldb = out, .ldd = in,
                                  .tf32 = tf32(ex), .epi = PP_LT_EPI_DGELU, .aux = h,
                                  .ld_aux = in};
    return matmul(ex, &mm, w, dy, dh, err);
}

pp_status pp_cuda_dense_backward_data(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                      const float *w, const float *dy, float *dx, pp_error *err)
{
    if (rows == 0 || in == 0) return PP_OK;
    if (out == 0) {
        pp_cuda_exec *ce;
        PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
        return PP_CUDA(ex->dev, err, cudaMemsetAsync(dx, 0, (size_t)rows * in * sizeof *dx,
                                                     ce->stream));
    }
    const pp_cuda_lt_matmul mm = {.ta = !w_out_in, .m = in, .n = rows, .k = out,
                                  .lda = w_out_in ? in : out, .ldb = out, .ldd = in,
                                  .tf32 = tf32(ex)};
    return matmul(ex, &mm, w, dy, dx, err);
}

/* db += the column sums of the f32 dy (rows, out), in double in a fixed order
 * (colsum.cu), as the CPU's */
static pp_status bias_grad(pp_exec *ex, int64_t rows, int out, const float *dy, float *db,
                           pp_error *err)
{
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
    const int64_t chunks = pp_cuda_colsum_chunks(rows);
    void *part;
    PP_TRY(pp_exec_workspace(ex, (size_t)chunks * out * sizeof(double), &part, err));
    PP_TRY(PP_CUDA(ex->dev, err, pp_cuda_launch_colsum_parts(ce->stream, rows, out, dy, part)));
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_parts_add(ce->stream, pp_cuda_max_grid(ex), chunks, out, out,
                                            part, db, NULL));
}

pp_status pp_cuda_dense_backward_weights(pp_exec *ex, int64_t rows, int in, int out,
                                         bool w_out_in, const float *x, const float *dy,
                                         float *dw, float *db, pp_error *err)
{
    if (rows == 0 || out == 0) return PP_OK;
    if (in > 0) {
        const pp_cuda_lt_matmul mm =
            w_out_in ? (pp_cuda_lt_matmul){.tb = true, .m = in, .n = out, .k = rows, .lda = in,
                                           .ldb = out, .ldd = in, .tf32 = tf32(ex), .beta = 1.0f}
                     : (pp_cuda_lt_matmul){.tb = true, .m = out, .n = in, .k = rows,
                                           .lda = out, .ldb = in, .ldd = out, .tf32 = tf32(ex),
                                           .beta = 1.0f};
        PP_TRY(w_out_in ? matmul(ex, &mm, x, dy, dw, err) : matmul(ex, &mm, dy, x, dw, err));
    }
    return db ? bias_grad(ex, rows, out, dy, db, err) : PP_OK;
}

/* dx = dy W^T and dw += (with db) of one f32 dy whose rows do not start on 16 bytes (the
 * head's logits' gradient: 50257 columns): the two entries above on one copy of dy at the
 * padded pitch (pp_cuda_lt_pad, zeros past out in each row), where each GEMM made its
 * own (blaslt.c); the same sums (a padded k adds zeros). PP_ERR_UNSUPPORTED, nothing
 * written, where there is nothing to share (dy's pitch aligned, an empty product): the
 * separate entries then run. */
pp_status pp_cuda_dense_backward(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                 const float *w, const float *x, const float *dy, float *dx,
                                 float *dw, float *db, pp_error *err)
{
    if (rows == 0 || in == 0 || out == 0 || !dx)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: dense backward: nothing to share",
                            ex->dev->name);
    const void *p = dy;
    int64_t ld = out;
    void *pad;
    size_t bytes;
    PP_TRY(pp_cuda_lt_pad(ex, &p, &ld, out, rows, sizeof(float), &pad, &bytes, err));
    if (!pad)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: dense backward: dy's pitch is "
                            "aligned, nothing to share", ex->dev->name);
    const float *d = p;
    const pp_cuda_lt_matmul data = {.ta = !w_out_in, .m = in, .n = rows, .k = out,
                                    .lda = w_out_in ? in : out, .ldb = ld, .ldd = in,
                                    .tf32 = tf32(ex), .b_zero_tail = true};
    pp_status s = matmul(ex, &data, w, d, dx, err);
    if (s == PP_OK) {
        const pp_cuda_lt_matmul weights =
            w_out_in ? (pp_cuda_lt_matmul){.tb = true, .m = in, .n = out, .k = rows, .lda = in,
                                           .ldb = ld, .ldd = in, .tf32 = tf32(ex), .beta = 1.0f,
                                           .b_zero_tail = true}
                     : (pp_cuda_lt_matmul){.tb = true, .m = out, .n = in, .k = rows, .lda = ld,
                                           .ldb = in, .ldd = out, .tf32 = tf32(ex), .beta = 1.0f,
                                           .a_zero_tail = true};
        s = w_out_in ? matmul(ex, &weights, x, d, dw, err) : matmul(ex, &weights, d, x, dw, err);
        if (s == PP_ERR_UNSUPPORTED) { /* dx is written: no other way can finish dw */
            if (err) {
                pp_error_prefix(err, "dense backward: dx was written, then the weight GEMM "
                                     "refused");
                err->code = PP_ERR_BACKEND;
            }
            s = PP_ERR_BACKEND;
        }
    }
    pp_cuda_scratch_free(ex, pad, bytes);
    if (s != PP_OK || !db) return s;
    return bias_grad(ex, rows, out, dy, db, err); /* the exact sums of the f32 dy */
}

/* ---- the bf16 entries of mixed precision (backend.h) ----------------------------------
 * bf16 x, W and dy on bf16 tensor cores (CUBLAS_COMPUTE_32F: fp32 accumulation), the
 * shapes above. cuBLASLt takes A and B of one dtype and reads a bias of D's type only
 * (blaslt.h), so:
 *   forward            an f32 y or no bias: D = y; a bf16 y with a bias: D = y with the
 *                      bias rounded to bf16 for the epilogue (epilogue_bf16 below)
 *   dense + GELU       h and g bf16: GELU_AUX_BIAS writes h (its aux matrix) and g, the
 *                      bias rounded likewise
 *   backward data      D = dx (bf16 or f32); with the GELU: DGELU, dh = bf16(dy W^T *
 *                      GELU'(h))
 *   backward weights   dw += (beta 1, fp32 D) with the bias gradient fused in the same
 *                      GEMM (CUBLASLT_EPILOGUE_BGRADA for (in, out) weights, where dy^T is
 *                      A; BGRADB for (out, in), where dy is B) into an fp32 scratch, then
 *                      added to db; where cuBLASLt refuses the epilogue the entry declines
 * Those three epilogues on a bf16 D add the bias as torch.autocast does (its linear
 * layer casts the bias to bf16 and rounds the output once), take the GELU of the fp32
 * pre-activation and round dh once, where the CPU's stand-ins add the f32 bias, take
 * the GELU of the rounded h (as torch does) and round dh twice (the GEMM, then its
 * product with GELU'(h)). Each differs by a rounding: bf16(b) = b (1 + d) with
 * |d| <= 2^-9 moves y by at most 2^-9 |b|; the epilogue's GELU of the unrounded
 * pre-activation a moves g by |GELU'| |a| 2^-9 at most (|GELU'| <= 1.13), as the
 * rounding of h does; a single rounding of dh is the nearer one. All within a unit
 * of bf16 of the largest element, which TOL_BF16 allows (test_cuda_gpt2). What they
 * save is the f32 product's round trip through memory: for GPT-2's c_attn and c_fc, 8
 * bytes an output element written and read again, and for the backward's GELU a read
 * of h and dh and a write of dh (2 bytes each).
 * PP_CUDA_BF16_VIA_F32=1 runs the stand-ins' composition instead (to compare, and the
 * CPU's arithmetic): a bf16 y with a bias from an fp32 scratch with the fp32 bias's
 * epilogue, rounded once into y; h and g from that scratch by one kernel, h =
 * bf16(scratch) and g = bf16(GELU(h)) (gelu.cu); dh = the GEMM rounded, then GELU'(h) in
 * place (gelu.cu). So does every call whose epilogue cuBLASLt refuses.
 * An f32 dy with a bf16 W or x (GPT-2's gradients of the f32 residual stream into
 * attn.c_proj and mlp.c_proj; the head's, the logits' gradient, is bf16) is rounded once to
 * bf16 into a scratch (the_dy below) and the GEMMs run on that copy, as torch.autocast
 * rounds it before its bf16 GEMMs; the bias gradient is then the exact column sums of the
 * f32 dy (colsum.cu, as the f32 entry and the CPU), not the fused BGRAD of the copy, so
 * that it is not rounded (ops_transformer.c: "its bias's gradient is not"). This departs
 * from the stand-ins' arithmetic (the CPU keeps that dy f32) by the rounding of dy only:
 * bf16(dy) = dy (1 + d), |d| <= 2^-9 per element (nearest, 8 significant bits), so each
 * element of dx = dy W^T or dw = dy^T x moves by at most 2^-9 sum_k |dy_k W_k| (or
 * |dy_k x_k|): the bound the bf16 copy of W already puts on the same product, and with
 * independent d's a random walk of sqrt(k) such terms, far below the bf16 unit (2^-8 of
 * the largest element) that TOL_BF16 allows for the rounded output (test_cuda_gpt2).
 * Where cuBLASLt then refuses the GEMM, the entry declines having enqueued only the
 * rounding into the scratch it frees (no operand or output written). Each of those
 * entries rounds dy for its own GEMM; the combined entry (pp_dense_backward's) rounds
 * it once into one scratch and runs both GEMMs on it (the separate entries' code,
 * data_of and weights_of below, so the same bits), halving those passes; so too a dy
 * whose rows do not start on 16 bytes (the head's: blaslt.c copies such operands to a
 * padded pitch): copied once, the copy read by both GEMMs, at the pitch and so with the
 * algorithms and bits each separate entry's GEMM gets from blaslt.c; where its
 * weight GEMM is refused after the data GEMM ran it declines with dx written, and the
 * separate ops then write dx again, the same bits. An x or W f32
 * with a bf16 partner, an empty product or other mixes decline (PP_ERR_UNSUPPORTED,
 * nothing enqueued): the f32 stand-ins then run; so does every call under
 * PP_CUDA_BF16_WIDE (to compare), the rounding included.
 */

static pp_status decline(pp_exec *ex, const char *op, pp_error *err)
{
    return pp_error_set(err, PP_ERR_UNSUPPORTED,
                        "%s: %s in bf16: operands cuBLASLt does not take (A and B bf16, a "
                        "product that is not empty)",
                        ex->dev->name, op);
}

/* a launch on the fp32 scratch of n elements that via_f32 fills */
typedef cudaError_t (*after_fn)(pp_exec *ex, cudaStream_t s, int64_t n, const float *tmp,
                                void *arg1, void *arg2);

/* mm's product of bf16 a and b (n elements) into an fp32 scratch, then the launch then */

static pp_status via_f32(pp_exec *ex, const pp_cuda_lt_matmul *mm, const uint16_t *a,
                         const uint16_t *b, int64_t n, after_fn then, void *arg1, void *arg2,
                         pp_error *err)
{
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
    const size_t bytes = (size_t)n * sizeof(float);
    float *tmp;
    PP_TRY(pp_cuda_scratch_alloc(ex, bytes, (void **)&tmp, err));
    pp_status s = pp_cuda_lt_matmul_bf16(ex, mm, a, b, tmp, err);
    if (s == PP_OK) s = PP_CUDA(ex->dev, err, then(ex, ce->stream, n, tmp, arg1, arg2));
    pp_cuda_scratch_free(ex, tmp, bytes);
    return s;
}

static cudaError_t round_then(pp_exec *ex, cudaStream_t s, int64_t n, const float *tmp, void *y,
                              void *unused)
{
    (void)unused;
    return pp_cuda_launch_bf16_from_f32(s, pp_cuda_grid(ex, n, PP_CUDA_BLOCK), n, tmp, y);
}

static cudaError_t gelu_then(pp_exec *ex, cudaStream_t s, int64_t n, const float *tmp, void *h,
                             void *g)
{
    return pp_cuda_launch_gelu_from_f32(s, pp_cuda_max_grid(ex), n, tmp, h, g);
}

/* mm on bf16 a and b, its epilogue writing D (and aux) in bf16, the fp32
 * bias b (mm.m elements, or NULL) rounded to bf16 into a scratch for it to
 * read (see above): *done when it ran (or failed); not done, no output
 * written, where PP_CUDA_BF16_VIA_F32 is set or cuBLASLt refuses the
 * epilogue: the caller then runs the composition through fp32. */
static pp_status epilogue_bf16(pp_exec *ex, pp_cuda_lt_matmul mm, const float *b,
                               const uint16_t *a, const uint16_t *bm, void *d, bool *done,
                               pp_error *err)
{
    static int via = -1;
    *done = false;
    if (pp_cuda_env_on("PP_CUDA_BF16_VIA_F32", &via)) return PP_OK;
    mm.d_bf16 = true;
    uint16_t *copy = NULL;
    const size_t bytes = b ? (size_t)mm.m * sizeof *copy : 0;
    if (b) {
        pp_cuda_exec *ce;
        PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
        PP_TRY(pp_cuda_scratch_alloc(ex, bytes, (void **)&copy, err));
        pp_status s = PP_CUDA(ex->dev, err,
                              pp_cuda_launch_bf16_from_f32(ce->stream,
                                                           pp_cuda_grid(ex, mm.m, PP_CUDA_BLOCK),
                                                           mm.m, b, copy));
        if (s != PP_OK) {
            pp_cuda_scratch_free(ex, copy, bytes);
            return s;
        }
        mm.bias = copy;
    }
    pp_error e1;
    pp_status s = pp_cuda_lt_matmul_bf16(ex, &mm, a, bm, d, &e1);
    pp_cuda_scratch_free(ex, copy, bytes);
    if (s == PP_ERR_UNSUPPORTED) return PP_OK;
    *done = true;
    if (s != PP_OK && err) *err = e1;
    return s;
}

/* dy (rows x out) as the bf16 GEMMs take it, made once for every GEMM that
 * reads it: a bf16 dy as it is; an f32 dy rounded once to bf16
 * (pp_bf16_from_f32's bits, kernels.cu) into a scratch; and where its rows do
 * not start on 16 bytes (the head's: 50257 columns) a copy at the padded
 * pitch the GEMMs would otherwise each make (pp_cuda_lt_pad), zeros past
 * out in each row, so that the data GEMM pads its k (out) over them without
 * another copy (b_zero_tail, blaslt.c). the_dy_free releases both. */
typedef struct the_dy {
    const uint16_t *data;
    int64_t ld; /* its pitch in elements: out, or out padded */
    void *tmp, *pad;
    size_t bytes, pad_bytes;
} the_dy;

static void the_dy_free(pp_exec *ex, the_dy *d)
{
    pp_cuda_scratch_free(ex, d->pad, d->pad_bytes);
    pp_cuda_scratch_free(ex, d->tmp, d->bytes);
    *d = (the_dy){0};
}

static pp_status the_dy_of(pp_exec *ex, int64_t rows, int out, pp_act dy, the_dy *d,
                           pp_error *err)
{
    *d = (the_dy){.data = dy.data, .ld = out};
    pp_status s = PP_OK;
    if (!dy.bf16) {
        pp_cuda_exec *ce;
        PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
        const int64_t n = rows * out;
        const size_t bytes = (size_t)n * sizeof(uint16_t);
        void *tmp;
        PP_TRY(pp_cuda_scratch_alloc(ex, bytes, &tmp, err));
        *d = (the_dy){.data = tmp, .ld = out, .tmp = tmp, .bytes = bytes};
        s = PP_CUDA(ex->dev, err,
                    pp_cuda_launch_bf16_from_f32(ce->stream, pp_cuda_grid(ex, n, PP_CUDA_BLOCK),
                                                 n, dy.data, tmp));
    }
    const void *p = d->data;
    if (s == PP_OK)
        s = pp_cuda_lt_pad(ex, &p, &d->ld, out, rows, sizeof(uint16_t), &d->pad, &d->pad_bytes,
                           err);
    if (s != PP_OK) {
        the_dy_free(ex, d);
        return s;
    }
    d->data = p;
    return PP_OK;
}

pp_status pp_cuda_dense_forward_bf16(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                     pp_act x, pp_act w, const float *b, pp_act y,
                                     pp_error *err)
{
    PP_TRY(pp_cuda_bf16_wide(ex, "dense", err));
    if (!x.bf16 || !w.bf16 || in == 0) return decline(ex, "dense", err);
    if (rows == 0 || out == 0) return PP_OK;
    const pp_cuda_lt_matmul mm = {.ta = w_out_in, .m = out, .n = rows, .k = in,
                                  .lda = w_out_in ? in : out, .ldb = in, .ldd = out,
                                  .epi = b ? PP_LT_EPI_BIAS : PP_LT_EPI_NONE, .bias = b,
                                  .d_bf16 = y.bf16 && !b};
    if (!y.bf16 || !b) return pp_cuda_lt_matmul_bf16(ex, &mm, w.data, x.data, y.data, err);
    bool done;
    PP_TRY(epilogue_bf16(ex, mm, b, w.data, x.data, y.data, &done, err));
    if (done) return PP_OK;
    return via_f32(ex, &mm, w.data, x.data, rows * out, round_then, y.data, NULL, err);
}

pp_status pp_cuda_dense_gelu_forward_bf16(pp_exec *ex, int64_t rows, int in, int out,
                                          bool w_out_in, pp_act x, pp_act w, const float *b,
                                          pp_act h, pp_act g, pp_error *err)
{
    PP_TRY(pp_cuda_bf16_wide(ex, "dense + GELU", err));
    PP_TRY(pp_cuda_unfused(ex, "dense + GELU", err));
    if (!x.bf16 || !w.bf16 || !h.bf16 || !g.bf16 || in == 0)
        return decline(ex, "dense + GELU", err);
    if (rows == 0 || out == 0) return PP_OK;
    const pp_cuda_lt_matmul mm = {.ta = w_out_in, .m = out, .n = rows, .k = in,
                                  .lda = w_out_in ? in : out, .ldb = in, .ldd = out,
                                  .epi = b ? PP_LT_EPI_BIAS : PP_LT_EPI_NONE, .bias = b};
    pp_cuda_lt_matmul fused = mm;
    fused.epi = b ? PP_LT_EPI_GELU_AUX_BIAS : PP_LT_EPI_GELU_AUX, fused.aux = h.data;
    fused.ld_aux = out;
    bool done;
    PP_TRY(epilogue_bf16(ex, fused, b, w.data, x.data, g.data, &done, err));
    if (done) return PP_OK;
    return via_f32(ex, &mm, w.data, x.data, rows * out, gelu_then, h.data, g.data, err);
}

/* dx = dy W^T from d (dy as the bf16 GEMMs take it); with h (data not NULL,
 * dx bf16) dx through GELU'(h): the DGELU epilogue, else (see above) in place
 * after it (gelu.cu) */
static pp_status data_of(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in, pp_act w,
                         const the_dy *d, pp_act h, pp_act dx, pp_error *err)
{
    const pp_cuda_lt_matmul mm = {.ta = !w_out_in, .m = in, .n = rows, .k = out,
                                  .lda = w_out_in ? in : out, .ldb = d->ld, .ldd = in,
                                  .d_bf16 = dx.bf16, .b_zero_tail = true};
    if (h.data) {
        pp_cuda_lt_matmul fused = mm;
        fused.epi = PP_LT_EPI_DGELU, fused.aux = h.data, fused.ld_aux = in;
        bool done;
        PP_TRY(epilogue_bf16(ex, fused, NULL, w.data, d->data, dx.data, &done, err));
        if (done) return PP_OK;
    }
    PP_TRY(pp_cuda_lt_matmul_bf16(ex, &mm, w.data, d->data, dx.data, err));
    if (!h.data) return PP_OK;
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_gelu_mixed(ce->stream, pp_cuda_max_grid(ex), rows * in, true,
                                             h.data, dx.data, true, dx.data));
}

/* dw += the product of x and d (dy as the bf16 GEMMs take it), db += the
 * column sums of dy: an f32 dy's exact sums (bias_grad), a bf16 dy's by the
 * GEMM's BGRAD epilogue */
static pp_status weights_of(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in, pp_act x,
                            pp_act dy, const the_dy *d, float *dw, float *db, pp_error *err)
{
    pp_cuda_lt_matmul mm =
        w_out_in ? (pp_cuda_lt_matmul){.tb = true, .m = in, .n = out, .k = rows, .lda = in,
                                       .ldb = d->ld, .ldd = in, .beta = 1.0f}
                 : (pp_cuda_lt_matmul){.tb = true, .m = out, .n = in, .k = rows, .lda = d->ld,
                                       .ldb = in, .ldd = out, .beta = 1.0f,
                                       .a_zero_tail = true};
    const uint16_t *a = w_out_in ? x.data : d->data, *b = w_out_in ? d->data : x.data;
    if (!dy.bf16) { /* the GEMM on dy rounded, the bias gradient from the f32 dy */
        PP_TRY(pp_cuda_lt_matmul_bf16(ex, &mm, a, b, dw, err));
        return db ? bias_grad(ex, rows, out, dy.data, db, err) : PP_OK;
    }
    if (!db) return pp_cuda_lt_matmul_bf16(ex, &mm, a, b, dw, err);
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
    const size_t bytes = (size_t)out * sizeof(float);
    float *part;
    PP_TRY(pp_cuda_scratch_alloc(ex, bytes, (void **)&part, err));
    mm.epi = w_out_in ? PP_LT_EPI_BGRADB : PP_LT_EPI_BGRADA;
    mm.dbias = part;
    pp_status s = pp_cuda_lt_matmul_bf16(ex, &mm, a, b, dw, err);
    if (s == PP_OK) /* db = part + db */
        s = PP_CUDA(ex->dev, err,
                    pp_cuda_launch_elementwise(ce->stream, pp_cuda_max_grid(ex), PP_CUDA_EW_ADD,
                                               out, part, db, db));
    pp_cuda_scratch_free(ex, part, bytes);
    return s;
}

pp_status pp_cuda_dense_backward_data_bf16(pp_exec *ex, int64_t rows, int in, int out,
                                           bool w_out_in, pp_act w, pp_act dy, pp_act dx,
                                           pp_error *err)
{
    PP_TRY(pp_cuda_bf16_wide(ex, "dense backward", err));
    if (!w.bf16 || out == 0) return decline(ex, "dense backward", err);
    if (rows == 0 || in == 0) return PP_OK;
    the_dy d;
    PP_TRY(the_dy_of(ex, rows, out, dy, &d, err));
    pp_status s = data_of(ex, rows, in, out, w_out_in, w, &d, (pp_act){0}, dx, err);
    the_dy_free(ex, &d);
    return s;
}

pp_status pp_cuda_dense_backward_data_gelu_bf16(pp_exec *ex, int64_t rows, int in, int out,
                                                bool w_out_in, pp_act w, pp_act dy, pp_act h,
                                                pp_act dh, pp_error *err)
{
    PP_TRY(pp_cuda_bf16_wide(ex, "dense backward + GELU", err));
    PP_TRY(pp_cuda_unfused(ex, "dense backward + GELU", err));
    if (!h.bf16 || !dh.bf16) return decline(ex, "dense backward + GELU", err);
    if (!w.bf16 || out == 0) return decline(ex, "dense backward", err);
    if (rows == 0 || in == 0) return PP_OK;
    the_dy d;
    PP_TRY(the_dy_of(ex, rows, out, dy, &d, err));
    pp_status s = data_of(ex, rows, in, out, w_out_in, w, &d, h, dh, err);
    the_dy_free(ex, &d);
    return s;
}

pp_status pp_cuda_dense_backward_weights_bf16(pp_exec *ex, int64_t rows, int in, int out,
                                              bool w_out_in, pp_act x, pp_act dy, float *dw,
                                              float *db, pp_error *err)
{
    PP_TRY(pp_cuda_bf16_wide(ex, "dense weight gradient", err));
    if (!x.bf16 || in == 0) return decline(ex, "dense weight gradient", err);
    if (rows == 0 || out == 0) return PP_OK;
    the_dy d;
    PP_TRY(the_dy_of(ex, rows, out, dy, &d, err));
    pp_status s = weights_of(ex, rows, in, out, w_out_in, x, dy, &d, dw, db, err);
    the_dy_free(ex, &d);
    return s;
}

/* The three entries above in one: the declines of each that runs, then dy
 * as the GEMMs take it made once for both. */
pp_status pp_cuda_dense_backward_bf16(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                      pp_act w, pp_act x, pp_act dy, pp_act h, pp_act dx,
                                      float *dw, float *db, pp_error *err)
{
    PP_TRY(pp_cuda_bf16_wide(ex, "dense backward", err));
    if (h.data) {
        PP_TRY(pp_cuda_unfused(ex, "dense backward + GELU", err));
        if (!h.bf16 || !dx.bf16) return decline(ex, "dense backward + GELU", err);
    }
    if (dx.data && (!w.bf16 || out == 0)) return decline(ex, "dense backward", err);
    if (!x.bf16 || in == 0) return decline(ex, "dense weight gradient", err);
    if (rows == 0 || out == 0) return PP_OK;
    the_dy d;
    PP_TRY(the_dy_of(ex, rows, out, dy, &d, err));
    pp_status s = dx.data ? data_of(ex, rows, in, out, w_out_in, w, &d, h, dx, err) : PP_OK;
    if (s == PP_OK) s = weights_of(ex, rows, in, out, w_out_in, x, dy, &d, dw, db, err);
    the_dy_free(ex, &d);
    return s;
}
