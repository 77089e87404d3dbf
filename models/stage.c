/*
 * stage.c - a contiguous range of units on one device: chained forward and
 * backward, shape propagation and the named-tensor views.
 */
#include "models/stage.h"
#include "models/bn_defer.h"

#include <stdlib.h>
#include <string.h>

#include "models/model.h"
#include "runtime/core/ops.h"

struct pp_stage {
    pp_device_ctx *dev;
    int n;           /* units */
    pp_unit **units; /* n, owned */
    /* PP_STAGE_KEEP_INPUT: per micro-batch index, the copy of its input kept
     * until its backward runs the forward again (NULL: none) */
    pp_unit_act **kept;
    int n_kept_slots, n_kept;
    int in_ndim;
    int64_t in_sample[PP_MAX_DIMS]; /* input shape with batch 1 */
    int64_t positions;              /* in_sample[1] as made (pp_stage_set_positions) */
    int n_params, n_buffers, n_state;
    const pp_named_tensor **params; /* views into the units */
    const pp_named_tensor **buffers;
    const pp_named_tensor **state;
    /* deferred batch-norm statistics: each micro-batch's samples at its
     * training forward since the last commit, 0 when none ran */
    bool bn_deferred;
    int *defer_sizes; /* (defer_cap) */
    int defer_cap;
    /* per micro-batch index, the draw of its training forwards (pp_stage_set_draw) */
    pp_unit_draw *draws;
    int n_draws;
};

void pp_stage_free(pp_stage *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_kept_slots; i++) pp_unit_act_drop(s->kept[i]);
    free(s->kept);
    free(s->draws);
    for (int i = 0; i < s->n; i++) pp_unit_free(s->units[i]);
    free(s->units);
    free(s->params);
    free(s->buffers);
    free(s->state);
    free(s->defer_sizes);
    free(s);
}

static pp_status index_state(pp_stage *s, pp_error *err)
{
    int total = 0;
    for (int i = 0; i < s->n; i++) total += pp_unit_state_count(s->units[i]);
    size_t cap = (size_t)(total ? total : 1);
    s->params = calloc(cap, sizeof *s->params);
    s->buffers = calloc(cap, sizeof *s->buffers);
    s->state = calloc(cap, sizeof *s->state);
    if (!s->params || !s->buffers || !s->state)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (stage tensor lists)");
    for (int i = 0; i < s->n; i++) {
        for (int j = 0; j < pp_unit_state_count(s->units[i]); j++) {
            const pp_named_tensor *t = pp_unit_state(s->units[i], j);
            s->state[s->n_state++] = t;
            if (t->grad)
                s->params[s->n_params++] = t;
            else
                s->buffers[s->n_buffers++] = t;
        }
    }
    return PP_OK;
}

pp_status pp_stage_new_from_specs(const pp_unit_spec *specs, int n, uint64_t seed, int in_ndim,
                                  const int64_t *sample_shape, pp_device_ctx *dev, pp_stage **out,
                                  pp_error *err)
{
    *out = NULL;
    if (!specs || n < 1 || !dev || !sample_shape || in_ndim < 1 || in_ndim > PP_MAX_DIMS ||
        sample_shape[0] != 1)
        return pp_error_set(err, PP_ERR_INVALID,
                            "stage: need at least one unit, a device and a per-sample input "
                            "shape");
    int ndim = in_ndim;
    int64_t shape[PP_MAX_DIMS] = {1, 1, 1, 1}, next[PP_MAX_DIMS];
    memcpy(shape, sample_shape, (size_t)in_ndim * sizeof *shape);
    for (int i = 0; i < n; i++) {
        PP_TRY(pp_unit_output_shape(&specs[i], ndim, shape, &ndim, next, err));
        memcpy(shape, next, sizeof shape);
    }
    pp_stage *s = calloc(1, sizeof *s);
    if (!s) return pp_error_set(err, PP_ERR_OOM, "out of host memory (stage)");
    s->dev = dev;
    s->in_ndim = in_ndim;
    for (int i = 0; i < PP_MAX_DIMS; i++) s->in_sample[i] = i < in_ndim ? sample_shape[i] : 1;
    s->positions = s->in_sample[1];
    s->units = calloc((size_t)n, sizeof *s->units);
    pp_status st = s->units ? PP_OK : pp_error_set(err, PP_ERR_OOM, "out of host memory (stage)");
    for (int i = 0; i < n && st == PP_OK; i++) {
        st = pp_unit_new(&specs[i], seed, dev, &s->units[i], err);
        if (st == PP_OK) s->n++;
    }
    if (st == PP_OK) st = index_state(s, err);
    if (st != PP_OK) {
        pp_stage_free(s);
        return st;
    }
    *out = s;
    return PP_OK;
}

