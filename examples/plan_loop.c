/*
 * plan_loop.c - the smallest embedding: load a plan, build its pipeline, run
 * the steps in the application's own loop and read the statistics.
 *
 * Usage: plan_loop [PLAN.yaml] [STEPS]
 *   PLAN.yaml defaults to examples/plans/auto-balance-cpu.yaml (run from the
 *   source tree), STEPS to the plan's `steps`. Exit status: 0 success, 2 bad
 *   input (plan, data), 1 runtime failure.
 */
#include <stdio.h>
#include <stdlib.h>

#include "pipeline/pipeline_run.h"

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "examples/plans/auto-balance-cpu.yaml";
    pp_diag diag;
    pp_error err;
    pp_plan *plan = NULL;
    pp_pipeline *pipe = NULL;
    pp_diag_clear(&diag);
    pp_error_clear(&err);

    /* 1. The plan: a parse failure lists every problem as FILE:LINE:COL: message. */
    if (pp_plan_load(path, &plan, &diag) != PP_OK) {
        char text[8192];
        fprintf(stderr, "%s\n", pp_diag_format(&diag, text, sizeof text));
        return 2;
    }
    int steps = argc > 2 ? atoi(argv[2]) : plan->steps;

    /* 2. The pipeline (choosing the stages first when the plan says `stages: auto`).
     *    It copies what it needs, so the plan can go at once. */
    pp_status s = pp_pipeline_resolve_plan(plan, &err);
    if (s == PP_OK) s = pp_pipeline_new(plan, NULL, &pipe, &err);
    pp_plan_free(plan);

    /* 3. The application's own training loop. */
    for (int i = 0; s == PP_OK && i < steps; i++) {
        pp_step_result r;
        s = pp_pipeline_step(pipe, &r, &err);
        if (s == PP_OK)
            printf("step %3lld  loss %.4f  accuracy %.2f  %.1f ms\n", (long long)r.step, r.loss,
                   r.accuracy, r.step_ms);
    }

    /* 4. Statistics over the steps run (the first excluded when there are several). */
    if (s == PP_OK) {
        pp_pipeline_report rep;
        pp_pipeline_report_get(pipe, &rep);
        printf("%d steps: %.1f ms median, %.1f images/s, bubble %.0f%% (predicted %.0f%%)\n",
               rep.steps, rep.step_ms_median, rep.images_per_s, 100 * rep.bubble_frac,
               100 * rep.bubble_frac_predicted);
        for (int k = 0; k < pp_pipeline_stage_count(pipe); k++) {
            pp_stage_report st;
            pp_pipeline_stage_report(pipe, k, &st);
            printf("stage %d on %s: %lld params, forward %.1f ms, backward %.1f ms, busy %.0f%%\n",
                   k, st.device, (long long)st.params, st.forward_ms, st.backward_ms,
                   100 * st.busy_frac);
        }
    }
    pp_pipeline_free(pipe);
    if (s != PP_OK) fprintf(stderr, "plan_loop: %s\n", err.msg);
    return s == PP_OK ? 0 : s == PP_ERR_INPUT ? 2 : 1;
}
