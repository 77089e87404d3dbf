/*
 * test_bpe.c - GPT-2's tokenizer (runtime/io/bpe.h) on hand-made files: the
 * merges applied lowest rank first, every occurrence left to right, within
 * a piece of GPT-2's pattern and never across two (letters after a space,
 * contractions, symbols, whitespace before a word), long pieces (merged
 * through a heap) as OpenAI's loop restated here merges them, bytes that
 * are not UTF-8 as pieces of their own, special tokens read as text unless
 * asked for, then cutting the text, the byte alphabet both ways, the cache giving
 * what the merges give, decoding; and every refusal of either file with
 * its message; several threads giving one thread's ids, bit for bit.
 * tests/io/bpe_check.py compares the whole with another
 * implementation over GPT-2's own files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/bpe.h"
#include "tests/check.h"
#include "tests/io/bpe_files.h"

enum { N_MERGES = BPE_TEST_N_MERGES, EOT = BPE_TEST_EOT };

static char tmpdir[256];

static void expect(pp_bpe *b, const char *text, size_t len, const int32_t *want, int n_want)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    pp_error err;
    CHECK_OK(pp_bpe_encode(b, text, len, "test", &ids, &n, &err), &err);
    int same = n == n_want;
    for (int i = 0; same && i < n_want; i++) same = ids[i] == want[i];
    char got[256] = "", tmp[16];
    for (int64_t i = 0; i < n && i < 16; i++) {
        snprintf(tmp, sizeof tmp, " %d", (int)ids[i]);
        strncat(got, tmp, sizeof got - strlen(got) - 1);
    }
    CHECK_MSG(same, "'%.*s': ids%s (%lld), expected %d of them", (int)len, text, got,
              (long long)n, n_want);
    free(ids);
}

#define EXPECT(b, text, ...)                                                         \
    do {                                                                             \
        static const int32_t want_[] = {__VA_ARGS__};                                \
        expect(b, text, sizeof(text) - 1, want_, (int)(sizeof want_ / sizeof *want_)); \
    } while (0)

static void test_encode(void)
{
    char vocab[320], merges[320];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", tmpdir);
    snprintf(merges, sizeof merges, "%s/merges.txt", tmpdir);
    bpe_test_write_files(vocab, merges, 0);
    pp_bpe *b;
    pp_error err;
    CHECK_OK(pp_bpe_open(vocab, merges, &b, &err), &err);
    if (!b) return;
    CHECK(pp_bpe_size(b) == EOT + 1);
    CHECK(pp_bpe_merges(b) == N_MERGES);
    for (int pass = 0; pass < 2; pass++) { /* the second from the cache */
        /* lowest rank first: b c (1) before c d (4) */
        EXPECT(b, "bcd", 257, 'd');
        EXPECT(b, "xcd", 'x', 260);
        /* every occurrence, left to right; then the next rank */
        EXPECT(b, "aaaa", 256, 256);
        EXPECT(b, "aaaaa", 256, 258);
        EXPECT(b, "aaa", 258);
        /* a merge's result merges again: a + bc (5) after b c (1) */
        EXPECT(b, "abc", 261);
        /* pieces: letters after a space (" a" merges, rank 3, before a bc, rank 5) */
        EXPECT(b, " abc", 259, 257);
        EXPECT(b, "abc abc", 261, 259, 257);
        EXPECT(b, "a a", 'a', 259);
        /* contractions are pieces: "t'" never merges, "'s" does */
        EXPECT(b, "it's", 'i', 't', 266);
        EXPECT(b, "it'S", 'i', 't', '\'', 'S');
        /* symbols: a run is a piece */
        EXPECT(b, "!!!", 262, '!');
        EXPECT(b, "a!!", 'a', 262);
        /* whitespace: a run before a word leaves its last space to the word */
        EXPECT(b, "a   b", 'a', 263, 264);
        EXPECT(b, "a   ", 'a', 263, ' ');
        EXPECT(b, "\n\n b", '\n', '\n', 264);
        /* digits are pieces of their own, apart from letters */
        EXPECT(b, "a1a", 'a', '1', 'a');
        /* bytes that are not UTF-8: pieces of their own, their own ids */
        EXPECT(b, "\xE9t\xE9", 0xE9, 't', 0xE9);
        EXPECT(b, "aa\xFF\xFE aa", 256, 0xFF, 0xFE, ' ', 256);
        /* UTF-8: a letter's bytes, unmerged here */
        EXPECT(b, "\xC3\xA9", 0xC3, 0xA9);
    }
    /* special tokens: text, unless asked for */
    EXPECT(b, "a<|eot|>b", 'a', '<', '|', 'e', 'o', 't', '|', '>', 'b');
    CHECK(pp_bpe_use_special(b) == 1);
    for (int pass = 0; pass < 2; pass++) {
        EXPECT(b, "a<|eot|>b", 'a', EOT, 'b');
        EXPECT(b, "<|eot|><|eot|>", EOT, EOT);
        EXPECT(b, "x <|eot|> aa", 'x', ' ', EOT, ' ', 256); /* the space before: its own piece */
        EXPECT(b, "<|eot|", '<', '|', 'e', 'o', 't', '|');
        EXPECT(b, "<|eot|>", EOT);
    }
    /* the empty text */
    int32_t *ids = (int32_t *)&ids;
    int64_t n = -1;
    CHECK_OK(pp_bpe_encode(b, "", 0, "empty", &ids, &n, &err), &err);
    CHECK(ids == NULL && n == 0);
    /* decoding: every id to its bytes; none for an id the vocabulary lacks */
    size_t len;
    const char *p = pp_bpe_token(b, 263, &len);
    CHECK(p && len == 2 && !memcmp(p, "  ", 2));
    p = pp_bpe_token(b, 0xE9, &len);
    CHECK(p && len == 1 && (unsigned char)p[0] == 0xE9);
    CHECK(pp_bpe_token(b, EOT + 1, &len) == NULL);
    CHECK(pp_bpe_token(b, -1, &len) == NULL);
    /* any bytes round-trip, through pieces long and short (the cache holds
     * pieces of up to 64 bytes) */
    enum { LEN = 20000 };
    char *text = malloc(LEN), *back = malloc(LEN);
    uint64_t x = 12345;
    for (int i = 0; i < LEN; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const unsigned r = (unsigned)(x >> 40);
        /* mostly letters, spaces and 'a's (long runs), some of any byte */
        text[i] = (char)(r % 4 == 0 ? (int)(r >> 8) : r % 4 == 1 ? ' ' : r % 4 == 2 ? 'a' : 'b');
        if (i > 1000 && i < 1200) text[i] = 'a'; /* a piece of 200 bytes */
    }
    for (int i = 3000; i + 7 < LEN; i += 2311) memcpy(text + i, "<|eot|>", 7);
    for (int pass = 0; pass < 2; pass++) {
        CHECK_OK(pp_bpe_encode(b, text, LEN, "random", &ids, &n, &err), &err);
        size_t at = 0;
        int ok = 1;
        for (int64_t i = 0; i < n && ok; i++) {
            p = pp_bpe_token(b, ids[i], &len);
            ok = p && at + len <= LEN;
            if (ok) memcpy(back + at, p, len), at += len;
        }
        CHECK_MSG(ok && at == LEN && !memcmp(text, back, LEN), "random bytes round-trip "
                  "(pass %d: %zu of %d bytes)", pass, at, LEN);
        free(ids);
    }
    free(text);
    free(back);
    pp_bpe_close(b);
}

