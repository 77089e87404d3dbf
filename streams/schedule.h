/*
 * schedule.h - pipeline schedules as plain data: per stage an ordered list of
 * actions, generators (GPipe, 1F1B), a validator and a printable form.
 *
 * Action semantics (stage s of S, micro-batch i of m):
 *   F(i)          forward of micro-batch i on stage s
 *   B(i)          backward of micro-batch i (parameter gradients accumulate)
 *   SEND_ACT(i)   s -> s+1: hand the output of F(i) to the next stage
 *   RECV_ACT(i)   s-1 -> s: blocks until stage s-1 has sent act i
 *   SEND_GRAD(i)  s -> s-1: hand the input gradient of B(i) to the previous stage
 *   RECV_GRAD(i)  s+1 -> s: blocks until stage s+1 has sent grad i
 *   STEP          optimizer step; last action of every stage
 * Sends never block; receives block. A valid schedule (pp_schedule_validate)
 * has, on every stage: F(i) and B(i) exactly once for each i, F(i) before
 * B(i), B in order 0..m-1 (gradients accumulate in micro-batch order, so the
 * result does not depend on the schedule); RECV_ACT(i) before F(i) and
 * SEND_ACT(i) after it, RECV_GRAD(i) before B(i) and SEND_GRAD(i) after it,
 * exactly once each where a neighbour exists and never where none does; STEP
 * once, last; and the lists run to completion with blocking receives (no
 * deadlock across stages). A forward-only schedule (forward_only, built with
 * PP_SCHEDULE_FORWARD) has instead F(i) exactly once for each i with its
 * RECV_ACT and SEND_ACT, and no B, gradient action or STEP: an evaluation or
 * inference pass through the same stages.
 *
 * Ownership: a pp_schedule is caller-owned; the generators and
 * pp_schedule_init fill it, pp_schedule_free releases its arrays.
 */
#ifndef PP_SCHEDULE_H
#define PP_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pp_action_kind {
    PP_ACT_F = 0,
    PP_ACT_B,
    PP_ACT_SEND_ACT,
    PP_ACT_RECV_ACT,
    PP_ACT_SEND_GRAD,
    PP_ACT_RECV_GRAD,
    PP_ACT_STEP,
} pp_action_kind;

typedef struct pp_action {
    pp_action_kind kind;
    int mb;               /* micro-batch index; -1 for STEP */
} pp_action;

typedef enum pp_schedule_kind {
    PP_SCHEDULE_GPIPE = 0, /* all forwards, then all backwards (fill-drain) */
    PP_SCHEDULE_1F1B,      /* warm-up forwards, one-forward-one-backward, cool-down */
    PP_SCHEDULE_FORWARD,   /* forwards only, pipelined (evaluation, inference) */
} pp_schedule_kind;

typedef struct pp_schedule {
    char name[16];        /* "gpipe", "1f1b", "forward" or what pp_schedule_init was given */
    bool forward_only;    /* a forward-only schedule: F, RECV_ACT and SEND_ACT only */
    int stages;           /* S >= 1 */
    int micro_batches;    /* m >= 1 */
    int *mb_sizes;        /* (m) samples in each micro-batch */
    int *n_actions;       /* (S) length of each list */
    int *cap_actions;     /* (S) allocated length of each list */
    pp_action **actions;  /* (S) per stage, n_actions[s] actions in order */
} pp_schedule;

/* Name <-> kind: "gpipe", "1f1b", "forward". Parse fails with PP_ERR_INPUT. */
const char *pp_schedule_kind_name(pp_schedule_kind k);
pp_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *out, pp_error *err);

/* Micro-batch sizes for a batch cut into pieces of split_size, the last one
 * smaller when it does not divide (8 by 3 -> 3, 3, 2). Writes up to cap sizes
 * and the count to *m; PP_ERR_INPUT if a size is not positive, PP_ERR_INVALID
 * if cap is too small. */
pp_status pp_microbatch_sizes(int batch, int split_size, int *sizes, int cap, int *m,
                              pp_error *err);

/* An empty schedule (no actions) for S stages and m micro-batches, to be
 * filled with pp_schedule_push. mb_sizes (m entries) may be NULL: all 1. */
pp_status pp_schedule_init(pp_schedule *s, const char *name, int stages, int micro_batches,
                           const int *mb_sizes, pp_error *err);
/* Appends an action to stage's list. */
pp_status pp_schedule_push(pp_schedule *s, int stage, pp_action_kind kind, int mb,
                           pp_error *err);
/* Builds the GPipe or 1F1B schedule (with sends, receives and STEP). */
pp_status pp_schedule_build(pp_schedule *s, pp_schedule_kind kind, int stages,
                            int micro_batches, const int *mb_sizes, pp_error *err);
/* Releases the arrays and zeroes *s. Safe on a zeroed schedule. */
void pp_schedule_free(pp_schedule *s);

/* Checks every rule above; PP_ERR_INVALID with the first violation, e.g.
 * "stage 1: B2 at position 4 before F2" or "deadlock: stage 0 blocked at
 * recv_grad0 (position 3), stage 1 blocked at recv_act1 (position 0)". */
pp_status pp_schedule_validate(const pp_schedule *s, pp_error *err);

/* Prints one line per stage into buf (snprintf rules: returns the length the
 * full text needs, writes at most n-1 characters and a NUL). Compact form:
 * "stage 1: F0 F1 B0 F2 B1 ... STEP"; with_comm adds the communication
 * actions ("recv_act0 F0 send_act0 ..."). */
size_t pp_schedule_format(const pp_schedule *s, bool with_comm, char *buf, size_t n);

/* Writes one action as in the printable form ("F3", "send_grad2", "STEP"). */
const char *pp_action_format(pp_action a, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
