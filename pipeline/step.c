/*
 * step.c - training steps and evaluation passes of a built pipeline (one
 * rank's; inprocess.c runs them on every rank of a job of threads): the
 * step's window of the data, the schedule's run on the executor, the losses,
 * the replicas' gradient sums, the optimizer step and each step's figures.
 */
#include "pipeline/pipeline.h"
#include "pipeline/step.h"
#include "pipeline/links.h"
#include "pipeline/pipeline_impl.h"
#include "pipeline/schedules.h"
#include "pipeline/data_source.h"
#include "pipeline/prefetch.h"
#include "pipeline/recipe.h"
#include "pipeline/replicas.h"
#include "pipeline/report.h"
#include "pipeline/tied.h"
#include "pipeline/upload.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/stage.h"
#include "runtime/core/ops.h"
#include "runtime/core/ranges.h"
#include "runtime/io/data.h"
#include "runtime/train/optimizer.h"
#include "streams/executor.h"
#include "streams/schedule.h"
#include "streams/simulate.h"
#include "streams/trace.h"

/* ---- stepping --------------------------------------------------------------- */

static pp_status grow_history(struct pp_pipeline *p, pp_error *err)
{
    if (p->steps_run < p->steps_cap) return PP_OK;
    int cap = p->steps_cap ? 2 * p->steps_cap : 16;
    double **arrays[] = {&p->step_ms, &p->bubble, &p->copy_ms, &p->copy_bytes, &p->data_ms};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        double *a = realloc(*arrays[i], (size_t)cap * sizeof(double));
        if (!a) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
        *arrays[i] = a;
    }
    size_t bounds = p->n_stages > 1 ? (size_t)p->n_stages - 1 : 1;
    double **ba[] = {&p->bnd_ms, &p->bnd_bytes};
    for (size_t i = 0; i < sizeof ba / sizeof ba[0]; i++) {
        double *a = realloc(*ba[i], (size_t)cap * bounds * sizeof(double));
        if (!a) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
        *ba[i] = a;
    }
    for (int s = 0; s < p->n_stages; s++) {
        double **sa[] = {&p->stages[s].fwd_ms, &p->stages[s].bwd_ms, &p->stages[s].busy,
                         &p->stages[s].grads_ms, &p->stages[s].in_ms, &p->stages[s].wt_ms};
        for (size_t i = 0; i < sizeof sa / sizeof sa[0]; i++) {
            double *a = realloc(*sa[i], (size_t)cap * sizeof(double));
            if (!a) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
            *sa[i] = a;
        }
    }
    double **ra[] = {&p->rep_step_ms, &p->rep_run_ms};
    for (size_t i = 0; i < sizeof ra / sizeof ra[0]; i++) {
        double *a = realloc(*ra[i], (size_t)cap * (size_t)p->replicas * sizeof(double));
        if (!a) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
        *ra[i] = a;
    }
    p->steps_cap = cap;
    return PP_OK;
}

/* Step k's time and run time of every replica: each replica's first stage's
 * rank tells every rank (in replica order, the same on all ranks). */
static pp_status share_replica_times(struct pp_pipeline *p, double step_ms, double run_ms,
                                     pp_error *err)
{
    int k = p->steps_run, R = p->replicas;
    for (int r = 0; r < R; r++) {
        double v[2] = {step_ms, run_ms};
        if (R > 1) PP_TRY(pp_comm_broadcast(p->comm, p->rep_rank[r * p->n_stages], v, sizeof v,
                                            err));
        p->rep_step_ms[k * R + r] = v[0];
        p->rep_run_ms[k * R + r] = v[1];
    }
    return PP_OK;
}

/* The copies stage s sent in a step, from its spans where it runs: its
 * activations on the copy lane of boundary s (lane S + s), its gradients on
 * the one of boundary s - 1 (lane 2S - 1 + s - 1), see streams/program.h.
 * A message between ranks counts on the sender's side (its receive waits
 * for the sender, which is not transfer time). */