/* OpenAI's loop restated over byte strings with the test's merges: the ids
 * of one piece p[0, n) (n < 512) into out; their count. */
static int naive_piece(const char *p, int n, int32_t *out)
{
    static char sym[512][16];
    int m = n;
    for (int i = 0; i < n; i++) sym[i][0] = p[i], sym[i][1] = '\0';
    for (;;) {
        int best = N_MERGES;
        for (int i = 0; i + 1 < m; i++)
            for (int r = 0; r < best; r++)
                if (!strcmp(sym[i], BPE_TEST_MERGES[r][0]) && !strcmp(sym[i + 1], BPE_TEST_MERGES[r][1])) best = r;
        if (best == N_MERGES) break;
        int j = 0;
        for (int i = 0; i < m; j++) {
            if (i + 1 < m && !strcmp(sym[i], BPE_TEST_MERGES[best][0]) &&
                !strcmp(sym[i + 1], BPE_TEST_MERGES[best][1])) {
                char joined[16];
                snprintf(joined, sizeof joined, "%s%s", sym[i], sym[i + 1]);
                memcpy(sym[j], joined, sizeof joined);
                i += 2;
            } else {
                memmove(sym[j], sym[i], sizeof sym[j]);
                i++;
            }
        }
        m = j;
    }
    for (int i = 0; i < m; i++) {
        out[i] = (unsigned char)sym[i][0];
        for (int r = 0; sym[i][1] && r < N_MERGES; r++) {
            char joined[16];
            snprintf(joined, sizeof joined, "%s%s", BPE_TEST_MERGES[r][0], BPE_TEST_MERGES[r][1]);
            if (!strcmp(joined, sym[i])) out[i] = 256 + r;
        }
    }
    return m;
}

