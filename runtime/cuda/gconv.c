/*
 * gconv.c - convolutions through cuDNN's graph (backend) API: the
 * contract is in gconv.h.
 *
 * A plan is made in numbered phases (make_entry; phase 1 in
 * gconv_graph.c):
 *   1. tensor descriptors X (N,C,H,W), W (K,C,R,S), Y (N,K,P,Q), dims in
 *      NCHW order, strides giving the layout, not virtual, 16-byte aligned,
 *      unique ids 1, 2, 3; the convolution descriptor; the operation of the
 *      direction with alpha and beta; the operation graph;
 *   2. engine configs from heuristics mode A; when that fails or leaves no
 *      plan, from mode FALLBACK;
 *   3. configs refused by their engines' numerical notes are skipped, the
 *      others finalized into execution plans until the device's conv_plans
 *      (PP_CUDA_CONV_PLANS) are made (a config that does not finalize, or
 *      wants more workspace than the device's cap, PP_CUDA_CONV_WS_MB, is
 *      skipped and counted: the latter apart, with the most one wanted);
 *   4. each plan runs once untimed and once between two CUDA events; the
 *      fastest is kept with its workspace size, and the one that ran with the
 *      least workspace when it needs less (for when the fastest one's cannot
 *      be had), the rest destroyed (with PP_CUDNN_FIND=0, the first plan that
 *      runs, in heuristics' order).
 * Every descriptor of the entry, the chosen engine config included, lives
 * until the cache is freed (the plan may refer to them). Variant packs are
 * made per call: they hold only the pointers and are host-side objects.
 *
 * Every failure names the cuDNN call, the descriptor and attribute, the
 * status, cuDNN's own last error message and the convolution (direction,
 * dtype, layout, shapes).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn_graph.h>

#include "gconv.h"
#include "gconv_internal.h"
#include "internal.h"

struct pp_cuda_gconv_cache {
    gconv_entry *e; /* grows on new keys (first step only) */
    int n, cap;
};

static const char *const dir_name[] = {"fwd", "dgrad", "wgrad"};

static void gdestroy(cudnnBackendDescriptor_t *d)
{
    if (*d) (void)cudnnBackendDestroyDescriptor(*d);
    *d = NULL;
}

/* ---- phase 2: heuristics ------------------------------------------------------ */

void pp_gconv_cfgs_free(cfg_list *l)
{
    for (int i = 0; i < GCONV_HEUR_MAX; i++) gdestroy(&l->cfg[i]);
    l->n = 0;
}

pp_status pp_gconv_heuristics(const gbuild *g, cudnnBackendDescriptor_t graph,
                            cudnnBackendHeurMode_t mode, cfg_list *l)
{
    const char *desc = mode == CUDNN_HEUR_MODE_A ? "engine heuristics (mode A)"
                                                 : "engine heuristics (mode FALLBACK)";
    cudnnBackendDescriptor_t heur;
    PP_TRY(pp_gconv_create(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, desc, &heur));
    pp_status s = pp_gconv_set_attr(g, heur, desc, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                    "CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH",
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, &graph);
    if (s == PP_OK)
        s = pp_gconv_set_attr(g, heur, desc, CUDNN_ATTR_ENGINEHEUR_MODE,
                              "CUDNN_ATTR_ENGINEHEUR_MODE", CUDNN_TYPE_HEUR_MODE, &mode);
    if (s == PP_OK) s = pp_gconv_finalize(g, heur, desc);
    int64_t avail = 0;
    if (s == PP_OK) {
        cudnnStatus_t st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &avail, NULL);
        if (st != CUDNN_STATUS_SUCCESS)
            s = gfail(g, st, "cudnnBackendGetAttribute", desc, "CUDNN_ATTR_ENGINEHEUR_RESULTS",
                      __LINE__);
    }
    if (avail > GCONV_HEUR_MAX) avail = GCONV_HEUR_MAX;
    for (int64_t i = 0; s == PP_OK && i < avail; i++)
        s = pp_gconv_create(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config", &l->cfg[i]);
    int64_t got = 0;
    if (s == PP_OK && avail > 0) {
        cudnnStatus_t st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, avail, &got,
                                                    l->cfg);
        if (st != CUDNN_STATUS_SUCCESS)
            s = gfail(g, st, "cudnnBackendGetAttribute", desc, "CUDNN_ATTR_ENGINEHEUR_RESULTS",
                      __LINE__);
    }
    gdestroy(&heur);
    if (s != PP_OK) {
        pp_gconv_cfgs_free(l);
        return s;
    }
    l->n = (int)(got < avail ? got : avail);
    return PP_OK;
}

