/*
 * test_executor_slots.c - where the executor puts the boundary slots between
 * stages: a CPU stage's slots that another device's copy stream moves are
 * that device's pinned host memory (pp_device_host_alloc; page-locked on
 * CUDA, so the copies run without the host waiting), counted in the CPU
 * stage's memory; every other slot is its stage device's own memory.
 *
 * Without a GPU the copier is a fake: cpu:1 runs the CPU backend's table with
 * host_alloc and host_free entries that count what they hand out, which is
 * what makes a device "pin" (pp_device_host_pinned). The copy lane of
 * activations from stage 0 (cpu:0) to stage 1 (cpu:1) belongs to cpu:1, so
 * stage 0's activation slots must come from cpu:1's host_alloc; the gradient
 * lane belongs to cpu:0, which does not pin, so nothing else does. Data flows
 * through the pinned slots exactly (a two-stage toy, checked bit for bit),
 * the counts of cpu:0 hold the slots while the executor lives and return to
 * where they were once it is freed, and every pinned slot is released by the
 * fake's host_free. With two plain CPU devices nothing is pinned.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/backend.h"
#include "runtime/core/device.h"
#include "streams/executor.h"
#include "streams/executor_internal.h"
#include "streams/schedule.h"
#include "tests/check.h"

enum { D = 8, MB = 4, SIZE = 3, MAX_PINNED = 64 };

/* ---- the fake copier's host memory ------------------------------------------ */

static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;
static void *pinned[MAX_PINNED];
static int n_pinned, n_unpinned;

static pp_status fake_host_alloc(pp_device_ctx *dev, size_t bytes, void **ptr, pp_error *err)
{
    *ptr = NULL;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0)
        return pp_error_set(err, PP_ERR_OOM, "%s: fake host_alloc failed", dev->name);
    pthread_mutex_lock(&pin_mu);
    if (n_pinned < MAX_PINNED) pinned[n_pinned++] = p;
    pthread_mutex_unlock(&pin_mu);
    *ptr = p;
    return PP_OK;
}

static void fake_host_free(pp_device_ctx *dev, void *ptr)
{
    (void)dev;
    pthread_mutex_lock(&pin_mu);
    for (int i = 0; i < n_pinned; i++)
        if (pinned[i] == ptr) {
            pinned[i] = NULL;
            n_unpinned++;
        }
    pthread_mutex_unlock(&pin_mu);
    free(ptr);
}

static bool was_pinned(const void *p)
{
    bool yes = false;
    pthread_mutex_lock(&pin_mu);
    for (int i = 0; i < n_pinned; i++) yes |= pinned[i] == p;
    pthread_mutex_unlock(&pin_mu);
    return yes;
}

/* ---- two toy stages: y = x * w (stage 0 makes its input) ----------------------- */

typedef struct toy {
    int index;
    float w, dw;
    float saved[MB][SIZE * D];
} toy;

static float input_value(int mb, int k) { return (float)(mb * 7 + k % 5) * 0.25f + 1.0f; }

static pp_status toy_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    t->dtype = PP_F32;
    t->ndim = 2;
    t->shape[0] = mb_size;
    t->shape[1] = D;
    return PP_OK;
}

static pp_status toy_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                             pp_tensor *out, pp_error *err)
{
    toy *t = user;
    float *y = out->data;
    for (int k = 0; k < mb_size * D; k++) {
        float x = in ? ((const float *)in->data)[k] : input_value(mb, k);
        t->saved[mb][k] = x;
        y[k] = x * t->w;
    }
    return PP_OK;
}

static pp_status toy_backward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *gout,
                              pp_tensor *gin, pp_error *err)
{
    toy *t = user;
    for (int k = 0; k < mb_size * D; k++) {
        float g = gout ? ((const float *)gout->data)[k] : 1.0f; /* last stage: d(sum y) */
        t->dw += g * t->saved[mb][k];
        if (gin) ((float *)gin->data)[k] = g * t->w;
    }
    return PP_OK;
}

static const pp_stage_ops toy_ops = {
    .out_shape = toy_shape, .forward = toy_forward, .backward = toy_backward};

/* The same arithmetic in order: dw of both stages. */
static void reference(float w0, float w1, float *dw0, float *dw1)
{
    *dw0 = *dw1 = 0;
    for (int mb = 0; mb < MB; mb++)
        for (int k = 0; k < SIZE * D; k++) {
            float x = input_value(mb, k), h = x * w0;
            *dw1 += 1.0f * h;
            *dw0 += (1.0f * w1) * x;
        }
}

