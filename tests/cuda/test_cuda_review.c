/*
 * test_cuda_review.c - the CUDA side of the review's findings (issue 23),
 * each where it can only be seen with a GPU; their logic is checked without
 * one by the CPU suites named here.
 *   1. peer access: after pp_device_peer_access(cuda:0, cuda:1), cuda:1's
 *      kernels read a pool allocation of cuda:0 and the pool grants cuda:1
 *      read-write access; NCCL in a job of two threads on two GPUs sums pool
 *      allocations (skipped with fewer than two GPUs able to reach each
 *      other). CPU: tests/comm/test_comm_devices.c.
 *   2. graph memory: after freeing an instantiated graph whose captured work
 *      allocated in stream order, cuda:0 reserves no graph memory.
 *   3. a workspace that grows during a capture: the capture is discarded,
 *      the step runs eagerly, graphs stay on and the key is captured at its
 *      next run, then replayed; nothing is left counted. CPU (the workspace
 *      put back): tests/models/test_capture_undo.c.
 *   4. graph-API convolutions out of memory: with the device capped below
 *      the plan's workspace, the call runs the candidate that needs less, or
 *      is refused (PP_ERR_UNSUPPORTED, the caller's fallback) instead of
 *      failing.
 *   5. a refused capture whose callbacks kept stream-ordered memory: the
 *      stage abandons it (pp_tensor_abandon), the eager run that follows
 *      works and nothing stays counted. CPU: tests/models/test_capture_undo.c.
 *   6. NCCL order: of two communicators on cuda:0, a sum of the second one
 *      enqueued on another stream waits for the first one's (behind a 300 ms
 *      delay); two ranks of a job of threads on one GPU are refused by both
 *      (no hang). CPU: tests/comm/test_comm_devices.c.
 *   7. a CPU stage feeding a CUDA stage: the CPU stage's slots that the GPU
 *      copies are page-locked (cudaPointerGetAttributes: host memory the
 *      device knows), and data flows through them. CPU:
 *      tests/streams/test_executor_slots.c.
 *   8, 9. tests/ops/edge_cases.h on cuda:0 (batch norm over zero rows
 *      refused as on the CPU; max pooling with padded windows), and the native
 *      bf16 NHWC max pool writing every index over a poisoned buffer.
 * Exits 77 (skip) where no CUDA device is visible.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/comm/comm.h"
#include "runtime/comm/nccl.h"
#include "runtime/core/backend.h"
#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "runtime/cuda/gconv.h"
#include "runtime/cuda/internal.h"
#include "streams/executor.h"
#include "streams/executor_internal.h"
#include "streams/graph.h"
#include "streams/schedule.h"
#include "streams/stream.h"
#include "tests/check.h"
#include "tests/ops/edge_cases.h"

static pp_registry *g_reg;
static pp_device_ctx *g_cpu, *g_gpu;
static pp_exec g_egpu;

static size_t graph_mem_reserved(int dev)
{
    size_t v = 0;
    if (cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemCurrent, &v) != cudaSuccess)
        (void)cudaGetLastError();
    return v;
}

/* ---- 8, 9: the shared edge cases, and the native max pool's indices -------------- */

