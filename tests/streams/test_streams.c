/*
 * test_streams.c - streams and events (FIFO order, cross-stream events, sticky
 * and inherited errors, waits folded into the next item, waits for another
 * backend's event, copies ordered by events), GPipe and 1F1B with their
 * communication for all small S and m, and the simulator (closed forms).
 * The schedule language, every built-in and the validator are in
 * test_schedule.c.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "streams/graph.h"
#include "streams/program.h"
#include "streams/schedule.h"
#include "streams/simulate.h"
#include "streams/stream.h"
#include "streams/stream_impl.h"
#include "tests/check.h"

static pp_registry *reg;
static pp_device_ctx *cpu0, *cpu1;

/* ---- streams -------------------------------------------------------------- */

typedef struct order_log {
    int n;
    int seen[4096];
} order_log;

typedef struct log_arg {
    order_log *log;
    int value;
} log_arg;

static pp_status append_value(pp_exec *ex, void *arg, pp_error *err)
{
    log_arg *a = arg;
    a->log->seen[a->log->n++] = a->value;
    return PP_OK;
}

static void test_fifo(void)
{
    enum { N = 3000 };
    pp_error err;
    pp_stream *s;
    CHECK_OK(pp_stream_new(cpu0, PP_STREAM_COMPUTE, "fifo", &s, &err), &err);
    static order_log log;
    static log_arg args[N];
    log.n = 0;
    for (int i = 0; i < N; i++) {
        args[i] = (log_arg){&log, i};
        char label[32];
        snprintf(label, sizeof label, "item %d", i);
        CHECK_OK(pp_stream_launch(s, label, append_value, &args[i], &err), &err);
    }
    CHECK_OK(pp_stream_synchronize(s, &err), &err);
    CHECK(log.n == N);
    int in_order = 1;
    for (int i = 0; i < log.n; i++) in_order &= log.seen[i] == i;
    CHECK(in_order);
    const pp_stream_record *r;
    size_t n;
    CHECK_OK(pp_stream_records(s, &r, &n, &err), &err);
    CHECK(n == N);
    if (n == N) {
        CHECK(strcmp(r[0].label, "item 0") == 0 && strcmp(r[N - 1].label, "item 2999") == 0);
        int mono = 1;
        for (size_t i = 0; i < n; i++) {
            mono &= r[i].end_ns >= r[i].start_ns && r[i].kind == PP_RECORD_LAUNCH;
            if (i) mono &= r[i].start_ns >= r[i - 1].end_ns;
        }
        CHECK(mono);
    }
    pp_stream_records_clear(s);
    CHECK_OK(pp_stream_records(s, &r, &n, &err), &err);
    CHECK(n == 0);
    CHECK(strcmp(pp_stream_name(s), "fifo") == 0 && pp_stream_device(s) == cpu0);
    pp_stream_free(s);
}

typedef struct flag_arg {
    atomic_int *flag;
    int value;
    double delay_ms;
    atomic_int *observed;     /* where a reader stores what it saw */
} flag_arg;

static pp_status delay_then_set(pp_exec *ex, void *arg, pp_error *err)
{
    flag_arg *a = arg;
    if (a->delay_ms > 0) PP_TRY(pp_delay(ex, a->delay_ms, err));
    atomic_store(a->flag, a->value);
    return PP_OK;
}

static pp_status observe(pp_exec *ex, void *arg, pp_error *err)
{
    flag_arg *a = arg;
    atomic_store(a->observed, atomic_load(a->flag));
    return PP_OK;
}

