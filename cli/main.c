/*
 * main.c - the pipeline-run command-line program (docs/ARCHITECTURE.md
 * section 3.6): the mode the arguments ask for (args.h reads them), the
 * pipeline of a training run and the exit code. The training loop is run.c's
 * (run.h).
 *
 * Exit codes: 0 success; 2 bad input (plan, arguments, data or checkpoint
 * files) with "FILE:LINE:COL: message"; 1 runtime failure; 143 / 130 when
 * stopped by SIGTERM / SIGINT (after the step in flight, having saved the
 * series' checkpoint and --save's: signals.h, series.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partitioner/emit.h"
#include "partitioner/plan.h"
#include "cli/args.h"
#include "cli/chart.h"
#include "cli/fit.h"
#include "cli/generate.h"
#include "cli/job.h"
#include "cli/options.h"
#include "cli/outputs.h"
#include "cli/report.h"
#include "cli/schedule_cmd.h"
#include "cli/resume.h"
#include "cli/run.h"
#include "cli/series.h"
#include "cli/signals.h"
#include "cli/sweep.h"
#include "cli/verify.h"
#include "pipeline/pipeline.h"
#include "runtime/io/checkpoint.h"
#include "streams/schedule.h"

/* The job this process belongs to (one process unless started by mpirun).
 * Rank 0 speaks for the job; other ranks' stdout and stderr go to /dev/null
 * and only their errors reach g_err (the original stderr), as "rank R: ...". */
static pp_comm *g_comm;
static FILE *g_err;

/* Prints an error message of this process. */
static void print_error(const char *msg)
{
    FILE *f = g_err ? g_err : stderr;
    if (pp_comm_size(g_comm) > 1)
        fprintf(f, "pipeline-run: rank %d: %s\n", pp_comm_rank(g_comm), msg);
    else
        fprintf(f, "pipeline-run: %s\n", msg);
    fflush(f);
}

/* precision tf32 asks for tensor-core math on CUDA; CPU devices compute IEEE
 * fp32 either way: say so once. */
static void note_precision(const pp_plan *plan)
{
    if (plan->precision != PP_PLAN_PRECISION_TF32) return;
    for (int s = 0; s < plan->n_stages; s++)
        if (plan->stages[s].device.kind == PP_DEVICE_CPU) {
            fprintf(stderr, "precision tf32: stages on CPU devices compute in IEEE fp32\n");
            return;
        }
}

/* Maps a library status to the exit code. */
static int fail(const pp_error *err)
{
    print_error(err->msg);
    switch (err->code) {
    case PP_ERR_INPUT: return 2;
    default: return 1;
    }
}

/* A plan predicted over a device's cap is refused before anything runs. */
static int check_memory(const pp_plan *plan)
{
    pp_error err;
    return pp_cli_check_memory(plan, &err) == PP_OK ? 0 : fail(&err);
}

/* The resolved plan as YAML on stdout; with json, the YAML goes to stderr
 * (human output) and one JSON object of the plan to stdout. */
static int do_validate(const pp_plan *plan, bool json)
{
    char *text;
    size_t len;
    pp_error err;
    /* what a run would refuse before its first step: the schedule's program
     * (a file's, read and checked), the folders of its checkpoints */
    pp_schedule sched;
    if (pp_pipeline_plan_schedule(plan, &sched, &err) != PP_OK) return fail(&err);
    pp_schedule_free(&sched);
    int rc = pp_cli_outputs_prepare(plan, NULL, false);
    if (rc) return rc;
    if (pp_plan_emit(plan, &text, &len, &err) != PP_OK) return fail(&err);
    fwrite(text, 1, len, json ? stderr : stdout);
    free(text);
    fprintf(stderr, "%s: valid plan (%d stage%s)\n", plan->path, plan->n_stages,
            plan->n_stages == 1 ? "" : "s");
    if (json && !pp_cli_print_plan_json(stdout, plan)) return 1;
    return 0;
}

