/*
 * check.h - the minimal assertion helpers every test executable uses.
 * A failed CHECK prints file:line and the condition and counts a failure;
 * the test keeps going so one run shows every failure. check_summary()
 * prints the totals and returns the exit code (0 pass, 1 fail).
 */
#ifndef PP_TESTS_CHECK_H
#define PP_TESTS_CHECK_H

#include <stdio.h>

#include "runtime/core/status.h"

static int check_failures_;
static int check_total_;

#define CHECK(cond) CHECK_MSG(cond, "%s", #cond)

#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        check_total_++;                                                          \
        if (!(cond)) {                                                           \
            check_failures_++;                                                   \
            fprintf(stderr, "%s:%d: check failed: ", __FILE__, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

/* Checks that a pp_status is PP_OK, printing the error message otherwise. */
#define CHECK_OK(expr, errp)                                                     \
    do {                                                                         \
        pp_status check_s_ = (expr);                                             \
        CHECK_MSG(check_s_ == PP_OK, "%s -> %s: %s", #expr,                      \
                  pp_status_name(check_s_), (errp)->msg);                        \
    } while (0)

static inline int check_summary(const char *name)
{
    fprintf(stderr, "%s: %d checks, %d failed\n", name, check_total_, check_failures_);
    return check_failures_ ? 1 : 0;
}

#endif
