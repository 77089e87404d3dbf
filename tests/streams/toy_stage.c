/*
 * toy_stage.c - the executor tests' synthetic stages (toy_stage.h): the
 * stage ops, their devices and the sequential reference.
 */
#define PP_CHECK_SHARED
#include "tests/streams/toy_stage.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/core/device.h"
#include "runtime/core/ops.h"
#include "tests/check.h"


static float input_value(int sample, int d)
{
    return (float)(sample % 7 + 1) * 0.5f + (float)d * 0.25f;
}

/* The arithmetic shared by the stages and the reference. */
static __attribute__((noinline)) void toy_forward_math(const float *in, float w, int n, float *out)
{
    for (int k = 0; k < n; k++) out[k] = in[k] * w;
}

static __attribute__((noinline)) float toy_backward_math(const float *in, const float *g, float w,
                                                         int n, float *gin, float dw)
{
    for (int k = 0; k < n; k++) {
        if (gin) gin[k] = g[k] * w;
        dw += g[k] * in[k];
    }
    return dw;
}

pp_status toy_out_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    t->dtype = PP_F32;
    t->ndim = 2;
    t->shape[0] = mb_size;
    t->shape[1] = D;
    return PP_OK;
}

static int shape_ok(const toy_stage *ts, const pp_tensor *t, int mb_size)
{
    return t && t->data && t->dev == ts->dev && t->ndim == 2 && t->shape[0] == mb_size &&
           t->shape[1] == D && t->dtype == PP_F32;
}

pp_status toy_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                      pp_tensor *out, pp_error *err)
{
    toy_stage *ts = user;
    if (ts->fwd_ms > 0) PP_TRY(pp_delay(ex, ts->fwd_ms, err));
    if (mb == ts->fail_mb) return pp_error_set(err, PP_ERR_NUMERIC, "loss is NaN");
    const bool own = ts->own_out && ts->index == ts->S - 1;
    pp_tensor shaped = *out;
    if (own) shaped.data = out->data ? NULL : ts->own; /* out's data must be NULL */
    if (ex->dev != ts->dev || (ts->index == 0) != (in == NULL) ||
        !shape_ok(ts, &shaped, mb_size) || (in && !shape_ok(ts, in, mb_size)) ||
        mb_size > MAX_SIZE)
        ts->bad_args++;
    ts->f_count[mb]++;
    int n = mb_size * D;
    if (ts->index == 0) {
        for (int j = 0; j < mb_size; j++)
            for (int d = 0; d < D; d++) ts->saved[mb][j * D + d] = input_value(ts->mb_start[mb] + j, d);
    } else {
        memcpy(ts->saved[mb], in->data, (size_t)n * sizeof(float));
    }
    float *y = own ? ts->own : out->data;
    toy_forward_math(ts->saved[mb], ts->w, n, y);
    if (ts->index == ts->S - 1) {
        float s = 0;
        for (int k = 0; k < n; k++) s += y[k];
        ts->out_sum[mb] = s;
    }
    return PP_OK;
}

pp_status toy_backward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *grad_out,
                       pp_tensor *grad_in, pp_error *err)
{
    toy_stage *ts = user;
    if (ts->bwd_ms > 0) PP_TRY(pp_delay(ex, ts->bwd_ms, err));
    if ((ts->index == ts->S - 1) != (grad_out == NULL) || (ts->index == 0) != (grad_in == NULL) ||
        (grad_out && !shape_ok(ts, grad_out, mb_size)) ||
        (grad_in && !shape_ok(ts, grad_in, mb_size)))
        ts->bad_args++;
    int n = mb_size * D;
    float g[MAX_SIZE * D];
    if (grad_out) memcpy(g, grad_out->data, (size_t)n * sizeof(float));
    else
        for (int k = 0; k < n; k++) g[k] = 1.0f / (float)ts->batch;
    ts->dw = toy_backward_math(ts->saved[mb], g, ts->w, n, grad_in ? grad_in->data : NULL, ts->dw);
    ts->b_order[ts->nb++] = mb;
    return PP_OK;
}

pp_status toy_step(void *user, pp_exec *ex, pp_error *err)
{
    toy_stage *ts = user;
    ts->steps++;
    if (ts->hook_flag && ts->hooks != ts->steps) ts->bad_args++; /* step before grads_ready */
    return PP_OK;
}

