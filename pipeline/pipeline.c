/*
 * pipeline.c - assembles plan, devices, stages, data, schedule, executor and
 * optimizer (see pipeline.h for the contract); step.c runs training steps and
 * evaluation, report.c reports them.
 */
#include "pipeline/pipeline.h"
#include "pipeline/pipeline_impl.h"
#include "pipeline/schedules.h"
#include "pipeline/clocks.h"
#include "pipeline/data_source.h"
#include "pipeline/links.h"
#include "pipeline/link_cost.h"
#include "pipeline/callbacks.h"
#include "pipeline/planning.h"
#include "pipeline/prefetch.h"
#include "pipeline/recipe.h"
#include "pipeline/replicas.h"
#include "pipeline/tied.h"
#include "pipeline/upload.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/delay.h"
#include "models/stage.h"
#include "runtime/core/ranges.h"
#include "runtime/io/checkpoint.h"
#include "runtime/core/batch_split.h"
#include "runtime/core/ops.h"
#include "runtime/io/data.h"
#include "runtime/train/optimizer.h"
#include "streams/executor.h"
#include "streams/schedule.h"
#include "streams/simulate.h"
#include "streams/trace.h"

static pp_status open_data(struct pp_pipeline *p, const pp_plan *plan, pp_error *err)
{
    const pp_plan_data *d = &plan->data;
    PP_TRY(pipe_data_open(plan, d, false, &p->data, err));
    int c, h, w, classes;
    pp_data_shape(p->data, &c, &h, &w, &classes);
    if (c != plan->model.in_channels) {
        char msg[256];
        snprintf(msg, sizeof msg, "the data has %d channel%s but model.in_channels is %d", c,
                 c == 1 ? "" : "s", plan->model.in_channels);
        return pipe_plan_error(plan, d->mark, err, PP_ERR_INPUT, msg);
    }
    if (classes > plan->model.num_classes) {
        char msg[256];
        snprintf(msg, sizeof msg, "the data has labels up to %d but model.num_classes is %d",
                 classes - 1, plan->model.num_classes);
        return pipe_plan_error(plan, d->mark, err, PP_ERR_INPUT, msg);
    }
    p->in_c = c;
    p->in_h = h;
    p->in_w = w;
    p->data_size = pp_data_size(p->data);
    if (d->drop_last && p->data_size < plan->batch_size) {
        char msg[256];
        snprintf(msg, sizeof msg, "data.drop_last: the data set's %lld samples do not fill one "
                 "batch of %d", (long long)p->data_size, plan->batch_size);
        return pipe_plan_error(plan, d->mark, err, PP_ERR_INPUT, msg);
    }
    p->targets = pp_data_targets_per_sample(p->data);
    int ndim;
    int64_t shape[PP_MAX_DIMS];
    pp_model_input(&plan->model, &ndim, shape, &p->in_dtype);
    return PP_OK;
}

/* The input tensor of n samples on stage 0's device: (n, C, H, W) F32 or (n, T) I32. */
static pp_status alloc_inputs(struct pp_pipeline *p, pp_tensor *t, int n, pp_error *err)
{
    pp_device_ctx *first = p->stages[0].dev;
    if (p->in_dtype == PP_I32)
        return pp_tensor_alloc(t, first, PP_I32, 2, (int64_t[]){n, p->in_w}, err);
    return pp_tensor_alloc(t, first, PP_F32, 4, (int64_t[]){n, p->in_c, p->in_h, p->in_w}, err);
}

/* Two image folders label their classes by their own sorted folder names
 * (as torchvision's ImageFolder does): the test folder's must be the
 * training folder's, or its labels would mean other classes. */
static pp_status same_classes(const pp_plan *plan, pp_data *train, pp_data *test, pp_error *err)
{
    int nt, ne;
    pp_data_shape(train, NULL, NULL, NULL, &nt);
    pp_data_shape(test, NULL, NULL, NULL, &ne);
    for (int c = 0; c < nt || c < ne; c++) {
        char a[256] = "", b[256] = "", msg[700];
        if (c < nt) pp_data_class_name(train, c, a, sizeof a);
        if (c < ne) pp_data_class_name(test, c, b, sizeof b);
        if (strcmp(a, b) == 0) continue;
        snprintf(msg, sizeof msg, "eval: the test folder's class %d is '%s' but the training "
                 "folder's is '%s' (labels follow each folder's sorted class names: give both "
                 "the same class folders)", c, b[0] ? b : "(none)", a[0] ? a : "(none)");
        return pipe_plan_error(plan, plan->eval.mark, err, PP_ERR_INPUT, msg);
    }
    return PP_OK;
}