static int do_memory(const pp_plan *plan, bool json)
{
    pp_error err;
    return pp_cli_memory(plan, json, &err) == PP_OK ? 0 : fail(&err);
}

static int do_optimize(const pp_plan *plan, const cli_args *a)
{
    if (pp_comm_size(g_comm) > 1)
        return pp_cli_bad_args("%s runs in one process (start it without mpirun)", "--optimize");
    const pp_cli_outputs outs = {.output = a->output}; /* before the search */
    int rc = pp_cli_outputs_prepare(plan, &outs, false);
    if (rc) return rc;
    pp_error err;
    rc = pp_cli_optimize(plan, a->memory_limit, a->output, a->json, &err);
    return rc == 1 ? fail(&err) : rc;
}

static int do_sweep(pp_plan *plan, const cli_args *a, int steps)
{
    pp_cli_sweep sw = {.sizes = a->sweep, .n = a->n_sweep, .steps = steps, .load = a->load,
                       .csv = a->csv, .svg = a->svg, .json = a->json,
                       .opts = {.layout = a->layout, .graphs = (pp_pipeline_graphs)a->graphs,
                                .grad_allreduce_whole = a->grads_whole},
                       .run_steps = pp_cli_run_sweep_steps, .arg = g_comm};
    return pp_cli_sweep_run(plan, &sw);
}

static int do_eval_only(const pp_plan *plan, const cli_args *a)
{
    pp_error err;
    pp_pipeline *p;
    if (!plan->eval.enabled) {
        fprintf(stderr, "pipeline-run: %s: --eval-only needs an eval section in the plan\n",
                plan->path);
        return 2;
    }
    pp_pipeline_options opts = {.comm = g_comm, .layout = a->layout};
    if (pp_pipeline_new(plan, &opts, &p, &err) != PP_OK) return fail(&err);
    pp_eval_result e;
    int rc = 0;
    if (pp_pipeline_load(p, a->load, &err) != PP_OK || pp_pipeline_evaluate(p, &e, &err) != PP_OK)
        rc = fail(&err);
    if (!rc) {
        char label[4200];
        snprintf(label, sizeof label, "%s: test ", a->load);
        pp_cli_print_eval(a->json ? stderr : stdout, plan, label, &e);
        if (a->json && !pp_cli_print_eval_json(stdout, plan, &e)) rc = 1;
    }
    pp_pipeline_free(p);
    return rc;
}

