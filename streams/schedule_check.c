/*
 * schedule_check.c - pp_schedule_validate (schedule.h), in three passes:
 *   1. each action alone: a known kind, its stage on this device, its
 *      micro-batch in range, composites well formed, communication only
 *      between devices, nothing twice;
 *   2. each stage and micro-batch: F once, B or I and W, the order rules
 *      that hold within one device list, the sends and receives when the
 *      schedule has any, STEP after the stage's last backward;
 *   3. the lists run with blocking receives until all are done or none can
 *      move; then the first device waiting for an action later in its own
 *      list is a cycle, else every waiting device is reported (a deadlock).
 * Messages name the place as schedule.h describes: "FILE:ROW:COL" for a
 * schedule read from a file, "device D, action K" for a built one.
 */
#include "streams/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slots of the per-(stage, micro-batch) position table. */
enum { P_F, P_B, P_I, P_W, P_SA, P_RA, P_SG, P_RG, P_N };

typedef struct check_state {
    const pp_schedule *s;
    pp_error *err;
    int S, D, m;
    bool comms;
    int *dev_of;  /* (P_N * S * m) device of the action, -1: absent */
    int *pos;     /* (P_N * S * m) position in that device's list */
    int *step;    /* (S) position of STEP, -1 */
    int *last_bw; /* (S) latest position of a B or W, -1 */
} check_state;

static int slot_of(pp_action_kind k)
{
    switch (k) {
    case PP_ACT_F: return P_F;
    case PP_ACT_B: return P_B;
    case PP_ACT_I: return P_I;
    case PP_ACT_W: return P_W;
    case PP_ACT_SEND_ACT: return P_SA;
    case PP_ACT_RECV_ACT: return P_RA;
    case PP_ACT_SEND_GRAD: return P_SG;
    case PP_ACT_RECV_GRAD: return P_RG;
    default: return -1;
    }
}

static const pp_action_kind slot_kind[P_N] = {PP_ACT_F, PP_ACT_B, PP_ACT_I, PP_ACT_W,
                                              PP_ACT_SEND_ACT, PP_ACT_RECV_ACT,
                                              PP_ACT_SEND_GRAD, PP_ACT_RECV_GRAD};

static int idx(const check_state *c, int slot, int stage, int mb)
{
    return (slot * c->S + stage) * c->m + mb;
}

static bool is_compute(pp_action_kind k)
{
    return k == PP_ACT_F || k == PP_ACT_B || k == PP_ACT_I || k == PP_ACT_W;
}

/* "FILE:ROW:COL" or "device D, action K" for action p of device d. */
static const char *place(const check_state *c, int d, int p, char *buf, size_t n)
{
    const pp_schedule *s = c->s;
    if (s->source) {
        int cell = p < s->n_actions[d] && s->actions[d][p].cell ? s->actions[d][p].cell : p + 1;
        snprintf(buf, n, "%s:%d:%d", s->source, d + 1, cell);
    } else {
        snprintf(buf, n, "device %d, action %d", d, p);
    }
    return buf;
}

/* How another action is referred to: "column 7" / "action 6" (of device e
 * when e is not d). */
static const char *ref(const check_state *c, int d, int e, int p, char *buf, size_t n)
{
    const pp_schedule *s = c->s;
    char dev[32] = "";
    if (e != d) snprintf(dev, sizeof dev, " of device %d", e);
    if (s->source)
        snprintf(buf, n, "row %d column %d", e + 1,
                 s->actions[e][p].cell ? s->actions[e][p].cell : p + 1);
    else
        snprintf(buf, n, "action %d%s", p, dev);
    return buf;
}

