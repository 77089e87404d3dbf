/*
 * dnn.c - convolution, batch norm and max pooling through cuDNN.
 *
 * Per exec, descriptors are cached by geometry. Per device, each
 * convolution's algorithm is chosen once per shape, direction and math mode,
 * at its first use, and shared by the device's execs (pp_cuda_device.algos,
 * which may keep them in a file, see algo_cache.h):
 *   1. a choice stored already (by another exec, or read from the file) is
 *      used when cuDNN accepts it for this shape (its workspace size query
 *      succeeds within the device's workspace cap, ws_max below);
 *   2. otherwise every algorithm is timed on the
 *      call's own tensors with cudnnFindConvolution*AlgorithmEx (as
 *      torch.backends.cudnn.benchmark does); a call that accumulates into
 *      its output (dw, and dx in the accumulating backward-data) measures
 *      into scratch instead; the workspace offered is the largest any
 *      algorithm asks for within the cap. Both are allocated for the
 *      measurement only. The fastest acceptable result is stored, with the
 *      number of algorithms whose workspace size query asked for more than
 *      the cap (left out of the timing: cudnnFind*Ex reports them with
 *      CUDNN_STATUS_ALLOC_FAILED, the workspace offered being insufficient)
 *      and the most one of them asked;
 *   3. otherwise (measurement failed) cuDNN's heuristics
 *      (cudnnGet*Algorithm_v7): the first algorithm within the limit, by
 *      math type preference.
 * PP_CUDNN_FIND=0 skips 1 and 2: heuristics only, the cache unused.
 *
 * Which API runs it (PP_CUDA_CONV_API; pp_cuda_device.conv_api), decided at
 * the first use too: by default (auto), with measurement on, cuDNN's graph
 * API also makes its execution plans for the convolution (gconv.c: f32 NCHW,
 * up to PP_CUDA_CONV_PLANS from its heuristics, each timed once, the
 * fastest kept; torch.backends.cudnn.benchmark searches the same API's
 * plans), and that plan runs where its timed call is faster than the
 * algorithm's measured time by more than PP_ALGO_GRAPH_MARGIN; the cache
 * entry records the first comparison (API, GRAPH_MS). legacy: the algorithm
 * always; graph: the plan wherever the graph API has one, the algorithm
 * elsewhere. A call the plan refuses (a pointer not 16-byte aligned; its
 * workspace or cuDNN's memory not to be had) runs the algorithm.
 *
 * The cap
 * is PP_CUDA_CONV_WS_MB MiB (default PP_ALGO_WS_MB_DEFAULT, 512), part of the
 * cache's key: choices measured under another cap are not looked up.
 * Acceptable math: in fp32 mode only CUDNN_FMA_MATH results (IEEE fp32; the
 * descriptor always holds CUDNN_FMA_MATH, since CUDNN_DEFAULT_MATH permits
 * TF32 on Ampere and later); in tf32 mode tensor-op, default or FMA math, the
 * descriptor set to the chosen result's math type before each call, never
 * CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (that converts to half precision).
 * Measuring synchronises the exec's stream once per new shape, so the first
 * step must not be captured into a CUDA graph. Workspace for running comes
 * from pp_exec_workspace: after the first step no allocation happens here.
 *
 * Contracts are those of ops.h: outputs are overwritten (beta = 0), dw, dgamma
 * and dbeta accumulate (beta = 1), and so does dx in
 * pp_cuda_conv2d_backward_data_accumulate. Max pooling leaves idx unused:
 * backward recomputes the argmax from x and y.
 */
#include <stdlib.h>
#include <string.h>

#include "gconv.h"
#include "internal.h"
#include "kernels.h"

/* Largest cuDNN workspace a convolution algorithm may ask for on ex's device. */
static size_t ws_max(const pp_exec *ex)
{
    return (size_t)pp_cuda_dev(ex->dev)->ws_mb << 20;
}

static const float one = 1.0f, zero = 0.0f;

/* Grows a cache array of elements of size elem to hold one more. */
static pp_status grow(void **arr, int n, int *cap, size_t elem, const pp_device_ctx *dev,
                      pp_error *err)
{
    if (n < *cap) return PP_OK;
    int ncap = *cap ? 2 * *cap : 16;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (cuDNN cache)", dev->name);
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
    *arr = p;
    *cap = ncap;
    return PP_OK;
}

/* ---- descriptor caches ---------------------------------------------------- */

static pp_status tensor_desc(pp_exec *ex, pp_cuda_exec *ce, int n, int c, int h, int w,
                             cudnnTensorDescriptor_t *out, pp_error *err)
{
    for (int i = 0; i < ce->n_tdesc; i++) {
        pp_cuda_tensor_desc *t = &ce->tdesc[i];
        if (t->n == n && t->c == c && t->h == h && t->w == w) {
            *out = t->desc;
            return PP_OK;
        }
    }
    PP_TRY(grow((void **)&ce->tdesc, ce->n_tdesc, &ce->cap_tdesc, sizeof *ce->tdesc, ex->dev,
                err));
    pp_cuda_tensor_desc *t = &ce->tdesc[ce->n_tdesc];
    cudnnTensorDescriptor_t desc;
    PP_TRY(PP_CUDA(ex->dev, err, cudnnCreateTensorDescriptor(&desc)));
    pp_status s = PP_CUDA(ex->dev, err,
                          cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n,
                                                     c, h, w));
    if (s != PP_OK) {
        (void)PP_CUDA(ex->dev, NULL, cudnnDestroyTensorDescriptor(desc));
        return s;
    }
    *t = (pp_cuda_tensor_desc){n, c, h, w, desc};
    ce->n_tdesc++;
    *out = desc;
    return PP_OK;
}

