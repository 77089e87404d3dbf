/* test_core.c - device ids, registry, memory accounting, tensors and views,
 * the math mode, the CUDA backend's algorithm cache and its file, and the
 * libraries opened on first use (plain C, checked without a GPU). */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/core/device.h"
#include "runtime/core/lazy_lib.h"
#include "runtime/core/tensor.h"
#include "runtime/cuda/algo_cache.h"
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

/* ---- the algorithm cache ----------------------------------------------------- */

static pp_conv2d_desc conv_of(int n, int c, int hw, int k, int kernel, int stride, int pad)
{
    pp_conv2d_desc d;
    pp_error err;
    CHECK_OK(pp_conv2d_desc_init(&d, n, c, hw, hw, k, kernel, stride, pad, &err), &err);
    return d;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

/* Number of directory entries besides . and .. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d) closedir(d);
    return n;
}

static void test_algo_key(void)
{
    pp_conv2d_desc d = conv_of(8, 64, 56, 256, 1, 1, 0);
    pp_algo_key k;
    pp_algo_key_make(&k, "NVIDIA\tH100\n80GB", 91900, PP_MATH_TF32,
                     PP_ALGO_WS_MB_DEFAULT, PP_ALGO_BWD_DATA, &d);
    CHECK(strcmp(k.gpu, "NVIDIA_H100_80GB") == 0);
    CHECK(k.cudnn == 91900 && k.math == PP_MATH_TF32 && k.dir == PP_ALGO_BWD_DATA);
    CHECK(k.ws_mb == PP_ALGO_WS_MB_DEFAULT);
    CHECK(k.geom[0] == 8 && k.geom[1] == 64 && k.geom[4] == 256 && k.geom[10] == 0);
    pp_algo_key_make(&k, "", 1, PP_MATH_FP32, PP_ALGO_WS_MB_DEFAULT, PP_ALGO_FWD, &d);
    CHECK(strcmp(k.gpu, "unknown") == 0);
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    pp_algo_key_make(&k, longname, 1, PP_MATH_FP32, PP_ALGO_WS_MB_DEFAULT, PP_ALGO_FWD, &d);
    CHECK(strlen(k.gpu) == PP_ALGO_GPU_MAX - 1);
}

/* Lookups, first-wins insertion and removal without a file. */
static void test_algo_cache_memory(void)
{
    pp_algo_cache c;
    pp_error err;
    CHECK_OK(pp_algo_cache_init(&c, NULL, &err), &err);
    pp_conv2d_desc d = conv_of(2, 3, 9, 4, 3, 1, 1);
    pp_algo_key k, k2;
    pp_algo_key_make(&k, "GPU A", 90000, PP_MATH_FP32, PP_ALGO_WS_MB_DEFAULT, PP_ALGO_FWD, &d);
    pp_algo_key_make(&k2, "GPU A", 90000, PP_MATH_TF32,
                     PP_ALGO_WS_MB_DEFAULT, PP_ALGO_FWD, &d); /* another mode */
    pp_algo_choice got = {0}, mine = {1, 3, 0.5f, 0, 0, 0, 0.0f}, later = {6, 3, 0.25f, 0, 0, 0, 0.0f};
    CHECK(!pp_algo_cache_find(&c, &k, &got));
    pp_algo_cache_insert(&c, &k, &mine);
    CHECK(pp_algo_cache_find(&c, &k, &got) && got.algo == 1 && got.math_type == 3);
    CHECK(!pp_algo_cache_find(&c, &k2, &got));
    pp_algo_cache_insert(&c, &k, &later); /* the first choice wins and is handed back */
    CHECK(later.algo == 1 && later.ms == 0.5f);
    pp_algo_cache_remove(&c, &k);
    CHECK(!pp_algo_cache_find(&c, &k, &got));
    pp_algo_choice again = {6, 3, 0.25f, 0, 0, 0, 0.0f};
    pp_algo_cache_insert(&c, &k, &again);
    CHECK(pp_algo_cache_find(&c, &k, &got) && got.algo == 6);
    pp_algo_stats st = pp_algo_cache_stats(&c);
    CHECK(st.inserted == 2 && st.hits == 2 && st.saves == 0 && !st.foreign);
    pp_algo_cache_destroy(&c);
}

#define ENTRY_FWD "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.125\n"

/* Version 2 files: choices measured under different workspace caps are
 * different keys (one shape, three caps), the over-cap figures are kept and
 * summed into the statistics of the cache that measured them; lines with a
 * bad WS_MB, OVER or OVER_MB are skipped. */
static void test_algo_cache_caps(const char *path)
{
    pp_conv2d_desc d = conv_of(128, 64, 56, 64, 3, 1, 1);
    static const struct {
        int ws_mb;
        pp_algo_choice choice;
    } rows[] = {{512, {1, 3, 2.5f, 2, 1830, PP_ALGO_API_GRAPH, 2.25f}},
                {4096, {6, 3, 1.25f, 0, 0, PP_ALGO_API_LEGACY, 1.5f}},
                {1, {0, 3, 9.0f, 5, 1830, PP_ALGO_API_LEGACY, 0.0f}}};
    enum { ROWS = sizeof rows / sizeof rows[0] };
    pp_algo_key k[ROWS];
    pp_algo_cache a, b;
    pp_error err;
    write_text(path, "");
    CHECK_OK(pp_algo_cache_init(&a, path, &err), &err);
    for (int i = 0; i < ROWS; i++) {
        pp_algo_key_make(&k[i], "NVIDIA H200", 91900, PP_MATH_FP32, rows[i].ws_mb, PP_ALGO_FWD,
                         &d);
        pp_algo_choice c = rows[i].choice;
        pp_algo_cache_insert(&a, &k[i], &c);
    }
    pp_algo_stats st = pp_algo_cache_stats(&a);
    CHECK_MSG(st.inserted == ROWS && st.over == 7 && st.over_mb == 1830, "inserted %d, over %d "
              "(largest %d MiB)", st.inserted, st.over, st.over_mb);
    pp_algo_cache_destroy(&a);
    CHECK_OK(pp_algo_cache_init(&b, path, &err), &err);
    pp_algo_choice got;
    for (int i = 0; i < ROWS; i++)
        CHECK_MSG(pp_algo_cache_find(&b, &k[i], &got) && got.algo == rows[i].choice.algo &&
                      got.over == rows[i].choice.over && got.over_mb == rows[i].choice.over_mb &&
                      got.api == rows[i].choice.api && got.graph_ms == rows[i].choice.graph_ms,
                  "cap %d MiB: algo %d, over %d, api %d (%g ms)", rows[i].ws_mb, got.algo,
                  got.over, got.api, (double)got.graph_ms);
    pp_algo_key other;
    pp_algo_key_make(&other, "NVIDIA H200", 91900, PP_MATH_FP32, 2048, PP_ALGO_FWD, &d);
    CHECK(!pp_algo_cache_find(&b, &other, &got)); /* no choice made under 2048 MiB */
    st = pp_algo_cache_stats(&b);
    CHECK(st.file_entries == ROWS && st.bad_lines == 0 && st.over == 0); /* read, not measured */
    pp_algo_cache_destroy(&b);

    write_text(path, PP_ALGO_FILE_HEADER_V2 "\n"
               "G\t1\tfp32\t4096\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\t3\t5000\n" /* good */
               "G\t1\tfp32\t0\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\t0\t0\n"
               "G\t1\tfp32\t65537\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\t0\t0\n"
               "G\t1\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\t0\t0\n"
               "G\t1\tfp32\t512\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\t-1\t0\n"
               "G\t1\tfp32\t512\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\t0\n"
               "G\t1\tfp32\t512\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\n" /* version 1's */
               "G\t1\tfp32\t512\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\t0\t0\t0\n");
    CHECK_OK(pp_algo_cache_init(&a, path, &err), &err);
    pp_conv2d_desc d1 = conv_of(2, 3, 9, 4, 3, 1, 1);
    pp_algo_key kg;
    pp_algo_key_make(&kg, "G", 1, PP_MATH_FP32, 4096, PP_ALGO_FWD, &d1);
    CHECK(pp_algo_cache_find(&a, &kg, &got) && got.over == 3 && got.over_mb == 5000 &&
          got.api == PP_ALGO_API_LEGACY && got.graph_ms == 0.0f); /* version 2: not timed */
    st = pp_algo_cache_stats(&a);
    CHECK_MSG(st.file_entries == 1 && st.bad_lines == 7, "entries %d, bad lines %d",
              st.file_entries, st.bad_lines);
    pp_algo_cache_destroy(&a);

    /* version 3's API and GRAPH_MS: a graph choice needs its plan's time */
#define V3_LINE(ws, rest) "G\t1\tfp32\t" ws "\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\t0\t0" rest "\n"
    write_text(path, PP_ALGO_FILE_HEADER "\n"
               V3_LINE("100", "\tgraph\t0.25")  /* good */
               V3_LINE("200", "\tlegacy\t0")    /* good: graph not timed */
               V3_LINE("300", "\tlegacy\t0.75") /* good: graph timed, slower */
               V3_LINE("400", "\tgraph\t0")     /* a graph choice without a time */
               V3_LINE("500", "\tgraph\t-1")
               V3_LINE("600", "\tsideways\t0.25")
               V3_LINE("700", "\tgraph")
               V3_LINE("800", "")                 /* version 2's line in version 3 */
               V3_LINE("900", "\tlegacy\t0\t0"));
#undef V3_LINE
    CHECK_OK(pp_algo_cache_init(&a, path, &err), &err);
    static const struct {
        int ws_mb, api;
        float graph_ms;
    } v3[] = {{100, PP_ALGO_API_GRAPH, 0.25f}, {200, PP_ALGO_API_LEGACY, 0.0f},
              {300, PP_ALGO_API_LEGACY, 0.75f}};
    for (size_t i = 0; i < sizeof v3 / sizeof v3[0]; i++) {
        pp_algo_key_make(&kg, "G", 1, PP_MATH_FP32, v3[i].ws_mb, PP_ALGO_FWD, &d1);
        CHECK_MSG(pp_algo_cache_find(&a, &kg, &got) && got.api == v3[i].api &&
                      got.graph_ms == v3[i].graph_ms,
                  "version 3, cap %d: api %d, %g ms", v3[i].ws_mb, got.api,
                  (double)got.graph_ms);
    }
    st = pp_algo_cache_stats(&a);
    CHECK_MSG(st.file_entries == 3 && st.bad_lines == 6, "version 3: entries %d, bad lines %d",
              st.file_entries, st.bad_lines);
    /* an update replaces a stored choice (the graph API's plan first timed)
     * and stores a missing one, in memory and in the file, counted apart */
    pp_algo_key_make(&kg, "G", 1, PP_MATH_FP32, 200, PP_ALGO_FWD, &d1);
    CHECK(pp_algo_cache_find(&a, &kg, &got));
    got.api = PP_ALGO_API_GRAPH, got.graph_ms = 0.125f;
    pp_algo_cache_update(&a, &kg, &got);
    pp_algo_key kn;
    pp_algo_key_make(&kn, "G", 1, PP_MATH_FP32, 1000, PP_ALGO_FWD, &d1);
    const pp_algo_choice fresh = {2, 3, 1.0f, 0, 0, PP_ALGO_API_LEGACY, 1.5f};
    pp_algo_cache_update(&a, &kn, &fresh);
    st = pp_algo_cache_stats(&a);
    CHECK_MSG(st.updated == 2 && st.inserted == 0 && st.saves == 2,
              "updates: %d updated, %d inserted, %d saves", st.updated, st.inserted, st.saves);
    pp_algo_cache_destroy(&a);
    CHECK_OK(pp_algo_cache_init(&a, path, &err), &err);
    CHECK(pp_algo_cache_find(&a, &kg, &got) && got.api == PP_ALGO_API_GRAPH &&
          got.graph_ms == 0.125f && got.algo == 1);
    CHECK(pp_algo_cache_find(&a, &kn, &got) && got.algo == 2 && got.graph_ms == 1.5f);
    st = pp_algo_cache_stats(&a);
    CHECK_MSG(st.file_entries == 4, "after the updates the file holds %d entries",
              st.file_entries);
    pp_algo_cache_destroy(&a);
}

/* The file: written atomically after each new entry, read back by a fresh
 * cache, merged with what other writers added, bad lines skipped, foreign
 * files left alone, write failures counted. */
static void test_algo_cache_file(void)
{
    char dir[256], path[320], other[320];
    if (!check_mkdtemp(dir, sizeof dir, "pp-algo-cache")) {
        CHECK(0);
        return;
    }
    snprintf(path, sizeof path, "%s/algos.txt", dir);
    pp_error err;
    pp_conv2d_desc d1 = conv_of(2, 3, 9, 4, 3, 1, 1), d2 = conv_of(8, 64, 56, 256, 1, 1, 0);
    pp_algo_key ka, kb, kc, kd, ke;
    pp_algo_key_make(&ka, "NVIDIA H100 80GB HBM3", 91900, PP_MATH_FP32,
                     PP_ALGO_WS_MB_DEFAULT, PP_ALGO_FWD, &d1);
    pp_algo_key_make(&kb, "NVIDIA H100 80GB HBM3", 91900, PP_MATH_FP32,
                     PP_ALGO_WS_MB_DEFAULT, PP_ALGO_BWD_DATA, &d1);
    pp_algo_key_make(&kc, "NVIDIA H100 80GB HBM3", 91900, PP_MATH_TF32,
                     PP_ALGO_WS_MB_DEFAULT, PP_ALGO_BWD_FILTER, &d2);
    pp_algo_key_make(&kd, "NVIDIA H200", 91900, PP_MATH_FP32,
                     PP_ALGO_WS_MB_DEFAULT, PP_ALGO_FWD, &d2);
    pp_algo_key_make(&ke, "NVIDIA H100 80GB HBM3", 91000, PP_MATH_FP32,
                     PP_ALGO_WS_MB_DEFAULT, PP_ALGO_FWD, &d1);
    pp_algo_choice ca = {1, 3, 0.0412f, 0, 0, 0, 0.0f}, cb = {4, 3, 1.5f, 0, 0, 0, 0.0f}, cc = {0, 1, 2e-3f, 0, 0, 0, 0.0f};
    pp_algo_choice cd = {7, 3, 0.0f, 0, 0, 0, 0.0f}, ce = {2, 3, 3.0f, 0, 0, 0, 0.0f}, got;

    /* 1. a new file, written after each entry, no temporary left behind */
    pp_algo_cache a, b;
    CHECK_OK(pp_algo_cache_init(&a, path, &err), &err);
    CHECK(!pp_algo_cache_find(&a, &ka, &got));
    pp_algo_cache_insert(&a, &ka, &ca);
    pp_algo_cache_insert(&a, &kb, &cb);
    pp_algo_cache_insert(&a, &kc, &cc);
    pp_algo_stats st = pp_algo_cache_stats(&a);
    CHECK_MSG(st.saves == 3 && st.save_failures == 0, "saves %d, failures %d (%s)", st.saves,
              st.save_failures, st.save_error);
    CHECK(dir_entries(dir) == 1);
    size_t n;
    unsigned char *text = check_read_file(path, &n);
    const char *header = PP_ALGO_FILE_HEADER "\n";
    CHECK(text && n > strlen(header) && memcmp(text, header, strlen(header)) == 0);
    CHECK(text && strstr((char *)text, "NVIDIA H100 80GB HBM3\t91900\ttf32\t512\tbwd_filter\t8 64 "
                                        "56 56 256 1 1 1 1 0 0\t0\t1\t0.002\t0\t0\tlegacy\t0\n"));
    free(text);

    /* 2. a fresh cache reads it at its first lookup */
    CHECK_OK(pp_algo_cache_init(&b, path, &err), &err);
    CHECK(pp_algo_cache_find(&b, &kc, &got) && got.algo == 0 && got.math_type == 1);
    CHECK(pp_algo_cache_find(&b, &ka, &got) && got.algo == 1);
    CHECK(got.ms > 0.0411f && got.ms < 0.0413f); /* printed with 6 digits */
    CHECK(!pp_algo_cache_find(&b, &ke, &got)); /* another cuDNN version */
    st = pp_algo_cache_stats(&b);
    CHECK(st.file_entries == 3 && st.bad_lines == 0 && st.hits == 2 && !st.foreign);

    /* 3. writers merge: b adds kd, then a (which never saw kd) adds ke */
    pp_algo_cache_insert(&b, &kd, &cd);
    pp_algo_cache_insert(&a, &ke, &ce);
    pp_algo_cache c;
    CHECK_OK(pp_algo_cache_init(&c, path, &err), &err);
    CHECK(pp_algo_cache_find(&c, &kd, &got) && got.algo == 7);
    CHECK(pp_algo_cache_find(&c, &ke, &got) && got.algo == 2);
    st = pp_algo_cache_stats(&c);
    CHECK_MSG(st.file_entries == 5, "merged file holds %d entries", st.file_entries);
    pp_algo_cache_destroy(&a);
    pp_algo_cache_destroy(&b);
    pp_algo_cache_destroy(&c);

    /* 4. a file of version 1: read as chosen under the 512 MiB cap; bad lines
     * are skipped, the good ones used; duplicates: the first wins; the next
     * write (version 2) keeps only what parsed */
    write_text(path, PP_ALGO_FILE_HEADER_V1 "\r\n"
               "# a comment\n"
               "\n"
               ENTRY_FWD
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t5\t3\t0.5\n" /* duplicate */
               "GPU X\t90100\ttf32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t6\t1\t0.5\r\n" /* CRLF */
               "GPU X\t90100\tfp16\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\n"
               "GPU X\t90100\tfp32\tsideways\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1\t1\t3\t0.5\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1 1\t1\t3\t0.5\n"
               "GPU X\t90100\tfp32\tfwd\t0 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 -1 1\t1\t3\t0.5\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1  1\t1\t3\t0.5\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 99999999999\t1\t3\t0.5\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t64\t3\t0.5\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t4\t0.5\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\tnan\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t-1\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\textra\n"
               "GPU X\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1x\t3\t0.5\n"
               "\t90100\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\n"
               "GPU X\t0\tfp32\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t0.5\n"
               "GPU X 90100 fp32 fwd 2 3 9 9 4 3 3 1 1 1 1 1 3 0.5\n"
               "\x01\x02\xff garbage\n"
               "GPU X\t90100\tfp32\tfwd"); /* cut short, no end of line */
    CHECK_OK(pp_algo_cache_init(&a, path, &err), &err);
    pp_algo_key kx, ky;
    pp_algo_key_make(&kx, "GPU X", 90100, PP_MATH_FP32, PP_ALGO_WS_MB_DEFAULT, PP_ALGO_FWD, &d1);
    pp_algo_key_make(&ky, "GPU X", 90100, PP_MATH_TF32, PP_ALGO_WS_MB_DEFAULT, PP_ALGO_FWD, &d1);
    CHECK(pp_algo_cache_find(&a, &kx, &got) && got.algo == 1 && got.ms == 0.125f);
    CHECK(pp_algo_cache_find(&a, &ky, &got) && got.algo == 6 && got.math_type == 1);
    st = pp_algo_cache_stats(&a);
    CHECK_MSG(st.file_entries == 2 && st.bad_lines == 19 && !st.foreign,
              "entries %d, bad lines %d", st.file_entries, st.bad_lines);
    pp_algo_cache_insert(&a, &ka, &ca);
    pp_algo_cache_destroy(&a);
    CHECK_OK(pp_algo_cache_init(&b, path, &err), &err);
    CHECK(pp_algo_cache_find(&b, &kx, &got) && got.algo == 1 && got.over == 0);
    st = pp_algo_cache_stats(&b);
    CHECK(st.file_entries == 3 && st.bad_lines == 0);
    pp_algo_cache_destroy(&b);
    text = check_read_file(path, &n);
    CHECK(text && n > strlen(header) && memcmp(text, header, strlen(header)) == 0);
    CHECK(text && strstr((char *)text, "GPU X\t90100\tfp32\t512\tfwd\t2 3 9 9 4 3 3 1 1 1 1\t1\t3\t"
                                        "0.125\t0\t0\tlegacy\t0\n"));
    free(text);

    /* 5. a foreign file is neither used nor replaced; so is a folder */
    static const char *const foreign[] = {"hello world\n" ENTRY_FWD,
                                          "# pipeline-run cudnn algorithms 4\n" ENTRY_FWD,
                                          ENTRY_FWD};
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        write_text(path, foreign[i]);
        CHECK_OK(pp_algo_cache_init(&a, path, &err), &err);
        CHECK(!pp_algo_cache_find(&a, &kx, &got));
        pp_algo_cache_insert(&a, &ka, &ca);
        st = pp_algo_cache_stats(&a);
        CHECK(st.foreign && st.saves == 0 && st.save_failures == 0 && st.inserted == 1);
        text = check_read_file(path, &n);
        CHECK_MSG(text && n == strlen(foreign[i]) && memcmp(text, foreign[i], n) == 0,
                  "foreign file %zu was changed", i);
        free(text);
        pp_algo_cache_destroy(&a);
    }
    snprintf(other, sizeof other, "%s/folder", dir);
    CHECK(mkdir(other, 0755) == 0);
    CHECK_OK(pp_algo_cache_init(&a, other, &err), &err);
    pp_algo_cache_insert(&a, &ka, &ca);
    CHECK(pp_algo_cache_stats(&a).foreign && pp_algo_cache_find(&a, &ka, &got));
    pp_algo_cache_destroy(&a);
    rmdir(other);

    test_algo_cache_caps(path);

    /* 6. an empty file is an empty cache; a path that cannot be written is counted */
    write_text(path, "");
    CHECK_OK(pp_algo_cache_init(&a, path, &err), &err);
    pp_algo_cache_insert(&a, &ka, &ca);
    st = pp_algo_cache_stats(&a);
    CHECK(!st.foreign && st.saves == 1);
    pp_algo_cache_destroy(&a);
    snprintf(other, sizeof other, "%s/missing/algos.txt", dir);
    CHECK_OK(pp_algo_cache_init(&a, other, &err), &err);
    pp_algo_cache_insert(&a, &ka, &ca);
    st = pp_algo_cache_stats(&a);
    CHECK_MSG(st.save_failures == 1 && strstr(st.save_error, "missing"), "failures %d: %s",
              st.save_failures, st.save_error);
    CHECK(pp_algo_cache_find(&a, &ka, &got)); /* still cached in memory */
    pp_algo_cache_destroy(&a);

    unlink(path);
    CHECK(dir_entries(dir) == 0);
    rmdir(dir);
}