static void test_events(void)
{
    pp_error err;
    pp_stream *a, *b;
    pp_event *ev;
    CHECK_OK(pp_stream_new(cpu0, PP_STREAM_COMPUTE, "a", &a, &err), &err);
    CHECK_OK(pp_stream_new(cpu1, PP_STREAM_COMPUTE, "b", &b, &err), &err);
    CHECK_OK(pp_event_new(cpu0, &ev, &err), &err);

    /* never recorded: complete, and waiting for it is a no-op */
    bool done = false;
    CHECK_OK(pp_event_query(ev, &done, &err), &err);
    CHECK(done);
    CHECK_OK(pp_event_synchronize(ev, &err), &err);

    /* b waits for a's slow write */
    atomic_int flag = 0, seen = -1;
    flag_arg w = {&flag, 7, 60.0, NULL}, r = {&flag, 0, 0.0, &seen};
    CHECK_OK(pp_stream_launch(a, "slow write", delay_then_set, &w, &err), &err);
    CHECK_OK(pp_event_record(ev, a, &err), &err);
    CHECK_OK(pp_stream_wait_event(b, ev, &err), &err);
    CHECK_OK(pp_stream_launch(b, "read", observe, &r, &err), &err);
    CHECK_OK(pp_event_query(ev, &done, &err), &err);
    CHECK(!done);
    CHECK_OK(pp_stream_synchronize(b, &err), &err);
    CHECK(atomic_load(&seen) == 7);
    CHECK_OK(pp_event_query(ev, &done, &err), &err);
    CHECK(done);

    /* a wait captures the record at call time: re-recording later does not
     * make an already-enqueued wait cover the new work */
    atomic_int flag2 = 0, seen2 = -1;
    flag_arg fast = {&flag, 1, 0.0, NULL}, slow = {&flag2, 5, 150.0, NULL};
    flag_arg r2 = {&flag2, 0, 0.0, &seen2};
    CHECK_OK(pp_stream_launch(a, "fast", delay_then_set, &fast, &err), &err);
    CHECK_OK(pp_event_record(ev, a, &err), &err);
    CHECK_OK(pp_stream_wait_event(b, ev, &err), &err);
    CHECK_OK(pp_stream_launch(a, "slow", delay_then_set, &slow, &err), &err);
    CHECK_OK(pp_event_record(ev, a, &err), &err);
    CHECK_OK(pp_stream_launch(b, "read2", observe, &r2, &err), &err);
    CHECK_OK(pp_stream_synchronize(b, &err), &err);
    CHECK(atomic_load(&seen2) == 0);
    CHECK_OK(pp_event_synchronize(ev, &err), &err);
    CHECK(atomic_load(&flag2) == 5);

    /* a stream waiting on its own event is ordered by FIFO alone */
    CHECK_OK(pp_stream_wait_event(a, ev, &err), &err);
    CHECK_OK(pp_stream_synchronize(a, &err), &err);

    pp_event_free(ev);
    pp_stream_free(a);
    pp_stream_free(b);
}

/* Holds its stream until *release is set (or 5 s pass); notes a timeout. */
typedef struct hold_arg {
    atomic_int *release;
    atomic_int *timed_out;
} hold_arg;

static pp_status hold(pp_exec *ex, void *arg, pp_error *err)
{
    hold_arg *h = arg;
    int64_t end = pp_stream_clock_ns() + 5000000000LL;
    while (!atomic_load(h->release)) {
        if (pp_stream_clock_ns() > end) {
            atomic_store(h->timed_out, 1);
            break;
        }
        PP_TRY(pp_delay(ex, 0.2, err));
    }
    return PP_OK;
}

typedef struct all_arg {
    atomic_int *flags;
    int n;
    atomic_int *count;        /* flags seen set */
} all_arg;

static pp_status count_set(pp_exec *ex, void *arg, pp_error *err)
{
    all_arg *a = arg;
    int c = 0;
    for (int k = 0; k < a->n; k++) c += atomic_load(&a->flags[k]) != 0;
    atomic_store(a->count, c);
    return PP_OK;
}

/* Waits enqueued before a launch may share its queue item; an event recorded
 * in between must still complete with the waits, not with the launch. */
static void test_waits_before_work(void)
{
    pp_error err;
    enum { NSRC = 6 };
    pp_stream *src[NSRC], *b;
    pp_event *ev[NSRC], *eb;
    for (int k = 0; k < NSRC; k++) {
        CHECK_OK(pp_stream_new(k % 2 ? cpu1 : cpu0, PP_STREAM_COMPUTE, "src", &src[k], &err), &err);
        CHECK_OK(pp_event_new(cpu0, &ev[k], &err), &err);
    }
    CHECK_OK(pp_stream_new(cpu1, PP_STREAM_COMPUTE, "b", &b, &err), &err);
    CHECK_OK(pp_event_new(cpu1, &eb, &err), &err);

    /* wait, record, launch: the record covers the wait only */
    atomic_int flag = 0, release = 0, timed_out = 0;
    flag_arg w = {&flag, 1, 30.0, NULL};
    hold_arg h = {&release, &timed_out};
    CHECK_OK(pp_stream_launch(src[0], "slow write", delay_then_set, &w, &err), &err);
    CHECK_OK(pp_event_record(ev[0], src[0], &err), &err);
    CHECK_OK(pp_stream_wait_event(b, ev[0], &err), &err);
    CHECK_OK(pp_event_record(eb, b, &err), &err);
    CHECK_OK(pp_stream_launch(b, "held", hold, &h, &err), &err);
    CHECK_OK(pp_event_synchronize(eb, &err), &err);
    CHECK(atomic_load(&flag) == 1);
    atomic_store(&release, 1);
    CHECK_OK(pp_stream_synchronize(b, &err), &err);
    CHECK(atomic_load(&timed_out) == 0);

    /* more waits than one item holds, two of them on the same stream with
     * different points, then one launch: it sees every write */
    static const double delay_ms[NSRC] = {40.0, 5.0, 25.0, 10.0, 35.0, 15.0};
    atomic_int flags[NSRC + 1];
    flag_arg fw[NSRC + 1];
    atomic_int count = -1;
    all_arg all = {flags, NSRC + 1, &count};
    for (int k = 0; k <= NSRC; k++) atomic_init(&flags[k], 0);
    for (int k = 0; k < NSRC; k++) {
        fw[k] = (flag_arg){&flags[k], 1, delay_ms[k], NULL};
        CHECK_OK(pp_stream_launch(src[k], "write", delay_then_set, &fw[k], &err), &err);
        CHECK_OK(pp_event_record(ev[k], src[k], &err), &err);
        CHECK_OK(pp_stream_wait_event(b, ev[k], &err), &err);
    }
    fw[NSRC] = (flag_arg){&flags[NSRC], 1, 30.0, NULL};
    CHECK_OK(pp_stream_launch(src[1], "later write", delay_then_set, &fw[NSRC], &err), &err);
    CHECK_OK(pp_event_record(ev[1], src[1], &err), &err);
    CHECK_OK(pp_stream_wait_event(b, ev[1], &err), &err);
    CHECK_OK(pp_stream_launch(b, "count", count_set, &all, &err), &err);
    CHECK_OK(pp_stream_synchronize(b, &err), &err);
    CHECK(atomic_load(&count) == NSRC + 1);

    const pp_stream_record *r;
    size_t n;
    CHECK_OK(pp_stream_records(b, &r, &n, &err), &err);
    CHECK(n == 2 && strcmp(r[0].label, "held") == 0 && strcmp(r[1].label, "count") == 0);

    for (int k = 0; k < NSRC; k++) {
        pp_event_free(ev[k]);
        pp_stream_free(src[k]);
    }
    pp_event_free(eb);
    pp_stream_free(b);
}

