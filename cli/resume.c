/* resume.c - --resume auto, the plan check of a resumed checkpoint, epoch sums (resume.h). */
#include "cli/resume.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/series.h"
#include "runtime/train/optimizer.h"

#define PLAN_PREFIX "pipeline-run.plan."
#define RUN_PREFIX "pipeline-run.run."

static const char *const sum_keys[3] = {"pipeline-run.epoch.correct_sum",
                                        "pipeline-run.epoch.loss_sum",
                                        "pipeline-run.epoch.samples"};

size_t pp_cli_epoch_sums_meta(const pp_cli_epoch_sums *s, pp_checkpoint_meta meta[3],
                              char bufs[3][40])
{
    if (s->samples <= 0) return 0;
    snprintf(bufs[0], 40, "%.17g", s->correct_sum);
    snprintf(bufs[1], 40, "%.17g", s->loss_sum);
    snprintf(bufs[2], 40, "%lld", (long long)s->samples);
    for (int i = 0; i < 3; i++) meta[i] = (pp_checkpoint_meta){sum_keys[i], bufs[i]};
    return 3;
}

void pp_cli_epoch_sums_read(const pp_checkpoint_info *info, pp_cli_epoch_sums *s)
{
    memset(s, 0, sizeof *s);
    const char *c = pp_checkpoint_info_meta(info, sum_keys[0]);
    const char *l = pp_checkpoint_info_meta(info, sum_keys[1]);
    const char *n = pp_checkpoint_info_meta(info, sum_keys[2]);
    if (!c || !l || !n) return;
    s->correct_sum = strtod(c, NULL);
    s->loss_sum = strtod(l, NULL);
    s->samples = atoll(n);
}

bool pp_cli_has_optimizer_state(const pp_plan *plan, const pp_checkpoint_info *info)
{
    const char *prefix = pp_plan_optimizer_state_prefix(plan);
    if (!prefix) return true; /* the plan's optimizer keeps none */
    size_t k = strlen(prefix);
    for (size_t i = 0; i < info->n; i++)
        if (strncmp(info->entries[i].name, prefix, k) == 0) return true;
    return false;
}

const char *pp_cli_optimizer_state_held(const pp_checkpoint_info *info)
{
    static const struct {
        const char *prefix, *words;
    } kinds[] = {{PP_OPTIMIZER_EXP_AVG_PREFIX, "AdamW state"},
                 {PP_OPTIMIZER_MOMENTUM_PREFIX, "SGD momentum"}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t i = 0; i < info->n; i++)
            if (strncmp(info->entries[i].name, kinds[k].prefix, strlen(kinds[k].prefix)) == 0)
                return kinds[k].words;
    return "no optimizer state";
}

const char *pp_cli_optimizer_state_needed(const pp_plan *plan)
{
    const char *prefix = pp_plan_optimizer_state_prefix(plan);
    if (!prefix) return NULL;
    return strcmp(prefix, PP_OPTIMIZER_EXP_AVG_PREFIX) == 0 ? "AdamW state" : "SGD momentum";
}

/* Why a file without the state of the plan's optimizer cannot be resumed,
 * on f; held: the state it holds (pp_cli_optimizer_state_held). */
static void say_no_state(FILE *f, const pp_plan *plan, const char *held)
{
    const bool none = strcmp(held, "no optimizer state") == 0;
    fprintf(f, "no %s, which %s's optimizer resumes from (the file holds %s%s)",
            pp_cli_optimizer_state_needed(plan), plan->path, held,
            none ? ": saved with --weights-only?" : "");
}

/* The keys of k that differ from what info records under prefix (and the
 * keys under prefix only info has): printed on f (may be NULL) after a line
 * naming path and the plan once (*said); returns how many. */
