/*
 * device_map.c - pp_plan_apply_device_map: "A=B[,C=D]" remapping of plan
 * devices (`--device-map`), with exact and wildcard sources. A source is one
 * device ("cuda:1") or every device of a kind ("cuda:*", or the bare kind
 * "cuda"); a wildcard's target is a kind, keeping each device's index
 * ("cuda=cpu": cuda:1 -> cpu:1), or one device that takes them all; an
 * exact source's target is one device ("cpu" is cpu:0). An exact source
 * must name a device of the plan (a typo would silently map nothing); a
 * wildcard may match none.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/plan.h"
#include "partitioner/plan_walk_internal.h" /* pp_plan_size_format */

#define MAP_MAX_RULES 64

typedef struct map_rule {
    bool wildcard;          /* source is "KIND:*" */
    pp_device_id from;      /* wildcard: only kind is used */
    bool keep_index;        /* target is a kind: keep the source's index */
    pp_device_id to;        /* keep_index: only kind is used */
} map_rule;

/* "cpu", "cuda", "cpu:*", "cuda:*" -> kind; false otherwise. */
static bool parse_kind(const char *s, bool star_only, pp_device_kind *kind)
{
    static const struct {
        const char *name;
        pp_device_kind kind;
        bool star;
    } kinds[] = {{"cpu:*", PP_DEVICE_CPU, true},
                 {"cuda:*", PP_DEVICE_CUDA, true},
                 {"cpu", PP_DEVICE_CPU, false},
                 {"cuda", PP_DEVICE_CUDA, false}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if ((kinds[i].star || !star_only) && strcmp(s, kinds[i].name) == 0) {
            *kind = kinds[i].kind;
            return true;
        }
    }
    return false;
}

/* Copies s[0..n) without surrounding spaces into buf (size bn); false when too long. */
static bool trimmed(const char *s, size_t n, char *buf, size_t bn)
{
    while (n && (*s == ' ' || *s == '\t')) {
        s++;
        n--;
    }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (n >= bn) return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return true;
}

static pp_status parse_map(const char *map, map_rule *rules, int *n_rules, pp_error *err)
{
    *n_rules = 0;
    const char *p = map;
    int index = 0;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char entry[64];
        index++;
        if (!trimmed(p, n, entry, sizeof entry))
            return pp_error_set(err, PP_ERR_INPUT, "device map entry %d is too long", index);
        if (!entry[0])
            return pp_error_set(err, PP_ERR_INPUT,
                                "device map entry %d is empty (expected FROM=TO, e.g. "
                                "cuda:1=cuda:0)",
                                index);
        char *eq = strchr(entry, '=');
        if (!eq || strchr(eq + 1, '='))
            return pp_error_set(err, PP_ERR_INPUT,
                                "device map entry '%s' must have the form FROM=TO (e.g. "
                                "cuda:1=cuda:0 or cuda:*=cpu)",
                                entry);
        if (*n_rules == MAP_MAX_RULES)
            return pp_error_set(err, PP_ERR_INPUT, "device map has more than %d entries",
                                MAP_MAX_RULES);
        *eq = '\0';
        char from[32], to[32];
        if (!trimmed(entry, strlen(entry), from, sizeof from) ||
            !trimmed(eq + 1, strlen(eq + 1), to, sizeof to))
            return pp_error_set(err, PP_ERR_INPUT, "device map entry %d is too long", index);
        map_rule r = {0};
        pp_error e;
        if (parse_kind(from, false, &r.from.kind)) {
            r.wildcard = true;
        } else if (pp_device_id_parse(from, &r.from, &e) != PP_OK) {
            return pp_error_set(err, PP_ERR_INPUT, "device map entry '%s=%s': %s", from, to,
                                e.msg);
        }
        if (r.wildcard && parse_kind(to, false, &r.to.kind)) {
            r.keep_index = true;
        } else if (!r.wildcard && parse_kind(to, true, &r.to.kind)) {
            return pp_error_set(err, PP_ERR_INPUT,
                                "device map entry '%s=%s': a wildcard target needs a wildcard "
                                "source such as %s:*",
                                from, to, r.from.kind == PP_DEVICE_CUDA ? "cuda" : "cpu");
        } else if (pp_device_id_parse(to, &r.to, &e) != PP_OK) {
            return pp_error_set(err, PP_ERR_INPUT, "device map entry '%s=%s': %s", from, to,
                                e.msg);
        }
        for (int i = 0; i < *n_rules; i++) {
            const map_rule *o = &rules[i];
            if (o->wildcard == r.wildcard && o->from.kind == r.from.kind &&
                (r.wildcard || o->from.index == r.from.index))
                return pp_error_set(err, PP_ERR_INPUT, "device map names %s twice", from);
        }
        rules[(*n_rules)++] = r;
        if (!end) break;
        p = end + 1;
    }
    return PP_OK;
}

