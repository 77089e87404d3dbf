/*
 * unit_act.c - activations shared between the code that chains units and the
 * units that keep them (unit.h: pp_unit_act_*): a tensor and its count of
 * references, the last of which frees it (or abandons it: unit_kind.h).
 */
#include <stdlib.h>

#include "models/unit_kind.h"

pp_status pp_unit_act_new(pp_tensor *t, pp_unit_act **out, pp_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out) {
        pp_tensor_free(t);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (activation)");
    }
    (*out)->t = *t;
    (*out)->refs = 1;
    *t = (pp_tensor){0};
    return PP_OK;
}

pp_tensor *pp_unit_act_tensor(pp_unit_act *a)
{
    return &a->t;
}

void pp_unit_act_hold(pp_unit_act *a)
{
    a->refs++;
}

void pp_unit_act_unref(pp_unit_act *a, bool abandon)
{
    if (!a || --a->refs > 0) return;
    if (abandon)
        pp_tensor_abandon(&a->t);
    else
        pp_tensor_free(&a->t);
    free(a);
}

void pp_unit_act_drop(pp_unit_act *a)
{
    pp_unit_act_unref(a, false);
}