static void sent_copies(const struct pp_pipeline *p, const pp_step_stats *st, int s)
{
    pipe_stage *ps = &p->stages[s];
    ps->act_ms = ps->act_bytes = ps->act_n = ps->grad_ms = ps->grad_bytes = ps->grad_n = 0;
    if (!stage_here(p, s)) return;
    int S = p->n_stages, act_lane = S + s, grad_lane = 2 * S - 1 + s - 1;
    for (int i = 0; i < st->n_spans; i++) {
        const pp_trace_span *sp = &st->spans[i];
        double ms = (double)(sp->end_ns - sp->start_ns) / 1e6;
        if (s + 1 < S && sp->lane == act_lane) {
            ps->act_ms += ms;
            ps->act_bytes += (double)sp->bytes;
            ps->act_n++;
        } else if (s > 0 && sp->lane == grad_lane) {
            ps->grad_ms += ms;
            ps->grad_bytes += (double)sp->bytes;
            ps->grad_n++;
        }
    }
}

/* Step k's copy figures from every stage's sent copies (after they are
 * shared): the totals, and per boundary the mean time and bytes of one copy
 * (activations of stage b and gradients of stage b + 1). */
static void copy_figures(struct pp_pipeline *p)
{
    int k = p->steps_run, S = p->n_stages;
    double ms = 0, bytes = 0;
    for (int s = 0; s < S; s++) {
        const pipe_stage *st = &p->stages[s];
        ms += st->act_ms + st->grad_ms;
        bytes += st->act_bytes + st->grad_bytes;
    }
    p->copy_ms[k] = ms;
    p->copy_bytes[k] = bytes;
    for (int b = 0; b + 1 < S; b++) {
        const pipe_stage *lo = &p->stages[b], *hi = &p->stages[b + 1];
        double n = lo->act_n + hi->grad_n;
        p->bnd_ms[k * (S - 1) + b] = n > 0 ? (lo->act_ms + hi->grad_ms) / n : 0;
        p->bnd_bytes[k * (S - 1) + b] = n > 0 ? (lo->act_bytes + hi->grad_bytes) / n : 0;
    }
}

/* The stage of a compute span's name ("F3 stage12" -> 12), -1 for others. */
static int span_stage(const char *name)
{
    if (!strchr("FBIW", name[0])) return -1;
    const char *at = strstr(name, " stage");
    return at ? atoi(at + 6) : -1;
}

/* Mean forward and backward time of one micro-batch on each stage, from the
 * spans of a step ("F3 stage1", "B0 stage0", "I2 stage4", "W2 stage4": the
 * stages of one device share its lane), and the time of its gradient sum
 * over the replicas: its "grads sN" lane's spans plus what was summed after
 * the run. */
static void stage_times(const struct pp_pipeline *p, const pp_step_stats *st)
{
    for (int s = 0; s < p->n_stages; s++) {
        double f = 0, b = 0, in = 0, w = 0, g = 0;
        int nf = 0, nb = 0, ni = 0, nw = 0;
        char grads_lane[32];
        snprintf(grads_lane, sizeof grads_lane, "grads s%d", s);
        for (int i = 0; i < st->n_spans; i++) {
            const pp_trace_span *sp = &st->spans[i];
            double ms = (double)(sp->end_ns - sp->start_ns) / 1e6;
            if (sp->lane >= 0 && sp->lane < st->n_lanes &&
                strcmp(st->lanes[sp->lane].name, grads_lane) == 0)
                g += ms;
            if (sp->lane >= p->n_stages || span_stage(sp->name) != s) continue;
            if (sp->name[0] == 'F') f += ms, nf++;
            else if (sp->name[0] == 'B') b += ms, nb++;
            else if (sp->name[0] == 'I') in += ms, ni++;
            else if (sp->name[0] == 'W') w += ms, nw++;
        }
        pipe_stage *ps = &p->stages[s];
        sent_copies(p, st, s);
        ps->fwd_ms[p->steps_run] = nf ? f / nf : 0;
        ps->in_ms[p->steps_run] = ni ? in / ni : 0;
        ps->wt_ms[p->steps_run] = nw ? w / nw : 0;
        /* a whole backward: B's, or the parts' (a schedule may mix them) */
        ps->bwd_ms[p->steps_run] = nb + ni ? (b + in + (nw ? w * ni / nw : 0)) / (nb + ni) : 0;
        ps->busy[p->steps_run] = st->busy_frac[s];
        ps->grads_ms[p->steps_run] = g + ps->grads_after_ms;
    }
}

