/*
 * test_io.c - the optimizer (hand-computed SGD steps across cpu:0 and cpu:1)
 * and safetensors checkpoints (byte-exact round trip, every refusal, atomic
 * writes). Files are written by the test itself into a fresh temporary
 * directory. The data sources are test_data.c's.
 */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/checkpoint.h"
#include "runtime/core/device.h"
#include "runtime/core/tensor.h"
#include "runtime/train/optimizer.h"
#include "tests/check.h"

static char tmpdir[256];
static pp_registry *reg;
static pp_device_ctx *cpu0, *cpu1;

static const char *tmp_path(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}

/* Number of entries of tmpdir whose name contains frag. */
static int count_files_with(const char *frag)
{
    DIR *d = opendir(tmpdir);
    int count = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, frag)) count++;
    if (d) closedir(d);
    return count;
}

static pp_tensor make_f32(pp_device_ctx *dev, int ndim, const int64_t *shape, const float *vals)
{
    pp_tensor t;
    pp_error err;
    CHECK_OK(pp_tensor_alloc(&t, dev, PP_F32, ndim, shape, &err), &err);
    CHECK_OK(pp_tensor_from_host(&t, vals, pp_tensor_bytes(&t), &err), &err);
    return t;
}

static bool close_to(float got, double want)
{
    return fabs((double)got - want) <= 1e-6 * (1.0 + fabs(want));
}

/* ---- optimizer ------------------------------------------------------------- */

typedef struct exec_map {
    pp_exec ex[2];
} exec_map;

static pp_exec *map_exec(void *user, pp_device_ctx *dev)
{
    exec_map *m = user;
    for (int i = 0; i < 2; i++)
        if (m->ex[i].dev == dev) return &m->ex[i];
    return NULL;
}

/* Parameter "a.weight" [1, 2] on cpu:0 with gradient [0.5, -1] and
 * "b.bias" [-1] on cpu:1 with gradient [2]; the same gradients both steps.
 * Expected values computed by hand from the torch.optim.SGD update. */
static const struct sgd_case {
    const char *what;
    pp_sgd_config cfg;
    double a1[2], b1, a2[2], b2;   /* parameters after step 1 and 2 */
    double buf_a[2], buf_b;        /* momentum after step 2 */
} sgd_cases[] = {
    {"momentum + weight decay", {0.1f, 0.9f, 0.01f, false},
     {0.949, 2.098}, -1.199, {0.852151, 2.284102}, -1.576901, {0.96849, -1.86102}, 3.77901},
    {"nesterov", {0.1f, 0.9f, 0.0f, true},
     {0.905, 2.19}, -1.38, {0.7695, 2.461}, -1.922, {0.95, -1.9}, 3.8},
    {"plain SGD + weight decay", {0.5f, 0.0f, 0.1f, false},
     {0.7, 2.4}, -1.95, {0.415, 2.78}, -2.8525, {0, 0}, 0},
};

typedef struct sgd_params {
    pp_tensor a, ga, b, gb;
    pp_param_ref refs[2];
} sgd_params;

static void sgd_params_init(sgd_params *p)
{
    p->a = make_f32(cpu0, 1, (int64_t[]){2}, (float[]){1, 2});
    p->ga = make_f32(cpu0, 1, (int64_t[]){2}, (float[]){0.5f, -1});
    p->b = make_f32(cpu1, 1, (int64_t[]){1}, (float[]){-1});
    p->gb = make_f32(cpu1, 1, (int64_t[]){1}, (float[]){2});
    p->refs[0] = (pp_param_ref){"a.weight", &p->a, &p->ga};
    p->refs[1] = (pp_param_ref){"b.bias", &p->b, &p->gb};
}

static void sgd_params_free(sgd_params *p)
{
    pp_tensor_free(&p->a);
    pp_tensor_free(&p->ga);
    pp_tensor_free(&p->b);
    pp_tensor_free(&p->gb);
}

