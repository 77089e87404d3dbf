/*
 * clock.h - the monotonic clock in seconds, for the durations the runtime
 * reports (tokenizing a text, indexing a folder, a message's wait).
 */
#ifndef PP_CLOCK_H
#define PP_CLOCK_H

#include <time.h>

static inline double pp_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
