/*
 * bpe.h - GPT-2's byte-level BPE tokenizer, from Hugging Face's two files
 * (`vocab.json`: each token's string and id; `merges.txt`: the merges, most
 * frequent first; OpenAI's `encoder.json` and `vocab.bpe` are the same two
 * files), or from Hugging Face's one `tokenizer.json`. Public (installed,
 * exported): tokens.c tokenizes a text file with it, the CLI --generate's
 * prompt and output, and an embedding program its own text around
 * pp_pipeline_generate.
 *
 * Encoding is OpenAI's: the text, UTF-8, is cut into pieces by GPT-2's
 * pattern (contractions, letters with an optional leading space, digits,
 * other symbols, whitespace; PCRE2 with Unicode properties), and each
 * piece's bytes are merged pair by pair, the pair of lowest rank in
 * merges.txt first, every occurrence of it left to right, until no pair of
 * neighbours has a merge. Special tokens such as "<|endoftext|>" are read
 * as ordinary text (OpenAI's encoder, tiktoken's encode_ordinary), unless
 * pp_bpe_use_special asks otherwise (Hugging Face's tokenizers). Decoding
 * maps each id to its bytes (a token may hold part of a UTF-8 character:
 * the whole sequence's bytes are the text).
 *
 * The files are checked when opened; errors start with the file (and
 * vocab.json's line and column, merges.txt's line) and name what is wrong:
 * JSON that is not an object of string to id, an id out of range or twice,
 * a character outside the byte alphabet, a byte with no token of its own, a
 * merge line that is not two tokens, or that names a token (or a merged
 * token) vocab.json lacks.
 *
 * A long text may be encoded by several threads (pp_bpe_set_threads): the
 * same ids, bit for bit, as one thread's.
 *
 * Thread safety: encoding caches pieces in the tokenizer: one call at a
 * time per pp_bpe (which may itself run threads). Decoding (pp_bpe_token)
 * is read-only.
 */
#ifndef PP_IO_BPE_H
#define PP_IO_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PP_BPE_MAX_ID ((1 << 24) - 1)
#define PP_BPE_MAX_THREADS 64
#define PP_BPE_SPAN_DEFAULT ((size_t)1 << 20) /* 1 MiB */

typedef struct pp_bpe pp_bpe;

/* Reads and checks both files (PP_ERR_INPUT for their content, PP_ERR_IO
 * where the system refused, PP_ERR_OOM). */
pp_status pp_bpe_open(const char *vocab_path, const char *merges_path, pp_bpe **out,
                      pp_error *err);
/* Reads and checks Hugging Face's tokenizer.json: model.vocab and
 * model.merges ("a b" strings or [a, b] pairs) as the two files, and
 * added_tokens (each the token of its id in model.vocab, or added to the
 * vocabulary where model.vocab lacks it). The file must describe GPT-2's
 * encoding, the only one this tokenizer runs: model.type BPE, the
 * ByteLevel pre_tokenizer with add_prefix_space false, no normalizer, no
 * dropout, subword prefix or suffix, byte fallback or ignore_merges, added
 * tokens without lstrip, rstrip or single_word, a ByteLevel decoder or
 * none; otherwise PP_ERR_INPUT names the key. A post_processor is not
 * applied: the ids are Hugging Face's encode(text, add_special_tokens=False). */
pp_status pp_bpe_open_json(const char *path, pp_bpe **out, pp_error *err);
/* Either form, as a plan names it: vocab.json and merges.txt (pp_bpe_open),
 * or, where merges_path is NULL or "", vocab_path a tokenizer.json
 * (pp_bpe_open_json). */
pp_status pp_bpe_open_files(const char *vocab_path, const char *merges_path, pp_bpe **out,
                            pp_error *err);
void pp_bpe_close(pp_bpe *b);

/* The largest id + 1 (the vocabulary a model needs); the number of merges. */
int pp_bpe_size(const pp_bpe *b);
int pp_bpe_merges(const pp_bpe *b);

/* The ids of text[0, len) into *ids (malloc'd, *n of them; NULL when 0);
 * `what` names the text in errors. Bytes that are not UTF-8 (a stray
 * Latin-1 byte, a cut sequence) are no character of the pattern's: each run
 * of them is a piece of its own, merged as any other, so that any bytes
 * encode and decode to themselves. */
pp_status pp_bpe_encode(pp_bpe *b, const char *text, size_t len, const char *what, int32_t **ids,
                        int64_t *n, pp_error *err);
/* The same ids in 2 bytes each, where every id fits (pp_bpe_size(b) <=
 * 65536, GPT-2's 50257; otherwise PP_ERR_INVALID): each thread narrows its
 * span's ids as it ends, so the text's ids never stand in 4 bytes each all
 * at once (the peak 4 bytes an id, against pp_bpe_encode's 8: the spans',
 * then the whole). */
pp_status pp_bpe_encode16(pp_bpe *b, const char *text, size_t len, const char *what,
                          uint16_t **ids, int64_t *n, pp_error *err);

/* From now on a text of at least 2 * span bytes is encoded by up to
 * `threads` threads (the caller one of them; 1, the default, encodes on
 * the caller alone), each taking spans of at least span bytes (0: the
 * default, PP_BPE_SPAN_DEFAULT) cut where GPT-2's pattern always starts a
 * piece (after a newline before a printable character; at a space between
 * ASCII letters or digits). A text with no such place is encoded by one
 * thread. The threads start with the first such text and stop with
 * pp_bpe_close; where the system refuses them, the caller encodes alone.
 * threads is clamped to [1, PP_BPE_MAX_THREADS]. */
void pp_bpe_set_threads(pp_bpe *b, int threads, size_t span);

/* From now on every special token (opened from tokenizer.json: its added
 * tokens; else every token of the form <|...|>, GPT-2's <|endoftext|>) is
 * read where it stands in a text as that token (the text cut there, the
 * parts between encoded apart; the longest where two start at one place).
 * The count of such tokens (0: none, nothing changes), -1 out of memory. */
int pp_bpe_use_special(pp_bpe *b);

/* The bytes of token id (*len of them, not NUL-terminated), or NULL where
 * vocab.json gives id no token. */
const char *pp_bpe_token(const pp_bpe *b, int32_t id, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
