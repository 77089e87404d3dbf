/*
 * emit.h - a resolved plan written back as plan YAML (docs/PLAN.md).
 *
 * The text parses back (pp_plan_parse_string) to a plan equal to the input
 * under pp_plan_equal: stages are always explicit, layers in compact form
 * (a whole "layerN" when a stage holds every block of it, else "layerN.K"),
 * numbers in the shortest form that reads back exactly, data paths absolute.
 */
#ifndef PP_PARTITIONER_EMIT_H
#define PP_PARTITIONER_EMIT_H

#include <stddef.h>

#include "partitioner/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes plan as YAML into a new NUL-terminated string *out (the caller frees
 * it with free()); *len (may be NULL) receives its length. PP_ERR_INVALID when
 * the plan still has unresolved automatic stages (pp_plan_resolve_auto first);
 * PP_ERR_OOM. */
pp_status pp_plan_emit(const pp_plan *plan, char **out, size_t *len, pp_error *err);

#ifdef __cplusplus
}
#endif

#endif