/* Execs of one device insert the same keys from several threads: each key
 * ends with one choice, the one every thread was handed back. */
typedef struct race_arg {
    pp_algo_cache *c;
    int id;
    int seen[64];
} race_arg;

static void *race_thread(void *p)
{
    race_arg *r = p;
    for (int i = 0; i < 64; i++) {
        pp_conv2d_desc d; /* no CHECK here: the counters are the main thread's */
        pp_conv2d_desc_init(&d, 1 + i, 3, 8, 8, 4, 3, 1, 1, NULL);
        pp_algo_key k;
        pp_algo_key_make(&k, "GPU", 1, PP_MATH_FP32, PP_ALGO_WS_MB_DEFAULT, PP_ALGO_FWD, &d);
        pp_algo_choice ch = {r->id, 3, 1.0f, 0, 0, 0, 0.0f}, got;
        if (!pp_algo_cache_find(r->c, &k, &got)) {
            pp_algo_cache_insert(r->c, &k, &ch);
            got = ch;
        }
        r->seen[i] = got.algo;
    }
    return NULL;
}

static void test_algo_cache_threads(void)
{
    pp_algo_cache c;
    pp_error err;
    CHECK_OK(pp_algo_cache_init(&c, NULL, &err), &err);
    enum { THREADS = 4 };
    pthread_t th[THREADS];
    race_arg args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (race_arg){.c = &c, .id = t};
        pthread_create(&th[t], NULL, race_thread, &args[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    int differ = 0;
    for (int i = 0; i < 64; i++)
        for (int t = 1; t < THREADS; t++) differ += args[t].seen[i] != args[0].seen[i];
    CHECK_MSG(differ == 0, "%d choices differ between threads", differ);
    CHECK(pp_algo_cache_stats(&c).inserted == 64);
    pp_algo_cache_destroy(&c);
}

/* A variable of a number: each value's status and number, and the message
 * naming the variable and the value. */
typedef struct int_case {
    const char *value; /* NULL: unset */
    pp_status status;
    int n;
} int_case;

static void check_int_env(const char *name, pp_status (*parse)(int *, pp_error *),
                          const int_case *cases, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (cases[i].value)
            setenv(name, cases[i].value, 1);
        else
            unsetenv(name);
        int n = -1;
        pp_error err;
        pp_status s = parse(&n, &err);
        CHECK_MSG(s == cases[i].status && n == cases[i].n, "%s=%s: %s, %d", name,
                  cases[i].value ? cases[i].value : "(unset)", pp_status_name(s), n);
        if (s != PP_OK)
            CHECK_MSG(strstr(err.msg, name) && strstr(err.msg, cases[i].value), "message: %s",
                      err.msg);
    }
    unsetenv(name);
}

/* PP_CUDA_CONV_WS_MB: the cap in MiB, 1 to 65536, 512 when unset. */
static void test_algo_ws_env(void)
{
    static const int_case cases[] = {
        {NULL, PP_OK, 512},           {"4096", PP_OK, 4096},
        {"1", PP_OK, 1},              {"65536", PP_OK, 65536},
        {"0", PP_ERR_INPUT, 512},     {"65537", PP_ERR_INPUT, 512},
        {"-5", PP_ERR_INPUT, 512},    {"", PP_ERR_INPUT, 512},
        {"4 GiB", PP_ERR_INPUT, 512}, {"4096 ", PP_ERR_INPUT, 512},
        {"+64", PP_ERR_INPUT, 512},   {"99999999999", PP_ERR_INPUT, 512}};
    check_int_env("PP_CUDA_CONV_WS_MB", pp_algo_ws_from_env, cases,
                  sizeof cases / sizeof cases[0]);
}

static void test_algo_find_env(void)
{
    static const struct {
        const char *value; /* NULL: unset */
        pp_status status;
        bool on;
    } cases[] = {{NULL, PP_OK, true}, {"1", PP_OK, true}, {"0", PP_OK, false},
                 {"yes", PP_ERR_INPUT, true}, {"", PP_ERR_INPUT, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].value)
            setenv("PP_CUDNN_FIND", cases[i].value, 1);
        else
            unsetenv("PP_CUDNN_FIND");
        bool on = !cases[i].on;
        pp_error err;
        pp_status s = pp_algo_find_from_env(&on, &err);
        CHECK_MSG(s == cases[i].status && (s != PP_OK || on == cases[i].on),
                  "PP_CUDNN_FIND=%s: %s", cases[i].value ? cases[i].value : "(unset)",
                  pp_status_name(s));
        if (s != PP_OK) CHECK(strstr(err.msg, "PP_CUDNN_FIND") != NULL);
    }
    unsetenv("PP_CUDNN_FIND");
}

