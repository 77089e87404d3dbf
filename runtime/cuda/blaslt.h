/*
 * blaslt.h - GEMMs through cuBLASLt: the fully connected layer in bf16, with
 * fp32 accumulation (compute type CUBLAS_COMPUTE_32F, scale type fp32), and
 * fp32 products with fused epilogues (pp_cuda_lt_matmul_f32: the
 * transformer's dense layers, dense.c).
 *
 * Shapes (row-major, as ops.h): x (n, in), w (out, in), y and dy (n, out),
 * bias, db (out), dx (n, in), dw (out, in). bf16 tensors are uint16_t bit
 * patterns. All pointers are device memory of ex's device; work is enqueued
 * on ex's stream.
 *
 * Per exec, each GEMM shape (kind, m, n, k and the pointers' alignments up to
 * 256 bytes) gets its descriptors and cuBLASLt's first heuristic algorithm
 * within PP_LT_WS_MAX of workspace at its first use; later calls only look
 * them up. The workspace comes from pp_exec_workspace. The ones vector of the
 * bias gradient (n bf16 ones) is allocated and filled at the first call of a
 * larger n, which synchronises the stream then.
 *
 * Thread safety: as every op, one exec is used by one thread at a time.
 */
#ifndef PP_CUDA_BLASLT_H
#define PP_CUDA_BLASLT_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/exec.h"

/* Workspace one cuBLASLt GEMM may use. */
#define PP_LT_WS_MAX ((size_t)32 << 20)

/* y = x w^T + bias: y is bf16 (uint16_t) or, with y_f32, fp32 (float). bias
 * (fp32) is added in the GEMM's epilogue; NULL for none. cuBLASLt's bias
 * epilogue reads a bias of D's type only, so a bf16 y with a bias is written
 * in fp32 into a stream-ordered temporary that is then rounded to bf16 (the
 * fp32 sum rounded once, as the CPU backend). PP_ERR_UNSUPPORTED (nothing
 * enqueued) when cuBLASLt has no algorithm for the shape or refuses the
 * combination (NOT_SUPPORTED or INVALID_VALUE from its heuristic): the
 * caller then runs the op another way. */
pp_status pp_cuda_lt_linear_forward(pp_exec *ex, int n, int in, int out, const uint16_t *x,
                                    const uint16_t *w, const float *bias, void *y, bool y_f32,
                                    pp_error *err);

/* From bf16 x, w and dy: dx = dy w (bf16, overwritten; NULL: not computed),
 * dw += dy^T x (fp32; NULL: not computed), db += the column sums of dy
 * (fp32; NULL: not computed). The sums accumulate in fp32. x is read only
 * for dw and w only for dx (either may be NULL when its output is). */
pp_status pp_cuda_lt_linear_backward(pp_exec *ex, int n, int in, int out, const uint16_t *x,
                                     const uint16_t *w, const uint16_t *dy, uint16_t *dx,
                                     float *dw, float *db, pp_error *err);

/* What a GEMM's epilogue does with its product AB (cuBLASLt's
 * CUBLASLT_EPILOGUE_*, in column-major terms: bias has D's m rows). */
typedef enum pp_cuda_lt_epi {
    PP_LT_EPI_NONE = 0,      /* D = AB (+ beta D) */
    PP_LT_EPI_BIAS,          /* D = AB + bias */
    PP_LT_EPI_GELU_AUX_BIAS, /* aux = AB + bias (the pre-activation, kept); D = GELU(aux), the
                                tanh approximation */
    PP_LT_EPI_GELU_AUX,      /* the same without a bias: aux = AB, D = GELU(aux) */
    PP_LT_EPI_DGELU,         /* D = AB * GELU'(aux): aux is the forward's pre-activation */
    PP_LT_EPI_BGRADA,        /* D = AB; dbias (m, fp32) = the sums of A's rows over k
                                (CUBLASLT_EPILOGUE_BGRADA, overwritten) */
    PP_LT_EPI_BGRADB,        /* D = AB; dbias (n, fp32) = the sums of op(B)'s columns over
                                k (CUBLASLT_EPILOGUE_BGRADB, overwritten) */
} pp_cuda_lt_epi;

/* One fp32 GEMM, column-major: D (m, n) = op(A) (m, k) op(B) (k, n) [+ beta
 * D], through epi. */