/* ---- phase 3: notes and plans ------------------------------------------------- */

/* True when the engine of cfg may run this key (see gconv.h); *index
 * gets its global index. */
static pp_status engine_ok(const gbuild *g, cudnnBackendDescriptor_t cfg, bool *ok,
                           int64_t *index)
{
    const char *desc = "engine of an engine config";
    cudnnBackendDescriptor_t eng;
    *ok = false;
    *index = -1;
    PP_TRY(pp_gconv_create(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, desc, &eng));
    int64_t n = 0;
    cudnnStatus_t st = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng);
    const char *attr = "CUDNN_ATTR_ENGINECFG_ENGINE";
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t nn = 0;
    if (st == CUDNN_STATUS_SUCCESS) {
        attr = "CUDNN_ATTR_ENGINE_GLOBAL_INDEX";
        st = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                      index);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        attr = "CUDNN_ATTR_ENGINE_NUMERICAL_NOTE";
        st = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                      CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                      &nn, notes);
    }
    gdestroy(&eng);
    if (st != CUDNN_STATUS_SUCCESS)
        return gfail(g, st, "cudnnBackendGetAttribute", desc, attr, __LINE__);
    const bool tensor_ok = g->key->dt == PP_BF16 || g->key->math == PP_MATH_TF32;
    *ok = true;
    for (int64_t i = 0; i < nn && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
            notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
            (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && !tensor_ok))
            *ok = false;
    return PP_OK;
}

pp_status pp_gconv_make_plan(const gbuild *g, cudnnBackendDescriptor_t cfg,
                           cudnnBackendDescriptor_t *plan, size_t *ws)
{
    const char *desc = "execution plan";
    cudnnHandle_t h = g->ce->dnn;
    *ws = 0;
    PP_TRY(pp_gconv_create(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, desc, plan));
    pp_status s = pp_gconv_set_attr(g, *plan, desc, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                    "CUDNN_ATTR_EXECUTION_PLAN_HANDLE", CUDNN_TYPE_HANDLE, &h);
    if (s == PP_OK)
        s = pp_gconv_set_attr(g, *plan, desc, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                              "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG",
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, &cfg);
    if (s == PP_OK) s = pp_gconv_finalize(g, *plan, desc);
    int64_t bytes = 0, n = 0;
    if (s == PP_OK) {
        cudnnStatus_t st = cudnnBackendGetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                    CUDNN_TYPE_INT64, 1, &n, &bytes);
        if (st != CUDNN_STATUS_SUCCESS)
            s = gfail(g, st, "cudnnBackendGetAttribute", desc,
                      "CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE", __LINE__);
    }
    const size_t cap = (size_t)pp_cuda_dev(g->ex->dev)->ws_mb << 20;
    if (s == PP_OK && (bytes < 0 || (uint64_t)bytes > cap))
        s = pp_error_set(g->err, PP_ERR_UNSUPPORTED,
                         "%s: execution plan wants %lld bytes of workspace (at most %zu), for %s",
                         g->ex->dev->name, (long long)bytes, cap, g->what);
    if (bytes > 0) *ws = (size_t)bytes; /* over the cap too: the caller counts it */
    if (s != PP_OK) gdestroy(plan);
    return s;
}

/* ---- running ------------------------------------------------------------------- */

pp_status pp_gconv_execute(const gbuild *g, cudnnBackendDescriptor_t plan, int n,
                           const int64_t *uids, void *const *ptrs, void *ws)
{
    const char *desc = "variant pack";
    cudnnBackendDescriptor_t vp;
    PP_TRY(pp_gconv_create(g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, desc, &vp));
    const char *attr = "CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS";
    const char *call = "cudnnBackendSetAttribute";
    cudnnStatus_t st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                                CUDNN_TYPE_INT64, n, uids);
    if (st == CUDNN_STATUS_SUCCESS) {
        attr = "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS";
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                      CUDNN_TYPE_VOID_PTR, n, ptrs);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        attr = "CUDNN_ATTR_VARIANT_PACK_WORKSPACE";
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                      1, &ws);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendFinalize";
        attr = NULL;
        st = cudnnBackendFinalize(vp);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendExecute";
        desc = "execution plan";
        st = cudnnBackendExecute(g->ce->dnn, plan, vp);
    }
    gdestroy(&vp);
    return st == CUDNN_STATUS_SUCCESS ? PP_OK : gfail(g, st, call, desc, attr, __LINE__);
}

