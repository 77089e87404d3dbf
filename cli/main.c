/*
 * main.c - the pipeline-run command-line program (docs/ARCHITECTURE.md
 * section 3.6): the arguments, the mode they ask for, the pipeline of a
 * training run and the exit code. The training loop is run.c's (run.h).
 *
 * Exit codes: 0 success; 2 bad input (plan, arguments, data or checkpoint
 * files) with "FILE:LINE:COL: message"; 1 runtime failure; 143 / 130 when
 * stopped by SIGTERM / SIGINT (after the step in flight, having saved the
 * series' checkpoint and --save's: signals.h, series.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/version.h"
#include "partitioner/emit.h"
#include "partitioner/plan.h"
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

#define MAX_SWEEP 64

typedef struct cli_args {
    const char *plan;
    int steps;            /* 0: the plan's */
    bool validate, json, simulate, weights_only, eval_only, memory, optimize, verify;
    int64_t memory_limit; /* --memory-limit (bytes), 0: none */
    const char *output;   /* -o: where --optimize writes the best plan, --show-data its
                             picture, --dump-data its tensors */
    int show_data;        /* --show-data N */
    const char *dump_data; /* --dump-data STEP or eval:K */
    const char **files;   /* --verify: the checkpoint files (argv's) */
    int n_files;
    int graphs;        /* pp_pipeline_graphs: --cuda-graphs (PLAN when not given) */
    bool grads_whole;     /* --grad-allreduce whole */
    bool grads_given, layout_given;
    const char *trace, *load, *save, *device_map, *csv, *svg, *metrics, *plot, *resume;
    pp_pipeline_layout layout; /* --layout */
    int sweep[MAX_SWEEP];
    int n_sweep;
    int print_schedule;   /* --print-schedule: 1, =comms: 2 */
    pp_schedule_kind sweep_kinds[PP_SCHEDULE_KINDS];
    int n_sweep_kinds;    /* --sweep-schedule */
    pp_cli_generate_args gen; /* --generate and its options (prompt NULL: none) */
    bool given[PP_CLI_OPT_COUNT]; /* which options the command line gave (options.h) */
} cli_args;

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

