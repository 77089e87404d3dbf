/*
 * unit.c - what every unit kind has in common (unit.h): construction through
 * the kind's table (unit_kind.h), named parameters and buffers, shapes and
 * costs, the per-micro-batch saved state, argument checks and error prefixes.
 * The kinds themselves live in unit_<kind>.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/unit_kind.h"
#include "runtime/core/ranges.h"

#define MAX_MB 65536

const pp_unit_kind_ops *pp_unit_kind_ops_of(pp_unit_kind kind)
{
    static const pp_unit_kind_ops *const table[] = {
        [PP_UNIT_CONV] = &pp_unit_conv_ops,
        [PP_UNIT_BN] = &pp_unit_bn_ops,
        [PP_UNIT_RELU] = &pp_unit_relu_ops,
        [PP_UNIT_MAXPOOL] = &pp_unit_maxpool_ops,
        [PP_UNIT_IDENTITY] = &pp_unit_identity_ops,
        [PP_UNIT_BASIC] = &pp_unit_basic_ops,
        [PP_UNIT_BOTTLENECK] = &pp_unit_bottleneck_ops,
        [PP_UNIT_AVGPOOL] = &pp_unit_avgpool_ops,
        [PP_UNIT_FC] = &pp_unit_fc_ops,
        [PP_UNIT_DELAY] = &pp_unit_delay_ops,
        [PP_UNIT_SIGMOID] = &pp_unit_sigmoid_ops,
        [PP_UNIT_AVGPOOL2D] = &pp_unit_avgpool2d_ops,
        [PP_UNIT_FLATTEN] = &pp_unit_flatten_ops,
        [PP_UNIT_TOKEN_EMBEDDING] = &pp_unit_token_embedding_ops,
        [PP_UNIT_POSITION_EMBEDDING] = &pp_unit_position_embedding_ops,
        [PP_UNIT_GPT2_BLOCK] = &pp_unit_gpt2_block_ops,
        [PP_UNIT_LAYERNORM] = &pp_unit_layernorm_ops,
        [PP_UNIT_LM_HEAD] = &pp_unit_lm_head_ops,
    };
    if ((unsigned)kind >= sizeof table / sizeof table[0]) return NULL;
    return table[kind];
}

static pp_status check_spec(const pp_unit_spec *s, const pp_unit_kind_ops **ops, pp_error *err)
{
    *ops = pp_unit_kind_ops_of(s->kind);
    if (!*ops)
        return pp_error_set(err, PP_ERR_INVALID, "unit '%s': unknown kind %d", s->name,
                            (int)s->kind);
    if (s->name[0] == '\0' || !(*ops)->check(s))
        return pp_error_set(err, PP_ERR_INVALID,
                            "unit '%s': bad %s spec (in %d, out %d, planes %d, kernel %d, "
                            "stride %d, pad %d, downsample %d)",
                            s->name, (*ops)->name, s->in_c, s->out_c, s->planes, s->kernel,
                            s->stride, s->pad, (int)s->downsample);
    return PP_OK;
}

/* ---- construction --------------------------------------------------------------- */

/* Makes a unit of spec on dev (NULL: counting mode, nothing allocated). */
pp_status pp_unit_make(const pp_unit_spec *spec, uint64_t seed, pp_device_ctx *dev,
                       pp_unit **out, pp_error *err)
{
    *out = NULL;
    const pp_unit_kind_ops *ops;
    PP_TRY(check_spec(spec, &ops, err));
    pp_unit *u = calloc(1, sizeof *u);
    if (u) u->impl = calloc(1, ops->impl_size ? ops->impl_size : 1);
    if (!u || !u->impl) {
        free(u);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (unit)");
    }
    u->spec = *spec;
    u->spec.name[sizeof u->spec.name - 1] = '\0';
    u->seed = seed;
    u->ops = ops;
    u->dev = dev;
    pp_status s = ops->build(u, seed, err);
    if (s != PP_OK) {
        pp_error_prefix(err, "%s", spec->name);
        pp_unit_free(u);
        return s;
    }
    *out = u;
    return PP_OK;
}

pp_status pp_unit_new(const pp_unit_spec *spec, uint64_t seed, pp_device_ctx *dev, pp_unit **out,
                      pp_error *err)
{
    *out = NULL;
    if (!spec || !dev) return pp_error_set(err, PP_ERR_INVALID, "pp_unit_new: NULL argument");
    return pp_unit_make(spec, seed, dev, out, err);
}

void pp_unit_set_draw(pp_unit *u, const pp_unit_draw *d)
{
    u->draw = *d;
}

