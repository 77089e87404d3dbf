/*
 * blaslt.c - GEMMs through cuBLASLt: the bf16 fully connected layer, and
 * the fp32 products with epilogues the transformer's dense layers run
 * (pp_cuda_lt_matmul_f32, dense.c). The contracts are in blaslt.h.
 *
 * Row-major x (n,in), w (out,in), y (n,out) are the column-major matrices
 * x^T (in,n), w^T (in,out), y^T (out,n), so (in column-major terms, as in
 * blas.c):
 *   y^T  = w x^T (+ bias per row)   (T, N, m = out, n = n,   k = in)
 *   dx^T = w^T dy^T                 (N, N, m = in,  n = n,   k = out)
 *   dw^T += x^T dy                  (N, T, m = in,  n = out, k = n), beta 1
 *   db  += dy^T ones(n)             (N, N, m = out, n = 1,   k = n), beta 1
 * A and B are bf16; C = D are bf16 (y, dx) or fp32 (y with y_f32, dw, db);
 * compute CUBLAS_COMPUTE_32F with fp32 scale type.
 */
#include <stdlib.h>
#include <string.h>

/* cublasLt.h declares a function with () parameters */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop

#include "blaslt.h"
#include "internal.h"
#include "kernels.h"

typedef enum lt_kind {
    LT_FWD = 0, LT_DX = 1, LT_DW = 2, LT_DB = 3, LT_F32 = 4, LT_BF16 = 5
} lt_kind;

static const char *const kind_name[] = {"forward y = x w^T + b", "backward dx = dy w",
                                        "backward dw += dy^T x", "backward db += sum dy",
                                        "fp32 GEMM", "bf16 GEMM"};

static const char *const epi_name[] = {"", ", bias epilogue", ", GELU + aux + bias epilogue",
                                       ", GELU + aux epilogue", ", GELU backward (aux) epilogue",
                                       ", fp32 bias gradient of A", ", fp32 bias gradient of B"};

/* One GEMM's shape: the key of its cache entry, compared as bytes (all
 * fields int64_t: no padding). */
typedef struct lt_gemm {
    int64_t kind;          /* lt_kind */
    int64_t ta, tb;        /* cublasOperation_t of A and B */
    int64_t m, n, k;
    int64_t lda, ldb, ldc;
    int64_t ab, cd;        /* cudaDataType_t of A, B and of C, D */
    int64_t compute;       /* cublasComputeType_t */
    int64_t epi;           /* pp_cuda_lt_epi (a bias of D's type, lt_bias_type) */
    int64_t ld_aux;        /* the aux matrix's leading dimension (GELU epilogues), else 0 */
    int64_t align[3];      /* bytes A, B, C = D are aligned to, at most 256 */
} lt_gemm;

typedef struct lt_entry {
    lt_gemm key;
    bool have;                     /* false: cuBLASLt offered no algorithm */
    cublasStatus_t refused;        /* the heuristic's status when it refused (or 0) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} lt_entry;

struct pp_cuda_lt_cache {
    cublasLtHandle_t handle;
    lt_entry *e;                   /* grows on new shapes (first step only) */
    int n, cap;
    uint16_t *ones;                /* n_ones bf16 ones, for db */
    int64_t n_ones;
};

static int64_t align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int64_t r = 1;
    while (r < 256 && !(a & r)) r <<= 1;
    return r;
}

/* a bias read by the epilogue */
static bool lt_reads_bias(const lt_gemm *g)
{
    return g->epi == PP_LT_EPI_BIAS || g->epi == PP_LT_EPI_GELU_AUX_BIAS;
}

/* a bias read (or, for the gradients, written) by the epilogue */
static bool lt_has_bias(const lt_gemm *g)
{
    return lt_reads_bias(g) || g->epi == PP_LT_EPI_BGRADA || g->epi == PP_LT_EPI_BGRADB;
}

/* the bias's type: D's where the epilogue reads one (cuBLASLt reads a bias
 * of D's type only: bf16 for a bf16 D), fp32 for the gradients (their D is
 * fp32 here) */
static cudaDataType_t lt_bias_type(const lt_gemm *g)
{
    return lt_reads_bias(g) && g->cd == CUDA_R_16BF ? CUDA_R_16BF : CUDA_R_32F;
}

static void describe(char *buf, size_t n, const lt_gemm *g)
{
    snprintf(buf, n,
             "cuBLASLt %s (m %lld, n %lld, k %lld, %s x %s -> %s%s%s%s, alignments "
             "%lld/%lld/%lld)",
             kind_name[g->kind], (long long)g->m, (long long)g->n, (long long)g->k,
             g->ta == CUBLAS_OP_T ? "A^T" : "A", g->tb == CUBLAS_OP_T ? "B^T" : "B",
             g->cd == CUDA_R_32F ? "fp32" : "bf16",
             g->compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? " (TF32)" : "", epi_name[g->epi],
             !lt_reads_bias(g)                   ? ""
             : lt_bias_type(g) == CUDA_R_16BF ? " (bf16 bias)"
                                              : " (fp32 bias)",
             (long long)g->align[0], (long long)g->align[1], (long long)g->align[2]);
}

