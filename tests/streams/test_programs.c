/*
 * test_programs.c - the executor runs schedule programs with fake stages:
 * every built-in on its placement (virtual stages looped and in a V, the
 * backward split into I and W, DualPipeV's composites) and every file of
 * tests/schedules/torch (argv[1]), for several device and micro-batch
 * counts. Each run must give the sequential reference's weight gradients
 * and outputs bit for bit (the stages add partial gradients in micro-batch
 * order, whatever order the program runs them in); each device must run its
 * compute actions on one lane in the program's order; copies happen only
 * between devices. Also the placement checks of a run.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"
#include "streams/executor.h"
#include "streams/program.h"
#include "streams/schedule.h"
#include "tests/check.h"
#include "tests/streams/schedule_util.h"

enum { WIDTH = 3, MAX_MB = 16, MAX_SIZE = 3, MAX_STAGES = 16 };

typedef struct fake_stage {
    int index, S, batch, m;
    pp_device_ctx *dev;
    float w, dw;
    float x[MAX_MB][MAX_SIZE * WIDTH];  /* inputs kept for the backward */
    float g[MAX_MB][MAX_SIZE * WIDTH];  /* output gradients kept by I for W */
    float part[MAX_MB];                 /* W's partial gradient of each micro-batch */
    bool ready[MAX_MB];                 /* part[mb] computed, not yet added */
    int next;                           /* the next micro-batch to add to dw */
    int mb_start[MAX_MB];
    float out_sum[MAX_MB];
    int bad;
} fake_stage;

static float input_value(int sample, int d)
{
    return (float)(sample % 5 + 1) * 0.75f - (float)d * 0.125f;
}

static pp_status fake_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    t->dtype = PP_F32;
    t->ndim = 2;
    t->shape[0] = mb_size;
    t->shape[1] = WIDTH;
    return PP_OK;
}

static pp_status fake_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                              pp_tensor *out, pp_error *err)
{
    fake_stage *fs = user;
    int n = mb_size * WIDTH;
    if (ex->dev != fs->dev || (fs->index == 0) != (in == NULL)) fs->bad++;
    for (int k = 0; k < n; k++)
        fs->x[mb][k] = in ? ((const float *)in->data)[k]
                          : input_value(fs->mb_start[mb] + k / WIDTH, k % WIDTH);
    float s = 0;
    for (int k = 0; k < n; k++) s += ((float *)out->data)[k] = fs->x[mb][k] * fs->w;
    fs->out_sum[mb] = s;
    return PP_OK;
}

/* Adds the partial gradients that are next in micro-batch order. */
static void add_in_order(fake_stage *fs)
{
    while (fs->next < fs->m && fs->ready[fs->next]) {
        fs->dw += fs->part[fs->next];
        fs->ready[fs->next++] = false;
    }
}

static pp_status fake_input(void *user, pp_exec *ex, int mb, int mb_size,
                            const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    fake_stage *fs = user;
    int n = mb_size * WIDTH;
    if ((fs->index == fs->S - 1) != (grad_out == NULL) || (fs->index == 0) != (grad_in == NULL))
        fs->bad++;
    for (int k = 0; k < n; k++) {
        fs->g[mb][k] = grad_out ? ((const float *)grad_out->data)[k] : 1.0f / (float)fs->batch;
        if (grad_in) ((float *)grad_in->data)[k] = fs->g[mb][k] * fs->w;
    }
    return PP_OK;
}

static pp_status fake_weight(void *user, pp_exec *ex, int mb, int mb_size, pp_error *err)
{
    fake_stage *fs = user;
    float p = 0;
    for (int k = 0; k < mb_size * WIDTH; k++) p += fs->g[mb][k] * fs->x[mb][k];
    if (fs->ready[mb]) fs->bad++;
    fs->part[mb] = p;
    fs->ready[mb] = true;
    add_in_order(fs);
    return PP_OK;
}

static pp_status fake_backward(void *user, pp_exec *ex, int mb, int mb_size,
                               const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    PP_TRY(fake_input(user, ex, mb, mb_size, grad_out, grad_in, err));
    return fake_weight(user, ex, mb, mb_size, err);
}

static const pp_stage_ops fake_ops = {
    .out_shape = fake_shape,
    .forward = fake_forward,
    .backward = fake_backward,
    .backward_input = fake_input,
    .backward_weight = fake_weight,
};

static const pp_stage_ops no_split_ops = {
    .out_shape = fake_shape,
    .forward = fake_forward,
    .backward = fake_backward,
};

