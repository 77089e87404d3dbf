/*
 * data_source.c - a plan's data section (or eval's test set) as a
 * pp_data_config, opened (see data_source.h). The one place that maps the
 * plan's data formats onto the runtime's.
 */
#include "pipeline/data_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/state.h"
#include "runtime/io/image_index.h"
#include "runtime/io/reader.h"
#include "runtime/io/tokens.h"

#define EVAL_SEED_TAG 0x7e57u /* a synthetic test set's seed: the plan's, xor this */

static pp_data_format data_format(pp_plan_data_format f)
{
    switch (f) {
    case PP_PLAN_DATA_IDX: return PP_DATA_IDX;
    case PP_PLAN_DATA_CIFAR10: return PP_DATA_CIFAR10;
    case PP_PLAN_DATA_IMAGEFOLDER: return PP_DATA_IMAGEFOLDER;
    case PP_PLAN_DATA_TOKENS: return PP_DATA_TOKENS;
    case PP_PLAN_DATA_TEXT: return PP_DATA_TEXT;
    case PP_PLAN_DATA_SYNTHETIC: break;
    }
    return PP_DATA_SYNTHETIC;
}

/* The normalisation of the plan's data section (the test set's too). */
static pp_status norm_config(const pp_plan *plan, pp_data_config *cfg, pp_error *err)
{
    const pp_plan_data *d = &plan->data;
    if (!d->has_norm) return PP_OK;
    int c = plan->model.in_channels;
    if (c > PP_DATA_MAX_CHANNELS)
        return pipe_plan_error(plan, d->mark, err, PP_ERR_INPUT, "too many channels for mean/std");
    cfg->n_mean = cfg->n_std = c;
    for (int i = 0; i < c; i++) {
        cfg->mean[i] = (float)d->mean[i];
        cfg->std[i] = (float)d->std[i];
    }
    return PP_OK;
}

static pp_status make_config(const pp_plan *plan, const pp_plan_data *d, bool eval,
                             pp_data_config *cfg, pp_error *err)
{
    pp_data_config_init(cfg);
    cfg->seed = eval ? plan->seed ^ EVAL_SEED_TAG : plan->seed;
    cfg->shuffle = !eval && d->shuffle;
    cfg->format = data_format(d->format);
    cfg->classes = plan->model.num_classes; /* every label must be below it */
    switch (d->format) {
    case PP_PLAN_DATA_SYNTHETIC:
        cfg->channels = plan->model.in_channels;
        cfg->height = eval ? d->image_h : plan->model.image_h;
        cfg->width = eval ? d->image_w : plan->model.image_w;
        cfg->classes = d->num_classes > 0 ? d->num_classes : plan->model.num_classes;
        cfg->samples = d->samples;
        break;
    case PP_PLAN_DATA_IDX:
        snprintf(cfg->images, sizeof cfg->images, "%s", d->images ? d->images : "");
        snprintf(cfg->labels, sizeof cfg->labels, "%s", d->labels ? d->labels : "");
        break;
    case PP_PLAN_DATA_CIFAR10:
        if (d->n_files > PP_DATA_MAX_FILES)
            return pipe_plan_error(plan, d->mark, err, PP_ERR_INPUT, "too many cifar10 files");
        cfg->classes = 0;
        cfg->n_files = d->n_files;
        for (int i = 0; i < d->n_files; i++)
            snprintf(cfg->files[i], sizeof cfg->files[i], "%s", d->files[i]);
        break;
    case PP_PLAN_DATA_IMAGEFOLDER:
        cfg->channels = plan->model.in_channels;
        snprintf(cfg->root, sizeof cfg->root, "%s", d->root ? d->root : "");
        cfg->n_transforms = d->n_transforms;
        for (int i = 0; i < d->n_transforms; i++) cfg->transforms[i] = d->transforms[i];
        cfg->skip_bad_images = d->skip_bad_images;
        if (!pp_image_index_cache_dir(cfg->index_cache, sizeof cfg->index_cache))
            cfg->index_cache[0] = '\0';
        else
            PP_TRY(pp_plan_cache_max("PP_IMAGE_INDEX_CACHE_MAX", PP_IMAGE_INDEX_CACHE_MAX_BYTES,
                                     &cfg->index_cache_max, err));
        cfg->index_cache_min = PP_IMAGE_INDEX_CACHE_MIN_FILES;
        break;
    case PP_PLAN_DATA_TOKENS:
    case PP_PLAN_DATA_TEXT: /* windows of the training data's block_size; ids below the vocabulary */
        snprintf(cfg->file, sizeof cfg->file, "%s", d->file ? d->file : "");
        cfg->block_size = plan->data.block_size;
        cfg->classes = plan->model.gpt2.vocab_size;
        if (plan->data.vocab) { /* data's tokenizer reads the test set too */
            snprintf(cfg->vocab, sizeof cfg->vocab, "%s", plan->data.vocab);
            snprintf(cfg->merges, sizeof cfg->merges, "%s",
                     plan->data.merges ? plan->data.merges : ""); /* "": tokenizer.json */
            cfg->special = plan->data.tokenizer_special;
            if (!pp_tokens_cache_dir(cfg->token_cache, sizeof cfg->token_cache))
                cfg->token_cache[0] = '\0';
            else
                PP_TRY(pp_plan_cache_max("PP_TOKEN_CACHE_MAX", PP_TOKENS_CACHE_MAX_BYTES,
                                         &cfg->token_cache_max, err));
            /* the threads that read batches tokenize it */
            cfg->workers = plan->data.workers;
            if (cfg->workers < 1) PP_TRY(pp_data_reader_threads_from_env(&cfg->workers, err));
        }
        return PP_OK;
    }
    return norm_config(plan, cfg, err);
}

pp_status pipe_data_open(const pp_plan *plan, const pp_plan_data *d, bool eval, pp_data **out,
                         pp_error *err)
{
    *out = NULL;
    pp_data_config *cfg = malloc(sizeof *cfg); /* large: paths */
    if (!cfg) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    pp_status s = make_config(plan, d, eval, cfg, err);
    if (s == PP_OK) s = pp_data_open(cfg, out, err);
    free(cfg);
    if (s == PP_ERR_INPUT && d->mark.line > 0)
        pp_error_prefix(err, "%s:%d:%d%s", plan->path, d->mark.line, d->mark.col,
                        eval ? ": eval" : "");
    return s;
}

int64_t pipe_data_steps_per_epoch(int64_t n, int batch, bool drop_last)
{
    const int64_t spe = drop_last ? n / batch : (n + batch - 1) / batch;
    return spe > 0 ? spe : 1; /* (a plan with drop_last has a batch at most n: see open) */
}

void pipe_data_window(int64_t k, int64_t n, int batch, bool epochs, bool drop_last, int64_t *pos,
                      int *count, int64_t *epoch)
{
    const int64_t spe = pipe_data_steps_per_epoch(n, batch, drop_last);
    *epoch = k / spe;
    if (!epochs) {
        *pos = k * batch;
        *count = batch;
        return;
    }
    const int64_t s = k % spe;
    *pos = *epoch * n + s * batch;
    const int64_t left = n - s * batch;
    *count = left < batch ? (int)left : batch;
}
