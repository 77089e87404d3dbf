/*
 * test_bpe_json.c - GPT-2's tokenizer from Hugging Face's tokenizer.json
 * (pp_bpe_open_json, runtime/io/bpe_json.c) on hand-made files: the same
 * tables as vocab.json and merges.txt (the same ids over mixed texts, with
 * the merges written as "a b" strings and as [a, b] pairs), the added
 * tokens as the special tokens (a token of model.vocab, and one it lacks,
 * added to the vocabulary with its bytes), what may be left out or null,
 * and every refusal with its message. tests/io/bpe_check.py compares
 * Hugging Face's own tokenizer.json for GPT-2 with the two files.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/bpe.h"
#include "tests/check.h"
#include "tests/io/bpe_files.h"

static char tmpdir[256], vocab_path[320], merges_path[320], json_path[320];

/* merges.txt's lines after its #version line, as a JSON list of "a b"
 * strings or of [a, b] pairs. */
static json_t *merges_list(int pairs)
{
    size_t n;
    unsigned char *bytes = check_read_file(merges_path, &n);
    char *text = bytes ? strndup((const char *)bytes, n) : NULL;
    free(bytes);
    json_t *list = json_array();
    char *save = NULL;
    for (char *line = text ? strtok_r(text, "\r\n", &save) : NULL; line;
         line = strtok_r(NULL, "\r\n", &save)) {
        if (!strncmp(line, "#version", 8)) continue;
        char *space = strchr(line, ' ');
        if (!pairs) {
            json_array_append_new(list, json_string(line));
            continue;
        }
        *space = '\0';
        json_array_append_new(list, json_pack("[ss]", line, space + 1));
    }
    free(text);
    return list;
}

/* GPT-2's tokenizer.json as Hugging Face's tokenizers write it, over the
 * test's vocabulary and merges; <|eot|> its one added token. */
static json_t *gpt2_json(int pairs)
{
    json_error_t je;
    json_t *vocab = json_load_file(vocab_path, 0, &je);
    return json_pack("{s:s, s:n, s:n, s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}], s:n, "
                     "s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b}, "
                     "s:{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:o, s:o}}",
                     "version", "1.0", "truncation", "padding", "added_tokens", "id",
                     BPE_TEST_EOT, "content", "<|eot|>", "single_word", 0, "lstrip", 0,
                     "rstrip", 0, "normalized", 0, "special", 1, "normalizer", "pre_tokenizer",
                     "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
                     "use_regex", 1, "post_processor", "type", "ByteLevel", "add_prefix_space",
                     1, "trim_offsets", 0, "use_regex", 1, "decoder", "type", "ByteLevel",
                     "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1, "model", "type",
                     "BPE", "dropout", "unk_token", "continuing_subword_prefix", "",
                     "end_of_word_suffix", "", "fuse_unk", 0, "byte_fallback", 0, "vocab",
                     vocab, "merges", merges_list(pairs));
}

static pp_bpe *open_json(json_t *root, pp_error *err, pp_status *st)
{
    json_dump_file(root, json_path, JSON_INDENT(1));
    pp_bpe *b = NULL;
    *st = pp_bpe_open_json(json_path, &b, err);
    return b;
}

static bool same_ids(pp_bpe *a, pp_bpe *b, const char *text, size_t len)
{
    int32_t *x = NULL, *y = NULL;
    int64_t nx = 0, ny = 0;
    pp_error err;
    CHECK_OK(pp_bpe_encode(a, text, len, "a", &x, &nx, &err), &err);
    CHECK_OK(pp_bpe_encode(b, text, len, "b", &y, &ny, &err), &err);
    const bool same = nx == ny && nx > 0 && !memcmp(x, y, (size_t)nx * sizeof *x);
    free(x);
    free(y);
    return same;
}

/* The same tables as the two files: sizes, merges, every token's bytes, and
 * the ids of mixed texts with special tokens off, and on where added_tokens
 * lists the files' three <|...|> tokens (one with a space, one with a
 * newline: their bytes spelled in the byte alphabet to find them). */
