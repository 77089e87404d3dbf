/*
 * checkpoints.c - a pipeline's state to and from safetensors files: every
 * stage's parameters, buffers and (optionally) the optimizer's state
 * (momentum; AdamW's moments and step counts) under torchvision's names,
 * with the steps run, what a step means under the plan (pp_plan_step_keys,
 * "pipeline-run.plan.KEY") and what tells the run from others
 * (pp_plan_run_keys, "pipeline-run.run.KEY") in the metadata; in a job of several processes rank 0
 * gathers the other ranks' stages and writes the one file, atomically, and
 * every rank loads its own stages from it, refusing damaged files and
 * values that are not finite.
 */
#include "pipeline/pipeline.h"
#include "pipeline/checkpoints.h"
#include "pipeline/replicas.h"
#include "pipeline/step.h"
#include "pipeline/tied.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/stage.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/checkpoint_internal.h" /* pp_ckpt_load: whether writing began */
#include "runtime/comm/comm.h"
#include "runtime/train/optimizer.h"

/* ---- checkpoints ---------------------------------------------------------------- */

/* Every parameter and buffer of every stage, as checkpoint entries. *out is
 * malloc'ed with room for extra more entries. */
static pp_status state_list(struct pp_pipeline *p, size_t extra, pp_ckpt_tensor **out, size_t *n,
                            pp_error *err)
{
    size_t total = 0;
    for (int s = 0; s < p->n_stages; s++) {
        PP_TRY(pp_stage_sync_buffers(p->stages[s].model, err));
        total += (size_t)pp_stage_state_count(p->stages[s].model);
    }
    pp_ckpt_tensor *list = calloc(total + extra + 1, sizeof *list);
    if (!list) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    size_t k = 0;
    for (int s = 0; s < p->n_stages; s++)
        for (int i = 0; i < pp_stage_state_count(p->stages[s].model); i++) {
            const pp_named_tensor *nt = pp_stage_state(p->stages[s].model, i);
            if (nt->tied_to) continue; /* a copy of another stage's parameter (tied.h) */
            list[k++] = (pp_ckpt_tensor){nt->name, nt->value};
        }
    *out = list;
    *n = k;
    return PP_OK;
}

/* ---- checkpoints of a job of several processes ---------------------------------- */

#define TAG_CKPT 30000 /* above the executor's boundary tags (2 x stages) */

/* Moves a tensor's bytes from rank `from` to rank 0 through host memory. */
static pp_status gather_tensor(struct pp_pipeline *p, int from, pp_tensor *t, pp_error *err)
{
    size_t bytes = pp_tensor_bytes(t);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint)");
    pp_status s;
    if (p->rank == from) {
        s = pp_tensor_to_host(t, tmp, bytes, err);
        if (s == PP_OK) s = pp_comm_send(p->comm, 0, TAG_CKPT, tmp, bytes, err);
    } else {
        s = pp_comm_recv(p->comm, from, TAG_CKPT, tmp, bytes, err);
        if (s == PP_OK) s = pp_tensor_from_host(t, tmp, bytes, err);
    }
    free(tmp);
    return s;
}

/* Optimizer state of other ranks' stages, gathered on rank 0 into tensors
 * it owns (names and tensors freed by free_remote_state). */
typedef struct remote_state {
    size_t n;
    pp_ckpt_tensor *list;
    pp_tensor *tensors;
} remote_state;

static void free_remote_state(remote_state *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free((char *)r->list[i].name);
        pp_tensor_free(&r->tensors[i]);
    }
    free(r->list);
    free(r->tensors);
    memset(r, 0, sizeof *r);
}

/* The state entry named prefix + name in this process's optimizer. */
static pp_tensor *state_of(const pp_ckpt_tensor *opt, size_t n, const char *prefix,
                           const char *name)
{
    size_t k = strlen(prefix);
    for (size_t i = 0; i < n; i++)
        if (strncmp(opt[i].name, prefix, k) == 0 && strcmp(opt[i].name + k, name) == 0)
            return opt[i].tensor;
    return NULL;
}

/* Rank 0's tensor for slot `prefix` of a remote parameter like nt (an I64
 * scalar for a step count), appended to *rs. */
static pp_status remote_slot(remote_state *rs, const pp_named_tensor *nt, const char *prefix,
                             bool scalar, pp_tensor **out, pp_error *err)
{
    pp_tensor *t = &rs->tensors[rs->n];
    size_t len = strlen(prefix) + strlen(nt->name) + 1;
    char *name = malloc(len);
    if (!name) return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint)");
    snprintf(name, len, "%s%s", prefix, nt->name);
    rs->list[rs->n++] = (pp_ckpt_tensor){name, t};
    *out = t;
    const pp_tensor *v = nt->value;
    return scalar ? pp_tensor_alloc(t, v->dev, PP_I64, 0, (int64_t[]){1}, err)
                  : pp_tensor_alloc(t, v->dev, v->dtype, v->ndim, v->shape, err);
}