static void test_edges(void)
{
    edge_batchnorm_zero_rows(g_gpu, &g_egpu);
    edge_maxpool_padding(g_gpu, &g_egpu);
    /* bf16 NHWC: the native kernel; idx poisoned, every index written */
    pp_error err;
    const int n = 2, c = 8, h = 5, w = 4;
    pp_pool_desc d;
    CHECK_OK(pp_pool_desc_init(&d, n, c, h, w, 2, 1, 1, &err), &err);
    const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * d.p * d.q;
    float *hx = malloc(nx * sizeof *hx);
    for (size_t i = 0; i < nx; i++) hx[i] = (float)((i * 7919) % nx) - (float)(nx / 2);
    pp_tensor fx = edge_tensor(g_gpu, PP_F32, 4, n, c, h, w);
    pp_tensor x = edge_tensor(g_gpu, PP_BF16, 4, n, c, h, w);
    pp_tensor y = edge_tensor(g_gpu, PP_BF16, 4, n, c, d.p, d.q);
    pp_tensor idx = edge_tensor(g_gpu, PP_I32, 4, n, c, d.p, d.q);
    pp_tensor idx_nchw = edge_tensor(g_gpu, PP_I32, 4, n, c, d.p, d.q);
    x.layout = y.layout = idx.layout = PP_NHWC;
    CHECK_OK(pp_tensor_from_host(&fx, hx, nx * sizeof *hx, &err), &err);
    CHECK_OK(pp_cast(&g_egpu, &fx, &x, &err), &err);
    CHECK_OK(pp_exec_sync(&g_egpu, &err), &err);
    CHECK(cudaMemset(idx.data, 0x7f, ny * sizeof(int32_t)) == cudaSuccess);
    CHECK(cudaDeviceSynchronize() == cudaSuccess); /* before the exec's own stream reads it */
    CHECK_OK(pp_maxpool_forward(&g_egpu, &d, &x, &y, &idx, &err), &err);
    CHECK_OK(pp_copy(&g_egpu, &idx, &idx_nchw, &err), &err);
    int32_t *hi = malloc(ny * sizeof *hi);
    CHECK_OK(pp_tensor_to_host(&idx_nchw, hi, ny * sizeof *hi, &err), &err);
    size_t bad = 0;
    for (int pl = 0; pl < n * c; pl++)
        for (int i = 0; i < d.p; i++)
            for (int j = 0; j < d.q; j++) {
                int h0 = i - 1 < 0 ? 0 : i - 1, w0 = j - 1 < 0 ? 0 : j - 1;
                int h1 = i + 1 > h ? h : i + 1, w1 = j + 1 > w ? w : j + 1;
                int at = -1;
                float best = 0;
                for (int a = h0; a < h1; a++)
                    for (int b = w0; b < w1; b++) {
                        float v = hx[(size_t)pl * h * w + (size_t)a * w + b];
                        if (at < 0 || v > best) best = v, at = a * w + b;
                    }
                bad += hi[((size_t)pl * d.p + i) * d.q + j] != at;
            }
    CHECK_MSG(bad == 0, "native max pool: %zu of %zu indices wrong or unwritten", bad, ny);
    pp_tensor *all[] = {&fx, &x, &y, &idx, &idx_nchw};
    for (int i = 0; i < 5; i++) pp_tensor_free(all[i]);
    free(hx);
    free(hi);
}

/* ---- 2: graph memory given back ---------------------------------------------------- */

static pp_status scratch_work(pp_exec *ex, void *arg, pp_error *err)
{
    pp_tensor t;
    PP_TRY(pp_tensor_alloc_on(&t, ex, PP_F32, 1, (int64_t[]){1 << 22}, err));
    pp_status s = pp_zero(ex, &t, err);
    pp_tensor_free(&t);
    return s;
}

static void test_graph_memory(void)
{
    pp_error err;
    pp_stream *s = NULL;
    CHECK_OK(pp_stream_new(g_gpu, PP_STREAM_COMPUTE, "graph", &s, &err), &err);
    if (!s) return;
    CHECK_OK(scratch_work(pp_stream_exec(s), NULL, &err), &err); /* handles made eagerly */
    CHECK_OK(pp_stream_synchronize(s, &err), &err);
    pp_graph *g = NULL;
    CHECK_OK(pp_graph_capture_begin(&s, 1, &err), &err);
    CHECK_OK(pp_stream_launch(s, "scratch", scratch_work, NULL, &err), &err);
    CHECK_OK(pp_graph_capture_end(&s, 1, &g, &err), &err);
    if (g) {
        CHECK_OK(pp_graph_launch(g, &err), &err);
        CHECK_OK(pp_stream_synchronize(s, &err), &err);
        CHECK_MSG(graph_mem_reserved(0) > 0, "the graph's allocation reserved no graph memory");
        pp_graph_free(g);
        CHECK_MSG(graph_mem_reserved(0) == 0, "%zu bytes of graph memory kept after the graph "
                  "was freed", graph_mem_reserved(0));
    }
    pp_stream_free(s);
}

/* ---- 3, 5: captures discarded and refused -------------------------------------- */

typedef struct ws_stage {
    size_t ws_bytes;           /* what the forward asks of its exec's workspace */
    bool refuse;               /* the forward synchronises its stream (refused in a capture) */
    bool capturing;
    int begins, abandons, replays;
    pp_tensor kept[4];         /* stream-ordered, kept from forward to backward */
} ws_stage;

static pp_status ws_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    t->dtype = PP_F32;
    t->ndim = 2;
    t->shape[0] = mb_size;
    t->shape[1] = 4;
    return PP_OK;
}

