/*
 * plan_stages.c - the `stages` section: devices, per-stage memory, layer names
 * resolved against the catalogue ("layerN", "layerN.K", exact unit names),
 * coverage of every unit exactly once in network order; `stages: auto` with
 * `devices` and `balance`; delay-model stage rules.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/plan_walk_internal.h"
#include "partitioner/plan_walk.h"

/* ------------------------------------------------------------------ */
/* unit names                                                           */

/* Length of the group prefix of a unit name ("layer3" of "layer3.2"), or 0
 * when the name has no '.'. */
static size_t group_len(const char *name)
{
    const char *dot = strchr(name, '.');
    return dot ? (size_t)(dot - name) : 0;
}

static bool same_group(const char *a, const char *b, size_t glen)
{
    return group_len(b) == glen && strncmp(a, b, glen) == 0;
}

int pp_plan_spell_item(const pp_catalogue *cat, int u, int last, char *name, size_t n)
{
    const char *un = cat->units[u].name;
    size_t g = group_len(un);
    if (g) {
        int gs = u, ge = u;
        while (gs > 0 && same_group(un, cat->units[gs - 1].name, g)) gs--;
        while (ge + 1 < cat->n && same_group(un, cat->units[ge + 1].name, g)) ge++;
        if (gs == u && ge <= last) {
            snprintf(name, n, "%.*s", (int)g, un);
            return ge + 1;
        }
    }
    snprintf(name, n, "%s", un);
    return u + 1;
}

const char *pp_plan_spell_units(const pp_catalogue *cat, int first, int last, char *buf,
                                size_t n)
{
    if (n == 0) return buf;
    buf[0] = '\0';
    if (!cat || first < 0 || last >= cat->n || first > last) return buf;
    size_t used = 0;
    for (int u = first; u <= last;) {
        char name[64];
        u = pp_plan_spell_item(cat, u, last, name, sizeof name);
        int k = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", name);
        if (k < 0 || (size_t)k >= n - used) break;
        used += (size_t)k;
    }
    return buf;
}

/* Resolves one layer name to a unit range; false after reporting. */
static bool resolve_layer(pp_walk *w, const pp_ynode *n, const char *name, int *first, int *last)
{
    const pp_catalogue *cat = &w->plan->catalogue;
    int u = pp_catalogue_find(cat, name);
    if (u >= 0) {
        *first = *last = u;
        return true;
    }
    size_t len = strlen(name);
    int gs = -1, ge = -1;
    for (int i = 0; i < cat->n; i++) {
        const char *un = cat->units[i].name;
        if (group_len(un) == len && strncmp(un, name, len) == 0) {
            if (gs < 0) gs = i;
            ge = i;
        }
    }
    if (gs >= 0) {
        *first = gs;
        *last = ge;
        return true;
    }
    /* "layerN.K" with a block index out of range */
    size_t g = group_len(name);
    if (g) {
        for (int i = 0; i < cat->n; i++) {
            const char *un = cat->units[i].name;
            if (group_len(un) == g && strncmp(un, name, g) == 0) {
                int j = i;
                while (j + 1 < cat->n && same_group(un, cat->units[j + 1].name, g)) j++;
                pp_walk_error(w, n, "%.64s does not exist: %s has %s..%s", name,
                              w->plan->model.name, un, cat->units[j].name);
                return false;
            }
        }
    }
    char list[512];
    size_t used = 0;
    list[0] = '\0';
    for (int i = 0; i < cat->n;) {
        char item[64];
        i = pp_plan_spell_item(cat, i, cat->n - 1, item, sizeof item);
        int k = snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", item);
        if (k < 0 || (size_t)k >= sizeof list - used) break;
        used += (size_t)k;
    }
    bool resnet = w->plan->model.kind == PP_MODEL_RESNET;
    pp_walk_error(w, n, "unknown layer '%.64s' in %s (layers are %s%s)", name,
                  w->plan->model.name, list, resnet ? "; layerN.K names one block" : "");
    return false;
}

/* ------------------------------------------------------------------ */
/* devices and memory                                                   */

