/* emit.c - pp_plan -> plan YAML text that reads back to the same plan. */
#include "partitioner/emit.h"
#include "runtime/io/transform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/plan_walk_internal.h"
#include "partitioner/text.h"

/* A YAML double-quoted string. */
static void put_quoted(pp_text *t, const char *s)
{
    pp_text_put(t, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            pp_text_put(t, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            pp_text_put(t, "\\x%02x", *p);
        else
            pp_text_put(t, "%c", *p);
    }
    pp_text_put(t, "\"");
}

static void put_double(pp_text *t, double v)
{
    char b[40];
    pp_plan_double_format(v, b, sizeof b);
    pp_text_put(t, "%s", b);
}

/* A plain scalar is safe for names made of these characters. */
static bool plain_safe(const char *s)
{
    if (!*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '.' || *s == '-'))
            return false;
    return true;
}

static void emit_model(pp_text *t, const pp_plan *p)
{
    const pp_model_config *m = &p->model;
    if (m->kind == PP_MODEL_GPT2) {
        const pp_gpt2_config *g = &m->gpt2;
        pp_text_put(t, "model:\n  name: gpt2\n  n_layer: %d\n  n_head: %d\n  n_embd: %d\n"
                    "  vocab_size: %d\n  block_size: %d\n  bias: %s\n  dropout: ",
                    g->n_layer, g->n_head, g->n_embd, g->vocab_size, g->block_size,
                    g->bias ? "true" : "false");
        put_double(t, g->dropout);
        pp_text_put(t, "\n  tie_embeddings: %s\n", g->tie_embeddings ? "true" : "false");
        return;
    }
    pp_text_put(t, "model:\n  name: %s\n  num_classes: %d\n  in_channels: %d\n", m->name,
                m->num_classes, m->in_channels);
    if (m->kind == PP_MODEL_DELAY) {
        pp_text_put(t, "  forward_ms: ");
        if (m->n_forward_ms == 1)
            put_double(t, m->forward_ms[0]);
        else
            pp_text_put_doubles(t, m->forward_ms, m->n_forward_ms);
        pp_text_put(t, "\n  backward_ms: ");
        if (m->n_backward_ms == 1)
            put_double(t, m->backward_ms[0]);
        else
            pp_text_put_doubles(t, m->backward_ms, m->n_backward_ms);
        const struct {
            const char *key;
            const double *v;
            int n;
        } parts[] = {{"backward_input_ms", m->backward_input_ms, m->n_backward_input_ms},
                     {"backward_weight_ms", m->backward_weight_ms, m->n_backward_weight_ms}};
        for (int k = 0; k < 2; k++) { /* given only */
            if (parts[k].n == 0) continue;
            pp_text_put(t, "\n  %s: ", parts[k].key);
            if (parts[k].n == 1)
                put_double(t, parts[k].v[0]);
            else
                pp_text_put_doubles(t, parts[k].v, parts[k].n);
        }
        pp_text_put(t, "\n");
    } else if (m->kind == PP_MODEL_SEQUENTIAL) {
        static const char *const types[] = {"conv",    "batchnorm",      "relu",
                                            "sigmoid", "maxpool",        "avgpool",
                                            "global_avgpool", "flatten", "linear"};
        if (m->init == PP_SEQ_INIT_NORMAL) {
            pp_text_put(t, "  init: normal\n  init_std: ");
            put_double(t, m->init_std);
            pp_text_put(t, "\n");
        }
        pp_text_put(t, "  layers:\n");
        for (int i = 0; i < m->n_layers; i++) {
            const pp_seq_layer *l = &m->layers[i];
            pp_text_put(t, "    - {name: %s, type: %s", l->name, types[l->type]);
            if (l->type == PP_SEQ_CONV) pp_text_put(t, ", out_channels: %d", l->out);
            if (l->type == PP_SEQ_LINEAR) pp_text_put(t, ", out_features: %d", l->out);
            if (l->type == PP_SEQ_CONV || l->type == PP_SEQ_MAXPOOL || l->type == PP_SEQ_AVGPOOL)
                pp_text_put(t, ", kernel: %d, stride: %d, padding: %d", l->kernel, l->stride,
                            l->pad);
            if (l->type == PP_SEQ_CONV) pp_text_put(t, ", bias: %s", l->bias ? "true" : "false");
            pp_text_put(t, "}\n");
        }
    } else {
        pp_text_put(t, "  stem: %s\n", m->stem == PP_STEM_CIFAR ? "cifar" : "imagenet");
        if (m->zero_init_residual) pp_text_put(t, "  zero_init_residual: true\n");
    }
}

