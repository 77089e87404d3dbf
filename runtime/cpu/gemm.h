/*
 * gemm.h - a matrix product on the device's worker pool (internal to
 * runtime/cpu), for the kernels whose GEMMs are large enough to share: the
 * dense layers of a transformer and its output head.
 *
 * C (m, n) = op(A) op(B), row-major, cut into output tiles whose sizes
 * depend on (m, n) alone; each tile is one single-threaded cblas_sgemm over
 * the whole reduction k, so every element is computed by the same calls
 * whatever the number of threads (and whichever thread runs its tile), and
 * tiles write disjoint parts of C.
 */
#ifndef PP_CPU_GEMM_H
#define PP_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/exec.h"
#include "runtime/core/status.h"

/* How the product meets C. */
typedef enum pp_cpu_gemm_mode {
    PP_GEMM_SET = 0,  /* C = AB */
    PP_GEMM_ADD,      /* C = C + AB as one sgemm with beta 1 (C's values enter its sums:
                         a bias written into C first) */
    PP_GEMM_ADD_APART /* C += AB, AB computed on its own first (each tile into scratch,
                         then added): C + AB whatever C held, the contract of parameter
                         gradients (runtime/core/ops.h) */
} pp_cpu_gemm_mode;

typedef struct pp_cpu_gemm_args {
    bool ta, tb;        /* A is stored (k, m) / B is stored (n, k) */
    int m, n, k;
    const float *a;
    int lda;
    const float *b;
    int ldb;
    float *c;
    int ldc;
    pp_cpu_gemm_mode mode;
} pp_cpu_gemm_args;

/* Runs the product on ex's pool. PP_GEMM_ADD_APART takes scratch from ex's
 * workspace (one tile per thread). */
pp_status pp_cpu_gemm(pp_exec *ex, const pp_cpu_gemm_args *g, pp_error *err);

#endif
