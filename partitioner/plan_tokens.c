/*
 * plan_tokens.c - token data in the plan (`data: {format: tokens | text,
 * file, block_size}`, `eval: {file}`; plan_source.c walks the sections and
 * hands these keys here): the keys while the plan is read, then,
 * once the rest of the plan is valid, the model against its data (GPT-2
 * reads tokens, in fp32; image models read images) and both files read whole as a
 * run would open them (runtime/io/tokens.h), so `--validate` finds a bad
 * header, a file shorter than one window or an id at or above
 * model.vocab_size, each reported at the key that names the file. A
 * tokenizer (`data.tokenizer: {vocab, merges}` or `{file}`, Hugging Face's
 * tokenizer.json; GPT-2's: runtime/io/bpe.h)
 * is read and checked likewise, against model.vocab_size, and a text file
 * is read through it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "partitioner/plan_walk.h"
#include "runtime/io/tokens.h"

static bool token_format(pp_plan_data_format f)
{
    return f == PP_PLAN_DATA_TOKENS || f == PP_PLAN_DATA_TEXT;
}

void pp_walk_token_file(pp_walk *w, const pp_ynode *section, const pp_ynode *file,
                        const pp_ynode *block, bool eval, pp_plan_data *d)
{
    pp_plan *p = w->plan;
    const char *name = eval ? "eval" : "data";
    char what[32];
    snprintf(what, sizeof what, "%s.file", name);
    if (!file) {
        if (eval)
            pp_walk_error(w, section, "eval of token data needs file (its validation tokens, in "
                          "the data's format)");
        else
            pp_walk_error(w, section, "data format %s needs file (%s)",
                          pp_plan_data_format_name(d->format),
                          d->format == PP_PLAN_DATA_TEXT ? "a text file" : "a .bin token file");
    } else {
        d->file_mark = pp_walk_mark(file);
        w->src[eval].file = file;
        d->file = pp_walk_path(w, file, what, false);
    }
    if (eval) return; /* windows of the training data's block_size */
    const bool gpt2 = w->model_ok && p->model.kind == PP_MODEL_GPT2;
    const int positions = gpt2 ? p->model.gpt2.block_size : 0;
    d->block_size = positions;
    if (block) {
        if (!pp_walk_int32(w, block, "data.block_size", 1, 1 << 20, &d->block_size)) {
            w->size_ok = false;
            return;
        }
        if (gpt2 && d->block_size > positions) {
            pp_walk_error(w, block, "data.block_size %d is above the model's block_size %d (its "
                          "positions)", d->block_size, positions);
            w->size_ok = false;
            return;
        }
    }
    if (gpt2) p->model.gpt2.seq_len = d->block_size;
}

void pp_walk_tokenizer(pp_walk *w, const pp_ynode *n, pp_plan_data *d)
{
    static const char *const keys[] = {"vocab", "merges", "special", "file"};
    const pp_ynode *f[4];
    if (!pp_walk_map(w, n, "data.tokenizer", keys, 4, f)) return;
    if (f[2]) pp_walk_bool(w, f[2], "data.tokenizer.special", &d->tokenizer_special);
    if (f[3] && (f[0] || f[1])) {
        pp_walk_error(w, f[0] ? f[0] : f[1], "data.tokenizer takes file (a tokenizer.json) or "
                      "vocab and merges, not both");
        return;
    }
    if (f[3]) { /* Hugging Face's one file */
        d->vocab = pp_walk_path(w, f[3], "data.tokenizer.file", false);
        if (!d->vocab) return;
        d->tokenizer_mark = pp_walk_mark(n);
        w->src[0].tokenizer = n;
        return;
    }
    if (!f[0] || !f[1]) {
        pp_walk_error(w, n, "data.tokenizer needs vocab and merges (Hugging Face's vocab.json "
                      "and merges.txt, or OpenAI's encoder.json and vocab.bpe), or file (Hugging "
                      "Face's tokenizer.json)");
        return;
    }
    char *vocab = pp_walk_path(w, f[0], "data.tokenizer.vocab", false);
    char *merges = pp_walk_path(w, f[1], "data.tokenizer.merges", false);
    if (!vocab || !merges) {
        free(vocab);
        free(merges);
        return;
    }
    d->vocab = vocab;
    d->merges = merges;
    d->tokenizer_mark = pp_walk_mark(n);
    w->src[0].tokenizer = n;
}

/* What opening path as a run would refuse (text through bpe when not NULL,
 * tokenized only where its size leaves its count in doubt); a problem at n. */
static void check_file(pp_walk *w, const pp_ynode *n, const char *key, const char *path,
                       pp_bpe *bpe)
{
    const pp_plan *p = w->plan;
    pp_error e;
    if (pp_tokens_check(path, p->data.format == PP_PLAN_DATA_TEXT, bpe, p->model.gpt2.vocab_size,
                        p->data.block_size, &e) != PP_OK)
        pp_walk_error(w, n, "%s: %s", key, e.msg);
}

void pp_walk_check_tokens(pp_walk *w)
{
    const pp_plan *p = w->plan;
    if (!w->model_ok) return;
    const bool gpt2 = p->model.kind == PP_MODEL_GPT2, tokens = token_format(p->data.format);
    const pp_ynode *data = w->src[0].section;
    if (gpt2 && !tokens) {
        pp_walk_error(w, data ? data : w->model_node,
                      "model gpt2 reads tokens: data.format must be tokens or text, not %s",
                      pp_plan_data_format_name(p->data.format));
        return;
    }
    if (tokens && !gpt2) {
        pp_walk_error(w, data, "data format %s feeds a language model (model gpt2), "
                      "not %s", pp_plan_data_format_name(p->data.format), p->model.name);
        return;
    }
    if (!tokens) return;
    pp_bpe *bpe = NULL;
    if (p->data.vocab) {
        pp_error e;
        if (pp_bpe_open_files(p->data.vocab, p->data.merges, &bpe, &e) != PP_OK) {
            pp_walk_error(w, w->src[0].tokenizer, "data.tokenizer: %s", e.msg);
            return;
        }
        if (p->data.tokenizer_special && pp_bpe_use_special(bpe) == 0) {
            pp_walk_error(w, w->src[0].tokenizer, "data.tokenizer.special: %s",
                          p->data.merges ? "the vocabulary has no token of the form <|...|>"
                                         : "the tokenizer.json lists no added_tokens");
            pp_bpe_close(bpe);
            return;
        }
        if (pp_bpe_size(bpe) > p->model.gpt2.vocab_size) {
            pp_walk_error(w, w->src[0].tokenizer, "data.tokenizer has ids up to %d, beyond "
                          "model.vocab_size %d", pp_bpe_size(bpe) - 1,
                          p->model.gpt2.vocab_size);
            pp_bpe_close(bpe);
            return;
        }
    }
    if (p->data.file) check_file(w, w->src[0].file, "data.file", p->data.file, bpe);
    if (p->eval.enabled && p->eval.data.file)
        check_file(w, w->src[1].file, "eval.file", p->eval.data.file, bpe);
    pp_bpe_close(bpe);
}