/* A data source: `data` or the test set of `eval` (its own keys added by
 * the caller). */
static void emit_source(pp_text *t, const pp_plan *p, const pp_plan_data *d, bool eval)
{
    pp_text_put(t, "%s:\n  format: %s\n", eval ? "eval" : "data",
                pp_plan_data_format_name(d->format));
    switch (d->format) {
    case PP_PLAN_DATA_SYNTHETIC:
        pp_text_put(t, "  image_size: [%d, %d]\n  num_classes: %d\n",
                    eval ? d->image_h : p->model.image_h, eval ? d->image_w : p->model.image_w,
                    d->num_classes);
        if (d->samples) pp_text_put(t, "  samples: %lld\n", (long long)d->samples);
        break;
    case PP_PLAN_DATA_IDX:
        pp_text_put(t, "  images: ");
        put_quoted(t, d->images ? d->images : "");
        pp_text_put(t, "\n  labels: ");
        put_quoted(t, d->labels ? d->labels : "");
        pp_text_put(t, "\n");
        break;
    case PP_PLAN_DATA_TOKENS:
    case PP_PLAN_DATA_TEXT:
        pp_text_put(t, "  file: ");
        put_quoted(t, d->file ? d->file : "");
        pp_text_put(t, "\n");
        if (!eval) pp_text_put(t, "  block_size: %d\n", d->block_size);
        if (!eval && d->vocab) {
            pp_text_put(t, d->merges ? "  tokenizer:\n    vocab: " : "  tokenizer:\n    file: ");
            put_quoted(t, d->vocab);
            if (d->merges) {
                pp_text_put(t, "\n    merges: ");
                put_quoted(t, d->merges);
            }
            pp_text_put(t, "\n    special: %s\n", d->tokenizer_special ? "true" : "false");
        }
        break;
    case PP_PLAN_DATA_CIFAR10:
        pp_text_put(t, "  files:\n");
        for (int i = 0; i < d->n_files; i++) {
            pp_text_put(t, "    - ");
            put_quoted(t, d->files[i] ? d->files[i] : "");
            pp_text_put(t, "\n");
        }
        break;
    case PP_PLAN_DATA_IMAGEFOLDER: {
        pp_text_put(t, "  root: ");
        put_quoted(t, d->root ? d->root : "");
        char tf[2048];
        pp_transform_describe(d->transforms, d->n_transforms, tf, sizeof tf);
        pp_text_put(t, "\n  transforms: %s\n  on_bad_image: %s\n", tf,
                    d->skip_bad_images ? "skip" : "error");
        break;
    }
    }
    if (eval) return;
    pp_text_put(t, "  shuffle: %s\n", d->shuffle ? "true" : "false");
    if (d->workers) pp_text_put(t, "  workers: %d\n", d->workers);
    pp_text_put(t, "  prefetch: %d\n", d->prefetch);
    if (d->drop_last) pp_text_put(t, "  drop_last: true\n");
    if (d->has_norm) {
        pp_text_put(t, "  mean: ");
        pp_text_put_doubles(t, d->mean, p->model.in_channels);
        pp_text_put(t, "\n  std: ");
        pp_text_put_doubles(t, d->std, p->model.in_channels);
        pp_text_put(t, "\n");
    }
}

