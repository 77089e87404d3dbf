/*
 * ranges.h - named ranges for profilers (NVTX): what Nsight Systems draws
 * on its timeline and Nsight Compute names kernels by (internal: not part of
 * the public API).
 *
 * The runtime opens a range around each training step ("step N"), each task
 * a stream runs ("F3 stage1", "copy act 3 s1->s2", the schedule's labels),
 * each unit's forward and backward ("h.3 forward", "lm_head backward input"),
 * the loss and the optimizer's update, and an evaluation ("evaluate") or a
 * generation ("generate") as a whole. Ranges nest per host thread: a
 * CPU stream's tasks run on its own thread, so their ranges sit on that
 * thread's timeline for the time they run; a CUDA stream's task runs on the
 * thread that enqueues it, so its range spans the enqueueing, and a profiler
 * projects it onto the GPU over the kernels launched inside it. A replayed
 * CUDA graph's kernels are launched by the graph, inside the step's range
 * only: for ranges per unit, profile with graphs off (PP_CUDA_GRAPHS=off).
 *
 * PP_NVTX chooses: auto (unset; the default) opens ranges when a profiler
 * is attached (it sets NVTX_INJECTION64_PATH, where the NVTX library finds
 * its collector), on (or 1) always, off (or 0) never. Off, and with no
 * profiler attached, a range costs one test of a cached flag: no
 * formatting, no call. Built without the NVTX headers (the CUDA toolkit's
 * nvtx3/, header-only), ranges are never open (meson's summary says so).
 *
 * Thread safety: any thread may push and pop; each thread's ranges nest on
 * their own. The decision is made once per process, at the first call.
 */
#ifndef PP_RANGES_H
#define PP_RANGES_H

#include <stdbool.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether ranges are open in this process (PP_NVTX, see above). */
bool pp_ranges_on(void);

/* PP_INPUT naming PP_NVTX when its value is none of auto, on, off, 1, 0
 * (empty: auto); PP_OK otherwise. pp_ranges_on takes such a value as off. */
pp_status pp_ranges_check_env(pp_error *err);

/* Opens a range named name (pushf: formatted, at most 127 characters) on
 * this thread; pp_range_pop closes the innermost one. Both do nothing when
 * ranges are off, so a push and its pop always match. */
void pp_range_push(const char *name);
void pp_range_pushf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pp_range_pop(void);

#ifdef __cplusplus
}
#endif

#endif
