/*
 * sample.c - the token drawn from a row of logits (sample.h): greedy, or
 * softmax over logits / temperature (in double) among the top_k most likely
 * ids (all for 0), the ids taken in order of their logits (higher first,
 * of equal ones the lower id) until the running sum of their probabilities
 * passes u. Neither way sorts the whole vocabulary: the top k by a heap of k
 * over the row and one sort of k (draw_top); all of them by their weights
 * summed in id order and a heap popped until u is passed (draw_all).
 */
#include "pipeline/sample.h"

#include <math.h>
#include <stdlib.h>

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

typedef struct scored {
    float z;
    int32_t id;
} scored;

/* Whether a ranks before b: the higher logit, of equal ones the lower id. */
static bool ahead(scored a, scored b)
{
    return a.z > b.z || (a.z == b.z && a.id < b.id);
}

/* qsort's comparison of that order */
static int by_logit(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    return ahead(*x, *y) ? -1 : ahead(*y, *x);
}

/* h[i] down a heap of n whose root is the first of them in by_logit's order
 * (first) or the last (!first), past the children it does not rank with. */
static void sift_down(scored *h, int n, int i, bool first)
{
    const scored x = h[i];
    for (;;) {
        int l = 2 * i + 1;
        if (l >= n) break;
        if (l + 1 < n && ahead(h[l + 1], h[l]) == first) l++; /* the child to rise */
        if (ahead(h[l], x) != first) break;
        h[i] = h[l];
        i = l;
    }
    h[i] = x;
}

/* Top k (0 < k < v): s[0..k) = the first k of z[0..v) in by_logit's order,
 * sorted: a heap of the first k so far (its root the last of them) over z,
 * then one sort of k; O(v log k), where a sort of all v is O(v log v) (a
 * token of GPT-2's 50257 ids took some 5 ms so, more than a forward on a
 * GPU). */
static void first_k(const float *z, int v, int k, scored *s)
{
    for (int c = 0; c < k; c++) s[c] = (scored){z[c], c};
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(s, k, i, false);
    for (int c = k; c < v; c++)
        if (ahead((scored){z[c], c}, s[0])) { /* the last of the k out, id c in */
            s[0] = (scored){z[c], c};
            sift_down(s, k, 0, false);
        }
    qsort(s, (size_t)k, sizeof *s, by_logit);
}

/* Among the top k: softmax over z / temperature (in double) of the first k
 * in by_logit's order, the first id whose running sum passes u. */
static pp_status draw_top(const float *z, int v, int k, double temp, double u, int32_t *out,
                          pp_error *err)
{
    scored *s = malloc((size_t)k * sizeof *s);
    if (!s) return pp_error_set(err, PP_ERR_OOM, "out of host memory (sampling)");
    first_k(z, v, k, s);
    double total = 0;
    for (int c = 0; c < k; c++) total += exp(((double)s[c].z - (double)s[0].z) / temp);
    double acc = 0;
    *out = s[k - 1].id;
    for (int c = 0; c < k; c++) {
        acc += exp(((double)s[c].z - (double)s[0].z) / temp) / total;
        if (u < acc) {
            *out = s[c].id;
            break;
        }
    }
    free(s);
    return PP_OK;
}

/* Among all v ids (top_k 0): the weights exp((z - zmax) / temperature)
 * summed in id order, then the ids in by_logit's order, popped from a heap
 * until the running sum passes u: O(v), and O(log v) an id taken, where a
 * sort of all is O(v log v). */
static pp_status draw_all(const float *z, int v, float zmax, double temp, double u,
                          int32_t *out, pp_error *err)
{
    double *w = malloc((size_t)v * sizeof *w);
    scored *h = malloc((size_t)v * sizeof *h);
    if (!w || !h) {
        free(w);
        free(h);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (sampling)");
    }
    double total = 0;
    for (int c = 0; c < v; c++) {
        w[c] = exp(((double)z[c] - (double)zmax) / temp);
        total += w[c];
        h[c] = (scored){z[c], c};
    }
    for (int i = v / 2 - 1; i >= 0; i--) sift_down(h, v, i, true);
    double acc = 0;
    for (int n = v; n > 0; n--) { /* h[0], the first left; the last if u is never passed */
        *out = h[0].id;
        acc += w[h[0].id] / total;
        if (u < acc) break;
        h[0] = h[n - 1];
        sift_down(h, n - 1, 0, true);
    }
    free(w);
    free(h);
    return PP_OK;
}

pp_status pipe_draw(const float *z, int v, int top_k, double temperature, double u,
                    int32_t *out, pp_error *err)
{
    int best = 0;
    for (int c = 0; c < v; c++) {
        if (!isfinite(z[c]))
            return pp_error_set(err, PP_ERR_NUMERIC,
                                "id %d's logit is %g (the model's weights or its input are "
                                "not finite)",
                                c, (double)z[c]);
        if (z[c] > z[best]) best = c;
    }
    if (temperature == 0) {
        *out = best;
        return PP_OK;
    }
    if (top_k > 0 && top_k < v) return draw_top(z, v, top_k, temperature, u, out, err);
    return draw_all(z, v, z[best], temperature, u, out, err);
}

pp_status pipe_sample(const float *z, int v, const pp_generate_options *o, int64_t i,
                      int32_t *out, pp_error *err)
{
    const double u = (double)(mix(mix(o->seed) ^ (uint64_t)i) >> 11) / 9007199254740992.0;
    return pipe_draw(z, v, o->top_k, o->temperature, u, out, err);
}
