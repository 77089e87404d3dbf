/*
 * schedule.h - pipeline schedules as programs: per device an ordered list of
 * actions over stages and micro-batches, in the grammar of
 * torch.distributed.pipelining's schedule CSV; built-in generators, a
 * validator, a lowering pass that adds the communication, and printable forms.
 * docs/SCHEDULES.md describes every built-in, its reference and closed form.
 *
 * Devices and stages. A schedule runs S stages on D devices (torch's pipeline
 * "ranks"), 1 <= D <= S; stage s is placed on device stage_device[s] and
 * every action of stage s is in that device's list. A device runs its list in
 * order on one compute stream, so stages placed on one device (virtual
 * stages: looped 0,1,2,3,0,1,2,3 or V-shaped 0,1,2,3,3,2,1,0) never compute
 * at once, and a hand-off between consecutive stages on one device is no
 * copy. With D = S and stage s on device s the lists are the per-stage lists
 * of the classic schedules.
 *
 * Actions (stage s of S, micro-batch i of m; torch's names in brackets):
 *   F(s,i)          forward of micro-batch i on stage s
 *   B(s,i)          whole backward: input gradient and weight gradients
 *   I(s,i)          backward for the input gradient only; keeps what W needs
 *   W(s,i)          backward for the weight gradients, after its I
 *   SEND_ACT(s,i)   [SEND_F] s -> s+1: hand the output of F(s,i) to the next stage
 *   RECV_ACT(s,i)   [RECV_F] s-1 -> s: blocks until stage s-1 has sent it
 *   SEND_GRAD(s,i)  [SEND_B] s -> s-1: hand the input gradient of B/I(s,i) back
 *   RECV_GRAD(s,i)  [RECV_B] s+1 -> s: blocks until stage s+1 has sent it
 *   STEP(s)         optimizer step of stage s (optional; the executor adds a
 *                   missing one at the end of the stage's device list)
 *   UNSHARD(s), RESHARD(s)   accepted and ignored (FSDP; nothing is sharded)
 * Two compute actions may form one OVERLAP_F_B composite (DualPipeV): they
 * run back to back as one step of the device, first then second.
 *
 * Communication actions are optional: a schedule either has none (torch's
 * "compute only" form; pp_schedule_add_comms then adds them: a receive right
 * before the action that needs it, a send right after the one that produces
 * it) or all of them, and only between stages on different devices. Sends
 * never block; receives block.
 *
 * A valid schedule (pp_schedule_validate) has, for every stage and
 * micro-batch: F once, and either B once or I and W once each; B or I after
 * its F, W after its I; every action on its stage's device; with
 * communication, each receive before the action that needs it and each send
 * after the action that produces it, exactly once where the two stages are on
 * different devices and never otherwise; STEP at most once per stage, after
 * its last backward; and the lists run to the end with blocking receives (no
 * cycle through one device's order, no deadlock across devices). The order
 * in which a stage's weight gradients are computed is free: stages keep
 * partial gradients apart and add them in micro-batch order (models/stage.h),
 * so results never depend on the schedule. A forward-only schedule
 * (forward_only) has F once per stage and micro-batch, their sends and
 * receives, and no backward, W or STEP: an evaluation pass.
 *
 * Errors: a schedule read from a file (source set) reports its problems as
 * PP_ERR_INPUT "FILE:ROW:COL: message", ROW being the device's row (1-based)
 * and COL the 1-based cell; a built one as PP_ERR_INVALID "device D, action
 * K: message" (K 0-based).
 *
 * Ownership: a pp_schedule is caller-owned; pp_schedule_init and the
 * functions that fill one allocate its arrays, pp_schedule_free releases
 * them. Functions here are reentrant and keep no global state.
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
    PP_ACT_SEND_ACT,  /* torch SEND_F */
    PP_ACT_RECV_ACT,  /* torch RECV_F */
    PP_ACT_SEND_GRAD, /* torch SEND_B */
    PP_ACT_RECV_GRAD, /* torch RECV_B */
    PP_ACT_STEP,
    PP_ACT_I,
    PP_ACT_W,
    PP_ACT_UNSHARD,
    PP_ACT_RESHARD,
    PP_ACT_KINDS,     /* number of kinds (not an action) */
} pp_action_kind;

