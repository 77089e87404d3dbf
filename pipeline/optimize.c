/*
 * optimize.c - the planner of fit.h: for every schedule and split size, the
 * cut that minimises the slowest stage with each stage's recomputation chosen
 * to fit its device, timed by the simulator; the best few are kept.
 *
 * One search, in numbered passes per (schedule, split size):
 *   1. the variant plan (split, schedule), its lowered schedule (memory.c's
 *      run) and the unit times of every device at that split (profile.c);
 *   2. the dynamic program over cuts (best[s][j]: the smallest slowest stage
 *      of stages 0..s-1 holding units 0..j-1), whose stage cost is the
 *      fastest recompute mode whose predicted peak fits the stage's share of
 *      its device (its whole cap; after a failed sum over a shared device,
 *      cap / stages on it);
 *   3. the chosen cut's stages predicted again together (device sums), and
 *      the step simulated (streams/simulate.h); CPU stages of one host share
 *      its cores, so their step takes at least the sum of their work.
 * When nothing fits, the same program minimising the largest peak-to-cap
 * ratio names the closest a cut comes.
 */
#include "pipeline/fit.h"
#include "pipeline/fit_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/emit.h"
#include "streams/simulate.h"

#define NOMINAL_COPY_GBPS 10.0
#define DEFAULT_TOP 5
/* The planner leaves this share of every cap to the memory model's error
 * (a few percent on the CPU backend: tests/fit's error table). */
#define HEADROOM 0.97

static const pp_plan_recompute MODES[] = {PP_PLAN_RECOMPUTE_NEVER, PP_PLAN_RECOMPUTE_EXCEPT_LAST,
                                          PP_PLAN_RECOMPUTE_ALWAYS};
#define N_MODES 3

/* What one (schedule, split) search works on. */
typedef struct search {
    const pp_plan *v;              /* the variant plan */
    const pipe_fit_units *fu;
    pipe_fit_run *run;
    int S, n, m;
    const double *pf[PP_PLAN_MAX_STAGES], *pb[PP_PLAN_MAX_STAGES]; /* prefix sums of each
                                      stage's device's unit times: pf[s][j] = units 0..j-1 */
    int64_t cap[PP_PLAN_MAX_STAGES]; /* each stage's share of its device's cap (0: none) */
    bool ratio;                    /* cost: the smallest peak / cap instead of a time */
} search;

/* The time of stage s holding units i..j-1 with recompute mode r, per
 * micro-batch: forward + backward, the recomputed forward included. */
static double stage_time(const search *x, int s, int i, int j, pp_plan_recompute r, double *f,
                         double *b)
{
    double fw = x->pf[s][j] - x->pf[s][i], bw = x->pb[s][j] - x->pb[s][i];
    double again = r == PP_PLAN_RECOMPUTE_ALWAYS        ? 1.0
                   : r == PP_PLAN_RECOMPUTE_EXCEPT_LAST ? (double)(x->m - 1) / x->m
                                                        : 0.0;
    if (f) *f = fw;
    if (b) *b = bw + again * fw;
    return fw + bw + again * fw;
}

/* The cost of stage s holding units i..j-1 (INFINITY: nothing fits) and the
 * mode that gives it. */
static double stage_cost(search *x, int s, int i, int j, int *mode)
{
    double best = INFINITY;
    *mode = 0;
    for (int k = 0; k < N_MODES; k++) {
        pp_fit_stage o;
        pipe_fit_stage_predict(x->v, x->fu, x->run, s, i, j - 1, MODES[k], &o);
        double c;
        if (x->ratio) {
            c = x->cap[s] > 0 ? (double)o.peak / (double)x->cap[s] : 0.0;
        } else {
            if (x->cap[s] > 0 && o.peak > x->cap[s]) continue;
            c = stage_time(x, s, i, j, MODES[k], NULL, NULL);
        }
        if (c < best) {
            best = c;
            *mode = k;
        }
        if (!x->ratio) break; /* modes are in order of time: the first that fits */
    }
    return best;
}

/* The cut minimising the largest stage cost: first/last/mode per stage;
 * returns that cost (INFINITY: none). */
