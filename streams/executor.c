/*
 * executor.c - enqueues a lowered schedule (program.h) on the stage and copy
 * streams with events between them, waits once, and collects the timings.
 *
 * Pass 1 (host, before the clock starts): validate and lower the schedule,
 * ask every stage for its output shapes, size the boundary buffers (a CPU
 * stage's slots that a CUDA device copies are its page-locked host memory)
 * and the per-lane event pools. Pass 2: enqueue every item in issue order: waits for
 * its dependencies on other lanes, the work, and an event record if a later
 * item waits for it (the CPU backend folds such a wait-launch-record triple
 * into one queue item); after a stage's last backward, its grads_ready
 * callback on the stage's own gradient lane, ordered by an event. Pass 3:
 * synchronize every stream, pick the first error, gather records into stats
 * (executor_stats.c). The graphs of pp_executor_run_replayable are in
 * executor_graphs.c.
 */
#include "streams/executor.h"
#include "streams/executor_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streams/graph.h"
#include "streams/program.h"

#define PP_DEFAULT_SLOTS 2

/* Whether stage st runs in this process. */
static bool local(const pp_executor *ex, int st)
{
    return !ex->ranks || ex->ranks[st] == pp_comm_rank(ex->comm);
}

pp_stream *pp_executor_stage_stream(pp_executor *ex, int stage)
{
    return stage >= 0 && stage < ex->S ? ex->lanes[stage] : NULL;
}

/* Slots of dev (counted in its memory); pinned ones are host memory of pin. */
static void free_slots(pp_device_ctx *dev, pp_device_ctx *pin, void **p, int n, size_t bytes)
{
    if (!p) return;
    for (int k = 0; k < n; k++) {
        if (!p[k]) continue;
        if (!pin) {
            pp_device_free(dev, p[k], bytes);
            continue;
        }
        pp_device_host_free(pin, p[k]);
        pp_device_unaccount(dev, bytes);
    }
    free(p);
}

static void free_buffers(pp_executor *ex)
{
    if (ex->bufs) {
        for (int b = 0; b < ex->S - 1; b++) {
            boundary_buf *bb = &ex->bufs[b];
            pp_device_ctx *lo = ex->stages[b].dev, *hi = ex->stages[b + 1].dev;
            free_slots(lo, bb->pin[0], bb->act_send, ex->slots, bb->bytes);
            free_slots(hi, bb->pin[1], bb->act_recv, ex->slots, bb->bytes);
            free_slots(hi, bb->pin[2], bb->grad_send, ex->slots, bb->bytes);
            free_slots(lo, bb->pin[3], bb->grad_recv, ex->slots, bb->bytes);
            memset(bb, 0, sizeof *bb);
        }
    }
    if (ex->last_out) pp_device_free(ex->stages[ex->S - 1].dev, ex->last_out, ex->last_bytes);
    ex->last_out = NULL;
    ex->last_bytes = 0;
    ex->slots = 0;
}

void pp_executor_graph_drop(exec_graph *eg)
{
    pp_graph_free(eg->g);
    pp_program_free(&eg->prog);
    free(eg->items);
    free(eg->item_ev);
    free(eg->sizes);
    memset(eg, 0, sizeof *eg);
}

void pp_executor_free(pp_executor *ex)
{
    if (!ex) return;
    for (int k = 0; k < EXEC_GRAPHS; k++) pp_executor_graph_drop(&ex->graphs[k]);
    if (ex->lanes) {
        /* every lane drained before any is freed: a lane's queued work may
         * wait on another lane, whose state must outlive that wait (errors
         * were reported where the work was synchronized, or are moot now) */
        for (int l = 0; l < ex->n_lanes; l++)
            if (ex->lanes[l]) (void)pp_stream_synchronize(ex->lanes[l], NULL);
        for (int l = 0; l < ex->n_lanes; l++) pp_stream_free(ex->lanes[l]);
    }
    if (ex->events)
        for (int l = 0; l < ex->n_lanes; l++) {
            for (int k = 0; k < ex->events[l].n; k++) pp_event_free(ex->events[l].ev[k]);
            free(ex->events[l].ev);
        }
    for (int st = 0; st < ex->S && ex->grads_ev; st++) pp_event_free(ex->grads_ev[st]);
    for (int st = 0; st < ex->S && ex->grads_done; st++) pp_event_free(ex->grads_done[st]);
    if (ex->stages) free_buffers(ex);
    free(ex->grads_lane);
    free(ex->grads_ev);
    free(ex->grads_done);
    free(ex->bufs);
    free(ex->events);
    free(ex->lanes);
    free(ex->lane_dev);
    free(ex->shapes);
    free(ex->ranks);
    free(ex->links);
    free(ex->stages);
    free(ex);
}

