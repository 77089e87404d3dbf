/* program.c - lowering a schedule to lane items with dependencies (program.h). */
#include "streams/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lower_state {
    const pp_schedule *s;             /* normalised: communication and STEP present */
    pp_program *p;
    int K;
    int *pc;                          /* (D) next action per device */
    int *idx_f, *idx_bi;              /* (S*m) item of F, of B or I; -1 if not issued */
    int *idx_ca, *idx_cg;             /* (S*m) item of the copies per boundary; -1 */
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

/* The item that must have been issued before the forward of (st, i) writes
 * its output slot again, -2 when none is needed, -1 when it is not issued. */
static int act_slot_free(const lower_state *L, int st, int i)
{
    int S = L->s->stages, m = L->s->micro_batches;
    if (st == S - 1 || i < L->K) return -2;
    return L->p->cross[st] ? L->idx_ca[st * m + i - L->K] : L->idx_f[(st + 1) * m + i - L->K];
}

/* The same for the input gradient slot a backward of (st, i) writes. */
static int grad_slot_free(const lower_state *L, int st, int i)
{
    int m = L->s->micro_batches;
    if (st == 0 || i < L->K) return -2;
    return L->p->cross[st - 1] ? L->idx_cg[(st - 1) * m + i - L->K]
                               : L->idx_bi[(st - 1) * m + i - L->K];
}

static bool lower_forward(lower_state *L, int st, int i)
{
    int S = L->s->stages, m = L->s->micro_batches;
    int in = -2;
    if (st > 0) in = L->p->cross[st - 1] ? L->idx_ca[(st - 1) * m + i] : L->idx_f[(st - 1) * m + i];
    int free_slot = act_slot_free(L, st, i);
    if (in == -1 || free_slot == -1) return false;
    (void)S;
    L->idx_f[st * m + i] = emit(L, PP_PROG_F, st, i, L->p->stage_lane[st], in, free_slot);
    return true;
}

static bool lower_backward(lower_state *L, pp_prog_kind kind, int st, int i)
{
    int S = L->s->stages, m = L->s->micro_batches;
    int gin = L->idx_f[st * m + i]; /* on its own lane: issued before, no wait */
    if (st < S - 1) gin = L->p->cross[st] ? L->idx_cg[st * m + i] : L->idx_bi[(st + 1) * m + i];
    int free_slot = grad_slot_free(L, st, i);
    if (gin == -1 || L->idx_f[st * m + i] < 0 || free_slot == -1) return false;
    L->idx_bi[st * m + i] = emit(L, kind, st, i, L->p->stage_lane[st], gin, free_slot);
    return true;
}

/* Issues the next action of device d if it can go now; returns true if it did. */
static bool step_device(lower_state *L, int d)
{
    const pp_schedule *s = L->s;
    int S = s->stages, m = s->micro_batches, K = L->K;
    if (L->pc[d] >= s->n_actions[d]) return false;
    pp_action a = s->actions[d][L->pc[d]];
    int st = a.stage, i = a.mb;
    switch (a.kind) {
    case PP_ACT_RECV_ACT:
        if (L->idx_ca[(st - 1) * m + i] < 0) return false;
        break;
    case PP_ACT_RECV_GRAD:
        if (L->idx_cg[st * m + i] < 0) return false;
        break;
    case PP_ACT_F:
        if (!lower_forward(L, st, i)) return false;
        break;
    case PP_ACT_B:
    case PP_ACT_I:
        if (!lower_backward(L, a.kind == PP_ACT_B ? PP_PROG_B : PP_PROG_I, st, i)) return false;
        break;
    case PP_ACT_W:
        emit(L, PP_PROG_W, st, i, L->p->stage_lane[st], -1, -1);
        break;
    case PP_ACT_SEND_ACT: {
        int consumed = -2;
        if (i >= K && (consumed = L->idx_f[(st + 1) * m + i - K]) < 0) return false;
        L->idx_ca[st * m + i] =
            emit(L, PP_PROG_COPY_ACT, st, i, S + st, L->idx_f[st * m + i], consumed);
        break;
    }
    case PP_ACT_SEND_GRAD: {
        int consumed = -2;
        if (i >= K && (consumed = L->idx_bi[(st - 1) * m + i - K]) < 0) return false;
        L->idx_cg[(st - 1) * m + i] = emit(L, PP_PROG_COPY_GRAD, st - 1, i, 2 * S - 1 + st - 1,
                                           L->idx_bi[st * m + i], consumed);
        break;
    }
    case PP_ACT_STEP:
        emit(L, PP_PROG_STEP, st, -1, L->p->stage_lane[st], -1, -1);
        break;
    default: /* UNSHARD, RESHARD: nothing to do */
        break;
    }
    L->pc[d]++;
    return true;
}