static double solve_cuts(search *x, int *first, int *last, int *mode)
{
    const int S = x->S, n = x->n;
    size_t cells = (size_t)(S + 1) * (size_t)(n + 1);
    double *best = malloc(cells * sizeof *best);
    int *from = malloc(cells * sizeof *from), *how = malloc(cells * sizeof *how);
    double result = INFINITY;
    if (!best || !from || !how) goto out;
#define AT(s, j) ((size_t)(s) * (size_t)(n + 1) + (size_t)(j))
    for (size_t c = 0; c < cells; c++) best[c] = INFINITY, from[c] = -1, how[c] = 0;
    best[AT(0, 0)] = 0;
    for (int s = 1; s <= S; s++)
        for (int j = s; j <= n - (S - s); j++)
            for (int i = s - 1; i < j; i++) {
                double prev = best[AT(s - 1, i)];
                if (!isfinite(prev)) continue;
                int k;
                double c = stage_cost(x, s - 1, i, j, &k);
                double v = prev > c ? prev : c;
                if (v < best[AT(s, j)]) {
                    best[AT(s, j)] = v;
                    from[AT(s, j)] = i;
                    how[AT(s, j)] = k;
                }
            }
    result = best[AT(S, n)];
    if (isfinite(result))
        for (int s = S, j = n; s >= 1; s--) {
            int i = from[AT(s, j)];
            first[s - 1] = i;
            last[s - 1] = j - 1;
            mode[s - 1] = how[AT(s, j)];
            j = i;
        }
#undef AT
out:
    free(best);
    free(from);
    free(how);
    return result;
}

/* ---- candidates ------------------------------------------------------------------- */

static int cmp_candidates(const void *a, const void *b)
{
    double x = ((const pp_fit_candidate *)a)->step_ms, y = ((const pp_fit_candidate *)b)->step_ms;
    return x < y ? -1 : x > y;
}

/* The caps of each stage: its device's `memory:`, a card's free memory, the
 * limit asked for; the lowest (0: none). */
static void device_caps(const pp_plan *plan, int64_t limit, int64_t *cap, pp_error *err)
{
    pp_fit_stage caps[PP_PLAN_MAX_STAGES] = {{0}};
    for (int s = 0; s < plan->n_stages; s++) caps[s].cap = pp_plan_device_memory(plan, s);
    if (pp_fit_caps(plan, caps, err) != PP_OK)
        for (int s = 0; s < plan->n_stages; s++) caps[s].cap = pp_plan_device_memory(plan, s);
    for (int s = 0; s < plan->n_stages; s++) {
        cap[s] = caps[s].cap;
        if (limit > 0 && (cap[s] == 0 || limit < cap[s])) cap[s] = limit;
        cap[s] = (int64_t)((double)cap[s] * HEADROOM);
    }
}

/* The stages sharing stage s's device. */
static int sharing(const pp_plan *plan, int s)
{
    int k = 0;
    for (int t = 0; t < plan->n_stages; t++)
        k += pp_plan_device_first_stage(plan, t) == pp_plan_device_first_stage(plan, s);
    return k;
}

/* Simulates candidate c (its forward/backward filled) under v's schedule. */
static pp_status simulate(const pp_plan *v, const pipe_fit_units *fu, pipe_fit_run *run,
                          pp_fit_candidate *c, pp_error *err)
{
    const int S = v->n_stages;
    const bool delay = v->model.kind == PP_MODEL_DELAY;
    double copy[PP_PLAN_MAX_STAGES] = {0};
    for (int b = 0; b + 1 < S; b++) {
        double bytes = delay ? (double)v->model.num_classes * 4
                             : (double)fu->units[c->last[b]].out_bytes;
        copy[b] = bytes * v->split_size / (NOMINAL_COPY_GBPS * 1e6);
    }
    pp_sim_costs costs = {
        .stages = S,
        .forward_ms = c->forward_ms,
        .backward_ms = c->backward_ms,
        .copy_act_ms = S > 1 ? copy : NULL,
        .copy_grad_ms = S > 1 ? copy : NULL,
        .ref_mb_size = delay ? 0 : v->split_size,
        .slots = run->slots,
    };
    pp_sim_result r;
    PP_TRY(pp_simulate(&run->sched, &costs, &r, err));
    c->step_ms = r.step_ms;
    c->bubble = r.bubble;
    /* CPU stages of one host share its cores (every cpu:N device has a worker
     * per core): a step takes at least their work end to end */
    double host = 0, busy = 0;
    int cpu = 0;
    for (int s = 0; s < S; s++) {
        busy += r.busy_ms[s];
        if (v->stages[s].device.kind != PP_DEVICE_CPU || delay) continue;
        host += r.busy_ms[s];
        cpu++;
    }
    if (cpu > 1 && host > c->step_ms) {
        c->step_ms = host;
        c->bubble = 1.0 - busy / (S * host);
    }
    c->images_per_s = c->step_ms > 0 ? v->batch_size * 1000.0 / c->step_ms : 0;
    pp_sim_result_free(&r);
    return PP_OK;
}