#define MAX_SLOTS 4

/* Brings every other rank's stage to rank 0: parameters and buffers into the
 * stand-in models there, and (with_optimizer) the optimizer's state into *rs.
 * Every rank calls it; stages are visited in order, one sender at a time. */
static pp_status gather_state(struct pp_pipeline *p, bool with_optimizer, remote_state *rs,
                              pp_error *err)
{
    memset(rs, 0, sizeof *rs);
    if (with_optimizer) PP_TRY(pp_optimizer_state_sync(p->opt, err));
    const char *prefix[MAX_SLOTS];
    bool scalar[MAX_SLOTS];
    const int slots = with_optimizer ? pp_optimizer_slots(p->opt, prefix, scalar, MAX_SLOTS) : 0;
    size_t n_opt = slots ? pp_optimizer_state(p->opt, NULL, 0) : 0;
    pp_ckpt_tensor *opt = calloc(n_opt + 1, sizeof *opt);
    if (!opt) return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint)");
    if (n_opt) pp_optimizer_state(p->opt, opt, n_opt);
    size_t cap = 0;
    for (int s = 0; s < p->n_stages; s++) cap += (size_t)pp_stage_param_count(p->stages[s].model);
    cap *= (size_t)slots;
    if (p->rank == 0 && slots) {
        rs->list = calloc(cap + 1, sizeof *rs->list);
        rs->tensors = calloc(cap + 1, sizeof *rs->tensors);
        if (!rs->list || !rs->tensors) {
            free(opt);
            return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint)");
        }
    }
    pp_status st = PP_OK;
    for (int s = 0; s < p->n_stages && st == PP_OK; s++) {
        int from = p->home_rank[s];
        if (from == 0 || (p->rank != 0 && p->rank != from)) continue;
        pp_stage *m = p->stages[s].model;
        if (p->rank == from) st = pp_stage_sync_buffers(m, err);
        for (int i = 0; st == PP_OK && i < pp_stage_state_count(m); i++)
            st = gather_tensor(p, from, pp_stage_state(m, i)->value, err);
        for (int i = 0; st == PP_OK && slots && i < pp_stage_param_count(m); i++) {
            const pp_named_tensor *nt = pp_stage_param(m, i);
            for (int k = 0; st == PP_OK && k < slots; k++) {
                pp_tensor *t = p->rank == from ? state_of(opt, n_opt, prefix[k], nt->name) : NULL;
                int32_t has = t != NULL;
                if (p->rank == from)
                    st = pp_comm_send(p->comm, 0, TAG_CKPT, &has, sizeof has, err);
                else
                    st = pp_comm_recv(p->comm, from, TAG_CKPT, &has, sizeof has, err);
                if (st != PP_OK || !has) continue;
                if (p->rank == 0) st = remote_slot(rs, nt, prefix[k], scalar[k], &t, err);
                if (st == PP_OK) st = gather_tensor(p, from, t, err);
            }
        }
    }
    free(opt);
    return st;
}

/* Every rank returns rank 0's outcome of writing the file. */
static pp_status share_outcome(struct pp_pipeline *p, pp_status s, pp_error *err)
{
    struct {
        int32_t code;
        char msg[PP_ERROR_MSG_MAX];
    } o = {(int32_t)s, ""};
    if (p->rank == 0 && s != PP_OK) snprintf(o.msg, sizeof o.msg, "%s", err->msg);
    PP_TRY(pp_comm_broadcast(p->comm, 0, &o, sizeof o, err));
    if (o.code == PP_OK) return PP_OK;
    if (p->rank != 0) pp_error_set(err, (pp_status)o.code, "%s (rank 0)", o.msg);
    return (pp_status)o.code;
}

#define PLAN_KEY_PREFIX "pipeline-run.plan."
#define RUN_KEY_PREFIX "pipeline-run.run."

/* meta[at..] = prefix + k's keys (names made in names[at..]); false when out of memory. */
static bool put_keys(const pp_plan_step_keys *k, const char *prefix, pp_checkpoint_meta *meta,
                     char **names, size_t at)
{
    for (int i = 0; i < k->n; i++) {
        size_t len = strlen(prefix) + strlen(k->keys[i]) + 1;
        if (!(names[at + (size_t)i] = malloc(len))) return false;
        snprintf(names[at + (size_t)i], len, "%s%s", prefix, k->keys[i]);
        meta[at + (size_t)i] = (pp_checkpoint_meta){names[at + (size_t)i], k->values[i]};
    }
    return true;
}

