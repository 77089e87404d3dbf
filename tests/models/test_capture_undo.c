/*
 * test_capture_undo.c - undoing what a refused or discarded CUDA graph
 * capture left on the host, without freeing memory that belonged to the
 * graph (on CUDA an allocation captured into a graph that never ran does not
 * exist: handing its address back to the pool is an error, and forgetting
 * the memory that existed before, a leak):
 *   - units: saved state made by a training forward is dropped by
 *     pp_unit_abandon without one stream-ordered free, shared activations
 *     included once their last reference goes, and the device's count is back
 *     where it was; pp_unit_release frees the same state;
 *   - workspaces: a workspace that grew after pp_exec_workspace_mark is put
 *     back by pp_exec_workspace_restore: the marked pointer and size again
 *     (the old memory was never freed), the grown pointer dropped unfreed,
 *     the count back, ws_gen moved on; nothing happens when it did not grow.
 * Runs without a GPU: cpu:0 runs the CPU backend's table with stream-ordered
 * allocation from an arena the test owns (nothing it hands out is freed by
 * anyone but the test), counting the frees it is asked for.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "models/unit.h"
#include "runtime/core/backend.h"
#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"

enum { ARENA = 1 << 22 };

static _Alignas(64) unsigned char arena[ARENA];
static size_t arena_used;
static int arena_allocs, arena_frees, foreign_frees;
static const pp_backend_ops *cpu_ops;

static bool in_arena(const void *p)
{
    return (const unsigned char *)p >= arena && (const unsigned char *)p < arena + ARENA;
}

static pp_status arena_alloc_async(pp_exec *ex, size_t bytes, void **ptr, pp_error *err)
{
    size_t at = (arena_used + 63) & ~(size_t)63;
    if (at + bytes > ARENA) return pp_error_set(err, PP_ERR_OOM, "test arena is full");
    arena_used = at + bytes;
    arena_allocs++;
    *ptr = arena + at;
    return PP_OK;
}

static void arena_free_async(pp_exec *ex, void *ptr)
{
    if (in_arena(ptr))
        arena_frees++;
    else
        foreign_frees++;
}

static pp_backend_ops fake;

static void use_arena(pp_device_ctx *dev)
{
    cpu_ops = pp_backend_cpu();
    fake = *cpu_ops;
    fake.alloc_async = arena_alloc_async;
    fake.free_async = arena_free_async;
    dev->ops = &fake;
}

static pp_unit *bn_unit(pp_device_ctx *dev, int c)
{
    pp_unit_spec s = {.kind = PP_UNIT_BN, .in_c = c, .out_c = c};
    snprintf(s.name, sizeof s.name, "bn1");
    pp_unit *u = NULL;
    pp_error err;
    CHECK_OK(pp_unit_new(&s, 1, dev, &u, &err), &err);
    return u;
}

static void test_unit_abandon(pp_device_ctx *dev, pp_exec *ex)
{
    pp_error err;
    pp_unit *u = bn_unit(dev, 4);
    if (!u) return;
    int64_t shape[4] = {2, 4, 3, 3};
    pp_tensor x, y;
    CHECK_OK(pp_tensor_alloc(&x, dev, PP_F32, 4, shape, &err), &err);
    CHECK_OK(pp_tensor_alloc(&y, dev, PP_F32, 4, shape, &err), &err);
    float h[72];
    for (int i = 0; i < 72; i++) h[i] = (float)(i % 11) - 5.0f;
    CHECK_OK(pp_tensor_from_host(&x, h, sizeof h, &err), &err);
    const size_t base = pp_device_bytes_in_use(dev);

    /* a copy kept: abandoned unfreed, count back */
    int a0 = arena_allocs, f0 = arena_frees;
    CHECK_OK(pp_unit_forward(u, ex, 0, &x, &y, true, &err), &err);
    CHECK(pp_unit_in_flight(u) == 1 && arena_allocs > a0);
    CHECK(pp_device_bytes_in_use(dev) > base);
    pp_unit_abandon(u, 0);
    CHECK_MSG(arena_frees == f0, "abandon freed %d stream-ordered allocations", arena_frees - f0);
    CHECK(pp_unit_in_flight(u) == 0 && pp_device_bytes_in_use(dev) == base);
    pp_unit_abandon(u, 0); /* nothing in flight: a no-op */
    CHECK(pp_device_bytes_in_use(dev) == base);

    /* the same state released: every allocation freed */
    a0 = arena_allocs, f0 = arena_frees;
    CHECK_OK(pp_unit_forward(u, ex, 1, &x, &y, true, &err), &err);
    pp_unit_release(u, 1);
    CHECK_MSG(arena_frees - f0 == arena_allocs - a0, "release freed %d of %d", arena_frees - f0,
              arena_allocs - a0);
    CHECK(pp_device_bytes_in_use(dev) == base);

    /* a shared input: the unit's reference is the last one, abandoned unfreed */
    pp_tensor xs;
    CHECK_OK(pp_tensor_alloc_on(&xs, ex, PP_F32, 4, shape, &err), &err);
    CHECK(in_arena(xs.data));
    CHECK_OK(pp_tensor_from_host(&xs, h, sizeof h, &err), &err);
    pp_unit_act *xa = NULL;
    CHECK_OK(pp_unit_act_new(&xs, &xa, &err), &err);
    if (xa) {
        f0 = arena_frees;
        CHECK_OK(pp_unit_forward_shared(u, ex, 2, xa, pp_unit_act_tensor(xa), NULL, &y, true,
                                        &err),
                 &err);
        pp_unit_act_drop(xa); /* the creator's reference */
        CHECK(arena_frees == f0);
        pp_unit_abandon(u, 2);
        CHECK_MSG(arena_frees == f0, "abandon freed a shared activation");
        CHECK(pp_device_bytes_in_use(dev) == base);
    }
    CHECK(foreign_frees == 0);
    pp_tensor_free(&x);
    pp_tensor_free(&y);
    pp_unit_free(u);
}