/* "rankN:" before a device names the process of the job that runs it. */
static bool walk_rank(pp_walk *w, const pp_ynode *n, const char **s, int *rank)
{
    *rank = 0;
    if (strncmp(*s, "rank", 4) != 0) return true;
    const char *p = *s + 4;
    long r = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 9) r = r * 10 + (*p++ - '0'), digits++;
    if (digits == 0 || *p != ':') {
        pp_walk_error(w, n, "device '%.64s': a device of another process is written rankN:DEVICE "
                      "(e.g. rank1:cpu:0)", *s);
        return false;
    }
    if (r >= PP_PLAN_MAX_RANKS) {
        pp_walk_error(w, n, "device '%.64s': rank %ld is out of range (0..%d)", *s, r,
                      PP_PLAN_MAX_RANKS - 1);
        return false;
    }
    *rank = (int)r;
    *s = p + 1;
    return true;
}

static bool walk_device(pp_walk *w, const pp_ynode *n, pp_plan_stage *st)
{
    const char *s;
    if (!pp_walk_str(w, n, "device", &s)) return false;
    if (!walk_rank(w, n, &s, &st->rank)) return false;
    pp_error e;
    pp_device_id id;
    if (pp_device_id_parse(s, &id, &e) != PP_OK) {
        pp_walk_error(w, n, "%s", e.msg);
        return false;
    }
    st->device = id;
    pp_device_id_format(id, st->device_name, sizeof st->device_name);
    st->device_mark = pp_walk_mark(n);
    st->replica_rank[0] = st->rank;
    st->replica_device[0] = id;
    st->replica_mark[0] = st->device_mark;
    return true;
}

/* A stage's `device`: one device, or with `replicas: R` a list of R devices
 * (one per replica, replica 0 first). */
static bool walk_stage_device(pp_walk *w, const pp_ynode *n, pp_plan_stage *st)
{
    int R = w->plan->replicas;
    if (R == 1 && n->kind == PP_YNODE_SEQ) {
        pp_walk_error(w, n, "a list of devices needs replicas: N (one device per replica)");
        return false;
    }
    if (R == 1) return walk_device(w, n, st);
    if (n->kind != PP_YNODE_SEQ || n->n != R) {
        pp_walk_error(w, n, "with replicas: %d, device must be a list of %d devices (one per "
                      "replica, e.g. [cpu:0, rank1:cpu:0]), got %s", R, R,
                      n->kind == PP_YNODE_SEQ ? "a list of another length" : pp_walk_describe(n));
        return false;
    }
    pp_plan_stage one = {0};
    for (int r = R - 1; r >= 0; r--) {
        memset(&one, 0, sizeof one);
        if (!walk_device(w, n->kids[r], &one)) return false;
        st->replica_rank[r] = one.rank;
        st->replica_device[r] = one.device;
        st->replica_mark[r] = one.device_mark;
    }
    st->rank = one.rank;
    st->device = one.device;
    memcpy(st->device_name, one.device_name, sizeof st->device_name);
    st->device_mark = one.device_mark;
    return true;
}


static bool walk_memory(pp_walk *w, const pp_ynode *n, pp_plan_stage *st)
{
    int64_t *out = &st->memory_bytes;
    st->memory_mark = pp_walk_mark(n);
    if (!n || n->kind != PP_YNODE_SCALAR || pp_ynode_is_null(n)) {
        pp_walk_error(w, n, "memory must be a size such as 40GiB, got %s", pp_walk_describe(n));
        return false;
    }
    int r = pp_plan_size_parse(n->str, out);
    if (r == -1) {
        pp_walk_error(w, n,
                      "memory must be a size such as 40GiB, 512MiB, 8GB or a byte count, got "
                      "'%.64s'",
                      n->str);
        return false;
    }
    if (r == -2) {
        pp_walk_error(w, n, "memory '%.64s' is out of range (1 byte to 1 EiB)", n->str);
        return false;
    }
    return true;
}