static void check_params(const sgd_params *p, const double a[2], double b, const char *what)
{
    float ha[2], hb[1];
    pp_error err;
    CHECK_OK(pp_tensor_to_host(&p->a, ha, sizeof ha, &err), &err);
    CHECK_OK(pp_tensor_to_host(&p->b, hb, sizeof hb, &err), &err);
    CHECK_MSG(close_to(ha[0], a[0]) && close_to(ha[1], a[1]) && close_to(hb[0], b),
              "%s: got [%.7f %.7f] [%.7f], want [%.7f %.7f] [%.7f]", what, ha[0], ha[1], hb[0],
              a[0], a[1], b);
}

static void test_sgd_steps(void)
{
    for (size_t c = 0; c < sizeof sgd_cases / sizeof sgd_cases[0]; c++) {
        const struct sgd_case *tc = &sgd_cases[c];
        for (int use_map = 0; use_map < 2; use_map++) {
            pp_error err;
            sgd_params p;
            sgd_params_init(&p);
            exec_map m;
            CHECK_OK(pp_exec_init(&m.ex[0], cpu0, NULL, &err), &err);
            CHECK_OK(pp_exec_init(&m.ex[1], cpu1, NULL, &err), &err);
            pp_exec_for_device_fn fn = use_map ? map_exec : NULL;
            pp_optimizer *opt;
            CHECK_OK(pp_optimizer_new(&opt, &tc->cfg, p.refs, 2, &err), &err);
            CHECK(pp_optimizer_size(opt) == 2);
            CHECK(strcmp(pp_optimizer_param_name(opt, 1), "b.bias") == 0);
            CHECK(pp_optimizer_state(opt, NULL, 0) == 0);
            CHECK_OK(pp_optimizer_step(opt, fn, &m, &err), &err);
            check_params(&p, tc->a1, tc->b1, tc->what);
            CHECK_OK(pp_optimizer_step(opt, fn, &m, &err), &err);
            check_params(&p, tc->a2, tc->b2, tc->what);
            CHECK(pp_optimizer_steps(opt) == 2);

            pp_tensor *bufa = pp_optimizer_momentum(opt, "optimizer.momentum.a.weight");
            pp_tensor *bufb = pp_optimizer_momentum(opt, "optimizer.momentum.b.bias");
            CHECK(pp_optimizer_momentum(opt, "optimizer.momentum.nope") == NULL);
            CHECK(pp_optimizer_momentum(opt, "a.weight") == NULL);
            if (tc->cfg.momentum == 0) {
                CHECK(bufa == NULL && bufb == NULL);
                CHECK(pp_optimizer_state(opt, NULL, 0) == 0);
            } else {
                CHECK(bufa && bufb && bufa->dev == cpu0 && bufb->dev == cpu1);
                float ha[2], hb;
                CHECK_OK(pp_tensor_to_host(bufa, ha, sizeof ha, &err), &err);
                CHECK_OK(pp_tensor_to_host(bufb, &hb, sizeof hb, &err), &err);
                CHECK_MSG(close_to(ha[0], tc->buf_a[0]) && close_to(ha[1], tc->buf_a[1]) &&
                              close_to(hb, tc->buf_b),
                          "%s: momentum [%.7f %.7f] [%.7f]", tc->what, ha[0], ha[1], hb);
                pp_ckpt_tensor st[2];
                CHECK(pp_optimizer_state(opt, st, 2) == 2);
                CHECK(strcmp(st[0].name, "optimizer.momentum.a.weight") == 0 && st[0].tensor == bufa);
                CHECK(strcmp(st[1].name, "optimizer.momentum.b.bias") == 0 && st[1].tensor == bufb);
            }

            CHECK_OK(pp_optimizer_zero_grad(opt, fn, &m, &err), &err);
            float ga[2], gb;
            CHECK_OK(pp_tensor_to_host(&p.ga, ga, sizeof ga, &err), &err);
            CHECK_OK(pp_tensor_to_host(&p.gb, &gb, sizeof gb, &err), &err);
            CHECK(ga[0] == 0 && ga[1] == 0 && gb == 0);

            pp_optimizer_reset_state(opt);
            CHECK(pp_optimizer_steps(opt) == 0);
            CHECK(pp_optimizer_momentum(opt, "optimizer.momentum.a.weight") == NULL);
            pp_optimizer_free(opt);
            pp_exec_destroy(&m.ex[0]);
            pp_exec_destroy(&m.ex[1]);
            sgd_params_free(&p);
        }
    }
    CHECK(pp_device_bytes_in_use(cpu0) == 0 && pp_device_bytes_in_use(cpu1) == 0);
}