typedef struct count_arg {
    int *counter;
    pp_status fail;
} count_arg;

static pp_status count_or_fail(pp_exec *ex, void *arg, pp_error *err)
{
    count_arg *c = arg;
    if (c->fail != PP_OK) return pp_error_set(err, c->fail, "boom after %d", *c->counter);
    (*c->counter)++;
    return PP_OK;
}

static void test_sticky_errors(void)
{
    pp_error err;
    pp_stream *a, *b;
    pp_event *ev;
    CHECK_OK(pp_stream_new(cpu0, PP_STREAM_COMPUTE, "a", &a, &err), &err);
    CHECK_OK(pp_stream_new(cpu0, PP_STREAM_COMPUTE, "b", &b, &err), &err);
    CHECK_OK(pp_event_new(cpu0, &ev, &err), &err);
    int ca = 0, cb = 0;
    count_arg ok_a = {&ca, PP_OK}, bad = {&ca, PP_ERR_NUMERIC}, ok_b = {&cb, PP_OK};
    CHECK_OK(pp_stream_launch(a, "one", count_or_fail, &ok_a, &err), &err);
    CHECK_OK(pp_stream_launch(b, "b one", count_or_fail, &ok_b, &err), &err);
    CHECK_OK(pp_stream_launch(a, "bad", count_or_fail, &bad, &err), &err);
    CHECK_OK(pp_stream_launch(a, "skipped", count_or_fail, &ok_a, &err), &err);
    CHECK_OK(pp_event_record(ev, a, &err), &err);
    CHECK_OK(pp_stream_wait_event(b, ev, &err), &err);
    CHECK_OK(pp_stream_launch(b, "b skipped", count_or_fail, &ok_b, &err), &err);

    pp_status s = pp_stream_synchronize(a, &err);
    CHECK(s == PP_ERR_NUMERIC && strcmp(err.msg, "boom after 1") == 0);
    CHECK(ca == 1);
    s = pp_stream_synchronize(a, &err); /* still sticky */
    CHECK(s == PP_ERR_NUMERIC);
    bool done;
    CHECK(pp_event_query(ev, &done, &err) == PP_ERR_NUMERIC && done);
    CHECK(pp_event_synchronize(ev, &err) == PP_ERR_NUMERIC);

    /* b inherits the error through the event, with the original time */
    pp_error eb;
    s = pp_stream_synchronize(b, &eb);
    CHECK(s == PP_ERR_NUMERIC && strcmp(eb.msg, "boom after 1") == 0);
    CHECK(cb == 1);
    int64_t ta = 0, tb = 0;
    CHECK(pp_stream_error(a, &err, &ta) == PP_ERR_NUMERIC);
    CHECK(pp_stream_error(b, &err, &tb) == PP_ERR_NUMERIC);
    CHECK(ta == tb && ta > 0);

    const pp_stream_record *r;
    size_t n;
    CHECK_OK(pp_stream_records(a, &r, &n, &err), &err);
    CHECK(n == 1 && strcmp(r[0].label, "one") == 0);

    /* cleared: usable again */
    pp_stream_clear_error(a);
    CHECK(pp_stream_error(a, &err, NULL) == PP_OK);
    CHECK_OK(pp_stream_launch(a, "again", count_or_fail, &ok_a, &err), &err);
    CHECK_OK(pp_stream_synchronize(a, &err), &err);
    CHECK(ca == 2);
    pp_event_free(ev);
    pp_stream_free(a);
    pp_stream_free(b);
}

