/*
 * test_checksums.c - the integrity of safetensors checkpoints: the checksum
 * entries the writer adds (XXH3-64 of each tensor's bytes, computed here
 * independently), every damage a load and pp_checkpoint_verify refuse
 * (bytes changed in a tensor, the metadata or the tensor table edited,
 * checksum entries missing or malformed), NaN and Inf in float tensors of
 * each float dtype, files without checksums written byte for byte as the
 * safetensors library writes them, and saves abandoned on request.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/core/device.h"
#include "runtime/core/tensor.h"
#include "runtime/io/checkpoint.h"
#include "tests/check.h"

static char tmpdir[256];
static pp_registry *reg;
static pp_device_ctx *cpu0;

static const char *tmp_path(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}

static int count_tmp_files(void)
{
    DIR *d = opendir(tmpdir);
    int count = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp-")) count++;
    if (d) closedir(d);
    return count;
}

/* Three tensors: fc.weight (3, 4) F32, fc.bias (3) F32, steps () I64. */
typedef struct set3 {
    pp_tensor w, b, steps;
    pp_ckpt_tensor list[3];
} set3;

static void set3_init(set3 *s, float fill)
{
    pp_error err;
    float w[12], b[3] = {fill, -fill, 0.5f};
    for (int i = 0; i < 12; i++) w[i] = fill * (float)(i + 1) / 8.0f;
    int64_t steps = fill != 0 ? 41 : 0;
    CHECK_OK(pp_tensor_alloc(&s->w, cpu0, PP_F32, 2, (int64_t[]){3, 4}, &err), &err);
    CHECK_OK(pp_tensor_alloc(&s->b, cpu0, PP_F32, 1, (int64_t[]){3}, &err), &err);
    CHECK_OK(pp_tensor_alloc(&s->steps, cpu0, PP_I64, 0, NULL, &err), &err);
    CHECK_OK(pp_tensor_from_host(&s->w, w, sizeof w, &err), &err);
    CHECK_OK(pp_tensor_from_host(&s->b, b, sizeof b, &err), &err);
    CHECK_OK(pp_tensor_from_host(&s->steps, &steps, sizeof steps, &err), &err);
    s->list[0] = (pp_ckpt_tensor){"fc.weight", &s->w};
    s->list[1] = (pp_ckpt_tensor){"fc.bias", &s->b};
    s->list[2] = (pp_ckpt_tensor){"steps", &s->steps};
}

static void set3_free(set3 *s)
{
    pp_tensor_free(&s->w);
    pp_tensor_free(&s->b);
    pp_tensor_free(&s->steps);
}

static uint64_t header_len(const unsigned char *b)
{
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = (h << 8) | b[i];
    return h;
}

/* The value of metadata key in the header text of file bytes b (or NULL). */
static char *meta_value(const unsigned char *b, const char *key, char *out, size_t n)
{
    char pat[256];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    uint64_t h = header_len(b);
    char *text = strndup((const char *)b + 8, (size_t)h);
    char *at = text ? strstr(text, pat) : NULL;
    char *res = NULL;
    if (at) {
        at += strlen(pat);
        char *end = strchr(at, '"');
        if (end && (size_t)(end - at) < n) {
            memcpy(out, at, (size_t)(end - at));
            out[end - at] = '\0';
            res = out;
        }
    }
    free(text);
    return res;
}