/* In a job of several processes each measures only its own stages: every
 * stage's figures of the step travel from its rank to all others, so every
 * rank reports all stages. */
static pp_status share_stage_times(struct pp_pipeline *p, pp_error *err)
{
    if (pp_comm_size(p->comm) < 2) return PP_OK;
    int k = p->steps_run;
    for (int s = 0; s < p->n_stages; s++) {
        pipe_stage *st = &p->stages[s];
        struct {
            double fwd, bwd, busy, grads, in, wt;
            double sent[6];
            int64_t peak;
            int64_t in_flight;
        } v = {st->fwd_ms[k], st->bwd_ms[k], st->busy[k], st->grads_ms[k], st->in_ms[k],
               st->wt_ms[k],
               {st->act_ms, st->act_bytes, st->act_n, st->grad_ms, st->grad_bytes, st->grad_n},
               (int64_t)pp_device_peak_bytes(st->dev), st->max_in_flight};
        PP_TRY(pp_comm_broadcast(p->comm, p->home_rank[s], &v, sizeof v, err));
        st->act_ms = v.sent[0];
        st->act_bytes = v.sent[1];
        st->act_n = v.sent[2];
        st->grad_ms = v.sent[3];
        st->grad_bytes = v.sent[4];
        st->grad_n = v.sent[5];
        st->fwd_ms[k] = v.fwd;
        st->bwd_ms[k] = v.bwd;
        st->busy[k] = v.busy;
        st->grads_ms[k] = v.grads;
        st->in_ms[k] = v.in;
        st->wt_ms[k] = v.wt;
        st->peak_bytes = (size_t)v.peak;
        st->max_in_flight = (int)v.in_flight;
    }
    /* the bubble of the whole pipeline's devices, not of this process's stages */
    double busy = 0;
    for (int s = 0; s < p->n_stages; s++) busy += p->stages[s].busy[k];
    p->bubble[k] = 1.0 - busy / p->sched.devices;
    return PP_OK;
}

static pp_status check_loss(struct pp_pipeline *p, const float *losses, int m, pp_error *err)
{
    for (int i = 0; i < m; i++) {
        if (isfinite(losses[i])) continue;
        const pipe_stage *last = &p->stages[p->n_stages - 1];
        return pp_error_set(err, PP_ERR_NUMERIC,
                            "stage %d (%s) micro-batch %d: the loss is %s at step %lld "
                            "(lower the learning rate, or check the data)",
                            last->index, last->dev->name, i, isnan(losses[i]) ? "NaN" : "infinite",
                            (long long)p->steps_done);
    }
    return PP_OK;
}

int64_t pp_pipeline_steps_per_epoch(const pp_pipeline *p)
{
    return pipe_data_steps_per_epoch(p->data_size, p->batch, p->drop_last);
}

/* Where step k reads (positions pos .. pos+count-1 of the data stream) and
 * its epoch: with epochs, every epoch is one pass over the data with a
 * partial last batch; with steps, batches follow one another (wrapping). */
static void step_window(const struct pp_pipeline *p, int64_t k, int64_t *pos, int *count,
                        int64_t *epoch)
{
    pipe_data_window(k, p->data_size, p->batch, p->epochs > 0, p->drop_last, pos, count, epoch);
}

/* Step k's window (step_window) as this replica sees it: *pos is the first
 * sample of its piece, *count the whole batch, *rep_count the piece (0 when
 * the batch is too small to give every replica a sample). */
static void replica_window(const struct pp_pipeline *p, int64_t k, int64_t *pos, int *count,
                           int *rep_count, int64_t *epoch)
{
    step_window(p, k, pos, count, epoch);
    int rep_off = 0;
    *rep_count = *count;
    if (p->replicas > 1) pipe_replica_piece(*count, p->replicas, p->replica, &rep_off, rep_count);
    *pos += rep_off;
}