/* The sequential reference: dw per stage, output sums of the last stage. */
static void reference(const pp_schedule *s, float *dw, float *out_sum)
{
    int S = s->stages, batch = 0;
    for (int i = 0; i < s->micro_batches; i++) batch += s->mb_sizes[i];
    for (int k = 0; k < S; k++) dw[k] = 0;
    for (int i = 0, start = 0; i < s->micro_batches; start += s->mb_sizes[i], i++) {
        int n = s->mb_sizes[i] * WIDTH;
        float x[MAX_STAGES][MAX_SIZE * WIDTH], y[MAX_SIZE * WIDTH] = {0}, g[MAX_SIZE * WIDTH];
        for (int k = 0; k < n; k++) x[0][k] = input_value(start + k / WIDTH, k % WIDTH);
        for (int st = 0; st < S; st++) {
            float *dst = st + 1 < S ? x[st + 1] : y, w = 1.0f + 0.25f * (float)st;
            for (int k = 0; k < n; k++) dst[k] = x[st][k] * w;
        }
        float sum = 0;
        for (int k = 0; k < n; k++) sum += y[k];
        out_sum[i] = sum;
        for (int k = 0; k < n; k++) g[k] = 1.0f / (float)batch;
        for (int st = S - 1; st >= 0; st--) {
            float w = 1.0f + 0.25f * (float)st, p = 0;
            for (int k = 0; k < n; k++) p += g[k] * x[st][k];
            dw[st] += p;
            for (int k = 0; k < n; k++) g[k] *= w;
        }
    }
}

static pp_registry *reg;
static pp_device_ctx *cpus[8];

/* Runs s twice on fake stages, device d of s on cpus[d]; checks the results
 * and the lanes. */
static void run_checked(const pp_schedule *s, const char *what)
{
    int S = s->stages, m = s->micro_batches;
    fake_stage fs[MAX_STAGES];
    pp_stage_desc desc[MAX_STAGES];
    int batch = 0;
    for (int i = 0; i < m; i++) batch += s->mb_sizes[i];
    for (int k = 0; k < S; k++) {
        memset(&fs[k], 0, sizeof fs[k]);
        fs[k] = (fake_stage){.index = k, .S = S, .batch = batch, .m = m,
                             .dev = cpus[s->stage_device[k]], .w = 1.0f + 0.25f * (float)k};
        for (int i = 0, g = 0; i < m; g += s->mb_sizes[i], i++) fs[k].mb_start[i] = g;
        desc[k] = (pp_stage_desc){fs[k].dev, &fake_ops, &fs[k]};
    }
    float dw[MAX_STAGES], out_sum[MAX_MB];
    reference(s, dw, out_sum);
    pp_executor *ex;
    pp_error err;
    if (pp_executor_new(desc, S, 0, &ex, &err) != PP_OK) {
        CHECK_MSG(0, "%s: %s", what, err.msg);
        return;
    }
    for (int rep = 0; rep < 2; rep++) {
        for (int k = 0; k < S; k++) fs[k].dw = 0, fs[k].next = 0; /* a step starts */
        pp_step_stats st;
        if (pp_executor_run(ex, s, &st, &err) != PP_OK) {
            CHECK_MSG(0, "%s: %s", what, err.msg);
            break;
        }
        for (int k = 0; k < S; k++)
            CHECK_MSG(fs[k].dw == dw[k] && fs[k].bad == 0 && fs[k].next == m,
                      "%s stage %d: dw %.9g want %.9g (bad %d, added %d)", what, k, fs[k].dw,
                      dw[k], fs[k].bad, fs[k].next);
        for (int i = 0; i < m; i++) CHECK(fs[S - 1].out_sum[i] == out_sum[i]);
        CHECK(st.devices == s->devices && st.stages == S);
        /* copies only across devices; each device's actions on one lane, in order */
        int cross = 0;
        for (int b = 0; b + 1 < S; b++) cross += s->stage_device[b] != s->stage_device[b + 1];
        int copies = 0;
        for (int j = 0; j < st.n_spans; j++) copies += strncmp(st.spans[j].name, "copy", 4) == 0;
        CHECK_MSG(copies == 2 * cross * m, "%s: %d copies, want %d", what, copies, 2 * cross * m);
        for (int d = 0; d < s->devices; d++) {
            int lane = 0, p = 0, ok = 1;
            while (s->stage_device[lane] != d) lane++;
            for (int j = 0; j < st.n_spans; j++) {
                const pp_trace_span *sp = &st.spans[j];
                int k = pp_prog_label_stage(sp->name);
                if (k < 0 || sp->name[0] == 'S') continue;
                if (s->stage_device[k] == d) ok &= sp->lane == lane;
                if (sp->lane != lane) continue;
                while (p < s->n_actions[d] && s->actions[d][p].kind != PP_ACT_F &&
                       s->actions[d][p].kind != PP_ACT_B && s->actions[d][p].kind != PP_ACT_I &&
                       s->actions[d][p].kind != PP_ACT_W)
                    p++;
                char want[96], a[48];
                if (p == s->n_actions[d]) {
                    ok = 0;
                    break;
                }
                pp_action_format(s->actions[d][p++], a, sizeof a);
                /* "3F2" -> "F2 stage3" */
                const char *kind = a;
                while (*kind >= '0' && *kind <= '9') kind++;
                snprintf(want, sizeof want, "%s stage%d", kind, s->actions[d][p - 1].stage);
                ok &= strcmp(sp->name, want) == 0;
            }
            CHECK_MSG(ok, "%s device %d: lane order", what, d);
        }
        pp_step_stats_free(&st);
    }
    pp_executor_free(ex);
}