static int do_train(const pp_plan *plan, const cli_args *a, int steps)
{
    pp_error err;
    pp_pipeline *p;
    pp_pipeline_options opts = {.keep_trace = a->trace != NULL, .comm = g_comm,
                                .layout = a->layout,
                                .graphs = (pp_pipeline_graphs)a->graphs,
                                .grad_allreduce_whole = a->grads_whole};
    /* what the run starts from: --resume (auto or a file, checked against the
     * plan), --load, or nothing */
    pp_cli_start start;
    int rc = pp_cli_start_prepare(plan, g_comm, a->resume, a->save, &start);
    if (rc) return rc;
    /* every output's folder, before the first step (the series' and --save's made) */
    const pp_cli_outputs outs = {.save = a->save, .trace = a->trace, .metrics = a->metrics,
                                 .plot = a->plot};
    if ((rc = pp_cli_outputs_prepare(plan, &outs, true)) != 0) {
        pp_cli_start_free(&start);
        return rc;
    }
    if (pp_pipeline_new(plan, &opts, &p, &err) != PP_OK) {
        pp_cli_start_free(&start);
        return fail(&err);
    }
    const char *from = start.from ? start.from : a->load;
    if (from && pp_pipeline_load(p, from, &err) != PP_OK) {
        pp_cli_start_free(&start);
        pp_pipeline_free(p);
        return fail(&err);
    }
    const int64_t spe = pp_pipeline_steps_per_epoch(p);
    pp_cli_series series;
    pp_cli_series_init(&series, plan, pp_comm_rank(g_comm), spe);
    pp_cli_run_result rr = {0};
    int64_t resumed_from = -1;
    if (start.from) {
        int64_t done = pp_pipeline_steps_done(p);
        resumed_from = done;
        rr.sums = start.sums; /* the epoch in progress, from its start */
        pp_cli_series_adopt(&series, start.series, start.n_series, done, start.from);
        if (plan->epochs && done % spe == 0)
            fprintf(stderr, "resuming %s after step %lld (the end of epoch %lld of %d)\n",
                    start.from, (long long)done, (long long)(done / spe), plan->epochs);
        else if (plan->epochs)
            fprintf(stderr, "resuming %s after step %lld (%lld of the %lld steps of epoch %lld "
                    "of %d)\n", start.from, (long long)done, (long long)(done % spe),
                    (long long)spe, (long long)(done / spe + 1), plan->epochs);
        else
            fprintf(stderr, "resuming %s after step %lld\n", start.from, (long long)done);
        if (!plan->epochs && a->steps == 0) { /* the plan's steps count from the start */
            int64_t left = (int64_t)plan->steps - done;
            steps = left > 0 ? (int)left : 0;
        }
    }
    pp_cli_start_free(&start);
    if (!steps && plan->epochs) { /* whole passes, from where a loaded run stopped */
        int64_t total = (int64_t)plan->epochs * spe - pp_pipeline_steps_done(p);
        steps = total > PP_PLAN_MAX_STEPS ? PP_PLAN_MAX_STEPS : total > 0 ? (int)total : 0;
    }
    FILE *metrics = NULL;
    if (a->metrics && !(metrics = fopen(a->metrics, "w"))) {
        fprintf(stderr, "pipeline-run: %s: cannot open for writing: %s\n", a->metrics,
                strerror(errno));
        pp_cli_series_free(&series);
        pp_pipeline_free(p);
        return 2;
    }
    if (metrics) pp_cli_metrics_header(metrics);
    FILE *human = a->json ? stderr : stdout;
    pp_cli_run_print_header(plan, p, a->steps > 0, steps);
    rc = pp_cli_run_steps(p, plan, g_comm, steps, isatty(2), metrics, &series, &rr, &err);
    if (metrics && fclose(metrics) != 0 && !rc) {
        fprintf(stderr, "pipeline-run: %s: write failed\n", a->metrics);
        rc = 1;
    }
    const bool step_failed = rr.step_failed; /* (a data failure ran nothing: not one) */
    if (rc && !rr.abandoned) print_error(err.msg);
    /* a consistent checkpoint: after a whole step (also when interrupted); never
     * after a failed step, which leaves batch-norm statistics half-updated */
    if (a->save && step_failed && !rr.abandoned)
        fprintf(stderr, "pipeline-run: %s not saved: step %lld failed, and a failed step leaves "
                "the model half-updated\n", a->save,
                (long long)pp_pipeline_steps_done(p) + 1);
    /* the series' checkpoint of the step reached, at the end of the run or
     * when stopped (unless this state is on disk already), then --save's */
    const char *saved = NULL;
    if ((!rc || rr.data_failed) && rr.n_losses > 0 && plan->checkpoint.enabled) {
        pp_error serr;
        int src = pp_cli_run_series_save(p, plan, &series, &rr, &saved, &serr);
        if (src && !rr.abandoned) print_error(serr.msg);
        if (src && !rc) rc = src;
    }
    if (a->save && !rr.abandoned && !step_failed) {
        pp_error serr;
        int src = pp_cli_run_save_final(p, plan, a->save, a->weights_only, &rr, &serr);
        if (src && !rr.abandoned) print_error(serr.msg);
        if (src && !rc) rc = src;
    }
    if ((rr.save_failures || rr.save_unsynced) && !rr.abandoned) { /* said once more */
        if (rr.save_failures)
            fprintf(stderr, "pipeline-run: %d checkpoint%s of the series could not be written "
                    "(the first after step %lld); training went on\n", rr.save_failures,
                    rr.save_failures == 1 ? "" : "s", (long long)rr.first_failed_save);
        if (rr.save_unsynced)
            fprintf(stderr, "pipeline-run: %d checkpoint%s of the series %s in place but not "
                    "synced (the first after step %lld): %s may not survive a crash; training "
                    "went on\n", rr.save_unsynced, rr.save_unsynced == 1 ? "" : "s",
                    rr.save_unsynced == 1 ? "is" : "are", (long long)rr.first_unsynced_save,
                    rr.save_unsynced == 1 ? "it" : "they");
        if (!rc) rc = 1;
    }
    if (rr.abandoned) { /* a second signal: end now, no partial file left */
        fprintf(stderr, "pipeline-run: interrupted again while saving: the save was abandoned "
                        "(no partial file; the previous checkpoints stay)\n");
        pp_cli_series_free(&series);
        pp_cli_run_result_free(&rr);
        pp_pipeline_free(p);
        return rc;
    }
    if (a->trace && rr.n_losses > 0) {
        pp_error terr;
        if (pp_pipeline_write_trace(p, a->trace, &terr) != PP_OK) {
            fprintf(stderr, "pipeline-run: %s\n", terr.msg);
            if (!rc) rc = 1;
        }
    }
    if (a->plot && rr.n_epochs == 0)
        fprintf(stderr, "pipeline-run: --plot: %s not written: this run ended no epoch (the "
                        "plot draws the epochs a run ends)\n", a->plot);
    if (a->plot && rr.n_epochs > 0 &&
        !pp_cli_write_training_svg(a->plot, plan->path, rr.epochs, rr.n_epochs)) {
        fprintf(stderr, "pipeline-run: cannot write %s\n", a->plot);
        if (!rc) rc = 1;
    }
    pp_cli_run_info info = {.steps_done = pp_pipeline_steps_done(p),
                            .steps_left = steps - rr.n_losses,
                            .resumed_from = resumed_from,
                            .interrupted = rr.interrupted ? pp_cli_signal_name(rr.signal) : NULL,
                            .grad_norms = rr.grad_norms};
    if (rr.n_losses > 0 || (!rc && (steps == 0 || rr.interrupted))) {
        const pp_eval_result *ev = rr.evaluated ? &rr.last_eval : NULL;
        pp_cli_print_summary(human, plan, p, rr.losses, rr.n_losses, ev, &info);
        if (a->json && !pp_cli_print_json(stdout, plan, p, rr.losses, rr.n_losses, rr.epochs,
                                          rr.n_epochs, ev, &info) &&
            !rc)
            rc = 1;
    }
    if (rr.interrupted && !rc) {
        char what[512] = "nothing saved (the plan has no checkpoint: section and no --save "
                         "was given)";
        if (rr.n_losses == 0)
            snprintf(what, sizeof what, "nothing to save");
        else if (saved || a->save)
            snprintf(what, sizeof what, "saved %s%s%s", saved ? saved : "",
                     saved && a->save ? " and " : "", a->save ? a->save : "");
        fprintf(stderr, "pipeline-run: interrupted after %d step%s by %s (the run is at step "
                        "%lld): %s\n",
                rr.n_losses, rr.n_losses == 1 ? "" : "s", pp_cli_signal_name(rr.signal),
                (long long)pp_pipeline_steps_done(p), what);
        rc = 128 + rr.signal;
    }
    pp_cli_series_free(&series);
    pp_cli_run_result_free(&rr);
    pp_pipeline_free(p);
    return rc;
}