/* Sums a finished run's losses and correct counts (top-5 counts too when
 * the run made them: *correct_k, else 0), which the last stage copied to the
 * host after each micro-batch's loss. The losses are added in double, in the
 * batch's order of micro-batches: over replicas each last stage's losses are
 * first gathered (a sum in which every slot but one is zero, so exact), then
 * every process adds them in replica order, the very additions of one
 * process running the whole batch: the same bits with and without replicas. */
static pp_status read_losses(struct pp_pipeline *p, const run_io *io, double *loss,
                             int64_t *correct, int64_t *correct_k, pp_error *err)
{
    int m = io->run->m, last = p->n_stages - 1;
    const float *losses = io->host_losses;
    const int32_t *corrects = io->host_corrects;
    double sum = 0;
    int64_t c = 0, ck = 0;
    pp_status bad = PP_OK;
    const bool here = stage_here(p, last);
    if (here) { /* its stream copied them to the host, in order */
        bad = check_loss(p, losses, m, err);
        for (int i = 0; i < m; i++) {
            sum += losses[i];
            c += corrects[i];
            ck += io->corrects_k ? io->host_corrects_k[i] : 0;
        }
    }
    /* the last stage's process of each replica tells every process */
    if (pp_comm_size(p->comm) > 1) {
        const int reps = p->replicas > 1 ? p->replicas : 1, rep = reps > 1 ? p->replica : 0;
        const int slots = m > p->m_batch ? m : p->m_batch; /* as many on every process */
        const size_t n = (size_t)reps * (size_t)slots;
        float *v = calloc(n + 3, sizeof *v);
        if (!v) return pp_error_set(err, PP_ERR_OOM, "no host memory for %zu losses", n);
        if (here) {
            for (int i = 0; i < m; i++) v[(size_t)rep * slots + i] = losses[i];
            v[n] = (float)c;
            v[n + 2] = (float)ck;
        }
        v[n + 1] = bad != PP_OK ? 1.0f : 0.0f;
        pp_status s = pp_comm_allreduce_sum_f32(p->comm, v, n + 3, err);
        if (s != PP_OK) {
            free(v);
            return s;
        }
        const bool other_bad = v[n + 1] > 0;
        sum = 0;
        for (size_t i = 0; i < n; i++) sum += v[i];
        c = (int64_t)v[n];
        ck = (int64_t)v[n + 2];
        free(v);
        if (bad == PP_OK && other_bad)
            return pp_error_set(err, PP_ERR_NUMERIC, "the loss of another process's last stage "
                                "is not finite at step %lld (see its message; lower the learning "
                                "rate, or check the data)", (long long)p->steps_done);
    }
    if (bad != PP_OK) return bad;
    *loss = sum;
    *correct = c;
    *correct_k = ck;
    return PP_OK;
}

/* A failure while micro-batches are in flight leaves saved state, stream
 * errors and half-applied updates behind: the pipeline refuses further work
 * with the first failure's message rather than run on from that state. */
static pp_status mark_broken(pp_pipeline *p, pp_status s, const pp_error *err)
{
    if (s != PP_OK && !p->broken[0]) {
        snprintf(p->broken, sizeof p->broken, "%.255s", err && err->msg[0] ? err->msg : "failed");
        pipe_replicas_abort(p);
        pipe_links_free(p, true);
    }
    return s;
}

pp_status pipe_check_links(const pp_pipeline *p, const char *what, pp_error *err)
{
    if (!p->broken[0]) return PP_OK;
    return pp_error_set(err, PP_ERR_INVALID,
                        "%s: an earlier step or evaluation of this pipeline failed (%.200s); "
                        "free it and create a new one (and load a checkpoint into that)",
                        what, p->broken);
}

pp_status pipe_check_usable(const pp_pipeline *p, const char *what, pp_error *err)
{
    PP_TRY(pipe_check_links(p, what, err));
    if (!p->partial[0]) return PP_OK;
    return pp_error_set(err, PP_ERR_INVALID,
                        "%s: an earlier load failed after it began writing the parameters "
                        "(%.200s): they are partly the file's; load a checkpoint again", what,
                        p->partial);
}