static void conv_plan_free(pp_exec *ex, pp_cuda_conv_plan *p)
{
    if (p->x_desc) (void)PP_CUDA(ex->dev, NULL, cudnnDestroyTensorDescriptor(p->x_desc));
    if (p->y_desc) (void)PP_CUDA(ex->dev, NULL, cudnnDestroyTensorDescriptor(p->y_desc));
    if (p->w_desc) (void)PP_CUDA(ex->dev, NULL, cudnnDestroyFilterDescriptor(p->w_desc));
    if (p->conv_desc)
        (void)PP_CUDA(ex->dev, NULL, cudnnDestroyConvolutionDescriptor(p->conv_desc));
}

/* The math type a mode measures and asks heuristics with. */
static cudnnMathType_t base_math(const pp_device_ctx *dev)
{
    return dev->math == PP_MATH_TF32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}

static pp_status conv_plan(pp_exec *ex, pp_cuda_exec *ce, const pp_conv2d_desc *d,
                           pp_cuda_conv_plan **out, pp_error *err)
{
    for (int i = 0; i < ce->n_conv; i++)
        if (memcmp(&ce->conv[i].key, d, sizeof *d) == 0 && ce->conv[i].math == (int)ex->dev->math) {
            *out = &ce->conv[i];
            return PP_OK;
        }
    PP_TRY(grow((void **)&ce->conv, ce->n_conv, &ce->cap_conv, sizeof *ce->conv, ex->dev, err));
    pp_cuda_conv_plan *p = &ce->conv[ce->n_conv];
    memset(p, 0, sizeof *p);
    pp_device_ctx *dev = ex->dev;
    pp_status s = PP_CUDA(dev, err, cudnnCreateTensorDescriptor(&p->x_desc));
    if (s == PP_OK) s = PP_CUDA(dev, err, cudnnCreateTensorDescriptor(&p->y_desc));
    if (s == PP_OK) s = PP_CUDA(dev, err, cudnnCreateFilterDescriptor(&p->w_desc));
    if (s == PP_OK) s = PP_CUDA(dev, err, cudnnCreateConvolutionDescriptor(&p->conv_desc));
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnSetTensor4dDescriptor(p->x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                               d->n, d->c, d->h, d->w));
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnSetTensor4dDescriptor(p->y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                               d->n, d->k, d->p, d->q));
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnSetFilter4dDescriptor(p->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                               d->k, d->c, d->r, d->s));
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnSetConvolution2dDescriptor(p->conv_desc, d->pad_h, d->pad_w,
                                                    d->stride_h, d->stride_w, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    p->desc_math = base_math(dev);
    if (s == PP_OK) s = PP_CUDA(dev, err, cudnnSetConvolutionMathType(p->conv_desc, p->desc_math));
    int on = 0, oc = 0, oh = 0, ow = 0;
    if (s == PP_OK)
        s = PP_CUDA(dev, err,
                    cudnnGetConvolution2dForwardOutputDim(p->conv_desc, p->x_desc, p->w_desc,
                                                          &on, &oc, &oh, &ow));
    if (s == PP_OK && (on != d->n || oc != d->k || oh != d->p || ow != d->q))
        s = pp_error_set(err, PP_ERR_INTERNAL,
                         "%s: cuDNN computes a %dx%dx%dx%d convolution output, expected "
                         "%dx%dx%dx%d",
                         dev->name, on, oc, oh, ow, d->n, d->k, d->p, d->q);
    if (s != PP_OK) {
        conv_plan_free(ex, p);
        memset(p, 0, sizeof *p);
        return s;
    }
    p->key = *d;
    p->math = (int)dev->math;
    ce->n_conv++;
    *out = p;
    return PP_OK;
}

static pp_status set_desc_math(pp_exec *ex, pp_cuda_conv_plan *p, cudnnMathType_t m,
                               pp_error *err)
{
    if (p->desc_math == m) return PP_OK;
    PP_TRY(PP_CUDA(ex->dev, err, cudnnSetConvolutionMathType(p->conv_desc, m)));
    p->desc_math = m;
    return PP_OK;
}

/* ---- algorithm choice --------------------------------------------------------- */

static const char *const dir_what[] = {"forward", "backward-data", "backward-filter"};

static int algo_count(pp_algo_dir dir)
{
    return dir == PP_ALGO_FWD        ? CUDNN_CONVOLUTION_FWD_ALGO_COUNT
           : dir == PP_ALGO_BWD_DATA ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                     : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
}