/* ---- state ---------------------------------------------------------------------- */

static pp_status lt_state(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_lt_cache **out, pp_error *err)
{
    if (!ce->lt) {
        pp_cuda_lt_cache *c = calloc(1, sizeof *c);
        if (!c)
            return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (cuBLASLt)",
                                ex->dev->name);
        pp_status s = PP_CUDA(ex->dev, err, cublasLtCreate(&c->handle));
        if (s != PP_OK) {
            free(c);
            return s;
        }
        ce->lt = c;
    }
    *out = ce->lt;
    return PP_OK;
}

static void entry_free(pp_exec *ex, lt_entry *e)
{
    if (e->la) (void)PP_CUDA(ex->dev, NULL, cublasLtMatrixLayoutDestroy(e->la));
    if (e->lb) (void)PP_CUDA(ex->dev, NULL, cublasLtMatrixLayoutDestroy(e->lb));
    if (e->lc) (void)PP_CUDA(ex->dev, NULL, cublasLtMatrixLayoutDestroy(e->lc));
    if (e->desc) (void)PP_CUDA(ex->dev, NULL, cublasLtMatmulDescDestroy(e->desc));
    memset(e, 0, sizeof *e);
}

void pp_cuda_lt_cache_free(pp_exec *ex)
{
    pp_cuda_exec *ce = ex ? pp_cuda_ex(ex) : NULL;
    if (!ce || !ce->lt) return;
    pp_cuda_lt_cache *c = ce->lt;
    for (int i = 0; i < c->n; i++) entry_free(ex, &c->e[i]);
    if (c->ones) pp_device_free(ex->dev, c->ones, (size_t)c->n_ones * sizeof *c->ones);
    if (c->handle) (void)PP_CUDA(ex->dev, NULL, cublasLtDestroy(c->handle));
    free(c->e);
    free(c);
    ce->lt = NULL;
}

/* ---- descriptors and the algorithm ---------------------------------------------- */

static pp_status make_descs(pp_exec *ex, const lt_gemm *g, lt_entry *e, pp_error *err)
{
    pp_device_ctx *dev = ex->dev;
    const cublasOperation_t ta = (cublasOperation_t)g->ta, tb = (cublasOperation_t)g->tb;
    /* stored shapes: op(A) is m x k, op(B) is k x n */
    const int64_t ar = ta == CUBLAS_OP_N ? g->m : g->k, ac = ta == CUBLAS_OP_N ? g->k : g->m;
    const int64_t br = tb == CUBLAS_OP_N ? g->k : g->n, bc = tb == CUBLAS_OP_N ? g->n : g->k;
    PP_TRY(PP_CUDA(dev, err, cublasLtMatmulDescCreate(&e->desc, (cublasComputeType_t)g->compute,
                                                     CUDA_R_32F)));
    PP_TRY(PP_CUDA(dev, err, cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                           &ta, sizeof ta)));
    PP_TRY(PP_CUDA(dev, err, cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                           &tb, sizeof tb)));
    static const cublasLtEpilogue_t epis[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                              CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                              CUBLASLT_EPILOGUE_GELU_AUX,
                                              CUBLASLT_EPILOGUE_DGELU,
                                              CUBLASLT_EPILOGUE_BGRADA,
                                              CUBLASLT_EPILOGUE_BGRADB};
    if (g->epi != PP_LT_EPI_NONE) {
        const cublasLtEpilogue_t epi = epis[g->epi];
        PP_TRY(PP_CUDA(dev, err,
                       cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                      &epi, sizeof epi)));
    }
    if (lt_has_bias(g)) {
        const int32_t bias_type = lt_bias_type(g);
        PP_TRY(PP_CUDA(dev, err,
                       cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                      &bias_type, sizeof bias_type)));
    }
    if (g->ld_aux > 0) {
        const int64_t ld = g->ld_aux;
        PP_TRY(PP_CUDA(dev, err,
                       cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                      &ld, sizeof ld)));
    }
    PP_TRY(PP_CUDA(dev, err, cublasLtMatrixLayoutCreate(&e->la, (cudaDataType_t)g->ab, (uint64_t)ar,
                                                       (uint64_t)ac, g->lda)));
    PP_TRY(PP_CUDA(dev, err, cublasLtMatrixLayoutCreate(&e->lb, (cudaDataType_t)g->ab, (uint64_t)br,
                                                       (uint64_t)bc, g->ldb)));
    return PP_CUDA(dev, err, cublasLtMatrixLayoutCreate(&e->lc, (cudaDataType_t)g->cd,
                                                       (uint64_t)g->m, (uint64_t)g->n, g->ldc));
}

