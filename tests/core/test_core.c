/* test_core.c - device ids, registry, memory accounting, tensors and views. */
#include <stdio.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/tensor.h"
#include "tests/check.h"

static void test_device_parse(void)
{
    static const struct {
        const char *s;
        int ok;
        pp_device_kind kind;
        int index;
    } cases[] = {
        {"cpu:0", 1, PP_DEVICE_CPU, 0},  {"cpu:3", 1, PP_DEVICE_CPU, 3},
        {"cuda:1", 1, PP_DEVICE_CUDA, 1}, {"cpu", 1, PP_DEVICE_CPU, 0},
        {"cuda", 1, PP_DEVICE_CUDA, 0},  {"gpu:0", 0, 0, 0},
        {"cpu:", 0, 0, 0},               {"cpu:-1", 0, 0, 0},
        {"cpu:1x", 0, 0, 0},             {"cuda:99999", 0, 0, 0},
        {"cpu0", 0, 0, 0},               {"", 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_device_id id;
        pp_error err;
        pp_status s = pp_device_id_parse(cases[i].s, &id, &err);
        CHECK_MSG((s == PP_OK) == cases[i].ok, "parse '%s'", cases[i].s);
        if (s == PP_OK && cases[i].ok) {
            CHECK(id.kind == cases[i].kind && id.index == cases[i].index);
        } else if (s != PP_OK) {
            CHECK(s == PP_ERR_INPUT && strstr(err.msg, cases[i].s) != NULL);
        }
    }
}

static void test_registry_and_memory(void)
{
    pp_registry *reg;
    pp_error err;
    CHECK_OK(pp_registry_new(&reg, &err), &err);
    pp_device_ctx *c0, *c1, *again;
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &c0, &err), &err);
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 1}, &c1, &err), &err);
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &again, &err), &err);
    CHECK(c0 == again && c0 != c1);
    CHECK(strcmp(c1->name, "cpu:1") == 0);

    pp_tensor a, b;
    CHECK_OK(pp_tensor_alloc(&a, c0, PP_F32, 4, (int64_t[]){2, 3, 4, 5}, &err), &err);
    CHECK(pp_device_bytes_in_use(c0) == 2 * 3 * 4 * 5 * 4);
    CHECK_OK(pp_tensor_zeros(&b, c0, PP_I64, 1, (int64_t[]){10}, &err), &err);
    CHECK(pp_device_bytes_in_use(c0) == 480 + 80);
    CHECK(pp_device_bytes_in_use(c1) == 0);
    int64_t host[10];
    CHECK_OK(pp_tensor_to_host(&b, host, sizeof host, &err), &err);
    for (int i = 0; i < 10; i++) CHECK(host[i] == 0);
    pp_tensor_free(&a);
    CHECK(pp_device_bytes_in_use(c0) == 80);
    CHECK(pp_device_peak_bytes(c0) == 560);
    pp_device_reset_peak(c0);
    CHECK(pp_device_peak_bytes(c0) == 80);
    pp_tensor_free(&b);
    pp_tensor_free(&b); /* freeing a zeroed tensor is a no-op */

    /* memory limit gives a clean OOM */
    c1->bytes_limit = 1000;
    pp_tensor big;
    pp_status s = pp_tensor_alloc(&big, c1, PP_F32, 1, (int64_t[]){1000}, &err);
    CHECK(s == PP_ERR_OOM && strstr(err.msg, "cpu:1") != NULL);
    CHECK(big.data == NULL && pp_device_bytes_in_use(c1) == 0);

    /* no CUDA device: a clean error, not a crash */
    pp_device_ctx *g;
    if (pp_cuda_device_count() == 0) {
        s = pp_registry_get(reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &g, &err);
        CHECK(s != PP_OK && strstr(err.msg, "cuda:0") != NULL);
    }
    pp_registry_free(reg);
}

static void test_views(void)
{
    pp_registry *reg;
    pp_error err;
    CHECK_OK(pp_registry_new(&reg, &err), &err);
    pp_device_ctx *c0;
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &c0, &err), &err);
    pp_tensor t;
    CHECK_OK(pp_tensor_alloc(&t, c0, PP_F32, 4, (int64_t[]){8, 2, 3, 3}, &err), &err);
    float *p = t.data;
    for (int i = 0; i < 8 * 18; i++) p[i] = (float)i;
    pp_tensor v = pp_tensor_view0(&t, 3, 3);
    CHECK(v.shape[0] == 3 && v.shape[1] == 2 && !v.owns);
    CHECK(((float *)v.data)[0] == 54.0f);
    pp_tensor r;
    CHECK_OK(pp_tensor_reshape(&v, 2, (int64_t[]){3, 18}, &r, &err), &err);
    CHECK(r.ndim == 2 && pp_tensor_numel(&r) == 54);
    CHECK(pp_tensor_reshape(&v, 2, (int64_t[]){4, 18}, &r, &err) == PP_ERR_INVALID);
    char buf[64];
    CHECK(strcmp(pp_tensor_shape_str(&v, buf, sizeof buf), "[3, 2, 3, 3]") == 0);
    pp_tensor_free(&v); /* a view: nothing released */
    CHECK(pp_device_bytes_in_use(c0) == 8 * 18 * 4);
    pp_tensor_free(&t);
    CHECK(pp_device_bytes_in_use(c0) == 0);
    pp_registry_free(reg);
}

/* The math mode round-trips on a CPU device; unknown modes are refused and
 * leave it unchanged. (That tf32 computes as fp32 on the CPU, bit for bit,
 * is checked op by op in tests/ops.) */
static void test_math_mode(void)
{
    pp_registry *reg;
    pp_error err;
    CHECK_OK(pp_registry_new(&reg, &err), &err);
    pp_device_ctx *c0, *c1;
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &c0, &err), &err);
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 1}, &c1, &err), &err);
    CHECK(pp_device_math(c0) == PP_MATH_FP32);
    CHECK_OK(pp_device_set_math(c0, PP_MATH_TF32, &err), &err);
    CHECK(pp_device_math(c0) == PP_MATH_TF32 && c0->math == PP_MATH_TF32);
    CHECK(pp_device_math(c1) == PP_MATH_FP32); /* per device */
    pp_status s = pp_device_set_math(c0, (pp_math_mode)7, &err);
    CHECK(s == PP_ERR_INVALID && strstr(err.msg, "cpu:0") && strstr(err.msg, "7"));
    CHECK(pp_device_math(c0) == PP_MATH_TF32);
    CHECK(pp_device_set_math(NULL, PP_MATH_FP32, &err) == PP_ERR_INVALID);
    CHECK(pp_device_math(NULL) == PP_MATH_FP32);
    CHECK_OK(pp_device_set_math(c0, PP_MATH_FP32, &err), &err);
    CHECK(pp_device_math(c0) == PP_MATH_FP32);
    pp_registry_free(reg);
}

int main(void)
{
    test_device_parse();
    test_registry_and_memory();
    test_views();
    test_math_mode();
    return check_summary("core");
}
