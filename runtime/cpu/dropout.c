/*
 * dropout.c - CPU inverted dropout, elementwise in f32: y = x * the factor
 * of dropout.h's hash for (key, sample, index within the sample). Tasks are
 * fixed spans of one sample's values, so the bits do not depend on the
 * thread count (nor do they depend on anything but the element's value and
 * its coordinates). A step in memory (pp_dropout_desc.step) is read when the
 * op runs and must be the key's: the CPU's check that whoever drives the
 * steps sets it, for the backends whose replayed kernels draw from it.
 */
#include "kernels.h"
#include "workers.h"

#define ELEMS_PER_TASK ((int64_t)1 << 15)

typedef struct dropout_job {
    const pp_dropout_desc *d;
    int64_t per_sample, tasks_per_sample;
    uint32_t threshold;
    float scale;
    const float *x;
    float *y;
} dropout_job;

static void dropout_task(void *arg, int64_t task, int worker)
{
    const dropout_job *j = arg;
    (void)worker;
    const int64_t n = task / j->tasks_per_sample;
    const int64_t i0 = (task % j->tasks_per_sample) * ELEMS_PER_TASK;
    const int64_t len = j->per_sample - i0 < ELEMS_PER_TASK ? j->per_sample - i0 : ELEMS_PER_TASK;
    const int64_t sample = j->d->first_sample + n;
    const float *x = j->x + n * j->per_sample + i0;
    float *y = j->y + n * j->per_sample + i0;
    for (int64_t i = 0; i < len; i++)
        y[i] = x[i] * pp_dropout_factor(j->d->key, sample, i0 + i, j->threshold, j->scale);
}

pp_status pp_cpu_dropout_resolve(const pp_dropout_desc *d, const char *op, pp_dropout_desc *out,
                                 pp_error *err)
{
    *out = *d;
    if (!d->step || d->p == 0.0f) return PP_OK;
    const int64_t step = *(const int64_t *)d->step->data;
    out->key = pp_dropout_key(d->seed, step, d->site);
    out->step = NULL;
    if (out->key != d->key)
        return pp_error_set(err, PP_ERR_INTERNAL,
                            "%s: the dropout's step in memory (%lld) is not its key's step "
                            "(site %d): the step was not set before the op ran",
                            op, (long long)step, d->site);
    return PP_OK;
}

pp_status pp_cpu_dropout(pp_exec *ex, const pp_dropout_desc *desc, int64_t n,
                         int64_t per_sample, const float *x, float *y, pp_error *err)
{
    if (per_sample == 0) return PP_OK;
    pp_dropout_desc dd;
    PP_TRY(pp_cpu_dropout_resolve(desc, "dropout", &dd, err));
    const pp_dropout_desc *d = &dd;
    dropout_job j = {.d = d,
                     .per_sample = per_sample,
                     .tasks_per_sample = (per_sample + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK,
                     .threshold = pp_dropout_threshold(d->p),
                     .scale = pp_dropout_scale(d->p),
                     .x = x,
                     .y = y};
    pp_cpu_parallel(ex, n * j.tasks_per_sample, dropout_task, &j);
    return PP_OK;
}