/* PP_CUDA_CONV_API: auto (the default), legacy or graph. */
static void test_algo_api_env(void)
{
    static const struct {
        const char *value; /* NULL: unset */
        pp_status status;
        pp_algo_api api;
    } cases[] = {{NULL, PP_OK, PP_ALGO_API_AUTO},          {"auto", PP_OK, PP_ALGO_API_AUTO},
                 {"legacy", PP_OK, PP_ALGO_API_LEGACY},    {"graph", PP_OK, PP_ALGO_API_GRAPH},
                 {"Graph", PP_ERR_INPUT, PP_ALGO_API_AUTO}, {"", PP_ERR_INPUT, PP_ALGO_API_AUTO},
                 {"graph ", PP_ERR_INPUT, PP_ALGO_API_AUTO}, {"1", PP_ERR_INPUT, PP_ALGO_API_AUTO}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].value)
            setenv("PP_CUDA_CONV_API", cases[i].value, 1);
        else
            unsetenv("PP_CUDA_CONV_API");
        pp_algo_api api = PP_ALGO_API_LEGACY;
        pp_error err;
        pp_status s = pp_algo_api_from_env(&api, &err);
        CHECK_MSG(s == cases[i].status && api == cases[i].api, "PP_CUDA_CONV_API=%s: %s, %d",
                  cases[i].value ? cases[i].value : "(unset)", pp_status_name(s), (int)api);
        if (s != PP_OK)
            CHECK_MSG(strstr(err.msg, "PP_CUDA_CONV_API") && strstr(err.msg, cases[i].value),
                      "message: %s", err.msg);
    }
    unsetenv("PP_CUDA_CONV_API");
}