/* Workspace bytes of algorithm algo with the descriptor's current math. */
static cudnnStatus_t ws_size(pp_cuda_exec *ce, const pp_cuda_conv_plan *p, pp_algo_dir dir,
                             int algo, size_t *bytes)
{
    switch (dir) {
    case PP_ALGO_FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(ce->dnn, p->x_desc, p->w_desc,
                                                       p->conv_desc, p->y_desc,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    case PP_ALGO_BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            ce->dnn, p->w_desc, p->y_desc, p->conv_desc, p->x_desc,
            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    case PP_ALGO_BWD_FILTER:
        break;
    }
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(ce->dnn, p->x_desc, p->y_desc,
                                                          p->conv_desc, p->w_desc,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo,
                                                          bytes);
}

/* One result of cudnnFind*Ex or cudnnGet*_v7, whatever the direction. */
typedef struct algo_perf {
    int algo;
    cudnnStatus_t status;
    float time;
    size_t memory;
    cudnnMathType_t math;
} algo_perf;

#define ALGO_PERF_MAX 16
#define COPY_PERF(dst, src, n)                                                               \
    for (int i_ = 0; i_ < (n) && i_ < ALGO_PERF_MAX; i_++)                                   \
    (dst)[i_] = (algo_perf){(int)(src)[i_].algo, (src)[i_].status, (src)[i_].time,           \
                           (src)[i_].memory, (src)[i_].mathType}

/* Makes algo with math type math the plan's choice for dir, if cuDNN accepts
 * it here: an algorithm of the direction, math acceptable in the device's
 * mode, and a workspace within ws_max. */
static pp_status use_algo(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_conv_plan *p, pp_algo_dir dir,
                          int algo, int math, pp_error *err)
{
    const bool tf32 = ex->dev->math == PP_MATH_TF32;
    if (algo < 0 || algo >= algo_count(dir) ||
        !(tf32 ? math == CUDNN_TENSOR_OP_MATH || math == CUDNN_DEFAULT_MATH ||
                     math == CUDNN_FMA_MATH
               : math == CUDNN_FMA_MATH))
        return pp_error_set(err, PP_ERR_BACKEND, "%s: %s algorithm %d with math type %d "
                            "does not apply", ex->dev->name, dir_what[dir], algo, math);
    PP_TRY(set_desc_math(ex, p, (cudnnMathType_t)math, err));
    size_t bytes = 0;
    PP_TRY(PP_CUDA(ex->dev, err, ws_size(ce, p, dir, algo, &bytes)));
    if (bytes > ws_max(ex))
        return pp_error_set(err, PP_ERR_BACKEND, "%s: %s algorithm %d needs %zu bytes of "
                            "workspace", ex->dev->name, dir_what[dir], algo, bytes);
    pp_cuda_conv_algo *a = &p->algo[dir]; /* the route stays as decided */
    a->have = true;
    a->algo = algo;
    a->math = (cudnnMathType_t)math;
    a->ws = bytes;
    return PP_OK;
}

/* The operands of a call, in the legacy API's order: forward x, w, y;
 * backward-data w, dy, dx; backward-filter x, dy, dw. acc: the call adds
 * to out (dw; dx when accumulating), so measuring, which overwrites its
 * output, writes into scratch instead. */
typedef struct conv_args {
    const void *a, *b;
    void *out;
    bool acc;
} conv_args;

/* Bytes of the output of dir. */
static size_t out_bytes(const pp_conv2d_desc *d, pp_algo_dir dir)
{
    size_t n = dir == PP_ALGO_FWD        ? (size_t)d->n * d->k * d->p * d->q
               : dir == PP_ALGO_BWD_DATA ? (size_t)d->n * d->c * d->h * d->w
                                         : (size_t)d->k * d->c * d->r * d->s;
    return n * sizeof(float);
}

/* cuDNN's algorithms for dir into perf (*n of them, best first): timed on
 * the tensors of args with ws_bytes of workspace at ws when args is given
 * (cudnnFind*AlgorithmEx), its heuristics otherwise (cudnnGet*Algorithm_v7).
 * *call names the cuDNN function for messages. */
static cudnnStatus_t query(pp_cuda_exec *ce, const pp_cuda_conv_plan *p, pp_algo_dir dir,
                           const conv_args *args, void *ws, size_t ws_bytes, algo_perf *perf,
                           int *n, const char **call)
{
    cudnnStatus_t st;
    *n = 0;
    switch (dir) {
    case PP_ALGO_FWD: {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        const int want = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
        *call = args ? "cudnnFindConvolutionForwardAlgorithmEx"
                     : "cudnnGetConvolutionForwardAlgorithm_v7";
        st = args ? cudnnFindConvolutionForwardAlgorithmEx(
                        ce->dnn, p->x_desc, args->a, p->w_desc, args->b, p->conv_desc,
                        p->y_desc, args->out, want, n, r, ws, ws_bytes)
                  : cudnnGetConvolutionForwardAlgorithm_v7(ce->dnn, p->x_desc, p->w_desc,
                                                           p->conv_desc, p->y_desc, want, n, r);
        COPY_PERF(perf, r, *n);
        return st;
    }
    case PP_ALGO_BWD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        const int want = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
        *call = args ? "cudnnFindConvolutionBackwardDataAlgorithmEx"
                     : "cudnnGetConvolutionBackwardDataAlgorithm_v7";
        st = args ? cudnnFindConvolutionBackwardDataAlgorithmEx(
                        ce->dnn, p->w_desc, args->a, p->y_desc, args->b, p->conv_desc,
                        p->x_desc, args->out, want, n, r, ws, ws_bytes)
                  : cudnnGetConvolutionBackwardDataAlgorithm_v7(
                        ce->dnn, p->w_desc, p->y_desc, p->conv_desc, p->x_desc, want, n, r);
        COPY_PERF(perf, r, *n);
        return st;
    }
    case PP_ALGO_BWD_FILTER:
        break;
    }
    cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    const int want = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    *call = args ? "cudnnFindConvolutionBackwardFilterAlgorithmEx"
                 : "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
    st = args ? cudnnFindConvolutionBackwardFilterAlgorithmEx(
                    ce->dnn, p->x_desc, args->a, p->y_desc, args->b, p->conv_desc, p->w_desc,
                    args->out, want, n, r, ws, ws_bytes)
              : cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                    ce->dnn, p->x_desc, p->y_desc, p->conv_desc, p->w_desc, want, n, r);
    COPY_PERF(perf, r, *n);
    return st;
}