pp_dropout_desc pp_unit_dropout(const pp_unit *u, int offset)
{
    if (u->spec.dropout <= 0.0f) return (pp_dropout_desc){0};
    const int site = u->spec.site + offset;
    return (pp_dropout_desc){.p = u->spec.dropout,
                             .key = pp_dropout_key(u->seed, u->draw.step, site),
                             .first_sample = u->draw.first_sample,
                             .step = u->draw.step_at,
                             .seed = u->seed,
                             .site = site};
}

static void slot_drop(pp_unit_slot *s, bool abandon)
{
    for (int i = 0; i < s->list.n; i++) {
        pp_saved_tensor *it = &s->list.item[i];
        if (it->held) { /* a view of a shared activation */
            pp_unit_act_unref(it->held, abandon);
            it->held = NULL;
            *it->t = (pp_tensor){0};
        } else if (abandon) {
            pp_tensor_abandon(it->t);
        } else {
            pp_tensor_free(it->t);
        }
    }
    free(s->saved);
    s->saved = NULL;
    s->list.n = 0;
    s->live = false;
    s->waiting = false;
}

static void slot_clear(pp_unit_slot *s)
{
    slot_drop(s, false);
}

void pp_unit_params_changed(pp_unit *u)
{
    memset(u->low_fresh, 0, sizeof u->low_fresh);
}

void pp_unit_free(pp_unit *u)
{
    if (!u) return;
    for (int i = 0; i < u->n_slots; i++) slot_clear(&u->slots[i]);
    free(u->slots);
    pp_unit_grads_reset(u);
    free(u->parts);
    if (u->dev) {
        for (int i = 0; i < u->n_entries; i++) {
            pp_tensor_free(&u->value[i]);
            pp_tensor_free(&u->grad[i]);
            pp_tensor_free(&u->low[i]);
        }
        for (int i = 0; i < u->n_bn; i++) pp_tensor_free(&u->bn[i]->slots);
        pp_tensor_free(&u->cache);
        if (u->ops->release) u->ops->release(u);
    }
    free(u->impl);
    free(u);
}

const char *pp_unit_name(const pp_unit *u)
{
    return u->spec.name;
}

const pp_unit_spec *pp_unit_get_spec(const pp_unit *u)
{
    return &u->spec;
}

pp_device_ctx *pp_unit_device(const pp_unit *u)
{
    return u->dev;
}

int pp_unit_state_count(const pp_unit *u)
{
    return u->n_entries;
}

const pp_named_tensor *pp_unit_state(const pp_unit *u, int i)
{
    return i >= 0 && i < u->n_entries ? &u->entry[i] : NULL;
}

/* ---- shapes and costs ------------------------------------------------------------ */

pp_status pp_unit_output_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                               int64_t *out, pp_error *err)
{
    const pp_unit_kind_ops *ops;
    PP_TRY(check_spec(s, &ops, err)); /* a bad spec (stride 0) has no shape arithmetic */
    const char *why = "has no batch dimension";
    bool ok = in_ndim >= 1 && in_ndim <= PP_MAX_DIMS && in[0] >= 1;
    if (ok) {
        for (int i = 0; i < PP_MAX_DIMS; i++) out[i] = 1;
        out[0] = in[0];
        ok = ops->shape(s, in_ndim, in, out_ndim, out, &why);
    }
    if (ok) return PP_OK;
    pp_tensor t = {.ndim = in_ndim < 0 ? 0 : in_ndim > PP_MAX_DIMS ? PP_MAX_DIMS : in_ndim};
    for (int i = 0; i < t.ndim; i++) t.shape[i] = in[i];
    char buf[64];
    return pp_error_set(err, PP_ERR_INVALID, "%s (%s): input %s %s", s->name, ops->name,
                        pp_tensor_shape_str(&t, buf, sizeof buf), why);
}

/* The kind's saved list for an input shape, its fields in saved. */
pp_status pp_unit_saved_list(const pp_unit *u, int in_ndim, const int64_t *in, void *saved,
                            pp_saved_list *l, pp_error *err)
{
    *l = (pp_saved_list){0};
    u->ops->saved(u, in_ndim, in, saved, l);
    if (l->overflow)
        return pp_error_set(err, PP_ERR_INTERNAL, "%s: more than %d saved tensors", u->spec.name,
                            PP_UNIT_MAX_SAVED);
    return PP_OK;
}

/* ---- forward / backward -------------------------------------------------------------- */