static void test_sgd_refusals(void)
{
    sgd_params p;
    sgd_params_init(&p);
    pp_tensor wrong = make_f32(cpu1, 1, (int64_t[]){2}, (float[]){0, 0});
    pp_tensor wrong_shape = make_f32(cpu0, 2, (int64_t[]){1, 2}, (float[]){0, 0});
    const pp_sgd_config good = {0.1f, 0.9f, 0, false};
    const struct {
        pp_sgd_config cfg;
        pp_param_ref refs[2];
        pp_status code;
        const char *frag;
    } cases[] = {
        {{-0.1f, 0, 0, false}, {p.refs[0], p.refs[1]}, PP_ERR_INPUT, "learning rate"},
        {{0.1f, -1, 0, false}, {p.refs[0], p.refs[1]}, PP_ERR_INPUT, "momentum"},
        {{0.1f, 0, -1, false}, {p.refs[0], p.refs[1]}, PP_ERR_INPUT, "weight decay"},
        {{0.1f, 0, 0, true}, {p.refs[0], p.refs[1]}, PP_ERR_INPUT, "Nesterov"},
        {good, {p.refs[0], {"a.weight", &p.b, &p.gb}}, PP_ERR_INVALID, "'a.weight' given twice"},
        {good, {p.refs[0], {"b.bias", &p.b, &wrong}}, PP_ERR_INVALID, "shape"},
        {good, {{"a.weight", &p.a, &wrong}, p.refs[1]}, PP_ERR_INVALID, "different devices"},
        {good, {{"a.weight", &p.a, &wrong_shape}, p.refs[1]}, PP_ERR_INVALID, "[1, 2]"},
        {good, {{"", &p.a, &p.ga}, p.refs[1]}, PP_ERR_INVALID, "no name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_optimizer *opt = (pp_optimizer *)&p;
        pp_error err;
        pp_status s = pp_optimizer_new(&opt, &cases[i].cfg, cases[i].refs, 2, &err);
        CHECK_MSG(s == cases[i].code && strstr(err.msg, cases[i].frag) && opt == NULL,
                  "case %zu: %s: %s", i, pp_status_name(s), err.msg);
    }
    /* an exec map without the parameter's device */
    pp_error err;
    pp_optimizer *opt;
    CHECK_OK(pp_optimizer_new(&opt, &good, p.refs, 2, &err), &err);
    exec_map m = {0};
    CHECK_OK(pp_exec_init(&m.ex[0], cpu0, NULL, &err), &err);
    pp_status s = pp_optimizer_step(opt, map_exec, &m, &err);
    CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "cpu:1") && strstr(err.msg, "b.bias"), "%s",
              err.msg);
    CHECK(pp_optimizer_steps(opt) == 0);
    pp_exec_destroy(&m.ex[0]);
    pp_optimizer_free(opt);
    pp_tensor_free(&wrong);
    pp_tensor_free(&wrong_shape);
    sgd_params_free(&p);
}

/* Step once, checkpoint parameters + momentum, restore into fresh tensors and
 * a fresh optimizer, step again: must equal two uninterrupted steps. */