void pipe_params_changed(struct pp_pipeline *p)
{
    for (int s = 0; s < p->n_stages; s++)
        if (stage_here(p, s) && p->model.kind != PP_MODEL_DELAY)
            pp_stage_params_changed(p->stages[s].model);
}

/* PP_PROFILE_STEP=K: the step of index K (0-based, of this run) is the range
 * an external profiler collects (ncu --profile-from-start off, nsys
 * --capture-range=cudaProfilerApi), on every device of this process. */
static pp_status profile_range(struct pp_pipeline *p, bool start, pp_error *err)
{
    if (p->profile_step != p->steps_run) return PP_OK;
    for (int s = 0; s < p->n_stages; s++)
        if (stage_here(p, s)) PP_TRY(pp_device_profiler(p->stages[s].dev, start, err));
    return PP_OK;
}

/* The first of this rank's stages on dev, -1 when none is. */
static int first_stage_on(const struct pp_pipeline *p, const pp_device_ctx *dev)
{
    for (int s = 0; s < p->n_stages; s++)
        if (stage_here(p, s) && p->stages[s].dev == dev) return s;
    return -1;
}

/* The optimizer's work for a device goes on the compute stream of this
 * rank's first stage on it, behind the step's work there, and the host does
 * not wait for it: every stage's stream waits for it instead (an event), so
 * the next step's work on any of them, a graph launch included, comes after
 * the update. The host waits only where it touches parameters (pipe_settle).
 * On the CPU backend a stream's exec runs the update at once on this thread,
 * as before. */
static pp_exec *opt_exec_for(void *user, pp_device_ctx *dev)
{
    struct pp_pipeline *p = user;
    int s = first_stage_on(p, dev);
    return s < 0 ? NULL : pp_stream_exec(pp_executor_stage_stream(p->exec, s));
}

static pp_status optimizer_step(struct pp_pipeline *p, pp_error *err)
{
    pp_range_push("optimizer");
    pp_status os = pp_optimizer_step(p->opt, opt_exec_for, p, err);
    pp_range_pop();
    PP_TRY(os);
    p->opt_pending = true;
    for (int s = 0; s < p->n_stages; s++) {
        if (!stage_here(p, s) || first_stage_on(p, p->stages[s].dev) != s) continue;
        pipe_stage *st = &p->stages[s];
        PP_TRY(pp_event_record(st->opt_done, pp_executor_stage_stream(p->exec, s), err));
        for (int t = 0; t < p->n_stages; t++)
            if (t != s && stage_here(p, t))
                PP_TRY(pp_stream_wait_event(pp_executor_stage_stream(p->exec, t), st->opt_done,
                                            err));
    }
    return PP_OK;
}

pp_status pipe_settle(struct pp_pipeline *p, pp_error *err)
{
    if (!p->opt_pending) return PP_OK;
    for (int s = 0; s < p->n_stages; s++)
        if (stage_here(p, s)) PP_TRY(pp_stream_synchronize(pp_executor_stage_stream(p->exec, s), err));
    p->opt_pending = false;
    return PP_OK;
}

/* The batch at window `want` from the prefetcher, whose read ahead of the
 * steps after `step` it then queues; *wait_ms grows by the wait. */
static pp_status take_batch(struct pp_pipeline *p, int64_t step, pipe_window want, float **images,
                            int32_t **labels, int *set, double *wait_ms, pp_error *err)
{
    pipe_window ahead[PIPE_PREFETCH_MAX_AHEAD];
    const int n_ahead = pipe_prefetch_ahead(p->prefetch);
    for (int i = 0; i < n_ahead; i++) {
        int64_t pos, epoch;
        int total, count;
        replica_window(p, step + 1 + i, &pos, &total, &count, &epoch);
        ahead[i] = (pipe_window){pos, count};
    }
    double ms = 0;
    pp_status s = pipe_prefetch_get(p->prefetch, want, ahead, n_ahead, images, labels, set, &ms,
                                    err);
    *wait_ms += ms;
    return s;
}

