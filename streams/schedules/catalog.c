/*
 * catalog.c - the built-in schedules (schedule.h): the table of generators
 * (gen.h), names, references and placements, and pp_schedule_generate /
 * pp_schedule_build, in three passes:
 *   1. check the shape's placement against the kind's;
 *   2. fill a schedule for the micro-batch count the construction needs (the
 *      generator's padded count, >= m);
 *   3. keep the caller's micro-batches of it (pp_schedule_truncate) and say
 *      so in the note.
 * A kind of one stage per device given stages that share devices (a plan
 * listing cpu:0, cpu:1, cpu:0) runs folded: its program for one device per
 * stage, each device then running its stages' actions in the order of that
 * program's unit-time simulation (fold_onto_devices), which keeps every
 * dependency and cannot deadlock.
 */
#include "streams/schedules/gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pp_schedule_gen_ops *const gen_table[PP_SCHEDULE_KINDS] = {
    [PP_SCHEDULE_GPIPE] = &pp_gen_gpipe_ops,
    [PP_SCHEDULE_1F1B] = &pp_gen_1f1b_ops,
    [PP_SCHEDULE_FORWARD] = &pp_gen_forward_ops,
    [PP_SCHEDULE_INTERLEAVED_1F1B] = &pp_gen_interleaved_1f1b_ops,
    [PP_SCHEDULE_LOOPED_BFS] = &pp_gen_looped_bfs_ops,
    [PP_SCHEDULE_INTERLEAVED_ZB] = &pp_gen_interleaved_zb_ops,
    [PP_SCHEDULE_ZBH1] = &pp_gen_zbh1_ops,
    [PP_SCHEDULE_ZBH2] = &pp_gen_zbh2_ops,
    [PP_SCHEDULE_ZBV] = &pp_gen_zbv_ops,
    [PP_SCHEDULE_DUALPIPEV] = &pp_gen_dualpipev_ops,
};

static const pp_schedule_gen_ops *gen_of(pp_schedule_kind k)
{
    return (unsigned)k < PP_SCHEDULE_KINDS ? gen_table[k] : NULL;
}

const char *pp_schedule_kind_name(pp_schedule_kind k)
{
    const pp_schedule_gen_ops *g = gen_of(k);
    return g ? g->name : "?";
}

const char *pp_schedule_kind_reference(pp_schedule_kind k)
{
    const pp_schedule_gen_ops *g = gen_of(k);
    return g ? g->reference : "";
}

pp_schedule_placement pp_schedule_kind_placement(pp_schedule_kind k)
{
    const pp_schedule_gen_ops *g = gen_of(k);
    return g ? g->placement : PP_PLACEMENT_ANY;
}

pp_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *out, pp_error *err)
{
    for (int k = 0; k < PP_SCHEDULE_KINDS; k++)
        if (name && strcmp(name, gen_table[k]->name) == 0) {
            *out = (pp_schedule_kind)k;
            return PP_OK;
        }
    char list[256] = "";
    size_t len = 0;
    for (int k = 0; k < PP_SCHEDULE_KINDS; k++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", k ? ", " : "",
                                gen_table[k]->name);
    return pp_error_set(err, PP_ERR_INPUT, "unknown schedule '%s': expected one of %s",
                        name ? name : "", list);
}

/* "0,1,2,3,0,1,2,3" (the first 16 stages). */
static void placement_text(const int *dev, int S, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < S && k < 16 && len < n; k++)
        len += (size_t)snprintf(buf + len, n - len, "%s%d", k ? "," : "", dev[k]);
    if (S > 16 && len < n) snprintf(buf + len, n - len, ",...");
}

/* Pass 1: the shape's placement is the kind's. */
static pp_status check_placement(const pp_schedule_gen_ops *g, const pp_schedule_shape *sh,
                                 pp_error *err)
{
    if (g->placement == PP_PLACEMENT_ANY) return PP_OK;
    int S = sh->stages, D = sh->devices;
    int *want = malloc((size_t)S * sizeof *want);
    if (!want) return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    static const char *const what[] = {
        [PP_PLACEMENT_ONE] = "one stage per device",
        [PP_PLACEMENT_LOOP] = "looped stages (stage s on device s mod devices)",
        [PP_PLACEMENT_V] = "two stages per device in a V (stage s on device s, then 2 x devices "
                           "- 1 - s)",
    };
    pp_error e;
    bool ok = pp_schedule_place(g->placement, S, D, want, &e) == PP_OK;
    for (int k = 0; ok && k < S; k++) ok = (sh->stage_device ? sh->stage_device[k] : k) == want[k];
    pp_status st = PP_OK;
    if (!ok) {
        char have[96] = "", good[96] = "";
        int *ident = NULL;
        if (!sh->stage_device && (ident = malloc((size_t)S * sizeof *ident)))
            for (int k = 0; k < S; k++) ident[k] = k;
        placement_text(sh->stage_device ? sh->stage_device : ident ? ident : want, S, have,
                       sizeof have);
        free(ident);
        if (pp_schedule_place(g->placement, S, D, want, &e) == PP_OK)
            placement_text(want, S, good, sizeof good);
        st = pp_error_set(err, PP_ERR_INPUT, "schedule %s runs %s%s%s%s; these %d stages are on "
                          "%d device%s as %s", g->name, what[g->placement],
                          good[0] ? ": here " : "", good, good[0] ? "" : "", S, D,
                          D == 1 ? "" : "s", have);
    }
    free(want);
    return st;
}