static void emit_stages(pp_text *t, const pp_plan *p)
{
    if (p->replicas > 1) pp_text_put(t, "replicas: %d\n", p->replicas);
    pp_text_put(t, "stages:\n");
    for (int s = 0; s < p->n_stages; s++) {
        const pp_plan_stage *st = &p->stages[s];
        pp_text_put(t, "  - device: %s", p->replicas > 1 ? "[" : "");
        for (int r = 0; r < (p->replicas > 1 ? p->replicas : 1); r++) {
            char name[16];
            pp_device_id_format(r ? st->replica_device[r] : st->device, name, sizeof name);
            int rank = r ? st->replica_rank[r] : st->rank;
            if (rank > 0)
                pp_text_put(t, "%srank%d:%s", r ? ", " : "", rank, name);
            else
                pp_text_put(t, "%s%s", r ? ", " : "", name);
        }
        pp_text_put(t, "%s\n", p->replicas > 1 ? "]" : "");
        if (st->memory_bytes > 0) {
            char b[40];
            pp_plan_size_format(st->memory_bytes, b, sizeof b);
            pp_text_put(t, "    memory: %s\n", b);
        }
        if (st->has_recompute)
            pp_text_put(t, "    recompute: %s\n", pp_plan_recompute_name(st->recompute));
        if (p->model.kind == PP_MODEL_DELAY || st->first < 0) continue;
        pp_text_put(t, "    layers: [");
        for (int u = st->first; u <= st->last;) {
            char name[64];
            u = pp_plan_spell_item(&p->catalogue, u, st->last, name, sizeof name);
            if (name[0] && plain_safe(name))
                pp_text_put(t, "%s", name);
            else
                put_quoted(t, name);
            if (u <= st->last) pp_text_put(t, ", ");
        }
        pp_text_put(t, "]\n");
    }
}

/* `key: value` of the optimizer section */
static void put_key(pp_text *t, const char *key, double v)
{
    pp_text_put(t, "  %s: ", key);
    put_double(t, v);
    pp_text_put(t, "\n");
}

static void emit_optimizer(pp_text *t, const pp_plan_sgd *o)
{
    const bool adamw = o->type == PP_PLAN_OPTIMIZER_ADAMW;
    pp_text_put(t, "optimizer:\n  type: %s\n", adamw ? "adamw" : "sgd");
    put_key(t, "lr", o->lr);
    if (adamw) {
        pp_text_put(t, "  betas: [");
        put_double(t, o->beta1);
        pp_text_put(t, ", ");
        put_double(t, o->beta2);
        pp_text_put(t, "]\n");
        put_key(t, "eps", o->eps);
    } else {
        put_key(t, "momentum", o->momentum);
    }
    put_key(t, "weight_decay", o->weight_decay);
    if (!adamw) pp_text_put(t, "  nesterov: %s\n", o->nesterov ? "true" : "false");
    if (o->has_norm_weight_decay) put_key(t, "norm_weight_decay", o->norm_weight_decay);
    if (o->has_bias_weight_decay) put_key(t, "bias_weight_decay", o->bias_weight_decay);
    if (o->clip_grad_norm > 0) put_key(t, "clip_grad_norm", o->clip_grad_norm);
}

static void emit_lr_schedule(pp_text *t, const pp_lr_schedule *l)
{
    if (l->kind == PP_LR_CONSTANT) return;
    pp_text_put(t, "  lr_schedule:\n    type: %s\n", pp_lr_kind_name(l->kind));
    if (l->kind == PP_LR_STEP) {
        pp_text_put(t, "    milestones: [");
        for (int i = 0; i < l->n_milestones; i++)
            pp_text_put(t, "%s%d", i ? ", " : "", l->milestones[i]);
        pp_text_put(t, "]\n    gamma: ");
        put_double(t, l->gamma);
        pp_text_put(t, "\n");
        return;
    }
    pp_text_put(t, "    warmup: %d\n    warmup_start_factor: ", l->warmup);
    put_double(t, l->warmup_start_factor);
    pp_text_put(t, "\n    min_lr: ");
    put_double(t, l->eta_min);
    pp_text_put(t, "\n");
}

