/*
 * options.c - the table of which pipeline-run options go together
 * (options.h). One row per option: the kinds of run it works in, the option
 * it needs (or either of two), and one it never goes with. Checks run in this
 * order, the first refusal wins:
 *   1. two kinds of run at once (--validate --simulate): exclude each other,
 *      unless the second works in the first's kind (--sweep-schedule
 *      --simulate); the kind that comes first in k_kinds speaks;
 *   2. pairs that exclude each other in every kind (--resume, --load);
 *   3. an option outside the kinds it works in: with a kind chosen, the two
 *      exclude each other; in a training run, the option names what it needs
 *      (--csv needs --sweep-split or --sweep-schedule);
 *   4. an option without the one it needs (--weights-only needs --save).
 */
#include "cli/options.h"

#include <stdio.h>

enum {
    RUN_TRAIN = 1u << 0,
    RUN_VALIDATE = 1u << 1,
    RUN_SIMULATE = 1u << 2,
    RUN_SWEEP = 1u << 3,
    RUN_EVAL = 1u << 4,
    RUN_MEMORY = 1u << 5,
    RUN_OPTIMIZE = 1u << 6,
    RUN_PRINT_SCHEDULE = 1u << 7,
    RUN_SWEEP_SCHEDULE = 1u << 8,
    RUN_VERIFY = 1u << 9,
    RUN_SHOW_DATA = 1u << 10,
    RUN_DUMP_DATA = 1u << 11,
    RUN_GENERATE = 1u << 12,
    RUN_ALL = (1u << 13) - 1,
    /* the kinds that make a plan and describe it, run it or sweep it */
    RUN_DESCRIBE = RUN_TRAIN | RUN_VALIDATE | RUN_SIMULATE | RUN_SWEEP | RUN_EVAL | RUN_MEMORY |
                   RUN_OPTIMIZE | RUN_SWEEP_SCHEDULE,
    NONE = -1,
};

