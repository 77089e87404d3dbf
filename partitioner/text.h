/*
 * text.h - a growing string for the partitioner's writers (emit.c: a plan
 * as YAML; plan_identity.c: the values of a plan's step keys).
 *
 * Start from {0} (or with s malloc'ed, cap its size and s[0] = '\0');
 * every put appends printf-style and keeps s NUL-terminated. The caller owns
 * s (free it). When memory runs out, oom is set, s keeps what came before,
 * and later puts do nothing: check oom once at the end.
 */
#ifndef PP_PARTITIONER_TEXT_H
#define PP_PARTITIONER_TEXT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pp_text {
    char *s;        /* NULL until the first put */
    size_t len, cap;
    bool oom;
} pp_text;

void pp_text_put(pp_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "[v0, v1, ...]", each the shortest form that reads back exactly
 * (pp_plan_double_format). */
void pp_text_put_doubles(pp_text *t, const double *v, int n);

#endif