/* cuBLASLt's first heuristic algorithm for e within PP_LT_WS_MAX; e->have
 * false when there is none (not an error: remembered, reported per call). */
static pp_status pick_algo(pp_exec *ex, pp_cuda_lt_cache *c, lt_entry *e, pp_error *err)
{
    pp_device_ctx *dev = ex->dev;
    cublasLtMatmulPreference_t pref;
    PP_TRY(PP_CUDA(dev, err, cublasLtMatmulPreferenceCreate(&pref)));
    const uint64_t ws = PP_LT_WS_MAX;
    pp_status s = PP_CUDA(dev, err,
                          cublasLtMatmulPreferenceSetAttribute(
                              pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    static const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; s == PP_OK && i < 4; i++) {
        const uint32_t a = (uint32_t)e->key.align[i < 3 ? i : 2];
        s = PP_CUDA(dev, err, cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &a,
                                                                  sizeof a));
    }
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    if (s == PP_OK) {
        memset(&r, 0, sizeof r);
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->handle, e->desc, e->la, e->lb,
                                                           e->lc, e->lc, pref, 1, &r, &found);
        /* NOT_SUPPORTED: no algorithm for this configuration; INVALID_VALUE:
         * a combination of types or epilogue this cuBLASLt does not accept
         * (its tables differ between versions). Both are remembered as "no
         * algorithm", so that the caller runs the op another way. */
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
            found = 0;
            e->refused = st;
        } else {
            s = PP_CUDA(dev, err, st);
        }
    }
    (void)PP_CUDA(dev, NULL, cublasLtMatmulPreferenceDestroy(pref));
    if (s != PP_OK) return s;
    e->have = found > 0 && r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= PP_LT_WS_MAX;
    if (e->have) {
        e->algo = r.algo;
        e->ws = r.workspaceSize;
    }
    return PP_OK;
}

/* The entry of g, made at its first use. */
static pp_status entry_for(pp_exec *ex, pp_cuda_lt_cache *c, const lt_gemm *g, lt_entry **out,
                           pp_error *err)
{
    for (int i = 0; i < c->n; i++)
        if (memcmp(&c->e[i].key, g, sizeof *g) == 0) {
            *out = &c->e[i];
            return PP_OK;
        }
    if (c->n == c->cap) {
        int ncap = c->cap ? 2 * c->cap : 16;
        lt_entry *p = realloc(c->e, (size_t)ncap * sizeof *p);
        if (!p)
            return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (cuBLASLt)",
                                ex->dev->name);
        c->e = p;
        c->cap = ncap;
    }
    lt_entry *e = &c->e[c->n];
    memset(e, 0, sizeof *e);
    e->key = *g;
    pp_status s = make_descs(ex, g, e, err);
    if (s == PP_OK) s = pick_algo(ex, c, e, err);
    if (s != PP_OK) {
        char what[256], msg[PP_ERROR_MSG_MAX];
        describe(what, sizeof what, g);
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        entry_free(ex, e);
        return pp_error_set(err, s, "%s (for %s)", msg, what);
    }
    c->n++;
    *out = e;
    return PP_OK;
}

/* ---- running one GEMM --------------------------------------------------------------- */

/* The entry of g on operands A, B, D (their alignments are part of the
 * key); PP_ERR_UNSUPPORTED when cuBLASLt has no algorithm for it. The
 * pointer stays valid until the next entry is made. */
static pp_status gemm_entry(pp_exec *ex, pp_cuda_lt_cache *c, lt_gemm *g, const void *A,
                            const void *B, const void *D, lt_entry **out, pp_error *err)
{
    g->align[0] = align_of(A);
    g->align[1] = align_of(B);
    g->align[2] = align_of(D);
    PP_TRY(entry_for(ex, c, g, out, err));
    if ((*out)->have) return PP_OK;
    char what[256];
    describe(what, sizeof what, g);
    return pp_error_set(err, PP_ERR_UNSUPPORTED,
                        "%s: cublasLtMatmulAlgoGetHeuristic offers no algorithm within %zu "
                        "MiB of workspace for %s%s%s",
                        ex->dev->name, PP_LT_WS_MAX >> 20, what,
                        (*out)->refused ? ": " : "",
                        (*out)->refused ? cublasLtGetStatusName((*out)->refused) : "");
}

/* D = A op B (+ bias, or another epilogue reading or writing aux) + beta * C
 * with C = D; PP_ERR_UNSUPPORTED when cuBLASLt has no algorithm for g
 * (nothing enqueued then). */