/* The device whose copy stream moves data from src to dst: the receiver's,
 * except that a CUDA device does the transfers between it and the host. */
static pp_device_ctx *copy_device(pp_device_ctx *src, pp_device_ctx *dst)
{
    if (dst->id.kind == PP_DEVICE_CPU && src->id.kind == PP_DEVICE_CUDA) return src;
    return dst;
}

/* The lanes after the 3S - 2 of the boundaries: one per stage with a
 * grads_ready callback, on the stage's device, and its two events. */
static pp_status new_grads_lanes(pp_executor *ex, pp_error *err)
{
    int l = 3 * ex->S - 2;
    for (int s = 0; s < ex->S; s++) {
        ex->grads_lane[s] = -1;
        if (!ex->stages[s].ops->grads_ready) continue;
        char name[32];
        snprintf(name, sizeof name, "grads s%d", s);
        ex->lane_dev[l] = ex->stages[s].dev;
        PP_TRY(pp_stream_new(ex->lane_dev[l], PP_STREAM_COPY, name, &ex->lanes[l], err));
        PP_TRY(pp_event_new(ex->stages[s].dev, &ex->grads_ev[s], err));
        PP_TRY(pp_event_new(ex->stages[s].dev, &ex->grads_done[s], err));
        ex->grads_lane[s] = l++;
    }
    return PP_OK;
}

pp_status pp_executor_new(const pp_stage_desc *stages, int n, int slots, pp_executor **out,
                          pp_error *err)
{
    *out = NULL;
    if (n < 1 || !stages)
        return pp_error_set(err, PP_ERR_INVALID, "executor: need at least one stage");
    for (int s = 0; s < n; s++) {
        const pp_stage_ops *o = stages[s].ops;
        if (!stages[s].dev || !o || !o->out_shape || !o->forward || !o->backward)
            return pp_error_set(err, PP_ERR_INVALID,
                                "executor: stage %d lacks a device or a required callback", s);
    }
    pp_executor *ex = calloc(1, sizeof *ex);
    if (!ex) return pp_error_set(err, PP_ERR_OOM, "out of host memory (executor)");
    ex->S = n;
    ex->min_slots = slots > 0 ? slots : PP_DEFAULT_SLOTS;
    ex->n_lanes = 3 * n - 2;
    for (int s = 0; s < n; s++) ex->n_lanes += stages[s].ops->grads_ready != NULL;
    ex->stages = malloc((size_t)n * sizeof *ex->stages);
    ex->grads_lane = malloc((size_t)n * sizeof *ex->grads_lane);
    ex->grads_ev = calloc((size_t)n, sizeof *ex->grads_ev);
    ex->grads_done = calloc((size_t)n, sizeof *ex->grads_done);
    ex->lanes = calloc((size_t)ex->n_lanes, sizeof *ex->lanes);
    ex->lane_dev = calloc((size_t)ex->n_lanes, sizeof *ex->lane_dev);
    ex->events = calloc((size_t)ex->n_lanes, sizeof *ex->events);
    ex->bufs = n > 1 ? calloc((size_t)(n - 1), sizeof *ex->bufs) : NULL;
    if (!ex->stages || !ex->lanes || !ex->lane_dev || !ex->events || (n > 1 && !ex->bufs) ||
        !ex->grads_lane || !ex->grads_ev || !ex->grads_done) {
        pp_executor_free(ex);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (executor)");
    }
    memcpy(ex->stages, stages, (size_t)n * sizeof *stages);
    for (int l = 0; l < 3 * n - 2; l++) {
        char name[32];
        pp_stream_kind kind = PP_STREAM_COPY;
        if (l < n) {
            snprintf(name, sizeof name, "stage%d", l);
            kind = PP_STREAM_COMPUTE;
            ex->lane_dev[l] = stages[l].dev;
        } else if (l < 2 * n - 1) {
            int b = l - n;
            snprintf(name, sizeof name, "act s%d->s%d", b, b + 1);
            ex->lane_dev[l] = copy_device(stages[b].dev, stages[b + 1].dev);
        } else {
            int b = l - (2 * n - 1);
            snprintf(name, sizeof name, "grad s%d->s%d", b + 1, b);
            ex->lane_dev[l] = copy_device(stages[b + 1].dev, stages[b].dev);
        }
        pp_status st = pp_stream_new(ex->lane_dev[l], kind, name, &ex->lanes[l], err);
        if (st != PP_OK) {
            pp_executor_free(ex);
            return st;
        }
    }
    pp_status st = new_grads_lanes(ex, err);
    if (st != PP_OK) {
        pp_executor_free(ex);
        return st;
    }
    ex->graphs_on = true;
    for (int l = 0; l < ex->n_lanes; l++)
        if (ex->lane_dev[l]->id.kind != PP_DEVICE_CUDA) ex->graphs_on = false;
    *out = ex;
    return PP_OK;
}