/* pp_action.overlap: the two halves of one OVERLAP_F_B composite. */
#define PP_OVERLAP_FIRST 1
#define PP_OVERLAP_SECOND 2

typedef struct pp_action {
    pp_action_kind kind;
    int mb;               /* micro-batch; -1 for STEP, UNSHARD and RESHARD */
    int stage;            /* the stage acted on (sends and receives: the sender resp. the
                           * receiver, as in torch: 2SEND_F0 goes 2 -> 3, 3RECV_F0 is its
                           * receive) */
    int overlap;          /* 0, or PP_OVERLAP_FIRST / _SECOND: a composite's halves, adjacent */
    int cell;             /* 1-based CSV cell it was read from; 0 when built */
} pp_action;

typedef enum pp_schedule_kind {
    PP_SCHEDULE_GPIPE = 0,        /* all forwards, then all backwards (fill-drain) */
    PP_SCHEDULE_1F1B,             /* warm-up forwards, one forward one backward, cool-down */
    PP_SCHEDULE_FORWARD,          /* forwards only, pipelined (evaluation, inference) */
    PP_SCHEDULE_INTERLEAVED_1F1B, /* 1F1B over looped virtual stages, depth first */
    PP_SCHEDULE_LOOPED_BFS,       /* looped virtual stages, breadth first */
    PP_SCHEDULE_INTERLEAVED_ZB,   /* interleaved 1F1B with I and W split (torch's ZB1P) */
    PP_SCHEDULE_ZBH1,             /* zero bubble H1: 1F1B memory, W passes fill bubbles */
    PP_SCHEDULE_ZBH2,             /* zero bubble H2: 2p-1 in flight, parallelogram */
    PP_SCHEDULE_ZBV,              /* zero bubble V: two stages per device in a V */
    PP_SCHEDULE_DUALPIPEV,        /* DeepSeek's DualPipe on a V, F and B overlapped */
    PP_SCHEDULE_KINDS,            /* number of kinds (not a schedule) */
} pp_schedule_kind;

/* Where a kind wants its stages: one per device, looped (stage s on device
 * s mod D, S a multiple of D), or V-shaped (S = 2D, stage s on device s for
 * s < D and 2D-1-s after). PP_SCHEDULE_FORWARD takes any placement. */
typedef enum pp_schedule_placement {
    PP_PLACEMENT_ANY = 0,
    PP_PLACEMENT_ONE,
    PP_PLACEMENT_LOOP,
    PP_PLACEMENT_V,
} pp_schedule_placement;

typedef struct pp_schedule {
    char name[32];        /* "gpipe", "zbv", ..., or what pp_schedule_init was given */
    bool forward_only;    /* a forward-only schedule: F, RECV_ACT and SEND_ACT only */
    int stages;           /* S >= 1 */
    int devices;          /* D, 1..S: one action list per device */
    int micro_batches;    /* m >= 1 */
    int *mb_sizes;        /* (m) samples in each micro-batch */
    int *stage_device;    /* (S) the device each stage is placed on */
    int *n_actions;       /* (D) length of each list */
    int *cap_actions;     /* (D) allocated length of each list */
    pp_action **actions;  /* (D) per device, n_actions[d] actions in order */
    char *source;         /* the file the schedule was read from (errors name it); NULL */
    char note[192];       /* how a generator fitted the shape it was given (padding to a
                           * count it supports), "" when it did not need to */
} pp_schedule;