/* A `devices:` entry: "cuda:0" or {device: cuda:0, memory: 40GiB}. */
static bool walk_device_entry(pp_walk *w, const pp_ynode *n, pp_plan_stage *st)
{
    st->mark = pp_walk_mark(n);
    if (n->kind == PP_YNODE_SCALAR) return walk_device(w, n, st);
    enum { K_DEVICE, K_MEMORY, K_N };
    static const char *const keys[K_N] = {"device", "memory"};
    const pp_ynode *f[K_N];
    if (!pp_walk_map(w, n, "a devices entry", keys, K_N, f)) return false;
    bool ok = true;
    if (!f[K_DEVICE]) {
        pp_walk_error(w, n, "a devices entry needs a device");
        ok = false;
    } else {
        ok &= walk_device(w, f[K_DEVICE], st);
    }
    if (f[K_MEMORY]) ok &= walk_memory(w, f[K_MEMORY], st);
    return ok;
}

/* One memory figure per device: stages sharing a device (same rank and
 * device) may each give `memory:`, with the same value; it caps the device,
 * whichever stage gives it. */
static void check_device_memory(pp_walk *w)
{
    const pp_plan *p = w->plan;
    for (int s = 0; s < p->n_stages; s++) {
        const pp_plan_stage *a = &p->stages[s];
        if (a->memory_bytes <= 0) continue;
        for (int t = 0; t < s; t++) {
            const pp_plan_stage *b = &p->stages[t];
            if (b->memory_bytes <= 0 || b->rank != a->rank ||
                !pp_device_id_equal(b->device, a->device) || b->memory_bytes == a->memory_bytes)
                continue;
            char x[40], y[40];
            pp_plan_size_format(a->memory_bytes, x, sizeof x);
            pp_plan_size_format(b->memory_bytes, y, sizeof y);
            pp_ynode where = {.line = a->memory_mark.line, .col = a->memory_mark.col};
            pp_walk_error(w, a->memory_mark.line > 0 ? &where : NULL,
                          "stage %d caps %s at %s but stage %d caps it at %s: a device has one "
                          "memory figure (give it once, or the same value on every stage of "
                          "the device)", s, a->device_name, x, t, y);
            break;
        }
    }
}

/* ------------------------------------------------------------------ */
/* coverage                                                             */

typedef struct layer_item {
    int stage;
    int first, last;
    const pp_ynode *node;
    bool placed;               /* counted in coverage (not a duplicate) */
} layer_item;

static const char *unit_name(const pp_walk *w, int u)
{
    return w->plan->catalogue.units[u].name;
}

