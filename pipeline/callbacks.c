/*
 * callbacks.c - the pipeline's stages as the executor sees them
 * (streams/executor.h's pp_stage_ops): the first stage's micro-batch of
 * inputs copied in from the pinned host batch, each stage's forward and
 * backward (whole, or its input and weight parts) on its model stage, the
 * last stage's loss and the gradient it starts the backward from, the
 * replicas' gradient sums as soon as a stage's backward is done, and what
 * graphs need undone or accounted for.
 */
#include "pipeline/callbacks.h"
#include "pipeline/replicas.h"

#include <string.h>

#include "models/stage.h"
#include "runtime/core/ops.h"
#include "runtime/core/ranges.h"

static pp_status cb_out_shape(void *user, int mb_size, pp_tensor *shape_only, pp_error *err)
{
    pipe_stage *st = user;
    memset(shape_only, 0, sizeof *shape_only);
    shape_only->dtype = pp_stage_output_dtype(st->model);
    PP_TRY(pp_stage_output_shape(st->model, mb_size, &shape_only->ndim, shape_only->shape, err));
    shape_only->layout = pp_stage_layout(st->model, shape_only->ndim);
    return PP_OK;
}

static pp_tensor scalar_view(const pp_tensor *vec, int i)
{
    pp_tensor v = pp_tensor_view0(vec, i, 1);
    v.ndim = 0;
    v.shape[0] = 1;
    return v;
}

pp_dtype pipe_logits_dtype(const struct pp_pipeline *p)
{
    return pp_stage_output_dtype(p->stages[p->n_stages - 1].model);
}

/* The last stage's loss on micro-batch mb's logits y (out: the stage's output
 * tensor; y is out unless the logits went to their gradient's rows), and the
 * gradient the backward starts from. */
static pp_status last_stage_loss(struct pp_pipeline *p, const run_io *io, pp_exec *ex, int mb,
                                 int mb_size, int off, pp_tensor *y, pp_tensor *out,
                                 pp_error *err)
{
    const int64_t n = (int64_t)mb_size * p->targets;
    pp_tensor logits;
    PP_TRY(pp_tensor_reshape(y, 2, (int64_t[]){n, pp_tensor_numel(y) / n}, &logits, err));
    pp_tensor labels = pp_tensor_view0(io->labels, (int64_t)off * p->targets, n);
    pp_tensor loss = scalar_view(io->losses, mb);
    pp_tensor correct = scalar_view(io->corrects, mb);
    pp_tensor dlogits = y == out ? pp_tensor_view0(io->dlogits, (int64_t)off * p->targets, n)
                                 : logits;
    PP_TRY(pp_copy_from_host(ex, io->host_labels + (int64_t)off * p->targets, &labels, err));
    if (io->logits) {
        pp_tensor row = pp_tensor_view0(&logits, io->logits_row, 1);
        PP_TRY(pp_cast(ex, &row, io->logits, err)); /* bf16 logits: widened */
    }
    /* the recipe's loss: label smoothing; evaluation counts the top 5 too */
    const pp_xent_desc xd = {.divisor = io->divisor, .label_smoothing = p->label_smoothing,
                             .top_k = 5};
    pp_tensor correct_k = io->corrects_k ? scalar_view(io->corrects_k, mb) : (pp_tensor){0};
    PP_TRY(pp_softmax_xent_ex(ex, &xd, &logits, &labels, &loss, &correct,
                              io->corrects_k ? &correct_k : NULL, &dlogits, err));
    if (io->corrects_k)
        PP_TRY(pp_copy_to_host(ex, &correct_k, io->host_corrects_k + mb, err));
    PP_TRY(pp_copy_to_host(ex, &loss, io->host_losses + mb, err));
    return pp_copy_to_host(ex, &correct, io->host_corrects + mb, err);
}

/* Micro-batch mb's rows of dlogits (its targets' rows: mb_size * targets of
 * them) in the shape of the last stage's output. */