/* A stand-in for another backend's event: its event_synchronize is all that
 * a CPU stream's foreign wait calls. It notes when it runs and what it saw. */
typedef struct foreign_state {
    atomic_int calls;
    atomic_int *flag; /* read when the wait runs */
    atomic_int seen;
    pp_status result;
} foreign_state;

static pp_status foreign_synchronize(pp_event *ev, pp_error *err)
{
    foreign_state *f = ev->state;
    atomic_fetch_add(&f->calls, 1);
    atomic_store(&f->seen, atomic_load(f->flag));
    if (f->result != PP_OK) return pp_error_set(err, f->result, "foreign device lost");
    return PP_OK;
}

static const pp_stream_ops foreign_impl = {.name = "foreign",
                                            .event_synchronize = foreign_synchronize};

/* A wait for an event of another backend: nothing for a never-recorded one;
 * otherwise the event's own synchronize, run in stream order, whose failure
 * becomes the waiting stream's sticky error. */
static void test_foreign_waits(void)
{
    pp_error err;
    pp_stream *s;
    CHECK_OK(pp_stream_new(cpu0, PP_STREAM_COMPUTE, "s", &s, &err), &err);
    atomic_int flag = 0, seen = -1;
    foreign_state fs = {.flag = &flag, .result = PP_OK};
    atomic_init(&fs.calls, 0);
    atomic_init(&fs.seen, -1);
    pp_event ev = {.ops = &foreign_impl, .dev = cpu1, .state = &fs};

    CHECK_OK(pp_stream_wait_event(s, &ev, &err), &err);
    CHECK_OK(pp_stream_synchronize(s, &err), &err);
    CHECK(atomic_load(&fs.calls) == 0);

    ev.recorded = true;
    flag_arg w = {&flag, 3, 30.0, NULL}, r = {&flag, 0, 0.0, &seen};
    CHECK_OK(pp_stream_launch(s, "write", delay_then_set, &w, &err), &err);
    CHECK_OK(pp_stream_wait_event(s, &ev, &err), &err);
    CHECK_OK(pp_stream_launch(s, "read", observe, &r, &err), &err);
    CHECK_OK(pp_stream_synchronize(s, &err), &err);
    CHECK(atomic_load(&fs.calls) == 1 && atomic_load(&fs.seen) == 3 && atomic_load(&seen) == 3);
    const pp_stream_record *rec;
    size_t n;
    CHECK_OK(pp_stream_records(s, &rec, &n, &err), &err);
    CHECK(n == 2 && strcmp(rec[0].label, "write") == 0 && strcmp(rec[1].label, "read") == 0);

    fs.result = PP_ERR_BACKEND;
    int count = 0;
    count_arg ok = {&count, PP_OK};
    CHECK_OK(pp_stream_wait_event(s, &ev, &err), &err);
    CHECK_OK(pp_stream_launch(s, "skipped", count_or_fail, &ok, &err), &err);
    CHECK(pp_stream_synchronize(s, &err) == PP_ERR_BACKEND &&
          strcmp(err.msg, "foreign device lost") == 0);
    CHECK(count == 0 && atomic_load(&fs.calls) == 2);
    pp_stream_free(s);
}

typedef struct fill_arg {
    float *buf;
    int n;
    float value;
    double delay_ms;
} fill_arg;

static pp_status fill_slow(pp_exec *ex, void *arg, pp_error *err)
{
    fill_arg *f = arg;
    if (f->delay_ms > 0) PP_TRY(pp_delay(ex, f->delay_ms, err));
    for (int i = 0; i < f->n; i++) f->buf[i] = f->value + (float)i;
    return PP_OK;
}

typedef struct verify_arg {
    const float *buf;
    int n;
    float value;
    int *bad;
} verify_arg;

static pp_status verify(pp_exec *ex, void *arg, pp_error *err)
{
    verify_arg *v = arg;
    for (int i = 0; i < v->n; i++)
        if (v->buf[i] != v->value + (float)i) {
            (*v->bad)++;
            break;
        }
    return PP_OK;
}

/* producer (cpu0) -> copy stream (cpu1) -> consumer (cpu1), double-buffered,
 * the whole sequence enqueued ahead and ordered only by events. */