static pp_status gemm_aux(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_lt_cache *c, lt_gemm *g,
                          const void *A, const void *B, void *D, const void *bias, void *aux,
                          float beta, pp_error *err)
{
    lt_entry *e = NULL;
    PP_TRY(gemm_entry(ex, c, g, A, B, D, &e, err));
    if (lt_has_bias(g))
        PP_TRY(PP_CUDA(ex->dev, err,
                       cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof bias)));
    if (g->ld_aux > 0)
        PP_TRY(PP_CUDA(ex->dev, err,
                       cublasLtMatmulDescSetAttribute(e->desc,
                                                      CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                      &aux, sizeof aux)));
    void *ws;
    PP_TRY(pp_exec_workspace(ex, e->ws, &ws, err));
    const float alpha = 1.0f;
    cublasStatus_t st = cublasLtMatmul(c->handle, e->desc, &alpha, A, e->la, B, e->lb, &beta, D,
                                       e->lc, D, e->lc, &e->algo, ws, e->ws, ce->stream);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) { /* the heuristic's algorithm refused at launch */
        e->have = false;
        char what[256];
        describe(what, sizeof what, g);
        return pp_error_set(err, PP_ERR_UNSUPPORTED,
                            "%s: cublasLtMatmul refused the heuristic's algorithm for %s: %s",
                            ex->dev->name, what, cublasLtGetStatusName(st));
    }
    if (st == CUBLAS_STATUS_SUCCESS) return PP_OK;
    pp_error e1;
    char what[256];
    pp_status s = PP_CUDA(ex->dev, &e1, st);
    describe(what, sizeof what, g);
    return pp_error_set(err, s, "%s (for %s)", e1.msg, what);
}

static pp_status gemm(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_lt_cache *c, lt_gemm *g,
                      const void *A, const void *B, void *D, const void *bias, float beta,
                      pp_error *err)
{
    return gemm_aux(ex, ce, c, g, A, B, D, bias, NULL, beta, err);
}

static pp_status begin(pp_exec *ex, int n, int in, int out, pp_cuda_exec **ce,
                       pp_cuda_lt_cache **c, pp_error *err)
{
    if (n < 0 || in < 0 || out < 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: cuBLASLt linear: n %d, in %d, out %d",
                            ex->dev->name, n, in, out);
    PP_TRY(pp_cuda_exec_begin(ex, 0, 0, ce, err));
    return lt_state(ex, *ce, c, err);
}

/* ---- forward ------------------------------------------------------------------------ */

static lt_gemm fwd_gemm(int n, int in, int out, bool bias, bool y_f32)
{
    return (lt_gemm){.kind = LT_FWD, .ta = CUBLAS_OP_T, .tb = CUBLAS_OP_N, .m = out, .n = n,
                  .k = in, .lda = in, .ldb = in, .ldc = out, .ab = CUDA_R_16BF,
                  .cd = y_f32 ? CUDA_R_32F : CUDA_R_16BF, .compute = CUBLAS_COMPUTE_32F,
                  .epi = bias ? PP_LT_EPI_BIAS : PP_LT_EPI_NONE};
}

/* bf16 y with an fp32 bias (which the epilogue of a bf16 D cannot read):
 * fp32 into a stream-ordered temporary, then rounded to bf16. */
static pp_status forward_via_f32(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_lt_cache *c, int n,
                                 int in, int out, const uint16_t *x, const uint16_t *w,
                                 const float *bias, uint16_t *y, pp_error *err)
{
    const int64_t total = (int64_t)n * out;
    float *tmp;
    const size_t bytes = (size_t)total * sizeof *tmp;
    PP_TRY(pp_cuda_scratch_alloc(ex, bytes, (void **)&tmp, err));
    pp_status s;
    lt_gemm g = fwd_gemm(n, in, out, true, true);
    s = gemm(ex, ce, c, &g, w, x, tmp, bias, 0.0f, err);
    if (s == PP_OK)
        s = PP_CUDA(ex->dev, err,
                    pp_cuda_launch_bf16_from_f32(ce->stream, pp_cuda_grid(ex, total, PP_CUDA_BLOCK),
                                                 total, tmp, y));
    pp_cuda_scratch_free(ex, tmp, bytes);
    return s;
}

pp_status pp_cuda_lt_linear_forward(pp_exec *ex, int n, int in, int out, const uint16_t *x,
                                    const uint16_t *w, const float *bias, void *y, bool y_f32,
                                    pp_error *err)
{
    pp_cuda_exec *ce = NULL;
    pp_cuda_lt_cache *c = NULL;
    PP_TRY(begin(ex, n, in, out, &ce, &c, err));
    if (n == 0 || out == 0) return PP_OK;
    if (in == 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: cuBLASLt linear forward with in = 0",
                            ex->dev->name);
    /* cuBLASLt's bias epilogue reads the bias in D's type (CUBLASLT_MATMUL_DESC_
     * BIAS_DATA_TYPE: "the same type as the elements of output matrix",
     * exceptions only for integer and fp8 kernels): a bf16 D with an fp32
     * bias is refused (CUBLAS_STATUS_INVALID_VALUE). Rounding the bias to
     * bf16 would change the result, so a bf16 y with a bias always goes
     * through fp32 (fp32 D, fp32 bias: a supported combination). */
    if (bias && !y_f32) return forward_via_f32(ex, ce, c, n, in, out, x, w, bias, y, err);
    lt_gemm g = fwd_gemm(n, in, out, bias != NULL, y_f32);
    return gemm(ex, ce, c, &g, w, x, y, bias, 0.0f, err);
}