static pp_status check_tensor(const pp_unit *u, const char *what, const pp_tensor *t,
                              pp_dtype dtype, int ndim, const int64_t *shape, pp_error *err)
{
    if (!t) return pp_error_set(err, PP_ERR_INVALID, "%s is NULL", what);
    if (t->dtype != dtype || t->dev != u->dev)
        return pp_error_set(err, PP_ERR_INVALID, "%s must be %s on %s (is %s on %s)", what,
                            pp_dtype_name(dtype), u->dev->name, pp_dtype_name(t->dtype),
                            t->dev ? t->dev->name : "none");
    if (ndim < 0) return PP_OK;
    pp_tensor want = {.ndim = ndim};
    for (int i = 0; i < ndim; i++) want.shape[i] = shape[i];
    if (!pp_tensor_same_shape(t, &want)) {
        char a[64], b[64];
        return pp_error_set(err, PP_ERR_INVALID, "%s has shape %s, expected %s", what,
                            pp_tensor_shape_str(t, a, sizeof a),
                            pp_tensor_shape_str(&want, b, sizeof b));
    }
    return PP_OK;
}

static pp_status get_slot(pp_unit *u, int mb, pp_unit_slot **out, pp_error *err)
{
    if (mb < 0 || mb >= MAX_MB)
        return pp_error_set(err, PP_ERR_INVALID, "micro-batch index %d not in [0, %d)", mb, MAX_MB);
    if (mb >= u->n_slots) {
        int n = u->n_slots ? u->n_slots : 4;
        while (n <= mb) n *= 2;
        pp_unit_slot *grown = realloc(u->slots, (size_t)n * sizeof *grown);
        if (!grown) return pp_error_set(err, PP_ERR_OOM, "out of host memory (slots)");
        memset(grown + u->n_slots, 0, (size_t)(n - u->n_slots) * sizeof *grown);
        u->slots = grown;
        u->n_slots = n;
    }
    *out = &u->slots[mb];
    return PP_OK;
}

/* The slot of mb when it holds a forward in flight (live) or waits for its
 * weight part (waiting); else NULL. */
static pp_unit_slot *slot_of(const pp_unit *u, int mb, bool waiting)
{
    if (mb < 0 || mb >= u->n_slots) return NULL;
    pp_unit_slot *s = &u->slots[mb];
    return (waiting ? s->waiting : s->live) ? s : NULL;
}

/* Allocates one tensor of the saved list in ex's stream order, in the unit's
 * layout. */
static pp_status saved_alloc(const pp_unit *u, pp_exec *ex, const pp_saved_tensor *it,
                             pp_error *err)
{
    PP_TRY(pp_tensor_alloc_on(it->t, ex, it->dtype, it->ndim, it->shape, err));
    if (it->dtype == PP_F32 || it->dtype == PP_BF16)
        it->t->layout = pp_unit_spec_layout(&u->spec, it->ndim);
    return PP_OK;
}

/* Whether t can stand for the copy saved_alloc would make of it: the same
 * dtype, shape and memory order. */
static bool shareable(const pp_unit *u, const pp_saved_tensor *it, const pp_tensor *t)
{
    pp_tensor want = {.dtype = it->dtype, .ndim = it->ndim};
    memcpy(want.shape, it->shape, sizeof want.shape);
    if (it->dtype == PP_F32 || it->dtype == PP_BF16)
        want.layout = pp_unit_spec_layout(&u->spec, it->ndim);
    return t->data && t->dtype == want.dtype && t->dev == u->dev && pp_tensor_same_shape(t, &want) &&
           pp_tensor_effective_layout(t) == pp_tensor_effective_layout(&want);
}

/* Allocates the kind's saved struct and the tensors of its saved list the
 * kind's forward writes, for input x, in ex's stream order (its input and
 * output are kept after the forward: slot_keep_io; the split backward's
 * tensors before its input part: slot_alloc_grad). */
static pp_status slot_alloc(pp_unit *u, pp_exec *ex, pp_unit_slot *s, const pp_tensor *x,
                            pp_error *err)
{
    s->saved = calloc(1, u->ops->saved_size ? u->ops->saved_size : 1);
    if (!s->saved) return pp_error_set(err, PP_ERR_OOM, "out of host memory (saved state)");
    pp_saved_list l;
    PP_TRY(pp_unit_saved_list(u, x->ndim, x->shape, s->saved, &l, err));
    for (int i = 0; i < l.n; i++) {
        const pp_saved_tensor *it = &l.item[i];
        s->list.item[s->list.n++] = *it;
        if (it->from == PP_SAVED_NEW) PP_TRY(saved_alloc(u, ex, it, err));
    }
    return PP_OK;
}

/* After a successful training forward: keeps the input x and output y where
 * the saved list asks for them, sharing xa or ya where they match what a copy
 * would be. */
