/*
 * run.h - the training loop of pipeline-run: the steps of a run and their
 * progress line, the epochs (a line and a row each, the plan's evaluation
 * when due), the --metrics rows, the checkpoint series' periodic saves and
 * the final --save, and the header line that says what the run will do.
 *
 * Contract: main.c makes the pipeline (resumed or loaded), opens the
 * metrics file, calls these, then prints the summary and ends the process;
 * nothing here calls back into main.c. Every rank of a job calls
 * pp_cli_run_steps (its stop check and the saves are collectives); output
 * goes to stderr. Functions returning int return an exit code: 0, 1
 * (runtime failure, err filled), 2 (bad input, err filled), or 128 + the
 * signal when a second one abandoned a save (rr->abandoned).
 */
#ifndef PP_CLI_RUN_H
#define PP_CLI_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/report.h"
#include "cli/resume.h"
#include "cli/series.h"
#include "partitioner/plan.h"
#include "pipeline/pipeline.h"

/* What a run did; the caller owns it (pp_cli_run_result_free). */
typedef struct pp_cli_run_result {
    double *losses;            /* (n_losses) one per step run */
    int n_losses;
    double *grad_norms;        /* (n_losses) each step's gradient norm (optimizer.clip_grad_norm),
                                * NULL without clipping */
    bool interrupted;
    int signal;                /* the signal that stopped the run (interrupted) */
    bool abandoned;            /* a second signal abandoned a save: end at once */
    bool data_failed;          /* a step's batch could not be read (a bad image): nothing of
                                  the step ran, so the last whole step may still be saved */
    pp_cli_epoch_sums sums;    /* the epoch in progress (in: at the start) */
    pp_epoch_row *epochs;      /* (n_epochs) one per completed epoch (plans with epochs) */
    int n_epochs;
    bool evaluated;
    pp_eval_result last_eval;  /* the last evaluation */
    bool step_failed;          /* a step failed (the model is half-updated: never saved) */
    int save_failures;         /* periodic checkpoints that could not be written (the run
                                  went on: a failed save is not a failed step) */
    int64_t first_failed_save; /* the steps done at the first of them */
    int save_unsynced;         /* periodic checkpoints whole and in place whose folder could
                                  not be synced (counted by keep; not in save_failures) */
    int64_t first_unsynced_save;
} pp_cli_run_result;

void pp_cli_run_result_free(pp_cli_run_result *rr);

/* The --metrics file's header row; each step and evaluation adds a row. */
void pp_cli_metrics_header(FILE *metrics);

/* Runs `steps` steps on p, with a progress line on stderr when progress.
 * With epochs, a line per epoch (and the plan's evaluation every eval.every
 * epochs); with steps, one evaluation at the end when the plan has an eval
 * section. When --steps ends an epochs plan inside an epoch, that partial
 * epoch gets its line and row, and the evaluation a steps plan has at the
 * end. Stops before a step when a signal came (rr->interrupted, every rank
 * after the same step). A periodic checkpoint that cannot be written stops
 * nothing: the error is printed with "training goes on", counted in
 * rr->save_failures (or rr->save_unsynced), and the caller ends with exit status 1 after its final
 * saves. metrics and series may be NULL. */
int pp_cli_run_steps(pp_pipeline *p, const pp_plan *plan, pp_comm *comm, int steps, bool progress,
                     FILE *metrics, pp_cli_series *series, pp_cli_run_result *rr,
                     pp_error *err);

/* A checkpoint of the series (periodic, or the last of a stopped run) with
 * the epoch's running sums; *saved (may be NULL) gets the file's path. */
int pp_cli_run_series_save(pp_pipeline *p, const pp_plan *plan, pp_cli_series *series,
                           pp_cli_run_result *rr, const char **saved, pp_error *err);

/* The --save file of a training run: the whole state after the last whole
 * step (also when stopped), without the optimizer's when weights_only. */
int pp_cli_run_save_final(pp_pipeline *p, const pp_plan *plan, const char *path,
                          bool weights_only, pp_cli_run_result *rr, pp_error *err);

/* The run's header line on stderr: "PLAN: MODEL on S stages, SCHEDULE,
 * batch B in M micro-batches, N steps" and what the steps are (see
 * pp_cli_run_steps); steps_given: --steps set them. */
void pp_cli_run_print_header(const pp_plan *plan, const pp_pipeline *p, bool steps_given,
                             int steps);

/* A pp_cli_steps_fn for the split-size sweep (sweep.h): a run of its own,
 * with the plan's checkpoint series (rank 0's) when it has one. arg is the
 * job's pp_comm. */
int pp_cli_run_sweep_steps(void *arg, pp_pipeline *p, const pp_plan *plan, int steps,
                           double *last_loss, pp_error *err);

#endif
