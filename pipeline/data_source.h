/*
 * data_source.h - a plan's data sources opened as pp_data (data_source.c):
 * the training set of `data` and the test set of `eval`. Not installed.
 */
#ifndef PP_PIPELINE_DATA_SOURCE_H
#define PP_PIPELINE_DATA_SOURCE_H

#include <stdbool.h>

#include "partitioner/plan.h"
#include "runtime/io/data.h"

/* Opens d (plan->data, or plan->eval.data when eval) with the plan's seed and
 * normalisation; a bad input's message starts with the plan's FILE:LINE:COL
 * of the section. */
pp_status pipe_data_open(const pp_plan *plan, const pp_plan_data *d, bool eval, pp_data **out,
                         pp_error *err);

/* Steps per epoch of a data set of n samples in batches of `batch`: with
 * drop_last the batches that fit whole, else one more for the rest. */
int64_t pipe_data_steps_per_epoch(int64_t n, int batch, bool drop_last);

/* Training step k's window of the data stream (positions pos .. pos +
 * count - 1) and its epoch: with epochs, every epoch is one pass with a
 * partial last batch (or none: drop_last); without, batches follow one
 * another (wrapping). */
void pipe_data_window(int64_t k, int64_t n, int batch, bool epochs, bool drop_last, int64_t *pos,
                      int *count, int64_t *epoch);

#endif