pp_status pp_executor_set_own_output(pp_executor *ex, bool own, pp_error *err)
{
    if (!ex) return pp_error_set(err, PP_ERR_INVALID, "executor: NULL");
    if (ex->slots)
        return pp_error_set(err, PP_ERR_INVALID, "executor: own_output set after the first run");
    ex->own_output = own;
    return PP_OK;
}

pp_status pp_executor_set_ranks(pp_executor *ex, pp_comm *comm, const int *ranks, int n,
                                pp_error *err)
{
    if (!ex || (comm && !ranks) || (comm && n != ex->S))
        return pp_error_set(err, PP_ERR_INVALID, "executor: ranks for %d stages, executor has %d",
                            n, ex ? ex->S : 0);
    if (ex->slots)
        return pp_error_set(err, PP_ERR_INVALID, "executor: ranks set after the first run");
    /* checked and allocated before anything is replaced: a refusal leaves the
     * executor as it was */
    for (int s = 0; comm && s < n; s++)
        if (ranks[s] < 0 || ranks[s] >= pp_comm_size(comm))
            return pp_error_set(err, PP_ERR_INVALID, "executor: stage %d on rank %d, the job has "
                                "%d process%s", s, ranks[s], pp_comm_size(comm),
                                pp_comm_size(comm) == 1 ? "" : "es");
    int *nr = NULL;
    pp_nccl **nl = NULL;
    if (comm) {
        nr = malloc((size_t)n * sizeof *nr);
        nl = n > 1 ? calloc((size_t)(2 * (n - 1)), sizeof *nl) : NULL;
        if (!nr || (n > 1 && !nl)) {
            free(nr);
            free(nl);
            return pp_error_set(err, PP_ERR_OOM, "out of host memory (executor)");
        }
        memcpy(nr, ranks, (size_t)n * sizeof *ranks);
    }
    free(ex->ranks);
    free(ex->links);
    ex->ranks = nr;
    ex->links = nl;
    ex->comm = comm;
    return PP_OK;
}

pp_status pp_executor_set_link(pp_executor *ex, int b, pp_nccl *act, pp_nccl *grad,
                               pp_error *err)
{
    if (!ex || !ex->ranks || b < 0 || b >= ex->S - 1 || !act || !grad)
        return pp_error_set(err, PP_ERR_INVALID, "executor: link for boundary %d needs ranks set "
                            "first, a boundary 0..%d and two communicators", b,
                            ex ? ex->S - 2 : -1);
    if (ex->ranks[b] == ex->ranks[b + 1] || (!local(ex, b) && !local(ex, b + 1)))
        return pp_error_set(err, PP_ERR_INVALID, "executor: boundary %d (ranks %d and %d) is no "
                            "link of this rank", b, ex->ranks[b], ex->ranks[b + 1]);
    if (ex->slots)
        return pp_error_set(err, PP_ERR_INVALID, "executor: link set after the first run");
    ex->links[b] = act;
    ex->links[ex->S - 1 + b] = grad;
    return PP_OK;
}

/* Every boundary between two ranks with a non-CPU side here has a link. */
static pp_status check_links(const pp_executor *ex, pp_error *err)
{
    for (int b = 0; ex->ranks && b + 1 < ex->S; b++) {
        if (ex->ranks[b] == ex->ranks[b + 1] || ex->links[b]) continue;
        int mine = local(ex, b) ? b : b + 1;
        if (!local(ex, mine) || ex->stages[mine].dev->id.kind == PP_DEVICE_CPU) continue;
        return pp_error_set(err, PP_ERR_INVALID, "executor: stages %d and %d are on ranks %d and "
                            "%d: stages on different processes exchange through host memory, so "
                            "both need CPU devices (or an NCCL link between CUDA devices)", b,
                            b + 1, ex->ranks[b], ex->ranks[b + 1]);
    }
    return PP_OK;
}

/* ---- pass 1: shapes, buffers, events -------------------------------------- */

/* Slots of a side that lives in another process stay NULL. Pinned slots
 * (pin set) are pin's host memory, counted in dev's. */
static pp_status alloc_slots(pp_device_ctx *dev, pp_device_ctx *pin, void ***p, int n,
                             size_t bytes, bool here, pp_error *err)
{
    if (!here) return PP_OK;
    *p = calloc((size_t)n, sizeof **p);
    if (!*p) return pp_error_set(err, PP_ERR_OOM, "out of host memory (executor buffers)");
    for (int k = 0; k < n; k++) {
        if (!pin) {
            PP_TRY(pp_device_alloc(dev, bytes, &(*p)[k], err));
            continue;
        }
        PP_TRY(pp_device_account(dev, bytes, err));
        pp_status st = pp_device_host_alloc(pin, bytes, &(*p)[k], err);
        if (st != PP_OK) {
            pp_device_unaccount(dev, bytes);
            return st;
        }
    }
    return PP_OK;
}