pp_status pp_stage_new(const pp_model_config *cfg, uint64_t seed, int first, int last,
                       pp_device_ctx *dev, pp_stage **out, pp_error *err)
{
    *out = NULL;
    if (!dev) return pp_error_set(err, PP_ERR_INVALID, "stage: no device");
    const bool tokens = cfg->kind == PP_MODEL_GPT2;
    if (!tokens && (cfg->image_h < 1 || cfg->image_w < 1))
        return pp_error_set(err, PP_ERR_INPUT, "image size %dx%d is not positive", cfg->image_h,
                            cfg->image_w);
    pp_unit_spec *specs;
    int n;
    PP_TRY(pp_model_units(cfg, &specs, &n, NULL, err));
    pp_status st = PP_OK;
    if (first < 0 || last < first || last >= n)
        st = pp_error_set(err, PP_ERR_INPUT, "stage unit range [%d, %d] not within [0, %d] of %s",
                          first, last, n - 1, cfg->name);
    /* the stage's input is the model input carried through units 0..first-1;
     * every unit up to last must fit the image */
    int ndim, in_ndim;
    int64_t shape[PP_MAX_DIMS], in_shape[PP_MAX_DIMS], next[PP_MAX_DIMS];
    pp_dtype dtype;
    pp_model_input(cfg, &ndim, shape, &dtype);
    in_ndim = ndim;
    memcpy(in_shape, shape, sizeof shape);
    for (int i = 0; i <= last && st == PP_OK; i++) {
        if (i == first) {
            in_ndim = ndim;
            memcpy(in_shape, shape, sizeof shape);
        }
        st = pp_unit_output_shape(&specs[i], ndim, shape, &ndim, next, err);
        if (st == PP_OK)
            memcpy(shape, next, sizeof shape);
        else if (!tokens)
            st = pp_error_set(err, PP_ERR_INPUT, "image size %dx%d is too small for %s (at %s)",
                              cfg->image_h, cfg->image_w, cfg->name, specs[i].name);
    }
    if (st == PP_OK)
        st = pp_stage_new_from_specs(specs + first, last - first + 1, seed, in_ndim, in_shape, dev,
                                     out, err);
    free(specs);
    return st;
}

pp_device_ctx *pp_stage_device(const pp_stage *s)
{
    return s->dev;
}

int pp_stage_unit_count(const pp_stage *s)
{
    return s->n;
}

pp_unit *pp_stage_unit(const pp_stage *s, int i)
{
    return i >= 0 && i < s->n ? s->units[i] : NULL;
}

pp_status pp_stage_input_shape(const pp_stage *s, int mb_size, int *ndim, int64_t *shape,
                               pp_error *err)
{
    if (mb_size < 1)
        return pp_error_set(err, PP_ERR_INVALID, "micro-batch size %d is not positive", mb_size);
    *ndim = s->in_ndim;
    memcpy(shape, s->in_sample, sizeof s->in_sample);
    shape[0] = mb_size;
    return PP_OK;
}

