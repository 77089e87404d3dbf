/*
 * balance.c - exact min-max contiguous partition (balance.h) and the plan's
 * `stages: auto` resolution on top of it (plan.h).
 */
#include "partitioner/balance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/plan.h"

static void bytes_text(double b, char *buf, size_t n)
{
    if (b >= 1073741824.0)
        snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0)
        snprintf(buf, n, "%.2f MiB", b / 1048576.0);
    else if (b >= 1024.0)
        snprintf(buf, n, "%.2f KiB", b / 1024.0);
    else
        snprintf(buf, n, "%.0f bytes", b);
}

static const char *stage_name(const pp_balance_problem *pb, int s, char *buf, size_t n)
{
    if (pb->stage_names && pb->stage_names[s])
        snprintf(buf, n, "%s (stage %d)", pb->stage_names[s], s);
    else
        snprintf(buf, n, "stage %d", s);
    return buf;
}

static const char *unit_label(const pp_balance_problem *pb, int u, char *buf, size_t n)
{
    if (pb->unit_names && pb->unit_names[u])
        snprintf(buf, n, "%s", pb->unit_names[u]);
    else
        snprintf(buf, n, "unit %d", u);
    return buf;
}

/* Bytes stage s needs for units i..j (inclusive). */
static double seg_memory(const pp_balance_problem *pb, int s, int i, int j)
{
    double fixed = 0, flight = 0;
    for (int u = i; u <= j; u++) {
        if (pb->unit_fixed_bytes) fixed += pb->unit_fixed_bytes[u];
        if (pb->unit_flight_bytes) flight += pb->unit_flight_bytes[u];
    }
    double k = pb->stage_in_flight ? pb->stage_in_flight[s] : 1.0;
    return fixed + k * flight;
}

/* Explains why no partition fits in memory, given reach counts. */
static pp_status explain_memory(const pp_balance_problem *pb, const double *best, pp_error *err)
{
    int n = pb->n_units, S = pb->n_stages;
    /* furthest[s]: most units stages 0..s-1 can hold (-1: none) */
    int start = 0, k = S - 1;
    for (int s = 1; s <= S; s++) {
        int far = -1;
        for (int j = 0; j <= n; j++)
            if (isfinite(best[(size_t)s * (size_t)(n + 1) + (size_t)j])) far = j;
        if (far < 0 || s == S) {
            k = s - 1;
            break;
        }
        start = far;
    }
    char sn[64], a[64], b[64], need[32], cap[32];
    stage_name(pb, k, sn, sizeof sn);
    bytes_text(pb->capacity[k], cap, sizeof cap);
    if (start >= n) start = n - 1;
    if (k == S - 1) {
        bytes_text(seg_memory(pb, k, start, n - 1), need, sizeof need);
        return pp_error_set(err, PP_ERR_INPUT,
                            "memory too small: %s has %s but would need at least %s for the "
                            "remaining units %s..%s",
                            sn, cap, need, unit_label(pb, start, a, sizeof a),
                            unit_label(pb, n - 1, b, sizeof b));
    }
    bytes_text(seg_memory(pb, k, start, start), need, sizeof need);
    return pp_error_set(err, PP_ERR_INPUT,
                        "memory too small: %s has %s but the next unit it could hold, %s, needs "
                        "%s",
                        sn, cap, unit_label(pb, start, a, sizeof a), need);
}