/* Runs plan on the call's tensors (uids X, W, Y in the direction's roles). */
static pp_status run_plan(const gbuild *g, cudnnBackendDescriptor_t plan, const void *a,
                          const void *b, void *out, void *ws)
{
    void *x, *w, *y;
    switch ((pp_gconv_dir)g->key->dir) {
    case PP_GCONV_DGRAD: y = (void *)a; w = (void *)b; x = out; break;
    case PP_GCONV_WGRAD: x = (void *)a; y = (void *)b; w = out; break;
    case PP_GCONV_FWD:
    default: x = (void *)a; w = (void *)b; y = out; break;
    }
    const int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *const ptrs[3] = {x, w, y};
    return pp_gconv_execute(g, plan, 3, uids, ptrs, ws);
}

/* ---- phase 4: timing --------------------------------------------------------------- */

typedef struct candidate {
    cudnnBackendDescriptor_t cfg, plan;
    size_t ws;
    int64_t engine;
    float ms;
} candidate;

/* One untimed and one timed run of c between events ev[0], ev[1]. Its
 * workspace is scratch of its own (counted, stream-ordered, freed after the
 * run), so the exec's workspace grows only to what the chosen plan needs. */
static pp_status time_plan(const gbuild *g, candidate *c, const void *a, const void *b, void *out,
                           cudaEvent_t ev[2])
{
    pp_device_ctx *dev = g->ex->dev;
    void *ws = NULL;
    PP_TRY(pp_cuda_scratch_alloc(g->ex, c->ws, &ws, g->err));
    pp_status s = run_plan(g, c->plan, a, b, out, ws);
    if (s == PP_OK) s = PP_CUDA(dev, g->err, cudaEventRecord(ev[0], g->ce->stream));
    if (s == PP_OK) s = run_plan(g, c->plan, a, b, out, ws);
    if (s == PP_OK) s = PP_CUDA(dev, g->err, cudaEventRecord(ev[1], g->ce->stream));
    if (s == PP_OK) s = PP_CUDA(dev, g->err, cudaEventSynchronize(ev[1]));
    if (s == PP_OK) s = PP_CUDA(dev, g->err, cudaEventElapsedTime(&c->ms, ev[0], ev[1]));
    pp_cuda_scratch_free(g->ex, ws, c->ws);
    return s;
}

/* Times the candidates; *best the fastest, or with first_only the first
 * that runs (heuristics' order; *tried how many were run). A candidate that
 * fails to run is dropped; the first failure is returned when none runs. */
static pp_status time_candidates(const gbuild *g, candidate *cand, int n, bool first_only,
                                 const void *a, const void *b, void *out, int *best, int *tried)
{
    pp_device_ctx *dev = g->ex->dev;
    cudaEvent_t ev[2] = {NULL, NULL};
    pp_status s = PP_CUDA(dev, g->err, cudaEventCreate(&ev[0]));
    if (s == PP_OK) s = PP_CUDA(dev, g->err, cudaEventCreate(&ev[1]));
    *best = -1;
    pp_status first = PP_OK;
    *tried = 0;
    for (int i = 0; s == PP_OK && i < n && !(first_only && *best >= 0); i++) {
        ++*tried;
        pp_error e;
        gbuild gi = *g;
        gi.err = &e;
        cand[i].ms = -1.0f;
        pp_status si = time_plan(&gi, &cand[i], a, b, out, ev);
        if (si == PP_OK && (*best < 0 || cand[i].ms < cand[*best].ms)) *best = i;
        if (si != PP_OK && first == PP_OK) {
            first = si;
            if (g->err) *g->err = e;
        }
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) (void)PP_CUDA(dev, NULL, cudaEventDestroy(ev[i]));
    if (s != PP_OK) return s;
    return *best < 0 ? first : PP_OK;
}

