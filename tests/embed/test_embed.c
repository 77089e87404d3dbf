/*
 * test_embed.c - the embedding contract of pipeline/pipeline_run.h, seen from
 * an application that includes only that header:
 *   - version: the macros, PP_VERSION_NUMBER and pp_version() agree;
 *   - status returns: bad plans give PP_ERR_INPUT with "NAME:LINE:COL: ...",
 *     a missing checkpoint PP_ERR_INPUT naming the file; nothing is printed;
 *   - ownership: the plan is freed right after pp_pipeline_new and the
 *     pipeline keeps working (AddressSanitizer watches);
 *   - no object: a NULL pipeline, plan, path or metadata array, and an
 *     atomic file not open, give PP_ERR_INVALID, never a crash (a NULL
 *     pp_error too, replicas in one process included); the one
 *     header declares every public header's functions (clip.h's, trace.h's);
 *     evaluate takes a NULL result;
 *   - threading: two pipelines driven from two threads at once give the same
 *     losses, bitwise, as one pipeline run alone (no global state; clean
 *     under ThreadSanitizer);
 *   - replicas in one process: a plan with `replicas: 2` naming no rank runs
 *     both replicas from one pp_pipeline_new (a thread each), the same bits
 *     as an application running the two ranks of its own job of threads
 *     (pp_comm_local_new, a pipeline per thread): losses and checkpoints;
 *     the first loss that of one replica on the whole batch;
 *   - custom stages: an error returned by a stage callback comes back from
 *     pp_executor_run with the stage, device and micro-batch, and the
 *     executor stays usable;
 *   - schedule programs: a plan's program built (pp_pipeline_plan_schedule),
 *     printed as CSV, loaded back from a file named by another plan, which
 *     trains with the same losses; a bad program's error names its place;
 *     custom stages run a zero-bubble V program once they split their
 *     backward (I, W), and are told clearly when they do not.
 * Every call given a NULL pp_error: test_null_error.c.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/pipeline_run.h"
#include "pipeline/pipeline_run.h" /* include guards: a second include is harmless */
#include "tests/check.h"
#include "tests/embed/fail_stage.h"

enum { STEPS = 2 };

static const char tiny_plan[] =
    "model: {name: resnet18, num_classes: 10, stem: cifar}\n"
    "batch: {size: 4, split_size: 2}\n"
    "schedule: 1f1b\n"
    "optimizer: {type: sgd, lr: 0.01, momentum: 0.9}\n"
    "data: {format: synthetic, image_size: [8, 8]}\n"
    "seed: 5\n"
    "stages:\n"
    "  - device: cpu:0\n"
    "    layers: [conv1, bn1, relu, maxpool, layer1, layer2]\n"
    "  - device: cpu:1\n"
    "    layers: [layer3, layer4, avgpool, fc]\n";

static void test_version(void)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%d.%d.%d", PP_VERSION_MAJOR, PP_VERSION_MINOR, PP_VERSION_PATCH);
    CHECK(strcmp(buf, PP_VERSION_STRING) == 0);
    CHECK(strcmp(pp_version(), PP_VERSION_STRING) == 0);
    CHECK(PP_VERSION_NUMBER == PP_VERSION_MAJOR * 10000 + PP_VERSION_MINOR * 100 + PP_VERSION_PATCH);
    CHECK(PP_VERSION_NUMBER > 0);
}

