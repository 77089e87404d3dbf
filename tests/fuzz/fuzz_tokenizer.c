/*
 * fuzz_tokenizer.c - libFuzzer target for GPT-2's tokenizer
 * (runtime/io/bpe.h). The input's first byte picks what is fuzzed: 0 the
 * rest is text, encoded by a fixed tokenizer (the 256 bytes, a few merges
 * and three special tokens, <|endoftext|> and two that overlap), read as
 * text (0) or as special tokens (2): it must encode, every id below the
 * vocabulary, and its ids must decode to the same bytes, and the same
 * tokenizer on three threads taking spans of a byte or more must give the
 * same ids (the text cut wherever it may be), and in 2 bytes an id the
 * same (pp_bpe_encode16); 1 the rest is a
 * vocab.json and a merges.txt
 * (the two bytes after the first give the vocabulary's length), opened:
 * PP_OK or PP_ERR_INPUT, and one that opens encodes a fixed text of many
 * kinds of character and decodes it back; then the rest after those two
 * bytes, whole, as a tokenizer.json (pp_bpe_open_json), the same, with its
 * added tokens read as special tokens (first byte mod 3 chooses). Any
 * violation aborts. Built by
 * tests/fuzz/run.sh tokenizer; corpus_main.c replays files without
 * libFuzzer (test fuzz_tokenizer).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/io/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_tokenizer: %s\n%s\n", what, detail ? detail : "");
    abort();
}

static char g_vocab[4096], g_merges[4096], g_json[4096], g_fixed_vocab[4096],
    g_fixed_merges[4096];
/* the fixed tokenizer; the same with special tokens; both on three threads */
static pp_bpe *g_fixed, *g_special, *g_threads[2];

static void cleanup(void)
{
    unlink(g_vocab);
    unlink(g_merges);
    unlink(g_json);
    unlink(g_fixed_vocab);
    unlink(g_fixed_merges);
    pp_bpe_close(g_fixed);
    pp_bpe_close(g_special);
    pp_bpe_close(g_threads[0]);
    pp_bpe_close(g_threads[1]);
}

static void put(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) fail("cannot write", path);
}

/* GPT-2's character for byte b. */
static unsigned alpha(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return (unsigned)b;
    return 256u + (unsigned)(b <= 32 ? b : b <= 160 ? 33 + b - 127 : 67);
}

/* The fixed tokenizer: every byte, then the merges of a few English pairs. */
static void make_fixed(void)
{
    static const char *const merges[][2] = {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"},
                                            {"e", "r"}, {" ", "a"}, {"in", "g"}, {" ", " "}};
    FILE *v = fopen(g_fixed_vocab, "w"), *m = fopen(g_fixed_merges, "w");
    if (!v || !m) fail("cannot write", g_fixed_vocab);
    fputs("{", v);
    for (int b = 0; b < 256; b++) fprintf(v, "%s\"\\u%04X\": %d", b ? ", " : "", alpha(b), b);
    fputs("#version: 0.2\n", m);
    for (int i = 0; i < 8; i++) {
        fputs(", \"", v);
        for (int k = 0; k < 2; k++) {
            for (const char *c = merges[i][k]; *c; c++) {
                fprintf(v, "\\u%04X", alpha((unsigned char)*c));
                const unsigned u = alpha((unsigned char)*c);
                if (u < 0x80) fputc((int)u, m);
                else fputc((int)(0xC0 | u >> 6), m), fputc((int)(0x80 | (u & 0x3F)), m);
            }
            fputc(k ? '\n' : ' ', m);
        }
        fprintf(v, "\": %d", 256 + i);
    }
    fputs(", \"<|endoftext|>\": 264, \"<|a|>\": 265, \"<|a|>|>\": 266}\n", v);
    if (fclose(v) != 0 || fclose(m) != 0) fail("cannot write", g_fixed_merges);
    pp_error err;
    if (pp_bpe_open(g_fixed_vocab, g_fixed_merges, &g_fixed, &err) != PP_OK ||
        pp_bpe_open(g_fixed_vocab, g_fixed_merges, &g_special, &err) != PP_OK ||
        pp_bpe_open(g_fixed_vocab, g_fixed_merges, &g_threads[0], &err) != PP_OK ||
        pp_bpe_open(g_fixed_vocab, g_fixed_merges, &g_threads[1], &err) != PP_OK)
        fail("the fixed tokenizer does not open", err.msg);
    if (pp_bpe_use_special(g_special) != 3 || pp_bpe_use_special(g_threads[1]) != 3)
        fail("the fixed tokenizer's special tokens", NULL);
    pp_bpe_set_threads(g_threads[0], 3, 1);
    pp_bpe_set_threads(g_threads[1], 3, 1);
}