/* Step `step`'s batch (window want) for io, and the graphs' key of the run
 * (graphs read fixed addresses). Without an upload, the host set read during
 * the last step, copied in by the forwards (key: the set). With one
 * (upload.h), the batch sent to stage 0's device during the last step (or
 * now, when it was not), stage 0's stream made to wait for it (key: its
 * device buffer); and the next step's batch, read during the last step,
 * sent now to go up while this step runs. A next batch that cannot be read
 * is not sent: the next step reads it again and fails with its error.
 * *wait_ms: the time spent waiting for the prefetcher. */
static pp_status step_batch(struct pp_pipeline *p, int64_t step, pipe_window want, run_io *io,
                            int *key, double *wait_ms, pp_error *err)
{
    float *images;
    int32_t *labels;
    int set;
    if (!p->upload) {
        PP_TRY(take_batch(p, step, want, &images, &labels, &set, wait_ms, err));
        io->host_images = images;
        io->host_labels = labels;
        *key = pipe_prefetch_sets(p->prefetch) * want.count + set;
        return PP_OK;
    }
    if (!pipe_upload_sent(p->upload, step, want)) {
        PP_TRY(take_batch(p, step, want, &images, &labels, &set, wait_ms, err));
        PP_TRY(pipe_upload_send(p->upload, step, want, images, labels, err));
    }
    int64_t pos, epoch;
    int total, count;
    replica_window(p, step + 1, &pos, &total, &count, &epoch);
    const pipe_window next = {pos, count};
    pp_error ignored;
    if (count > 0 && take_batch(p, step + 1, next, &images, &labels, &set, wait_ms, &ignored) ==
                         PP_OK)
        PP_TRY(pipe_upload_send(p->upload, step + 1, next, images, labels, err));
    pp_tensor *up;
    const int32_t *up_labels;
    int buf;
    PP_TRY(pipe_upload_take(p->upload, step, pp_executor_stage_stream(p->exec, 0), &up,
                            &up_labels, &buf, err));
    io->uploaded = up;
    io->host_labels = up_labels;
    *key = 2 * want.count + buf;
    return PP_OK;
}

