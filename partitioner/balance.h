/*
 * balance.h - automatic stage boundaries: split n units (in order) into S
 * contiguous, non-empty stages so that the largest stage cost is as small as
 * possible, within each stage's memory.
 *
 * Exact: dynamic programming over (stages, units), O(S n^2) time and
 * O(S n) memory. Ties between optimal partitions are broken the same way
 * every time (each stage, chosen from the last, takes as many units as it
 * can), so results are deterministic.
 *
 * Memory model (all optional): stage s holding units i..j needs
 *   sum(unit_fixed_bytes[i..j]) + stage_in_flight[s] * sum(unit_flight_bytes[i..j])
 * bytes (fixed: parameters, gradients, optimizer state; flight: activations
 * kept for backward per in-flight micro-batch, as the caller computes them),
 * which must not exceed capacity[s] (0 = unlimited). Byte values are finite
 * and >= 0.
 */
#ifndef PP_PARTITIONER_BALANCE_H
#define PP_PARTITIONER_BALANCE_H

#include "runtime/core/status.h"

typedef struct pp_balance_problem {
    int n_units;                     /* n >= 1 */
    const double *cost;              /* n: finite, >= 0 (time, FLOPs, bytes...) */
    int n_stages;                    /* S >= 1; S > n is reported as PP_ERR_INPUT */
    const double *unit_fixed_bytes;  /* n, or NULL (0) */
    const double *unit_flight_bytes; /* n, or NULL (0) */
    const double *stage_in_flight;   /* S, or NULL (1 each) */
    const double *capacity;          /* S bytes, 0 = unlimited; NULL = no memory limits */
    const char *const *stage_names;  /* S names for messages ("cuda:1"), or NULL */
    const char *const *unit_names;   /* n names for messages ("layer3.2"), or NULL */
} pp_balance_problem;

/* Solves pb. first (S entries) receives the first unit of each stage (stage s
 * holds first[s] .. first[s+1]-1, the last stage up to n-1); *max_cost (may be
 * NULL) the optimal largest stage cost. PP_ERR_INPUT when there is no feasible
 * partition (more stages than units, or memory too small: the message names
 * the stage's device and the bytes it would need); PP_ERR_INVALID for bad
 * arguments (NULL arrays, negative or non-finite costs or bytes); PP_ERR_OOM. */
pp_status pp_balance_partition(const pp_balance_problem *pb, int *first, double *max_cost,
                               pp_error *err);

#endif
