/*
 * args.h - the command line of the pipeline-run program: its options
 * (getopt's table), their values checked and gathered in one cli_args, the
 * combinations refused through options.h's table, and the usage text that
 * --help prints (docs/CLI.md holds the same options).
 */
#ifndef PP_CLI_ARGS_H
#define PP_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/generate.h"
#include "cli/options.h"
#include "pipeline/pipeline.h"
#include "streams/schedule.h"

#define MAX_SWEEP 64

typedef struct cli_args {
    const char *plan;
    int steps;            /* 0: the plan's */
    bool validate, json, simulate, weights_only, eval_only, memory, optimize, verify;
    int64_t memory_limit; /* --memory-limit (bytes), 0: none */
    const char *output;   /* -o: where --optimize writes the best plan, --show-data its
                             picture, --dump-data its tensors */
    int show_data;        /* --show-data N */
    const char *dump_data; /* --dump-data STEP or eval:K */
    const char **files;   /* --verify: the checkpoint files (argv's) */
    int n_files;
    int graphs;        /* pp_pipeline_graphs: --cuda-graphs (PLAN when not given) */
    bool grads_whole;     /* --grad-allreduce whole */
    bool grads_given, layout_given;
    const char *trace, *load, *save, *device_map, *csv, *svg, *metrics, *plot, *resume;
    pp_pipeline_layout layout; /* --layout */
    int sweep[MAX_SWEEP];
    int n_sweep;
    int print_schedule;   /* --print-schedule: 1, =comms: 2 */
    pp_schedule_kind sweep_kinds[PP_SCHEDULE_KINDS];
    int n_sweep_kinds;    /* --sweep-schedule */
    pp_cli_generate_args gen; /* --generate and its options (prompt NULL: none) */
    bool given[PP_CLI_OPT_COUNT]; /* which options the command line gave (options.h) */
} cli_args;

/* Fills a (zeroed here) from argv. Returns 0, or 2 after printing the
 * refusal ("pipeline-run: MESSAGE" and a pointer to --help) on stderr;
 * --help and --version print and exit 0. */
int pp_cli_parse_args(int argc, char **argv, cli_args *a);

/* Prints "pipeline-run: " fmt (with what) and the pointer to --help on
 * stderr; returns 2, the exit code of bad arguments. */
int pp_cli_bad_args(const char *fmt, const char *what);

#endif
