/*
 * bpe_json.c - GPT-2's tokenizer from Hugging Face's tokenizer.json (see
 * io/bpe.h, pp_bpe_open_json): the one file that holds the vocabulary
 * (model.vocab), the merges (model.merges, "a b" strings or [a, b] pairs)
 * and the added tokens (added_tokens), read into bpe.c's tables. The file
 * must describe GPT-2's encoding, which is the only one bpe.c runs: a BPE
 * model over the byte alphabet, the ByteLevel pre-tokenizer with GPT-2's
 * pattern and no space put before the text, no normalizer, no BPE dropout,
 * no subword prefix or suffix, no byte fallback, and a ByteLevel decoder (or
 * none). Anything else is refused, naming the key, rather than encoded with
 * other ids than Hugging Face's.
 */
#include "runtime/io/bpe.h"
#include "runtime/io/bpe_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a key's value must be: absent or null, or one of these. */
static bool is_null(const json_t *v) { return !v || json_is_null(v); }

static bool is_false(const json_t *v) { return is_null(v) || json_is_false(v); }

static bool is_empty_string(const json_t *v)
{
    return is_null(v) || (json_is_string(v) && json_string_length(v) == 0);
}

static const char *type_of(const json_t *o)
{
    const json_t *t = json_is_object(o) ? json_object_get(o, "type") : NULL;
    return json_is_string(t) ? json_string_value(t) : "without a type";
}

/* The component at key is absent, null or of type ByteLevel. */
static bool byte_level_or_null(const json_t *o)
{
    return is_null(o) || !strcmp(type_of(o), "ByteLevel");
}

/* Everything but the tables: what must hold for the ids to be GPT-2's. */
static pp_status check_encoding(const json_t *root, const char *path, pp_error *err)
{
    const json_t *model = json_object_get(root, "model");
    const json_t *norm = json_object_get(root, "normalizer");
    const json_t *pre = json_object_get(root, "pre_tokenizer");
    const json_t *dec = json_object_get(root, "decoder");
    if (!json_is_object(model))
        return pp_error_set(err, PP_ERR_INPUT, "%s: no model (a tokenizer.json holds its "
                            "vocabulary and merges in model)", path);
    const json_t *type = json_object_get(model, "type");
    if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "BPE")))
        return pp_error_set(err, PP_ERR_INPUT, "%s: model.type is %s, not BPE (GPT-2's "
                            "byte-level BPE is read)", path,
                            json_is_string(type) ? json_string_value(type) : "not a string");
    const json_t *dropout = json_object_get(model, "dropout");
    if (!is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return pp_error_set(err, PP_ERR_INPUT, "%s: model.dropout is set: BPE dropout skips "
                            "merges at random, GPT-2 encodes without it", path);
    static const char *const affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++)
        if (!is_empty_string(json_object_get(model, affix[i])))
            return pp_error_set(err, PP_ERR_INPUT, "%s: model.%s is set: GPT-2's tokens have "
                                "no such mark", path, affix[i]);
    static const char *const off[] = {"byte_fallback", "ignore_merges"};
    for (int i = 0; i < 2; i++)
        if (!is_false(json_object_get(model, off[i])))
            return pp_error_set(err, PP_ERR_INPUT, "%s: model.%s is true: not GPT-2's encoding",
                                path, off[i]);
    if (!is_null(norm))
        return pp_error_set(err, PP_ERR_INPUT, "%s: normalizer %s: GPT-2 encodes the text as "
                            "it is, with no normalizer", path, type_of(norm));
    if (is_null(pre) || strcmp(type_of(pre), "ByteLevel") != 0)
        return pp_error_set(err, PP_ERR_INPUT, "%s: pre_tokenizer %s: GPT-2's is ByteLevel "
                            "(its pattern over the text's bytes)", path,
                            is_null(pre) ? "null" : type_of(pre));
    /* Hugging Face's ByteLevel defaults: a space before the text, the pattern on */
    const json_t *prefix = json_object_get(pre, "add_prefix_space");
    if (!json_is_false(prefix))
        return pp_error_set(err, PP_ERR_INPUT, "%s: pre_tokenizer.add_prefix_space is %s: "
                            "GPT-2 puts no space before the text", path,
                            prefix ? "true" : "absent (true by default)");
    const json_t *regex = json_object_get(pre, "use_regex");
    if (regex && !json_is_true(regex))
        return pp_error_set(err, PP_ERR_INPUT, "%s: pre_tokenizer.use_regex is false: GPT-2 "
                            "cuts the text by its pattern", path);
    if (!byte_level_or_null(dec))
        return pp_error_set(err, PP_ERR_INPUT, "%s: decoder %s: GPT-2's is ByteLevel (each "
                            "token's bytes)", path, type_of(dec));
    return PP_OK;
}