pp_status pp_stage_set_positions(pp_stage *s, int t, pp_error *err)
{
    if (s->in_ndim < 2 || t < 1 || t > s->positions)
        return pp_error_set(err, PP_ERR_INVALID,
                            "stage input of %d dimensions: %d positions (the sample has %lld)",
                            s->in_ndim, t, (long long)s->positions);
    s->in_sample[1] = t;
    return PP_OK;
}

pp_status pp_stage_set_decode(pp_stage *s, int at, pp_error *err)
{
    for (int i = 0; i < s->n; i++)
        PP_TRY(pp_unit_set_decode(s->units[i], at, (int)s->positions, err));
    return PP_OK;
}

pp_status pp_stage_output_shape(const pp_stage *s, int mb_size, int *ndim, int64_t *shape,
                                pp_error *err)
{
    int64_t cur[PP_MAX_DIMS], next[PP_MAX_DIMS];
    PP_TRY(pp_stage_input_shape(s, mb_size, ndim, cur, err));
    for (int i = 0; i < s->n; i++) {
        PP_TRY(pp_unit_output_shape(pp_unit_get_spec(s->units[i]), *ndim, cur, ndim, next, err));
        memcpy(cur, next, sizeof cur);
    }
    memcpy(shape, cur, sizeof cur);
    return PP_OK;
}

pp_dtype pp_stage_input_dtype(const pp_stage *s)
{
    return pp_unit_spec_in_dtype(pp_unit_get_spec(s->units[0]));
}

pp_dtype pp_stage_output_dtype(const pp_stage *s)
{
    return pp_unit_spec_out_dtype(pp_unit_get_spec(s->units[s->n - 1]));
}

pp_layout pp_stage_layout(const pp_stage *s, int ndim)
{
    return pp_unit_spec_layout(pp_unit_get_spec(s->units[0]), ndim);
}

/* Whether t must be converted to reach the units as dtype in the stage's
 * layout (or be written back from them). */
static bool foreign(const pp_stage *s, const pp_tensor *t, pp_dtype dtype)
{
    pp_tensor want = *t;
    want.layout = pp_stage_layout(s, t->ndim);
    return t->dtype != dtype ||
           pp_tensor_effective_layout(t) != pp_tensor_effective_layout(&want);
}

/* y = x in y's dtype (token ids, which no cast takes, are copied). */
static pp_status convert(pp_exec *ex, const pp_tensor *x, pp_tensor *y, pp_error *err)
{
    return x->dtype == y->dtype ? pp_copy(ex, x, y, err) : pp_cast(ex, x, y, err);
}

/* Whether units i and i+1 run as one (a batch norm and the ReLU after it). */
static bool fused_pair(const pp_stage *s, int i)
{
    return i + 1 < s->n && pp_unit_fuses_relu(s->units[i], s->units[i + 1]);
}

/* An uninitialised tensor of t's shape, dtype and the stage's layout. */
static pp_status alloc_as(const pp_stage *s, pp_exec *ex, pp_tensor *out, pp_dtype dtype,
                          int ndim, const int64_t *shape, pp_error *err)
{
    PP_TRY(pp_tensor_alloc_on(out, ex, dtype, ndim, shape, err));
    out->layout = pp_stage_layout(s, ndim);
    return PP_OK;
}

/* The copy of mb's input kept for a recomputed forward, or NULL. */
static pp_unit_act *kept_of(const pp_stage *s, int mb)
{
    return mb >= 0 && mb < s->n_kept_slots ? s->kept[mb] : NULL;
}

static void kept_drop(pp_stage *s, int mb)
{
    pp_unit_act *a = kept_of(s, mb);
    if (!a) return;
    pp_unit_act_drop(a);
    s->kept[mb] = NULL;
    s->n_kept--;
}

void pp_stage_release(pp_stage *s, int mb)
{
    for (int i = 0; i < s->n; i++) pp_unit_release(s->units[i], mb);
    kept_drop(s, mb);
}