static pp_status logit_rows(pipe_stage *st, int mb, int mb_size, pp_tensor *out, pp_error *err)
{
    struct pp_pipeline *p = st->p;
    const int t = p->targets;
    pp_tensor rows = pp_tensor_view0(p->io.dlogits, (int64_t)p->io.run->offsets[mb] * t,
                                     (int64_t)mb_size * t);
    int ndim;
    int64_t shape[PP_MAX_DIMS];
    PP_TRY(pp_stage_output_shape(st->model, mb_size, &ndim, shape, err));
    return pp_tensor_reshape(&rows, ndim, shape, out, err);
}

static pp_status cb_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                            pp_tensor *out, pp_error *err)
{
    pipe_stage *st = user;
    struct pp_pipeline *p = st->p;
    const run_io *io = &p->io;
    int off = io->run->offsets[mb];
    const bool last = st->index == p->n_stages - 1;
    pp_tensor x;
    if (!in && io->uploaded) { /* already on the device (upload.h) */
        x = pp_tensor_view0(io->uploaded, off, mb_size);
        in = &x;
    } else if (!in) {
        x = pp_tensor_view0(io->images, off, mb_size);
        const size_t per_sample = (size_t)(pp_tensor_numel(io->images) / io->images->shape[0]);
        PP_TRY(pp_copy_from_host(ex, io->host_images + (size_t)off * per_sample, &x, err));
        in = &x;
    }
    /* the fused classifier: a token model's last stage writes its logits into
     * their gradient's rows, which the loss then overwrites: no second
     * vocabulary-sized tensor per micro-batch */
    pp_tensor rows;
    pp_tensor *y = out;
    if (last && p->model.kind == PP_MODEL_GPT2) { /* (generation's windows of 1 too) */
        PP_TRY(logit_rows(st, mb, mb_size, &rows, err));
        y = &rows;
    }
    /* recomputation: the micro-batch keeps only its input until its backward
     * runs the forward again (except_last: all but the step's last) */
    const bool again = io->train && (st->recompute == PP_PLAN_RECOMPUTE_ALWAYS ||
                                     (st->recompute == PP_PLAN_RECOMPUTE_EXCEPT_LAST &&
                                      mb != io->run->m - 1));
    if (io->train) { /* dropout's draws: by global sample, never by micro-batch */
        /* the step the dropout ops read as they run, from the host value the
         * step set (a replayed graph copies it again: its own step's masks);
         * copied at every forward, so that it precedes each micro-batch's
         * draws whatever order the schedule gives */
        const pp_tensor *step_at = NULL;
        if (st->step_at.data) {
            PP_TRY(pp_copy_from_host(ex, st->host_step, &st->step_at, err));
            step_at = &st->step_at;
        }
        const pp_unit_draw draw = {io->step, io->first_sample + off, step_at};
        PP_TRY(pp_stage_set_draw(st->model, mb, &draw, err));
    }
    if (again)
        PP_TRY(pp_stage_forward_keep(st->model, ex, mb, in, y, PP_STAGE_KEEP_INPUT, err));
    else
        PP_TRY(pp_stage_forward(st->model, ex, mb, in, y, io->train, err));
    int held = pp_stage_in_flight(st->model);
    if (held > st->max_in_flight) st->max_in_flight = held;
    if (!last) return PP_OK;

    pp_range_push("loss");
    pp_status ls = last_stage_loss(p, io, ex, mb, mb_size, off, y, out, err);
    pp_range_pop();
    return ls;
}

/* The step's gradients start from zero in the stage's own stream order, at
 * its first action of the program that adds to them (B or W): one
 * multi-tensor zeroing that also begins the stage's micro-batch order
 * (pp_stage_zero_grads), no wait for another stream. */
static pp_status begin_grads(pipe_stage *st, pp_exec *ex, int mb, pp_error *err)
{
    if (mb != st->p->io.run->first_bw[st->index]) return PP_OK;
    return pp_stage_zero_grads(st->model, ex, err);
}

/* The gradient a backward (B or I) starts from: grad_out, or on the last
 * stage the loss's rows of dlogits (in the logits' dtype). */
static pp_status start_gradient(pipe_stage *st, int mb, int mb_size, const pp_tensor *grad_out,
                                pp_tensor *dy, const pp_tensor **out, pp_error *err)
{
    *out = grad_out;
    if (grad_out) return PP_OK;
    *out = dy;
    return logit_rows(st, mb, mb_size, dy, err);
}