static pp_status slot_keep_io(pp_unit *u, pp_exec *ex, pp_unit_slot *s, pp_unit_act *xa,
                              const pp_tensor *x, pp_unit_act *ya, const pp_tensor *y,
                              pp_error *err)
{
    for (int i = 0; i < s->list.n; i++) {
        pp_saved_tensor *it = &s->list.item[i];
        if (it->from != PP_SAVED_INPUT && it->from != PP_SAVED_OUTPUT) continue;
        pp_unit_act *a = it->from == PP_SAVED_INPUT ? xa : ya;
        const pp_tensor *src = it->from == PP_SAVED_INPUT ? x : y;
        if (a && shareable(u, it, src)) {
            *it->t = *src;
            it->t->owns = false;
            it->t->stream = NULL;
            it->held = a;
            a->refs++;
            continue;
        }
        PP_TRY(saved_alloc(u, ex, it, err));
        PP_TRY(pp_copy(ex, src, it->t, err));
    }
    return PP_OK;
}

/* Before the input part of a split backward: the tensors it writes for the
 * weight part. */
static pp_status slot_alloc_grad(pp_unit *u, pp_exec *ex, pp_unit_slot *s, pp_error *err)
{
    for (int i = 0; i < s->list.n; i++)
        if (s->list.item[i].from == PP_SAVED_GRAD)
            PP_TRY(saved_alloc(u, ex, &s->list.item[i], err));
    return PP_OK;
}

/* After the input part: frees what the weight part does not need. */
static void slot_trim(pp_unit_slot *s)
{
    for (int i = 0; i < s->list.n; i++) {
        pp_saved_tensor *it = &s->list.item[i];
        if (it->until_w) continue;
        if (it->held) {
            pp_unit_act_drop(it->held);
            it->held = NULL;
            *it->t = (pp_tensor){0};
        } else {
            pp_tensor_free(it->t);
        }
    }
}

typedef pp_status (*forward_fn)(pp_unit *, pp_exec *, const pp_tensor *, pp_tensor *, void *,
                                pp_error *);

/* A training forward of u for slot s: its saved state, fwd (NULL: the
 * output y was computed already, by a fused pair), what it keeps of x and y;
 * the slot is then in flight, or cleared on failure. */
static pp_status slot_run(pp_unit *u, pp_exec *ex, pp_unit_slot *s, forward_fn fwd,
                          pp_unit_act *xa, const pp_tensor *x, pp_unit_act *ya, pp_tensor *y,
                          pp_error *err)
{
    pp_status st = slot_alloc(u, ex, s, x, err);
    if (st == PP_OK && fwd) st = fwd(u, ex, x, y, s->saved, err);
    if (st == PP_OK) st = slot_keep_io(u, ex, s, xa, x, ya, y, err);
    if (st != PP_OK) {
        slot_clear(s);
        return st;
    }
    s->live = true;
    s->in_ndim = x->ndim;
    memcpy(s->in_shape, x->shape, sizeof s->in_shape);
    u->in_flight++;
    return PP_OK;
}

/* A training forward that keeps nothing: the saved state lives during fwd
 * only (batch statistics computed and running statistics updated as in any
 * training forward). */
static pp_status run_discard(pp_unit *u, pp_exec *ex, forward_fn fwd, const pp_tensor *x,
                             pp_tensor *y, pp_error *err)
{
    pp_unit_slot tmp = {0};
    pp_status st = slot_alloc(u, ex, &tmp, x, err);
    if (st == PP_OK) st = fwd(u, ex, x, y, tmp.saved, err);
    slot_clear(&tmp);
    return st;
}