/* PP_CUDA_CONV_PLANS: 1 to 16 graph API plans timed, 4 when unset. */
static void test_algo_plans_env(void)
{
    static const int_case cases[] = {
        {NULL, PP_OK, 4},      {"10", PP_OK, 10},        {"1", PP_OK, 1},
        {"16", PP_OK, 16},     {"0", PP_ERR_INPUT, 4},   {"17", PP_ERR_INPUT, 4},
        {"", PP_ERR_INPUT, 4}, {"ten", PP_ERR_INPUT, 4}, {"4 ", PP_ERR_INPUT, 4}};
    check_int_env("PP_CUDA_CONV_PLANS", pp_algo_plans_from_env, cases,
                  sizeof cases / sizeof cases[0]);
}

/* a library opened on first use: its symbols, a missing library, a missing
 * symbol (lazy_lib.h) */
static void test_lazy_lib(void)
{
    static const char *const names[] = {"cos", "sqrt", NULL};
    void *fns[2] = {0};
    pp_lazy_lib ok = {.soname = "libm.so.6", .names = names, .fns = fns};
    CHECK(pp_lazy_lib_ready(&ok));
    CHECK(pp_lazy_lib_ready(&ok)); /* a second call: the same, nothing opened again */
    double (*fn)(double);
    memcpy(&fn, &fns[0], sizeof fn);
    CHECK(fns[0] && fns[1] && fn(0.0) == 1.0);
    CHECK_MSG(ok.why[0] == '\0', "why: %s", ok.why);

    static const char *const one[] = {"cos", NULL};
    void *none[1] = {0};
    pp_lazy_lib missing = {.soname = "libpp-no-such-library.so.7", .names = one, .fns = none};
    CHECK(!pp_lazy_lib_ready(&missing));
    CHECK(!pp_lazy_lib_ready(&missing)); /* failed stays failed */
    CHECK_MSG(strstr(missing.why, "libpp-no-such-library.so.7") != NULL, "why: %s", missing.why);
    CHECK(none[0] == NULL);

    /* with beside: a library not found by name is not found beside either when the
     * folder lacks it (the fallback's own path runs only where the search misses) */
    void *beside_fns[1] = {0};
    pp_lazy_lib beside = {.soname = "libpp-no-such-library.so.7", .names = one,
                          .fns = beside_fns, .beside = (void (*)(void))cos};
    CHECK(!pp_lazy_lib_ready(&beside) && beside_fns[0] == NULL);

    static const char *const typo[] = {"cos", "pp_no_such_symbol", NULL};
    void *typo_fns[2] = {0};
    pp_lazy_lib partial = {.soname = "libm.so.6", .names = typo, .fns = typo_fns};
    CHECK(!pp_lazy_lib_ready(&partial));
    CHECK_MSG(strstr(partial.why, "pp_no_such_symbol") != NULL, "why: %s", partial.why);
}

int main(void)
{
    test_device_parse();
    test_registry_and_memory();
    test_views();
    test_math_mode();
    test_algo_key();
    test_algo_cache_memory();
    test_algo_cache_file();
    test_algo_cache_threads();
    test_algo_find_env();
    test_algo_ws_env();
    test_algo_api_env();
    test_algo_plans_env();
    test_lazy_lib();
    return check_summary("core");
}