static const struct {
    const char *name;
    unsigned runs;  /* the kinds of run the option works in */
    int needs;      /* an option it needs (NONE) */
    int needs_or;   /* ... or this one instead (NONE) */
    int excludes;   /* an option it never goes with (NONE) */
    const char *needs_text; /* how a refusal names what it needs, when more than two (NULL) */
} k_opts[PP_CLI_OPT_COUNT] = {
    [PP_CLI_OPT_STEPS] = {"--steps", RUN_TRAIN | RUN_SWEEP | RUN_SWEEP_SCHEDULE, NONE, NONE,
                          NONE},
    [PP_CLI_OPT_VALIDATE] = {"--validate", RUN_VALIDATE, NONE, NONE, NONE},
    [PP_CLI_OPT_SIMULATE] = {"--simulate", RUN_SIMULATE | RUN_SWEEP_SCHEDULE, NONE, NONE, NONE},
    [PP_CLI_OPT_SWEEP] = {"--sweep-split", RUN_SWEEP, NONE, NONE, NONE},
    [PP_CLI_OPT_EVAL_ONLY] = {"--eval-only", RUN_EVAL, PP_CLI_OPT_LOAD, NONE, NONE},
    [PP_CLI_OPT_JSON] = {"--json", RUN_DESCRIBE, NONE, NONE, NONE},
    [PP_CLI_OPT_TRACE] = {"--trace", RUN_TRAIN, NONE, NONE, NONE},
    [PP_CLI_OPT_LOAD] = {"--load", RUN_TRAIN | RUN_SWEEP | RUN_EVAL | RUN_GENERATE, NONE, NONE,
                         NONE},
    [PP_CLI_OPT_SAVE] = {"--save", RUN_TRAIN, NONE, NONE, NONE},
    [PP_CLI_OPT_WEIGHTS_ONLY] = {"--weights-only", RUN_TRAIN, PP_CLI_OPT_SAVE, NONE, NONE},
    [PP_CLI_OPT_RESUME] = {"--resume", RUN_TRAIN, NONE, NONE, PP_CLI_OPT_LOAD},
    [PP_CLI_OPT_RESUME_AUTO] = {"--resume auto", RUN_TRAIN, NONE, NONE, PP_CLI_OPT_LOAD},
    [PP_CLI_OPT_DEVICE_MAP] = {"--device-map", RUN_ALL, NONE, NONE, NONE},
    [PP_CLI_OPT_GRAPHS] = {"--cuda-graphs", RUN_TRAIN | RUN_SWEEP, NONE, NONE, NONE},
    [PP_CLI_OPT_CSV] = {"--csv", RUN_SWEEP | RUN_SWEEP_SCHEDULE, PP_CLI_OPT_SWEEP,
                        PP_CLI_OPT_SWEEP_SCHEDULE, NONE},
    [PP_CLI_OPT_SVG] = {"--svg", RUN_SWEEP | RUN_SWEEP_SCHEDULE, PP_CLI_OPT_SWEEP,
                        PP_CLI_OPT_SWEEP_SCHEDULE, NONE},
    [PP_CLI_OPT_METRICS] = {"--metrics", RUN_TRAIN, NONE, NONE, NONE},
    [PP_CLI_OPT_PLOT] = {"--plot", RUN_TRAIN, NONE, NONE, NONE},
    [PP_CLI_OPT_LAYOUT] = {"--layout", RUN_TRAIN | RUN_SWEEP | RUN_EVAL | RUN_SWEEP_SCHEDULE,
                           NONE, NONE, NONE},
    [PP_CLI_OPT_GRAD_ALLREDUCE] = {"--grad-allreduce", RUN_TRAIN | RUN_SWEEP, NONE, NONE, NONE},
    [PP_CLI_OPT_MEMORY] = {"--memory", RUN_MEMORY, NONE, NONE, NONE},
    [PP_CLI_OPT_OPTIMIZE] = {"--optimize", RUN_OPTIMIZE, NONE, NONE, NONE},
    [PP_CLI_OPT_MEMORY_LIMIT] = {"--memory-limit", RUN_OPTIMIZE, PP_CLI_OPT_OPTIMIZE, NONE, NONE},
    [PP_CLI_OPT_OUTPUT] = {"-o", RUN_OPTIMIZE | RUN_SHOW_DATA | RUN_DUMP_DATA, PP_CLI_OPT_OPTIMIZE,
                           NONE, NONE, "--optimize, --show-data or --dump-data"},
    [PP_CLI_OPT_PRINT_SCHEDULE] = {"--print-schedule", RUN_PRINT_SCHEDULE, NONE, NONE, NONE},
    [PP_CLI_OPT_SWEEP_SCHEDULE] = {"--sweep-schedule", RUN_SWEEP_SCHEDULE, NONE, NONE, NONE},
    [PP_CLI_OPT_VERIFY] = {"--verify", RUN_VERIFY, NONE, NONE, NONE},
    [PP_CLI_OPT_SHOW_DATA] = {"--show-data", RUN_SHOW_DATA, NONE, NONE, NONE},
    [PP_CLI_OPT_DUMP_DATA] = {"--dump-data", RUN_DUMP_DATA, NONE, NONE, NONE},
    [PP_CLI_OPT_GENERATE] = {"--generate", RUN_GENERATE, PP_CLI_OPT_LOAD, NONE, NONE},
    [PP_CLI_OPT_TOKENS] = {"--tokens", RUN_GENERATE, PP_CLI_OPT_GENERATE, NONE, NONE},
    [PP_CLI_OPT_TEMPERATURE] = {"--temperature", RUN_GENERATE, PP_CLI_OPT_GENERATE, NONE, NONE},
    [PP_CLI_OPT_TOP_K] = {"--top-k", RUN_GENERATE, PP_CLI_OPT_GENERATE, NONE, NONE},
    [PP_CLI_OPT_SEED] = {"--seed", RUN_GENERATE, PP_CLI_OPT_GENERATE, NONE, NONE},
    [PP_CLI_OPT_NO_KV_CACHE] = {"--no-kv-cache", RUN_GENERATE, PP_CLI_OPT_GENERATE, NONE, NONE},
};

/* The options that choose the kind of run, and the kind each chooses, in the
 * order in which they speak when two are given; `alone`, where set, is how
 * the kind's refusals begin ("...: it does not combine with --steps"), else
 * a refusal says "A and B exclude each other". */
static const struct {
    pp_cli_opt opt;
    unsigned run;
    const char *alone;
} k_kinds[] = {
    {PP_CLI_OPT_VERIFY, RUN_VERIFY, "--verify checks files and runs nothing"},
    {PP_CLI_OPT_OPTIMIZE, RUN_OPTIMIZE, "--optimize runs nothing and writes a plan"},
    {PP_CLI_OPT_SHOW_DATA, RUN_SHOW_DATA, "--show-data draws samples and runs nothing"},
    {PP_CLI_OPT_DUMP_DATA, RUN_DUMP_DATA, "--dump-data writes a batch and runs nothing"},
    {PP_CLI_OPT_PRINT_SCHEDULE, RUN_PRINT_SCHEDULE, "--print-schedule runs alone"},
    {PP_CLI_OPT_SWEEP_SCHEDULE, RUN_SWEEP_SCHEDULE, "--sweep-schedule runs alone or with "
                                                    "--simulate"},
    {PP_CLI_OPT_VALIDATE, RUN_VALIDATE, NULL},
    {PP_CLI_OPT_SIMULATE, RUN_SIMULATE, NULL},
    {PP_CLI_OPT_MEMORY, RUN_MEMORY, NULL},
    {PP_CLI_OPT_SWEEP, RUN_SWEEP, NULL},
    {PP_CLI_OPT_EVAL_ONLY, RUN_EVAL, NULL},
    {PP_CLI_OPT_GENERATE, RUN_GENERATE, NULL},
};
#define N_KINDS (int)(sizeof k_kinds / sizeof k_kinds[0])