/* Lowers with L->K slots; returns false if the issue order blocks forever. */
static bool lower(lower_state *L)
{
    const pp_schedule *s = L->s;
    int S = s->stages, m = s->micro_batches, D = s->devices;
    L->p->n_items = 0;
    for (int d = 0; d < D; d++) L->pc[d] = 0;
    for (int k = 0; k < S * m; k++) L->idx_f[k] = L->idx_bi[k] = L->idx_ca[k] = L->idx_cg[k] = -1;
    for (;;) {
        bool progress = false, done = true;
        for (int d = 0; d < D; d++) {
            while (step_device(L, d)) progress = true;
            if (L->pc[d] < s->n_actions[d]) done = false;
        }
        if (done) return true;
        if (!progress) return false;
    }
}

double pp_program_time(const pp_program *p, double (*cost)(const pp_prog_item *it, void *arg),
                       void *arg, double *end)
{
    double lane_end[p->n_lanes > 0 ? p->n_lanes : 1], last = 0.0;
    for (int l = 0; l < p->n_lanes; l++) lane_end[l] = 0.0;
    for (int k = 0; k < p->n_items; k++) {
        const pp_prog_item *it = &p->items[k];
        double start = lane_end[it->lane];
        for (int d = 0; d < it->ndeps; d++)
            if (end[it->deps[d]] > start) start = end[it->deps[d]];
        end[k] = start + cost(it, arg);
        lane_end[it->lane] = end[k];
        if (end[k] > last) last = end[k];
    }
    return last;
}

/* Unit costs of compute (F = I = W = 1, B = 2), free copies and steps. */
static double unit_cost(const pp_prog_item *it, void *arg)
{
    (void)arg;
    switch (it->kind) {
    case PP_PROG_F:
    case PP_PROG_I:
    case PP_PROG_W: return 1.0;
    case PP_PROG_B: return 2.0;
    default: return 0.0;
    }
}

/* The unit-cost step of the lowering with K slots; < 0 when it blocks. */
static double step_with(lower_state *L, int K, double *end)
{
    L->K = K;
    if (!lower(L)) return -1.0;
    return pp_program_time(L->p, unit_cost, NULL, end);
}

/* The slot count: the smallest >= min_slots that issues and, on unit
 * costs, is as fast as one slot per micro-batch (no slot ever reused). */
static pp_status choose_slots(lower_state *L, int min_slots)
{
    int m = L->s->micro_batches;
    if (min_slots >= m) { /* no slot is ever reused */
        L->p->slots = L->K = min_slots;
        return lower(L) ? PP_OK : PP_ERR_INTERNAL;
    }
    size_t cap = 0; /* items: at most one per action */
    for (int d = 0; d < L->s->devices; d++) cap += (size_t)L->s->n_actions[d];
    double *end = malloc((cap ? cap : 1) * sizeof *end);
    if (!end) return PP_ERR_OOM;
    double best = step_with(L, m, end);
    pp_status st = PP_ERR_INTERNAL;
    for (int K = min_slots; best >= 0 && K <= m; K++) {
        double t = step_with(L, K, end);
        if (t >= 0 && t <= best + 1e-9) {
            L->p->slots = K;
            st = PP_OK;
            break;
        }
    }
    free(end);
    return st;
}

void pp_program_free(pp_program *p)
{
    if (!p) return;
    free(p->items);
    free(p->stage_lane);
    free(p->cross);
    memset(p, 0, sizeof *p);
}

