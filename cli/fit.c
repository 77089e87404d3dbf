/* fit.c - the memory table of --memory and --simulate, and its JSON. */
#include "cli/fit.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/outputs.h"
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

/* A stage's units in the plan's compact spelling ("layer3, layer4, avgpool, fc"). */
static const char *units_of(const pp_plan *plan, const pp_fit_candidate *c, int s, char *buf,
                            size_t n)
{
    if (plan->model.kind == PP_MODEL_DELAY || c->first[s] < 0) {
        snprintf(buf, n, "(delay)");
        return buf;
    }
    return pp_plan_spell_units(&plan->catalogue, c->first[s], c->last[s], buf, n);
}

void pp_cli_print_candidates(FILE *f, const pp_plan *plan, const pp_fit_result *res,
                             int64_t memory_limit)
{
    char a[32], b[32], list[512];
    fprintf(f, "%d of %d candidates (schedule x split size) fit", res->fitting, res->tried);
    if (memory_limit > 0)
        fprintf(f, " within the memory limit %s", pp_cli_bytes((double)memory_limit, a, sizeof a));
    if (res->n == 0) {
        fputs("\n", f);
        return;
    }
    fprintf(f, "; the best %d by predicted step time:\n", res->n);
    fprintf(f, "%2s  %-8s  %5s  %5s  %9s  %9s  %6s\n", "#", "schedule", "split", "micro",
            "step ms", "images/s", "bubble");
    for (int k = 0; k < res->n; k++) {
        const pp_fit_candidate *c = &res->best[k];
        fprintf(f, "%2d  %-8s  %5d  %5d  %9.1f  %9.1f  %5.1f%%\n", k + 1,
                pp_plan_schedule_name(c->schedule), c->split_size, c->micro_batches, c->step_ms,
                c->images_per_s, 100 * c->bubble);
        for (int s = 0; s < plan->n_stages; s++)
            fprintf(f, "      stage %d %-8s %-11s peak %10s of %-10s  %s\n", s,
                    plan->stages[s].device_name, pp_plan_recompute_name(c->recompute[s]),
                    pp_cli_bytes((double)c->peak[s], a, sizeof a),
                    c->cap[s] > 0 ? pp_cli_bytes((double)c->cap[s], b, sizeof b) : "no cap",
                    units_of(plan, c, s, list, sizeof list));
    }
}

bool pp_cli_candidates_json(FILE *f, const pp_plan *plan, const pp_fit_result *res)
{
    json_t *o = json_object(), *cands = json_array();
    if (!o || !cands) {
        json_decref(o);
        json_decref(cands);
        return false;
    }
    json_object_set_new(o, "plan", json_string(plan->path));
    json_object_set_new(o, "tried", json_integer(res->tried));
    json_object_set_new(o, "fitting", json_integer(res->fitting));
    json_object_set_new(o, "unit_times", json_string(pp_profile_source_name(res->note.source)));
    for (int k = 0; k < res->n; k++) {
        const pp_fit_candidate *c = &res->best[k];
        json_t *stages = json_array();
        for (int s = 0; s < plan->n_stages; s++) {
            char list[512];
            json_array_append_new(
                stages, json_pack("{s:s, s:s, s:s, s:f, s:f, s:I, s:I}", "device",
                                  plan->stages[s].device_name, "layers",
                                  units_of(plan, c, s, list, sizeof list), "recompute",
                                  pp_plan_recompute_name(c->recompute[s]), "forward_ms",
                                  c->forward_ms[s], "backward_ms", c->backward_ms[s],
                                  "predicted_peak_bytes", (json_int_t)c->peak[s], "cap_bytes",
                                  (json_int_t)c->cap[s]));
        }
        json_array_append_new(
            cands, json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:o}", "schedule",
                             pp_plan_schedule_name(c->schedule), "split_size", c->split_size,
                             "micro_batches", c->micro_batches, "step_ms", c->step_ms,
                             "images_per_s", c->images_per_s, "bubble", c->bubble, "stages",
                             stages));
    }
    json_object_set_new(o, "candidates", cands);
    if (res->n == 0) json_object_set_new(o, "why", json_string(res->why));
    int rc = json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER);
    fputc('\n', f);
    json_decref(o);
    return rc == 0;
}