/* The device that pins a slot of dev whose copies copier's copy stream makes:
 * a CPU stage's slot copied by another device with host memory of its own
 * (the CUDA device of a CPU-CUDA boundary: page-locked, so its stream-ordered
 * copies do not make the host wait); NULL for every other slot. */
static pp_device_ctx *pin_for(pp_device_ctx *dev, pp_device_ctx *copier)
{
    return dev->id.kind == PP_DEVICE_CPU && copier != dev && pp_device_host_pinned(copier)
               ? copier
               : NULL;
}

static pp_status query_shapes(pp_executor *ex, const pp_schedule *s, pp_error *err)
{
    int S = ex->S, m = s->micro_batches;
    if (S * m > ex->shapes_cap) {
        pp_tensor *t = realloc(ex->shapes, (size_t)(S * m) * sizeof *t);
        if (!t) return pp_error_set(err, PP_ERR_OOM, "out of host memory (executor shapes)");
        ex->shapes = t;
        ex->shapes_cap = S * m;
    }
    for (int st = 0; st < S; st++) {
        for (int i = 0; i < m; i++) {
            pp_tensor *t = &ex->shapes[st * m + i];
            int j = 0;
            while (j < i && s->mb_sizes[j] != s->mb_sizes[i]) j++;
            if (j < i) {
                *t = ex->shapes[st * m + j];
                continue;
            }
            memset(t, 0, sizeof *t);
            for (int d = 0; d < PP_MAX_DIMS; d++) t->shape[d] = 1;
            pp_status rc = ex->stages[st].ops->out_shape(ex->stages[st].user, s->mb_sizes[i], t,
                                                         err);
            if (rc != PP_OK)
                return pp_error_prefix(err, "stage %d (%s) output shape for %d samples", st,
                                       ex->stages[st].dev->name, s->mb_sizes[i]);
            if (t->ndim < 0 || t->ndim > PP_MAX_DIMS)
                return pp_error_set(err, PP_ERR_INVALID,
                                    "stage %d (%s): output shape with %d dimensions", st,
                                    ex->stages[st].dev->name, t->ndim);
            t->data = NULL;
            t->owns = false;
            t->dev = NULL;
        }
    }
    return PP_OK;
}

static size_t max_bytes(const pp_executor *ex, int st, int m)
{
    size_t mx = 0;
    for (int i = 0; i < m; i++) {
        size_t b = pp_tensor_bytes(&ex->shapes[st * m + i]);
        if (b > mx) mx = b;
    }
    return mx;
}

/* Buffers for p: slots per boundary and direction, of the largest output
 * of m micro-batches, receive sides only where p's boundary crosses devices. */
static pp_status ensure_buffers(pp_executor *ex, const pp_program *p, int m, pp_error *err)
{
    int S = ex->S, slots = p->slots;
    const bool own = ex->own_output; /* no buffer for the last stage's output */
    bool ok = ex->slots >= slots && (own || ex->last_bytes >= max_bytes(ex, S - 1, m));
    for (int b = 0; ok && b < S - 1; b++)
        ok = ex->bufs[b].bytes >= max_bytes(ex, b, m) && ex->bufs[b].cross == p->cross[b];
    if (ok) return PP_OK;
    int n = slots > ex->slots ? slots : ex->slots;
    free_buffers(ex);
    ex->buf_gen++;
    ex->slots = n;
    for (int b = 0; b < S - 1; b++) {
        boundary_buf *bb = &ex->bufs[b];
        bb->bytes = max_bytes(ex, b, m);
        if (bb->bytes == 0) bb->bytes = 1;
        bb->cross = p->cross[b];
        pp_device_ctx *lo = ex->stages[b].dev, *hi = ex->stages[b + 1].dev;
        bool lo_here = local(ex, b), hi_here = local(ex, b + 1);
        if (lo_here && hi_here && bb->cross) { /* copied on a copy lane, not sent between processes */
            pp_device_ctx *act = copy_device(lo, hi), *grad = copy_device(hi, lo);
            bb->pin[0] = pin_for(lo, act);
            bb->pin[1] = pin_for(hi, act);
            bb->pin[2] = pin_for(hi, grad);
            bb->pin[3] = pin_for(lo, grad);
        }
        pp_status st = alloc_slots(lo, bb->pin[0], &bb->act_send, n, bb->bytes, lo_here, err);
        if (st == PP_OK && bb->cross)
            st = alloc_slots(hi, bb->pin[1], &bb->act_recv, n, bb->bytes, hi_here, err);
        if (st == PP_OK)
            st = alloc_slots(hi, bb->pin[2], &bb->grad_send, n, bb->bytes, hi_here, err);
        if (st == PP_OK && bb->cross)
            st = alloc_slots(lo, bb->pin[3], &bb->grad_recv, n, bb->bytes, lo_here, err);
        if (st != PP_OK) {
            free_buffers(ex);
            return st;
        }
    }
    if (own) return PP_OK;
    ex->last_bytes = max_bytes(ex, S - 1, m);
    if (ex->last_bytes == 0) ex->last_bytes = 1;
    if (!local(ex, S - 1)) return PP_OK;
    pp_status st = pp_device_alloc(ex->stages[S - 1].dev, ex->last_bytes, &ex->last_out, err);
    if (st != PP_OK) free_buffers(ex);
    return st;
}

