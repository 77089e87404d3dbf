/*
 * optimizer.c - SGD over parameters spread across devices (see train/optimizer.h).
 *
 * Per parameter the optimizer keeps its momentum buffer (allocated on the
 * parameter's device at its first step) and whether that buffer holds state
 * yet; the per-element arithmetic is pp_sgd_update's. A step makes one
 * pp_sgd_update_multi call per device (and per first-step state), zero_grad
 * one pp_zero_multi per device: on CUDA a few kernel launches per device
 * instead of one per tensor. Parameters are independent, so grouping them
 * changes no result.
 */
#include "runtime/train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"

typedef struct opt_param {
    char *name;         /* state_dict name */
    char *state_name;   /* "optimizer.momentum.<name>" */
    pp_tensor *param;   /* borrowed */
    pp_tensor *grad;    /* borrowed */
    pp_tensor buf;      /* momentum buffer, same shape/device as param; zeroed until allocated */
    bool has_state;     /* buf holds a momentum value (after a step or a load) */
} opt_param;

typedef struct dev_exec {
    pp_device_ctx *dev;
    pp_exec ex;
} dev_exec;

struct pp_optimizer {
    pp_sgd_config cfg;
    opt_param *params;  /* n, in the order given */
    size_t n;
    int64_t steps;
    dev_exec *execs;    /* internal execs, one per device met (at most n) */
    size_t n_execs;
    /* scratch for the multi-tensor calls (n each) */
    size_t *group;      /* indexes of the parameters of one group */
    bool *grouped;      /* parameter already in an earlier group of this call */
    pp_tensor **group_a, **group_b; /* tensors of the group (params or grads; buffers) */
    const pp_tensor **group_g;      /* gradients of the group */
};

static pp_status check_config(const pp_sgd_config *c, pp_error *err)
{
    if (!c) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL configuration");
    if (!(c->lr >= 0) || !isfinite(c->lr))
        return pp_error_set(err, PP_ERR_INPUT, "optimizer: learning rate %g must be >= 0",
                            (double)c->lr);
    if (!(c->momentum >= 0) || !isfinite(c->momentum))
        return pp_error_set(err, PP_ERR_INPUT, "optimizer: momentum %g must be >= 0",
                            (double)c->momentum);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return pp_error_set(err, PP_ERR_INPUT, "optimizer: weight decay %g must be >= 0",
                            (double)c->weight_decay);
    if (c->nesterov && c->momentum <= 0)
        return pp_error_set(err, PP_ERR_INPUT, "optimizer: Nesterov momentum requires momentum > 0");
    return PP_OK;
}

static pp_status check_param(const pp_param_ref *p, size_t i, pp_error *err)
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

pp_status pp_optimizer_new(pp_optimizer **out, const pp_sgd_config *cfg, const pp_param_ref *params,
                           size_t n, pp_error *err)
{
    if (!out) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL output");
    *out = NULL;
    PP_TRY(check_config(cfg, err));
    if (n > 0 && !params) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL parameters");
    for (size_t i = 0; i < n; i++) PP_TRY(check_param(&params[i], i, err));

    const char **names = calloc(n ? n : 1, sizeof *names);
    if (!names) return pp_error_set(err, PP_ERR_OOM, "out of host memory (optimizer)");
    for (size_t i = 0; i < n; i++) names[i] = params[i].name;
    qsort(names, n, sizeof *names, name_cmp);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            pp_status s = pp_error_set(err, PP_ERR_INVALID,
                                       "optimizer: parameter '%s' given twice", names[i]);
            free(names);
            return s;
        }
    }
    free(names);

    pp_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return pp_error_set(err, PP_ERR_OOM, "out of host memory (optimizer)");
    opt->cfg = *cfg;
    opt->params = calloc(n ? n : 1, sizeof *opt->params);
    opt->execs = calloc(n ? n : 1, sizeof *opt->execs);
    opt->group = calloc(n ? n : 1, sizeof *opt->group);
    opt->group_a = calloc(n ? n : 1, sizeof *opt->group_a);
    opt->group_b = calloc(n ? n : 1, sizeof *opt->group_b);
    opt->group_g = calloc(n ? n : 1, sizeof *opt->group_g);
    opt->grouped = calloc(n ? n : 1, sizeof *opt->grouped);
    if (!opt->params || !opt->execs || !opt->group || !opt->group_a || !opt->group_b ||
        !opt->group_g || !opt->grouped)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        opt_param *p = &opt->params[i];
        size_t len = strlen(params[i].name);
        p->name = strdup(params[i].name);
        p->state_name = malloc(sizeof PP_OPTIMIZER_MOMENTUM_PREFIX + len);
        opt->n = i + 1;
        if (!p->name || !p->state_name) goto oom;
        memcpy(p->state_name, PP_OPTIMIZER_MOMENTUM_PREFIX, sizeof PP_OPTIMIZER_MOMENTUM_PREFIX - 1);
        memcpy(p->state_name + sizeof PP_OPTIMIZER_MOMENTUM_PREFIX - 1, params[i].name, len + 1);
        p->param = params[i].param;
        p->grad = params[i].grad;
    }
    *out = opt;
    return PP_OK;
