/*
 * plan_walk_internal.h - internal helpers of plan_walk.c shared by the
 * partitioner's .c files: byte sizes with units, shortest round-tripping
 * doubles.
 */
#ifndef PP_PARTITIONER_PLAN_WALK_INTERNAL_H
#define PP_PARTITIONER_PLAN_WALK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PP_PLAN_MAX_MEMORY_BYTES ((int64_t)1 << 60)

/* Parses "123", "40GiB", "1.5 GB", "512MiB" into bytes (1 .. 2^60).
 * Returns 0 on success, -1 on a syntax error, -2 when out of range. */
int pp_plan_size_parse(const char *s, int64_t *out);

/* Formats bytes exactly: "40GiB", "512MiB", "4KiB" or a plain integer. */
void pp_plan_size_format(int64_t bytes, char *buf, size_t n);

/* Shortest "%.Ng" form of v that reads back as exactly v. */
void pp_plan_double_format(double v, char *buf, size_t n);


#endif