static void test_same_as_files(void)
{
    for (int pairs = 0; pairs < 2; pairs++) {
        json_t *root = gpt2_json(pairs);
        pp_error err;
        pp_status st;
        pp_bpe *j = open_json(root, &err, &st), *f = NULL, *j3 = NULL;
        CHECK_OK(st, &err);
        json_t *added = json_object_get(root, "added_tokens");
        json_array_append_new(added, json_pack("{s:i, s:s}", "id", BPE_TEST_EOT + 1, "content",
                                               "<|a b|>"));
        json_array_append_new(added, json_pack("{s:i, s:s}", "id", BPE_TEST_EOT + 2, "content",
                                               "<|x\ny|>"));
        j3 = open_json(root, &err, &st);
        CHECK_OK(st, &err);
        json_decref(root);
        CHECK_OK(pp_bpe_open(vocab_path, merges_path, &f, &err), &err);
        if (!j || !j3 || !f) {
            pp_bpe_close(j);
            pp_bpe_close(j3);
            pp_bpe_close(f);
            return;
        }
        CHECK(pp_bpe_size(j) == pp_bpe_size(f) && pp_bpe_merges(j) == pp_bpe_merges(f) &&
              pp_bpe_size(j3) == pp_bpe_size(f));
        int tokens_differ = 0;
        for (int32_t id = 0; id < pp_bpe_size(f); id++) {
            size_t la = 0, lb = 0;
            const char *a = pp_bpe_token(j, id, &la), *b = pp_bpe_token(f, id, &lb);
            tokens_differ += !a || !b || la != lb || memcmp(a, b, la) != 0;
        }
        CHECK_MSG(tokens_differ == 0, "%d tokens' bytes differ", tokens_differ);
        enum { LEN = 20000 };
        char *text = malloc(LEN);
        int differ = 0;
        for (int t = 0; t < 4; t++) {
            bpe_test_mixed_text(text, LEN, 11 + (uint64_t)t);
            differ += !same_ids(j, f, text, LEN);
        }
        CHECK(pp_bpe_use_special(j3) == 3 && pp_bpe_use_special(f) == 3);
        for (int t = 0; t < 4; t++) {
            bpe_test_mixed_text(text, LEN, 21 + (uint64_t)t);
            differ += !same_ids(j3, f, text, LEN);
        }
        free(text);
        CHECK_MSG(differ == 0, "merges as %s: %d of 8 texts differ from the two files' ids",
                  pairs ? "pairs" : "strings", differ);
        /* one added token: the one special token */
        CHECK(pp_bpe_use_special(j) == 1);
        static const char eot[] = "x<|eot|>y<|a b|>";
        int32_t *ids = NULL;
        int64_t n = 0;
        CHECK_OK(pp_bpe_encode(j, eot, sizeof eot - 1, "eot", &ids, &n, &err), &err);
        CHECK_MSG(n > 4 && ids[0] == 'x' && ids[1] == BPE_TEST_EOT && ids[2] == 'y' &&
                  ids[3] != BPE_TEST_EOT + 1, "<|eot|> alone special: %lld ids", (long long)n);
        free(ids);
        pp_bpe_close(j);
        pp_bpe_close(j3);
        pp_bpe_close(f);
    }
}

/* An added token that model.vocab lacks joins the vocabulary with its own
 * bytes (a space and a byte outside the printable ones included), read as
 * itself with special tokens on and as text with them off; added_tokens
 * left out: no special token; the optional keys left out or null. */