/* Bad plans: status and the place of the first problem. */
static void test_plan_errors(void)
{
    static const struct {
        const char *text;
        const char *prefix; /* start of the first diagnostic */
    } cases[] = {
        {"model: {name: resnet18}\nbatch: {size: 0, split_size: 1}\nstages:\n  - device: cpu:0\n"
         "    layers: [conv1]\n",
         "bad.yaml:2:"},
        {"model: {name: resnet7}\nbatch: {size: 4, split_size: 2}\nstages:\n  - device: cpu:0\n",
         "bad.yaml:1:"},
        {"model: {name: resnet18, num_classes: 10, stem: cifar}\nbatch: {size: 4, split_size: 2}\n"
         "stages:\n  - device: gpu:0\n    layers: [conv1]\n",
         "bad.yaml:4:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_diag diag;
        pp_diag_clear(&diag);
        static pp_plan sentinel;
        pp_plan *plan = &sentinel; /* must be reset to NULL on failure */
        pp_status s = pp_plan_parse_string("bad.yaml", cases[i].text, strlen(cases[i].text), &plan,
                                           &diag);
        CHECK_MSG(s == PP_ERR_INPUT, "case %zu: %s", i, pp_status_name(s));
        CHECK(plan == NULL);
        CHECK_MSG(diag.count >= 1 &&
                      strncmp(diag.items[0].text, cases[i].prefix, strlen(cases[i].prefix)) == 0,
                  "case %zu: '%s' does not start with '%s'", i,
                  diag.count ? diag.items[0].text : "", cases[i].prefix);
        pp_error err;
        pp_error_clear(&err);
        CHECK(pp_diag_to_error(&diag, &err) == PP_ERR_INPUT && strstr(err.msg, "bad.yaml:"));
    }
}

static pp_status make_pipeline(pp_pipeline **out, pp_error *err)
{
    pp_diag diag;
    pp_diag_clear(&diag);
    pp_plan *plan = NULL;
    pp_status s = pp_plan_parse_string("tiny.yaml", tiny_plan, sizeof tiny_plan - 1, &plan, &diag);
    if (s != PP_OK) return pp_diag_to_error(&diag, err);
    s = pp_pipeline_resolve_plan(plan, err);
    if (s == PP_OK) s = pp_pipeline_new(plan, NULL, out, err);
    pp_plan_free(plan); /* the pipeline keeps its own copy */
    return s;
}

typedef struct run_arg {
    double loss[STEPS];
    pp_status status;
    pp_error err;
} run_arg;

/* STEPS steps of pipe (when status is PP_OK), their losses into loss. */
static pp_status run_steps(pp_pipeline *pipe, pp_status status, double *loss, pp_error *err)
{
    for (int i = 0; status == PP_OK && i < STEPS; i++) {
        pp_step_result r;
        status = pp_pipeline_step(pipe, &r, err);
        if (status == PP_OK) loss[i] = r.loss;
    }
    return status;
}

static void *run_pipeline(void *p)
{
    run_arg *a = p;
    pp_pipeline *pipe = NULL;
    pp_error_clear(&a->err);
    a->status = make_pipeline(&pipe, &a->err);
    a->status = run_steps(pipe, a->status, a->loss, &a->err);
    pp_pipeline_free(pipe);
    return NULL;
}

static void test_pipeline_api(void)
{
    pp_error err;
    pp_error_clear(&err);
    pp_pipeline *pipe = NULL;
    CHECK_OK(make_pipeline(&pipe, &err), &err);
    if (!pipe) return;
    CHECK(pp_pipeline_stage_count(pipe) == 2);
    for (int i = 0; i < STEPS; i++) {
        pp_step_result r;
        CHECK_OK(pp_pipeline_step(pipe, &r, &err), &err);
        CHECK_MSG(r.step == i && r.loss > 0 && isfinite(r.loss) && r.step_ms > 0,
                  "step %lld: loss %g, %g ms", (long long)r.step, r.loss, r.step_ms);
    }
    CHECK(pp_pipeline_steps_done(pipe) == STEPS);
    pp_pipeline_report rep;
    pp_pipeline_report_get(pipe, &rep);
    CHECK(rep.steps == STEPS && rep.step_ms_median > 0 && rep.images_per_s > 0);
    CHECK(rep.bubble_frac >= 0 && rep.bubble_frac < 1 && rep.copy_bytes > 0);
    int64_t params = 0;
    for (int k = 0; k < 2; k++) {
        pp_stage_report st;
        pp_pipeline_stage_report(pipe, k, &st);
        CHECK(strcmp(st.device, k == 0 ? "cpu:0" : "cpu:1") == 0);
        CHECK(st.forward_ms > 0 && st.backward_ms > 0 && st.peak_bytes > 0);
        params += st.params;
    }
    /* ResNet-18 with a 3x3 CIFAR stem and 10 classes (torchvision's count). */
    CHECK_MSG(params == 11173962, "params %lld", (long long)params);

    pp_error_clear(&err);
    pp_status s = pp_pipeline_load(pipe, "/nonexistent/ckpt.safetensors", &err);
    CHECK(s == PP_ERR_INPUT && strstr(err.msg, "/nonexistent/ckpt.safetensors"));
    CHECK(pp_pipeline_steps_done(pipe) == STEPS);
    pp_pipeline_free(pipe);
}

/* Calls on no object: PP_ERR_INVALID with the function's name. */
static void test_null_arguments(void)
{
    pp_error err;
    pp_step_result r;
    pp_eval_result e;
    pp_pipeline_prediction pr;
    pp_atomic_file af = {0};
    const pp_pipeline_save_options no_meta = {.n_meta = 2};
    struct {
        const char *what;
        pp_status s;
    } calls[] = {
        {"pp_pipeline_step", pp_pipeline_step(NULL, &r, &err)},
        {"pp_pipeline_evaluate", pp_pipeline_evaluate(NULL, &e, &err)},
        {"pp_pipeline_save", pp_pipeline_save(NULL, "x.safetensors", true, &err)},
        {"pp_pipeline_load", pp_pipeline_load(NULL, "x.safetensors", &err)},
        {"pp_pipeline_write_trace", pp_pipeline_write_trace(NULL, "x.json", &err)},
        {"pp_pipeline_predict_plan", pp_pipeline_predict_plan(NULL, &pr, &err)},
        {"pp_pipeline_resolve_plan", pp_pipeline_resolve_plan(NULL, &err)},
        {"pp_atomic_open", pp_atomic_open(&af, NULL, &err)},
        {"pp_atomic_commit", pp_atomic_commit(&af, &err)},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
        CHECK_MSG(calls[i].s == PP_ERR_INVALID, "%s(NULL): %s", calls[i].what,
                  pp_status_name(calls[i].s));
    pp_atomic_abort(&af);
    pp_pipeline *pipe = NULL;
    CHECK_OK(make_pipeline(&pipe, &err), &err);
    if (!pipe) return;
    pp_status s = pp_pipeline_save(pipe, NULL, true, &err);
    CHECK_MSG(s == PP_ERR_INVALID, "save to NULL: %s", pp_status_name(s));
    s = pp_pipeline_save_with(pipe, "meta.safetensors", &no_meta, &err);
    CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "2 metadata entries") &&
                  access("meta.safetensors", F_OK) != 0,
              "metadata NULL: %s (%s)", pp_status_name(s), err.msg);
    s = pp_pipeline_load(pipe, NULL, &err);
    CHECK_MSG(s == PP_ERR_INVALID, "load from NULL: %s", pp_status_name(s));
    /* evaluate with no result wanted: the plan has no eval section */
    s = pp_pipeline_evaluate(pipe, NULL, &err);
    CHECK_MSG(s == PP_ERR_INVALID && strstr(err.msg, "no eval section"), "evaluate(NULL): %s",
              err.msg);
    pp_pipeline_free(pipe);
    /* every public header's declarations through the one include */
    const pp_trace_clock clock = {0};
    CHECK(fabsf(pp_clip_coefficient(2.0f, 1.0) - 0.5f) < 1e-6f && sizeof clock > 0);
}