static pp_status ws_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                            pp_tensor *out, pp_error *err)
{
    ws_stage *st = user;
    void *ws;
    PP_TRY(pp_exec_workspace(ex, st->ws_bytes, &ws, err));
    pp_tensor view = {.data = ws, .dtype = PP_F32, .ndim = 1, .dev = ex->dev,
                      .shape = {(int64_t)(st->ws_bytes / 4), 1, 1, 1}};
    PP_TRY(pp_zero(ex, &view, err));
    PP_TRY(pp_tensor_alloc_on(&st->kept[mb], ex, PP_F32, 1, (int64_t[]){1 << 16}, err));
    PP_TRY(pp_zero(ex, &st->kept[mb], err));
    if (st->refuse && st->capturing) PP_TRY(pp_exec_sync(ex, err));
    return pp_zero(ex, out, err);
}

static pp_status ws_backward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *gout,
                             pp_tensor *gin, pp_error *err)
{
    ws_stage *st = user;
    pp_tensor_free(&st->kept[mb]);
    return PP_OK;
}

static void ws_begin(void *user)
{
    ws_stage *st = user;
    st->capturing = true;
    st->begins++;
}

static void ws_abandon(void *user)
{
    ws_stage *st = user;
    st->abandons++;
    for (int i = 0; i < 4; i++) pp_tensor_abandon(&st->kept[i]);
}

static void ws_replayed(void *user, const pp_schedule *s)
{
    ((ws_stage *)user)->replays++;
}

static const pp_stage_ops ws_ops = {.out_shape = ws_shape, .forward = ws_forward,
                                    .backward = ws_backward, .capture_begin = ws_begin,
                                    .capture_abandon = ws_abandon, .replayed = ws_replayed};

/* One replayable run; its graph kind. */
static pp_step_graph ws_run(pp_executor *ex, ws_stage *st, const pp_schedule *s)
{
    pp_error err;
    pp_step_stats stats;
    st->capturing = false;
    CHECK_OK(pp_executor_run_replayable(ex, s, 0, &stats, &err), &err);
    st->capturing = false;
    pp_step_graph g = stats.graph;
    pp_step_stats_free(&stats);
    return g;
}

static void test_discarded_and_refused(void)
{
    pp_error err;
    const size_t before = pp_device_bytes_in_use(g_gpu);
    int sizes[2] = {2, 2};
    pp_schedule s;
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_GPIPE, 1, 2, sizes, &err), &err);

    /* 3: a workspace grown inside the capture */
    ws_stage st = {.ws_bytes = 4096};
    pp_stage_desc desc = {g_gpu, &ws_ops, &st};
    pp_executor *ex = NULL;
    CHECK_OK(pp_executor_new(&desc, 1, 2, &ex, &err), &err);
    if (ex) {
        CHECK(pp_executor_graphs(ex));
        CHECK(ws_run(ex, &st, &s) == PP_STEP_EAGER); /* a key's first run */
        st.ws_bytes = 8u << 20;                       /* grows inside the capture */
        CHECK(ws_run(ex, &st, &s) == PP_STEP_EAGER);
        CHECK_MSG(pp_executor_graphs(ex) && !pp_executor_graph_refusal(ex),
                  "graphs turned off: %s", pp_executor_graph_refusal(ex));
        CHECK(st.begins == 1 && st.abandons == 1);
        CHECK(ws_run(ex, &st, &s) == PP_STEP_CAPTURED);
        CHECK(ws_run(ex, &st, &s) == PP_STEP_REPLAYED && st.replays == 1);
        pp_executor_free(ex);
    }
    CHECK_OK(pp_exec_sync(&g_egpu, &err), &err);
    CHECK_MSG(pp_device_bytes_in_use(g_gpu) == before, "%zu bytes still counted after the "
              "executor", pp_device_bytes_in_use(g_gpu) - before);
    CHECK(graph_mem_reserved(0) == 0);

    /* 5: a refused capture whose forwards kept stream-ordered memory */
    ws_stage rf = {.ws_bytes = 4096, .refuse = true};
    desc.user = &rf;
    CHECK_OK(pp_executor_new(&desc, 1, 2, &ex, &err), &err);
    if (ex) {
        CHECK(ws_run(ex, &rf, &s) == PP_STEP_EAGER);
        CHECK(ws_run(ex, &rf, &s) == PP_STEP_EAGER); /* the capture refused, run eagerly */
        CHECK(rf.abandons == 1 && !pp_executor_graphs(ex) && pp_executor_graph_refusal(ex));
        CHECK(ws_run(ex, &rf, &s) == PP_STEP_EAGER);
        pp_executor_free(ex);
    }
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK_MSG(pp_device_bytes_in_use(g_gpu) == before, "%zu bytes still counted after a refused "
              "capture", pp_device_bytes_in_use(g_gpu) - before);
    pp_schedule_free(&s);
}

