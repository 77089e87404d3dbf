/*
 * executor_graphs.c - pp_executor_run_replayable: steps of an executor
 * captured into graphs and replayed (graph.h), around passes 1 and 3 of
 * executor.c.
 *
 * Graphs (pp_executor_run_replayable): pass 2 of a whole step, over every
 * lane, is captured as one graph (graph.h), not one graph per stage or per
 * action. One graph keeps the schedule's cross-lane dependencies inside it
 * exactly as the events express them eagerly, costs one launch per step, and
 * its memory nodes can reuse activations' memory across stages of one device;
 * per-stage graphs would need a launch and event waits per stage and
 * boundary from the host again, which is the cost graphs remove. A replay
 * then is passes 1 and 3 around one pp_graph_launch. Steps differ only in
 * their data (written by the caller into the buffers the step reads) and
 * their micro-batch sizes: each (tag, sizes) key has its own graph, and the
 * first run of a key is eager so that whatever the callbacks set up on first
 * use (handles, algorithm searches, workspaces) is not captured.
 *
 * Contract: up to EXEC_GRAPHS keys are kept, the least recently used one
 * dropped for a new key; a refused capture or first launch turns graphs off
 * for the executor (pp_executor_graph_refusal says why) and the step runs
 * eagerly. A capture during which a workspace grew is discarded, the step
 * runs eagerly and the key is captured at its next run (up to EXEC_REGROWS
 * times a key, then it counts as refused).
 */
#include "streams/executor.h"
#include "streams/executor_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streams/graph.h"
#include "streams/program.h"

void pp_executor_set_graphs(pp_executor *ex, bool on)
{
    if (ex) ex->graphs_on = on;
}

bool pp_executor_graphs(const pp_executor *ex)
{
    return ex && ex->graphs_on;
}

const char *pp_executor_graph_refusal(const pp_executor *ex)
{
    return ex && ex->refusal[0] ? ex->refusal : NULL;
}

/* The key's slot, or NULL. */
static exec_graph *graph_find(pp_executor *ex, const pp_schedule *s, int tag)
{
    for (int k = 0; k < EXEC_GRAPHS; k++) {
        exec_graph *eg = &ex->graphs[k];
        if (eg->used && eg->tag == tag && eg->m == s->micro_batches &&
            memcmp(eg->sizes, s->mb_sizes, (size_t)s->micro_batches * sizeof *eg->sizes) == 0)
            return eg;
    }
    return NULL;
}

/* A slot for a new key, seen once: a free one or the least recently used. */
static pp_status graph_add(pp_executor *ex, const pp_schedule *s, int tag, pp_error *err)
{
    exec_graph *eg = &ex->graphs[0];
    for (int k = 0; k < EXEC_GRAPHS; k++) {
        exec_graph *c = &ex->graphs[k];
        if (!c->used) {
            eg = c;
            break;
        }
        if (c->last_use < eg->last_use) eg = c;
    }
    pp_executor_graph_drop(eg);
    eg->sizes = malloc((size_t)s->micro_batches * sizeof *eg->sizes);
    if (!eg->sizes) return pp_error_set(err, PP_ERR_OOM, "out of host memory (executor graphs)");
    memcpy(eg->sizes, s->mb_sizes, (size_t)s->micro_batches * sizeof *eg->sizes);
    eg->used = true;
    eg->tag = tag;
    eg->m = s->micro_batches;
    eg->last_use = ++ex->uses;
    return PP_OK;
}

static void stages_notify(pp_executor *ex, int what, const pp_schedule *s)
{
    for (int st = 0; st < ex->S; st++) {
        const pp_stage_ops *o = ex->stages[st].ops;
        void *u = ex->stages[st].user;
        if (what == 0 && o->capture_begin) o->capture_begin(u);
        if (what == 1 && o->capture_abandon) o->capture_abandon(u);
        if (what == 2 && o->replayed) o->replayed(u, s);
    }
}

/* The lanes' workspace generations: a change means a workspace a graph may
 * use was reallocated. */
static unsigned ws_gens(pp_executor *ex)
{
    unsigned g = 0;
    for (int l = 0; l < ex->n_lanes; l++) g += pp_stream_exec(ex->lanes[l])->ws_gen;
    return g;
}