/* Pieces long and short (a word's letters: one piece) against the
 * restatement: the heap's merges of long pieces are OpenAI's passes. */
static void test_against_naive(void)
{
    char vocab[320], merges[320];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", tmpdir);
    snprintf(merges, sizeof merges, "%s/merges.txt", tmpdir);
    pp_bpe *b;
    pp_error err;
    CHECK_OK(pp_bpe_open(vocab, merges, &b, &err), &err);
    if (!b) return;
    uint64_t x = 99;
    int differ = 0, longest = 0;
    for (int t = 0; t < 400; t++) {
        char piece[511];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const int n = 1 + (int)((x >> 33) % (t < 200 ? 40 : 500));
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            piece[i] = "aaaabbcd"[(x >> 40) % 8];
        }
        int32_t want[512], *ids;
        int64_t got;
        const int nw = naive_piece(piece, n, want);
        CHECK_OK(pp_bpe_encode(b, piece, (size_t)n, "piece", &ids, &got, &err), &err);
        if (got != nw || memcmp(ids, want, (size_t)nw * sizeof *want) != 0) differ++;
        if (n > longest) longest = n;
        free(ids);
    }
    CHECK_MSG(differ == 0 && longest > 400, "%d of 400 pieces (up to %d bytes) merge otherwise "
              "than OpenAI's loop", differ, longest);
    pp_bpe_close(b);
}

/* Several threads give one thread's ids, bit for bit: texts cut wherever
 * they may be (spans of 1 byte and more, 2 to 5 threads), special tokens
 * read as text and as tokens, and a text with no place to cut (one line of
 * one word). */