void pp_stage_abandon(pp_stage *s, int mb)
{
    for (int i = 0; i < s->n; i++) pp_unit_abandon(s->units[i], mb);
}

int pp_stage_in_flight(const pp_stage *s)
{
    return (s->n ? pp_unit_in_flight(s->units[0]) : 0) + s->n_kept;
}

/* Whether mb has state in the stage: a forward in flight, a kept input, or a
 * backward's input part waiting for its weight part. */
static bool holds(const pp_stage *s, int mb)
{
    return pp_unit_holds(s->units[0], mb) || kept_of(s, mb);
}

/* The units' forward of one pass. x is the caller's (converted first when the
 * units take another dtype or layout) or, with xa, an activation in the
 * units' dtype and layout whose reference the call takes over; y is the
 * caller's, or with ya an activation in the stage's layout the last unit may
 * keep a reference to (the caller keeps its own). */
static pp_status forward_pass(pp_stage *s, pp_exec *ex, int mb, pp_unit_act *xa,
                              const pp_tensor *x, pp_unit_act *ya, pp_tensor *y,
                              pp_unit_pass pass, pp_error *err)
{
    /* Every activation the stage makes (the converted input, those between
     * units, the output before its conversion) is shared with the units on
     * either side, which keep a reference instead of a copy; the stage drops
     * its own once the next unit has run. x and y belong to the caller. */
    pp_unit_act *cur_a = xa, *out_a = NULL;
    const pp_tensor *cur = x;
    pp_status st = PP_OK;
    const pp_dtype in_dtype = pp_unit_spec_in_dtype(pp_unit_get_spec(s->units[0]));
    if (!xa && foreign(s, x, in_dtype)) { /* the input images of bf16 or NHWC units */
        pp_tensor in = {0};
        st = alloc_as(s, ex, &in, in_dtype, x->ndim, x->shape, err);
        if (st == PP_OK) st = convert(ex, x, &in, err);
        if (st == PP_OK) st = pp_unit_act_new(&in, &cur_a, err);
        pp_tensor_free(&in);
        if (st == PP_OK) cur = pp_unit_act_tensor(cur_a);
    }
    const bool y_foreign = foreign(s, y, y->dtype);
    const pp_unit_draw draw = mb >= 0 && mb < s->n_draws ? s->draws[mb] : (pp_unit_draw){0};
    for (int i = 0; i < s->n && st == PP_OK; i++) {
        /* a batch norm and the ReLU after it run as one (units i and j) */
        const bool pair = fused_pair(s, i);
        const int j = pair ? i + 1 : i;
        pp_tensor *out = y;
        out_a = NULL;
        if (j < s->n - 1 || y_foreign) { /* else the last unit writes y */
            const pp_unit_spec *spec = pp_unit_get_spec(s->units[j]);
            int ndim;
            int64_t shape[PP_MAX_DIMS];
            pp_tensor t = {0};
            st = pp_unit_output_shape(spec, cur->ndim, cur->shape, &ndim, shape, err);
            if (st == PP_OK)
                st = alloc_as(s, ex, &t, pp_unit_spec_out_dtype(spec), ndim, shape, err);
            if (st == PP_OK) st = pp_unit_act_new(&t, &out_a, err);
            if (st != PP_OK) break;
            out = pp_unit_act_tensor(out_a);
        } else if (ya) {
            out_a = ya;
            pp_unit_act_hold(ya);
        }
        if (pass != PP_UNIT_PASS_INFER) pp_unit_set_draw(s->units[i], &draw);
        if (pair)
            st = pp_unit_forward_relu_pair_pass(s->units[i], s->units[j], ex, mb, cur_a, cur,
                                                out_a, out, pass, err);
        else
            st = pp_unit_forward_pass(s->units[i], ex, mb, cur_a, cur, out_a, out, pass, err);
        i = j;
        pp_unit_act_drop(cur_a); /* the unit holds what it keeps of its input */
        cur_a = out_a;
        out_a = NULL;
        cur = out;
    }
    /* the last output in another layout or dtype than y's */
    if (st == PP_OK && cur != y) st = pp_copy(ex, cur, y, err);
    pp_unit_act_drop(cur_a);
    pp_unit_act_drop(out_a);
    if (st != PP_OK && pass != PP_UNIT_PASS_INFER) pp_stage_release(s, mb);
    return st;
}