static pp_status step_rank(pp_pipeline *p, pp_step_result *res, pp_error *err)
{
    PP_TRY(pipe_check_usable(p, "step", err));
    PP_TRY(profile_range(p, true, err));
    pipe_params_changed(p); /* by the last step's update, or a load */
    int64_t t0 = pp_stream_clock_ns();
    PP_TRY(grow_history(p, err));
    int64_t pos, epoch;
    int count, rep_count;
    replica_window(p, p->steps_done, &pos, &count, &rep_count, &epoch);
    if (rep_count == 0)
        return pp_error_set(err, PP_ERR_INPUT, "a batch of %d samples cannot feed %d "
                            "replicas (the epoch's last batch is too small; choose a batch "
                            "size that divides the data set)", count, p->replicas);
    const batch_run *run = &p->full;
    if (rep_count != p->rep_batch) {
        if (p->tail.batch != rep_count)
            PP_TRY(pipe_batch_run_make(p, &p->tail, rep_count, false, err));
        run = &p->tail;
    }
    if (p->lr.kind != PP_LR_CONSTANT) {
        p->cur_lr = pp_lr_at(&p->lr, (int)(p->epochs ? epoch : p->steps_done));
        pp_optimizer_set_learning_rate(p->opt, p->cur_lr); /* AdamW's scalars take it whole */
    }
    int rep_off = 0, rep_size = count;
    if (p->replicas > 1) pipe_replica_piece(count, p->replicas, p->replica, &rep_off, &rep_size);
    p->io = (run_io){.run = run, .train = true, .step = p->steps_done, .first_sample = rep_off,
                     .images = &p->images, .labels = &p->labels,
                     .losses = &p->losses, .corrects = &p->corrects, .dlogits = &p->dlogits,
                     .divisor = (float)count * p->targets, .host_losses = p->host_losses,
                     .host_corrects = p->host_corrects};
    int key;
    double wait_ms = 0;
    pp_status ds = step_batch(p, p->steps_done, (pipe_window){pos, rep_count}, &p->io, &key,
                              &wait_ms, err);
    if (ds != PP_OK) /* nothing ran: the pipeline stays usable (its last step can be saved) */
        return pp_error_prefix(err, "step %lld: the step's batch", (long long)p->steps_done);
    for (int k = 0; k < p->n_stages; k++) /* dropout's step, copied in by the forwards */
        if (p->stages[k].host_step) *p->stages[k].host_step = p->steps_done;
    pp_step_stats stats;
    memset(&stats, 0, sizeof stats);
    PP_TRY(mark_broken(p, pp_executor_run_replayable(p->exec, &run->sched, key, &stats, err),
                       err));
    p->opt_pending = false; /* the run came after the last update on every stream, and ended */
    p->graph_captures += stats.graph == PP_STEP_CAPTURED;
    p->graph_replays += stats.graph == PP_STEP_REPLAYED;
    p->graph_launches += stats.graph_launches;
    if (p->graphs_mode == 1 && !pp_executor_graphs(p->exec)) p->graphs_mode = 2; /* refused */

    double loss = 0;
    int64_t correct = 0, correct_k;
    pp_status s = read_losses(p, &p->io, &loss, &correct, &correct_k, err);
    if (s == PP_OK) s = pipe_sum_replica_grads(p, err);
    /* the tied weights' gradients summed first (the norm counts each weight
     * once), then the recipe: the step's batch-norm statistics, the gradients
     * clipped */
    if (s == PP_OK) s = pipe_tied_sum_grads(p, err);
    if (s == PP_OK) s = pipe_bn_commit(p, run->m, err);
    if (s == PP_OK) s = pipe_clip_grads(p, opt_exec_for, err);
    if (s == PP_OK) s = optimizer_step(p, err);
    if (s == PP_OK && p->tied) { /* the copies follow the update (through the host: settled) */
        if (pipe_tied_host(p)) s = pipe_settle(p, err);
        if (s == PP_OK) s = pipe_tied_refresh(p, err);
    }
    if (s == PP_OK) s = profile_range(p, false, err);
    if (s != PP_OK) {
        pp_step_stats_free(&stats);
        return mark_broken(p, s, err);
    }
    double ms = (double)(pp_stream_clock_ns() - t0) / 1e6;
    stage_times(p, &stats);
    if ((s = share_stage_times(p, err)) != PP_OK ||
        (s = share_replica_times(p, ms, stats.step_ms, err)) != PP_OK) {
        pp_step_stats_free(&stats);
        return mark_broken(p, s, err);
    }
    p->step_ms[p->steps_run] = ms;
    p->data_ms[p->steps_run] = wait_ms;
    if (pp_comm_size(p->comm) < 2) p->bubble[p->steps_run] = stats.bubble;
    copy_figures(p);
    if (res) {
        res->step = p->steps_done;
        res->loss = loss;
        res->accuracy = (double)correct / ((double)count * p->targets);
        res->step_ms = ms;
        res->data_wait_ms = wait_ms;
        res->bubble = p->bubble[p->steps_run];
        res->epoch = epoch;
        res->batch = count;
        res->lr = p->cur_lr;
        res->grad_norm = p->grad_norm;
        res->epoch_end = p->epochs && (p->steps_done + 1) % pp_pipeline_steps_per_epoch(p) == 0;
    }
    p->steps_run++;
    p->steps_done++;
    if (p->upload && (s = pipe_upload_collect(p->upload, p->keep_trace ? &stats : NULL, err))) {
        pp_step_stats_free(&stats);
        return s;
    }
    if (p->keep_trace) {
        pp_step_stats *t = realloc(p->trace, (size_t)(p->n_trace + 1) * sizeof *t);
        if (!t) {
            pp_step_stats_free(&stats);
            return pp_error_set(err, PP_ERR_OOM, "out of host memory keeping the trace");
        }
        p->trace = t;
        pipe_name_rank_lanes(p, &stats);
        p->trace[p->n_trace++] = stats;
    } else {
        pp_step_stats_free(&stats);
    }
    return PP_OK;
}

