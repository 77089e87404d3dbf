/*
 * fuzz_plan.c - libFuzzer target for the plan reader: any bytes go through
 * pp_plan_parse_string; a plan that parses must emit, parse back equal and
 * emit the same text again, and survive a device map. Any violation aborts.
 * Built by tests/fuzz/run.sh; corpus_main.c replays files without libFuzzer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/emit.h"
#include "partitioner/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_plan: %s\n%s\n", what, detail ? detail : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pp_plan *plan = NULL;
    pp_diag diag;
    pp_diag_clear(&diag);
    /* the name places relative data paths in the corpus folder's parent */
    pp_status s = pp_plan_parse_string("tests/fuzz/input.yaml", (const char *)data, size, &plan,
                                       &diag);
    char msg[4096];
    pp_diag_format(&diag, msg, sizeof msg);
    if (s != PP_OK) {
        if (plan) fail("failed parse returned a plan", msg);
        if (diag.count < 1) fail("failed parse without a diagnostic", NULL);
        if (s != PP_ERR_INPUT) fail("unexpected status", msg);
        return 0;
    }
    if (!plan) fail("successful parse without a plan", NULL);
    pp_error err;
    if (plan->stages_auto && plan->balance != PP_PLAN_BALANCE_TIME)
        (void)pp_plan_resolve_auto(plan, NULL, NULL, &err);
    if (!plan->stages_auto) {
        char *text = NULL, *again = NULL;
        size_t len = 0;
        if (pp_plan_emit(plan, &text, &len, &err) != PP_OK) fail("emit failed", err.msg);
        pp_plan *back = NULL;
        pp_diag_clear(&diag);
        if (pp_plan_parse_string("tests/fuzz/input.yaml", text, len, &back, &diag) != PP_OK)
            fail("emitted plan does not parse", pp_diag_format(&diag, msg, sizeof msg));
        char why[256];
        if (!pp_plan_equal(plan, back, why, sizeof why)) fail("round trip differs", why);
        if (pp_plan_emit(back, &again, NULL, &err) != PP_OK || strcmp(text, again) != 0)
            fail("emit is not a fixpoint", text);
        free(text);
        free(again);
        pp_plan_free(back);
    }
    if (pp_plan_apply_device_map(plan, "cuda:*=cpu,cpu=cuda:1", &err) != PP_OK)
        fail("device map failed", err.msg);
    for (int i = 0; i < plan->n_stages; i++)
        if (plan->stages[i].device.kind != PP_DEVICE_CPU &&
            !(plan->stages[i].device.kind == PP_DEVICE_CUDA &&
              plan->stages[i].device.index == 1))
            fail("device map left a device unmapped", plan->stages[i].device_name);
    pp_plan_free(plan);
    return 0;
}