/* Unit times per device and split size, smoothed: each unit's times over the
 * split sizes measured are fitted by t(n) = a + b n (least squares in
 * relative error), which evens out a measurement a busy host disturbed. */
typedef struct unit_table {
    int n_dev, n_splits, n;
    pp_device_id dev[PP_PLAN_MAX_STAGES]; /* distinct devices (every cpu:N is one) */
    int stage_dev[PP_PLAN_MAX_STAGES];    /* each stage's entry of dev */
    const int *splits;
    double *f, *b;                        /* (n_dev x n_splits x n) fitted ms */
} unit_table;

#define UT(t, d, k) ((size_t)((d) * (t)->n_splits + (k)) * (size_t)(t)->n)

/* Fits y_k ~ a + b x_k minimising sum ((a + b x_k - y_k) / y_k)^2, writing the
 * fitted values (>= 0) over y. */
static void fit_affine(const int *x, double *y, size_t stride, int k)
{
    if (k < 3) return; /* two points or one: the fit passes through them */
    double s0 = 0, s1 = 0, s2 = 0, t0 = 0, t1 = 0;
    for (int i = 0; i < k; i++) {
        double yi = y[(size_t)i * stride];
        if (!(yi > 0)) return;
        double w = 1.0 / (yi * yi);
        s0 += w, s1 += w * x[i], s2 += w * x[i] * x[i];
        t0 += w * yi, t1 += w * x[i] * yi;
    }
    double det = s0 * s2 - s1 * s1;
    if (!(fabs(det) > 0)) return;
    double a = (t0 * s2 - t1 * s1) / det, b = (s0 * t1 - s1 * t0) / det;
    for (int i = 0; i < k; i++) {
        double v = a + b * x[i];
        y[(size_t)i * stride] = v > 0 ? v : 0;
    }
}

static void unit_table_free(unit_table *t)
{
    free(t->f);
    free(t->b);
}

/* Measures (or reads) every device's unit times at every split size. */
static pp_status unit_table_new(const pp_plan *plan, const int *splits, int n_splits,
                                unit_table *t, pp_profile_note *note, pp_error *err)
{
    memset(t, 0, sizeof *t);
    t->n = plan->catalogue.n;
    t->n_splits = n_splits;
    t->splits = splits;
    for (int s = 0; s < plan->n_stages; s++) {
        pp_device_id id = plan->stages[s].device;
        int d = 0;
        while (d < t->n_dev && !(t->dev[d].kind == id.kind &&
                                 (id.kind == PP_DEVICE_CPU || t->dev[d].index == id.index)))
            d++;
        if (d == t->n_dev) t->dev[t->n_dev++] = id;
        t->stage_dev[s] = d;
    }
    size_t cells = (size_t)t->n_dev * (size_t)n_splits * (size_t)t->n;
    t->f = calloc(cells + 1, sizeof *t->f);
    t->b = calloc(cells + 1, sizeof *t->b);
    if (!t->f || !t->b) {
        unit_table_free(t);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    }
    for (int d = 0; d < t->n_dev; d++) {
        for (int k = 0; k < n_splits; k++) {
            pp_unit_times u;
            pp_status st = pp_fit_profile(plan, t->dev[d], splits[k], &u, note, err);
            if (st != PP_OK) {
                unit_table_free(t);
                return st;
            }
            memcpy(t->f + UT(t, d, k), u.forward_ms, (size_t)t->n * sizeof(double));
            memcpy(t->b + UT(t, d, k), u.backward_ms, (size_t)t->n * sizeof(double));
            pp_unit_times_free(&u);
        }
        for (int u = 0; u < t->n; u++) {
            fit_affine(splits, t->f + UT(t, d, 0) + u, (size_t)t->n, n_splits);
            fit_affine(splits, t->b + UT(t, d, 0) + u, (size_t)t->n, n_splits);
        }
    }
    return PP_OK;
}