/* The eval section's test set (any data format), normalised like the
 * training data, labels below num_classes, images of the training shape. */
static pp_status open_eval(struct pp_pipeline *p, const pp_plan *plan, pp_error *err)
{
    const pp_plan_eval *e = &plan->eval;
    if (!e->enabled) return PP_OK;
    PP_TRY(pipe_data_open(plan, &e->data, true, &p->eval_data, err));
    int c, h, w, classes;
    pp_data_shape(p->eval_data, &c, &h, &w, &classes);
    if (classes > plan->model.num_classes)
        return pipe_plan_error(plan, e->mark, err, PP_ERR_INPUT,
                               "eval: the test set has more classes than model.num_classes");
    if (e->data.format == PP_PLAN_DATA_IMAGEFOLDER && plan->data.format == e->data.format)
        PP_TRY(same_classes(plan, p->data, p->eval_data, err));
    if (c != p->in_c || h != p->in_h || w != p->in_w) {
        char msg[512];
        snprintf(msg, sizeof msg, "eval: the test set holds %dx%dx%d images, the training data "
                 "%dx%dx%d", c, h, w, p->in_c, p->in_h, p->in_w);
        return pipe_plan_error(plan, e->mark, err, PP_ERR_INPUT, msg);
    }
    p->eval_size = pp_data_size(p->eval_data);
    p->eval_batch = e->batch_size > 0 ? e->batch_size : p->batch;
    if (p->eval_batch > p->eval_size) p->eval_batch = (int)p->eval_size;
    size_t img = (size_t)p->eval_batch * p->in_c * p->in_h * p->in_w;
    PP_TRY(pipe_batch_run_make(p, &p->eval_full, p->eval_batch, true, err));
    int m = p->eval_full.m;
    const int64_t labels = (int64_t)p->eval_batch * p->targets;
    pp_device_ctx *first = p->stages[0].dev, *last = p->stages[p->n_stages - 1].dev;
    PP_TRY(pp_device_host_alloc(first, img * sizeof(float), (void **)&p->host_eval_images, err));
    PP_TRY(pp_device_host_alloc(last, (size_t)labels * sizeof(int32_t),
                                (void **)&p->host_eval_labels, err));
    PP_TRY(pp_device_host_alloc(last, (size_t)m * sizeof(float), (void **)&p->host_eval_losses,
                                err));
    PP_TRY(pp_device_host_alloc(last, (size_t)m * sizeof(int32_t),
                                (void **)&p->host_eval_corrects, err));
    PP_TRY(alloc_inputs(p, &p->eval_images, p->eval_batch, err));
    PP_TRY(pp_tensor_alloc(&p->eval_labels, last, PP_I32, 1, &labels, err));
    PP_TRY(pp_tensor_zeros(&p->eval_losses, last, PP_F32, 1, (int64_t[]){m}, err));
    PP_TRY(pp_tensor_zeros(&p->eval_corrects, last, PP_I32, 1, (int64_t[]){m}, err));
    PP_TRY(pp_tensor_zeros(&p->eval_corrects5, last, PP_I32, 1, (int64_t[]){m}, err));
    PP_TRY(pp_device_host_alloc(last, (size_t)m * sizeof(int32_t),
                                (void **)&p->host_eval_corrects5, err));
    return pp_tensor_alloc(&p->eval_dlogits, last, pipe_logits_dtype(p), 2,
                           (int64_t[]){labels, p->classes}, err);
}

/* Whether stage 0's batches go up ahead (upload.h): *on (a rank with stage
 * 0) unless PP_UPLOAD is off or 0; PP_ERR_INPUT for another value. */
static pp_status upload_wanted(bool *on, pp_error *err)
{
    const char *env = getenv("PP_UPLOAD");
    if (!env || !env[0] || !strcmp(env, "on") || !strcmp(env, "1")) return PP_OK;
    if (strcmp(env, "off") && strcmp(env, "0"))
        return pp_error_set(err, PP_ERR_INPUT, "PP_UPLOAD=%.32s: expected on or off (or 1 or 0)",
                            env);
    *on = false;
    return PP_OK;
}

