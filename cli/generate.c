/*
 * generate.c - pipeline-run's --generate (see generate.h): the prompt as
 * token ids (a text model's bytes, or its GPT-2 tokens where the plan names
 * a tokenizer; a token model's ids, or its tokenizer's tokens of the text),
 * pp_pipeline_generate, the text printed.
 */
#include "cli/generate.h"
#include "cli/signals.h"
#include "runtime/io/bpe.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool pp_cli_generate_option(pp_cli_generate_args *a, const char *name, const char *value,
                            char *msg, size_t n)
{
    char *end;
    errno = 0;
    if (!strcmp(name, "--generate")) {
        a->prompt = value;
        return true;
    }
    if (!strcmp(name, "--tokens")) {
        long v = strtol(value, &end, 10);
        a->tokens_given = true;
        a->tokens = (int)v;
        if (*value && !*end && !errno && v >= 0 && v <= 1000000) return true;
        snprintf(msg, n, "--tokens: '%.64s' is not a number of tokens (0 to 1000000)", value);
        return false;
    }
    if (!strcmp(name, "--temperature")) {
        double v = strtod(value, &end);
        a->temperature_given = true;
        a->temperature = v;
        if (*value && !*end && !errno && isfinite(v) && v >= 0) return true;
        snprintf(msg, n, "--temperature: '%.64s' is not a number >= 0", value);
        return false;
    }
    if (!strcmp(name, "--top-k")) {
        long v = strtol(value, &end, 10);
        a->top_k_given = true;
        a->top_k = (int)v;
        if (*value && !*end && !errno && v >= 0 && v <= 1 << 24) return true;
        snprintf(msg, n, "--top-k: '%.64s' is not a count of tokens (0: all)", value);
        return false;
    }
    unsigned long long v = strtoull(value, &end, 10);
    a->seed_given = true;
    a->seed = v;
    if (*value && *value != '-' && !*end && !errno) return true;
    snprintf(msg, n, "--seed: '%.64s' is not a non-negative integer", value);
    return false;
}

/* The prompt as ids: its tokens through bpe, else a text model's bytes or a
 * token model's numbers. */
static int prompt_ids(const pp_plan *plan, pp_bpe *bpe, const char *prompt, int32_t **out,
                      int *n)
{
    const size_t len = strlen(prompt);
    *n = 0;
    if (bpe) {
        int64_t count = 0;
        pp_error err;
        if (pp_bpe_encode(bpe, prompt, len, "--generate", out, &count, &err) != PP_OK) {
            fprintf(stderr, "pipeline-run: %s\n", err.msg);
            return err.code == PP_ERR_INPUT ? 2 : 1;
        }
        if (count == 0 || count > INT32_MAX / 2) {
            fprintf(stderr, "pipeline-run: --generate: the prompt is %s\n",
                    count ? "too long" : "empty");
            return 2;
        }
        *n = (int)count;
        return 0;
    }
    *out = malloc((len + 1) * sizeof **out);
    if (!*out) {
        fprintf(stderr, "pipeline-run: out of host memory\n");
        return 1;
    }
    if (plan->data.format == PP_PLAN_DATA_TEXT) {
        for (size_t i = 0; i < len; i++) {
            const int byte = (unsigned char)prompt[i];
            if (byte >= plan->model.gpt2.vocab_size) {
                fprintf(stderr, "pipeline-run: --generate: the prompt's byte 0x%02x (at %zu) is "
                        "not below the vocabulary size %d\n", byte, i,
                        plan->model.gpt2.vocab_size);
                return 2;
            }
            (*out)[(*n)++] = byte;
        }
        if (*n == 0) {
            fprintf(stderr, "pipeline-run: --generate: the prompt is empty\n");
            return 2;
        }
        return 0;
    }
    for (const char *p = prompt; *p;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= plan->model.gpt2.vocab_size) {
            fprintf(stderr, "pipeline-run: --generate: '%.32s' is not a token id below the "
                    "vocabulary size %d (format tokens takes ids, e.g. \"15496 11\")\n", p,
                    plan->model.gpt2.vocab_size);
            return 2;
        }
        (*out)[(*n)++] = (int32_t)v;
        p = end;
    }
    if (*n == 0) {
        fprintf(stderr, "pipeline-run: --generate: the prompt is empty\n");
        return 2;
    }
    return 0;
}

/* One token as the output shows it: its bytes through the tokenizer (an id
 * it has no token for as <|ID|>), a byte of text (an id above the bytes, of
 * a vocabulary padded past 256, as <|ID|>), or an id after a space (none
 * before the first of the line). */
static void put_token(const pp_bpe *bpe, bool text, int32_t token, bool first)
{
    size_t len;
    const char *bytes = bpe ? pp_bpe_token(bpe, token, &len) : NULL;
    if (bytes)
        fwrite(bytes, 1, len, stdout);
    else if (bpe || (text && (token < 0 || token > 255)))
        printf("<|%d|>", token);
    else if (text)
        putchar(token);
    else
        printf("%s%d", first ? "" : " ", token);
}

