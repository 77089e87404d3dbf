/*
 * outputs.h - the files a run writes, checked before it trains: the
 * checkpoint series of the plan's `checkpoint:` section, --save, --trace,
 * --metrics, --plot and a sweep's --csv and --svg. A training run makes the
 * folders of the series and of --save when they are missing (saying so) and
 * checks that every other output's folder exists and takes new files, so
 * that no run trains for hours and then loses its result to a missing or
 * read-only folder; --validate checks the same without making anything.
 *
 * Contract: every rank of a job calls pp_cli_outputs_prepare alike (the
 * folders are made where each rank runs; a folder another rank made at the
 * same time is no error). Messages go to stderr; its return value is an
 * exit code (0, or 2).
 */
#ifndef PP_CLI_OUTPUTS_H
#define PP_CLI_OUTPUTS_H

#include <stdbool.h>
#include <stdio.h>

#include "partitioner/plan.h"
#include "runtime/core/atomic_file.h"

/* The outputs given on the command line (NULL: not given). */
typedef struct pp_cli_outputs {
    const char *save, *trace, *metrics, *plot, *csv, *svg;
    const char *output; /* --optimize's -o */
} pp_cli_outputs;

/* Checks plan's checkpoint series and o's files; with make, makes the
 * folders of the series and of o->save that are missing ("made folder ck/
 * for checkpoint.path" on stderr), else leaves them to the run. The folders
 * of the other outputs must exist, and no output may name a folder. A
 * problem is printed as "pipeline-run: WHAT: PATH: why" (the series' at its
 * FILE:LINE:COL) and returns 2. */
int pp_cli_outputs_prepare(const pp_plan *plan, const pp_cli_outputs *o, bool make);

/* Makes the folder path's file goes in (and those above it) when missing,
 * just before a save: the series' names may hold {step} in a folder's.
 * Errors are left to the save, which names the path. */
void pp_cli_outputs_make_parent(const char *path);

/* The folder the series' files go in that exists before any save: the part of
 * checkpoint.path before the component holding {step} or {epoch} ("." when
 * that is the first). malloc'ed; NULL without a checkpoint section or when
 * out of memory. */
char *pp_cli_outputs_series_dir(const pp_plan *plan);

/* A table or chart (a sweep's --csv and --svg, --plot, --optimize -o)
 * written whole or not at all: pp_cli_output_open makes the temporary file
 * beside path and returns it for writing (NULL when it cannot);
 * pp_cli_output_commit moves it into place when every write went through,
 * else removes it, so a failed or interrupted write leaves what was at path
 * as it was. A link to a file keeps its link; a device, a FIFO or
 * /dev/stdout is written through, in place, never replaced (pp_atomic_open,
 * runtime/core/atomic_file.h). A failure is said on stderr ("pipeline-run: PATH:
 * why"). Returns whether path took the whole text. */
typedef struct pp_cli_output {
    pp_atomic_file af;
    const char *path;
} pp_cli_output;

FILE *pp_cli_output_open(pp_cli_output *o, const char *path);
bool pp_cli_output_commit(pp_cli_output *o);

#endif