/* Checks that items cover every unit once, in order; fills stage ranges. */
static void check_coverage(pp_walk *w, layer_item *items, int n_items)
{
    pp_plan *p = w->plan;
    int n = p->catalogue.n;
    int *owner = malloc((size_t)n * sizeof *owner);
    bool *order_reported = calloc((size_t)n_items + 1, sizeof *order_reported);
    if (!owner || !order_reported) {
        free(owner);
        free(order_reported);
        w->oom = true;
        return;
    }
    for (int u = 0; u < n; u++) owner[u] = -1;
    int before = w->errors;
    int cursor = -1;
    bool order_err = false;
    for (int k = 0; k < n_items; k++) {
        layer_item *it = &items[k];
        int dup = -1;
        for (int u = it->first; u <= it->last && dup < 0; u++)
            if (owner[u] >= 0) dup = u;
        if (dup >= 0) {
            const layer_item *prev = &items[owner[dup]];
            const char *name = prev->first == it->first && prev->last == it->last
                                   ? it->node->str
                                   : unit_name(w, dup);
            if (prev->stage == it->stage)
                pp_walk_error(w, it->node, "%s appears twice in stage %d", name, it->stage);
            else
                pp_walk_error(w, it->node, "%s appears in stages %d and %d", name, prev->stage,
                              it->stage);
            continue;
        }
        for (int u = it->first; u <= it->last; u++) owner[u] = k;
        it->placed = true;
        if (it->first > cursor) {
            cursor = it->last;
            continue;
        }
        /* it belongs before something already listed: name the earliest such item */
        order_err = true;
        for (int j = 0; j < k; j++) {
            if (!items[j].placed || items[j].first <= it->last) continue;
            if (!order_reported[j]) {
                order_reported[j] = true;
                pp_walk_error(w, items[j].node, "%s must come after %s", items[j].node->str,
                              it->node->str);
            }
            break;
        }
    }
    if (!order_err) {
        /* an identity unit left out (the cifar stem's maxpool) joins the item
         * before it, or the one after it when it comes first */
        for (int u = 0; u < n; u++) {
            if (owner[u] >= 0 || !p->catalogue.units[u].identity) continue;
            if (u > 0 && owner[u - 1] >= 0) {
                owner[u] = owner[u - 1];
                items[owner[u]].last = u;
            } else if (u + 1 < n && owner[u + 1] >= 0) {
                owner[u] = owner[u + 1];
                items[owner[u]].first = u;
            }
        }
        for (int a = 0; a < n;) {
            if (owner[a] >= 0) {
                a++;
                continue;
            }
            int b = a;
            while (b + 1 < n && owner[b + 1] < 0) b++;
            char what[256];
            pp_plan_spell_units(&p->catalogue, a, b, what, sizeof what);
            const char *verb = strchr(what, ',') ? "are" : "is";
            const layer_item *prev = a > 0 ? &items[owner[a - 1]] : NULL;
            const layer_item *next = b + 1 < n ? &items[owner[b + 1]] : NULL;
            if (prev && next && prev->stage == next->stage)
                pp_walk_error(w, next->node, "%s %s missing between %s and %s in stage %d", what,
                              verb, unit_name(w, a - 1), unit_name(w, b + 1), next->stage);
            else if (prev && next)
                pp_walk_error(w, next->node, "%s %s missing: stage %d ends at %s and stage %d "
                                             "starts at %s",
                              what, verb, prev->stage, unit_name(w, a - 1), next->stage,
                              unit_name(w, b + 1));
            else if (next)
                pp_walk_error(w, next->node, "%s %s missing: stage %d starts at %s", what, verb,
                              next->stage, unit_name(w, b + 1));
            else if (prev)
                pp_walk_error(w, prev->node, "%s %s missing: stage %d ends at %s", what, verb,
                              prev->stage, unit_name(w, a - 1));
            a = b + 1;
        }
    }
    if (w->errors == before) {
        for (int s = 0; s < p->n_stages; s++) p->stages[s].first = p->stages[s].last = -1;
        for (int k = 0; k < n_items; k++) {
            pp_plan_stage *st = &p->stages[items[k].stage];
            if (st->first < 0) st->first = items[k].first;
            st->last = items[k].last;
        }
    }
    free(owner);
    free(order_reported);
}

/* ------------------------------------------------------------------ */
/* delay-model stage counts                                             */

/* The delay model's value for stage s of a list of n (one value: every stage). */
static double delay_at(const double *v, int n, int s)
{
    return v[n > 1 ? s : 0];
}

/* The whole backward and its split parts tell one story: with both parts and
 * no backward_ms, B is I + W (every schedule is then timed on the same
 * model); with all three, B must be I + W; one part alone needs backward_ms
 * (the other is then its half). */
