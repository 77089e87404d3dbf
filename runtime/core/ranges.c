/* ranges.c - named ranges for profilers through NVTX (ranges.h). */
#include "ranges.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if PP_HAVE_NVTX
/* NVTX v3 is header-only: its first call looks for a collector
 * (NVTX_INJECTION64_PATH, dlopen) and, finding none, every later call
 * returns at once. Its headers are not written for this project's warnings. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <nvtx3/nvToolsExt.h>
#pragma GCC diagnostic pop
#endif

typedef enum env_choice { CHOICE_AUTO, CHOICE_ON, CHOICE_OFF, CHOICE_BAD } env_choice;

static env_choice env_value(void)
{
    const char *v = getenv("PP_NVTX");
    if (!v || !v[0] || !strcmp(v, "auto")) return CHOICE_AUTO;
    if (!strcmp(v, "on") || !strcmp(v, "1")) return CHOICE_ON;
    if (!strcmp(v, "off") || !strcmp(v, "0")) return CHOICE_OFF;
    return CHOICE_BAD;
}

pp_status pp_ranges_check_env(pp_error *err)
{
    if (env_value() != CHOICE_BAD) return PP_OK;
    return pp_error_set(err, PP_ERR_INPUT, "PP_NVTX=%.32s: expected auto, on or off (or 1 or 0)",
                        getenv("PP_NVTX"));
}

/* -1 until decided, then 0 or 1; threads that race to decide decide alike */
static int ranges_state = -1;

bool pp_ranges_on(void)
{
    int s = __atomic_load_n(&ranges_state, __ATOMIC_RELAXED);
    if (s >= 0) return s;
    const env_choice c = env_value();
    const char *collector = getenv("NVTX_INJECTION64_PATH");
    s = PP_HAVE_NVTX && (c == CHOICE_ON || (c == CHOICE_AUTO && collector && collector[0]));
    __atomic_store_n(&ranges_state, s, __ATOMIC_RELAXED);
    return s;
}

void pp_range_push(const char *name)
{
    if (!pp_ranges_on()) return;
#if PP_HAVE_NVTX
    nvtxRangePushA(name ? name : "");
#else
    (void)name;
#endif
}

void pp_range_pushf(const char *fmt, ...)
{
    if (!pp_ranges_on()) return;
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    pp_range_push(name);
}

void pp_range_pop(void)
{
    if (!pp_ranges_on()) return;
#if PP_HAVE_NVTX
    nvtxRangePop();
#endif
}