/* ---- backward ----------------------------------------------------------------------- */

/* ones holds at least n bf16 ones. */
static pp_status ones_for(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_lt_cache *c, int64_t n,
                          pp_error *err)
{
    if (c->n_ones >= n) return PP_OK;
    const size_t bytes = (size_t)n * sizeof(uint16_t);
    uint16_t *host = malloc(bytes);
    if (!host) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", ex->dev->name);
    for (int64_t i = 0; i < n; i++) host[i] = 0x3f80; /* bf16 1.0 */
    void *dev_ones;
    pp_status s = pp_device_alloc(ex->dev, bytes, &dev_ones, err);
    if (s == PP_OK) {
        s = PP_CUDA(ex->dev, err,
                    cudaMemcpyAsync(dev_ones, host, bytes, cudaMemcpyHostToDevice, ce->stream));
        /* host is freed next; the old vector may still be read by queued work */
        pp_status w = PP_CUDA(ex->dev, s == PP_OK ? err : NULL, cudaStreamSynchronize(ce->stream));
        if (s == PP_OK) s = w;
        if (s != PP_OK) pp_device_free(ex->dev, dev_ones, bytes);
    }
    free(host);
    if (s != PP_OK) return s;
    if (c->ones) pp_device_free(ex->dev, c->ones, (size_t)c->n_ones * sizeof *c->ones);
    c->ones = dev_ones;
    c->n_ones = n;
    ex->ws_gen++; /* graphs captured with the old vector must not be replayed */
    return PP_OK;
}

pp_status pp_cuda_lt_linear_backward(pp_exec *ex, int n, int in, int out, const uint16_t *x,
                                     const uint16_t *w, const uint16_t *dy, uint16_t *dx,
                                     float *dw, float *db, pp_error *err)
{
    pp_cuda_exec *ce = NULL;
    pp_cuda_lt_cache *c = NULL;
    PP_TRY(begin(ex, n, in, out, &ce, &c, err));
    if (n == 0 || out == 0) return PP_OK; /* dx is empty or sums nothing; dw, db unchanged */
    lt_gemm gx = {.kind = LT_DX, .ta = CUBLAS_OP_N, .tb = CUBLAS_OP_N, .m = in, .n = n,
                  .k = out, .lda = in, .ldb = out, .ldc = in, .ab = CUDA_R_16BF,
                  .cd = CUDA_R_16BF, .compute = CUBLAS_COMPUTE_32F};
    lt_gemm gw = {.kind = LT_DW, .ta = CUBLAS_OP_N, .tb = CUBLAS_OP_T, .m = in, .n = out,
                  .k = n, .lda = in, .ldb = out, .ldc = in, .ab = CUDA_R_16BF,
                  .cd = CUDA_R_32F, .compute = CUBLAS_COMPUTE_32F};
    lt_gemm gb = {.kind = LT_DB, .ta = CUBLAS_OP_N, .tb = CUBLAS_OP_N, .m = out, .n = 1,
                  .k = n, .lda = out, .ldb = n, .ldc = out, .ab = CUDA_R_16BF,
                  .cd = CUDA_R_32F, .compute = CUBLAS_COMPUTE_32F};
    const bool run_x = dx && in > 0, run_w = dw && in > 0, run_b = db != NULL;
    /* Every GEMM's algorithm first: a refusal (PP_ERR_UNSUPPORTED, the caller
     * then runs the whole op another way) must come before dw or db has been
     * accumulated into, or the other way would add it twice. */
    lt_entry *e;
    if (run_b) PP_TRY(ones_for(ex, ce, c, n, err));
    if (run_x) PP_TRY(gemm_entry(ex, c, &gx, w, dy, dx, &e, err));
    if (run_w) PP_TRY(gemm_entry(ex, c, &gw, x, dy, dw, &e, err));
    if (run_b) PP_TRY(gemm_entry(ex, c, &gb, dy, c->ones, db, &e, err));
    if (run_x) PP_TRY(gemm(ex, ce, c, &gx, w, dy, dx, NULL, 0.0f, err));
    pp_status s = PP_OK;
    bool added = false;
    if (run_w) {
        s = gemm(ex, ce, c, &gw, x, dy, dw, NULL, 1.0f, err);
        added = s == PP_OK;
    }
    if (s == PP_OK && run_b) s = gemm(ex, ce, c, &gb, dy, c->ones, db, NULL, 1.0f, err);
    if (s == PP_ERR_UNSUPPORTED && added) { /* refused at launch, after dw was added to */
        if (err) {
            pp_error_prefix(err, "linear backward: dw was accumulated already, no other way "
                                 "can finish it");
            err->code = PP_ERR_BACKEND;
        }
        return PP_ERR_BACKEND;
    }
    return s;
}

