/*
 * test_null_error.c - no error wanted: every public header's calls given a
 * NULL pp_error return their status and nothing else, where the failure is
 * found deep inside (a schedule that does not fit the stages' devices, a
 * replica's device that does not exist, a bad entry in a list of tensors, a
 * stage's output shape refused, a file that cannot be written) as much as at
 * the arguments, and on success. Seen from an application that includes only
 * pipeline/pipeline_run.h, as test_embed.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/pipeline_run.h"
#include "tests/check.h"
#include "tests/embed/fail_stage.h"

/* A call given no pp_error (NULL) returns want. */
#define CHECK_NULL_ERR(want, call)                                                           \
    do {                                                                                     \
        pp_status check_s_ = (call);                                                         \
        CHECK_MSG(check_s_ == (want), "%s: %s, expected %s", #call, pp_status_name(check_s_), \
                  pp_status_name(want));                                                     \
    } while (0)

/* tiny_plan with the schedule and the first stage's device given (NULL when
 * the text does not parse: a failed check). */
static pp_plan *tiny_plan_with(const char *schedule, const char *device0)
{
    char text[1024];
    snprintf(text, sizeof text,
             "model: {name: resnet18, num_classes: 10, stem: cifar}\n"
             "batch: {size: 4, split_size: 2}\n"
             "schedule: %s\n"
             "optimizer: {type: sgd, lr: 0.01, momentum: 0.9}\n"
             "data: {format: synthetic, image_size: [8, 8]}\n"
             "seed: 5\n"
             "stages:\n"
             "  - device: %s\n"
             "    layers: [conv1, bn1, relu, maxpool, layer1, layer2]\n"
             "  - device: cpu:1\n"
             "    layers: [layer3, layer4, avgpool, fc]\n",
             schedule, device0);
    pp_diag diag;
    pp_diag_clear(&diag);
    pp_plan *plan = NULL;
    char buf[2048];
    pp_status s = pp_plan_parse_string("tiny.yaml", text, strlen(text), &plan, &diag);
    CHECK_MSG(s == PP_OK, "%s", pp_diag_format(&diag, buf, sizeof buf));
    return plan;
}

/* Plans and pipelines: the plan's calls, a schedule that does not fit the
 * stages' devices, a device that does not exist (a replica's too), data
 * shown where no file can be written. */
