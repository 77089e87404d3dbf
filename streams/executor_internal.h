/*
 * executor_internal.h - the executor's state, shared by executor.c (passes
 * 1 to 3 of a run: shapes, buffers and events; enqueueing; waiting for the
 * lanes; the executor's state, graph slots included, made and freed), below
 * it executor_place.c (the placement check of pass 1) and executor_stats.c
 * (the results of pass 3), and, above it, executor_graphs.c (steps captured
 * into graphs and replayed), which calls the functions below; executor.c
 * calls nothing of executor_graphs.c. Not installed; nothing outside
 * streams/ includes it.
 */
#ifndef PP_EXECUTOR_INTERNAL_H
#define PP_EXECUTOR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "streams/executor.h"
#include "streams/graph.h"
#include "streams/program.h"

#define EXEC_GRAPHS 4 /* keys alive at once: full and partial batch, two input buffer sets each */
#define EXEC_REGROWS 2 /* captures of a key discarded for a grown workspace before a refusal */

typedef struct lane_events {
    pp_event **ev;
    int n, cap;
} lane_events;

typedef struct boundary_buf {
    size_t bytes;              /* capacity of every slot below */
    bool cross;                /* stages b and b+1 on different schedule devices; else only
                                * the send sides exist and the consumer reads them */
    void **act_send;           /* (slots) on stage b's device */
    void **act_recv;           /* (slots) on stage b+1's device (cross only) */
    void **grad_send;          /* (slots) on stage b+1's device */
    void **grad_recv;          /* (slots) on stage b's device (cross only) */
    pp_device_ctx *pin[4];     /* per array above, in that order: the device whose host
                                  memory (pp_device_host_alloc: page-locked on CUDA) holds
                                  a CPU stage's slots that it copies; NULL: the stage
                                  device's own memory (pp_device_alloc) */
} boundary_buf;

typedef struct run_item {
    pp_executor *ex;
    const pp_prog_item *it;
} run_item;

/* A step key of pp_executor_run_replayable and what its graph needs alive:
 * the lowered program and the items its launches point to (a recorded graph
 * calls run_forward etc. with them again at every launch). */
typedef struct exec_graph {
    bool used;
    int tag, m;
    int *sizes;                /* (m) */
    uint64_t last_use;
    unsigned buf_gen;          /* ex->buf_gen when captured */
    unsigned ws_gen;           /* sum of the lanes' exec ws_gen when captured */
    pp_graph *g;               /* NULL: seen once (warm-up), not captured yet */
    int regrown;               /* captures discarded because a workspace grew in them */
    pp_program prog;
    run_item *items;           /* (prog.n_items) */
    pp_event **item_ev;        /* (prog.n_items) */
} exec_graph;

struct pp_executor {
    int S;
    int min_slots;
    pp_stage_desc *stages;     /* (S) */
    int n_lanes;               /* 3S - 2, plus one per stage with grads_ready */
    pp_stream **lanes;         /* (n_lanes) */
    int *grads_lane;           /* (S) the stage's grads_ready lane; -1: none */
    pp_event **grads_ev;       /* (S) after the stage's last backward (stage's device) */
    pp_event **grads_done;     /* (S) after its grads_ready (stage's device) */
    pp_device_ctx **lane_dev;  /* (n_lanes) */
    lane_events *events;       /* (n_lanes) pools, grown on demand */
    int slots;                 /* slots allocated in bufs (0: none yet) */
    boundary_buf *bufs;        /* (S-1) */
    size_t last_bytes;
    void *last_out;            /* last stage's output buffer */
    bool own_output;           /* none: the last stage writes its own (set_own_output) */

    /* stages on several processes (pp_executor_set_ranks); NULL: all local */
    pp_comm *comm;
    int *ranks;                /* (S) */
    pp_nccl **links;           /* (2(S-1)): [b] activations, [S-1+b] gradients of boundary b
                                * between ranks over NCCL; NULL: host messages */

    /* per run */
    const pp_schedule *sched;
    pp_tensor *shapes;         /* (S*m) output shape of stage s for micro-batch i */
    int shapes_cap;

    /* graphs (pp_executor_run_replayable) */
    bool graphs_on;
    unsigned buf_gen;          /* bumped whenever the boundary buffers are reallocated */
    uint64_t uses;
    exec_graph graphs[EXEC_GRAPHS];
    char refusal[256];         /* why a capture was refused ("" if none) */
};

/* ---- executor.c ---------------------------------------------------------- */

/* Pass 1 for a run of s: the program, shapes, buffers and events. On
 * failure p is freed. */
pp_status pp_executor_prepare(pp_executor *ex, const pp_schedule *s, pp_program *p,
                              pp_error *err);

/* Pass 2: enqueues every item of p on the lanes (items and item_ev: p's
 * n_items each, see pp_executor_alloc_items). */
pp_status pp_executor_enqueue_all(pp_executor *ex, const pp_program *p, run_item *items,
                                  pp_event **item_ev, pp_error *err);

/* Waits for every lane; returns the earliest error (the root cause) and
 * resets errors and records so the executor can run again. */
pp_status pp_executor_finish(pp_executor *ex, pp_error *err);

/* Pass 3 (executor_stats.c): the lanes' records between t0 and t1 as *out. */
pp_status pp_executor_collect_stats(pp_executor *ex, int64_t t0, int64_t t1, int slots,
                                    pp_step_stats *out, pp_error *err);

/* The items of p and their events (malloc'ed, the events NULL). */
pp_status pp_executor_alloc_items(const pp_program *p, run_item **items, pp_event ***item_ev,
                                  pp_error *err);

/* Clears every lane's error and records. */
void pp_executor_clear_lanes(pp_executor *ex);

/* Passes 2 and 3 of an eager run of the prepared program p. */
pp_status pp_executor_run_eager(pp_executor *ex, const pp_program *p, pp_step_stats *stats,
                                pp_error *err);

/* ---- executor_place.c ------------------------------------------------------ */

/* PP_ERR_INVALID when s places stages on one device that are on two device
 * contexts or ranks here; PP_ERR_UNSUPPORTED when s has I or W actions of a
 * stage without backward_input and backward_weight. */
pp_status pp_executor_check_placement(const pp_executor *ex, const pp_schedule *s,
                                      pp_error *err);

/* Frees eg's graph, program and items and clears the slot. */
void pp_executor_graph_drop(exec_graph *eg);

#endif