static void test_copies_ordered(void)
{
    enum { ROUNDS = 40, N = 4096, SLOTS = 2 };
    pp_error err;
    pp_stream *prod, *copy, *cons;
    CHECK_OK(pp_stream_new(cpu0, PP_STREAM_COMPUTE, "producer", &prod, &err), &err);
    CHECK_OK(pp_stream_new(cpu1, PP_STREAM_COPY, "copy", &copy, &err), &err);
    CHECK_OK(pp_stream_new(cpu1, PP_STREAM_COMPUTE, "consumer", &cons, &err), &err);
    pp_tensor src[SLOTS], dst[SLOTS];
    for (int k = 0; k < SLOTS; k++) {
        CHECK_OK(pp_tensor_alloc(&src[k], cpu0, PP_F32, 1, (int64_t[]){N}, &err), &err);
        CHECK_OK(pp_tensor_alloc(&dst[k], cpu1, PP_F32, 1, (int64_t[]){N}, &err), &err);
    }
    pp_event *produced[ROUNDS], *copied[ROUNDS], *consumed[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        CHECK_OK(pp_event_new(cpu0, &produced[i], &err), &err);
        CHECK_OK(pp_event_new(cpu1, &copied[i], &err), &err);
        CHECK_OK(pp_event_new(cpu1, &consumed[i], &err), &err);
    }
    static fill_arg fills[ROUNDS];
    static verify_arg checks[ROUNDS];
    int bad = 0;
    for (int i = 0; i < ROUNDS; i++) {
        int k = i % SLOTS;
        /* the producer may overwrite slot k once the copy of i-2 has read it */
        if (i >= SLOTS) CHECK_OK(pp_stream_wait_event(prod, copied[i - SLOTS], &err), &err);
        fills[i] = (fill_arg){src[k].data, N, 1000.0f * (float)i, (i % 3) ? 0.0 : 1.0};
        CHECK_OK(pp_stream_launch(prod, "fill", fill_slow, &fills[i], &err), &err);
        CHECK_OK(pp_event_record(produced[i], prod, &err), &err);
        /* the copy waits for the data and for the consumer of i-2 */
        CHECK_OK(pp_stream_wait_event(copy, produced[i], &err), &err);
        if (i >= SLOTS) CHECK_OK(pp_stream_wait_event(copy, consumed[i - SLOTS], &err), &err);
        CHECK_OK(pp_stream_copy_tensor(copy, &dst[k], &src[k], "copy", &err), &err);
        CHECK_OK(pp_event_record(copied[i], copy, &err), &err);
        CHECK_OK(pp_stream_wait_event(cons, copied[i], &err), &err);
        checks[i] = (verify_arg){dst[k].data, N, 1000.0f * (float)i, &bad};
        CHECK_OK(pp_stream_launch(cons, "verify", verify, &checks[i], &err), &err);
        CHECK_OK(pp_event_record(consumed[i], cons, &err), &err);
    }
    CHECK_OK(pp_stream_synchronize(cons, &err), &err);
    CHECK_OK(pp_stream_synchronize(prod, &err), &err);
    CHECK_OK(pp_stream_synchronize(copy, &err), &err);
    CHECK(bad == 0);
    const pp_stream_record *r;
    size_t n;
    CHECK_OK(pp_stream_records(copy, &r, &n, &err), &err);
    CHECK(n == ROUNDS && r[0].kind == PP_RECORD_COPY && r[0].bytes == N * sizeof(float));
    for (int i = 0; i < ROUNDS; i++) {
        pp_event_free(produced[i]);
        pp_event_free(copied[i]);
        pp_event_free(consumed[i]);
    }
    for (int k = 0; k < SLOTS; k++) {
        pp_tensor_free(&src[k]);
        pp_tensor_free(&dst[k]);
    }
    pp_stream_free(prod);
    pp_stream_free(copy);
    pp_stream_free(cons);
}

static void test_stream_misuse(void)
{
    pp_error err;
    pp_device_ctx fake_cuda = {0};
    fake_cuda.id = (pp_device_id){PP_DEVICE_CUDA, 0};
    snprintf(fake_cuda.name, sizeof fake_cuda.name, "cuda:0");
    pp_stream *s = NULL;
    pp_event *ev = NULL;
    if (!pp_stream_cuda_ops()) {
        CHECK(pp_stream_new(&fake_cuda, PP_STREAM_COMPUTE, "gpu", &s, &err) ==
              PP_ERR_UNSUPPORTED);
        CHECK(s == NULL && strstr(err.msg, "cuda:0") != NULL);
        CHECK(pp_event_new(&fake_cuda, &ev, &err) == PP_ERR_UNSUPPORTED && ev == NULL);
    }

    CHECK_OK(pp_stream_new(cpu0, PP_STREAM_COPY, NULL, &s, &err), &err);
    CHECK(strcmp(pp_stream_name(s), "cpu:0") == 0 && pp_stream_get_kind(s) == PP_STREAM_COPY);
    CHECK(pp_stream_launch(s, "x", NULL, NULL, &err) == PP_ERR_INVALID);
    float buf[16];
    CHECK(pp_stream_copy(s, buf + 4, cpu0, buf, cpu0, 8 * sizeof(float), "ov", &err) ==
          PP_ERR_INVALID);
    CHECK(pp_stream_copy(s, buf, &fake_cuda, buf + 8, cpu0, 4 * sizeof(float), "gpu", &err) ==
          PP_ERR_UNSUPPORTED);
    pp_tensor a, b;
    CHECK_OK(pp_tensor_alloc(&a, cpu0, PP_F32, 1, (int64_t[]){4}, &err), &err);
    CHECK_OK(pp_tensor_alloc(&b, cpu1, PP_F32, 1, (int64_t[]){5}, &err), &err);
    CHECK(pp_stream_copy_tensor(s, &b, &a, "mismatch", &err) == PP_ERR_INVALID);
    CHECK(strstr(err.msg, "[4]") != NULL && strstr(err.msg, "[5]") != NULL);
    pp_tensor_free(&a);
    pp_tensor_free(&b);
    CHECK_OK(pp_stream_synchronize(s, &err), &err);
    pp_stream_free(s);
}

