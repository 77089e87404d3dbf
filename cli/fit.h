/*
 * fit.h - what the pipeline-run program prints for memory and the planner:
 * the per-stage memory prediction beside each device's cap (--memory,
 * --simulate), and the planner's candidates (--optimize). Output only.
 */
#ifndef PP_CLI_FIT_H
#define PP_CLI_FIT_H

#include <stdbool.h>
#include <stdio.h>

#include "partitioner/plan.h"
#include "pipeline/fit.h"

/* One row per stage: the parts of its predicted peak, its device's peak and
 * cap, then a line saying whether every device fits. */
void pp_cli_print_memory(FILE *f, const pp_plan *plan, const pp_fit_stage *pred);

/* The same as one JSON object on a line. Returns false when out of memory. */
bool pp_cli_memory_json(FILE *f, const pp_plan *plan, const pp_fit_stage *pred);

/* The planner's candidates, best first: schedule, split size, predicted
 * step, throughput and bubble, then per stage its units, recomputation and
 * predicted peak beside its cap. */
void pp_cli_print_candidates(FILE *f, const pp_plan *plan, const pp_fit_result *res,
                             int64_t memory_limit);
bool pp_cli_candidates_json(FILE *f, const pp_plan *plan, const pp_fit_result *res);

/* One line on where measured unit times came from ("unit times: fresh in
 * CACHE"); nothing when none were used. */
void pp_cli_print_profile_note(FILE *f, const pp_profile_note *note);

/* The check before a run: PP_ERR_INPUT (the refusal of pp_fit_check) when a
 * device's predicted peak exceeds its cap; PP_MEMORY_CHECK=off skips it
 * (a value other than on or off is PP_ERR_INPUT). */
pp_status pp_cli_check_memory(const pp_plan *plan, pp_error *err);

/* --memory: the table (stdout; stderr with json, and the JSON on stdout),
 * then the check. */
pp_status pp_cli_memory(const pp_plan *plan, bool json, pp_error *err);

/* --optimize: searches, prints the candidates and writes the best plan
 * (output, else stdout). Returns the exit code: 0; 2 when nothing fits or
 * output cannot be written (said on stderr); 1 with err filled for a
 * library failure (the caller prints it). */
int pp_cli_optimize(const pp_plan *plan, int64_t memory_limit, const char *output, bool json,
                    pp_error *err);

#endif