/* Joins the job: MPI first (it may take arguments of its own), then ranks
 * other than 0 fall silent except for their errors. */
static int join_job(int *argc, char ***argv)
{
    pp_error err;
    if (pp_comm_init(argc, argv, &g_comm, &err) != PP_OK) {
        fprintf(stderr, "pipeline-run: %s\n", err.msg);
        return 1;
    }
    if (pp_comm_rank(g_comm) == 0) return 0;
    int fd = dup(2);
    if (fd >= 0) g_err = fdopen(fd, "w");
    if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) {
        print_error("cannot redirect output to /dev/null");
        return 1;
    }
    return 0;
}

static int run(int argc, char **argv);

/* Every rank of a job must run the same plan with the same options (job.h):
 * exit 2 on every rank, rank 0 naming the ranks and what differs, before any
 * work starts. */
static int check_same_plan(const pp_plan *plan, const cli_args *a, int steps)
{
    pp_cli_shape shape = {0};
    pp_cli_shape_add(&shape, "--steps", "%d", steps);
    pp_cli_shape_add(&shape, "--load", "%.100s", a->load ? a->load : "-");
    pp_cli_shape_add(&shape, "--resume", "%.100s", a->resume ? a->resume : "-");
    pp_cli_shape_add(&shape, "--eval-only", "%s", a->eval_only ? "on" : "off");
    pp_cli_shape_add(&shape, "--save", "%.100s", a->save ? a->save : "-");
    pp_cli_shape_add(&shape, "--grad-allreduce", "%s", a->grads_whole ? "whole" : "buckets");
    char msg[1024];
    pp_error err;
    int rc = pp_cli_check_same_run(g_comm, plan, &shape, msg, sizeof msg, &err);
    if (rc == 1) return fail(&err);
    if (msg[0]) print_error(msg);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = join_job(&argc, &argv);
    if (!rc) rc = run(argc, argv);
    /* A rank that failed at run time ends the whole job: the others may wait
     * on it. Bad input (exit 2: the plan, its ranks, the plan hash) is found
     * by every rank alike before any transfer, so each leaves normally (two
     * ranks aborting at once can crash Open MPI's launcher); a rank alone in
     * its input error stalls the others at most their transfer timeout. */
    if (rc && rc != 2 && rc < 128 && pp_comm_size(g_comm) > 1) pp_comm_abort(g_comm, rc, NULL);
    /* (128 + a signal: every rank stopped after the same step and saved; each
     * leaves normally) */
    pp_comm_free(g_comm);
    if (g_err) fclose(g_err);
    return rc;
}