/* ---- making an entry ------------------------------------------------------------- */

static void entry_free(gconv_entry *e)
{
    gdestroy(&e->lean_plan);
    gdestroy(&e->lean_cfg);
    gdestroy(&e->plan);
    gdestroy(&e->cfg);
    gdestroy(&e->graph);
    gdestroy(&e->op);
    gdestroy(&e->conv);
    for (int i = 0; i < 3; i++) gdestroy(&e->tensor[i]);
}

/* Phases 2 and 3: up to the device's conv_plans plans from heuristics mode. */
static pp_status candidates_of(const gbuild *g, gconv_entry *e, cudnnBackendHeurMode_t mode,
                               candidate *cand, int *n, pp_error *why)
{
    cfg_list l;
    memset(&l, 0, sizeof l);
    PP_TRY(pp_gconv_heuristics(g, e->graph, mode, &l));
    e->stats = (gconv_stats){.mode = (int)mode, .found = l.n, .engine = -1};
    pp_status s = PP_OK;
    *n = 0;
    const int most = pp_cuda_dev(g->ex->dev)->conv_plans;
    for (int i = 0; i < l.n && *n < most && *n < PP_GCONV_CANDIDATES; i++) {
        bool ok;
        int64_t index;
        gbuild gi = *g;
        gi.err = why; /* the last config's failure explains an empty list */
        pp_status si = engine_ok(&gi, l.cfg[i], &ok, &index);
        if (si == PP_ERR_OOM) {
            if (g->err) *g->err = *why;
            s = si;
            break;
        }
        if (si != PP_OK) { /* its notes cannot be read: not used */
            e->stats.failed++;
            continue;
        }
        if (!ok) {
            e->stats.refused++;
            continue;
        }
        candidate *c = &cand[*n];
        if (pp_gconv_make_plan(&gi, l.cfg[i], &c->plan, &c->ws) != PP_OK) {
            if (c->ws > ((size_t)pp_cuda_dev(g->ex->dev)->ws_mb << 20)) { /* over the cap */
                const int64_t mb = (int64_t)((c->ws + (1u << 20) - 1) >> 20);
                e->stats.over++;
                if (mb > e->stats.over_mb) e->stats.over_mb = mb;
            } else {
                e->stats.failed++;
            }
            c->ws = 0;
            continue;
        }
        c->engine = index;
        c->cfg = l.cfg[i]; /* kept with its plan */
        l.cfg[i] = NULL;
        (*n)++;
    }
    pp_gconv_cfgs_free(&l);
    return s;
}

static void candidates_free(candidate *cand, int n, int keep, int keep2)
{
    for (int i = 0; i < n; i++)
        if (i != keep && i != keep2) {
            gdestroy(&cand[i].plan);
            gdestroy(&cand[i].cfg);
        }
}

/* Scratch for timing a call with beta != 0: the output's bytes, zeroed. */
static pp_status timing_out(const gbuild *g, size_t bytes, void **scratch)
{
    *scratch = NULL;
    if (g->key->beta == 0) return PP_OK; /* +0.0f only: -0.0f still reads out */
    pp_exec *ex = g->ex;
    PP_TRY(pp_cuda_scratch_alloc(ex, bytes, scratch, g->err));
    pp_status s = PP_CUDA(ex->dev, g->err, cudaMemsetAsync(*scratch, 0, bytes, g->ce->stream));
    if (s != PP_OK) {
        pp_cuda_scratch_free(ex, *scratch, bytes);
        *scratch = NULL;
    }
    return s;
}

static size_t out_bytes(const gconv_key *k)
{
    const pp_conv2d_desc *d = &k->d;
    size_t n = k->dir == PP_GCONV_FWD     ? (size_t)d->n * d->k * d->p * d->q
               : k->dir == PP_GCONV_DGRAD ? (size_t)d->n * d->c * d->h * d->w
                                          : (size_t)d->k * d->c * d->r * d->s;
    return n * (k->dt == PP_BF16 ? 2 : 4);
}

