/*
 * diag.h - a list of input diagnostics ("FILE:LINE:COL: message") for parsers
 * that report several problems at once.
 *
 * A pp_diag is plain caller-owned data (no allocation, safe to copy): it keeps
 * the first PP_DIAG_MAX problems in full and counts the rest. Functions that
 * take a pp_diag * accept NULL (then they only return the status).
 * Not thread-safe: one pp_diag per call in flight.
 */
#ifndef PP_PARTITIONER_DIAG_H
#define PP_PARTITIONER_DIAG_H

#include <stdarg.h>
#include <stddef.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PP_DIAG_MAX 32
#define PP_DIAG_TEXT_MAX 512

typedef struct pp_diag_item {
    pp_status code;               /* PP_ERR_INPUT for problems of the input */
    int line, col;                /* 1-based position in the file; 0, 0 when none */
    char text[PP_DIAG_TEXT_MAX];  /* "FILE:LINE:COL: message" ("FILE: message" without a position) */
} pp_diag_item;

typedef struct pp_diag {
    int count;                    /* problems reported; items holds min(count, PP_DIAG_MAX) */
    pp_diag_item items[PP_DIAG_MAX];
} pp_diag;

/* Empties d. d may be NULL. */
void pp_diag_clear(pp_diag *d);

/* Appends one problem. file may be NULL ("<input>"); line/col are 1-based, or
 * 0 for none. Returns code. d may be NULL. */
pp_status pp_diag_add(pp_diag *d, pp_status code, const char *file, int line, int col,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));
pp_status pp_diag_addv(pp_diag *d, pp_status code, const char *file, int line, int col,
                       const char *fmt, va_list ap);

/* Joins the stored texts with newlines into buf (always NUL-terminated when
 * n > 0), adding "(N more problems)" when some were not kept or do not fit.
 * Returns buf. */
const char *pp_diag_format(const pp_diag *d, char *buf, size_t n);

/* Copies the problems into a pp_error (code of the first problem; message as
 * pp_diag_format). Returns that code, or PP_OK when d is empty. */
pp_status pp_diag_to_error(const pp_diag *d, pp_error *err);

#ifdef __cplusplus
}
#endif

#endif