/* Times every algorithm of dir on the call's tensors; *out gets the fastest
 * acceptable one, with the algorithms left out for asking more than the cap. */
static pp_status measure(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_conv_plan *p, pp_algo_dir dir,
                         const conv_args *args, pp_algo_choice *out, pp_error *err)
{
    pp_device_ctx *dev = ex->dev;
    const bool tf32 = dev->math == PP_MATH_TF32;
    PP_TRY(set_desc_math(ex, p, base_math(dev), err));
    const size_t cap = ws_max(ex);
    size_t ws_bytes = 0, over_bytes = 0;
    int over = 0;
    for (int a = 0; a < algo_count(dir); a++) {
        size_t b = 0;
        if (ws_size(ce, p, dir, a, &b) != CUDNN_STATUS_SUCCESS) continue;
        if (b > cap) {
            over++;
            if (b > over_bytes) over_bytes = b;
        } else if (b > ws_bytes) {
            ws_bytes = b;
        }
    }
    /* the output's scratch first, when the call accumulates into its output */
    const size_t scratch = args->acc ? (out_bytes(&p->key, dir) + 255) & ~(size_t)255 : 0;
    const size_t bytes = scratch + ws_bytes;
    void *tmp = NULL;
    pp_status s = pp_cuda_scratch_alloc(ex, bytes, &tmp, err);
    /* the inputs and the allocation are ready for any stream cuDNN may use */
    if (s == PP_OK) s = PP_CUDA(dev, err, cudaStreamSynchronize(ce->stream));
    /* measuring overwrites the output: the call's own, or the scratch */
    const conv_args on = {args->a, args->b, args->acc ? tmp : args->out, false};
    algo_perf perf[ALGO_PERF_MAX];
    int n = 0;
    const char *call = "";
    if (s == PP_OK) {
        cudnnStatus_t st = query(ce, p, dir, &on, tmp ? (char *)tmp + scratch : NULL, ws_bytes,
                                 perf, &n, &call);
        if (st != CUDNN_STATUS_SUCCESS)
            s = pp_cuda_fail_dnn(st, call, __FILE__, __LINE__, dev, err);
    }
    if (tmp) (void)PP_CUDA(dev, NULL, cudaStreamSynchronize(ce->stream));
    pp_cuda_scratch_free(ex, tmp, bytes);
    if (s != PP_OK) return s;
    /* results come fastest first */
    for (int i = 0; i < n && i < ALGO_PERF_MAX; i++) {
        const algo_perf *r = &perf[i];
        bool math_ok = tf32 ? r->math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                            : r->math == CUDNN_FMA_MATH;
        if (r->status == CUDNN_STATUS_SUCCESS && r->memory <= ws_bytes && math_ok) {
            int over_mb = (int)((over_bytes + ((size_t)1 << 20) - 1) >> 20);
            *out = (pp_algo_choice){r->algo, (int)r->math, r->time, over, over_mb,
                                    PP_ALGO_API_LEGACY, 0.0f};
            return PP_OK;
        }
    }
    return pp_error_set(err, PP_ERR_BACKEND, "%s: no %s algorithm ran in measurement",
                        dev->name, dir_what[dir]);
}

/* cuDNN's heuristic pick: the first result within the workspace limit whose
 * math type comes first in the mode's order. In fp32 mode the descriptor
 * stays at CUDNN_FMA_MATH whatever the result reports. */