static int differences(const pp_plan_step_keys *k, const char *prefix,
                       const pp_checkpoint_info *info, const char *path, const pp_plan *plan,
                       const char *header, FILE *f, bool *said, char *first, size_t n_first)
{
    const size_t plen = strlen(prefix);
    int differ = 0;
    for (int pass = 0; pass < 2; pass++) { /* the plan's keys, then keys only the file has */
        size_t count = pass == 0 ? (size_t)k->n : info->n_meta;
        for (size_t i = 0; i < count; i++) {
            const char *key, *mine, *theirs;
            char full[128];
            if (pass == 0) {
                key = k->keys[i];
                mine = k->values[i];
                snprintf(full, sizeof full, "%s%s", prefix, key);
                theirs = pp_checkpoint_info_meta(info, full);
            } else {
                if (strncmp(info->meta[i].key, prefix, plen) != 0) continue;
                key = info->meta[i].key + plen;
                bool known = false;
                for (int j = 0; j < k->n && !known; j++) known = strcmp(k->keys[j], key) == 0;
                if (known) continue;
                mine = NULL;
                theirs = info->meta[i].value;
            }
            if (mine && theirs && strcmp(mine, theirs) == 0) continue;
            if (!differ++ && first && !first[0]) snprintf(first, n_first, "%s", key);
            if (!f) continue;
            if (!*said) fprintf(f, header, path, plan->path);
            *said = true;
            fprintf(f, "  %s: %s in the checkpoint, %s in the plan\n", key,
                    theirs ? theirs : "(none)", mine ? mine : "(none)");
        }
    }
    return differ;
}

/* Whether info records keys under prefix. */
static bool records(const pp_checkpoint_info *info, const char *prefix)
{
    for (size_t i = 0; i < info->n_meta; i++)
        if (strncmp(info->meta[i].key, prefix, strlen(prefix)) == 0) return true;
    return false;
}

bool pp_cli_plan_matches(const pp_plan *plan, const pp_checkpoint_info *info, const char *path,
                         FILE *f, bool *checked)
{
    const bool recorded = records(info, PLAN_PREFIX);
    if (checked) *checked = recorded;
    if (!recorded) return true;
    pp_plan_step_keys k;
    pp_error err;
    if (pp_plan_step_keys_get(plan, &k, &err) != PP_OK) {
        fprintf(f, "pipeline-run: %s\n", err.msg);
        return false;
    }
    bool said = false;
    int differ = differences(&k, PLAN_PREFIX, info, path, plan,
                             "pipeline-run: %s was written by a run whose steps mean something "
                             "else under %s:\n",
                             f, &said, NULL, 0);
    if (differ)
        fprintf(f, "(--resume continues a run under the plan it ran with; --load reads the "
                   "same weights, optimizer state and step under any plan, without this "
                   "check)\n");
    pp_plan_step_keys_free(&k);
    return differ == 0;
}

/* Whether the file (info) belongs to this plan's run: its steps mean the
 * same and its parameters moved alike (pp_plan_run_keys; a file recording
 * none is taken as this run's). Differences go to f (may be NULL); the
 * first differing key to first (n_first bytes; may be NULL). */
static bool same_run(const pp_plan *plan, const pp_checkpoint_info *info, const char *path,
                     FILE *f, char *first, size_t n_first)
{
    pp_plan_step_keys k, rk;
    pp_error err;
    if (pp_plan_step_keys_get(plan, &k, &err) != PP_OK) return false;
    if (pp_plan_run_keys_get(plan, &rk, &err) != PP_OK) {
        pp_plan_step_keys_free(&k);
        return false;
    }
    const char *header = "pipeline-run: %s was written by another run than %s's:\n";
    bool said = false;
    int differ = records(info, PLAN_PREFIX)
                     ? differences(&k, PLAN_PREFIX, info, path, plan, header, f, &said, first,
                                   n_first)
                     : 0;
    if (records(info, RUN_PREFIX))
        differ += differences(&rk, RUN_PREFIX, info, path, plan, header, f, &said, first,
                              n_first);
    pp_plan_step_keys_free(&k);
    pp_plan_step_keys_free(&rk);
    return differ == 0;
}

