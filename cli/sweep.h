/*
 * sweep.h - `--sweep-split`: one training run per split size, a row each in
 * a table (and CSV, SVG, JSON).
 *
 * The whole list is checked before anything runs: a size the batch cannot
 * be split by (larger than the batch) is bad input, exit 2 naming it. Then
 * every size runs in turn; a size that cannot run (a micro-batch too small
 * for a layer, a failure while training) becomes a failed row with its
 * reason, and the sweep goes on. A plan, data or checkpoint that the
 * pipeline refuses as bad input when it is made or loaded stops the sweep
 * (exit 2): no size could run. Every output is written, failed rows
 * included; a sweep stopped by a signal writes the sizes that finished. The
 * training loop is handed in as a function by the caller (main.c passes
 * run.c's pp_cli_run_sweep_steps), so that this file calls neither.
 */
#ifndef PP_CLI_SWEEP_H
#define PP_CLI_SWEEP_H

#include <stdbool.h>

#include "partitioner/plan.h"
#include "pipeline/pipeline.h"

/* Runs steps training steps on p (built from plan); returns an exit code
 * (0, 1 runtime failure, 2 bad input, 128 + the signal when stopped by one),
 * *last_loss the last step's loss, err filled when 1 or 2. */
typedef int (*pp_cli_steps_fn)(void *arg, pp_pipeline *p, const pp_plan *plan, int steps,
                               double *last_loss, pp_error *err);

typedef struct pp_cli_sweep {
    const int *sizes;           /* (n) split sizes, in the order given */
    int n;
    int steps;                  /* per size, >= 1 */
    const char *load;           /* --load, or NULL */
    const char *csv, *svg;      /* outputs, or NULL */
    bool json;                  /* the JSON on stdout (the table then on stderr) */
    pp_pipeline_options opts;   /* for every size's pipeline */
    pp_cli_steps_fn run_steps;
    void *arg;                  /* run_steps's */
} pp_cli_sweep;

/* Checks every size of the list against the plan's batch before anything
 * runs: 0, or 2 after printing "--sweep-split: ..." naming the bad size.
 * Leaves the plan's split as it was. */
int pp_cli_sweep_check(pp_plan *plan, const int *sizes, int n);

/* Runs the sweep (the plan's split changes from row to row) and writes its
 * outputs. Returns 0 when some size ran, 1 when every size failed (or an
 * output could not be written), 2 when the pipeline refused the plan, data
 * or checkpoint (nothing written), 128 + the signal when stopped by one
 * (the outputs then hold the sizes that finished). */
int pp_cli_sweep_run(pp_plan *plan, const pp_cli_sweep *sw);

#endif