/* What a schedule is for: S stages placed on D devices, m micro-batches. */
typedef struct pp_schedule_shape {
    int stages, devices, micro_batches;
    const int *stage_device; /* (stages); NULL: stage s on device s (stages == devices) */
    const int *mb_sizes;     /* (micro_batches); NULL: every micro-batch of size 1 */
} pp_schedule_shape;

/* Name <-> kind: "gpipe", "1f1b", "forward", "interleaved1f1b", "loopedbfs",
 * "interleavedzb", "zbh1", "zbh2", "zbv", "dualpipev". Parse fails with
 * PP_ERR_INPUT listing the names. */
const char *pp_schedule_kind_name(pp_schedule_kind k);
pp_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *out, pp_error *err);
/* The paper or class the kind follows (one line), and the placement it needs. */
const char *pp_schedule_kind_reference(pp_schedule_kind k);
pp_schedule_placement pp_schedule_kind_placement(pp_schedule_kind k);

/* Fills stage_device (stages entries) with placement's layout of stages on
 * devices; PP_ERR_INVALID when the counts do not fit it (LOOP: stages a
 * multiple of devices; V: stages = 2 devices; ONE: stages = devices). */
pp_status pp_schedule_place(pp_schedule_placement placement, int stages, int devices,
                            int *stage_device, pp_error *err);

/* Micro-batch sizes for a batch cut into pieces of split_size, the last one
 * smaller when it does not divide (8 by 3 -> 3, 3, 2). Writes up to cap sizes
 * and the count to *m; PP_ERR_INPUT if a size is not positive, PP_ERR_INVALID
 * if cap is too small. */
pp_status pp_microbatch_sizes(int batch, int split_size, int *sizes, int cap, int *m,
                              pp_error *err);

/* An empty schedule (no actions) of shape, to be filled with the push
 * functions. PP_ERR_INVALID for a bad shape (a device without a stage, a
 * stage off the devices, sizes < 1). */
pp_status pp_schedule_init_shape(pp_schedule *s, const char *name, const pp_schedule_shape *shape,
                                 pp_error *err);
/* The same for S stages on S devices (stage s on device s). mb_sizes (m
 * entries) may be NULL: all 1. */
pp_status pp_schedule_init(pp_schedule *s, const char *name, int stages, int micro_batches,
                           const int *mb_sizes, pp_error *err);
/* Appends an action of stage to the list of the stage's device (mb is
 * ignored for STEP, UNSHARD and RESHARD). */
pp_status pp_schedule_push(pp_schedule *s, int stage, pp_action_kind kind, int mb,
                           pp_error *err);
/* Appends *a as it is to device's list (the loaders' form: the validator
 * checks that it belongs there). */
pp_status pp_schedule_push_action(pp_schedule *s, int device, const pp_action *a, pp_error *err);
/* Appends an OVERLAP_F_B composite of two compute actions of stages on one
 * device: first runs, then second. */
pp_status pp_schedule_push_overlap(pp_schedule *s, int stage1, pp_action_kind kind1, int mb1,
                                   int stage2, pp_action_kind kind2, int mb2, pp_error *err);
/* Releases the arrays and zeroes *s. Safe on a zeroed schedule. */
void pp_schedule_free(pp_schedule *s);
/* A deep copy of src into *dst (dst is overwritten, not freed first). */
pp_status pp_schedule_copy(pp_schedule *dst, const pp_schedule *src, pp_error *err);
/* src without its micro-batches m and above (m <= src's count), sizes (m
 * entries, NULL: all 1) for the rest: a composite with one of them becomes a
 * plain action. A valid schedule stays valid: every action waits only for
 * actions of its own micro-batch, and each device keeps its order. */
pp_status pp_schedule_truncate(const pp_schedule *src, int m, const int *mb_sizes,
                               pp_schedule *dst, pp_error *err);