/* A training forward's samples, for the deferred statistics' commit. */
static void note_samples(pp_stage *s, int mb, const pp_tensor *x)
{
    if (s->bn_deferred && mb >= 0 && mb < s->defer_cap) s->defer_sizes[mb] = (int)x->shape[0];
}

pp_status pp_stage_forward(pp_stage *s, pp_exec *ex, int mb, const pp_tensor *x, pp_tensor *y,
                           bool train, pp_error *err)
{
    if (!x || !y) return pp_error_set(err, PP_ERR_INVALID, "stage forward: NULL tensor");
    if (train && holds(s, mb))
        return pp_error_set(err, PP_ERR_INVALID,
                            "stage forward: micro-batch %d is already in flight", mb);
    if (train) note_samples(s, mb, x);
    return forward_pass(s, ex, mb, NULL, x, NULL, y,
                        train ? PP_UNIT_PASS_TRAIN : PP_UNIT_PASS_INFER, err);
}

pp_status pp_stage_set_draw(pp_stage *s, int mb, const pp_unit_draw *d, pp_error *err)
{
    if (mb < 0 || mb >= 65536)
        return pp_error_set(err, PP_ERR_INVALID, "micro-batch index %d not in [0, 65536)", mb);
    if (mb >= s->n_draws) {
        int n = s->n_draws ? s->n_draws : 4;
        while (n <= mb) n *= 2;
        pp_unit_draw *grown = realloc(s->draws, (size_t)n * sizeof *grown);
        if (!grown) return pp_error_set(err, PP_ERR_OOM, "out of host memory (draws)");
        memset(grown + s->n_draws, 0, (size_t)(n - s->n_draws) * sizeof *grown);
        s->draws = grown;
        s->n_draws = n;
    }
    s->draws[mb] = *d;
    return PP_OK;
}

/* Room for a kept input at index mb. */
static pp_status kept_slot(pp_stage *s, int mb, pp_error *err)
{
    if (mb < 0 || mb >= 65536)
        return pp_error_set(err, PP_ERR_INVALID, "micro-batch index %d not in [0, 65536)", mb);
    if (mb < s->n_kept_slots) return PP_OK;
    int n = s->n_kept_slots ? s->n_kept_slots : 4;
    while (n <= mb) n *= 2;
    pp_unit_act **grown = realloc(s->kept, (size_t)n * sizeof *grown);
    if (!grown) return pp_error_set(err, PP_ERR_OOM, "out of host memory (kept inputs)");
    memset(grown + s->n_kept_slots, 0, (size_t)(n - s->n_kept_slots) * sizeof *grown);
    s->kept = grown;
    s->n_kept_slots = n;
    return PP_OK;
}

