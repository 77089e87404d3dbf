/*
 * test_cuda_math.c - how the CUDA backend computes convolutions and GEMMs:
 * TF32 math against the CPU's fp32 within TF32's bound, and the device's
 * convolution algorithm cache (measurement, sharing between execs, the
 * PP_CUDNN_CACHE file, PP_CUDNN_FIND).
 *
 * Exits 77 (meson's skip) when no CUDA device is visible.
 */
#include <cuda_runtime.h>
#include <unistd.h>

#include "runtime/cuda/internal.h"
#include "tests/cuda/cuda_rig.h"

/* ---- TF32 ------------------------------------------------------------------------ */

/* dst = |src| (CPU tensors: host memory). */
static pp_tensor cpu_abs(rig *r, const pp_tensor *src)
{
    pp_tensor t;
    pp_error e;
    CHECK_OK(pp_tensor_alloc(&t, r->cpu, PP_F32, src->ndim, src->shape, &e), &e);
    for (int64_t i = 0; i < pp_tensor_numel(src); i++)
        ((float *)t.data)[i] = fabsf(((const float *)src->data)[i]);
    return t;
}

static pp_tensor cpu_zeros_like(rig *r, const pp_tensor *like)
{
    pp_tensor t;
    pp_error e;
    CHECK_OK(pp_tensor_zeros(&t, r->cpu, PP_F32, like->ndim, like->shape, &e), &e);
    return t;
}

/* TF32 keeps 10 of fp32's 23 mantissa bits. An operand rounded (or, as tensor
 * cores may do, truncated) to TF32 is within 2^-10 of itself, so a product of
 * two within 2^-9 + 2^-20, and a sum of products within 2^-9 of the sum of
 * their magnitudes, M = sum |a||b| (fp32 accumulation adds K * 2^-24 on each
 * side, 7e-5 for the largest K here). Winograd and FFT algorithms multiply
 * transformed operands: their error is bounded over the whole tensor rather
 * than per element, and can be a small factor larger. So: every |cuda - cpu|
 * within 4 * 2^-9 = 2^-7 of the tensor's largest M. A wrong result is off by
 * the order of M. */
#define TF32_BOUND (4.0 * ldexp(1.0, -9))

/* max |cuda - cpu| <= TF32_BOUND * max mag, mag the CPU op on magnitudes;
 * returns max |cuda - cpu| / max mag (for the log). */
static double check_tf32(rig *r, const pair *p, const pp_tensor *mag, const char *what)
{
    pp_error e;
    CHECK_OK(pp_exec_sync(&r->egpu, &e), &e);
    int64_t n = pp_tensor_numel(&p->c);
    float *g = malloc((size_t)(n ? n : 1) * sizeof *g);
    CHECK_OK(pp_tensor_to_host(&p->g, g, (size_t)n * sizeof *g, &e), &e);
    const float *c = p->c.data, *m = mag->data;
    int64_t wi = 0;
    double worst = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)g[i] - (double)c[i]);
        if (!(d <= worst)) { /* NaN counts as worst */
            worst = d;
            wi = i;
        }
        scale = fmax(scale, m[i]);
    }
    double rel = scale > 0 ? worst / scale : worst;
    CHECK_MSG(rel <= TF32_BOUND, "tf32 %s: error %.3g of the largest magnitude %.4g (bound "
              "%.3g), at #%lld: %.9g vs %.9g", what, rel, scale, TF32_BOUND, (long long)wi,
              n ? g[wi] : 0.0, n ? c[wi] : 0.0);
    free(g);
    return rel;
}

/* With the device in tf32 mode, convolutions (every direction) and the
 * linear layer stay within the TF32 bound of the CPU's fp32 results; back in
 * fp32 mode they match as tightly as before (plans are keyed by the mode and
 * the cuBLAS handle follows it). The log shows the largest error seen
 * relative to the largest magnitude: around 1e-4 when tensor cores ran TF32,
 * 1e-7 if they did not. */
