/*
 * test_data.c - the data sources: IDX (plain and gzip-compressed, as Debian
 * ships Fashion-MNIST), CIFAR-10 batches and synthetic data; wrap-around,
 * shuffling, normalisation and every refusal. Files are written by the test
 * itself into a fresh temporary directory.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/data.h"
#include "tests/check.h"

static char tmpdir[256];

static const char *tmp_path(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}

/* Writes an IDX file of unsigned bytes: header for dims, then data. */
static void write_idx(const char *path, int nd, const uint32_t *dims, const uint8_t *data,
                      size_t ndata, uint8_t type, int drop, int extra)
{
    size_t hl = 4 + 4 * (size_t)nd, n = hl + ndata - (size_t)drop + (size_t)extra;
    uint8_t *buf = calloc(1, n);
    buf[2] = type;
    buf[3] = (uint8_t)nd;
    for (int i = 0; i < nd; i++) {
        buf[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        buf[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        buf[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        buf[7 + 4 * i] = (uint8_t)dims[i];
    }
    memcpy(buf + hl, data, ndata - (size_t)drop);
    check_write_file(path, buf, n);
    free(buf);
}

static uint8_t pix(int64_t i, int64_t k) { return (uint8_t)((i * 37 + k * 11) % 256); }

static void test_idx(void)
{
    pp_error err;
    static pp_data_config cfg;
    char ip[512], lp[512];
    tmp_path("img.idx", ip, sizeof ip);
    tmp_path("lab.idx", lp, sizeof lp);
    /* (N=5, H=2, W=3), labels 2 0 1 2 1 */
    uint8_t img[5 * 6], lab[5] = {2, 0, 1, 2, 1};
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 6; k++) img[i * 6 + k] = pix(i, k);
    write_idx(ip, 3, (uint32_t[]){5, 2, 3}, img, sizeof img, 0x08, 0, 0);
    write_idx(lp, 1, (uint32_t[]){5}, lab, 5, 0x08, 0, 0);
    pp_data_config_init(&cfg);
    cfg.format = PP_DATA_IDX;
    snprintf(cfg.images, sizeof cfg.images, "%s", ip);
    snprintf(cfg.labels, sizeof cfg.labels, "%s", lp);
    cfg.classes = 0;
    pp_data *d;
    CHECK_OK(pp_data_open(&cfg, &d, &err), &err);
    int c, h, w, classes;
    pp_data_shape(d, &c, &h, &w, &classes);
    CHECK(c == 1 && h == 2 && w == 3 && classes == 3 && pp_data_size(d) == 5);
    /* wrap-around: batch 3, steps 0..2 read samples 0 1 2 | 3 4 0 | 1 2 3 */
    static const int want[3][3] = {{0, 1, 2}, {3, 4, 0}, {1, 2, 3}};
    for (int step = 0; step < 3; step++) {
        float x[3 * 6];
        int32_t y[3];
        CHECK_OK(pp_data_batch(d, step, 3, x, y, &err), &err);
        for (int j = 0; j < 3; j++) {
            int i = want[step][j];
            CHECK(y[j] == lab[i]);
            for (int k = 0; k < 6; k++)
                CHECK_MSG(x[j * 6 + k] == (float)pix(i, k) / 255.0f, "step %d j %d k %d", step,
                          j, k);
        }
    }
    /* a much later step still follows the rule: (1000*3 + j) mod 5 */
    float x[3 * 6];
    int32_t y[3];
    CHECK_OK(pp_data_batch(d, 1000, 3, x, y, &err), &err);
    CHECK(y[0] == lab[0] && y[1] == lab[1] && y[2] == lab[2]);
    CHECK(pp_data_batch(d, -1, 3, x, y, &err) == PP_ERR_INVALID);
    CHECK(pp_data_batch(d, 0, 0, x, y, &err) == PP_ERR_INVALID);
    pp_data_close(d);

    /* (N=4, C=2, H=2, W=2) with per-channel mean/std */
    uint8_t img4[4 * 8], lab4[4] = {3, 3, 0, 1};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 8; k++) img4[i * 8 + k] = pix(i, k);
    write_idx(ip, 4, (uint32_t[]){4, 2, 2, 2}, img4, sizeof img4, 0x08, 0, 0);
    write_idx(lp, 1, (uint32_t[]){4}, lab4, 4, 0x08, 0, 0);
    cfg.n_mean = 2;
    cfg.mean[0] = 0.5f;
    cfg.mean[1] = 0.25f;
    cfg.n_std = 2;
    cfg.std[0] = 0.5f;
    cfg.std[1] = 2.0f;
    cfg.classes = 10;
    CHECK_OK(pp_data_open(&cfg, &d, &err), &err);
    pp_data_shape(d, &c, &h, &w, &classes);
    CHECK(c == 2 && h == 2 && w == 2 && classes == 10);
    float x4[4 * 8];
    int32_t y4[4];
    CHECK_OK(pp_data_batch(d, 0, 4, x4, y4, &err), &err);
    for (int i = 0; i < 4; i++) {
        CHECK(y4[i] == lab4[i]);
        for (int k = 0; k < 8; k++) {
            int ch = k / 4;
            float want_v = ((float)pix(i, k) / 255.0f - cfg.mean[ch]) / cfg.std[ch];
            CHECK_MSG(x4[i * 8 + k] == want_v, "i %d k %d: %g vs %g", i, k, x4[i * 8 + k], want_v);
        }
    }
    /* sample 2, pixel 0: (0x4a/255 - 0.5) / 0.5 */
    CHECK(fabsf(x4[2 * 8] - ((74.0f / 255.0f) - 0.5f) / 0.5f) < 1e-7f);
    pp_data_close(d);
    /* one value broadcast over every channel */
    cfg.n_mean = 1;
    cfg.n_std = 1;
    cfg.mean[0] = 0.1f;
    cfg.std[0] = 0.2f;
    CHECK_OK(pp_data_open(&cfg, &d, &err), &err);
    CHECK_OK(pp_data_batch(d, 0, 4, x4, y4, &err), &err);
    CHECK(x4[7] == ((float)pix(0, 7) / 255.0f - 0.1f) / 0.2f);
    pp_data_close(d);
    cfg.n_mean = cfg.n_std = 0;

    /* malformed files and settings (labels.idx holds 3 3 0 1) */
    uint8_t lab2[4] = {0, 1, 0, 1};
    const struct {
        const char *what;
        int which;           /* 0: image file is bad, 1: label file is bad, 2: settings */
        int nd;
        uint32_t dims[4];
        uint8_t type;
        size_t ndata;
        int drop, extra;
        int classes, n_mean, n_std;
        float std0;
        const char *frag;
    } bad[] = {
        {"type", 0, 3, {4, 2, 4}, 0x0d, 32, 0, 0, 0, 0, 0, 1, "IDX element type 0x0d"},
        {"dims", 0, 2, {4, 8}, 0x08, 32, 0, 0, 0, 0, 0, 1, "has 2 dimensions, expected 3"},
        {"truncated", 0, 4, {4, 2, 2, 2}, 0x08, 32, 1, 0, 0, 0, 0, 1, "(truncated)"},
        {"trailing", 0, 4, {4, 2, 2, 2}, 0x08, 32, 0, 3, 0, 0, 0, 1, "(trailing bytes)"},
        {"zero dim", 0, 4, {4, 2, 0, 2}, 0x08, 0, 0, 0, 0, 0, 0, 1, "dimension 2 is 0"},
        {"label dims", 1, 2, {2, 2}, 0x08, 4, 0, 0, 0, 0, 0, 1, "label file has 2 dimensions"},
        {"label count", 1, 1, {2}, 0x08, 2, 0, 0, 0, 0, 0, 1, "2 labels for the 4 images"},
        {"label range", 2, 0, {0}, 0, 0, 0, 0, 3, 0, 0, 1, "label 3 of sample 0 is not below the 3"},
        {"mean count", 2, 0, {0}, 0, 0, 0, 0, 0, 3, 0, 1, "3 mean values for 2-channel"},
        {"std zero", 2, 0, {0}, 0, 0, 0, 0, 0, 0, 1, 0, "std[0] = 0 must be positive"},
    };
    char bp[512];
    tmp_path("bad.idx", bp, sizeof bp);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        static pp_data_config bc;
        bc = cfg;
        const char *file = bp; /* the file the message must name */
        if (bad[i].which == 0) {
            snprintf(bc.images, sizeof bc.images, "%s", bp);
            write_idx(bp, bad[i].nd, bad[i].dims, img4, bad[i].ndata, bad[i].type, bad[i].drop,
                      bad[i].extra);
        } else if (bad[i].which == 1) {
            snprintf(bc.labels, sizeof bc.labels, "%s", bp);
            write_idx(bp, bad[i].nd, bad[i].dims, lab2, bad[i].ndata, bad[i].type, 0, 0);
        } else {
            file = bad[i].classes ? lp : "data: ";
        }
        bc.classes = bad[i].classes;
        bc.n_mean = bad[i].n_mean;
        bc.n_std = bad[i].n_std;
        bc.std[0] = bad[i].std0;
        pp_data *bd = (pp_data *)&bc;
        pp_status s = pp_data_open(&bc, &bd, &err);
        CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, bad[i].frag) &&
                      strncmp(err.msg, file, strlen(file)) == 0 && bd == NULL,
                  "%s: %s: %s", bad[i].what, pp_status_name(s), err.msg);
    }
    /* not IDX at all */
    check_write_file(bp, "\x01\x02\x08\x03" "abcd", 8);
    static pp_data_config bc;
    bc = cfg;
    snprintf(bc.images, sizeof bc.images, "%s", bp);
    pp_status s = pp_data_open(&bc, &d, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "bad.idx: not an IDX file"), "%s", err.msg);
    tmp_path("absent.idx", bc.images, sizeof bc.images);
    s = pp_data_open(&bc, &d, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "absent.idx: cannot open"), "%s", err.msg);
}

