/*
 * limits.c - the memory caps of fit.h: a CUDA card's free memory as the
 * default cap, and the refusal of a plan whose predicted peak exceeds a cap,
 * with what would fit instead (each alternative predicted by the same model).
 */
#include "pipeline/fit.h"
#include "pipeline/fit_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"

pp_status pp_fit_caps(const pp_plan *plan, pp_fit_stage *stages, pp_error *err)
{
    if (!plan || !stages) return pp_error_set(err, PP_ERR_INVALID, "pp_fit_caps: NULL argument");
    pp_registry *reg = NULL;
    pp_status st = PP_OK;
    for (int s = 0; s < plan->n_stages && st == PP_OK; s++) {
        const pp_plan_stage *ps = &plan->stages[s];
        if (stages[s].cap > 0 || ps->device.kind != PP_DEVICE_CUDA || ps->rank != 0) continue;
        if (!reg && (st = pp_registry_new(&reg, err)) != PP_OK) break;
        pp_device_ctx *dev;
        pp_error e;
        size_t free_b, total_b;
        /* a card this build or machine lacks is reported when the run opens it */
        if (pp_registry_get(reg, ps->device, &dev, &e) != PP_OK ||
            pp_device_memory_info(dev, &free_b, &total_b, &e) != PP_OK)
            continue;
        for (int t = 0; t < plan->n_stages; t++)
            if (pp_plan_device_first_stage(plan, t) == pp_plan_device_first_stage(plan, s)) {
                stages[t].cap = (int64_t)free_b;
                stages[t].cap_from_card = true;
            }
    }
    pp_registry_free(reg);
    return st;
}

/* The predicted device peak of stage s under a variant of plan; -1 when the
 * variant cannot be predicted. */
static int64_t variant_peak(const pp_plan *v, const pipe_fit_units *fu, int s)
{
    pp_fit_stage pred[PP_PLAN_MAX_STAGES];
    if (pipe_fit_predict_with(v, fu, pred, NULL) != PP_OK) return -1;
    return pred[s].device_peak;
}

/* Appends "; " and text to msg (n bytes). */
static void add(char *msg, size_t n, const char *text)
{
    size_t used = strlen(msg);
    if (used + 1 < n) snprintf(msg + used, n - used, "%s%s", used ? "; " : "", text);
}

static const char *mib(int64_t b, char *buf, size_t n)
{
    if (b >= (int64_t)1 << 30)
        snprintf(buf, n, "%.2f GiB", (double)b / (1 << 30));
    else
        snprintf(buf, n, "%.1f MiB", (double)b / (1 << 20));
    return buf;
}

/* What would bring stage s's device under cap, each alternative predicted:
 * the largest smaller split size, recomputation on the stage, the other
 * schedule, one unit fewer at either end of the stage. */
