/*
 * test_tokens.c - token streams (runtime/io/tokens.h) through the data API
 * (runtime/io/data.h): llm.c's .bin (256-int header), nanoGPT's headerless
 * .bin and text as bytes give the windows the files hold (inputs, and the
 * next tokens as targets), the epoch's window count, shuffled windows as a
 * pure function of (seed, epoch, sample index); and every bad file is
 * refused with its exact message: an id at or above the vocabulary (named
 * by file and position), fewer tokens than one window, a truncated header, a
 * count the file does not hold, another llm.c format, an unknown version, an
 * odd byte count, a missing file. A text through a tokenizer gives its ids,
 * kept in 2 bytes each where the vocabulary fits (ids up to 300) and in 4
 * where it does not (an id of 70000).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/io/bpe.h"
#include "runtime/io/data.h"
#include "runtime/io/tokens.h"
#include "tests/check.h"
#include "tests/io/bpe_files.h"

static char tmpdir[256];

/* An llm.c file: the header (magic, version, count as given) and tokens. */
static void write_llmc(const char *path, int32_t magic, int32_t version, int32_t count,
                       const uint16_t *tokens, size_t n)
{
    int32_t header[PP_TOKENS_HEADER_INTS] = {magic, version, count};
    size_t bytes = sizeof header + n * sizeof *tokens;
    uint8_t *buf = malloc(bytes);
    memcpy(buf, header, sizeof header);
    memcpy(buf + sizeof header, tokens, n * sizeof *tokens);
    check_write_file(path, buf, bytes);
    free(buf);
}

static pp_status open_source(const char *path, pp_data_format format, int vocab, int block,
                             bool shuffle, pp_data **d, pp_error *err)
{
    pp_data_config cfg;
    pp_data_config_init(&cfg);
    cfg.format = format;
    cfg.classes = vocab;
    cfg.block_size = block;
    cfg.shuffle = shuffle;
    cfg.seed = 7;
    snprintf(cfg.file, sizeof cfg.file, "%s", path);
    return pp_data_open(&cfg, d, err);
}

/* Every format serves the windows of its file. */
static void test_formats(void)
{
    enum { N = 103, T = 8 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)((i * 37 + 11) % 300);
    char llmc[320], nano[320], text[320];
    snprintf(llmc, sizeof llmc, "%s/train.bin", tmpdir);
    snprintf(nano, sizeof nano, "%s/nano.bin", tmpdir);
    snprintf(text, sizeof text, "%s/corpus.txt", tmpdir);
    write_llmc(llmc, PP_TOKENS_MAGIC, PP_TOKENS_VERSION, N, tok, N);
    check_write_file(nano, tok, sizeof tok);
    uint8_t bytes[N];
    for (int i = 0; i < N; i++) bytes[i] = (uint8_t)tok[i];
    check_write_file(text, bytes, N);
    const struct {
        const char *path;
        pp_data_format format;
        const char *what;
    } cases[] = {{llmc, PP_DATA_TOKENS, "llm.c .bin"},
                 {nano, PP_DATA_TOKENS, "nanoGPT .bin"},
                 {text, PP_DATA_TEXT, "text"}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        pp_data *d;
        pp_error err;
        const bool is_text = cases[ci].format == PP_DATA_TEXT;
        CHECK_OK(open_source(cases[ci].path, cases[ci].format, 300, T, false, &d, &err), &err);
        if (!d) continue;
        int c, h, w, classes;
        pp_data_shape(d, &c, &h, &w, &classes);
        CHECK(c == 1 && h == 1 && w == T && classes == 300);
        CHECK_MSG(pp_data_size(d) == (N - 1) / T, "%s: %lld windows", cases[ci].what,
                  (long long)pp_data_size(d));
        CHECK(pp_data_targets_per_sample(d) == T);
        /* three windows from the second epoch's sample 4 on: wrapping around */
        int32_t x[3 * T], y[3 * T];
        const int64_t epoch_len = pp_data_size(d);
        CHECK_OK(pp_data_read(d, epoch_len + 4, 3, x, y, &err), &err);
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < T; j++) {
                const int at = (4 + k) * T + j;
                const int want_x = is_text ? bytes[at] : tok[at];
                const int want_y = is_text ? bytes[at + 1] : tok[at + 1];
                CHECK_MSG(x[k * T + j] == want_x && y[k * T + j] == want_y,
                          "%s: window %d position %d is (%d, %d), expected (%d, %d)",
                          cases[ci].what, 4 + k, j, x[k * T + j], y[k * T + j], want_x, want_y);
            }
        pp_data_close(d);
    }
    /* shuffled: windows anywhere, a pure function of (seed, epoch, index) */
    pp_data *d, *e;
    pp_error err;
    CHECK_OK(open_source(llmc, PP_DATA_TOKENS, 300, T, true, &d, &err), &err);
    CHECK_OK(open_source(llmc, PP_DATA_TOKENS, 300, T, true, &e, &err), &err);
    if (!d || !e) return;
    const int64_t len = pp_data_size(d);
    int32_t a[4 * T], ay[4 * T], b[T], by[T];
    CHECK_OK(pp_data_read(d, len + 2, 4, a, ay, &err), &err);
    int starts_differ = 0;
    for (int k = 3; k >= 0; k--) { /* one at a time, backwards: the same windows */
        CHECK_OK(pp_data_read(e, len + 2 + k, 1, b, by, &err), &err);
        CHECK(memcmp(a + k * T, b, sizeof b) == 0 && memcmp(ay + k * T, by, sizeof by) == 0);
        for (int j = 0; j < T; j++) CHECK(ay[k * T + j] >= 0 && ay[k * T + j] < 300);
        /* consecutive tokens of the stream: the target is the next input */
        for (int j = 0; j + 1 < T; j++) CHECK(a[k * T + j + 1] == ay[k * T + j]);
        starts_differ += a[k * T] != tok[(2 + k) * T];
    }
    CHECK_MSG(starts_differ > 0, "shuffled windows start where the sequential ones do");
    /* another epoch draws other windows */
    CHECK_OK(pp_data_read(e, 2 * len + 2, 1, b, by, &err), &err);
    int same = 0;
    for (int k = 0; k < 4; k++) same += memcmp(a + k * T, b, sizeof b) == 0;
    CHECK(same < 4);
    pp_data_close(d);
    pp_data_close(e);
}