/* The step's buffers; the training images too when no upload holds them. */
static pp_status alloc_buffers(struct pp_pipeline *p, bool images, pp_error *err)
{
    const int64_t labels = (int64_t)p->batch * p->targets;
    pp_device_ctx *last = p->stages[p->n_stages - 1].dev;
    PP_TRY(pp_device_host_alloc(last, (size_t)p->m * sizeof(float), (void **)&p->host_losses,
                                err));
    PP_TRY(pp_device_host_alloc(last, (size_t)p->m * sizeof(int32_t), (void **)&p->host_corrects,
                                err));
    if (images) PP_TRY(alloc_inputs(p, &p->images, p->batch, err));
    PP_TRY(pp_tensor_alloc(&p->labels, last, PP_I32, 1, &labels, err));
    PP_TRY(pp_tensor_zeros(&p->losses, last, PP_F32, 1, (int64_t[]){p->m}, err));
    PP_TRY(pp_tensor_zeros(&p->corrects, last, PP_I32, 1, (int64_t[]){p->m}, err));
    PP_TRY(pp_tensor_alloc(&p->dlogits, last, pipe_logits_dtype(p), 2,
                           (int64_t[]){labels, p->classes}, err));
    return PP_OK;
}

/* Opens every stage's device and applies the plan's memory caps: a stage's
 * `memory:` caps its device, shared by every stage on it (one figure per
 * device, pp_plan_device_memory). */
static pp_status open_devices(struct pp_pipeline *p, const pp_plan *plan, pp_error *err)
{
    int size = pp_comm_size(p->comm);
    char msg[320];
    for (int r = 0; r < p->replicas; r++)
        for (int s = 0; s < p->n_stages; s++) {
            const pp_plan_stage *ps = &plan->stages[s];
            int rank = pipe_rank_in(plan, s, r);
            if (rank < size) continue;
            snprintf(msg, sizeof msg, "stage %d%s is on rank %d, but the job has %d process%s "
                     "(ranks 0..%d; start it with mpirun -np %d)", s,
                     p->replicas > 1 ? (r ? " of a replica" : " of replica 0") : "", rank, size,
                     size == 1 ? "" : "es", size - 1, rank + 1);
            return pipe_plan_error(plan, r ? ps->replica_mark[r] : ps->device_mark, err, PP_ERR_INPUT,
                              msg);
        }
    /* every rank finds the same idle ranks, so all stop alike */
    for (int rank = 0; rank < size; rank++) {
        if (pipe_replica_of(plan, rank) >= 0) continue;
        snprintf(msg, sizeof msg, "rank %d of %d runs no stage: every process of the job needs "
                 "one (start it with fewer processes)", rank, size);
        return pipe_plan_error(plan, plan->stages_mark, err, PP_ERR_INPUT, msg);
    }
    for (int r = 0; r < p->replicas; r++)
        for (int s = 0; s < p->n_stages; s++) p->rep_rank[r * p->n_stages + s] = pipe_rank_in(plan, s, r);
    for (int s = 0; s < p->n_stages; s++) {
        const pp_plan_stage *ps = &plan->stages[s];
        int rank = pipe_rank_in(plan, s, p->replica);
        pp_device_id dev = p->replica ? ps->replica_device[p->replica] : ps->device;
        bool cross = (s > 0 && pipe_rank_in(plan, s - 1, p->replica) != rank) ||
                     (s + 1 < p->n_stages && pipe_rank_in(plan, s + 1, p->replica) != rank);
        bool linked = (s == 0 || pipe_rank_in(plan, s - 1, p->replica) == rank ||
                       pipe_cuda_link(plan, s - 1, p->replica)) &&
                      (s + 1 == p->n_stages || pipe_rank_in(plan, s + 1, p->replica) == rank ||
                       pipe_cuda_link(plan, s, p->replica));
        if (cross && dev.kind != PP_DEVICE_CPU && !linked) {
            snprintf(msg, sizeof msg, "stage %d (%s) exchanges with a stage of another process: "
                     "stages on different processes pass activations through host memory, so "
                     "both sides of such a boundary need cpu devices (or cuda devices on both "
                     "sides, in a build with NCCL)", s, ps->device_name);
            return pipe_plan_error(plan, p->replica ? ps->replica_mark[p->replica] : ps->device_mark,
                              err, PP_ERR_INPUT, msg);
        }
        p->stage_rank[s] = rank;
        p->home_rank[s] = pipe_rank_in(plan, s, pipe_replica_of(plan, 0) > 0 ? pipe_replica_of(plan, 0) : 0);
    }
    for (int s = 0; s < p->n_stages; s++) {
        const pp_plan_stage *ps = &plan->stages[s];
        /* another process's stage: its model is built on this process's
         * first CPU as a stand-in (output shapes, checkpoints), never run */
        pp_device_id mine = p->replica ? ps->replica_device[p->replica] : ps->device;
        pp_device_id id = stage_here(p, s) ? mine : (pp_device_id){PP_DEVICE_CPU, 0};
        pp_status rc = pp_registry_get(p->reg, id, &p->stages[s].dev, err);
        if (rc != PP_OK) {
            pp_mark at = p->replica > 0 ? ps->replica_mark[p->replica] : ps->device_mark;
            if (at.line > 0)
                pp_error_prefix(err, "%s:%d:%d: stage %d", plan->path, at.line, at.col, s);
            /* a device this build or machine cannot provide is a plan problem */
            if (rc == PP_ERR_UNSUPPORTED) err->code = rc = PP_ERR_INPUT;
            return rc;
        }
    }
    for (int s = 0; s < p->n_stages; s++) {
        if (!stage_here(p, s)) continue;
        /* one figure per device, whichever of its stages gives it */
        p->stages[s].dev->bytes_limit = (size_t)pp_plan_device_memory(plan, s);
        p->stages[s].dev->math = plan->precision == PP_PLAN_PRECISION_TF32 ? PP_MATH_TF32
                                                                           : PP_MATH_FP32;
    }
    return PP_OK;
}

