/*
 * schedule_csv.c - reading schedules in torch.distributed.pipelining's CSV
 * grammar (schedule.h; printing is pp_schedule_format_csv in schedule.c):
 *   1. split the text into rows (CRLF or LF; blank lines at the end are none) and
 *      cells (commas);
 *   2. parse each cell: empty (idle), STAGE KIND [MICRO-BATCH], or
 *      (A;B)OVERLAP_F_B, whitespace around a cell ignored;
 *   3. the shape: the caller's, or the one the cells imply;
 *   4. the schedule, then pp_schedule_validate with FILE:ROW:COL places.
 */
#include "streams/schedule.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CSV_MAX_BYTES (16u << 20)
#define CSV_MAX_INDEX 1000000

typedef struct cell_action {
    pp_action a;
    int row;
} cell_action;

typedef struct parse_state {
    const char *name;
    pp_error *err;
    cell_action *acts;
    int n, cap;
    int rows;
} parse_state;

static pp_status csv_error(const parse_state *p, int row, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static pp_status csv_error(const parse_state *p, int row, int col, const char *fmt, ...)
{
    char msg[PP_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pp_error_set(p->err, PP_ERR_INPUT, "%s:%d:%d: %s", p->name, row, col, msg);
}

static pp_status add(parse_state *p, const pp_action *a, int row)
{
    if (p->n == p->cap) {
        int ncap = p->cap ? 2 * p->cap : 256;
        cell_action *grown = realloc(p->acts, (size_t)ncap * sizeof *grown);
        if (!grown) return pp_error_set(p->err, PP_ERR_OOM, "out of host memory (schedule)");
        p->acts = grown;
        p->cap = ncap;
    }
    p->acts[p->n++] = (cell_action){*a, row};
    return PP_OK;
}

/* Kind tokens, longest first where one is a prefix of another's start. */
static const struct {
    const char *tok;
    pp_action_kind kind;
} kinds[] = {
    {"SEND_F", PP_ACT_SEND_ACT}, {"RECV_F", PP_ACT_RECV_ACT}, {"SEND_B", PP_ACT_SEND_GRAD},
    {"RECV_B", PP_ACT_RECV_GRAD}, {"UNSHARD", PP_ACT_UNSHARD}, {"RESHARD", PP_ACT_RESHARD},
    {"F", PP_ACT_F}, {"I", PP_ACT_I}, {"B", PP_ACT_B}, {"W", PP_ACT_W},
};

/* Reads up to 7 decimal digits at *t (end e); false when there are none. */
static bool read_index(const char **t, const char *e, int *v)
{
    const char *q = *t;
    long x = 0;
    while (q < e && isdigit((unsigned char)*q) && q - *t < 7) x = 10 * x + (*q++ - '0');
    if (q == *t || (q < e && isdigit((unsigned char)*q))) return false;
    *t = q;
    *v = (int)x;
    return true;
}

/* One simple action in [t, e); a message in why when it is not one. */
static bool parse_simple(const char *t, const char *e, pp_action *a, const char **why)
{
    int stage, mb = -1;
    *why = "a cell is STAGE ACTION MICRO-BATCH, e.g. 2F0, 1I3, 3SEND_F1, or a composite "
           "(0F3;3B1)OVERLAP_F_B";
    if (!read_index(&t, e, &stage)) return false;
    size_t k = 0;
    for (; k < sizeof kinds / sizeof kinds[0]; k++) {
        size_t len = strlen(kinds[k].tok);
        if ((size_t)(e - t) >= len && strncmp(t, kinds[k].tok, len) == 0) {
            t += len;
            break;
        }
    }
    if (k == sizeof kinds / sizeof kinds[0]) return false;
    bool no_mb = kinds[k].kind == PP_ACT_UNSHARD || kinds[k].kind == PP_ACT_RESHARD;
    if (t < e && !read_index(&t, e, &mb)) return false;
    if (t != e) return false;
    if (no_mb && mb >= 0) {
        *why = "UNSHARD and RESHARD take no micro-batch";
        return false;
    }
    if (!no_mb && mb < 0) {
        *why = "the action needs a micro-batch (e.g. 2F0)";
        return false;
    }
    *a = (pp_action){.kind = kinds[k].kind, .mb = mb, .stage = stage};
    return true;
}

/* Cell [t, e) of row (1-based), column col. */
static pp_status parse_cell(parse_state *p, const char *t, const char *e, int row, int col)
{
    while (t < e && (*t == ' ' || *t == '\t')) t++;
    while (e > t && (e[-1] == ' ' || e[-1] == '\t')) e--;
    if (t == e) return PP_OK; /* idle */
    const char *why;
    pp_action a, b;
    if (*t != '(') {
        if (!parse_simple(t, e, &a, &why))
            return csv_error(p, row, col, "unknown action '%.*s': %s", (int)(e - t), t, why);
        a.cell = col;
        return add(p, &a, row);
    }
    static const char suffix[] = ")OVERLAP_F_B";
    const char *semi = memchr(t, ';', (size_t)(e - t));
    size_t sl = sizeof suffix - 1;
    if (!semi || (size_t)(e - t) < sl + 2 || memcmp(e - sl, suffix, sl) != 0)
        return csv_error(p, row, col, "unknown action '%.*s': a composite is "
                         "(A;B)OVERLAP_F_B, e.g. (0F3;3B1)OVERLAP_F_B", (int)(e - t), t);
    if (!parse_simple(t + 1, semi, &a, &why) || !parse_simple(semi + 1, e - sl, &b, &why))
        return csv_error(p, row, col, "unknown action in '%.*s': %s", (int)(e - t), t, why);
    a.cell = b.cell = col;
    a.overlap = PP_OVERLAP_FIRST;
    b.overlap = PP_OVERLAP_SECOND;
    PP_TRY(add(p, &a, row));
    return add(p, &b, row);
}

static pp_status split_rows(parse_state *p, const char *text, size_t len)
{
    const char *t = text, *end = text + len;
    /* blank lines (and spaces) at the end are no rows: an editor's last newlines */
    while (end > t && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    int row = 0;
    while (t < end) {
        const char *nl = memchr(t, '\n', (size_t)(end - t));
        const char *e = nl ? nl : end;
        const char *le = e > t && e[-1] == '\r' ? e - 1 : e;
        row++;
        int col = 1;
        for (const char *c = t;; col++) {
            const char *comma = memchr(c, ',', (size_t)(le - c));
            const char *ce = comma ? comma : le;
            PP_TRY(parse_cell(p, c, ce, row, col));
            if (!comma) break;
            c = comma + 1;
        }
        t = nl ? nl + 1 : end;
    }
    p->rows = row;
    return PP_OK;
}

/* The shape the cells imply: S and m one more than the largest index, each
 * stage on the row it first appears in. */
static pp_status implied_shape(parse_state *p, pp_schedule_shape *shape, int **placement)
{
    int S = 0, m = 0;
    for (int k = 0; k < p->n; k++) {
        if (p->acts[k].a.stage + 1 > S) S = p->acts[k].a.stage + 1;
        if (p->acts[k].a.mb + 1 > m) m = p->acts[k].a.mb + 1;
    }
    if (S == 0 || m == 0)
        return csv_error(p, 1, 1, "no actions with a micro-batch: a schedule has a row per "
                         "device of actions such as 0F0");
    if (S > CSV_MAX_INDEX || m > CSV_MAX_INDEX)
        return csv_error(p, 1, 1, "%d stages and %d micro-batches: too many", S, m);
    int *dev = malloc((size_t)S * sizeof *dev);
    if (!dev) return pp_error_set(p->err, PP_ERR_OOM, "out of host memory (schedule)");
    for (int s = 0; s < S; s++) dev[s] = -1;
    for (int k = 0; k < p->n; k++)
        if (dev[p->acts[k].a.stage] < 0) dev[p->acts[k].a.stage] = p->acts[k].row - 1;
    for (int s = 0; s < S; s++)
        if (dev[s] < 0) {
            free(dev);
            return csv_error(p, 1, 1, "stage %d appears in no row (stages 0..%d are used), so "
                             "its device is unknown", s, S - 1);
        }
    /* every row runs a stage of its own */
    for (int r = 0; r < p->rows; r++) {
        bool own = false;
        for (int s = 0; s < S && !own; s++) own = dev[s] == r;
        if (own) continue;
        for (int k = 0; k < p->n; k++) {
            const cell_action *c = &p->acts[k];
            char b[48];
            if (c->row - 1 != r) continue;
            int home = dev[c->a.stage];
            free(dev);
            return csv_error(p, c->row, c->a.cell, "%s on device %d, but stage %d is placed on "
                             "device %d (the row it first appears in)",
                             pp_action_format(c->a, b, sizeof b), r, c->a.stage, home);
        }
        free(dev);
        return csv_error(p, r + 1, 1, "row %d has no actions: every device runs a stage", r + 1);
    }
    *placement = dev;
    *shape = (pp_schedule_shape){S, p->rows, m, dev, NULL};
    return PP_OK;
}

pp_status pp_schedule_parse_csv(const char *name, const char *text, size_t len,
                                const pp_schedule_shape *want, pp_schedule *out, pp_error *err)
{
    memset(out, 0, sizeof *out);
    parse_state p = {.name = name ? name : "schedule", .err = err};
    int *placement = NULL;
    pp_schedule_shape shape;
    pp_status st = split_rows(&p, text, len);
    if (st == PP_OK && want) {
        shape = *want;
        if (p.rows != want->devices)
            st = csv_error(&p, p.rows > want->devices ? want->devices + 1 : 1, 1,
                           "%d row%s, but the stages are placed on %d device%s: a schedule has "
                           "one row per device", p.rows, p.rows == 1 ? "" : "s", want->devices,
                           want->devices == 1 ? "" : "s");
        int m_file = 0; /* the micro-batches the program is written for */
        for (int k = 0; k < p.n; k++)
            if (p.acts[k].a.mb + 1 > m_file) m_file = p.acts[k].a.mb + 1;
        if (st == PP_OK && m_file > 0 && m_file < want->micro_batches)
            st = csv_error(&p, 1, 1, "the program is written for %d micro-batch%s but the batch "
                           "has %d: a program runs the plan's micro-batches (write it for %d, "
                           "or change batch.size or split_size)", m_file, m_file == 1 ? "" : "es",
                           want->micro_batches, want->micro_batches);
        for (int k = 0; k < p.n && st == PP_OK; k++) {
            const pp_action *a = &p.acts[k].a;
            char b[48];
            if (a->stage >= want->stages)
                st = csv_error(&p, p.acts[k].row, a->cell, "%s: stage %d out of range (%d "
                               "stage%s)", pp_action_format(*a, b, sizeof b), a->stage,
                               want->stages, want->stages == 1 ? "" : "s");
            else if (a->mb >= want->micro_batches)
                st = csv_error(&p, p.acts[k].row, a->cell, "%s: micro-batch %d out of range: "
                               "the program is written for %d micro-batches but the batch has "
                               "%d (write it for %d, or change batch.size or split_size)",
                               pp_action_format(*a, b, sizeof b), a->mb, m_file,
                               want->micro_batches, want->micro_batches);
        }
    } else if (st == PP_OK) {
        st = implied_shape(&p, &shape, &placement);
    }
    if (st == PP_OK) st = pp_schedule_init_shape(out, "file", &shape, err);
    if (st == PP_OK && !(out->source = strdup(p.name)))
        st = pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule)");
    for (int k = 0; k < p.n && st == PP_OK; k++)
        st = pp_schedule_push_action(out, p.acts[k].row - 1, &p.acts[k].a, err);
    if (st == PP_OK) st = pp_schedule_validate(out, err);
    if (st != PP_OK) pp_schedule_free(out);
    free(p.acts);
    free(placement);
    return st;
}

pp_status pp_schedule_load_csv(const char *path, const pp_schedule_shape *want,
                               pp_schedule *out, pp_error *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return pp_error_set(err, PP_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    char *text = malloc(CSV_MAX_BYTES + 1);
    if (!text) {
        fclose(f);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (schedule file)");
    }
    size_t len = fread(text, 1, CSV_MAX_BYTES + 1, f);
    bool bad = ferror(f);
    fclose(f);
    pp_status st;
    if (bad)
        st = pp_error_set(err, PP_ERR_INPUT, "%s: read error", path);
    else if (len > CSV_MAX_BYTES)
        st = pp_error_set(err, PP_ERR_INPUT, "%s: larger than %u MiB", path, CSV_MAX_BYTES >> 20);
    else
        st = pp_schedule_parse_csv(path, text, len, want, out, err);
    free(text);
    return st;
}