static pp_status fail(const check_state *c, int d, int p, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static pp_status fail(const check_state *c, int d, int p, const char *fmt, ...)
{
    char where[512], msg[PP_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    place(c, d, p, where, sizeof where);
    return pp_error_set(c->err, c->s->source ? PP_ERR_INPUT : PP_ERR_INVALID, "%s: %s", where,
                        msg);
}

/* A missing action of stage on its device's row, placed at the action that
 * needs it or produces for it (anchor: a slot of the same stage and
 * micro-batch, -1 for none), else after the row's last cell. */
static pp_status missing(const check_state *c, int stage, pp_action_kind kind, int mb,
                         int anchor, const char *why)
{
    const pp_schedule *s = c->s;
    const int at = anchor >= 0 ? idx(c, anchor, stage, mb) : -1;
    const bool anchored = at >= 0 && c->dev_of[at] >= 0;
    int d = anchored ? c->dev_of[at] : s->stage_device[stage];
    char b[48], x[48], where[512], which[128] = "";
    pp_action a = {.kind = kind, .mb = mb, .stage = stage};
    if (anchored) {
        place(c, d, c->pos[at], where, sizeof where);
        snprintf(which, sizeof which, " (for %s here)",
                 pp_action_format(s->actions[d][c->pos[at]], x, sizeof x));
    } else if (s->source) {
        int n = s->n_actions[d], end = n;
        if (n > 0 && s->actions[d][n - 1].cell) end = s->actions[d][n - 1].cell;
        snprintf(where, sizeof where, "%s:%d:%d", s->source, d + 1, end > 0 ? end : 1);
        snprintf(which, sizeof which, " (not in the row, which ends here)");
    } else {
        snprintf(where, sizeof where, "device %d", d);
    }
    return pp_error_set(c->err, s->source ? PP_ERR_INPUT : PP_ERR_INVALID, "%s: missing %s%s%s%s",
                        where, pp_action_format(a, b, sizeof b), which, why[0] ? ": " : "", why);
}

/* ---- pass 1: each action ----------------------------------------------------- */

static pp_status check_action(check_state *c, int d, int p)
{
    const pp_schedule *s = c->s;
    const pp_action *a = &s->actions[d][p];
    char b[48], r[64];
    if ((unsigned)a->kind >= PP_ACT_KINDS)
        return fail(c, d, p, "unknown action kind %d", (int)a->kind);
    if (a->stage < 0 || a->stage >= c->S)
        return fail(c, d, p, "%s: stage %d out of range (the schedule has %d stage%s)",
                    pp_action_format(*a, b, sizeof b), a->stage, c->S, c->S == 1 ? "" : "s");
    pp_action_format(*a, b, sizeof b);
    int home = s->stage_device[a->stage];
    if (home != d)
        return fail(c, d, p, "%s on device %d, but stage %d is placed on device %d", b, d,
                    a->stage, home);
    int slot = slot_of(a->kind);
    if (slot >= 0 && (a->mb < 0 || a->mb >= c->m))
        return fail(c, d, p, "%s: micro-batch %d out of range (the schedule has %d)", b, a->mb,
                    c->m);
    if (s->forward_only && a->kind != PP_ACT_F && a->kind != PP_ACT_SEND_ACT &&
        a->kind != PP_ACT_RECV_ACT && a->kind != PP_ACT_UNSHARD && a->kind != PP_ACT_RESHARD)
        return fail(c, d, p, "%s in a forward-only schedule", b);
    if (a->overlap) {
        bool first = a->overlap == PP_OVERLAP_FIRST;
        int q = first ? p + 1 : p - 1;
        bool ok = (a->overlap == PP_OVERLAP_FIRST || a->overlap == PP_OVERLAP_SECOND) &&
                  q >= 0 && q < s->n_actions[d] &&
                  s->actions[d][q].overlap == (first ? PP_OVERLAP_SECOND : PP_OVERLAP_FIRST) &&
                  is_compute(a->kind) && is_compute(s->actions[d][q].kind);
        if (ok && first && a->stage == s->actions[d][q].stage && a->mb == s->actions[d][q].mb)
            ok = false;
        if (!ok)
            return fail(c, d, p, "%s: an OVERLAP_F_B composite needs two compute actions of "
                        "other micro-batches or stages, side by side", b);
    }
    int st = a->stage;
    switch (a->kind) {
    case PP_ACT_SEND_ACT:
    case PP_ACT_RECV_GRAD: {
        bool send = a->kind == PP_ACT_SEND_ACT;
        if (st == c->S - 1)
            return fail(c, d, p, "%s, but stage %d is the last: it has no next stage", b, st);
        if (s->stage_device[st + 1] == d)
            return fail(c, d, p, "%s, but stages %d and %d are both on device %d, which hands "
                        "the %s over without a %s", b, st, st + 1, d,
                        send ? "activation" : "gradient", send ? "send" : "receive");
        break;
    }
    case PP_ACT_RECV_ACT:
    case PP_ACT_SEND_GRAD: {
        bool recv = a->kind == PP_ACT_RECV_ACT;
        if (st == 0)
            return fail(c, d, p, "%s, but stage 0 is the first: it has no previous stage", b);
        if (s->stage_device[st - 1] == d)
            return fail(c, d, p, "%s, but stages %d and %d are both on device %d, which hands "
                        "the %s over without a %s", b, st - 1, st, d,
                        recv ? "activation" : "gradient", recv ? "receive" : "send");
        break;
    }
    case PP_ACT_STEP:
        if (c->step[st] >= 0)
            return fail(c, d, p, "%s twice (also at %s)", b,
                        ref(c, d, d, c->step[st], r, sizeof r));
        c->step[st] = p;
        break;
    default: break;
    }
    if (slot < 0) return PP_OK;
    if ((a->kind == PP_ACT_B || a->kind == PP_ACT_W) && p > c->last_bw[st]) c->last_bw[st] = p;
    int k = idx(c, slot, st, a->mb);
    if (c->dev_of[k] >= 0)
        return fail(c, d, p, "%s twice (also at %s)", b, ref(c, d, d, c->pos[k], r, sizeof r));
    c->dev_of[k] = d;
    c->pos[k] = p;
    return PP_OK;
}

/* ---- pass 2: each stage and micro-batch -------------------------------------- */

/* Action (slot, st, i) must come before (slot2, st2, i2) in device d's list
 * when both are present there. */
static pp_status order(check_state *c, int slot, int st, int i, int slot2, int st2, int i2,
                       const char *why)
{
    int a = idx(c, slot, st, i), b = idx(c, slot2, st2, i2);
    if (c->dev_of[a] < 0 || c->dev_of[b] < 0 || c->pos[a] < c->pos[b]) return PP_OK;
    int d = c->dev_of[a];
    char x[48], y[48], r[64];
    pp_action ax = {.kind = slot_kind[slot], .mb = i, .stage = st};
    pp_action ay = {.kind = slot_kind[slot2], .mb = i2, .stage = st2};
    return fail(c, c->dev_of[b], c->pos[b], "%s before %s (at %s): %s",
                pp_action_format(ay, y, sizeof y), pp_action_format(ax, x, sizeof x),
                ref(c, c->dev_of[b], d, c->pos[a], r, sizeof r), why);
}

static bool has(const check_state *c, int slot, int st, int i)
{
    return c->dev_of[idx(c, slot, st, i)] >= 0;
}

static pp_status check_mb(check_state *c, int st, int i)
{
    const pp_schedule *s = c->s;
    const int back = has(c, P_B, st, i) ? P_B : P_I; /* the backward that needs it */
    if (!has(c, P_F, st, i)) return missing(c, st, PP_ACT_F, i, back, "every stage runs each "
                                            "micro-batch forward once");
    if (!s->forward_only) {
        bool b = has(c, P_B, st, i), in = has(c, P_I, st, i), w = has(c, P_W, st, i);
        if (b && (in || w)) {
            int k = idx(c, in ? P_I : P_W, st, i);
            char x[48];
            pp_action a = {.kind = in ? PP_ACT_I : PP_ACT_W, .mb = i, .stage = st};
            return fail(c, c->dev_of[k], c->pos[k], "%s, but the micro-batch also has a whole "
                        "backward %dB%d: a backward is B, or I and W", pp_action_format(a, x,
                        sizeof x), st, i);
        }
        if (!b && !in && !w)
            return missing(c, st, PP_ACT_B, i, P_F, "every stage runs each micro-batch "
                           "backward once (B, or I and W)");
        if (!b && !in) return missing(c, st, PP_ACT_I, i, P_W, "W needs its I");
        if (!b && !w)
            return missing(c, st, PP_ACT_W, i, P_I, "I leaves the weight gradients to W");
        int bw = b ? P_B : P_I;
        PP_TRY(order(c, P_F, st, i, bw, st, i, "the backward needs its forward"));
        if (!b) PP_TRY(order(c, P_I, st, i, P_W, st, i, "W needs its I first"));
    }
    if (!c->comms) return PP_OK;
    /* sends and receives between stages on different devices */
    if (st + 1 < c->S && s->stage_device[st + 1] != s->stage_device[st]) {
        if (!has(c, P_SA, st, i)) return missing(c, st, PP_ACT_SEND_ACT, i, P_F, "the next "
                                                 "stage is on another device");
        PP_TRY(order(c, P_F, st, i, P_SA, st, i, "a send follows what it sends"));
        if (!s->forward_only) {
            if (!has(c, P_RG, st, i)) return missing(c, st, PP_ACT_RECV_GRAD, i, back,
                                                     "the next stage is on another device");
            PP_TRY(order(c, P_RG, st, i, has(c, P_B, st, i) ? P_B : P_I, st, i,
                         "the backward needs the received gradient"));
        }
    }
    if (st > 0 && s->stage_device[st - 1] != s->stage_device[st]) {
        if (!has(c, P_RA, st, i)) return missing(c, st, PP_ACT_RECV_ACT, i, P_F, "the "
                                                 "previous stage is on another device");
        PP_TRY(order(c, P_RA, st, i, P_F, st, i, "the forward needs the received activation"));
        if (!s->forward_only) {
            if (!has(c, P_SG, st, i)) return missing(c, st, PP_ACT_SEND_GRAD, i, back,
                                                     "the previous stage is on another device");
            PP_TRY(order(c, has(c, P_B, st, i) ? P_B : P_I, st, i, P_SG, st, i,
                         "a send follows what it sends"));
        }
    }
    return PP_OK;
}

/* ---- pass 3: blocking run ---------------------------------------------------- */

/* What action (device d, position p) waits for, as a table index, or -1 when
 * it can run now. done[] marks the actions that ran. */
static int waits_for(const check_state *c, const unsigned char *done, int d, int p)
{
    const pp_schedule *s = c->s;
    pp_action a = s->actions[d][p];
    int st = a.stage, i = a.mb, k = -1;
    switch (a.kind) {
    case PP_ACT_F:
        if (st == 0) return -1;
        if (s->stage_device[st - 1] != d && c->comms) return -1; /* its receive ran */
        k = idx(c, P_F, st - 1, i);
        break;
    case PP_ACT_B:
    case PP_ACT_I:
        k = idx(c, P_F, st, i);
        if (!done[k]) break;
        if (st == c->S - 1 || (s->stage_device[st + 1] != d && c->comms)) return -1;
        k = idx(c, has(c, P_B, st + 1, i) ? P_B : P_I, st + 1, i);
        break;
    case PP_ACT_W: k = idx(c, P_I, st, i); break;
    case PP_ACT_RECV_ACT: k = idx(c, P_SA, st - 1, i); break;
    case PP_ACT_RECV_GRAD: k = idx(c, P_SG, st + 1, i); break;
    case PP_ACT_SEND_ACT: k = idx(c, P_F, st, i); break;
    case PP_ACT_SEND_GRAD: k = idx(c, has(c, P_B, st, i) ? P_B : P_I, st, i); break;
    default: return -1;
    }
    return done[k] ? -1 : k;
}

/* The kind, stage and micro-batch of table index k. */
static pp_action action_at(const check_state *c, int k)
{
    int i = k % c->m, st = (k / c->m) % c->S, slot = k / (c->m * c->S);
    return (pp_action){.kind = slot_kind[slot], .mb = i, .stage = st};
}

static pp_status run_blocking(check_state *c)
{
    const pp_schedule *s = c->s;
    size_t n = (size_t)P_N * c->S * c->m;
    unsigned char *done = calloc(n, 1);
    int *pc = calloc((size_t)c->D, sizeof *pc);
    if (!done || !pc) {
        free(done);
        free(pc);
        return pp_error_set(c->err, PP_ERR_OOM, "out of host memory (schedule check)");
    }
    bool progress = true;
    while (progress) {
        progress = false;
        for (int d = 0; d < c->D; d++)
            while (pc[d] < s->n_actions[d] && waits_for(c, done, d, pc[d]) < 0) {
                pp_action a = s->actions[d][pc[d]];
                int slot = slot_of(a.kind);
                if (slot >= 0) done[idx(c, slot, a.stage, a.mb)] = 1;
                pc[d]++;
                progress = true;
            }
    }
    pp_status st = PP_OK;
    char x[48], y[48], r[64];
    /* a device waiting for an action later in its own list: a cycle */
    for (int d = 0; d < c->D && st == PP_OK; d++) {
        if (pc[d] >= s->n_actions[d]) continue;
        int k = waits_for(c, done, d, pc[d]);
        if (c->dev_of[k] != d) continue;
        st = fail(c, d, pc[d], "cycle: %s needs %s, which comes later on device %d (at %s)",
                  pp_action_format(s->actions[d][pc[d]], x, sizeof x),
                  pp_action_format(action_at(c, k), y, sizeof y), d,
                  ref(c, d, d, c->pos[k], r, sizeof r));
    }
    /* else every waiting device, each waiting for another's action */
    for (int d = 0; d < c->D && st == PP_OK; d++) {
        if (pc[d] >= s->n_actions[d]) continue;
        char text[PP_ERROR_MSG_MAX] = "deadlock with blocking receives:";
        size_t len = strlen(text);
        for (int e = 0; e < c->D && len < sizeof text; e++) {
            if (pc[e] >= s->n_actions[e]) continue;
            int k = waits_for(c, done, e, pc[e]);
            len += (size_t)snprintf(text + len, sizeof text - len, " device %d waits at %s for "
                                    "%s of device %d;", e,
                                    pp_action_format(s->actions[e][pc[e]], x, sizeof x),
                                    pp_action_format(action_at(c, k), y, sizeof y),
                                    c->dev_of[k]);
        }
        if (len < sizeof text && text[len - 1] == ';') text[len - 1] = '\0';
        st = fail(c, d, pc[d], "%s", text);
    }
    free(done);
    free(pc);
    return st;
}

pp_status pp_schedule_validate(const pp_schedule *s, pp_error *err)
{
    if (!s || s->stages < 1 || s->micro_batches < 1 || s->devices < 1 || s->devices > s->stages ||
        !s->actions || !s->n_actions || !s->stage_device)
        return pp_error_set(err, PP_ERR_INVALID, "schedule: empty or not initialised");
    check_state c = {.s = s, .err = err, .S = s->stages, .D = s->devices, .m = s->micro_batches,
                     .comms = pp_schedule_has_comms(s)};
    for (int k = 0; k < c.S; k++)
        if (s->stage_device[k] < 0 || s->stage_device[k] >= c.D)
            return pp_error_set(err, PP_ERR_INVALID, "schedule: stage %d on device %d of %d", k,
                                s->stage_device[k], c.D);
    size_t n = (size_t)P_N * c.S * c.m;
    c.dev_of = malloc(n * sizeof *c.dev_of);
    c.pos = malloc(n * sizeof *c.pos);
    c.step = malloc((size_t)c.S * sizeof *c.step);
    c.last_bw = malloc((size_t)c.S * sizeof *c.last_bw);
    pp_status st = PP_OK;
    if (!c.dev_of || !c.pos || !c.step || !c.last_bw)
        st = pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule check)");
    if (st == PP_OK) {
        for (size_t k = 0; k < n; k++) c.dev_of[k] = -1;
        for (int k = 0; k < c.S; k++) c.step[k] = c.last_bw[k] = -1;
    }
    for (int d = 0; d < c.D && st == PP_OK; d++)
        for (int p = 0; p < s->n_actions[d] && st == PP_OK; p++) st = check_action(&c, d, p);
    for (int k = 0; k < c.S && st == PP_OK; k++)
        for (int i = 0; i < c.m && st == PP_OK; i++) st = check_mb(&c, k, i);
    for (int k = 0; k < c.S && st == PP_OK; k++) {
        if (c.step[k] < 0 || c.step[k] > c.last_bw[k]) continue;
        int d = s->stage_device[k];
        char b[48], r[64];
        st = fail(&c, d, c.step[k], "%dSTEP before %s (at %s): the step follows the stage's "
                  "last backward", k, pp_action_format(s->actions[d][c.last_bw[k]], b, sizeof b),
                  ref(&c, d, d, c.last_bw[k], r, sizeof r));
    }
    if (st == PP_OK) st = run_blocking(&c);
    free(c.dev_of);
    free(c.pos);
    free(c.step);
    free(c.last_bw);
    return st;
}