/* ---- operands of an unaligned pitch or extent -------------------------------------------
 * A leading dimension whose columns (row-major rows) do not start on 16-byte boundaries
 * keeps cuBLASLt off its fast kernels: Hopper's are fed by the tensor memory accelerator,
 * whose strides are multiples of 16 bytes, and the others load 16 bytes at a time. GPT-2's
 * head has one (the logits and their gradient: 50257 columns, 100,514 bytes a bf16 row).
 * lt_matmul then runs the GEMM on copies of such operands at a padded pitch (the next
 * multiple of 16 bytes, in a stream-ordered scratch counted in the device's memory) and
 * copies such a D back.
 * The pitch is not all. A GEMM's m (D's rows, stored contiguously, and A's where it is not
 * transposed) or k where an operand stores it contiguously (A transposed, B not) that is
 * not a whole number of 16 bytes keeps it on kernels of 1-element alignment even at padded
 * pitches: in the sixth GPU run (docs/GPU.md) GPT-2's head, m = 50257 in the forward and
 * k = 50257 in the backward's dx = dy W, ran cutlass_75_..._align1 kernels, 6.6 and 4.8 ms
 * of a 31.7 ms bf16 step (95 and 130 TFLOPS, where the blocks' GEMMs run at ~490), while
 * the weight gradient, whose 50257 is the n of a transposed B, got an align8 kernel (1.3
 * ms). So such an m or k is padded too, to the next whole number of 16 bytes of its
 * operands' narrowest element (50264 for bf16): A and B are copied with the new rows or
 * columns zero, so the padded k adds terms 0 x 0 to each sum (its value unchanged) and the
 * padded m adds rows to D that are not copied back; a bias is copied zero-padded, and the
 * BGRADA gradient (m) written to a scratch and its first m copied back. n is left as it is
 * (the run measured no need, and padding it would copy the added-to weight gradient).
 * The copies are a kernel of ours (kernels.cu's copy_pitched_k), not cudaMemcpy2DAsync:
 * its speed on rows of 2-byte alignment is not documented, and a kernel's time shows in
 * the profile's kernel table (copies do not). The head's weight is copied for each of its
 * two GEMMs (77 MB in bf16, ~0.05 ms each on an H200; predicted gain of the extents ~8 ms
 * of the step). Not with an aux matrix (the GELU epilogues: their shapes, GPT-2's MLP, are
 * aligned). PP_CUDA_UNPADDED=1 turns all of it off, PP_CUDA_PITCH_ONLY=1 the extents only
 * (to compare). */

/* rows rounded up to a whole number of 16 bytes */
static int64_t padded_ld(int64_t rows, size_t es)
{
    const int64_t per = 16 / (int64_t)es;
    return (rows + per - 1) / per * per;
}

static bool unaligned_ld(int64_t ld, size_t es)
{
    return ld * (int64_t)es % 16 != 0;
}

/* rows x cols, column-major, from pitch sld to pitch dld (elements of es bytes); with
 * rows_to >= rows and cols_to >= cols, the new rows and columns zero (src_cols: how many
 * columns to copy, 0 for none: zeros only) */
static pp_status copy_padded(pp_exec *ex, cudaStream_t s, void *dst, int64_t dld,
                             const void *src, int64_t sld, int64_t rows, int64_t src_cols,
                             int64_t rows_to, int64_t cols_to, size_t es, pp_error *err)
{
    return PP_CUDA(ex->dev, err,
                   pp_cuda_launch_copy_padded(s, pp_cuda_max_grid(ex), cols_to, rows, src_cols,
                                              rows_to, es, src, sld, dst, dld));
}

/* A scratch the padding below made (NULL: none), for pp_cuda_scratch_free. */
typedef struct lt_pitched {
    void *scratch;
    size_t bytes;
} lt_pitched;

/* One operand, stored rows x cols (column-major, pitch *ld), as a GEMM of padded extents
 * reads it: rows_to x cols_to (>= rows, cols) at an aligned pitch, the new rows and columns
 * zero. Where nothing changes (the pitch aligned, the extents the same, or only the rows
 * padded up to the pitch where zero_tail says the rows past rows are zeros) p and out stay
 * as they are; else a copy in out's scratch (contents: copy_in, else none) and *p, *ld the
 * copy's. out zeroed by the caller, who frees it. */
