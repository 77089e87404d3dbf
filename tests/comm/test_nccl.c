/*
 * test_nccl.c - NCCL communicators (runtime/comm/nccl.h) on one GPU, as a
 * job of one rank (mpirun -np 1, or started by hand): the communicator is
 * made through the group's host communication, a sum over its one member
 * runs on a stream after the work already queued there and leaves the
 * values bit for bit, several sums go as one NCCL group, and misuse (a
 * stream of another device, a NULL buffer, a send to itself) is an
 * error naming rank and device, never a crash; a communicator is aborted
 * (the fault path). Exits 77 (skip) in a build without NCCL or where no
 * GPU is visible.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/comm/nccl.h"
#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "streams/stream.h"
#include "tests/check.h"

enum { N = 100003 };

typedef struct sum_job {
    pp_nccl *nc;
    float *bufs[2];
    size_t ns[2];
    int count;
} sum_job;

static pp_status run_sum(pp_exec *ex, void *arg, pp_error *err)
{
    sum_job *j = arg;
    return pp_nccl_allreduce_many_f32(j->nc, ex, j->bufs, j->ns, j->count, err);
}

typedef struct add_job {
    pp_tensor *x, *y;
} add_job;

static pp_status add_into(pp_exec *ex, void *arg, pp_error *err)
{
    add_job *j = arg;
    return pp_accumulate(ex, j->x, j->y, err);
}

/* A send or receive made with a stream's exec; its status is kept, the
 * stream's own stays clean. */
typedef struct p2p_job {
    pp_nccl *nc;
    int peer;
    void *buf;
    bool send;
    pp_status rc;
    pp_error err;
} p2p_job;

static pp_status run_p2p(pp_exec *ex, void *arg, pp_error *err)
{
    p2p_job *j = arg;
    j->rc = j->send ? pp_nccl_send(j->nc, ex, j->peer, j->buf, 16, &j->err)
                    : pp_nccl_recv(j->nc, ex, j->peer, j->buf, 16, &j->err);
    return PP_OK;
}

static float value(size_t i) { return (float)(i % 101) * 0.37f - 11.0f; }

