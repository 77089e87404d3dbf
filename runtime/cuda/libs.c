/* libs.c - cuBLAS and cuBLASLt opened on their first use (runtime/core/lazy_lib.h).
 *
 * The backend calls the functions below by their own names; these definitions
 * (the headers' declarations, which the compiler checks them against) open
 * the library at the first call, when a CUDA device is set up, and pass every
 * call on. A process that never sets up a CUDA device, a CPU run or a plan's
 * validation, never maps the two libraries (cuBLASLt: 540 MB, 353,000
 * relocations at load). Where a library or one of its symbols cannot be found,
 * every call returns CUBLAS_STATUS_NOT_INITIALIZED and the status's name and
 * string say what was missing, which the backend's errors print with the
 * device (exec.c, pp_cuda_fail_blas). */
#include "libs.h"

/* cublasLt.h declares a function with () parameters */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <string.h>

#include "runtime/core/lazy_lib.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* X(return type, name, (parameters), (arguments)) */
#define CUBLAS_FNS(X)                                                                            \
    X(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle))                      \
    X(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle), (handle))                       \
    X(cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode),             \
      (handle, mode))                                                                            \
    X(cublasStatus_t, cublasSetPointerMode_v2, (cublasHandle_t handle, cublasPointerMode_t mode), \
      (handle, mode))                                                                            \
    X(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream),          \
      (handle, stream))                                                                          \
    X(cublasStatus_t, cublasSetWorkspace_v2,                                                     \
      (cublasHandle_t handle, void *workspace, size_t bytes), (handle, workspace, bytes))        \
    X(cublasStatus_t, cublasSgemm_v2,                                                            \
      (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,   \
       const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,  \
       float *C, int ldc),                                                                       \
      (handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))

#define CUBLASLT_FNS(X)                                                                          \
    X(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle))                     \
    X(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle), (handle))                      \
    X(cublasStatus_t, cublasLtMatmul,                                                            \
      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,     \
       cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,                \
       const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,                   \
       cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,          \
       size_t bytes, cudaStream_t stream),                                                       \
      (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,       \
       bytes, stream))                                                                           \
    X(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                            \
      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,         \
       cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc, \
       cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[], \
       int *returned),                                                                           \
      (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned))            \
    X(cublasStatus_t, cublasLtMatmulDescCreate,                                                  \
      (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),          \
      (desc, compute, scale))                                                                    \
    X(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))            \
    X(cublasStatus_t, cublasLtMatmulDescSetAttribute,                                            \
      (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *buf,          \
       size_t bytes),                                                                            \
      (desc, attr, buf, bytes))                                                                  \
    X(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref),       \
      (pref))                                                                                    \
    X(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref)) \
    X(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                                      \
      (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,               \
       const void *buf, size_t bytes),                                                           \
      (pref, attr, buf, bytes))                                                                  \
    X(cublasStatus_t, cublasLtMatrixLayoutCreate,                                                \
      (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols,         \
       int64_t ld),                                                                              \
      (layout, type, rows, cols, ld))                                                            \
    X(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))

/* the status names, resolved with the rest but called apart (their failure is a string) */
#define CUBLAS_NAME_FNS(X)                                                                       \
    X(cublasGetStatusName)                                                                       \
    X(cublasGetStatusString)
#define CUBLASLT_NAME_FNS(X) X(cublasLtGetStatusName)

#define NAME(r, f, p, a) #f,
#define NAME1(f) #f,
#define INDEX(r, f, p, a) I_##f,
#define INDEX1(f) I_##f,

enum { CUBLAS_FNS(INDEX) CUBLAS_NAME_FNS(INDEX1) N_CUBLAS };
enum { CUBLASLT_FNS(INDEX) CUBLASLT_NAME_FNS(INDEX1) N_CUBLASLT };

static const char *const cublas_names[] = {CUBLAS_FNS(NAME) CUBLAS_NAME_FNS(NAME1) NULL};
static const char *const cublaslt_names[] = {CUBLASLT_FNS(NAME) CUBLASLT_NAME_FNS(NAME1) NULL};
static void *cublas_fns[N_CUBLAS];
static void *cublaslt_fns[N_CUBLASLT];

/* beside: a function of the CUDA runtime, linked normally, whose folder holds
 * cuBLAS in the toolkit's layout and in the wheels' */
static pp_lazy_lib cublas_lib = {
    .soname = "libcublas.so." STR(CUBLAS_VER_MAJOR),
    .beside = (void (*)(void))cudaGetDeviceCount,
    .names = cublas_names,
    .fns = cublas_fns,
};
static pp_lazy_lib cublaslt_lib = {
    .soname = "libcublasLt.so." STR(CUBLAS_VER_MAJOR),
    .beside = (void (*)(void))cudaGetDeviceCount,
    .names = cublaslt_names,
    .fns = cublaslt_fns,
};

#define DEFINE(lib, r, f, p, a)                                                                  \
    r f p                                                                                        \
    {                                                                                            \
        r(*fn) p;                                                                                \
        if (!pp_lazy_lib_ready(&lib)) return CUBLAS_STATUS_NOT_INITIALIZED;                      \
        memcpy(&fn, &lib.fns[I_##f], sizeof fn);                                                 \
        return fn a;                                                                             \
    }
#define DEFINE_CUBLAS(r, f, p, a) DEFINE(cublas_lib, r, f, p, a)
#define DEFINE_CUBLASLT(r, f, p, a) DEFINE(cublaslt_lib, r, f, p, a)

CUBLAS_FNS(DEFINE_CUBLAS)
CUBLASLT_FNS(DEFINE_CUBLASLT)

/* a status's name or string; where the library is missing, missing (NULL: what was) */
static const char *status_text(pp_lazy_lib *lib, int index, cublasStatus_t status,
                               const char *missing)
{
    const char *(*fn)(cublasStatus_t);
    if (!pp_lazy_lib_ready(lib)) return missing ? missing : lib->why;
    memcpy(&fn, &lib->fns[index], sizeof fn);
    return fn(status);
}

const char *cublasGetStatusName(cublasStatus_t status)
{
    return status_text(&cublas_lib, I_cublasGetStatusName, status, "cuBLAS not loaded");
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    return status_text(&cublas_lib, I_cublasGetStatusString, status, NULL);
}

const char *cublasLtGetStatusName(cublasStatus_t status)
{
    return status_text(&cublaslt_lib, I_cublasLtGetStatusName, status, NULL);
}

bool pp_cuda_libs_ready(const char **why)
{
    if (!pp_lazy_lib_ready(&cublaslt_lib)) {
        if (why) *why = cublaslt_lib.why;
        return false;
    }
    if (!pp_lazy_lib_ready(&cublas_lib)) {
        if (why) *why = cublas_lib.why;
        return false;
    }
    if (why) *why = "";
    return true;
}
