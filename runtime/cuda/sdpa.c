/*
 * sdpa.c - cuDNN's fused causal attention: the contract is in sdpa.h, the
 * operation graphs in sdpa_graph.c.
 *
 * A plan is made at a (shape, direction)'s first call: the shape's
 * limits (c and hs multiples of 8 for 16-byte aligned views of qkv, hs at
 * most 128), the operation graph, the engine configs of heuristics mode A
 * (mode FALLBACK when A fails or offers none), the first that finalizes into
 * an execution plan within the device's workspace cap (the checked calls,
 * heuristics and plans are gconv.c's). Every descriptor lives until the
 * cache is freed. A failure is remembered with its message: later calls are
 * refused at once.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sdpa_internal.h"

/* The largest head size the fused engines take for bf16. */
#define SDPA_HS_MAX 128

typedef struct sdpa_plan {
    bool tried, ok;
    sdpa_graph sg;
    cudnnBackendDescriptor_t cfg, plan;
    size_t ws;
    int64_t engine;
    char why[sizeof(((pp_error *)0)->msg)];
} sdpa_plan;

typedef struct sdpa_entry {
    pp_attention_desc key;
    bool f32; /* the key's element type: f32 (else bf16; cuDNN's plans are bf16's) */
    pp_sdpa_choice choice;
    sdpa_plan plan[2]; /* by pp_sdpa_dir */
} sdpa_entry;

struct pp_cuda_sdpa_cache {
    sdpa_entry **e; /* entries do not move: pp_sdpa_choice pointers stay valid */
    int n, cap;
};

static const char *const dir_name[2] = {"forward", "backward"};

static void describe(char *buf, size_t n, const pp_attention_desc *d, bool f32,
                     pp_sdpa_dir dir)
{
    snprintf(buf, n, "causal attention %s, %s, n %d t %d heads %d hs %d", dir_name[dir],
             f32 ? "f32" : "bf16", d->n, d->t, d->heads, d->c / d->heads);
}

/* ---- the plan ------------------------------------------------------------------- */

static void plan_free(sdpa_plan *p)
{
    if (p->plan) (void)cudnnBackendDestroyDescriptor(p->plan);
    if (p->cfg) (void)cudnnBackendDestroyDescriptor(p->cfg);
    p->plan = p->cfg = NULL;
    pp_sdpa_graph_free(&p->sg);
}

/* The engine index of cfg, or -1 when it cannot be read. */
static int64_t engine_of(const gbuild *g, cudnnBackendDescriptor_t cfg)
{
    cudnnBackendDescriptor_t eng;
    int64_t n = 0, index = -1;
    if (pp_gconv_create(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine", &eng) != PP_OK) return -1;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 1, &n, &eng) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                 &index) != CUDNN_STATUS_SUCCESS)
        index = -1;
    (void)cudnnBackendDestroyDescriptor(eng);
    return index;
}

/* p->plan from the configs of heuristics mode; PP_ERR_UNSUPPORTED when
 * none finalizes (err: the last config's failure). */
static pp_status first_plan(const gbuild *g, sdpa_plan *p, cudnnBackendHeurMode_t mode)
{
    cfg_list l;
    memset(&l, 0, sizeof l);
    PP_TRY(pp_gconv_heuristics(g, p->sg.graph, mode, &l));
    pp_status s = pp_error_set(g->err, PP_ERR_UNSUPPORTED, "%s: heuristics mode %s offered %d "
                               "engine configs, none finalized, for %s", g->ex->dev->name,
                               mode == CUDNN_HEUR_MODE_A ? "A" : "FALLBACK", l.n, g->what);
    for (int i = 0; i < l.n && s != PP_OK; i++) {
        s = pp_gconv_make_plan(g, l.cfg[i], &p->plan, &p->ws);
        if (s == PP_OK) {
            p->cfg = l.cfg[i]; /* kept with its plan */
            l.cfg[i] = NULL;
            p->engine = engine_of(g, p->cfg);
        } else if (s != PP_ERR_OOM) {
            s = PP_ERR_UNSUPPORTED;
        }
    }
    if (s != PP_OK) p->ws = 0; /* a plan over the cap leaves what it wanted */
    pp_gconv_cfgs_free(&l);
    return s;
}

/* Why cuDNN's engines cannot take shape d (NULL: they may). */
static const char *shape_refusal(const pp_attention_desc *d)
{
    const int hs = d->c / d->heads;
    if (d->c % 8 || hs % 8) return "c and the head size must be multiples of 8";
    if (hs > SDPA_HS_MAX) return "head size above 128";
    return NULL;
}

static pp_status make_plan(const gbuild *g, sdpa_plan *p, const pp_attention_desc *d,
                           pp_sdpa_dir dir)
{
    const char *no = shape_refusal(d);
    if (no) return pp_error_set(g->err, PP_ERR_UNSUPPORTED, "%s: %s, for %s",
                                g->ex->dev->name, no, g->what);
    p->sg = (sdpa_graph){.b = d->n, .h = d->heads, .s = d->t, .d = d->c / d->heads, .c = d->c};
    PP_TRY(pp_sdpa_build(g, &p->sg, dir == PP_SDPA_BWD));
    pp_status s = first_plan(g, p, CUDNN_HEUR_MODE_A);
    if (s != PP_OK && s != PP_ERR_OOM) s = first_plan(g, p, CUDNN_HEUR_MODE_FALLBACK);
    return s;
}

/* ---- the cache ---------------------------------------------------------------- */

static pp_status entry_of(pp_exec *ex, const pp_attention_desc *d, bool f32, sdpa_entry **out,
                          pp_error *err)
{
    pp_cuda_exec *ce = pp_cuda_ex(ex);
    if (!ce->sdpa && !(ce->sdpa = calloc(1, sizeof *ce->sdpa)))
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (attention plans)",
                            ex->dev->name);
    pp_cuda_sdpa_cache *c = ce->sdpa;
    for (int i = 0; i < c->n; i++)
        if (c->e[i]->f32 == f32 && !memcmp(&c->e[i]->key, d, sizeof *d)) {
            *out = c->e[i];
            return PP_OK;
        }
    if (c->n == c->cap) {
        int ncap = c->cap ? 2 * c->cap : 8;
        sdpa_entry **p = realloc(c->e, (size_t)ncap * sizeof *p);
        if (!p)
            return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (attention plans)",
                                ex->dev->name);
        c->e = p;
        c->cap = ncap;
    }
    sdpa_entry *e = calloc(1, sizeof *e);
    if (!e)
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (attention plans)",
                            ex->dev->name);
    e->key = *d;
    e->f32 = f32;
    c->e[c->n++] = e;
    *out = e;
    return PP_OK;
}

