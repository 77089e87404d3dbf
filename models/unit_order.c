/*
 * unit_order.c - the step's weight gradients in micro-batch order (unit.h):
 * a backward (B or W) of the micro-batch next in the order adds to the
 * unit's gradients; one of a later micro-batch computes into a zeroed part
 * of its own, added when every micro-batch before it has been. Each op adds
 * its gradient once (ops.h), so the sums have the same bits whatever order
 * the backwards run in.
 */
#include <stdlib.h>
#include <string.h>

#include "models/unit_kind.h"

/* Drops the micro-batches' parameter gradients kept for their turn. */
static void parts_drop(pp_unit *u)
{
    for (int i = 0; i < u->n_parts; i++)
        for (int e = 0; e < u->n_entries; e++) pp_tensor_free(&u->parts[i].g[e]);
    u->n_parts = 0;
}

bool pp_unit_has_params(const pp_unit *u)
{
    for (int e = 0; e < u->n_entries; e++)
        if (u->entry[e].grad) return true;
    return false;
}

/* Where mb's parameter gradients go: the unit's own when mb is the next of
 * the step's order (or the unit has none), else a part of zeros made here and
 * kept until mb's turn (*part). */
pp_status pp_unit_grads_begin(pp_unit *u, pp_exec *ex, int mb, pp_tensor **grad,
                              pp_unit_part **part, pp_error *err)
{
    *grad = u->grad;
    *part = NULL;
    if (!pp_unit_has_params(u)) return PP_OK;
    /* an mb already added with nothing waiting: the caller zeroes the gradients
     * itself, and a new step begins */
    if (mb < u->grad_next && u->n_parts == 0) u->grad_next = 0;
    if (mb == u->grad_next) return PP_OK;
    if (mb < u->grad_next)
        return pp_error_set(err, PP_ERR_INVALID,
                            "the weight gradient of micro-batch %d was added already this step "
                            "(pp_stage_zero_grads begins a step)",
                            mb);
    for (int i = 0; i < u->n_parts; i++)
        if (u->parts[i].mb == mb)
            return pp_error_set(err, PP_ERR_INVALID,
                                "the weight gradient of micro-batch %d waits for its turn already",
                                mb);
    if (u->n_parts == u->cap_parts) {
        int cap = u->cap_parts ? 2 * u->cap_parts : 4;
        pp_unit_part *grown = realloc(u->parts, (size_t)cap * sizeof *grown);
        if (!grown) return pp_error_set(err, PP_ERR_OOM, "out of host memory (gradient parts)");
        u->parts = grown;
        u->cap_parts = cap;
    }
    pp_unit_part *p = &u->parts[u->n_parts];
    memset(p, 0, sizeof *p);
    p->mb = mb;
    pp_tensor *zero[PP_UNIT_MAX_ENTRIES];
    int nz = 0;
    pp_status st = PP_OK;
    for (int e = 0; e < u->n_entries && st == PP_OK; e++) {
        if (!u->entry[e].grad) continue;
        st = pp_unit_alloc_like(&p->g[e], ex, &u->grad[e], err);
        zero[nz++] = &p->g[e];
    }
    if (st == PP_OK) st = pp_zero_multi(ex, nz, zero, err);
    if (st != PP_OK) {
        for (int e = 0; e < u->n_entries; e++) pp_tensor_free(&p->g[e]);
        return st;
    }
    u->n_parts++;
    *grad = p->g;
    *part = p;
    return PP_OK;
}

/* After mb's gradients went where grads_begin said (st: how that went): the
 * next micro-batch's turn, and the parts waiting for theirs added in order. */
pp_status pp_unit_grads_end(pp_unit *u, pp_exec *ex, int mb, pp_unit_part *part,
                            pp_status st, pp_error *err)
{
    if (!pp_unit_has_params(u)) return st;
    if (st != PP_OK) { /* a failed part is dropped; the step is broken anyway */
        if (part) {
            for (int e = 0; e < u->n_entries; e++) pp_tensor_free(&part->g[e]);
            *part = u->parts[--u->n_parts];
        }
        return st;
    }
    if (part) return PP_OK;
    u->grad_next = mb + 1;
    for (bool found = true; found;) {
        found = false;
        for (int i = 0; i < u->n_parts; i++) {
            pp_unit_part *p = &u->parts[i];
            if (p->mb != u->grad_next) continue;
            for (int e = 0; e < u->n_entries && st == PP_OK; e++)
                if (u->entry[e].grad) st = pp_accumulate(ex, &p->g[e], &u->grad[e], err);
            for (int e = 0; e < u->n_entries; e++) pp_tensor_free(&p->g[e]);
            *p = u->parts[--u->n_parts];
            if (st != PP_OK) return st;
            u->grad_next++;
            found = true;
            break;
        }
    }
    return PP_OK;
}

void pp_unit_grads_reset(pp_unit *u)
{
    parts_drop(u);
    u->grad_next = 0;
}

int pp_unit_grads_waiting(const pp_unit *u)
{
    return u->n_parts;
}