static pp_status save_file(pp_pipeline *p, const char *path, const pp_pipeline_save_options *o,
                           const remote_state *rs, pp_error *err)
{
    if (o->with_optimizer) PP_TRY(pp_optimizer_state_sync(p->opt, err));
    size_t n_opt = o->with_optimizer ? pp_optimizer_state(p->opt, NULL, 0) : 0;
    size_t n_remote = rs ? rs->n : 0;
    pp_ckpt_tensor *list;
    size_t n;
    PP_TRY(state_list(p, n_opt + n_remote, &list, &n, err));
    if (n_opt) n += pp_optimizer_state(p->opt, list + n, n_opt);
    for (size_t i = 0; i < n_remote; i++) list[n++] = rs->list[i];
    char steps[32];
    snprintf(steps, sizeof steps, "%lld", (long long)p->steps_done);
    /* ours, the plan's step and run keys, the caller's */
    const pp_plan_step_keys *k = &p->step_keys, *rk = &p->run_keys;
    const size_t n_keys = (size_t)k->n + (size_t)rk->n;
    size_t n_meta = 2 + n_keys + o->n_meta;
    pp_checkpoint_meta *meta = calloc(n_meta, sizeof *meta);
    char **keys = calloc(n_keys + 1, sizeof *keys);
    pp_status s = meta && keys ? PP_OK : pp_error_set(err, PP_ERR_OOM, "out of host memory");
    if (s == PP_OK) {
        meta[0] = (pp_checkpoint_meta){"format", "pt"};
        meta[1] = (pp_checkpoint_meta){"pipeline-run.steps", steps};
        if (!put_keys(k, PLAN_KEY_PREFIX, meta + 2, keys, 0) ||
            !put_keys(rk, RUN_KEY_PREFIX, meta + 2, keys, (size_t)k->n))
            s = pp_error_set(err, PP_ERR_OOM, "out of host memory");
        for (size_t i = 0; i < o->n_meta; i++) meta[2 + n_keys + i] = o->meta[i];
    }
    if (s == PP_OK)
        s = pp_checkpoint_save_cancellable(path, list, n, meta, n_meta, o->cancelled,
                                           o->cancel_arg, err);
    for (size_t i = 0; keys && i < n_keys; i++) free(keys[i]);
    free(keys);
    free(meta);
    free(list);
    return s;
}

pp_status pipe_save_rank(pp_pipeline *p, const char *path, const pp_pipeline_save_options *o,
                         pp_error *err)
{
    const bool with_optimizer = o->with_optimizer;
    /* a failed step may have updated some parameters and not others */
    PP_TRY(pipe_check_usable(p, "save", err));
    PP_TRY(pipe_settle(p, err)); /* the last update, before reading parameters */
    if (pp_comm_size(p->comm) < 2) return save_file(p, path, o, NULL, err);
    /* a job of several processes: rank 0 gathers the whole model and writes
     * it; the others wait for its outcome */
    remote_state rs;
    memset(&rs, 0, sizeof rs);
    pp_status s = pipe_sync_replica_state(p, err);
    if (s == PP_OK) s = gather_state(p, with_optimizer, &rs, err);
    if (s != PP_OK) {
        free_remote_state(&rs);
        return s;
    }
    if (p->rank == 0) {
        /* rank 0's stand-ins of other ranks' stages now hold their state;
         * local stages are synchronised by state_list */
        s = save_file(p, path, o, &rs, err);
    }
    free_remote_state(&rs);
    return share_outcome(p, s, err);
}

/* Hugging Face's published GPT-2 weights (model.safetensors) name GPT2Model's
 * tensors, without the "transformer." its state_dict and ours put before
 * them; their attention-mask buffers (h.K.attn.bias) load into nothing. */
#define HF_SCOPE "transformer."

static bool has_entry(const pp_checkpoint_info *info, const char *name)
{
    for (size_t i = 0; i < info->n; i++)
        if (strcmp(info->entries[i].name, name) == 0) return true;
    return false;
}

/* Whether the file's tensor `name` is one a load may leave unread: optimizer
 * state (of another kind of optimizer, or the plan's when the run keeps none),
 * the attention masks of Hugging Face's GPT-2 (h.K.attn.bias and
 * masked_bias: buffers, not weights), or lm_head.weight beside a tied head
 * (PyTorch's state_dict names the tied weight twice). */
static bool may_skip(const pp_pipeline *p, const char *name)
{
    if (strncmp(name, PP_OPTIMIZER_STATE_PREFIX, strlen(PP_OPTIMIZER_STATE_PREFIX)) == 0)
        return true;
    if (p->model.kind != PP_MODEL_GPT2) return false;
    if (strcmp(name, "lm_head.weight") == 0) return p->model.gpt2.tie_embeddings;
    const char *at = strstr(name, ".attn.");
    if (!at || (strcmp(at, ".attn.bias") != 0 && strcmp(at, ".attn.masked_bias") != 0))
        return false;
    const char *h = strncmp(name, HF_SCOPE, strlen(HF_SCOPE)) == 0 ? name + strlen(HF_SCOPE)
                                                                    : name;
    return strncmp(h, "h.", 2) == 0;
}