/* Phases 2 to 4 for e, whose graph is made. */
static pp_status choose_plan(const gbuild *g, gconv_entry *e, const void *a, const void *b,
                             void *out)
{
    candidate cand[PP_GCONV_CANDIDATES];
    memset(cand, 0, sizeof cand);
    int n = 0;
    pp_error why = {0};
    pp_status s = candidates_of(g, e, CUDNN_HEUR_MODE_A, cand, &n, &why);
    if (s != PP_OK && s != PP_ERR_OOM) { /* mode A failed on the graph: ask the fallback list */
        if (g->err) why = *g->err;
        s = PP_OK;
    }
    if (s == PP_OK && n == 0) {
        gconv_stats a_stats = e->stats;
        s = candidates_of(g, e, CUDNN_HEUR_MODE_FALLBACK, cand, &n, &why);
        if (s == PP_OK && n == 0)
            return pp_error_set(g->err, PP_ERR_UNSUPPORTED,
                                "%s: cuDNN has no engine for %s: mode A offered %d (%d refused "
                                "by numerical notes, %d did not finalize, %d over the "
                                "workspace cap), fallback %d (%d refused, %d did not finalize, "
                                "%d over the cap)%s%s",
                                g->ex->dev->name, g->what, a_stats.found, a_stats.refused,
                                a_stats.failed, a_stats.over, e->stats.found, e->stats.refused,
                                e->stats.failed, e->stats.over,
                                why.msg[0] ? "; last failure: " : "", why.msg);
    }
    if (s != PP_OK) {
        candidates_free(cand, n, -1, -1);
        return s;
    }
    for (int i = 0; i < n; i++) cand[i].ms = -1.0f; /* not run (yet) */
    void *scratch = NULL;
    const size_t scratch_bytes = out_bytes(g->key);
    s = timing_out(g, scratch_bytes, &scratch);
    int best = -1, tried = 0;
    /* PP_CUDNN_FIND=0: heuristics only, as for the legacy API's algorithms */
    const bool first_only = !pp_cuda_dev(g->ex->dev)->find;
    if (s == PP_OK)
        s = time_candidates(g, cand, n, first_only, a, b, scratch ? scratch : out, &best, &tried);
    pp_cuda_scratch_free(g->ex, scratch, scratch_bytes);
    /* the candidate that ran with the least workspace, kept when it needs less
     * than the fastest: what runs when the fastest one's workspace cannot be had */
    int lean = -1;
    for (int i = 0; s == PP_OK && i < n; i++)
        if (cand[i].ms >= 0 && cand[i].ws < cand[best].ws &&
            (lean < 0 || cand[i].ws < cand[lean].ws))
            lean = i;
    candidates_free(cand, n, s == PP_OK ? best : -1, s == PP_OK ? lean : -1);
    if (s != PP_OK) return s;
    e->plan = cand[best].plan;
    e->cfg = cand[best].cfg;
    e->ws = cand[best].ws;
    if (lean >= 0) {
        e->lean_plan = cand[lean].plan;
        e->lean_cfg = cand[lean].cfg;
        e->lean_ws = cand[lean].ws;
    }
    e->stats.timed = tried;
    e->stats.engine = cand[best].engine;
    e->stats.ms = cand[best].ms;
    return PP_OK;
}

/* Phases 1 to 4: a new entry for key, chosen on the call's tensors. */
static pp_status make_entry(pp_exec *ex, pp_cuda_exec *ce, const gconv_key *key, const void *a,
                            const void *b, void *out, gconv_entry *e, pp_error *err)
{
    gbuild g = {ex, ce, key, "", err};
    pp_gconv_describe(g.what, sizeof g.what, key);
    memset(e, 0, sizeof *e);
    e->key = *key;
    pp_status s = pp_gconv_make_tensors(&g, e);
    if (s == PP_OK) s = pp_gconv_make_conv(&g, &e->conv);
    if (s == PP_OK) s = pp_gconv_make_op(&g, e);
    if (s == PP_OK) s = pp_gconv_make_graph(&g, e);
    if (s == PP_OK) s = choose_plan(&g, e, a, b, out);
    if (s != PP_OK) entry_free(e);
    return s;
}

/* ---- the cache and the call ------------------------------------------------------ */

static pp_status cache_of(pp_exec *ex, pp_cuda_exec *ce, pp_cuda_gconv_cache **out,
                          pp_error *err)
{
    if (!ce->gconv) {
        ce->gconv = calloc(1, sizeof *ce->gconv);
        if (!ce->gconv)
            return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (graph plans)",
                                ex->dev->name);
    }
    *out = ce->gconv;
    return PP_OK;
}

