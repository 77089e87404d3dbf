/*
 * schedule_cmd.c - the pipeline-run commands about schedules: --simulate
 * (the predicted step), --print-schedule (the plan's program as CSV) and
 * --sweep-schedule (each schedule on the plan, run or simulated), and the
 * plan loader they and main.c share. Exit codes as main.c's.
 */
#include "cli/schedule_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/fit.h"
#include "cli/chart.h"
#include "cli/report.h"
#include "cli/signals.h"
#include "pipeline/fit.h"
#include "streams/schedule.h"

static int fail(const pp_error *err)
{
    fprintf(stderr, "pipeline-run: %s\n", err->msg);
    return err->code == PP_ERR_INPUT ? 2 : 1;
}

int pp_cli_load_plan(const char *path, const char *device_map, bool resolve, pp_plan **out)
{
    pp_plan *plan;
    pp_diag diag;
    pp_diag_clear(&diag);
    *out = NULL;
    if (pp_plan_load(path, &plan, &diag) != PP_OK) {
        char buf[PP_DIAG_MAX * PP_DIAG_TEXT_MAX];
        fprintf(stderr, "%s\n", pp_diag_format(&diag, buf, sizeof buf));
        return diag.count && diag.items[0].code != PP_ERR_INPUT ? 1 : 2;
    }
    pp_error err;
    pp_profile_note note = {0};
    if ((device_map && pp_plan_apply_device_map(plan, device_map, &err) != PP_OK) ||
        (resolve && pp_fit_resolve_plan(plan, &note, &err) != PP_OK)) {
        pp_plan_free(plan);
        return fail(&err);
    }
    pp_cli_print_profile_note(stderr, &note);
    *out = plan;
    return 0;
}

int pp_cli_simulate(const pp_plan *plan, bool json)
{
    pp_pipeline_prediction *pr = malloc(sizeof *pr);
    pp_error err;
    if (!pr) return 1;
    if (pp_pipeline_predict_plan(plan, pr, &err) != PP_OK) {
        free(pr);
        return fail(&err);
    }
    FILE *out = json ? stderr : stdout;
    fprintf(out, "%-5s  %-8s  %6s  %10s  %10s  %10s  %10s  %9s  %6s\n", "stage", "device",
            "on dev", "fwd ms/mb", "bwd ms/mb", "I ms/mb", "W ms/mb", "in flight", "idle");
    for (int s = 0; s < plan->n_stages; s++)
        fprintf(out, "%-5d  %-8s  %6d  %10.2f  %10.2f  %10.2f  %10.2f  %9d  %5.1f%%\n", s,
                plan->stages[s].device_name, pr->stage_device[s], pr->forward_ms[s],
                pr->backward_ms[s], pr->input_ms[s], pr->weight_ms[s], pr->in_flight[s],
                100 * pr->device_bubble[s]);
    fprintf(out, "predicted: %.1f ms per step, %.1f images/s, bubble %.1f%% (%s, %d stage%s on %d "
            "device%s, %d micro-batches)\n", pr->step_ms,
            pr->step_ms > 0 ? plan->batch_size * 1000.0 / pr->step_ms : 0, 100 * pr->bubble,
            pp_plan_schedule_name(plan->schedule), plan->n_stages, plan->n_stages == 1 ? "" : "s",
            pr->devices, pr->devices == 1 ? "" : "s", plan->micro_batches);
    if (pr->note[0]) fprintf(out, "note: %s\n", pr->note);
    if (plan->model.kind != PP_MODEL_DELAY)
        fprintf(out, "(layer costs are catalogue FLOPs at a nominal device rate: compare "
                     "shapes, not absolute times)\n");
    pp_fit_stage pred[PP_PLAN_MAX_STAGES];
    if (pp_fit_predict(plan, pred, &err) != PP_OK || pp_fit_caps(plan, pred, &err) != PP_OK) {
        free(pr);
        return fail(&err);
    }
    pp_cli_print_memory(out, plan, pred);
    int rc = json && !pp_cli_print_simulation_json(stdout, plan, pr) ? 1 : 0;
    free(pr);
    return rc;
}

