/*
 * plan_identity.c - what a training step means under a plan (plan.h,
 * pp_plan_step_keys): the keys a checkpoint records so that a run resumed
 * under another plan can be refused when its steps would mean something else;
 * and what else tells one run from another (pp_plan_run_keys: how the
 * parameters move), so that --resume auto continues this plan's run and not
 * another that left files under the same names.
 *
 * A key is listed when its value changes which samples a step reads or what
 * the step computes from them: the model and its input, the batch, the data
 * and their order (seed, shuffle), and where batch norm normalises over each
 * micro-batch, the micro-batches' sizes (over all replicas) and whether the
 * running statistics are deferred (when they are). What only
 * changes how or where a step runs (stages, devices, schedule, precision,
 * replicas' placement) or how parameters move (optimizer, learning rate,
 * step and epoch counts) is left out: those may change across a resume.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "partitioner/plan.h"
#include "partitioner/text.h"
#include "runtime/core/batch_split.h"
#include "runtime/io/transform.h"

/* "name (12345 bytes)": a data file by its name and size, so that a copy of
 * the data elsewhere is the same data and another data set of the same file
 * names (MNIST and Fashion-MNIST) is not. */
static void put_file(pp_text *t, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    struct stat st;
    if (stat(path, &st) == 0)
        pp_text_put(t, "%s (%lld bytes)", base, (long long)st.st_size);
    else
        pp_text_put(t, "%s", base);
}

static bool has_batch_norm(const pp_model_config *m)
{
    if (m->kind == PP_MODEL_RESNET) return true;
    if (m->kind != PP_MODEL_SEQUENTIAL) return false;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].type == PP_SEQ_BATCHNORM) return true;
    return false;
}

/* The micro-batches batch norm sees in one step, over every replica (each
 * cuts its piece by the plan's rule): "4 (2+2+2+2)". */
static void put_micro(pp_text *t, const pp_plan *p)
{
    int R = p->replicas > 1 ? p->replicas : 1;
    if (R > p->batch_size) R = p->batch_size;
    int pieces[PP_PLAN_MAX_REPLICAS];
    pp_batch_split_sizes(p->batch_size, 0, R, pieces);
    int total = 0;
    pp_text sizes = {0};
    for (int r = 0; r < R; r++) {
        int micro = p->batch_by_micro ? (p->micro_batches < pieces[r] ? p->micro_batches
                                                                      : pieces[r])
                                      : 0;
        int split = micro ? 0 : p->split_size;
        int m = pp_batch_split_count(pieces[r], split, micro);
        int *s = malloc((size_t)(m > 0 ? m : 1) * sizeof *s);
        if (!s) {
            t->oom = true;
            break;
        }
        pp_batch_split_sizes(pieces[r], split, micro, s);
        for (int i = 0; i < m; i++) pp_text_put(&sizes, "%s%d", total + i ? "+" : "", s[i]);
        total += m;
        free(s);
    }
    pp_text_put(t, "%d (%s)", total, sizes.s ? sizes.s : "");
    t->oom |= sizes.oom;
    free(sizes.s);
}

/* Adds key with the text of t (taken). */
static bool add(pp_plan_step_keys *k, const char *key, pp_text *t)
{
    if (t->oom || !t->s || k->n == PP_PLAN_STEP_KEYS_MAX) {
        free(t->s);
        return false;
    }
    char *name = strdup(key);
    if (!name) {
        free(t->s);
        return false;
    }
    k->keys[k->n] = name;
    k->values[k->n++] = t->s;
    return true;
}

