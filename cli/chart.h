/*
 * chart.h - the SVG charts of the pipeline-run program: a split-size sweep,
 * a schedule sweep, and training per epoch. Each writes a whole file (720 x
 * 440, self-contained, no script) at path, titled with title (the plan's
 * path), beside it first and then moved into place (pp_cli_output_open), and
 * returns false (the reason on stderr) when the file cannot be written.
 * Output only; the rows are report.h's.
 */
#ifndef PP_CLI_CHART_H
#define PP_CLI_CHART_H

#include <stdbool.h>

#include "cli/report.h"

/* images/s (left axis) and measured and predicted bubble (right axis)
 * against split size. */
bool pp_cli_write_sweep_svg(const char *path, const char *title, const pp_sweep_row *rows, int n);

/* Step time bars (measured, with the predicted time dashed) and measured and
 * predicted bubble per schedule; a failed row is marked with its error. */
bool pp_cli_write_schedule_sweep_svg(const char *path, const char *title,
                                     const pp_schedule_row *rows, int n);

/* Train loss and test loss (left axis) and test accuracy (right axis, 0..1)
 * per epoch, the picture d2l draws. */
bool pp_cli_write_training_svg(const char *path, const char *title, const pp_epoch_row *rows,
                               int n);

#endif
