/*
 * bpe_files.h - the tokenizer tests' hand-made files and texts (test_bpe.c,
 * test_bpe_json.c): a byte-level vocabulary and its merges, written as
 * vocab.json and merges.txt, and mixed texts to encode.
 */
#ifndef PP_TESTS_IO_BPE_FILES_H
#define PP_TESTS_IO_BPE_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The merges, as bytes, in rank order: merge m makes token 256 + m; the
 * vocabulary's special token <|eot|> is BPE_TEST_EOT. */
enum { BPE_TEST_N_MERGES = 11, BPE_TEST_EOT = 256 + BPE_TEST_N_MERGES };
extern const char *const BPE_TEST_MERGES[BPE_TEST_N_MERGES][2];

/* GPT-2's character for byte b (the tests' own statement of the alphabet). */
unsigned bpe_test_alpha(int b);
/* `"token": id` for the bytes s[0, n) into f, each character escaped (a
 * comma and a newline first where comma). */
void bpe_test_put_entry(FILE *f, const char *s, size_t n, int id, int comma);
/* A vocabulary of the 256 bytes (each its own id) and one token, special
 * (ASCII, written as it is), of that id, into path. */
void bpe_test_write_bytes_vocab(const char *path, const char *special, int id);
/* The vocabulary (every byte its own id, then the merges' tokens, then
 * <|eot|>; with more, <|a b|> and <|x\ny|>, and "\n\n" and " \n" with
 * their merges) into vocab, the merges into merges. */
void bpe_test_write_files(const char *vocab, const char *merges, int more);
/* len bytes of lines, words, numbers, white space, contractions, UTF-8
 * letters, bytes that are not UTF-8, long runs and the special tokens. */
void bpe_test_mixed_text(char *text, size_t len, uint64_t seed);

#endif
