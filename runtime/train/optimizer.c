/*
 * optimizer.c - one optimizer over parameters spread across devices (see
 * train/optimizer.h); the kind's arithmetic is its table's (sgd.c, adamw.c).
 *
 * Per parameter the optimizer keeps its state (the kind's slots: tensors on
 * the parameter's device, allocated at its first step, and AdamW's step
 * count, counted on the host and written into an I64 scalar for
 * checkpoints), whether that state holds anything yet, and its weight decay
 * (its role's). A step makes one multi-tensor update per group: the
 * parameters of one device that share their decay, their state's presence
 * and their step count (on CUDA a few kernel launches per device instead of
 * one per tensor); zero_grad and the gradients' sums of squares one
 * multi-tensor call per device. Parameters are independent, so grouping
 * them changes no result.
 */
#include "runtime/train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"
#include "runtime/train/optim_kind.h"

typedef struct opt_param {
    char *name;                              /* state_dict name */
    char *state_name[PP_OPTIM_MAX_SLOTS];    /* "<slot prefix><name>" */
    pp_tensor *param;                        /* borrowed */
    pp_tensor *grad;                         /* borrowed */
    bool copy;                               /* a tied copy: no update, no state */
    double decay;                            /* its role's weight decay */
    pp_tensor state[PP_OPTIM_MAX_SLOTS];     /* zeroed until allocated */
    bool has_state;                          /* state holds values (after a step or a load) */
    int64_t steps;                           /* steps taken with this state */
} opt_param;

typedef struct dev_exec {
    pp_device_ctx *dev;
    pp_exec ex;
} dev_exec;

struct pp_optimizer {
    pp_optimizer_settings cfg;
    const pp_optim_kind_ops *kind;
    int n_slots;
    const char *prefix[PP_OPTIM_MAX_SLOTS];
    bool scalar[PP_OPTIM_MAX_SLOTS], zeroed[PP_OPTIM_MAX_SLOTS];
    opt_param *params; /* n, in the order given */
    size_t n;
    int64_t steps;
    float grad_scale;  /* the next step's; 1 after each */
    dev_exec *execs;   /* internal execs, one per device met (at most n) */
    size_t n_execs;
    /* scratch for the multi-tensor calls (n each) */
    size_t *group;     /* indexes of the parameters of one group */
    bool *grouped;     /* parameter already in an earlier group of this call */
    pp_tensor **group_p, **group_g;
    pp_tensor **group_s[PP_OPTIM_MAX_SLOTS];
    double *group_sums;
};

static const pp_optim_kind_ops *kind_of(pp_optimizer_kind k)
{
    switch (k) {
    case PP_OPTIMIZER_SGD: return &pp_optim_sgd_ops;
    case PP_OPTIMIZER_ADAMW: return &pp_optim_adamw_ops;
    }
    return NULL;
}

const char *pp_optimizer_kind_name(pp_optimizer_kind kind)
{
    const pp_optim_kind_ops *k = kind_of(kind);
    return k ? k->name : "?";
}

