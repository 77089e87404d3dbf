/*
 * main.c - the pipeline-run command-line program (ARCHITECTURE.md §6).
 *
 * Exit codes: 0 success; 2 bad input (plan, arguments, data or checkpoint
 * files) with "FILE:LINE:COL: message"; 1 runtime failure; 130 when stopped
 * by SIGINT (after saving the checkpoint asked for with --save).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/version.h"
#include "partitioner/emit.h"
#include "partitioner/plan.h"
#include "cli/job.h"
#include "cli/options.h"
#include "cli/report.h"
#include "cli/sweep.h"
#include "pipeline/pipeline.h"
#include "runtime/io/checkpoint.h"
#include "runtime/train/optimizer.h"
#include "streams/schedule.h"
#include "streams/stream.h"

#define MAX_SWEEP 64

typedef struct cli_args {
    const char *plan;
    int steps;            /* 0: the plan's */
    bool validate, json, simulate, weights_only, eval_only;
    int graphs;        /* pp_pipeline_graphs: --cuda-graphs (PLAN when not given) */
    bool grads_whole;     /* --grad-allreduce whole */
    bool grads_given, layout_given;
    const char *trace, *load, *save, *device_map, *csv, *svg, *metrics, *plot, *resume;
    pp_pipeline_layout layout; /* --layout */
    int sweep[MAX_SWEEP];
    int n_sweep;
    bool given[PP_CLI_OPT_COUNT]; /* which options the command line gave (options.h) */
} cli_args;

static volatile sig_atomic_t g_stop;

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

static void on_sigint(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fputs("usage: pipeline-run PLAN.yaml [options]\n"
          "\n"
          "Trains the network a partition plan describes, split into pipeline stages.\n"
          "\n"
          "options:\n"
          "  --steps N           override the plan's step count\n"
          "  --validate          check the plan and its data, print it resolved (YAML), run\n"
          "                      nothing\n"
          "  --simulate          predict step time and bubble from the cost model, run nothing\n"
          "  --json              print one JSON summary on stdout (human output goes to stderr)\n"
          "  --trace FILE        write a Chrome trace (open in Perfetto or chrome://tracing)\n"
          "  --load FILE         start from a safetensors checkpoint (torchvision names)\n"
          "  --save FILE         write a safetensors checkpoint at the end (or on Ctrl-C)\n"
          "  --weights-only      with --save: leave the optimizer state out of the file\n"
          "  --resume FILE       continue a run from its checkpoint (epoch, step, optimizer,\n"
          "                      learning-rate schedule and data order)\n"
          "  --device-map MAP    remap devices, e.g. cuda:1=cuda:0 or cuda=cpu\n"
          "  --cuda-graphs on|off  replay each CUDA training step as graphs after the first\n"
          "                      (default: the plan's cuda_graphs, or PP_CUDA_GRAPHS, else on)\n"
          "  --sweep-split LIST  run once per split size (e.g. 1,2,4,8) and print a table\n"
          "  --csv FILE          with --sweep-split: write the table as CSV\n"
          "  --svg FILE          with --sweep-split: write a chart of images/s and bubble\n"
          "  --metrics FILE      write a CSV row per step and per evaluation\n"
          "  --plot FILE         with epochs: an SVG of loss and test accuracy per epoch\n"
          "  --eval-only         with --load: evaluate the checkpoint on the plan's eval data\n"
          "  --layout L          activations' memory order: auto (NHWC where a device runs\n"
          "                      faster so: CUDA in bf16), nchw or nhwc; results do not change\n"
          "  --grad-allreduce M  replicas: buckets (default: each stage's gradients summed\n"
          "                      over its replicas as soon as its backward is done) or whole\n"
          "                      (every gradient in one sum after the whole backward)\n"
          "  -h, --help          show this help\n"
          "  -V, --version       show the version\n"
          "\n"
          "Options that do not go together are refused, naming both (docs/CLI.md).\n"
          "exit status: 0 ok, 1 runtime failure, 2 bad input, 130 interrupted\n",
          f);
}

