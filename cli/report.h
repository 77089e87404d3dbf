/*
 * report.h - what the pipeline-run program prints: the per-stage table,
 * the JSON summary, the progress line, the epoch line, and the split-size
 * and schedule sweeps as tables, CSV and JSON (the SVG charts of sweeps and
 * of training: chart.h). Output only; no training logic.
 */
#ifndef PP_CLI_REPORT_H
#define PP_CLI_REPORT_H

#include <stdbool.h>
#include <stdint.h>
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
    bool failed;              /* this split size could not run (error says why) */
    char error[PP_ERROR_MSG_MAX]; /* why it failed, whole (never cut) */
} pp_sweep_row;

/* One row of a schedule sweep: a schedule run (or simulated) on the plan. */
typedef struct pp_schedule_row {
    char schedule[32];
    int stages, devices, micro_batches;
    bool simulated;           /* figures from the simulator only */
    double step_ms;           /* measured median (simulated: predicted) */
    double bubble;            /* measured (simulated: predicted) */
    double predicted_step_ms; /* simulator */
    double bubble_predicted;
    int in_flight[PP_PLAN_MAX_STAGES];      /* the schedule's peak per stage */
    int64_t peak_bytes[PP_PLAN_MAX_STAGES]; /* per stage: its device's memory peak (simulated:
                                             * the plan's estimate for its in-flight peak) */
    char note[192];           /* the schedule's note (padding), "" */
    bool failed;              /* this schedule could not run on the plan (error says why) */
    char error[200];
} pp_schedule_row;

/* One epoch of training (and its evaluation when the plan has one). */
typedef struct pp_epoch_row {
    int epoch;                /* 1-based */
    double train_loss;        /* mean over the epoch's samples */
    double train_acc;         /* over the epoch's samples, before each step's update */
    bool evaluated;
    double test_loss, test_acc;
    double test_top5;         /* top-5 accuracy of the evaluation */
    double seconds;           /* training time of the epoch (evaluation excluded) */
    double images_per_s;      /* training */
    double eval_images_per_s; /* pipelined inference */
    bool partial;             /* --steps ended the run inside this epoch */
    int steps, steps_of;      /* partial: the epoch's steps run, of its steps */
} pp_epoch_row;

/* Where a training run stands when it ends (summary and JSON). */
typedef struct pp_cli_run_info {
    int64_t steps_done;       /* steps of the run in all, resumed ones included */
    int64_t steps_left;       /* steps this invocation was to run and did not (stopped) */
    int64_t resumed_from;     /* steps done by the checkpoint it resumed from; -1 fresh */
    const char *interrupted;  /* "SIGTERM", "SIGINT" when stopped by one, else NULL */
    const double *grad_norms; /* (the steps' losses) each step's gradient norm before
                               * clipping (optimizer.clip_grad_norm); NULL without */
} pp_cli_run_info;

/* The human summary: one row per stage, then throughput and bubble, the
 * first and last loss and, with an evaluation, the last test accuracy. A
 * run that had no steps left (a finished run resumed) says so instead of
 * the figures. run may be NULL. */
/* One evaluation's line after label: loss and accuracy (a token model's:
 * loss per token, perplexity and next-token accuracy). */
void pp_cli_print_eval(FILE *f, const pp_plan *plan, const char *label, const pp_eval_result *e);

void pp_cli_print_summary(FILE *f, const pp_plan *plan, const pp_pipeline *p,
                          const double *losses, int n_losses, const pp_eval_result *last_eval,
                          const pp_cli_run_info *run);

/* "epoch 3/10  train loss 0.4123  test loss 0.3950  test acc 0.8612  top-5 0.9902  12.3 s
 * 4878 img/s";
 * a partial epoch reads "epoch 3/10 (12 of 235 steps)  train loss ...". */
void pp_cli_print_epoch(FILE *f, const pp_epoch_row *row, int epochs);

/* The JSON summary object of --json (docs/ARCHITECTURE.md section 3.6) on one
 * line, with a newline.
 * losses has n_losses entries, epochs n_epochs (the key is left out when 0),
 * last_eval may be NULL. With run: also steps_done, steps_left,
 * resumed_from (null when fresh) and interrupted (null, or the signal's
 * name). Returns false when out of memory. */
bool pp_cli_print_json(FILE *f, const pp_plan *plan, const pp_pipeline *p, const double *losses,
                       int n_losses, const pp_epoch_row *epochs, int n_epochs,
                       const pp_eval_result *last_eval, const pp_cli_run_info *run);

/* JSON for --validate: what the plan resolved to ("valid": true, the batch's
 * split, steps or epochs, replicas, each stage's rank, device and layers,
 * and "resolved": the plan as YAML). Returns false when out of memory. */
bool pp_cli_print_plan_json(FILE *f, const pp_plan *plan);

/* JSON for --eval-only. */
bool pp_cli_print_eval_json(FILE *f, const pp_plan *plan, const pp_eval_result *e);

/* JSON for --simulate: the predicted step. */
bool pp_cli_print_simulation_json(FILE *f, const pp_plan *plan, const pp_pipeline_prediction *pr);

/* A progress line ("\r step 12/100 [=====>    ] loss 6.91 | 123.4 img/s | 0:42 left"),
 * with " | norm 1.23" after the loss when grad_norm >= 0 (clipping). */
void pp_cli_progress(FILE *f, int done, int total, double loss, double grad_norm,
                     double images_per_s, double seconds_left);

/* A split-size sweep as a table, CSV and JSON (its SVG chart: chart.h). The
 * CSV writers write the whole file beside path, then move it into place
 * (pp_cli_output_open), and return false (the reason on stderr) when it
 * cannot be written. */
void pp_cli_print_sweep(FILE *f, const pp_sweep_row *rows, int n);
bool pp_cli_write_sweep_csv(const char *path, const pp_sweep_row *rows, int n);
/* Whether a sweep writes its --csv and --svg files (either may be NULL):
 * not when a signal (stopped, its name; NULL: none) came before any of its
 * rows finished (done), which it says on stderr naming the rows (what:
 * "split size", "schedule"), so that the files there stay. */
bool pp_cli_sweep_writes_files(const char *csv, const char *svg, int done, const char *stopped,
                               const char *what);

/* JSON: interrupted (may be NULL) names the signal that stopped the sweep
 * ("interrupted": "SIGINT"), the rows being those that finished. */
bool pp_cli_sweep_json(FILE *f, const pp_plan *plan, const pp_sweep_row *rows, int n,
                       const char *interrupted);

/* A schedule sweep as a table, CSV (per-stage lists joined with ';') and
 * JSON (its SVG chart: chart.h). */
void pp_cli_print_schedule_sweep(FILE *f, const pp_schedule_row *rows, int n);
bool pp_cli_write_schedule_sweep_csv(const char *path, const pp_schedule_row *rows, int n);
bool pp_cli_schedule_sweep_json(FILE *f, const pp_plan *plan, const pp_schedule_row *rows, int n,
                                const char *interrupted);

/* Formats a byte count as "12.3 MiB". Returns buf. */
const char *pp_cli_bytes(double bytes, char *buf, size_t n);

#endif
