/*
 * test_sample.c - generation's sampler (pipeline/sample.h) against a naive
 * one: every logit scored, all of them sorted (higher first, of equal ones
 * the lower id), the probabilities summed as sample.h says (in that order
 * among the top k; in id order among all), the first id whose running sum
 * passes u. Rows of 1 to 500 logits with many ties, every top_k from 1 to
 * past the row, temperatures 0.3 to 2.2 and u across [0, 1): the same id
 * each time. Greedy takes the first most likely id; a logit that is not
 * finite is refused (PP_ERR_NUMERIC, naming the id); top_k of
 * the row's size or more is all of them; a draw from a GPT-2-sized row
 * repeats.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/sample.h"
#include "tests/check.h"

typedef struct naive_scored {
    float z;
    int32_t id;
} naive_scored;

static int naive_order(const void *a, const void *b)
{
    const naive_scored *x = a, *y = b;
    if (x->z != y->z) return x->z > y->z ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int32_t naive_draw(const float *z, int v, int top_k, double temp, double u)
{
    naive_scored *s = malloc((size_t)v * sizeof *s);
    for (int c = 0; c < v; c++) s[c] = (naive_scored){z[c], c};
    qsort(s, (size_t)v, sizeof *s, naive_order);
    const int k = top_k > 0 && top_k < v ? top_k : v;
    double total = 0;
    if (k < v)
        for (int c = 0; c < k; c++) total += exp(((double)s[c].z - (double)s[0].z) / temp);
    else
        for (int c = 0; c < v; c++) total += exp(((double)z[c] - (double)s[0].z) / temp);
    double acc = 0;
    int32_t out = s[k - 1].id;
    for (int c = 0; c < k; c++) {
        acc += exp(((double)s[c].z - (double)s[0].z) / temp) / total;
        if (u < acc) {
            out = s[c].id;
            break;
        }
    }
    free(s);
    return out;
}

static uint32_t lcg(uint32_t *x)
{
    *x = *x * 1103515245u + 12345u;
    return *x >> 8;
}

static void test_against_naive(void)
{
    uint32_t x = 11;
    int differ = 0, draws = 0, tops = 0;
    float z[500];
    for (int rep = 0; rep < 4000; rep++) {
        const int v = 1 + (int)(lcg(&x) % 500), levels = 1 + (int)(lcg(&x) % 40);
        for (int c = 0; c < v; c++) z[c] = (float)(lcg(&x) % (uint32_t)levels) * 0.37f - 3.0f;
        const double temp = 0.3 + (lcg(&x) % 20) / 10.0, u = lcg(&x) / 16777216.0;
        /* half of them all (0, or the row's size or past it), half the top k < v */
        const int r = (int)(lcg(&x) % 4), top_k = r == 0 ? 0 : r == 1 ? v + (int)(lcg(&x) % 3)
                                                     : 1 + (int)(lcg(&x) % (uint32_t)v);
        pp_error err;
        int32_t got = -1;
        CHECK_OK(pipe_draw(z, v, top_k, temp, u, &got, &err), &err);
        const int32_t want = naive_draw(z, v, top_k, temp, u);
        if (got != want && differ++ < 5)
            fprintf(stderr, "v %d, top_k %d, temperature %g, u %.9f: id %d, the naive %d\n", v,
                    top_k, temp, u, got, want);
        draws++;
        tops += top_k > 0 && top_k < v;
    }
    CHECK_MSG(differ == 0, "%d of %d draws not the naive sampler's", differ, draws);
    CHECK_MSG(tops > 1000 && draws - tops > 1000, "%d top-k draws, %d of all", tops, draws - tops);
}

static void test_edges(void)
{
    pp_error err;
    int32_t got = -1;
    const float tie[5] = {1, 4, 2, 4, -1};
    CHECK_OK(pipe_draw(tie, 5, 0, 0.0, 0.5, &got, &err), &err);
    CHECK_MSG(got == 1, "greedy: id %d, the first of the most likely (1)", got);
    /* top_k 1 is greedy at any u; top_k at or past the row is all of them */
    CHECK_OK(pipe_draw(tie, 5, 1, 1.0, 0.99, &got, &err), &err);
    CHECK_MSG(got == 1, "top_k 1: id %d", got);
    for (int k = 5; k <= 6; k++) {
        int32_t all = -1;
        CHECK_OK(pipe_draw(tie, 5, k, 0.7, 0.8, &got, &err), &err);
        CHECK_OK(pipe_draw(tie, 5, 0, 0.7, 0.8, &all, &err), &err);
        CHECK_MSG(got == all, "top_k %d: id %d, all of them %d", k, got, all);
    }
    /* u past every sum (rounding): the last id in order */
    CHECK_OK(pipe_draw(tie, 5, 0, 1.0, 1.0, &got, &err), &err);
    CHECK_MSG(got == 4, "u 1: id %d, the last in order (4)", got);
    /* not finite */
    const float bad[3][4] = {{0, NAN, 1, 2}, {0, 1, INFINITY, 2}, {-INFINITY, 0, 1, 2}};
    const pp_generate_options o = {.tokens = 1, .temperature = 0.8, .seed = 3};
    for (int b = 0; b < 3; b++) {
        const pp_status s = pipe_sample(bad[b], 4, &o, 17, &got, &err);
        const char *id = b == 2 ? "id 0's" : b ? "id 2's" : "id 1's";
        CHECK_MSG(s == PP_ERR_NUMERIC && strstr(err.msg, id),
                  "logits %d: %s '%s'", b, pp_status_name(s), err.msg);
    }
}

/* A GPT-2-sized row: the same seed and index draw the same id; other
 * indices spread over several ids. */
static void test_repeats(void)
{
    enum { V = 50257 };
    float *z = malloc(V * sizeof *z);
    uint32_t x = 5;
    for (int c = 0; c < V; c++) z[c] = (float)(lcg(&x) % 1000) / 100.0f;
    for (int k = 0; k <= 40; k += 40) {
        const pp_generate_options o = {.tokens = 1, .temperature = 1.0, .top_k = k, .seed = 9};
        pp_error err;
        int32_t a = -1, b = -2, seen[8];
        int distinct = 0;
        CHECK_OK(pipe_sample(z, V, &o, 3, &a, &err), &err);
        CHECK_OK(pipe_sample(z, V, &o, 3, &b, &err), &err);
        CHECK_MSG(a == b, "top_k %d: index 3 drew %d, then %d", k, a, b);
        for (int i = 0; i < 8; i++) {
            CHECK_OK(pipe_sample(z, V, &o, i, &seen[i], &err), &err);
            bool fresh = true;
            for (int j = 0; j < i; j++) fresh = fresh && seen[j] != seen[i];
            distinct += fresh;
        }
        CHECK_MSG(distinct >= 4, "top_k %d: 8 indices drew %d distinct ids", k, distinct);
    }
    free(z);
}

int main(void)
{
    test_against_naive();
    test_edges();
    test_repeats();
    return check_summary("sample");
}