pp_status pp_cuda_sdpa_choice(pp_exec *ex, const pp_attention_desc *d, bool f32,
                              pp_sdpa_choice **out, pp_error *err)
{
    sdpa_entry *e;
    PP_TRY(entry_of(ex, d, f32, &e, err));
    *out = &e->choice;
    return PP_OK;
}

/* The plan of (d, dir), made at its first use; PP_ERR_UNSUPPORTED with the
 * remembered reason when it could not be. */
static pp_status plan_for(pp_exec *ex, pp_cuda_exec *ce, const pp_attention_desc *d,
                          pp_sdpa_dir dir, sdpa_plan **out, pp_error *err)
{
    sdpa_entry *e;
    PP_TRY(entry_of(ex, d, false, &e, err));
    sdpa_plan *p = &e->plan[dir];
    *out = p;
    if (p->tried && !p->ok) return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s", p->why);
    if (p->tried) return PP_OK;
    gbuild g = {ex, ce, NULL, "", err};
    describe(g.what, sizeof g.what, d, false, dir);
    pp_status s = make_plan(&g, p, d, dir);
    if (s == PP_ERR_OOM) { /* not remembered: memory may be found later */
        plan_free(p);
        if (err) err->code = PP_ERR_UNSUPPORTED;
        return PP_ERR_UNSUPPORTED;
    }
    p->tried = true;
    p->ok = s == PP_OK;
    if (!p->ok) {
        snprintf(p->why, sizeof p->why, "%s", err ? err->msg : "cuDNN failed");
        plan_free(p);
        return pp_error_set(err, PP_ERR_UNSUPPORTED, "%s", p->why);
    }
    return PP_OK;
}

/* ---- the calls ---------------------------------------------------------------- */

static pp_status aligned(pp_exec *ex, int n, const void *const *ptr, pp_error *err)
{
    for (int i = 0; i < n; i++)
        if ((uintptr_t)ptr[i] & 15)
            return pp_error_set(err, PP_ERR_UNSUPPORTED,
                                "%s: cuDNN attention: operand %p is not 16-byte aligned",
                                ex->dev->name, ptr[i]);
    return PP_OK;
}

/* Runs (d, dir)'s plan on n tensors. */
static pp_status run(pp_exec *ex, const pp_attention_desc *d, pp_sdpa_dir dir, int n,
                     const int64_t *uids, void *const *ptrs, pp_error *err)
{
    pp_cuda_exec *ce;
    PP_TRY(pp_cuda_exec_begin(ex, 1, 0, &ce, err));
    sdpa_plan *p;
    PP_TRY(plan_for(ex, ce, d, dir, &p, err));
    void *ws = NULL;
    pp_status s = pp_exec_workspace(ex, p->ws, &ws, err);
    if (s == PP_ERR_OOM) {
        if (err) err->code = PP_ERR_UNSUPPORTED;
        return PP_ERR_UNSUPPORTED;
    }
    PP_TRY(s);
    gbuild g = {ex, ce, NULL, "", err};
    describe(g.what, sizeof g.what, d, false, dir);
    return pp_gconv_execute(&g, p->plan, n, uids, ptrs, ws);
}

