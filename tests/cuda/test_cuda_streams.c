/*
 * test_cuda_streams.c - streams, events and copies on CUDA devices, the
 * stream-ordered delay, and the errors a CUDA device reports (an allocation
 * beyond its memory, a device that does not exist). (The ops against the CPU
 * backend: test_cuda_ops.c.)
 *
 * Exits 77 (meson's skip) when no CUDA device is visible.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "runtime/core/ops.h"
#include "runtime/core/tensor.h"
#include "streams/stream.h"
#include "tests/check.h"
/* (the rig's devices and execs; not its pairs, which compare ops) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/cuda/cuda_rig.h"
#pragma GCC diagnostic pop

/* ---- the stream-ordered delay ------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_delay(rig *r)
{
    pp_error err;
    CHECK_OK(pp_exec_sync(&r->egpu, &err), &err);
    double t0 = now_ms();
    CHECK_OK(pp_delay(&r->egpu, 30.0, &err), &err);
    double enq = now_ms() - t0;
    CHECK_OK(pp_exec_sync(&r->egpu, &err), &err);
    double total = now_ms() - t0;
    CHECK_MSG(enq < 10.0, "pp_delay must not block the host (%.1f ms)", enq);
    CHECK_MSG(total >= 29.0 && total < 500.0, "pp_delay(30 ms) took %.1f ms", total);
}

/* ---- streams, events, copies on CUDA -------------------------------------------------- */

typedef struct stream_job {
    pp_tensor *src, *dst;
    double delay_ms;
    int runs;
} stream_job;

/* delay, then dst = src (or dst += src when delay_ms < 0) */
static pp_status job_fn(pp_exec *ex, void *arg, pp_error *err)
{
    stream_job *j = arg;
    j->runs++;
    if (j->delay_ms < 0) return pp_accumulate(ex, j->src, j->dst, err);
    PP_TRY(pp_delay(ex, j->delay_ms, err));
    return pp_copy(ex, j->src, j->dst, err);
}

static pp_status failing_fn(pp_exec *ex, void *arg, pp_error *err)
{
    return pp_error_set(err, PP_ERR_INVALID, "planned failure");
}