static void test_tf32(rig *r)
{
    static const conv_case cases[] = {
        {8, 64, 14, 14, 64, 3, 1, 1}, {4, 64, 28, 28, 256, 1, 1, 0}, {2, 3, 23, 23, 8, 7, 2, 3}};
    pp_error e;
    CHECK_OK(pp_device_set_math(r->gpu, PP_MATH_TF32, &e), &e);
    double seen = 0.0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_conv2d_desc d = conv_of(&cases[i]);
        pair x = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, -1, 1);
        pair w = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, -0.5f, 0.5f);
        pair dy = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, -1, 1);
        pair y = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, 0, 0);
        pair dx = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, 0, 0);
        pair dw = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, 0, 0);
        pp_tensor ax = cpu_abs(r, &x.c), aw = cpu_abs(r, &w.c), ady = cpu_abs(r, &dy.c);
        pp_tensor my = cpu_zeros_like(r, &y.c), mdx = cpu_zeros_like(r, &dx.c);
        pp_tensor mdw = cpu_zeros_like(r, &dw.c);
        CHECK_OK(pp_conv2d_forward(&r->ecpu, &d, &ax, &aw, &my, &e), &e);
        CHECK_OK(pp_conv2d_backward_data(&r->ecpu, &d, &ady, &aw, &mdx, &e), &e);
        CHECK_OK(pp_conv2d_backward_filter(&r->ecpu, &d, &ax, &ady, &mdw, &e), &e);
        BOTH(r, pp_conv2d_forward(ex, &d, &x.c, &w.c, &y.c, err),
             pp_conv2d_forward(ex, &d, &x.g, &w.g, &y.g, err));
        BOTH(r, pp_conv2d_backward_data(ex, &d, &dy.c, &w.c, &dx.c, err),
             pp_conv2d_backward_data(ex, &d, &dy.g, &w.g, &dx.g, err));
        BOTH(r, pp_conv2d_backward_filter(ex, &d, &x.c, &dy.c, &dw.c, err),
             pp_conv2d_backward_filter(ex, &d, &x.g, &dy.g, &dw.g, err));
        char what[64];
        snprintf(what, sizeof what, "conv forward case %zu", i);
        seen = fmax(seen, check_tf32(r, &y, &my, what));
        snprintf(what, sizeof what, "conv backward data case %zu", i);
        seen = fmax(seen, check_tf32(r, &dx, &mdx, what));
        snprintf(what, sizeof what, "conv backward filter case %zu", i);
        seen = fmax(seen, check_tf32(r, &dw, &mdw, what));
        pp_tensor *mags[] = {&ax, &aw, &ady, &my, &mdx, &mdw};
        for (size_t k = 0; k < sizeof mags / sizeof mags[0]; k++) pp_tensor_free(mags[k]);
        pair_free(&x), pair_free(&w), pair_free(&dy), pair_free(&y), pair_free(&dx),
            pair_free(&dw);
    }
    {
        const int n = 32, in = 2048, out = 1000;
        pair x = pair_rand(r, 2, (int64_t[]){n, in}, -1, 1);
        pair w = pair_rand(r, 2, (int64_t[]){out, in}, -0.1f, 0.1f);
        pair b = pair_rand(r, 1, (int64_t[]){out}, -1, 1);
        pair dy = pair_rand(r, 2, (int64_t[]){n, out}, -1, 1);
        pair y = pair_rand(r, 2, (int64_t[]){n, out}, 0, 0);
        pair dx = pair_rand(r, 2, (int64_t[]){n, in}, 0, 0);
        pair dw = pair_rand(r, 2, (int64_t[]){out, in}, 0, 0);
        pair db = pair_rand(r, 1, (int64_t[]){out}, 0, 0);
        pp_tensor ax = cpu_abs(r, &x.c), aw = cpu_abs(r, &w.c), ab = cpu_abs(r, &b.c);
        pp_tensor ady = cpu_abs(r, &dy.c), my = cpu_zeros_like(r, &y.c);
        pp_tensor mdx = cpu_zeros_like(r, &dx.c), mdw = cpu_zeros_like(r, &dw.c);
        pp_tensor mdb = cpu_zeros_like(r, &db.c);
        CHECK_OK(pp_linear_forward(&r->ecpu, &ax, &aw, &ab, &my, &e), &e);
        CHECK_OK(pp_linear_backward(&r->ecpu, &ax, &aw, &ady, &mdx, &mdw, &mdb, &e), &e);
        BOTH(r, pp_linear_forward(ex, &x.c, &w.c, &b.c, &y.c, err),
             pp_linear_forward(ex, &x.g, &w.g, &b.g, &y.g, err));
        BOTH(r, pp_linear_backward(ex, &x.c, &w.c, &dy.c, &dx.c, &dw.c, &db.c, err),
             pp_linear_backward(ex, &x.g, &w.g, &dy.g, &dx.g, &dw.g, &db.g, err));
        seen = fmax(seen, check_tf32(r, &y, &my, "linear forward"));
        seen = fmax(seen, check_tf32(r, &dx, &mdx, "linear backward dx"));
        seen = fmax(seen, check_tf32(r, &dw, &mdw, "linear backward dw"));
        seen = fmax(seen, check_tf32(r, &db, &mdb, "linear backward db"));
        pp_tensor *mags[] = {&ax, &aw, &ab, &ady, &my, &mdx, &mdw, &mdb};
        for (size_t k = 0; k < sizeof mags / sizeof mags[0]; k++) pp_tensor_free(mags[k]);
        pair *all[] = {&x, &w, &b, &dy, &y, &dx, &dw, &db};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
    }
    fprintf(stderr, "test_cuda_math: tf32: largest error %.3g of the largest magnitude (%s)\n",
            seen, seen > 1e-5 ? "tensor cores ran TF32" : "no TF32 rounding seen");

    /* back to fp32: as tight as the fp32 tests, on a shape measured in both modes */
    CHECK_OK(pp_device_set_math(r->gpu, PP_MATH_FP32, &e), &e);
    pp_conv2d_desc d;
    CHECK_OK(pp_conv2d_desc_init(&d, 8, 64, 14, 14, 64, 3, 1, 1, &e), &e);
    pair x = pair_rand(r, 4, (int64_t[]){d.n, d.c, d.h, d.w}, -1, 1);
    pair w = pair_rand(r, 4, (int64_t[]){d.k, d.c, d.r, d.s}, -0.5f, 0.5f);
    pair y = pair_rand(r, 4, (int64_t[]){d.n, d.k, d.p, d.q}, 0, 0);
    BOTH(r, pp_conv2d_forward(ex, &d, &x.c, &w.c, &y.c, err),
         pp_conv2d_forward(ex, &d, &x.g, &w.g, &y.g, err));
    CHECK_CLOSE(r, &y, TOL_FWD, "conv forward in fp32 after tf32");
    pair lx = pair_rand(r, 2, (int64_t[]){32, 2048}, -1, 1);
    pair lw = pair_rand(r, 2, (int64_t[]){1000, 2048}, -0.1f, 0.1f);
    pair lb = pair_rand(r, 1, (int64_t[]){1000}, -1, 1);
    pair ly = pair_rand(r, 2, (int64_t[]){32, 1000}, 0, 0);
    BOTH(r, pp_linear_forward(ex, &lx.c, &lw.c, &lb.c, &ly.c, err),
         pp_linear_forward(ex, &lx.g, &lw.g, &lb.g, &ly.g, err));
    CHECK_CLOSE(r, &ly, TOL_FWD, "linear forward in fp32 after tf32");
    pair *all[] = {&x, &w, &y, &lx, &lw, &lb, &ly};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pair_free(all[k]);
}