/* Unit costs of the fold's simulation: a backward twice a forward. */
static int unit_cost(pp_action_kind k)
{
    return k == PP_ACT_B ? 2 : 1;
}

typedef struct timed_action {
    pp_action a;
    int start, order; /* order: its place in its stage's list, for ties */
} timed_action;

static int timed_cmp(const void *x, const void *y)
{
    const timed_action *a = x, *b = y;
    if (a->start != b->start) return a->start < b->start ? -1 : 1;
    if (a->a.stage != b->a.stage) return a->a.stage < b->a.stage ? -1 : 1;
    return a->order - b->order;
}

/* full: the compute-only program of a one-stage-per-device kind on S
 * devices (stage s on device s). Fills s (initialised for the caller's
 * shape, stages sharing devices) with full's actions, each device's in the
 * order of their start times when full runs with unit costs: F(s,i) after
 * F(s-1,i), B or I(s,i) after B or I(s+1,i), each stage in its order. Every
 * dependency starts strictly before what needs it, so one global order holds
 * all the device lists: no deadlock. */
static pp_status fold_onto_devices(const pp_schedule *full, pp_schedule *s, pp_error *err)
{
    const int S = full->stages, m = full->micro_batches;
    int total = 0;
    for (int d = 0; d < S; d++) total += full->n_actions[d];
    timed_action *ta = malloc((size_t)total * sizeof *ta);
    int *fwd_done = malloc((size_t)S * m * sizeof *fwd_done);  /* finish time; -1: not yet */
    int *bwd_done = malloc((size_t)S * m * sizeof *bwd_done);
    int *next = calloc((size_t)S, sizeof *next), *free_at = calloc((size_t)S, sizeof *free_at);
    pp_status st = ta && fwd_done && bwd_done && next && free_at
                       ? PP_OK
                       : pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    for (int k = 0; st == PP_OK && k < S * m; k++) fwd_done[k] = bwd_done[k] = -1;
    int placed = 0;
    while (st == PP_OK && placed < total) {
        bool progress = false;
        for (int d = 0; d < S; d++) {
            while (next[d] < full->n_actions[d]) {
                const pp_action *a = &full->actions[d][next[d]];
                int ready = free_at[d];
                if (a->kind == PP_ACT_F && a->stage > 0) {
                    int t = fwd_done[(a->stage - 1) * m + a->mb];
                    if (t < 0) break;
                    ready = t > ready ? t : ready;
                } else if ((a->kind == PP_ACT_B || a->kind == PP_ACT_I) && a->stage < S - 1) {
                    int t = bwd_done[(a->stage + 1) * m + a->mb];
                    if (t < 0) break;
                    ready = t > ready ? t : ready;
                }
                int end = ready + unit_cost(a->kind);
                if (a->kind == PP_ACT_F) fwd_done[a->stage * m + a->mb] = end;
                if (a->kind == PP_ACT_B || a->kind == PP_ACT_I) bwd_done[a->stage * m + a->mb] = end;
                ta[placed++] = (timed_action){*a, ready, next[d]};
                free_at[d] = end;
                next[d]++;
                progress = true;
            }
        }
        if (!progress)
            st = pp_error_set(err, PP_ERR_INVALID, "schedule %s: its program does not run to "
                              "the end with one device per stage", full->name);
    }
    if (st == PP_OK) {
        qsort(ta, (size_t)total, sizeof *ta, timed_cmp);
        for (int k = 0; k < total && st == PP_OK; k++)
            st = pp_schedule_push(s, ta[k].a.stage, ta[k].a.kind, ta[k].a.mb, err);
    }
    free(ta);
    free(fwd_done);
    free(bwd_done);
    free(next);
    free(free_at);
    return st;
}

