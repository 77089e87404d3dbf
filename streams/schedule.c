/*
 * schedule.c - schedule lists: generators (GPipe, 1F1B), validator with a
 * blocking-receive simulation, printable form.
 */
#include "streams/schedule.h"

#include "runtime/core/batch_split.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_short[] = {
    [PP_ACT_F] = "F",
    [PP_ACT_B] = "B",
    [PP_ACT_SEND_ACT] = "send_act",
    [PP_ACT_RECV_ACT] = "recv_act",
    [PP_ACT_SEND_GRAD] = "send_grad",
    [PP_ACT_RECV_GRAD] = "recv_grad",
    [PP_ACT_STEP] = "STEP",
};

const char *pp_schedule_kind_name(pp_schedule_kind k)
{
    return k == PP_SCHEDULE_1F1B ? "1f1b" : k == PP_SCHEDULE_FORWARD ? "forward" : "gpipe";
}

pp_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *out, pp_error *err)
{
    if (name && strcmp(name, "gpipe") == 0) {
        *out = PP_SCHEDULE_GPIPE;
        return PP_OK;
    }
    if (name && strcmp(name, "1f1b") == 0) {
        *out = PP_SCHEDULE_1F1B;
        return PP_OK;
    }
    if (name && strcmp(name, "forward") == 0) {
        *out = PP_SCHEDULE_FORWARD;
        return PP_OK;
    }
    return pp_error_set(err, PP_ERR_INPUT,
                        "unknown schedule '%s': expected gpipe, 1f1b or forward",
                        name ? name : "");
}

pp_status pp_microbatch_sizes(int batch, int split_size, int *sizes, int cap, int *m,
                              pp_error *err)
{
    if (batch <= 0 || split_size <= 0)
        return pp_error_set(err, PP_ERR_INPUT,
                            "batch size %d and split size %d must be positive", batch,
                            split_size);
    int count = pp_batch_split_count(batch, split_size, 0);
    if (count > cap)
        return pp_error_set(err, PP_ERR_INVALID, "%d micro-batches do not fit in %d entries",
                            count, cap);
    pp_batch_split_sizes(batch, split_size, 0, sizes);
    *m = count;
    return PP_OK;
}

void pp_schedule_free(pp_schedule *s)
{
    if (!s) return;
    if (s->actions)
        for (int i = 0; i < s->stages; i++) free(s->actions[i]);
    free(s->actions);
    free(s->n_actions);
    free(s->cap_actions);
    free(s->mb_sizes);
    memset(s, 0, sizeof *s);
}

pp_status pp_schedule_init(pp_schedule *s, const char *name, int stages, int micro_batches,
                           const int *mb_sizes, pp_error *err)
{
    memset(s, 0, sizeof *s);
    if (stages < 1 || micro_batches < 1)
        return pp_error_set(err, PP_ERR_INVALID,
                            "schedule: %d stages and %d micro-batches (need at least 1 each)",
                            stages, micro_batches);
    snprintf(s->name, sizeof s->name, "%s", name ? name : "custom");
    s->stages = stages;
    s->micro_batches = micro_batches;
    s->mb_sizes = malloc((size_t)micro_batches * sizeof *s->mb_sizes);
    s->n_actions = calloc((size_t)stages, sizeof *s->n_actions);
    s->cap_actions = calloc((size_t)stages, sizeof *s->cap_actions);
    s->actions = calloc((size_t)stages, sizeof *s->actions);
    if (!s->mb_sizes || !s->n_actions || !s->cap_actions || !s->actions) {
        pp_schedule_free(s);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    }
    for (int i = 0; i < micro_batches; i++) {
        s->mb_sizes[i] = mb_sizes ? mb_sizes[i] : 1;
        if (s->mb_sizes[i] < 1) {
            int bad = s->mb_sizes[i];
            pp_schedule_free(s);
            return pp_error_set(err, PP_ERR_INVALID, "schedule: micro-batch %d has size %d", i,
                                bad);
        }
    }
    return PP_OK;
}

pp_status pp_schedule_push(pp_schedule *s, int stage, pp_action_kind kind, int mb, pp_error *err)
{
    if (stage < 0 || stage >= s->stages)
        return pp_error_set(err, PP_ERR_INVALID, "schedule: stage %d out of range [0, %d)",
                            stage, s->stages);
    if (s->n_actions[stage] == s->cap_actions[stage]) {
        int ncap = s->cap_actions[stage] ? 2 * s->cap_actions[stage] : 16;
        pp_action *a = realloc(s->actions[stage], (size_t)ncap * sizeof *a);
        if (!a) return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
        s->actions[stage] = a;
        s->cap_actions[stage] = ncap;
    }
    s->actions[stage][s->n_actions[stage]++] = (pp_action){kind, kind == PP_ACT_STEP ? -1 : mb};
    return PP_OK;
}