int pp_cli_print_schedule(const pp_plan *plan, bool with_comms)
{
    pp_schedule s;
    pp_error err;
    if (pp_pipeline_plan_schedule(plan, &s, &err) != PP_OK) return fail(&err);
    if (with_comms && pp_schedule_add_comms(&s, &err) != PP_OK) {
        pp_schedule_free(&s);
        return fail(&err);
    }
    size_t need = pp_schedule_format_csv(&s, with_comms, NULL, 0);
    char *text = malloc(need + 1);
    int rc = 1;
    if (text) {
        pp_schedule_format_csv(&s, with_comms, text, need + 1);
        rc = fwrite(text, 1, need, stdout) == need ? 0 : 1;
        fprintf(stderr, "%s: schedule %s, %d stage%s on %d device%s, %d micro-batch%s\n",
                plan->path, s.name, s.stages, s.stages == 1 ? "" : "s", s.devices,
                s.devices == 1 ? "" : "s", s.micro_batches, s.micro_batches == 1 ? "" : "es");
        if (s.note[0]) fprintf(stderr, "note: %s\n", s.note);
    }
    free(text);
    pp_schedule_free(&s);
    return rc;
}

/* Fits a freshly loaded plan to schedule kind: its stages placed as the kind
 * needs on the plan's devices (V = 2 stages per device where it places
 * several and the plan does not already), cut anew where they are not. */
static pp_status fit_plan(pp_plan *plan, pp_schedule_kind kind, pp_error *err)
{
    int have[PP_PLAN_MAX_STAGES], want[PP_PLAN_MAX_STAGES];
    int D = pp_plan_devices(plan, have), S = plan->n_stages;
    pp_schedule_placement pl = pp_schedule_kind_placement(kind);
    pp_error e;
    /* looped virtual stages: at least two per device */
    bool fits = (pl != PP_PLACEMENT_LOOP || S > D) && pp_schedule_place(pl, S, D, want, &e) == PP_OK;
    for (int s = 0; fits && s < S; s++) fits = have[s] == want[s];
    int ps = 0; /* the plan's name for the kind */
    while (ps < PP_PLAN_SCHEDULE_FILE &&
           strcmp(pp_plan_schedule_name((pp_plan_schedule)ps), pp_schedule_kind_name(kind)))
        ps++;
    if (ps == PP_PLAN_SCHEDULE_FILE)
        return pp_error_set(err, PP_ERR_INPUT, "schedule %s runs no plan",
                            pp_schedule_kind_name(kind));
    plan->schedule = (pp_plan_schedule)ps;
    if (fits) return PP_OK;
    int n = pl == PP_PLACEMENT_ONE ? D : 2 * D;
    PP_TRY(pp_schedule_place(pl, n, D, want, err));
    return pp_plan_restage(plan, n, want, err);
}

/* One schedule of the sweep on a fresh copy of the plan: simulated, or run
 * for `steps` steps. Returns false when a signal stopped it before its last
 * step (row unfinished). */