/* A forward of u in a pass (with relu: the kind's forward_relu). */
static pp_status forward_work(pp_unit *u, pp_exec *ex, int mb, pp_unit_act *xa,
                              const pp_tensor *x, pp_unit_act *ya, pp_tensor *y,
                              pp_unit_pass pass, bool relu, pp_error *err)
{
    if ((xa && x != &xa->t) || (ya && y != &ya->t))
        return pp_error_set(err, PP_ERR_INVALID, "a shared activation is not the tensor passed");
    if (!ex || ex->dev != u->dev)
        return pp_error_set(err, PP_ERR_INVALID, "exec is not on the unit's device %s",
                            u->dev->name);
    if ((unsigned)pass > PP_UNIT_PASS_RECOMPUTE)
        return pp_error_set(err, PP_ERR_INVALID, "unknown forward pass %d", (int)pass);
    PP_TRY(check_tensor(u, "x", x, pp_unit_spec_in_dtype(&u->spec), -1, NULL, err));
    int out_ndim;
    int64_t out[PP_MAX_DIMS];
    PP_TRY(pp_unit_output_shape(&u->spec, x->ndim, x->shape, &out_ndim, out, err));
    PP_TRY(check_tensor(u, "y", y, pp_unit_spec_out_dtype(&u->spec), out_ndim, out, err));
    const forward_fn fwd = relu ? u->ops->forward_relu : u->ops->forward;
    if (u->decoding && (pass != PP_UNIT_PASS_INFER || x->ndim < 2 || x->shape[0] != 1 ||
                        u->decode_at + x->shape[1] > u->decode_cap))
        return pp_error_set(err, PP_ERR_INVALID,
                            "decoding from position %d of %d takes inference forwards of one "
                            "sample of at most %d positions",
                            u->decode_at, u->decode_cap, u->decode_cap - u->decode_at);
    if (pass == PP_UNIT_PASS_INFER) return fwd(u, ex, x, y, NULL, err);
    u->cur_mb = mb; /* the row of deferred batch-norm statistics (bn_defer.h) */
    if (pass == PP_UNIT_PASS_TRAIN_DISCARD) return run_discard(u, ex, fwd, x, y, err);
    pp_unit_slot *s = NULL;
    PP_TRY(get_slot(u, mb, &s, err));
    if (s->live || s->waiting)
        return pp_error_set(err, PP_ERR_INVALID,
                            "micro-batch %d is already in flight (forward twice without "
                            "backward)",
                            mb);
    u->stats_frozen = pass == PP_UNIT_PASS_RECOMPUTE;
    pp_status st = slot_run(u, ex, s, fwd, xa, x, ya, y, err);
    u->stats_frozen = false;
    return st;
}

/* forward_work inside the profiler range "UNIT forward" ("UNIT recompute":
 * runtime/core/ranges.h) */
static pp_status forward_impl(pp_unit *u, pp_exec *ex, int mb, pp_unit_act *xa,
                              const pp_tensor *x, pp_unit_act *ya, pp_tensor *y,
                              pp_unit_pass pass, bool relu, pp_error *err)
{
    pp_range_pushf("%s %s", u->spec.name,
                   pass == PP_UNIT_PASS_RECOMPUTE ? "recompute" : "forward");
    pp_status st = forward_work(u, ex, mb, xa, x, ya, y, pass, relu, err);
    pp_range_pop();
    return st;
}

pp_status pp_unit_forward(pp_unit *u, pp_exec *ex, int mb, const pp_tensor *x, pp_tensor *y,
                          bool train, pp_error *err)
{
    return pp_unit_forward_pass(u, ex, mb, NULL, x, NULL, y,
                                train ? PP_UNIT_PASS_TRAIN : PP_UNIT_PASS_INFER, err);
}

pp_status pp_unit_forward_shared(pp_unit *u, pp_exec *ex, int mb, pp_unit_act *xa,
                                 const pp_tensor *x, pp_unit_act *ya, pp_tensor *y, bool train,
                                 pp_error *err)
{
    return pp_unit_forward_pass(u, ex, mb, xa, x, ya, y,
                                train ? PP_UNIT_PASS_TRAIN : PP_UNIT_PASS_INFER, err);
}

pp_status pp_unit_forward_pass(pp_unit *u, pp_exec *ex, int mb, pp_unit_act *xa,
                               const pp_tensor *x, pp_unit_act *ya, pp_tensor *y,
                               pp_unit_pass pass, pp_error *err)
{
    if (!u) return pp_error_set(err, PP_ERR_INVALID, "pp_unit_forward: NULL unit");
    pp_status st = forward_impl(u, ex, mb, xa, x, ya, y, pass, false, err);
    if (st != PP_OK) pp_error_prefix(err, "%s forward (micro-batch %d)", u->spec.name, mb);
    return st;
}

pp_status pp_unit_set_decode(pp_unit *u, int at, int cap, pp_error *err)
{
    if (!u) return pp_error_set(err, PP_ERR_INVALID, "pp_unit_set_decode: NULL unit");
    if (at < 0) {
        u->decoding = false;
        pp_tensor_free(&u->cache);
        return PP_OK;
    }
    if (at >= cap || (u->cache.data && cap != u->decode_cap))
        return pp_error_set(err, PP_ERR_INVALID,
                            "%s: decoding from position %d of %d (the cache holds %d)",
                            u->spec.name, at, cap, u->cache.data ? u->decode_cap : cap);
    u->decoding = true;
    u->decode_at = at;
    u->decode_cap = cap;
    return PP_OK;
}

/* ---- backward ------------------------------------------------------------------------ */

typedef enum backward_part {
    PART_WHOLE,  /* B: the input and weight parts together */
    PART_INPUT,  /* I */
    PART_WEIGHT, /* W */
} backward_part;