oom:
    pp_optimizer_free(opt);
    return pp_error_set(err, PP_ERR_OOM, "out of host memory (optimizer)");
}

void pp_optimizer_free(pp_optimizer *opt)
{
    if (!opt) return;
    for (size_t i = 0; i < opt->n; i++) {
        free(opt->params[i].name);
        free(opt->params[i].state_name);
        pp_tensor_free(&opt->params[i].buf);
    }
    for (size_t i = 0; i < opt->n_execs; i++) pp_exec_destroy(&opt->execs[i].ex);
    free(opt->params);
    free(opt->execs);
    free(opt->group);
    free(opt->group_a);
    free(opt->group_b);
    free(opt->group_g);
    free(opt->grouped);
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

/* The next group of one multi-tensor call: the parameters not yet grouped
 * that live on the first such parameter's device and, when by_state, share
 * its has_state, in parameter order (indexes in opt->group). Returns the
 * group's size, 0 when every parameter is grouped. */
static size_t next_group(pp_optimizer *opt, bool by_state)
{
    size_t i0 = 0;
    while (i0 < opt->n && opt->grouped[i0]) i0++;
    size_t k = 0;
    for (size_t i = i0; i < opt->n; i++) {
        const opt_param *q = &opt->params[i], *p0 = &opt->params[i0];
        if (opt->grouped[i] || q->param->dev != p0->param->dev ||
            (by_state && q->has_state != p0->has_state))
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
    while (s == PP_OK && (k = next_group(opt, false)) > 0) {
        pp_device_ctx *dev = opt->params[opt->group[0]].grad->dev;
        for (size_t j = 0; j < k; j++) opt->group_a[j] = opt->params[opt->group[j]].grad;
        pp_exec *ex;
        s = exec_for_dev(opt, exec_for, user, dev, &ex, err);
        if (s == PP_OK) s = pp_zero_multi(ex, (int)k, opt->group_a, err);
        if (s != PP_OK)
            pp_error_prefix(err, "optimizer: zero_grad of the %zu gradients on %s from '%s'", k,
                            dev->name, opt->params[opt->group[0]].name);
    }
    return sync_internal(opt, exec_for, s, err);
}

pp_status pp_optimizer_step(pp_optimizer *opt, pp_exec_for_device_fn exec_for, void *user,
                            pp_error *err)
{
    if (!opt) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL handle");
    bool use_momentum = opt->cfg.momentum != 0;
    pp_status s = PP_OK;
    /* momentum buffers first, lazily, on each parameter's device */
    for (size_t i = 0; i < opt->n && s == PP_OK; i++) {
        opt_param *p = &opt->params[i];
        if (use_momentum && !p->buf.dev)
            s = pp_tensor_alloc(&p->buf, p->param->dev, PP_F32, p->param->ndim, p->param->shape,
                                err);
        if (s != PP_OK) pp_error_prefix(err, "optimizer: step of '%s'", p->name);
    }
    /* then one multi-tensor update per device (and first-step state: parameters
     * whose buffers hold no state yet take buf = g) */
    memset(opt->grouped, 0, opt->n * sizeof *opt->grouped);
    size_t k;
    while (s == PP_OK && (k = next_group(opt, true)) > 0) {
        const opt_param *p0 = &opt->params[opt->group[0]];
        pp_device_ctx *dev = p0->param->dev;
        for (size_t j = 0; j < k; j++) {
            opt_param *q = &opt->params[opt->group[j]];
            opt->group_a[j] = q->param;
            opt->group_g[j] = q->grad;
            opt->group_b[j] = &q->buf;
        }
        const pp_sgd_desc d = {
            .lr = opt->cfg.lr,
            .momentum = opt->cfg.momentum,
            .weight_decay = opt->cfg.weight_decay,
            .nesterov = opt->cfg.nesterov,
            .first_step = !p0->has_state,
        };
        pp_exec *ex;
        s = exec_for_dev(opt, exec_for, user, dev, &ex, err);
        if (s == PP_OK)
            s = pp_sgd_update_multi(ex, &d, (int)k, opt->group_a, opt->group_g,
                                    use_momentum ? opt->group_b : NULL, err);
        if (s != PP_OK)
            pp_error_prefix(err, "optimizer: step of the %zu parameters on %s from '%s'", k,
                            dev->name, p0->name);
    }
    if (s == PP_OK)
        for (size_t i = 0; i < opt->n; i++) opt->params[i].has_state = use_momentum;
    s = sync_internal(opt, exec_for, s, err);
    if (s == PP_OK) opt->steps++;
    return s;
}

int64_t pp_optimizer_steps(const pp_optimizer *opt) { return opt ? opt->steps : 0; }

void pp_optimizer_set_steps(pp_optimizer *opt, int64_t steps)
{
    if (opt) opt->steps = steps;
}

pp_sgd_config pp_optimizer_config(const pp_optimizer *opt)
{
    return opt ? opt->cfg : (pp_sgd_config){0};
}

void pp_optimizer_set_lr(pp_optimizer *opt, float lr)
{
    if (opt) opt->cfg.lr = lr;
}

size_t pp_optimizer_size(const pp_optimizer *opt) { return opt ? opt->n : 0; }

const char *pp_optimizer_param_name(const pp_optimizer *opt, size_t i)
{
    return opt && i < opt->n ? opt->params[i].name : NULL;
}

pp_tensor *pp_optimizer_momentum(pp_optimizer *opt, const char *state_name)
{
    if (!opt || !state_name) return NULL;
    for (size_t i = 0; i < opt->n; i++) {
        opt_param *p = &opt->params[i];
        if (strcmp(p->state_name, state_name) == 0) return p->has_state ? &p->buf : NULL;
    }
    return NULL;
}

size_t pp_optimizer_state(pp_optimizer *opt, pp_ckpt_tensor *out, size_t cap)
{
    if (!opt) return 0;
    size_t count = 0;
    for (size_t i = 0; i < opt->n; i++) {
        opt_param *p = &opt->params[i];
        if (!p->has_state) continue;
        if (count < cap) out[count] = (pp_ckpt_tensor){p->state_name, &p->buf};
        count++;
    }
    return count;
}

pp_status pp_optimizer_alloc_state(pp_optimizer *opt, pp_error *err)
{
    if (!opt) return pp_error_set(err, PP_ERR_INVALID, "optimizer: NULL handle");
    if (opt->cfg.momentum == 0) return PP_OK;
    for (size_t i = 0; i < opt->n; i++) {
        opt_param *p = &opt->params[i];
        if (!p->buf.dev)
            PP_TRY(pp_tensor_zeros(&p->buf, p->param->dev, PP_F32, p->param->ndim,
                                   p->param->shape, err));
    }
    for (size_t i = 0; i < opt->n; i++) opt->params[i].has_state = true;
    return PP_OK;
}

void pp_optimizer_reset_state(pp_optimizer *opt)
{
    if (!opt) return;
    for (size_t i = 0; i < opt->n; i++) {
        pp_tensor_free(&opt->params[i].buf);
        opt->params[i].has_state = false;
    }
    opt->steps = 0;
}
