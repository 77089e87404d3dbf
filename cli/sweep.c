/* sweep.c - `--sweep-split` (sweep.h): the list checked first, then a run
 * and a row per split size, failed rows kept, every output written. */
#include "cli/sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/chart.h"
#include "cli/outputs.h"
#include "cli/report.h"
#include "cli/signals.h"

int pp_cli_sweep_check(pp_plan *plan, const int *sizes, int n)
{
    int split = plan->split_size, micro = plan->micro_batches;
    bool by_micro = plan->batch_by_micro;
    pp_error err;
    for (int i = 0; i < n; i++) {
        if (pp_plan_split(plan, sizes[i], 0, &err) != PP_OK) {
            fprintf(stderr, "pipeline-run: --sweep-split: %s (nothing ran)\n", err.msg);
            return 2;
        }
    }
    /* back to the plan's own rule (it was valid when parsed) */
    if (pp_plan_split(plan, by_micro ? 0 : split, by_micro ? micro : 0, &err) != PP_OK) {
        fprintf(stderr, "pipeline-run: --sweep-split: %s\n", err.msg);
        return 1;
    }
    return 0;
}

/* A failed row: the size, and why it could not run. */
static void fail_row(pp_sweep_row *row, const pp_plan *plan, const pp_error *err)
{
    *row = (pp_sweep_row){.split_size = plan->split_size,
                          .micro_batches = plan->micro_batches,
                          .failed = true};
    snprintf(row->error, sizeof row->error, "%s", err->msg);
    fprintf(stderr, "pipeline-run: split size %d cannot run: %s\n", plan->split_size, err->msg);
}

/* One size: builds the pipeline, runs the steps, fills row. Returns the
 * run's exit code (0: row holds figures; 128 + a signal: stopped; -2: the
 * pipeline refused the plan, data or checkpoint, printed, no row; else the
 * row is a failed one). */
static int run_pipeline(pp_plan *plan, const pp_cli_sweep *sw, pp_sweep_row *row);

static int run_size(pp_plan *plan, const pp_cli_sweep *sw, int size, pp_sweep_row *row)
{
    pp_error err;
    if (pp_plan_split(plan, size, 0, &err) != PP_OK) { /* checked: cannot happen */
        fail_row(row, plan, &err);
        return 2;
    }
    fprintf(stderr, "split_size %d (%d micro-batch%s)\n", plan->split_size, plan->micro_batches,
            plan->micro_batches == 1 ? "" : "es");
    if (pp_plan_check_micro_batches(plan, &err) != PP_OK) {
        fail_row(row, plan, &err);
        return 2;
    }
    /* each size's checkpoints in a folder of their own beside the plan's */
    char *own = NULL, *path = plan->checkpoint.enabled ? plan->checkpoint.path : NULL;
    if (path) {
        char *dir = pp_cli_outputs_series_dir(plan);
        const size_t skip = dir && strcmp(dir, ".") != 0 ? strlen(dir) + 1 : 0;
        const size_t need = (dir ? strlen(dir) : 0) + strlen(path) + 32;
        own = dir && strlen(path) >= skip ? malloc(need) : NULL;
        if (own) {
            snprintf(own, need, "%s%ssplit-%d/%s", skip ? dir : "", skip ? "/" : "", size,
                     path + skip);
            plan->checkpoint.path = own;
        }
        free(dir);
        if (!own) {
            fprintf(stderr, "pipeline-run: out of host memory\n");
            return 1;
        }
        int rc = pp_cli_outputs_prepare(plan, NULL, true);
        if (!rc) fprintf(stderr, "split_size %d: its checkpoints are %s\n", size, own);
        if (rc) {
            plan->checkpoint.path = path;
            free(own);
            return -2;
        }
    }
    int rc = run_pipeline(plan, sw, row);
    if (own) {
        plan->checkpoint.path = path;
        free(own);
    }
    return rc;
}