/* 1. the stored checksums are XXH3-64 of each tensor's data bytes */
static void test_format(void)
{
    char path[512];
    tmp_path("fmt.safetensors", path, sizeof path);
    set3 s;
    set3_init(&s, 2.0f);
    pp_error err;
    CHECK_OK(pp_checkpoint_save(path, s.list, 3, (pp_checkpoint_meta[]){{"format", "pt"}}, 1,
                                &err),
             &err);
    size_t n;
    unsigned char *b = check_read_file(path, &n);
    CHECK(b && n > 8);
    if (!b) return;
    uint64_t h = header_len(b);
    const unsigned char *data = b + 8 + h;
    /* data order is by name: fc.bias [0, 12), fc.weight [12, 60), steps [60, 68) */
    const struct {
        const char *key;
        size_t off, len;
    } want[] = {{"checksum.fc.bias", 0, 12}, {"checksum.fc.weight", 12, 48},
                {"checksum.steps", 60, 8}};
    for (size_t i = 0; i < 3; i++) {
        char v[64], expect[64];
        snprintf(expect, sizeof expect, "xxh3-64:%016llx",
                 (unsigned long long)XXH3_64bits(data + want[i].off, want[i].len));
        CHECK_MSG(meta_value(b, want[i].key, v, sizeof v) && strcmp(v, expect) == 0,
                  "%s: %s, expected %s", want[i].key, meta_value(b, want[i].key, v, sizeof v),
                  expect);
    }
    char v[64];
    CHECK(meta_value(b, "checksum.__header__", v, sizeof v) && strlen(v) == 24);
    pp_checkpoint_verify_result r;
    CHECK_OK(pp_checkpoint_verify(path, &r, &err), &err);
    CHECK(r.tensors == 3 && r.data_bytes == 68 && r.checksums);
    /* equal inputs, equal bytes */
    char again[512];
    tmp_path("fmt2.safetensors", again, sizeof again);
    CHECK_OK(pp_checkpoint_save(again, s.list, 3, (pp_checkpoint_meta[]){{"format", "pt"}}, 1,
                                &err),
             &err);
    size_t n2;
    unsigned char *b2 = check_read_file(again, &n2);
    CHECK(b2 && n2 == n && memcmp(b, b2, n) == 0);
    /* the writer's keys are its own */
    pp_status st = pp_checkpoint_save(again, s.list, 3,
                                      (pp_checkpoint_meta[]){{"checksum.fc.bias", "x"}}, 1, &err);
    CHECK_MSG(st == PP_ERR_INVALID && strstr(err.msg, "'checksum.fc.bias'"), "%s", err.msg);
    free(b);
    free(b2);
    set3_free(&s);
}

/* 2. damage: each refused by load, list or verify as the table says, naming
 * the file and (for data) the tensor; nothing is written into the tensors */