pp_status pp_plan_emit(const pp_plan *p, char **out, size_t *len, pp_error *err)
{
    if (!p || !out) return pp_error_set(err, PP_ERR_INVALID, "pp_plan_emit: NULL argument");
    *out = NULL;
    if (p->stages_auto)
        return pp_error_set(err, PP_ERR_INVALID,
                            "the plan's automatic stages are not resolved yet");
    for (int s = 0; s < p->n_stages; s++)
        if (p->model.kind != PP_MODEL_DELAY &&
            (p->stages[s].first < 0 || p->stages[s].last >= p->catalogue.n ||
             p->stages[s].first > p->stages[s].last))
            return pp_error_set(err, PP_ERR_INVALID, "stage %d has no valid unit range", s);
    pp_text t = {0};
    t.cap = 2048;
    t.s = malloc(t.cap);
    if (!t.s) return pp_error_set(err, PP_ERR_OOM, "pp_plan_emit: out of host memory");
    t.s[0] = '\0';
    emit_model(&t, p);
    if (p->batch_by_micro)
        pp_text_put(&t, "batch:\n  size: %d\n  micro_batches: %d\n", p->batch_size,
                    p->micro_batches);
    else
        pp_text_put(&t, "batch:\n  size: %d\n  split_size: %d\n", p->batch_size, p->split_size);
    if (p->deferred_batch_norm) pp_text_put(&t, "  deferred_batch_norm: true\n");
    if (p->schedule == PP_PLAN_SCHEDULE_FILE) {
        pp_text_put(&t, "schedule:\n  file: ");
        put_quoted(&t, p->schedule_file ? p->schedule_file : "");
        pp_text_put(&t, "\n");
    } else {
        pp_text_put(&t, "schedule: %s\n", pp_plan_schedule_name(p->schedule));
    }
    pp_text_put(&t, "precision: %s\n", pp_plan_precision_name(p->precision));
    if (p->recompute != PP_PLAN_RECOMPUTE_NEVER)
        pp_text_put(&t, "recompute: %s\n", pp_plan_recompute_name(p->recompute));
    if (!p->cuda_graphs) pp_text_put(&t, "cuda_graphs: off\n");
    emit_optimizer(&t, &p->optimizer);
    emit_lr_schedule(&t, &p->lr_schedule);
    if (p->loss.label_smoothing > 0) {
        pp_text_put(&t, "loss:\n  label_smoothing: ");
        put_double(&t, p->loss.label_smoothing);
        pp_text_put(&t, "\n");
    }
    emit_source(&t, p, &p->data, false);
    if (p->epochs)
        pp_text_put(&t, "seed: %llu\nepochs: %d\n", (unsigned long long)p->seed, p->epochs);
    else
        pp_text_put(&t, "seed: %llu\nsteps: %d\n", (unsigned long long)p->seed, p->steps);
    if (p->eval.enabled) {
        emit_source(&t, p, &p->eval.data, true);
        pp_text_put(&t, "  batch_size: %d\n  every: %d\n", p->eval.batch_size, p->eval.every);
    }
    if (p->checkpoint.enabled) {
        pp_text_put(&t, "checkpoint:\n  every: %d\n  path: ", p->checkpoint.every);
        put_quoted(&t, p->checkpoint.path ? p->checkpoint.path : "");
        pp_text_put(&t, "\n  keep: %d\n", p->checkpoint.keep);
    }
    emit_stages(&t, p);
    if (t.oom) {
        free(t.s);
        return pp_error_set(err, PP_ERR_OOM, "pp_plan_emit: out of host memory");
    }
    *out = t.s;
    if (len) *len = t.len;
    return PP_OK;
}
