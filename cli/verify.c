/* verify.c - pipeline-run --verify (verify.h). */
#include "cli/verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/resume.h"
#include "pipeline/pipeline.h"
#include "runtime/io/checkpoint.h"
#include "runtime/train/optimizer.h"

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

/* What was found of one file. */
typedef struct file_check {
    bool ok;
    pp_checkpoint_verify_result r;
    char steps[32];
    bool plan_recorded;
    const char *optimizer; /* the optimizer state it holds, in words ("AdamW state") */
} file_check;

/* The optimizer state a file holds: its kind's first entries' prefix. */
static const char *optimizer_state(const pp_checkpoint_info *info)
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

int pp_cli_verify(const char *const *files, int n, pp_plan *plan)
{
    file_check *fc = calloc((size_t)(n > 0 ? n : 1), sizeof *fc);
    if (!fc) return 1;
    pp_error err;
    int fitting = 0;
    /* 1. each file alone, and what a step means (against the plan as written) */
    for (int i = 0; i < n; i++) {
        pp_checkpoint_info info;
        if (pp_checkpoint_verify(files[i], &fc[i].r, &err) != PP_OK ||
            pp_checkpoint_list(files[i], &info, &err) != PP_OK) {
            fprintf(stderr, "pipeline-run: %s\n", err.msg);
            continue;
        }
        const char *steps = pp_checkpoint_info_meta(&info, "pipeline-run.steps");
        if (steps) snprintf(fc[i].steps, sizeof fc[i].steps, "%s", steps);
        fc[i].optimizer = optimizer_state(&info);
        fc[i].ok = !plan || pp_cli_plan_matches(plan, &info, files[i], stderr,
                                                &fc[i].plan_recorded);
        fitting += fc[i].ok;
        pp_checkpoint_info_free(&info);
    }
    /* 2. with a plan: its model on CPU devices takes each file */
    int rc = 0;
    if (plan && fitting > 0) {
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
    int bad = 0;
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
        printf("; %s\n", fc[i].optimizer);
    }
    fflush(stdout);
    free(fc);
    if (bad)
        fprintf(stderr, "pipeline-run: %d of %d file%s failed verification\n", bad, n,
                n == 1 ? "" : "s");
    if (rc) return rc;
    return bad ? 2 : 0;
}