/* ---- the device's convolution algorithm cache -------------------------------------- */

/* One convolution in every direction on cuda:0 of a fresh registry (which
 * reads PP_CUDNN_FIND and PP_CUDNN_CACHE), against the CPU; returns the
 * device's cache statistics. With tf32 set, the device runs in tf32 mode
 * (and only the forward is compared, loosely). */
static pp_algo_stats algo_run(rig *r, const pp_conv2d_desc *d, bool two_execs, bool tf32)
{
    pp_error e;
    pp_registry *reg = NULL;
    pp_device_ctx *g = NULL;
    pp_algo_stats st;
    memset(&st, 0, sizeof st);
    CHECK_OK(pp_registry_new(&reg, &e), &e);
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &g, &e), &e);
    if (!g) {
        pp_registry_free(reg);
        return st;
    }
    if (tf32) CHECK_OK(pp_device_set_math(g, PP_MATH_TF32, &e), &e);
    rig q = *r;
    q.gpu = g;
    for (int k = 0; k < (two_execs ? 2 : 1); k++) {
        CHECK_OK(pp_exec_init(&q.egpu, g, NULL, &e), &e);
        const int64_t xs[4] = {d->n, d->c, d->h, d->w}, ws[4] = {d->k, d->c, d->r, d->s};
        const int64_t ys[4] = {d->n, d->k, d->p, d->q};
        pair px = pair_rand(&q, 4, xs, -1, 1), pw = pair_rand(&q, 4, ws, -0.5f, 0.5f);
        pair py = pair_rand(&q, 4, ys, 0, 0), pdy = pair_rand(&q, 4, ys, -1, 1);
        pair pdx = pair_rand(&q, 4, xs, -1, 1), pdw = pair_rand(&q, 4, ws, -1, 1);
        BOTH(&q, pp_conv2d_forward(ex, d, &px.c, &pw.c, &py.c, err),
             pp_conv2d_forward(ex, d, &px.g, &pw.g, &py.g, err));
        CHECK_CLOSE(&q, &py, tf32 ? 1e-2 : TOL_FWD, "cached-algorithm conv forward");
        if (!tf32) {
            /* the first backward-data call accumulates: measuring must not touch dx */
            BOTH(&q, pp_conv2d_backward_data_accumulate(ex, d, &pdy.c, &pw.c, &pdx.c, err),
                 pp_conv2d_backward_data_accumulate(ex, d, &pdy.g, &pw.g, &pdx.g, err));
            CHECK_CLOSE(&q, &pdx, TOL_BWD, "cached-algorithm conv backward data (+=)");
            BOTH(&q, pp_conv2d_backward_data(ex, d, &pdy.c, &pw.c, &pdx.c, err),
                 pp_conv2d_backward_data(ex, d, &pdy.g, &pw.g, &pdx.g, err));
            CHECK_CLOSE(&q, &pdx, TOL_BWD, "cached-algorithm conv backward data");
            BOTH(&q, pp_conv2d_backward_filter(ex, d, &px.c, &pdy.c, &pdw.c, err),
                 pp_conv2d_backward_filter(ex, d, &px.g, &pdy.g, &pdw.g, err));
            CHECK_CLOSE(&q, &pdw, TOL_BWD, "cached-algorithm conv backward filter (+=)");
        }
        pair *all[] = {&px, &pw, &py, &pdy, &pdx, &pdw};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
        pp_exec_destroy(&q.egpu);
    }
    r->rng = q.rng;
    st = pp_algo_cache_stats(&pp_cuda_dev(g)->algos);
    pp_registry_free(reg);
    return st;
}

