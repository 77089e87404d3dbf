/*
 * status.h - status codes and the error record every library call fills.
 *
 * Library functions return a pp_status and, on failure, leave a human-readable
 * message in a caller-owned pp_error. The library never prints and never exits;
 * only the CLI maps statuses to exit codes (PP_ERR_INPUT -> 2, others -> 1).
 * A pp_error is plain data: no allocation, safe to copy, one per thread.
 * Every function that takes a pp_error takes NULL as well: no message is
 * wanted, and the call returns the same status as with one (pp_error_prefix
 * aside: see there).
 */
#ifndef PP_STATUS_H
#define PP_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pp_status {
    PP_OK = 0,
    PP_ERR_INPUT,       /* bad input: plan, arguments, data or checkpoint files (exit 2) */
    PP_ERR_INVALID,     /* API misuse: wrong shape, dtype, device, null pointer */
    PP_ERR_OOM,         /* out of memory on some device */
    PP_ERR_IO,          /* file system failure while reading or writing */
    PP_ERR_BACKEND,     /* CUDA/cuDNN/cuBLAS or OpenBLAS failure */
    PP_ERR_NUMERIC,     /* NaN or Inf loss */
    PP_ERR_UNSUPPORTED, /* feature not built in (e.g. CUDA backend absent) */
    PP_ERR_INTERRUPTED, /* stopped on request (SIGINT) */
    PP_ERR_INTERNAL,    /* broken invariant inside the library */
    PP_ERR_UNSYNCED,    /* a file written whole and renamed into place, but its folder
                         * could not be synced: it may not survive a crash (atomic_file.h) */
} pp_status;

#define PP_ERROR_MSG_MAX 1024

typedef struct pp_error {
    pp_status code;
    char msg[PP_ERROR_MSG_MAX];
} pp_error;

/* Clears err (code PP_OK, empty message). err may be NULL. */
void pp_error_clear(pp_error *err);

/* Sets code and a printf-style message; returns code so callers can
 * `return pp_error_set(err, PP_ERR_INVALID, "...")`. err may be NULL. */
pp_status pp_error_set(pp_error *err, pp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
pp_status pp_error_setv(pp_error *err, pp_status code, const char *fmt, va_list ap);

/* Prepends "prefix: " to the message already in err (for adding context such
 * as "stage 1 (cuda:1) micro-batch 3"). Returns err->code; with err NULL there
 * is no code to return (PP_ERR_INTERNAL), so a caller that may be given NULL
 * returns the status it has instead. */
pp_status pp_error_prefix(pp_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Static name of a status, e.g. "bad input". */
const char *pp_status_name(pp_status s);

/* Evaluates expr (a pp_status); returns it from the enclosing function on failure. */
#define PP_TRY(expr)                                                         \
    do {                                                                     \
        pp_status pp_try_s_ = (expr);                                        \
        if (pp_try_s_ != PP_OK) return pp_try_s_;                            \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