/* A backward of u or one of its parts (with relu_y: the kind's relu variant). */
static pp_status backward_work(pp_unit *u, pp_exec *ex, int mb, backward_part part,
                               const pp_tensor *dy, pp_tensor *dx, const pp_tensor *relu_y,
                               pp_error *err)
{
    if (!ex || ex->dev != u->dev)
        return pp_error_set(err, PP_ERR_INVALID, "exec is not on the unit's device %s",
                            u->dev->name);
    pp_unit_slot *s = slot_of(u, mb, part == PART_WEIGHT);
    if (!s)
        return pp_error_set(err, PP_ERR_INVALID,
                            part == PART_WEIGHT
                                ? "micro-batch %d has no input part of a backward done (its "
                                  "weight part runs after it)"
                                : "micro-batch %d has no training forward in flight",
                            mb);
    pp_status st = PP_OK;
    if (part != PART_WEIGHT) {
        int out_ndim;
        int64_t out[PP_MAX_DIMS];
        PP_TRY(pp_unit_output_shape(&u->spec, s->in_ndim, s->in_shape, &out_ndim, out, err));
        PP_TRY(check_tensor(u, "dy", dy, pp_unit_spec_out_dtype(&u->spec), out_ndim, out, err));
        if (dx)
            PP_TRY(check_tensor(u, "dx", dx, pp_unit_spec_in_dtype(&u->spec), s->in_ndim,
                                s->in_shape, err));
    }
    const pp_unit_kind_ops *k = u->ops;
    if (part == PART_INPUT) {
        st = slot_alloc_grad(u, ex, s, err);
        if (st == PP_OK && relu_y)
            st = k->backward_input_relu
                     ? k->backward_input_relu(u, ex, s->saved, relu_y, dy, dx, err)
                     : k->backward_relu(u, ex, s->saved, relu_y, dy, dx, NULL, err);
        else if (st == PP_OK && k->backward_input)
            st = k->backward_input(u, ex, s->saved, dy, dx, err);
        else if (st == PP_OK && !pp_unit_has_params(u))
            st = k->backward(u, ex, s->saved, dy, dx, NULL, err);
        else if (st == PP_OK)
            st = pp_error_set(err, PP_ERR_UNSUPPORTED, "%s has no split backward", k->name);
        if (st == PP_OK) {
            slot_trim(s);
            s->live = false;
            s->waiting = true;
            return PP_OK;
        }
    } else {
        pp_tensor *grad;
        pp_unit_part *gp;
        st = pp_unit_grads_begin(u, ex, mb, &grad, &gp, err);
        if (st == PP_OK && part == PART_WEIGHT)
            st = k->backward_weight ? k->backward_weight(u, ex, s->saved, grad, err) : PP_OK;
        else if (st == PP_OK)
            st = relu_y ? k->backward_relu(u, ex, s->saved, relu_y, dy, dx, grad, err)
                        : k->backward(u, ex, s->saved, dy, dx, grad, err);
        st = pp_unit_grads_end(u, ex, mb, gp, st, err);
    }
    slot_clear(s);
    u->in_flight--;
    return st;
}

/* backward_work inside the profiler range "UNIT backward" ("UNIT backward
 * input", "UNIT backward weight": runtime/core/ranges.h) */
static pp_status backward_impl(pp_unit *u, pp_exec *ex, int mb, backward_part part,
                               const pp_tensor *dy, pp_tensor *dx, const pp_tensor *relu_y,
                               pp_error *err)
{
    static const char *const word[] = {[PART_WHOLE] = "backward",
                                       [PART_INPUT] = "backward input",
                                       [PART_WEIGHT] = "backward weight"};
    pp_range_pushf("%s %s", u->spec.name, word[part]);
    pp_status st = backward_work(u, ex, mb, part, dy, dx, relu_y, err);
    pp_range_pop();
    return st;
}

pp_status pp_unit_backward(pp_unit *u, pp_exec *ex, int mb, const pp_tensor *dy, pp_tensor *dx,
                           pp_error *err)
{
    if (!u) return pp_error_set(err, PP_ERR_INVALID, "pp_unit_backward: NULL unit");
    pp_status st = backward_impl(u, ex, mb, PART_WHOLE, dy, dx, NULL, err);
    if (st != PP_OK) pp_error_prefix(err, "%s backward (micro-batch %d)", u->spec.name, mb);
    return st;
}