/* Encodes text[0, n) with b; every id a token, and their bytes the text;
 * the ids (*count of them) into *out where out is not NULL. */
static void round_trip(pp_bpe *b, const char *text, size_t n, int32_t **out, int64_t *count_out)
{
    int32_t *ids;
    int64_t count;
    pp_error err;
    if (pp_bpe_encode(b, text, n, "fuzz", &ids, &count, &err) != PP_OK)
        fail("encoding failed", err.msg);
    size_t at = 0;
    for (int64_t i = 0; i < count; i++) {
        size_t len;
        const char *p = pp_bpe_token(b, ids[i], &len);
        if (!p || ids[i] >= pp_bpe_size(b)) fail("an id that is no token", NULL);
        if (at + len > n || memcmp(text + at, p, len) != 0) fail("ids that are not the text", NULL);
        at += len;
    }
    if (at != n) fail("ids that leave text out", NULL);
    if (out) {
        *out = ids;
        *count_out = count;
    } else {
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_vocab[0]) {
        const char *tmp = getenv("TMPDIR");
        tmp = tmp && tmp[0] ? tmp : "/tmp";
        const int pid = (int)getpid();
        snprintf(g_vocab, sizeof g_vocab, "%s/fuzz-bpe-%d-vocab.json", tmp, pid);
        snprintf(g_merges, sizeof g_merges, "%s/fuzz-bpe-%d-merges.txt", tmp, pid);
        snprintf(g_json, sizeof g_json, "%s/fuzz-bpe-%d-tokenizer.json", tmp, pid);
        snprintf(g_fixed_vocab, sizeof g_fixed_vocab, "%s/fuzz-bpe-%d-fixed.json", tmp, pid);
        snprintf(g_fixed_merges, sizeof g_fixed_merges, "%s/fuzz-bpe-%d-fixed.txt", tmp, pid);
        make_fixed();
        atexit(cleanup);
    }
    if (size < 1) return 0;
    if (data[0] % 3 != 1) {
        const int special = data[0] % 3 == 2;
        int32_t *one, *many;
        int64_t n_one, n_many;
        round_trip(special ? g_special : g_fixed, (const char *)data + 1, size - 1, &one, &n_one);
        round_trip(g_threads[special], (const char *)data + 1, size - 1, &many, &n_many);
        if (n_one != n_many || (n_one && memcmp(one, many, (size_t)n_one * sizeof *one) != 0))
            fail("three threads' ids are not one thread's", NULL);
        uint16_t *narrow; /* the same in 2 bytes each, the spans narrowed by their threads */
        int64_t n_narrow;
        pp_error err;
        if (pp_bpe_encode16(g_threads[special], (const char *)data + 1, size - 1, "fuzz",
                            &narrow, &n_narrow, &err) != PP_OK)
            fail("encoding in 2 bytes an id failed", err.msg);
        for (int64_t i = 0; i < n_one || n_narrow != n_one; i++)
            if (n_narrow != n_one || narrow[i] != one[i])
                fail("three threads' ids in 2 bytes are not one thread's", NULL);
        free(narrow);
        free(one);
        free(many);
        return 0;
    }
    if (size < 3) return 0;
    size_t vn = (size_t)data[1] | (size_t)data[2] << 8;
    if (vn > size - 3) vn = size - 3;
    put(g_vocab, data + 3, vn);
    put(g_merges, data + 3 + vn, size - 3 - vn);
    put(g_json, data + 3, size - 3);
    for (int json = 0; json < 2; json++) {
        pp_bpe *b = NULL;
        pp_error err;
        const pp_status s = json ? pp_bpe_open_json(g_json, &b, &err)
                                 : pp_bpe_open(g_vocab, g_merges, &b, &err);
        if (s != PP_OK && s != PP_ERR_INPUT) fail("open: unexpected status", err.msg);
        if (s == PP_OK) {
            if (pp_bpe_size(b) < 256) fail("a vocabulary without every byte opened", NULL);
            if (json && pp_bpe_use_special(b) < 0) fail("out of memory", NULL);
            static const char text[] = "Hello world, it's 42! caf\xC3\xA9  \xE6\x97\xA5"
                                       "\xE6\x9C\xAC\t\n\xF0\x9F\x98\x80 \xFF\xFE the "
                                       "thing<|endoftext|><pad>";
            round_trip(b, text, sizeof text - 1, NULL, NULL);
        }
        pp_bpe_close(b);
    }
    return 0;
}