static pp_status push_forward(pp_schedule *s, int st, int i, pp_error *err)
{
    if (st > 0) PP_TRY(pp_schedule_push(s, st, PP_ACT_RECV_ACT, i, err));
    PP_TRY(pp_schedule_push(s, st, PP_ACT_F, i, err));
    if (st < s->stages - 1) PP_TRY(pp_schedule_push(s, st, PP_ACT_SEND_ACT, i, err));
    return PP_OK;
}

static pp_status push_backward(pp_schedule *s, int st, int i, pp_error *err)
{
    if (st < s->stages - 1) PP_TRY(pp_schedule_push(s, st, PP_ACT_RECV_GRAD, i, err));
    PP_TRY(pp_schedule_push(s, st, PP_ACT_B, i, err));
    if (st > 0) PP_TRY(pp_schedule_push(s, st, PP_ACT_SEND_GRAD, i, err));
    return PP_OK;
}

static pp_status build_lists(pp_schedule *s, pp_schedule_kind kind, pp_error *err)
{
    int S = s->stages, m = s->micro_batches;
    s->forward_only = kind == PP_SCHEDULE_FORWARD;
    for (int st = 0; st < S; st++) {
        if (kind == PP_SCHEDULE_FORWARD) {
            for (int i = 0; i < m; i++) PP_TRY(push_forward(s, st, i, err));
            continue; /* no backward, no STEP */
        }
        if (kind == PP_SCHEDULE_GPIPE) {
            for (int i = 0; i < m; i++) PP_TRY(push_forward(s, st, i, err));
            for (int i = 0; i < m; i++) PP_TRY(push_backward(s, st, i, err));
        } else {
            int warm = S - st - 1 < m ? S - st - 1 : m;
            for (int i = 0; i < warm; i++) PP_TRY(push_forward(s, st, i, err));
            int steady = m - warm;
            for (int j = 0; j < steady; j++) {
                PP_TRY(push_forward(s, st, warm + j, err));
                PP_TRY(push_backward(s, st, j, err));
            }
            for (int j = steady; j < m; j++) PP_TRY(push_backward(s, st, j, err));
        }
        PP_TRY(pp_schedule_push(s, st, PP_ACT_STEP, -1, err));
    }
    return PP_OK;
}

pp_status pp_schedule_build(pp_schedule *s, pp_schedule_kind kind, int stages,
                            int micro_batches, const int *mb_sizes, pp_error *err)
{
    PP_TRY(pp_schedule_init(s, pp_schedule_kind_name(kind), stages, micro_batches, mb_sizes,
                            err));
    pp_status st = build_lists(s, kind, err);
    if (st != PP_OK) pp_schedule_free(s);
    return st;
}

const char *pp_action_format(pp_action a, char *buf, size_t n)
{
    const char *k = (unsigned)a.kind <= PP_ACT_STEP ? kind_short[a.kind] : "?";
    if (a.kind == PP_ACT_STEP) snprintf(buf, n, "%s", k);
    else snprintf(buf, n, "%s%d", k, a.mb);
    return buf;
}

/* ---- validation ------------------------------------------------------------ */

enum { POS_F, POS_B, POS_SA, POS_RA, POS_SG, POS_RG, POS_KINDS };

static int pos_index(pp_action_kind k)
{
    switch (k) {
    case PP_ACT_F: return POS_F;
    case PP_ACT_B: return POS_B;
    case PP_ACT_SEND_ACT: return POS_SA;
    case PP_ACT_RECV_ACT: return POS_RA;
    case PP_ACT_SEND_GRAD: return POS_SG;
    case PP_ACT_RECV_GRAD: return POS_RG;
    default: return -1;
    }
}