/* GPT-2's byte alphabet, the other way (bpe.c's byte_of): the character
 * that stands for byte c, as UTF-8 into out (1 or 2 bytes); its length. */
static int alphabet_char(unsigned char c, char *out)
{
    unsigned cp = c;
    if (c <= 0x20) cp = 256 + c;
    else if (c >= 0x7F && c <= 0xA0) cp = 256 + 33 + (c - 0x7F);
    else if (c == 0xAD) cp = 256 + 67;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* added_tokens: each {id, content, ...} a token of the vocabulary (the same
 * id where model.vocab has its bytes; added to vocab, the file's own
 * model.vocab, where it has not: Hugging Face's added vocabulary); list and
 * n the added tokens. */
static pp_status read_added(const json_t *root, const char *path, json_t *vocab,
                            int32_t **list, int *n, pp_error *err)
{
    const json_t *added = json_object_get(root, "added_tokens");
    *list = NULL;
    *n = 0;
    if (is_null(added)) return PP_OK;
    if (!json_is_array(added))
        return pp_error_set(err, PP_ERR_INPUT, "%s: added_tokens is not a list", path);
    const size_t count = json_array_size(added);
    if (count == 0) return PP_OK;
    if (!(*list = malloc(count * sizeof **list)))
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
    size_t k;
    const json_t *t;
    json_array_foreach(added, k, t) {
        const json_t *id = json_object_get(t, "id"), *content = json_object_get(t, "content");
        if (!json_is_integer(id) || !json_is_string(content) || json_string_length(content) == 0)
            return pp_error_set(err, PP_ERR_INPUT, "%s: added_tokens[%zu] needs an integer id "
                                "and a content that is not empty", path, k);
        const json_int_t v = json_integer_value(id);
        const char *text = json_string_value(content);
        if (v < 0 || v > PP_BPE_MAX_ID)
            return pp_error_set(err, PP_ERR_INPUT, "%s: added_tokens[%zu] (\"%.64s\") has id "
                                "%lld (ids are 0 to %d)", path, k, text, (long long)v,
                                PP_BPE_MAX_ID);
        static const char *const flags[] = {"lstrip", "rstrip", "single_word"};
        for (int i = 0; i < 3; i++)
            if (!is_false(json_object_get(t, flags[i])))
                return pp_error_set(err, PP_ERR_INPUT, "%s: added_tokens[%zu] (\"%.64s\") has "
                                    "%s: not read (GPT-2's added tokens match their text "
                                    "exactly)", path, k, text, flags[i]);
        /* the token's bytes, spelled in the byte alphabet as model.vocab's keys */
        const size_t len = json_string_length(content);
        char *key = malloc(2 * len + 1);
        if (!key) return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
        size_t at = 0;
        for (size_t i = 0; i < len; i++) at += (size_t)alphabet_char((unsigned char)text[i],
                                                                      key + at);
        key[at] = '\0';
        const json_t *had = json_object_get(vocab, key);
        pp_status st = PP_OK;
        if (had && json_integer_value(had) != v)
            st = pp_error_set(err, PP_ERR_INPUT, "%s: added_tokens[%zu] (\"%.64s\") has id "
                              "%lld, model.vocab %lld", path, k, text, (long long)v,
                              (long long)json_integer_value(had));
        else if (!had && json_object_set_new(vocab, key, json_integer(v)) != 0)
            st = pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
        free(key);
        if (st != PP_OK) return st;
        bool twice = false;
        for (int i = 0; i < *n; i++) twice |= (*list)[i] == (int32_t)v;
        if (!twice) (*list)[(*n)++] = (int32_t)v;
    }
    return PP_OK;
}

/* model.merges: "a b" strings (merges.txt's lines) or [a, b] pairs. */
static pp_status read_merges(pp_bpe *b, const json_t *merges, const char *path, pp_error *err)
{
    if (!json_is_array(merges))
        return pp_error_set(err, PP_ERR_INPUT, "%s: model.merges is not a list", path);
    size_t k;
    const json_t *m;
    char *pair = NULL;
    size_t cap = 0;
    pp_status st = PP_OK;
    json_array_foreach(merges, k, m) {
        const pp_bpe_at at = {path, 0, (int)k};
        if (json_is_array(m) && json_array_size(m) == 2 &&
            json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            st = pp_bpe_add_merge(b, json_string_value(json_array_get(m, 0)),
                                  json_string_value(json_array_get(m, 1)), at, err);
        } else if (json_is_string(m)) {
            const size_t n = json_string_length(m);
            if (cap < n + 1) {
                free(pair);
                cap = 2 * n + 16;
                if (!(pair = malloc(cap))) {
                    st = pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
                    break;
                }
            }
            memcpy(pair, json_string_value(m), n + 1);
            char *space = strchr(pair, ' ');
            if (strlen(pair) != n || !space || space == pair || !space[1] ||
                strchr(space + 1, ' ')) {
                st = pp_error_set(err, PP_ERR_INPUT, "%s: model.merges[%zu] (\"%.64s\") is not "
                                  "a merge (two tokens and one space between)", path, k, pair);
                break;
            }
            *space = '\0';
            st = pp_bpe_add_merge(b, pair, space + 1, at, err);
        } else {
            st = pp_error_set(err, PP_ERR_INPUT, "%s: model.merges[%zu] is neither \"a b\" nor "
                              "[a, b]", path, k);
        }
        if (st != PP_OK) break;
    }
    free(pair);
    return st;
}

pp_status pp_bpe_open_files(const char *vocab_path, const char *merges_path, pp_bpe **out,
                            pp_error *err)
{
    return merges_path && merges_path[0] ? pp_bpe_open(vocab_path, merges_path, out, err)
                                         : pp_bpe_open_json(vocab_path, out, err);
}

pp_status pp_bpe_open_json(const char *path, pp_bpe **out, pp_error *err)
{
    *out = NULL;
    if (!path) return pp_error_set(err, PP_ERR_INVALID, "bpe: NULL path");
    json_t *root;
    PP_TRY(pp_bpe_load_json(path, &root, err));
    pp_bpe *b = NULL;
    pp_status st = json_is_object(root) ? check_encoding(root, path, err)
                                        : pp_error_set(err, PP_ERR_INPUT, "%s: not a "
                                                       "tokenizer.json (a JSON object)", path);
    const json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab"); /* root's, which is ours to change */
    if (st == PP_OK && !json_is_object(vocab))
        st = pp_error_set(err, PP_ERR_INPUT, "%s: model.vocab is not an object of token "
                          "strings to ids", path);
    int32_t *added = NULL;
    int n_added = 0;
    if (st == PP_OK) st = read_added(root, path, vocab, &added, &n_added, err);
    if (st == PP_OK) st = pp_bpe_new(&b, err);
    if (st == PP_OK) {
        char what[PP_ERROR_MSG_MAX / 2];
        snprintf(what, sizeof what, "%s: model.vocab", path);
        st = pp_bpe_vocab_from_json(b, vocab, what, err);
    }
    if (st == PP_OK) st = read_merges(b, json_object_get(model, "merges"), path, err);
    if (st == PP_OK) st = pp_bpe_ready(b, err);
    json_decref(root);
    if (st != PP_OK) {
        free(added);
        pp_bpe_close(b);
        return st;
    }
    b->added = added;
    b->n_added = n_added;
    *out = b;
    return PP_OK;
}