pp_status pp_stage_forward_keep(pp_stage *s, pp_exec *ex, int mb, const pp_tensor *x,
                                pp_tensor *y, pp_stage_keep keep, pp_error *err)
{
    if (!x || !y) return pp_error_set(err, PP_ERR_INVALID, "stage forward: NULL tensor");
    if (keep != PP_STAGE_KEEP_ALL && keep != PP_STAGE_KEEP_INPUT)
        return pp_error_set(err, PP_ERR_INVALID, "stage forward: unknown keep %d", (int)keep);
    if (keep == PP_STAGE_KEEP_ALL) return pp_stage_forward(s, ex, mb, x, y, true, err);
    if (holds(s, mb))
        return pp_error_set(err, PP_ERR_INVALID,
                            "stage forward: micro-batch %d is already in flight", mb);
    PP_TRY(kept_slot(s, mb, err));
    /* the copy, in the units' dtype and layout: what the forward starts from */
    pp_tensor t = {0};
    pp_unit_act *in = NULL;
    pp_status st = alloc_as(s, ex, &t, pp_unit_spec_in_dtype(pp_unit_get_spec(s->units[0])),
                            x->ndim, x->shape, err);
    if (st == PP_OK) st = convert(ex, x, &t, err);
    if (st == PP_OK) st = pp_unit_act_new(&t, &in, err);
    pp_tensor_free(&t);
    if (st != PP_OK) return st;
    pp_unit_act_hold(in); /* the forward's reference; the stage keeps the first */
    note_samples(s, mb, x);
    st = forward_pass(s, ex, mb, in, pp_unit_act_tensor(in), NULL, y,
                      PP_UNIT_PASS_TRAIN_DISCARD, err);
    if (st != PP_OK) {
        pp_unit_act_drop(in);
        return st;
    }
    s->kept[mb] = in;
    s->n_kept++;
    return PP_OK;
}

/* For a micro-batch forwarded with PP_STAGE_KEEP_INPUT: the forward again
 * from its kept input, keeping what backward needs (its output dropped). */
static pp_status recompute(pp_stage *s, pp_exec *ex, int mb, pp_error *err)
{
    pp_unit_act *in = kept_of(s, mb);
    if (!in) return PP_OK;
    s->kept[mb] = NULL; /* the forward takes over the stage's reference */
    s->n_kept--;
    const pp_tensor *x = pp_unit_act_tensor(in);
    int ndim;
    int64_t shape[PP_MAX_DIMS];
    pp_tensor t = {0};
    pp_unit_act *out = NULL;
    pp_status st = pp_stage_output_shape(s, (int)x->shape[0], &ndim, shape, err);
    if (st == PP_OK) st = alloc_as(s, ex, &t, pp_stage_output_dtype(s), ndim, shape, err);
    if (st == PP_OK) st = pp_unit_act_new(&t, &out, err);
    pp_tensor_free(&t);
    if (st != PP_OK) {
        pp_unit_act_drop(in);
        return st;
    }
    st = forward_pass(s, ex, mb, in, x, out, pp_unit_act_tensor(out), PP_UNIT_PASS_RECOMPUTE,
                      err);
    pp_unit_act_drop(out);
    if (st != PP_OK) pp_error_prefix(err, "forward again (recomputation)");
    return st;
}