static pp_status ensure_events(pp_executor *ex, const pp_program *p, pp_error *err)
{
    int *need = calloc((size_t)ex->n_lanes, sizeof *need);
    if (!need) return pp_error_set(err, PP_ERR_OOM, "out of host memory (executor events)");
    for (int k = 0; k < p->n_items; k++)
        if (p->items[k].waited) need[p->items[k].lane]++;
    pp_status st = PP_OK;
    for (int l = 0; l < ex->n_lanes && st == PP_OK; l++) {
        lane_events *le = &ex->events[l];
        if (need[l] > le->cap) {
            pp_event **e = realloc(le->ev, (size_t)need[l] * sizeof *e);
            if (!e) {
                st = pp_error_set(err, PP_ERR_OOM, "out of host memory (executor events)");
                break;
            }
            le->ev = e;
            le->cap = need[l];
        }
        while (le->n < need[l] && st == PP_OK) {
            st = pp_event_new(ex->lane_dev[l], &le->ev[le->n], err);
            if (st == PP_OK) le->n++;
        }
    }
    free(need);
    return st;
}

/* ---- pass 2: the work items ------------------------------------------------ */

static pp_tensor view_of(const pp_tensor *shape, void *data, pp_device_ctx *dev)
{
    pp_tensor t = *shape;
    t.data = data;
    t.dev = dev;
    t.owns = false;
    return t;
}

/* A stage callback's failure rc named by its stage (and micro-batch mb, or
 * what when mb < 0); PP_OK passes through. */
static pp_status stage_failed(pp_status rc, const pp_stage_desc *sd, int st, int mb,
                              const char *what, pp_error *err)
{
    if (rc == PP_OK) return rc;
    if (err->code == PP_OK) err->code = rc;
    if (mb >= 0 && what)
        pp_error_prefix(err, "stage %d (%s) micro-batch %d (%s)", st, sd->dev->name, mb, what);
    else if (mb >= 0)
        pp_error_prefix(err, "stage %d (%s) micro-batch %d", st, sd->dev->name, mb);
    else
        pp_error_prefix(err, "stage %d (%s) %s", st, sd->dev->name, what ? what : "");
    return rc;
}

static pp_status run_forward(pp_exec *x, void *arg, pp_error *err)
{
    const run_item *r = arg;
    pp_executor *ex = r->ex;
    int st = r->it->stage, i = r->it->mb, m = ex->sched->micro_batches, k = i % ex->slots;
    const pp_stage_desc *sd = &ex->stages[st];
    pp_tensor in, out;
    if (st > 0) {
        const boundary_buf *bb = &ex->bufs[st - 1];
        in = view_of(&ex->shapes[(st - 1) * m + i], bb->cross ? bb->act_recv[k] : bb->act_send[k],
                     sd->dev);
    }
    out = view_of(&ex->shapes[st * m + i],
                  st < ex->S - 1 ? ex->bufs[st].act_send[k] : ex->last_out, sd->dev);
    pp_status rc = sd->ops->forward(sd->user, x, i, ex->sched->mb_sizes[i], st > 0 ? &in : NULL,
                                    &out, err);
    return stage_failed(rc, sd, st, i, NULL, err);
}

/* B and I: grad_out where the next stage's gradient arrived (or was written,
 * on one device), grad_in into the slot of the boundary before. */