/* gzip-compressed IDX (as Debian ships Fashion-MNIST): the same batches as the
 * plain files; truncated or corrupt streams, a count mismatch and a label out
 * of range are PP_ERR_INPUT naming the file(s). */
static void gzip_file(const char *src, const char *dst, size_t keep)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s'", src, dst);
    CHECK(system(cmd) == 0);
    if (keep) CHECK(truncate(dst, (off_t)keep) == 0);
}

static void test_idx_gzip(void)
{
    pp_error err;
    static pp_data_config plain, gz;
    char ip[512], lp[512], igz[520], lgz[520], cut[520], lab3[512];
    tmp_path("gz-img.idx", ip, sizeof ip);
    tmp_path("gz-lab.idx", lp, sizeof lp);
    snprintf(igz, sizeof igz, "%s.gz", ip);
    snprintf(lgz, sizeof lgz, "%s.gz", lp);
    enum { N = 300 };
    static uint8_t img[N * 28 * 28], lab[N];
    for (int i = 0; i < N; i++) {
        lab[i] = (uint8_t)(i % 10);
        for (int k = 0; k < 28 * 28; k++) img[i * 784 + k] = pix(i, k);
    }
    write_idx(ip, 3, (uint32_t[]){N, 28, 28}, img, sizeof img, 0x08, 0, 0);
    write_idx(lp, 1, (uint32_t[]){N}, lab, N, 0x08, 0, 0);
    gzip_file(ip, igz, 0);
    gzip_file(lp, lgz, 0);
    pp_data_config_init(&plain);
    plain.format = PP_DATA_IDX;
    plain.shuffle = true;
    snprintf(plain.images, sizeof plain.images, "%s", ip);
    snprintf(plain.labels, sizeof plain.labels, "%s", lp);
    gz = plain;
    snprintf(gz.images, sizeof gz.images, "%s", igz);
    snprintf(gz.labels, sizeof gz.labels, "%s", lgz);
    pp_data *a = NULL, *b = NULL;
    CHECK_OK(pp_data_open(&plain, &a, &err), &err);
    CHECK_OK(pp_data_open(&gz, &b, &err), &err);
    if (a && b) {
        CHECK(pp_data_size(b) == N);
        static float xa[64 * 784], xb[64 * 784];
        int32_t ya[64], yb[64];
        for (int step = 0; step < 7; step++) {
            CHECK_OK(pp_data_batch(a, step, 64, xa, ya, &err), &err);
            CHECK_OK(pp_data_batch(b, step, 64, xb, yb, &err), &err);
            CHECK_MSG(memcmp(xa, xb, sizeof xa) == 0 && memcmp(ya, yb, sizeof ya) == 0,
                      "gzip batch %d differs", step);
        }
    }
    pp_data_close(a);
    pp_data_close(b);

    /* a truncated stream */
    tmp_path("cut-img.idx.gz", cut, sizeof cut);
    struct stat st;
    CHECK(stat(igz, &st) == 0);
    gzip_file(ip, cut, (size_t)st.st_size / 2);
    pp_data_config bad = gz;
    snprintf(bad.images, sizeof bad.images, "%s", cut);
    pp_status s = pp_data_open(&bad, &b, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "cut-img.idx.gz") &&
                  strstr(err.msg, "truncated"),
              "truncated gzip: %s", err.msg);
    /* a gzip stream with a corrupt body */
    gzip_file(ip, cut, 0);
    FILE *f = fopen(cut, "r+b");
    CHECK(f && fseek(f, 40, SEEK_SET) == 0 && fwrite("\xff\xff\xff\xff", 1, 4, f) == 4);
    if (f) fclose(f);
    s = pp_data_open(&bad, &b, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "cut-img.idx.gz"), "corrupt gzip: %s", err.msg);
    /* labels that do not match the images in count, named both */
    tmp_path("gz-lab3.idx", lab3, sizeof lab3);
    write_idx(lab3, 1, (uint32_t[]){3}, lab, 3, 0x08, 0, 0);
    bad = gz;
    snprintf(bad.labels, sizeof bad.labels, "%s", lab3);
    s = pp_data_open(&bad, &b, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "gz-lab3.idx") && strstr(err.msg, "gz-img.idx"),
              "count mismatch: %s", err.msg);
    /* a label outside num_classes */
    bad = gz;
    bad.classes = 5;
    s = pp_data_open(&bad, &b, &err);
    CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "gz-lab.idx.gz") && strstr(err.msg, "label 5"),
              "label range: %s", err.msg);
}