static pp_status pad_in(pp_exec *ex, cudaStream_t s, const void **p, int64_t *ld, int64_t rows,
                        int64_t cols, int64_t rows_to, int64_t cols_to, size_t es,
                        bool zero_tail, bool copy_in, lt_pitched *out, pp_error *err)
{
    const bool aligned = !unaligned_ld(*ld, es);
    if (aligned && cols_to == cols && (rows_to == rows || (zero_tail && rows_to <= *ld)))
        return PP_OK;
    const int64_t pld = padded_ld(rows_to, es);
    const size_t bytes = (size_t)pld * (size_t)cols_to * es;
    PP_TRY(pp_cuda_scratch_alloc(ex, bytes, &out->scratch, err));
    out->bytes = bytes;
    if (copy_in)
        PP_TRY(copy_padded(ex, s, out->scratch, pld, *p, *ld, rows, cols, rows_to, cols_to, es,
                           err));
    *p = out->scratch;
    *ld = pld;
    return PP_OK;
}

/* whether unaligned operands are padded (PP_CUDA_UNPADDED unset), and their extents with
 * them (PP_CUDA_PITCH_ONLY unset too) */
static bool padding_on(void)
{
    static int unpadded = -1;
    return !pp_cuda_env_on("PP_CUDA_UNPADDED", &unpadded);
}

static bool extents_on(void)
{
    static int pitch_only = -1;
    return padding_on() && !pp_cuda_env_on("PP_CUDA_PITCH_ONLY", &pitch_only);
}

pp_status pp_cuda_lt_pad(pp_exec *ex, const void **p, int64_t *ld, int64_t rows, int64_t cols,
                         size_t es, void **scratch, size_t *bytes, pp_error *err)
{
    *scratch = NULL;
    *bytes = 0;
    if (!padding_on() || !unaligned_ld(*ld, es) || rows == 0 || cols == 0) return PP_OK;
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
    lt_pitched out = {0}; /* the rows past rows zero: a k padded up to the pitch reads them */
    pp_status s = pad_in(ex, ce->stream, p, ld, rows, cols, padded_ld(rows, es), cols, es,
                         false, true, &out, err);
    if (s != PP_OK) {
        pp_cuda_scratch_free(ex, out.scratch, out.bytes);
        return s;
    }
    *scratch = out.scratch;
    *bytes = out.bytes;
    return PP_OK;
}

/* ---- fp32 products (dense.c) ----------------------------------------------------------- */

/* The extents a GEMM runs at (see above): m and k padded where they must be. */
typedef struct lt_extents {
    int64_t m, k;
} lt_extents;

static lt_extents padded_extents(const pp_cuda_lt_matmul *mm, size_t es_ab, size_t es_cd)
{
    lt_extents e = {mm->m, mm->k};
    if (!extents_on()) return e;
    /* m: D's rows, and A's when not transposed; k: A's rows transposed, B's not */
    const size_t es_m = !mm->ta && es_ab < es_cd ? es_ab : es_cd;
    if (unaligned_ld(mm->m, es_m)) e.m = padded_ld(mm->m, es_m);
    if ((mm->ta || !mm->tb) && unaligned_ld(mm->k, es_ab)) e.k = padded_ld(mm->k, es_ab);
    return e;
}

/* gemm_aux on padded copies of the operands whose pitch or extents are unaligned (see
 * above), at the extents x: PP_ERR_UNSUPPORTED when cuBLASLt has no algorithm for the
 * padded shapes (only scratches written then) */
static pp_status gemm_pitched(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_lt_cache *c, lt_gemm g,
                              const pp_cuda_lt_matmul *mm, size_t es_ab, size_t es_cd,
                              lt_extents x, const void *a, const void *b, void *d,
                              const void *bias, pp_error *err)
{
    lt_pitched pa = {0}, pb = {0}, pd = {0}, pv = {0};
    const void *A = a, *B = b, *D = d, *V = bias;
    const bool bgrad_a = mm->epi == PP_LT_EPI_BGRADA;
    const bool bias_m = x.m != mm->m && (mm->epi == PP_LT_EPI_BIAS || bgrad_a);
    cudaStream_t st = ce->stream;
    pp_status s = pad_in(ex, st, &A, &g.lda, mm->ta ? mm->k : mm->m, mm->ta ? mm->m : mm->k,
                         mm->ta ? x.k : x.m, mm->ta ? x.m : x.k, es_ab, mm->a_zero_tail, true,
                         &pa, err);
    if (s == PP_OK)
        s = pad_in(ex, st, &B, &g.ldb, mm->tb ? mm->n : mm->k, mm->tb ? mm->k : mm->n,
                   mm->tb ? mm->n : x.k, mm->tb ? x.k : mm->n, es_ab, mm->b_zero_tail, true,
                   &pb, err);
    if (s == PP_OK) /* D's contents matter where the GEMM adds to it */
        s = pad_in(ex, st, &D, &g.ldc, mm->m, mm->n, x.m, mm->n, es_cd, false, mm->beta != 0.0f,
                   &pd, err);
    if (s == PP_OK && bias_m) { /* (m): a bias of D's type, or BGRADA's fp32 output */
        int64_t one = mm->m;
        s = pad_in(ex, st, &V, &one, mm->m, 1, x.m, 1, bgrad_a ? sizeof(float) : es_cd, false,
                   !bgrad_a, &pv, err);
    }
    g.m = x.m, g.k = x.k;
    if (s == PP_OK) s = gemm_aux(ex, ce, c, &g, A, B, (void *)D, V, NULL, mm->beta, err);
    if (s == PP_OK && pd.scratch)
        s = copy_padded(ex, st, d, mm->ldd, D, g.ldc, mm->m, mm->n, mm->m, mm->n, es_cd, err);
    if (s == PP_OK && pv.scratch && bgrad_a)
        s = copy_padded(ex, st, mm->dbias, mm->m, V, x.m, mm->m, 1, mm->m, 1, sizeof(float),
                        err);
    pp_cuda_scratch_free(ex, pv.scratch, pv.bytes);
    pp_cuda_scratch_free(ex, pd.scratch, pd.bytes);
    pp_cuda_scratch_free(ex, pb.scratch, pb.bytes);
    pp_cuda_scratch_free(ex, pa.scratch, pa.bytes);
    return s;
}

