/*
 * report.h - what the pipeline-run program prints: the per-stage table,
 * the JSON summary, the progress line, and a split-size sweep as a table,
 * CSV and SVG chart. Output only; no training logic.
 */
#ifndef PP_CLI_REPORT_H
#define PP_CLI_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "partitioner/plan.h"
#include "pipeline/pipeline.h"

/* One row of a split-size sweep. */
typedef struct pp_sweep_row {
    int split_size;
    int micro_batches;
    double step_ms;           /* measured median */
    double images_per_s;
    double bubble;            /* measured */
    double predicted_step_ms; /* simulator from measured stage costs */
    double bubble_predicted;
    double loss;              /* last step */
} pp_sweep_row;

/* The human summary: one row per stage, then throughput and bubble. */
void pp_cli_print_summary(FILE *f, const pp_plan *plan, const pp_pipeline *p);

/* The JSON summary object (ARCHITECTURE.md §6) on one line, with a newline.
 * losses has n_losses entries. Returns false when out of memory. */
bool pp_cli_print_json(FILE *f, const pp_plan *plan, const pp_pipeline *p, const double *losses,
                       int n_losses);

/* JSON for --simulate: the predicted step. */
bool pp_cli_print_simulation_json(FILE *f, const pp_plan *plan, double step_ms, double bubble,
                                  const double *fwd_ms, const double *bwd_ms);

/* A progress line ("\r step 12/100 [=====>    ] loss 6.91 | 123.4 img/s | 0:42 left"). */
void pp_cli_progress(FILE *f, int done, int total, double loss, double images_per_s,
                     double seconds_left);

void pp_cli_print_sweep(FILE *f, const pp_sweep_row *rows, int n);
bool pp_cli_write_sweep_csv(const char *path, const pp_sweep_row *rows, int n);
/* An SVG chart: images/s (left axis) and measured and predicted bubble
 * (right axis) against split size. title names the plan. */
bool pp_cli_write_sweep_svg(const char *path, const char *title, const pp_sweep_row *rows, int n);
bool pp_cli_sweep_json(FILE *f, const pp_plan *plan, const pp_sweep_row *rows, int n);

/* Formats a byte count as "12.3 MiB". Returns buf. */
const char *pp_cli_bytes(double bytes, char *buf, size_t n);

#endif
