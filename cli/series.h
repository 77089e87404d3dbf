/*
 * series.h - the checkpoint files of a run: the series a plan's
 * `checkpoint:` section names (a path with {step} or {epoch}, a file every K
 * steps or epochs, the newest `keep` kept), the save a run makes when it is
 * stopped, and the stale temporary files of saves that were killed.
 *
 * Names: "{step}" becomes the steps done; "{epoch}" the epochs completed,
 * or, for a save in the middle of an epoch (a run stopped by a signal),
 * "E+S": E epochs and S steps into the next. Files are ordered by the steps
 * their metadata records ("pipeline-run.steps"), never by name.
 * keep: the newest K files of the series stay: those this run wrote and,
 * when it resumed from the series, those it found up to the step it resumed
 * at (so a job preempted again and again keeps K files, not K per start).
 * The tag may name a folder ("ck/{step}/model.safetensors"): the series is
 * then those folders' files, and keep removes the folders it empties.
 * Temporaries: a save writes "NAME.tmp-XXXXXX" beside NAME and renames it;
 * one killed (kill -9, a node lost) leaves that file, which the next start
 * removes for the series' names and --save's.
 *
 * Every rank of a job calls the saves (collective); rank 0 writes, deletes
 * and cleans. Output: one line per file on stderr.
 */
#ifndef PP_CLI_SERIES_H
#define PP_CLI_SERIES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "partitioner/plan.h"
#include "pipeline/pipeline.h"

/* A file of the series on disk. */
typedef struct pp_cli_ckpt_file {
    char *path;
    int64_t steps;   /* recorded in its header; -1 when the header is unreadable */
} pp_cli_ckpt_file;

void pp_cli_ckpt_files_free(pp_cli_ckpt_file *files, int n);

typedef struct pp_cli_series {
    const pp_plan *plan;
    int rank;
    int64_t steps_per_epoch;
    pp_cli_ckpt_file *kept;      /* (n) the files `keep` counts, oldest first */
    int n;
    int64_t last_steps;          /* steps of the newest file this run wrote (or adopted) */
    char *last_path;
    bool failed_in_place;        /* the last save failed after its file was renamed into
                                  * place (its folder's fsync): that file is counted */
} pp_cli_series;

void pp_cli_series_init(pp_cli_series *s, const pp_plan *plan, int rank,
                        int64_t steps_per_epoch);
void pp_cli_series_free(pp_cli_series *s);

/* The series' name for a checkpoint after `steps` steps (malloc'ed), or NULL
 * when the plan has no checkpoint section or memory is out. */
char *pp_cli_series_path(const pp_cli_series *s, int64_t steps);

/* Saves p as the series' file for the steps it has run, unless this run
 * already saved or adopted that one (then *written is false and nothing is
 * written), and drops the oldest beyond keep. o->with_optimizer is forced
 * on. The save is abandoned by a second signal (signals.h). On success
 * *path_out (may be NULL) names the file (owned by s). Returns PP_OK or the
 * save's status (PP_ERR_INTERRUPTED when abandoned). A save that fails
 * after its file took its name (the folder could not be synced) leaves a
 * whole file there: keep counts it as this run's (s->failed_in_place), so
 * the files kept are the newest on disk; it is written again when a later
 * save is due at the same step. */
pp_status pp_cli_series_save(pp_cli_series *s, pp_pipeline *p, const pp_pipeline_save_options *o,
                             const char **path_out, bool *written, pp_error *err);

/* The files on disk whose names match the plan's series, sorted by the steps
 * they record (unreadable headers first). Empty without a checkpoint
 * section. Returns false when out of memory. */
bool pp_cli_series_scan(const pp_plan *plan, pp_cli_ckpt_file **files, int *n);

/* Counts files[] recorded at 0..upto steps among those `keep` applies to
 * (their copies; the series then holds them); the one that is the file
 * `resumed` (may be NULL) is the state on disk already, which a save at
 * upto steps does not write again. Every rank calls it alike. */
void pp_cli_series_adopt(pp_cli_series *s, const pp_cli_ckpt_file *files, int n, int64_t upto,
                         const char *resumed);

/* Removes "NAME.tmp-XXXXXX" files left beside the series' names and beside
 * save_path (may be NULL), saying so on log. Returns how many. */
int pp_cli_clean_temporaries(const pp_plan *plan, const char *save_path, FILE *log);

#endif