/* Each bad file: PP_ERR_INPUT and its message. */
static void test_refusals(void)
{
    enum { N = 40, T = 8 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(i % 50);
    char path[320], msg[512];
    snprintf(path, sizeof path, "%s/bad.bin", tmpdir);
    const struct {
        int kind; /* 0 llm.c, 1 headerless, 2 text, 3 a truncated header, 4 missing */
        int32_t magic, version, count;
        int n_tokens, vocab, block, bad_at;
        const char *message; /* after "PATH: " */
    } cases[] = {
        {0, PP_TOKENS_MAGIC, 1, N, N, 30, T, -1,
         "token 30 at position 30 is not below the vocabulary size 30"},
        {1, 0, 0, 0, N, 50, T, 17, "token 977 at position 17 is not below the vocabulary size 50"},
        {0, PP_TOKENS_MAGIC, 1, 8, 8, 50, T, -1,
         "8 tokens are fewer than one window of block_size + 1 = 9"},
        {2, 0, 0, 0, 9, 256, 9, -1, "9 tokens are fewer than one window of block_size + 1 = 10"},
        {3, PP_TOKENS_MAGIC, 1, N, 0, 50, T, -1, "truncated llm.c header (100 of its 1024 bytes)"},
        {0, PP_TOKENS_MAGIC, 1, N + 5, N, 50, T, -1,
         "the header counts 45 tokens but the file holds 80 bytes of tokens (truncated)"},
        {0, PP_TOKENS_MAGIC, 1, N - 1, N, 50, T, -1,
         "the header counts 39 tokens but the file holds 80 bytes of tokens (trailing bytes)"},
        {0, 20240801, 7, N, N, 50, T, -1,
         "an llm.c token file of another model (magic 20240801, version 7: uint32 tokens); "
         "GPT-2's (magic 20240520, version 1) are read"},
        {0, PP_TOKENS_MAGIC, 2, N, N, 50, T, -1,
         "llm.c token file version 2 (version 1, uint16 tokens, is read)"},
        {1, 0, 0, 0, -1, 50, T, -1, "81 bytes is not a whole number of uint16 tokens"},
        /* empty files (nothing to map) */
        {1, 0, 0, 0, 0, 50, T, -1, "0 tokens are fewer than one window of block_size + 1 = 9"},
        {2, 0, 0, 0, 0, 256, T, -1, "0 tokens are fewer than one window of block_size + 1 = 9"},
        {4, 0, 0, 0, 0, 50, T, -1, "No such file or directory"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        remove(path);
        uint16_t t[N];
        memcpy(t, tok, sizeof t);
        if (cases[ci].bad_at >= 0) t[cases[ci].bad_at] = 977;
        const int kind = cases[ci].kind;
        if (kind == 0) {
            write_llmc(path, cases[ci].magic, cases[ci].version, cases[ci].count, t,
                       (size_t)cases[ci].n_tokens);
        } else if (kind == 1) {
            uint8_t buf[2 * N + 1] = {0};
            memcpy(buf, t, sizeof t);
            check_write_file(path, buf, cases[ci].n_tokens < 0 ? 2 * N + 1 : 2 * (size_t)cases[ci].n_tokens);
        } else if (kind == 2) {
            check_write_file(path, "abcdefghi", (size_t)cases[ci].n_tokens);
        } else if (kind == 3) {
            int32_t h[25] = {cases[ci].magic, cases[ci].version, cases[ci].count};
            check_write_file(path, h, sizeof h);
        }
        pp_data *d = NULL;
        pp_error err;
        pp_status s = open_source(path, kind == 2 ? PP_DATA_TEXT : PP_DATA_TOKENS,
                                  cases[ci].vocab, cases[ci].block, false, &d, &err);
        snprintf(msg, sizeof msg, "%s: %s", path, cases[ci].message);
        CHECK_MSG(s == PP_ERR_INPUT && !d && strcmp(err.msg, msg) == 0,
                  "case %zu: %s: '%s'\n  expected '%s'", ci, pp_status_name(s), err.msg, msg);
        pp_data_close(d);
    }
    remove(path);
}

/* A text through a tokenizer whose special token is id `special` (the 256
 * bytes, no merges): the windows hold the text's ids, 300 or 70000 among
 * them, whichever width keeps them. */
static void test_tokenizer(int special)
{
    char vocab[320], merges[320], text[320];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", tmpdir);
    snprintf(merges, sizeof merges, "%s/merges.txt", tmpdir);
    snprintf(text, sizeof text, "%s/corpus.txt", tmpdir);
    bpe_test_write_bytes_vocab(vocab, "<|s|>", special);
    check_write_file(merges, "", 0);
    enum { REPS = 20, T = 6 };
    char body[REPS * 9 + 1] = "";
    for (int r = 0; r < REPS; r++) strcat(body, "ab<|s|>cd");
    check_write_file(text, body, strlen(body));
    pp_bpe *bpe = NULL;
    pp_tokens *t = NULL;
    pp_error err;
    CHECK_OK(pp_bpe_open(vocab, merges, &bpe, &err), &err);
    if (!bpe) return;
    CHECK(pp_bpe_use_special(bpe) == 1);
    if (special > 65535) { /* no id of this vocabulary's in 2 bytes */
        uint16_t *ids = (uint16_t *)1;
        int64_t n = -1;
        CHECK(pp_bpe_encode16(bpe, "ab", 2, "narrow", &ids, &n, &err) == PP_ERR_INVALID);
        CHECK(ids == NULL && n == 0);
        CHECK_MSG(strstr(err.msg, "narrow in 2 bytes an id: the vocabulary has ids up to 70000"),
                  "%s", err.msg);
    }
    CHECK_OK(pp_tokens_open(text, true, bpe, special + 1, T, NULL, &t, &err), &err);
    if (t) {
        const int32_t one[5] = {'a', 'b', special, 'c', 'd'};
        CHECK(pp_tokens_count(t) == 5 * REPS && pp_tokens_windows(t) == (5 * REPS - 1) / T);
        int bad = 0;
        for (int64_t w = 0; w < pp_tokens_windows(t); w++) {
            int32_t in[T], out[T];
            pp_tokens_read(t, false, 0, 0, w, in, out);
            for (int k = 0; k < T; k++)
                bad += in[k] != one[(w * T + k) % 5] || out[k] != one[(w * T + k + 1) % 5];
        }
        CHECK_MSG(bad == 0, "special id %d: %d of the windows' ids differ from the text's",
                  special, bad);
    }
    pp_tokens_close(t);
    pp_bpe_close(bpe);
    remove(vocab);
    remove(merges);
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "test_tokens")) return 1;
    test_formats();
    test_refusals();
    test_tokenizer(300);   /* kept in 2 bytes an id */
    test_tokenizer(70000); /* in 4 */
    char path[320];
    const char *names[] = {"train.bin", "nano.bin", "corpus.txt"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", tmpdir, names[i]);
        remove(path);
    }
    rmdir(tmpdir);
    return check_summary("test_tokens");
}