/* The built-in kind for shape, compute actions only (torch's compute-only
 * form, without its idle cells). The stages must be placed as the kind needs
 * (pp_schedule_kind_placement; PP_ERR_INPUT naming the placement otherwise).
 * Every kind takes any m >= 1: where its construction needs more micro-batches
 * or a multiple of some count, the schedule is built for the next count that
 * works and the extra micro-batches' actions are left out (a composite with
 * one of them becomes a plain action); s->note then says so. */
pp_status pp_schedule_generate(pp_schedule *s, pp_schedule_kind kind,
                               const pp_schedule_shape *shape, pp_error *err);
/* GPipe, 1F1B or forward-only over S stages on S devices, with sends,
 * receives and (not forward-only) a STEP per stage at the end. */
pp_status pp_schedule_build(pp_schedule *s, pp_schedule_kind kind, int stages,
                            int micro_batches, const int *mb_sizes, pp_error *err);

/* Checks every rule above (see the header for the error forms), e.g.
 * "device 1, action 4: 1B2 before 1F2 (at action 6): the backward needs its
 * forward", "plan.csv:2:7: missing 1W3: ...", "plan.csv:1:2: deadlock with
 * blocking receives: device 0 waits at 0B0 for 1B0 of device 1; device 1
 * waits at 1F1 for 0F1 of device 0". Never hangs. */
pp_status pp_schedule_validate(const pp_schedule *s, pp_error *err);

/* Whether s has communication actions. */
bool pp_schedule_has_comms(const pp_schedule *s);
/* The lowering pass: adds the sends and receives of a schedule that has none
 * (a receive right before the action that needs it, a send right after the
 * action that produces it, only between stages on different devices). No-op
 * when s has them. s should be valid. */
pp_status pp_schedule_add_comms(pp_schedule *s, pp_error *err);

/* Per stage, the peak number of micro-batches in flight: whose F has run on
 * the stage's device and whose B (or W) has not yet, in the device's order.
 * peak has S entries. The memory a stage holds for backward scales with it. */
void pp_schedule_in_flight(const pp_schedule *s, int *peak);

/* Writes s in torch's CSV grammar: one row per device, cells of actions
 * ("0F3", "2I1", "(0F3;3B1)OVERLAP_F_B", "3SEND_F0"), CRLF line ends, no
 * header; compute actions only unless with_comms. STEP is not written (the
 * grammar has none; the executor adds it). snprintf rules: returns the
 * length the whole text needs, writes at most n-1 characters and a NUL. */
size_t pp_schedule_format_csv(const pp_schedule *s, bool with_comms, char *buf, size_t n);

/* Reads a schedule in that grammar from len bytes of text (name in
 * messages): rows are devices, cells actions, empty cells idle; CRLF or LF.
 * With want (may be NULL) the rows must fit its shape: stages placed on its
 * devices, micro-batches below its count (mb_sizes from it); without, the
 * shape is what the text holds (S and m one more than the largest stage and
 * micro-batch, each stage on the row it appears in). The schedule is then
 * validated. Errors are PP_ERR_INPUT "NAME:ROW:COL: message". */
pp_status pp_schedule_parse_csv(const char *name, const char *text, size_t len,
                                const pp_schedule_shape *want, pp_schedule *out, pp_error *err);
/* The same from a file (at most 16 MiB); s->source is the path. */
pp_status pp_schedule_load_csv(const char *path, const pp_schedule_shape *want,
                               pp_schedule *out, pp_error *err);

/* Prints one line per device into buf (snprintf rules): "device 1: 1F0 1F1
 * 1B0 ... 1STEP"; with_comm adds the communication actions ("1RECV_F0 1F0
 * 1SEND_F0 ..."); a composite reads "(0F3;3B1)". */
size_t pp_schedule_format(const pp_schedule *s, bool with_comm, char *buf, size_t n);

/* Writes one action as in the CSV ("3F2", "2SEND_B1", "1UNSHARD", "0STEP").
 * Returns buf. */
const char *pp_action_format(pp_action a, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