/* Captures the prepared program p into eg (which then owns p and the items)
 * and returns PP_OK, or, when the capture is refused, returns its status with
 * the message in err and leaves the lanes idle and clean, p still the
 * caller's. A native capture during which a lane's workspace grew is
 * discarded even when it succeeded (its kernels would keep the grown
 * workspace, an allocation of the graph itself, and earlier ones the old
 * one): *grew is set and the caller captures again once an eager run has
 * grown the workspace for real. Either way the workspaces are as before the
 * capture (pp_exec_workspace_restore). */
static pp_status capture(pp_executor *ex, exec_graph *eg, pp_program *p, bool *grew,
                         pp_error *err)
{
    run_item *items;
    pp_event **item_ev;
    *grew = false;
    PP_TRY(pp_executor_alloc_items(p, &items, &item_ev, err));
    for (int l = 0; l < ex->n_lanes; l++) pp_stream_records_clear(ex->lanes[l]);
    stages_notify(ex, 0, NULL);
    pp_exec_ws_mark *mark = malloc((size_t)ex->n_lanes * sizeof *mark);
    if (!mark) {
        free(items);
        free(item_ev);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (executor)");
    }
    for (int l = 0; l < ex->n_lanes; l++)
        mark[l] = pp_exec_workspace_mark(pp_stream_exec(ex->lanes[l]));
    pp_status rc = pp_graph_capture_begin(ex->lanes, ex->n_lanes, err);
    pp_graph *g = NULL;
    if (rc != PP_OK) pp_error_prefix(err, "graph capture refused, running eagerly");
    if (rc == PP_OK) {
        pp_error enq_err;
        pp_error_clear(&enq_err);
        pp_status enq = pp_executor_enqueue_all(ex, p, items, item_ev, &enq_err);
        rc = pp_graph_capture_end(ex->lanes, ex->n_lanes, &g, err);
        /* a callback that failed while captured (CUDA: its error is sticky on
         * its lane) refuses the capture too: the eager run reports it for real */
        for (int l = 0; l < ex->n_lanes && rc == PP_OK && enq == PP_OK; l++)
            if (pp_stream_error(ex->lanes[l], &enq_err, NULL) != PP_OK) enq = enq_err.code;
        if (rc == PP_OK && enq != PP_OK) {
            if (err) *err = enq_err;
            pp_error_prefix(err, "graph capture refused, running eagerly");
            rc = PP_ERR_UNSUPPORTED;
        }
    }
    for (int l = 0; l < ex->n_lanes; l++)
        if (pp_stream_exec(ex->lanes[l])->ws_gen != mark[l].gen) *grew = true;
    if (*grew && rc == PP_OK) {
        rc = pp_error_set(err, PP_ERR_UNSUPPORTED, "graph capture discarded: a workspace grew "
                          "during it (captured again after an eager run)");
    }
    if (rc != PP_OK) {
        pp_graph_free(g);
        pp_executor_clear_lanes(ex);
        /* what a refused or discarded native capture allocated never existed, and
         * what it freed was not freed: the workspaces are those of before */
        for (int l = 0; l < ex->n_lanes; l++)
            pp_exec_workspace_restore(pp_stream_exec(ex->lanes[l]), &mark[l]);
        stages_notify(ex, 1, NULL);
        free(mark);
        free(items);
        free(item_ev);
        return rc;
    }
    free(mark);
    eg->g = g;
    eg->prog = *p;
    memset(p, 0, sizeof *p);
    eg->items = items;
    eg->item_ev = item_ev;
    eg->buf_gen = ex->buf_gen;
    eg->ws_gen = ws_gens(ex);
    return PP_OK;
}

/* Launches eg's graph and waits for it (passes 2 and 3 of a replay).
 * *refused is set when the launch itself was refused before any of its work
 * was enqueued (the lanes are then clean and the step can run eagerly). */