/* Two pipelines on two threads at once, against one run alone. */
static void test_threads(void)
{
    run_arg alone, a[2];
    run_pipeline(&alone);
    CHECK_MSG(alone.status == PP_OK, "%s", alone.err.msg);
    pthread_t th[2];
    for (int t = 0; t < 2; t++) CHECK(pthread_create(&th[t], NULL, run_pipeline, &a[t]) == 0);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++) {
        CHECK_MSG(a[t].status == PP_OK, "thread %d: %s", t, a[t].err.msg);
        for (int i = 0; a[t].status == PP_OK && i < STEPS; i++)
            CHECK_MSG(a[t].loss[i] == alone.loss[i], "thread %d step %d: loss %.9g, alone %.9g", t,
                      i, a[t].loss[i], alone.loss[i]);
    }
}

/* tiny_plan as two replicas in this process, each with both stages. */
static pp_status make_replicated(const pp_pipeline_options *opts, pp_pipeline **out, pp_error *err)
{
    static const char text[] =
        "model: {name: resnet18, num_classes: 10, stem: cifar}\n"
        "batch: {size: 4, split_size: 2}\n"
        "schedule: 1f1b\n"
        "optimizer: {type: sgd, lr: 0.01, momentum: 0.9}\n"
        "data: {format: synthetic, image_size: [8, 8]}\n"
        "seed: 5\n"
        "replicas: 2\n"
        "stages:\n"
        "  - device: [cpu:0, cpu:0]\n"
        "    layers: [conv1, bn1, relu, maxpool, layer1, layer2]\n"
        "  - device: [cpu:1, cpu:1]\n"
        "    layers: [layer3, layer4, avgpool, fc]\n";
    pp_diag diag;
    pp_diag_clear(&diag);
    pp_plan *plan = NULL;
    pp_status s = pp_plan_parse_string("replicas.yaml", text, sizeof text - 1, &plan, &diag);
    if (s != PP_OK) return pp_diag_to_error(&diag, err);
    s = pp_pipeline_new(plan, opts, out, err);
    pp_plan_free(plan);
    return s;
}

