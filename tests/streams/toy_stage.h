/*
 * toy_stage.h - synthetic stages for the executor's tests (test_executor.c,
 * test_executor_trace.c).
 *
 * A toy stage s multiplies its input elementwise by a weight w_s; backward
 * multiplies the gradient by w_s and accumulates dw_s += sum(grad_out * in).
 * The last stage's loss is sum(out) / batch. The reference runs the same
 * arithmetic sequentially in micro-batch order, so results match bitwise.
 */
#ifndef PP_TESTS_TOY_STAGE_H
#define PP_TESTS_TOY_STAGE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "streams/executor.h"
#include "streams/schedule.h"

enum { D = 4, MAX_MB = 32, MAX_SIZE = 4 };

typedef struct toy_stage {
    int index, S, batch;
    pp_device_ctx *dev;
    float w, dw;
    float saved[MAX_MB][MAX_SIZE * D]; /* inputs kept for backward */
    int mb_start[MAX_MB];              /* first global sample of each micro-batch */
    float out_sum[MAX_MB];             /* last stage: sum of outputs */
    int b_order[MAX_MB], nb;
    int f_count[MAX_MB];
    int steps;
    int bad_args;
    int fail_mb;                       /* forward fails at this micro-batch; -1: never */
    double fwd_ms, bwd_ms;             /* > 0: sleep in stream order */
    /* grads_ready */
    int hooks;                         /* calls */
    int nb_at_hook;                    /* backwards done when it was last called */
    float dw_at_hook;
    bool fail_hook;
    atomic_int *hook_flag;             /* set when grads_ready starts */
    atomic_int *wait_flag;             /* last backward waits for it (<= 30 s) */
    int saw_flag;                      /* ... and found it set */
    /* the last stage writes its output into own (pp_executor_set_own_output):
     * out must come with its shape and no data */
    bool own_out;
    float own[MAX_SIZE * D];
} toy_stage;

/* cpu:0 .. cpu:3, open between toy_devices_open and toy_devices_close (which
 * checks that every byte was given back). */
extern pp_device_ctx *cpus[4];
bool toy_devices_open(void);
void toy_devices_close(void);

/* forward, backward and step; hook_ops adds grads_ready and the last
 * backward that waits for wait_flag (at most 30 s) */
extern const pp_stage_ops toy_ops, hook_ops;
pp_status toy_out_shape(void *user, int mb_size, pp_tensor *t, pp_error *err);
pp_status toy_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                      pp_tensor *out, pp_error *err);
pp_status toy_backward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *grad_out,
                       pp_tensor *grad_in, pp_error *err);
pp_status toy_step(void *user, pp_exec *ex, pp_error *err);

/* S stages on cpus[dev_of[k]] for schedule s: weights 1 + k / 2, no failure. */
void setup_stages(toy_stage *st, pp_stage_desc *desc, int S, const int *dev_of,
                  const pp_schedule *s);

/* Sequential reference: expected dw per stage and last-stage output sums. */
void reference(const pp_schedule *s, const toy_stage *st, float *dw, float *out_sum);

#endif