static void test_added(void)
{
    json_t *root = gpt2_json(0);
    json_t *added = json_object_get(root, "added_tokens");
    const int pad = BPE_TEST_EOT + 10;
    json_array_append_new(added, json_pack("{s:i, s:s, s:b}", "id", pad, "content",
                                           "<p a\x01>", "special", 1));
    json_array_append_new(added, json_pack("{s:i, s:s}", "id", BPE_TEST_EOT, "content",
                                           "<|eot|>")); /* twice: one special token */
    pp_error err;
    pp_status st;
    pp_bpe *b = open_json(root, &err, &st);
    CHECK_OK(st, &err);
    if (b) {
        size_t len = 0;
        const char *t = pp_bpe_token(b, pad, &len);
        CHECK(pp_bpe_size(b) == pad + 1 && t && len == 6 && !memcmp(t, "<p a\x01>", 6));
        CHECK(pp_bpe_token(b, pad - 1, &len) == NULL);
        int32_t *ids = NULL;
        int64_t n = 0;
        CHECK_OK(pp_bpe_encode(b, "b<p a\x01>", 7, "pad", &ids, &n, &err), &err);
        CHECK_MSG(n > 3 && ids[0] == 'b', "special tokens off: the added token as text (%lld "
                  "ids)", (long long)n);
        free(ids);
        CHECK(pp_bpe_use_special(b) == 2);
        CHECK_OK(pp_bpe_encode(b, "b<p a\x01><|eot|>", 14, "pad", &ids, &n, &err), &err);
        CHECK(n == 3 && ids[0] == 'b' && ids[1] == pad && ids[2] == BPE_TEST_EOT);
        free(ids);
        pp_bpe_close(b);
    }
    json_object_del(root, "added_tokens");
    json_object_del(root, "post_processor");
    json_object_set_new(root, "decoder", json_null());
    json_t *model = json_object_get(root, "model");
    json_object_set_new(model, "dropout", json_real(0.0));
    json_object_del(model, "type");
    json_object_del(model, "continuing_subword_prefix");
    json_object_del(json_object_get(root, "pre_tokenizer"), "use_regex");
    b = open_json(root, &err, &st);
    CHECK_OK(st, &err);
    if (b) {
        CHECK(pp_bpe_use_special(b) == 0);
        pp_bpe_close(b);
    }
    json_decref(root);
}

