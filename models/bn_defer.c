/*
 * bn_defer.c - deferred batch-norm statistics (bn_defer.h): the slots of
 * each batch norm, the rows a forward writes, and the step's commit over
 * every batch norm of a stage in one op.
 */
#include "models/bn_defer.h"

#include <stdlib.h>

pp_status pp_unit_bn_defer(pp_unit *u, bool on, int cap, pp_error *err)
{
    for (int i = 0; i < u->n_bn; i++) {
        pp_bn_layer *b = u->bn[i];
        pp_tensor_free(&b->slots);
        if (on && u->dev)
            PP_TRY(pp_tensor_zeros(&b->slots, u->dev, PP_F32, 3, (int64_t[]){cap, 2, b->c}, err));
    }
    u->bn_deferred = on;
    return PP_OK;
}

/* Row (mb, r) of b's slots as a (C) view. */
static pp_tensor row(const pp_bn_layer *b, int mb, int r)
{
    pp_tensor v = b->slots;
    v.owns = false;
    v.stream = NULL;
    v.ndim = 1;
    v.shape[0] = b->c;
    v.shape[1] = v.shape[2] = 1;
    v.data = (char *)b->slots.data + ((size_t)mb * 2 + (size_t)r) * (size_t)b->c * sizeof(float);
    return v;
}

pp_status pp_bn_defer_rows(pp_bn_layer *b, int mb, pp_tensor *rm, pp_tensor *rv,
                           pp_tensor **mean, pp_tensor **var, pp_error *err)
{
    if (mb < 0 || mb >= b->slots.shape[0])
        return pp_error_set(err, PP_ERR_INVALID,
                            "micro-batch %d is beyond the %lld the deferred batch-norm statistics "
                            "hold (pp_stage_set_deferred_bn)",
                            mb, (long long)b->slots.shape[0]);
    *rm = row(b, mb, 0);
    *rv = row(b, mb, 1);
    *mean = rm;
    *var = rv;
    return PP_OK;
}

pp_status pp_units_bn_commit(pp_unit *const *units, int n, pp_exec *ex, int m, const int *sizes,
                             pp_error *err)
{
    int count = 0;
    for (int i = 0; i < n; i++) count += units[i]->bn_deferred ? units[i]->n_bn : 0;
    if (count == 0) return PP_OK;
    int64_t *hw = malloc((size_t)count * sizeof *hw);
    pp_tensor **lists = malloc((size_t)count * 3 * sizeof *lists);
    if (!hw || !lists) {
        free(hw);
        free(lists);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (batch-norm statistics)");
    }
    pp_tensor **slots = lists, **rm = lists + count, **rv = lists + 2 * count;
    int k = 0;
    for (int i = 0; i < n; i++) {
        pp_unit *u = units[i];
        for (int j = 0; u->bn_deferred && j < u->n_bn; j++, k++) {
            pp_bn_layer *b = u->bn[j];
            hw[k] = b->hw > 0 ? b->hw : 1;
            slots[k] = &b->slots;
            rm[k] = &u->value[b->e + 2];
            rv[k] = &u->value[b->e + 3];
        }
    }
    const pp_bn_stats_desc d = {.m = m, .sizes = sizes, .momentum = PP_UNIT_BN_MOMENTUM};
    pp_status s = pp_batchnorm_stats_combine(ex, &d, count, hw, slots, rm, rv, err);
    free(hw);
    free(lists);
    if (s != PP_OK) return s;
    for (int i = 0; i < n; i++) /* one training forward over the whole mini-batch */
        for (int j = 0; units[i]->bn_deferred && j < units[i]->n_bn; j++)
            units[i]->bn[j]->pending++;
    return PP_OK;
}
