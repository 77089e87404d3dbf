/*
 * batch_split.h - the one rule for cutting a batch into micro-batches
 * (docs/ARCHITECTURE.md section 3.1; the plan's keys: docs/PLAN.md, `batch`),
 * used by the plan, the schedules and the program's split-size sweeps.
 *
 *   by size  (split_size s > 0): pieces of s, the last one smaller when s does
 *            not divide the batch: 8 by 3 -> 3, 3, 2;
 *   by count (micro_batches m > 0, s == 0): torch.tensor_split: the first
 *            batch % m pieces get one sample more: 9 in 4 -> 3, 2, 2, 2.
 */
#ifndef PP_BATCH_SPLIT_H
#define PP_BATCH_SPLIT_H

/* Number of micro-batches: ceil(batch / split_size) when split_size > 0,
 * else micro_batches. batch >= 1; the caller checks the arguments. */
int pp_batch_split_count(int batch, int split_size, int micro_batches);

/* Writes the pp_batch_split_count sizes (summing to batch) and returns the
 * largest, which is the effective split size. */
int pp_batch_split_sizes(int batch, int split_size, int micro_batches, int *sizes);

#endif