static pp_status heuristic(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_conv_plan *p, pp_algo_dir dir,
                           pp_error *err)
{
    pp_device_ctx *dev = ex->dev;
    const bool tf32 = dev->math == PP_MATH_TF32;
    PP_TRY(set_desc_math(ex, p, base_math(dev), err));
    algo_perf perf[ALGO_PERF_MAX];
    int n = 0;
    const char *call = "";
    cudnnStatus_t st = query(ce, p, dir, NULL, NULL, 0, perf, &n, &call);
    if (st != CUDNN_STATUS_SUCCESS)
        return pp_cuda_fail_dnn(st, call, __FILE__, __LINE__, dev, err);
    static const cudnnMathType_t fp32_order[] = {CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH};
    static const cudnnMathType_t tf32_order[] = {CUDNN_TENSOR_OP_MATH, CUDNN_DEFAULT_MATH,
                                                 CUDNN_FMA_MATH};
    const cudnnMathType_t *order = tf32 ? tf32_order : fp32_order;
    const int passes = tf32 ? 3 : 2;
    for (int pass = 0; pass < passes; pass++)
        for (int i = 0; i < n && i < ALGO_PERF_MAX; i++) {
            const algo_perf *r = &perf[i];
            if (r->status != CUDNN_STATUS_SUCCESS || r->memory > ws_max(ex) ||
                r->math != order[pass])
                continue;
            pp_error tmp;
            if (use_algo(ex, ce, p, dir, r->algo, tf32 ? (int)r->math : CUDNN_FMA_MATH, &tmp) ==
                PP_OK)
                return PP_OK;
        }
    const pp_conv2d_desc *d = &p->key;
    return pp_error_set(err, PP_ERR_BACKEND,
                        "%s: cuDNN offers no %s %s convolution algorithm within %zu MiB of "
                        "workspace for x %dx%dx%dx%d, w %dx%dx%dx%d, stride %d, pad %d",
                        dev->name, tf32 ? "tf32" : "fp32 (non-TF32)", dir_what[dir],
                        ws_max(ex) >> 20, d->n, d->c, d->h, d->w, d->k, d->c, d->r,
                        d->s, d->stride_h, d->pad_h);
}

/* The graph API's plan for the call (gconv.c, f32 NCHW): made and timed
 * (*ms) without running it when prepare is set, else run. */
static pp_status graph_call(pp_exec *ex, const pp_cuda_conv_plan *p, pp_algo_dir dir,
                            const conv_args *args, bool prepare, float *ms, pp_error *err)
{
    static const pp_gconv_dir gdir[] = {PP_GCONV_FWD, PP_GCONV_DGRAD, PP_GCONV_WGRAD};
    /* the graph API's dgrad takes dy first */
    const void *a = dir == PP_ALGO_BWD_DATA ? args->b : args->a;
    const void *b = dir == PP_ALGO_BWD_DATA ? args->a : args->b;
    const float beta = args->acc ? 1.0f : 0.0f;
    if (prepare)
        return pp_cuda_gconv_prepare(ex, &p->key, gdir[dir], PP_F32, false, a, b, args->out,
                                     1.0f, beta, ms, err);
    return pp_cuda_gconv(ex, &p->key, gdir[dir], PP_F32, false, a, b, args->out, 1.0f, beta,
                         err);
}

/* The graph API's plan for the call timed against the legacy algorithm's
 * choice c: whether it runs instead (faster by more than
 * PP_ALGO_GRAPH_MARGIN), and into *c the API and the plan's time when c has
 * none yet (*timed: c changed). Any failure of the graph API leaves the
 * algorithm. */
static bool graph_wins(pp_exec *ex, const pp_cuda_conv_plan *p, pp_algo_dir dir,
                       const conv_args *args, pp_algo_choice *c, bool *timed)
{
    float ms = 0.0f;
    pp_error tmp;
    if (graph_call(ex, p, dir, args, true, &ms, &tmp) != PP_OK) ms = 0.0f;
    const bool wins = ms > 0.0f && ms < c->ms * (1.0f - PP_ALGO_GRAPH_MARGIN);
    *timed = c->graph_ms == 0.0f && ms > 0.0f;
    if (*timed) {
        c->api = wins ? PP_ALGO_API_GRAPH : PP_ALGO_API_LEGACY;
        c->graph_ms = ms;
    }
    return wins;
}

/* The legacy algorithm for dir, chosen at its first use (steps 1 to 3 at
 * the top of this file) unless chosen already. With compare, a choice found
 * or measured is also timed against the graph API's plan (graph_wins): the
 * route follows, and the cache entry records the first comparison. */