/* The stage's layer list in the plan's compact spelling, one item each. */
static pp_status spell_layers(pipe_stage *st, const pp_catalogue *cat, const pp_plan_stage *ps,
                              pp_error *err)
{
    int n = ps->last - ps->first + 1; /* at most one item per unit */
    st->layer_names = calloc((size_t)n, sizeof *st->layer_names);
    st->layers = calloc((size_t)n, sizeof *st->layers);
    if (!st->layer_names || !st->layers)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (layer names)");
    for (int u = ps->first; u <= ps->last && st->n_layers < n; st->n_layers++) {
        u = pp_plan_spell_item(cat, u, ps->last, st->layer_names[st->n_layers],
                               sizeof st->layer_names[0]);
        st->layers[st->n_layers] = st->layer_names[st->n_layers];
    }
    return PP_OK;
}

/* Whether a stage on dev keeps its activations NHWC (pp_pipeline_layout). */
static bool stage_nhwc(const struct pp_pipeline *p, const pp_device_ctx *dev)
{
    switch (p->layout) {
    case PP_PIPELINE_LAYOUT_NCHW: return false;
    case PP_PIPELINE_LAYOUT_NHWC: return true;
    default: return p->model.bf16 && pp_device_prefers_nhwc_bf16(dev);
    }
}

