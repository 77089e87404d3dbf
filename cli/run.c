/*
 * run.c - the training loop of pipeline-run: steps, epochs, evaluations,
 * their lines and metrics rows, and the saves of a run (run.h).
 */
#include "cli/run.h"

#include <stdlib.h>
#include <unistd.h>

#include "cli/outputs.h"
#include "cli/signals.h"
#include "streams/stream.h"

void pp_cli_run_result_free(pp_cli_run_result *rr)
{
    free(rr->losses);
    free(rr->grad_norms);
    free(rr->epochs);
}

/* The time of the epoch's steps run by this process. */
typedef struct epoch_time {
    double ms;
    int64_t samples;
    int steps;                /* of the epoch, run by this process */
    int64_t epoch;            /* 1-based */
} epoch_time;

/* One row; top5 (evaluations) and grad_norm (steps with clipping) are left
 * empty when negative. */
static void metrics_row(FILE *m, const char *kind, int64_t epoch, int64_t step, int batch, double lr,
                        double loss, double acc, double seconds, double images_per_s,
                        double top5, double grad_norm)
{
    if (!m) return;
    fprintf(m, "%s,%lld,%lld,%d,%.9g,%.9g,%.9g,%.6f,%.3f,", kind, (long long)epoch,
            (long long)step, batch, lr, loss, acc, seconds, images_per_s);
    if (top5 >= 0) fprintf(m, "%.9g", top5);
    fputc(',', m);
    if (grad_norm >= 0) fprintf(m, "%.9g", grad_norm);
    fputc('\n', m);
    fflush(m);
}

void pp_cli_metrics_header(FILE *metrics)
{
    fputs("kind,epoch,step,batch,lr,loss,accuracy,seconds,images_per_s,top5_accuracy,grad_norm\n",
          metrics);
}

int pp_cli_run_series_save(pp_pipeline *p, const pp_plan *plan, pp_cli_series *series,
                           pp_cli_run_result *rr, const char **saved, pp_error *err)
{
    pp_checkpoint_meta meta[3];
    char bufs[3][40];
    pp_pipeline_save_options o = {.with_optimizer = true, .meta = meta};
    if (plan->epochs) o.n_meta = pp_cli_epoch_sums_meta(&rr->sums, meta, bufs);
    bool written;
    const char *path;
    pp_status s = pp_cli_series_save(series, p, &o, &path, &written, err);
    if (saved) *saved = path;
    if (s == PP_ERR_INTERRUPTED) {
        rr->abandoned = true;
        return 128 + pp_cli_signal_first();
    }
    if (s != PP_OK) return s == PP_ERR_INPUT ? 2 : 1;
    if (written) fprintf(stderr, "saved %s\n", path);
    return 0;
}

/* A periodic checkpoint of the series. A failed write is not a failed step:
 * the model is whole, so training goes on (the next checkpoint, the run's
 * last and --save may still be written), and the failure is said now and
 * counted. Returns an exit code only for a save abandoned by a signal. */
static int periodic_save(pp_pipeline *p, const pp_plan *plan, pp_cli_series *series,
                         pp_cli_run_result *rr, bool progress, pp_error *err)
{
    int rc = pp_cli_run_series_save(p, plan, series, rr, NULL, err);
    if (rc == 0 || rr->abandoned) return rc;
    const int64_t steps = pp_pipeline_steps_done(p);
    if (series->failed_in_place) {
        if (rr->save_unsynced++ == 0) rr->first_unsynced_save = steps;
    } else if (rr->save_failures++ == 0) {
        rr->first_failed_save = steps;
    }
    if (progress) fputc('\n', stderr);
    fprintf(stderr, "pipeline-run: %s\npipeline-run: the checkpoint after step %lld %s; training "
            "goes on (the run will exit with status 1)\n", err->msg, (long long)steps,
            series->failed_in_place ? "is in place but its folder was not synced (it may not "
                                      "survive a crash)"
                                    : "was not written");
    return 0;
}