/* Each stage's prefix sums of its device's unit times at split index k. */
static void stage_times(const unit_table *t, int k, int S, search *x, double *pf, double *pb)
{
    const int n = t->n;
    for (int s = 0; s < S; s++) {
        double *f = pf + (size_t)s * (n + 1), *b = pb + (size_t)s * (n + 1);
        const double *tf = t->f + UT(t, t->stage_dev[s], k), *tb = t->b + UT(t, t->stage_dev[s], k);
        f[0] = b[0] = 0;
        for (int u = 0; u < n; u++) {
            f[u + 1] = f[u] + tf[u];
            b[u + 1] = b[u] + tb[u];
        }
        x->pf[s] = f;
        x->pb[s] = b;
    }
}

/* Searches one (schedule, split) variant v; adds a candidate to res when a
 * cut fits (*fits), and tracks the closest miss in *ratio / res->why. */
static pp_status search_variant(const pp_plan *v, const pipe_fit_units *fu,
                                const unit_table *times, int k, const int64_t *cap,
                                pp_fit_result *res, int cap_n, bool *fits, double *closest,
                                pp_error *err)
{
    const int S = v->n_stages;
    const bool delay = v->model.kind == PP_MODEL_DELAY;
    pipe_fit_run run;
    PP_TRY(pipe_fit_run_new(v, &run, err));
    search x = {.v = v, .fu = fu, .run = &run, .S = S, .n = delay ? S : fu->n,
                .m = run.sched.micro_batches};
    double *pf = NULL, *pb = NULL;
    pp_fit_candidate c;
    memset(&c, 0, sizeof c);
    c.schedule = v->schedule;
    c.split_size = v->split_size;
    c.micro_batches = v->micro_batches;
    pp_status st = PP_OK;
    int mode[PP_PLAN_MAX_STAGES] = {0};
    *fits = false;
    if (delay) {
        for (int s = 0; s < S; s++) {
            const pp_model_config *m = &v->model;
            c.first[s] = c.last[s] = -1;
            c.forward_ms[s] = m->forward_ms[m->n_forward_ms > 1 ? s : 0];
            c.backward_ms[s] = m->backward_ms[m->n_backward_ms > 1 ? s : 0];
        }
    } else {
        pf = malloc((size_t)S * (size_t)(x.n + 1) * sizeof *pf);
        pb = malloc((size_t)S * (size_t)(x.n + 1) * sizeof *pb);
        if (pf && pb)
            stage_times(times, k, S, &x, pf, pb);
        else
            st = pp_error_set(err, PP_ERR_OOM, "out of host memory");
        /* 2. the cut: each stage's whole cap first, its share after a failed sum */
        for (int pass = 0; pass < 2 && st == PP_OK && !*fits; pass++) {
            for (int s = 0; s < S; s++) x.cap[s] = cap[s] > 0 ? cap[s] / (pass ? sharing(v, s) : 1) : 0;
            if (!isfinite(solve_cuts(&x, c.first, c.last, mode))) break;
            pp_fit_stage pred[PP_PLAN_MAX_STAGES];
            for (int s = 0; s < S; s++)
                pipe_fit_stage_predict(v, fu, &run, s, c.first[s], c.last[s], MODES[mode[s]],
                                       &pred[s]);
            pipe_fit_device_peaks(v, &run, pred);
            bool ok = true;
            for (int s = 0; s < S; s++) {
                ok &= cap[s] == 0 || pred[s].device_peak <= cap[s];
                c.peak[s] = pred[s].device_peak;
                c.cap[s] = cap[s];
                c.recompute[s] = MODES[mode[s]];
                stage_time(&x, s, c.first[s], c.last[s] + 1, MODES[mode[s]], &c.forward_ms[s],
                           &c.backward_ms[s]);
            }
            *fits = ok;
        }
    }
    if (st == PP_OK && delay) {
        pp_fit_stage pred[PP_PLAN_MAX_STAGES];
        for (int s = 0; s < S; s++)
            pipe_fit_stage_predict(v, fu, &run, s, -1, -1, PP_PLAN_RECOMPUTE_NEVER, &pred[s]);
        pipe_fit_device_peaks(v, &run, pred);
        *fits = true;
        for (int s = 0; s < S; s++) {
            c.peak[s] = pred[s].device_peak;
            c.cap[s] = cap[s];
            *fits &= cap[s] == 0 || c.peak[s] <= cap[s];
        }
    }
    if (st == PP_OK && *fits) st = simulate(v, fu, &run, &c, err);
    if (st == PP_OK && *fits) {
        if (res->n < cap_n) {
            res->best[res->n++] = c;
        } else if (c.step_ms < res->best[res->n - 1].step_ms) {
            res->best[res->n - 1] = c;
        }
        qsort(res->best, (size_t)res->n, sizeof *res->best, cmp_candidates);
    }
    /* the closest miss: the cut with the smallest largest peak-to-cap ratio */
    if (st == PP_OK && !*fits && !delay) {
        x.ratio = true;
        for (int s = 0; s < S; s++) x.cap[s] = cap[s] > 0 ? cap[s] / sharing(v, s) : 0;
        int first[PP_PLAN_MAX_STAGES], last[PP_PLAN_MAX_STAGES];
        double worst = solve_cuts(&x, first, last, mode);
        if (isfinite(worst) && worst < *closest) {
            *closest = worst;
            int ws = 0;
            double wr = -1;
            int64_t wpeak = 0;
            for (int s = 0; s < S; s++) {
                pp_fit_stage o;
                pipe_fit_stage_predict(v, fu, &run, s, first[s], last[s], MODES[mode[s]], &o);
                double r = x.cap[s] > 0 ? (double)o.peak / (double)x.cap[s] : 0;
                if (r > wr) ws = s, wr = r, wpeak = o.peak;
            }
            snprintf(res->why, sizeof res->why,
                     "the closest: schedule %s, split size %d and recompute %s on stage %d (%s), "
                     "which still needs %.1f MiB there, over its %.1f MiB",
                     pp_plan_schedule_name(v->schedule), v->split_size,
                     pp_plan_recompute_name(MODES[mode[ws]]), ws, v->stages[ws].device_name,
                     (double)wpeak / (1 << 20), (double)x.cap[ws] / (1 << 20));
        }
    }
    free(pf);
    free(pb);
    pipe_fit_run_free(&run);
    return st;
}