/* Checks one stage's list; pos is a scratch array of POS_KINDS * m ints. */
static pp_status check_stage(const pp_schedule *s, int st, int *pos, pp_error *err)
{
    int S = s->stages, m = s->micro_batches, n = s->n_actions[st];
    const pp_action *a = s->actions[st];
    char b1[32], b2[32];
    for (int i = 0; i < POS_KINDS * m; i++) pos[i] = -1;
    int step_pos = -1, next_b = 0;
    for (int p = 0; p < n; p++) {
        if ((unsigned)a[p].kind > PP_ACT_STEP)
            return pp_error_set(err, PP_ERR_INVALID, "stage %d: unknown action kind %d at "
                                "position %d", st, (int)a[p].kind, p);
        if (s->forward_only && a[p].kind != PP_ACT_F && a[p].kind != PP_ACT_SEND_ACT &&
            a[p].kind != PP_ACT_RECV_ACT)
            return pp_error_set(err, PP_ERR_INVALID,
                                "stage %d: %s at position %d in a forward-only schedule", st,
                                pp_action_format(a[p], b1, sizeof b1), p);
        if (a[p].kind == PP_ACT_STEP) {
            if (step_pos >= 0)
                return pp_error_set(err, PP_ERR_INVALID, "stage %d: STEP twice", st);
            step_pos = p;
            continue;
        }
        int mb = a[p].mb;
        if (mb < 0 || mb >= m)
            return pp_error_set(err, PP_ERR_INVALID,
                                "stage %d: %s at position %d: micro-batch out of range [0, %d)",
                                st, pp_action_format(a[p], b1, sizeof b1), p, m);
        if ((a[p].kind == PP_ACT_RECV_ACT || a[p].kind == PP_ACT_SEND_GRAD) && st == 0)
            return pp_error_set(err, PP_ERR_INVALID, "stage 0: %s but the first stage has no "
                                "previous stage", pp_action_format(a[p], b1, sizeof b1));
        if ((a[p].kind == PP_ACT_SEND_ACT || a[p].kind == PP_ACT_RECV_GRAD) && st == S - 1)
            return pp_error_set(err, PP_ERR_INVALID, "stage %d: %s but the last stage has no "
                                "next stage", st, pp_action_format(a[p], b1, sizeof b1));
        int *slot = &pos[pos_index(a[p].kind) * m + mb];
        if (*slot >= 0)
            return pp_error_set(err, PP_ERR_INVALID, "stage %d: %s twice (positions %d and %d)",
                                st, pp_action_format(a[p], b1, sizeof b1), *slot, p);
        *slot = p;
        if (a[p].kind == PP_ACT_B) {
            if (mb != next_b)
                return pp_error_set(err, PP_ERR_INVALID,
                                    "stage %d: B%d at position %d but B%d comes first "
                                    "(gradients accumulate in micro-batch order)",
                                    st, mb, p, next_b);
            next_b++;
        }
    }
    if (step_pos < 0 && !s->forward_only)
        return pp_error_set(err, PP_ERR_INVALID, "stage %d: no STEP", st);
    if (step_pos >= 0 && step_pos != n - 1)
        return pp_error_set(err, PP_ERR_INVALID, "stage %d: STEP at position %d is not last",
                            st, step_pos);
    for (int i = 0; i < m; i++) {
        int f = pos[POS_F * m + i], b = pos[POS_B * m + i];
        if (f < 0) return pp_error_set(err, PP_ERR_INVALID, "stage %d: no F%d", st, i);
        if (s->forward_only) b = n; /* no backward: only the activation rules apply */
        else if (b < 0) return pp_error_set(err, PP_ERR_INVALID, "stage %d: no B%d", st, i);
        if (b < f)
            return pp_error_set(err, PP_ERR_INVALID, "stage %d: B%d at position %d before F%d",
                                st, i, b, i);
        static const struct {
            int k;
            pp_action_kind kind;
            int before;   /* 1: must come before its partner, 0: after */
            int partner;  /* POS_F or POS_B */
            int needs;    /* 0: stage > 0, 1: stage < S-1 */
        } rules[] = {
            {POS_RA, PP_ACT_RECV_ACT, 1, POS_F, 0},
            {POS_SA, PP_ACT_SEND_ACT, 0, POS_F, 1},
            {POS_RG, PP_ACT_RECV_GRAD, 1, POS_B, 1},
            {POS_SG, PP_ACT_SEND_GRAD, 0, POS_B, 0},
        };
        for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
            bool applies = rules[r].needs == 0 ? st > 0 : st < S - 1;
            if (!applies || (s->forward_only && rules[r].partner == POS_B)) continue;
            int q = pos[rules[r].k * m + i], partner = pos[rules[r].partner * m + i];
            pp_action act = {rules[r].kind, i};
            pp_action pa = {rules[r].partner == POS_F ? PP_ACT_F : PP_ACT_B, i};
            if (q < 0)
                return pp_error_set(err, PP_ERR_INVALID, "stage %d: no %s", st,
                                    pp_action_format(act, b1, sizeof b1));
            if (rules[r].before ? q > partner : q < partner)
                return pp_error_set(err, PP_ERR_INVALID, "stage %d: %s at position %d %s %s",
                                    st, pp_action_format(act, b1, sizeof b1), q,
                                    rules[r].before ? "after" : "before",
                                    pp_action_format(pa, b2, sizeof b2));
        }
    }
    return PP_OK;
}