static void test_sgd_resume(void)
{
    const struct sgd_case *tc = &sgd_cases[0];
    char path[512];
    tmp_path("resume.safetensors", path, sizeof path);
    pp_error err;
    sgd_params p;
    sgd_params_init(&p);
    pp_optimizer *opt;
    CHECK_OK(pp_optimizer_new(&opt, &tc->cfg, p.refs, 2, &err), &err);
    CHECK_OK(pp_optimizer_step(opt, NULL, NULL, &err), &err);
    pp_ckpt_tensor list[4] = {{"a.weight", &p.a}, {"b.bias", &p.b}};
    size_t ns = pp_optimizer_state(opt, list + 2, 2);
    CHECK(ns == 2);
    CHECK_OK(pp_checkpoint_save(path, list, 2 + ns, (pp_checkpoint_meta[]){{"step", "1"}}, 1, &err),
             &err);
    pp_optimizer_free(opt);
    sgd_params_free(&p);

    sgd_params q;
    sgd_params_init(&q);
    CHECK_OK(pp_optimizer_new(&opt, &tc->cfg, q.refs, 2, &err), &err);
    pp_ckpt_tensor model[2] = {{"a.weight", &q.a}, {"b.bias", &q.b}};
    /* model only: the momentum in the file is an error unless allowed */
    pp_status s = pp_checkpoint_load(path, model, 2, false, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "unexpected tensor 'optimizer.momentum.a.weight'"),
              "%s", err.msg);
    CHECK_OK(pp_optimizer_alloc_state(opt, &err), &err);
    pp_ckpt_tensor all[4] = {model[0], model[1]};
    CHECK(pp_optimizer_state(opt, all + 2, 2) == 2);
    CHECK_OK(pp_checkpoint_load(path, all, 4, false, &err), &err);
    pp_checkpoint_info info;
    CHECK_OK(pp_checkpoint_list(path, &info, &err), &err);
    const char *step = pp_checkpoint_info_meta(&info, "step");
    CHECK(step && strcmp(step, "1") == 0);
    pp_optimizer_set_steps(opt, step ? atoll(step) : 0);
    pp_checkpoint_info_free(&info);
    check_params(&q, tc->a1, tc->b1, "resumed step 1");
    CHECK_OK(pp_optimizer_step(opt, NULL, NULL, &err), &err);
    check_params(&q, tc->a2, tc->b2, "resumed step 2");
    CHECK(pp_optimizer_steps(opt) == 2);
    pp_optimizer_free(opt);
    sgd_params_free(&q);
}

/* ---- checkpoints ------------------------------------------------------------ */

typedef struct ckpt_set {
    pp_tensor fc_w, nbt, conv, empty;
    pp_ckpt_tensor list[4];
} ckpt_set;

/* Four tensors on two devices; zero-filled when zero, else with fixed values. */
static void ckpt_set_init(ckpt_set *s, bool zero)
{
    pp_error err;
    float fc[12], conv[18];
    for (int i = 0; i < 12; i++) fc[i] = zero ? 0 : 0.25f * (float)i - 1.0f;
    for (int i = 0; i < 18; i++) conv[i] = zero ? 0 : (float)(i * i) / 7.0f;
    s->fc_w = make_f32(cpu0, 2, (int64_t[]){3, 4}, fc);
    s->conv = make_f32(cpu1, 4, (int64_t[]){2, 1, 3, 3}, conv);
    CHECK_OK(pp_tensor_alloc(&s->nbt, cpu1, PP_I64, 0, NULL, &err), &err);
    int64_t v = zero ? 0 : 123456789012345;
    CHECK_OK(pp_tensor_from_host(&s->nbt, &v, sizeof v, &err), &err);
    CHECK_OK(pp_tensor_alloc(&s->empty, cpu0, PP_F32, 2, (int64_t[]){0, 3}, &err), &err);
    s->list[0] = (pp_ckpt_tensor){"fc.weight", &s->fc_w};
    s->list[1] = (pp_ckpt_tensor){"bn1.num_batches_tracked", &s->nbt};
    s->list[2] = (pp_ckpt_tensor){"layer1.0.conv1.weight", &s->conv};
    s->list[3] = (pp_ckpt_tensor){"zz.empty", &s->empty};
}

static void ckpt_set_free(ckpt_set *s)
{
    pp_tensor_free(&s->fc_w);
    pp_tensor_free(&s->nbt);
    pp_tensor_free(&s->conv);
    pp_tensor_free(&s->empty);
}