static pp_status build_stages(struct pp_pipeline *p, const pp_plan *plan, pp_error *err)
{
    p->n_stages = plan->n_stages;
    p->stages = calloc((size_t)p->n_stages, sizeof *p->stages);
    p->descs = calloc((size_t)p->n_stages, sizeof *p->descs);
    p->stage_rank = calloc((size_t)p->n_stages, sizeof *p->stage_rank);
    p->home_rank = calloc((size_t)p->n_stages, sizeof *p->home_rank);
    p->rep_rank = calloc((size_t)(p->n_stages * p->replicas), sizeof *p->rep_rank);
    if (!p->stages || !p->descs || !p->stage_rank || !p->home_rank || !p->rep_rank)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    PP_TRY(open_devices(p, plan, err));
    int n_params = 0;
    for (int s = 0; s < p->n_stages; s++) {
        const pp_plan_stage *ps = &plan->stages[s];
        pipe_stage *st = &p->stages[s];
        st->p = p;
        st->index = s;
        st->recompute = pp_plan_stage_recompute(plan, s);
        snprintf(st->device_name, sizeof st->device_name, "%s", ps->device_name);
        pp_status rc;
        pp_model_config cfg = p->model;
        cfg.nhwc = stage_nhwc(p, st->dev);
        if (p->model.kind == PP_MODEL_DELAY)
            rc = pp_delay_stage_new(&p->model, s, st->dev, &st->model, err);
        else
            rc = pp_stage_new(&cfg, plan->seed, ps->first, ps->last, st->dev, &st->model, err);
        if (rc != PP_OK) return pp_error_prefix(err, "stage %d (%s)", s, st->dev->name);
        if (p->model.kind != PP_MODEL_DELAY) PP_TRY(spell_layers(st, &plan->catalogue, ps, err));
        p->descs[s] = (pp_stage_desc){.dev = st->dev, .ops = &pipe_stage_ops, .user = st};
        n_params += pp_stage_param_count(st->model);
    }

    /* the last stage's output feeds the loss: it must be (N, classes) */
    int ndim;
    int64_t shape[PP_MAX_DIMS];
    PP_TRY(pp_stage_output_shape(p->stages[p->n_stages - 1].model, 1, &ndim, shape, err));
    int64_t per_sample = 1;
    for (int i = 1; i < ndim; i++) per_sample *= shape[i];
    if (per_sample != (int64_t)p->classes * p->targets)
        return pipe_plan_error(plan, plan->stages[p->n_stages - 1].layers_mark, err, PP_ERR_INPUT,
                               p->model.kind == PP_MODEL_GPT2
                                   ? "the last stage must end with lm_head (its output feeds "
                                     "the loss)"
                                   : "the last stage must end with fc (its output feeds the "
                                     "loss)");

    /* the optimizer updates this process's stages */
    p->params = calloc((size_t)(n_params ? n_params : 1), sizeof *p->params);
    if (!p->params) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    for (int s = 0; s < p->n_stages; s++) {
        if (!stage_here(p, s)) continue;
        pipe_stage *st = &p->stages[s];
        pp_stage *m = st->model;
        st->grads = calloc((size_t)pp_stage_param_count(m) + 1, sizeof *st->grads);
        if (!st->grads) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
        for (int i = 0; i < pp_stage_param_count(m); i++) {
            const pp_named_tensor *nt = pp_stage_param(m, i);
            /* a tied copy's gradient goes to its original, which is updated (tied.c) */
            if (!nt->tied_to) p->params[p->n_params++] = (pp_param_ref){nt->name, nt->value, nt->grad};
            st->grads[st->n_grads++] = nt->grad;
        }
    }
    return pipe_recipe_init(p, plan, err); /* the optimizer, loss, clipping, batch norms */
}

/* A model with dropout: each stage's step in its device's memory and the
 * page-locked host value it is copied from (pipe_stage.step_at). */
static pp_status alloc_dropout_steps(struct pp_pipeline *p, const pp_plan *plan, pp_error *err)
{
    if (plan->model.kind != PP_MODEL_GPT2 || !(plan->model.gpt2.dropout > 0)) return PP_OK;
    for (int k = 0; k < p->n_stages; k++) {
        pipe_stage *st = &p->stages[k];
        if (!st->model) continue; /* another rank's */
        PP_TRY(pp_device_host_alloc(st->dev, sizeof *st->host_step, (void **)&st->host_step,
                                    err));
        *st->host_step = 0;
        PP_TRY(pp_tensor_zeros(&st->step_at, st->dev, PP_I64, 1, (int64_t[]){1}, err));
    }
    return PP_OK;
}

/* Whether training steps use graphs (pp_pipeline_graphs), and room for each
 * stage's batch-norm counts. */