/* ---- 4: graph-API convolutions without memory for their workspace --------------- */

static void test_gconv_no_memory(void)
{
    pp_error err;
    pp_conv2d_desc d;
    CHECK_OK(pp_conv2d_desc_init(&d, 32, 64, 56, 56, 64, 3, 1, 1, &err), &err);
    const size_t xb = (size_t)d.n * d.c * d.h * d.w * 2, wb = (size_t)d.k * d.c * d.r * d.s * 2,
                 yb = (size_t)d.n * d.k * d.p * d.q * 2;
    void *x = NULL, *w = NULL, *y = NULL;
    CHECK_OK(pp_device_alloc(g_gpu, xb, &x, &err), &err);
    CHECK_OK(pp_device_alloc(g_gpu, wb, &w, &err), &err);
    CHECK_OK(pp_device_alloc(g_gpu, yb, &y, &err), &err);
    pp_exec ex;
    CHECK_OK(pp_exec_init(&ex, g_gpu, NULL, &err), &err);
    if (!x || !w || !y) return;
    CHECK(cudaMemset(x, 0x3c, xb) == cudaSuccess && cudaMemset(w, 0x3b, wb) == cudaSuccess);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    pp_exec_ws_mark none = pp_exec_workspace_mark(&ex);
    CHECK_OK(pp_cuda_gconv(&ex, &d, PP_GCONV_FWD, PP_BF16, true, x, w, y, 1.0f, 0.0f, &err), &err);
    pp_gconv_plan_info info;
    CHECK(pp_cuda_gconv_plan_info(&ex, &d, PP_GCONV_FWD, PP_BF16, true, 1.0f, 0.0f, &info));
    printf("graph-API conv: workspace %zu bytes; least-workspace candidate: %s (%zu bytes); "
           "%d over the workspace cap (largest %lld MiB)\n",
           info.ws, info.lean ? "kept" : "none", info.lean_ws, info.over, info.over_mb);
    /* a plan over the cap is counted with what it wanted, which passes the cap */
    const long long cap_mb = (long long)pp_cuda_dev(g_gpu)->ws_mb;
    CHECK_MSG(info.over >= 0 && (info.over > 0) == (info.over_mb > cap_mb),
              "%d over the cap, largest %lld MiB, cap %lld MiB", info.over, info.over_mb, cap_mb);
    if (info.ws > 0) {
        /* the plan stays cached; its workspace is given back, then cannot be had */
        void *ws = ex.ws;
        pp_exec_workspace_restore(&ex, &none);
        g_gpu->ops->free_async(&ex, ws);
        CHECK_OK(pp_exec_sync(&ex, &err), &err);
        const size_t lean_need = info.lean ? info.lean_ws + info.lean_ws / 4 : 0;
        g_gpu->bytes_limit = pp_device_bytes_in_use(g_gpu) + lean_need;
        pp_status s = pp_cuda_gconv(&ex, &d, PP_GCONV_FWD, PP_BF16, true, x, w, y, 1.0f, 0.0f,
                                    &err);
        if (info.lean)
            CHECK_MSG(s == PP_OK, "with room for the lean plan only: %s: %s", pp_status_name(s),
                      err.msg);
        else
            CHECK_MSG(s == PP_ERR_UNSUPPORTED && strstr(err.msg, "out of memory"),
                      "without room for the workspace: %s: %s", pp_status_name(s), err.msg);
        CHECK_OK(pp_exec_sync(&ex, &err), &err);
        g_gpu->bytes_limit = 0;
    } else {
        printf("graph-API conv: the plan needs no workspace here: nothing to run out of\n");
    }
    pp_exec_destroy(&ex);
    pp_device_free(g_gpu, x, xb);
    pp_device_free(g_gpu, w, wb);
    pp_device_free(g_gpu, y, yb);
}