/* pp_cuda_lt_matmul_f32 and _bf16: A and B of type ab, D of type cd */
static pp_status lt_matmul(pp_exec *ex, const pp_cuda_lt_matmul *mm, int64_t kind,
                           cudaDataType_t ab, cudaDataType_t cd, cublasComputeType_t compute,
                           const void *a, const void *b, void *d, pp_error *err)
{
    pp_cuda_exec *ce = NULL;
    pp_cuda_lt_cache *c = NULL;
    if (mm->m < 0 || mm->n < 0 || mm->k < 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: cuBLASLt GEMM: m %lld, n %lld, k %lld",
                            ex->dev->name, (long long)mm->m, (long long)mm->n, (long long)mm->k);
    PP_TRY(pp_cuda_exec_begin(ex, 0, 0, &ce, err));
    PP_TRY(lt_state(ex, ce, &c, err));
    if (mm->m == 0 || mm->n == 0) return PP_OK;
    const bool aux = mm->epi == PP_LT_EPI_GELU_AUX_BIAS || mm->epi == PP_LT_EPI_GELU_AUX ||
                     mm->epi == PP_LT_EPI_DGELU;
    const bool grad = mm->epi == PP_LT_EPI_BGRADA || mm->epi == PP_LT_EPI_BGRADB;
    lt_gemm g = {.kind = kind, .ta = mm->ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                 .tb = mm->tb ? CUBLAS_OP_T : CUBLAS_OP_N, .m = mm->m, .n = mm->n, .k = mm->k,
                 .lda = mm->lda, .ldb = mm->ldb, .ldc = mm->ldd, .ab = ab, .cd = cd,
                 .compute = compute, .epi = mm->epi, .ld_aux = aux ? mm->ld_aux : 0};
    const void *bias = grad ? (const void *)mm->dbias : mm->bias;
    const size_t es_ab = ab == CUDA_R_16BF ? 2 : 4, es_cd = cd == CUDA_R_16BF ? 2 : 4;
    const lt_extents x = padded_extents(mm, es_ab, es_cd);
    if (!aux && mm->k > 0 && padding_on() &&
        (unaligned_ld(mm->lda, es_ab) || unaligned_ld(mm->ldb, es_ab) ||
         unaligned_ld(mm->ldd, es_cd) || x.m != mm->m || x.k != mm->k)) {
        pp_error e1;
        pp_status s = gemm_pitched(ex, ce, c, g, mm, es_ab, es_cd, x, a, b, d, bias, &e1);
        if (s != PP_ERR_UNSUPPORTED) {
            if (s != PP_OK && err) *err = e1;
            return s;
        }
        /* no algorithm at the padded shape: the GEMM as given, below */
    }
    return gemm_aux(ex, ce, c, &g, a, b, d, bias, (void *)mm->aux, mm->beta, err);
}

pp_status pp_cuda_lt_matmul_f32(pp_exec *ex, const pp_cuda_lt_matmul *mm, const float *a,
                                const float *b, float *d, pp_error *err)
{
    return lt_matmul(ex, mm, LT_F32, CUDA_R_32F, CUDA_R_32F,
                     mm->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, a, b, d, err);
}

pp_status pp_cuda_lt_matmul_bf16(pp_exec *ex, const pp_cuda_lt_matmul *mm, const uint16_t *a,
                                 const uint16_t *b, void *d, pp_error *err)
{
    return lt_matmul(ex, mm, LT_BF16, CUDA_R_16BF, mm->d_bf16 ? CUDA_R_16BF : CUDA_R_32F,
                     CUBLAS_COMPUTE_32F, a, b, d, err);
}