/* Every tensor of the file has a place in the model (list: n entries, names
 * as the file's) or may be skipped: a file of another model (more blocks
 * than the plan's, a deeper ResNet) is refused, naming what has no place,
 * instead of loading part of it. */
static pp_status check_places(const pp_pipeline *p, const char *path,
                              const pp_checkpoint_info *info, const pp_ckpt_tensor *list,
                              size_t n, pp_error *err)
{
    size_t odd = 0, first = 0;
    for (size_t i = 0; i < info->n; i++) {
        const char *name = info->entries[i].name;
        bool found = may_skip(p, name);
        for (size_t k = 0; k < n && !found; k++) found = strcmp(list[k].name, name) == 0;
        if (!found && odd++ == 0) first = i;
    }
    if (odd == 0) return PP_OK;
    return pp_error_set(err, PP_ERR_INPUT,
                        "%s: %zu tensor%s of the file %s no place in the plan's model (%s%s): "
                        "a checkpoint of another model (more blocks or layers, other names)?",
                        path, odd, odd == 1 ? "" : "s", odd == 1 ? "has" : "have",
                        info->entries[first].name, odd > 1 ? ", ..." : "");
}

pp_status pipe_load_rank(pp_pipeline *p, const char *path, pp_error *err)
{
    /* its links are freed: a load would not make it step again (a load that
     * failed midway before is what a load repairs) */
    PP_TRY(pipe_check_links(p, "load", err));
    PP_TRY(pipe_settle(p, err)); /* the last update, before writing parameters */
    pp_checkpoint_info info;
    PP_TRY(pp_checkpoint_list(path, &info, err));
    /* the file holds state of this optimizer's kind (its first slot's entries) */
    const char *first_slot = NULL;
    bool has_opt = false;
    if (pp_optimizer_slots(p->opt, &first_slot, NULL, 1) > 0)
        for (size_t i = 0; i < info.n && !has_opt; i++)
            has_opt = strncmp(info.entries[i].name, first_slot, strlen(first_slot)) == 0;
    const bool unscoped = p->model.kind == PP_MODEL_GPT2 &&
                          !has_entry(&info, HF_SCOPE "wte.weight") && has_entry(&info, "wte.weight");
    const char *steps = pp_checkpoint_info_meta(&info, "pipeline-run.steps");
    long long steps_done = steps ? atoll(steps) : 0;

    pp_status s = PP_OK;
    bool wrote = false;
    if (has_opt) s = pp_optimizer_alloc_state(p->opt, err);
    size_t n_opt = has_opt ? pp_optimizer_state(p->opt, NULL, 0) : 0;
    pp_ckpt_tensor *list = NULL;
    size_t n = 0;
    if (s == PP_OK) s = state_list(p, n_opt, &list, &n, err);
    for (size_t i = 0; s == PP_OK && unscoped && i < n; i++)
        if (strncmp(list[i].name, HF_SCOPE, strlen(HF_SCOPE)) == 0)
            list[i].name += strlen(HF_SCOPE);
    if (s == PP_OK) s = check_places(p, path, &info, list, n, err);
    pp_checkpoint_info_free(&info);
    if (s == PP_OK) {
        if (n_opt) n += pp_optimizer_state(p->opt, list + n, n_opt);
        /* optimizer state of another configuration (e.g. momentum 0) is ignored;
         * NaN or Inf in what is loaded is refused */
        const pp_checkpoint_load_options lo = {.allow_extra = true, .finite = true};
        s = pp_ckpt_load(path, list, n, &lo, &wrote, err);
    }
    free(list);
    if (s == PP_OK && has_opt) s = pp_optimizer_state_loaded(p->opt, err);
    if (s == PP_OK) {
        if (!has_opt) pp_optimizer_reset_state(p->opt);
        p->steps_done = steps_done > 0 ? steps_done : 0;
        pp_optimizer_set_steps(p->opt, has_opt ? p->steps_done : 0);
        s = pipe_tied_refresh(p, err);
    }
    if (s == PP_OK) {
        p->partial[0] = '\0';
        return PP_OK;
    }
    pp_optimizer_reset_state(p->opt);
    /* written, then refused (a read or copy failing after the file's checks, a step
     * count below 1, ...): the parameters are neither the earlier ones nor the file's */
    if (wrote)
        snprintf(p->partial, sizeof p->partial, "%.255s",
                 err && err->msg[0] ? err->msg : "failed");
    return s;
}