/* The backward of mb through the units (input: their input parts). */
static pp_status backward_run(pp_stage *s, pp_exec *ex, int mb, const pp_tensor *dy,
                              pp_tensor *dx, bool input, pp_error *err)
{
    if (!dy) return pp_error_set(err, PP_ERR_INVALID, "stage backward: NULL dy");
    pp_status st = recompute(s, ex, mb, err);
    if (st != PP_OK) {
        pp_stage_release(s, mb);
        return st;
    }
    pp_tensor bufs[2] = {{0}, {0}}, din0 = {0}, dy0 = {0};
    const pp_tensor *g = dy;
    const pp_dtype in_dtype = pp_unit_spec_in_dtype(pp_unit_get_spec(s->units[0]));
    if (foreign(s, dy, dy->dtype)) { /* a gradient from a neighbour of another layout */
        st = alloc_as(s, ex, &dy0, dy->dtype, dy->ndim, dy->shape, err);
        if (st == PP_OK) st = pp_copy(ex, dy, &dy0, err);
        g = &dy0;
    }
    int turn = 0; /* din alternates between bufs[0] and bufs[1]: g is the other */
    for (int j = s->n - 1; j >= 0 && st == PP_OK; j--) {
        /* units i..j: one unit, or a batch norm and its ReLU run as one */
        const bool pair = j > 0 && fused_pair(s, j - 1);
        const int i = pair ? j - 1 : j;
        pp_tensor *din = dx;
        if (i == 0 && dx && foreign(s, dx, in_dtype)) { /* converted at the end */
            din = &din0;
            st = alloc_as(s, ex, din, in_dtype, dx->ndim, dx->shape, err);
            if (st != PP_OK) break;
        }
        if (i > 0) {
            int ndim;
            int64_t shape[PP_MAX_DIMS];
            din = &bufs[turn++ % 2];
            if (!pp_unit_saved_input(s->units[i], mb, &ndim, shape))
                st = pp_error_set(err, PP_ERR_INVALID,
                                  "stage backward: micro-batch %d has no training forward in "
                                  "flight in %s",
                                  mb, pp_unit_name(s->units[i]));
            if (st == PP_OK)
                st = alloc_as(s, ex, din, pp_unit_spec_in_dtype(pp_unit_get_spec(s->units[i])),
                              ndim, shape, err);
        }
        if (st == PP_OK && pair)
            st = input ? pp_unit_backward_input_relu_pair(s->units[i], s->units[j], ex, mb, g,
                                                          din, err)
                       : pp_unit_backward_relu_pair(s->units[i], s->units[j], ex, mb, g, din,
                                                    err);
        else if (st == PP_OK)
            st = input ? pp_unit_backward_input(s->units[i], ex, mb, g, din, err)
                       : pp_unit_backward(s->units[i], ex, mb, g, din, err);
        if (g != dy) pp_tensor_free((pp_tensor *)g);
        g = din;
        j = i;
    }
    pp_tensor_free(&dy0);
    if (st == PP_OK && din0.data) st = pp_cast(ex, &din0, dx, err);
    pp_tensor_free(&bufs[0]);
    pp_tensor_free(&bufs[1]);
    pp_tensor_free(&din0);
    if (st != PP_OK) pp_stage_release(s, mb);
    return st;
}

pp_status pp_stage_backward(pp_stage *s, pp_exec *ex, int mb, const pp_tensor *dy, pp_tensor *dx,
                            pp_error *err)
{
    return backward_run(s, ex, mb, dy, dx, false, err);
}

pp_status pp_stage_backward_input(pp_stage *s, pp_exec *ex, int mb, const pp_tensor *dy,
                                  pp_tensor *dx, pp_error *err)
{
    return backward_run(s, ex, mb, dy, dx, true, err);
}

pp_status pp_stage_backward_weight(pp_stage *s, pp_exec *ex, int mb, pp_error *err)
{
    if (!pp_unit_waits_for_weight(s->units[0], mb))
        return pp_error_set(err, PP_ERR_INVALID,
                            "stage backward, weight part: micro-batch %d has no input part done",
                            mb);
    pp_status st = PP_OK;
    for (int j = s->n - 1; j >= 0 && st == PP_OK; j--)
        st = pp_unit_backward_weight(s->units[j], ex, mb, err);
    if (st != PP_OK) pp_stage_release(s, mb);
    return st;
}

int pp_stage_param_count(const pp_stage *s)
{
    return s->n_params;
}

const pp_named_tensor *pp_stage_param(const pp_stage *s, int i)
{
    return i >= 0 && i < s->n_params ? s->params[i] : NULL;
}

int pp_stage_buffer_count(const pp_stage *s)
{
    return s->n_buffers;
}

const pp_named_tensor *pp_stage_buffer(const pp_stage *s, int i)
{
    return i >= 0 && i < s->n_buffers ? s->buffers[i] : NULL;
}

int pp_stage_state_count(const pp_stage *s)
{
    return s->n_state;
}

const pp_named_tensor *pp_stage_state(const pp_stage *s, int i)
{
    return i >= 0 && i < s->n_state ? s->state[i] : NULL;
}

int64_t pp_stage_num_params(const pp_stage *s)
{
    int64_t total = 0;
    for (int i = 0; i < s->n_params; i++) total += pp_tensor_numel(s->params[i]->value);
    return total;
}

