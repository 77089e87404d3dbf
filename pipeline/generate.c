/*
 * generate.c - a token model continuing a sequence through its stages
 * (pp_pipeline_generate, pipeline.h): per new token one forward-only run of
 * one sample on the pipeline's executor; the last stage copies the logits
 * of the run's last filled position out before its loss (run_io's logits),
 * and its rank samples the token and tells the others.
 *
 * While the sequence fits the window of T positions, the stages decode
 * (pp_stage_set_decode): each block keeps its positions' q, k and v rows,
 * the first run computes the prompt's positions and every later one the
 * newest position alone, its attention over the cache. Past the window (the
 * positions shift, so what the cache holds no longer applies) and without
 * the cache (no_cache), a run computes the sequence's last window of T
 * tokens at positions 0.. and id 0 after them. A causal
 * model's logits at a position do not depend on the positions after it, so
 * the padding never changes what is sampled; while the sequence is shorter
 * than T, the run computes its n positions rounded up to a multiple of the
 * window step (pp_stage_set_positions on every stage of this rank, and the
 * run's targets), so that a short prompt does not pay for T positions a
 * token, and the few distinct lengths keep the backends' per-shape plans
 * (cuDNN's attention graphs, GEMM heuristics) few.
 * The last stage's rank samples (pipeline/sample.h).
 */
#include "pipeline/generate.h"
#include "pipeline/callbacks.h"
#include "pipeline/sample.h"
#include "pipeline/schedules.h"
#include "pipeline/step.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/core/ops.h"
#include "runtime/core/ranges.h"
#include "streams/executor.h"


/* The run's buffers: one sample's window on stage 0's device, its labels,
 * loss, count and gradient rows on the last stage's, the logits row kept. */
typedef struct gen_bufs {
    pp_tensor in, labels, losses, corrects, dlogits, row;
    int32_t *host_in, *host_labels, *host_corrects;
    float *host_losses, *host_row;
} gen_bufs;

static pp_status bufs_new(struct pp_pipeline *p, gen_bufs *b, pp_error *err)
{
    const int t = p->in_w, v = p->classes;
    pp_device_ctx *first = p->stages[0].dev, *last = p->stages[p->n_stages - 1].dev;
    PP_TRY(pp_tensor_alloc(&b->in, first, PP_I32, 2, (int64_t[]){1, t}, err));
    PP_TRY(pp_tensor_zeros(&b->labels, last, PP_I32, 1, (int64_t[]){t}, err));
    PP_TRY(pp_tensor_zeros(&b->losses, last, PP_F32, 1, (int64_t[]){1}, err));
    PP_TRY(pp_tensor_zeros(&b->corrects, last, PP_I32, 1, (int64_t[]){1}, err));
    PP_TRY(pp_tensor_alloc(&b->dlogits, last, pipe_logits_dtype(p), 2, (int64_t[]){t, v}, err));
    PP_TRY(pp_tensor_alloc(&b->row, last, PP_F32, 2, (int64_t[]){1, v}, err));
    b->host_in = calloc((size_t)t, sizeof *b->host_in);
    b->host_labels = calloc((size_t)t, sizeof *b->host_labels);
    b->host_corrects = calloc(1, sizeof *b->host_corrects);
    b->host_losses = calloc(1, sizeof *b->host_losses);
    b->host_row = calloc((size_t)v, sizeof *b->host_row);
    if (!b->host_in || !b->host_labels || !b->host_corrects || !b->host_losses || !b->host_row)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (generation)");
    return PP_OK;
}

static void bufs_free(gen_bufs *b)
{
    pp_tensor *t[] = {&b->in, &b->labels, &b->losses, &b->corrects, &b->dlogits, &b->row};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) pp_tensor_free(t[i]);
    free(b->host_in);
    free(b->host_labels);
    free(b->host_corrects);
    free(b->host_losses);
    free(b->host_row);
}

static pp_status check_args(const struct pp_pipeline *p, const int32_t *prompt, int n_prompt,
                            const pp_generate_options *o, const int32_t *out, pp_error *err)
{
    if (!p || !prompt || !o || !out)
        return pp_error_set(err, PP_ERR_INVALID, "generate: NULL argument");
    PP_TRY(pipe_check_usable(p, "generate", err)); /* its links are freed */
    if (p->in_dtype != PP_I32)
        return pp_error_set(err, PP_ERR_INVALID,
                            "generate: the model does not read tokens (model %s)", p->model.name);
    if (n_prompt < 1) return pp_error_set(err, PP_ERR_INVALID, "generate: the prompt is empty");
    if (o->tokens < 0 || !(o->temperature >= 0) || o->top_k < 0)
        return pp_error_set(err, PP_ERR_INVALID,
                            "generate: tokens %d, temperature %g and top_k %d must not be "
                            "negative",
                            o->tokens, o->temperature, o->top_k);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= p->classes)
            return pp_error_set(err, PP_ERR_INVALID,
                                "generate: prompt token %d (id %d) is not below the vocabulary "
                                "size %d",
                                i, prompt[i], p->classes);
    return PP_OK;
}