static pp_status setup_graphs(struct pp_pipeline *p, const pp_plan *plan, pp_pipeline_graphs mode,
                              pp_error *err)
{
    bool on = plan->cuda_graphs;
    const char *env = getenv("PP_CUDA_GRAPHS");
    if (mode == PP_PIPELINE_GRAPHS_PLAN && env && env[0]) {
        if (strcmp(env, "on") && strcmp(env, "off") && strcmp(env, "1") && strcmp(env, "0"))
            return pp_error_set(err, PP_ERR_INPUT,
                                "PP_CUDA_GRAPHS=%.32s: expected on or off (or 1 or 0)", env);
        on = !strcmp(env, "on") || !strcmp(env, "1");
    }
    bool cuda = pp_comm_size(p->comm) < 2;
    for (int s = 0; s < p->n_stages; s++)
        if (p->stages[s].dev->id.kind != PP_DEVICE_CUDA) cuda = false;
    if (mode == PP_PIPELINE_GRAPHS_ON) on = true;
    if (mode == PP_PIPELINE_GRAPHS_OFF) on = false;
    if (mode == PP_PIPELINE_GRAPHS_FORCE) on = true, cuda = true;
    p->graphs_mode = !cuda ? 0 : on ? 1 : 2;
    pp_executor_set_graphs(p->exec, p->graphs_mode == 1);
    for (int s = 0; s < p->n_stages; s++) {
        pipe_stage *st = &p->stages[s];
        if (!st->model) continue;
        st->n_counts = pp_stage_batch_counts(st->model, NULL, 0);
        st->counts = calloc(st->n_counts > 0 ? (size_t)st->n_counts : 1, sizeof *st->counts);
        if (!st->counts) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    }
    return PP_OK;
}

