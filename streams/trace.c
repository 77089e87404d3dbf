/*
 * trace.c - the Chrome trace-event writer (pp_trace_write_chrome, declared in
 * executor.h with the step statistics it writes).
 *
 * Format (Perfetto, chrome://tracing): {"displayTimeUnit": "ms",
 * "traceEvents": [...]}; one process per device (pid = index of the device's
 * first lane, named by "process_name" metadata), one thread per lane (stream;
 * "thread_name" and "thread_sort_index" metadata), and one complete ("X")
 * event per span with ts and dur in microseconds from steps[0].t0_ns (or
 * from the earliest span, when one began before the first step's run: the
 * first batch's upload, enqueued just before it), cat
 * "compute" or "copy", args {step, bytes}. The file is built with jansson and
 * replaced atomically, so a reader never sees half a trace.
 *
 * pp_trace_write_chrome_aligned (trace.h) writes a process of a job: the
 * same events, times shifted onto rank 0's clock from the job's origin, and
 * an "otherData" object with the clock offset and its uncertainty.
 */
#include <jansson.h>
#include <string.h>

#include "runtime/core/path.h"
#include "streams/executor.h"
#include "streams/trace.h"

/* The pid of lane l: the first lane on the same device. */
static int lane_pid(const pp_step_stats *st, int l)
{
    int pid = 0;
    while (pid < l && strcmp(st->lanes[pid].device, st->lanes[l].device) != 0) pid++;
    return pid;
}

static json_t *metadata(const char *what, int pid, int tid, json_t *args)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:o}", "ph", "M", "name", what, "pid", pid, "tid", tid,
                     "args", args);
}

/* Appends the events of every step to events, times in microseconds from
 * origin (on this process's clock); false when out of memory. */
static bool add_events(json_t *events, const pp_step_stats *steps, int n_steps, int64_t origin)
{
    int rc = 0;
    const pp_step_stats *st0 = &steps[0];
    for (int l = 0; l < st0->n_lanes; l++) {
        int pid = lane_pid(st0, l);
        if (pid == l)
            rc |= json_array_append_new(
                events, metadata("process_name", l, 0,
                                 json_pack("{s:s}", "name", st0->lanes[l].device)));
        rc |= json_array_append_new(
            events,
            metadata("thread_name", pid, l, json_pack("{s:s}", "name", st0->lanes[l].name)));
        rc |= json_array_append_new(
            events, metadata("thread_sort_index", pid, l, json_pack("{s:i}", "sort_index", l)));
    }
    static const char *const how[] = {"eager", "captured", "replayed"};
    for (int k = 0; k < n_steps; k++) {
        const pp_step_stats *st = &steps[k];
        const char *graph = (unsigned)st->graph < 3 ? how[st->graph] : "eager";
        for (int j = 0; j < st->n_spans; j++) {
            const pp_trace_span *sp = &st->spans[j];
            int l = sp->lane;
            json_t *ev = json_pack(
                "{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:{s:i, s:I, s:s}}", "ph", "X", "name",
                sp->name,
                "cat", st->lanes[l].kind == PP_STREAM_COPY ? "copy" : "compute", "pid",
                lane_pid(st, l), "tid", l, "ts", (double)(sp->start_ns - origin) / 1e3, "dur",
                (double)(sp->end_ns - sp->start_ns) / 1e3, "args", "step", k, "bytes",
                (json_int_t)sp->bytes, "graph", graph);
            rc |= json_array_append_new(events, ev);
        }
    }
    return rc == 0;
}

/* The otherData object of a job's file (see trace.h). */
static json_t *clock_data(const pp_trace_clock *c)
{
    return json_pack("{s:i, s:i, s:f, s:f, s:s}", "rank", c->rank, "clock_reference_rank", 0,
                     "clock_offset_us", (double)c->offset_ns / 1e3, "clock_uncertainty_us",
                     (double)c->uncertainty_ns / 1e3, "time_origin",
                     "rank 0's clock when the job synchronised its clocks (pipeline start)");
}

pp_status pp_trace_write_chrome(const char *path, const pp_step_stats *steps, int n_steps,
                                pp_error *err)
{
    return pp_trace_write_chrome_aligned(path, steps, n_steps, NULL, err);
}

pp_status pp_trace_write_chrome_aligned(const char *path, const pp_step_stats *steps,
                                        int n_steps, const pp_trace_clock *clock,
                                        pp_error *err)
{
    if (!path) return pp_error_set(err, PP_ERR_INVALID, "trace: no path given");
    if (n_steps < 0)
        return pp_error_set(err, PP_ERR_INVALID, "%s: negative step count (%d)", path, n_steps);
    if (n_steps > 0 && !steps)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %d steps asked for, none given", path,
                            n_steps);
    json_t *events = json_array();
    json_t *root = json_pack("{s:s, s:o}", "displayTimeUnit", "ms", "traceEvents", events);
    /* this process's clock reads origin_ns - offset_ns at the job's origin */
    int64_t origin = clock ? clock->origin_ns - clock->offset_ns : n_steps > 0 ? steps[0].t0_ns : 0;
    for (int k = 0; !clock && k < n_steps; k++)
        for (int j = 0; j < steps[k].n_spans; j++)
            if (steps[k].spans[j].start_ns < origin) origin = steps[k].spans[j].start_ns;
    if (root && clock && json_object_set_new(root, "otherData", clock_data(clock)) != 0) {
        json_decref(root);
        root = NULL;
    }
    if (!root || (n_steps > 0 && !add_events(events, steps, n_steps, origin))) {
        json_decref(root);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory building the trace", path);
    }
    pp_atomic_file af;
    pp_status s = pp_atomic_open(&af, path, err);
    if (s == PP_OK && json_dumpf(root, af.f, JSON_PRESERVE_ORDER | JSON_INDENT(0)) != 0)
        s = pp_error_set(err, PP_ERR_IO, "%s: write failed", pp_atomic_name(&af));
    if (s == PP_OK) s = pp_atomic_commit(&af, err);
    pp_atomic_abort(&af);
    json_decref(root);
    return s;
}
