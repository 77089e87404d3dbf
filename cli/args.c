/*
 * args.c - the command line of pipeline-run (args.h): the usage text, the
 * option table and the values' checks.
 */
#include "cli/args.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/version.h"

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
          "                      PNG grid (-o), run nothing; token data: the first N\n"
          "                      windows' ids and tokens, as text (-o)\n"
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
          "                      and would resume under it), run nothing; exit 0, 2 (a file\n"
          "                      failed) or 3 (each loads, but --resume would refuse one)\n"
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
          "                      stages and print it (text through the plan's tokenizer\n"
          "                      where data names one; else format text: PROMPT's bytes;\n"
          "                      tokens: token ids, e.g. \"15496 11\")\n"
          "  --tokens N          with --generate: new tokens to sample (default 200)\n"
          "  --temperature X     with --generate: sampling temperature (default 1; 0: the most\n"
          "                      likely token each time)\n"
          "  --top-k K           with --generate: sample among the K most likely (default 0:\n"
          "                      all)\n"
          "  --seed S            with --generate: the sampler's seed (default: the plan's)\n"
          "  --no-kv-cache       with --generate: no cache of keys and values (each token's\n"
          "                      forward computes the window's positions again)\n"
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
          "or --save, writes a checkpoint of the step reached first (--generate: after the\n"
          "token in hand); a second signal ends the program at once without a partial file.\n"
          "\n"
          "exit status: 0 ok, 1 runtime failure, 2 bad input, 143 stopped by SIGTERM,\n"
          "130 stopped by SIGINT, 3 (--verify with a plan) every file loads but --resume\n"
          "would refuse one\n",
          f);
}

int pp_cli_bad_args(const char *fmt, const char *what)
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
    g[PP_CLI_OPT_NO_KV_CACHE] = a->gen.no_cache;
    char msg[256];
    if (!pp_cli_options_check(g, msg, sizeof msg)) return pp_cli_bad_args("%s", msg);
    return 0;
}