static void test_damage(void)
{
    char good[512], bad[512];
    tmp_path("good.safetensors", good, sizeof good);
    tmp_path("bad.safetensors", bad, sizeof bad);
    set3 s, d;
    set3_init(&s, 3.0f);
    set3_init(&d, 0.0f);
    pp_error err;
    const pp_checkpoint_meta meta[] = {{"format", "pt"}, {"pipeline-run.steps", "41"}};
    CHECK_OK(pp_checkpoint_save(good, s.list, 3, meta, 2, &err), &err);
    size_t n;
    unsigned char *gb = check_read_file(good, &n);
    if (!gb) return;
    uint64_t h = header_len(gb);
    const size_t data = 8 + (size_t)h;
    const struct {
        const char *what;
        const char *find, *repl; /* header edit (same length), or NULL */
        size_t at;               /* else: 4 bytes at data + at are flipped */
        bool header_refused;     /* pp_checkpoint_list refuses it too */
        const char *frag;
    } cases[] = {
        {"4 bytes in fc.weight", NULL, NULL, 12 + 20, false,
         "tensor 'fc.weight': checksum mismatch"},
        {"4 bytes in fc.bias", NULL, NULL, 4, false, "tensor 'fc.bias': checksum mismatch"},
        {"4 bytes in steps", NULL, NULL, 60, false, "tensor 'steps': checksum mismatch"},
        {"metadata value", "\"41\"", "\"91\"", 0, true, "header checksum mismatch"},
        {"tensor renamed", "\"fc.bias\":{", "\"fc.bian\":{", 0, true,
         "metadata 'checksum.fc.bias' names no tensor"},
        {"shape edited", "\"shape\":[3,4]", "\"shape\":[4,3]", 0, true,
         "header checksum mismatch"},
        {"checksum text", "\"checksum.steps\":\"xxh3-64:", "\"checksum.steps\":\"xxh3-65:", 0,
         true, "is not a checksum of the form xxh3-64:<16 hex digits>"},
        {"header checksum removed", "\"checksum.__header__\"", "\"checksumx__header__\"", 0,
         true, "without 'checksum.__header__'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *b = malloc(n);
        memcpy(b, gb, n);
        if (cases[i].find) {
            char *text = (char *)b + 8;
            char *at = NULL;
            size_t fl = strlen(cases[i].find);
            for (size_t k = 0; !at && k + fl <= (size_t)h; k++)
                if (memcmp(text + k, cases[i].find, fl) == 0) at = text + k;
            CHECK_MSG(at != NULL, "%s: '%s' not in the header", cases[i].what, cases[i].find);
            if (at) memcpy(at, cases[i].repl, strlen(cases[i].repl));
        } else {
            for (int k = 0; k < 4; k++) b[data + cases[i].at + (size_t)k] ^= 0x5a;
        }
        check_write_file(bad, b, n);
        free(b);
        pp_status st = pp_checkpoint_load(bad, d.list, 3, false, &err);
        CHECK_MSG(st == PP_ERR_INPUT && strstr(err.msg, cases[i].frag) &&
                      strncmp(err.msg, bad, strlen(bad)) == 0,
                  "%s (load): %s: %s", cases[i].what, pp_status_name(st), err.msg);
        pp_checkpoint_verify_result r;
        st = pp_checkpoint_verify(bad, &r, &err);
        CHECK_MSG(st == PP_ERR_INPUT && strstr(err.msg, cases[i].frag) && r.tensors == 0,
                  "%s (verify): %s: %s", cases[i].what, pp_status_name(st), err.msg);
        pp_checkpoint_info info;
        st = pp_checkpoint_list(bad, &info, &err);
        CHECK_MSG((st != PP_OK) == cases[i].header_refused, "%s (list): %s: %s", cases[i].what,
                  pp_status_name(st), err.msg);
        pp_checkpoint_info_free(&info);
    }
    /* nothing was written: d still holds zeros */
    float w[12];
    int64_t steps;
    CHECK_OK(pp_tensor_to_host(&d.w, w, sizeof w, &err), &err);
    CHECK_OK(pp_tensor_to_host(&d.steps, &steps, sizeof steps, &err), &err);
    CHECK(w[0] == 0 && w[11] == 0 && steps == 0);
    /* the good file loads into d */
    CHECK_OK(pp_checkpoint_load(good, d.list, 3, false, &err), &err);
    CHECK_OK(pp_tensor_to_host(&d.steps, &steps, sizeof steps, &err), &err);
    CHECK(steps == 41);
    free(gb);
    set3_free(&s);
    set3_free(&d);
}

/* 3. NaN and Inf: refused by a finite load and by verify, naming the tensor
 * and the element; a load that does not ask for finite values takes them */
static void test_nonfinite(void)
{
    char path[512];
    tmp_path("nan.safetensors", path, sizeof path);
    pp_error err;
    const struct {
        pp_dtype dtype;
        uint16_t bits16;   /* F16 / BF16 element */
        float f32;         /* F32 element */
        int at;
    } cases[] = {
        {PP_F32, 0, NAN, 5}, {PP_F32, 0, -INFINITY, 0}, {PP_F32, 0, INFINITY, 11},
        {PP_BF16, 0x7fc0, 0, 3}, {PP_BF16, 0xff80, 0, 7}, {PP_F16, 0x7e00, 0, 2},
        {PP_F16, 0x7c00, 0, 9},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_tensor t, u;
        CHECK_OK(pp_tensor_zeros(&t, cpu0, cases[i].dtype, 2, (int64_t[]){3, 4}, &err), &err);
        CHECK_OK(pp_tensor_zeros(&u, cpu0, cases[i].dtype, 2, (int64_t[]){3, 4}, &err), &err);
        unsigned char host[48] = {0};
        if (cases[i].dtype == PP_F32) {
            float v[12] = {1, 2, 3};
            v[cases[i].at] = cases[i].f32;
            memcpy(host, v, sizeof v);
        } else {
            uint16_t v[12] = {0x3c00, 0x3f80};
            v[cases[i].at] = cases[i].bits16;
            memcpy(host, v, sizeof v);
        }
        CHECK_OK(pp_tensor_from_host(&t, host, pp_tensor_bytes(&t), &err), &err);
        pp_ckpt_tensor list[1] = {{"layer1.0.conv1.weight", &t}}, into[1] = {{list[0].name, &u}};
        CHECK_OK(pp_checkpoint_save(path, list, 1, NULL, 0, &err), &err);
        char frag[128];
        snprintf(frag, sizeof frag, "tensor 'layer1.0.conv1.weight' (%s [3, 4]) holds NaN or Inf "
                 "(element %d)", pp_dtype_name(cases[i].dtype), cases[i].at);
        pp_checkpoint_load_options o = {.finite = true};
        pp_status st = pp_checkpoint_load_with(path, into, 1, &o, &err);
        CHECK_MSG(st == PP_ERR_INPUT && strstr(err.msg, frag), "case %zu (load): %s", i, err.msg);
        st = pp_checkpoint_verify(path, NULL, &err);
        CHECK_MSG(st == PP_ERR_INPUT && strstr(err.msg, frag), "case %zu (verify): %s", i,
                  err.msg);
        unsigned char back[48];
        CHECK_OK(pp_tensor_to_host(&u, back, pp_tensor_bytes(&u), &err), &err);
        CHECK_MSG(memcmp(back, (unsigned char[48]){0}, pp_tensor_bytes(&u)) == 0,
                  "case %zu: refused, yet written", i);
        CHECK_OK(pp_checkpoint_load(path, into, 1, false, &err), &err);
        CHECK_OK(pp_tensor_to_host(&u, back, pp_tensor_bytes(&u), &err), &err);
        CHECK(memcmp(back, host, pp_tensor_bytes(&u)) == 0);
        pp_tensor_free(&t);
        pp_tensor_free(&u);
    }
}

/* Writes a file as the safetensors library does (its serialize): tensors in
 * order of dtype (by its enum, largest first: I64 > F32 > BF16 > U8), then
 * name; the header compact JSON, "__metadata__" first, fields dtype, shape,
 * data_offsets, padded with spaces so the data starts at a multiple of 8. */
static void write_like_safetensors(const char *path, bool nan)
{
    const char *header =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"num_batches\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
        "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]},"
        "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[24,36]},"
        "\"c.half\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[36,40]},"
        "\"d.mask\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[40,43]}}";
    unsigned char data[43];
    int64_t nb = 7;
    float a[4] = {1, -2, 3.5f, 0.25f}, bw[3] = {9, 8, nan ? NAN : 7};
    uint16_t c[2] = {0x3f80, 0xc000}; /* 1, -2 */
    memcpy(data, &nb, 8);
    memcpy(data + 8, a, 16);
    memcpy(data + 24, bw, 12);
    memcpy(data + 36, c, 4);
    memcpy(data + 40, (unsigned char[]){1, 0, 1}, 3);
    size_t hl = strlen(header), padded = hl + (8 - hl % 8) % 8;
    unsigned char *buf = calloc(1, 8 + padded + sizeof data);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    memcpy(buf + 8 + padded, data, sizeof data);
    check_write_file(path, buf, 8 + padded + sizeof data);
    free(buf);
}

/* 4. a file without checksums loads and verifies as before */
static void test_foreign(void)
{
    char path[512];
    tmp_path("foreign.safetensors", path, sizeof path);
    write_like_safetensors(path, false);
    pp_error err;
    pp_tensor nb, a, b, c, d;
    CHECK_OK(pp_tensor_zeros(&nb, cpu0, PP_I64, 0, NULL, &err), &err);
    CHECK_OK(pp_tensor_zeros(&a, cpu0, PP_F32, 2, (int64_t[]){2, 2}, &err), &err);
    CHECK_OK(pp_tensor_zeros(&b, cpu0, PP_F32, 1, (int64_t[]){3}, &err), &err);
    CHECK_OK(pp_tensor_zeros(&c, cpu0, PP_BF16, 1, (int64_t[]){2}, &err), &err);
    CHECK_OK(pp_tensor_zeros(&d, cpu0, PP_U8, 1, (int64_t[]){3}, &err), &err);
    pp_ckpt_tensor list[5] = {{"num_batches", &nb}, {"a.weight", &a}, {"b.weight", &b},
                              {"c.half", &c}, {"d.mask", &d}};
    pp_checkpoint_load_options o = {.finite = true};
    CHECK_OK(pp_checkpoint_load_with(path, list, 5, &o, &err), &err);
    float av[4], bv[3];
    int64_t nv;
    CHECK_OK(pp_tensor_to_host(&a, av, sizeof av, &err), &err);
    CHECK_OK(pp_tensor_to_host(&b, bv, sizeof bv, &err), &err);
    CHECK_OK(pp_tensor_to_host(&nb, &nv, sizeof nv, &err), &err);
    CHECK(av[1] == -2 && av[3] == 0.25f && bv[2] == 7 && nv == 7);
    pp_checkpoint_info info;
    CHECK_OK(pp_checkpoint_list(path, &info, &err), &err);
    CHECK(!info.checksums && info.n == 5);
    pp_checkpoint_info_free(&info);
    pp_checkpoint_verify_result r;
    CHECK_OK(pp_checkpoint_verify(path, &r, &err), &err);
    CHECK(r.tensors == 5 && r.data_bytes == 43 && !r.checksums);
    /* without checksums, values are still checked */
    write_like_safetensors(path, true);
    pp_status st = pp_checkpoint_verify(path, &r, &err);
    CHECK_MSG(st == PP_ERR_INPUT && strstr(err.msg, "tensor 'b.weight' (F32 [3]) holds NaN"),
              "%s", err.msg);
    st = pp_checkpoint_load_with(path, list, 5, &o, &err);
    CHECK_MSG(st == PP_ERR_INPUT && strstr(err.msg, "tensor 'b.weight'"), "%s", err.msg);
    /* and a re-save gains checksums */
    write_like_safetensors(path, false);
    CHECK_OK(pp_checkpoint_load(path, list, 5, false, &err), &err);
    CHECK_OK(pp_checkpoint_save(path, list, 5, NULL, 0, &err), &err);
    CHECK_OK(pp_checkpoint_verify(path, &r, &err), &err);
    CHECK(r.checksums && r.tensors == 5);
    pp_tensor_free(&nb);
    pp_tensor_free(&a);
    pp_tensor_free(&b);
    pp_tensor_free(&c);
    pp_tensor_free(&d);
}

/* 5. a save abandoned at its k-th poll (before each tensor, before the
 * rename): PP_ERR_INTERRUPTED, the old file intact, no temporary left */
typedef struct poll_count {
    int polls, cancel_at;
} poll_count;

static bool cancel_at(void *arg)
{
    poll_count *p = arg;
    return ++p->polls == p->cancel_at;
}

static void test_cancel(void)
{
    char path[512];
    tmp_path("cancel.safetensors", path, sizeof path);
    set3 s, old;
    set3_init(&s, 5.0f);
    set3_init(&old, 1.0f);
    pp_error err;
    CHECK_OK(pp_checkpoint_save(path, old.list, 3, NULL, 0, &err), &err);
    size_t n0;
    unsigned char *before = check_read_file(path, &n0);
    poll_count never = {0, -1};
    /* polls: one before the file is created, one per tensor, one before the rename */
    for (int k = 1; k <= 5; k++) {
        poll_count pc = {0, k};
        pp_status st = pp_checkpoint_save_cancellable(path, s.list, 3, NULL, 0, cancel_at, &pc,
                                                      &err);
        CHECK_MSG(st == PP_ERR_INTERRUPTED && strstr(err.msg, "save abandoned"),
                  "cancel at poll %d: %s: %s", k, pp_status_name(st), err.msg);
        size_t n1;
        unsigned char *after = check_read_file(path, &n1);
        CHECK_MSG(before && after && n1 == n0 && memcmp(before, after, n0) == 0,
                  "cancel at poll %d: the old file changed", k);
        free(after);
        CHECK_MSG(count_tmp_files() == 0, "cancel at poll %d: a temporary file is left", k);
    }
    CHECK_OK(pp_checkpoint_save_cancellable(path, s.list, 3, NULL, 0, cancel_at, &never, &err),
             &err);
    CHECK(never.polls == 5);
    CHECK_OK(pp_checkpoint_verify(path, NULL, &err), &err);
    free(before);
    set3_free(&s);
    set3_free(&old);
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "test_checksums")) return 1;
    pp_error err;
    CHECK_OK(pp_registry_new(&reg, &err), &err);
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu0, &err), &err);
    test_format();
    test_damage();
    test_nonfinite();
    test_foreign();
    test_cancel();
    pp_registry_free(reg);
    check_rmtree(tmpdir);
    return check_summary("test_checksums");
}
