/*
 * trace.h - Chrome traces of the processes of one job on one time base.
 *
 * Each process of a job measures its spans with its own clock
 * (pp_stream_clock_ns) and writes its own trace file. To line the files up,
 * the job estimates at start how far each rank's clock is from rank 0's
 * (pipeline/clocks.c: ping-pong rounds with rank 0, NTP's estimate from the
 * round with the shortest round trip), and each rank writes its spans on
 * rank 0's clock: ts = t + offset_ns - origin_ns, where origin_ns is one
 * instant of rank 0's clock, the same in every file. The estimate's error is
 * at most half that round trip (uncertainty_ns), if the reply was stamped
 * between the request's arrival and the reply's departure.
 *
 * Such a file's top-level "otherData" object (the Chrome trace format's
 * place for metadata) says so: {"rank": R, "clock_reference_rank": 0,
 * "clock_offset_us": offset, "clock_uncertainty_us": uncertainty,
 * "time_origin": "..."}. pp_trace_write_chrome (executor.h) writes the
 * files of one process, times from steps[0].t0_ns, with no otherData.
 */
#ifndef PP_TRACE_H
#define PP_TRACE_H

#include <stdint.h>

#include "runtime/core/status.h"
#include "streams/executor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pp_trace_clock {
    int rank;                  /* this process's rank in the job */
    int64_t offset_ns;         /* rank 0's clock minus this process's (0 on rank 0) */
    int64_t uncertainty_ns;    /* bound on offset_ns's error: half the best round trip */
    int64_t origin_ns;         /* time zero of every file of the job, on rank 0's clock */
} pp_trace_clock;

/* pp_trace_write_chrome with times on the job's clock (clock non-NULL: see
 * the header) or, with clock NULL, exactly as pp_trace_write_chrome. */
pp_status pp_trace_write_chrome_aligned(const char *path, const pp_step_stats *steps,
                                        int n_steps, const pp_trace_clock *clock,
                                        pp_error *err);

#ifdef __cplusplus
}
#endif

#endif
