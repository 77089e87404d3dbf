/*
 * gen.h - internal to streams/schedules/: the built-in schedule generators
 * and what they share. catalog.c holds the table of them (pp_schedule_gen_ops)
 * and the public entry points (schedule.h); each other file fills schedules
 * of one family and calls only streams/schedule.h.
 *
 * A generator's fill gets a schedule initialised (pp_schedule_init_shape) for
 * its placement and for the micro-batch count its padded entry chose, and
 * pushes compute actions only. The stages are placed as the kind needs:
 * ONE: stage r on device r; LOOP: stage v*D + r on device r; V: stages r and
 * 2D-1-r on device r.
 */
#ifndef PP_SCHEDULES_GEN_H
#define PP_SCHEDULES_GEN_H

#include "streams/schedule.h"

typedef struct pp_schedule_gen_ops {
    pp_schedule_kind kind;
    const char *name;                  /* as in plans: "zbv" */
    const char *reference;             /* the paper or class it follows */
    pp_schedule_placement placement;
    /* (optional) the micro-batch count the construction runs with for m
     * micro-batches on devices devices and stages stages, >= m (defaults to m) */
    int (*padded)(int devices, int stages, int m);
    /* what the padding is for, in a note ("a multiple of its rounds") */
    const char *pad_reason;
    pp_status (*fill)(pp_schedule *s, pp_error *err);
} pp_schedule_gen_ops;

/* basic.c */
extern const pp_schedule_gen_ops pp_gen_gpipe_ops, pp_gen_1f1b_ops;
/* looped.c */
extern const pp_schedule_gen_ops pp_gen_interleaved_1f1b_ops, pp_gen_looped_bfs_ops,
    pp_gen_interleaved_zb_ops, pp_gen_zbh1_ops;
/* lockstep.c */
extern const pp_schedule_gen_ops pp_gen_zbh2_ops, pp_gen_forward_ops;
/* vshape.c */
extern const pp_schedule_gen_ops pp_gen_zbv_ops, pp_gen_dualpipev_ops;

#endif
