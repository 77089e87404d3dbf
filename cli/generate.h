/*
 * generate.h - `pipeline-run PLAN --load CKPT --generate PROMPT`: a trained
 * GPT-2 continues a prompt through the plan's stages (pp_pipeline_generate)
 * and the program prints the whole text (format text: bytes; tokens: token
 * ids separated by spaces). Every rank of a job calls it; rank 0 prints.
 */
#ifndef PP_CLI_GENERATE_H
#define PP_CLI_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "partitioner/plan.h"
#include "pipeline/pipeline.h"

typedef struct pp_cli_generate_args {
    const char *prompt;  /* --generate's value; NULL: no generation */
    int tokens;          /* --tokens (default 200) */
    double temperature;  /* --temperature (default 1) */
    int top_k;           /* --top-k (default 0: all) */
    uint64_t seed;       /* --seed (default: the plan's) */
    bool tokens_given, temperature_given, top_k_given, seed_given;
    bool no_cache;       /* --no-kv-cache */
} pp_cli_generate_args;

/* Reads the value of option name ("--generate", "--tokens", "--temperature",
 * "--top-k", "--seed") into a. Returns false with a message in msg (n
 * bytes) when the value is not one. */
bool pp_cli_generate_option(pp_cli_generate_args *a, const char *name, const char *value,
                            char *msg, size_t n);

/* The run: the pipeline of plan (opts), load, generate, print to stdout.
 * Returns the exit code (0; 1 runtime failure; 2 bad input), having
 * printed the problem. */
int pp_cli_generate(const pp_plan *plan, const pp_pipeline_options *opts, const char *load,
                    const pp_cli_generate_args *a);

#endif