static void test_cifar(void)
{
    pp_error err;
    static pp_data_config cfg;
    pp_data_config_init(&cfg);
    cfg.format = PP_DATA_CIFAR10;
    cfg.classes = 0;
    enum { REC = 3073 };
    /* two files: 3 records and 2 records; sample i has label (i*3)%10 */
    static uint8_t f[5 * REC];
    for (int i = 0; i < 5; i++) {
        f[i * REC] = (uint8_t)((i * 3) % 10);
        for (int k = 0; k < 3072; k++) f[i * REC + 1 + k] = pix(i, k);
    }
    cfg.n_files = 2;
    tmp_path("data_batch_1.bin", cfg.files[0], sizeof cfg.files[0]);
    tmp_path("data_batch_2.bin", cfg.files[1], sizeof cfg.files[1]);
    check_write_file(cfg.files[0], f, 3 * REC);
    check_write_file(cfg.files[1], f + 3 * REC, 2 * REC);
    pp_data *d;
    CHECK_OK(pp_data_open(&cfg, &d, &err), &err);
    int c, h, w, classes;
    pp_data_shape(d, &c, &h, &w, &classes);
    CHECK(c == 3 && h == 32 && w == 32 && classes == 10 && pp_data_size(d) == 5);
    static float x[4 * 3072];
    int32_t y[4];
    CHECK_OK(pp_data_batch(d, 1, 4, x, y, &err), &err); /* samples 4 0 1 2 */
    static const int want[4] = {4, 0, 1, 2};
    for (int j = 0; j < 4; j++) {
        CHECK(y[j] == (want[j] * 3) % 10);
        for (int k = 0; k < 3072; k += 101)
            CHECK(x[j * 3072 + k] == (float)pix(want[j], k) / 255.0f);
    }
    CHECK(x[3 * 3072 + 3071] == (float)pix(2, 3071) / 255.0f);
    pp_data_close(d);

    /* malformed */
    const struct {
        const char *what;
        size_t size;
        uint8_t label;
        const char *frag;
    } bad[] = {
        {"partial record", REC + 100, 0, "not a positive multiple of the 3073-byte"},
        {"empty", 0, 0, "size 0 is not a positive multiple"},
        {"label", 2 * REC, 10, "record 1 has label 10"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t saved = f[REC];
        f[REC] = bad[i].label ? bad[i].label : f[REC];
        check_write_file(cfg.files[1], f, bad[i].size);
        f[REC] = saved;
        pp_status s = pp_data_open(&cfg, &d, &err);
        CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, bad[i].frag) &&
                      strstr(err.msg, "data_batch_2.bin"),
                  "%s: %s", bad[i].what, err.msg);
    }
    cfg.n_files = 0;
    CHECK(pp_data_open(&cfg, &d, &err) == PP_ERR_INPUT);
    cfg.n_files = 1;
    cfg.classes = 100;
    CHECK(pp_data_open(&cfg, &d, &err) == PP_ERR_INPUT);
}

