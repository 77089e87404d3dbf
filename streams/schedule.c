/*
 * schedule.c - the schedule as data (schedule.h): shapes and placements,
 * building a schedule action by action, copies, the in-flight count, and the
 * printable forms of actions and lists. Validation is in schedule_check.c,
 * the CSV grammar in schedule_csv.c, the communication pass in
 * schedule_comms.c, the generators in schedules/.
 */
#include "streams/schedule.h"

#include "runtime/core/batch_split.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_token[PP_ACT_KINDS] = {
    [PP_ACT_F] = "F",
    [PP_ACT_B] = "B",
    [PP_ACT_SEND_ACT] = "SEND_F",
    [PP_ACT_RECV_ACT] = "RECV_F",
    [PP_ACT_SEND_GRAD] = "SEND_B",
    [PP_ACT_RECV_GRAD] = "RECV_B",
    [PP_ACT_STEP] = "STEP",
    [PP_ACT_I] = "I",
    [PP_ACT_W] = "W",
    [PP_ACT_UNSHARD] = "UNSHARD",
    [PP_ACT_RESHARD] = "RESHARD",
};

const char *pp_action_format(pp_action a, char *buf, size_t n)
{
    const char *k = (unsigned)a.kind < PP_ACT_KINDS ? kind_token[a.kind] : "?";
    if (a.kind == PP_ACT_STEP || a.kind == PP_ACT_UNSHARD || a.kind == PP_ACT_RESHARD)
        snprintf(buf, n, "%d%s", a.stage, k);
    else
        snprintf(buf, n, "%d%s%d", a.stage, k, a.mb);
    return buf;
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

pp_status pp_schedule_place(pp_schedule_placement placement, int stages, int devices,
                            int *stage_device, pp_error *err)
{
    if (stages < 1 || devices < 1 || devices > stages)
        return pp_error_set(err, PP_ERR_INVALID, "placement: %d stages on %d devices", stages,
                            devices);
    switch (placement) {
    case PP_PLACEMENT_ANY:
    case PP_PLACEMENT_ONE:
        if (stages != devices)
            return pp_error_set(err, PP_ERR_INVALID, "one stage per device: %d stages on %d "
                                "devices", stages, devices);
        for (int s = 0; s < stages; s++) stage_device[s] = s;
        return PP_OK;
    case PP_PLACEMENT_LOOP:
        if (stages % devices)
            return pp_error_set(err, PP_ERR_INVALID, "looped stages: %d stages are no multiple "
                                "of %d devices", stages, devices);
        for (int s = 0; s < stages; s++) stage_device[s] = s % devices;
        return PP_OK;
    case PP_PLACEMENT_V:
        if (stages != 2 * devices)
            return pp_error_set(err, PP_ERR_INVALID, "a V needs two stages per device: %d stages "
                                "on %d devices", stages, devices);
        for (int s = 0; s < stages; s++) stage_device[s] = s < devices ? s : stages - 1 - s;
        return PP_OK;
    }
    return pp_error_set(err, PP_ERR_INVALID, "unknown placement %d", (int)placement);
}

void pp_schedule_free(pp_schedule *s)
{
    if (!s) return;
    if (s->actions)
        for (int d = 0; d < s->devices; d++) free(s->actions[d]);
    free(s->actions);
    free(s->n_actions);
    free(s->cap_actions);
    free(s->mb_sizes);
    free(s->stage_device);
    free(s->source);
    memset(s, 0, sizeof *s);
}

pp_status pp_schedule_init_shape(pp_schedule *s, const char *name, const pp_schedule_shape *shape,
                                 pp_error *err)
{
    memset(s, 0, sizeof *s);
    int S = shape->stages, D = shape->devices, m = shape->micro_batches;
    if (S < 1 || m < 1 || D < 1 || D > S)
        return pp_error_set(err, PP_ERR_INVALID,
                            "schedule: %d stages on %d devices and %d micro-batches (need at "
                            "least 1 each, and no more devices than stages)",
                            S, D, m);
    if (!shape->stage_device && D != S)
        return pp_error_set(err, PP_ERR_INVALID, "schedule: %d stages on %d devices need a "
                            "placement", S, D);
    snprintf(s->name, sizeof s->name, "%s", name ? name : "custom");
    s->stages = S;
    s->devices = D;
    s->micro_batches = m;
    s->mb_sizes = malloc((size_t)m * sizeof *s->mb_sizes);
    s->stage_device = malloc((size_t)S * sizeof *s->stage_device);
    s->n_actions = calloc((size_t)D, sizeof *s->n_actions);
    s->cap_actions = calloc((size_t)D, sizeof *s->cap_actions);
    s->actions = calloc((size_t)D, sizeof *s->actions);
    if (!s->mb_sizes || !s->stage_device || !s->n_actions || !s->cap_actions || !s->actions) {
        pp_schedule_free(s);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    }
    for (int i = 0; i < m; i++) {
        s->mb_sizes[i] = shape->mb_sizes ? shape->mb_sizes[i] : 1;
        if (s->mb_sizes[i] < 1) {
            int bad = s->mb_sizes[i];
            pp_schedule_free(s);
            return pp_error_set(err, PP_ERR_INVALID, "schedule: micro-batch %d has size %d", i,
                                bad);
        }
    }
    /* every device holds a stage: a device without one would have no list to run */
    unsigned char *used = calloc((size_t)D, 1);
    if (!used) {
        pp_schedule_free(s);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    }
    pp_status st = PP_OK;
    for (int k = 0; k < S && st == PP_OK; k++) {
        int d = shape->stage_device ? shape->stage_device[k] : k;
        if (d < 0 || d >= D)
            st = pp_error_set(err, PP_ERR_INVALID, "schedule: stage %d on device %d of %d", k,
                              d, D);
        else
            used[d] = 1, s->stage_device[k] = d;
    }
    for (int d = 0; d < D && st == PP_OK; d++)
        if (!used[d]) st = pp_error_set(err, PP_ERR_INVALID, "schedule: device %d holds no stage", d);
    free(used);
    if (st != PP_OK) pp_schedule_free(s);
    return st;
}

pp_status pp_schedule_init(pp_schedule *s, const char *name, int stages, int micro_batches,
                           const int *mb_sizes, pp_error *err)
{
    pp_schedule_shape shape = {stages, stages, micro_batches, NULL, mb_sizes};
    return pp_schedule_init_shape(s, name, &shape, err);
}

pp_status pp_schedule_push_action(pp_schedule *s, int device, const pp_action *a, pp_error *err)
{
    if (device < 0 || device >= s->devices)
        return pp_error_set(err, PP_ERR_INVALID, "schedule: device %d out of range [0, %d)",
                            device, s->devices);
    if (s->n_actions[device] == s->cap_actions[device]) {
        int ncap = s->cap_actions[device] ? 2 * s->cap_actions[device] : 16;
        pp_action *grown = realloc(s->actions[device], (size_t)ncap * sizeof *grown);
        if (!grown) return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
        s->actions[device] = grown;
        s->cap_actions[device] = ncap;
    }
    s->actions[device][s->n_actions[device]++] = *a;
    return PP_OK;
}

static bool has_mb(pp_action_kind k)
{
    return k != PP_ACT_STEP && k != PP_ACT_UNSHARD && k != PP_ACT_RESHARD;
}

pp_status pp_schedule_push(pp_schedule *s, int stage, pp_action_kind kind, int mb, pp_error *err)
{
    if (stage < 0 || stage >= s->stages)
        return pp_error_set(err, PP_ERR_INVALID, "schedule: stage %d out of range [0, %d)",
                            stage, s->stages);
    pp_action a = {.kind = kind, .mb = has_mb(kind) ? mb : -1, .stage = stage};
    return pp_schedule_push_action(s, s->stage_device[stage], &a, err);
}

pp_status pp_schedule_push_overlap(pp_schedule *s, int stage1, pp_action_kind kind1, int mb1,
                                   int stage2, pp_action_kind kind2, int mb2, pp_error *err)
{
    if (stage1 < 0 || stage1 >= s->stages || stage2 < 0 || stage2 >= s->stages ||
        s->stage_device[stage1] != s->stage_device[stage2])
        return pp_error_set(err, PP_ERR_INVALID, "schedule: an overlap of stages %d and %d, "
                            "which are not on one device", stage1, stage2);
    int d = s->stage_device[stage1];
    pp_action a = {.kind = kind1, .mb = mb1, .stage = stage1, .overlap = PP_OVERLAP_FIRST};
    pp_action b = {.kind = kind2, .mb = mb2, .stage = stage2, .overlap = PP_OVERLAP_SECOND};
    PP_TRY(pp_schedule_push_action(s, d, &a, err));
    return pp_schedule_push_action(s, d, &b, err);
}

pp_status pp_schedule_copy(pp_schedule *dst, const pp_schedule *src, pp_error *err)
{
    pp_schedule_shape shape = {src->stages, src->devices, src->micro_batches, src->stage_device,
                               src->mb_sizes};
    PP_TRY(pp_schedule_init_shape(dst, src->name, &shape, err));
    dst->forward_only = src->forward_only;
    memcpy(dst->note, src->note, sizeof dst->note);
    if (src->source && !(dst->source = strdup(src->source))) {
        pp_schedule_free(dst);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    }
    for (int d = 0; d < src->devices; d++)
        for (int k = 0; k < src->n_actions[d]; k++) {
            pp_status st = pp_schedule_push_action(dst, d, &src->actions[d][k], err);
            if (st != PP_OK) {
                pp_schedule_free(dst);
                return st;
            }
        }
    return PP_OK;
}

pp_status pp_schedule_truncate(const pp_schedule *src, int m, const int *mb_sizes,
                               pp_schedule *dst, pp_error *err)
{
    if (m < 1 || m > src->micro_batches)
        return pp_error_set(err, PP_ERR_INVALID, "schedule %s: %d of its %d micro-batches",
                            src->name, m, src->micro_batches);
    pp_schedule_shape shape = {src->stages, src->devices, m, src->stage_device, mb_sizes};
    PP_TRY(pp_schedule_init_shape(dst, src->name, &shape, err));
    dst->forward_only = src->forward_only;
    memcpy(dst->note, src->note, sizeof dst->note);
    pp_status st = PP_OK;
    if (src->source && !(dst->source = strdup(src->source)))
        st = pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    for (int d = 0; d < src->devices && st == PP_OK; d++)
        for (int p = 0; p < src->n_actions[d] && st == PP_OK; p++) {
            pp_action a = src->actions[d][p];
            if (a.mb >= m) continue;
            if (a.overlap) { /* the composite stays only with both halves */
                int q = a.overlap == PP_OVERLAP_FIRST ? p + 1 : p - 1;
                if (q >= 0 && q < src->n_actions[d] && src->actions[d][q].mb >= m) a.overlap = 0;
            }
            st = pp_schedule_push_action(dst, d, &a, err);
        }
    if (st != PP_OK) pp_schedule_free(dst);
    return st;
}

bool pp_schedule_has_comms(const pp_schedule *s)
{
    for (int d = 0; d < s->devices; d++)
        for (int k = 0; k < s->n_actions[d]; k++) {
            pp_action_kind kind = s->actions[d][k].kind;
            if (kind == PP_ACT_SEND_ACT || kind == PP_ACT_RECV_ACT || kind == PP_ACT_SEND_GRAD ||
                kind == PP_ACT_RECV_GRAD)
                return true;
        }
    return false;
}

void pp_schedule_in_flight(const pp_schedule *s, int *peak)
{
    int S = s->stages;
    for (int k = 0; k < S; k++) peak[k] = 0;
    /* B frees a micro-batch; with the backward split, its W does */
    for (int d = 0; d < s->devices; d++) {
        int cur[S > 0 ? S : 1];
        for (int k = 0; k < S; k++) cur[k] = 0;
        for (int p = 0; p < s->n_actions[d]; p++) {
            pp_action a = s->actions[d][p];
            if (a.stage < 0 || a.stage >= S) continue;
            if (a.kind == PP_ACT_F && ++cur[a.stage] > peak[a.stage]) peak[a.stage] = cur[a.stage];
            if ((a.kind == PP_ACT_B || a.kind == PP_ACT_W) && cur[a.stage] > 0) cur[a.stage]--;
        }
    }
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

static bool is_comm(pp_action_kind k)
{
    return k == PP_ACT_SEND_ACT || k == PP_ACT_RECV_ACT || k == PP_ACT_SEND_GRAD ||
           k == PP_ACT_RECV_GRAD;
}

/* Writes the cells of device d: sep between cells, composites as "(a;b)"
 * followed by suffix; STEP only with_step. */
static void format_list(out_buf *o, const pp_schedule *s, int d, bool with_comms, bool with_step,
                        const char *sep, const char *suffix)
{
    bool first = true;
    for (int p = 0; p < s->n_actions[d]; p++) {
        pp_action a = s->actions[d][p];
        if ((!with_comms && is_comm(a.kind)) || (!with_step && a.kind == PP_ACT_STEP)) continue;
        char b1[48], b2[48];
        if (a.overlap == PP_OVERLAP_FIRST && p + 1 < s->n_actions[d] &&
            s->actions[d][p + 1].overlap == PP_OVERLAP_SECOND) {
            out_printf(o, "%s(%s;%s)%s", first ? "" : sep, pp_action_format(a, b1, sizeof b1),
                       pp_action_format(s->actions[d][p + 1], b2, sizeof b2), suffix);
            p++;
        } else {
            out_printf(o, "%s%s", first ? "" : sep, pp_action_format(a, b1, sizeof b1));
        }
        first = false;
    }
}

size_t pp_schedule_format(const pp_schedule *s, bool with_comm, char *buf, size_t n)
{
    out_buf o = {buf, buf ? n : 0, 0};
    if (buf && n) buf[0] = '\0';
    for (int d = 0; d < s->devices; d++) {
        out_printf(&o, "device %d: ", d);
        format_list(&o, s, d, with_comm, true, " ", "");
        out_printf(&o, "\n");
    }
    return o.len;
}

size_t pp_schedule_format_csv(const pp_schedule *s, bool with_comms, char *buf, size_t n)
{
    out_buf o = {buf, buf ? n : 0, 0};
    if (buf && n) buf[0] = '\0';
    for (int d = 0; d < s->devices; d++) {
        format_list(&o, s, d, with_comms, false, ",", "OVERLAP_F_B");
        out_printf(&o, "\r\n");
    }
    return o.len;
}