static void test_one_gpu(pp_comm *c, pp_device_ctx *gpu, pp_device_ctx *cpu)
{
    pp_error err;
    pp_comm_group *g = NULL;
    CHECK_OK(pp_comm_group_new(c, true, 0, &g, &err), &err);
    if (!g) return;
    pp_nccl *nc = NULL;
    CHECK_OK(pp_nccl_new(g, gpu, &nc, &err), &err);
    pp_nccl *on_cpu = NULL;
    pp_status s = pp_nccl_new(g, cpu, &on_cpu, &err);
    CHECK_MSG(s == PP_ERR_UNSUPPORTED && !on_cpu && strstr(err.msg, "rank 0 (cpu:0)"), "%s: %s",
              pp_status_name(s), err.msg);
    pp_tensor a, b, twin;
    CHECK_OK(pp_tensor_alloc(&a, gpu, PP_F32, 1, (int64_t[]){N}, &err), &err);
    CHECK_OK(pp_tensor_alloc(&twin, gpu, PP_F32, 1, (int64_t[]){N}, &err), &err);
    CHECK_OK(pp_tensor_alloc(&b, gpu, PP_F32, 1, (int64_t[]){7}, &err), &err);
    static float host[N], back[N];
    for (size_t i = 0; i < N; i++) host[i] = value(i);
    CHECK_OK(pp_tensor_from_host(&a, host, sizeof host, &err), &err);
    CHECK_OK(pp_tensor_from_host(&twin, host, sizeof host, &err), &err);
    CHECK_OK(pp_tensor_from_host(&b, host, 7 * sizeof(float), &err), &err);
    pp_stream *st = NULL, *cst = NULL;
    CHECK_OK(pp_stream_new(gpu, PP_STREAM_COPY, "grads s0", &st, &err), &err);
    CHECK_OK(pp_stream_new(cpu, PP_STREAM_COPY, "cpu", &cst, &err), &err);
    if (!nc || !st || !cst) return;
    /* a doubling queued first, then the sums of a and b as one group */
    sum_job j = {nc, {a.data, b.data}, {N, 7}, 2};
    add_job dbl = {&twin, &a};
    CHECK_OK(pp_stream_launch(st, "double", add_into, &dbl, &err), &err);
    CHECK_OK(pp_stream_launch(st, "sum", run_sum, &j, &err), &err);
    CHECK_OK(pp_stream_synchronize(st, &err), &err);
    CHECK_OK(pp_tensor_to_host(&a, back, sizeof back, &err), &err);
    int bad = 0;
    for (size_t i = 0; i < N; i++) {
        float want = host[i] + host[i];
        bad += memcmp(&want, &back[i], sizeof want) != 0;
    }
    CHECK_MSG(bad == 0, "%d of %d values changed by a sum over one member", bad, N);
    CHECK_OK(pp_tensor_to_host(&b, back, 7 * sizeof(float), &err), &err);
    CHECK(memcmp(back, host, 7 * sizeof(float)) == 0);
    /* a stream of another device, a NULL buffer */
    sum_job wrong = {nc, {a.data}, {N}, 1};
    CHECK_OK(pp_stream_launch(cst, "sum", run_sum, &wrong, &err), &err);
    s = pp_stream_synchronize(cst, &err);
    CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "stream of another device (cpu:0)"),
              "%s: %s", pp_status_name(s), err.msg);
    pp_exec ex = {.dev = gpu};
    s = pp_nccl_allreduce_sum_f32(nc, &ex, NULL, 5, &err);
    CHECK_MSG(s == PP_ERR_INVALID, "%s: %s", pp_status_name(s), err.msg);
    CHECK(pp_nccl_allreduce_sum_f32(NULL, &ex, a.data, 5, &err) == PP_ERR_INVALID);
    /* point to point: a member cannot send to itself, nor to one beyond */
    CHECK(pp_nccl_rank(nc) == 0 && pp_nccl_rank(NULL) == -1);
    p2p_job to_self = {.nc = nc, .peer = 0, .buf = a.data, .send = true};
    p2p_job beyond = {.nc = nc, .peer = 1, .buf = a.data, .send = false};
    CHECK_OK(pp_stream_launch(st, "send", run_p2p, &to_self, &err), &err);
    CHECK_OK(pp_stream_launch(st, "recv", run_p2p, &beyond, &err), &err);
    CHECK_OK(pp_stream_synchronize(st, &err), &err);
    CHECK_MSG(to_self.rc == PP_ERR_INVALID && strstr(to_self.err.msg, "NCCL peer 0 of 1 members"),
              "%s: %s", pp_status_name(to_self.rc), to_self.err.msg);
    CHECK(beyond.rc == PP_ERR_INVALID);
    /* the fault path: a second communicator, aborted */
    pp_nccl *spare = NULL;
    CHECK_OK(pp_nccl_new(g, gpu, &spare, &err), &err);
    pp_nccl_abort(spare);
    pp_stream_free(st);
    pp_stream_free(cst);
    pp_tensor_free(&a);
    pp_tensor_free(&b);
    pp_tensor_free(&twin);
    pp_nccl_free(nc);
    pp_comm_group_free(g);
}

int main(int argc, char **argv)
{
    if (!pp_nccl_built()) {
        fprintf(stderr, "test_nccl: built without NCCL: skipped\n");
        return 77;
    }
    pp_error err;
    pp_comm *c = NULL;
    if (pp_comm_init(&argc, &argv, &c, &err) != PP_OK) {
        fprintf(stderr, "test_nccl: %s\n", err.msg);
        return 1;
    }
    pp_registry *reg = NULL;
    pp_device_ctx *gpu = NULL, *cpu = NULL;
    if (pp_registry_new(&reg, &err) != PP_OK ||
        pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu, &err) != PP_OK) {
        fprintf(stderr, "test_nccl: %s\n", err.msg);
        return 1;
    }
    if (pp_registry_get(reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &gpu, &err) != PP_OK) {
        fprintf(stderr, "test_nccl: no GPU (%s): skipped\n", err.msg);
        pp_registry_free(reg);
        pp_comm_free(c);
        return 77;
    }
    test_one_gpu(c, gpu, cpu);
    pp_registry_free(reg);
    int rc = check_summary("nccl");
    pp_comm_free(c);
    return rc;
}