/* Evaluates and records the result; returns an exit code. */
static int evaluate(pp_pipeline *p, pp_cli_run_result *rr, FILE *metrics, int64_t epoch,
                    int64_t step, pp_error *err)
{
    pp_status s = pp_pipeline_evaluate(p, &rr->last_eval, err);
    if (s != PP_OK) return s == PP_ERR_INPUT ? 2 : 1;
    rr->evaluated = true;
    metrics_row(metrics, "eval", epoch, step, (int)rr->last_eval.samples, 0,
                rr->last_eval.loss, rr->last_eval.accuracy, rr->last_eval.seconds,
                rr->last_eval.images_per_s, rr->last_eval.top5_accuracy, -1);
    return 0;
}

/* Closes an epoch's row (whole or partial): its loss and accuracy from sums
 * (the whole epoch, a resumed checkpoint's part included), its time from et
 * (this process's steps), the evaluation when due, the epoch line. Leaves
 * sums as they are (checkpoints carry them). Returns an exit code. */
static int close_epoch(pp_pipeline *p, const pp_plan *plan, pp_epoch_row *row,
                       const pp_cli_epoch_sums *sums, const epoch_time *et, bool eval_due,
                       int64_t step, FILE *metrics, pp_cli_run_result *rr,
                       pp_error *err)
{
    row->epoch = (int)et->epoch;
    row->train_loss = sums->samples ? sums->loss_sum / (double)sums->samples : 0;
    row->train_acc = sums->samples ? sums->correct_sum / (double)sums->samples : 0;
    row->seconds = et->ms / 1e3;
    row->images_per_s = et->ms > 0 ? et->samples * 1000.0 / et->ms : 0;
    if (eval_due) {
        int rc = evaluate(p, rr, metrics, et->epoch, step, err);
        if (rc) return rc;
        row->evaluated = true;
        row->test_loss = rr->last_eval.loss;
        row->test_acc = rr->last_eval.accuracy;
        row->test_top5 = rr->last_eval.top5_accuracy;
        row->eval_images_per_s = rr->last_eval.images_per_s;
    }
    pp_cli_print_epoch(stderr, row, plan->epochs);
    return 0;
}

int pp_cli_run_steps(pp_pipeline *p, const pp_plan *plan, pp_comm *comm, int steps, bool progress,
                     FILE *metrics, pp_cli_series *series, pp_cli_run_result *rr,
                     pp_error *err)
{
    rr->losses = calloc((size_t)steps, sizeof(double));
    /* a row per epoch that ends (--steps may run past the plan's epochs, a
     * resumed run may end its first after one step) and the partial last */
    const int64_t spe = pp_pipeline_steps_per_epoch(p);
    const int max_epochs = plan->epochs > 0 ? (int)(steps / (spe > 0 ? spe : 1)) + 2 : 1;
    rr->epochs = calloc((size_t)max_epochs, sizeof *rr->epochs);
    const bool clip = plan->optimizer.clip_grad_norm > 0;
    if (clip) rr->grad_norms = calloc((size_t)steps, sizeof(double));
    if (!rr->losses || !rr->epochs || (clip && !rr->grad_norms)) {
        pp_error_set(err, PP_ERR_OOM, "out of host memory");
        return 1;
    }
    int64_t t0 = pp_stream_clock_ns();
    epoch_time et = {0};
    pp_cli_epoch_sums *acc = &rr->sums; /* from the checkpoint resumed: the whole epoch */
    const bool periodic = plan->checkpoint.enabled && series;
    int rc = 0;
    for (int i = 0; i < steps && !rc; i++) {
        int sig; /* every rank stops after the same step */
        if (pp_cli_stop_agree(comm, &sig, err) != PP_OK) return 1;
        if (sig) {
            rr->interrupted = true;
            rr->signal = sig;
            break;
        }
        pp_step_result r;
        pp_status s = pp_pipeline_step(p, &r, err);
        if (s != PP_OK) {
            if (progress) fputc('\n', stderr);
            rr->data_failed = s == PP_ERR_IO && pp_pipeline_usable(p);
            rr->step_failed = !rr->data_failed;
            return s == PP_ERR_INPUT ? 2 : 1;
        }
        if (rr->grad_norms) rr->grad_norms[rr->n_losses] = r.grad_norm;
        rr->losses[rr->n_losses++] = r.loss;
        acc->loss_sum += r.loss * r.batch;
        acc->correct_sum += r.accuracy * r.batch;
        acc->samples += r.batch;
        et.ms += r.step_ms;
        et.samples += r.batch;
        et.steps++;
        et.epoch = r.epoch + 1;
        metrics_row(metrics, "step", r.epoch + 1, r.step + 1, r.batch, r.lr, r.loss, r.accuracy,
                    r.step_ms / 1e3, r.step_ms > 0 ? r.batch * 1000.0 / r.step_ms : 0, -1,
                    r.grad_norm);
        if (progress) {
            double elapsed = (double)(pp_stream_clock_ns() - t0) / 1e9;
            double per_step = elapsed / (i + 1);
            pp_cli_progress(stderr, i + 1, steps, r.loss, r.grad_norm,
                            r.step_ms > 0 ? r.batch * 1000.0 / r.step_ms : 0,
                            per_step * (steps - i - 1));
        }
        if (periodic && !plan->epochs && (r.step + 1) % plan->checkpoint.every == 0)
            rc = periodic_save(p, plan, series, rr, progress, err);
        if (!r.epoch_end) continue;
        if (progress) fputc('\n', stderr);
        pp_epoch_row *row = &rr->epochs[rr->n_epochs++]; /* (max_epochs: room for each) */
        *row = (pp_epoch_row){0};
        bool due = pp_pipeline_has_eval(p) &&
                   ((r.epoch + 1) % plan->eval.every == 0 || i == steps - 1);
        rc = close_epoch(p, plan, row, acc, &et, due, r.step + 1, metrics, rr, err);
        *acc = (pp_cli_epoch_sums){0};
        et = (epoch_time){0};
        if (rc) break;
        if (periodic && (r.epoch + 1) % plan->checkpoint.every == 0)
            rc = periodic_save(p, plan, series, rr, false, err);
    }
    if (rc) return rc;
    if (progress) fputc('\n', stderr);
    if (rr->interrupted || rr->n_losses == 0) return 0;
    if (plan->epochs && et.steps > 0) { /* --steps ended the run inside an epoch */
        pp_epoch_row *row = &rr->epochs[rr->n_epochs++];
        *row = (pp_epoch_row){.partial = true,
                              .steps = (int)(pp_pipeline_steps_done(p) % spe),
                              .steps_of = (int)spe};
        return close_epoch(p, plan, row, acc, &et, pp_pipeline_has_eval(p),
                           pp_pipeline_steps_done(p), metrics, rr, err);
    }
    if (!plan->epochs && pp_pipeline_has_eval(p))
        return evaluate(p, rr, metrics, 0, pp_pipeline_steps_done(p), err);
    return 0;
}