/* ---- 7: a CPU stage feeding a CUDA stage ---------------------------------------- */

enum { PIN_D = 256, PIN_MB = 3 };

typedef struct pin_stage {
    bool cuda;
    pp_tensor seen[PIN_MB]; /* CUDA stage: its inputs, copied */
    int bad_grads;          /* CPU stage: gradient values not zero */
} pin_stage;

static float pin_value(int mb, int k) { return (float)(mb * 1000 + k) * 0.5f; }

static pp_status pin_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    t->dtype = PP_F32;
    t->ndim = 2;
    t->shape[0] = mb_size;
    t->shape[1] = PIN_D;
    return PP_OK;
}

static pp_status pin_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                             pp_tensor *out, pp_error *err)
{
    pin_stage *st = user;
    if (!st->cuda) {
        float *y = out->data;
        for (int k = 0; k < mb_size * PIN_D; k++) y[k] = pin_value(mb, k);
        return PP_OK;
    }
    PP_TRY(pp_copy(ex, in, &st->seen[mb], err));
    return pp_copy(ex, in, out, err);
}

static pp_status pin_backward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *gout,
                              pp_tensor *gin, pp_error *err)
{
    pin_stage *st = user;
    if (st->cuda) return pp_zero(ex, gin, err);
    const float *g = gout->data;
    for (int k = 0; k < mb_size * PIN_D; k++) st->bad_grads += g[k] != 0.0f;
    return PP_OK;
}

static const pp_stage_ops pin_ops = {
    .out_shape = pin_shape, .forward = pin_forward, .backward = pin_backward};

static bool page_locked(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

static void test_pinned_slots(void)
{
    pp_error err;
    pin_stage s0 = {.cuda = false}, s1 = {.cuda = true};
    const int size = 2;
    for (int i = 0; i < PIN_MB; i++)
        CHECK_OK(pp_tensor_alloc(&s1.seen[i], g_gpu, PP_F32, 2, (int64_t[]){size, PIN_D}, &err),
                 &err);
    pp_stage_desc desc[2] = {{g_cpu, &pin_ops, &s0}, {g_gpu, &pin_ops, &s1}};
    pp_executor *ex = NULL;
    CHECK_OK(pp_executor_new(desc, 2, 2, &ex, &err), &err);
    int sizes[PIN_MB] = {size, size, size};
    pp_schedule s;
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_1F1B, 2, PIN_MB, sizes, &err), &err);
    if (ex) {
        CHECK_OK(pp_executor_run(ex, &s, NULL, &err), &err);
        const boundary_buf *bb = &ex->bufs[0];
        CHECK(bb->pin[0] == g_gpu && bb->pin[3] == g_gpu && !bb->pin[1] && !bb->pin[2]);
        for (int k = 0; k < ex->slots; k++)
            CHECK_MSG(page_locked(bb->act_send[k]) && page_locked(bb->grad_recv[k]),
                      "slot %d of the CPU stage is not page-locked", k);
        pp_executor_free(ex);
    }
    CHECK(s0.bad_grads == 0);
    float *h = malloc((size_t)size * PIN_D * sizeof *h);
    for (int i = 0; i < PIN_MB; i++) {
        CHECK_OK(pp_tensor_to_host(&s1.seen[i], h, (size_t)size * PIN_D * sizeof *h, &err), &err);
        int bad = 0;
        for (int k = 0; k < size * PIN_D; k++) bad += h[k] != pin_value(i, k);
        CHECK_MSG(bad == 0, "micro-batch %d: %d values came through wrong", i, bad);
        pp_tensor_free(&s1.seen[i]);
    }
    free(h);
    pp_schedule_free(&s);
}

/* ---- 1: peer access; NCCL in a job of threads on two GPUs ------------------------- */

typedef struct nccl_rank {
    pp_comm *c;
    pp_device_ctx *dev;
    pp_status st;
    pp_error err;
    float got;
} nccl_rank;

static pp_status sum_fn(pp_exec *ex, void *arg, pp_error *err)
{
    void **a = arg;
    return pp_nccl_allreduce_sum_f32(a[0], ex, a[1], 1 << 16, err);
}