typedef struct shown {
    const pp_bpe *bpe;  /* the plan's tokenizer, or NULL */
    bool text, printer; /* printer: this rank prints (rank 0) */
    pp_comm *comm;      /* the job's, or NULL */
    int tokens;         /* sampled so far */
    int sig;            /* the signal that stopped the generation, 0 none */
    struct timespec first; /* when the first token came */
    pp_status failed;   /* of a failed agreement on stopping (then err) */
    pp_error err;
} shown;

/* pp_generate_options.on_token: each new token printed as it comes; a
 * SIGINT or SIGTERM ends the generation after the token in hand (every rank
 * agreeing, as before a training step). */
static bool show_token(void *user, int index, int32_t token)
{
    shown *sh = user;
    (void)index;
    if (sh->tokens++ == 0) clock_gettime(CLOCK_MONOTONIC, &sh->first);
    if (sh->printer) {
        put_token(sh->bpe, sh->text, token, false);
        fflush(stdout);
    }
    if ((sh->failed = pp_cli_stop_agree(sh->comm, &sh->sig, &sh->err)) != PP_OK) return false;
    return sh->sig == 0;
}

static double seconds(struct timespec a, struct timespec b)
{
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

int pp_cli_generate(const pp_plan *plan, const pp_pipeline_options *opts, const char *load,
                    const pp_cli_generate_args *a)
{
    int32_t *prompt = NULL, *seq = NULL;
    pp_bpe *bpe = NULL;
    if (plan->data.vocab) {
        pp_error e;
        if (pp_bpe_open_files(plan->data.vocab, plan->data.merges, &bpe, &e) != PP_OK) {
            fprintf(stderr, "pipeline-run: data.tokenizer: %s\n", e.msg);
            return e.code == PP_ERR_INPUT ? 2 : 1;
        }
        if (plan->data.tokenizer_special && pp_bpe_use_special(bpe) < 0) {
            fprintf(stderr, "pipeline-run: out of host memory\n");
            pp_bpe_close(bpe);
            return 1;
        }
    }
    int n = 0, rc = prompt_ids(plan, bpe, a->prompt, &prompt, &n);
    if (rc != 0) {
        free(prompt);
        pp_bpe_close(bpe);
        return rc;
    }
    /* rank 0 prints the prompt once the checkpoint has loaded, then each
     * token as it is sampled */
    const bool printer = !opts->comm || pp_comm_rank(opts->comm) == 0;
    shown sh = {.bpe = bpe, .text = plan->data.format == PP_PLAN_DATA_TEXT, .printer = printer,
                .comm = opts->comm};
    const pp_generate_options o = {.tokens = a->tokens_given ? a->tokens : 200,
                                   .temperature = a->temperature_given ? a->temperature : 1.0,
                                   .top_k = a->top_k, .seed = a->seed_given ? a->seed : plan->seed,
                                   .no_cache = a->no_cache,
                                   .on_token = show_token, .user = &sh};
    seq = malloc(((size_t)n + (size_t)o.tokens) * sizeof *seq);
    pp_pipeline *p = NULL;
    pp_error err;
    pp_status s = seq ? PP_OK : pp_error_set(&err, PP_ERR_OOM, "out of host memory");
    if (s == PP_OK) s = pp_pipeline_new(plan, opts, &p, &err);
    if (s == PP_OK) s = pp_pipeline_load(p, load, &err);
    const bool shows = s == PP_OK && printer;
    if (shows) {
        for (int i = 0; i < n; i++) put_token(bpe, sh.text, prompt[i], i == 0);
        fflush(stdout);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (s == PP_OK) s = pp_pipeline_generate(p, prompt, n, &o, seq, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (shows) putchar('\n'); /* after what was printed, also when it stopped */
    if (s == PP_OK && sh.failed != PP_OK) {
        err = sh.err;
        s = sh.failed;
    }
    if (s == PP_OK && sh.sig) {
        fflush(stdout);
        fprintf(stderr, "pipeline-run: stopped by %s after %d of %d tokens\n",
                pp_cli_signal_name(sh.sig), sh.tokens, o.tokens);
        rc = 128 + sh.sig;
    } else if (s == PP_OK && shows && sh.tokens > 0) {
        /* the whole; the first token (the prompt's forward) and the others apart */
        const double secs = seconds(t0, t1), first = seconds(t0, sh.first);
        fflush(stdout);
        fprintf(stderr, "generated %d tokens in %.2f s (%.1f tokens/s) from a prompt of %d",
                sh.tokens, secs, secs > 0 ? sh.tokens / secs : 0.0, n);
        if (sh.tokens > 1 && secs > first)
            fprintf(stderr, "; the first after %.3f s, the others at %.1f tokens/s", first,
                    (sh.tokens - 1) / (secs - first));
        fputc('\n', stderr);
    }
    if (s != PP_OK) {
        fprintf(stderr, "pipeline-run: %s\n", err.msg);
        rc = s == PP_ERR_INPUT || s == PP_ERR_INVALID ? 2 : 1;
    }
    pp_pipeline_free(p);
    pp_bpe_close(bpe);
    free(prompt);
    free(seq);
    return rc;
}
