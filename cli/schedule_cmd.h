/*
 * schedule_cmd.h - the pipeline-run commands about schedules (--simulate,
 * --print-schedule, --sweep-schedule) and the plan loader main.c shares.
 * Each returns an exit code (0 ok, 1 runtime failure, 2 bad input) after
 * printing what went wrong.
 */
#ifndef PP_CLI_SCHEDULE_CMD_H
#define PP_CLI_SCHEDULE_CMD_H

#include <stdbool.h>

#include "partitioner/plan.h"
#include "pipeline/pipeline.h"
#include "streams/schedule.h"

/* Loads the plan at path, applies the device map (may be NULL) and, with
 * resolve, resolves automatic stages (the profile cache's note on stderr);
 * *out is the caller's (pp_plan_free). Returns the exit code (0: loaded). */
int pp_cli_load_plan(const char *path, const char *device_map, bool resolve, pp_plan **out);

/* --simulate: the predicted step, per stage and in all (json: the JSON on
 * stdout, the table on stderr). */
int pp_cli_simulate(const pp_plan *plan, bool json);

/* --print-schedule[=comms]: the plan's program in torch's CSV grammar on
 * stdout (with_comms: with its sends and receives), what it is on stderr. */
int pp_cli_print_schedule(const pp_plan *plan, bool with_comms);

typedef struct pp_cli_sweep_args {
    const char *path, *device_map;  /* the plan, loaded afresh for each schedule */
    const pp_schedule_kind *kinds;
    int n_kinds;
    bool simulate, json;
    int steps;                      /* steps run per schedule */
    const char *csv, *svg;          /* may be NULL */
    pp_pipeline_layout layout;
} pp_cli_sweep_args;

/* --sweep-schedule LIST: each schedule on the plan (its stages placed as the
 * schedule needs on the plan's devices, cut anew where they are not:
 * pp_plan_restage), run or simulated; a table, and CSV, SVG and JSON. plan is
 * the loaded plan (for titles). Exit 1 only when no schedule could run. The
 * first SIGTERM or SIGINT (signals.h) stops the sweep after the step in
 * flight: the outputs hold the schedules that finished, and the exit status
 * is 128 + the signal. */
int pp_cli_sweep_schedules(const pp_cli_sweep_args *a, const pp_plan *plan);

#endif