int pp_cli_run_save_final(pp_pipeline *p, const pp_plan *plan, const char *path,
                          bool weights_only, pp_cli_run_result *rr, pp_error *err)
{
    pp_checkpoint_meta meta[3];
    char bufs[3][40];
    pp_pipeline_save_options o = {.with_optimizer = !weights_only, .meta = meta,
                                  .cancelled = pp_cli_signal_again};
    if (plan->epochs) o.n_meta = pp_cli_epoch_sums_meta(&rr->sums, meta, bufs);
    pp_cli_outputs_make_parent(path);
    pp_cli_signal_saving(true);
    pp_status s = pp_pipeline_save_with(p, path, &o, err);
    pp_cli_signal_saving(false);
    if (s == PP_ERR_INTERRUPTED) {
        rr->abandoned = true;
        return 128 + pp_cli_signal_first();
    }
    if (s != PP_OK) return s == PP_ERR_INPUT ? 2 : 1;
    fprintf(stderr, "saved %s after step %lld\n", path, (long long)pp_pipeline_steps_done(p));
    return 0;
}


/* What the run's steps are, after "N steps" in the header: with epochs,
 * " (10 epochs of 235)", or where --steps cuts them short " (--steps 3:
 * 3 of the 235 steps of epoch 1 of 10, then the test set)"; a plan with
 * neither steps nor epochs runs one step, and says so. A resumed run says
 * which steps it runs: the plan's `steps:` count from the start of the run,
 * --steps N are N more. */