typedef struct pp_cuda_lt_matmul {
    bool ta, tb;            /* op(A) = A^T, op(B) = B^T */
    int64_t m, n, k;
    int64_t lda, ldb, ldd;  /* leading dimensions of A, B and D as stored */
    bool tf32;              /* TF32 tensor cores allowed (CUBLAS_COMPUTE_32F_FAST_TF32); else
                               IEEE fp32 (CUBLAS_COMPUTE_32F) */
    float beta;             /* 0, or 1: D is added to (a parameter gradient) */
    pp_cuda_lt_epi epi;
    const void *bias;       /* (m) for PP_LT_EPI_BIAS and _GELU_AUX_BIAS, in D's type: fp32
                               (float) with an fp32 D, bf16 (uint16_t bit patterns) with a
                               bf16 D (cuBLASLt reads a bias of D's type only) */
    const void *aux;        /* (m, n) of D's type, leading dimension ld_aux, for the GELU
                               epilogues (written by _GELU_AUX*, read by _DGELU) */
    int64_t ld_aux;
    float *dbias;           /* (m) or (n) fp32 for PP_LT_EPI_BGRADA and _BGRADB (written) */
    bool d_bf16;            /* pp_cuda_lt_matmul_bf16: D (and aux) bf16, else fp32 */
    bool a_zero_tail;       /* A's elements past its stored rows, up to lda, are zeros (a
                               pp_cuda_lt_pad copy): a k or m padded up to lda reads them */
    bool b_zero_tail;       /* the same for B and ldb */
} pp_cuda_lt_matmul;

/* D = the product of fp32 a and b as mm says, on ex's stream. Per exec,
 * each shape (with its epilogue, math and alignments) gets its descriptors
 * and cuBLASLt's first heuristic algorithm at its first use, as the bf16
 * GEMMs above. An operand whose leading dimension is not a whole number of
 * 16 bytes (GPT-2's logits: 50257 columns) is copied to a padded pitch in a
 * stream-ordered scratch first, and such a D back after; an m, or a k that an
 * operand stores contiguously, that is not a whole number of 16 bytes (the
 * head's vocabulary) is padded likewise, the operands copied with zero rows
 * or columns (blaslt.c says why; PP_CUDA_UNPADDED=1: neither,
 * PP_CUDA_PITCH_ONLY=1: the pitch only). PP_ERR_UNSUPPORTED (no operand or output
 * written) when cuBLASLt has no algorithm for it or refuses the combination:
 * the caller then runs it another way. */
pp_status pp_cuda_lt_matmul_f32(pp_exec *ex, const pp_cuda_lt_matmul *mm, const float *a,
                                const float *b, float *d, pp_error *err);

/* The same with bf16 a and b (bit patterns), fp32 accumulation and scale
 * (CUBLAS_COMPUTE_32F: bf16 tensor cores), D bf16 where mm->d_bf16 (aux
 * then bf16 too: cuBLASLt's aux takes D's type), else fp32; mm->tf32 is
 * ignored. The bias (PP_LT_EPI_BIAS, _GELU_AUX_BIAS) is of D's type: with
 * a bf16 D, bf16 bit patterns (the caller rounds an fp32 bias: dense.c). */
pp_status pp_cuda_lt_matmul_bf16(pp_exec *ex, const pp_cuda_lt_matmul *mm, const uint16_t *a,
                                 const uint16_t *b, void *d, pp_error *err);

/* An operand of rows x cols (column-major at pitch *ld, elements of es bytes)
 * at the pitch the GEMMs above would copy it to: where *ld is not a whole
 * number of 16 bytes (and PP_CUDA_UNPADDED is unset), a copy at the padded
 * pitch in a stream-ordered scratch, its rows past rows zero (a GEMM given
 * a_zero_tail or b_zero_tail for it pads its k over them without a copy), *p
 * and *ld then the copy's and *scratch,
 * *bytes what to give pp_cuda_scratch_free after the last GEMM reading it;
 * else nothing changes (*scratch NULL). For an operand that several GEMMs
 * read (dense.c: a gradient dy), so that it is copied once. */
pp_status pp_cuda_lt_pad(pp_exec *ex, const void **p, int64_t *ld, int64_t rows, int64_t cols,
                         size_t es, void **scratch, size_t *bytes, pp_error *err);

/* Releases ex's cuBLASLt handle, descriptors and ones vector (the exec's
 * destroy calls it). Safe to call more than once. */
void pp_cuda_lt_cache_free(pp_exec *ex);

#endif