/* Lines of a file that are neither empty nor comments. */
static int entry_lines(const char *path)
{
    size_t n;
    unsigned char *t = check_read_file(path, &n);
    int lines = 0;
    for (size_t i = 0; t && i < n; i++)
        if ((i == 0 || t[i - 1] == '\n') && t[i] != '#' && t[i] != '\n') lines++;
    free(t);
    return lines;
}

/* The cache file's entries by API field (graph, legacy), those with a
 * GRAPH_MS above 0 (timed), and the bad ones: not version 3's 13 fields,
 * an API that is neither, or a graph entry whose GRAPH_MS does not beat MS
 * by PP_ALGO_GRAPH_MARGIN (or is 0), within the file's 6 significant digits
 * (dnn.c compares the float times before they are written). Each bad entry
 * is printed. */
typedef struct api_count {
    int graph, legacy, timed, bad;
} api_count;

static api_count api_entries(const char *path)
{
    size_t n;
    char *t = (char *)check_read_file(path, &n);
    api_count c = {0, 0, 0, 0};
    for (char *line = t ? strtok(t, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char whole[512];
        snprintf(whole, sizeof whole, "%s", line);
        const int bad = c.bad;
        char *f[14];
        int nf = 0;
        for (char *p = line; nf < 14;) {
            f[nf++] = p;
            p = strchr(p, '\t');
            if (!p) break;
            *p++ = '\0';
        }
        if (nf != 13) {
            c.bad++;
            fprintf(stderr, "bad cache entry (%d fields): %s\n", nf, whole);
            continue;
        }
        const double ms = atof(f[8]), graph_ms = atof(f[12]); /* MS, GRAPH_MS */
        const bool graph = strcmp(f[11], "graph") == 0, legacy = strcmp(f[11], "legacy") == 0;
        const double beat = ms * (1.0 - PP_ALGO_GRAPH_MARGIN) * (1.0 + 1e-5);
        if (graph && !(graph_ms > 0 && graph_ms < beat)) c.bad++;
        if (!graph && !legacy) c.bad++;
        if (c.bad != bad)
            fprintf(stderr, "bad cache entry (graph %s %.6g ms against %.6g * %.2f): %s\n",
                    graph ? "chosen" : "API neither", graph_ms, ms,
                    1.0 - PP_ALGO_GRAPH_MARGIN, whole);
        c.timed += graph_ms > 0;
        c.graph += graph;
        c.legacy += legacy;
    }
    free(t);
    return c;
}

/* Algorithms are measured once per shape, direction and mode on a device and
 * shared by its execs; PP_CUDNN_CACHE keeps them for the next device context
 * (no measurement then); PP_CUDNN_FIND=0 measures nothing and leaves the cache
 * alone; another PP_CUDA_CONV_WS_MB measures again under its own keys; a
 * foreign cache file is left alone; a bad PP_CUDNN_FIND or
 * PP_CUDA_CONV_WS_MB is refused when the device opens.
 * Every run's results match the CPU. */
static void test_algo_cache(rig *r)
{
    char dir[256], path[320];
    if (!check_mkdtemp(dir, sizeof dir, "pp-cudnn-cache")) {
        CHECK(0);
        return;
    }
    snprintf(path, sizeof path, "%s/algos.txt", dir);
    const char *old_cache = getenv("PP_CUDNN_CACHE"), *old_find = getenv("PP_CUDNN_FIND");
    char *saved_cache = old_cache ? strdup(old_cache) : NULL;
    char *saved_find = old_find ? strdup(old_find) : NULL;
    pp_conv2d_desc d, d2;
    pp_error e;
    CHECK_OK(pp_conv2d_desc_init(&d, 4, 32, 15, 15, 48, 3, 1, 1, &e), &e);
    CHECK_OK(pp_conv2d_desc_init(&d2, 2, 16, 9, 9, 24, 3, 2, 1, &e), &e);

    setenv("PP_CUDNN_CACHE", path, 1);
    unsetenv("PP_CUDNN_FIND");
    /* 1. measured once (three directions), shared by a second exec, written */
    pp_algo_stats st = algo_run(r, &d, true, false);
    CHECK_MSG(st.inserted == 3 && st.hits == 3 && st.saves == 3 && st.file_entries == 0 &&
                  !st.foreign,
              "first run: inserted %d, hits %d, saves %d (%s)", st.inserted, st.hits, st.saves,
              st.save_error);
    CHECK_MSG(entry_lines(path) == 3, "cache file holds %d entries", entry_lines(path));
    /* each entry says which API won, the graph API's plan timed beside the
     * algorithm (PP_CUDA_CONV_API unset: auto) */
    api_count ac = api_entries(path);
    CHECK_MSG(ac.graph + ac.legacy == 3 && ac.timed == 3 && ac.bad == 0,
              "API fields: %d graph, %d legacy, %d timed, %d bad", ac.graph, ac.legacy, ac.timed,
              ac.bad);
    printf("convolution APIs chosen in fp32 for one shape: %d graph, %d legacy\n", ac.graph,
           ac.legacy);
    /* 2. a new device context reads them: nothing measured */
    st = algo_run(r, &d, false, false);
    CHECK_MSG(st.file_entries == 3 && st.hits == 3 && st.inserted == 0 && st.bad_lines == 0,
              "second run: file entries %d, hits %d, inserted %d", st.file_entries, st.hits,
              st.inserted);
    /* 3. tf32 mode is keyed apart */
    st = algo_run(r, &d, false, true);
    CHECK_MSG(st.inserted == 1 && entry_lines(path) == 4, "tf32 run: inserted %d, %d entries",
              st.inserted, entry_lines(path));
    /* 4. heuristics only: the cache neither read nor written, results still right */
    setenv("PP_CUDNN_FIND", "0", 1);
    st = algo_run(r, &d, false, false);
    CHECK_MSG(st.inserted == 0 && st.hits == 0 && st.file_entries == 0 && entry_lines(path) == 4,
              "PP_CUDNN_FIND=0: inserted %d, hits %d, file entries %d", st.inserted, st.hits,
              st.file_entries);
    st = algo_run(r, &d2, false, false);
    CHECK_MSG(st.inserted == 0 && entry_lines(path) == 4, "PP_CUDNN_FIND=0: inserted %d",
              st.inserted);
    /* 5. another workspace cap is keyed apart: measured again, results still
     * right; an algorithm left out asked for more than the cap */
    unsetenv("PP_CUDNN_FIND");
    setenv("PP_CUDA_CONV_WS_MB", "1", 1);
    st = algo_run(r, &d, false, false);
    CHECK_MSG(st.inserted == 3 && entry_lines(path) == 7 && (st.over == 0) == (st.over_mb == 0) &&
                  (st.over == 0 || st.over_mb > 1),
              "PP_CUDA_CONV_WS_MB=1: inserted %d, %d entries, %d over the cap (largest %d MiB)",
              st.inserted, entry_lines(path), st.over, st.over_mb);
    unsetenv("PP_CUDA_CONV_WS_MB");
    st = algo_run(r, &d, false, false);
    CHECK_MSG(st.inserted == 0 && st.hits == 3, "back to 512 MiB: inserted %d, hits %d",
              st.inserted, st.hits);
    /* 5b. each API forced: results still right (algo_run compares every
     * direction with the CPU); legacy times no graph plan, graph measures no
     * algorithm where the graph API has a plan (the second shape, new keys) */
    const int timed_before = api_entries(path).timed;
    setenv("PP_CUDA_CONV_API", "legacy", 1);
    st = algo_run(r, &d2, false, false);
    ac = api_entries(path);
    CHECK_MSG(st.inserted == 3 && ac.bad == 0 && ac.timed == timed_before,
              "PP_CUDA_CONV_API=legacy: inserted %d, graph plans timed %d (before %d), %d bad",
              st.inserted, ac.timed, timed_before, ac.bad);
    setenv("PP_CUDA_CONV_API", "graph", 1);
    CHECK_OK(pp_conv2d_desc_init(&d2, 2, 16, 9, 9, 24, 1, 1, 0, &e), &e);
    st = algo_run(r, &d2, false, false);
    CHECK_MSG(st.inserted == 0, "PP_CUDA_CONV_API=graph: %d algorithms measured", st.inserted);
    unsetenv("PP_CUDA_CONV_API");
    /* 6. a foreign file is neither used nor replaced */
    static const char foreign[] = "not an algorithm cache\n";
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(foreign, f);
        fclose(f);
    }
    st = algo_run(r, &d, false, false);
    size_t n;
    unsigned char *t = check_read_file(path, &n);
    CHECK_MSG(st.foreign && st.inserted == 3 && st.saves == 0 && t && n == strlen(foreign) &&
                  memcmp(t, foreign, n) == 0,
              "foreign file: foreign %d, inserted %d, saves %d", st.foreign, st.inserted,
              st.saves);
    free(t);
    /* 7. a bad PP_CUDNN_FIND, PP_CUDA_CONV_WS_MB, PP_CUDA_CONV_API or
     * PP_CUDA_CONV_PLANS is an input error when the device opens */
    static const char *const wrong[][2] = {{"PP_CUDNN_FIND", "maybe"},
                                           {"PP_CUDA_CONV_WS_MB", "0"},
                                           {"PP_CUDA_CONV_API", "fastest"},
                                           {"PP_CUDA_CONV_PLANS", "17"}};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        setenv(wrong[i][0], wrong[i][1], 1);
        pp_registry *reg;
        pp_device_ctx *g = NULL;
        CHECK_OK(pp_registry_new(&reg, &e), &e);
        pp_status s = pp_registry_get(reg, (pp_device_id){PP_DEVICE_CUDA, 0}, &g, &e);
        CHECK_MSG(s == PP_ERR_INPUT && strstr(e.msg, wrong[i][0]), "%s=%s: %s", wrong[i][0],
                  wrong[i][1], pp_status_name(s));
        pp_registry_free(reg);
        unsetenv(wrong[i][0]);
    }

    if (saved_cache)
        setenv("PP_CUDNN_CACHE", saved_cache, 1);
    else
        unsetenv("PP_CUDNN_CACHE");
    if (saved_find)
        setenv("PP_CUDNN_FIND", saved_find, 1);
    else
        unsetenv("PP_CUDNN_FIND");
    free(saved_cache);
    free(saved_find);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    if (pp_cuda_device_count() == 0) {
        fprintf(stderr, "test_cuda_math: no CUDA device visible, skipping\n");
        return 77;
    }
    /* the cache tests set these themselves; start from the defaults */
    unsetenv("PP_CUDNN_CACHE");
    unsetenv("PP_CUDNN_FIND");
    unsetenv("PP_CUDA_CONV_WS_MB");
    unsetenv("PP_CUDA_CONV_API");
    unsetenv("PP_CUDA_CONV_PLANS");
    rig r;
    if (!rig_open(&r, 4242)) return check_summary("test_cuda_math");

    test_tf32(&r);
    test_algo_cache(&r);

    rig_close(&r);
    return check_summary("test_cuda_math");
}
