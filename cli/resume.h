/*
 * resume.h - what a resumed run starts from: --resume auto's choice of
 * checkpoint, the checks a checkpoint must pass against the plan before a
 * run continues from it, and the running sums of the epoch in progress that
 * a checkpoint carries (so the epoch's line after a resume covers it all).
 *
 * The plan check compares the plan's step keys (pp_plan_step_keys) with the
 * "pipeline-run.plan.<key>" entries the checkpoint records: a run resumed
 * under a plan that reads other samples per step, or computes other things
 * from them, would give its position (step, epoch, data order) another
 * meaning, so each differing key is reported with both values. A file that
 * records no plan (older, or written by another program) is not checked.
 */
#ifndef PP_CLI_RESUME_H
#define PP_CLI_RESUME_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/series.h"
#include "partitioner/plan.h"
#include "runtime/comm/comm.h"
#include "runtime/io/checkpoint.h"

/* Sums over the samples of the epoch in progress (before each step's update). */
typedef struct pp_cli_epoch_sums {
    double loss_sum;     /* sum of loss x batch */
    double correct_sum;  /* sum of accuracy x batch */
    int64_t samples;
} pp_cli_epoch_sums;

/* Metadata entries that carry s ("pipeline-run.epoch.*", exact decimal
 * round trips), written into meta with their text in bufs; none when the
 * epoch has no samples yet (so files at an epoch's end do not change).
 * Returns the count (0..3). */
size_t pp_cli_epoch_sums_meta(const pp_cli_epoch_sums *s, pp_checkpoint_meta meta[3],
                              char bufs[3][40]);

/* The sums info carries (zeros when none). */
void pp_cli_epoch_sums_read(const pp_checkpoint_info *info, pp_cli_epoch_sums *s);

/* Whether the file holds the state of the plan's optimizer
 * ("optimizer.momentum.*" for SGD with momentum, "optimizer.exp_avg.*" for
 * AdamW); true when that optimizer keeps none. */
bool pp_cli_has_optimizer_state(const pp_plan *plan, const pp_checkpoint_info *info);

/* The optimizer state a file holds, in words: "AdamW state", "SGD momentum"
 * or "no optimizer state". */
const char *pp_cli_optimizer_state_held(const pp_checkpoint_info *info);

/* The state the plan's optimizer resumes from, in words ("AdamW state",
 * "SGD momentum"); NULL when it keeps none. */
const char *pp_cli_optimizer_state_needed(const pp_plan *plan);

/* Compares the plan's step keys with those info (of file path) records.
 * Prints each difference on f ("  batch.size: 256 in the checkpoint, 128 in
 * the plan") after a line naming both files, and returns false when any
 * differs. *checked (may be NULL) tells whether the file recorded a plan. */
bool pp_cli_plan_matches(const pp_plan *plan, const pp_checkpoint_info *info, const char *path,
                         FILE *f, bool *checked);

/* --resume auto: the newest checkpoint by recorded steps among the plan's
 * series and save_path (when given and present; a file recording no step
 * counts as step 0, and of one step save_path is tried first) that
 * verifies whole (pp_checkpoint_verify), was written by this plan's run
 * (its step keys and run keys, pp_plan_run_keys, are the plan's: files of
 * another run under the same names are skipped)
 * and holds optimizer state where the plan's optimizer keeps some, warning
 * on log for each newer one skipped and why. *chosen (malloc'ed) is NULL
 * when there is none; *other (malloc'ed) the newest file of another run, or
 * NULL. Returns false when out of memory. */
bool pp_cli_resume_auto(const pp_plan *plan, const char *save_path, char **chosen,
                        char **other, FILE *log);

/* What a training run starts from. */
typedef struct pp_cli_start {
    char *from;                  /* checkpoint to resume from (malloc'ed), or NULL: fresh */
    pp_cli_epoch_sums sums;      /* of the epoch in progress at that checkpoint */
    pp_cli_ckpt_file *series;    /* (n_series) the series' files on disk, by steps */
    int n_series;
} pp_cli_start;

/* Decides it on every rank of comm alike (collective): rank 0 removes stale
 * temporaries (pp_cli_clean_temporaries), resolves resume ("auto", a file
 * or NULL), and checks the file: readable, optimizer state where the plan
 * needs it, the plan's step keys (pp_cli_plan_matches), printing why when
 * it refuses; a fresh start over a series an earlier run left is warned
 * about. The others follow its outcome. Returns 0, or the exit status of a
 * refusal (2) or failure (1); out is filled on 0 (free with
 * pp_cli_start_free). */
int pp_cli_start_prepare(const pp_plan *plan, pp_comm *comm, const char *resume,
                         const char *save_path, pp_cli_start *out);
void pp_cli_start_free(pp_cli_start *s);

#endif
