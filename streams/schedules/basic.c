/*
 * basic.c - the classic schedules over one stage per device: GPipe (Huang et
 * al., 2019: every forward, then every backward) and 1F1B (Narayanan et al.,
 * PipeDream-Flush, 2021: S-1-r warm-up forwards on device r, then one forward
 * and one backward, then the remaining backwards). Backwards in micro-batch
 * order.
 */
#include "streams/schedules/gen.h"

static pp_status fill_gpipe(pp_schedule *s, pp_error *err)
{
    for (int r = 0; r < s->stages; r++) {
        for (int i = 0; i < s->micro_batches; i++) PP_TRY(pp_schedule_push(s, r, PP_ACT_F, i, err));
        for (int i = 0; i < s->micro_batches; i++) PP_TRY(pp_schedule_push(s, r, PP_ACT_B, i, err));
    }
    return PP_OK;
}

static pp_status fill_1f1b(pp_schedule *s, pp_error *err)
{
    int S = s->stages, m = s->micro_batches;
    for (int r = 0; r < S; r++) {
        int warm = S - r - 1 < m ? S - r - 1 : m;
        for (int i = 0; i < warm; i++) PP_TRY(pp_schedule_push(s, r, PP_ACT_F, i, err));
        for (int j = 0; j < m - warm; j++) {
            PP_TRY(pp_schedule_push(s, r, PP_ACT_F, warm + j, err));
            PP_TRY(pp_schedule_push(s, r, PP_ACT_B, j, err));
        }
        for (int j = m - warm; j < m; j++) PP_TRY(pp_schedule_push(s, r, PP_ACT_B, j, err));
    }
    return PP_OK;
}

const pp_schedule_gen_ops pp_gen_gpipe_ops = {
    .kind = PP_SCHEDULE_GPIPE,
    .name = "gpipe",
    .reference = "GPipe (Huang et al., NeurIPS 2019); torch ScheduleGPipe",
    .placement = PP_PLACEMENT_ONE,
    .fill = fill_gpipe,
};

const pp_schedule_gen_ops pp_gen_1f1b_ops = {
    .kind = PP_SCHEDULE_1F1B,
    .name = "1f1b",
    .reference = "1F1B, PipeDream-Flush (Narayanan et al., ICML 2021); torch Schedule1F1B",
    .placement = PP_PLACEMENT_ONE,
    .fill = fill_1f1b,
};
