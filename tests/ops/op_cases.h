/*
 * op_cases.h - one call of every op that takes bf16 (and NHWC) operands, as a
 * table: the operands' kinds and shapes, the descriptor, and a runner. Shared
 * by tests/ops/test_bf16.c (bf16 and NHWC against f32 NCHW on the CPU) and
 * tests/cuda/test_cuda_native.c (the CUDA backend against the CPU).
 */
#ifndef PP_TESTS_OP_CASES_H
#define PP_TESTS_OP_CASES_H

#include "runtime/core/ops.h"

enum { MAX_OPS = 10 };

/* An operand: 'a' may be BF16 (an activation or weight copy), 'f' is always
 * F32 (parameter gradients, statistics, biases), 'i' is I32 (argmax, token
 * ids), 'w' is an F32 convolution or dense weight gradient starting from
 * zero: with bf16 operands it receives the f32 result rounded to bf16 (ops.h). */
typedef struct operand {
    char kind;
    int ndim;
    int64_t shape[4];
} operand;

typedef pp_status (*op_run)(pp_exec *ex, const void *desc, pp_tensor **t, pp_error *err);

typedef struct op_case {
    const char *what;
    op_run run;
    const void *desc;
    int n;
    operand o[MAX_OPS];
    int alias_of[MAX_OPS]; /* -1, or the operand this one is (in-place use); 0 = none */
    bool exact; /* the CUDA backend's result must be the CPU's bit for bit */
} op_case;

static const pp_conv2d_desc CONV = {2, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1, 4, 3};
static const pp_bn_desc BN = {3, 4, 5, 3, 1e-5f, 0.1f};
static const pp_pool_desc POOL = {2, 3, 7, 6, 3, 2, 1, 4, 3};

static pp_status r_conv_fwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_conv2d_forward(ex, d, t[0], t[1], t[2], err);
}
static pp_status r_conv_bwd_data(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_conv2d_backward_data(ex, d, t[0], t[1], t[2], err);
}
static pp_status r_conv_bwd_data_acc(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_conv2d_backward_data_accumulate(ex, d, t[0], t[1], t[2], err);
}
static pp_status r_conv_bwd_filter(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_conv2d_backward_filter(ex, d, t[0], t[1], t[2], err);
}
static pp_status r_bn_train(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_batchnorm_forward_train(ex, d, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], err);
}
static pp_status r_bn_infer(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_batchnorm_forward_infer(ex, d, t[0], t[1], t[2], t[3], t[4], t[5], err);
}
static pp_status r_bn_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_batchnorm_backward(ex, d, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], err);
}
static pp_status r_bn_act_relu(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_batchnorm_forward_act(ex, d, true, t[0], t[1], t[2], t[3], t[4], NULL, true, t[5],
                                    t[6], t[7], err);
}
static pp_status r_bn_act_add_relu(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_batchnorm_forward_act(ex, d, true, t[0], t[1], t[2], t[3], t[4], t[8], true, t[5],
                                    t[6], t[7], err);
}
static pp_status r_bn_act_infer_add(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_batchnorm_forward_act(ex, d, false, t[0], t[1], t[2], t[3], t[4], t[6], false,
                                    t[5], NULL, NULL, err);
}
static pp_status r_bn_bwd_relu(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_batchnorm_backward_relu(ex, d, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8],
                                      err);
}
static pp_status r_bn_bwd_add_relu(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_batchnorm_backward_add_relu(ex, d, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7],
                                          t[8], t[9], err);
}
static pp_status r_relu(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_relu_forward(ex, t[0], t[1], err);
}
static pp_status r_relu_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_relu_backward(ex, t[0], t[1], t[2], err);
}
static pp_status r_sigmoid(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_sigmoid_forward(ex, t[0], t[1], err);
}
static pp_status r_sigmoid_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_sigmoid_backward(ex, t[0], t[1], t[2], err);
}
static pp_status r_add(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_add(ex, t[0], t[1], t[2], err);
}
static pp_status r_add_relu(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_add_relu(ex, t[0], t[1], t[2], err);
}
static pp_status r_accumulate(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_accumulate(ex, t[0], t[1], err);
}
static pp_status r_maxpool(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_maxpool_forward(ex, d, t[0], t[1], t[2], err);
}
static pp_status r_maxpool_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    /* x, y, idx come from a forward on the same x */
    PP_TRY(pp_maxpool_forward(ex, d, t[0], t[1], t[2], err));
    return pp_maxpool_backward(ex, d, t[0], t[1], t[3], t[2], t[4], err);
}
static pp_status r_avgpool(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_avgpool_forward(ex, t[0], t[1], err);
}
static pp_status r_avgpool_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_avgpool_backward(ex, t[0], t[1], err);
}
static pp_status r_avgpool2d(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_avgpool2d_forward(ex, d, t[0], t[1], err);
}
static pp_status r_avgpool2d_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_avgpool2d_backward(ex, d, t[0], t[1], err);
}
static pp_status r_bias(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_channel_bias_forward(ex, t[0], t[1], err);
}
static pp_status r_bias_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_channel_bias_backward(ex, t[0], t[1], err);
}
static pp_status r_linear(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_linear_forward(ex, t[0], t[1], t[2], t[3], err);
}
static pp_status r_linear_bwd(pp_exec *ex, const void *d, pp_tensor **t, pp_error *err)
{
    return pp_linear_backward(ex, t[0], t[1], t[2], t[3], t[4], t[5], err);
}

