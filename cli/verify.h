/*
 * verify.h - pipeline-run --verify FILE... [PLAN]: checks checkpoint files
 * without running anything.
 *
 * Each file: its header and data offsets, every checksum (when it has them)
 * and that no float tensor holds NaN or Inf (pp_checkpoint_verify). With a
 * plan: also that a run of the plan could resume from it (the step keys the
 * file records equal the plan's) and load it (every parameter, buffer and
 * optimizer tensor the plan's model has, with its shape and dtype), checked
 * by building the model on CPU devices. One line per file on stdout,
 * problems on stderr; exit 0 when every file passes, else 2.
 */
#ifndef PP_CLI_VERIFY_H
#define PP_CLI_VERIFY_H

#include "partitioner/plan.h"

/* plan may be NULL; it is changed (its devices mapped to CPU devices of one
 * process) when given. Returns the exit status. */
int pp_cli_verify(const char *const *files, int n, pp_plan *plan);

#endif