static void test_builtins(void)
{
    static const int ms[] = {1, 3, 4, 8};
    int runs = 0;
    for (int kind = 0; kind < PP_SCHEDULE_KINDS; kind++) {
        if (kind == PP_SCHEDULE_FORWARD) continue;
        for (int D = 2; D <= 4; D++)
            for (int V = 1; V <= 2; V++)
                for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                    ut_shape u;
                    pp_schedule s;
                    pp_error err;
                    if (ut_shape_make(&u, (pp_schedule_kind)kind, D, V, ms[mi])) continue;
                    int sizes[MAX_MB];
                    for (int i = 0; i < ms[mi]; i++) sizes[i] = 1 + (i % 3 == 1) + (i % 3 == 2) * 2;
                    u.shape.mb_sizes = sizes;
                    if (pp_schedule_generate(&s, (pp_schedule_kind)kind, &u.shape, &err) != PP_OK)
                        continue; /* a placement the kind does not take */
                    char what[96];
                    snprintf(what, sizeof what, "%s D=%d V=%d m=%d", s.name, D, V, ms[mi]);
                    run_checked(&s, what);
                    runs++;
                    pp_schedule_free(&s);
                }
    }
    CHECK_MSG(runs >= 80, "%d runs", runs);
}

/* Every file torch wrote, as a program from a file. */
static void test_torch_files(const char *dir)
{
    DIR *dp = opendir(dir);
    CHECK_MSG(dp != NULL, "%s", dir);
    if (!dp) return;
    int runs = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".csv")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        pp_schedule s;
        pp_error err;
        if (pp_schedule_load_csv(path, NULL, &s, &err) != PP_OK) {
            CHECK_MSG(0, "%s", err.msg);
            continue;
        }
        run_checked(&s, e->d_name);
        runs++;
        pp_schedule_free(&s);
    }
    closedir(dp);
    CHECK_MSG(runs == 45, "%d files", runs);
}

/* A run refuses stages of one device on two contexts, and I/W without them. */
static void test_placement_checks(void)
{
    ut_shape u;
    pp_schedule s;
    pp_error err;
    CHECK(ut_shape_make(&u, PP_SCHEDULE_ZBV, 2, 2, 3) == 0);
    CHECK_OK(pp_schedule_generate(&s, PP_SCHEDULE_ZBV, &u.shape, &err), &err);
    fake_stage fs[4];
    pp_stage_desc desc[4];
    for (int k = 0; k < 4; k++) {
        fs[k] = (fake_stage){.index = k, .S = 4, .batch = 3, .m = 3, .dev = cpus[k],
                             .w = 1.0f};
        desc[k] = (pp_stage_desc){cpus[k], &fake_ops, &fs[k]};
    }
    pp_executor *ex;
    CHECK_OK(pp_executor_new(desc, 4, 0, &ex, &err), &err);
    CHECK(pp_executor_run(ex, &s, NULL, &err) == PP_ERR_INVALID);
    CHECK_MSG(strcmp(err.msg, "executor: schedule zbv places stages 0 and 3 on one device, but "
                              "they are on cpu:0 (rank 0) and cpu:3 (rank 0)") == 0, "%s", err.msg);
    pp_executor_free(ex);
    for (int k = 0; k < 4; k++) desc[k] = (pp_stage_desc){cpus[s.stage_device[k]], &no_split_ops,
                                                          &fs[k]};
    CHECK_OK(pp_executor_new(desc, 4, 0, &ex, &err), &err);
    CHECK(pp_executor_run(ex, &s, NULL, &err) == PP_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "splits the backward (I and W), but stage 3 (cpu:0) cannot") != NULL,
              "%s", err.msg);
    pp_executor_free(ex);
    pp_schedule_free(&s);
}

int main(int argc, char **argv)
{
    pp_error err;
    if (pp_registry_new(&reg, &err) != PP_OK) return 1;
    for (int i = 0; i < 8; i++)
        if (pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, i}, &cpus[i], &err) != PP_OK)
            return 1;
    test_builtins();
    test_torch_files(argc > 1 ? argv[1] : "tests/schedules/torch");
    test_placement_checks();
    pp_registry_free(reg);
    return check_summary("programs");
}