static void test_streams(rig *r)
{
    pp_error err;
    pp_stream *s1 = NULL, *s2 = NULL, *sc = NULL;
    pp_event *ev = NULL;
    CHECK_OK(pp_stream_new(r->gpu, PP_STREAM_COMPUTE, "compute1", &s1, &err), &err);
    CHECK_OK(pp_stream_new(r->gpu, PP_STREAM_COMPUTE, "compute2", &s2, &err), &err);
    CHECK_OK(pp_stream_new(r->gpu, PP_STREAM_COPY, "copy", &sc, &err), &err);
    CHECK_OK(pp_event_new(r->gpu, &ev, &err), &err);
    if (!s1 || !s2 || !sc || !ev) return;

    enum { N = 1 << 16 };
    float *host = malloc(N * sizeof *host), *back = malloc(N * sizeof *back);
    for (int i = 0; i < N; i++) host[i] = (float)i;
    const int64_t shape[1] = {N};
    pp_tensor a, b, c, h;
    CHECK_OK(pp_tensor_zeros(&a, r->gpu, PP_F32, 1, shape, &err), &err);
    CHECK_OK(pp_tensor_zeros(&b, r->gpu, PP_F32, 1, shape, &err), &err);
    CHECK_OK(pp_tensor_zeros(&c, r->gpu, PP_F32, 1, shape, &err), &err);
    CHECK_OK(pp_tensor_alloc(&h, r->cpu, PP_F32, 1, shape, &err), &err);
    memcpy(h.data, host, N * sizeof *host);

    /* host -> device on the copy stream; compute waits; b = a after 20 ms on s1;
     * s2 waits for s1's event, then c += b; device -> host on the copy stream */
    CHECK_OK(pp_stream_copy_tensor(sc, &a, &h, "h2d", &err), &err);
    CHECK_OK(pp_event_record(ev, sc, &err), &err);
    CHECK_OK(pp_stream_wait_event(s1, ev, &err), &err);
    stream_job j1 = {&a, &b, 20.0, 0}, j2 = {&b, &c, -1.0, 0};
    CHECK_OK(pp_stream_launch(s1, "delay+copy", job_fn, &j1, &err), &err);
    CHECK_OK(pp_event_record(ev, s1, &err), &err);
    CHECK_OK(pp_stream_wait_event(s2, ev, &err), &err);
    CHECK_OK(pp_stream_launch(s2, "accumulate", job_fn, &j2, &err), &err);
    CHECK_OK(pp_event_record(ev, s2, &err), &err);
    CHECK_OK(pp_stream_wait_event(sc, ev, &err), &err);
    memset(h.data, 0, N * sizeof *host);
    CHECK_OK(pp_stream_copy_tensor(sc, &h, &c, "d2h", &err), &err);
    CHECK(j1.runs == 1 && j2.runs == 1); /* CUDA launches run fn at once on the host */
    CHECK_OK(pp_stream_synchronize(sc, &err), &err);
    bool done = false;
    CHECK_OK(pp_event_query(ev, &done, &err), &err);
    CHECK(done);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += ((float *)h.data)[i] != host[i];
    CHECK_MSG(bad == 0, "cross-stream ordering: %d of %d values wrong", bad, N);

    /* timing records: the launch on s1 spans the 20 ms delay; copies carry bytes */
    CHECK_OK(pp_stream_synchronize(s1, &err), &err);
    const pp_stream_record *recs;
    size_t nrec = 0;
    CHECK_OK(pp_stream_records(s1, &recs, &nrec, &err), &err);
    CHECK(nrec == 1);
    if (nrec == 1) {
        double ms = (double)(recs[0].end_ns - recs[0].start_ns) / 1e6;
        CHECK_MSG(ms >= 19.0 && ms < 200.0, "launch record spans %.2f ms, expected ~20", ms);
        CHECK(recs[0].kind == PP_RECORD_LAUNCH && strcmp(recs[0].label, "delay+copy") == 0);
        CHECK(recs[0].end_ns <= pp_stream_clock_ns());
    }
    CHECK_OK(pp_stream_records(sc, &recs, &nrec, &err), &err);
    CHECK(nrec == 2);
    if (nrec == 2)
        CHECK(recs[0].kind == PP_RECORD_COPY && recs[0].bytes == N * sizeof(float) &&
              recs[1].start_ns >= recs[0].end_ns - 1000);
    pp_stream_records_clear(sc);
    CHECK_OK(pp_stream_records(sc, &recs, &nrec, &err), &err);
    CHECK(nrec == 0);

    /* sticky errors: the failing item's message, later items skipped, then cleared */
    stream_job j3 = {&a, &b, 0.0, 0};
    CHECK_OK(pp_stream_launch(s2, "bad", failing_fn, NULL, &err), &err);
    CHECK_OK(pp_stream_launch(s2, "skipped", job_fn, &j3, &err), &err);
    pp_status st = pp_stream_synchronize(s2, &err);
    CHECK(st == PP_ERR_INVALID && strstr(err.msg, "planned failure") != NULL);
    CHECK(j3.runs == 0);
    pp_stream_clear_error(s2);
    CHECK_OK(pp_stream_synchronize(s2, &err), &err);

    /* a peer copy when a second GPU is visible */
    if (pp_cuda_device_count() > 1) {
        pp_device_ctx *g1;
        pp_tensor d;
        CHECK_OK(pp_registry_get(r->reg, (pp_device_id){PP_DEVICE_CUDA, 1}, &g1, &err), &err);
        CHECK_OK(pp_tensor_zeros(&d, g1, PP_F32, 1, shape, &err), &err);
        CHECK_OK(pp_stream_copy_tensor(sc, &d, &a, "peer", &err), &err);
        CHECK_OK(pp_stream_synchronize(sc, &err), &err);
        CHECK_OK(pp_tensor_to_host(&d, back, N * sizeof *back, &err), &err);
        CHECK(memcmp(back, host, N * sizeof *back) == 0);
        pp_tensor_free(&d);
    }

    pp_event_free(ev);
    pp_stream_free(s1);
    pp_stream_free(s2);
    pp_stream_free(sc);
    pp_tensor_free(&a), pp_tensor_free(&b), pp_tensor_free(&c), pp_tensor_free(&h);
    free(host);
    free(back);
}

