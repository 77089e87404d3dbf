/*
 * vshape.c - schedules over two stages per device placed in a V: device r
 * holds chunk 0, stage r, and chunk 1, stage 2D-1-r, so the first and the
 * last stage share device 0 and the turn of the V (stages D-1 and D) hands
 * over on device D-1 without a copy.
 *
 * ZB-V (Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024, section 6;
 * torch ScheduleZBVZeroBubble), in phases on device r: 2(D-r)-1 forwards of
 * chunk 0; r pairs of chunk-1 and chunk-0 forwards; D-r rounds of a chunk-1
 * forward, I and W; then rounds of (chunk-0 forward while any are left, I,
 * W, chunk-1 forward, I, W) until chunk 1 has caught up; then r rounds of
 * both chunks' I, D-r rounds of a chunk-0 I and the oldest chunk-0 W, and
 * the W passes left (chunk 1's, then chunk 0's). It needs 2D-1 micro-batches:
 * fewer run padded (gen.h), as torch does.
 *
 * DualPipeV (DeepSeek-V3 technical report, 2024, section 3.2.1, the V form of
 * DualPipe; torch ScheduleDualPipeV), in eight phases on device r: 2(D-r-1)
 * chunk-0 forwards; r+1 pairs of chunk-0 and chunk-1 forwards; D-r-1 rounds
 * of a chunk-1 I, the oldest W and a chunk-1 forward; m-2D+r+1 rounds of two
 * overlapped forward-backward pairs, (F0;B1) then (F1;B0) (the last device
 * starts with F0 then B1 apart); D-r-1 rounds of a chunk-1 B and an (F1;B0);
 * r+1 rounds of a chunk-1 then a chunk-0 backward, split into I (W queued)
 * from the middle round on (odd devices from chunk 1's, even from chunk
 * 0's); D-r-1 rounds of the oldest W and a chunk-0 I; the W passes left. It
 * needs 2D micro-batches: fewer run padded.
 */
#include "streams/schedules/gen.h"

#include <stdlib.h>

static int zbv_padded(int devices, int stages, int m)
{
    return m < 2 * devices - 1 ? 2 * devices - 1 : m;
}

static int dualpipev_padded(int devices, int stages, int m)
{
    return m < 2 * devices ? 2 * devices : m;
}

/* One device's chunks: stages c[0], c[1] and their next micro-batches. */
typedef struct v_dev {
    pp_schedule *s;
    int c[2];
    int f[2], b[2], w[2];
    int *wq;     /* (4m) queued W passes: chunk and micro-batch of each, oldest first */
    int wq_head, wq_tail;
} v_dev;

static pp_status zv_f(v_dev *v, int k, pp_error *err)
{
    return pp_schedule_push(v->s, v->c[k], PP_ACT_F, v->f[k]++, err);
}

/* A backward of chunk k: B, or I with its W queued (split) or pushed at once
 * by the caller. */
static pp_status zv_i(v_dev *v, int k, pp_error *err)
{
    return pp_schedule_push(v->s, v->c[k], PP_ACT_I, v->b[k]++, err);
}

static pp_status zv_w(v_dev *v, int k, pp_error *err)
{
    return pp_schedule_push(v->s, v->c[k], PP_ACT_W, v->w[k]++, err);
}

static pp_status fill_zbv(pp_schedule *s, pp_error *err)
{
    int D = s->devices, m = s->micro_batches;
    for (int r = 0; r < D; r++) {
        v_dev v = {.s = s, .c = {r, 2 * D - 1 - r}};
        for (int n = 0; n < 2 * (D - r) - 1; n++) PP_TRY(zv_f(&v, 0, err));
        for (int n = 0; n < r; n++) {
            PP_TRY(zv_f(&v, 1, err));
            PP_TRY(zv_f(&v, 0, err));
        }
        for (int n = 0; n < D - r; n++) {
            PP_TRY(zv_f(&v, 1, err));
            PP_TRY(zv_i(&v, 1, err));
            PP_TRY(zv_w(&v, 1, err));
        }
        while (v.f[1] < v.f[0] || v.f[0] < m) {
            if (v.f[0] < m) PP_TRY(zv_f(&v, 0, err));
            PP_TRY(zv_i(&v, 0, err));
            PP_TRY(zv_w(&v, 0, err));
            PP_TRY(zv_f(&v, 1, err));
            PP_TRY(zv_i(&v, 1, err));
            PP_TRY(zv_w(&v, 1, err));
        }
        for (int n = 0; n < r; n++) {
            PP_TRY(zv_i(&v, 0, err));
            PP_TRY(zv_i(&v, 1, err));
        }
        for (int n = 0; n < D - r; n++) {
            PP_TRY(zv_i(&v, 0, err));
            PP_TRY(zv_w(&v, 0, err));
        }
        while (v.w[1] < v.b[1]) PP_TRY(zv_w(&v, 1, err));
        while (v.w[0] < v.b[0]) PP_TRY(zv_w(&v, 0, err));
    }
    return PP_OK;
}