static void usage(FILE *f)
{
    fputs("usage: pipeline-run PLAN.yaml [options]\n"
          "       pipeline-run --verify FILE... [PLAN.yaml]\n"
          "\n"
          "Trains the network a partition plan describes, split into pipeline stages.\n"
          "\n"
          "options:\n"
          "  --steps N           override the plan's step count\n"
          "  --validate          check the plan and its data, print it resolved (YAML), run\n"
          "                      nothing\n"
          "  --simulate          predict step time and bubble from the cost model, run nothing\n"
          "  --memory            predict each stage's peak memory beside its device's cap, run\n"
          "                      nothing (exit 2 when a device would not fit)\n"
          "  --optimize          search cuts, schedule, split size and recomputation for the\n"
          "                      fastest plan that fits (unit times measured and cached), print\n"
          "                      the best candidates and write the best plan (stdout, or -o)\n"
          "  --memory-limit SIZE with --optimize: the most a device may hold (e.g. 12GiB)\n"
          "  -o FILE             with --optimize: write the best plan to FILE; with\n"
          "                      --show-data or --dump-data: the file to write\n"
          "  --show-data N       draw the first N training samples as the model gets them\n"
          "                      (after the transforms), captioned with class and file, as a\n"
          "                      PNG grid (-o), run nothing (image data only)\n"
          "  --dump-data STEP|eval:K  write training step STEP's inputs (0-based), or the K-th\n"
          "                      evaluation batch's, as safetensors (-o): images, labels and\n"
          "                      each sample's file (token data: inputs, targets and each\n"
          "                      window's position); run nothing\n"
          "  --print-schedule[=comms]  print the plan's schedule program (CSV in the grammar of\n"
          "                      torch.distributed.pipelining; =comms: with sends and receives)\n"
          "  --json              print one JSON summary on stdout (human output goes to stderr)\n"
          "  --trace FILE        write a Chrome trace (open in Perfetto or chrome://tracing)\n"
          "  --load FILE         start from a safetensors checkpoint (torchvision names)\n"
          "  --save FILE         write a safetensors checkpoint at the end (also when stopped\n"
          "                      by SIGTERM or Ctrl-C)\n"
          "  --weights-only      with --save: leave the optimizer state out of the file\n"
          "  --resume FILE       continue a run from its checkpoint (epoch, step, optimizer,\n"
          "                      learning-rate schedule and data order); refused when the\n"
          "                      plan changes what a step means (batch, data, model, seed)\n"
          "  --resume auto       from the newest checkpoint of the plan's checkpoint: series\n"
          "                      (or --save's file) that verifies; a fresh start when none\n"
          "  --verify FILE...    check checkpoint files (header, offsets, checksums, finite\n"
          "                      values; with a PLAN.yaml also that it loads into its model\n"
          "                      and would resume under it), run nothing; exit 0 or 2\n"
          "  --device-map MAP    remap devices, e.g. cuda:1=cuda:0 or cuda=cpu\n"
          "  --cuda-graphs on|off  replay each CUDA training step as graphs after the first\n"
          "                      (default: the plan's cuda_graphs, or PP_CUDA_GRAPHS, else on)\n"
          "  --sweep-split LIST  run once per split size (e.g. 1,2,4,8) and print a table\n"
          "  --sweep-schedule LIST  run each schedule on the plan (e.g. gpipe,1f1b,zbh1,zbv;\n"
          "                      with --simulate: predict each) and print a table\n"
          "  --csv FILE          with a sweep: write the table as CSV\n"
          "  --svg FILE          with a sweep: write it as a chart\n"
          "  --metrics FILE      write a CSV row per step and per evaluation\n"
          "  --plot FILE         with epochs: an SVG of loss and test accuracy per epoch\n"
          "  --eval-only         with --load: evaluate the checkpoint on the plan's eval data\n"
          "  --generate PROMPT   with --load: continue PROMPT with the plan's GPT-2 through its\n"
          "                      stages and print it (format text: PROMPT's bytes; tokens:\n"
          "                      token ids, e.g. \"15496 11\")\n"
          "  --tokens N          with --generate: new tokens to sample (default 200)\n"
          "  --temperature X     with --generate: sampling temperature (default 1; 0: the most\n"
          "                      likely token each time)\n"
          "  --top-k K           with --generate: sample among the K most likely (default 0:\n"
          "                      all)\n"
          "  --seed S            with --generate: the sampler's seed (default: the plan's)\n"
          "  --layout L          activations' memory order: auto (NHWC where a device runs\n"
          "                      faster so: CUDA in bf16), nchw or nhwc; results do not change\n"
          "  --grad-allreduce M  replicas: buckets (default: each stage's gradients summed\n"
          "                      over its replicas as soon as its backward is done) or whole\n"
          "                      (every gradient in one sum after the whole backward)\n"
          "  -h, --help          show this help\n"
          "  -V, --version       show the version\n"
          "\n"
          "Options that do not go together are refused, naming both (docs/CLI.md).\n"
          "\n"
          "SIGTERM or SIGINT stops after the step in flight and, with a checkpoint: section\n"
          "or --save, writes a checkpoint of the step reached first; a second signal ends\n"
          "the program at once without a partial file.\n"
          "\n"
          "exit status: 0 ok, 1 runtime failure, 2 bad input, 143 stopped by SIGTERM,\n"
          "130 stopped by SIGINT\n",
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

/* Records which options were given (a->given) and checks them against the
 * table of which go together (options.h). Returns 0 or 2. */
static int check_options(cli_args *a)
{
    bool *g = a->given;
    const bool resume_auto = a->resume && strcmp(a->resume, "auto") == 0;
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
    g[PP_CLI_OPT_RESUME] = a->resume != NULL && !resume_auto;
    g[PP_CLI_OPT_RESUME_AUTO] = resume_auto;
    g[PP_CLI_OPT_DEVICE_MAP] = a->device_map != NULL;
    g[PP_CLI_OPT_GRAPHS] = a->graphs != 0;
    g[PP_CLI_OPT_CSV] = a->csv != NULL;
    g[PP_CLI_OPT_SVG] = a->svg != NULL;
    g[PP_CLI_OPT_METRICS] = a->metrics != NULL;
    g[PP_CLI_OPT_PLOT] = a->plot != NULL;
    g[PP_CLI_OPT_LAYOUT] = a->layout_given;
    g[PP_CLI_OPT_GRAD_ALLREDUCE] = a->grads_given;
    g[PP_CLI_OPT_MEMORY] = a->memory;
    g[PP_CLI_OPT_OPTIMIZE] = a->optimize;
    g[PP_CLI_OPT_MEMORY_LIMIT] = a->memory_limit != 0;
    g[PP_CLI_OPT_OUTPUT] = a->output != NULL;
    g[PP_CLI_OPT_PRINT_SCHEDULE] = a->print_schedule != 0;
    g[PP_CLI_OPT_SWEEP_SCHEDULE] = a->n_sweep_kinds > 0;
    g[PP_CLI_OPT_VERIFY] = a->verify;
    g[PP_CLI_OPT_SHOW_DATA] = a->show_data > 0;
    g[PP_CLI_OPT_DUMP_DATA] = a->dump_data != NULL;
    g[PP_CLI_OPT_GENERATE] = a->gen.prompt != NULL;
    g[PP_CLI_OPT_TOKENS] = a->gen.tokens_given;
    g[PP_CLI_OPT_TEMPERATURE] = a->gen.temperature_given;
    g[PP_CLI_OPT_TOP_K] = a->gen.top_k_given;
    g[PP_CLI_OPT_SEED] = a->gen.seed_given;
    char msg[256];
    if (!pp_cli_options_check(g, msg, sizeof msg)) return bad_args("%s", msg);
    return 0;
}

static int parse_args(int argc, char **argv, cli_args *a)
{
    enum { O_STEPS = 256, O_VALIDATE, O_JSON, O_TRACE, O_LOAD, O_SAVE, O_MAP, O_SWEEP, O_CSV,
           O_SVG, O_SIM, O_WEIGHTS, O_METRICS, O_EVAL_ONLY, O_PLOT, O_RESUME, O_LAYOUT,
           O_GRAPHS, O_GRAD_ALLREDUCE, O_MEMORY, O_OPTIMIZE, O_MEMORY_LIMIT,
           O_PRINT_SCHEDULE, O_SWEEP_SCHEDULE, O_VERIFY, O_SHOW_DATA, O_DUMP_DATA, O_GENERATE,
           O_TOKENS, O_TEMPERATURE, O_TOP_K, O_SEED, O_COUNT /* not an option */ };
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
        {"memory", no_argument, 0, O_MEMORY},
        {"optimize", no_argument, 0, O_OPTIMIZE},
        {"memory-limit", required_argument, 0, O_MEMORY_LIMIT},
        {"metrics", required_argument, 0, O_METRICS},
        {"eval-only", no_argument, 0, O_EVAL_ONLY},
        {"plot", required_argument, 0, O_PLOT},
        {"resume", required_argument, 0, O_RESUME},
        {"layout", required_argument, 0, O_LAYOUT},
        {"cuda-graphs", required_argument, 0, O_GRAPHS},
        {"generate", required_argument, 0, O_GENERATE},
        {"tokens", required_argument, 0, O_TOKENS},
        {"temperature", required_argument, 0, O_TEMPERATURE},
        {"top-k", required_argument, 0, O_TOP_K},
        {"seed", required_argument, 0, O_SEED},
        {"grad-allreduce", required_argument, 0, O_GRAD_ALLREDUCE},
        {"print-schedule", optional_argument, 0, O_PRINT_SCHEDULE},
        {"sweep-schedule", required_argument, 0, O_SWEEP_SCHEDULE},
        {"verify", no_argument, 0, O_VERIFY},
        {"show-data", required_argument, 0, O_SHOW_DATA},
        {"dump-data", required_argument, 0, O_DUMP_DATA},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0},
    };
    memset(a, 0, sizeof *a);
    opterr = 0;
    int c, index;
    const char *given[O_COUNT] = {0}; /* each option's first value ("" without one) */
    while ((index = -1, c = getopt_long(argc, argv, ":hVo:", opts, &index)) != -1) {
        /* nothing is silently ignored: an option given twice is refused */
        if (c >= 0 && c < O_COUNT && (index >= 0 || c == 'o')) {
            const char *name = c == 'o' ? "o" : opts[index].name, *dash = c == 'o' ? "-" : "--";
            if (given[c] && (given[c][0] || optarg))
                fprintf(stderr, "pipeline-run: %s%s given twice ('%s', then '%s'): give it "
                        "once\n(see pipeline-run --help)\n", dash, name, given[c],
                        optarg ? optarg : "");
            else if (given[c])
                fprintf(stderr, "pipeline-run: %s%s given twice: give it once\n(see "
                        "pipeline-run --help)\n", dash, name);
            if (given[c]) return 2;
            given[c] = optarg ? optarg : "";
        }
        switch (c) {
        case O_STEPS:
            if (!parse_int(optarg, 1, PP_PLAN_MAX_STEPS, &a->steps))
                return bad_args("--steps: '%s' is not a positive integer", optarg);
            break;
        case O_VALIDATE: a->validate = true; break;
        case O_VERIFY: a->verify = true; break;
        case O_SHOW_DATA:
            if (!parse_int(optarg, 1, 1024, &a->show_data))
                return bad_args("--show-data: '%s' is not a sample count from 1 to 1024", optarg);
            break;
        case O_DUMP_DATA: {
            int k;
            const bool eval = strncmp(optarg, "eval:", 5) == 0;
            if (!parse_int(eval ? optarg + 5 : optarg, 0, PP_PLAN_MAX_STEPS, &k))
                return bad_args("--dump-data: '%s' is not a step (0-based) or eval:K", optarg);
            a->dump_data = optarg;
            break;
        }
        case O_JSON: a->json = true; break;
        case O_SIM: a->simulate = true; break;
        case O_MEMORY: a->memory = true; break;
        case O_OPTIMIZE: a->optimize = true; break;
        case 'o': a->output = optarg; break;
        case O_MEMORY_LIMIT: {
            pp_error e;
            if (pp_plan_parse_bytes(optarg, &a->memory_limit, &e) != PP_OK)
                return bad_args("--memory-limit: %s", e.msg);
            break;
        }
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
        case O_PRINT_SCHEDULE:
            if (optarg && strcmp(optarg, "comms") != 0)
                return bad_args("--print-schedule: '%s' is not comms", optarg);
            a->print_schedule = optarg ? 2 : 1;
            break;
        case O_SWEEP_SCHEDULE: {
            char buf[512];
            pp_error err;
            snprintf(buf, sizeof buf, "%s", optarg);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                pp_schedule_kind k;
                if (pp_schedule_kind_parse(tok, &k, &err) != PP_OK || k == PP_SCHEDULE_FORWARD) {
                    /* the training schedules (forward runs no backward: nothing to train) */
                    char list[256] = "";
                    size_t len = 0;
                    for (int t = 0; t < PP_SCHEDULE_KINDS; t++)
                        if (t != PP_SCHEDULE_FORWARD && len < sizeof list)
                            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                                    len ? ", " : "",
                                                    pp_schedule_kind_name((pp_schedule_kind)t));
                    fprintf(stderr, "pipeline-run: --sweep-schedule: '%s' is not a training "
                            "schedule: expected one of %s\n(see pipeline-run --help)\n", tok,
                            list);
                    return 2;
                }
                if (a->n_sweep_kinds == PP_SCHEDULE_KINDS)
                    return bad_args("--sweep-schedule: too many schedules in '%s'", optarg);
                a->sweep_kinds[a->n_sweep_kinds++] = k;
            }
            if (!a->n_sweep_kinds) return bad_args("--sweep-schedule: empty list '%s'", optarg);
            break;
        }
        case O_GENERATE:
        case O_TOKENS:
        case O_TEMPERATURE:
        case O_TOP_K:
        case O_SEED: {
            static const char *const names[] = {"--generate", "--tokens", "--temperature",
                                                "--top-k", "--seed"};
            char msg[160];
            if (!pp_cli_generate_option(&a->gen, names[c - O_GENERATE], optarg, msg, sizeof msg))
                return bad_args("%s", msg);
            break;
        }
        case 'h': usage(stdout); exit(0);
        case 'V': printf("pipeline-run %s\n", pp_version()); exit(0);
        case ':': return bad_args("option %s needs a value", argv[optind - 1]);
        default: return bad_args("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (a->verify) { /* FILE... and at most one plan, told by its extension */
        a->files = (const char **)argv + optind;
        for (int i = optind; i < argc; i++) {
            const char *dot = strrchr(argv[i], '.');
            if (!dot || (strcmp(dot, ".yaml") != 0 && strcmp(dot, ".yml") != 0)) {
                a->files[a->n_files++] = argv[i];
            } else if (a->plan) {
                return bad_args("--verify: '%s' is a second plan", argv[i]);
            } else {
                a->plan = argv[i];
            }
        }
        if (a->n_files == 0) return bad_args("%s", "--verify needs checkpoint files");
        return check_options(a);
    }
    if (optind >= argc) return bad_args("%s", "missing PLAN.yaml");
    if (optind + 1 < argc) return bad_args("unexpected argument '%s'", argv[optind + 1]);
    a->plan = argv[optind];
    return check_options(a);
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
        return bad_args("%s runs in one process (start it without mpirun)", "--optimize");
    pp_error err;
    int rc = pp_cli_optimize(plan, a->memory_limit, a->output, a->json, &err);
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
        if (plan->epochs)
            fprintf(stderr, "resuming %s after step %lld (epoch %lld of %d)\n", start.from,
                    (long long)done, (long long)(done / spe), plan->epochs);
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
    if (rr.save_failures && !rr.abandoned) { /* the run went on: say so once more */
        fprintf(stderr, "pipeline-run: %d checkpoint%s of the series could not be written "
                "(the first after step %lld); training went on\n", rr.save_failures,
                rr.save_failures == 1 ? "" : "s", (long long)rr.first_failed_save);
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
        return bad_args("%s runs in one process (start it without mpirun)", opt);
    if (!a->output)
        return bad_args(a->show_data ? "%s needs -o FILE (the PNG to write)"
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
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    if (a.verify && pp_comm_size(g_comm) > 1)
        return bad_args("%s runs in one process (start it without mpirun)", "--verify");
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

    pp_cli_signals_install();

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
                 ? bad_args("%s runs in one process (start it without mpirun)", "--sweep-schedule")
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
        rc = bad_args("%s runs in one process (start it without mpirun)", "--sweep-split");
    else if (a.n_sweep)
        rc = do_sweep(plan, &a, steps ? steps : 1);
    else
        rc = do_train(plan, &a, steps);
    pp_plan_free(plan);
    return rc;
}