/* Whether shape shares devices between stages. */
static bool shares_devices(const pp_schedule_shape *sh)
{
    return sh->stage_device && sh->devices < sh->stages;
}

pp_status pp_schedule_generate(pp_schedule *s, pp_schedule_kind kind,
                               const pp_schedule_shape *shape, pp_error *err)
{
    memset(s, 0, sizeof *s);
    const pp_schedule_gen_ops *g = gen_of(kind);
    if (!g) return pp_error_set(err, PP_ERR_INVALID, "schedule: unknown kind %d", (int)kind);
    if (!shape || shape->stages < 1 || shape->devices < 1 || shape->micro_batches < 1)
        return pp_error_set(err, PP_ERR_INVALID, "schedule %s: needs a shape of at least one "
                            "stage, device and micro-batch", g->name);
    if (g->placement == PP_PLACEMENT_ONE && shares_devices(shape)) {
        pp_schedule_shape own = *shape;
        own.devices = shape->stages;
        own.stage_device = NULL;
        pp_schedule full;
        PP_TRY(pp_schedule_generate(&full, kind, &own, err));
        pp_status st = pp_schedule_init_shape(s, g->name, shape, err);
        if (st == PP_OK) st = fold_onto_devices(&full, s, err);
        if (st == PP_OK) {
            char have[96];
            placement_text(shape->stage_device, shape->stages, have, sizeof have);
            char note[512];
            int n = snprintf(note, sizeof note, "%s: %d stages on %d devices as %s run as its "
                             "order over one device per stage, merged per device%s%s",
                             g->name, shape->stages, shape->devices, have,
                             full.note[0] ? "; " : "", full.note);
            size_t len = n < 0 ? 0 : (size_t)n < sizeof s->note ? (size_t)n : sizeof s->note - 1;
            memcpy(s->note, note, len);
            s->note[len] = '\0';
        } else {
            pp_schedule_free(s);
        }
        pp_schedule_free(&full);
        return st;
    }
    PP_TRY(check_placement(g, shape, err));
    int m = shape->micro_batches;
    int n = g->padded ? g->padded(shape->devices, shape->stages, m) : m;
    PP_TRY(pp_schedule_init_shape(s, g->name, shape, err));
    if (n == m) {
        pp_status st = g->fill(s, err);
        if (st != PP_OK) pp_schedule_free(s);
        return st;
    }
    pp_schedule_free(s);
    pp_schedule_shape padded = *shape;
    padded.micro_batches = n;
    padded.mb_sizes = NULL;
    pp_schedule full;
    pp_status st = pp_schedule_init_shape(&full, g->name, &padded, err);
    if (st == PP_OK) st = g->fill(&full, err);
    if (st == PP_OK) st = pp_schedule_truncate(&full, m, shape->mb_sizes, s, err);
    if (st == PP_OK) {
        char left[48];
        if (n - m == 1) snprintf(left, sizeof left, "micro-batch %d", m);
        else snprintf(left, sizeof left, "micro-batches %d..%d", m, n - 1);
        snprintf(s->note, sizeof s->note, "%s: %d micro-batch%s run as its order for %d without "
                 "%s (it needs %s)", g->name, m, m == 1 ? "" : "es", n, left,
                 g->pad_reason ? g->pad_reason : "more");
    }
    pp_schedule_free(&full);
    return st;
}

pp_status pp_schedule_build(pp_schedule *s, pp_schedule_kind kind, int stages,
                            int micro_batches, const int *mb_sizes, pp_error *err)
{
    memset(s, 0, sizeof *s);
    if (kind != PP_SCHEDULE_GPIPE && kind != PP_SCHEDULE_1F1B && kind != PP_SCHEDULE_FORWARD &&
        kind != PP_SCHEDULE_ZBH1 && kind != PP_SCHEDULE_ZBH2)
        return pp_error_set(err, PP_ERR_INVALID, "pp_schedule_build: schedule %s places several "
                            "stages per device (use pp_schedule_generate with a placement)",
                            pp_schedule_kind_name(kind));
    pp_schedule_shape shape = {stages, stages, micro_batches, NULL, mb_sizes};
    PP_TRY(pp_schedule_generate(s, kind, &shape, err));
    pp_status st = pp_schedule_add_comms(s, err);
    for (int k = 0; k < stages && st == PP_OK && !s->forward_only; k++)
        st = pp_schedule_push(s, k, PP_ACT_STEP, -1, err);
    if (st != PP_OK) pp_schedule_free(s);
    return st;
}
