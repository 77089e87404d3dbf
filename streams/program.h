/*
 * program.h - internal: a schedule lowered to stream work, shared by the
 * executor (which enqueues it) and the simulator (which times it), so both
 * see exactly the same dependencies.
 *
 * Lanes: 0..S-1 are compute streams, one per stage, but a device's stages all
 * compute on the lane of its first (lowest) stage, so that they never run at
 * once; S+b carries the activation copies of boundary b (stage b -> b+1),
 * 2S-1+b its gradient copies (stage b+1 -> b). A copy lane is a stream of
 * the receiver's device, except that a CUDA device does the transfers
 * between it and the host: a copy from a CUDA stage to a CPU stage runs on
 * the sender's (CUDA) device (executor.c, copy_device). A boundary between
 * two stages on one device has no copies:
 * the consumer reads the producer's buffer. Each boundary and direction has
 * `slots` buffers on both sides (on one device, the one); micro-batch i uses
 * slot i % slots, which is reused by i + slots only after the copy reading
 * the sender's slot and the consumer reading the receiver's slot have
 * completed (those are the dependencies below, or the lane's order).
 *
 * Items are in host issue order: the order in which the device lists run with
 * blocking receives and blocking sends (a send blocks until its slots are
 * free), which is a topological order of the dependencies. Hence every
 * event is recorded before any wait for it is enqueued. A schedule without
 * communication actions is lowered as pp_schedule_add_comms would complete
 * it; a stage without STEP gets one at the end of its device's list (not in
 * a forward-only schedule). UNSHARD and RESHARD lower to nothing; the halves
 * of an OVERLAP_F_B composite are two items, one after the other.
 */
#ifndef PP_PROGRAM_H
#define PP_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/core/status.h"
#include "streams/schedule.h"

typedef enum pp_prog_kind {
    PP_PROG_F = 0,
    PP_PROG_B,
    PP_PROG_I,         /* backward for the input */
    PP_PROG_W,         /* backward for the weights */
    PP_PROG_COPY_ACT,  /* stage = boundary b: b -> b+1 */
    PP_PROG_COPY_GRAD, /* stage = boundary b: b+1 -> b */
    PP_PROG_STEP,
} pp_prog_kind;

#define PP_PROG_MAX_DEPS 3

typedef struct pp_prog_item {
    pp_prog_kind kind;
    int stage;                    /* stage (F, B, I, W, STEP) or boundary (copies) */
    int mb;                       /* micro-batch; -1 for STEP */
    int lane;
    int ndeps;
    int deps[PP_PROG_MAX_DEPS];   /* earlier items on other lanes this one waits for */
    bool waited;                  /* a later item on another lane waits for this one */
} pp_prog_item;

typedef struct pp_program {
    int stages, micro_batches, devices;
    int slots;                    /* buffers per boundary, direction and side */
    int n_lanes;                  /* 3S - 2 */
    int *stage_lane;              /* (S) the compute lane of each stage */
    bool *cross;                  /* (S-1) boundary b joins two devices (it has copies) */
    int n_items;
    pp_prog_item *items;          /* (n_items) in host issue order */
} pp_program;

/* Validates s, then lowers it with the smallest slot count >= min_slots (at
 * least 1) under which the lists issue without blocking forever and which,
 * on unit costs (F = I = W = 1, B = 2, copies free), takes no longer than a
 * slot per micro-batch would: slots are reused only where waiting for them
 * costs nothing (Looped BFS, say, keeps about m activations in flight per
 * boundary). */
pp_status pp_program_build(const pp_schedule *s, int min_slots, pp_program *p, pp_error *err);

/* List-schedules p's items: each lane runs its items in order, an item
 * starts when its lane is free and the items it waits for have ended, and
 * lasts cost(item, arg). Fills end (n_items entries); returns the last end. */
double pp_program_time(const pp_program *p, double (*cost)(const pp_prog_item *it, void *arg),
                       void *arg, double *end);
void pp_program_free(pp_program *p);

/* The item's name in traces: "F3 stage1", "B3 stage1", "I3 stage1",
 * "W3 stage1", "STEP stage0", "copy act 3 s0->s1", "copy grad 3 s1->s0".
 * Returns buf. */
const char *pp_prog_item_label(const pp_prog_item *it, char *buf, size_t n);

/* The stage of a compute item's label ("F3 stage12" -> 12), -1 for others. */
int pp_prog_label_stage(const char *label);

#endif