static void split_backward_times(pp_walk *w)
{
    pp_model_config *m = &w->plan->model;
    const int S = w->plan->n_stages;
    const bool b = w->backward_node != NULL, in = m->n_backward_input_ms > 0,
               wt = m->n_backward_weight_ms > 0;
    if (!in && !wt) return;
    const int counts[3] = {b ? m->n_backward_ms : 1, m->n_backward_input_ms,
                           m->n_backward_weight_ms};
    for (int k = 0; k < 3; k++)
        if (counts[k] > 1 && counts[k] != S) return; /* reported above */
    if (!b && in != wt) {
        const pp_ynode *n = in ? w->input_node : w->weight_node;
        pp_walk_error(w, n, "model.%s without model.%s or model.backward_ms: give both parts "
                      "(backward_ms is then their sum) or backward_ms (a part not given is its "
                      "half)", in ? "backward_input_ms" : "backward_weight_ms",
                      in ? "backward_weight_ms" : "backward_input_ms");
        return;
    }
    if (!in || !wt) return;
    const int n = m->n_backward_input_ms > 1 || m->n_backward_weight_ms > 1 ||
                          (b && m->n_backward_ms > 1)
                      ? S
                      : 1;
    for (int s = 0; s < n; s++) {
        double i = delay_at(m->backward_input_ms, m->n_backward_input_ms, s);
        double x = delay_at(m->backward_weight_ms, m->n_backward_weight_ms, s);
        if (!b) {
            m->backward_ms[s] = i + x;
            continue;
        }
        double whole = delay_at(m->backward_ms, m->n_backward_ms, s);
        if (fabs(whole - (i + x)) > 1e-9 * (whole > 1 ? whole : 1)) {
            char at[32] = "";
            if (n > 1) snprintf(at, sizeof at, " (stage %d)", s);
            pp_walk_error(w, w->backward_node, "model.backward_ms%s is %g but "
                          "backward_input_ms + backward_weight_ms is %g + %g = %g: a split "
                          "backward does the work of a whole one (give two of the three)", at,
                          whole, i, x, i + x);
            return;
        }
    }
    if (!b) m->n_backward_ms = n;
}

static void check_delay_counts(pp_walk *w)
{
    pp_plan *p = w->plan;
    const pp_model_config *m = &p->model;
    if (w->forward_is_list && m->n_forward_ms > 0 && m->n_forward_ms != p->n_stages)
        pp_walk_error(w, w->forward_node,
                      "model.forward_ms has %d values but the plan has %d stage%s",
                      m->n_forward_ms, p->n_stages, p->n_stages == 1 ? "" : "s");
    if (w->backward_is_list && m->n_backward_ms > 0 && m->n_backward_ms != p->n_stages)
        pp_walk_error(w, w->backward_node,
                      "model.backward_ms has %d values but the plan has %d stage%s",
                      m->n_backward_ms, p->n_stages, p->n_stages == 1 ? "" : "s");
    if (w->input_is_list && m->n_backward_input_ms > 0 && m->n_backward_input_ms != p->n_stages)
        pp_walk_error(w, w->input_node,
                      "model.backward_input_ms has %d values but the plan has %d stage%s",
                      m->n_backward_input_ms, p->n_stages, p->n_stages == 1 ? "" : "s");
    if (w->weight_is_list && m->n_backward_weight_ms > 0 &&
        m->n_backward_weight_ms != p->n_stages)
        pp_walk_error(w, w->weight_node,
                      "model.backward_weight_ms has %d values but the plan has %d stage%s",
                      m->n_backward_weight_ms, p->n_stages, p->n_stages == 1 ? "" : "s");
    split_backward_times(w);
}

/* ------------------------------------------------------------------ */
/* explicit stages                                                      */

/* Replicas and processes: a plan that names no rank runs all its replicas
 * in one process (each on a thread of its own, replicas_in_process); one
 * that names ranks gives every replica processes of its own. */
static void check_replica_ranks(pp_walk *w, const pp_ynode *n)
{
    pp_plan *p = w->plan;
    int R = p->replicas, S = p->n_stages;
    if (R < 2) return;
    bool ranks = false;
    for (int s = 0; s < S; s++)
        for (int r = 0; r < R; r++) ranks |= p->stages[s].replica_rank[r] != 0;
    if (!ranks) {
        p->replicas_in_process = true;
        return;
    }
    for (int i = 0; i < S; i++)
        for (int r = 0; r < R; r++)
            for (int t = 0; t <= i; t++)
                for (int q = 0; q < R; q++) {
                    if (q == r || p->stages[t].replica_rank[q] != p->stages[i].replica_rank[r])
                        continue;
                    const pp_ynode *dev = NULL;
                    const pp_ynode *st = i < n->n ? n->kids[i] : NULL;
                    for (int k = 0; st && st->kind == PP_YNODE_MAP && k < st->n; k++)
                        if (st->kids[2 * k]->str && !strcmp(st->kids[2 * k]->str, "device"))
                            dev = st->kids[2 * k + 1];
                    pp_walk_error(w, dev && dev->kind == PP_YNODE_SEQ && r < dev->n ? dev->kids[r]
                                                                                   : st,
                                  "stage %d of replica %d is on rank %d, which runs stage %d of "
                                  "replica %d: with ranks named, every replica needs processes "
                                  "of its own (a plan that names no rank runs all its replicas "
                                  "in one process)", i, r, p->stages[i].replica_rank[r], t, q);
                    return;
                }
}

