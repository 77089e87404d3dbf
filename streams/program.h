/*
 * program.h - internal: a schedule lowered to stream work, shared by the
 * executor (which enqueues it) and the simulator (which times it), so both
 * see exactly the same dependencies.
 *
 * Lanes: 0..S-1 are the compute streams of the stages; S+b carries the
 * activation copies of boundary b (stage b -> b+1, on b+1's device);
 * 2S-1+b the gradient copies of boundary b (stage b+1 -> b, on b's device).
 * Each boundary and direction has `slots` buffers on both sides; micro-batch
 * i uses slot i % slots, which is reused by i + slots only after the copy
 * reading the sender's slot and the consumer reading the receiver's slot
 * have completed (those are the dependencies below).
 *
 * Items are in host issue order: the order in which the lists run with
 * blocking receives and blocking sends (a send blocks until its slots are
 * free), which is a topological order of the dependencies. Hence every
 * event is recorded before any wait for it is enqueued.
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
    PP_PROG_COPY_ACT,  /* stage = boundary b: b -> b+1 */
    PP_PROG_COPY_GRAD, /* stage = boundary b: b+1 -> b */
    PP_PROG_STEP,
} pp_prog_kind;

#define PP_PROG_MAX_DEPS 3

typedef struct pp_prog_item {
    pp_prog_kind kind;
    int stage;                    /* stage (F, B, STEP) or boundary (copies) */
    int mb;                       /* micro-batch; -1 for STEP */
    int lane;
    int ndeps;
    int deps[PP_PROG_MAX_DEPS];   /* earlier items on other lanes this one waits for */
    bool waited;                  /* a later item on another lane waits for this one */
} pp_prog_item;

typedef struct pp_program {
    int stages, micro_batches;
    int slots;                    /* buffers per boundary, direction and side */
    int n_lanes;                  /* 3S - 2 */
    int n_items;
    pp_prog_item *items;          /* (n_items) in host issue order */
} pp_program;

/* Validates s, then lowers it with the smallest slot count >= min_slots (at
 * least 1) under which the lists issue without blocking forever. */
pp_status pp_program_build(const pp_schedule *s, int min_slots, pp_program *p, pp_error *err);
void pp_program_free(pp_program *p);

/* The item's name in traces: "F3 stage1", "B3 stage1", "STEP stage0",
 * "copy act 3 s0->s1", "copy grad 3 s1->s0". Returns buf. */
const char *pp_prog_item_label(const pp_prog_item *it, char *buf, size_t n);

#endif
