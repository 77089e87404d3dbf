/*
 * tied.c - parameters tied across stages (see tied.h): the pairs of a copy
 * and its original, the copy's gradient added to the original's after a
 * step's backward, the original's values written over the copy after an
 * update. Within a process the data moves through ops on the stages'
 * streams (one device), a peer copy in stream order (two CUDA devices: no
 * host wait) or host memory (other devices); between ranks as one message
 * each way per step (comm.h), from the copy's rank to the original's and
 * back.
 */
#include "pipeline/tied.h"

#include <stdlib.h>
#include <string.h>

#include "models/stage.h"
#include "runtime/comm/comm.h"
#include "runtime/core/ops.h"
#include "streams/executor.h"

#define TAG_TIED 30004 /* above the executor's boundary tags, beside TAG_LINK */

typedef struct pipe_tie {
    int orig_stage, copy_stage;   /* plan stages */
    const pp_named_tensor *orig, *copy;
    pp_tensor staging;            /* on the original's device: the copy's gradient there
                                   * (another device or rank); empty on one device */
    bool peer;                    /* two CUDA devices of this rank: stream copies */
    void *host;                   /* (bytes) between other devices, or ranks */
    size_t bytes;
} pipe_tie;

struct pipe_tied {
    int n;
    pipe_tie *ties;
};

/* The parameter named name among every stage's, and its stage. */
static const pp_named_tensor *find_param(const struct pp_pipeline *p, const char *name,
                                         int *stage)
{
    for (int s = 0; s < p->n_stages; s++)
        for (int i = 0; i < pp_stage_param_count(p->stages[s].model); i++) {
            const pp_named_tensor *nt = pp_stage_param(p->stages[s].model, i);
            if (!nt->tied_to && strcmp(nt->name, name) == 0) {
                *stage = s;
                return nt;
            }
        }
    return NULL;
}


static bool here(const struct pp_pipeline *p, int s)
{
    return p->stage_rank[s] == p->rank;
}

static pp_stream *stage_stream(const struct pp_pipeline *p, int s)
{
    return pp_executor_stage_stream(p->exec, s);
}

static pp_exec *stage_exec(const struct pp_pipeline *p, int s)
{
    return pp_stream_exec(stage_stream(p, s));
}

/* The tie's staging: none when both tensors are on one device of this rank;
 * on the original's device for two CUDA devices of this rank (peer copies). */
static pp_status tie_prepare(struct pp_pipeline *p, pipe_tie *t, pp_error *err)
{
    const bool mine_o = here(p, t->orig_stage), mine_c = here(p, t->copy_stage);
    const pp_tensor *v = t->orig->value;
    if (mine_o && mine_c && v->dev == t->copy->value->dev) return PP_OK;
    if (!mine_o && !mine_c) return PP_OK;
    if (mine_o && mine_c && v->dev->id.kind == PP_DEVICE_CUDA &&
        t->copy->value->dev->id.kind == PP_DEVICE_CUDA) {
        t->peer = true;
        return pp_tensor_alloc(&t->staging, v->dev, v->dtype, v->ndim, v->shape, err);
    }
    t->bytes = pp_tensor_bytes(t->orig->value);
    t->host = malloc(t->bytes ? t->bytes : 1);
    if (!t->host) return pp_error_set(err, PP_ERR_OOM, "out of host memory (tied parameters)");
    if (!mine_o) return PP_OK;
    return pp_tensor_alloc(&t->staging, v->dev, v->dtype, v->ndim, v->shape, err);
}

pp_status pipe_tied_init(struct pp_pipeline *p, pp_error *err)
{
    int n = 0;
    for (int s = 0; s < p->n_stages; s++)
        for (int i = 0; i < pp_stage_param_count(p->stages[s].model); i++)
            n += pp_stage_param(p->stages[s].model, i)->tied_to != NULL;
    if (n == 0) return PP_OK;
    p->tied = calloc(1, sizeof *p->tied);
    if (p->tied) p->tied->ties = calloc((size_t)n, sizeof *p->tied->ties);
    if (!p->tied || !p->tied->ties)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (tied parameters)");
    for (int s = 0; s < p->n_stages; s++)
        for (int i = 0; i < pp_stage_param_count(p->stages[s].model); i++) {
            const pp_named_tensor *c = pp_stage_param(p->stages[s].model, i);
            if (!c->tied_to) continue;
            pipe_tie *t = &p->tied->ties[p->tied->n];
            t->copy = c;
            t->copy_stage = s;
            t->orig = find_param(p, c->tied_to, &t->orig_stage);
            if (!t->orig)
                return pp_error_set(err, PP_ERR_INPUT,
                                    "%s is tied to %s, which no stage holds (place the unit "
                                    "that holds it in a stage)",
                                    c->name, c->tied_to);
            if (!pp_tensor_same_shape(t->orig->value, c->value))
                return pp_error_set(err, PP_ERR_INTERNAL, "%s and its original %s differ in shape",
                                    c->name, c->tied_to);
            p->tied->n++;
            PP_TRY(tie_prepare(p, t, err));
        }
    return pipe_tied_refresh(p, err);
}