static void walk_explicit(pp_walk *w, const pp_ynode *n)
{
    pp_plan *p = w->plan;
    bool delay = w->model_ok && p->model.kind == PP_MODEL_DELAY;
    bool resolve = w->catalogue_ok;
    if (n->n == 0) {
        pp_walk_error(w, n, "stages must not be empty");
        return;
    }
    int count = n->n;
    if (count > PP_PLAN_MAX_STAGES) {
        pp_walk_error(w, n->kids[PP_PLAN_MAX_STAGES], "too many stages (at most %d)",
                      PP_PLAN_MAX_STAGES);
        count = PP_PLAN_MAX_STAGES;
    }
    int total = 0;
    for (int i = 0; i < count; i++) {
        const pp_ynode *s = n->kids[i];
        if (s->kind != PP_YNODE_MAP) continue;
        for (int k = 0; k < s->n; k++) {
            const pp_ynode *v = s->kids[2 * k + 1];
            if (v->kind == PP_YNODE_SEQ) total += v->n;
        }
    }
    layer_item *items = malloc(((size_t)total + 1) * sizeof *items);
    if (!items) {
        w->oom = true;
        return;
    }
    int n_items = 0;
    bool names_ok = true;
    p->n_stages = count;
    for (int i = 0; i < count; i++) {
        enum { K_DEVICE, K_LAYERS, K_MEMORY, K_RECOMPUTE, K_N };
        static const char *const keys[K_N] = {"device", "layers", "memory", "recompute"};
        const pp_ynode *f[K_N];
        pp_plan_stage *st = &p->stages[i];
        st->first = st->last = -1;
        st->mark = pp_walk_mark(n->kids[i]);
        char what[32];
        snprintf(what, sizeof what, "stage %d", i);
        if (!pp_walk_map(w, n->kids[i], what, keys, K_N, f)) {
            names_ok = false;
            continue;
        }
        if (f[K_DEVICE])
            walk_stage_device(w, f[K_DEVICE], st);
        else
            pp_walk_error(w, n->kids[i], "stage %d needs a device", i);
        if (f[K_MEMORY]) walk_memory(w, f[K_MEMORY], st);
        if (f[K_RECOMPUTE]) {
            st->recompute_mark = pp_walk_mark(f[K_RECOMPUTE]);
            int r = pp_walk_recompute(w, f[K_RECOMPUTE], "recompute");
            if (r >= 0) {
                st->has_recompute = true;
                st->recompute = (pp_plan_recompute)r;
            }
        }
        const pp_ynode *layers = f[K_LAYERS];
        st->layers_mark = pp_walk_mark(layers);
        if (delay) {
            if (layers)
                pp_walk_error(w, layers, "stage %d: the delay model has no layers; remove "
                                         "'layers'",
                              i);
            continue;
        }
        if (!layers) {
            pp_walk_error(w, n->kids[i], "stage %d needs layers", i);
            names_ok = false;
            continue;
        }
        if (layers->kind != PP_YNODE_SEQ) {
            pp_walk_error(w, layers, "stage %d: layers must be a list of layer names, got %s", i,
                          pp_walk_describe(layers));
            names_ok = false;
            continue;
        }
        if (layers->n == 0) {
            pp_walk_error(w, layers, "stage %d has no layers", i);
            names_ok = false;
            continue;
        }
        for (int k = 0; k < layers->n; k++) {
            const pp_ynode *ln = layers->kids[k];
            const char *name;
            if (!pp_walk_str(w, ln, "a layer name", &name)) {
                names_ok = false;
                continue;
            }
            if (!resolve) continue;
            layer_item *it = &items[n_items];
            if (!resolve_layer(w, ln, name, &it->first, &it->last)) {
                names_ok = false;
                continue;
            }
            it->stage = i;
            it->node = ln;
            it->placed = false;
            n_items++;
        }
    }
    if (resolve && names_ok) check_coverage(w, items, n_items);
    free(items);
    if (delay) check_delay_counts(w);
    check_replica_ranks(w, n);
    check_device_memory(w);
}