static void null_error_plans(const char *dir)
{
    pp_plan *plan = tiny_plan_with("1f1b", "cpu:0");
    if (!plan) return;
    pp_schedule sched;
    pp_pipeline_prediction pr;
    pp_fit_stage fs[2];
    pp_unit_times times;
    pp_fit_result res;
    pp_fit_candidate cand = {.split_size = 8}; /* more than the batch of 4 */
    pp_plan_step_keys keys;
    char *text = NULL;
    size_t len = 0;
    int64_t bytes;
    char path[512];
    snprintf(path, sizeof path, "%s/batch.safetensors", dir);
    CHECK_NULL_ERR(PP_OK, pp_pipeline_resolve_plan(plan, NULL));
    CHECK_NULL_ERR(PP_OK, pp_pipeline_plan_schedule(plan, &sched, NULL));
    pp_schedule_free(&sched);
    CHECK_NULL_ERR(PP_OK, pp_pipeline_predict_plan(plan, &pr, NULL));
    CHECK_NULL_ERR(PP_OK, pp_fit_predict(plan, fs, NULL));
    CHECK_NULL_ERR(PP_OK, pp_fit_caps(plan, fs, NULL));
    fs[1].cap = 1; /* a byte: the prediction does not fit */
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_fit_check(plan, fs, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_fit_profile(plan, plan->stages[0].device, 0, &times, NULL,
                                                  NULL));
    CHECK_NULL_ERR(PP_OK, pp_fit_resolve_plan(plan, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID,
                   pp_fit_optimize(plan, &(pp_fit_options){.memory_limit = -1}, &res, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_fit_emit(plan, &cand, 0, &text, &len, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_plan_show_data(plan, 0, path, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_plan_dump_data(plan, 0, true, path, NULL));
    CHECK_NULL_ERR(PP_OK, pp_plan_dump_data(plan, 0, false, path, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_plan_split(plan, 8, 0, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_plan_restage(plan, 99, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_plan_apply_device_map(plan, "cpu:0=", NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_plan_check_micro_batches(NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_plan_resolve_auto(NULL, NULL, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_plan_resolve_auto_in_flight(NULL, NULL, NULL, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_plan_emit(NULL, &text, &len, NULL));
    CHECK_NULL_ERR(PP_OK, pp_plan_emit(plan, &text, &len, NULL));
    free(text);
    CHECK_NULL_ERR(PP_OK, pp_plan_step_keys_get(plan, &keys, NULL));
    pp_plan_step_keys_free(&keys);
    CHECK_NULL_ERR(PP_OK, pp_plan_run_keys_get(plan, &keys, NULL));
    pp_plan_step_keys_free(&keys);
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_plan_parse_bytes("12 parsecs", &bytes, NULL));
    setenv("PP_EMBED_TEST_MAX", "lots", 1);
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_plan_cache_max("PP_EMBED_TEST_MAX", 1, &bytes, NULL));
    unsetenv("PP_EMBED_TEST_MAX");
    pp_pipeline *pipe = NULL;
    CHECK_NULL_ERR(PP_OK, pp_pipeline_new(plan, NULL, &pipe, NULL));
    const int32_t prompt[1] = {1};
    int32_t out[4];
    const pp_generate_options gen = {.tokens = 2};
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_pipeline_generate(pipe, prompt, 1, &gen, out, NULL));
    pp_pipeline_free(pipe);
    pp_plan_free(plan);

    /* zbv runs two stages per device in a V: not these two on two devices */
    plan = tiny_plan_with("zbv", "cpu:0");
    if (plan) {
        double step_ms, bubble;
        CHECK_NULL_ERR(PP_ERR_INPUT, pp_pipeline_plan_schedule(plan, &sched, NULL));
        CHECK_NULL_ERR(PP_ERR_INPUT, pp_pipeline_predict_plan(plan, &pr, NULL));
        CHECK_NULL_ERR(PP_ERR_INPUT, pp_pipeline_predict(plan, &step_ms, &bubble, NULL, NULL,
                                                         NULL));
        CHECK_NULL_ERR(PP_ERR_INPUT, pp_fit_predict(plan, fs, NULL));
        CHECK(pp_fit_in_flight(plan, 0) == 0); /* no schedule: nothing in flight */
        pipe = NULL;
        CHECK_NULL_ERR(PP_ERR_INPUT, pp_pipeline_new(plan, NULL, &pipe, NULL));
        CHECK(pipe == NULL);
        pp_plan_free(plan);
    }
    /* a device no machine has, in one pipeline and in a replica of two */
    plan = tiny_plan_with("1f1b", "cuda:99");
    if (plan) {
        CHECK_NULL_ERR(PP_ERR_INPUT, pp_pipeline_new(plan, NULL, &pipe, NULL));
        pp_plan_free(plan);
    }
    plan = NULL;
    static const char replicas[] =
        "model: {name: resnet18, num_classes: 10, stem: cifar}\n"
        "batch: {size: 4, split_size: 2}\n"
        "data: {format: synthetic, image_size: [8, 8]}\n"
        "replicas: 2\n"
        "stages:\n"
        "  - device: [cpu:0, cuda:99]\n"
        "    layers: [conv1, bn1, relu, maxpool, layer1, layer2]\n"
        "  - device: [cpu:1, cpu:1]\n"
        "    layers: [layer3, layer4, avgpool, fc]\n";
    pp_diag diag;
    CHECK(pp_plan_parse_string("replicas.yaml", replicas, sizeof replicas - 1, &plan, &diag) ==
          PP_OK);
    if (plan) {
        CHECK_NULL_ERR(PP_ERR_INPUT, pp_pipeline_new(plan, NULL, &pipe, NULL));
        pp_plan_free(plan);
    }
    static const char bad[] = "model: {name: resnet7}\n";
    CHECK(pp_plan_parse_string("bad.yaml", bad, sizeof bad - 1, &plan, &diag) == PP_ERR_INPUT);
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_diag_to_error(&diag, NULL));

    /* a token source's windows shown as text: no file where no folder is */
    char corpus[512];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    static const char words[] = "the quick brown fox jumps over the lazy dog, again and again\n";
    check_write_file(corpus, words, sizeof words - 1);
    char gpt[1024];
    snprintf(gpt, sizeof gpt,
             "model: {name: gpt2, n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 256, "
             "block_size: 8}\n"
             "batch: {size: 2, micro_batches: 1}\n"
             "data: {format: text, file: \"%s\"}\n"
             "stages:\n  - {device: cpu:0, layers: [wte, wpe, h, ln_f, lm_head]}\n",
             corpus);
    CHECK(pp_plan_parse_string("gpt.yaml", gpt, strlen(gpt), &plan, &diag) == PP_OK);
    if (plan) {
        snprintf(path, sizeof path, "%s/windows.txt", dir);
        CHECK_NULL_ERR(PP_ERR_IO, pp_plan_show_data(plan, 2, "/nonexistent/windows.txt", NULL));
        CHECK_NULL_ERR(PP_OK, pp_plan_show_data(plan, 2, path, NULL));
        pp_plan_free(plan);
    }
}

static pp_status fail_numeric(pp_exec *ex, void *arg, pp_error *err)
{
    return pp_error_set(err, PP_ERR_NUMERIC, "loss is NaN");
}

static bool cancel_now(void *arg)
{
    return true;
}

static pp_exec *exec_of(void *user, pp_device_ctx *dev)
{
    return user;
}

static pp_status no_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    return pp_error_set(err, PP_ERR_INVALID, "no output shape for %d samples", mb_size);
}

static const pp_stage_ops no_shape_ops = {
    .out_shape = no_shape,
    .forward = pp_test_fail_forward,
    .backward = pp_test_fail_backward,
};

/* Every op of ops.h on tensors that are missing (NULL): PP_ERR_INVALID. */
static void null_error_ops(pp_exec *ex)
{
    pp_tensor *n = NULL; /* no tensor */
    pp_conv2d_desc conv;
    pp_pool_desc pool;
    const pp_bn_desc bn = {.n = 2, .c = 3, .h = 4, .w = 4, .eps = 1e-5f, .momentum = 0.1f};
    const pp_sgd_desc sgd = {.lr = 0.1f};
    const pp_dropout_desc drop = {.p = 0.1f};
    const pp_xent_desc xent = {.divisor = 1, .top_k = 1};
    float host[4];
    const pp_status want = PP_ERR_INVALID;
    CHECK_NULL_ERR(want, pp_conv2d_desc_init(&conv, 0, 3, 4, 4, 3, 3, 1, 1, NULL));
    CHECK_NULL_ERR(want, pp_pool_desc_init(&pool, 2, 3, 4, 4, 9, 1, 0, NULL));
    CHECK_NULL_ERR(PP_OK, pp_conv2d_desc_init(&conv, 2, 3, 4, 4, 3, 3, 1, 1, NULL));
    CHECK_NULL_ERR(PP_OK, pp_pool_desc_init(&pool, 2, 3, 4, 4, 2, 2, 0, NULL));
    CHECK_NULL_ERR(want, pp_conv2d_forward(ex, &conv, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_conv2d_backward_data(ex, &conv, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_conv2d_backward_data_accumulate(ex, &conv, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_conv2d_backward_filter(ex, &conv, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_batchnorm_forward_train(ex, &bn, n, n, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_batchnorm_forward_infer(ex, &bn, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_batchnorm_backward(ex, &bn, n, n, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_batchnorm_forward_act(ex, &bn, true, n, n, n, n, n, n, false, n, n,
                                                  n, NULL));
    CHECK_NULL_ERR(want, pp_batchnorm_backward_relu(ex, &bn, n, n, n, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_batchnorm_backward_add_relu(ex, &bn, n, n, n, n, n, n, n, n, n, n,
                                                        NULL));
    CHECK_NULL_ERR(want, pp_relu_forward(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_relu_backward(ex, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_sigmoid_forward(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_sigmoid_backward(ex, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_add(ex, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_accumulate(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_add_relu(ex, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_copy(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_copy_from_host(ex, host, n, NULL));
    CHECK_NULL_ERR(want, pp_copy_to_host(ex, n, host, NULL));
    CHECK_NULL_ERR(want, pp_zero(ex, n, NULL));
    CHECK_NULL_ERR(want, pp_cast(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_maxpool_forward(ex, &pool, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_maxpool_backward(ex, &pool, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_avgpool_forward(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_avgpool_backward(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_avgpool2d_forward(ex, &pool, n, n, NULL));
    CHECK_NULL_ERR(want, pp_avgpool2d_backward(ex, &pool, n, n, NULL));
    CHECK_NULL_ERR(want, pp_channel_bias_forward(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_channel_bias_backward(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_linear_forward(ex, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_linear_backward(ex, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_linear_backward_data(ex, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_linear_backward_weights(ex, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_softmax_xent(ex, n, n, 1.0f, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_softmax_xent_ex(ex, &xent, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_sgd_update(ex, &sgd, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_dense_forward(ex, PP_WEIGHT_IN_OUT, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_dense_backward_data(ex, PP_WEIGHT_IN_OUT, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_dense_backward_weights(ex, PP_WEIGHT_IN_OUT, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_dense_gelu_forward(ex, PP_WEIGHT_IN_OUT, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_dense_backward_data_gelu(ex, PP_WEIGHT_IN_OUT, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_dense_backward(ex, PP_WEIGHT_IN_OUT, n, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_layernorm_forward(ex, 1e-5f, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_layernorm_backward(ex, n, n, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_add_layernorm_forward(ex, 1e-5f, n, n, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_layernorm_backward_add(ex, n, n, n, n, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_gelu_forward(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_gelu_backward(ex, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_attention_forward(ex, 2, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_attention_forward_from(ex, 2, 0, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_attention_backward(ex, 2, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_attention_forward_dropout(ex, 2, &drop, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_attention_backward_dropout(ex, 2, &drop, n, n, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_dropout_forward(ex, &drop, n, n, NULL));
    CHECK_NULL_ERR(want, pp_dropout_backward(ex, &drop, n, n, NULL));
    CHECK_NULL_ERR(want, pp_embedding_forward(ex, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_embedding_backward(ex, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_position_forward(ex, n, n, n, NULL));
    CHECK_NULL_ERR(want, pp_position_backward(ex, n, n, NULL));
    CHECK_NULL_ERR(want, pp_delay(ex, -1, NULL));
    CHECK_NULL_ERR(PP_OK, pp_delay(ex, 0, NULL));
}

/* Devices, tensors, ops, files, streams, schedules, the executor and the
 * optimizer. */
static void null_error_runtime(const char *dir)
{
    pp_registry *reg = NULL;
    pp_device_ctx *dev = NULL, *none = NULL;
    pp_device_id id;
    CHECK_NULL_ERR(PP_OK, pp_registry_new(&reg, NULL));
    if (!reg) return;
    CHECK_NULL_ERR(PP_OK, pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &dev, NULL));
    if (!dev) {
        pp_registry_free(reg);
        return;
    }
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, -1}, &none,
                                                 NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_device_id_parse("gpu:0", &id, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_device_set_math(dev, (pp_math_mode)7, NULL));
    CHECK_NULL_ERR(PP_OK, pp_device_profiler(dev, false, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_device_memory_info(dev, NULL, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_device_peer_access(NULL, dev, NULL));
    void *mem = NULL;
    pp_tensor t = {0}, u = {0}, v;
    CHECK_NULL_ERR(PP_OK, pp_device_host_alloc(dev, 64, &mem, NULL));
    pp_device_host_free(dev, mem);
    dev->bytes_limit = 64; /* a device of 64 bytes */
    CHECK_NULL_ERR(PP_ERR_OOM, pp_device_account(dev, 1024, NULL));
    CHECK_NULL_ERR(PP_ERR_OOM, pp_device_alloc(dev, 1024, &mem, NULL));
    CHECK_NULL_ERR(PP_ERR_OOM, pp_tensor_alloc(&t, dev, PP_F32, 1, (int64_t[]){256}, NULL));
    dev->bytes_limit = 0;
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_tensor_alloc(&t, dev, PP_F32, 9, (int64_t[]){1}, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_tensor_zeros(&t, dev, PP_F32, 9, (int64_t[]){1}, NULL));
    pp_exec ex;
    CHECK_NULL_ERR(PP_OK, pp_exec_init(&ex, dev, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_tensor_alloc_on(&t, &ex, PP_F32, -1, (int64_t[]){1}, NULL));
    CHECK_NULL_ERR(PP_OK, pp_tensor_zeros(&t, dev, PP_F32, 2, (int64_t[]){2, 3}, NULL));
    CHECK_NULL_ERR(PP_OK, pp_tensor_alloc_on(&u, &ex, PP_F32, 1, (int64_t[]){5}, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_tensor_reshape(&t, 1, (int64_t[]){7}, &v, NULL));
    float host[6] = {0};
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_tensor_from_host(&t, host, 5, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_tensor_to_host(&t, host, 5, NULL));
    CHECK_NULL_ERR(PP_OK, pp_tensor_to_host(&t, host, sizeof host, NULL));
    CHECK_NULL_ERR(PP_OK, pp_exec_workspace(&ex, 64, &mem, NULL));
    CHECK_NULL_ERR(PP_OK, pp_exec_sync(&ex, NULL));

    /* ops: a list whose first tensor is missing, a copy between two shapes */
    pp_tensor *missing[1] = {NULL}, *mine[1] = {&t};
    const pp_tensor *const *cmissing = (const pp_tensor *const *)missing;
    double sums[1];
    const pp_sgd_desc sgd = {.lr = 0.1f};
    const pp_adamw_desc adamw = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                 .step = 1, .grad_scale = 1.0f};
    const pp_bn_stats_desc bn = {.m = 1, .sizes = (const int[]){2}, .momentum = 0.1f};
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_zero_multi(&ex, 1, missing, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_sgd_update_multi(&ex, &sgd, 1, missing, cmissing, missing,
                                                       NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_adamw_update_multi(&ex, &adamw, 1, missing, cmissing,
                                                         missing, missing, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_sumsq_multi(&ex, 1, cmissing, sums, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_scale_multi(&ex, 2.0f, 1, missing, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_batchnorm_stats_combine(&ex, &bn, 1, (const int64_t[]){1},
                                                              missing, missing, missing, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_copy(&ex, &t, &u, NULL));
    CHECK_NULL_ERR(PP_OK, pp_zero_multi(&ex, 1, mine, NULL));
    null_error_ops(&ex);

    /* files: no folder to write in, no file to read */
    char path[512];
    snprintf(path, sizeof path, "%s/null.safetensors", dir);
    const pp_ckpt_tensor ct = {"t", &t}, cu = {"t", &u};
    pp_checkpoint_info info;
    pp_checkpoint_verify_result vr;
    pp_atomic_file af;
    CHECK_NULL_ERR(PP_ERR_IO, pp_atomic_open(&af, "/nonexistent/null.txt", NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_atomic_commit(&af, NULL));
    CHECK_NULL_ERR(PP_ERR_IO, pp_checkpoint_save("/nonexistent/null.safetensors", &ct, 1, NULL, 0,
                                                 NULL));
    CHECK_NULL_ERR(PP_ERR_INTERRUPTED, pp_checkpoint_save_cancellable(path, &ct, 1, NULL, 0,
                                                                      cancel_now, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_checkpoint_load(path, &ct, 1, false, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_checkpoint_load_with(path, &ct, 1, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_checkpoint_list(path, &info, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_checkpoint_verify(path, &vr, NULL));
    CHECK_NULL_ERR(PP_OK, pp_checkpoint_save(path, &ct, 1, NULL, 0, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_checkpoint_load(path, &cu, 1, false, NULL)); /* shape */
    CHECK_NULL_ERR(PP_OK, pp_checkpoint_list(path, &info, NULL));
    pp_checkpoint_info_free(&info);
    CHECK_NULL_ERR(PP_OK, pp_checkpoint_verify(path, &vr, NULL));

    /* streams and events: a launch that fails, reported later */
    pp_stream *st = NULL;
    pp_event *ev = NULL;
    bool done;
    const pp_stream_record *recs;
    size_t n_recs;
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_stream_new(NULL, PP_STREAM_COMPUTE, "s", &st, NULL));
    CHECK_NULL_ERR(PP_OK, pp_stream_new(dev, PP_STREAM_COMPUTE, "s", &st, NULL));
    if (st) {
        CHECK_NULL_ERR(PP_OK, pp_stream_launch(st, "fails", fail_numeric, NULL, NULL));
        CHECK_NULL_ERR(PP_ERR_NUMERIC, pp_stream_synchronize(st, NULL));
        CHECK_NULL_ERR(PP_ERR_NUMERIC, pp_stream_error(st, NULL, NULL));
        pp_stream_clear_error(st);
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_stream_launch(st, "none", NULL, NULL, NULL));
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_stream_copy(st, NULL, dev, host, dev, 4, "c", NULL));
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_stream_copy_tensor(st, &t, &u, "c", NULL));
        CHECK_NULL_ERR(PP_OK, pp_stream_records(st, &recs, &n_recs, NULL));
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_stream_wait_event(st, NULL, NULL));
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_event_record(NULL, st, NULL));
    }
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_stream_records(NULL, &recs, &n_recs, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_event_new(NULL, &ev, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_event_query(NULL, &done, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_event_synchronize(NULL, NULL));
    pp_stream_free(st);

    /* schedules and their costs */
    pp_schedule s = {0}, c = {0};
    pp_schedule_kind kind;
    pp_sim_result sim;
    int place[3], sizes[8], m;
    const pp_schedule_shape two = {2, 2, 2, NULL, NULL};
    const pp_action f0 = {.kind = PP_ACT_F, .mb = 0, .stage = 0};
    static const char bad_csv[] = "0F0,0X1\n";
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_schedule_kind_parse("nope", &kind, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_schedule_place(PP_PLACEMENT_ANY, 2, 3, place, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_microbatch_sizes(0, 1, sizes, 8, &m, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_schedule_init_shape(&s, "x", &(pp_schedule_shape){0},
                                                          NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_schedule_init(&s, "x", 0, 1, NULL, NULL));
    CHECK_NULL_ERR(PP_OK, pp_schedule_init_shape(&s, "x", &two, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_schedule_push(&s, 5, PP_ACT_F, 0, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_schedule_push_action(&s, 9, &f0, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_schedule_push_overlap(&s, 0, PP_ACT_F, 0, 1, PP_ACT_B, 0,
                                                            NULL));
    CHECK_NULL_ERR(PP_OK, pp_schedule_push(&s, 0, PP_ACT_F, 0, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_schedule_validate(&s, NULL)); /* most actions missing */
    CHECK_NULL_ERR(PP_OK, pp_schedule_add_comms(&s, NULL));
    CHECK_NULL_ERR(PP_OK, pp_schedule_copy(&c, &s, NULL));
    pp_schedule_free(&c);
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_schedule_truncate(&s, 9, NULL, &c, NULL));
    pp_schedule_free(&s);
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_schedule_generate(&s, (pp_schedule_kind)999, &two, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_schedule_build(&s, PP_SCHEDULE_ZBV, 2, 2, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_schedule_parse_csv("bad.csv", bad_csv, sizeof bad_csv - 1,
                                                       NULL, &s, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_schedule_load_csv("/nonexistent.csv", NULL, &s, NULL));
    CHECK_NULL_ERR(PP_OK, pp_schedule_build(&s, PP_SCHEDULE_GPIPE, 2, 4, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_simulate(&s, &(pp_sim_costs){0}, &sim, NULL));
    CHECK_NULL_ERR(PP_ERR_IO, pp_trace_write_chrome("/nonexistent/trace.json", NULL, 0, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_trace_write_chrome_aligned(NULL, NULL, 0, NULL, NULL));

    /* the executor: a stage with no output shape, a stage whose forward fails */
    pp_executor *exec = NULL;
    pp_device_ctx *dev1 = NULL;
    pp_test_fail_stage fs[2] = {{0, -1}, {1, 2}};
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_executor_new(NULL, 0, 0, &exec, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_executor_set_ranks(NULL, NULL, NULL, 0, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_executor_set_link(NULL, 0, NULL, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_executor_set_own_output(NULL, true, NULL));
    CHECK_NULL_ERR(PP_OK, pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 1}, &dev1, NULL));
    for (int pass = 0; dev1 && pass < 2; pass++) {
        pp_stage_desc desc[2] = {{dev, pass ? &pp_test_fail_ops : &no_shape_ops, &fs[0]},
                                 {dev1, &pp_test_fail_ops, &fs[1]}};
        CHECK_NULL_ERR(PP_OK, pp_executor_new(desc, 2, 0, &exec, NULL));
        if (!exec) continue;
        if (pass == 0) {
            CHECK_NULL_ERR(PP_ERR_INVALID, pp_executor_run(exec, &s, NULL, NULL));
            CHECK_NULL_ERR(PP_ERR_INVALID, pp_executor_run_replayable(exec, &s, 0, NULL, NULL));
        } else {
            CHECK_NULL_ERR(PP_ERR_NUMERIC, pp_executor_run(exec, &s, NULL, NULL));
            CHECK_NULL_ERR(PP_ERR_NUMERIC, pp_executor_run_replayable(exec, &s, 0, NULL, NULL));
        }
        pp_executor_free(exec);
        exec = NULL;
    }
    pp_schedule_free(&s);

    /* the optimizer: a device with no exec to run on */
    pp_optimizer *opt = NULL;
    const pp_param_ref param = {"w", &u, &u};
    const pp_sgd_config bad_sgd = {.lr = -1.0f}, good_sgd = {.lr = 0.1f};
    const pp_optimizer_settings bad_adamw = {.kind = PP_OPTIMIZER_ADAMW, .lr = 1e-3, .beta1 = 2};
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_optimizer_new(&opt, &bad_sgd, &param, 1, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_optimizer_new_with(&opt, &bad_adamw, &param, NULL, 1, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_zero_grad(NULL, exec_of, &ex, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_step(NULL, exec_of, &ex, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_set_grad_scale(NULL, 1.0f, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_grad_sumsq(NULL, exec_of, &ex, sums, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_state_sync(NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_alloc_state(NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_state_loaded(NULL, NULL));
    CHECK_NULL_ERR(PP_OK, pp_optimizer_new(&opt, &good_sgd, &param, 1, NULL));
    if (opt) {
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_zero_grad(opt, exec_of, NULL, NULL));
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_step(opt, exec_of, NULL, NULL));
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_grad_sumsq(opt, exec_of, NULL, sums, NULL));
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_optimizer_set_grad_scale(opt, 0.0f, NULL));
        CHECK_NULL_ERR(PP_OK, pp_optimizer_step(opt, exec_of, &ex, NULL));
        pp_optimizer_free(opt);
    }
    const pp_lr_schedule lr = {.kind = PP_LR_CONSTANT, .base_lr = 0};
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_lr_schedule_check(&lr, NULL));
    pp_tensor_free(&t);
    pp_tensor_free(&u);
    pp_exec_destroy(&ex);
    pp_registry_free(reg);
}

/* Data, tokenizers, communicators and models. */
static void null_error_sources(void)
{
    pp_data_config cfg;
    pp_data *src = NULL;
    pp_data_config_init(&cfg);
    cfg.format = PP_DATA_IDX;
    snprintf(cfg.images, sizeof cfg.images, "/nonexistent/images.idx");
    snprintf(cfg.labels, sizeof cfg.labels, "/nonexistent/labels.idx");
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_data_open(&cfg, &src, NULL));
    pp_data_config_init(&cfg);
    cfg.height = cfg.width = 4;
    CHECK_NULL_ERR(PP_OK, pp_data_open(&cfg, &src, NULL));
    float images[2 * 3 * 4 * 4];
    int32_t labels[2];
    int64_t index[2];
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_data_batch(src, -1, 2, images, labels, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_data_read(src, 0, 0, images, labels, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_data_read_indexed(src, -1, 2, images, labels, index, NULL));
    CHECK_NULL_ERR(PP_OK, pp_data_read_indexed(src, 0, 2, images, labels, index, NULL));
    pp_data_close(src);

    pp_bpe *bpe = NULL;
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_bpe_open("/nonexistent/vocab.json", "/nonexistent/merges.txt",
                                             &bpe, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_bpe_open_json("/nonexistent/tokenizer.json", &bpe, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT,
                   pp_bpe_open_files("/nonexistent/tokenizer.json", NULL, &bpe, NULL));

    /* a job of two threads: a receive nobody sends to times out */
    pp_comm *comms[2] = {NULL, NULL};
    pp_comm_group *group = NULL;
    float x[1] = {1};
    pp_tensor none = {0};
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_init(NULL, NULL, NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_local_new(0, comms, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_set_timeout(NULL, 1, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_send(NULL, 1, 0, x, sizeof x, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_recv(NULL, 1, 0, x, sizeof x, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_send_tensor(NULL, 1, 0, &none, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_recv_tensor(NULL, 1, 0, &none, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_allreduce_sum_f32(NULL, x, 1, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_broadcast(NULL, 0, x, sizeof x, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_barrier(NULL, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_group_new(NULL, true, 0, &group, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_group_allreduce_sum_f32(NULL, x, 1, NULL));
    CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_group_broadcast(NULL, 0, x, sizeof x, NULL));
    CHECK_NULL_ERR(PP_OK, pp_comm_local_new(2, comms, NULL));
    if (comms[0]) {
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_set_timeout(comms[0], -1, NULL));
        CHECK_NULL_ERR(PP_OK, pp_comm_set_timeout(comms[0], 0.05, NULL));
        CHECK_NULL_ERR(PP_ERR_BACKEND, pp_comm_recv(comms[0], 1, 0, x, sizeof x, NULL));
        CHECK_NULL_ERR(PP_ERR_INVALID, pp_comm_broadcast(comms[0], 7, x, sizeof x, NULL));
    }
    for (int r = 0; r < 2; r++) pp_comm_free(comms[r]);
    pp_nccl *nc = NULL;
    const pp_status no_nccl = pp_nccl_built() ? PP_ERR_INVALID : PP_ERR_UNSUPPORTED;
    CHECK_NULL_ERR(no_nccl, pp_nccl_new(NULL, NULL, &nc, NULL));
    CHECK_NULL_ERR(no_nccl, pp_nccl_allreduce_sum_f32(NULL, NULL, x, 1, NULL));
    CHECK_NULL_ERR(no_nccl, pp_nccl_allreduce_many_f32(NULL, NULL, NULL, NULL, 0, NULL));
    CHECK_NULL_ERR(no_nccl, pp_nccl_send(NULL, NULL, 1, x, sizeof x, NULL));
    CHECK_NULL_ERR(no_nccl, pp_nccl_recv(NULL, NULL, 1, x, sizeof x, NULL));

    /* models: names no model has, a layer larger than its input */
    pp_gpt2_config gpt;
    pp_model_config model = {.kind = PP_MODEL_SEQUENTIAL, .name = "sequential",
                             .in_channels = 3, .image_h = 4, .image_w = 4, .n_layers = 1};
    model.layers[0] = (pp_seq_layer){"conv", PP_SEQ_CONV, .out = 4, .kernel = 5, .stride = 1};
    pp_catalogue cat;
    int bad_layer = -1;
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_gpt2_preset("125M", &gpt, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_catalogue_build(&model, &cat, NULL));
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_catalogue_build_at(&model, &cat, &bad_layer, NULL));
    CHECK(bad_layer == 0);
    CHECK_NULL_ERR(PP_ERR_INPUT, pp_model_config_default("resnet7", &model, NULL));
    CHECK_NULL_ERR(PP_OK, pp_model_config_default("resnet18", &model, NULL));
    CHECK_NULL_ERR(PP_OK, pp_catalogue_build(&model, &cat, NULL));
    pp_catalogue_free(&cat);
}

/* Every public call with no error wanted (NULL): the status alone, never a
 * crash, where the failure is found deep inside the call as much as at its
 * arguments, and on success. */
/* NULL handles where one is due: PP_ERR_INVALID, never a crash */
static void null_handles(void)
{
    pp_error err;
    pp_schedule sched;
    CHECK(pp_fit_resolve_plan(NULL, NULL, &err) == PP_ERR_INVALID);
    CHECK(pp_plan_show_data(NULL, 1, "x.png", &err) == PP_ERR_INVALID);
    CHECK(pp_plan_dump_data(NULL, 0, false, "x.safetensors", &err) == PP_ERR_INVALID);
    CHECK(pp_pipeline_plan_schedule(NULL, NULL, &err) == PP_ERR_INVALID);
    CHECK(pp_pipeline_plan_schedule(NULL, &sched, &err) == PP_ERR_INVALID);
    CHECK(pp_executor_run(NULL, NULL, NULL, &err) == PP_ERR_INVALID);
    CHECK(pp_executor_run_replayable(NULL, NULL, 0, NULL, &err) == PP_ERR_INVALID);
    CHECK(pp_device_profiler(NULL, true, NULL) == PP_ERR_INVALID);
}

static void test_null_error(void)
{
    char dir[256];
    if (!check_mkdtemp(dir, sizeof dir, "embed-null-error")) return;
    pp_error_clear(NULL);
    CHECK(pp_error_set(NULL, PP_ERR_IO, "no %s", "file") == PP_ERR_IO);
    CHECK(pp_error_prefix(NULL, "context") == PP_ERR_INTERNAL); /* no code to return */
    null_error_plans(dir);
    null_error_runtime(dir);
    null_error_sources();
    null_handles();
    check_rmtree(dir);
}

int main(void)
{
    test_null_error();
    return check_summary("null_error");
}