pp_status pp_cli_check_memory(const pp_plan *plan, pp_error *err)
{
    const char *env = getenv("PP_MEMORY_CHECK");
    if (env && !strcmp(env, "off")) return PP_OK;
    if (env && env[0] && strcmp(env, "on") != 0)
        return pp_error_set(err, PP_ERR_INPUT, "PP_MEMORY_CHECK=%.32s: expected on or off", env);
    pp_fit_stage pred[PP_PLAN_MAX_STAGES];
    PP_TRY(pp_fit_predict(plan, pred, err));
    PP_TRY(pp_fit_caps(plan, pred, err));
    return pp_fit_check(plan, pred, err);
}

pp_status pp_cli_memory(const pp_plan *plan, bool json, pp_error *err)
{
    pp_fit_stage pred[PP_PLAN_MAX_STAGES];
    PP_TRY(pp_fit_predict(plan, pred, err));
    PP_TRY(pp_fit_caps(plan, pred, err));
    pp_cli_print_memory(json ? stderr : stdout, plan, pred);
    if (json && !pp_cli_memory_json(stdout, plan, pred))
        return pp_error_set(err, PP_ERR_OOM, "out of memory writing JSON");
    return pp_fit_check(plan, pred, err);
}

/* Writes len bytes of text to path, whole or not at all (pp_cli_output:
 * what was there stays when it cannot; the reason on stderr). */
static bool write_file(const char *path, const char *text, size_t len)
{
    pp_cli_output out;
    FILE *f = pp_cli_output_open(&out, path);
    if (!f) return false;
    fwrite(text, 1, len, f);
    return pp_cli_output_commit(&out);
}

int pp_cli_optimize(const pp_plan *plan, int64_t memory_limit, const char *output, bool json,
                    pp_error *err)
{
    pp_fit_result res;
    const pp_fit_options opt = {.memory_limit = memory_limit, .top = 5};
    int where[PP_PLAN_MAX_STAGES];
    const int devices = pp_plan_devices(plan, where);
    fprintf(stderr, "%s: searching cuts, schedule, split size and recomputation for %d stage%s "
            "over %d device%s%s\n", plan->path, plan->n_stages, plan->n_stages == 1 ? "" : "s",
            devices, devices == 1 ? "" : "s",
            plan->model.kind == PP_MODEL_DELAY ? "" : " (measuring unit times)");
    if (pp_fit_optimize(plan, &opt, &res, err) != PP_OK) return 1;
    pp_cli_print_profile_note(stderr, &res.note);
    pp_cli_print_candidates(json || !output ? stderr : stdout, plan, &res, memory_limit);
    if (json && !pp_cli_candidates_json(stdout, plan, &res)) {
        pp_fit_result_free(&res);
        pp_error_set(err, PP_ERR_OOM, "out of memory writing JSON");
        return 1;
    }
    if (res.n == 0) {
        char limit[64] = "";
        if (memory_limit > 0)
            snprintf(limit, sizeof limit, " within --memory-limit %lld bytes",
                     (long long)memory_limit);
        fprintf(stderr, "pipeline-run: %s: nothing fits%s (%d candidates tried); %s\n",
                plan->path, limit, res.tried, res.why[0] ? res.why : "every device is too small");
        pp_fit_result_free(&res);
        return 2;
    }
    char *text;
    size_t len;
    if (pp_fit_emit(plan, &res.best[0], memory_limit, &text, &len, err) != PP_OK) {
        pp_fit_result_free(&res);
        return 1;
    }
    int rc = 0;
    if (output && !write_file(output, text, len)) {
        fprintf(stderr, "pipeline-run: cannot write %s\n", output);
        rc = 2;
    } else if (output) {
        fprintf(stderr, "wrote %s (candidate 1: predicted %.1f ms per step, %.1f images/s)\n",
                output, res.best[0].step_ms, res.best[0].images_per_s);
    } else { /* with --json, stdout is the JSON object's: the plan goes with the text */
        if (json) fprintf(stderr, "the best plan (candidate 1; -o FILE writes it to a file):\n");
        fwrite(text, 1, len, json ? stderr : stdout);
    }
    free(text);
    pp_fit_result_free(&res);
    return rc;
}