static pp_status legacy_algo(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_conv_plan *p,
                             pp_algo_dir dir, const conv_args *args, bool compare, pp_error *err)
{
    pp_cuda_device *cd = pp_cuda_dev(ex->dev);
    pp_cuda_conv_algo *a = &p->algo[dir];
    if (!a->have && cd->find) {
        pp_algo_key key;
        pp_algo_key_make(&key, cd->gpu_name, cd->cudnn_version, ex->dev->math, cd->ws_mb, dir,
                         &p->key);
        pp_algo_choice c;
        pp_error tmp;
        bool stored = false, fresh = false, timed = false;
        if (pp_algo_cache_find(&cd->algos, &key, &c)) {
            stored = use_algo(ex, ce, p, dir, c.algo, c.math_type, &tmp) == PP_OK;
            if (!stored) pp_algo_cache_remove(&cd->algos, &key); /* refused here */
        }
        if (!stored) fresh = measure(ex, ce, p, dir, args, &c, &tmp) == PP_OK;
        if (compare && (stored || fresh)) a->graph = graph_wins(ex, p, dir, args, &c, &timed);
        if (stored && timed) pp_algo_cache_update(&cd->algos, &key, &c);
        if (fresh) {
            pp_algo_cache_insert(&cd->algos, &key, &c); /* c: the first stored */
            (void)use_algo(ex, ce, p, dir, c.algo, c.math_type, &tmp);
        }
    }
    if (!a->have) PP_TRY(heuristic(ex, ce, p, dir, err));
    return set_desc_math(ex, p, a->math, err);
}

/* Which API runs dir, decided at its first use (the top of this file): the
 * legacy algorithm, or with PP_CUDA_CONV_API=graph the graph API's plan
 * wherever it has one, or by default (with measurement on) the faster of
 * the two (legacy_algo). Decided once either is chosen. */
static pp_status conv_route(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_conv_plan *p,
                            pp_algo_dir dir, const conv_args *args, pp_error *err)
{
    pp_cuda_conv_algo *a = &p->algo[dir];
    if (a->graph || a->have) return PP_OK;
    pp_cuda_device *cd = pp_cuda_dev(ex->dev);
    if (cd->conv_api != PP_ALGO_API_GRAPH)
        return legacy_algo(ex, ce, p, dir, args, cd->conv_api == PP_ALGO_API_AUTO, err);
    /* the algorithm only where the plan refuses (conv_begin) */
    float ms;
    pp_error tmp;
    a->graph = graph_call(ex, p, dir, args, true, &ms, &tmp) == PP_OK;
    return PP_OK;
}

/* Runs the call by its route: the graph API's plan, or the legacy
 * algorithm (also where the plan refuses the call: a pointer not 16-byte
 * aligned, or its workspace or cuDNN's own memory not to be had), whose
 * workspace (p->algo[dir].ws bytes) comes into *ws. *done: the graph API ran
 * it; otherwise the caller runs the algorithm. */
static pp_status conv_begin(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_conv_plan *p,
                            pp_algo_dir dir, const conv_args *args, bool *done, void **ws,
                            pp_error *err)
{
    *done = false;
    PP_TRY(conv_route(ex, ce, p, dir, args, err));
    if (p->algo[dir].graph) {
        pp_status s = graph_call(ex, p, dir, args, false, NULL, err);
        if (s != PP_ERR_UNSUPPORTED) {
            *done = s == PP_OK;
            return s;
        }
    }
    PP_TRY(legacy_algo(ex, ce, p, dir, args, false, err));
    return pp_exec_workspace(ex, p->algo[dir].ws, ws, err);
}

/* ---- convolution ------------------------------------------------------------- */

pp_status pp_cuda_conv2d_forward(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                 const float *w, float *y, pp_error *err)
{
    pp_cuda_exec *ce;
    pp_cuda_conv_plan *p;
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, &ce, err));
    PP_TRY(conv_plan(ex, ce, d, &p, err));
    bool done;
    void *ws;
    PP_TRY(conv_begin(ex, ce, p, PP_ALGO_FWD, &(conv_args){x, w, y, false}, &done, &ws, err));
    if (done) return PP_OK;
    const pp_cuda_conv_algo *a = &p->algo[PP_ALGO_FWD];
    return PP_CUDA(ex->dev, err,
                   cudnnConvolutionForward(ce->dnn, &one, p->x_desc, x, p->w_desc, w,
                                           p->conv_desc, (cudnnConvolutionFwdAlgo_t)a->algo, ws,
                                           a->ws, &zero, p->y_desc, y));
}

/* dx = beta * dx + conv_transpose(dy, w), beta 0 or 1 */
static pp_status conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d, const float *dy,
                                      const float *w, const float *beta, float *dx, pp_error *err)
{
    pp_cuda_exec *ce;
    pp_cuda_conv_plan *p;
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, &ce, err));
    PP_TRY(conv_plan(ex, ce, d, &p, err));
    bool done;
    void *ws;
    PP_TRY(conv_begin(ex, ce, p, PP_ALGO_BWD_DATA, &(conv_args){w, dy, dx, *beta != 0.0f},
                      &done, &ws, err));
    if (done) return PP_OK;
    const pp_cuda_conv_algo *a = &p->algo[PP_ALGO_BWD_DATA];
    return PP_CUDA(ex->dev, err,
                   cudnnConvolutionBackwardData(ce->dnn, &one, p->w_desc, w, p->y_desc, dy,
                                                p->conv_desc,
                                                (cudnnConvolutionBwdDataAlgo_t)a->algo, ws, a->ws,
                                                beta, p->x_desc, dx));
}

pp_status pp_cuda_conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d, const float *dy,
                                       const float *w, float *dx, pp_error *err)
{
    return conv2d_backward_data(ex, d, dy, w, &zero, dx, err);
}

