/*
 * test_generate.c - pp_pipeline_generate's forwards (pipeline.h): with the
 * cache of keys and values each new token's forward computes its own
 * position alone; without it (no_cache, and past the window) a forward
 * computes the sequence's positions rounded up to window_step, at most
 * block_size, instead of the whole window every time. A small GPT-2
 * (block_size 150) on 1 and 2 CPU stages, fp32 and bf16:
 *
 *   same     the tokens of window steps 64 (the default, 0), 7 and 1 without
 *            the cache, and those with it, are those of the whole window
 *            (step 150), greedy and sampled, from prompts of 1, 63, 64, 65
 *            and 140 tokens (the lengths cross the steps' multiples and the
 *            window's end, where the cache gives way to windows: 140 + 40 >
 *            150), and on 2 stages (with the cache) those of 1 stage
 *   on_token each token in order as it is sampled; returning false ends the
 *            generation there (PP_OK, nothing written after)
 *   after    a generation after a training step samples what one from the
 *            step's checkpoint samples (fp32 and bf16: the bf16 weight
 *            copies made anew), and a step after it has the loss of the same
 *            step without it
 *
 * The whole-window tokens come from the same call (window_step 150), so
 * what this holds is that the shorter forwards change nothing that is
 * sampled; the bits of the windows' logits rows are those of the whole
 * window's on the CPU backend (checked by hand when the windows were
 * written: 70 rows of an 85 M model, 200 of this one, fp32 and bf16), the
 * cache's within rounding of them (its products are of other shapes:
 * tests/models/test_units.c holds a block's decoded rows to the whole
 * forward's).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/pipeline.h"
#include "tests/check.h"

static char tmpdir[200];

enum { BLOCK = 150, TOKENS = 40 };

/* A corpus of byte text (lines of words drawn from a small list). */
static bool write_corpus(void)
{
    static const char *const words[] = {"pipe", "stage", "copy", "event", "stream", "token",
                                        "the",  "a",     "of",   "runs",  "waits",  "\n"};
    char path[300];
    snprintf(path, sizeof path, "%s/corpus.txt", tmpdir);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    unsigned x = 12345;
    for (int i = 0; i < 6000; i++) {
        x = x * 1103515245u + 12345u;
        fprintf(f, "%s ", words[(x >> 16) % (sizeof words / sizeof words[0])]);
    }
    return fclose(f) == 0;
}

static pp_pipeline *make(int stages, bool bf16)
{
    char text[2048];
    snprintf(text, sizeof text,
             "model: {name: gpt2, n_layer: 3, n_head: 2, n_embd: 32, vocab_size: 256, "
             "block_size: %d}\n"
             "batch: {size: 4, micro_batches: 2}\n"
             "precision: %s\n"
             "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
             "data: {format: text, file: \"%s/corpus.txt\"}\n"
             "seed: 3\nsteps: 2\nstages:\n%s",
             BLOCK, bf16 ? "bf16" : "fp32", tmpdir,
             stages == 1 ? "  - {device: cpu:0, layers: [wte, wpe, h, ln_f, lm_head]}\n"
                         : "  - {device: cpu:0, layers: [wte, wpe, h.0]}\n"
                           "  - {device: cpu:1, layers: [h.1, h.2, ln_f, lm_head]}\n");
    pp_plan *plan = NULL;
    pp_diag diag;
    pp_diag_clear(&diag);
    char buf[1024];
    if (pp_plan_parse_string("gen.yaml", text, strlen(text), &plan, &diag) != PP_OK) {
        CHECK_MSG(0, "plan: %s", pp_diag_format(&diag, buf, sizeof buf));
        return NULL;
    }
    pp_error err;
    pp_pipeline *p = NULL;
    pp_status st = pp_pipeline_new(plan, NULL, &p, &err);
    pp_plan_free(plan);
    CHECK_MSG(st == PP_OK, "pipeline: %s", err.msg);
    /* a trained step first, so that the weights are not the initial ones */
    if (st == PP_OK) CHECK_OK(pp_pipeline_step(p, NULL, &err), &err);
    return st == PP_OK ? p : NULL;
}

/* out (n_prompt + TOKENS) from a prompt of n_prompt bytes of the corpus */
static bool generate_as(pp_pipeline *p, int n_prompt, double temperature, int step,
                        bool no_cache, int32_t *out)
{
    int32_t prompt[BLOCK];
    for (int i = 0; i < n_prompt; i++) prompt[i] = "the pipe runs the stage "[i % 24];
    const pp_generate_options o = {.tokens = TOKENS, .temperature = temperature, .top_k = 20,
                                   .seed = 9, .window_step = step, .no_cache = no_cache};
    pp_error err;
    const pp_status st = pp_pipeline_generate(p, prompt, n_prompt, &o, out, &err);
    CHECK_MSG(st == PP_OK, "generate (prompt %d, step %d%s): %s", n_prompt, step,
              no_cache ? ", no cache" : "", err.msg);
    return st == PP_OK;
}

/* with the cache of keys and values (the default) */
static bool generate(pp_pipeline *p, int n_prompt, double temperature, int step, int32_t *out)
{
    return generate_as(p, n_prompt, temperature, step, false, out);
}