static pp_status run_backward(pp_exec *x, void *arg, pp_error *err)
{
    const run_item *r = arg;
    pp_executor *ex = r->ex;
    int st = r->it->stage, i = r->it->mb, m = ex->sched->micro_batches, k = i % ex->slots;
    const pp_stage_desc *sd = &ex->stages[st];
    pp_tensor gout, gin;
    if (st < ex->S - 1) {
        const boundary_buf *bb = &ex->bufs[st];
        gout = view_of(&ex->shapes[st * m + i], bb->cross ? bb->grad_recv[k] : bb->grad_send[k],
                       sd->dev);
    }
    if (st > 0)
        gin = view_of(&ex->shapes[(st - 1) * m + i], ex->bufs[st - 1].grad_send[k], sd->dev);
    bool input = r->it->kind == PP_PROG_I;
    pp_status rc = (input ? sd->ops->backward_input : sd->ops->backward)(
        sd->user, x, i, ex->sched->mb_sizes[i], st < ex->S - 1 ? &gout : NULL,
        st > 0 ? &gin : NULL, err);
    return stage_failed(rc, sd, st, i, input ? "I" : NULL, err);
}

static pp_status run_weight(pp_exec *x, void *arg, pp_error *err)
{
    const run_item *r = arg;
    pp_executor *ex = r->ex;
    int st = r->it->stage, i = r->it->mb;
    const pp_stage_desc *sd = &ex->stages[st];
    pp_status rc = sd->ops->backward_weight(sd->user, x, i, ex->sched->mb_sizes[i], err);
    return stage_failed(rc, sd, st, i, "W", err);
}

static pp_status run_step(pp_exec *x, void *arg, pp_error *err)
{
    const run_item *r = arg;
    int st = r->it->stage;
    const pp_stage_desc *sd = &r->ex->stages[st];
    return stage_failed(sd->ops->step(sd->user, x, err), sd, st, -1, "step", err);
}

static pp_status run_grads_ready(pp_exec *x, void *arg, pp_error *err)
{
    const run_item *r = arg;
    int st = r->it->stage;
    const pp_stage_desc *sd = &r->ex->stages[st];
    return stage_failed(sd->ops->grads_ready(sd->user, x, err), sd, st, -1, "gradients", err);
}

/* A boundary copy between two processes: this side's half of it, a send or
 * a receive of one slot (see pp_executor_set_ranks). */
static pp_status run_message(pp_exec *x, void *arg, pp_error *err)
{
    const run_item *r = arg;
    pp_executor *ex = r->ex;
    const pp_prog_item *it = r->it;
    int b = it->stage, i = it->mb, m = ex->sched->micro_batches, k = i % ex->slots;
    boundary_buf *bb = &ex->bufs[b];
    size_t bytes = pp_tensor_bytes(&ex->shapes[b * m + i]);
    bool act = it->kind == PP_PROG_COPY_ACT;
    int from = act ? b : b + 1, to = act ? b + 1 : b;
    int tag = (act ? 0 : ex->S) + b;
    pp_nccl *link = ex->links[act ? b : ex->S - 1 + b];
    pp_status rc;
    if (link && local(ex, from))
        rc = pp_nccl_send(link, x, 1 - pp_nccl_rank(link), act ? bb->act_send[k] : bb->grad_send[k],
                          bytes, err);
    else if (link)
        rc = pp_nccl_recv(link, x, 1 - pp_nccl_rank(link), act ? bb->act_recv[k] : bb->grad_recv[k],
                          bytes, err);
    else if (local(ex, from))
        rc = pp_comm_send(ex->comm, ex->ranks[to], tag, act ? bb->act_send[k] : bb->grad_send[k],
                          bytes, err);
    else
        rc = pp_comm_recv(ex->comm, ex->ranks[from], tag, act ? bb->act_recv[k] : bb->grad_recv[k],
                          bytes, err);
    if (rc != PP_OK) {
        if (err->code == PP_OK) err->code = rc;
        pp_error_prefix(err, "%s micro-batch %d stage %d -> %d", act ? "activation" : "gradient",
                        i, from, to);
    }
    return rc;
}

static pp_status enqueue_copy(pp_executor *ex, const pp_prog_item *it, run_item *item,
                              const char *label, pp_error *err)
{
    int b = it->stage, i = it->mb, m = ex->sched->micro_batches, k = i % ex->slots;
    boundary_buf *bb = &ex->bufs[b];
    size_t bytes = pp_tensor_bytes(&ex->shapes[b * m + i]);
    pp_device_ctx *lo = ex->stages[b].dev, *hi = ex->stages[b + 1].dev;
    pp_stream *s = ex->lanes[it->lane];
    pp_status rc;
    if (local(ex, b) != local(ex, b + 1))
        rc = pp_stream_launch(s, label, run_message, item, err);
    else if (it->kind == PP_PROG_COPY_ACT)
        rc = pp_stream_copy(s, bb->act_recv[k], hi, bb->act_send[k], lo, bytes, label, err);
    else
        rc = pp_stream_copy(s, bb->grad_recv[k], lo, bb->grad_send[k], hi, bytes, label, err);
    if (rc != PP_OK) pp_error_prefix(err, "%s (%s)", label, pp_stream_device(s)->name);
    return rc;
}