pp_status pp_stage_zero_grads(pp_stage *s, pp_exec *ex, pp_error *err)
{
    pp_tensor **grads = malloc(((size_t)s->n_params + 1) * sizeof *grads);
    if (!grads) return pp_error_set(err, PP_ERR_OOM, "out of host memory (zero gradients)");
    for (int i = 0; i < s->n_params; i++) grads[i] = s->params[i]->grad;
    pp_status st = pp_zero_multi(ex, s->n_params, grads, err);
    free(grads);
    for (int i = 0; i < s->n; i++) pp_unit_grads_reset(s->units[i]);
    return st;
}

int pp_stage_grads_waiting(const pp_stage *s)
{
    int most = 0;
    for (int i = 0; i < s->n; i++) {
        int k = pp_unit_grads_waiting(s->units[i]);
        if (k > most) most = k;
    }
    return most;
}

int pp_stage_batch_counts(const pp_stage *s, int64_t *out, int cap)
{
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        int k = pp_unit_batch_counts(s->units[i], out ? out + n : NULL,
                                     out && cap > n ? cap - n : 0);
        n += k;
    }
    return n;
}

void pp_stage_set_batch_counts(pp_stage *s, const int64_t *in, int n)
{
    int off = 0;
    for (int i = 0; i < s->n; i++) {
        int k = pp_unit_batch_counts(s->units[i], NULL, 0);
        if (off + k > n) return;
        pp_unit_set_batch_counts(s->units[i], in + off);
        off += k;
    }
}

void pp_stage_add_batches(pp_stage *s, int64_t n)
{
    for (int i = 0; i < s->n; i++) pp_unit_add_batches(s->units[i], n);
}

pp_status pp_stage_sync_buffers(pp_stage *s, pp_error *err)
{
    for (int i = 0; i < s->n; i++) PP_TRY(pp_unit_sync_buffers(s->units[i], err));
    return PP_OK;
}

void pp_stage_params_changed(pp_stage *s)
{
    for (int i = 0; i < s->n; i++) pp_unit_params_changed(s->units[i]);
}

pp_status pp_stage_set_deferred_bn(pp_stage *s, bool on, int max_mb, pp_error *err)
{
    if (!s) return pp_error_set(err, PP_ERR_INVALID, "deferred batch norm: NULL stage");
    if (on && max_mb < 1)
        return pp_error_set(err, PP_ERR_INVALID, "deferred batch norm: %d micro-batches", max_mb);
    free(s->defer_sizes);
    s->defer_sizes = on ? calloc((size_t)max_mb, sizeof *s->defer_sizes) : NULL;
    s->defer_cap = on ? max_mb : 0;
    s->bn_deferred = on;
    if (on && !s->defer_sizes)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (deferred batch norm)");
    for (int i = 0; i < s->n; i++) PP_TRY(pp_unit_bn_defer(s->units[i], on, max_mb, err));
    return PP_OK;
}

bool pp_stage_deferred_bn(const pp_stage *s)
{
    return s && s->bn_deferred;
}

pp_status pp_stage_bn_commit(pp_stage *s, pp_exec *ex, int m, pp_error *err)
{
    if (!s || !s->bn_deferred) return PP_OK;
    if (m < 1 || m > s->defer_cap)
        return pp_error_set(err, PP_ERR_INVALID,
                            "deferred batch norm: a step of %d micro-batches (at most %d)", m,
                            s->defer_cap);
    for (int k = 0; k < m; k++)
        if (s->defer_sizes[k] < 1)
            return pp_error_set(err, PP_ERR_INVALID,
                                "deferred batch norm: micro-batch %d of the step ran no training "
                                "forward",
                                k);
    pp_status st = pp_units_bn_commit(s->units, s->n, ex, m, s->defer_sizes, err);
    for (int k = 0; k < s->defer_cap; k++) s->defer_sizes[k] = 0;
    return st;
}