static pp_status launch(pp_executor *ex, exec_graph *eg, pp_step_graph how, pp_step_stats *stats,
                        bool *refused, pp_error *err)
{
    *refused = false;
    if (how == PP_STEP_REPLAYED)
        for (int l = 0; l < ex->n_lanes; l++) pp_stream_records_clear(ex->lanes[l]);
    int64_t t0 = pp_stream_clock_ns();
    pp_error enq_err;
    pp_error_clear(&enq_err);
    pp_status enq = pp_graph_launch(eg->g, &enq_err);
    pp_status run = pp_executor_finish(ex, err);
    int64_t t1 = pp_stream_clock_ns();
    pp_status rc = PP_OK;
    if (enq != PP_OK) {
        pp_executor_clear_lanes(ex);
        if (err) *err = enq_err;
        rc = enq;
        *refused = run == PP_OK && !pp_graph_replays_host(eg->g); /* nothing ran */
    } else if (run != PP_OK) {
        rc = run;
    } else {
        if (!pp_graph_replays_host(eg->g) && how == PP_STEP_REPLAYED)
            stages_notify(ex, 2, ex->sched);
        if (stats) {
            rc = pp_executor_collect_stats(ex, t0, t1, eg->prog.slots, stats, err);
            stats->graph = how;
            stats->graph_launches = 1;
        }
    }
    return rc;
}

pp_status pp_executor_run_replayable(pp_executor *ex, const pp_schedule *s, int tag,
                                     pp_step_stats *stats, pp_error *err)
{
    pp_error unread; /* where the caller wants no message (NULL): out_shape still gets one */
    if (!err) err = &unread;
    if (!ex) return pp_error_set(err, PP_ERR_INVALID, "pp_executor_run_replayable: no executor "
                                 "(NULL)");
    if (!ex->graphs_on || ex->comm) return pp_executor_run(ex, s, stats, err);
    if (stats) memset(stats, 0, sizeof *stats);
    pp_program p;
    PP_TRY(pp_executor_prepare(ex, s, &p, err));
    /* graphs captured on buffers since reallocated, or (native graphs, whose
     * kernels hold the addresses) on workspaces since reallocated, are seen
     * again: the next run of their key captures anew */
    for (int k = 0; k < EXEC_GRAPHS; k++) {
        exec_graph *c = &ex->graphs[k];
        if (c->g && (c->buf_gen != ex->buf_gen ||
                     (!pp_graph_replays_host(c->g) && c->ws_gen != ws_gens(ex)))) {
            pp_graph_free(c->g);
            c->g = NULL;
            pp_program_free(&c->prog);
            free(c->items);
            free(c->item_ev);
            c->items = NULL;
            c->item_ev = NULL;
        }
    }
    exec_graph *eg = graph_find(ex, s, tag);
    pp_status rc = PP_OK;
    if (!eg) {
        rc = graph_add(ex, s, tag, err);
        if (rc == PP_OK) rc = pp_executor_run_eager(ex, &p, stats, err);
    } else if (eg->g) {
        eg->last_use = ++ex->uses;
        bool refused;
        rc = launch(ex, eg, PP_STEP_REPLAYED, stats, &refused, err);
    } else {
        eg->last_use = ++ex->uses;
        pp_error why;
        pp_error_clear(&why);
        bool refused = true, grew = false;
        if (capture(ex, eg, &p, &grew, &why) == PP_OK) {
            rc = launch(ex, eg, PP_STEP_CAPTURED, stats, &refused, &why);
            /* the first launch refused (e.g. no memory for the graph's
             * allocations): nothing ran, undo the capture's host effects */
            if (refused) {
                pp_error_prefix(&why, "graph launch refused, running eagerly");
                stages_notify(ex, 1, NULL);
            } else if (rc != PP_OK && err) {
                *err = why;
            }
        } else if (grew && eg->regrown < EXEC_REGROWS) {
            /* the eager run grows the workspace; the key's next run captures */
            eg->regrown++;
            refused = false;
            rc = pp_executor_run_eager(ex, &p, stats, err);
        }
        if (refused) {
            snprintf(ex->refusal, sizeof ex->refusal, "%.255s", why.msg);
            ex->graphs_on = false;
            pp_executor_graph_drop(eg);
            rc = pp_executor_run_eager(ex, &p, stats, err);
        }
    }
    pp_program_free(&p);
    ex->sched = NULL;
    return rc;
}