static pp_status toy_grads_ready(void *user, pp_exec *ex, pp_error *err)
{
    toy_stage *ts = user;
    if (ts->hook_flag) atomic_store(ts->hook_flag, 1);
    ts->hooks++;
    ts->nb_at_hook = ts->nb;
    ts->dw_at_hook = ts->dw;
    if (ex->dev != ts->dev) ts->bad_args++;
    if (ts->fail_hook) return pp_error_set(err, PP_ERR_BACKEND, "sum failed");
    return PP_OK;
}

/* The last backward of a stage with wait_flag: waits until the flag is set
 * (another stage's grads_ready started), at most 30 s. */
static pp_status toy_backward_waiting(void *user, pp_exec *ex, int mb, int mb_size,
                                      const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    toy_stage *ts = user;
    PP_TRY(toy_backward(user, ex, mb, mb_size, grad_out, grad_in, err));
    if (!ts->wait_flag || ts->mb_start[mb] + mb_size != ts->batch) return PP_OK;
    for (int k = 0; k < 30000 && !atomic_load(ts->wait_flag); k++) usleep(1000);
    ts->saw_flag = atomic_load(ts->wait_flag);
    return PP_OK;
}

const pp_stage_ops toy_ops = {
    .out_shape = toy_out_shape,
    .forward = toy_forward,
    .backward = toy_backward,
    .step = toy_step,
};
const pp_stage_ops hook_ops = {
    .out_shape = toy_out_shape,
    .forward = toy_forward,
    .backward = toy_backward_waiting,
    .step = toy_step,
    .grads_ready = toy_grads_ready,
};

static pp_registry *reg;
pp_device_ctx *cpus[4];

void setup_stages(toy_stage *st, pp_stage_desc *desc, int S, const int *dev_of,
                  const pp_schedule *s)
{
    int batch = 0;
    for (int i = 0; i < s->micro_batches; i++) batch += s->mb_sizes[i];
    for (int k = 0; k < S; k++) {
        memset(&st[k], 0, sizeof st[k]);
        st[k].index = k;
        st[k].S = S;
        st[k].batch = batch;
        st[k].dev = cpus[dev_of[k]];
        st[k].w = 1.0f + 0.5f * (float)k;
        st[k].fail_mb = -1;
        for (int i = 0, g = 0; i < s->micro_batches; g += s->mb_sizes[i], i++) st[k].mb_start[i] = g;
        desc[k] = (pp_stage_desc){st[k].dev, &toy_ops, &st[k]};
    }
}


/* Sequential reference: expected dw per stage and last-stage output sums. */
void reference(const pp_schedule *s, const toy_stage *st, float *dw, float *out_sum)
{
    int S = s->stages, batch = st[0].batch;
    for (int k = 0; k < S; k++) dw[k] = 0.0f;
    for (int i = 0; i < s->micro_batches; i++) {
        int n = s->mb_sizes[i] * D;
        float act[8][MAX_SIZE * D];
        float x[MAX_SIZE * D];
        for (int j = 0; j < s->mb_sizes[i]; j++)
            for (int d = 0; d < D; d++) x[j * D + d] = input_value(st[0].mb_start[i] + j, d);
        const float *in = x;
        float ins[8][MAX_SIZE * D];
        for (int k = 0; k < S; k++) {
            memcpy(ins[k], in, (size_t)n * sizeof(float));
            toy_forward_math(ins[k], st[k].w, n, act[k]);
            in = act[k];
        }
        float sum = 0;
        for (int k = 0; k < n; k++) sum += act[S - 1][k];
        out_sum[i] = sum;
        float g[MAX_SIZE * D], gin[MAX_SIZE * D];
        for (int k = 0; k < n; k++) g[k] = 1.0f / (float)batch;
        for (int k = S - 1; k >= 0; k--) {
            dw[k] = toy_backward_math(ins[k], g, st[k].w, n, k > 0 ? gin : NULL, dw[k]);
            if (k > 0) memcpy(g, gin, sizeof g);
        }
    }
}

bool toy_devices_open(void)
{
    pp_error err;
    if (pp_registry_new(&reg, &err) != PP_OK) return false;
    for (int i = 0; i < 4; i++)
        if (pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, i}, &cpus[i], &err) != PP_OK) {
            fprintf(stderr, "setup: %s\n", err.msg);
            return false;
        }
    return true;
}

void toy_devices_close(void)
{
    for (int i = 0; i < 4; i++) CHECK(pp_device_bytes_in_use(cpus[i]) == 0);
    pp_registry_free(reg);
}