pp_status pp_unit_backward_input(pp_unit *u, pp_exec *ex, int mb, const pp_tensor *dy,
                                 pp_tensor *dx, pp_error *err)
{
    if (!u) return pp_error_set(err, PP_ERR_INVALID, "pp_unit_backward_input: NULL unit");
    pp_status st = backward_impl(u, ex, mb, PART_INPUT, dy, dx, NULL, err);
    if (st != PP_OK)
        pp_error_prefix(err, "%s backward, input part (micro-batch %d)", u->spec.name, mb);
    return st;
}

pp_status pp_unit_backward_weight(pp_unit *u, pp_exec *ex, int mb, pp_error *err)
{
    if (!u) return pp_error_set(err, PP_ERR_INVALID, "pp_unit_backward_weight: NULL unit");
    pp_status st = backward_impl(u, ex, mb, PART_WEIGHT, NULL, NULL, NULL, err);
    if (st != PP_OK)
        pp_error_prefix(err, "%s backward, weight part (micro-batch %d)", u->spec.name, mb);
    return st;
}

bool pp_unit_fuses_relu(const pp_unit *u, const pp_unit *next)
{
    return u && next && u->ops->forward_relu && u->ops->backward_relu &&
           next->spec.kind == PP_UNIT_RELU && next->dev == u->dev &&
           pp_unit_spec_out_dtype(&u->spec) == pp_unit_spec_in_dtype(&next->spec) &&
           u->spec.nhwc == next->spec.nhwc;
}

static pp_status forward_pair(pp_unit *u, pp_unit *relu, pp_exec *ex, int mb, pp_unit_act *xa,
                              const pp_tensor *x, pp_unit_act *ya, pp_tensor *y,
                              pp_unit_pass pass, pp_error *err)
{
    if (!pp_unit_fuses_relu(u, relu))
        return pp_error_set(err, PP_ERR_INVALID, "not a unit and a ReLU that run as one");
    const bool keep = pass == PP_UNIT_PASS_TRAIN || pass == PP_UNIT_PASS_RECOMPUTE;
    pp_unit_slot *rs = NULL;
    if (keep) {
        PP_TRY(get_slot(relu, mb, &rs, err));
        if (rs->live || rs->waiting)
            return pp_error_set(err, PP_ERR_INVALID,
                                "micro-batch %d is already in flight in %s", mb, relu->spec.name);
    }
    PP_TRY(forward_impl(u, ex, mb, xa, x, ya, y, pass, true, err));
    if (!keep) return PP_OK;
    /* the ReLU's state, as if it had run on y (what it keeps is its output) */
    pp_status st = slot_run(relu, ex, rs, NULL, NULL, y, ya, y, err);
    if (st != PP_OK) pp_unit_release(u, mb);
    return st;
}

pp_status pp_unit_forward_relu_pair(pp_unit *u, pp_unit *relu, pp_exec *ex, int mb,
                                    pp_unit_act *xa, const pp_tensor *x, pp_unit_act *ya,
                                    pp_tensor *y, bool train, pp_error *err)
{
    return pp_unit_forward_relu_pair_pass(u, relu, ex, mb, xa, x, ya, y,
                                          train ? PP_UNIT_PASS_TRAIN : PP_UNIT_PASS_INFER, err);
}

pp_status pp_unit_forward_relu_pair_pass(pp_unit *u, pp_unit *relu, pp_exec *ex, int mb,
                                         pp_unit_act *xa, const pp_tensor *x, pp_unit_act *ya,
                                         pp_tensor *y, pp_unit_pass pass, pp_error *err)
{
    if (!u || !relu) return pp_error_set(err, PP_ERR_INVALID, "pp_unit_forward_relu_pair: NULL unit");
    pp_status st = forward_pair(u, relu, ex, mb, xa, x, ya, y, pass, err);
    if (st != PP_OK)
        pp_error_prefix(err, "%s and %s forward (micro-batch %d)", u->spec.name, relu->spec.name,
                        mb);
    return st;
}

/* The backward of a fused pair (input: its input part; the ReLU's state then
 * waits for its (empty) weight part too). */
static pp_status backward_pair(pp_unit *u, pp_unit *relu, pp_exec *ex, int mb, bool input,
                               const pp_tensor *dy, pp_tensor *dx, pp_error *err)
{
    if (!pp_unit_fuses_relu(u, relu))
        return pp_error_set(err, PP_ERR_INVALID, "not a unit and a ReLU that run as one");
    pp_unit_slot *rs = slot_of(relu, mb, false);
    if (!rs)
        return pp_error_set(err, PP_ERR_INVALID,
                            "micro-batch %d has no training forward in flight in %s", mb,
                            relu->spec.name);
    const pp_tensor *relu_y = NULL;
    for (int i = 0; i < rs->list.n; i++)
        if (rs->list.item[i].from == PP_SAVED_OUTPUT) relu_y = rs->list.item[i].t;
    pp_status st = relu_y ? backward_impl(u, ex, mb, input ? PART_INPUT : PART_WHOLE, dy, dx,
                                          relu_y, err)
                          : pp_error_set(err, PP_ERR_INTERNAL, "%s keeps no output",
                                         relu->spec.name);
    if (input && st == PP_OK) {
        slot_trim(rs);
        rs->live = false;
        rs->waiting = true;
        return PP_OK;
    }
    slot_clear(rs);
    relu->in_flight--;
    return st;
}