static bool sweep_one(const pp_cli_sweep_args *a, pp_schedule_kind kind, pp_schedule_row *row)
{
    memset(row, 0, sizeof *row);
    snprintf(row->schedule, sizeof row->schedule, "%s", pp_schedule_kind_name(kind));
    row->simulated = a->simulate;
    pp_plan *plan;
    pp_error err;
    pp_status st = PP_OK;
    if (pp_cli_load_plan(a->path, a->device_map, true, &plan) != 0) {
        st = pp_error_set(&err, PP_ERR_INPUT, "the plan does not load");
        plan = NULL;
    }
    pp_pipeline_prediction *pr = malloc(sizeof *pr);
    if (st == PP_OK && !pr) st = pp_error_set(&err, PP_ERR_OOM, "out of host memory");
    if (st == PP_OK) st = fit_plan(plan, kind, &err);
    if (st == PP_OK) st = pp_pipeline_predict_plan(plan, pr, &err);
    if (st == PP_OK) {
        row->stages = plan->n_stages;
        row->devices = pr->devices;
        row->micro_batches = plan->micro_batches;
        row->step_ms = row->predicted_step_ms = pr->step_ms;
        row->bubble = row->bubble_predicted = pr->bubble;
        snprintf(row->note, sizeof row->note, "%s", pr->note);
        for (int s = 0; s < plan->n_stages; s++) {
            row->in_flight[s] = pr->in_flight[s];
            row->peak_bytes[s] = pr->memory_bytes[s];
        }
    }
    pp_pipeline *p = NULL;
    bool stopped = false;
    if (st == PP_OK && !a->simulate) {
        const pp_pipeline_options opts = {.layout = a->layout};
        st = pp_pipeline_new(plan, &opts, &p, &err);
        for (int k = 0; k < a->steps && st == PP_OK && !stopped; k++) {
            stopped = pp_cli_signal_first() != 0; /* stop after the step in flight */
            if (!stopped) st = pp_pipeline_step(p, NULL, &err);
        }
    }
    if (st == PP_OK && p) {
        pp_pipeline_report r;
        pp_pipeline_report_get(p, &r);
        row->step_ms = r.step_ms_median;
        row->bubble = r.bubble_frac;
        row->predicted_step_ms = r.predicted_step_ms;
        row->bubble_predicted = r.bubble_frac_predicted;
        for (int s = 0; s < plan->n_stages; s++) {
            pp_stage_report sr;
            pp_pipeline_stage_report(p, s, &sr);
            row->peak_bytes[s] = (int64_t)sr.peak_bytes;
        }
    }
    if (st != PP_OK) {
        row->failed = true;
        snprintf(row->error, sizeof row->error, "%.190s", err.msg);
        fprintf(stderr, "pipeline-run: schedule %s: %s\n", row->schedule, err.msg);
    }
    pp_pipeline_free(p);
    free(pr);
    pp_plan_free(plan);
    return !stopped;
}

int pp_cli_sweep_schedules(const pp_cli_sweep_args *a, const pp_plan *plan)
{
    pp_schedule_row *rows = calloc((size_t)a->n_kinds, sizeof *rows);
    if (!rows) return 1;
    /* a signal stops the sweep after the step in flight: the schedules that
     * finished are written, the one it stopped is not */
    int failed = 0, done = 0;
    for (int i = 0; i < a->n_kinds && !pp_cli_signal_first(); i++) {
        fprintf(stderr, "schedule %s\n", pp_schedule_kind_name(a->kinds[i]));
        if (!sweep_one(a, a->kinds[i], &rows[done])) break;
        failed += rows[done++].failed;
    }
    FILE *human = a->json ? stderr : stdout;
    pp_cli_print_schedule_sweep(human, rows, done);
    int rc = failed == done ? 1 : 0;
    const char *stopped = done < a->n_kinds ? pp_cli_signal_name(pp_cli_signal_first()) : NULL;
    const bool files = pp_cli_sweep_writes_files(a->csv, a->svg, done, stopped, "schedule");
    if (files && a->csv && !pp_cli_write_schedule_sweep_csv(a->csv, rows, done)) {
        fprintf(stderr, "pipeline-run: cannot write %s\n", a->csv);
        rc = 1;
    }
    if (files && a->svg && !pp_cli_write_schedule_sweep_svg(a->svg, plan->path, rows, done)) {
        fprintf(stderr, "pipeline-run: cannot write %s\n", a->svg);
        rc = 1;
    }
    if (a->json && !pp_cli_schedule_sweep_json(stdout, plan, rows, done, stopped)) rc = 1;
    free(rows);
    if (stopped) {
        fprintf(stderr, "pipeline-run: interrupted by %s\n", stopped);
        return 128 + pp_cli_signal_first();
    }
    return rc;
}