static pp_device_id map_device(const map_rule *rules, int n, pp_device_id id)
{
    for (int i = 0; i < n; i++)
        if (!rules[i].wildcard && pp_device_id_equal(rules[i].from, id)) return rules[i].to;
    for (int i = 0; i < n; i++) {
        if (rules[i].wildcard && rules[i].from.kind == id.kind) {
            if (!rules[i].keep_index) return rules[i].to;
            pp_device_id out = {rules[i].to.kind, id.index};
            return out;
        }
    }
    return id;
}

/* Whether the plan places a stage (of any replica) on id. */
static bool plan_has_device(const pp_plan *plan, pp_device_id id)
{
    int replicas = plan->replicas > 1 ? plan->replicas : 1;
    for (int s = 0; s < plan->n_stages; s++) {
        for (int r = 0; r < replicas && r < PP_PLAN_MAX_REPLICAS; r++)
            if (pp_device_id_equal(r ? plan->stages[s].replica_device[r] : plan->stages[s].device,
                                   id))
                return true;
    }
    return false;
}

/* The plan's devices, "cuda:0, cuda:1", each once (as many as fit in n). */
static void list_devices(const pp_plan *plan, char *buf, size_t n)
{
    pp_device_id seen[32];
    int n_seen = 0;
    size_t used = 0;
    buf[0] = '\0';
    int replicas = plan->replicas > 1 ? plan->replicas : 1;
    for (int s = 0; s < plan->n_stages; s++)
        for (int r = 0; r < replicas && r < PP_PLAN_MAX_REPLICAS; r++) {
            pp_device_id id = r ? plan->stages[s].replica_device[r] : plan->stages[s].device;
            bool dup = false;
            for (int k = 0; k < n_seen && !dup; k++) dup = pp_device_id_equal(seen[k], id);
            if (dup || n_seen == (int)(sizeof seen / sizeof seen[0])) continue;
            seen[n_seen++] = id;
            char name[16];
            pp_device_id_format(id, name, sizeof name);
            int k = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", name);
            if (k < 0 || (size_t)k >= n - used) return;
            used += (size_t)k;
        }
}

pp_status pp_plan_apply_device_map(pp_plan *plan, const char *map, pp_error *err)
{
    if (!plan || !map) return pp_error_set(err, PP_ERR_INVALID, "device map: NULL argument");
    map_rule rules[MAP_MAX_RULES];
    int n = 0;
    PP_TRY(parse_map(map, rules, &n, err));
    for (int i = 0; i < n; i++) {
        if (rules[i].wildcard || plan_has_device(plan, rules[i].from)) continue;
        char from[16], devices[256];
        pp_device_id_format(rules[i].from, from, sizeof from);
        list_devices(plan, devices, sizeof devices);
        return pp_error_set(err, PP_ERR_INPUT, "device map names %s, which the plan does not use "
                            "(its devices: %s)", from, devices);
    }
    /* A device has one memory figure (the plan's own rule, plan_stages.c): stages
     * that the map puts on one device must not cap it differently. Checked
     * before anything changes. */
    pp_device_id to[PP_PLAN_MAX_STAGES];
    for (int s = 0; s < plan->n_stages; s++) to[s] = map_device(rules, n, plan->stages[s].device);
    for (int s = 0; s < plan->n_stages; s++)
        for (int t = 0; t < s; t++) {
            const pp_plan_stage *a = &plan->stages[s], *b = &plan->stages[t];
            if (a->memory_bytes <= 0 || b->memory_bytes <= 0 || a->rank != b->rank ||
                !pp_device_id_equal(to[s], to[t]) || a->memory_bytes == b->memory_bytes)
                continue;
            char dev[16], x[40], y[40];
            pp_device_id_format(to[s], dev, sizeof dev);
            pp_plan_size_format(a->memory_bytes, x, sizeof x);
            pp_plan_size_format(b->memory_bytes, y, sizeof y);
            return pp_error_set(err, PP_ERR_INPUT,
                                "device map puts stage %d (%s, memory %s) and stage %d (%s, "
                                "memory %s) on %s: a device has one memory figure (map them "
                                "apart, or give the stages the same memory)",
                                s, a->device_name, x, t, b->device_name, y, dev);
        }
    for (int s = 0; s < plan->n_stages; s++) {
        pp_plan_stage *st = &plan->stages[s];
        st->device = to[s];
        pp_device_id_format(st->device, st->device_name, sizeof st->device_name);
        st->replica_device[0] = st->device;
        for (int r = 1; r < plan->replicas && r < PP_PLAN_MAX_REPLICAS; r++)
            st->replica_device[r] = map_device(rules, n, st->replica_device[r]);
    }
    return PP_OK;
}