static gconv_entry *cache_find(pp_cuda_gconv_cache *c, const gconv_key *k)
{
    for (int i = 0; i < c->n; i++)
        if (memcmp(&c->e[i].key, k, sizeof *k) == 0) return &c->e[i];
    return NULL;
}

static pp_status cache_grow(pp_exec *ex, pp_cuda_gconv_cache *c, pp_error *err)
{
    if (c->n < c->cap) return PP_OK;
    int ncap = c->cap ? 2 * c->cap : 16;
    gconv_entry *p = realloc(c->e, (size_t)ncap * sizeof *p);
    if (!p)
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (graph plans)",
                            ex->dev->name);
    c->e = p;
    c->cap = ncap;
    return PP_OK;
}

static pp_status check_args(pp_exec *ex, const pp_conv2d_desc *d, pp_gconv_dir dir, pp_dtype dt,
                            const void *a, const void *b, void *out, pp_error *err)
{
    if (!d || (int)dir < 0 || dir > PP_GCONV_WGRAD || (dt != PP_BF16 && dt != PP_F32))
        return pp_error_set(err, PP_ERR_INVALID,
                            "%s: graph convolution: direction %d, dtype %d (want fwd, dgrad or "
                            "wgrad; bf16 or fp32)",
                            ex->dev->name, (int)dir, (int)dt);
    if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->k <= 0 || d->r <= 0 ||
        d->s <= 0 || d->p <= 0 || d->q <= 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: graph convolution: empty geometry",
                            ex->dev->name);
    const void *ptr[3] = {a, b, out};
    static const char *const names[3] = {"a", "b", "out"};
    for (int i = 0; i < 3; i++)
        if (!ptr[i] || ((uintptr_t)ptr[i] & 15))
            return pp_error_set(err, PP_ERR_UNSUPPORTED,
                                "%s: graph convolution %s: %s = %p is not 16-byte aligned",
                                ex->dev->name, dir_name[dir], names[i], ptr[i]);
    return PP_OK;
}

static gconv_key key_of(const pp_exec *ex, const pp_conv2d_desc *d, pp_gconv_dir dir,
                        pp_dtype dt, bool nhwc, float alpha, float beta)
{
    gconv_key k;
    memset(&k, 0, sizeof k); /* compared as bytes */
    k.d = *d;
    k.dir = (int)dir;
    k.dt = (int)dt;
    k.nhwc = nhwc;
    k.math = (int)pp_device_math(ex->dev);
    memcpy(&k.alpha, &alpha, sizeof alpha);
    memcpy(&k.beta, &beta, sizeof beta);
    return k;
}

/* Out of device memory for a plan (choosing it, its workspace, cuDNN's own
 * allocations when it runs, all before any work of the call is enqueued): a
 * refusal, so the caller runs the convolution the legacy way rather than
 * fail the step; err keeps the reason. */
static pp_status no_memory(pp_exec *ex, const char *when, pp_error *err)
{
    if (err) {
        pp_error_prefix(err, "%s: out of memory for a graph-API convolution %s, so it runs "
                        "another way", ex->dev->name, when);
        err->code = PP_ERR_UNSUPPORTED;
    }
    return PP_ERR_UNSUPPORTED;
}

/* The entry of the call, made at its first use. */
static pp_status entry_for(pp_exec *ex, pp_cuda_exec *ce, const gconv_key *k, const void *a,
                           const void *b, void *out, gconv_entry **e, pp_error *err)
{
    pp_cuda_gconv_cache *c = NULL;
    PP_TRY(cache_of(ex, ce, &c, err));
    *e = cache_find(c, k);
    if (*e && (*e)->unsupported)
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s", (*e)->why);
    if (*e) return PP_OK;
    PP_TRY(cache_grow(ex, c, err));
    pp_status s = make_entry(ex, ce, k, a, b, out, &c->e[c->n], err);
    if (s == PP_ERR_OOM) /* not remembered: memory may be found at a later call */
        return no_memory(ex, "while choosing its plan", err);
    if (s == PP_ERR_UNSUPPORTED) { /* remembered: later calls fall back without asking cuDNN */
        gconv_entry *bad = &c->e[c->n++];
        memset(bad, 0, sizeof *bad);
        bad->key = *k;
        bad->unsupported = true;
        snprintf(bad->why, sizeof bad->why, "%s", err ? err->msg : "unsupported");
        return s;
    }
    PP_TRY(s);
    *e = &c->e[c->n++];
    return PP_OK;
}