/* Every stage of this rank computes t positions (the window's T restores
 * them) from position at (decoding with the caches, pp_stage_set_decode; -1:
 * the window's positions from 0, no cache), and the run's loss takes t
 * targets a sample. */
static pp_status set_positions(struct pp_pipeline *p, int t, int at, int targets, pp_error *err)
{
    for (int k = 0; k < p->n_stages; k++)
        if (p->stages[k].model) {
            PP_TRY(pp_stage_set_positions(p->stages[k].model, t, err));
            PP_TRY(pp_stage_set_decode(p->stages[k].model, at, err));
        }
    p->targets = targets;
    return PP_OK;
}

/* What token i's forward computes, for a sequence of len tokens in a window
 * of t: count positions, the first `filled` of them the ids out[from..] (the
 * rest id 0), from position at with the caches (-1: positions 0.., none).
 * With the cache, while the sequence fits the window: the prompt's
 * positions (i 0), then the last position alone. Else the window's last n
 * tokens at positions 0.., rounded up to the step (at most the window). */
typedef struct span {
    int from, count, at, filled;
} span;

static span span_of(const pp_generate_options *o, int i, int len, int t)
{
    if (!o->no_cache && len <= t)
        return i == 0 ? (span){0, len, 0, len} : (span){len - 1, 1, len - 1, 1};
    const int step = o->window_step > 0 ? o->window_step : PP_GENERATE_WINDOW_STEP;
    const int n = len < t ? len : t;
    const int w = step >= t || n > t - step ? t : (n + step - 1) / step * step;
    return (span){len - n, w, -1, n};
}

static pp_status generate_rank(struct pp_pipeline *p, const int32_t *prompt, int n_prompt,
                               const pp_generate_options *o, int32_t *out, pp_error *err)
{
    PP_TRY(check_args(p, prompt, n_prompt, o, out, err));
    PP_TRY(pipe_settle(p, err));
    pipe_params_changed(p); /* bf16 weight copies of the weights as they are now */
    memcpy(out, prompt, (size_t)n_prompt * sizeof *out);
    batch_run run = {0};
    gen_bufs b = {0};
    pp_status st = pipe_batch_run_make(p, &run, 1, true, err);
    if (st == PP_OK) st = bufs_new(p, &b, err);
    const int t = p->in_w, last = p->n_stages - 1, targets = p->targets;
    const bool sampler = p->stage_rank[last] == p->rank;
    for (int i = 0, len = n_prompt; st == PP_OK && i < o->tokens; i++, len++) {
        /* the positions computed: ids out[from..] (filled of them), then id 0 */
        const span sp = span_of(o, i, len, t);
        const int w = sp.count;
        memset(b.host_in, 0, (size_t)t * sizeof *b.host_in);
        memcpy(b.host_in, out + sp.from, (size_t)sp.filled * sizeof *b.host_in);
        if ((st = set_positions(p, w, sp.at, w, err)) != PP_OK) break;
        pp_tensor in = b.in; /* (1, w) of the (1, t) buffer */
        in.shape[1] = w;
        p->io = (run_io){.run = &run, .train = false, .images = &in, .labels = &b.labels,
                         .losses = &b.losses, .corrects = &b.corrects, .dlogits = &b.dlogits,
                         .divisor = 1.0f, .host_images = (const float *)b.host_in,
                         .host_labels = b.host_labels, .host_losses = b.host_losses,
                         .host_corrects = b.host_corrects, .logits = &b.row,
                         .logits_row = sp.filled - 1};
        st = pp_executor_run(p->exec, &run.sched, NULL, err);
        int32_t token = 0;
        if (st == PP_OK && sampler) {
            st = pp_tensor_to_host(&b.row, b.host_row, pp_tensor_bytes(&b.row), err);
            if (st == PP_OK) st = pipe_sample(b.host_row, p->classes, o, i, &token, err);
            if (st == PP_ERR_NUMERIC)
                pp_error_prefix(err, "generate: token %d from stage %d's logits (%s)", i, last,
                                p->stages[last].dev->name);
        }
        if (st == PP_OK && pp_comm_size(p->comm) > 1)
            st = pp_comm_broadcast(p->comm, p->stage_rank[last], &token, sizeof token, err);
        out[len] = token;
        if (st == PP_OK && o->on_token && !o->on_token(o->user, i, token)) break;
    }
    p->io = (run_io){0};
    pp_error restore_err;
    const pp_status rs = set_positions(p, t, -1, targets, &restore_err);
    if (st == PP_OK && rs != PP_OK) {
        *err = restore_err;
        st = rs;
    }
    bufs_free(&b);
    pipe_batch_run_free(&run);
    return st;
}

pp_status pipe_generate_rank(struct pp_pipeline *p, const int32_t *prompt, int n_prompt,
                             const pp_generate_options *o, int32_t *out, pp_error *err)
{
    pp_range_push("generate");
    pp_status s = generate_rank(p, prompt, n_prompt, o, out, err);
    pp_range_pop();
    return s;
}
