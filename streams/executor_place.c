/*
 * executor_place.c - whether a schedule's placement fits the executor's
 * stages (executor_internal.h): the stages of one schedule device compute on
 * one stream, so they must be on one device context and one rank; a program
 * with I or W needs stages that split their backward.
 */
#include "streams/executor_internal.h"

pp_status pp_executor_check_placement(const pp_executor *ex, const pp_schedule *s,
                                      pp_error *err)
{
    for (int a = 0; a < ex->S; a++)
        for (int b = a + 1; b < ex->S; b++) {
            if (s->stage_device[a] != s->stage_device[b]) continue;
            if (ex->stages[a].dev == ex->stages[b].dev && (!ex->ranks || ex->ranks[a] == ex->ranks[b]))
                continue;
            return pp_error_set(err, PP_ERR_INVALID, "executor: schedule %s places stages %d and "
                                "%d on one device, but they are on %s (rank %d) and %s (rank %d)",
                                s->name, a, b, ex->stages[a].dev->name, ex->ranks ? ex->ranks[a] : 0,
                                ex->stages[b].dev->name, ex->ranks ? ex->ranks[b] : 0);
        }
    for (int d = 0; d < s->devices; d++)
        for (int k = 0; k < s->n_actions[d]; k++) {
            pp_action a = s->actions[d][k];
            if (a.kind != PP_ACT_I && a.kind != PP_ACT_W) continue;
            if ((unsigned)a.stage >= (unsigned)ex->S) continue; /* the validator says why */
            const pp_stage_ops *o = ex->stages[a.stage].ops;
            if (!o->backward_input || !o->backward_weight)
                return pp_error_set(err, PP_ERR_UNSUPPORTED, "executor: schedule %s splits the "
                                    "backward (I and W), but stage %d (%s) cannot", s->name,
                                    a.stage, ex->stages[a.stage].dev->name);
        }
    return PP_OK;
}