pp_status pp_balance_partition(const pp_balance_problem *pb, int *first, double *max_cost,
                               pp_error *err)
{
    if (!pb || !first || !pb->cost || pb->n_units < 1 || pb->n_stages < 1)
        return pp_error_set(err, PP_ERR_INVALID, "balance: bad arguments");
    int n = pb->n_units, S = pb->n_stages;
    for (int u = 0; u < n; u++)
        if (!isfinite(pb->cost[u]) || pb->cost[u] < 0)
            return pp_error_set(err, PP_ERR_INVALID,
                                "balance: cost of unit %d is not a finite non-negative number", u);
    for (int u = 0; u < n; u++) {
        double fb = pb->unit_fixed_bytes ? pb->unit_fixed_bytes[u] : 0;
        double lb = pb->unit_flight_bytes ? pb->unit_flight_bytes[u] : 0;
        if (!isfinite(fb) || fb < 0 || !isfinite(lb) || lb < 0)
            return pp_error_set(err, PP_ERR_INVALID,
                                "balance: bytes of unit %d are not finite and non-negative", u);
    }
    for (int s = 0; s < S; s++) {
        double k = pb->stage_in_flight ? pb->stage_in_flight[s] : 1.0;
        double c = pb->capacity ? pb->capacity[s] : 0;
        if (!isfinite(k) || k < 0 || !isfinite(c) || c < 0)
            return pp_error_set(err, PP_ERR_INVALID,
                                "balance: in-flight count or capacity of stage %d is invalid", s);
    }
    if (S > n)
        return pp_error_set(err, PP_ERR_INPUT,
                            "cannot split %d units into %d stages: every stage needs at least "
                            "one unit",
                            n, S);
    size_t cells = (size_t)(S + 1) * (size_t)(n + 1);
    double *best = malloc(cells * sizeof *best);
    int *from = malloc(cells * sizeof *from);
    if (!best || !from) {
        free(best);
        free(from);
        return pp_error_set(err, PP_ERR_OOM, "balance: out of host memory");
    }
#define AT(s, j) ((size_t)(s) * (size_t)(n + 1) + (size_t)(j))
    for (size_t c = 0; c < cells; c++) {
        best[c] = INFINITY;
        from[c] = -1;
    }
    best[AT(0, 0)] = 0;
    bool limits = pb->capacity != NULL;
    for (int s = 1; s <= S; s++) {
        double cap = limits ? pb->capacity[s - 1] : 0;
        double k = pb->stage_in_flight ? pb->stage_in_flight[s - 1] : 1.0;
        /* stage s-1 takes units i..j-1; stages before it hold i >= s-1 units and
         * the stages after it need at least S-s units */
        for (int j = s; j <= n - (S - s); j++) {
            double seg = 0, fixed = 0, flight = 0;
            double b = INFINITY;
            int arg = -1;
            for (int i = j - 1; i >= s - 1; i--) {
                seg += pb->cost[i];
                if (pb->unit_fixed_bytes) fixed += pb->unit_fixed_bytes[i];
                if (pb->unit_flight_bytes) flight += pb->unit_flight_bytes[i];
                if (limits && cap > 0 && fixed + k * flight > cap) break; /* grows with i-- */
                double prev = best[AT(s - 1, i)];
                if (!isfinite(prev)) continue;
                double v = prev > seg ? prev : seg;
                if (v <= b) { /* <=: prefer the earliest boundary among equals */
                    b = v;
                    arg = i;
                }
            }
            best[AT(s, j)] = b;
            from[AT(s, j)] = arg;
        }
    }
    pp_status st = PP_OK;
    if (!isfinite(best[AT(S, n)])) {
        st = limits ? explain_memory(pb, best, err)
                    : pp_error_set(err, PP_ERR_INTERNAL, "balance: no partition found");
    } else {
        int j = n;
        for (int s = S; s >= 1; s--) {
            int i = from[AT(s, j)];
            first[s - 1] = i;
            j = i;
        }
        if (max_cost) *max_cost = best[AT(S, n)];
    }
#undef AT
    free(best);
    free(from);
    return st;
}

/* ------------------------------------------------------------------ */
/* plans                                                                */

int pp_plan_in_flight(const pp_plan *plan, int stage)
{
    int m = plan->micro_batches;
    if (plan->schedule == PP_PLAN_SCHEDULE_1F1B) {
        int left = plan->n_stages - stage;
        return left < m ? left : m;
    }
    return m;
}

pp_plan_recompute pp_plan_stage_recompute(const pp_plan *plan, int s)
{
    if (s >= 0 && s < plan->n_stages && plan->stages[s].has_recompute)
        return plan->stages[s].recompute;
    return plan->recompute;
}

bool pp_plan_recomputes(const pp_plan *plan, int s, int mb, int m)
{
    switch (pp_plan_stage_recompute(plan, s)) {
    case PP_PLAN_RECOMPUTE_ALWAYS: return true;
    case PP_PLAN_RECOMPUTE_EXCEPT_LAST: return mb != m - 1;
    default: return false;
    }
}

int pp_plan_device_first_stage(const pp_plan *plan, int s)
{
    const pp_plan_stage *a = &plan->stages[s];
    for (int t = 0; t < s; t++)
        if (plan->stages[t].rank == a->rank && pp_device_id_equal(plan->stages[t].device, a->device))
            return t;
    return s;
}

int64_t pp_plan_device_memory(const pp_plan *plan, int s)
{
    const pp_plan_stage *a = &plan->stages[s];
    int64_t cap = 0;
    for (int t = 0; t < plan->n_stages; t++) {
        const pp_plan_stage *b = &plan->stages[t];
        if (b->rank == a->rank && pp_device_id_equal(b->device, a->device) &&
            b->memory_bytes > cap)
            cap = b->memory_bytes;
    }
    return cap;
}

int pp_plan_devices(const pp_plan *plan, int *stage_device)
{
    int n = 0;
    for (int s = 0; s < plan->n_stages; s++) {
        const pp_plan_stage *ps = &plan->stages[s];
        int t = 0;
        while (t < s && (plan->stages[t].rank != ps->rank ||
                         plan->stages[t].device.kind != ps->device.kind ||
                         plan->stages[t].device.index != ps->device.index))
            t++;
        stage_device[s] = t < s ? stage_device[t] : n++;
    }
    return n;
}