/* run_size's pipeline and steps. */
static int run_pipeline(pp_plan *plan, const pp_cli_sweep *sw, pp_sweep_row *row)
{
    pp_error err;
    pp_pipeline *p = NULL;
    pp_status st = pp_pipeline_new(plan, &sw->opts, &p, &err);
    if (st == PP_OK && sw->load) st = pp_pipeline_load(p, sw->load, &err);
    if (st == PP_ERR_INPUT) { /* bad plan, data or checkpoint: no split size can run */
        fprintf(stderr, "pipeline-run: %s\n", err.msg);
        pp_pipeline_free(p);
        return -2;
    }
    double loss = 0;
    int rc = st == PP_OK ? sw->run_steps(sw->arg, p, plan, sw->steps, &loss, &err) : 1;
    if (rc >= 128) {
        pp_pipeline_free(p);
        return rc;
    }
    if (rc) {
        fail_row(row, plan, &err);
        pp_pipeline_free(p);
        return rc;
    }
    pp_pipeline_report r;
    pp_pipeline_report_get(p, &r);
    *row = (pp_sweep_row){
        .split_size = plan->split_size,
        .micro_batches = plan->micro_batches,
        .step_ms = r.step_ms_median,
        .images_per_s = r.images_per_s,
        .bubble = r.bubble_frac,
        .predicted_step_ms = r.predicted_step_ms,
        .bubble_predicted = r.bubble_frac_predicted,
        .loss = loss,
    };
    pp_pipeline_free(p);
    return 0;
}

/* The table, CSV, SVG and JSON of rows[0..n); stopped: the signal that
 * stopped the sweep, or NULL. A sweep stopped before any size finished
 * leaves the CSV and SVG that were there. Returns 0 or 1. */
static int write_outputs(const pp_plan *plan, const pp_cli_sweep *sw, const pp_sweep_row *rows,
                         int n, const char *stopped)
{
    int rc = 0;
    pp_cli_print_sweep(sw->json ? stderr : stdout, rows, n);
    const bool files = pp_cli_sweep_writes_files(sw->csv, sw->svg, n, stopped, "split size");
    if (files && sw->csv && !pp_cli_write_sweep_csv(sw->csv, rows, n)) {
        fprintf(stderr, "pipeline-run: cannot write %s\n", sw->csv);
        rc = 1;
    }
    if (files && sw->svg && !pp_cli_write_sweep_svg(sw->svg, plan->path, rows, n)) {
        fprintf(stderr, "pipeline-run: cannot write %s\n", sw->svg);
        rc = 1;
    }
    if (sw->json && !pp_cli_sweep_json(stdout, plan, rows, n, stopped)) rc = 1;
    return rc;
}

int pp_cli_sweep_run(pp_plan *plan, const pp_cli_sweep *sw)
{
    pp_sweep_row *rows = calloc((size_t)(sw->n > 0 ? sw->n : 1), sizeof *rows);
    if (!rows) {
        fprintf(stderr, "pipeline-run: out of host memory\n");
        return 1;
    }
    int ran = 0, done = 0, stopped = 0; /* stopped: 128 + the signal */
    for (int i = 0; i < sw->n; i++) {
        int rc = run_size(plan, sw, sw->sizes[i], &rows[i]);
        if (rc == -2) {
            free(rows);
            return 2;
        }
        if (rc >= 128) {
            stopped = rc;
            break;
        }
        done++;
        if (rc == 0) ran++;
    }
    int rc = write_outputs(plan, sw, rows, done,
                           stopped ? pp_cli_signal_name(stopped - 128) : NULL);
    free(rows);
    if (stopped) {
        fprintf(stderr, "pipeline-run: interrupted by %s\n", pp_cli_signal_name(stopped - 128));
        return stopped;
    }
    if (rc) return rc;
    return ran ? 0 : 1; /* some split size ran: the sweep is a result */
}
