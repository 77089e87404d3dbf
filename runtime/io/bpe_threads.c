/*
 * bpe_threads.c - GPT-2's tokenizer on several threads (pp_bpe_set_threads,
 * pp_bpe_encode): a long text is cut into spans, each encoded by a thread
 * with scratch and cache of its own (bpe_work), cut where the pattern
 * always starts a piece and no special token stands across:
 *   - after a newline, before a printable ASCII character other than space:
 *     a piece holding the newline is all white space, and the character
 *     after it is none;
 *   - between an ASCII letter or digit and a space followed by one: the
 *     letter's or digit's piece (a run of letters, of digits, or a
 *     contraction) ends there, and ' ?\p{L}+' or ' ?\p{N}+' starts there.
 * Every span matches the pattern against the text up to the next special
 * token (or the end), as one thread would, so the lookahead of a white-space
 * run at a span's end sees what follows: the ids are the same bits as one
 * thread's, whatever the threads and spans.
 */
#define _GNU_SOURCE /* memmem */
#include "runtime/io/bpe.h"
#include "runtime/io/bpe_internal.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/core/thread_pool.h"

static bool ascii_alnum(unsigned char c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

/* Whether p (0 < p < len) starts a piece whatever the text around (see the
 * top of the file) with no special token standing across it. */
static bool cut_at(const pp_bpe *b, const char *text, size_t len, size_t p)
{
    const unsigned char l = (unsigned char)text[p - 1], c = (unsigned char)text[p];
    const bool starts = (l == '\n' && c > ' ' && c < 0x7f) ||
                        (c == ' ' && p + 1 < len && ascii_alnum(l) &&
                         ascii_alnum((unsigned char)text[p + 1]));
    if (!starts) return false;
    for (int k = 0; k < b->n_special; k++) {
        const size_t tl = b->len[b->special[k]], lo = p >= tl - 1 ? p - (tl - 1) : 0;
        const size_t hi = p + tl - 1 < len ? p + tl - 1 : len; /* occurrences starting < p */
        if (memmem(text + lo, hi - lo, b->blob + b->off[b->special[k]], tl)) return false;
    }
    return true;
}

typedef struct spans_job {
    const pp_bpe *b;
    const char *text, *what;
    size_t len;
    const size_t *cut;   /* span i: [cut[i], cut[i + 1]) */
    const size_t *after; /* the first special token at or after cut[i + 1] (len: none) */
    ids *out;          /* span i's ids */
    bool narrow;       /* each span's ids narrowed to 2 bytes once encoded */
    pp_status *st;
    pp_error *err;
} spans_job;

/* o's ids in 2 bytes each in the front of their own buffer, which then
 * gives back the rest (where the system keeps it, the ids are as good).
 * Front to back: element i's 2 bytes go below element i + 1's 4, so no
 * store reaches an id not yet read; each store by memcpy, which may alias
 * the int32 loads. */
static void narrow_ids(ids *o)
{
    char *at = (char *)o->v;
    for (size_t i = 0; i < o->n; i++) {
        const uint16_t x = (uint16_t)o->v[i];
        memcpy(at + i * sizeof x, &x, sizeof x);
    }
    void *v = realloc(o->v, o->n * sizeof(uint16_t));
    if (v) o->v = v;
}

static void encode_one_span(void *arg, int64_t i, int worker)
{
    const spans_job *j = arg;
    ids o = {0}; /* on this thread's stack: the spans' ids share cache lines */
    j->st[i] = pp_bpe_encode_span(j->b, &j->b->work[worker], j->text, j->len, j->cut[i],
                                  j->cut[i + 1], j->after[i], &o, j->what, &j->err[i]);
    if (j->narrow && j->st[i] == PP_OK && o.n > 0) narrow_ids(&o);
    j->out[i] = o;
}

void pp_bpe_set_threads(pp_bpe *b, int threads, size_t span)
{
    b->threads = threads < 1 ? 1 : threads > PP_BPE_MAX_THREADS ? PP_BPE_MAX_THREADS : threads;
    b->span = span ? span : PP_BPE_SPAN_DEFAULT;
}

/* The pool of b->threads - 1 workers and every thread's work, started
 * once; the threads to use: 1 where the system gave no thread or no memory. */
static int start_threads(pp_bpe *b)
{
    if (b->pool && pp_thread_pool_workers(b->pool) + 1 != b->threads) {
        pp_thread_pool_free(b->pool);
        b->pool = NULL;
    }
    pp_error e;
    if (!b->pool && pp_thread_pool_new(b->threads - 1, 0, &b->pool, &e) != PP_OK) return 1;
    const int want = pp_thread_pool_workers(b->pool) + 1;
    if (want > b->n_work) {
        bpe_work *w = realloc(b->work, (size_t)want * sizeof *w);
        if (w) {
            b->work = w;
            while (b->n_work < want && pp_bpe_work_init(b, &b->work[b->n_work])) b->n_work++;
            if (b->n_work < want) pp_bpe_work_free(&b->work[b->n_work]); /* half made */
        }
    }
    if (want < 2 || b->n_work < want) { /* a worker without work: none at all */
        pp_thread_pool_free(b->pool);
        b->pool = NULL;
        return 1;
    }
    return want;
}

/* pp_bpe_encode, or with narrow, pp_bpe_encode16: each span's ids
 * narrowed by the thread that made them, then put together. */
static pp_status encode(pp_bpe *b, const char *text, size_t len, const char *what, bool narrow,
                        void **out, int64_t *n, pp_error *err)
{
    *out = NULL;
    *n = 0;
    /* the spans: up to four a thread (threads slowed by other work leave
     * theirs to the others), each at least b->span bytes */
    size_t want = 1;
    if (b->threads > 1 && len / 2 >= b->span) {
        const size_t threads = (size_t)start_threads(b);
        if (threads > 1) want = len / b->span < threads * 4 ? len / b->span : threads * 4;
    }
    size_t *cut = malloc((want + 1) * sizeof *cut), *after = malloc(want * sizeof *after);
    ids *spans = calloc(want, sizeof *spans);
    pp_status *sts = calloc(want, sizeof *sts);
    pp_error *errs = calloc(want, sizeof *errs);
    if (!cut || !after || !spans || !sts || !errs) {
        free(cut), free(after), free(spans), free(sts), free(errs);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizing %s)", what);
    }
    size_t count = 1;
    cut[0] = 0;
    for (size_t i = 1; i < want; i++) { /* each cut at or after its share's place */
        size_t p = len / want * i;
        if (p <= cut[count - 1]) p = cut[count - 1] + 1;
        while (p < len && !cut_at(b, text, len, p)) p++;
        if (p >= len) break;
        cut[count++] = p;
    }
    cut[count] = len;
    /* from the last span back: the first special token at or after each span's end */
    for (size_t i = count, first = len; i-- > 0;) {
        after[i] = first;
        for (int k = 0; i > 0 && k < b->n_special; k++) {
            const size_t at = pp_bpe_special_in(b, k, text, len, cut[i], cut[i + 1]);
            if (at < first) first = at;
        }
    }
    spans_job job = {.b = b, .text = text, .what = what, .len = len, .cut = cut, .after = after,
                     .out = spans, .narrow = narrow, .st = sts, .err = errs};
    if (count > 1)
        pp_thread_pool_run(b->pool, PP_THREAD_POOL_WITH_CALLER, (int64_t)count, encode_one_span,
                           &job);
    else
        encode_one_span(&job, 0, 0);
    pp_status st = PP_OK;
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        if (st == PP_OK && sts[i] != PP_OK) {
            st = sts[i];
            if (err) *err = errs[i];
        }
        total += spans[i].n;
    }
    /* put together, each span let go as soon as it is copied */
    const size_t width = narrow ? sizeof(uint16_t) : sizeof(int32_t);
    char *v = NULL;
    if (st == PP_OK && count == 1) {
        v = (char *)spans[0].v;
        spans[0].v = NULL;
    } else if (st == PP_OK && total > 0) {
        if (!(v = malloc(total * width))) {
            st = pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizing %s)", what);
        } else {
            size_t at = 0;
            for (size_t i = 0; i < count; i++) {
                if (spans[i].n) memcpy(v + at * width, spans[i].v, spans[i].n * width);
                at += spans[i].n;
                free(spans[i].v);
                spans[i].v = NULL;
            }
        }
    }
    for (size_t i = 0; i < count; i++) free(spans[i].v);
    free(cut), free(after), free(spans), free(sts), free(errs);
    if (st != PP_OK) return st;
    *out = v;
    *n = (int64_t)total;
    return PP_OK;
}

pp_status pp_bpe_encode(pp_bpe *b, const char *text, size_t len, const char *what, int32_t **out,
                        int64_t *n, pp_error *err)
{
    void *v;
    const pp_status st = encode(b, text, len, what, false, &v, n, err);
    *out = v;
    return st;
}

pp_status pp_bpe_encode16(pp_bpe *b, const char *text, size_t len, const char *what,
                          uint16_t **out, int64_t *n, pp_error *err)
{
    *out = NULL;
    *n = 0;
    if (pp_bpe_size(b) > 65536)
        return pp_error_set(err, PP_ERR_INVALID,
                            "tokenizing %s in 2 bytes an id: the vocabulary has ids up to %d",
                            what, pp_bpe_size(b) - 1);
    void *v;
    const pp_status st = encode(b, text, len, what, true, &v, n, err);
    *out = v;
    return st;
}
