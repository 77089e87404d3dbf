/* verify.c - pipeline-run --verify (verify.h). */
#include "cli/verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/resume.h"
#include "pipeline/pipeline.h"
#include "runtime/io/checkpoint.h"

/* The plan as one process of CPU devices: the same model, so the same tensors. */
static pp_status cpu_only(pp_plan *plan, pp_error *err)
{
    PP_TRY(pp_plan_apply_device_map(plan, "cuda:*=cpu", err));
    for (int s = 0; s < plan->n_stages; s++) {
        plan->stages[s].rank = 0;
        plan->stages[s].memory_bytes = 0;
        for (int r = 0; r < PP_PLAN_MAX_REPLICAS; r++) plan->stages[s].replica_rank[r] = 0;
    }
    plan->replicas = 1;
    plan->replicas_in_process = false;
    return pp_pipeline_resolve_plan(plan, err);
}

/* With a plan: whether --resume would take a file, and why not. */
typedef enum { RESUMES, OTHER_STEPS, NO_STATE } resume_use;

/* What was found of one file. */
typedef struct file_check {
    bool ok;                /* sound (and, with a plan, loads into its model) */
    resume_use resume;
    pp_checkpoint_verify_result r;
    char steps[32];
    bool plan_recorded;
    const char *optimizer;  /* the optimizer state it holds, in words ("AdamW state") */
} file_check;

/* Whether --resume under plan would take the file (info, at path), as
 * resume.c decides: the plan's step keys (their differences printed on
 * stderr), then the state of the plan's optimizer. */
static resume_use resumes(const pp_plan *plan, const pp_checkpoint_info *info, const char *path,
                          bool *plan_recorded)
{
    if (!pp_cli_plan_matches(plan, info, path, stderr, plan_recorded)) return OTHER_STEPS;
    return pp_cli_has_optimizer_state(plan, info) ? RESUMES : NO_STATE;
}

int pp_cli_verify(const char *const *files, int n, pp_plan *plan)
{
    file_check *fc = calloc((size_t)(n > 0 ? n : 1), sizeof *fc);
    if (!fc) return 1;
    pp_error err;
    int sound = 0;
    /* 1. each file alone, what a step means and the optimizer state (against
     * the plan as written) */
    for (int i = 0; i < n; i++) {
        pp_checkpoint_info info;
        if (pp_checkpoint_verify(files[i], &fc[i].r, &err) != PP_OK ||
            pp_checkpoint_list(files[i], &info, &err) != PP_OK) {
            fprintf(stderr, "pipeline-run: %s\n", err.msg);
            continue;
        }
        const char *steps = pp_checkpoint_info_meta(&info, "pipeline-run.steps");
        if (steps) snprintf(fc[i].steps, sizeof fc[i].steps, "%s", steps);
        fc[i].optimizer = pp_cli_optimizer_state_held(&info);
        fc[i].ok = true;
        if (plan) fc[i].resume = resumes(plan, &info, files[i], &fc[i].plan_recorded);
        sound++;
        pp_checkpoint_info_free(&info);
    }
    /* 2. with a plan: its model on CPU devices takes each file */
    int rc = 0;
    if (plan && sound > 0) {
        pp_pipeline *p = NULL;
        pp_pipeline_options opts = {0};
        if (cpu_only(plan, &err) != PP_OK || pp_pipeline_new(plan, &opts, &p, &err) != PP_OK) {
            fprintf(stderr, "pipeline-run: %s\n", err.msg);
            rc = err.code == PP_ERR_INPUT ? 2 : 1;
            for (int i = 0; i < n; i++) fc[i].ok = false;
        }
        for (int i = 0; p && i < n; i++) {
            if (fc[i].ok && pp_pipeline_load(p, files[i], &err) != PP_OK) {
                fprintf(stderr, "pipeline-run: %s\n", err.msg);
                fc[i].ok = false;
            }
        }
        pp_pipeline_free(p);
    }
    /* 3. a line per file that passed */
    int bad = 0, loads_only = 0;
    for (int i = 0; i < n; i++) {
        if (!fc[i].ok) {
            bad++;
            continue;
        }
        printf("%s: ok: %zu tensors, %.1f MiB, %s%s%s", files[i], fc[i].r.tensors,
               (double)fc[i].r.data_bytes / (1024.0 * 1024.0),
               fc[i].r.checksums ? "checksums verified" : "no checksums (values checked)",
               fc[i].steps[0] ? ", step " : "", fc[i].steps);
        if (plan)
            printf(", loads into %s%s", plan->path,
                   fc[i].plan_recorded ? "" : " (records no plan: its steps' meaning not compared)");
        printf("; %s", fc[i].optimizer);
        if (fc[i].resume == OTHER_STEPS)
            printf("; --resume refuses it: its steps mean something else under %s",
                   plan->path);
        else if (fc[i].resume == NO_STATE)
            printf("; --resume refuses it: no %s, which %s's optimizer resumes from",
                   pp_cli_optimizer_state_needed(plan), plan->path);
        if (fc[i].resume != RESUMES) {
            printf(" (--load takes it)");
            loads_only++;
        }
        printf("\n");
    }
    fflush(stdout);
    free(fc);
    if (bad)
        fprintf(stderr, "pipeline-run: %d of %d file%s failed verification\n", bad, n,
                n == 1 ? "" : "s");
    if (loads_only)
        fprintf(stderr, "pipeline-run: %d of %d file%s would not resume under %s (--load "
                        "takes %s)\n", loads_only, n, n == 1 ? "" : "s", plan->path,
                loads_only == 1 ? "it" : "them");
    if (rc) return rc;
    return bad ? 2 : loads_only ? 3 : 0;
}