static void describe_steps(const pp_plan *plan, const pp_pipeline *p, bool steps_given,
                           int steps, char *buf, size_t n)
{
    buf[0] = '\0';
    if (!plan->epochs) {
        const long long done = (long long)pp_pipeline_steps_done(p);
        if (done > 0 && steps_given)
            snprintf(buf, n, " (--steps %d more: steps %lld to %lld; the plan's steps: %d count "
                     "from the start)", steps, done + 1, done + steps, plan->steps);
        else if (done > 0 && steps > 0)
            snprintf(buf, n, " (steps %lld to %lld: the plan's steps: %d count from the start)",
                     done + 1, done + steps, plan->steps);
        else if (!steps_given && plan->steps_mark.line == 0)
            snprintf(buf, n, " (the plan gives neither steps nor epochs: one step)");
        return;
    }
    long long spe = (long long)pp_pipeline_steps_per_epoch(p);
    if (!steps_given) {
        snprintf(buf, n, " (%d epoch%s of %lld)", plan->epochs, plan->epochs == 1 ? "" : "s", spe);
        return;
    }
    long long d0 = (long long)pp_pipeline_steps_done(p), end = d0 + steps;
    long long first = d0 / spe + 1, last = (end - 1) / spe + 1, left = end % spe;
    const char *eval = plan->eval.enabled ? ", then the test set" : "";
    if (first == last && left)
        snprintf(buf, n, " (--steps %d: %lld of the %lld steps of epoch %lld of %d%s)", steps,
                 left - d0 % spe, spe, first, plan->epochs, eval);
    else if (left)
        snprintf(buf, n, " (--steps %d: epochs %lld to %lld of %d, %lld steps each, the last "
                 "one %lld step%s in%s)", steps, first, last, plan->epochs, spe, left,
                 left == 1 ? "" : "s", eval);
    else if (first == last && d0 % spe) /* resumed inside the epoch: its last steps */
        snprintf(buf, n, " (--steps %d: the last %d of the %lld steps of epoch %lld of %d%s)",
                 steps, steps, spe, first, plan->epochs, eval);
    else if (first == last)
        snprintf(buf, n, " (--steps %d: epoch %lld of %d, %lld steps)", steps, first,
                 plan->epochs, spe);
    else
        snprintf(buf, n, " (--steps %d: epochs %lld to %lld of %d, %lld steps each)", steps,
                 first, last, plan->epochs, spe);
}

void pp_cli_run_print_header(const pp_plan *plan, const pp_pipeline *p, bool steps_given,
                             int steps)
{
    char epochs[256];
    describe_steps(plan, p, steps_given, steps, epochs, sizeof epochs);
    char precision[16] = ""; /* named unless fp32 */
    if (plan->precision != PP_PLAN_PRECISION_FP32)
        snprintf(precision, sizeof precision, ", %s", pp_plan_precision_name(plan->precision));
    fprintf(stderr, "%s: %s on %d stage%s, %s%s, batch %d in %d micro-batch%s, %d step%s%s\n",
            plan->path, plan->model.name, plan->n_stages, plan->n_stages == 1 ? "" : "s",
            pp_plan_schedule_name(plan->schedule), precision, plan->batch_size, plan->micro_batches,
            plan->micro_batches == 1 ? "" : "es", steps, steps == 1 ? "" : "s", epochs);
    pp_pipeline_report r; /* how a built-in fitted the micro-batches (docs/SCHEDULES.md, 4) */
    pp_pipeline_report_get(p, &r);
    if (r.schedule_note) fprintf(stderr, "note: %s\n", r.schedule_note);
}

int pp_cli_run_sweep_steps(void *arg, pp_pipeline *p, const pp_plan *plan, int steps,
                           double *last_loss, pp_error *err)
{
    pp_cli_run_result rr = {0};
    pp_cli_series series;
    pp_cli_series_init(&series, plan, 0, pp_pipeline_steps_per_epoch(p));
    int rc = pp_cli_run_steps(p, plan, (pp_comm *)arg, steps, isatty(2), NULL, &series, &rr,
                              err);
    /* as a training run: the series' file of the step reached, at the end or
     * when stopped (unless that step's was just written) */
    if ((!rc || rr.data_failed) && rr.n_losses > 0 && plan->checkpoint.enabled) {
        pp_error serr;
        int src = pp_cli_run_series_save(p, plan, &series, &rr, NULL, &serr);
        if (src && !rc) { /* the size's row says why */
            rc = src;
            *err = serr;
        }
    }
    pp_cli_series_free(&series);
    *last_loss = rr.n_losses ? rr.losses[rr.n_losses - 1] : 0;
    if (!rc && rr.interrupted) rc = 128 + rr.signal;
    pp_cli_run_result_free(&rr);
    return rc;
}