/* Runs the lists with non-blocking sends and blocking receives. */
static pp_status check_deadlock(const pp_schedule *s, pp_error *err)
{
    int S = s->stages, m = s->micro_batches;
    int *pc = calloc((size_t)S, sizeof *pc);
    unsigned char *sent_act = calloc((size_t)S * (size_t)m, 1);  /* [s*m+i]: s sent act i */
    unsigned char *sent_grad = calloc((size_t)S * (size_t)m, 1); /* [s*m+i]: s sent grad i */
    if (!pc || !sent_act || !sent_grad) {
        free(pc);
        free(sent_act);
        free(sent_grad);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule check)");
    }
    for (;;) {
        bool progress = false, all_done = true;
        for (int st = 0; st < S; st++) {
            while (pc[st] < s->n_actions[st]) {
                pp_action a = s->actions[st][pc[st]];
                if (a.kind == PP_ACT_RECV_ACT && !sent_act[(st - 1) * m + a.mb]) break;
                if (a.kind == PP_ACT_RECV_GRAD && !sent_grad[(st + 1) * m + a.mb]) break;
                if (a.kind == PP_ACT_SEND_ACT) sent_act[st * m + a.mb] = 1;
                if (a.kind == PP_ACT_SEND_GRAD) sent_grad[st * m + a.mb] = 1;
                pc[st]++;
                progress = true;
            }
            if (pc[st] < s->n_actions[st]) all_done = false;
        }
        if (all_done || !progress) break;
    }
    pp_status st = PP_OK;
    bool first = true;
    for (int i = 0; i < S; i++) {
        if (pc[i] >= s->n_actions[i]) continue;
        if (st == PP_OK) {
            st = pp_error_set(err, PP_ERR_INVALID, "deadlock:");
        }
        char b[32];
        size_t len = strlen(err ? err->msg : "");
        if (err && len < sizeof err->msg)
            snprintf(err->msg + len, sizeof err->msg - len, "%s stage %d blocked at %s (position %d)",
                     first ? "" : ",", i, pp_action_format(s->actions[i][pc[i]], b, sizeof b),
                     pc[i]);
        first = false;
    }
    free(pc);
    free(sent_act);
    free(sent_grad);
    return st;
}

pp_status pp_schedule_validate(const pp_schedule *s, pp_error *err)
{
    if (!s || s->stages < 1 || s->micro_batches < 1 || !s->actions || !s->n_actions)
        return pp_error_set(err, PP_ERR_INVALID, "schedule: empty or not initialised");
    int *pos = malloc((size_t)POS_KINDS * (size_t)s->micro_batches * sizeof *pos);
    if (!pos) return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule check)");
    pp_status st = PP_OK;
    for (int i = 0; i < s->stages && st == PP_OK; i++) st = check_stage(s, i, pos, err);
    free(pos);
    if (st != PP_OK) return st;
    return check_deadlock(s, err);
}

/* ---- printing --------------------------------------------------------------- */

typedef struct out_buf {
    char *buf;
    size_t n, len;
} out_buf;

static void out_printf(out_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void out_printf(out_buf *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *dst = o->len < o->n ? o->buf + o->len : NULL;
    size_t room = o->len < o->n ? o->n - o->len : 0;
    int k = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (k > 0) o->len += (size_t)k;
}

size_t pp_schedule_format(const pp_schedule *s, bool with_comm, char *buf, size_t n)
{
    out_buf o = {buf, buf ? n : 0, 0};
    if (buf && n) buf[0] = '\0';
    for (int st = 0; st < s->stages; st++) {
        out_printf(&o, "stage %d:", st);
        for (int p = 0; p < s->n_actions[st]; p++) {
            pp_action a = s->actions[st][p];
            if (!with_comm && a.kind != PP_ACT_F && a.kind != PP_ACT_B && a.kind != PP_ACT_STEP)
                continue;
            char b[32];
            out_printf(&o, " %s", pp_action_format(a, b, sizeof b));
        }
        out_printf(&o, "\n");
    }
    return o.len;
}