static void test_synthetic(void)
{
    pp_error err;
    static pp_data_config cfg;
    pp_data_config_init(&cfg);
    cfg.channels = 3;
    cfg.height = 8;
    cfg.width = 8;
    cfg.classes = 10;
    cfg.samples = 1000;
    cfg.seed = 42;
    enum { S = 3 * 8 * 8, B = 16 };
    pp_data *d1, *d2, *d3;
    CHECK_OK(pp_data_open(&cfg, &d1, &err), &err);
    CHECK_OK(pp_data_open(&cfg, &d2, &err), &err);
    cfg.seed = 43;
    CHECK_OK(pp_data_open(&cfg, &d3, &err), &err);
    CHECK(pp_data_size(d1) == 1000);
    static float x1[B * S], x2[B * S], x3[B * S], xs[S];
    int32_t y1[B], y2[B], y3[B], ys[1];
    /* same seed: same batch, whatever was read before */
    CHECK_OK(pp_data_batch(d2, 9, B, x2, y2, &err), &err);
    CHECK_OK(pp_data_batch(d1, 5, B, x1, y1, &err), &err);
    CHECK_OK(pp_data_batch(d2, 5, B, x2, y2, &err), &err);
    CHECK(memcmp(x1, x2, sizeof x1) == 0 && memcmp(y1, y2, sizeof y1) == 0);
    /* other seed: other data */
    CHECK_OK(pp_data_batch(d3, 5, B, x3, y3, &err), &err);
    CHECK(memcmp(x1, x3, sizeof x1) != 0 && memcmp(y1, y3, sizeof y1) != 0);
    /* a sample depends only on its index: batch 5 of 16 holds samples 80..95 */
    for (int j = 0; j < B; j += 5) {
        CHECK_OK(pp_data_batch(d1, 80 + j, 1, xs, ys, &err), &err);
        CHECK(ys[0] == y1[j] && memcmp(xs, x1 + j * S, sizeof xs) == 0);
    }
    /* pixels are u8/255 in [0, 1]; labels in range */
    bool ok = true;
    for (int i = 0; i < B * S; i++) ok = ok && x1[i] >= 0 && x1[i] <= 1;
    for (int j = 0; j < B; j++) ok = ok && y1[j] >= 0 && y1[j] < 10;
    CHECK(ok);

    /* learnable: nearest class centroid from 500 samples classifies the
     * next 500 well above chance (10%) */
    static double cent[10][S];
    int count[10] = {0};
    memset(cent, 0, sizeof cent);
    static float xb[500 * S];
    int32_t yb[500];
    CHECK_OK(pp_data_batch(d1, 0, 500, xb, yb, &err), &err);
    for (int i = 0; i < 500; i++) {
        count[yb[i]]++;
        for (int k = 0; k < S; k++) cent[yb[i]][k] += xb[i * S + k];
    }
    int classes_seen = 0;
    for (int c = 0; c < 10; c++) {
        classes_seen += count[c] > 20;
        for (int k = 0; k < S; k++) cent[c][k] /= count[c] ? count[c] : 1;
    }
    CHECK(classes_seen == 10);
    CHECK_OK(pp_data_batch(d1, 1, 500, xb, yb, &err), &err);
    int correct = 0;
    for (int i = 0; i < 500; i++) {
        int best = -1;
        double best_d = 1e30;
        for (int c = 0; c < 10; c++) {
            double dist = 0;
            for (int k = 0; k < S; k++) {
                double t = xb[i * S + k] - cent[c][k];
                dist += t * t;
            }
            if (dist < best_d) best_d = dist, best = c;
        }
        correct += best == yb[i];
    }
    CHECK_MSG(correct >= 475, "nearest-centroid accuracy %d/500", correct);
    pp_data_close(d1);
    pp_data_close(d2);
    pp_data_close(d3);

    cfg.height = 0;
    CHECK(pp_data_open(&cfg, &d1, &err) == PP_ERR_INPUT && strstr(err.msg, "3x0x8"));
    cfg.height = 8;
    cfg.classes = 0;
    CHECK(pp_data_open(&cfg, &d1, &err) == PP_ERR_INPUT);
    cfg.classes = 10;
    cfg.format = (pp_data_format)7;
    CHECK(pp_data_open(&cfg, &d1, &err) == PP_ERR_INPUT);
}