pp_status pp_cuda_sdpa_forward(pp_exec *ex, const pp_attention_desc *d, const uint16_t *qkv,
                               uint16_t *y, float *lse, pp_error *err)
{
    const void *const ops[3] = {qkv, y, lse};
    PP_TRY(aligned(ex, 3, ops, err));
    float scale = 1.0f / sqrtf((float)(d->c / d->heads)), neg = -FLT_MAX;
    const int64_t uids[7] = {SDPA_UID_Q, SDPA_UID_K, SDPA_UID_V,   SDPA_UID_O,
                             SDPA_UID_STATS, SDPA_UID_SCALE, SDPA_UID_NEG};
    void *const ptrs[7] = {(void *)qkv, (void *)(qkv + d->c), (void *)(qkv + 2 * d->c), y, lse,
                           &scale, &neg};
    return run(ex, d, PP_SDPA_FWD, 7, uids, ptrs, err);
}

pp_status pp_cuda_sdpa_backward(pp_exec *ex, const pp_attention_desc *d, const uint16_t *qkv,
                                const uint16_t *y, const float *lse, const uint16_t *dy,
                                uint16_t *dqkv, pp_error *err)
{
    const void *const ops[5] = {qkv, y, lse, dy, dqkv};
    PP_TRY(aligned(ex, 5, ops, err));
    float scale = 1.0f / sqrtf((float)(d->c / d->heads)), neg = -FLT_MAX, one = 1.0f;
    const int64_t uids[12] = {SDPA_UID_Q,     SDPA_UID_K,     SDPA_UID_V,   SDPA_UID_O,
                              SDPA_UID_DO,    SDPA_UID_STATS, SDPA_UID_SCALE, SDPA_UID_NEG,
                              SDPA_UID_ONE,   SDPA_UID_DQ,    SDPA_UID_DK,  SDPA_UID_DV};
    void *const ptrs[12] = {(void *)qkv, (void *)(qkv + d->c), (void *)(qkv + 2 * d->c),
                            (void *)y,   (void *)dy,          (void *)lse,
                            &scale,      &neg,                &one,
                            dqkv,        dqkv + d->c,         dqkv + 2 * d->c};
    return run(ex, d, PP_SDPA_BWD, 12, uids, ptrs, err);
}

pp_status pp_cuda_sdpa_graph_check(pp_exec *ex, const pp_attention_desc *d, pp_sdpa_dir dir,
                                   int *ops, pp_error *err)
{
    sdpa_plan p;
    memset(&p, 0, sizeof p);
    gbuild g = {ex, NULL, NULL, "", err};
    describe(g.what, sizeof g.what, d, false, dir);
    const char *no = shape_refusal(d);
    pp_status s = no ? pp_error_set(err, PP_ERR_UNSUPPORTED, "%s: %s, for %s", ex->dev->name, no,
                                    g.what)
                     : PP_OK;
    p.sg = (sdpa_graph){.b = d->n, .h = d->heads, .s = d->t, .d = d->c / d->heads, .c = d->c};
    if (s == PP_OK) s = pp_sdpa_build(&g, &p.sg, dir == PP_SDPA_BWD);
    *ops = p.sg.n_ops;
    pp_sdpa_graph_free(&p.sg);
    return s;
}

/* ---- the report and the end ------------------------------------------------------ */

void pp_cuda_sdpa_report(pp_exec *ex, FILE *out)
{
    pp_cuda_exec *ce = ex ? pp_cuda_ex(ex) : NULL;
    if (!ce || !ce->sdpa) return;
    for (int i = 0; i < ce->sdpa->n; i++) {
        const sdpa_entry *e = ce->sdpa->e[i];
        for (int dir = 0; dir < 2; dir++) {
            char what[200];
            describe(what, sizeof what, &e->key, e->f32, (pp_sdpa_dir)dir);
            const pp_sdpa_use u = e->choice.use[dir];
            const sdpa_plan *p = &e->plan[dir];
            fprintf(out, "%s: %s", what,
                    u == PP_SDPA_CUDNN ? "cuDNN"
                    : u == PP_SDPA_MMA ? (e->f32 ? "ours on tensor cores (3xTF32)"
                                                 : "ours on tensor cores (mma)")
                    : u == PP_SDPA_OWN ? "ours"
                                       : "not run yet");
            if (u == PP_SDPA_CUDNN && p->ok)
                fprintf(out, " (engine %lld, workspace %zu B)", (long long)p->engine, p->ws);
            if (e->choice.why[dir][0]) fprintf(out, ": %s", e->choice.why[dir]);
            fputc('\n', out);
        }
    }
    fflush(out);
}

void pp_cuda_sdpa_cache_free(pp_exec *ex)
{
    pp_cuda_exec *ce = ex ? pp_cuda_ex(ex) : NULL;
    if (!ce || !ce->sdpa) return;
    pp_cuda_sdpa_cache *c = ce->sdpa;
    for (int i = 0; i < c->n; i++) {
        for (int dir = 0; dir < 2; dir++) plan_free(&c->e[i]->plan[dir]);
        free(c->e[i]);
    }
    free(c->e);
    free(c);
    ce->sdpa = NULL;
}