static void *nccl_rank_run(void *p)
{
    nccl_rank *r = p;
    pp_comm_group *g = NULL;
    pp_nccl *nc = NULL;
    pp_stream *s = NULL;
    pp_tensor t = {0};
    r->st = pp_comm_group_new(r->c, true, 0, &g, &r->err);
    if (r->st == PP_OK) r->st = pp_nccl_new(g, r->dev, &nc, &r->err);
    if (r->st == PP_OK) r->st = pp_stream_new(r->dev, PP_STREAM_COPY, "sum", &s, &r->err);
    if (r->st == PP_OK)
        r->st = pp_tensor_alloc(&t, r->dev, PP_F32, 1, (int64_t[]){1 << 16}, &r->err);
    float *h = malloc(sizeof(float) << 16);
    for (int i = 0; i < 1 << 16; i++) h[i] = (float)(pp_comm_rank(r->c) + 1);
    if (r->st == PP_OK) r->st = pp_tensor_from_host(&t, h, sizeof(float) << 16, &r->err);
    void *arg[2] = {nc, t.data};
    if (r->st == PP_OK) r->st = pp_stream_launch(s, "sum", sum_fn, arg, &r->err);
    if (r->st == PP_OK) r->st = pp_stream_synchronize(s, &r->err);
    if (r->st == PP_OK) r->st = pp_tensor_to_host(&t, h, sizeof(float) << 16, &r->err);
    r->got = h[12345];
    free(h);
    pp_tensor_free(&t);
    pp_stream_free(s);
    pp_nccl_free(nc);
    pp_comm_group_free(g);
    return NULL;
}

/* Two ranks (threads) on devs[0], devs[1]; their statuses in r. */
static void nccl_two_ranks(pp_device_ctx **devs, nccl_rank *r)
{
    pp_error err;
    pp_comm *c[2] = {0};
    CHECK_OK(pp_comm_local_new(2, c, &err), &err);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        r[i] = (nccl_rank){.c = c[i], .dev = devs[i]};
        CHECK(pthread_create(&th[i], NULL, nccl_rank_run, &r[i]) == 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        pp_comm_free(c[i]);
    }
}

static void test_peers(void)
{
    pp_error err;
    int can = 0;
    pp_device_ctx *gpu1 = NULL;
    if (pp_cuda_device_count() < 2 || cudaDeviceCanAccessPeer(&can, 1, 0) != cudaSuccess ||
        !can) {
        printf("peer access: fewer than two GPUs that reach each other: skipped\n");
        return;
    }
    CHECK_OK(pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CUDA, 1}, &gpu1, &err), &err);
    if (!gpu1) return;
    CHECK_OK(pp_device_peer_access(g_gpu, gpu1, &err), &err);
    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
    struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = 1};
    enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
    CHECK(cudaMemPoolGetAccess(&flags, pool, &loc) == cudaSuccess &&
          flags == cudaMemAccessFlagsProtReadWrite);
    /* a kernel of cuda:1 reads a pool allocation of cuda:0 */
    pp_tensor a, b;
    CHECK_OK(pp_tensor_alloc(&a, g_gpu, PP_F32, 1, (int64_t[]){4096}, &err), &err);
    CHECK_OK(pp_tensor_alloc(&b, gpu1, PP_F32, 1, (int64_t[]){4096}, &err), &err);
    edge_fill(&a, 2.5f);
    edge_fill(&b, 1.0f);
    pp_exec e1;
    CHECK_OK(pp_exec_init(&e1, gpu1, NULL, &err), &err);
    pp_tensor peer_view = a;
    peer_view.owns = false;
    peer_view.dev = gpu1;
    CHECK_OK(pp_accumulate(&e1, &peer_view, &b, &err), &err);
    CHECK_OK(pp_exec_sync(&e1, &err), &err);
    CHECK(edge_all(&b, 3.5f));
    pp_exec_destroy(&e1);
    pp_tensor_free(&a);
    pp_tensor_free(&b);
    if (!pp_nccl_built()) return;
    nccl_rank r[2];
    nccl_two_ranks((pp_device_ctx *[]){g_gpu, gpu1}, r);
    for (int i = 0; i < 2; i++) {
        CHECK_OK(r[i].st, &r[i].err);
        CHECK_MSG(r[i].got == 3.0f, "rank %d summed %g, want 3", i, r[i].got);
    }
}

/* ---- 6: one order for the communicators of a device -------------------------------- */

static pp_status delay_fn(pp_exec *ex, void *arg, pp_error *err)
{
    return pp_delay(ex, 300.0, err);
}

