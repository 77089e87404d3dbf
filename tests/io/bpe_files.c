/*
 * bpe_files.c - the tokenizer tests' hand-made files and texts (bpe_files.h).
 */
#include "tests/io/bpe_files.h"

#include <stdio.h>
#include <string.h>

/* GPT-2's character for byte b (the test's own statement of the alphabet). */
unsigned bpe_test_alpha(int b)
{
    static unsigned map[256];
    static int made;
    if (!made) {
        int n = 0;
        for (int c = 0; c < 256; c++) {
            const int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
            map[c] = printable ? (unsigned)c : 256u + (unsigned)n++;
        }
        made = 1;
    }
    return map[b];
}

/* Writes `"token": id` for the bytes s[0, n) into f, each character escaped. */
void bpe_test_put_entry(FILE *f, const char *s, size_t n, int id, int comma)
{
    fputs(comma ? ",\n\"" : "\"", f);
    for (size_t i = 0; i < n; i++) fprintf(f, "\\u%04X", bpe_test_alpha((unsigned char)s[i]));
    fprintf(f, "\": %d", id);
}

void bpe_test_write_bytes_vocab(const char *path, const char *special, int id)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("{", f);
    for (int c = 0; c < 256; c++) {
        const char b = (char)c;
        bpe_test_put_entry(f, &b, 1, c, c > 0);
    }
    fprintf(f, ",\n\"%s\": %d}\n", special, id);
    fclose(f);
}

/* A merge line for the bytes a and b, in the alphabet (UTF-8). */
static void put_utf8(FILE *f, const char *s)
{
    for (; *s; s++) {
        const unsigned c = bpe_test_alpha((unsigned char)*s);
        if (c < 0x80) fputc((int)c, f);
        else fputc((int)(0xC0 | c >> 6), f), fputc((int)(0x80 | (c & 0x3F)), f);
    }
}

const char *const BPE_TEST_MERGES[BPE_TEST_N_MERGES][2] = {
    {"a", "a"},   /* 256 */
    {"b", "c"},   /* 257 */
    {"aa", "a"},  /* 258 */
    {" ", "a"},   /* 259 */
    {"c", "d"},   /* 260 */
    {"a", "bc"},  /* 261 */
    {"!", "!"},   /* 262 */
    {" ", " "},   /* 263 */
    {" ", "b"},   /* 264 */
    {"t", "'"},   /* 265: never applies (a letter and an apostrophe are two pieces) */
    {"'", "s"},   /* 266 */
};
_Static_assert(sizeof BPE_TEST_MERGES / sizeof BPE_TEST_MERGES[0] == BPE_TEST_N_MERGES,
               "BPE_TEST_N_MERGES");

/* The test's vocabulary (every byte as its own id, then the merges' tokens,
 * then <|eot|>; with more, two special tokens that hold places a text may
 * be cut at, a space between letters and a newline before one, and merges
 * of white space that tell how a run before a cut was matched) and merges. */
void bpe_test_write_files(const char *vocab, const char *merges, int more)
{
    FILE *f = fopen(vocab, "w");
    fputs("{", f);
    for (int c = 0; c < 256; c++) {
        const char b = (char)c;
        bpe_test_put_entry(f, &b, 1, c, c > 0);
    }
    for (int m = 0; m < BPE_TEST_N_MERGES; m++) {
        char joined[16];
        snprintf(joined, sizeof joined, "%s%s", BPE_TEST_MERGES[m][0], BPE_TEST_MERGES[m][1]);
        bpe_test_put_entry(f, joined, strlen(joined), 256 + m, 1);
    }
    bpe_test_put_entry(f, "<|eot|>", 7, BPE_TEST_EOT, 1); /* a special token */
    if (more) {
        bpe_test_put_entry(f, "<|a b|>", 7, BPE_TEST_EOT + 1, 1);
        bpe_test_put_entry(f, "<|x\ny|>", 7, BPE_TEST_EOT + 2, 1);
        bpe_test_put_entry(f, "\n\n", 2, BPE_TEST_EOT + 3, 1);
        bpe_test_put_entry(f, " \n", 2, BPE_TEST_EOT + 4, 1);
    }
    fputs("}\n", f);
    fclose(f);
    f = fopen(merges, "w");
    fputs("#version: 0.2\n", f);
    for (int m = 0; m < BPE_TEST_N_MERGES; m++) {
        put_utf8(f, BPE_TEST_MERGES[m][0]);
        fputc(' ', f);
        put_utf8(f, BPE_TEST_MERGES[m][1]);
        fputs(m == 3 ? "\r\n" : "\n", f); /* a CRLF line too */
    }
    if (more) { /* "\n" "\n", " " "\n" */
        put_utf8(f, "\n"), fputc(' ', f), put_utf8(f, "\n"), fputc('\n', f);
        put_utf8(f, " "), fputc(' ', f), put_utf8(f, "\n"), fputc('\n', f);
    }
    fclose(f);
}

/* A text of lines, words, numbers, white space before words and line ends,
 * contractions, UTF-8 letters, bytes that are not UTF-8, long runs and the
 * special tokens (two holding places a text may be cut at), into text. */
void bpe_test_mixed_text(char *text, size_t len, uint64_t seed)
{
    static const char *const words[] = {
        "aa", "abc", "bcd", "it's", "a1", "42", " ", "  ", "\n", "\n\n", " \n", "\t",
        "!!", "caf\xC3\xA9", "\xE9", "\xFF\xFE", "<|eot|>", "<|a b|>", "<|x\ny|>", "\r\n",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "\n a", "b c", "\n'", "<|eot|"};
    enum { N_WORDS = sizeof words / sizeof *words };
    uint64_t x = seed;
    size_t at = 0;
    while (at < len) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const unsigned r = (unsigned)(x >> 33);
        /* mostly words between spaces and newlines, where the text may be cut */
        const char *w = r % 3 ? (r % 7 ? " " : "\n") : words[(r >> 8) % N_WORDS];
        for (const char *c = w; *c && at < len; c++) text[at++] = *c;
        if (r % 3 && at < len) text[at++] = "abcdxy12"[(r >> 12) % 8];
    }
}