/* One 1F1B run over cpu:0 -> copier; returns the executor still alive in *out. */
static void run_two(pp_device_ctx *cpu0, pp_device_ctx *copier, toy *st, pp_executor **out)
{
    pp_error err;
    pp_stage_desc desc[2] = {{cpu0, &toy_ops, &st[0]}, {copier, &toy_ops, &st[1]}};
    *out = NULL;
    CHECK_OK(pp_executor_new(desc, 2, 2, out, &err), &err);
    if (!*out) return;
    int sizes[MB] = {SIZE, SIZE, SIZE, SIZE};
    pp_schedule s;
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_1F1B, 2, MB, sizes, &err), &err);
    CHECK_OK(pp_executor_run(*out, &s, NULL, &err), &err);
    pp_schedule_free(&s);
}

static void test_pinned_by_copier(pp_device_ctx *cpu0, pp_device_ctx *cpu1)
{
    static pp_backend_ops fake;
    fake = *pp_backend_cpu();
    fake.host_alloc = fake_host_alloc;
    fake.host_free = fake_host_free;
    const pp_backend_ops *was = cpu1->ops;
    cpu1->ops = &fake;
    CHECK(pp_device_host_pinned(cpu1) && !pp_device_host_pinned(cpu0));

    size_t before0 = pp_device_bytes_in_use(cpu0), before1 = pp_device_bytes_in_use(cpu1);
    toy st[2] = {{.index = 0, .w = 1.5f}, {.index = 1, .w = -0.75f}};
    pp_executor *ex;
    run_two(cpu0, cpu1, st, &ex);
    float dw0, dw1;
    reference(st[0].w, st[1].w, &dw0, &dw1);
    CHECK_MSG(st[0].dw == dw0 && st[1].dw == dw1, "dw %g %g, want %g %g", st[0].dw, st[1].dw,
              dw0, dw1);
    if (ex) {
        const boundary_buf *bb = &ex->bufs[0];
        const size_t bytes = bb->bytes;
        CHECK(bytes == (size_t)SIZE * D * sizeof(float));
        CHECK_MSG(ex->slots >= 2 && n_pinned == ex->slots, "%d slots, %d pinned", ex->slots,
                  n_pinned);
        for (int k = 0; k < ex->slots; k++) {
            CHECK_MSG(was_pinned(bb->act_send[k]), "stage 0's activation slot %d is not pinned",
                      k);
            CHECK(!was_pinned(bb->grad_recv[k])); /* copied by cpu:0's own lane */
            CHECK(!was_pinned(bb->act_recv[k]) && !was_pinned(bb->grad_send[k]));
        }
        CHECK(bb->pin[0] == cpu1 && !bb->pin[1] && !bb->pin[2] && !bb->pin[3]);
        /* cpu:0 counts its slots, pinned or not: 2 arrays of slots */
        CHECK_MSG(pp_device_bytes_in_use(cpu0) - before0 == 2 * (size_t)ex->slots * bytes,
                  "cpu:0 counts %zu bytes for %d slots of %zu", pp_device_bytes_in_use(cpu0) -
                  before0, ex->slots, bytes);
        int slots = ex->slots;
        pp_executor_free(ex);
        CHECK_MSG(n_unpinned == slots, "%d of %d pinned slots released", n_unpinned, slots);
    }
    CHECK(pp_device_bytes_in_use(cpu0) == before0 && pp_device_bytes_in_use(cpu1) == before1);
    cpu1->ops = was;
}

static void test_plain_cpu(pp_device_ctx *cpu0, pp_device_ctx *cpu1)
{
    int pinned_before = n_pinned;
    toy st[2] = {{.index = 0, .w = 2.0f}, {.index = 1, .w = 0.5f}};
    pp_executor *ex;
    run_two(cpu0, cpu1, st, &ex);
    float dw0, dw1;
    reference(st[0].w, st[1].w, &dw0, &dw1);
    CHECK(st[0].dw == dw0 && st[1].dw == dw1);
    if (ex) {
        for (int i = 0; i < 4; i++) CHECK(ex->bufs[0].pin[i] == NULL);
        pp_executor_free(ex);
    }
    CHECK(n_pinned == pinned_before);
}

int main(void)
{
    pp_error err;
    pp_registry *reg;
    if (pp_registry_new(&reg, &err) != PP_OK) return 1;
    pp_device_ctx *cpu0, *cpu1;
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu0, &err), &err);
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 1}, &cpu1, &err), &err);
    test_plain_cpu(cpu0, cpu1);
    test_pinned_by_copier(cpu0, cpu1);
    pp_registry_free(reg);
    return check_summary("test_executor_slots");
}