static int bad_args(const char *fmt, const char *what)
{
    fprintf(stderr, "pipeline-run: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\n(see pipeline-run --help)\n");
    return 2;
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static int parse_args(int argc, char **argv, cli_args *a)
{
    enum { O_STEPS = 256, O_VALIDATE, O_JSON, O_TRACE, O_LOAD, O_SAVE, O_MAP, O_SWEEP, O_CSV,
           O_SVG, O_SIM, O_WEIGHTS, O_METRICS, O_EVAL_ONLY, O_PLOT, O_RESUME, O_LAYOUT,
           O_GRAPHS, O_GRAD_ALLREDUCE };
    static const struct option opts[] = {
        {"steps", required_argument, 0, O_STEPS},
        {"validate", no_argument, 0, O_VALIDATE},
        {"json", no_argument, 0, O_JSON},
        {"trace", required_argument, 0, O_TRACE},
        {"load", required_argument, 0, O_LOAD},
        {"save", required_argument, 0, O_SAVE},
        {"weights-only", no_argument, 0, O_WEIGHTS},
        {"device-map", required_argument, 0, O_MAP},
        {"sweep-split", required_argument, 0, O_SWEEP},
        {"csv", required_argument, 0, O_CSV},
        {"svg", required_argument, 0, O_SVG},
        {"simulate", no_argument, 0, O_SIM},
        {"metrics", required_argument, 0, O_METRICS},
        {"eval-only", no_argument, 0, O_EVAL_ONLY},
        {"plot", required_argument, 0, O_PLOT},
        {"resume", required_argument, 0, O_RESUME},
        {"layout", required_argument, 0, O_LAYOUT},
        {"cuda-graphs", required_argument, 0, O_GRAPHS},
        {"grad-allreduce", required_argument, 0, O_GRAD_ALLREDUCE},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0},
    };
    memset(a, 0, sizeof *a);
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":hV", opts, NULL)) != -1) {
        switch (c) {
        case O_STEPS:
            if (!parse_int(optarg, 1, PP_PLAN_MAX_STEPS, &a->steps))
                return bad_args("--steps: '%s' is not a positive integer", optarg);
            break;
        case O_VALIDATE: a->validate = true; break;
        case O_JSON: a->json = true; break;
        case O_SIM: a->simulate = true; break;
        case O_WEIGHTS: a->weights_only = true; break;
        case O_TRACE: a->trace = optarg; break;
        case O_LOAD: a->load = optarg; break;
        case O_SAVE: a->save = optarg; break;
        case O_MAP: a->device_map = optarg; break;
        case O_CSV: a->csv = optarg; break;
        case O_SVG: a->svg = optarg; break;
        case O_METRICS: a->metrics = optarg; break;
        case O_EVAL_ONLY: a->eval_only = true; break;
        case O_PLOT: a->plot = optarg; break;
        case O_RESUME: a->resume = optarg; break;
        case O_LAYOUT:
            if (!strcmp(optarg, "auto")) a->layout = PP_PIPELINE_LAYOUT_AUTO;
            else if (!strcmp(optarg, "nchw")) a->layout = PP_PIPELINE_LAYOUT_NCHW;
            else if (!strcmp(optarg, "nhwc")) a->layout = PP_PIPELINE_LAYOUT_NHWC;
            else return bad_args("--layout: '%s' is not auto, nchw or nhwc", optarg);
            a->layout_given = true;
            break;
        case O_GRAPHS:
            if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                return bad_args("--cuda-graphs: '%s' is not on or off", optarg);
            a->graphs = strcmp(optarg, "on") ? PP_PIPELINE_GRAPHS_OFF : PP_PIPELINE_GRAPHS_ON;
            break;
        case O_GRAD_ALLREDUCE:
            if (strcmp(optarg, "buckets") != 0 && strcmp(optarg, "whole") != 0)
                return bad_args("--grad-allreduce: '%s' is neither buckets nor whole", optarg);
            a->grads_whole = strcmp(optarg, "whole") == 0;
            a->grads_given = true;
            break;
        case O_SWEEP: {
            char buf[512];
            snprintf(buf, sizeof buf, "%s", optarg);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (a->n_sweep == MAX_SWEEP)
                    return bad_args("--sweep-split: at most 64 sizes (got '%s')", optarg);
                if (!parse_int(tok, 1, PP_PLAN_MAX_BATCH, &a->sweep[a->n_sweep++]))
                    return bad_args("--sweep-split: '%s' is not a list of positive integers",
                                    optarg);
            }
            if (a->n_sweep == 0) return bad_args("--sweep-split: empty list '%s'", optarg);
            break;
        }
        case 'h': usage(stdout); exit(0);
        case 'V': printf("pipeline-run %s\n", pp_version()); exit(0);
        case ':': return bad_args("option %s needs a value", argv[optind - 1]);
        default: return bad_args("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc) return bad_args("%s", "missing PLAN.yaml");
    if (optind + 1 < argc) return bad_args("unexpected argument '%s'", argv[optind + 1]);
    a->plan = argv[optind];
    bool *g = a->given;
    g[PP_CLI_OPT_STEPS] = a->steps > 0;
    g[PP_CLI_OPT_VALIDATE] = a->validate;
    g[PP_CLI_OPT_SIMULATE] = a->simulate;
    g[PP_CLI_OPT_SWEEP] = a->n_sweep > 0;
    g[PP_CLI_OPT_EVAL_ONLY] = a->eval_only;
    g[PP_CLI_OPT_JSON] = a->json;
    g[PP_CLI_OPT_TRACE] = a->trace != NULL;
    g[PP_CLI_OPT_LOAD] = a->load != NULL;
    g[PP_CLI_OPT_SAVE] = a->save != NULL;
    g[PP_CLI_OPT_WEIGHTS_ONLY] = a->weights_only;
    g[PP_CLI_OPT_RESUME] = a->resume != NULL;
    g[PP_CLI_OPT_DEVICE_MAP] = a->device_map != NULL;
    g[PP_CLI_OPT_GRAPHS] = a->graphs != 0;
    g[PP_CLI_OPT_CSV] = a->csv != NULL;
    g[PP_CLI_OPT_SVG] = a->svg != NULL;
    g[PP_CLI_OPT_METRICS] = a->metrics != NULL;
    g[PP_CLI_OPT_PLOT] = a->plot != NULL;
    g[PP_CLI_OPT_LAYOUT] = a->layout_given;
    g[PP_CLI_OPT_GRAD_ALLREDUCE] = a->grads_given;
    char msg[256];
    if (!pp_cli_options_check(g, msg, sizeof msg)) return bad_args("%s", msg);
    return 0;
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

typedef struct run_result {
    double *losses;
    int n_losses;
    bool interrupted;
    pp_epoch_row *epochs;      /* one per completed epoch (plans with epochs) */
    int n_epochs;
    bool evaluated;
    pp_eval_result last_eval;  /* the last evaluation */
} run_result;

static void run_result_free(run_result *rr)
{
    free(rr->losses);
    free(rr->epochs);
}

/* Running sums of one epoch. */
typedef struct epoch_acc {
    double loss_sum, correct_sum, ms;
    int64_t samples;
    int steps;
    int64_t epoch;            /* 1-based */
} epoch_acc;

static void metrics_row(FILE *m, const char *kind, int64_t epoch, int64_t step, int batch, double lr,
                        double loss, double acc, double seconds, double images_per_s)
{
    if (!m) return;
    fprintf(m, "%s,%lld,%lld,%d,%.9g,%.9g,%.9g,%.6f,%.3f\n", kind, (long long)epoch,
            (long long)step, batch, lr, loss, acc, seconds, images_per_s);
    fflush(m);
}

/* Periodic checkpoints (the plan's checkpoint section): the files this run
 * wrote, oldest first, so that only the newest `keep` stay. */
typedef struct ckpt_ring {
    char **paths;
    int n;
} ckpt_ring;

static int periodic_save(pp_pipeline *p, const pp_plan *plan, ckpt_ring *ring, int64_t number,
                         pp_error *err)
{
    const pp_plan_checkpoint *c = &plan->checkpoint;
    const char *tag = plan->epochs ? "{epoch}" : "{step}";
    const char *at = strstr(c->path, tag);
    if (!at) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%.*s%lld%s", (int)(at - c->path), c->path, (long long)number,
             at + strlen(tag));
    if (pp_pipeline_save(p, path, true, err) != PP_OK) return err->code == PP_ERR_INPUT ? 2 : 1;
    fprintf(stderr, "saved %s\n", path);
    char **grown = realloc(ring->paths, (size_t)(ring->n + 1) * sizeof *grown);
    char *copy = strdup(path);
    if (!grown || !copy) {
        free(copy);
        if (grown) ring->paths = grown;
        pp_error_set(err, PP_ERR_OOM, "out of host memory");
        return 1;
    }
    ring->paths = grown;
    ring->paths[ring->n++] = copy;
    /* drop the oldest this run wrote (rank 0 wrote them) */
    while (c->keep > 0 && ring->n > c->keep) {
        if (pp_comm_rank(g_comm) == 0 && unlink(ring->paths[0]) != 0 && errno != ENOENT)
            fprintf(stderr, "pipeline-run: cannot remove %s: %s\n", ring->paths[0],
                    strerror(errno));
        free(ring->paths[0]);
        memmove(ring->paths, ring->paths + 1, (size_t)(--ring->n) * sizeof *ring->paths);
    }
    return 0;
}

/* Evaluates and records the result; returns an exit code. */
static int evaluate(pp_pipeline *p, run_result *rr, FILE *metrics, int64_t epoch, int64_t step,
                    pp_error *err)
{
    pp_status s = pp_pipeline_evaluate(p, &rr->last_eval, err);
    if (s != PP_OK) return s == PP_ERR_INPUT ? 2 : 1;
    rr->evaluated = true;
    metrics_row(metrics, "eval", epoch, step, (int)rr->last_eval.samples, 0,
                rr->last_eval.loss, rr->last_eval.accuracy, rr->last_eval.seconds,
                rr->last_eval.images_per_s);
    return 0;
}

/* Closes an epoch's row from acc (whole or partial): its figures, the
 * evaluation when due, the epoch line. Returns an exit code. */
static int close_epoch(pp_pipeline *p, const pp_plan *plan, pp_epoch_row *row,
                       const epoch_acc *acc, bool eval_due, int64_t step, FILE *metrics,
                       run_result *rr, pp_error *err)
{
    row->epoch = (int)acc->epoch;
    row->train_loss = acc->loss_sum / (double)acc->samples;
    row->train_acc = acc->correct_sum / (double)acc->samples;
    row->seconds = acc->ms / 1e3;
    row->images_per_s = acc->ms > 0 ? acc->samples * 1000.0 / acc->ms : 0;
    if (eval_due) {
        int rc = evaluate(p, rr, metrics, acc->epoch, step, err);
        if (rc) return rc;
        row->evaluated = true;
        row->test_loss = rr->last_eval.loss;
        row->test_acc = rr->last_eval.accuracy;
        row->eval_images_per_s = rr->last_eval.images_per_s;
    }
    pp_cli_print_epoch(stderr, row, plan->epochs);
    return 0;
}

/* Runs `steps` steps on p with progress on stderr. With epochs, a line per
 * epoch (and the plan's evaluation every eval.every epochs); with steps, one
 * evaluation at the end when the plan has an eval section. When --steps ends
 * an epochs plan inside an epoch, that partial epoch gets its line and row,
 * and the evaluation a steps plan has at the end. */
static int run_steps(pp_pipeline *p, const pp_plan *plan, int steps, bool progress, FILE *metrics,
                     run_result *rr, pp_error *err)
{
    rr->losses = calloc((size_t)steps, sizeof(double));
    int max_epochs = plan->epochs > 0 ? plan->epochs + 1 : 1;
    rr->epochs = calloc((size_t)max_epochs, sizeof *rr->epochs);
    if (!rr->losses || !rr->epochs) {
        pp_error_set(err, PP_ERR_OOM, "out of host memory");
        return 1;
    }
    int64_t t0 = pp_stream_clock_ns();
    epoch_acc acc = {0};
    ckpt_ring ring = {0};
    int rc = 0;
    for (int i = 0; i < steps && !rc; i++) {
        if (g_stop) {
            rr->interrupted = true;
            break;
        }
        pp_step_result r;
        pp_status s = pp_pipeline_step(p, &r, err);
        if (s != PP_OK) {
            if (progress) fputc('\n', stderr);
            return s == PP_ERR_INPUT ? 2 : 1;
        }
        rr->losses[rr->n_losses++] = r.loss;
        acc.loss_sum += r.loss * r.batch;
        acc.correct_sum += r.accuracy * r.batch;
        acc.samples += r.batch;
        acc.ms += r.step_ms;
        acc.steps++;
        acc.epoch = r.epoch + 1;
        metrics_row(metrics, "step", r.epoch + 1, r.step + 1, r.batch, r.lr, r.loss, r.accuracy,
                    r.step_ms / 1e3, r.step_ms > 0 ? r.batch * 1000.0 / r.step_ms : 0);
        if (progress) {
            double elapsed = (double)(pp_stream_clock_ns() - t0) / 1e9;
            double per_step = elapsed / (i + 1);
            pp_cli_progress(stderr, i + 1, steps, r.loss,
                            r.step_ms > 0 ? r.batch * 1000.0 / r.step_ms : 0,
                            per_step * (steps - i - 1));
        }
        if (plan->checkpoint.enabled && !plan->epochs && (r.step + 1) % plan->checkpoint.every == 0)
            rc = periodic_save(p, plan, &ring, r.step + 1, err);
        if (!r.epoch_end) continue;
        if (progress) fputc('\n', stderr);
        pp_epoch_row *row = &rr->epochs[rr->n_epochs < max_epochs - 1 ? rr->n_epochs++ : 0];
        *row = (pp_epoch_row){0};
        bool due = pp_pipeline_has_eval(p) &&
                   ((r.epoch + 1) % plan->eval.every == 0 || i == steps - 1);
        rc = close_epoch(p, plan, row, &acc, due, r.step + 1, metrics, rr, err);
        acc = (epoch_acc){0};
        if (rc) break;
        if (plan->checkpoint.enabled && (r.epoch + 1) % plan->checkpoint.every == 0)
            rc = periodic_save(p, plan, &ring, r.epoch + 1, err);
    }
    for (int k = 0; k < ring.n; k++) free(ring.paths[k]);
    free(ring.paths);
    if (rc) return rc;
    if (progress) fputc('\n', stderr);
    if (rr->interrupted || rr->n_losses == 0) return 0;
    if (plan->epochs && acc.steps > 0) { /* --steps ended the run inside an epoch */
        pp_epoch_row *row = &rr->epochs[rr->n_epochs < max_epochs ? rr->n_epochs++ : 0];
        *row = (pp_epoch_row){.partial = true, .steps = acc.steps,
                              .steps_of = (int)pp_pipeline_steps_per_epoch(p)};
        return close_epoch(p, plan, row, &acc, pp_pipeline_has_eval(p),
                           pp_pipeline_steps_done(p), metrics, rr, err);
    }
    if (!plan->epochs && pp_pipeline_has_eval(p))
        return evaluate(p, rr, metrics, 0, pp_pipeline_steps_done(p), err);
    return 0;
}

/* The resolved plan as YAML on stdout; with json, the YAML goes to stderr
 * (human output) and one JSON object of the plan to stdout. */
static int do_validate(const pp_plan *plan, bool json)
{
    char *text;
    size_t len;
    pp_error err;
    if (pp_plan_emit(plan, &text, &len, &err) != PP_OK) return fail(&err);
    fwrite(text, 1, len, json ? stderr : stdout);
    free(text);
    fprintf(stderr, "%s: valid plan (%d stage%s)\n", plan->path, plan->n_stages,
            plan->n_stages == 1 ? "" : "s");
    if (json && !pp_cli_print_plan_json(stdout, plan)) return 1;
    return 0;
}

static int do_simulate(const pp_plan *plan, bool json)
{
    double step_ms, bubble, f[PP_PLAN_MAX_STAGES], b[PP_PLAN_MAX_STAGES];
    pp_error err;
    if (pp_pipeline_predict(plan, &step_ms, &bubble, f, b, &err) != PP_OK) return fail(&err);
    FILE *out = json ? stderr : stdout;
    fprintf(out, "%-5s  %-8s  %12s  %12s\n", "stage", "device", "fwd ms/mb", "bwd ms/mb");
    for (int s = 0; s < plan->n_stages; s++)
        fprintf(out, "%-5d  %-8s  %12.2f  %12.2f\n", s, plan->stages[s].device_name, f[s], b[s]);
    fprintf(out, "predicted: %.1f ms per step, %.1f images/s, bubble %.1f%% (%s, %d micro-batches)\n",
            step_ms, step_ms > 0 ? plan->batch_size * 1000.0 / step_ms : 0, 100 * bubble,
            pp_plan_schedule_name(plan->schedule), plan->micro_batches);
    if (plan->model.kind != PP_MODEL_DELAY)
        fprintf(out, "(layer costs are catalogue FLOPs at a nominal device rate: compare "
                     "shapes, not absolute times)\n");
    if (json && !pp_cli_print_simulation_json(stdout, plan, step_ms, bubble, f, b)) return 1;
    return 0;
}

/* The sweep's training loop (sweep.h). */
static int sweep_steps(void *arg, pp_pipeline *p, const pp_plan *plan, int steps,
                       double *last_loss, pp_error *err)
{
    (void)arg;
    run_result rr = {0};
    int rc = run_steps(p, plan, steps, isatty(2), NULL, &rr, err);
    *last_loss = rr.n_losses ? rr.losses[rr.n_losses - 1] : 0;
    if (!rc && rr.interrupted) rc = 130;
    run_result_free(&rr);
    return rc;
}

static int do_sweep(pp_plan *plan, const cli_args *a, int steps)
{
    pp_cli_sweep sw = {.sizes = a->sweep, .n = a->n_sweep, .steps = steps, .load = a->load,
                       .csv = a->csv, .svg = a->svg, .json = a->json,
                       .opts = {.layout = a->layout, .graphs = (pp_pipeline_graphs)a->graphs,
                                .grad_allreduce_whole = a->grads_whole},
                       .run_steps = sweep_steps};
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
        fprintf(a->json ? stderr : stdout,
                "%s: test loss %.4f, accuracy %.4f (%lld images, %.1f s, %.0f images/s)\n",
                a->load, e.loss, e.accuracy, (long long)e.samples, e.seconds, e.images_per_s);
        if (a->json && !pp_cli_print_eval_json(stdout, plan, &e)) rc = 1;
    }
    pp_pipeline_free(p);
    return rc;
}