#define A4(a, b, c, d) {'a', 4, {a, b, c, d}}
#define F1(c) {'f', 1, {c, 1, 1, 1}}
#define X4 A4(2, 3, 7, 6)       /* CONV's and POOL's input */
#define Y4 A4(2, 4, 4, 3)       /* CONV's output */
#define P4 A4(2, 3, 4, 3)       /* POOL's output */
#define B4 A4(3, 4, 5, 3)       /* BN's tensors */
#define E4 A4(2, 3, 5, 4)       /* elementwise operands */

static const op_case CASES[] = {
    {"conv2d_forward", r_conv_fwd, &CONV, 3, {X4, A4(4, 3, 3, 3), Y4}, {0}, false},
    {"conv2d_forward, f32 input and bf16 weights", r_conv_fwd, &CONV, 3,
     {{'f', 4, {2, 3, 7, 6}}, A4(4, 3, 3, 3), Y4}, {0}, false},
    {"conv2d_forward, f32 output (logits-like)", r_conv_fwd, &CONV, 3,
     {X4, A4(4, 3, 3, 3), {'f', 4, {2, 4, 4, 3}}}, {0}, false},
    {"conv2d_backward_data", r_conv_bwd_data, &CONV, 3, {Y4, A4(4, 3, 3, 3), X4}, {0}, false},
    {"conv2d_backward_data_accumulate", r_conv_bwd_data_acc, &CONV, 3,
     {Y4, A4(4, 3, 3, 3), X4}, {0}, false},
    {"conv2d_backward_filter (dw f32 +=)", r_conv_bwd_filter, &CONV, 3,
     {X4, Y4, {'w', 4, {4, 3, 3, 3}}}, {0}, false},
    {"batchnorm_forward_train", r_bn_train, &BN, 8,
     {B4, F1(4), F1(4), F1(4), {'f', 1, {4, 1, 1, 1}}, B4, F1(4), F1(4)}, {0}, false},
    {"batchnorm_forward_infer", r_bn_infer, &BN, 6, {B4, F1(4), F1(4), F1(4), F1(4), B4}, {0},
     false},
    {"batchnorm_backward", r_bn_bwd, &BN, 8, {B4, B4, F1(4), F1(4), F1(4), B4, F1(4), F1(4)},
     {0}, false},
    {"batchnorm_forward_act (relu)", r_bn_act_relu, &BN, 8,
     {B4, F1(4), F1(4), F1(4), {'f', 1, {4, 1, 1, 1}}, B4, F1(4), F1(4)}, {0}, false},
    {"batchnorm_backward_relu", r_bn_bwd_relu, &BN, 9,
     {B4, B4, B4, F1(4), F1(4), F1(4), B4, F1(4), F1(4)}, {0}, false},
    {"batchnorm_backward_add_relu", r_bn_bwd_add_relu, &BN, 10,
     {B4, B4, B4, F1(4), F1(4), F1(4), B4, F1(4), F1(4), B4}, {0}, false},
    {"batchnorm_backward_add_relu, g in dy", r_bn_bwd_add_relu, &BN, 10,
     {B4, B4, B4, F1(4), F1(4), F1(4), B4, F1(4), F1(4), B4}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 3},
     false},
    {"relu_forward", r_relu, NULL, 2, {E4, E4}, {0}, true},
    {"relu_forward in place", r_relu, NULL, 2, {E4, E4}, {0, 1}, true},
    {"relu_backward", r_relu_bwd, NULL, 3, {E4, E4, E4}, {0}, true},
    {"relu_backward in place", r_relu_bwd, NULL, 3, {E4, E4, E4}, {0, 0, 2}, true},
    {"sigmoid_forward", r_sigmoid, NULL, 2, {E4, E4}, {0}, false},
    {"sigmoid_backward", r_sigmoid_bwd, NULL, 3, {E4, E4, E4}, {0}, false},
    {"add", r_add, NULL, 3, {E4, E4, E4}, {0}, true},
    {"add into b", r_add, NULL, 3, {E4, E4, E4}, {0, 0, 2}, true},
    {"add_relu into a", r_add_relu, NULL, 3, {E4, E4, E4}, {0, 0, 1}, true},
    {"accumulate", r_accumulate, NULL, 2, {E4, E4}, {0}, true},
    {"maxpool_forward", r_maxpool, &POOL, 3, {X4, P4, {'i', 4, {2, 3, 4, 3}}}, {0}, true},
    {"maxpool_backward", r_maxpool_bwd, &POOL, 5, {X4, P4, {'i', 4, {2, 3, 4, 3}}, P4, X4},
     {0}, true},
    {"avgpool_forward", r_avgpool, NULL, 2, {E4, {'a', 2, {2, 3, 1, 1}}}, {0}, true},
    {"avgpool_backward", r_avgpool_bwd, NULL, 2, {{'a', 2, {2, 3, 1, 1}}, E4}, {0}, true},
    {"avgpool2d_forward", r_avgpool2d, &POOL, 2, {X4, P4}, {0}, false},
    {"avgpool2d_backward", r_avgpool2d_bwd, &POOL, 2, {P4, X4}, {0}, false},
    {"channel_bias_forward (y +=)", r_bias, NULL, 2, {F1(3), E4}, {0}, false},
    {"channel_bias_backward (db f32 +=)", r_bias_bwd, NULL, 2, {E4, F1(3)}, {0}, false},
    {"linear_forward, f32 logits", r_linear, NULL, 4,
     {{'a', 2, {5, 7, 1, 1}}, {'a', 2, {3, 7, 1, 1}}, F1(3), {'f', 2, {5, 3, 1, 1}}}, {0},
     false},
    {"linear_forward, bf16 output", r_linear, NULL, 4,
     {{'a', 2, {5, 7, 1, 1}}, {'a', 2, {3, 7, 1, 1}}, F1(3), {'a', 2, {5, 3, 1, 1}}}, {0},
     false},
    {"linear_backward, f32 dy", r_linear_bwd, NULL, 6,
     {{'a', 2, {5, 7, 1, 1}}, {'a', 2, {3, 7, 1, 1}}, {'f', 2, {5, 3, 1, 1}},
      {'a', 2, {5, 7, 1, 1}}, {'f', 2, {3, 7, 1, 1}}, F1(3)},
     {0}, false},
};

/* The fused batch norm with a residual add: its bf16 result rounds twice (the
 * batch norm's output, then the sum), like the ops it fuses, so it is not the
 * f32 op's result rounded once; test_bf16 checks it in f32 NHWC only. */
static const op_case FUSED_ADD_CASES[] = {
    {"batchnorm_forward_act (add, relu)", r_bn_act_add_relu, &BN, 9,
     {B4, F1(4), F1(4), F1(4), {'f', 1, {4, 1, 1, 1}}, B4, F1(4), F1(4), B4}, {0}, false},
    {"batchnorm_forward_act (inference, add)", r_bn_act_infer_add, &BN, 7,
     {B4, F1(4), F1(4), F1(4), F1(4), B4, B4}, {0}, false},
};

#endif