static void test_workspace_restore(pp_device_ctx *dev, pp_exec *ex)
{
    pp_error err;
    void *ws = NULL;
    CHECK_OK(pp_exec_workspace(ex, 1000, &ws, &err), &err);
    const size_t base = pp_device_bytes_in_use(dev);
    pp_exec_ws_mark m = pp_exec_workspace_mark(ex);
    CHECK(m.ws == ws && m.bytes >= 1000 && m.gen == ex->ws_gen);

    /* no growth: restore changes nothing */
    void *same;
    CHECK_OK(pp_exec_workspace(ex, 500, &same, &err), &err);
    pp_exec_workspace_restore(ex, &m);
    CHECK(ex->ws == ws && ex->ws_bytes == m.bytes && ex->ws_gen == m.gen);

    /* grown twice (as inside a capture): the marked workspace is back */
    int f0 = arena_frees;
    void *grown;
    CHECK_OK(pp_exec_workspace(ex, 5000, &grown, &err), &err);
    CHECK_OK(pp_exec_workspace(ex, 90000, &grown, &err), &err);
    CHECK(grown != ws && pp_device_bytes_in_use(dev) > base);
    int frees_in_growth = arena_frees - f0;
    pp_exec_workspace_restore(ex, &m);
    CHECK_MSG(arena_frees - f0 == frees_in_growth, "restore freed something");
    CHECK(ex->ws == ws && ex->ws_bytes == m.bytes && ex->ws_gen != m.gen);
    CHECK(pp_device_bytes_in_use(dev) == base);
    void *again;
    CHECK_OK(pp_exec_workspace(ex, 1000, &again, &err), &err);
    CHECK(again == ws);

    /* a growth whose allocation failed (over the device's cap) */
    m = pp_exec_workspace_mark(ex);
    dev->bytes_limit = pp_device_bytes_in_use(dev) + 100;
    CHECK(pp_exec_workspace(ex, 1 << 20, &grown, &err) == PP_ERR_OOM);
    CHECK(ex->ws == NULL && ex->ws_bytes == 0);
    dev->bytes_limit = 0;
    pp_exec_workspace_restore(ex, &m);
    CHECK(ex->ws == ws && ex->ws_bytes == m.bytes && pp_device_bytes_in_use(dev) == base);
}

int main(void)
{
    pp_error err;
    pp_registry *reg;
    if (pp_registry_new(&reg, &err) != PP_OK) return 1;
    pp_device_ctx *dev;
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &dev, &err), &err);
    use_arena(dev);
    pp_exec ex;
    CHECK_OK(pp_exec_init(&ex, dev, NULL, &err), &err);
    test_unit_abandon(dev, &ex);
    test_workspace_restore(dev, &ex);
    pp_exec_destroy(&ex);
    dev->ops = cpu_ops;
    pp_registry_free(reg);
    return check_summary("test_capture_undo");
}