/* Whether this process runs (its half of) an item: a stage's own actions
 * where the stage is local, a copy where either side is. */
static bool item_here(const pp_executor *ex, const pp_prog_item *it)
{
    if (it->kind == PP_PROG_COPY_ACT || it->kind == PP_PROG_COPY_GRAD)
        return local(ex, it->stage) || local(ex, it->stage + 1);
    return local(ex, it->stage);
}

/* After item k, the last backward of its stage: the stage's grads_ready on
 * its own lane, once the backward has completed. */
static pp_status enqueue_grads_ready(pp_executor *ex, const pp_prog_item *it, run_item *item,
                                     pp_error *err)
{
    int st = it->stage;
    pp_stream *lane = ex->lanes[ex->grads_lane[st]];
    char label[PP_STREAM_LABEL_MAX];
    snprintf(label, sizeof label, "grads stage%d", st);
    PP_TRY(pp_event_record(ex->grads_ev[st], ex->lanes[st], err));
    PP_TRY(pp_stream_wait_event(lane, ex->grads_ev[st], err));
    PP_TRY(pp_stream_launch(lane, label, run_grads_ready, item, err));
    return pp_event_record(ex->grads_done[st], lane, err);
}

/* The index of each stage's last item that adds to its weight gradients (B
 * or W) in p (-1: none), for the stages with grads_ready that run here. */
static void find_last_backward(const pp_executor *ex, const pp_program *p, int *last_b)
{
    for (int st = 0; st < ex->S; st++) last_b[st] = -1;
    for (int k = 0; k < p->n_items; k++) {
        const pp_prog_item *it = &p->items[k];
        if ((it->kind == PP_PROG_B || it->kind == PP_PROG_W) && ex->grads_lane[it->stage] >= 0 &&
            local(ex, it->stage))
            last_b[it->stage] = k;
    }
}

pp_status pp_executor_enqueue_all(pp_executor *ex, const pp_program *p, run_item *items,
                                  pp_event **item_ev, pp_error *err)
{
    int last_b[ex->S];
    find_last_backward(ex, p, last_b);
    int *used = calloc((size_t)ex->n_lanes, sizeof *used);
    if (!used) return pp_error_set(err, PP_ERR_OOM, "out of host memory (executor)");
    pp_status rc = PP_OK;
    for (int k = 0; k < p->n_items && rc == PP_OK; k++) {
        const pp_prog_item *it = &p->items[k];
        pp_stream *s = ex->lanes[it->lane];
        if (!item_here(ex, it)) continue;
        /* a dependency on another process's item is kept by its message */
        for (int d = 0; d < it->ndeps && rc == PP_OK; d++)
            if (item_here(ex, &p->items[it->deps[d]]))
                rc = pp_stream_wait_event(s, item_ev[it->deps[d]], err);
        /* a stage's step comes after its gradients' grads_ready */
        if (rc == PP_OK && it->kind == PP_PROG_STEP && last_b[it->stage] >= 0 &&
            last_b[it->stage] < k)
            rc = pp_stream_wait_event(s, ex->grads_done[it->stage], err);
        if (rc != PP_OK) break;
        char label[PP_STREAM_LABEL_MAX];
        pp_prog_item_label(it, label, sizeof label);
        items[k] = (run_item){ex, it};
        switch (it->kind) {
        case PP_PROG_F: rc = pp_stream_launch(s, label, run_forward, &items[k], err); break;
        case PP_PROG_B:
        case PP_PROG_I: rc = pp_stream_launch(s, label, run_backward, &items[k], err); break;
        case PP_PROG_W: rc = pp_stream_launch(s, label, run_weight, &items[k], err); break;
        case PP_PROG_STEP:
            if (ex->stages[it->stage].ops->step)
                rc = pp_stream_launch(s, label, run_step, &items[k], err);
            break;
        case PP_PROG_COPY_ACT:
        case PP_PROG_COPY_GRAD: rc = enqueue_copy(ex, it, &items[k], label, err); break;
        }
        if (rc == PP_OK && it->waited) {
            item_ev[k] = ex->events[it->lane].ev[used[it->lane]++];
            rc = pp_event_record(item_ev[k], s, err);
        }
        if (rc == PP_OK && (it->kind == PP_PROG_B || it->kind == PP_PROG_W) &&
            k == last_b[it->stage])
            rc = enqueue_grads_ready(ex, it, &items[k], err);
        /* The first item depends on nothing and starts the step. A CPU
         * stream's worker is often woken onto this very processor: let it
         * start now rather than after the rest of the step is enqueued
         * (measured: 100-300 us later at S = 8). */
        if (k == 0) sched_yield();
    }
    free(used);
    return rc;
}