pp_status pipe_step_rank(pp_pipeline *p, pp_step_result *res, pp_error *err)
{
    pp_range_pushf("step %lld", p ? (long long)p->steps_done : -1LL);
    pp_status s = step_rank(p, res, err);
    pp_range_pop();
    return s;
}

bool pp_pipeline_usable(const pp_pipeline *p)
{
    return p && !p->broken[0] && !p->partial[0];
}

bool pp_pipeline_has_eval(const pp_pipeline *p)
{
    return p && p->eval_data;
}

static pp_status evaluate_rank(pp_pipeline *p, pp_eval_result *out, pp_error *err)
{
    pp_eval_result unused;
    if (!out) out = &unused; /* the figures not wanted (as with replicas in process) */
    memset(out, 0, sizeof *out);
    PP_TRY(pipe_settle(p, err));
    if (!p->eval_data)
        return pp_error_set(err, PP_ERR_INVALID, "evaluate: the plan has no eval section");
    PP_TRY(pipe_check_usable(p, "evaluate", err));
    PP_TRY(mark_broken(p, pipe_sync_replica_state(p, err), err));
    pipe_params_changed(p);
    int64_t t0 = pp_stream_clock_ns();
    double loss = 0;
    int64_t correct = 0, correct5 = 0;
    for (int64_t pos = 0; pos < p->eval_size; pos += p->eval_batch) {
        int count = p->eval_size - pos < p->eval_batch ? (int)(p->eval_size - pos) : p->eval_batch;
        const batch_run *run = &p->eval_full;
        if (count != p->eval_batch) {
            if (p->eval_tail.batch != count)
                PP_TRY(pipe_batch_run_make(p, &p->eval_tail, count, true, err));
            run = &p->eval_tail;
        }
        PP_TRY(pipe_prefetch_read(p->prefetch, p->eval_data, pos, count, p->host_eval_images,
                                  p->host_eval_labels, err));
        p->io = (run_io){.run = run, .train = false, .images = &p->eval_images,
                         .labels = &p->eval_labels, .losses = &p->eval_losses,
                         .corrects = &p->eval_corrects, .dlogits = &p->eval_dlogits,
                         .divisor = 1.0f, .host_images = p->host_eval_images,
                         .host_labels = p->host_eval_labels, .host_losses = p->host_eval_losses,
                         .host_corrects = p->host_eval_corrects,
                         .corrects_k = &p->eval_corrects5,
                         .host_corrects_k = p->host_eval_corrects5};
        PP_TRY(mark_broken(p, pp_executor_run(p->exec, &run->sched, NULL, err), err));
        double l;
        int64_t c, c5;
        PP_TRY(mark_broken(p, read_losses(p, &p->io, &l, &c, &c5, err), err));
        loss += l;
        correct += c;
        correct5 += c5;
    }
    /* every replica evaluated the whole test set; the loss is per target (a
     * token model's: per token) */
    loss /= p->replicas;
    correct /= p->replicas;
    correct5 /= p->replicas;
    double secs = (double)(pp_stream_clock_ns() - t0) / 1e9;
    const double targets = (double)p->eval_size * p->targets;
    out->top5_accuracy = (double)correct5 / targets;
    out->samples = p->eval_size;
    out->loss = loss / targets;
    out->accuracy = (double)correct / targets;
    out->perplexity = exp(out->loss);
    out->seconds = secs;
    out->images_per_s = secs > 0 ? (double)p->eval_size / secs : 0;
    return PP_OK;
}

pp_status pipe_evaluate_rank(pp_pipeline *p, pp_eval_result *out, pp_error *err)
{
    /* its tasks' ranges fall inside it in time (a CPU stream's on its own thread) */
    pp_range_push("evaluate");
    pp_status s = evaluate_rank(p, out, err);
    pp_range_pop();
    return s;
}

int64_t pp_pipeline_steps_done(const pp_pipeline *p)
{
    return p->steps_done;
}

int pp_pipeline_stage_count(const pp_pipeline *p)
{
    return p->n_stages;
}

