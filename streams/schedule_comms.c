/*
 * schedule_comms.c - the lowering pass of schedule.h: a compute-only
 * schedule gains its sends and receives. Each compute action that needs data
 * from a stage on another device gets the receive right before it, and each
 * that produces data for one gets the send right after it; an OVERLAP_F_B
 * composite keeps its halves side by side, its receives before both and its
 * sends after both. Receives placed this late block exactly when the action
 * itself would wait, so the pass adds no wait and no deadlock.
 */
#include "streams/schedule.h"

#include <stdlib.h>
#include <string.h>

/* Whether stages a and b (a neighbour, may be out of range) are on different devices. */
static bool cross(const pp_schedule *s, int a, int b)
{
    return b >= 0 && b < s->stages && s->stage_device[a] != s->stage_device[b];
}

/* The receive (before) or send (after) that compute action a needs, if any. */
static bool comm_of(const pp_schedule *s, const pp_action *a, bool before, pp_action *out)
{
    int st = a->stage;
    pp_action c = {.mb = a->mb, .stage = st, .cell = a->cell};
    switch (a->kind) {
    case PP_ACT_F:
        if (before && cross(s, st, st - 1)) c.kind = PP_ACT_RECV_ACT;
        else if (!before && cross(s, st, st + 1)) c.kind = PP_ACT_SEND_ACT;
        else return false;
        break;
    case PP_ACT_B:
    case PP_ACT_I:
        if (s->forward_only) return false;
        if (before && cross(s, st, st + 1)) c.kind = PP_ACT_RECV_GRAD;
        else if (!before && cross(s, st, st - 1)) c.kind = PP_ACT_SEND_GRAD;
        else return false;
        break;
    default: return false;
    }
    *out = c;
    return true;
}

pp_status pp_schedule_add_comms(pp_schedule *s, pp_error *err)
{
    if (pp_schedule_has_comms(s)) return PP_OK;
    for (int d = 0; d < s->devices; d++) {
        int n = s->n_actions[d];
        pp_action *old = s->actions[d];
        /* at most a receive and a send per action */
        pp_action *list = malloc((size_t)(3 * n + 1) * sizeof *list);
        if (!list) return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
        int k = 0;
        for (int p = 0; p < n;) {
            int len = old[p].overlap == PP_OVERLAP_FIRST && p + 1 < n ? 2 : 1;
            pp_action c;
            for (int q = p; q < p + len; q++)
                if (comm_of(s, &old[q], true, &c)) list[k++] = c;
            for (int q = p; q < p + len; q++) list[k++] = old[q];
            for (int q = p; q < p + len; q++)
                if (comm_of(s, &old[q], false, &c)) list[k++] = c;
            p += len;
        }
        free(old);
        s->actions[d] = list;
        s->n_actions[d] = k;
        s->cap_actions[d] = 3 * n + 1;
    }
    return PP_OK;
}