static void test_ckpt_roundtrip(void)
{
    char p1[512], p2[512];
    tmp_path("a.safetensors", p1, sizeof p1);
    tmp_path("b.safetensors", p2, sizeof p2);
    pp_error err;
    ckpt_set src, dst;
    ckpt_set_init(&src, false);
    ckpt_set_init(&dst, true);
    const pp_checkpoint_meta meta[] = {{"step", "7"}, {"format", "pt"}};
    CHECK_OK(pp_checkpoint_save(p1, src.list, 4, meta, 2, &err), &err);
    CHECK_OK(pp_checkpoint_load(p1, dst.list, 4, false, &err), &err);
    CHECK_OK(pp_checkpoint_save(p2, dst.list, 4, meta, 2, &err), &err);
    size_t n1, n2;
    unsigned char *b1 = check_read_file(p1, &n1), *b2 = check_read_file(p2, &n2);
    CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0);

    /* layout: header length multiple of 8, metadata first (the checksums, of
     * 24 characters each, then the caller's keys), tensors by name */
    uint64_t hlen = 0;
    for (int i = 7; i >= 0 && b1; i--) hlen = (hlen << 8) | b1[i];
    const char *expect_meta =
        "{\"__metadata__\":{\"checksum.__header__\":\"xxh3-64:################\","
        "\"checksum.bn1.num_batches_tracked\":\"xxh3-64:################\","
        "\"checksum.fc.weight\":\"xxh3-64:################\","
        "\"checksum.layer1.0.conv1.weight\":\"xxh3-64:################\","
        "\"checksum.zz.empty\":\"xxh3-64:################\","
        "\"format\":\"pt\",\"step\":\"7\"},";
    const char *expect_tensors =
        "\"bn1.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
        "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[8,56]},"
        "\"layer1.0.conv1.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,3,3],\"data_offsets\":[56,128]},"
        "\"zz.empty\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[128,128]}}";
    CHECK(hlen % 8 == 0 && n1 == 8 + hlen + 128);
    size_t lm = strlen(expect_meta), lt = strlen(expect_tensors);
    bool meta_ok = b1 && hlen >= lm + lt;
    for (size_t i = 0; meta_ok && i < lm; i++) {
        char c = (char)b1[8 + i];
        meta_ok = expect_meta[i] == '#' ? (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
                                        : c == expect_meta[i];
    }
    CHECK(meta_ok);
    CHECK(meta_ok && strncmp((const char *)b1 + 8 + lm, expect_tensors, lt) == 0);
    for (size_t i = 8 + lm + lt; meta_ok && i < 8 + hlen; i++) CHECK(b1[i] == ' ');
    int64_t nbt = 0;
    if (b1) memcpy(&nbt, b1 + 8 + hlen, 8);
    CHECK(nbt == 123456789012345);

    float fc[12], conv[18];
    int64_t v;
    CHECK_OK(pp_tensor_to_host(&dst.fc_w, fc, sizeof fc, &err), &err);
    CHECK_OK(pp_tensor_to_host(&dst.conv, conv, sizeof conv, &err), &err);
    CHECK_OK(pp_tensor_to_host(&dst.nbt, &v, sizeof v, &err), &err);
    CHECK(fc[0] == -1.0f && fc[11] == 1.75f && conv[17] == 289.0f / 7.0f && v == 123456789012345);

    pp_checkpoint_info info;
    CHECK_OK(pp_checkpoint_list(p1, &info, &err), &err);
    CHECK(info.n == 4 && info.n_meta == 7 && info.data_offset == 8 + hlen && info.checksums);
    if (info.n == 4) {
        CHECK(strcmp(info.entries[0].name, "bn1.num_batches_tracked") == 0 &&
              info.entries[0].dtype == PP_I64 && info.entries[0].ndim == 0);
        CHECK(strcmp(info.entries[2].name, "layer1.0.conv1.weight") == 0 &&
              info.entries[2].ndim == 4 && info.entries[2].shape[0] == 2 &&
              info.entries[2].shape[3] == 3 && info.entries[2].begin == 56 &&
              info.entries[2].end == 128);
    }
    const pp_checkpoint_entry *e = pp_checkpoint_info_find(&info, "fc.weight");
    CHECK(e && e->dtype == PP_F32 && e->ndim == 2 && e->shape[0] == 3 && e->shape[1] == 4);
    CHECK(pp_checkpoint_info_find(&info, "fc.bias") == NULL);
    CHECK(strcmp(pp_checkpoint_info_meta(&info, "format"), "pt") == 0);
    CHECK(pp_checkpoint_info_meta(&info, "nope") == NULL);
    pp_checkpoint_info_free(&info);

    /* without caller metadata (the checksums only); no temporary files left behind */
    CHECK_OK(pp_checkpoint_save(p2, src.list, 4, NULL, 0, &err), &err);
    free(b2);
    b2 = check_read_file(p2, &n2);
    const char *only_sums = "{\"__metadata__\":{\"checksum.__header__\":";
    CHECK(b2 && n2 > 9 && memcmp(b2 + 8, only_sums, strlen(only_sums)) == 0);
    CHECK(count_files_with(".tmp-") == 0);
    struct stat st;
    CHECK(stat(p2, &st) == 0 && (st.st_mode & 0777) == 0644);

    /* argument errors */
    pp_ckpt_tensor dup[2] = {src.list[0], {"fc.weight", &src.conv}};
    pp_status s = pp_checkpoint_save(p2, dup, 2, NULL, 0, &err);
    CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "'fc.weight' given twice"), "%s", err.msg);
    pp_ckpt_tensor reserved[1] = {{"__metadata__", &src.fc_w}};
    s = pp_checkpoint_save(p2, reserved, 1, NULL, 0, &err);
    CHECK(s == PP_ERR_INVALID);
    s = pp_checkpoint_save(p2, src.list, 4, (pp_checkpoint_meta[]){{"k", "1"}, {"k", "2"}}, 2,
                           &err);
    CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "'k' given twice"), "%s", err.msg);
    pp_ckpt_tensor badutf[1] = {{"fc.\xff", &src.fc_w}};
    s = pp_checkpoint_save(p2, badutf, 1, NULL, 0, &err);
    CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "UTF-8"), "%s", err.msg);
    size_t n3;
    unsigned char *b3 = check_read_file(p2, &n3);
    CHECK(b3 && n3 == n2 && memcmp(b2, b3, n2) == 0);
    free(b3);

    free(b1);
    free(b2);
    ckpt_set_free(&src);
    ckpt_set_free(&dst);
}