/* Each departure from GPT-2's encoding, each malformed part, with its message. */
static void test_refusals(void)
{
    static const struct {
        const char *where, *key, *value, *want;
    } cases[] = {
        {"model", "type", "\"WordPiece\"", "model.type is WordPiece, not BPE"},
        {"model", "dropout", "0.1", "model.dropout is set"},
        {"model", "continuing_subword_prefix", "\"##\"", "model.continuing_subword_prefix"},
        {"model", "end_of_word_suffix", "\"</w>\"", "model.end_of_word_suffix is set"},
        {"model", "byte_fallback", "true", "model.byte_fallback is true"},
        {"model", "ignore_merges", "true", "model.ignore_merges is true"},
        {"model", "vocab", "[1]", "model.vocab is not an object"},
        {"model", "vocab", "{\"a\": 0}", "model.vocab: byte 0x00 has no token of its own"},
        {"model", "merges", "{}", "model.merges is not a list"},
        {"model", "merges", "[\"a a\", \"b\"]", "model.merges[1] (\"b\") is not a merge"},
        {"model", "merges", "[\"a  a\"]", "model.merges[0] (\"a  a\") is not a merge"},
        {"model", "merges", "[[\"a\", \"a\"], 5]", "model.merges[1] is neither"},
        {"model", "merges", "[[\"a\"]]", "model.merges[0] is neither"},
        {"model", "merges", "[\"a a\", [\"qq\", \"a\"]]",
         "model.merges[1]: \"qq\" is not a token of the vocabulary"},
        {"model", "merges", "[[\"aa\", \"aa\"]]", "model.merges[0]: \"aa aa\" merges into a "
                                               "token the vocabulary lacks"},
        {"", "model", "null", "no model"},
        {"", "normalizer", "{\"type\": \"NFC\"}", "normalizer NFC: GPT-2 encodes the text"},
        {"", "pre_tokenizer", "null", "pre_tokenizer null"},
        {"", "pre_tokenizer", "{\"type\": \"Metaspace\"}", "pre_tokenizer Metaspace"},
        {"pre_tokenizer", "add_prefix_space", "true", "add_prefix_space is true"},
        {"pre_tokenizer", "add_prefix_space", NULL, "absent (true by default)"},
        {"pre_tokenizer", "use_regex", "false", "pre_tokenizer.use_regex is false"},
        {"", "decoder", "{\"type\": \"WordPiece\"}", "decoder WordPiece"},
        {"", "added_tokens", "{}", "added_tokens is not a list"},
        {"", "added_tokens", "[{\"id\": 5}]", "added_tokens[0] needs an integer id"},
        {"", "added_tokens", "[{\"id\": 9, \"content\": \"<|eot|>\"}]",
         "added_tokens[0] (\"<|eot|>\") has id 9, model.vocab 267"},
        {"", "added_tokens", "[{\"id\": 1, \"content\": \"<pad>\"}]",
         "model.vocab: id 1 is given to two tokens"},
        {"", "added_tokens", "[{\"id\": -1, \"content\": \"<pad>\"}]", "has id -1 (ids are"},
        {"", "added_tokens", "[{\"id\": 300, \"content\": \"<m>\", \"lstrip\": true}]",
         "added_tokens[0] (\"<m>\") has lstrip"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *root = gpt2_json(i % 2);
        json_t *at = cases[i].where[0] ? json_object_get(root, cases[i].where) : root;
        if (cases[i].value) {
            json_error_t je;
            json_object_set_new(at, cases[i].key, json_loads(cases[i].value, JSON_DECODE_ANY,
                                                             &je));
        } else {
            json_object_del(at, cases[i].key);
        }
        pp_error err;
        pp_status st;
        pp_bpe *b = open_json(root, &err, &st);
        json_decref(root);
        CHECK_MSG(st == PP_ERR_INPUT && b == NULL && strstr(err.msg, cases[i].want) &&
                  strstr(err.msg, "tokenizer.json"), "case %zu (%s.%s): status %d, '%s', "
                  "expected '%s'", i, cases[i].where, cases[i].key, (int)st,
                  st ? err.msg : "(opened)", cases[i].want);
        pp_bpe_close(b);
    }
    /* files that are not a tokenizer.json */
    static const struct {
        const char *text, *want;
    } files[] = {
        {"[1, 2]\n", "not a tokenizer.json (a JSON object)"},
        {"{\"model\": {\"vocab\": {}}}\n", "pre_tokenizer null"},
        {"{\"model\":\n  {\"vocab\" {}}}\n", "tokenizer.json:2:"},
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        check_write_file(json_path, files[i].text, strlen(files[i].text));
        pp_bpe *b = NULL;
        pp_error err;
        const pp_status st = pp_bpe_open_json(json_path, &b, &err);
        CHECK_MSG(st == PP_ERR_INPUT && b == NULL && strstr(err.msg, files[i].want),
                  "file %zu: '%s', expected '%s'", i, st ? err.msg : "(opened)", files[i].want);
        pp_bpe_close(b);
    }
    char none[400];
    snprintf(none, sizeof none, "%s/none.json", tmpdir);
    pp_bpe *b = NULL;
    pp_error err;
    CHECK(pp_bpe_open_json(none, &b, &err) == PP_ERR_INPUT && b == NULL &&
          strstr(err.msg, "none.json: No such file"));
}

int main(void)
{
    check_mkdtemp(tmpdir, sizeof tmpdir, "bpe-json");
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.json", tmpdir);
    snprintf(merges_path, sizeof merges_path, "%s/merges.txt", tmpdir);
    snprintf(json_path, sizeof json_path, "%s/tokenizer.json", tmpdir);
    bpe_test_write_files(vocab_path, merges_path, 1);
    test_same_as_files();
    test_added();
    test_refusals();
    check_rmtree(tmpdir);
    return check_summary("bpe_json");
}