/* ---- schedules ------------------------------------------------------------ */

static int count_kind(const pp_schedule *s, int st, pp_action_kind k)
{
    int c = 0;
    for (int p = 0; p < s->n_actions[st]; p++) c += s->actions[st][p].kind == k;
    return c;
}

static void test_schedule_generators(void)
{
    int failures = 0;
    for (int kind = 0; kind < 2; kind++)
        for (int S = 1; S <= 8; S++)
            for (int m = 1; m <= 16; m++) {
                pp_schedule s;
                pp_error err;
                int sizes[16];
                for (int i = 0; i < m; i++) sizes[i] = i == m - 1 ? 2 : 3;
                if (pp_schedule_build(&s, (pp_schedule_kind)kind, S, m, sizes, &err) != PP_OK) {
                    CHECK_MSG(0, "build %d S=%d m=%d: %s", kind, S, m, err.msg);
                    continue;
                }
                if (pp_schedule_validate(&s, &err) != PP_OK) {
                    failures++;
                    CHECK_MSG(0, "%s S=%d m=%d invalid: %s", s.name, S, m, err.msg);
                }
                for (int st = 0; st < S; st++) {
                    int comm = (st > 0) * 2 * m + (st < S - 1) * 2 * m;
                    if (s.n_actions[st] != 2 * m + comm + 1) failures++;
                    if (count_kind(&s, st, PP_ACT_F) != m || count_kind(&s, st, PP_ACT_B) != m)
                        failures++;
                    /* forwards before the first backward */
                    int before = 0;
                    for (int p = 0; p < s.n_actions[st]; p++) {
                        if (s.actions[st][p].kind == PP_ACT_B) break;
                        before += s.actions[st][p].kind == PP_ACT_F;
                    }
                    int expect = kind == PP_SCHEDULE_GPIPE ? m : (S - st < m ? S - st : m);
                    if (before != expect) {
                        failures++;
                        CHECK_MSG(0, "%s S=%d m=%d stage %d: %d forwards before B0, want %d",
                                  s.name, S, m, st, before, expect);
                    }
                }
                /* the executor's lowering needs no more than 2 slots for these */
                pp_program p;
                if (pp_program_build(&s, 2, &p, &err) != PP_OK) {
                    failures++;
                    CHECK_MSG(0, "lower %s S=%d m=%d: %s", s.name, S, m, err.msg);
                } else {
                    if (p.slots != 2) failures++;
                    int items = 0;
                    for (int st = 0; st < S; st++) items += 2 * m + 1;
                    items += 2 * (S - 1) * m;
                    if (p.n_items != items) failures++;
                    pp_program_free(&p);
                }
                pp_schedule_free(&s);
            }
    CHECK(failures == 0);
}

static void test_microbatch_sizes(void)
{
    pp_error err;
    int sizes[8], m;
    CHECK_OK(pp_microbatch_sizes(8, 3, sizes, 8, &m, &err), &err);
    CHECK(m == 3 && sizes[0] == 3 && sizes[1] == 3 && sizes[2] == 2);
    CHECK_OK(pp_microbatch_sizes(8, 8, sizes, 8, &m, &err), &err);
    CHECK(m == 1 && sizes[0] == 8);
    CHECK(pp_microbatch_sizes(8, 0, sizes, 8, &m, &err) == PP_ERR_INPUT);
    CHECK(pp_microbatch_sizes(9, 1, sizes, 8, &m, &err) == PP_ERR_INVALID);
}

/* ---- simulator -------------------------------------------------------------- */

