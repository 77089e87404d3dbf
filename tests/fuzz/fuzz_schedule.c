/*
 * fuzz_schedule.c - libFuzzer target for the schedule files' reader (torch's
 * CSV grammar, streams/schedule.h): any bytes go through
 * pp_schedule_parse_csv. A failure must be PP_ERR_INPUT naming the input; a
 * schedule that reads must write back (pp_schedule_format_csv, with its
 * communication actions) to a text that reads again and writes the same
 * text, and give each stage's in-flight count. Any violation aborts. Built
 * by tests/fuzz/run.sh schedule; corpus_main.c replays files without
 * libFuzzer (test fuzz_schedules: torch's own files and the committed
 * corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streams/schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_schedule: %s\n%s\n", what, detail ? detail : "");
    abort();
}

/* s as CSV with its communication actions (malloc'd) */
static char *format(const pp_schedule *s)
{
    const size_t n = pp_schedule_format_csv(s, true, NULL, 0);
    char *text = malloc(n + 1);
    if (!text) fail("out of memory", NULL);
    if (pp_schedule_format_csv(s, true, text, n + 1) != n) fail("format's lengths differ", NULL);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pp_schedule s;
    memset(&s, 0, sizeof s);
    pp_error err;
    pp_status st = pp_schedule_parse_csv("input.csv", (const char *)data, size, NULL, &s, &err);
    if (st != PP_OK) {
        if (st != PP_ERR_INPUT) fail("unexpected status", err.msg);
        if (strncmp(err.msg, "input.csv", 9) != 0) fail("message without the input's name", err.msg);
        pp_schedule_free(&s); /* a failed read leaves nothing to free, or a zeroed schedule */
        return 0;
    }
    if (s.stages < 1 || s.devices < 1 || s.devices > s.stages || s.micro_batches < 1)
        fail("a schedule of impossible shape", NULL);
    int *peak = calloc((size_t)s.stages, sizeof *peak);
    if (!peak) fail("out of memory", NULL);
    pp_schedule_in_flight(&s, peak);
    for (int k = 0; k < s.stages; k++)
        if (peak[k] < 0 || peak[k] > s.micro_batches) fail("in flight out of range", NULL);
    free(peak);
    char *text = format(&s);
    pp_schedule back;
    memset(&back, 0, sizeof back);
    if (pp_schedule_parse_csv("again.csv", text, strlen(text), NULL, &back, &err) != PP_OK)
        fail("the written schedule does not read", err.msg);
    char *again = format(&back);
    if (strcmp(text, again) != 0) fail("writing is not a fixpoint", text);
    free(text);
    free(again);
    pp_schedule_free(&back);
    pp_schedule_free(&s);
    return 0;
}