/* Adds key with a printf-made value. */
static bool addf(pp_plan_step_keys *k, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool addf(pp_plan_step_keys *k, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    pp_text t = {0};
    if (n >= 0 && (t.s = malloc((size_t)n + 1)) != NULL) {
        va_start(ap, fmt);
        vsnprintf(t.s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    } else {
        t.oom = true;
    }
    return add(k, key, &t);
}

/* Inside the key getters (k the keys, ok the state so far). */
#define KEY(name, ...) (ok = ok && addf(k, name, __VA_ARGS__))

pp_status pp_plan_step_keys_get(const pp_plan *p, pp_plan_step_keys *k, pp_error *err)
{
    memset(k, 0, sizeof *k);
    const pp_model_config *m = &p->model;
    const pp_plan_data *d = &p->data;
    bool ok = true;
    KEY("model.name", "%s", m->name);
    if (m->kind != PP_MODEL_DELAY) {
        KEY("model.num_classes", "%d", m->num_classes);
        KEY("model.in_channels", "%d", m->in_channels);
    }
    if (m->kind == PP_MODEL_RESNET)
        KEY("model.stem", "%s", m->stem == PP_STEM_CIFAR ? "cifar" : "imagenet");
    if (m->kind == PP_MODEL_GPT2) {
        const pp_gpt2_config *g = &m->gpt2;
        KEY("model.gpt2", "n_layer %d, n_head %d, n_embd %d, vocab_size %d, block_size %d%s%s",
            g->n_layer, g->n_head, g->n_embd, g->vocab_size, g->block_size,
            g->bias ? "" : ", no bias", g->tie_embeddings ? "" : ", untied");
    }
    if (m->kind == PP_MODEL_SEQUENTIAL) {
        static const char *const types[] = {"conv",    "batchnorm",      "relu",
                                            "sigmoid", "maxpool",        "avgpool",
                                            "global_avgpool", "flatten", "linear"};
        pp_text t = {0};
        for (int i = 0; i < m->n_layers; i++) {
            const pp_seq_layer *l = &m->layers[i];
            pp_text_put(&t, "%s%s %s", i ? ", " : "", l->name, types[l->type]);
            if (l->type == PP_SEQ_CONV || l->type == PP_SEQ_LINEAR) pp_text_put(&t, " %d", l->out);
            if (l->type == PP_SEQ_CONV || l->type == PP_SEQ_MAXPOOL || l->type == PP_SEQ_AVGPOOL)
                pp_text_put(&t, " k%d s%d p%d", l->kernel, l->stride, l->pad);
            if (l->type == PP_SEQ_CONV && !l->bias) pp_text_put(&t, " nobias");
        }
        ok = ok && add(k, "model.layers", &t);
    }
    KEY("batch.size", "%d", p->batch_size);
    if (has_batch_norm(m)) {
        pp_text t = {0};
        put_micro(&t, p);
        ok = ok && add(k, "batch.micro_batches", &t);
        /* deferred statistics change what the steps leave in the running statistics */
        if (p->deferred_batch_norm) KEY("batch.deferred_batch_norm", "%s", "true");
    }
    KEY("data.format", "%s", pp_plan_data_format_name(d->format));
    KEY("data.image_size", "[%d, %d]", m->image_h, m->image_w);
    if (d->format == PP_PLAN_DATA_SYNTHETIC) KEY("data.num_classes", "%d", d->num_classes);
    if (d->format == PP_PLAN_DATA_IDX) {
        pp_text ti = {0}, tl = {0};
        put_file(&ti, d->images ? d->images : "");
        put_file(&tl, d->labels ? d->labels : "");
        ok = ok && add(k, "data.images", &ti);
        ok = ok && add(k, "data.labels", &tl);
    }
    if (d->format == PP_PLAN_DATA_TOKENS || d->format == PP_PLAN_DATA_TEXT) {
        pp_text tf = {0};
        put_file(&tf, d->file ? d->file : "");
        ok = ok && add(k, "data.file", &tf);
        KEY("data.block_size", "%d", d->block_size);
        if (d->vocab) { /* the tokenizer decides the tokens of a text */
            pp_text tv = {0};
            put_file(&tv, d->vocab);
            if (d->merges) { /* else vocab is the one tokenizer.json */
                pp_text_put(&tv, ", ");
                put_file(&tv, d->merges);
            }
            if (d->tokenizer_special) pp_text_put(&tv, ", special tokens");
            ok = ok && add(k, "data.tokenizer", &tv);
        }
    }
    if (d->format == PP_PLAN_DATA_CIFAR10) {
        pp_text t = {0};
        for (int i = 0; i < d->n_files; i++) {
            if (i) pp_text_put(&t, ", ");
            put_file(&t, d->files[i]);
        }
        ok = ok && add(k, "data.files", &t);
    }
    if (d->format == PP_PLAN_DATA_IMAGEFOLDER) {
        char tf[2048];
        pp_transform_describe(d->transforms, d->n_transforms, tf, sizeof tf);
        KEY("data.root", "%s", d->root ? d->root : "");
        KEY("data.transforms", "%s", tf);
        KEY("data.on_bad_image", "%s", d->skip_bad_images ? "skip" : "error");
    }
    KEY("data.shuffle", "%s", d->shuffle ? "true" : "false");
    if (d->drop_last) KEY("data.drop_last", "true");
    if (d->has_norm) {
        pp_text tm = {0}, ts = {0};
        pp_text_put_doubles(&tm, d->mean, m->in_channels);
        pp_text_put_doubles(&ts, d->std, m->in_channels);
        ok = ok && add(k, "data.mean", &tm);
        ok = ok && add(k, "data.std", &ts);
    }
    KEY("seed", "%llu", (unsigned long long)p->seed);
    if (!ok) {
        pp_plan_step_keys_free(k);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (plan keys)");
    }
    return PP_OK;
}

void pp_plan_step_keys_free(pp_plan_step_keys *k)
{
    if (!k) return;
    for (int i = 0; i < k->n; i++) {
        free(k->keys[i]);
        free(k->values[i]);
    }
    memset(k, 0, sizeof *k);
}

pp_status pp_plan_run_keys_get(const pp_plan *p, pp_plan_step_keys *k, pp_error *err)
{
    memset(k, 0, sizeof *k);
    bool ok = true;
    const pp_plan_sgd *o = &p->optimizer;
    const bool adamw = o->type == PP_PLAN_OPTIMIZER_ADAMW;
    KEY("optimizer.type", "%s", adamw ? "adamw" : "sgd");
    KEY("optimizer.lr", "%.9g", o->lr);
    if (adamw) {
        KEY("optimizer.betas", "[%.9g, %.9g]", o->beta1, o->beta2);
        KEY("optimizer.eps", "%.9g", o->eps);
    } else {
        KEY("optimizer.momentum", "%.9g", o->momentum);
        KEY("optimizer.nesterov", "%s", o->nesterov ? "true" : "false");
    }
    KEY("optimizer.weight_decay", "%.9g", o->weight_decay);
    if (o->has_norm_weight_decay)
        KEY("optimizer.norm_weight_decay", "%.9g", o->norm_weight_decay);
    if (o->has_bias_weight_decay)
        KEY("optimizer.bias_weight_decay", "%.9g", o->bias_weight_decay);
    if (o->clip_grad_norm > 0) KEY("optimizer.clip_grad_norm", "%.9g", o->clip_grad_norm);
    if (p->loss.label_smoothing > 0) KEY("loss.label_smoothing", "%.9g", p->loss.label_smoothing);
    const pp_lr_schedule *l = &p->lr_schedule;
    pp_text t = {0};
    pp_text_put(&t, "%s", pp_lr_kind_name(l->kind));
    if (l->kind == PP_LR_STEP) {
        pp_text_put(&t, " gamma %.9g milestones", l->gamma);
        for (int i = 0; i < l->n_milestones; i++) pp_text_put(&t, " %d", l->milestones[i]);
    } else if (l->kind == PP_LR_COSINE) {
        pp_text_put(&t, " total %d warmup %d start %.9g eta_min %.9g", l->total, l->warmup,
                    l->warmup_start_factor, l->eta_min);
    }
    ok = ok && add(k, "optimizer.lr_schedule", &t);
    KEY("precision", "%s", pp_plan_precision_name(p->precision));
    if (!ok) {
        pp_plan_step_keys_free(k);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (plan keys)");
    }
    return PP_OK;
}