pp_status pipe_new_rank(const pp_plan *plan, const pp_pipeline_options *opts, pp_pipeline **out,
                          pp_error *err)
{
    *out = NULL;
    if (!plan) return pp_error_set(err, PP_ERR_INVALID, "pp_pipeline_new: NULL plan");
    if (plan->stages_auto)
        return pp_error_set(err, PP_ERR_INVALID,
                            "pp_pipeline_new: the plan's automatic stages are not resolved "
                            "(call pp_pipeline_resolve_plan first)");
    PP_TRY(pipe_check_cudnn_limits(plan, err));
    PP_TRY(pp_plan_check_micro_batches(plan, err));
    PP_TRY(pp_ranges_check_env(err)); /* PP_NVTX: profiler ranges */
    struct pp_pipeline *p = calloc(1, sizeof *p);
    if (!p) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    if (opts) {
        p->keep_trace = opts->keep_trace;
        p->slots = opts->slots;
        p->comm = opts->comm;
        p->layout = opts->layout;
        p->grads_whole = opts->grad_allreduce_whole;
    }
    const char *profile = getenv("PP_PROFILE_STEP");
    p->profile_step = profile && *profile ? atoi(profile) : -1;
    p->rank = pp_comm_rank(p->comm);
    p->replicas = plan->replicas > 1 ? plan->replicas : 1;
    p->in_process = plan->replicas_in_process;
    p->replica = pipe_replica_of(plan, p->rank);
    p->model = plan->model;
    p->model.bf16 = plan->precision == PP_PLAN_PRECISION_BF16;
    p->batch = plan->batch_size;
    p->m = p->m_batch = plan->micro_batches;
    p->rep_batch = p->batch;
    int rep_off = 0, rep_micro = 0, rep_split = 0;
    if (p->replicas > 1) { /* this replica's piece, cut by the plan's micro-batch rule */
        pipe_replica_piece(p->batch, p->replicas, p->replica > 0 ? p->replica : 0, &rep_off,
                      &p->rep_batch);
        rep_micro = plan->batch_by_micro ? (plan->micro_batches < p->rep_batch
                                                ? plan->micro_batches : p->rep_batch) : 0;
        rep_split = rep_micro ? 0 : plan->split_size;
        p->m = pp_batch_split_count(p->rep_batch, rep_split, rep_micro);
        (void)rep_off;
    }
    p->classes = plan->model.num_classes;
    pp_status s = pp_plan_step_keys_get(plan, &p->step_keys, err);
    if (s == PP_OK) s = pp_plan_run_keys_get(plan, &p->run_keys, err);
    if (s != PP_OK) goto fail;
    s = PP_ERR_OOM;
    p->mb_sizes = malloc((size_t)p->m * sizeof(int));
    p->mb_offsets = malloc((size_t)p->m * sizeof(int));
    if (!p->mb_sizes || !p->mb_offsets) {
        pp_error_set(err, s, "out of host memory");
        goto fail;
    }
    if (p->replicas > 1)
        pp_batch_split_sizes(p->rep_batch, rep_split, rep_micro, p->mb_sizes);
    else
        memcpy(p->mb_sizes, plan->micro_sizes, (size_t)p->m * sizeof(int));
    for (int i = 0, off = 0; i < p->m; off += p->mb_sizes[i], i++) p->mb_offsets[i] = off;
    if ((s = pp_registry_new(&p->reg, err)) != PP_OK) goto fail;
    if ((s = open_data(p, plan, err)) != PP_OK) goto fail;
    p->model.image_h = p->in_h;
    p->model.image_w = p->in_w;
    if ((s = build_stages(p, plan, err)) != PP_OK) goto fail;
    bool upload = stage_here(p, 0) && p->in_dtype == PP_F32; /* images, not token ids */
    if ((s = upload_wanted(&upload, err)) != PP_OK) goto fail;
    if ((s = alloc_buffers(p, !upload, err)) != PP_OK) goto fail;
    if (upload &&
        (s = pipe_upload_new(p->stages[0].dev, p->stages[p->n_stages - 1].dev, p->batch, p->in_c,
                             p->in_h, p->in_w, &p->upload, err)) != PP_OK)
        goto fail;
    if ((s = pipe_prefetch_new(p->data, plan->data.prefetch, p->upload ? 2 : 1,
                               plan->data.workers, stage_here(p, 0) ? p->stages[0].dev : NULL,
                               p->stages[p->n_stages - 1].dev, p->batch, &p->prefetch,
                               err)) != PP_OK)
        goto fail;
    p->split_size = plan->batch_by_micro ? 0 : plan->split_size;
    p->micro_batches = plan->batch_by_micro ? plan->micro_batches : 0;
    p->epochs = plan->epochs;
    p->drop_last = plan->data.drop_last;
    p->lr = plan->lr_schedule;
    p->cur_lr = plan->optimizer.lr;
    if ((s = pipe_sched_init(&p->sched, plan, p->m, p->mb_sizes, err)) != PP_OK ||
        (s = pipe_sched_make(&p->sched, p->m, p->mb_sizes, false, &p->schedule, err)) != PP_OK)
        goto fail;
    p->full = (batch_run){.batch = p->rep_batch, .m = p->m, .sizes = p->mb_sizes,
                          .offsets = p->mb_offsets, .sched = p->schedule};
    p->in_flight = calloc((size_t)p->n_stages, sizeof *p->in_flight);
    if (!p->in_flight || !pipe_first_backward(&p->schedule, &p->full.first_bw)) {
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory");
        goto fail;
    }
    pp_schedule_in_flight(&p->schedule, p->in_flight);
    if ((s = open_eval(p, plan, err)) != PP_OK) goto fail;
    if ((s = pipe_replicas_init(p, err)) != PP_OK) goto fail;
    for (int k = 0; k < p->n_stages; k++)
        if (p->stages[k].bucket_in_lane) p->descs[k].ops = &pipe_stage_ops_bucketed;
    if ((s = pp_executor_new(p->descs, p->n_stages, p->slots, &p->exec, err)) != PP_OK) goto fail;
    /* a token model's last stage writes its logits into their gradient's rows
     * (callbacks.c): no output buffer of the executor's beside them */
    if (p->model.kind == PP_MODEL_GPT2 &&
        (s = pp_executor_set_own_output(p->exec, true, err)) != PP_OK)
        goto fail;
    for (int k = 0; k < p->n_stages; k++) /* the optimizer's mark on its stream (step.c) */
        if (stage_here(p, k) &&
            (s = pp_event_new(p->stages[k].dev, &p->stages[k].opt_done, err)) != PP_OK)
            goto fail;
    if (pp_comm_size(p->comm) > 1 &&
        (s = pp_executor_set_ranks(p->exec, p->comm, p->stage_rank, p->n_stages, err)) != PP_OK)
        goto fail;
    if ((s = pipe_links_init(p, plan, err)) != PP_OK) goto fail;
    if ((s = pipe_tied_init(p, err)) != PP_OK) goto fail;
    if ((s = pipe_clocks_sync(p, err)) != PP_OK) goto fail;
    if ((s = pipe_link_cost_measure(p, plan, err)) != PP_OK) goto fail;
    if ((s = alloc_dropout_steps(p, plan, err)) != PP_OK) goto fail;
    if ((s = setup_graphs(p, plan, opts ? opts->graphs : PP_PIPELINE_GRAPHS_PLAN, err)) != PP_OK)
        goto fail;
    *out = p;
    return PP_OK;
fail:
    pipe_free_rank(p);
    return s;
}