static void test_same(bool bf16)
{
    static const int prompts[] = {1, 63, 64, 65, 140};
    static const int steps[] = {0, 7, 1};
    static const double temps[] = {0.0, 0.9};
    pp_pipeline *one = make(1, bf16), *two = make(2, bf16);
    if (!one || !two) {
        pp_pipeline_free(one);
        pp_pipeline_free(two);
        return;
    }
    int32_t whole[BLOCK + TOKENS], got[BLOCK + TOKENS], cut[BLOCK + TOKENS];
    for (size_t a = 0; a < sizeof prompts / sizeof prompts[0]; a++) {
        const int n = prompts[a], len = n + TOKENS;
        for (size_t b = 0; b < sizeof temps / sizeof temps[0]; b++) {
            const char *how = temps[b] == 0 ? "greedy" : "sampled";
            if (!generate_as(one, n, temps[b], BLOCK, true, whole)) continue;
            for (size_t c = 0; c < sizeof steps / sizeof steps[0]; c++) {
                if (!generate_as(one, n, temps[b], steps[c], true, got)) continue;
                CHECK_MSG(!memcmp(got, whole, (size_t)len * sizeof *got),
                          "%s, %s, prompt %d: window step %d samples other tokens than the "
                          "whole window",
                          bf16 ? "bf16" : "fp32", how, n, steps[c]);
            }
            if (generate(one, n, temps[b], 0, got))
                CHECK_MSG(!memcmp(got, whole, (size_t)len * sizeof *got),
                          "%s, %s, prompt %d: the cache of keys and values samples other "
                          "tokens than the whole window",
                          bf16 ? "bf16" : "fp32", how, n);
            if (generate(two, n, temps[b], 0, cut))
                CHECK_MSG(!memcmp(cut, whole, (size_t)len * sizeof *cut),
                          "%s, %s, prompt %d: 2 stages sample other tokens than 1",
                          bf16 ? "bf16" : "fp32", how, n);
        }
    }
    pp_pipeline_free(one);
    pp_pipeline_free(two);
}

/* What a generation reads and leaves: one after a training step samples
 * what a pipeline loaded from that step's checkpoint samples (the weights
 * as updated, their bf16 copies made anew: before, a bf16 pipeline
 * generated from the copies its step's forward had made, and 1 and 2
 * stages disagreed), and a step after it has the loss of the same step
 * without it. */
static void test_after(bool bf16)
{
    const char *prec = bf16 ? "bf16" : "fp32";
    char path[300];
    snprintf(path, sizeof path, "%s/after.safetensors", tmpdir);
    pp_pipeline *gen = make(2, bf16), *plain = make(2, bf16), *loaded = make(2, bf16);
    int32_t a[BLOCK + TOKENS], b[BLOCK + TOKENS];
    pp_error err;
    if (gen && plain && loaded) {
        CHECK_OK(pp_pipeline_save(gen, path, true, &err), &err);
        CHECK_OK(pp_pipeline_load(loaded, path, &err), &err);
        unlink(path);
        if (generate(gen, 5, 0.9, 0, a) && generate(loaded, 5, 0.9, 0, b))
            CHECK_MSG(!memcmp(a, b, (5 + TOKENS) * sizeof *a),
                      "%s: a generation after a step samples other tokens than one from the "
                      "step's checkpoint",
                      prec);
        pp_step_result ra, rb;
        CHECK_OK(pp_pipeline_step(gen, &ra, &err), &err);
        CHECK_OK(pp_pipeline_step(plain, &rb, &err), &err);
        CHECK_MSG(ra.loss == rb.loss,
                  "%s: the step after a generation: loss %.9g, without one %.9g", prec,
                  ra.loss, rb.loss);
    }
    pp_pipeline_free(gen);
    pp_pipeline_free(plain);
    pp_pipeline_free(loaded);
}

/* on_token: every token in order as it is sampled; false ends the generation */
typedef struct seen {
    int n, stop_at; /* stop_at: the index whose call returns false (-1: none) */
    int index[TOKENS];
    int32_t token[TOKENS];
} seen;

static bool see(void *user, int index, int32_t token)
{
    seen *s = user;
    if (s->n < TOKENS) {
        s->index[s->n] = index;
        s->token[s->n] = token;
    }
    s->n++;
    return index != s->stop_at;
}

static void test_on_token(void)
{
    pp_pipeline *p = make(2, false);
    if (!p) return;
    int32_t prompt[5] = {'t', 'h', 'e', ' ', 'p'}, all[5 + TOKENS], part[5 + TOKENS];
    seen a = {.stop_at = -1}, b = {.stop_at = 6};
    pp_generate_options o = {.tokens = TOKENS, .temperature = 0.9, .top_k = 20, .seed = 4,
                             .on_token = see, .user = &a};
    pp_error err;
    CHECK_OK(pp_pipeline_generate(p, prompt, 5, &o, all, &err), &err);
    CHECK_MSG(a.n == TOKENS, "on_token called %d times for %d tokens", a.n, TOKENS);
    int bad = 0;
    for (int i = 0; i < a.n && i < TOKENS; i++)
        bad += a.index[i] != i || a.token[i] != all[5 + i];
    CHECK_MSG(bad == 0, "on_token: %d of %d calls not (i, token i) in order", bad, a.n);
    memset(part, 0xff, sizeof part);
    o.user = &b;
    CHECK_OK(pp_pipeline_generate(p, prompt, 5, &o, part, &err), &err);
    CHECK_MSG(b.n == 7, "on_token returning false at index 6: %d calls (want 7)", b.n);
    CHECK_MSG(!memcmp(part, all, (5 + 7) * sizeof *part),
              "the tokens before the stop are not those of the whole run");
    CHECK_MSG(part[5 + 7] == -1, "a token written after the stop: %d", part[5 + 7]);
    pp_pipeline_free(p);
}

int main(void)
{
    if (!check_mkdtemp(tmpdir, sizeof tmpdir, "pp-generate")) return 1;
    if (!write_corpus()) {
        fprintf(stderr, "cannot write the corpus in %s\n", tmpdir);
        return 1;
    }
    test_same(false);
    test_same(true);
    test_after(false);
    test_after(true);
    test_on_token();
    check_rmtree(tmpdir);
    return check_summary("generate");
}