/* What the run's steps are, after "N steps" in the header: with epochs,
 * " (10 epochs of 235)", or where --steps cuts them short " (--steps 3:
 * 3 of the 235 steps of epoch 1 of 10, then the test set)"; a plan with
 * neither steps nor epochs runs one step, and says so. */
static void describe_steps(const pp_plan *plan, const pp_pipeline *p, bool steps_given,
                           int steps, char *buf, size_t n)
{
    buf[0] = '\0';
    if (!plan->epochs) {
        if (!steps_given && plan->steps_mark.line == 0)
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
    else if (first == last)
        snprintf(buf, n, " (--steps %d: epoch %lld of %d, %lld steps)", steps, first,
                 plan->epochs, spe);
    else
        snprintf(buf, n, " (--steps %d: epochs %lld to %lld of %d, %lld steps each)", steps,
                 first, last, plan->epochs, spe);
}

static int do_train(const pp_plan *plan, const cli_args *a, int steps)
{
    pp_error err;
    pp_pipeline *p;
    pp_pipeline_options opts = {.keep_trace = a->trace != NULL, .comm = g_comm,
                                .layout = a->layout,
                                .graphs = (pp_pipeline_graphs)a->graphs,
                                .grad_allreduce_whole = a->grads_whole};
    if (a->resume && plan->optimizer.momentum != 0) { /* resuming needs the momentum buffers */
        pp_checkpoint_info info;
        if (pp_checkpoint_list(a->resume, &info, &err) != PP_OK) return fail(&err);
        bool has_opt = false;
        for (size_t i = 0; i < info.n && !has_opt; i++)
            has_opt = strncmp(info.entries[i].name, PP_OPTIMIZER_MOMENTUM_PREFIX,
                              strlen(PP_OPTIMIZER_MOMENTUM_PREFIX)) == 0;
        pp_checkpoint_info_free(&info);
        if (!has_opt) {
            fprintf(stderr, "pipeline-run: %s: no optimizer state (saved with --weights-only?); "
                            "--resume needs it, --load starts from the weights alone\n",
                    a->resume);
            return 2;
        }
    }
    if (pp_pipeline_new(plan, &opts, &p, &err) != PP_OK) return fail(&err);
    const char *from = a->resume ? a->resume : a->load;
    if (from && pp_pipeline_load(p, from, &err) != PP_OK) {
        pp_pipeline_free(p);
        return fail(&err);
    }
    if (a->resume) {
        int64_t done = pp_pipeline_steps_done(p), spe = pp_pipeline_steps_per_epoch(p);
        if (plan->epochs)
            fprintf(stderr, "resuming %s after step %lld (epoch %lld of %d)\n", a->resume,
                    (long long)done, (long long)(done / spe), plan->epochs);
        else
            fprintf(stderr, "resuming %s after step %lld\n", a->resume, (long long)done);
        if (!plan->epochs && a->steps == 0) { /* the plan's steps count from the start */
            int64_t left = (int64_t)plan->steps - done;
            steps = left > 0 ? (int)left : 0;
        }
    }
    if (!steps && plan->epochs) { /* whole passes, from where a loaded run stopped */
        int64_t total = (int64_t)plan->epochs * pp_pipeline_steps_per_epoch(p) -
                        pp_pipeline_steps_done(p);
        steps = total > PP_PLAN_MAX_STEPS ? PP_PLAN_MAX_STEPS : total > 0 ? (int)total : 0;
    }
    FILE *metrics = NULL;
    if (a->metrics && !(metrics = fopen(a->metrics, "w"))) {
        fprintf(stderr, "pipeline-run: %s: cannot open for writing: %s\n", a->metrics,
                strerror(errno));
        pp_pipeline_free(p);
        return 2;
    }
    if (metrics) fputs("kind,epoch,step,batch,lr,loss,accuracy,seconds,images_per_s\n", metrics);
    FILE *human = a->json ? stderr : stdout;
    char epochs[256];
    describe_steps(plan, p, a->steps > 0, steps, epochs, sizeof epochs);
    char precision[16] = ""; /* named unless fp32 */
    if (plan->precision != PP_PLAN_PRECISION_FP32)
        snprintf(precision, sizeof precision, ", %s", pp_plan_precision_name(plan->precision));
    fprintf(stderr, "%s: %s on %d stage%s, %s%s, batch %d in %d micro-batch%s, %d step%s%s\n",
            plan->path, plan->model.name, plan->n_stages, plan->n_stages == 1 ? "" : "s",
            pp_plan_schedule_name(plan->schedule), precision, plan->batch_size, plan->micro_batches,
            plan->micro_batches == 1 ? "" : "es", steps, steps == 1 ? "" : "s", epochs);
    run_result rr = {0};
    int rc = run_steps(p, plan, steps, isatty(2), metrics, &rr, &err);
    if (metrics && fclose(metrics) != 0 && !rc) {
        fprintf(stderr, "pipeline-run: %s: write failed\n", a->metrics);
        rc = 1;
    }
    if (rc) print_error(err.msg);
    /* a consistent checkpoint: after a whole step (also when interrupted) */
    if (a->save && (rc == 0 || rr.n_losses > 0)) {
        pp_error serr;
        if (pp_pipeline_save(p, a->save, !a->weights_only, &serr) != PP_OK) {
            print_error(serr.msg);
            if (!rc) rc = serr.code == PP_ERR_INPUT ? 2 : 1;
        } else {
            fprintf(stderr, "saved %s after step %lld\n", a->save,
                    (long long)pp_pipeline_steps_done(p));
        }
    }
    if (a->trace && rr.n_losses > 0) {
        pp_error terr;
        if (pp_pipeline_write_trace(p, a->trace, &terr) != PP_OK) {
            fprintf(stderr, "pipeline-run: %s\n", terr.msg);
            if (!rc) rc = 1;
        }
    }
    if (a->plot && rr.n_epochs > 0 &&
        !pp_cli_write_training_svg(a->plot, plan->path, rr.epochs, rr.n_epochs)) {
        fprintf(stderr, "pipeline-run: cannot write %s\n", a->plot);
        if (!rc) rc = 1;
    }
    if (rr.n_losses > 0) {
        const pp_eval_result *ev = rr.evaluated ? &rr.last_eval : NULL;
        pp_cli_print_summary(human, plan, p, rr.losses, rr.n_losses, ev);
        if (a->json &&
            !pp_cli_print_json(stdout, plan, p, rr.losses, rr.n_losses, rr.epochs, rr.n_epochs, ev) &&
            !rc)
            rc = 1;
    }
    if (rr.interrupted && !rc) {
        fprintf(stderr, "pipeline-run: interrupted after %d step%s\n", rr.n_losses,
                rr.n_losses == 1 ? "" : "s");
        rc = 130;
    }
    run_result_free(&rr);
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
    if (rc && rc != 2 && pp_comm_size(g_comm) > 1) pp_comm_abort(g_comm, rc, NULL);
    pp_comm_free(g_comm);
    if (g_err) fclose(g_err);
    return rc;
}

static int run(int argc, char **argv)
{
    cli_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;

    pp_plan *plan;
    pp_diag diag;
    pp_diag_clear(&diag);
    if (pp_plan_load(a.plan, &plan, &diag) != PP_OK) {
        char buf[PP_DIAG_MAX * PP_DIAG_TEXT_MAX];
        fprintf(stderr, "%s\n", pp_diag_format(&diag, buf, sizeof buf));
        return diag.count && diag.items[0].code != PP_ERR_INPUT ? 1 : 2;
    }
    pp_error err;
    if (a.device_map && pp_plan_apply_device_map(plan, a.device_map, &err) != PP_OK) {
        pp_plan_free(plan);
        return fail(&err);
    }
    if (pp_pipeline_resolve_plan(plan, &err) != PP_OK) {
        pp_plan_free(plan);
        return fail(&err);
    }
    int steps = a.steps ? a.steps : plan->steps;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);

    if (!a.validate && !a.simulate) note_precision(plan);
    if (!a.validate && !a.simulate && (rc = check_same_plan(plan, &a, steps)) != 0) {
        pp_plan_free(plan);
        return rc;
    }
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
    if (a.validate)
        rc = do_validate(plan, a.json);
    else if (a.simulate)
        rc = do_simulate(plan, a.json);
    else if (a.eval_only)
        rc = do_eval_only(plan, &a);
    else if (a.n_sweep && pp_comm_size(g_comm) > 1)
        rc = bad_args("%s runs in one process (start it without mpirun)", "--sweep-split");
    else if (a.n_sweep)
        rc = do_sweep(plan, &a, steps ? steps : 1);
    else
        rc = do_train(plan, &a, steps);
    pp_plan_free(plan);
    return rc;
}