bool pp_cli_resume_auto(const pp_plan *plan, const char *save_path, char **chosen,
                        char **other, FILE *log)
{
    *chosen = NULL;
    *other = NULL;
    pp_cli_ckpt_file *files;
    int n;
    if (!pp_cli_series_scan(plan, &files, &n)) return false;
    struct stat st;
    if (save_path && stat(save_path, &st) == 0 && S_ISREG(st.st_mode)) {
        bool listed = false;
        for (int i = 0; i < n && !listed; i++) listed = strcmp(files[i].path, save_path) == 0;
        pp_cli_ckpt_file *grown = listed ? files : realloc(files, (size_t)(n + 1) * sizeof *grown);
        char *copy = listed ? NULL : strdup(save_path);
        if (!listed && (!grown || !copy)) {
            free(copy);
            pp_cli_ckpt_files_free(grown ? grown : files, n);
            return false;
        }
        files = grown;
        if (!listed) {
            pp_checkpoint_info info;
            pp_error err;
            int64_t steps = -1;
            if (pp_checkpoint_list(copy, &info, &err) == PP_OK) {
                const char *v = pp_checkpoint_info_meta(&info, "pipeline-run.steps");
                steps = v ? atoll(v) : 0;
                pp_checkpoint_info_free(&info);
            }
            /* in the series' order by steps (a file recording none counts as step 0,
             * an unreadable one as -1): after every file of its step or before */
            int at = n;
            while (at > 0 && files[at - 1].steps > steps) at--;
            memmove(&files[at + 1], &files[at], (size_t)(n - at) * sizeof *files);
            files[at] = (pp_cli_ckpt_file){copy, steps};
            n++;
        }
    }
    /* newest first, by recorded steps (of one step, --save's file first);
     * unreadable ones are reported as skipped, and so are those another run
     * wrote (under the same names) */
    bool ok = true;
    for (int i = n - 1; i >= 0 && !*chosen && ok; i--) {
        pp_error err;
        pp_checkpoint_verify_result r;
        if (pp_checkpoint_verify(files[i].path, &r, &err) != PP_OK) {
            fprintf(log, "pipeline-run: warning: --resume auto skips %s: %s\n", files[i].path,
                    err.msg);
            continue;
        }
        pp_checkpoint_info info;
        bool opt = false, mine = true;
        char key[64] = "";
        const char *held = "no optimizer state"; /* a static string: outlives info */
        if (pp_checkpoint_list(files[i].path, &info, &err) == PP_OK) {
            opt = pp_cli_has_optimizer_state(plan, &info);
            held = pp_cli_optimizer_state_held(&info);
            mine = same_run(plan, &info, files[i].path, NULL, key, sizeof key);
            if (!mine && !*other) {
                *other = strdup(files[i].path);
                ok = *other != NULL;
            }
            pp_checkpoint_info_free(&info);
        }
        if (!mine) {
            fprintf(log, "pipeline-run: warning: --resume auto skips %s: written by another "
                         "run (its %s differs from the plan's)\n", files[i].path, key);
            continue;
        }
        if (!opt) {
            fprintf(log, "pipeline-run: warning: --resume auto skips %s: ", files[i].path);
            say_no_state(log, plan, held);
            fputc('\n', log);
            continue;
        }
        *chosen = strdup(files[i].path);
        ok = *chosen != NULL;
    }
    pp_cli_ckpt_files_free(files, n);
    return ok;
}

/* Rank 0's decision, as every rank gets it. */
typedef struct decision {
    int32_t code;     /* exit status: 0 go on */
    char from[4096];  /* "" fresh */
} decision;