pp_status pp_unit_backward_relu_pair(pp_unit *u, pp_unit *relu, pp_exec *ex, int mb,
                                     const pp_tensor *dy, pp_tensor *dx, pp_error *err)
{
    if (!u || !relu)
        return pp_error_set(err, PP_ERR_INVALID, "pp_unit_backward_relu_pair: NULL unit");
    pp_status st = backward_pair(u, relu, ex, mb, false, dy, dx, err);
    if (st != PP_OK)
        pp_error_prefix(err, "%s and %s backward (micro-batch %d)", u->spec.name,
                        relu->spec.name, mb);
    return st;
}

pp_status pp_unit_backward_input_relu_pair(pp_unit *u, pp_unit *relu, pp_exec *ex, int mb,
                                           const pp_tensor *dy, pp_tensor *dx, pp_error *err)
{
    if (!u || !relu)
        return pp_error_set(err, PP_ERR_INVALID, "pp_unit_backward_input_relu_pair: NULL unit");
    pp_status st = backward_pair(u, relu, ex, mb, true, dy, dx, err);
    if (st != PP_OK)
        pp_error_prefix(err, "%s and %s backward, input part (micro-batch %d)", u->spec.name,
                        relu->spec.name, mb);
    return st;
}

void pp_unit_release(pp_unit *u, int mb)
{
    if (!u || mb < 0 || mb >= u->n_slots || !(u->slots[mb].live || u->slots[mb].waiting)) return;
    slot_clear(&u->slots[mb]);
    u->in_flight--;
}

void pp_unit_abandon(pp_unit *u, int mb)
{
    if (!u || mb < 0 || mb >= u->n_slots || !u->slots[mb].live) return;
    slot_drop(&u->slots[mb], true);
    u->in_flight--;
}

int pp_unit_in_flight(const pp_unit *u)
{
    return u->in_flight;
}

bool pp_unit_saved_input(const pp_unit *u, int mb, int *ndim, int64_t *shape)
{
    if (!u) return false;
    const pp_unit_slot *s = slot_of(u, mb, false);
    if (!s) return false;
    if (ndim) *ndim = s->in_ndim;
    if (shape) memcpy(shape, s->in_shape, sizeof s->in_shape);
    return true;
}

bool pp_unit_holds(const pp_unit *u, int mb)
{
    return u && mb >= 0 && mb < u->n_slots && (u->slots[mb].live || u->slots[mb].waiting);
}

bool pp_unit_waits_for_weight(const pp_unit *u, int mb)
{
    return u && slot_of(u, mb, true) != NULL;
}

pp_status pp_unit_zero_grads(pp_unit *u, pp_exec *ex, pp_error *err)
{
    pp_unit_grads_reset(u);
    for (int i = 0; i < u->n_entries; i++)
        if (u->entry[i].grad) PP_TRY(pp_zero(ex, &u->grad[i], err));
    return PP_OK;
}

int pp_unit_batch_counts(const pp_unit *u, int64_t *out, int cap)
{
    for (int i = 0; i < u->n_bn && i < cap; i++) out[i] = u->bn[i]->pending;
    return u->n_bn;
}

void pp_unit_set_batch_counts(pp_unit *u, const int64_t *in)
{
    for (int i = 0; i < u->n_bn; i++) u->bn[i]->pending = in[i];
}

void pp_unit_add_batches(pp_unit *u, int64_t n)
{
    if (u->bn_deferred) return; /* a step's commit counts its forwards */
    for (int i = 0; i < u->n_bn; i++) u->bn[i]->pending += n;
}

pp_status pp_unit_sync_buffers(pp_unit *u, pp_error *err)
{
    for (int i = 0; i < u->n_bn; i++) {
        pp_bn_layer *b = u->bn[i];
        if (b->pending == 0) continue;
        pp_tensor *nbt = &u->value[b->e + 4];
        int64_t v;
        PP_TRY(pp_tensor_to_host(nbt, &v, sizeof v, err));
        v += b->pending;
        PP_TRY(pp_tensor_from_host(nbt, &v, sizeof v, err));
        b->pending = 0;
    }
    return PP_OK;
}
