/*
 * plan_common.c - the helpers of plan_common.h (their checks count in the
 * test's totals: check.h's shared counters).
 */
#define PP_CHECK_SHARED
#include "tests/plan/plan_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/emit.h"
#include "tests/check.h"

static char g_name[4096];

void plan_test_init(const char *dir)
{
    snprintf(g_name, sizeof g_name, "%s/inline.yaml", dir);
}

const char *plan_test_name(void)
{
    return g_name;
}

pp_status parse(const char *text, size_t len, pp_plan **out, pp_diag *d)
{
    pp_diag_clear(d);
    return pp_plan_parse_string(g_name, text, len, out, d);
}

void check_round_trip(const char *label, const pp_plan *p)
{
    pp_error err;
    char *text = NULL, *again = NULL;
    size_t len = 0;
    CHECK_OK(pp_plan_emit(p, &text, &len, &err), &err);
    if (!text) return;
    CHECK(strlen(text) == len);
    pp_plan *q = NULL;
    pp_diag d;
    pp_status s = parse(text, len, &q, &d);
    char msg[2048];
    CHECK_MSG(s == PP_OK, "[%s] emitted plan does not parse: %s\n%s", label,
              pp_diag_format(&d, msg, sizeof msg), text);
    if (q) {
        char why[256];
        CHECK_MSG(pp_plan_equal(p, q, why, sizeof why), "[%s] round trip differs: %s\n%s", label,
                  why, text);
        CHECK_OK(pp_plan_emit(q, &again, NULL, &err), &err);
        CHECK_MSG(again && strcmp(text, again) == 0, "[%s] emit is not a fixpoint", label);
    }
    free(again);
    free(text);
    pp_plan_free(q);
}

pp_plan *parse_with(const char *extra)
{
    char text[1024];
    snprintf(text, sizeof text, "%s%s", BASE, extra);
    pp_plan *p = NULL;
    pp_diag d;
    char msg[2048];
    CHECK_MSG(parse(text, strlen(text), &p, &d) == PP_OK, "%s",
              pp_diag_format(&d, msg, sizeof msg));
    return p;
}