/* s with its communication and a STEP per stage (unless forward-only). */
static pp_status normalise(const pp_schedule *s, pp_schedule *n, pp_error *err)
{
    PP_TRY(pp_schedule_copy(n, s, err));
    pp_status st = pp_schedule_add_comms(n, err);
    if (st == PP_OK && !n->forward_only) {
        unsigned char *has_step = calloc((size_t)n->stages, 1);
        if (!has_step) st = pp_error_set(err, PP_ERR_OOM, "out of host memory (program)");
        for (int d = 0; d < n->devices && st == PP_OK; d++)
            for (int k = 0; k < n->n_actions[d]; k++)
                if (n->actions[d][k].kind == PP_ACT_STEP) has_step[n->actions[d][k].stage] = 1;
        for (int k = 0; k < n->stages && st == PP_OK; k++)
            if (!has_step[k]) st = pp_schedule_push(n, k, PP_ACT_STEP, -1, err);
        free(has_step);
    }
    if (st != PP_OK) pp_schedule_free(n);
    return st;
}

pp_status pp_program_build(const pp_schedule *s, int min_slots, pp_program *p, pp_error *err)
{
    memset(p, 0, sizeof *p);
    PP_TRY(pp_schedule_validate(s, err));
    pp_schedule n;
    PP_TRY(normalise(s, &n, err));
    int S = n.stages, m = n.micro_batches, D = n.devices;
    size_t total = 0;
    for (int d = 0; d < D; d++) total += (size_t)n.n_actions[d];
    size_t sm = (size_t)S * (size_t)m;
    lower_state L = {.s = &n, .p = p};
    p->items = malloc((total ? total : 1) * sizeof *p->items);
    p->stage_lane = malloc((size_t)S * sizeof *p->stage_lane);
    p->cross = calloc((size_t)S, sizeof *p->cross);
    L.pc = malloc((size_t)D * sizeof *L.pc);
    L.idx_f = malloc(4 * sm * sizeof *L.idx_f);
    if (!p->items || !p->stage_lane || !p->cross || !L.pc || !L.idx_f) {
        free(L.pc);
        free(L.idx_f);
        pp_program_free(p);
        pp_schedule_free(&n);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (program)");
    }
    L.idx_bi = L.idx_f + sm;
    L.idx_ca = L.idx_bi + sm;
    L.idx_cg = L.idx_ca + sm;
    p->stages = S;
    p->micro_batches = m;
    p->devices = D;
    p->n_lanes = 3 * S - 2;
    for (int k = 0; k < S; k++) {
        int first = 0;
        while (n.stage_device[first] != n.stage_device[k]) first++;
        p->stage_lane[k] = first;
        if (k + 1 < S) p->cross[k] = n.stage_device[k] != n.stage_device[k + 1];
    }
    pp_status st = choose_slots(&L, min_slots < 1 ? 1 : min_slots);
    free(L.pc);
    free(L.idx_f);
    pp_schedule_free(&n);
    if (st != PP_OK) {
        pp_program_free(p);
        return pp_error_set(err, st, st == PP_ERR_OOM ? "out of host memory (program)"
                                                      : "schedule '%s' passed validation but "
                                                        "cannot be issued", s->name);
    }
    return PP_OK;
}

const char *pp_prog_item_label(const pp_prog_item *it, char *buf, size_t n)
{
    static const char *const compute[] = {[PP_PROG_F] = "F", [PP_PROG_B] = "B",
                                          [PP_PROG_I] = "I", [PP_PROG_W] = "W"};
    switch (it->kind) {
    case PP_PROG_F:
    case PP_PROG_B:
    case PP_PROG_I:
    case PP_PROG_W: snprintf(buf, n, "%s%d stage%d", compute[it->kind], it->mb, it->stage); break;
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

int pp_prog_label_stage(const char *label)
{
    if (!label || !strchr("FBIWS", label[0]) || strncmp(label, "copy", 4) == 0) return -1;
    const char *at = strstr(label, "stage");
    return at ? atoi(at + 5) : -1;
}