void pipe_tied_free(struct pp_pipeline *p)
{
    if (!p->tied) return;
    for (int i = 0; i < p->tied->n; i++) {
        pp_tensor_free(&p->tied->ties[i].staging);
        free(p->tied->ties[i].host);
    }
    free(p->tied->ties);
    free(p->tied);
    p->tied = NULL;
}

/* The copy's gradient into the original's: original += copy. */
static pp_status sum_one(struct pp_pipeline *p, pipe_tie *t, pp_error *err)
{
    const bool mine_o = here(p, t->orig_stage), mine_c = here(p, t->copy_stage);
    const int to = p->stage_rank[t->orig_stage], from = p->stage_rank[t->copy_stage];
    if (mine_c && mine_o && !t->host && !t->peer)
        return pp_accumulate(stage_exec(p, t->orig_stage), t->copy->grad, t->orig->grad, err);
    if (t->peer) { /* the run has ended: the copy's gradient is complete */
        PP_TRY(pp_stream_copy_tensor(stage_stream(p, t->orig_stage), &t->staging, t->copy->grad,
                                     "tied gradient", err));
        return pp_accumulate(stage_exec(p, t->orig_stage), &t->staging, t->orig->grad, err);
    }
    if (mine_c) {
        PP_TRY(pp_stream_synchronize(stage_stream(p, t->copy_stage), err));
        PP_TRY(pp_tensor_to_host(t->copy->grad, t->host, t->bytes, err));
        if (!mine_o) return pp_comm_send(p->comm, to, TAG_TIED, t->host, t->bytes, err);
    }
    if (!mine_o) return PP_OK;
    if (!mine_c) PP_TRY(pp_comm_recv(p->comm, from, TAG_TIED, t->host, t->bytes, err));
    PP_TRY(pp_tensor_from_host(&t->staging, t->host, t->bytes, err));
    return pp_accumulate(stage_exec(p, t->orig_stage), &t->staging, t->orig->grad, err);
}

/* The original's values over the copy. */
static pp_status refresh_one(struct pp_pipeline *p, pipe_tie *t, pp_error *err)
{
    const bool mine_o = here(p, t->orig_stage), mine_c = here(p, t->copy_stage);
    const int to = p->stage_rank[t->copy_stage], from = p->stage_rank[t->orig_stage];
    if (t->peer) /* behind the update: the copy's stream waits for it */
        PP_TRY(pp_stream_copy_tensor(stage_stream(p, t->copy_stage), t->copy->value,
                                     t->orig->value, "tied refresh", err));
    else if (mine_c && mine_o && !t->host)
        PP_TRY(pp_copy(stage_exec(p, t->copy_stage), t->orig->value, t->copy->value, err));
    else if (mine_o) {
        PP_TRY(pp_tensor_to_host(t->orig->value, t->host, t->bytes, err));
        if (!mine_c) PP_TRY(pp_comm_send(p->comm, to, TAG_TIED, t->host, t->bytes, err));
    }
    if (mine_c && t->host) {
        if (!mine_o) PP_TRY(pp_comm_recv(p->comm, from, TAG_TIED, t->host, t->bytes, err));
        PP_TRY(pp_tensor_from_host(t->copy->value, t->host, t->bytes, err));
    }
    if (mine_c) pp_stage_params_changed(p->stages[t->copy_stage].model);
    return PP_OK;
}

pp_status pipe_tied_sum_grads(struct pp_pipeline *p, pp_error *err)
{
    for (int i = 0; p->tied && i < p->tied->n; i++) {
        pp_status s = sum_one(p, &p->tied->ties[i], err);
        if (s != PP_OK) return pp_error_prefix(err, "summing the gradient of %s into %s",
                                               p->tied->ties[i].copy->name,
                                               p->tied->ties[i].orig->name);
    }
    return PP_OK;
}

bool pipe_tied_host(const struct pp_pipeline *p)
{
    for (int i = 0; p->tied && i < p->tied->n; i++)
        if (p->tied->ties[i].host) return true;
    return false;
}

pp_status pipe_tied_refresh(struct pp_pipeline *p, pp_error *err)
{
    for (int i = 0; p->tied && i < p->tied->n; i++) {
        pp_status s = refresh_one(p, &p->tied->ties[i], err);
        if (s != PP_OK) return pp_error_prefix(err, "refreshing %s from %s",
                                               p->tied->ties[i].copy->name,
                                               p->tied->ties[i].orig->name);
    }
    return PP_OK;
}
