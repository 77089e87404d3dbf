/*
 * dense.c - CPU dense layer over rows of features, its weight (in, out)
 * (Hugging Face's Conv1D: GPT-2's c_attn, c_proj, c_fc) or (out, in)
 * (torch.nn.Linear's; a tied output head's embedding): x (R, in), y (R, out).
 *   forward           y = x W + b         (b written into y, then one sgemm adds xW)
 *   backward data     dx = dy W^T
 *   backward weights  dW += x^T dy (computed apart, then added: ops.h's contract);
 *                     db += column sums of dy in double, row order
 * The products run on the device's pool as tiles cut by shape (gemm.h), so
 * results do not depend on the thread count.
 */
#include <string.h>

#include "gemm.h"
#include "kernels.h"
#include "workers.h"

/* Columns of db per task. */
#define BIAS_COLS 64

static pp_status rows_fit(int64_t rows, pp_error *err)
{
    if (rows > INT32_MAX)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "dense: %lld rows exceed the CPU kernels' "
                            "limit of 2^31 - 1", (long long)rows);
    return PP_OK;
}

pp_status pp_cpu_dense_forward(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                               const float *x, const float *w, const float *b, float *y,
                               pp_error *err)
{
    PP_TRY(rows_fit(rows, err));
    if (b)
        for (int64_t i = 0; i < rows; i++) memcpy(y + i * out, b, sizeof(float) * (size_t)out);
    pp_cpu_gemm_args g = {.ta = false, .tb = w_out_in, .m = (int)rows, .n = out, .k = in,
                          .a = x, .lda = in, .b = w, .ldb = w_out_in ? in : out, .c = y,
                          .ldc = out, .mode = b ? PP_GEMM_ADD : PP_GEMM_SET};
    return pp_cpu_gemm(ex, &g, err);
}

pp_status pp_cpu_dense_backward_data(pp_exec *ex, int64_t rows, int in, int out, bool w_out_in,
                                     const float *w, const float *dy, float *dx, pp_error *err)
{
    PP_TRY(rows_fit(rows, err));
    pp_cpu_gemm_args g = {.ta = false, .tb = !w_out_in, .m = (int)rows, .n = in, .k = out,
                          .a = dy, .lda = out, .b = w, .ldb = w_out_in ? in : out, .c = dx,
                          .ldc = in, .mode = PP_GEMM_SET};
    return pp_cpu_gemm(ex, &g, err);
}

typedef struct bias_job {
    int64_t rows;
    int out;
    const float *dy;
    float *db;
} bias_job;

static void bias_task(void *arg, int64_t t, int worker)
{
    const bias_job *j = arg;
    (void)worker;
    const int c0 = (int)t * BIAS_COLS;
    const int n = j->out - c0 < BIAS_COLS ? j->out - c0 : BIAS_COLS;
    double acc[BIAS_COLS] = {0};
    for (int64_t i = 0; i < j->rows; i++) {
        const float *r = j->dy + i * j->out + c0;
        for (int q = 0; q < n; q++) acc[q] += (double)r[q];
    }
    for (int q = 0; q < n; q++) j->db[c0 + q] += (float)acc[q];
}

pp_status pp_cpu_dense_backward_weights(pp_exec *ex, int64_t rows, int in, int out,
                                        bool w_out_in, const float *x, const float *dy,
                                        float *dw, float *db, pp_error *err)
{
    PP_TRY(rows_fit(rows, err));
    pp_cpu_gemm_args g = {.ta = true, .tb = false, .m = w_out_in ? out : in,
                          .n = w_out_in ? in : out, .k = (int)rows, .a = w_out_in ? dy : x,
                          .lda = w_out_in ? out : in, .b = w_out_in ? x : dy,
                          .ldb = w_out_in ? in : out, .c = dw, .ldc = w_out_in ? in : out,
                          .mode = PP_GEMM_ADD_APART};
    PP_TRY(pp_cpu_gemm(ex, &g, err));
    if (!db) return PP_OK;
    bias_job j = {.rows = rows, .out = out, .dy = dy, .db = db};
    pp_cpu_parallel(ex, (out + BIAS_COLS - 1) / BIAS_COLS, bias_task, &j);
    return PP_OK;
}