typedef struct rank_arg {
    pp_comm *comm;
    const char *save;
    double loss[STEPS];
    pp_status status;
    pp_error err;
} rank_arg;

/* One rank of the application's own job of threads. */
static void *run_rank(void *p)
{
    rank_arg *a = p;
    pp_pipeline *pipe = NULL;
    pp_error_clear(&a->err);
    pp_pipeline_options opts = {.comm = a->comm};
    a->status = make_replicated(&opts, &pipe, &a->err);
    a->status = run_steps(pipe, a->status, a->loss, &a->err);
    if (a->status == PP_OK) a->status = pp_pipeline_save(pipe, a->save, true, &a->err);
    pp_pipeline_free(pipe);
    return NULL;
}

static void test_replicas_in_process(void)
{
    char dir[256], auto_path[300], own_path[300];
    if (!check_mkdtemp(dir, sizeof dir, "embed-replicas")) return;
    snprintf(auto_path, sizeof auto_path, "%s/auto.safetensors", dir);
    snprintf(own_path, sizeof own_path, "%s/own.safetensors", dir);
    pp_error err;
    pp_error_clear(&err);
    pp_pipeline *pipe = NULL;
    double loss[STEPS] = {0};
    CHECK_OK(make_replicated(NULL, &pipe, &err), &err);
    for (int i = 0; pipe && i < STEPS; i++) {
        pp_step_result r;
        CHECK_OK(pp_pipeline_step(pipe, &r, &err), &err);
        loss[i] = r.loss;
        CHECK(r.batch == 4);
    }
    if (pipe) {
        pp_pipeline_report rep;
        pp_pipeline_report_get(pipe, &rep);
        CHECK_MSG(rep.ranks == 1 && rep.replicas == 2, "ranks %d replicas %d", rep.ranks,
                  rep.replicas);
        pp_replica_report rr;
        pp_pipeline_replica_report(pipe, 1, &rr);
        CHECK(rr.batch == 2 && rr.step_ms > 0);
        CHECK_OK(pp_pipeline_save(pipe, auto_path, true, &err), &err);
        /* a failure with no error wanted (NULL): the replicas' errors are
         * copied into one of the library's own */
        CHECK(pp_pipeline_load(pipe, "/nonexistent/ckpt.safetensors", NULL) == PP_ERR_INPUT);
    }
    pp_pipeline_free(pipe);

    pp_comm *comms[2] = {0};
    CHECK_OK(pp_comm_local_new(2, comms, &err), &err);
    rank_arg a[2] = {{.comm = comms[0], .save = own_path}, {.comm = comms[1], .save = own_path}};
    pthread_t th[2];
    for (int t = 0; t < 2; t++) CHECK(pthread_create(&th[t], NULL, run_rank, &a[t]) == 0);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++) {
        CHECK_MSG(a[t].status == PP_OK, "rank %d: %s", t, a[t].err.msg);
        for (int i = 0; i < STEPS; i++)
            CHECK_MSG(a[t].loss[i] == loss[i], "rank %d step %d: loss %.9g, in-process %.9g", t,
                      i, a[t].loss[i], loss[i]);
        pp_comm_free(comms[t]);
    }
    size_t na = 0, nb = 0;
    unsigned char *fa = check_read_file(auto_path, &na), *fb = check_read_file(own_path, &nb);
    CHECK_MSG(fa && fb && na == nb && memcmp(fa, fb, na) == 0,
              "checkpoints of in-process replicas and of an own job of threads differ");
    free(fa);
    free(fb);
    /* both replicas see half the batch with the same weights as one pipeline
     * on the whole batch: the first loss is the same mean */
    run_arg alone;
    run_pipeline(&alone);
    CHECK_MSG(alone.status == PP_OK && fabs(alone.loss[0] - loss[0]) <= 1e-6 * fabs(loss[0]),
              "first loss: replicas %.9g, one pipeline %.9g", loss[0], alone.loss[0]);
    remove(auto_path);
    remove(own_path);
    remove(dir);
}

