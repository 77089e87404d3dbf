/* text.c - a growing string for the partitioner's writers (text.h). */
#include "partitioner/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "partitioner/plan_walk_internal.h"

void pp_text_put(pp_text *t, const char *fmt, ...)
{
    if (t->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->oom = true;
        return;
    }
    if (t->len + (size_t)n + 1 > t->cap) {
        size_t cap = (t->len + (size_t)n + 1) * 2;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->oom = true;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

void pp_text_put_doubles(pp_text *t, const double *v, int n)
{
    pp_text_put(t, "[");
    for (int i = 0; i < n; i++) {
        char b[40];
        pp_plan_double_format(v[i], b, sizeof b);
        pp_text_put(t, "%s%s", i ? ", " : "", b);
    }
    pp_text_put(t, "]");
}