/* The call's exec state and entry (made at its first use). */
static pp_status call_entry(pp_exec *ex, const pp_conv2d_desc *d, pp_gconv_dir dir, pp_dtype dt,
                            bool nhwc, const void *a, const void *b, void *out, float alpha,
                            float beta, pp_cuda_exec **ce, gconv_entry **e, pp_error *err)
{
    PP_TRY(check_args(ex, d, dir, dt, a, b, out, err));
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, ce, err));
    const gconv_key k = key_of(ex, d, dir, dt, nhwc, alpha, beta);
    return entry_for(ex, *ce, &k, a, b, out, e, err);
}

pp_status pp_cuda_gconv(pp_exec *ex, const pp_conv2d_desc *d, pp_gconv_dir dir, pp_dtype dt,
                        bool nhwc, const void *a, const void *b, void *out, float alpha,
                        float beta, pp_error *err)
{
    pp_cuda_exec *ce;
    gconv_entry *e;
    PP_TRY(call_entry(ex, d, dir, dt, nhwc, a, b, out, alpha, beta, &ce, &e, err));
    gbuild g = {ex, ce, &e->key, "", err}; /* what: made by gfail if needed */
    void *ws;
    cudnnBackendDescriptor_t plan = e->plan;
    pp_status s = pp_exec_workspace(ex, e->ws, &ws, err);
    if (s == PP_ERR_OOM && e->lean_plan) { /* the plan that needs less */
        plan = e->lean_plan;
        s = pp_exec_workspace(ex, e->lean_ws, &ws, err);
    }
    if (s == PP_ERR_OOM) return no_memory(ex, "workspace", err);
    PP_TRY(s);
    s = run_plan(&g, plan, a, b, out, ws);
    return s == PP_ERR_OOM ? no_memory(ex, "run", err) : s;
}

pp_status pp_cuda_gconv_prepare(pp_exec *ex, const pp_conv2d_desc *d, pp_gconv_dir dir,
                                pp_dtype dt, bool nhwc, const void *a, const void *b, void *out,
                                float alpha, float beta, float *ms, pp_error *err)
{
    *ms = 0.0f;
    pp_cuda_exec *ce;
    gconv_entry *e;
    PP_TRY(call_entry(ex, d, dir, dt, nhwc, a, b, out, alpha, beta, &ce, &e, err));
    *ms = e->stats.ms;
    return PP_OK;
}

void pp_cuda_gconv_cache_free(pp_exec *ex)
{
    pp_cuda_exec *ce = ex ? pp_cuda_ex(ex) : NULL;
    if (!ce || !ce->gconv) return;
    pp_cuda_gconv_cache *c = ce->gconv;
    for (int i = 0; i < c->n; i++) entry_free(&c->e[i]);
    free(c->e);
    free(c);
    ce->gconv = NULL;
}

/* ---- what a plan chose ------------------------------------------------------------ */

bool pp_cuda_gconv_plan_info(pp_exec *ex, const pp_conv2d_desc *d, pp_gconv_dir dir, pp_dtype dt,
                             bool nhwc, float alpha, float beta, pp_gconv_plan_info *out)
{
    pp_cuda_exec *ce = pp_cuda_ex(ex);
    if (!ce || !ce->gconv) return false;
    const gconv_key k = key_of(ex, d, dir, dt, nhwc, alpha, beta);
    const gconv_entry *e = cache_find(ce->gconv, &k);
    if (!e || e->unsupported) return false;
    const gconv_stats *st = &e->stats;
    *out = (pp_gconv_plan_info){.fallback = st->mode == CUDNN_HEUR_MODE_FALLBACK,
                                .found = st->found,
                                .refused = st->refused,
                                .failed = st->failed,
                                .over = st->over,
                                .over_mb = (long long)st->over_mb,
                                .timed = st->timed,
                                .engine = (long long)st->engine,
                                .ws = e->ws,
                                .ms = st->ms,
                                .lean = e->lean_plan != NULL,
                                .lean_ws = e->lean_ws};
    return true;
}
