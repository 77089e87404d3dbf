/*
 * options.h - which options of the pipeline-run program go together: one
 * table (options.c) says, for every option, the runs it works in and what it
 * needs; every other combination is refused the same way, exit 2 with a
 * message naming both options. docs/CLI.md prints the same table.
 *
 * A run is one of eleven kinds, chosen by at most one of --verify, --optimize,
 * --print-schedule, --sweep-schedule, --validate, --simulate, --memory,
 * --sweep-split, --eval-only and --generate (none: training); the one exception is
 * --sweep-schedule --simulate, a sweep of predictions.
 */
#ifndef PP_CLI_OPTIONS_H
#define PP_CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "partitioner/plan.h"

typedef enum pp_cli_opt {
    PP_CLI_OPT_STEPS = 0,
    PP_CLI_OPT_VALIDATE,
    PP_CLI_OPT_SIMULATE,
    PP_CLI_OPT_SWEEP,
    PP_CLI_OPT_EVAL_ONLY,
    PP_CLI_OPT_JSON,
    PP_CLI_OPT_TRACE,
    PP_CLI_OPT_LOAD,
    PP_CLI_OPT_SAVE,
    PP_CLI_OPT_WEIGHTS_ONLY,
    PP_CLI_OPT_RESUME,
    PP_CLI_OPT_DEVICE_MAP,
    PP_CLI_OPT_GRAPHS,
    PP_CLI_OPT_CSV,
    PP_CLI_OPT_SVG,
    PP_CLI_OPT_METRICS,
    PP_CLI_OPT_PLOT,
    PP_CLI_OPT_LAYOUT,
    PP_CLI_OPT_GRAD_ALLREDUCE,
    PP_CLI_OPT_MEMORY,
    PP_CLI_OPT_OPTIMIZE,
    PP_CLI_OPT_MEMORY_LIMIT,
    PP_CLI_OPT_OUTPUT,          /* -o */
    PP_CLI_OPT_PRINT_SCHEDULE,
    PP_CLI_OPT_SWEEP_SCHEDULE,
    PP_CLI_OPT_VERIFY,
    PP_CLI_OPT_RESUME_AUTO,     /* --resume auto (PP_CLI_OPT_RESUME: --resume FILE) */
    PP_CLI_OPT_SHOW_DATA,
    PP_CLI_OPT_DUMP_DATA,
    PP_CLI_OPT_GENERATE,
    PP_CLI_OPT_TOKENS,
    PP_CLI_OPT_TEMPERATURE,
    PP_CLI_OPT_TOP_K,
    PP_CLI_OPT_SEED,
    PP_CLI_OPT_NO_KV_CACHE,
    PP_CLI_OPT_COUNT
} pp_cli_opt;

/* "--steps", "--sweep-split", "-o", "--resume auto", ... */
const char *pp_cli_opt_name(pp_cli_opt o);

/* Checks the options given (given[o] for each pp_cli_opt) against the
 * table. Returns true when they go together; else false with the reason,
 * naming both options, in msg (n bytes). */
bool pp_cli_options_check(const bool given[PP_CLI_OPT_COUNT], char *msg, size_t n);

/* The same for what depends on the plan (--plot needs epochs,
 * --grad-allreduce needs replicas), once it is loaded. */
bool pp_cli_options_check_plan(const bool given[PP_CLI_OPT_COUNT], const pp_plan *plan,
                               char *msg, size_t n);

#endif