/* ---- pass 3: results (the stats: executor_stats.c) ------------------------ */

/* Waits for every lane; returns the earliest error (the root cause) and
 * resets errors and records so the executor can run again. */
pp_status pp_executor_finish(pp_executor *ex, pp_error *err)
{
    pp_status first = PP_OK;
    int64_t first_ns = 0;
    for (int l = 0; l < ex->n_lanes; l++) {
        pp_error e;
        int64_t when = 0;
        pp_stream_synchronize(ex->lanes[l], NULL);
        pp_status rc = pp_stream_error(ex->lanes[l], &e, &when);
        if (rc != PP_OK && (first == PP_OK || when < first_ns)) {
            first = rc;
            first_ns = when;
            if (err) *err = e;
        }
    }
    if (first != PP_OK)
        for (int l = 0; l < ex->n_lanes; l++) {
            pp_stream_clear_error(ex->lanes[l]);
            pp_stream_records_clear(ex->lanes[l]);
        }
    return first;
}

/* Pass 1 for a run of s: the program, shapes, buffers and events. */
pp_status pp_executor_prepare(pp_executor *ex, const pp_schedule *s, pp_program *p,
                              pp_error *err)
{
    if (!s || s->stages != ex->S)
        return pp_error_set(err, PP_ERR_INVALID, "executor: schedule for %d stages, executor has %d",
                            s ? s->stages : 0, ex->S);
    PP_TRY(check_links(ex, err));
    PP_TRY(pp_executor_check_placement(ex, s, err));
    PP_TRY(pp_program_build(s, ex->min_slots, p, err));
    ex->sched = s;
    pp_status rc = query_shapes(ex, s, err);
    if (rc == PP_OK) rc = ensure_buffers(ex, p, s->micro_batches, err);
    if (rc == PP_OK) rc = ensure_events(ex, p, err);
    if (rc != PP_OK) {
        pp_program_free(p);
        ex->sched = NULL;
    }
    return rc;
}

pp_status pp_executor_alloc_items(const pp_program *p, run_item **items, pp_event ***item_ev,
                                  pp_error *err)
{
    *items = malloc((size_t)p->n_items * sizeof **items);
    *item_ev = calloc((size_t)p->n_items, sizeof **item_ev);
    if (*items && *item_ev) return PP_OK;
    free(*items);
    free(*item_ev);
    *items = NULL;
    *item_ev = NULL;
    return pp_error_set(err, PP_ERR_OOM, "out of host memory (executor)");
}

void pp_executor_clear_lanes(pp_executor *ex)
{
    for (int l = 0; l < ex->n_lanes; l++) {
        pp_stream_clear_error(ex->lanes[l]);
        pp_stream_records_clear(ex->lanes[l]);
    }
}

/* Passes 2 and 3 of an eager run of the prepared program p. */
pp_status pp_executor_run_eager(pp_executor *ex, const pp_program *p, pp_step_stats *stats,
                                pp_error *err)
{
    run_item *items;
    pp_event **item_ev;
    PP_TRY(pp_executor_alloc_items(p, &items, &item_ev, err));
    for (int l = 0; l < ex->n_lanes; l++) pp_stream_records_clear(ex->lanes[l]);

    int64_t t0 = pp_stream_clock_ns();
    pp_error enq_err;
    pp_error_clear(&enq_err);
    pp_status enq = pp_executor_enqueue_all(ex, p, items, item_ev, &enq_err);
    pp_status run = pp_executor_finish(ex, err);
    int64_t t1 = pp_stream_clock_ns();
    pp_status rc = PP_OK;
    if (enq != PP_OK) {
        pp_executor_clear_lanes(ex);
        if (err) *err = enq_err;
        rc = enq;
    } else if (run != PP_OK) {
        rc = run;
    } else if (stats) {
        rc = pp_executor_collect_stats(ex, t0, t1, p->slots, stats, err);
    }
    free(items);
    free(item_ev);
    return rc;
}

pp_status pp_executor_run(pp_executor *ex, const pp_schedule *s, pp_step_stats *stats,
                          pp_error *err)
{
    pp_error unread; /* where the caller wants no message (NULL): out_shape still gets one */
    if (!err) err = &unread;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!ex) return pp_error_set(err, PP_ERR_INVALID, "pp_executor_run: no executor (NULL)");
    pp_program p;
    PP_TRY(pp_executor_prepare(ex, s, &p, err));
    pp_status rc = pp_executor_run_eager(ex, &p, stats, err);
    pp_program_free(&p);
    ex->sched = NULL;
    return rc;
}