const char *pp_cli_opt_name(pp_cli_opt o)
{
    return o >= 0 && o < PP_CLI_OPT_COUNT ? k_opts[o].name : "?";
}

static bool refuse(char *msg, size_t n, const char *fmt, const char *a, const char *b)
{
    snprintf(msg, n, fmt, a, b);
    return false;
}

/* Kind k refuses option o; first: name the kind first in "A and B". */
static bool refuse_kind(char *msg, size_t n, int k, int o, bool first)
{
    const char *kind = k_opts[k_kinds[k].opt].name, *other = k_opts[o].name;
    if (k_kinds[k].alone)
        return refuse(msg, n, "%s: it does not combine with %s", k_kinds[k].alone, other);
    return refuse(msg, n, "%s and %s exclude each other", first ? kind : other,
                  first ? other : kind);
}

/* "--csv needs --sweep-split or --sweep-schedule" */
static bool refuse_needs(char *msg, size_t n, int o)
{
    if (k_opts[o].needs_text) return refuse(msg, n, "%s needs %s", k_opts[o].name,
                                            k_opts[o].needs_text);
    if (k_opts[o].needs_or == NONE)
        return refuse(msg, n, "%s needs %s", k_opts[o].name, k_opts[k_opts[o].needs].name);
    snprintf(msg, n, "%s needs %s or %s", k_opts[o].name, k_opts[k_opts[o].needs].name,
             k_opts[k_opts[o].needs_or].name);
    return false;
}

static bool is_kind(int o)
{
    for (int k = 0; k < N_KINDS; k++)
        if ((int)k_kinds[k].opt == o) return true;
    return false;
}

bool pp_cli_options_check(const bool given[PP_CLI_OPT_COUNT], char *msg, size_t n)
{
    /* 1. the kind of run */
    int kind = -1;
    for (int k = 0; k < N_KINDS; k++) {
        if (!given[k_kinds[k].opt]) continue;
        if (kind < 0) {
            kind = k;
            continue;
        }
        if (!(k_opts[k_kinds[k].opt].runs & k_kinds[kind].run))
            return refuse_kind(msg, n, kind, k_kinds[k].opt, true);
    }
    unsigned run = kind >= 0 ? k_kinds[kind].run : RUN_TRAIN;
    /* 2. pairs that never go together */
    for (int o = 0; o < PP_CLI_OPT_COUNT; o++)
        if (given[o] && k_opts[o].excludes != NONE && given[k_opts[o].excludes])
            return refuse(msg, n, "%s and %s exclude each other", k_opts[o].name,
                          k_opts[k_opts[o].excludes].name);
    /* 3. each option in the kind of run chosen */
    for (int o = 0; o < PP_CLI_OPT_COUNT; o++) {
        if (!given[o] || (k_opts[o].runs & run)) continue;
        if (kind >= 0) return refuse_kind(msg, n, kind, o, false);
        if (k_opts[o].needs == NONE)
            return refuse(msg, n, "%s%s does not apply to training runs", k_opts[o].name, "");
        return refuse_needs(msg, n, o);
    }
    /* 4. what an option needs (an option that works in the kind chosen needs
     * no other kind: -o with --show-data) */
    for (int o = 0; o < PP_CLI_OPT_COUNT; o++)
        if (given[o] && k_opts[o].needs != NONE && !given[k_opts[o].needs] &&
            !(kind >= 0 && is_kind(k_opts[o].needs)) &&
            (k_opts[o].needs_or == NONE || !given[k_opts[o].needs_or]))
            return refuse_needs(msg, n, o);
    return true;
}

bool pp_cli_options_check_plan(const bool given[PP_CLI_OPT_COUNT], const pp_plan *plan,
                               char *msg, size_t n)
{
    if (given[PP_CLI_OPT_PLOT] && plan->epochs == 0) {
        const pp_mark *at = &plan->steps_mark;
        if (at->line > 0)
            snprintf(msg, n, "%s:%d:%d: --plot draws one point per epoch, and the plan gives "
                     "steps, not epochs (leave --plot out, or give epochs)", plan->path,
                     at->line, at->col);
        else
            snprintf(msg, n, "%s: --plot draws one point per epoch, and the plan gives no "
                     "epochs (leave --plot out, or give epochs)", plan->path);
        return false;
    }
    if (given[PP_CLI_OPT_GENERATE] && plan->model.kind != PP_MODEL_GPT2) {
        snprintf(msg, n, "%s: --generate continues text with a language model, and the plan's "
                 "model is %s (use model gpt2)", plan->path, plan->model.name);
        return false;
    }
    if (given[PP_CLI_OPT_GRAD_ALLREDUCE] && plan->replicas < 2) {
        snprintf(msg, n, "%s: --grad-allreduce chooses how replicas sum their gradients, and "
                 "the plan has no replicas (leave --grad-allreduce out, or give replicas)",
                 plan->path);
        return false;
    }
    return true;
}