/* Parameter copies a unit's parameters cost: weights, gradients, the optimizer's state. */
static int param_copies(const pp_plan *plan)
{
    return 2 + pp_plan_optimizer_states(plan);
}

int64_t pp_plan_stage_memory_estimate(const pp_plan *plan, int first, int last, int in_flight)
{
    const pp_catalogue *cat = &plan->catalogue;
    int64_t fixed = 0;
    for (int u = first; u <= last && u < cat->n; u++)
        if (u >= 0) fixed += cat->units[u].param_bytes;
    const int64_t act = pp_catalogue_kept_bytes(cat, first, last, plan->split_size);
    return fixed * param_copies(plan) + act * in_flight;
}

pp_status pp_plan_resolve_auto(pp_plan *plan, const pp_catalogue *cat, const double *unit_costs,
                               pp_error *err)
{
    return pp_plan_resolve_auto_in_flight(plan, cat, unit_costs, NULL, err);
}

pp_status pp_plan_resolve_auto_in_flight(pp_plan *plan, const pp_catalogue *cat,
                                         const double *unit_costs, const int *stage_in_flight,
                                         pp_error *err)
{
    if (!plan) return pp_error_set(err, PP_ERR_INVALID, "resolve_auto: NULL plan");
    if (!plan->stages_auto) return PP_OK;
    if (!cat) cat = &plan->catalogue;
    if (cat->n < 1 || !cat->units)
        return pp_error_set(err, PP_ERR_INVALID, "resolve_auto: the catalogue is empty");
    if (plan->catalogue.n > 0 && cat->n != plan->catalogue.n)
        return pp_error_set(err, PP_ERR_INVALID,
                            "resolve_auto: the catalogue has %d units but the plan's model has %d",
                            cat->n, plan->catalogue.n);
    if (plan->balance == PP_PLAN_BALANCE_TIME && !unit_costs)
        return pp_error_set(err, PP_ERR_INVALID,
                            "balance: time needs measured per-unit costs (profile the units "
                            "first)");
    int n = cat->n, S = plan->n_stages;
    double *cost = malloc((size_t)n * sizeof *cost);
    double *fixed = malloc((size_t)n * sizeof *fixed);
    double *flight = malloc((size_t)n * sizeof *flight);
    const char **unames = malloc((size_t)n * sizeof *unames);
    if (!cost || !fixed || !flight || !unames) {
        free(cost);
        free(fixed);
        free(flight);
        free(unames);
        return pp_error_set(err, PP_ERR_OOM, "resolve_auto: out of host memory");
    }
    int copies = param_copies(plan);
    for (int u = 0; u < n; u++) {
        const pp_unit_info *ui = &cat->units[u];
        fixed[u] = (double)ui->param_bytes * copies;
        /* per unit, as if each kept its own input and output: at most what a
         * stage keeps (pp_plan_stage_memory_estimate counts an activation two
         * neighbours share once), so a partition found to fit does */
        flight[u] = (double)ui->act_bytes * plan->split_size + (double)ui->act_fixed_bytes;
        if (unit_costs)
            cost[u] = unit_costs[u];
        else if (plan->balance == PP_PLAN_BALANCE_MEMORY)
            cost[u] = fixed[u] + flight[u];
        else
            cost[u] = (double)ui->fwd_flops;
        unames[u] = ui->name;
    }
    double in_flight[PP_PLAN_MAX_STAGES], capacity[PP_PLAN_MAX_STAGES];
    const char *snames[PP_PLAN_MAX_STAGES];
    bool limits = false;
    for (int s = 0; s < S; s++) {
        in_flight[s] = stage_in_flight ? stage_in_flight[s] : pp_plan_in_flight(plan, s);
        capacity[s] = (double)pp_plan_device_memory(plan, s);
        limits |= capacity[s] > 0;
        snames[s] = plan->stages[s].device_name;
    }
    pp_balance_problem pb = {
        .n_units = n,
        .cost = cost,
        .n_stages = S,
        .unit_fixed_bytes = fixed,
        .unit_flight_bytes = flight,
        .stage_in_flight = in_flight,
        .capacity = limits ? capacity : NULL,
        .stage_names = snames,
        .unit_names = unames,
    };
    int first[PP_PLAN_MAX_STAGES];
    pp_status st = pp_balance_partition(&pb, first, NULL, err);
    if (st == PP_OK) {
        for (int s = 0; s < S; s++) {
            plan->stages[s].first = first[s];
            plan->stages[s].last = s + 1 < S ? first[s + 1] - 1 : n - 1;
        }
        plan->stages_auto = false;
    } else if (st == PP_ERR_INPUT && plan->stages_mark.line > 0) {
        pp_error_prefix(err, "%s:%d:%d", plan->path ? plan->path : "<plan>",
                        plan->stages_mark.line, plan->stages_mark.col);
    }
    free(cost);
    free(fixed);
    free(flight);
    free(unames);
    return st;
}