static void test_stage_error(void)
{
    pp_error err;
    pp_error_clear(&err);
    pp_registry *reg = NULL;
    pp_executor *exec = NULL;
    pp_schedule sched = {0};
    pp_device_ctx *dev[2] = {NULL, NULL};
    pp_test_fail_stage fs[2] = {{0, -1}, {1, 2}};
    CHECK_OK(pp_registry_new(&reg, &err), &err);
    for (int i = 0; reg && i < 2; i++)
        CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, i}, &dev[i], &err), &err);
    if (!dev[0] || !dev[1]) {
        pp_registry_free(reg);
        return;
    }
    pp_stage_desc desc[2] = {{dev[0], &pp_test_fail_ops, &fs[0]},
                             {dev[1], &pp_test_fail_ops, &fs[1]}};
    CHECK_OK(pp_executor_new(desc, 2, 0, &exec, &err), &err);
    CHECK_OK(pp_schedule_build(&sched, PP_SCHEDULE_GPIPE, 2, 4, NULL, &err), &err);
    if (exec && sched.stages == 2) {
        pp_status s = pp_executor_run(exec, &sched, NULL, &err);
        CHECK(s == PP_ERR_NUMERIC);
        CHECK_MSG(strstr(err.msg, "stage 1 (cpu:1) micro-batch 2") && strstr(err.msg, "loss is NaN"),
                  "message: %s", err.msg);
        fs[1].fail_mb = -1;
        pp_step_stats stats;
        CHECK_OK(pp_executor_run(exec, &sched, &stats, &err), &err);
        CHECK(stats.stages == 2 && stats.micro_batches == 4);
        pp_step_stats_free(&stats);
    }
    pp_schedule_free(&sched);
    pp_executor_free(exec);
    pp_registry_free(reg);
}

static pp_status fs_input(void *user, pp_exec *ex, int mb, int mb_size,
                          const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    return pp_test_fail_backward(user, ex, mb, mb_size, grad_out, grad_in, err);
}

static pp_status fs_weight(void *user, pp_exec *ex, int mb, int mb_size, pp_error *err)
{
    return PP_OK; /* no parameters */
}

static const pp_stage_ops split_ops = {
    .out_shape = pp_test_fail_shape,
    .forward = pp_test_fail_forward,
    .backward = pp_test_fail_backward,
    .backward_input = fs_input,
    .backward_weight = fs_weight,
};

/* Losses of `steps` steps of the plan text (NULL on failure). */
static bool plan_losses(const char *name, const char *text, double *losses, int steps)
{
    pp_plan *plan = NULL;
    pp_diag diag;
    pp_error err;
    pp_pipeline *p = NULL;
    char buf[2048];
    pp_status s = pp_plan_parse_string(name, text, strlen(text), &plan, &diag);
    CHECK_MSG(s == PP_OK, "%s", pp_diag_format(&diag, buf, sizeof buf));
    if (s == PP_OK) s = pp_pipeline_new(plan, NULL, &p, &err);
    pp_plan_free(plan);
    for (int i = 0; i < steps && s == PP_OK; i++) {
        pp_step_result r;
        s = pp_pipeline_step(p, &r, &err);
        losses[i] = r.loss;
    }
    CHECK_MSG(s == PP_OK, "%s: %s", name, err.msg);
    pp_pipeline_free(p);
    return s == PP_OK;
}