pp_optimizer_settings pp_optimizer_defaults(pp_optimizer_kind kind)
{
    if (kind == PP_OPTIMIZER_ADAMW)
        return (pp_optimizer_settings){.kind = kind, .lr = 1e-3, .weight_decay = 0.01,
                                       .has_norm_weight_decay = true, .has_bias_weight_decay = true,
                                       .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    return (pp_optimizer_settings){.kind = PP_OPTIMIZER_SGD, .lr = 0.1};
}

double pp_optimizer_decay_of(const pp_optimizer_settings *s, pp_param_role role)
{
    const bool bias = role == PP_PARAM_BIAS || role == PP_PARAM_NORM_BIAS;
    const bool norm = role == PP_PARAM_NORM_WEIGHT || role == PP_PARAM_NORM_BIAS;
    if (bias && s->has_bias_weight_decay) return s->bias_weight_decay;
    if (norm && s->has_norm_weight_decay) return s->norm_weight_decay;
    return s->weight_decay;
}

static pp_status check_settings(const pp_optimizer_settings *s, pp_error *err)
{
    if (!s) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL settings");
    if (!kind_of(s->kind))
        return pp_error_set(err, PP_ERR_INPUT, "optimizer: unknown kind %d", (int)s->kind);
    if (!(s->lr >= 0) || !isfinite(s->lr))
        return pp_error_set(err, PP_ERR_INPUT, "optimizer: learning rate %g must be >= 0", s->lr);
    const double decays[3] = {s->weight_decay, s->has_norm_weight_decay ? s->norm_weight_decay : 0,
                              s->has_bias_weight_decay ? s->bias_weight_decay : 0};
    for (int i = 0; i < 3; i++)
        if (!(decays[i] >= 0) || !isfinite(decays[i]))
            return pp_error_set(err, PP_ERR_INPUT, "optimizer: weight decay %g must be >= 0",
                                decays[i]);
    return kind_of(s->kind)->check(s, err);
}

static pp_status check_param(const pp_param_ref *p, const pp_param_info *info, size_t i,
                             pp_error *err)
{
    if (!p->name || !p->name[0])
        return pp_error_set(err, PP_ERR_INVALID, "optimizer: parameter %zu has no name", i);
    if (!p->param || !p->grad)
        return pp_error_set(err, PP_ERR_INVALID, "optimizer: parameter '%s' has no %s", p->name,
                            p->param ? "gradient" : "tensor");
    if (p->param->dtype != PP_F32 || p->grad->dtype != PP_F32)
        return pp_error_set(err, PP_ERR_INVALID, "optimizer: parameter '%s' is not F32", p->name);
    if (!p->param->dev || p->param->dev != p->grad->dev)
        return pp_error_set(err, PP_ERR_INVALID,
                            "optimizer: parameter '%s' and its gradient are on different devices",
                            p->name);
    if (info && (unsigned)info->role > PP_PARAM_NORM_BIAS)
        return pp_error_set(err, PP_ERR_INVALID, "optimizer: parameter '%s' has role %d", p->name,
                            (int)info->role);
    if (!pp_tensor_same_shape(p->param, p->grad)) {
        char a[64], b[64];
        return pp_error_set(err, PP_ERR_INVALID,
                            "optimizer: parameter '%s' has shape %s, its gradient %s", p->name,
                            pp_tensor_shape_str(p->param, a, sizeof a),
                            pp_tensor_shape_str(p->grad, b, sizeof b));
    }
    return PP_OK;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names non-empty and distinct among the parameters that are not tied copies. */
static pp_status check_names(const pp_param_ref *params, const pp_param_info *info, size_t n,
                             pp_error *err)
{
    const char **names = calloc(n ? n : 1, sizeof *names);
    if (!names) return pp_error_set(err, PP_ERR_OOM, "out of host memory (optimizer)");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!info || !info[i].tied_copy) names[k++] = params[i].name;
    qsort(names, k, sizeof *names, name_cmp);
    pp_status s = PP_OK;
    for (size_t i = 1; i < k && s == PP_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            s = pp_error_set(err, PP_ERR_INVALID, "optimizer: parameter '%s' given twice",
                             names[i]);
    free(names);
    return s;
}

static char *joined(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

pp_status pp_optimizer_new_with(pp_optimizer **out, const pp_optimizer_settings *cfg,
                                const pp_param_ref *params, const pp_param_info *info, size_t n,
                                pp_error *err)
{
    if (!out) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL output");
    *out = NULL;
    PP_TRY(check_settings(cfg, err));
    if (n > 0 && !params) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL parameters");
    for (size_t i = 0; i < n; i++)
        PP_TRY(check_param(&params[i], info ? &info[i] : NULL, i, err));
    PP_TRY(check_names(params, info, n, err));

    pp_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return pp_error_set(err, PP_ERR_OOM, "out of host memory (optimizer)");
    opt->cfg = *cfg;
    opt->kind = kind_of(cfg->kind);
    opt->n_slots = opt->kind->slots(cfg, opt->prefix, opt->scalar, opt->zeroed);
    opt->grad_scale = 1.0f;
    const size_t cap = n ? n : 1;
    opt->params = calloc(cap, sizeof *opt->params);
    opt->execs = calloc(cap, sizeof *opt->execs);
    opt->group = calloc(cap, sizeof *opt->group);
    opt->grouped = calloc(cap, sizeof *opt->grouped);
    opt->group_p = calloc(cap, sizeof *opt->group_p);
    opt->group_g = calloc(cap, sizeof *opt->group_g);
    opt->group_sums = calloc(cap, sizeof *opt->group_sums);
    bool ok = opt->params && opt->execs && opt->group && opt->grouped && opt->group_p &&
              opt->group_g && opt->group_sums;
    for (int k = 0; k < opt->n_slots && ok; k++)
        ok = (opt->group_s[k] = calloc(cap, sizeof *opt->group_s[k])) != NULL;
    for (size_t i = 0; i < n && ok; i++) {
        opt_param *p = &opt->params[i];
        opt->n = i + 1;
        p->name = strdup(params[i].name);
        ok = p->name != NULL;
        for (int k = 0; k < opt->n_slots && ok; k++)
            ok = (p->state_name[k] = joined(opt->prefix[k], params[i].name)) != NULL;
        p->param = params[i].param;
        p->grad = params[i].grad;
        p->copy = info && info[i].tied_copy;
        p->decay = pp_optimizer_decay_of(cfg, info ? info[i].role : PP_PARAM_WEIGHT);
    }
    if (!ok) {
        pp_optimizer_free(opt);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (optimizer)");
    }
    *out = opt;
    return PP_OK;
}

pp_status pp_optimizer_new(pp_optimizer **out, const pp_sgd_config *cfg, const pp_param_ref *params,
                           size_t n, pp_error *err)
{
    if (!cfg) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL configuration");
    const pp_optimizer_settings s = {.kind = PP_OPTIMIZER_SGD,
                                     .lr = cfg->lr,
                                     .weight_decay = cfg->weight_decay,
                                     .momentum = cfg->momentum,
                                     .nesterov = cfg->nesterov};
    return pp_optimizer_new_with(out, &s, params, NULL, n, err);
}

static void free_state(opt_param *p)
{
    for (int k = 0; k < PP_OPTIM_MAX_SLOTS; k++) pp_tensor_free(&p->state[k]);
    p->has_state = false;
    p->steps = 0;
}

void pp_optimizer_free(pp_optimizer *opt)
{
    if (!opt) return;
    for (size_t i = 0; i < opt->n; i++) {
        free(opt->params[i].name);
        for (int k = 0; k < PP_OPTIM_MAX_SLOTS; k++) free(opt->params[i].state_name[k]);
        free_state(&opt->params[i]);
    }
    for (size_t i = 0; i < opt->n_execs; i++) pp_exec_destroy(&opt->execs[i].ex);
    free(opt->params);
    free(opt->execs);
    free(opt->group);
    free(opt->grouped);
    free(opt->group_p);
    free(opt->group_g);
    free(opt->group_sums);
    for (int k = 0; k < PP_OPTIM_MAX_SLOTS; k++) free(opt->group_s[k]);
    free(opt);
}

/* The exec for dev: the caller's, or an internal one created on first use. */
static pp_status exec_for_dev(pp_optimizer *opt, pp_exec_for_device_fn fn, void *user,
                              pp_device_ctx *dev, pp_exec **out, pp_error *err)
{
    if (fn) {
        *out = fn(user, dev);
        if (!*out || (*out)->dev != dev)
            return pp_error_set(err, PP_ERR_INVALID, "optimizer: no exec for device %s",
                                dev->name);
        return PP_OK;
    }
    for (size_t i = 0; i < opt->n_execs; i++) {
        if (opt->execs[i].dev == dev) {
            *out = &opt->execs[i].ex;
            return PP_OK;
        }
    }
    dev_exec *de = &opt->execs[opt->n_execs];
    PP_TRY(pp_exec_init(&de->ex, dev, NULL, err));
    de->dev = dev;
    opt->n_execs++;
    *out = &de->ex;
    return PP_OK;
}

/* Waits for the internal execs (a no-op when the caller provides execs). */
static pp_status sync_internal(pp_optimizer *opt, pp_exec_for_device_fn fn, pp_status s,
                               pp_error *err)
{
    if (fn) return s;
    for (size_t i = 0; i < opt->n_execs; i++) {
        pp_error tmp;
        pp_status r = pp_exec_sync(&opt->execs[i].ex, s == PP_OK ? err : &tmp);
        if (s == PP_OK) s = r;
    }
    return s;
}

/* What groups parameters: the device always; for an update also the decay,
 * the state's presence and the step count. */
static bool same_group(const opt_param *a, const opt_param *b, bool update)
{
    if (a->param->dev != b->param->dev) return false;
    return !update ||
           (a->decay == b->decay && a->has_state == b->has_state && a->steps == b->steps);
}

/* The next group of one multi-tensor call: the parameters not yet grouped
 * (tied copies too when with_copies) that share the first such parameter's
 * group (same_group), in parameter order (indexes in opt->group). Returns the
 * group's size, 0 when every parameter is grouped. */
static size_t next_group(pp_optimizer *opt, bool update, bool with_copies)
{
    size_t i0 = 0;
    while (i0 < opt->n && (opt->grouped[i0] || (!with_copies && opt->params[i0].copy))) i0++;
    size_t k = 0;
    for (size_t i = i0; i < opt->n; i++) {
        const opt_param *q = &opt->params[i];
        if (opt->grouped[i] || (!with_copies && q->copy) ||
            !same_group(q, &opt->params[i0], update))
            continue;
        opt->grouped[i] = true;
        opt->group[k++] = i;
    }
    return k;
}

pp_status pp_optimizer_zero_grad(pp_optimizer *opt, pp_exec_for_device_fn exec_for, void *user,
                                 pp_error *err)
{
    if (!opt) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL handle");
    memset(opt->grouped, 0, opt->n * sizeof *opt->grouped);
    pp_status s = PP_OK;
    size_t k;
    /* one multi-tensor zeroing per device (a parameter and its gradient share it) */
    while (s == PP_OK && (k = next_group(opt, false, true)) > 0) {
        pp_device_ctx *dev = opt->params[opt->group[0]].grad->dev;
        for (size_t j = 0; j < k; j++) opt->group_g[j] = opt->params[opt->group[j]].grad;
        pp_exec *ex;
        s = exec_for_dev(opt, exec_for, user, dev, &ex, err);
        if (s == PP_OK) s = pp_zero_multi(ex, (int)k, opt->group_g, err);
        if (s != PP_OK)
            pp_error_prefix(err, "optimizer: zero_grad of the %zu gradients on %s from '%s'", k,
                            dev->name, opt->params[opt->group[0]].name);
    }
    return sync_internal(opt, exec_for, s, err);
}

/* The state of p, allocated on its parameter's device if it has none yet. */
static pp_status alloc_state(const pp_optimizer *opt, opt_param *p, pp_error *err)
{
    for (int k = 0; k < opt->n_slots; k++) {
        if (p->state[k].dev) continue;
        const pp_tensor *t = p->param;
        if (opt->scalar[k])
            PP_TRY(pp_tensor_zeros(&p->state[k], t->dev, PP_I64, 0, (int64_t[]){1}, err));
        else if (opt->zeroed[k])
            PP_TRY(pp_tensor_zeros(&p->state[k], t->dev, PP_F32, t->ndim, t->shape, err));
        else
            PP_TRY(pp_tensor_alloc(&p->state[k], t->dev, PP_F32, t->ndim, t->shape, err));
    }
    return PP_OK;
}

pp_status pp_optimizer_step(pp_optimizer *opt, pp_exec_for_device_fn exec_for, void *user,
                            pp_error *err)
{
    if (!opt) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL handle");
    pp_status s = PP_OK;
    /* the state first, lazily, on each parameter's device */
    for (size_t i = 0; i < opt->n && s == PP_OK; i++) {
        opt_param *p = &opt->params[i];
        if (p->copy) continue;
        s = alloc_state(opt, p, err);
        if (s != PP_OK) pp_error_prefix(err, "optimizer: step of '%s'", p->name);
    }
    /* then one multi-tensor update per group */
    memset(opt->grouped, 0, opt->n * sizeof *opt->grouped);
    size_t k;
    while (s == PP_OK && (k = next_group(opt, true, false)) > 0) {
        const opt_param *p0 = &opt->params[opt->group[0]];
        pp_device_ctx *dev = p0->param->dev;
        for (size_t j = 0; j < k; j++) {
            opt_param *q = &opt->params[opt->group[j]];
            opt->group_p[j] = q->param;
            opt->group_g[j] = q->grad;
            for (int slot = 0; slot < opt->n_slots; slot++) opt->group_s[slot][j] = &q->state[slot];
        }
        pp_optim_group g = {.n = (int)k, .params = opt->group_p, .grads = opt->group_g,
                            .weight_decay = p0->decay, .first = !p0->has_state,
                            .step = p0->steps + 1, .grad_scale = opt->grad_scale};
        for (int slot = 0; slot < opt->n_slots; slot++) g.state[slot] = opt->group_s[slot];
        pp_exec *ex;
        s = exec_for_dev(opt, exec_for, user, dev, &ex, err);
        if (s == PP_OK) s = opt->kind->update(ex, &opt->cfg, &g, err);
        if (s != PP_OK)
            pp_error_prefix(err, "optimizer: step of the %zu parameters on %s from '%s'", k,
                            dev->name, p0->name);
    }
    if (s == PP_OK)
        for (size_t i = 0; i < opt->n; i++) {
            opt_param *p = &opt->params[i];
            if (p->copy) continue;
            p->has_state = opt->n_slots > 0;
            p->steps++;
        }
    s = sync_internal(opt, exec_for, s, err);
    if (s == PP_OK) opt->steps++;
    opt->grad_scale = 1.0f;
    return s;
}

pp_status pp_optimizer_set_grad_scale(pp_optimizer *opt, float scale, pp_error *err)
{
    if (!opt) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL handle");
    if (!(scale > 0) || !isfinite(scale))
        return pp_error_set(err, PP_ERR_INVALID, "optimizer: gradient scale %g must be > 0",
                            (double)scale);
    opt->grad_scale = scale;
    return PP_OK;
}

pp_status pp_optimizer_grad_sumsq(pp_optimizer *opt, pp_exec_for_device_fn exec_for, void *user,
                                  double *sums, pp_error *err)
{
    if (!opt || (opt->n && !sums)) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL");
    for (size_t i = 0; i < opt->n; i++) sums[i] = 0.0;
    memset(opt->grouped, 0, opt->n * sizeof *opt->grouped);
    pp_status s = PP_OK;
    size_t k;
    while (s == PP_OK && (k = next_group(opt, false, false)) > 0) {
        pp_device_ctx *dev = opt->params[opt->group[0]].grad->dev;
        for (size_t j = 0; j < k; j++) opt->group_g[j] = opt->params[opt->group[j]].grad;
        pp_exec *ex;
        s = exec_for_dev(opt, exec_for, user, dev, &ex, err);
        if (s == PP_OK)
            s = pp_sumsq_multi(ex, (int)k, (const pp_tensor *const *)opt->group_g,
                               opt->group_sums, err);
        if (s == PP_OK) s = pp_exec_sync(ex, err);
        if (s != PP_OK) {
            pp_error_prefix(err, "optimizer: gradient norm of the %zu gradients on %s", k,
                            dev->name);
            break;
        }
        for (size_t j = 0; j < k; j++) sums[opt->group[j]] = opt->group_sums[j];
    }
    return s;
}

int64_t pp_optimizer_steps(const pp_optimizer *opt) { return opt ? opt->steps : 0; }

void pp_optimizer_set_steps(pp_optimizer *opt, int64_t steps)
{
    if (opt) opt->steps = steps;
}

pp_optimizer_settings pp_optimizer_get_settings(const pp_optimizer *opt)
{
    return opt ? opt->cfg : pp_optimizer_defaults(PP_OPTIMIZER_SGD);
}

pp_sgd_config pp_optimizer_config(const pp_optimizer *opt)
{
    if (!opt) return (pp_sgd_config){0};
    return (pp_sgd_config){(float)opt->cfg.lr, (float)opt->cfg.momentum,
                           (float)opt->cfg.weight_decay, opt->cfg.nesterov};
}

void pp_optimizer_set_lr(pp_optimizer *opt, float lr)
{
    if (opt) opt->cfg.lr = lr;
}

void pp_optimizer_set_learning_rate(pp_optimizer *opt, double lr)
{
    if (opt) opt->cfg.lr = lr;
}

size_t pp_optimizer_size(const pp_optimizer *opt) { return opt ? opt->n : 0; }

const char *pp_optimizer_param_name(const pp_optimizer *opt, size_t i)
{
    return opt && i < opt->n ? opt->params[i].name : NULL;
}

int pp_optimizer_slots(const pp_optimizer *opt, const char **prefix, bool *scalar, int cap)
{
    if (!opt) return 0;
    for (int k = 0; k < opt->n_slots && k < cap; k++) {
        if (prefix) prefix[k] = opt->prefix[k];
        if (scalar) scalar[k] = opt->scalar[k];
    }
    return opt->n_slots;
}

pp_tensor *pp_optimizer_state_tensor(pp_optimizer *opt, const char *state_name)
{
    if (!opt || !state_name) return NULL;
    for (size_t i = 0; i < opt->n; i++) {
        opt_param *p = &opt->params[i];
        for (int k = 0; k < opt->n_slots && !p->copy; k++)
            if (strcmp(p->state_name[k], state_name) == 0)
                return p->has_state ? &p->state[k] : NULL;
    }
    return NULL;
}

pp_tensor *pp_optimizer_momentum(pp_optimizer *opt, const char *state_name)
{
    size_t k = strlen(PP_OPTIMIZER_MOMENTUM_PREFIX);
    if (!state_name || strncmp(state_name, PP_OPTIMIZER_MOMENTUM_PREFIX, k) != 0) return NULL;
    return pp_optimizer_state_tensor(opt, state_name);
}

size_t pp_optimizer_state(pp_optimizer *opt, pp_ckpt_tensor *out, size_t cap)
{
    if (!opt) return 0;
    size_t count = 0;
    for (size_t i = 0; i < opt->n; i++) {
        opt_param *p = &opt->params[i];
        if (!p->has_state || p->copy) continue;
        for (int k = 0; k < opt->n_slots; k++, count++)
            if (count < cap) out[count] = (pp_ckpt_tensor){p->state_name[k], &p->state[k]};
    }
    return count;
}

pp_status pp_optimizer_state_sync(pp_optimizer *opt, pp_error *err)
{
    if (!opt) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL handle");
    for (size_t i = 0; i < opt->n; i++) {
        opt_param *p = &opt->params[i];
        for (int k = 0; k < opt->n_slots && p->has_state && !p->copy; k++)
            if (opt->scalar[k])
                PP_TRY(pp_tensor_from_host(&p->state[k], &p->steps, sizeof p->steps, err));
    }
    return PP_OK;
}

pp_status pp_optimizer_alloc_state(pp_optimizer *opt, pp_error *err)
{
    if (!opt) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL handle");
    if (opt->n_slots == 0) return PP_OK;
    for (size_t i = 0; i < opt->n; i++) {
        opt_param *p = &opt->params[i];
        if (p->copy) continue;
        for (int k = 0; k < opt->n_slots; k++) {
            if (p->state[k].dev) continue;
            const pp_tensor *t = p->param;
            PP_TRY(opt->scalar[k]
                       ? pp_tensor_zeros(&p->state[k], t->dev, PP_I64, 0, (int64_t[]){1}, err)
                       : pp_tensor_zeros(&p->state[k], t->dev, PP_F32, t->ndim, t->shape, err));
        }
    }
    for (size_t i = 0; i < opt->n; i++) opt->params[i].has_state = !opt->params[i].copy;
    return PP_OK;
}

pp_status pp_optimizer_state_loaded(pp_optimizer *opt, pp_error *err)
{
    if (!opt) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL handle");
    for (size_t i = 0; i < opt->n; i++) {
        opt_param *p = &opt->params[i];
        if (!p->has_state || p->copy) continue;
        p->steps = 1; /* a kind without counts: the state holds a step's values */
        for (int k = 0; k < opt->n_slots; k++) {
            if (!opt->scalar[k]) continue;
            PP_TRY(pp_tensor_to_host(&p->state[k], &p->steps, sizeof p->steps, err));
            if (p->steps < 1)
                return pp_error_set(err, PP_ERR_INPUT, "%s is %lld: a parameter's state counts "
                                    "at least one step", p->state_name[k], (long long)p->steps);
        }
    }
    return PP_OK;
}

void pp_optimizer_reset_state(pp_optimizer *opt)
{
    if (!opt) return;
    for (size_t i = 0; i < opt->n; i++) free_state(&opt->params[i]);
    opt->steps = 0;
}