static void test_threads(void)
{
    char vocab[320], merges[320];
    snprintf(vocab, sizeof vocab, "%s/vocab-more.json", tmpdir);
    snprintf(merges, sizeof merges, "%s/merges-more.txt", tmpdir);
    bpe_test_write_files(vocab, merges, 1);
    enum { LEN = 40000 };
    char *text = malloc(LEN);
    int cases = 0, differ = 0;
    for (int special = 0; special < 2; special++) {
        for (int t = 0; t < 4; t++) {
            if (t < 3) {
                bpe_test_mixed_text(text, LEN, 7 + (uint64_t)t);
            } else {
                memset(text, 'a', LEN); /* no place to cut: one thread */
            }
            pp_bpe *one, *many;
            pp_error err;
            CHECK_OK(pp_bpe_open(vocab, merges, &one, &err), &err);
            CHECK_OK(pp_bpe_open(vocab, merges, &many, &err), &err);
            if (!one || !many) break;
            if (special) CHECK(pp_bpe_use_special(one) == 3 && pp_bpe_use_special(many) == 3);
            int32_t *want, *got;
            int64_t n_want, n_got;
            CHECK_OK(pp_bpe_encode(one, text, LEN, "one", &want, &n_want, &err), &err);
            static const struct { int threads; size_t span; } runs[] = {
                {2, 1}, {3, 7}, {5, 1}, {4, 1000}, {2, 0}, {3, 64}};
            for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
                pp_bpe_set_threads(many, runs[k].threads, runs[k].span);
                for (int again = 0; again < 2; again++) { /* the second from the caches */
                    CHECK_OK(pp_bpe_encode(many, text, LEN, "many", &got, &n_got, &err), &err);
                    if (n_got != n_want || memcmp(got, want, (size_t)n_want * sizeof *want))
                        differ++;
                    free(got);
                    /* in 2 bytes an id, each span narrowed by its thread */
                    uint16_t *got16;
                    CHECK_OK(pp_bpe_encode16(many, text, LEN, "many", &got16, &n_got, &err),
                             &err);
                    differ += n_got != n_want;
                    for (int64_t i = 0; n_got == n_want && i < n_want; i++)
                        if (got16[i] != want[i]) {
                            differ++;
                            break;
                        }
                    free(got16);
                    cases += 2;
                }
            }
            free(want);
            pp_bpe_close(one);
            pp_bpe_close(many);
        }
    }
    CHECK_MSG(differ == 0 && cases == 192, "%d of %d threaded encodings differ from one thread's",
              differ, cases);
    free(text);
}