static void test_programs(void)
{
    static const char head[] =
        "model: {name: resnet18, num_classes: 10, stem: cifar}\n"
        "batch: {size: 8, split_size: 2}\n"
        "optimizer: {type: sgd, lr: 0.01, momentum: 0.9}\n"
        "data: {format: synthetic, image_size: [8, 8]}\n"
        "seed: 5\n"
        "stages:\n"
        "  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1]}\n"
        "  - {device: cpu:1, layers: [layer2]}\n"
        "  - {device: cpu:0, layers: [layer3]}\n"
        "  - {device: cpu:1, layers: [layer4, avgpool, fc]}\n";
    char text[2048], dir[256], path[512];
    if (!check_mkdtemp(dir, sizeof dir, "pp_embed")) return;
    snprintf(path, sizeof path, "%s/program.csv", dir);
    snprintf(text, sizeof text, "%sschedule: interleaved1f1b\n", head);
    pp_plan *plan = NULL;
    pp_diag diag;
    pp_error err;
    CHECK(pp_plan_parse_string("il.yaml", text, strlen(text), &plan, &diag) == PP_OK);
    pp_schedule s;
    CHECK_OK(pp_pipeline_plan_schedule(plan, &s, &err), &err);
    pp_plan_free(plan);
    CHECK(s.stages == 4 && s.devices == 2 && s.stage_device[2] == 0);
    CHECK_OK(pp_schedule_validate(&s, &err), &err);
    size_t n = pp_schedule_format_csv(&s, false, NULL, 0);
    char *csv = malloc(n + 1);
    FILE *f = fopen(path, "wb");
    if (csv && f) {
        pp_schedule_format_csv(&s, false, csv, n + 1);
        fwrite(csv, 1, n, f);
    }
    if (f) fclose(f);
    free(csv);
    pp_schedule_free(&s);
    /* the same program, from the file, trains the same */
    double a[STEPS], b[STEPS];
    bool ok = plan_losses("il.yaml", text, a, STEPS);
    snprintf(text, sizeof text, "%sschedule: {file: \"%s\"}\n", head, path);
    ok = plan_losses("file.yaml", text, b, STEPS) && ok;
    for (int i = 0; ok && i < STEPS; i++) CHECK(a[i] == b[i]);
    /* a bad program: its place */
    static const char bad[] = "0F0,0F1,0B0,0B1\r\n1F0,1X1\r\n";
    CHECK(pp_schedule_parse_csv("bad.csv", bad, strlen(bad), NULL, &s, &err) == PP_ERR_INPUT);
    CHECK_MSG(strncmp(err.msg, "bad.csv:2:2: unknown action '1X1'", 33) == 0, "%s", err.msg);
    unlink(path);
    rmdir(dir);

    /* custom stages on a V: two stages per device, I and W */
    pp_registry *reg = NULL;
    pp_device_ctx *dev[2] = {NULL, NULL};
    CHECK_OK(pp_registry_new(&reg, &err), &err);
    for (int i = 0; reg && i < 2; i++)
        CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, i}, &dev[i], &err), &err);
    int place[4];
    CHECK_OK(pp_schedule_place(PP_PLACEMENT_V, 4, 2, place, &err), &err);
    pp_schedule_shape shape = {4, 2, 4, place, NULL};
    CHECK_OK(pp_schedule_generate(&s, PP_SCHEDULE_ZBV, &shape, &err), &err);
    pp_test_fail_stage fs[4] = {{0, -1}, {1, -1}, {2, -1}, {3, -1}};
    for (int pass = 0; pass < 2 && dev[0] && dev[1]; pass++) {
        pp_stage_desc desc[4];
        for (int k = 0; k < 4; k++)
            desc[k] = (pp_stage_desc){dev[place[k]], pass ? &split_ops : &pp_test_fail_ops, &fs[k]};
        pp_executor *exec = NULL;
        CHECK_OK(pp_executor_new(desc, 4, 0, &exec, &err), &err);
        pp_status st = pp_executor_run(exec, &s, NULL, &err);
        if (pass)
            CHECK_OK(st, &err);
        else
            CHECK_MSG(st == PP_ERR_UNSUPPORTED && strstr(err.msg, "splits the backward"), "%s",
                      err.msg);
        pp_executor_free(exec);
    }
    pp_schedule_free(&s);
    pp_registry_free(reg);
}

int main(void)
{
    test_version();
    test_plan_errors();
    test_pipeline_api();
    test_null_arguments();
    test_threads();
    test_replicas_in_process();
    test_stage_error();
    test_programs();
    return check_summary("embed");
}
