/* program.c - lowering a schedule to lane items with dependencies (program.h). */
#include "streams/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lower_state {
    const pp_schedule *s;
    pp_program *p;
    int K;
    int *pc;                          /* (S) next action per stage */
    int *idx_f, *idx_b;               /* (S*m) item index of F/B, -1 if not issued */
    int *idx_ca, *idx_cg;             /* (S*m) item index of copies per boundary, -1 */
} lower_state;

static void add_dep(pp_program *p, pp_prog_item *it, int dep)
{
    if (dep < 0 || p->items[dep].lane == it->lane) return;
    it->deps[it->ndeps++] = dep;
    p->items[dep].waited = true;
}

static int emit(lower_state *L, pp_prog_kind kind, int stage, int mb, int lane, int d0, int d1)
{
    pp_program *p = L->p;
    int k = p->n_items++;
    pp_prog_item *it = &p->items[k];
    memset(it, 0, sizeof *it);
    it->kind = kind;
    it->stage = stage;
    it->mb = mb;
    it->lane = lane;
    add_dep(p, it, d0);
    add_dep(p, it, d1);
    return k;
}

/* Issues the next action of stage st if it can go now; returns true if it did. */
static bool step_stage(lower_state *L, int st)
{
    const pp_schedule *s = L->s;
    int S = s->stages, m = s->micro_batches, K = L->K;
    if (L->pc[st] >= s->n_actions[st]) return false;
    pp_action a = s->actions[st][L->pc[st]];
    int i = a.mb;
    switch (a.kind) {
    case PP_ACT_RECV_ACT:
        if (L->idx_ca[(st - 1) * m + i] < 0) return false;
        break;
    case PP_ACT_RECV_GRAD:
        if (L->idx_cg[st * m + i] < 0) return false;
        break;
    case PP_ACT_F: {
        int in = st > 0 ? L->idx_ca[(st - 1) * m + i] : -1;
        int slot_free = -1;
        if (st < S - 1 && i >= K) {
            slot_free = L->idx_ca[st * m + i - K];
            if (slot_free < 0) return false;
        }
        L->idx_f[st * m + i] = emit(L, PP_PROG_F, st, i, st, in, slot_free);
        break;
    }
    case PP_ACT_B: {
        int gin = st < S - 1 ? L->idx_cg[st * m + i] : -1;
        int slot_free = -1;
        if (st > 0 && i >= K) {
            slot_free = L->idx_cg[(st - 1) * m + i - K];
            if (slot_free < 0) return false;
        }
        L->idx_b[st * m + i] = emit(L, PP_PROG_B, st, i, st, gin, slot_free);
        break;
    }
    case PP_ACT_SEND_ACT: {
        int consumed = -1;
        if (i >= K) {
            consumed = L->idx_f[(st + 1) * m + i - K];
            if (consumed < 0) return false;
        }
        L->idx_ca[st * m + i] =
            emit(L, PP_PROG_COPY_ACT, st, i, S + st, L->idx_f[st * m + i], consumed);
        break;
    }
    case PP_ACT_SEND_GRAD: {
        int consumed = -1;
        if (i >= K) {
            consumed = L->idx_b[(st - 1) * m + i - K];
            if (consumed < 0) return false;
        }
        L->idx_cg[(st - 1) * m + i] =
            emit(L, PP_PROG_COPY_GRAD, st - 1, i, 2 * S - 1 + st - 1, L->idx_b[st * m + i],
                 consumed);
        break;
    }
    case PP_ACT_STEP:
        emit(L, PP_PROG_STEP, st, -1, st, -1, -1);
        break;
    }
    L->pc[st]++;
    return true;
}

/* Lowers with L->K slots; returns false if the issue order blocks forever. */
static bool lower(lower_state *L)
{
    const pp_schedule *s = L->s;
    int S = s->stages, m = s->micro_batches;
    L->p->n_items = 0;
    for (int i = 0; i < S; i++) L->pc[i] = 0;
    for (int i = 0; i < S * m; i++) L->idx_f[i] = L->idx_b[i] = L->idx_ca[i] = L->idx_cg[i] = -1;
    for (;;) {
        bool progress = false, done = true;
        for (int st = 0; st < S; st++) {
            while (step_stage(L, st)) progress = true;
            if (L->pc[st] < s->n_actions[st]) done = false;
        }
        if (done) return true;
        if (!progress) return false;
    }
}

void pp_program_free(pp_program *p)
{
    if (!p) return;
    free(p->items);
    memset(p, 0, sizeof *p);
}

pp_status pp_program_build(const pp_schedule *s, int min_slots, pp_program *p, pp_error *err)
{
    memset(p, 0, sizeof *p);
    PP_TRY(pp_schedule_validate(s, err));
    int S = s->stages, m = s->micro_batches;
    size_t total = 0;
    for (int i = 0; i < S; i++) total += (size_t)s->n_actions[i];
    size_t sm = (size_t)S * (size_t)m;
    lower_state L = {.s = s, .p = p};
    p->items = malloc((total ? total : 1) * sizeof *p->items);
    L.pc = malloc((size_t)S * sizeof *L.pc);
    L.idx_f = malloc(4 * sm * sizeof *L.idx_f);
    if (!p->items || !L.pc || !L.idx_f) {
        free(L.pc);
        free(L.idx_f);
        pp_program_free(p);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (program)");
    }
    L.idx_b = L.idx_f + sm;
    L.idx_ca = L.idx_b + sm;
    L.idx_cg = L.idx_ca + sm;
    p->stages = S;
    p->micro_batches = m;
    p->n_lanes = 3 * S - 2;
    bool ok = false;
    for (L.K = min_slots < 1 ? 1 : min_slots; !ok; L.K++) {
        ok = lower(&L);
        if (ok) p->slots = L.K;
        if (L.K >= m) break; /* with m slots no slot is ever reused */
    }
    free(L.pc);
    free(L.idx_f);
    if (!ok) {
        pp_program_free(p);
        return pp_error_set(err, PP_ERR_INTERNAL,
                            "schedule '%s' passed validation but cannot be issued", s->name);
    }
    return PP_OK;
}

const char *pp_prog_item_label(const pp_prog_item *it, char *buf, size_t n)
{
    switch (it->kind) {
    case PP_PROG_F: snprintf(buf, n, "F%d stage%d", it->mb, it->stage); break;
    case PP_PROG_B: snprintf(buf, n, "B%d stage%d", it->mb, it->stage); break;
    case PP_PROG_STEP: snprintf(buf, n, "STEP stage%d", it->stage); break;
    case PP_PROG_COPY_ACT:
        snprintf(buf, n, "copy act %d s%d->s%d", it->mb, it->stage, it->stage + 1);
        break;
    case PP_PROG_COPY_GRAD:
        snprintf(buf, n, "copy grad %d s%d->s%d", it->mb, it->stage + 1, it->stage);
        break;
    }
    return buf;
}
