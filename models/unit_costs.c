/*
 * unit_costs.c - a unit's costs (pp_unit_costs, unit.h): parameters from the
 * declarations that build it (counting mode), activation bytes from the
 * saved list its training forward and split backward keep, FLOPs from its
 * kind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/unit_kind.h"

/* Whether item it is kept between a forward and its backward (iw false) or
 * between the two parts of a split backward (iw true). */
static bool kept_in(const pp_saved_tensor *it, bool iw)
{
    return iw ? it->until_w : it->from != PP_SAVED_GRAD;
}

static int64_t list_bytes(const pp_saved_list *l, bool iw)
{
    int64_t bytes = 0;
    for (int i = 0; i < l->n; i++) {
        if (!kept_in(&l->item[i], iw)) continue;
        int64_t n = 1;
        for (int k = 0; k < l->item[i].ndim; k++) n *= l->item[i].shape[k];
        bytes += n * (int64_t)pp_dtype_size(l->item[i].dtype);
    }
    return bytes;
}

/* Bytes kept (iw: between the parts of a split backward, else between the
 * forward and its backward) for an input of batch n (the per-sample shape
 * in[1..]). */
static pp_status saved_bytes(const pp_unit *u, int in_ndim, const int64_t *in, int64_t n,
                             bool iw, void *scratch, int64_t *bytes, pp_error *err)
{
    int64_t shape[PP_MAX_DIMS];
    memcpy(shape, in, sizeof shape);
    shape[0] = n;
    pp_saved_list l;
    PP_TRY(pp_unit_saved_list(u, in_ndim, shape, scratch, &l, err));
    *bytes = list_bytes(&l, iw);
    return PP_OK;
}

/* Whether the saved list keeps the unit's input or output (iw: until the
 * weight part of a split backward). */
static void saved_io(const pp_saved_list *l, bool iw, bool *input, bool *output)
{
    *input = *output = false;
    for (int i = 0; i < l->n; i++) {
        if (!kept_in(&l->item[i], iw)) continue;
        if (l->item[i].from == PP_SAVED_INPUT) *input = true;
        if (l->item[i].from == PP_SAVED_OUTPUT) *output = true;
    }
}

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

pp_status pp_unit_costs(const pp_unit_spec *s, int in_ndim, const int64_t *in, pp_unit_info *info,
                        pp_error *err)
{
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", s->name);
    info->identity = s->kind == PP_UNIT_IDENTITY;
    int out_ndim;
    int64_t out[PP_MAX_DIMS];
    PP_TRY(pp_unit_output_shape(s, in_ndim, in, &out_ndim, out, err));
    pp_unit *u;
    PP_TRY(pp_unit_make(s, 0, NULL, &u, err)); /* counting mode: the declarations, no memory */
    void *scratch = calloc(1, u->ops->saved_size ? u->ops->saved_size : 1);
    if (!scratch) {
        pp_unit_free(u);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (unit costs)");
    }
    for (int i = 0; i < u->n_entries; i++) {
        info->param_bytes += (int64_t)pp_tensor_bytes(&u->value[i]);
        /* bf16: a copy of each conv and linear weight (pp_unit_weight_like;
         * an embedding table is read in f32) */
        if (s->bf16 && u->entry[i].grad && u->value[i].ndim >= 2 &&
            s->kind != PP_UNIT_TOKEN_EMBEDDING && s->kind != PP_UNIT_POSITION_EMBEDDING)
            info->param_bytes += (int64_t)pp_tensor_numel(&u->value[i]) * 2;
        if (u->entry[i].grad) info->param_count += pp_tensor_numel(&u->value[i]);
        if (u->entry[i].tied_to) info->tied_count += pp_tensor_numel(&u->value[i]);
    }
    /* bytes(N) = per_sample * N + fixed */
    int64_t b1 = 0, b2 = 0, w1 = 0, w2 = 0;
    pp_status st = saved_bytes(u, in_ndim, in, 1, false, scratch, &b1, err);
    if (st == PP_OK) st = saved_bytes(u, in_ndim, in, 2, false, scratch, &b2, err);
    if (st == PP_OK) st = saved_bytes(u, in_ndim, in, 1, true, scratch, &w1, err);
    if (st == PP_OK) st = saved_bytes(u, in_ndim, in, 2, true, scratch, &w2, err);
    info->act_bytes = b2 - b1;
    info->act_fixed_bytes = 2 * b1 - b2;
    info->iw_bytes = w2 - w1;
    info->iw_fixed_bytes = 2 * w1 - w2;
    pp_saved_list l;
    if (st == PP_OK) st = pp_unit_saved_list(u, in_ndim, in, scratch, &l, err);
    if (st == PP_OK) {
        saved_io(&l, false, &info->keeps_input, &info->keeps_output);
        saved_io(&l, true, &info->iw_keeps_input, &info->iw_keeps_output);
    }
    info->in_bytes = (int64_t)pp_dtype_size(pp_unit_spec_in_dtype(s)) * (numel(in_ndim, in) / in[0]);
    int64_t macs = 0, elementwise = 0;
    u->ops->flops(s, in_ndim, in, out, &macs, &elementwise);
    info->fwd_macs = macs;
    info->fwd_flops = 2 * macs + elementwise;
    info->out_bytes = (int64_t)pp_dtype_size(pp_unit_spec_out_dtype(s)) *
                      (numel(out_ndim, out) / in[0]);
    /* training batch norm needs two values per channel; a unit's batch norms see
     * at least its output's plane (blocks narrow towards it) */
    const int64_t plane = out_ndim == 4 ? out[2] * out[3] : 1;
    info->min_batch = u->n_bn > 0 && plane == 1 ? 2 : 1;
    free(scratch);
    pp_unit_free(u);
    return st;
}