/* Writes a raw safetensors file: header text padded with spaces to a
 * multiple of 8 unless hlen_override, then data. */
static void write_raw(const char *path, const char *header, const void *data, size_t ndata,
                      uint64_t hlen_override)
{
    size_t hl = strlen(header), padded = (hl + 7) & ~(size_t)7;
    uint64_t hlen = hlen_override ? hlen_override : padded;
    unsigned char *buf = calloc(1, 8 + padded + ndata);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    if (ndata) memcpy(buf + 8 + padded, data, ndata);
    check_write_file(path, buf, 8 + padded + ndata);
    free(buf);
}

static void test_ckpt_refusals(void)
{
    char good[512], bad[512];
    tmp_path("good.safetensors", good, sizeof good);
    tmp_path("bad.safetensors", bad, sizeof bad);
    pp_error err;
    ckpt_set src;
    ckpt_set_init(&src, false);
    CHECK_OK(pp_checkpoint_save(good, src.list, 4, NULL, 0, &err), &err);

    /* mismatches between the file and the tensors expected */
    pp_tensor fc_bias = make_f32(cpu0, 1, (int64_t[]){3}, (float[]){9, 9, 9});
    pp_tensor fc_t = make_f32(cpu0, 2, (int64_t[]){4, 3}, (float[12]){0});
    pp_tensor nbt_f32 = make_f32(cpu1, 0, NULL, (float[]){0});
    pp_tensor nbt_vec;
    CHECK_OK(pp_tensor_zeros(&nbt_vec, cpu1, PP_I64, 1, (int64_t[]){1}, &err), &err);
    const struct {
        const char *what;
        pp_ckpt_tensor extra; /* replaces list[slot] (slot < 4) or is added (slot 4) */
        int slot;
        bool allow_extra;
        int count;
        const char *frag;
    } mism[] = {
        {"missing", {"fc.bias", &fc_bias}, 4, false, 5, "tensor 'fc.bias' missing"},
        {"shape", {"fc.weight", &fc_t}, 0, false, 4,
         "tensor 'fc.weight': shape [3, 4] expected [4, 3]"},
        {"dtype", {"bn1.num_batches_tracked", &nbt_f32}, 1, false, 4,
         "tensor 'bn1.num_batches_tracked': dtype I64 expected F32"},
        {"rank", {"bn1.num_batches_tracked", &nbt_vec}, 1, false, 4,
         "tensor 'bn1.num_batches_tracked': shape [] expected [1]"},
        {"extra", {NULL, NULL}, 3, false, 3, "unexpected tensor 'zz.empty'"},
    };
    for (size_t i = 0; i < sizeof mism / sizeof mism[0]; i++) {
        pp_ckpt_tensor list[5] = {src.list[0], src.list[1], src.list[2], src.list[3]};
        if (mism[i].extra.name) list[mism[i].slot] = mism[i].extra;
        pp_status s = pp_checkpoint_load(good, list, (size_t)mism[i].count, mism[i].allow_extra,
                                         &err);
        CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, mism[i].frag) &&
                      strncmp(err.msg, good, strlen(good)) == 0,
                  "%s: %s: %s", mism[i].what, pp_status_name(s), err.msg);
    }
    /* nothing written on refusal: fc.bias keeps its values */
    float fb[3];
    CHECK_OK(pp_tensor_to_host(&fc_bias, fb, sizeof fb, &err), &err);
    CHECK(fb[0] == 9 && fb[2] == 9);
    /* extra tensors are fine when allowed */
    CHECK_OK(pp_checkpoint_load(good, src.list, 3, true, &err), &err);

    /* malformed files */
    size_t ngood;
    unsigned char *gb = check_read_file(good, &ngood);
    const unsigned char zeros[16] = {0};
    const struct {
        const char *what;
        int kind;            /* 0: raw header + data, 1: good file cut by `cut`, 2: bytes */
        const char *header;
        size_t ndata;
        uint64_t hlen;
        size_t cut;
        const char *frag;
    } files[] = {
        {"too short", 2, "abc", 0, 0, 0, "file too short (3 bytes)"},
        {"absurd header", 0, "{}", 0, (uint64_t)1 << 40, 0, "header length 1099511627776 is absurd"},
        {"header past end", 0, "{}", 0, 4096, 0, "header length 4096 exceeds the file size"},
        {"truncated data", 1, NULL, 0, 0, 4, "beyond the 124 data bytes in the file (truncated?)"},
        {"truncated header", 1, NULL, 0, 0, 0, "exceeds the file size"},
        {"corrupt header", 0, "{\"a\": {\"dtype\": \"F32\", ", 0, 0, 0, "header is not valid JSON"},
        {"not an object", 0, "[1, 2]", 0, 0, 0, "does not start with '{'"},
        {"entry not object", 0, "{\"a\": 3}", 0, 0, 0, "tensor 'a': header entry is not an object"},
        {"unknown dtype", 0, "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
         0, 0, "tensor 'a': unsupported dtype 'F64'"},
        {"missing field", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, 0, 0,
         "tensor 'a': missing field 'data_offsets'"},
        {"extra field", 0,
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"foo\":1}}", 8, 0, 0,
         "tensor 'a': unexpected field 'foo'"},
        {"size mismatch", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
         0, 0, "tensor 'a': data_offsets [0, 4] span 4 bytes but F32 [2] needs 8"},
        {"overlap", 0,
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, 0, 0, "tensors 'a' and 'b' overlap"},
        {"gap", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0, 0,
         "data bytes [0, 4) belong to no tensor"},
        {"out of range", 0, "{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4,
         0, 0, "beyond the 4 data bytes"},
        {"trailing", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, 0,
         0, "4 trailing bytes"},
        {"negative", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0,
         0, "'shape' must hold integers"},
        {"float offset", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}",
         4, 0, 0, "'data_offsets' must hold integers"},
        {"rank 5", 0,
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, 0, 0,
         "rank 5 exceeds 4"},
        {"duplicate", 0,
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, 0, 0, "duplicate"},
        {"bad metadata", 0, "{\"__metadata__\":{\"step\":7}}", 0, 0, 0,
         "metadata 'step' is not a string"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (files[i].kind == 0)
            write_raw(bad, files[i].header, zeros, files[i].ndata, files[i].hlen);
        else if (files[i].kind == 1)
            check_write_file(bad, gb, files[i].cut ? ngood - files[i].cut : 20);
        else
            check_write_file(bad, files[i].header, strlen(files[i].header));
        pp_checkpoint_info info;
        pp_status s = pp_checkpoint_list(bad, &info, &err);
        CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, files[i].frag) &&
                      strncmp(err.msg, bad, strlen(bad)) == 0 && info.n == 0,
                  "%s: %s: %s", files[i].what, pp_status_name(s), err.msg);
        if (files[i].kind == 1) {
            s = pp_checkpoint_load(bad, src.list, 4, false, &err);
            CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, files[i].frag), "%s (load): %s",
                      files[i].what, err.msg);
        }
    }
    char missing[512];
    pp_checkpoint_info info;
    pp_status s = pp_checkpoint_list(tmp_path("none.safetensors", missing, sizeof missing), &info,
                                      &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "none.safetensors: cannot open"), "%s", err.msg);

    free(gb);
    pp_tensor_free(&fc_bias);
    pp_tensor_free(&fc_t);
    pp_tensor_free(&nbt_f32);
    pp_tensor_free(&nbt_vec);
    ckpt_set_free(&src);
}