/* DualPipeV's backward of chunk k: B, or I with its W queued. */
static pp_status dp_backward(v_dev *v, int k, bool split, pp_error *err)
{
    if (!split) return pp_schedule_push(v->s, v->c[k], PP_ACT_B, v->b[k]++, err);
    v->wq[v->wq_tail++] = k;
    v->wq[v->wq_tail++] = v->b[k];
    return zv_i(v, k, err);
}

static pp_status dp_weight(v_dev *v, pp_error *err)
{
    int k = v->wq[v->wq_head++], mb = v->wq[v->wq_head++];
    return pp_schedule_push(v->s, v->c[k], PP_ACT_W, mb, err);
}

/* (F of chunk kf; B of chunk kb) as one composite. */
static pp_status dp_overlap(v_dev *v, int kf, int kb, pp_error *err)
{
    int fi = v->f[kf]++, bi = v->b[kb]++;
    return pp_schedule_push_overlap(v->s, v->c[kf], PP_ACT_F, fi, v->c[kb], PP_ACT_B, bi, err);
}

static pp_status dualpipev_device(v_dev *v, int r, int D, int m, pp_error *err)
{
    for (int n = 0; n < 2 * (D - r - 1); n++) PP_TRY(zv_f(v, 0, err));
    for (int n = 0; n < r + 1; n++) {
        PP_TRY(zv_f(v, 0, err));
        PP_TRY(zv_f(v, 1, err));
    }
    for (int n = 0; n < D - r - 1; n++) {
        PP_TRY(dp_backward(v, 1, true, err));
        PP_TRY(dp_weight(v, err));
        PP_TRY(zv_f(v, 1, err));
    }
    for (int n = 0; n < m - 2 * D + r + 1; n++) {
        if (n == 0 && r == D - 1) { /* the turn of the V: its own F0 feeds its B1 */
            PP_TRY(zv_f(v, 0, err));
            PP_TRY(dp_backward(v, 1, false, err));
        } else {
            PP_TRY(dp_overlap(v, 0, 1, err));
        }
        PP_TRY(dp_overlap(v, 1, 0, err));
    }
    for (int n = 0; n < D - r - 1; n++) {
        PP_TRY(dp_backward(v, 1, false, err));
        PP_TRY(dp_overlap(v, 1, 0, err));
    }
    bool split = false;
    for (int n = 0; n < r + 1; n++) {
        if (n == (r + 1) / 2 && r % 2 == 1) split = true;
        PP_TRY(dp_backward(v, 1, split, err));
        if (n == (r + 1) / 2 && r % 2 == 0) split = true;
        PP_TRY(dp_backward(v, 0, split, err));
    }
    for (int n = 0; n < D - r - 1; n++) {
        PP_TRY(dp_weight(v, err));
        PP_TRY(dp_backward(v, 0, true, err));
    }
    while (v->wq_head < v->wq_tail) PP_TRY(dp_weight(v, err));
    return PP_OK;
}

static pp_status fill_dualpipev(pp_schedule *s, pp_error *err)
{
    int D = s->devices, m = s->micro_batches;
    int *wq = malloc((size_t)(4 * m) * sizeof *wq);
    if (!wq) return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    pp_status st = PP_OK;
    for (int r = 0; r < D && st == PP_OK; r++) {
        v_dev v = {.s = s, .c = {r, 2 * D - 1 - r}, .wq = wq};
        st = dualpipev_device(&v, r, D, m, err);
    }
    free(wq);
    return st;
}

const pp_schedule_gen_ops pp_gen_zbv_ops = {
    .kind = PP_SCHEDULE_ZBV,
    .name = "zbv",
    .reference = "ZB-V (Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024, section 6); "
                 "torch ScheduleZBVZeroBubble",
    .placement = PP_PLACEMENT_V,
    .padded = zbv_padded,
    .pad_reason = "at least 2 x devices - 1",
    .fill = fill_zbv,
};

const pp_schedule_gen_ops pp_gen_dualpipev_ops = {
    .kind = PP_SCHEDULE_DUALPIPEV,
    .name = "dualpipev",
    .reference = "DualPipeV, the V form of DualPipe (DeepSeek-V3 technical report, 2024); torch "
                 "ScheduleDualPipeV",
    .placement = PP_PLACEMENT_V,
    .padded = dualpipev_padded,
    .pad_reason = "at least as many as stages, 2 x devices",
    .fill = fill_dualpipev,
};