/* The split sizes to try: powers of two below the batch, the batch, the
 * plan's own; ascending, distinct. */
static int default_splits(const pp_plan *plan, int *out, int cap)
{
    int n = 0;
    for (int s = 1; s < plan->batch_size && n < cap - 2; s *= 2) out[n++] = s;
    out[n++] = plan->batch_size;
    bool has = false;
    for (int i = 0; i < n; i++) has |= out[i] == plan->split_size;
    if (!has) out[n++] = plan->split_size;
    for (int i = 1; i < n; i++) /* insertion sort */
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

pp_status pp_fit_optimize(const pp_plan *plan, const pp_fit_options *opt, pp_fit_result *res,
                          pp_error *err)
{
    if (!plan || !res) return pp_error_set(err, PP_ERR_INVALID, "pp_fit_optimize: NULL argument");
    memset(res, 0, sizeof *res);
    pp_fit_options o = opt ? *opt : (pp_fit_options){0};
    if (o.memory_limit < 0 || o.n_splits < 0 || (o.n_splits > 0 && !o.splits))
        return pp_error_set(err, PP_ERR_INVALID, "pp_fit_optimize: bad options");
    if (o.top <= 0) o.top = DEFAULT_TOP;
    if (plan->replicas > 1)
        return pp_error_set(err, PP_ERR_INPUT, "%s: the planner searches one pipeline; plan "
                            "replicas by hand (remove replicas: to search one)", plan->path);
    for (int s = 0; s < plan->n_stages; s++)
        if (plan->stages[s].rank != 0)
            return pp_error_set(err, PP_ERR_INPUT, "%s: the planner measures units in this "
                                "process: its stages cannot name other ranks (stage %d is on "
                                "rank %d)", plan->path, s, plan->stages[s].rank);
    if (plan->model.kind != PP_MODEL_DELAY && plan->catalogue.n < plan->n_stages)
        return pp_error_set(err, PP_ERR_INPUT, "%s: %d devices but %s has only %d units",
                            plan->path, plan->n_stages, plan->model.name, plan->catalogue.n);
    int splits[64];
    int n_splits = o.n_splits;
    if (n_splits > 64) n_splits = 64;
    if (n_splits > 0)
        memcpy(splits, o.splits, (size_t)n_splits * sizeof *splits);
    else
        n_splits = default_splits(plan, splits, 64);
    res->best = calloc((size_t)o.top, sizeof *res->best);
    if (!res->best) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    pipe_fit_units fu;
    PP_TRY(pipe_fit_units_new(plan, &fu, err));
    int64_t cap[PP_PLAN_MAX_STAGES];
    device_caps(plan, o.memory_limit, cap, err);
    double closest = INFINITY;
    pp_status st = PP_OK;
    /* 1. the split sizes every unit can train on */
    int valid[64], n_valid = 0;
    for (int k = 0; k < n_splits; k++) {
        pp_plan v = *plan;
        v.micro_sizes = NULL;
        bool ok = splits[k] >= 1 && splits[k] <= plan->batch_size &&
                  pp_plan_split(&v, splits[k], 0, NULL) == PP_OK &&
                  (plan->model.kind == PP_MODEL_DELAY ||
                   pp_plan_check_micro_batches(&v, NULL) == PP_OK);
        free(v.micro_sizes);
        bool dup = false;
        for (int i = 0; i < n_valid; i++) dup |= valid[i] == splits[k];
        if (ok && !dup) valid[n_valid++] = splits[k];
    }
    unit_table times = {0};
    if (plan->model.kind != PP_MODEL_DELAY && n_valid > 0)
        st = unit_table_new(plan, valid, n_valid, &times, &res->note, err);
    static const pp_plan_schedule schedules[] = {PP_PLAN_SCHEDULE_GPIPE, PP_PLAN_SCHEDULE_1F1B};
    for (int k = 0; k < n_valid && st == PP_OK; k++) {
        pp_plan v = *plan;
        v.micro_sizes = NULL;
        v.stages_auto = false;
        st = pp_plan_split(&v, valid[k], 0, err);
        for (size_t q = 0; q < sizeof schedules / sizeof schedules[0] && st == PP_OK; q++) {
            v.schedule = schedules[q];
            bool fits = false;
            st = search_variant(&v, &fu, &times, k, cap, res, o.top, &fits, &closest, err);
            res->tried++;
            res->fitting += fits;
        }
        free(v.micro_sizes);
    }
    unit_table_free(&times);
    pipe_fit_units_free(&fu);
    if (st != PP_OK) pp_fit_result_free(res);
    return st;
}

void pp_fit_result_free(pp_fit_result *res)
{
    if (!res) return;
    free(res->best);
    res->best = NULL;
    res->n = 0;
}

pp_status pp_fit_emit(const pp_plan *plan, const pp_fit_candidate *c, int64_t memory_limit,
                      char **out, size_t *len, pp_error *err)
{
    if (!plan || !c || !out) return pp_error_set(err, PP_ERR_INVALID, "pp_fit_emit: NULL argument");
    pp_plan v = *plan;
    v.micro_sizes = NULL;
    PP_TRY(pp_plan_split(&v, c->split_size, 0, err));
    v.schedule = c->schedule;
    v.stages_auto = false;
    v.balance = PP_PLAN_BALANCE_NONE;
    bool same = true;
    for (int s = 0; s < v.n_stages; s++) {
        if (plan->model.kind != PP_MODEL_DELAY) {
            v.stages[s].first = c->first[s];
            v.stages[s].last = c->last[s];
            same &= c->recompute[s] == c->recompute[0];
        }
    }
    v.recompute = plan->model.kind == PP_MODEL_DELAY ? plan->recompute
                  : same                             ? c->recompute[0]
                                                     : PP_PLAN_RECOMPUTE_NEVER;
    for (int s = 0; s < v.n_stages; s++) {
        pp_plan_stage *ps = &v.stages[s];
        ps->has_recompute = plan->model.kind != PP_MODEL_DELAY && !same &&
                            c->recompute[s] != PP_PLAN_RECOMPUTE_NEVER;
        ps->recompute = ps->has_recompute ? c->recompute[s] : PP_PLAN_RECOMPUTE_NEVER;
        int64_t capped = pp_plan_device_memory(plan, s);
        if (memory_limit > 0 && (capped == 0 || memory_limit < capped)) capped = memory_limit;
        ps->memory_bytes = capped;
    }
    pp_status st = pp_plan_emit(&v, out, len, err);
    free(v.micro_sizes);
    return st;
}
