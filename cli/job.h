/*
 * job.h - what the ranks of a job of several processes must agree on before
 * any work: the same resolved plan and the same options that shape the run.
 */
#ifndef PP_CLI_JOB_H
#define PP_CLI_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "partitioner/plan.h"
#include "runtime/comm/comm.h"

#define PP_CLI_SHAPE_OPTS 8
#define PP_CLI_SHAPE_VALUE 120

/* The options that shape a run, by name ("--steps") and value as text
 * ("3", "-" when not given); names are static strings. */
typedef struct pp_cli_shape {
    int n;
    const char *name[PP_CLI_SHAPE_OPTS];
    char value[PP_CLI_SHAPE_OPTS][PP_CLI_SHAPE_VALUE];
} pp_cli_shape;

/* Adds one option's value to s (printf format). */
void pp_cli_shape_add(pp_cli_shape *s, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Every rank hashes its resolved plan (as --validate prints it) and its
 * shape, and compares with rank 0's. Collective over the job; call it on
 * every rank at the same point. Returns 0 when all agree (always in one
 * process); 2 when some rank differs, rank 0 then writing to msg (n bytes)
 * which ranks differ, from what (the plan, or each differing option with
 * both values) and both hashes (msg is "" on the other ranks); 1 when the
 * exchange itself failed (err says why). */
int pp_cli_check_same_run(pp_comm *comm, const pp_plan *plan, const pp_cli_shape *mine,
                          char *msg, size_t n, pp_error *err);

#endif