static void *make_two(void *p)
{
    nccl_rank *r = p;
    pp_comm_group *g = NULL;
    pp_nccl *nc = NULL;
    r->st = pp_comm_group_new(r->c, true, 0, &g, &r->err);
    if (r->st == PP_OK) r->st = pp_nccl_new(g, r->dev, &nc, &r->err);
    pp_nccl_free(nc);
    pp_comm_group_free(g);
    return NULL;
}

static void test_nccl_order(void)
{
    if (!pp_nccl_built()) {
        printf("NCCL order: built without NCCL: skipped\n");
        return;
    }
    pp_error err;
    pp_comm *c[1] = {0};
    CHECK_OK(pp_comm_local_new(1, c, &err), &err);
    pp_comm_group *g = NULL;
    CHECK_OK(pp_comm_group_new(c[0], true, 0, &g, &err), &err);
    pp_nccl *a = NULL, *b = NULL;
    CHECK_OK(pp_nccl_new(g, g_gpu, &a, &err), &err);
    CHECK_OK(pp_nccl_new(g, g_gpu, &b, &err), &err);
    pp_stream *s1 = NULL, *s2 = NULL;
    CHECK_OK(pp_stream_new(g_gpu, PP_STREAM_COPY, "first", &s1, &err), &err);
    CHECK_OK(pp_stream_new(g_gpu, PP_STREAM_COPY, "second", &s2, &err), &err);
    pp_tensor t1, t2;
    CHECK_OK(pp_tensor_alloc(&t1, g_gpu, PP_F32, 1, (int64_t[]){1 << 16}, &err), &err);
    CHECK_OK(pp_tensor_alloc(&t2, g_gpu, PP_F32, 1, (int64_t[]){1 << 16}, &err), &err);
    if (a && b && s1 && s2) {
        void *arg1[2] = {a, t1.data}, *arg2[2] = {b, t2.data};
        CHECK_OK(pp_stream_launch(s1, "delay", delay_fn, NULL, &err), &err);
        CHECK_OK(pp_stream_launch(s1, "sum a", sum_fn, arg1, &err), &err);
        CHECK_OK(pp_stream_launch(s2, "sum b", sum_fn, arg2, &err), &err);
        usleep(50000);
        cudaError_t q = cudaStreamQuery((cudaStream_t)pp_stream_exec(s2)->native_stream);
        CHECK_MSG(q == cudaErrorNotReady, "the second communicator's sum did not wait for the "
                  "first one's (%s)", cudaGetErrorName(q));
        (void)cudaGetLastError();
        CHECK_OK(pp_stream_synchronize(s1, &err), &err);
        CHECK_OK(pp_stream_synchronize(s2, &err), &err);
    }
    pp_stream_free(s1);
    pp_stream_free(s2);
    pp_tensor_free(&t1);
    pp_tensor_free(&t2);
    pp_nccl_free(a);
    pp_nccl_free(b);
    pp_comm_group_free(g);
    pp_comm_free(c[0]);

    /* two ranks of a job of threads on one GPU: both refused, before NCCL */
    pp_comm *two[2] = {0};
    CHECK_OK(pp_comm_local_new(2, two, &err), &err);
    nccl_rank r[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        r[i] = (nccl_rank){.c = two[i], .dev = g_gpu};
        CHECK(pthread_create(&th[i], NULL, make_two, &r[i]) == 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(r[i].st == PP_ERR_UNSUPPORTED, "rank %d: %s: %s", i, pp_status_name(r[i].st),
                  r[i].err.msg);
        pp_comm_free(two[i]);
    }
}

int main(void)
{
    if (pp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_review: no CUDA device: skipped\n");
        return 77;
    }
    pp_error err;
    if (pp_registry_new(&g_reg, &err) != PP_OK) return 1;
    CHECK_OK(pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CPU, 0}, &g_cpu, &err), &err);
    CHECK_OK(pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &g_gpu, &err), &err);
    if (!g_gpu) return check_summary("test_cuda_review");
    CHECK_OK(pp_exec_init(&g_egpu, g_gpu, NULL, &err), &err);
    test_edges();
    test_graph_memory();
    test_discarded_and_refused();
    test_gconv_no_memory();
    test_pinned_slots();
    test_peers();
    test_nccl_order();
    pp_exec_destroy(&g_egpu);
    pp_registry_free(g_reg);
    return check_summary("test_cuda_review");
}
