/*
 * plan_equal.c - semantic equality of two plans (pp_plan_equal, plan.h):
 * the model, batch and micro-batch sizes, schedule, precision, optimizer,
 * data, seed, length, learning-rate schedule, evaluation, checkpoints,
 * stages and replicas, compared field by field; the plan's own path and the
 * source marks are ignored. The first difference is written to why.
 */
#include "partitioner/plan.h"

#include <stdio.h>
#include <string.h>

#define DIFF(...)                                                                 \
    do {                                                                          \
        if (why && why_n) snprintf(why, why_n, __VA_ARGS__);                      \
        return false;                                                             \
    } while (0)

static bool str_eq(const char *a, const char *b)
{
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

static bool transforms_eq(const pp_plan_data *a, const pp_plan_data *b)
{
    if (a->n_transforms != b->n_transforms) return false;
    for (int i = 0; i < a->n_transforms; i++) {
        const pp_transform *x = &a->transforms[i], *y = &b->transforms[i];
        if (x->kind != y->kind || x->h != y->h || x->w != y->w || x->p != y->p ||
            x->scale[0] != y->scale[0] || x->scale[1] != y->scale[1] ||
            x->ratio[0] != y->ratio[0] || x->ratio[1] != y->ratio[1] ||
            memcmp(x->pad, y->pad, sizeof x->pad) != 0)
            return false;
    }
    return true;
}

/* Two data sources (`data`, or eval's test set; what names it in why). */
static bool source_equal(const pp_plan_data *da, const pp_plan_data *db, int channels,
                         const char *what, char *why, size_t why_n)
{
    if (da->format != db->format) DIFF("%s format differs", what);
    if (da->num_classes != db->num_classes) DIFF("%s.num_classes differs", what);
    if (da->samples != db->samples) DIFF("%s.samples differs", what);
    if (!str_eq(da->images, db->images) || !str_eq(da->labels, db->labels))
        DIFF("%s paths differ", what);
    if (da->n_files != db->n_files) DIFF("%s.files counts differ", what);
    for (int i = 0; i < da->n_files; i++)
        if (!str_eq(da->files[i], db->files[i])) DIFF("%s.files[%d] differs", what, i);
    if (!str_eq(da->root, db->root)) DIFF("%s.root differs", what);
    if (!str_eq(da->file, db->file) || da->block_size != db->block_size)
        DIFF("%s.file or block_size differs", what);
    if (!str_eq(da->vocab, db->vocab) || !str_eq(da->merges, db->merges) ||
        da->tokenizer_special != db->tokenizer_special)
        DIFF("%s.tokenizer differs", what);
    if (!transforms_eq(da, db)) DIFF("%s.transforms differ", what);
    if (da->skip_bad_images != db->skip_bad_images) DIFF("%s.on_bad_image differs", what);
    if (da->workers != db->workers || da->prefetch != db->prefetch)
        DIFF("%s.workers or prefetch differs", what);
    if (da->shuffle != db->shuffle) DIFF("%s.shuffle differs", what);
    if (da->drop_last != db->drop_last) DIFF("%s.drop_last differs", what);
    if (da->has_norm != db->has_norm) DIFF("%s mean/std presence differs", what);
    if (da->has_norm)
        for (int i = 0; i < channels; i++)
            if (da->mean[i] != db->mean[i] || da->std[i] != db->std[i])
                DIFF("%s mean/std[%d] differs", what, i);
    return true;
}

bool pp_plan_equal(const pp_plan *a, const pp_plan *b, char *why, size_t why_n)
{
    if (why && why_n) why[0] = '\0';
    const pp_model_config *ma = &a->model, *mb = &b->model;
    if (ma->kind != mb->kind || strcmp(ma->name, mb->name) != 0)
        DIFF("model %s vs %s", ma->name, mb->name);
    if (ma->num_classes != mb->num_classes || ma->in_channels != mb->in_channels)
        DIFF("model classes/channels %d/%d vs %d/%d", ma->num_classes, ma->in_channels,
             mb->num_classes, mb->in_channels);
    if (ma->kind == PP_MODEL_RESNET && (ma->stem != mb->stem || ma->depth != mb->depth))
        DIFF("model stem/depth differ");
    if (ma->kind == PP_MODEL_RESNET && ma->zero_init_residual != mb->zero_init_residual)
        DIFF("model zero_init_residual differs");
    const pp_gpt2_config *ga = &ma->gpt2, *gb = &mb->gpt2;
    if (ma->kind == PP_MODEL_GPT2 &&
        (ga->n_layer != gb->n_layer || ga->n_head != gb->n_head || ga->n_embd != gb->n_embd ||
         ga->vocab_size != gb->vocab_size || ga->block_size != gb->block_size ||
         ga->seq_len != gb->seq_len || ga->bias != gb->bias || ga->dropout != gb->dropout ||
         ga->tie_embeddings != gb->tie_embeddings))
        DIFF("gpt2 sizes differ");
    if (ma->n_layers != mb->n_layers || ma->init != mb->init || ma->init_std != mb->init_std)
        DIFF("sequential layer counts or initialisation differ");
    for (int i = 0; i < ma->n_layers; i++) {
        const pp_seq_layer *la = &ma->layers[i], *lb = &mb->layers[i];
        if (strcmp(la->name, lb->name) != 0 || la->type != lb->type || la->out != lb->out ||
            la->kernel != lb->kernel || la->stride != lb->stride || la->pad != lb->pad ||
            la->bias != lb->bias)
            DIFF("sequential layer %d differs ('%s' vs '%s')", i, la->name, lb->name);
    }
    if (ma->image_h != mb->image_h || ma->image_w != mb->image_w)
        DIFF("image size %dx%d vs %dx%d", ma->image_h, ma->image_w, mb->image_h, mb->image_w);
    if (ma->n_forward_ms != mb->n_forward_ms || ma->n_backward_ms != mb->n_backward_ms)
        DIFF("delay time counts differ");
    for (int i = 0; i < ma->n_forward_ms; i++)
        if (ma->forward_ms[i] != mb->forward_ms[i]) DIFF("forward_ms[%d] differs", i);
    for (int i = 0; i < ma->n_backward_ms; i++)
        if (ma->backward_ms[i] != mb->backward_ms[i]) DIFF("backward_ms[%d] differs", i);
    if (ma->n_backward_input_ms != mb->n_backward_input_ms ||
        ma->n_backward_weight_ms != mb->n_backward_weight_ms)
        DIFF("split backward times differ");
    for (int i = 0; i < ma->n_backward_input_ms; i++)
        if (ma->backward_input_ms[i] != mb->backward_input_ms[i])
            DIFF("backward_input_ms[%d] differs", i);
    for (int i = 0; i < ma->n_backward_weight_ms; i++)
        if (ma->backward_weight_ms[i] != mb->backward_weight_ms[i])
            DIFF("backward_weight_ms[%d] differs", i);
    if (a->catalogue.n != b->catalogue.n)
        DIFF("catalogue units %d vs %d", a->catalogue.n, b->catalogue.n);
    if (a->batch_size != b->batch_size || a->split_size != b->split_size ||
        a->micro_batches != b->micro_batches || a->batch_by_micro != b->batch_by_micro)
        DIFF("batch %d/%d/%d vs %d/%d/%d", a->batch_size, a->split_size, a->micro_batches,
             b->batch_size, b->split_size, b->micro_batches);
    for (int i = 0; i < a->micro_batches; i++)
        if (a->micro_sizes[i] != b->micro_sizes[i]) DIFF("micro-batch %d size differs", i);
    if (a->schedule != b->schedule) DIFF("schedule differs");
    if (a->schedule == PP_PLAN_SCHEDULE_FILE &&
        strcmp(a->schedule_file ? a->schedule_file : "", b->schedule_file ? b->schedule_file : ""))
        DIFF("schedule file differs");
    if (a->precision != b->precision) DIFF("precision differs");
    if (a->cuda_graphs != b->cuda_graphs) DIFF("cuda_graphs differs");
    if (a->recompute != b->recompute) DIFF("recompute differs");
    const pp_plan_sgd *oa = &a->optimizer, *ob = &b->optimizer;
    if (oa->lr != ob->lr || oa->momentum != ob->momentum || oa->weight_decay != ob->weight_decay ||
        oa->nesterov != ob->nesterov)
        DIFF("optimizer differs");
    if (oa->type != ob->type || oa->beta1 != ob->beta1 || oa->beta2 != ob->beta2 ||
        oa->eps != ob->eps || oa->has_norm_weight_decay != ob->has_norm_weight_decay ||
        oa->norm_weight_decay != ob->norm_weight_decay ||
        oa->has_bias_weight_decay != ob->has_bias_weight_decay ||
        oa->bias_weight_decay != ob->bias_weight_decay || oa->clip_grad_norm != ob->clip_grad_norm)
        DIFF("optimizer differs");
    if (a->loss.label_smoothing != b->loss.label_smoothing) DIFF("loss.label_smoothing differs");
    if (a->deferred_batch_norm != b->deferred_batch_norm)
        DIFF("batch.deferred_batch_norm differs");
    if (!source_equal(&a->data, &b->data, ma->in_channels, "data", why, why_n)) return false;
    if (a->seed != b->seed) DIFF("seed differs");
    if (a->steps != b->steps) DIFF("steps %d vs %d", a->steps, b->steps);
    if (a->epochs != b->epochs) DIFF("epochs %d vs %d", a->epochs, b->epochs);
    const pp_lr_schedule *la = &a->lr_schedule, *lb = &b->lr_schedule;
    bool lr_same = la->kind == lb->kind && la->base_lr == lb->base_lr &&
                   la->n_milestones == lb->n_milestones && la->gamma == lb->gamma &&
                   la->total == lb->total && la->warmup == lb->warmup &&
                   la->warmup_start_factor == lb->warmup_start_factor && la->eta_min == lb->eta_min;
    for (int i = 0; lr_same && i < la->n_milestones; i++)
        lr_same = la->milestones[i] == lb->milestones[i];
    if (!lr_same) DIFF("lr_schedule differs");
    const pp_plan_eval *ea = &a->eval, *eb = &b->eval;
    if (ea->enabled != eb->enabled || ea->batch_size != eb->batch_size || ea->every != eb->every)
        DIFF("eval differs");
    if (ea->enabled && !source_equal(&ea->data, &eb->data, ma->in_channels, "eval", why, why_n))
        return false;
    const pp_plan_checkpoint *ca = &a->checkpoint, *cb = &b->checkpoint;
    if (ca->enabled != cb->enabled || ca->every != cb->every || ca->keep != cb->keep ||
        !str_eq(ca->path, cb->path))
        DIFF("checkpoint differs");
    if (a->stages_auto != b->stages_auto) DIFF("automatic stages resolved in one plan only");
    if (a->stages_auto && a->balance != b->balance) DIFF("balance differs");
    if (a->n_stages != b->n_stages) DIFF("stage count %d vs %d", a->n_stages, b->n_stages);
    if (a->replicas != b->replicas) DIFF("replicas %d vs %d", a->replicas, b->replicas);
    for (int i = 0; i < a->n_stages; i++) {
        const pp_plan_stage *sa = &a->stages[i], *sb = &b->stages[i];
        if (!pp_device_id_equal(sa->device, sb->device) ||
            strcmp(sa->device_name, sb->device_name) != 0)
            DIFF("stage %d device %s vs %s", i, sa->device_name, sb->device_name);
        if (sa->rank != sb->rank) DIFF("stage %d rank %d vs %d", i, sa->rank, sb->rank);
        for (int r = 1; r < a->replicas && r < b->replicas; r++)
            if (sa->replica_rank[r] != sb->replica_rank[r] ||
                !pp_device_id_equal(sa->replica_device[r], sb->replica_device[r]))
                DIFF("stage %d replica %d device differs", i, r);
        if (sa->first != sb->first || sa->last != sb->last)
            DIFF("stage %d units [%d, %d] vs [%d, %d]", i, sa->first, sa->last, sb->first,
                 sb->last);
        if (sa->memory_bytes != sb->memory_bytes) DIFF("stage %d memory differs", i);
        if (sa->has_recompute != sb->has_recompute ||
            (sa->has_recompute && sa->recompute != sb->recompute))
            DIFF("stage %d recompute differs", i);
    }
    return true;
}
