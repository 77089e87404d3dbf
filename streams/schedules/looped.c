/*
 * looped.c - schedules over looped virtual stages (stage v*D + r on device r,
 * V = S/D stages per device), and ZB-H1 as their one-stage case.
 *
 * Interleaved 1F1B (Narayanan et al., SC 2021; torch ScheduleInterleaved1F1B)
 * works in rounds of R = max(1, m div D) and k = m / R micro-batches: device
 * r's operations are numbered, forward operation j belongs to local stage
 * (j div k) mod V, backward operation j to local stage V-1 - ((j - warm)
 * div k) mod V; r warms up with (V-1)k + 2(D-1-r) forwards (at most mV), then
 * runs a forward and a backward per operation, then the remaining backwards.
 * The same construction with the backward split (torch
 * ScheduleInterleavedZeroBubble, the ZB paper's ZB1P) warms up with one
 * forward less per hop, runs I where 1F1B runs B, and from the r-th
 * operation on adds the W of the oldest I after each I, the rest at the end.
 * With one stage per device that is ZB-H1 (Qi et al., ICLR 2024, section
 * 3.1): 1F1B's memory, its W passes moved into the bubbles.
 * The rounds need m to be a multiple of R: other counts run padded (gen.h).
 *
 * Looped BFS (Lamy-Poirier, 2023; torch ScheduleLoopedBFS): every forward of
 * a device's first stage, then of its next, ..., then the backwards from its
 * last stage back. torch runs each stage's backwards from the last
 * micro-batch down; ours run them in micro-batch order, which takes the same
 * time and keeps no partial gradients apart (docs/SCHEDULES.md).
 */
#include "streams/schedules/gen.h"

#include <stdlib.h>

static int rounds_of(int D, int m)
{
    return m / D > 1 ? m / D : 1;
}

static int interleaved_padded(int devices, int stages, int m)
{
    if (stages == devices) return m; /* one stage per device: no rounds */
    int n = m;
    while (n % rounds_of(devices, n)) n++;
    return n;
}

/* The per-device counters of local stages and the W queue of one device. */
typedef struct looped_dev {
    pp_schedule *s;
    int r, D, V, m, k, warm;
    int *next_f, *next_b, *next_w; /* (V) per local stage */
    int *w_stage;                  /* (mV) local stage of each backward operation, in order */
    int n_b, n_w;
} looped_dev;

static int fwd_local(const looped_dev *L, int j)
{
    return (j / L->k) % L->V;
}

static int bwd_local(const looped_dev *L, int j)
{
    return L->V - 1 - ((j - L->warm) / L->k) % L->V;
}

static pp_status push_f(looped_dev *L, int j, pp_error *err)
{
    int v = fwd_local(L, j);
    return pp_schedule_push(L->s, v * L->D + L->r, PP_ACT_F, L->next_f[v]++, err);
}

static pp_status push_b(looped_dev *L, int j, bool zb, pp_error *err)
{
    int v = bwd_local(L, j);
    L->w_stage[L->n_b++] = v;
    return pp_schedule_push(L->s, v * L->D + L->r, zb ? PP_ACT_I : PP_ACT_B, L->next_b[v]++, err);
}

static pp_status push_w(looped_dev *L, pp_error *err)
{
    int v = L->w_stage[L->n_w++];
    return pp_schedule_push(L->s, v * L->D + L->r, PP_ACT_W, L->next_w[v]++, err);
}

static pp_status fill_device(looped_dev *L, bool zb, pp_error *err)
{
    int total = L->m * L->V;
    for (int j = 0; j < total + L->warm; j++) {
        if (j < total) PP_TRY(push_f(L, j, err));
        if (j < L->warm) continue;
        PP_TRY(push_b(L, j, zb, err));
        if (zb && j - L->warm >= L->r) PP_TRY(push_w(L, err));
    }
    while (zb && L->n_w < L->n_b) PP_TRY(push_w(L, err));
    return PP_OK;
}

static pp_status fill_interleaved(pp_schedule *s, bool zb, pp_error *err)
{
    int D = s->devices, V = s->stages / s->devices, m = s->micro_batches;
    int *buf = malloc((size_t)(3 * V + m * V) * sizeof *buf);
    if (!buf) return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    pp_status st = PP_OK;
    for (int r = 0; r < D && st == PP_OK; r++) {
        for (int v = 0; v < 3 * V; v++) buf[v] = 0;
        looped_dev L = {.s = s, .r = r, .D = D, .V = V, .m = m, .next_f = buf,
                        .next_b = buf + V, .next_w = buf + 2 * V, .w_stage = buf + 3 * V};
        L.k = m / rounds_of(D, m);
        L.warm = (V - 1) * L.k + (zb ? 1 : 2) * (D - 1 - r);
        if (L.warm > m * V) L.warm = m * V;
        st = fill_device(&L, zb, err);
    }
    free(buf);
    return st;
}

static pp_status fill_interleaved_1f1b(pp_schedule *s, pp_error *err)
{
    return fill_interleaved(s, false, err);
}

static pp_status fill_interleaved_zb(pp_schedule *s, pp_error *err)
{
    return fill_interleaved(s, true, err);
}

static pp_status fill_looped_bfs(pp_schedule *s, pp_error *err)
{
    int D = s->devices, V = s->stages / s->devices, m = s->micro_batches;
    for (int r = 0; r < D; r++) {
        for (int v = 0; v < V; v++)
            for (int i = 0; i < m; i++) PP_TRY(pp_schedule_push(s, v * D + r, PP_ACT_F, i, err));
        for (int v = V - 1; v >= 0; v--)
            for (int i = 0; i < m; i++) PP_TRY(pp_schedule_push(s, v * D + r, PP_ACT_B, i, err));
    }
    return PP_OK;
}

const pp_schedule_gen_ops pp_gen_interleaved_1f1b_ops = {
    .kind = PP_SCHEDULE_INTERLEAVED_1F1B,
    .name = "interleaved1f1b",
    .reference = "interleaved 1F1B (Narayanan et al., SC 2021); torch ScheduleInterleaved1F1B",
    .placement = PP_PLACEMENT_LOOP,
    .padded = interleaved_padded,
    .pad_reason = "a multiple of its rounds, max(1, m div devices)",
    .fill = fill_interleaved_1f1b,
};

const pp_schedule_gen_ops pp_gen_interleaved_zb_ops = {
    .kind = PP_SCHEDULE_INTERLEAVED_ZB,
    .name = "interleavedzb",
    .reference = "ZB1P (Qi et al., ICLR 2024); torch ScheduleInterleavedZeroBubble",
    .placement = PP_PLACEMENT_LOOP,
    .padded = interleaved_padded,
    .pad_reason = "a multiple of its rounds, max(1, m div devices)",
    .fill = fill_interleaved_zb,
};

const pp_schedule_gen_ops pp_gen_zbh1_ops = {
    .kind = PP_SCHEDULE_ZBH1,
    .name = "zbh1",
    .reference = "ZB-H1 (Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024, section 3.1)",
    .placement = PP_PLACEMENT_ONE,
    .fill = fill_interleaved_zb,
};

const pp_schedule_gen_ops pp_gen_looped_bfs_ops = {
    .kind = PP_SCHEDULE_LOOPED_BFS,
    .name = "loopedbfs",
    .reference = "breadth-first PP (Lamy-Poirier, 2023); torch ScheduleLoopedBFS",
    .placement = PP_PLACEMENT_LOOP,
    .fill = fill_looped_bfs,
};
