/* fit.c - the memory table of --memory and --simulate, and its JSON. */
#include "cli/fit.h"

#include <jansson.h>

#include "cli/report.h"

void pp_cli_print_memory(FILE *f, const pp_plan *plan, const pp_fit_stage *pred)
{
    char a[32], b[32], c[32], d[32], e[32], g[32], h[32], k[32];
    fprintf(f, "\npredicted memory per stage (a training step; %s, %d micro-batch%s of <= %d)\n",
            pp_plan_schedule_name(plan->schedule), plan->micro_batches,
            plan->micro_batches == 1 ? "" : "es", plan->split_size);
    fprintf(f, "%-5s  %-8s  %-11s  %10s  %10s  %10s  %10s  %6s  %10s  %10s  %10s\n", "stage",
            "device", "recompute", "weights", "buffers", "workspace", "kept/mb", "flight",
            "activation", "peak", "cap");
    bool over = false;
    for (int s = 0; s < plan->n_stages; s++) {
        const pp_fit_stage *p = &pred[s];
        const bool shared = p->device_peak != p->peak;
        char cap[48];
        if (p->cap > 0)
            snprintf(cap, sizeof cap, "%s%s", pp_cli_bytes((double)p->cap, k, sizeof k),
                     p->cap_from_card ? " free" : "");
        else
            snprintf(cap, sizeof cap, "none");
        fprintf(f, "%-5d  %-8s  %-11s  %10s  %10s  %10s  %10s  %6d  %10s  %10s  %10s\n", s,
                plan->stages[s].device_name,
                pp_plan_recompute_name(pp_plan_stage_recompute(plan, s)),
                pp_cli_bytes((double)(p->params + p->grads + p->optimizer + p->weight_copies), a,
                             sizeof a),
                pp_cli_bytes((double)(p->batch + p->slots), b, sizeof b),
                pp_cli_bytes((double)p->workspace, c, sizeof c),
                pp_cli_bytes((double)p->kept_per_mb, d, sizeof d), p->in_flight,
                pp_cli_bytes((double)p->activations, e, sizeof e),
                pp_cli_bytes((double)p->peak, g, sizeof g), cap);
        if (shared && pp_plan_device_first_stage(plan, s) == s)
            fprintf(f, "%-5s  %-8s  device peak %s (the stages sharing %s)\n", "", "",
                    pp_cli_bytes((double)p->device_peak, h, sizeof h),
                    plan->stages[s].device_name);
        over |= p->cap > 0 && p->device_peak > p->cap;
    }
    fprintf(f, "%s\n", over ? "does not fit: a device's predicted peak exceeds its cap"
                            : "fits: every device's predicted peak is within its cap");
}

bool pp_cli_memory_json(FILE *f, const pp_plan *plan, const pp_fit_stage *pred)
{
    json_t *o = json_object(), *stages = json_array();
    if (!o || !stages) {
        json_decref(o);
        json_decref(stages);
        return false;
    }
    json_object_set_new(o, "plan", json_string(plan->path));
    json_object_set_new(o, "schedule", json_string(pp_plan_schedule_name(plan->schedule)));
    json_object_set_new(o, "split_size", json_integer(plan->split_size));
    json_object_set_new(o, "micro_batches", json_integer(plan->micro_batches));
    bool fits = true;
    for (int s = 0; s < plan->n_stages; s++) {
        const pp_fit_stage *p = &pred[s];
        json_t *so = json_pack(
            "{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:I, s:I, s:I}",
            "device", plan->stages[s].device_name, "recompute",
            pp_plan_recompute_name(pp_plan_stage_recompute(plan, s)), "params",
            (json_int_t)p->params, "grads", (json_int_t)p->grads, "optimizer",
            (json_int_t)p->optimizer, "weight_copies", (json_int_t)p->weight_copies, "batch",
            (json_int_t)p->batch, "slots", (json_int_t)p->slots, "workspace",
            (json_int_t)p->workspace, "kept_per_mb", (json_int_t)p->kept_per_mb, "activations",
            (json_int_t)p->activations, "in_flight", p->in_flight, "predicted_peak_bytes",
            (json_int_t)p->device_peak, "stage_peak_bytes", (json_int_t)p->peak, "cap_bytes",
            (json_int_t)p->cap);
        json_array_append_new(stages, so);
        fits &= !(p->cap > 0 && p->device_peak > p->cap);
    }
    json_object_set_new(o, "stages", stages);
    json_object_set_new(o, "fits", json_boolean(fits));
    int rc = json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER);
    fputc('\n', f);
    json_decref(o);
    return rc == 0;
}

void pp_cli_print_profile_note(FILE *f, const pp_profile_note *note)
{
    switch (note->source) {
    case PP_PROFILE_NONE: return;
    case PP_PROFILE_FRESH:
        fprintf(f, "unit times: fresh, from the profile cache %s\n", note->cache);
        return;
    case PP_PROFILE_MEASURED:
        if (note->fresh > 0)
            fprintf(f, "unit times: %d of %d read from the profile cache %s, the rest measured "
                       "now%s%s\n", note->fresh, note->lookups, note->cache,
                    note->why[0] ? ": " : " and added", note->why);
        else
            fprintf(f, "unit times: measured now%s %s%s%s\n",
                    note->why[0] ? ", not added to the profile cache" : " and added to the "
                    "profile cache", note->cache, note->why[0] ? ": " : "", note->why);
        return;
    case PP_PROFILE_UNCACHED:
        fprintf(f, "unit times: measured now, not cached (PP_PROFILE_CACHE=off or no cache "
                   "folder)\n");
        return;
    case PP_PROFILE_STALE:
        fprintf(f, "unit times: the profile cache %s was stale (%s): measured again and "
                   "replaced\n", note->cache, note->why);
        return;
    }
}
