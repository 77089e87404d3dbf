/*
 * verify.h - pipeline-run --verify FILE... [PLAN]: checks checkpoint files
 * without running anything.
 *
 * Each file: its header and data offsets, every checksum (when it has them)
 * and that no float tensor holds NaN or Inf (pp_checkpoint_verify). With a
 * plan: also that the plan's model loads it (every parameter, buffer and
 * optimizer tensor the plan's model has, with its shape and dtype), checked
 * by building the model on CPU devices, and whether --resume under the plan
 * would take it as well (the step keys the file records equal the plan's,
 * and it holds the state of the plan's optimizer: resume.h). One line per
 * good file on stdout, saying why --resume would refuse it where it would,
 * problems on stderr. Exit 0 when every file passes (and, with a plan,
 * would resume), 2 when any fails, 3 when every file passes and loads but
 * --resume would refuse some (--load takes them).
 */
#ifndef PP_CLI_VERIFY_H
#define PP_CLI_VERIFY_H

#include "partitioner/plan.h"

/* plan may be NULL; it is changed (its devices mapped to CPU devices of one
 * process) when given. Returns the exit status. */
int pp_cli_verify(const char *const *files, int n, pp_plan *plan);

#endif