static void test_sim_closed_form(void)
{
    int failures = 0;
    const double f = 1.5, b = 2.5;
    for (int kind = 0; kind < 2; kind++)
        for (int S = 1; S <= 8; S++)
            for (int m = 1; m <= 16; m++) {
                pp_schedule s;
                pp_error err;
                CHECK_OK(pp_schedule_build(&s, (pp_schedule_kind)kind, S, m, NULL, &err), &err);
                double fw[8], bw[8];
                for (int i = 0; i < S; i++) fw[i] = f, bw[i] = b;
                pp_sim_costs c = {.stages = S, .forward_ms = fw, .backward_ms = bw};
                pp_sim_result r;
                if (pp_simulate(&s, &c, &r, &err) != PP_OK) {
                    CHECK_MSG(0, "simulate: %s", err.msg);
                    pp_schedule_free(&s);
                    continue;
                }
                double want = (m + S - 1) * (f + b);
                double want_bubble = (double)(S - 1) / (double)(m + S - 1);
                if (r.step_ms != want || fabs(r.bubble - want_bubble) > 1e-12) {
                    failures++;
                    CHECK_MSG(0, "%s S=%d m=%d: step %.3f want %.3f, bubble %.4f want %.4f",
                              s.name, S, m, r.step_ms, want, r.bubble, want_bubble);
                }
                for (int i = 0; i < S; i++)
                    if (r.busy_ms[i] != m * (f + b)) failures++;
                pp_sim_result_free(&r);
                pp_schedule_free(&s);
            }
    CHECK(failures == 0);
}

static void test_sim_costs(void)
{
    static const struct {
        pp_schedule_kind kind;
        int S, m;
        double f[3], b[3], ca, cg;
        int ref;            /* 0: no scaling */
        int sizes[4];
        double want;
    } cases[] = {
        /* the slowest stage dominates: 2 stages, f=(1,3) b=(2,6): fill 1, then
         * stage 1 runs 3 forwards and 3 backwards, then stage 0's last B */
        {PP_SCHEDULE_GPIPE, 2, 3, {1, 3}, {2, 6}, 0, 0, 0, {0}, 1 + 9 + 18 + 2},
        /* copies add latency on the critical path: 1 + 0.5 + 3 + 3 + 0.5 + 2 */
        {PP_SCHEDULE_GPIPE, 2, 1, {1, 3}, {2, 3}, 0.5, 0.5, 0, {0}, 10},
        /* costs scaled by micro-batch size: sizes 4,2 with ref 4 on one stage */
        {PP_SCHEDULE_1F1B, 1, 2, {2}, {4}, 0, 0, 4, {4, 2}, 2 + 4 + 1 + 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pp_schedule s;
        pp_error err;
        CHECK_OK(pp_schedule_build(&s, cases[k].kind, cases[k].S, cases[k].m,
                                   cases[k].ref ? cases[k].sizes : NULL, &err), &err);
        double ca[2] = {cases[k].ca, cases[k].ca}, cg[2] = {cases[k].cg, cases[k].cg};
        pp_sim_costs c = {.stages = cases[k].S, .forward_ms = cases[k].f,
                          .backward_ms = cases[k].b, .copy_act_ms = ca, .copy_grad_ms = cg,
                          .ref_mb_size = cases[k].ref};
        pp_sim_result r;
        CHECK_OK(pp_simulate(&s, &c, &r, &err), &err);
        CHECK_MSG(fabs(r.step_ms - cases[k].want) < 1e-9, "case %zu: %.3f want %.3f", k,
                  r.step_ms, cases[k].want);
        CHECK(r.n_items > 0 && strcmp(r.items[0].name, "F0 stage0") == 0);
        pp_sim_result_free(&r);
        pp_schedule_free(&s);
    }
    pp_schedule s;
    pp_error err;
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_GPIPE, 2, 2, NULL, &err), &err);
    double one[1] = {1};
    pp_sim_costs c = {.stages = 1, .forward_ms = one, .backward_ms = one};
    pp_sim_result r;
    CHECK(pp_simulate(&s, &c, &r, &err) == PP_ERR_INVALID);
    pp_schedule_free(&s);
}

typedef struct graph_log {
    int seq[64];
    int n;
} graph_log;

typedef struct graph_arg {
    graph_log *log;
    int value;
    const int *src; /* when set: log *src instead of value */
} graph_arg;

static pp_status graph_append(pp_exec *ex, void *arg, pp_error *err)
{
    graph_arg *a = arg;
    if (a->log->n < 64) a->log->seq[a->log->n++] = a->src ? *a->src : a->value;
    return PP_OK;
}

/* Recorded graphs: a capture runs nothing; each launch runs the captured
 * items again in order, across streams, with their waits and records, and
 * reads the buffers' current contents; a wait for an event recorded outside
 * the capture refuses it, leaving the streams usable. */
