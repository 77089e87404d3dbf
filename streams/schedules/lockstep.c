/*
 * lockstep.c - schedules made by lock-step list scheduling: time runs in
 * slots of one unit (F = I = W = 1 on every stage), and in each slot every
 * device takes one ready action of its stages by the generator's priority;
 * an action is ready when what it needs finished in an earlier slot.
 *
 * ZB-H2 (Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024, section
 * 3.1), one stage per device: priority I > F > W, F only while fewer than
 * 2D-1 micro-batches are in flight on the device (the paper's memory limit,
 * about twice 1F1B's). The extra warm-up forwards fill the wait for the
 * first I, and the W passes left for the end fill the wait for the last
 * ones, so every device computes without a gap from its first forward to its
 * last W: the parallelogram of the paper's figure 4.
 *
 * Forward-only (evaluation) on any placement: the ready F of the lowest
 * micro-batch, then the lowest stage.
 */
#include "streams/schedules/gen.h"

#include <limits.h>
#include <stdlib.h>

typedef struct lock_state {
    pp_schedule *s;
    int S, D, m, t;
    int *f_at, *i_at;              /* (S*m) slot in which F / I (or B) ran; INT_MAX: not yet */
    int *nf, *ni, *nw;             /* (S) next micro-batch of each kind per stage */
    int *in_flight;                /* (D) F run, W not */
    int limit;                     /* most micro-batches in flight per device */
    bool backward;                 /* the schedule has backwards */
} lock_state;

static bool f_ready(const lock_state *L, int st)
{
    int i = L->nf[st];
    return i < L->m && (st == 0 || L->f_at[(st - 1) * L->m + i] < L->t);
}

static bool i_ready(const lock_state *L, int st)
{
    int i = L->ni[st];
    if (!L->backward || i >= L->nf[st]) return false;
    return st == L->S - 1 ? L->f_at[st * L->m + i] < L->t : L->i_at[(st + 1) * L->m + i] < L->t;
}

/* Picks device d's action for slot t: *kind and *stage; false when idle. */
static bool pick(const lock_state *L, int d, pp_action_kind *kind, int *stage)
{
    const pp_schedule *s = L->s;
    int best = -1;
    if (L->backward) {
        for (int st = 0; st < L->S; st++) /* I first: the critical path */
            if (s->stage_device[st] == d && i_ready(L, st)) {
                *kind = PP_ACT_I;
                *stage = st;
                return true;
            }
    }
    if (L->in_flight[d] < L->limit)
        for (int st = 0; st < L->S; st++) /* F of the lowest micro-batch, then stage */
            if (s->stage_device[st] == d && f_ready(L, st) &&
                (best < 0 || L->nf[st] < L->nf[best]))
                best = st;
    if (best >= 0) {
        *kind = PP_ACT_F;
        *stage = best;
        return true;
    }
    for (int st = 0; L->backward && st < L->S; st++)
        if (s->stage_device[st] == d && L->nw[st] < L->ni[st]) {
            *kind = PP_ACT_W;
            *stage = st;
            return true;
        }
    return false;
}

static pp_status run(lock_state *L, pp_error *err)
{
    int total = L->S * L->m * (L->backward ? 3 : 1), done = 0;
    pp_action_kind kind[L->D];
    int stage[L->D];
    bool act[L->D];
    for (L->t = 0; done < total; L->t++) {
        int moved = 0;
        for (int d = 0; d < L->D; d++) moved += act[d] = pick(L, d, &kind[d], &stage[d]);
        if (!moved)
            return pp_error_set(err, PP_ERR_INTERNAL, "schedule %s: lock-step generation stalled "
                                "at slot %d", L->s->name, L->t);
        for (int d = 0; d < L->D; d++) {
            if (!act[d]) continue;
            int st = stage[d], *next = kind[d] == PP_ACT_F ? L->nf : kind[d] == PP_ACT_I ? L->ni
                                                                                    : L->nw;
            int i = next[st]++;
            if (kind[d] == PP_ACT_F) L->f_at[st * L->m + i] = L->t, L->in_flight[d]++;
            if (kind[d] == PP_ACT_I) L->i_at[st * L->m + i] = L->t;
            if (kind[d] == PP_ACT_W) L->in_flight[d]--;
            PP_TRY(pp_schedule_push(L->s, st, kind[d], i, err));
            done++;
        }
    }
    return PP_OK;
}

static pp_status fill(pp_schedule *s, bool backward, int limit, pp_error *err)
{
    int S = s->stages, m = s->micro_batches;
    lock_state L = {.s = s, .S = S, .D = s->devices, .m = m, .limit = limit,
                    .backward = backward};
    int *buf = malloc((size_t)(2 * S * m + 3 * S + s->devices) * sizeof *buf);
    if (!buf) return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    L.f_at = buf;
    L.i_at = buf + S * m;
    L.nf = buf + 2 * S * m;
    L.ni = L.nf + S;
    L.nw = L.ni + S;
    L.in_flight = L.nw + S;
    for (int k = 0; k < 2 * S * m; k++) buf[k] = INT_MAX;
    for (int k = 2 * S * m; k < 2 * S * m + 3 * S + s->devices; k++) buf[k] = 0;
    pp_status st = run(&L, err);
    free(buf);
    return st;
}

static pp_status fill_zbh2(pp_schedule *s, pp_error *err)
{
    return fill(s, true, 2 * s->devices - 1, err);
}

static pp_status fill_forward(pp_schedule *s, pp_error *err)
{
    s->forward_only = true;
    return fill(s, false, INT_MAX, err);
}

const pp_schedule_gen_ops pp_gen_zbh2_ops = {
    .kind = PP_SCHEDULE_ZBH2,
    .name = "zbh2",
    .reference = "ZB-H2 (Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024, section 3.1)",
    .placement = PP_PLACEMENT_ONE,
    .fill = fill_zbh2,
};

const pp_schedule_gen_ops pp_gen_forward_ops = {
    .kind = PP_SCHEDULE_FORWARD,
    .name = "forward",
    .reference = "forward passes only, pipelined (evaluation)",
    .placement = PP_PLACEMENT_ANY,
    .fill = fill_forward,
};