/* beta = 1: cuDNN adds the result to dx */
pp_status pp_cuda_conv2d_backward_data_accumulate(pp_exec *ex, const pp_conv2d_desc *d,
                                                  const float *dy, const float *w, float *dx,
                                                  pp_error *err)
{
    return conv2d_backward_data(ex, d, dy, w, &one, dx, err);
}

pp_status pp_cuda_conv2d_backward_filter(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                         const float *dy, float *dw, pp_error *err)
{
    pp_cuda_exec *ce;
    pp_cuda_conv_plan *p;
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, &ce, err));
    PP_TRY(conv_plan(ex, ce, d, &p, err));
    bool done;
    void *ws;
    /* dw accumulates over micro-batches */
    PP_TRY(conv_begin(ex, ce, p, PP_ALGO_BWD_FILTER, &(conv_args){x, dy, dw, true}, &done, &ws,
                      err));
    if (done) return PP_OK;
    const pp_cuda_conv_algo *a = &p->algo[PP_ALGO_BWD_FILTER];
    return PP_CUDA(ex->dev, err,
                   cudnnConvolutionBackwardFilter(ce->dnn, &one, p->x_desc, x, p->y_desc, dy,
                                                  p->conv_desc,
                                                  (cudnnConvolutionBwdFilterAlgo_t)a->algo, ws,
                                                  a->ws, &one, p->w_desc, dw));
}

/* ---- batch norm ------------------------------------------------------------- */

/* Descriptors of the activation (N,C,H,W) and of the per-channel parameters
 * (1,C,1,1), spatial mode. */
static pp_status bn_descs(pp_exec *ex, const pp_bn_desc *d, pp_cuda_exec **ce,
                          cudnnTensorDescriptor_t *xd, cudnnTensorDescriptor_t *pd, pp_error *err)
{
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, ce, err));
    PP_TRY(tensor_desc(ex, *ce, d->n, d->c, d->h, d->w, xd, err));
    return tensor_desc(ex, *ce, 1, d->c, 1, 1, pd, err);
}

pp_status pp_cuda_batchnorm_forward_train(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                          const float *gamma, const float *beta,
                                          float *running_mean, float *running_var, float *y,
                                          float *save_mean, float *save_invstd, pp_error *err)
{
    pp_cuda_exec *ce;
    cudnnTensorDescriptor_t xd, pd;
    PP_TRY(bn_descs(ex, d, &ce, &xd, &pd, err));
    /* running = (1 - momentum) * running + momentum * batch, with the unbiased
     * batch variance for running_var (cuDNN's definition, as PyTorch) */
    return PP_CUDA(ex->dev, err,
                   cudnnBatchNormalizationForwardTraining(
                       ce->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x, xd, y, pd, gamma,
                       beta, (double)d->momentum, running_mean, running_var, (double)d->eps,
                       save_mean, save_invstd));
}

pp_status pp_cuda_batchnorm_forward_infer(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                          const float *gamma, const float *beta,
                                          const float *running_mean, const float *running_var,
                                          float *y, pp_error *err)
{
    pp_cuda_exec *ce;
    cudnnTensorDescriptor_t xd, pd;
    PP_TRY(bn_descs(ex, d, &ce, &xd, &pd, err));
    return PP_CUDA(ex->dev, err,
                   cudnnBatchNormalizationForwardInference(
                       ce->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, x, xd, y, pd, gamma,
                       beta, running_mean, running_var, (double)d->eps));
}

pp_status pp_cuda_batchnorm_backward(pp_exec *ex, const pp_bn_desc *d, const float *x,
                                     const float *dy, const float *gamma, const float *save_mean,
                                     const float *save_invstd, float *dx, float *dgamma,
                                     float *dbeta, pp_error *err)
{
    pp_cuda_exec *ce;
    cudnnTensorDescriptor_t xd, pd;
    PP_TRY(bn_descs(ex, d, &ce, &xd, &pd, err));
    /* dx is overwritten (betaDataDiff = 0) and dgamma, dbeta accumulate over
     * micro-batches. cuDNN writes this micro-batch's parameter gradients into
     * scratch (betaParamDiff = 0, the only way PyTorch calls it) and our
     * kernel adds them. The first GPU run, which let cuDNN blend into them
     * (betaParamDiff = 1), found batch-norm parameter gradients of steps of
     * several micro-batches up to 73% away from the CPU backend's, as an
     * overwrite instead of a blend would give; the blend is out of the
     * question now. */
    const size_t bytes = 2 * (size_t)d->c * sizeof(float);
    float *tmp = NULL;
    PP_TRY(pp_cuda_scratch_alloc(ex, bytes, (void **)&tmp, err));
    pp_status s = PP_CUDA(ex->dev, err,
                          cudnnBatchNormalizationBackward(
                              ce->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd, x,
                              xd, dy, xd, dx, pd, gamma, tmp, tmp + d->c, (double)d->eps,
                              save_mean, save_invstd));
    const unsigned grid = pp_cuda_grid(ex, d->c, PP_CUDA_BLOCK);
    if (s == PP_OK)
        s = PP_CUDA(ex->dev, err,
                    pp_cuda_launch_elementwise(ce->stream, grid, PP_CUDA_EW_ADD, d->c, dgamma, tmp,
                                               dgamma));
    if (s == PP_OK)
        s = PP_CUDA(ex->dev, err,
                    pp_cuda_launch_elementwise(ce->stream, grid, PP_CUDA_EW_ADD, d->c, dbeta,
                                               tmp + d->c, dbeta));
    pp_cuda_scratch_free(ex, tmp, bytes);
    return s;
}