/* The page-locked host buffers go back to the devices they were taken from
 * (before the devices close). */
static void free_host_buffers(struct pp_pipeline *p)
{
    if (!p->stages || p->n_stages < 1) return;
    pp_device_ctx *first = p->stages[0].dev, *last = p->stages[p->n_stages - 1].dev;
    if (first) {
        pp_device_host_free(first, p->host_eval_images);
    }
    if (last) {
        pp_device_host_free(last, p->host_losses);
        pp_device_host_free(last, p->host_corrects);
        pp_device_host_free(last, p->host_eval_labels);
        pp_device_host_free(last, p->host_eval_losses);
        pp_device_host_free(last, p->host_eval_corrects);
        pp_device_host_free(last, p->host_eval_corrects5);
    }
    p->host_eval_images = NULL;
    p->host_eval_labels = NULL;
    p->host_losses = p->host_eval_losses = NULL;
    p->host_corrects = p->host_eval_corrects = p->host_eval_corrects5 = NULL;
}

void pipe_free_rank(pp_pipeline *p)
{
    if (!p) return;
    pipe_upload_free(p->upload); /* waits for a copy from the prefetcher's sets */
    pipe_prefetch_free(p->prefetch); /* before the data source and buffers it reads into */
    /* stages first: state a failed step left saved is released on the
     * executor's streams, which must still exist */
    for (int s = 0; p->stages && s < p->n_stages; s++) {
        pp_stage_free(p->stages[s].model);
        free(p->stages[s].layer_names);
        free(p->stages[s].layers);
        free(p->stages[s].fwd_ms);
        free(p->stages[s].bwd_ms);
        free(p->stages[s].in_ms);
        free(p->stages[s].wt_ms);
        free(p->stages[s].busy);
        free(p->stages[s].grads);
        free(p->stages[s].counts);
    }
    pp_executor_free(p->exec); /* waits for the streams: the events are free to go */
    for (int s = 0; p->stages && s < p->n_stages; s++) {
        pipe_stage *st = &p->stages[s];
        pp_event_free(st->opt_done);
        pp_tensor_free(&st->step_at);
        if (st->host_step) pp_device_host_free(st->dev, st->host_step);
    }
    pipe_replicas_free(p);
    pipe_tied_free(p);
    pipe_links_free(p, false);
    pp_schedule_free(&p->schedule);
    pipe_sched_free(&p->sched);
    free(p->full.first_bw);
    free(p->in_flight);
    pipe_batch_run_free(&p->tail);
    pipe_batch_run_free(&p->eval_full);
    pipe_batch_run_free(&p->eval_tail);
    pp_data_close(p->eval_data);
    free_host_buffers(p);
    pp_tensor_free(&p->eval_images);
    pp_tensor_free(&p->eval_labels);
    pp_tensor_free(&p->eval_losses);
    pp_tensor_free(&p->eval_corrects);
    pp_tensor_free(&p->eval_dlogits);
    pp_tensor_free(&p->eval_corrects5);
    pp_optimizer_free(p->opt);
    pipe_recipe_free(p);
    pp_tensor_free(&p->images);
    pp_tensor_free(&p->labels);
    pp_tensor_free(&p->losses);
    pp_tensor_free(&p->corrects);
    pp_tensor_free(&p->dlogits);
    for (int i = 0; i < p->n_trace; i++) pp_step_stats_free(&p->trace[i]);
    free(p->trace);
    pp_data_close(p->data);
    pp_registry_free(p->reg);
    free(p->params);
    free(p->stages);
    free(p->descs);
    free(p->stage_rank);
    free(p->home_rank);
    free(p->rep_rank);
    free(p->mb_sizes);
    free(p->mb_offsets);
    pp_plan_step_keys_free(&p->step_keys);
    pp_plan_step_keys_free(&p->run_keys);
    free(p->step_ms);
    free(p->data_ms);
    free(p->bubble);
    free(p->copy_ms);
    free(p->copy_bytes);
    free(p->bnd_ms);
    free(p->bnd_bytes);
    free(p->link_gbps);
    free(p->link_latency_ms);
    free(p->rep_step_ms);
    free(p->rep_run_ms);
    free(p);
}