/* Each bad file, with the message it must give. */
static void test_refusals(void)
{
    char vocab[320], merges[320], good_vocab[320], good_merges[320];
    snprintf(vocab, sizeof vocab, "%s/bad.json", tmpdir);
    snprintf(merges, sizeof merges, "%s/bad.txt", tmpdir);
    snprintf(good_vocab, sizeof good_vocab, "%s/vocab.json", tmpdir);
    snprintf(good_merges, sizeof good_merges, "%s/merges.txt", tmpdir);
    /* the good vocabulary's text with one entry added or replaced */
    size_t gn;
    char *good = (char *)check_read_file(good_vocab, &gn);
    if (!good) return;
    good[gn - 2] = '\0'; /* without "}\n" */
    char big[512];
    const struct {
        const char *vocab_tail, *merges, *want;
    } cases[] = {
        {NULL, "#version: 0.2\na a\nb\n", "bad.txt:3: \"b\" is not a merge"},
        {NULL, "a  a\n", "bad.txt:1: \"a  a\" is not a merge"},
        {NULL, "a a\nqq z\n", "bad.txt:2: \"qq\" is not a token of the vocabulary"},
        {NULL, "a a\nz qq\n", "bad.txt:2: \"qq\" is not a token"},
        {NULL, "aa aa\n", "bad.txt:1: \"aa aa\" merges into a token the vocabulary lacks"},
        {NULL, "a \xC3\n", "bad.txt:1: not UTF-8 text"},
        {NULL, "a \xE2\x82\xAC\n", "has U+20AC, a character outside GPT-2's byte alphabet"},
        {",\n\"zz\": \"7\"}", NULL, "token \"zz\": its id is not an integer"},
        {",\n\"zz\": 16777216}", NULL, "token \"zz\" has id 16777216 (ids are 0 to 16777215)"},
        {",\n\"zz\": -1}", NULL, "has id -1"},
        {",\n\"zz\": 3}", NULL, "id 3 is given to two tokens"},
        {",\n\"\\u20AC\": 400}", NULL, "(id 400) has U+20AC, a character outside"},
        {",\n\"\": 400}", NULL, "the empty token (id 400)"},
        {",\n\"zz\": 400,\n\"zz\": 401}", NULL, "bad.json:"}, /* a duplicate key: jansson's */
        {",\n\"zz\": 400", NULL, "bad.json:"},                /* truncated JSON */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *v = good_vocab, *m = good_merges;
        if (cases[i].vocab_tail) {
            FILE *f = fopen(vocab, "w");
            fprintf(f, "%s%s\n", good, cases[i].vocab_tail);
            fclose(f);
            v = vocab;
        }
        if (cases[i].merges) {
            check_write_file(merges, cases[i].merges, strlen(cases[i].merges));
            m = merges;
        }
        pp_bpe *b = NULL;
        pp_error err;
        const pp_status st = pp_bpe_open(v, m, &b, &err);
        CHECK_MSG(st == PP_ERR_INPUT && b == NULL && strstr(err.msg, cases[i].want),
                  "case %zu: status %d, '%s', expected '%s'", i, (int)st,
                  st ? err.msg : "(opened)", cases[i].want);
        pp_bpe_close(b);
    }
    /* whole files that are not vocabularies */
    const struct {
        const char *json, *want;
    } files[] = {
        {"[1, 2]\n", "not a tokenizer's vocabulary"},
        {"{}\n", "not a tokenizer's vocabulary"},
        {"{\"a\": 0}\n", "byte 0x00 has no token of its own"},
        {"{\"a\": 0,\n  \"b\" 1}\n", "bad.json:2:"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        check_write_file(vocab, files[i].json, strlen(files[i].json));
        pp_bpe *b = NULL;
        pp_error err;
        const pp_status st = pp_bpe_open(vocab, good_merges, &b, &err);
        CHECK_MSG(st == PP_ERR_INPUT && strstr(err.msg, files[i].want), "file %zu: '%s', "
                  "expected '%s'", i, st ? err.msg : "(opened)", files[i].want);
        pp_bpe_close(b);
    }
    /* missing files name themselves */
    snprintf(big, sizeof big, "%s/none.json", tmpdir);
    pp_bpe *b = NULL;
    pp_error err;
    CHECK(pp_bpe_open(big, good_merges, &b, &err) == PP_ERR_INPUT &&
          strstr(err.msg, "none.json: No such file"));
    snprintf(big, sizeof big, "%s/none.txt", tmpdir);
    CHECK(pp_bpe_open(good_vocab, big, &b, &err) == PP_ERR_INPUT &&
          strstr(err.msg, "none.txt: No such file"));
    /* a pair given twice keeps its first rank; an empty merges file merges nothing */
    check_write_file(merges, "b c\nc d\nb c\n", 12);
    CHECK_OK(pp_bpe_open(good_vocab, merges, &b, &err), &err);
    if (b) {
        CHECK(pp_bpe_merges(b) == 3);
        EXPECT(b, "bcd", 257, 'd');
        pp_bpe_close(b);
    }
    /* a merge's result whose pair with its neighbour ranks lower than the
     * merge itself (no trained file does this): every (a, a) is merged
     * first, as OpenAI's pass does, then (aa, a); a long piece (the heap)
     * as a short one */
    check_write_file(merges, "aa a\na a\n", 9);
    CHECK_OK(pp_bpe_open(good_vocab, merges, &b, &err), &err);
    if (b) {
        EXPECT(b, "aaaa", 256, 256);
        EXPECT(b, "aaaaa", 256, 258);
        EXPECT(b, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 256, 256, 256, 256, 256, 256, 256,
               256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256);
        pp_bpe_close(b);
    }
    check_write_file(merges, "", 0);
    CHECK_OK(pp_bpe_open(good_vocab, merges, &b, &err), &err);
    if (b) {
        EXPECT(b, "aa", 'a', 'a');
        pp_bpe_close(b);
    }
    free(good);
}

int main(void)
{
    check_mkdtemp(tmpdir, sizeof tmpdir, "bpe");
    test_encode();
    test_against_naive();
    test_threads();
    test_refusals();
    check_rmtree(tmpdir);
    return check_summary("bpe");
}