static pp_status cb_backward(void *user, pp_exec *ex, int mb, int mb_size,
                             const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    pipe_stage *st = user;
    pp_tensor dy;
    const pp_tensor *g;
    PP_TRY(begin_grads(st, ex, mb, err));
    PP_TRY(start_gradient(st, mb, mb_size, grad_out, &dy, &g, err));
    return pp_stage_backward(st->model, ex, mb, g, grad_in, err);
}

/* I: the input gradient; the stage keeps what its W needs. */
static pp_status cb_backward_input(void *user, pp_exec *ex, int mb, int mb_size,
                                   const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    pipe_stage *st = user;
    pp_tensor dy;
    const pp_tensor *g;
    PP_TRY(start_gradient(st, mb, mb_size, grad_out, &dy, &g, err));
    return pp_stage_backward_input(st->model, ex, mb, g, grad_in, err);
}

/* W: the weight gradients, added in micro-batch order whatever the order W runs in. */
static pp_status cb_backward_weight(void *user, pp_exec *ex, int mb, int mb_size, pp_error *err)
{
    pipe_stage *st = user;
    PP_TRY(begin_grads(st, ex, mb, err));
    return pp_stage_backward_weight(st->model, ex, mb, err);
}

/* Graphs (pp_executor_run_replayable). Training steps read everything that
 * changes from one step to the next from buffers at fixed addresses: the
 * pinned host images and labels the data source refills (copied in by the
 * captured host-to-device copies), the device images, labels, losses and
 * dlogits, the pinned host losses read after the step, dropout's step (its
 * pinned host value copied into the stage's step_at by every training
 * forward; the kernels form each mask's key from it). The loss divisor (the
 * global batch) is a kernel argument: it is the graph key's tag. The
 * optimizer runs after the executor, outside any graph, so a learning-rate
 * schedule needs nothing frozen. What the callbacks do on the host: batch
 * norms count training forwards (pending num_batches_tracked), kept exact
 * by the hooks below; saved activations are pushed and popped within a step,
 * and those a refused capture left behind were allocated inside it (the
 * graph's memory, which never existed): abandoned, never freed; bf16 weight
 * copies made at a first use inside a refused capture never ran, so an
 * abandoned capture marks them stale. */
static void cb_capture_begin(void *user)
{
    pipe_stage *st = user;
    if (st->model) pp_stage_batch_counts(st->model, st->counts, st->n_counts);
}

static void cb_capture_abandon(void *user)
{
    pipe_stage *st = user;
    if (!st->model) return;
    pp_stage_set_batch_counts(st->model, st->counts, st->n_counts);
    for (int i = 0; i < st->p->m; i++) pp_stage_abandon(st->model, i);
    /* the bf16 weight copies made during the capture were recorded, not run */
    pp_stage_params_changed(st->model);
}

static void cb_replayed(void *user, const pp_schedule *s)
{
    pipe_stage *st = user;
    if (st->model && st->p->io.train) pp_stage_add_batches(st->model, s->micro_batches);
}

/* Replicas: the stage's gradient bucket is summed over its replicas as soon
 * as its backward of the step is done, while earlier stages still compute. */
static pp_status cb_grads_ready(void *user, pp_exec *ex, pp_error *err)
{
    return pipe_sum_bucket(user, ex, err);
}

const pp_stage_ops pipe_stage_ops = {
    .out_shape = cb_out_shape,
    .forward = cb_forward,
    .backward = cb_backward,
    .backward_input = cb_backward_input,
    .backward_weight = cb_backward_weight,
    .step = NULL,
    .capture_begin = cb_capture_begin,
    .capture_abandon = cb_capture_abandon,
    .replayed = cb_replayed,
};

const pp_stage_ops pipe_stage_ops_bucketed = {
    .out_shape = cb_out_shape,
    .forward = cb_forward,
    .backward = cb_backward,
    .backward_input = cb_backward_input,
    .backward_weight = cb_backward_weight,
    .step = NULL,
    .grads_ready = cb_grads_ready,
};