/* --show-data N or --dump-data STEP|eval:K, to -o FILE. */
static int do_data_view(const pp_plan *plan, const cli_args *a)
{
    const char *opt = a->show_data ? "--show-data" : "--dump-data";
    if (pp_comm_size(g_comm) > 1)
        return pp_cli_bad_args("%s runs in one process (start it without mpirun)", opt);
    if (!a->output)
        return pp_cli_bad_args(a->show_data ? "%s needs -o FILE (the PNG to write; token data: "
                                              "a text file)"
                                     : "%s needs -o FILE (the safetensors file to write)", opt);
    pp_error err;
    pp_status s;
    if (a->show_data) {
        s = pp_plan_show_data(plan, a->show_data, a->output, &err);
    } else {
        const bool eval = strncmp(a->dump_data, "eval:", 5) == 0;
        s = pp_plan_dump_data(plan, atoll(a->dump_data + (eval ? 5 : 0)), eval, a->output, &err);
    }
    if (s != PP_OK) {
        print_error(err.msg);
        return s == PP_ERR_INPUT ? 2 : 1;
    }
    fprintf(stderr, "wrote %s\n", a->output);
    return 0;
}

static int run(int argc, char **argv)
{
    cli_args a;
    int rc = pp_cli_parse_args(argc, argv, &a);
    if (rc) return rc;
    if (a.verify && pp_comm_size(g_comm) > 1)
        return pp_cli_bad_args("%s runs in one process (start it without mpirun)", "--verify");
    if (a.verify && !a.plan) return pp_cli_verify(a.files, a.n_files, NULL);

    pp_plan *plan;
    if (a.verify) { /* the plan as written: its devices need not exist here */
        if ((rc = pp_cli_load_plan(a.plan, a.device_map, false, &plan)) != 0) return rc;
        rc = pp_cli_verify(a.files, a.n_files, plan);
        pp_plan_free(plan);
        return rc;
    }
    if ((rc = pp_cli_load_plan(a.plan, a.device_map, true, &plan)) != 0) return rc;
    int steps = a.steps ? a.steps : plan->steps;

    /* training, the sweeps and --generate stop after the step (token) in
     * hand; the other modes have none to stop after, and end at once */
    if (a.n_sweep_kinds || (!a.validate && !a.print_schedule && !a.simulate && !a.memory &&
                            !a.optimize && !a.eval_only && !a.show_data && !a.dump_data))
        pp_cli_signals_install();
    else
        pp_cli_signals_install_end();

    if (a.show_data || a.dump_data) { /* reads the data as a run would; runs nothing */
        rc = do_data_view(plan, &a);
        pp_plan_free(plan);
        return rc;
    }
    if (!a.simulate && !a.memory && !a.optimize && !a.print_schedule && !a.n_sweep &&
        !a.n_sweep_kinds && !a.eval_only && !a.gen.prompt && (rc = check_memory(plan)) != 0) {
        pp_plan_free(plan);
        return rc;
    }
    const bool runs = !a.validate && !a.simulate && !a.memory && !a.optimize &&
                      !a.print_schedule;
    if (runs) note_precision(plan);
    if (runs && (rc = check_same_plan(plan, &a, steps)) != 0) {
        pp_plan_free(plan);
        return rc;
    }
    /* what depends on the plan, after the ranks agree on it (each refuses alike) */
    char msg[512];
    if (!pp_cli_options_check_plan(a.given, plan, msg, sizeof msg)) {
        print_error(msg);
        pp_plan_free(plan);
        return 2;
    }
    if (a.n_sweep && (rc = pp_cli_sweep_check(plan, a.sweep, a.n_sweep)) != 0) {
        pp_plan_free(plan);
        return rc;
    }
    if (a.n_sweep || a.n_sweep_kinds) { /* the table's files, before the first run */
        const pp_cli_outputs outs = {.csv = a.csv, .svg = a.svg};
        if ((rc = pp_cli_outputs_prepare(plan, &outs, false)) != 0) {
            pp_plan_free(plan);
            return rc;
        }
    }
    if (a.validate)
        rc = do_validate(plan, a.json);
    else if (a.print_schedule)
        rc = pp_cli_print_schedule(plan, a.print_schedule == 2);
    else if (a.n_sweep_kinds) {
        pp_cli_sweep_args sw = {.path = a.plan, .device_map = a.device_map,
                                .kinds = a.sweep_kinds, .n_kinds = a.n_sweep_kinds,
                                .simulate = a.simulate, .json = a.json,
                                .steps = steps ? steps : 1, .csv = a.csv, .svg = a.svg,
                                .layout = a.layout};
        rc = pp_comm_size(g_comm) > 1
                 ? pp_cli_bad_args("%s runs in one process (start it without mpirun)", "--sweep-schedule")
                 : pp_cli_sweep_schedules(&sw, plan);
    } else if (a.simulate)
        rc = pp_cli_simulate(plan, a.json);
    else if (a.memory)
        rc = do_memory(plan, a.json);
    else if (a.optimize)
        rc = do_optimize(plan, &a);
    else if (a.eval_only)
        rc = do_eval_only(plan, &a);
    else if (a.gen.prompt) {
        const pp_pipeline_options opts = {.comm = g_comm, .layout = a.layout};
        rc = pp_cli_generate(plan, &opts, a.load, &a.gen);
    }
    else if (a.n_sweep && pp_comm_size(g_comm) > 1)
        rc = pp_cli_bad_args("%s runs in one process (start it without mpirun)", "--sweep-split");
    else if (a.n_sweep)
        rc = do_sweep(plan, &a, steps ? steps : 1);
    else
        rc = do_train(plan, &a, steps);
    pp_plan_free(plan);
    return rc;
}