/* ------------------------------------------------------------------ */
/* stages: auto                                                         */

static void walk_auto(pp_walk *w, const pp_ynode *stages, const pp_ynode *devices,
                      const pp_ynode *balance)
{
    pp_plan *p = w->plan;
    bool ok = true;
    if (!balance) {
        pp_walk_error(w, stages, "stages: auto needs balance (time, flops or memory)");
        ok = false;
    } else {
        static const char *const names[] = {"time", "flops", "memory"};
        int b = pp_walk_choice(w, balance, "balance", names, 3, "time, flops or memory");
        if (b >= 0)
            p->balance = (pp_plan_balance)(b + 1);
        else
            ok = false;
    }
    if (!devices) {
        pp_walk_error(w, stages, "stages: auto needs devices (a list such as [cuda:0, cuda:1])");
        return;
    }
    if (devices->kind != PP_YNODE_SEQ || devices->n == 0) {
        pp_walk_error(w, devices, "devices must be a non-empty list of devices, got %s",
                      devices->kind == PP_YNODE_SEQ ? "an empty list"
                                                    : pp_walk_describe(devices));
        return;
    }
    int count = devices->n;
    if (count > PP_PLAN_MAX_STAGES) {
        pp_walk_error(w, devices->kids[PP_PLAN_MAX_STAGES], "too many devices (at most %d)",
                      PP_PLAN_MAX_STAGES);
        count = PP_PLAN_MAX_STAGES;
        ok = false;
    }
    p->n_stages = count;
    for (int i = 0; i < count; i++) {
        p->stages[i].first = p->stages[i].last = -1;
        ok &= walk_device_entry(w, devices->kids[i], &p->stages[i]);
    }
    if (ok) check_device_memory(w);
    if (!w->model_ok) return;
    if (p->model.kind == PP_MODEL_DELAY) {
        check_delay_counts(w);
        return;
    }
    p->stages_auto = true;
    if (ok && w->catalogue_ok && count > p->catalogue.n)
        pp_walk_error(w, devices,
                      "%d devices but %s has only %d units: every stage needs at least one",
                      count, p->model.name, p->catalogue.n);
}

void pp_walk_stages(pp_walk *w, const pp_ynode *stages, const pp_ynode *devices,
                    const pp_ynode *balance)
{
    pp_plan *p = w->plan;
    if (!stages) {
        pp_walk_error(w, NULL, "the plan has no stages section (a list of {device, layers}, or "
                               "auto)");
        return;
    }
    p->stages_mark = pp_walk_mark(stages);
    if (stages->kind == PP_YNODE_SCALAR && !stages->quoted && strcmp(stages->str, "auto") == 0) {
        if (p->replicas > 1) {
            pp_walk_error(w, stages, "replicas need explicit stages (a list of {device, layers} "
                          "with one device per replica)");
            return;
        }
        walk_auto(w, stages, devices, balance);
        return;
    }
    if (devices) pp_walk_error(w, devices, "devices applies only to stages: auto");
    if (balance) pp_walk_error(w, balance, "balance applies only to stages: auto");
    if (stages->kind != PP_YNODE_SEQ) {
        if (stages->kind == PP_YNODE_SCALAR && !pp_ynode_is_null(stages))
            pp_walk_error(w, stages,
                          "stages must be a list of {device, layers} or auto, got '%.64s'",
                          stages->str);
        else
            pp_walk_error(w, stages, "stages must be a list of {device, layers} or auto, got %s",
                          pp_walk_describe(stages));
        return;
    }
    walk_explicit(w, stages);
}