static void test_ckpt_atomic(void)
{
    char path[512], dirpath[512], nodir[512];
    tmp_path("atomic.safetensors", path, sizeof path);
    tmp_path("adir", dirpath, sizeof dirpath);
    tmp_path("no/such/dir/x.safetensors", nodir, sizeof nodir);
    pp_error err;
    ckpt_set src;
    ckpt_set_init(&src, false);
    CHECK_OK(pp_checkpoint_save(path, src.list, 2, NULL, 0, &err), &err);
    size_t n0;
    unsigned char *before = check_read_file(path, &n0);

    /* 1. the directory does not exist */
    pp_status s = pp_checkpoint_save(nodir, src.list, 4, NULL, 0, &err);
    CHECK_MSG(s == PP_ERR_IO && strstr(err.msg, "cannot create a temporary file"), "%s", err.msg);

    /* 2. the write fails half-way (file size limit): old file intact */
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {64, old.rlim_max};
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    s = pp_checkpoint_save(path, src.list, 4, NULL, 0, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    CHECK_MSG(s == PP_ERR_IO, "size-limited write: %s: %s", pp_status_name(s), err.msg);
    size_t n1;
    unsigned char *after = check_read_file(path, &n1);
    CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0);
    free(after);

    /* 3. a folder where the file goes: refused at once, nothing written */
    CHECK(mkdir(dirpath, 0755) == 0);
    char inner[600];
    snprintf(inner, sizeof inner, "%s/keep", dirpath);
    check_write_file(inner, "x", 1);
    s = pp_checkpoint_save(dirpath, src.list, 4, NULL, 0, &err);
    CHECK_MSG(s == PP_ERR_IO && strstr(err.msg, "a folder, not a file"), "%s", err.msg);
    CHECK(count_files_with(".tmp-") == 0);
    unlink(inner);
    rmdir(dirpath);

    /* 4. a successful overwrite replaces the content */
    CHECK_OK(pp_checkpoint_save(path, src.list, 4, NULL, 0, &err), &err);
    pp_checkpoint_info info;
    CHECK_OK(pp_checkpoint_list(path, &info, &err), &err);
    CHECK(info.n == 4);
    pp_checkpoint_info_free(&info);
    CHECK(count_files_with(".tmp-") == 0);
    free(before);
    ckpt_set_free(&src);
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "test_io")) return 1;
    pp_error err;
    CHECK_OK(pp_registry_new(&reg, &err), &err);
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu0, &err), &err);
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 1}, &cpu1, &err), &err);

    test_sgd_steps();
    test_sgd_refusals();
    test_sgd_resume();
    test_ckpt_roundtrip();
    test_ckpt_refusals();
    test_ckpt_atomic();

    pp_registry_free(reg);
    check_rmtree(tmpdir);
    return check_summary("test_io");
}