/* ---- max pooling ------------------------------------------------------------- */

static pp_status pool_plan(pp_exec *ex, pp_cuda_exec *ce, const pp_pool_desc *d,
                           cudnnPoolingDescriptor_t *out, pp_error *err)
{
    for (int i = 0; i < ce->n_pool; i++) {
        pp_cuda_pool_plan *p = &ce->pool[i];
        if (p->kernel == d->kernel && p->stride == d->stride && p->pad == d->pad) {
            *out = p->desc;
            return PP_OK;
        }
    }
    PP_TRY(grow((void **)&ce->pool, ce->n_pool, &ce->cap_pool, sizeof *ce->pool, ex->dev, err));
    pp_cuda_pool_plan *p = &ce->pool[ce->n_pool];
    cudnnPoolingDescriptor_t desc;
    PP_TRY(PP_CUDA(ex->dev, err, cudnnCreatePoolingDescriptor(&desc)));
    /* padding never wins (as PyTorch's -inf padding); NaN propagates as on the CPU */
    pp_status s = PP_CUDA(ex->dev, err,
                          cudnnSetPooling2dDescriptor(desc, CUDNN_POOLING_MAX_DETERMINISTIC,
                                                      CUDNN_PROPAGATE_NAN, d->kernel, d->kernel,
                                                      d->pad, d->pad, d->stride, d->stride));
    if (s != PP_OK) {
        (void)PP_CUDA(ex->dev, NULL, cudnnDestroyPoolingDescriptor(desc));
        return s;
    }
    *p = (pp_cuda_pool_plan){d->kernel, d->stride, d->pad, desc};
    ce->n_pool++;
    *out = desc;
    return PP_OK;
}

static pp_status pool_descs(pp_exec *ex, const pp_pool_desc *d, pp_cuda_exec **ce,
                            cudnnPoolingDescriptor_t *pd, cudnnTensorDescriptor_t *xd,
                            cudnnTensorDescriptor_t *yd, pp_error *err)
{
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, ce, err));
    PP_TRY(pool_plan(ex, *ce, d, pd, err));
    PP_TRY(tensor_desc(ex, *ce, d->n, d->c, d->h, d->w, xd, err));
    return tensor_desc(ex, *ce, d->n, d->c, d->p, d->q, yd, err);
}

pp_status pp_cuda_maxpool_forward(pp_exec *ex, const pp_pool_desc *d, const float *x, float *y,
                                  int32_t *idx, pp_error *err)
{
    pp_cuda_exec *ce;
    cudnnPoolingDescriptor_t pd;
    cudnnTensorDescriptor_t xd, yd;
    PP_TRY(pool_descs(ex, d, &ce, &pd, &xd, &yd, err));
    return PP_CUDA(ex->dev, err, cudnnPoolingForward(ce->dnn, pd, &one, xd, x, &zero, yd, y));
}

pp_status pp_cuda_maxpool_backward(pp_exec *ex, const pp_pool_desc *d, const float *x,
                                   const float *y, const float *dy, const int32_t *idx, float *dx,
                                   pp_error *err)
{
    pp_cuda_exec *ce;
    cudnnPoolingDescriptor_t pd;
    cudnnTensorDescriptor_t xd, yd;
    PP_TRY(pool_descs(ex, d, &ce, &pd, &xd, &yd, err));
    return PP_CUDA(ex->dev, err,
                   cudnnPoolingBackward(ce->dnn, pd, &one, yd, y, yd, dy, xd, x, &zero, xd, dx));
}

void pp_cuda_dnn_cache_free(pp_exec *ex)
{
    pp_cuda_exec *ce = pp_cuda_ex(ex);
    for (int i = 0; i < ce->n_conv; i++) conv_plan_free(ex, &ce->conv[i]);
    for (int i = 0; i < ce->n_tdesc; i++)
        (void)PP_CUDA(ex->dev, NULL, cudnnDestroyTensorDescriptor(ce->tdesc[i].desc));
    for (int i = 0; i < ce->n_pool; i++)
        (void)PP_CUDA(ex->dev, NULL, cudnnDestroyPoolingDescriptor(ce->pool[i].desc));
    free(ce->conv);
    free(ce->tdesc);
    free(ce->pool);
    ce->conv = NULL;
    ce->tdesc = NULL;
    ce->pool = NULL;
    ce->n_conv = ce->cap_conv = ce->n_tdesc = ce->cap_tdesc = ce->n_pool = ce->cap_pool = 0;
}