static void decide(const pp_plan *plan, const char *resume, const char *save_path, decision *d)
{
    if (plan->checkpoint.enabled || save_path) pp_cli_clean_temporaries(plan, save_path, stderr);
    if (!resume) {
        pp_cli_ckpt_file *files;
        int n;
        if (pp_cli_series_scan(plan, &files, &n) && n > 0 && files[n - 1].steps > 0)
            fprintf(stderr, "pipeline-run: warning: %d checkpoint file%s of an earlier run "
                            "match checkpoint.path (newest: %s, step %lld); this run starts "
                            "from step 0 and replaces them as it reaches their steps "
                            "(--resume auto would continue from the newest)\n",
                    n, n == 1 ? "" : "s", files[n - 1].path, (long long)files[n - 1].steps);
        pp_cli_ckpt_files_free(files, n);
        return;
    }
    char *chosen = NULL;
    if (strcmp(resume, "auto") == 0) {
        if (!plan->checkpoint.enabled && !save_path) {
            fprintf(stderr, "pipeline-run: --resume auto needs a checkpoint: section in %s or "
                            "--save FILE (where to look)\n", plan->path);
            d->code = 2;
            return;
        }
        char *other = NULL;
        if (!pp_cli_resume_auto(plan, save_path, &chosen, &other, stderr)) {
            fprintf(stderr, "pipeline-run: out of host memory\n");
            free(other);
            d->code = 1;
            return;
        }
        if (!chosen && other) { /* only another run's files: refuse, naming the difference */
            pp_checkpoint_info info;
            pp_error err;
            if (pp_checkpoint_list(other, &info, &err) == PP_OK) {
                same_run(plan, &info, other, stderr, NULL, 0);
                pp_checkpoint_info_free(&info);
            }
            fprintf(stderr, "pipeline-run: --resume auto: no checkpoint of this plan's run; "
                            "the newest, %s, is another run's (--resume %s continues it under "
                            "this plan; move the files away to start afresh)\n", other, other);
            free(other);
            d->code = 2;
            return;
        }
        free(other);
        if (!chosen) {
            fprintf(stderr, "--resume auto: no checkpoint to resume from (%s%s%s): starting "
                            "from step 0\n",
                    plan->checkpoint.enabled ? plan->checkpoint.path : "",
                    plan->checkpoint.enabled && save_path ? ", " : "",
                    save_path ? save_path : "");
            return;
        }
    } else if (!(chosen = strdup(resume))) {
        d->code = 1;
        return;
    }
    if (strlen(chosen) >= sizeof d->from) { /* (the decision travels to every rank whole) */
        fprintf(stderr, "pipeline-run: --resume: a path of %zu characters is longer than the "
                        "%zu taken\n", strlen(chosen), sizeof d->from - 1);
        free(chosen);
        d->code = 2;
        return;
    }
    snprintf(d->from, sizeof d->from, "%s", chosen);
    free(chosen);
    pp_checkpoint_info info;
    pp_error err;
    if (pp_checkpoint_list(d->from, &info, &err) != PP_OK) {
        fprintf(stderr, "pipeline-run: %s\n", err.msg);
        d->code = err.code == PP_ERR_INPUT ? 2 : 1;
        return;
    }
    if (!pp_cli_has_optimizer_state(plan, &info)) {
        fprintf(stderr, "pipeline-run: %s: ", d->from);
        say_no_state(stderr, plan, pp_cli_optimizer_state_held(&info));
        fprintf(stderr, "; --resume needs it, --load starts from the weights alone\n");
        d->code = 2;
    } else if (!pp_cli_plan_matches(plan, &info, d->from, stderr, NULL)) {
        d->code = 2;
    } else if (strcmp(resume, "auto") != 0) { /* a file, named: other settings are a choice */
        pp_plan_step_keys rk;
        pp_error e;
        bool said = false;
        if (pp_plan_run_keys_get(plan, &rk, &e) == PP_OK) {
            differences(&rk, RUN_PREFIX, &info, d->from, plan,
                        "pipeline-run: note: %s continues under %s with other settings:\n",
                        stderr, &said, NULL, 0);
            pp_plan_step_keys_free(&rk);
        }
    }
    pp_checkpoint_info_free(&info);
}

int pp_cli_start_prepare(const pp_plan *plan, pp_comm *comm, const char *resume,
                         const char *save_path, pp_cli_start *out)
{
    memset(out, 0, sizeof *out);
    decision *d = calloc(1, sizeof *d);
    if (!d) return 1;
    if (pp_comm_rank(comm) == 0) decide(plan, resume, save_path, d);
    pp_error err;
    if (pp_comm_size(comm) > 1 && pp_comm_broadcast(comm, 0, d, sizeof *d, &err) != PP_OK) {
        fprintf(stderr, "pipeline-run: %s\n", err.msg);
        free(d);
        return 1;
    }
    int code = d->code;
    if (!code && d->from[0]) {
        pp_checkpoint_info info;
        out->from = strdup(d->from);
        if (!out->from) {
            code = 1;
        } else if (pp_checkpoint_list(out->from, &info, &err) == PP_OK) {
            pp_cli_epoch_sums_read(&info, &out->sums);
            pp_checkpoint_info_free(&info);
        }
    }
    if (!code && !pp_cli_series_scan(plan, &out->series, &out->n_series)) code = 1;
    free(d);
    if (code) pp_cli_start_free(out);
    return code;
}

void pp_cli_start_free(pp_cli_start *s)
{
    free(s->from);
    pp_cli_ckpt_files_free(s->series, s->n_series);
    memset(s, 0, sizeof *s);
}