static void would_fit(const pp_plan *plan, const pipe_fit_units *fu, int s, int64_t cap,
                      char *msg, size_t n)
{
    msg[0] = '\0';
    char text[160], b[32];
    pp_plan v = *plan;
    /* 1. a smaller split size */
    for (int split = plan->split_size - 1; split >= 1; split--) {
        v = *plan;
        v.micro_sizes = NULL;
        if (pp_plan_split(&v, split, 0, NULL) != PP_OK) break;
        int64_t p = pp_plan_check_micro_batches(&v, NULL) == PP_OK ? variant_peak(&v, fu, s) : -1;
        free(v.micro_sizes);
        if (p < 0) break;
        if (p <= cap) {
            snprintf(text, sizeof text, "batch.split_size: %d (predicted %s)", split,
                     mib(p, b, sizeof b));
            add(msg, n, text);
            break;
        }
    }
    /* 2. recomputation on the stage */
    static const pp_plan_recompute modes[] = {PP_PLAN_RECOMPUTE_EXCEPT_LAST,
                                              PP_PLAN_RECOMPUTE_ALWAYS};
    for (int k = 0; k < 2 && fu->n > 0; k++) {
        if (pp_plan_stage_recompute(plan, s) >= modes[k]) continue;
        v = *plan;
        v.stages[s].has_recompute = true;
        v.stages[s].recompute = modes[k];
        int64_t p = variant_peak(&v, fu, s);
        if (p >= 0 && p <= cap) {
            snprintf(text, sizeof text, "recompute: %s on stage %d (predicted %s)",
                     pp_plan_recompute_name(modes[k]), s, mib(p, b, sizeof b));
            add(msg, n, text);
            break;
        }
    }
    /* 3. the other schedule */
    v = *plan;
    v.schedule = plan->schedule == PP_PLAN_SCHEDULE_GPIPE ? PP_PLAN_SCHEDULE_1F1B
                                                          : PP_PLAN_SCHEDULE_GPIPE;
    int64_t p = variant_peak(&v, fu, s);
    if (p >= 0 && p <= cap) {
        snprintf(text, sizeof text, "schedule: %s (predicted %s)",
                 pp_plan_schedule_name(v.schedule), mib(p, b, sizeof b));
        add(msg, n, text);
    }
    /* 4. another cut: the stage's first or last unit to its neighbour */
    const pp_plan_stage *ps = &plan->stages[s];
    for (int side = 0; side < 2 && fu->n > 0 && ps->first < ps->last; side++) {
        int t = side ? s + 1 : s - 1;
        if (t < 0 || t >= plan->n_stages) continue;
        v = *plan;
        if (side) {
            v.stages[s].last--;
            v.stages[t].first--;
        } else {
            v.stages[s].first++;
            v.stages[t].last++;
        }
        pp_fit_stage pred[PP_PLAN_MAX_STAGES];
        if (pipe_fit_predict_with(&v, fu, pred, NULL) != PP_OK) continue;
        int64_t tcap = pred[t].cap;
        if (pred[s].device_peak > cap || (tcap > 0 && pred[t].device_peak > tcap)) continue;
        const char *unit = fu->cat.units[side ? ps->last : ps->first].name;
        snprintf(text, sizeof text, "%s to stage %d (predicted %s)", unit, t,
                 mib(pred[s].device_peak, b, sizeof b));
        add(msg, n, text);
        break;
    }
    if (!msg[0]) snprintf(msg, n, "none of a smaller split, recomputation, the other schedule "
                                  "or moving one unit fits; use a larger cap or more stages");
}

pp_status pp_fit_check(const pp_plan *plan, const pp_fit_stage *pred, pp_error *err)
{
    if (!plan || !pred) return pp_error_set(err, PP_ERR_INVALID, "pp_fit_check: NULL argument");
    for (int s = 0; s < plan->n_stages; s++) {
        const pp_fit_stage *p = &pred[s];
        if (p->cap <= 0 || p->device_peak <= p->cap) continue;
        /* the stage of the device's cap, and the stage that needs the most */
        int cap_stage = s, big = s;
        for (int t = 0; t < plan->n_stages; t++) {
            if (pp_plan_device_first_stage(plan, t) != pp_plan_device_first_stage(plan, s))
                continue;
            if (plan->stages[t].memory_bytes > 0 && plan->stages[cap_stage].memory_bytes <= 0)
                cap_stage = t;
            if (pred[t].peak > pred[big].peak) big = t;
        }
        pipe_fit_units fu;
        PP_TRY(pipe_fit_units_new(plan, &fu, err));
        char fit[600], a[32], b[32], c[32];
        would_fit(plan, &fu, big, p->cap, fit, sizeof fit);
        pipe_fit_units_free(&fu);
        const pp_plan_stage *cs = &plan->stages[cap_stage];
        pp_mark at = p->cap_from_card || cs->memory_mark.line <= 0 ? plan->stages[big].device_mark
                                                                   : cs->memory_mark;
        char shared[96] = "";
        if (p->device_peak != pred[big].peak)
            snprintf(shared, sizeof shared, " (its own %s; the other stages on %s add the rest)",
                     mib(pred[big].peak, c, sizeof c), cs->device_name);
        char msg[1024];
        snprintf(msg, sizeof msg,
                 "stage %d (%s): predicted peak %s (%lld bytes)%s exceeds the %s of %s, %s "
                 "(%lld bytes); would fit: %s",
                 big, plan->stages[big].device_name, mib(p->device_peak, a, sizeof a),
                 (long long)p->device_peak, shared,
                 p->cap_from_card ? "free memory" : "memory cap", cs->device_name,
                 mib(p->cap, b, sizeof b), (long long)p->cap, fit);
        if (at.line > 0)
            return pp_error_set(err, PP_ERR_INPUT, "%s:%d:%d: %s", plan->path, at.line, at.col,
                                msg);
        return pp_error_set(err, PP_ERR_INPUT, "%s: %s", plan->path, msg);
    }
    return PP_OK;
}
