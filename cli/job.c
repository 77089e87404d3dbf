/* job.c - the ranks of a job agree on the plan and the options (job.h). */
#include "cli/job.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/emit.h"

void pp_cli_shape_add(pp_cli_shape *s, const char *name, const char *fmt, ...)
{
    if (s->n >= PP_CLI_SHAPE_OPTS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->value[s->n], PP_CLI_SHAPE_VALUE, fmt, ap);
    va_end(ap);
    s->name[s->n++] = name;
}

/* What a rank sends: its hashes and its option values (names are the same
 * on every rank: the same program builds them in the same order). */
typedef struct wire {
    uint64_t plan_hash;   /* the resolved plan's text */
    uint64_t hash;        /* the plan's text and the options' values */
    char value[PP_CLI_SHAPE_OPTS][PP_CLI_SHAPE_VALUE];
} wire;

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* msg: rank r against rank 0, from their wires. */
static void describe(const char *path, const char *ranks, int r, const pp_cli_shape *names,
                     const wire *theirs, const wire *zero, char *msg, size_t n)
{
    size_t used = (size_t)snprintf(msg, n, "%s: %s started with ", path, ranks);
    if (used >= n) return;
    if (theirs->plan_hash != zero->plan_hash) {
        used += (size_t)snprintf(msg + used, n - used, "another plan than rank 0");
    } else {
        used += (size_t)snprintf(msg + used, n - used, "other options than rank 0:");
        for (int i = 0; i < names->n && used < n; i++) {
            if (strcmp(theirs->value[i], zero->value[i]) == 0) continue;
            used += (size_t)snprintf(msg + used, n - used, " %s %s on rank %d, %s on rank 0;",
                                     names->name[i], theirs->value[i], r, zero->value[i]);
        }
        if (used < n && msg[used - 1] == ';') msg[--used] = '\0';
    }
    if (used < n)
        snprintf(msg + used, n - used, " (plan and options hash %016llx on rank %d, %016llx on "
                 "rank 0): every rank of a job must run the same plan with the same options",
                 (unsigned long long)theirs->hash, r, (unsigned long long)zero->hash);
}

int pp_cli_check_same_run(pp_comm *comm, const pp_plan *plan, const pp_cli_shape *mine,
                          char *msg, size_t n, pp_error *err)
{
    msg[0] = '\0';
    int size = pp_comm_size(comm), rank = pp_comm_rank(comm);
    if (size < 2) return 0;
    char *text;
    size_t len;
    if (pp_plan_emit(plan, &text, &len, err) != PP_OK) return 1;
    wire *w = calloc(3, sizeof *w); /* mine, rank 0's, the first differing rank's */
    float *differs = calloc((size_t)size, sizeof *differs);
    if (!w || !differs) {
        free(text);
        free(w);
        free(differs);
        pp_error_set(err, PP_ERR_OOM, "out of host memory");
        return 1;
    }
    w[0].plan_hash = fnv1a(1469598103934665603ull, text, len); /* FNV-1a 64 */
    w[0].hash = w[0].plan_hash;
    free(text);
    for (int i = 0; i < mine->n; i++) {
        snprintf(w[0].value[i], PP_CLI_SHAPE_VALUE, "%s", mine->value[i]);
        w[0].hash = fnv1a(w[0].hash, mine->name[i], strlen(mine->name[i]) + 1);
        w[0].hash = fnv1a(w[0].hash, w[0].value[i], strlen(w[0].value[i]) + 1);
    }
    w[1] = w[0];
    pp_status s = pp_comm_broadcast(comm, 0, &w[1], sizeof w[1], err);
    differs[rank] = w[0].hash != w[1].hash;
    if (s == PP_OK) s = pp_comm_allreduce_sum_f32(comm, differs, (size_t)size, err);
    int first = -1, count = 0;
    char ranks[256] = "";
    size_t used = 0;
    for (int r = 0; s == PP_OK && r < size; r++) {
        if (differs[r] <= 0) continue;
        if (first < 0) first = r;
        count++;
        if (used + 16 < sizeof ranks)
            used += (size_t)snprintf(ranks + used, sizeof ranks - used, "%s%d", used ? ", " : "",
                                     r);
    }
    if (s == PP_OK && first >= 0) { /* the first differing rank tells rank 0 what it has */
        w[2] = w[0];
        s = pp_comm_broadcast(comm, first, &w[2], sizeof w[2], err);
    }
    free(differs);
    if (s != PP_OK) {
        free(w);
        return 1;
    }
    if (first < 0) {
        free(w);
        return 0;
    }
    if (rank == 0) {
        char who[300];
        snprintf(who, sizeof who, "rank%s %s", count == 1 ? "" : "s", ranks);
        describe(plan->path, who, first, mine, &w[2], &w[1], msg, n);
    }
    free(w);
    return 2;
}