static void test_shuffle(void)
{
    pp_error err;
    static pp_data_config cfg;
    char ip[512], lp[512];
    tmp_path("shuf-img.idx", ip, sizeof ip);
    tmp_path("shuf-lab.idx", lp, sizeof lp);
    enum { N = 50 };
    uint8_t img[N * 4], lab[N];
    for (int i = 0; i < N; i++) {
        lab[i] = (uint8_t)i;
        for (int k = 0; k < 4; k++) img[i * 4 + k] = pix(i, k);
    }
    write_idx(ip, 3, (uint32_t[]){N, 2, 2}, img, sizeof img, 0x08, 0, 0);
    write_idx(lp, 1, (uint32_t[]){N}, lab, N, 0x08, 0, 0);
    pp_data_config_init(&cfg);
    cfg.format = PP_DATA_IDX;
    cfg.classes = 0;
    snprintf(cfg.images, sizeof cfg.images, "%s", ip);
    snprintf(cfg.labels, sizeof cfg.labels, "%s", lp);
    cfg.shuffle = true;
    cfg.seed = 7;
    pp_data *a, *b, *c;
    CHECK_OK(pp_data_open(&cfg, &a, &err), &err);
    CHECK_OK(pp_data_open(&cfg, &b, &err), &err);
    cfg.seed = 8;
    CHECK_OK(pp_data_open(&cfg, &c, &err), &err);
    /* batch 20 over an epoch of 50: steps 0..9 cover 4 epochs, batches straddle epochs */
    int32_t seq_a[200], seq_c[200];
    for (int step = 0; step < 10; step++) {
        float x[20 * 4];
        CHECK_OK(pp_data_batch(a, step, 20, x, seq_a + step * 20, &err), &err);
        CHECK_OK(pp_data_batch(c, step, 20, x, seq_c + step * 20, &err), &err);
        for (int j = 0; j < 20; j++) {
            int i = seq_a[step * 20 + j];
            CHECK(i >= 0 && i < N && x[j * 4] >= 0);
        }
    }
    for (int e = 0; e < 4; e++) {
        bool seen[N] = {false};
        int distinct = 0, fixed = 0;
        for (int r = 0; r < N; r++) {
            int i = seq_a[e * N + r];
            distinct += !seen[i];
            seen[i] = true;
            fixed += i == r;
            CHECK(pp_data_sample_index(a, e * N + r) == i);
        }
        CHECK_MSG(distinct == N, "epoch %d is not a permutation", e);
        CHECK_MSG(fixed < N / 2, "epoch %d barely shuffled (%d fixed points)", e, fixed);
    }
    CHECK(memcmp(seq_a, seq_a + N, N * sizeof *seq_a) != 0);    /* epochs differ */
    CHECK(memcmp(seq_a, seq_c, sizeof seq_a) != 0);              /* seeds differ */
    /* same seed, reading in another order, gives the same batches */
    for (int step = 9; step >= 0; step -= 3) {
        float x[20 * 4];
        int32_t y[20];
        CHECK_OK(pp_data_batch(b, step, 20, x, y, &err), &err);
        CHECK(memcmp(y, seq_a + step * 20, sizeof y) == 0);
        for (int j = 0; j < 20; j++) CHECK(x[j * 4 + 1] == (float)pix(y[j], 1) / 255.0f);
    }
    pp_data_close(a);
    pp_data_close(b);
    pp_data_close(c);
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "test_data")) return 1;
    test_idx();
    test_idx_gzip();
    test_cifar();
    test_synthetic();
    test_shuffle();
    check_rmtree(tmpdir);
    return check_summary("test_data");
}