static void test_graphs(void)
{
    pp_error err;
    pp_stream *a, *b;
    pp_event *ev, *outside;
    CHECK_OK(pp_stream_new(cpu0, PP_STREAM_COMPUTE, "ga", &a, &err), &err);
    CHECK_OK(pp_stream_new(cpu1, PP_STREAM_COPY, "gb", &b, &err), &err);
    CHECK_OK(pp_event_new(cpu0, &ev, &err), &err);
    CHECK_OK(pp_event_new(cpu0, &outside, &err), &err);
    graph_log log = {{0}, 0};
    int input = 7;
    float src[4] = {1, 2, 3, 4}, dst[4] = {0};
    graph_arg first = {&log, 1, NULL}, second = {&log, 0, &input};
    pp_stream *both[2] = {a, b};
    CHECK_OK(pp_graph_capture_begin(both, 2, &err), &err);
    CHECK(pp_graph_capture_begin(both, 2, &err) == PP_ERR_INVALID); /* already capturing */
    CHECK_OK(pp_stream_launch(a, "first", graph_append, &first, &err), &err);
    CHECK_OK(pp_event_record(ev, a, &err), &err);
    CHECK_OK(pp_stream_wait_event(b, ev, &err), &err);
    CHECK_OK(pp_stream_copy(b, dst, cpu1, src, cpu0, sizeof src, "copy", &err), &err);
    CHECK_OK(pp_stream_launch(b, "second", graph_append, &second, &err), &err);
    CHECK(pp_stream_synchronize(a, &err) == PP_ERR_INVALID);
    pp_graph *g = NULL;
    CHECK_OK(pp_graph_capture_end(both, 2, &g, &err), &err);
    CHECK(g && pp_graph_replays_host(g) && pp_graph_items(g) == 3);
    CHECK(log.n == 0 && dst[0] == 0); /* nothing ran */
    for (int rep = 0; rep < 3; rep++) {
        input = 10 + rep;
        src[0] = (float)(100 + rep);
        CHECK_OK(pp_graph_launch(g, &err), &err);
        CHECK_OK(pp_stream_synchronize(b, &err), &err);
        CHECK_OK(pp_stream_synchronize(a, &err), &err);
        CHECK(log.n == 2 * (rep + 1) && log.seq[2 * rep] == 1 && log.seq[2 * rep + 1] == 10 + rep);
        CHECK(dst[0] == (float)(100 + rep) && dst[3] == 4);
        const pp_stream_record *r;
        size_t n;
        CHECK_OK(pp_stream_records(b, &r, &n, &err), &err);
        CHECK(n == 2 && strcmp(r[0].label, "copy") == 0 && r[0].bytes == sizeof src &&
              strcmp(r[1].label, "second") == 0 && r[1].end_ns >= r[1].start_ns);
        pp_stream_records_clear(a);
        pp_stream_records_clear(b);
    }
    pp_graph_free(g);

    /* refused: a wait for an event recorded before the capture */
    CHECK_OK(pp_event_record(outside, a, &err), &err);
    CHECK_OK(pp_stream_synchronize(a, &err), &err);
    CHECK_OK(pp_graph_capture_begin(both, 2, &err), &err);
    CHECK_OK(pp_stream_wait_event(b, outside, &err), &err);
    CHECK_OK(pp_stream_launch(b, "second", graph_append, &second, &err), &err);
    g = NULL;
    CHECK(pp_graph_capture_end(both, 2, &g, &err) == PP_ERR_UNSUPPORTED && g == NULL);
    CHECK_MSG(strstr(err.msg, "refused") && strstr(err.msg, "pp_stream_wait_event"), "%s",
              err.msg);
    int before = log.n;
    CHECK_OK(pp_stream_launch(b, "after", graph_append, &first, &err), &err); /* eager again */
    CHECK_OK(pp_stream_synchronize(b, &err), &err);
    CHECK(log.n == before + 1);

    /* streams of one capture only, not twice */
    pp_stream *twice[2] = {a, a};
    CHECK(pp_graph_capture_begin(twice, 2, &err) == PP_ERR_INVALID);
    CHECK(pp_graph_capture_end(both, 2, &g, &err) == PP_ERR_INVALID && g == NULL);
    pp_event_free(ev);
    pp_event_free(outside);
    pp_stream_free(a);
    pp_stream_free(b);
}

int main(void)
{
    pp_error err;
    if (pp_registry_new(&reg, &err) != PP_OK ||
        pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu0, &err) != PP_OK ||
        pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 1}, &cpu1, &err) != PP_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    test_fifo();
    test_events();
    test_waits_before_work();
    test_sticky_errors();
    test_foreign_waits();
    test_copies_ordered();
    test_stream_misuse();
    test_graphs();
    test_schedule_generators();
    test_microbatch_sizes();
    test_sim_closed_form();
    test_sim_costs();
    pp_registry_free(reg);
    return check_summary("streams");
}