static pp_status noop_fn(pp_exec *ex, void *arg, pp_error *err)
{
    return PP_OK;
}

/* Timing-event recycling: 64 items on a fresh stream fill its spare-event list
 * exactly; records() then adds its reference event, which records_clear() must
 * still have room for. And an event of one GPU recorded on another GPU's stream
 * (stream.h allows it; CUDA records an event only on its own device's streams). */
static void test_stream_events_reuse(rig *r)
{
    pp_error err;
    pp_stream *s = NULL;
    CHECK_OK(pp_stream_new(r->gpu, PP_STREAM_COMPUTE, "records", &s, &err), &err);
    if (!s) return;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 64; i++)
            CHECK_OK(pp_stream_launch(s, "noop", noop_fn, NULL, &err), &err);
        CHECK_OK(pp_stream_synchronize(s, &err), &err);
        const pp_stream_record *recs;
        size_t n = 0;
        CHECK_OK(pp_stream_records(s, &recs, &n, &err), &err);
        CHECK_MSG(n == 64, "round %d: %zu records, expected 64", round, n);
        pp_stream_records_clear(s);
    }

    if (pp_cuda_device_count() > 1) {
        pp_device_ctx *g1;
        pp_stream *s1 = NULL;
        pp_event *ev = NULL;
        CHECK_OK(pp_registry_get(r->reg, (pp_device_id){PP_DEVICE_CUDA, 1}, &g1, &err), &err);
        CHECK_OK(pp_stream_new(g1, PP_STREAM_COMPUTE, "gpu1", &s1, &err), &err);
        CHECK_OK(pp_event_new(r->gpu, &ev, &err), &err);
        if (s1 && ev) {
            CHECK_OK(pp_stream_launch(s1, "noop", noop_fn, NULL, &err), &err);
            CHECK_OK(pp_event_record(ev, s1, &err), &err);
            CHECK_OK(pp_stream_wait_event(s, ev, &err), &err);
            CHECK_OK(pp_stream_synchronize(s, &err), &err);
            CHECK_OK(pp_event_synchronize(ev, &err), &err);
            bool done = false;
            CHECK_OK(pp_event_query(ev, &done, &err), &err);
            CHECK(done);
            CHECK_OK(pp_event_record(ev, s, &err), &err); /* and back to its own device */
            CHECK_OK(pp_event_synchronize(ev, &err), &err);
        }
        pp_event_free(ev);
        pp_stream_free(s1);
    }
    pp_stream_free(s);
}

/* ---- errors ---------------------------------------------------------------------- */

static void test_errors(rig *r)
{
    pp_error err;
    void *p = (void *)1;
    pp_status s = pp_device_alloc(r->gpu, (size_t)1 << 52, &p, &err);
    CHECK_MSG(s == PP_ERR_OOM, "huge allocation: %s (%s)", pp_status_name(s), err.msg);
    CHECK(p == NULL);
    CHECK_MSG(strstr(err.msg, "cuda:0") && strstr(err.msg, "cudaMallocAsync") &&
                  strstr(err.msg, ".c:"),
              "message names device, call and file:line: %s", err.msg);
    pp_device_ctx *none;
    s = pp_registry_get(r->reg, (pp_device_id){PP_DEVICE_CUDA, pp_cuda_device_count()}, &none,
                        &err);
    CHECK(s == PP_ERR_INPUT);
}

int main(void)
{
    if (pp_cuda_device_count() == 0) {
        fprintf(stderr, "test_cuda_streams: no CUDA device visible, skipping\n");
        return 77;
    }
    rig r;
    if (!rig_open(&r, 12345)) return check_summary("test_cuda_streams");

    test_delay(&r);
    test_streams(&r);
    test_stream_events_reuse(&r);
    test_errors(&r);

    rig_close(&r);
    return check_summary("test_cuda_streams");
}