int pp_cli_parse_args(int argc, char **argv, cli_args *a)
{
    enum { O_STEPS = 256, O_VALIDATE, O_JSON, O_TRACE, O_LOAD, O_SAVE, O_MAP, O_SWEEP, O_CSV,
           O_SVG, O_SIM, O_WEIGHTS, O_METRICS, O_EVAL_ONLY, O_PLOT, O_RESUME, O_LAYOUT,
           O_GRAPHS, O_GRAD_ALLREDUCE, O_MEMORY, O_OPTIMIZE, O_MEMORY_LIMIT,
           O_PRINT_SCHEDULE, O_SWEEP_SCHEDULE, O_VERIFY, O_SHOW_DATA, O_DUMP_DATA, O_GENERATE,
           O_TOKENS, O_TEMPERATURE, O_TOP_K, O_SEED, O_NO_KV_CACHE,
           O_COUNT /* not an option */ };
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
        {"no-kv-cache", no_argument, 0, O_NO_KV_CACHE},
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
                return pp_cli_bad_args("--steps: '%s' is not a positive integer", optarg);
            break;
        case O_VALIDATE: a->validate = true; break;
        case O_VERIFY: a->verify = true; break;
        case O_SHOW_DATA:
            if (!parse_int(optarg, 1, 1024, &a->show_data))
                return pp_cli_bad_args("--show-data: '%s' is not a sample count from 1 to 1024", optarg);
            break;
        case O_DUMP_DATA: {
            int k;
            const bool eval = strncmp(optarg, "eval:", 5) == 0;
            if (!parse_int(eval ? optarg + 5 : optarg, 0, PP_PLAN_MAX_STEPS, &k))
                return pp_cli_bad_args("--dump-data: '%s' is not a step (0-based) or eval:K", optarg);
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
                return pp_cli_bad_args("--memory-limit: %s", e.msg);
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
            else return pp_cli_bad_args("--layout: '%s' is not auto, nchw or nhwc", optarg);
            a->layout_given = true;
            break;
        case O_GRAPHS:
            if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                return pp_cli_bad_args("--cuda-graphs: '%s' is not on or off", optarg);
            a->graphs = strcmp(optarg, "on") ? PP_PIPELINE_GRAPHS_OFF : PP_PIPELINE_GRAPHS_ON;
            break;
        case O_GRAD_ALLREDUCE:
            if (strcmp(optarg, "buckets") != 0 && strcmp(optarg, "whole") != 0)
                return pp_cli_bad_args("--grad-allreduce: '%s' is neither buckets nor whole", optarg);
            a->grads_whole = strcmp(optarg, "whole") == 0;
            a->grads_given = true;
            break;
        case O_SWEEP: {
            char buf[512];
            if (strlen(optarg) >= sizeof buf)
                return pp_cli_bad_args("--sweep-split: the list is longer than %s characters",
                                       "511");
            snprintf(buf, sizeof buf, "%s", optarg);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (a->n_sweep == MAX_SWEEP)
                    return pp_cli_bad_args("--sweep-split: at most 64 sizes (got '%s')", optarg);
                if (!parse_int(tok, 1, PP_PLAN_MAX_BATCH, &a->sweep[a->n_sweep++]))
                    return pp_cli_bad_args("--sweep-split: '%s' is not a list of positive integers",
                                    optarg);
                for (int k = 0; k < a->n_sweep - 1; k++)
                    if (a->sweep[k] == a->sweep[a->n_sweep - 1]) /* one series folder a size */
                        return pp_cli_bad_args("--sweep-split: '%s' names a size twice", optarg);
            }
            if (a->n_sweep == 0) return pp_cli_bad_args("--sweep-split: empty list '%s'", optarg);
            break;
        }
        case O_PRINT_SCHEDULE:
            if (optarg && strcmp(optarg, "comms") != 0)
                return pp_cli_bad_args("--print-schedule: '%s' is not comms", optarg);
            a->print_schedule = optarg ? 2 : 1;
            break;
        case O_SWEEP_SCHEDULE: {
            char buf[512];
            pp_error err;
            if (strlen(optarg) >= sizeof buf)
                return pp_cli_bad_args("--sweep-schedule: the list is longer than %s characters",
                                       "511");
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
                for (int j = 0; j < a->n_sweep_kinds; j++)
                    if (a->sweep_kinds[j] == k)
                        return pp_cli_bad_args("--sweep-schedule: '%s' names a schedule twice",
                                               optarg);
                if (a->n_sweep_kinds == PP_SCHEDULE_KINDS)
                    return pp_cli_bad_args("--sweep-schedule: too many schedules in '%s'", optarg);
                a->sweep_kinds[a->n_sweep_kinds++] = k;
            }
            if (!a->n_sweep_kinds) return pp_cli_bad_args("--sweep-schedule: empty list '%s'", optarg);
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
                return pp_cli_bad_args("%s", msg);
            break;
        }
        case O_NO_KV_CACHE: a->gen.no_cache = true; break;
        case 'h': usage(stdout); exit(0);
        case 'V': printf("pipeline-run %s\n", pp_version()); exit(0);
        case ':': return pp_cli_bad_args("option %s needs a value", argv[optind - 1]);
        default: return pp_cli_bad_args("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (a->verify) { /* FILE... and at most one plan, told by its extension */
        a->files = (const char **)argv + optind;
        for (int i = optind; i < argc; i++) {
            const char *dot = strrchr(argv[i], '.');
            if (!dot || (strcmp(dot, ".yaml") != 0 && strcmp(dot, ".yml") != 0)) {
                a->files[a->n_files++] = argv[i];
            } else if (a->plan) {
                return pp_cli_bad_args("--verify: '%s' is a second plan", argv[i]);
            } else {
                a->plan = argv[i];
            }
        }
        if (a->n_files == 0) return pp_cli_bad_args("%s", "--verify needs checkpoint files");
        return check_options(a);
    }
    if (optind >= argc) return pp_cli_bad_args("%s", "missing PLAN.yaml");
    if (optind + 1 < argc) return pp_cli_bad_args("unexpected argument '%s'", argv[optind + 1]);
    a->plan = argv[optind];
    return check_options(a);
}
