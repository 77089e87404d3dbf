/*
 * stream.c - the public stream/event API: argument checks, dispatch to the
 * table of functions of the device kind (stream_impl.h), the public view of
 * the sticky error and timing records (kept by stream_state.c), event
 * bookkeeping.
 */
#include "streams/stream.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streams/stream_impl.h"

/* The stream implementation of a device kind: the one place that maps one to
 * the other (a new kind without a case here fails to build with -Wswitch).
 * The op table of the kind, pp_backend_ops, lives in runtime/, below this
 * folder, so it cannot hold these entries. NULL when not built. */
static const pp_stream_ops *ops_of_kind(pp_device_kind kind)
{
    switch (kind) {
    case PP_DEVICE_CPU: return pp_stream_cpu_ops();
    case PP_DEVICE_CUDA: return pp_stream_cuda_ops();
    }
    return NULL;
}

static pp_status ops_for(pp_device_ctx *dev, const pp_stream_ops **out, pp_error *err)
{
    if (!dev) return pp_error_set(err, PP_ERR_INVALID, "stream: no device given");
    const pp_stream_ops *ops = ops_of_kind(dev->id.kind);
    if (!ops)
        return pp_error_set(err, PP_ERR_UNSUPPORTED,
                            "%s: streams on CUDA devices need the CUDA backend, which this "
                            "build does not include",
                            dev->name);
    *out = ops;
    return PP_OK;
}

pp_status pp_stream_new(pp_device_ctx *dev, pp_stream_kind kind, const char *name,
                        pp_stream **out, pp_error *err)
{
    *out = NULL;
    const pp_stream_ops *ops = NULL;
    PP_TRY(ops_for(dev, &ops, err));
    if (kind != PP_STREAM_COMPUTE && kind != PP_STREAM_COPY)
        return pp_error_set(err, PP_ERR_INVALID, "stream: bad kind %d", (int)kind);
    pp_stream *s = calloc(1, sizeof *s);
    if (!s) return pp_error_set(err, PP_ERR_OOM, "out of host memory (stream)");
    s->ops = ops;
    s->dev = dev;
    s->kind = kind;
    snprintf(s->name, sizeof s->name, "%s", name ? name : dev->name);
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        pp_status st = pp_error_set(err, PP_ERR_OOM, "stream '%s': cannot create a mutex",
                                    s->name);
        free(s);
        return st;
    }
    pp_status st = ops->stream_init(s, err);
    if (st != PP_OK) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return st;
    }
    *out = s;
    return PP_OK;
}

void pp_stream_free(pp_stream *s)
{
    if (!s) return;
    s->ops->stream_destroy(s);
    pthread_mutex_destroy(&s->mu);
    free(s->recs);
    free(s);
}

pp_exec *pp_stream_exec(pp_stream *s)
{
    return &s->exec;
}

pp_device_ctx *pp_stream_device(const pp_stream *s)
{
    return s->dev;
}

pp_stream_kind pp_stream_get_kind(const pp_stream *s)
{
    return s->kind;
}

const char *pp_stream_name(const pp_stream *s)
{
    return s->name;
}

pp_status pp_stream_launch(pp_stream *s, const char *label, pp_stream_fn fn, void *arg,
                           pp_error *err)
{
    if (!s || !fn) return pp_error_set(err, PP_ERR_INVALID, "stream launch: null stream or fn");
    if (s->capture && !s->capture->native) {
        pp_graph_item it = {.kind = PP_GRAPH_ITEM_LAUNCH, .s = s, .fn = fn, .arg = arg};
        pp_stream_record r;
        pp_stream_record_init(&r, label, PP_RECORD_LAUNCH, 0);
        memcpy(it.label, r.label, sizeof it.label);
        return pp_graph_record(s, &it, err);
    }
    return s->ops->launch(s, label, fn, arg, err);
}

pp_status pp_stream_copy(pp_stream *s, void *dst, pp_device_ctx *dst_dev, const void *src,
                         pp_device_ctx *src_dev, size_t bytes, const char *label,
                         pp_error *err)
{
    if (!s || !dst_dev || !src_dev)
        return pp_error_set(err, PP_ERR_INVALID, "stream copy: null stream or device");
    if (bytes == 0) return PP_OK;
    if (!dst || !src)
        return pp_error_set(err, PP_ERR_INVALID, "stream copy on %s: null pointer", s->name);
    uintptr_t d = (uintptr_t)dst, r = (uintptr_t)src;
    if (d < r + bytes && r < d + bytes)
        return pp_error_set(err, PP_ERR_INVALID, "stream copy on %s: regions overlap",
                            s->name);
    pp_copy_args c = {dst, dst_dev, src, src_dev, bytes};
    if (s->capture && !s->capture->native) {
        pp_graph_item it = {.kind = PP_GRAPH_ITEM_COPY, .s = s, .copy = c};
        pp_stream_record rec;
        pp_stream_record_init(&rec, label, PP_RECORD_COPY, bytes);
        memcpy(it.label, rec.label, sizeof it.label);
        return pp_graph_record(s, &it, err);
    }
    return s->ops->copy(s, &c, label, err);
}

pp_status pp_stream_copy_tensor(pp_stream *s, pp_tensor *dst, const pp_tensor *src,
                                const char *label, pp_error *err)
{
    if (!dst || !src) return pp_error_set(err, PP_ERR_INVALID, "stream copy: null tensor");
    if (dst->dtype != src->dtype || pp_tensor_numel(dst) != pp_tensor_numel(src)) {
        char a[64], b[64];
        return pp_error_set(err, PP_ERR_INVALID,
                            "stream copy: %s %s into %s %s: dtype or size differs",
                            pp_dtype_name(src->dtype), pp_tensor_shape_str(src, a, sizeof a),
                            pp_dtype_name(dst->dtype), pp_tensor_shape_str(dst, b, sizeof b));
    }
    return pp_stream_copy(s, dst->data, dst->dev, src->data, src->dev, pp_tensor_bytes(src),
                          label, err);
}

pp_status pp_stream_synchronize(pp_stream *s, pp_error *err)
{
    if (!s) return pp_error_set(err, PP_ERR_INVALID, "stream synchronize: null stream");
    if (s->capture)
        return pp_error_set(err, PP_ERR_INVALID, "stream '%s': synchronize during a graph capture",
                            s->name);
    s->ops->synchronize(s);
    return pp_stream_error(s, err, NULL);
}

pp_status pp_stream_error(pp_stream *s, pp_error *err, int64_t *when_ns)
{
    if (!s) return pp_error_set(err, PP_ERR_INVALID, "stream error: null stream");
    return pp_stream_get_error(s, UINT64_MAX, err, when_ns);
}

void pp_stream_clear_error(pp_stream *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    pp_error_clear(&s->error);
    s->error_ns = 0;
    s->error_seq = 0;
    pthread_mutex_unlock(&s->mu);
}

pp_status pp_stream_records(pp_stream *s, const pp_stream_record **recs, size_t *n,
                            pp_error *err)
{
    if (!s) return pp_error_set(err, PP_ERR_INVALID, "stream records: null stream");
    if (s->ops->records_resolve) PP_TRY(s->ops->records_resolve(s, err));
    pthread_mutex_lock(&s->mu);
    *recs = s->recs;
    *n = s->nrec;
    pthread_mutex_unlock(&s->mu);
    return PP_OK;
}

void pp_stream_records_clear(pp_stream *s)
{
    if (!s) return;
    if (s->ops->records_clear) s->ops->records_clear(s);
    pthread_mutex_lock(&s->mu);
    s->nrec = 0;
    pthread_mutex_unlock(&s->mu);
}

pp_status pp_event_new(pp_device_ctx *dev, pp_event **out, pp_error *err)
{
    *out = NULL;
    const pp_stream_ops *ops = NULL;
    PP_TRY(ops_for(dev, &ops, err));
    pp_event *ev = calloc(1, sizeof *ev);
    if (!ev) return pp_error_set(err, PP_ERR_OOM, "out of host memory (event)");
    ev->ops = ops;
    ev->dev = dev;
    pp_status st = ops->event_init(ev, err);
    if (st != PP_OK) {
        free(ev);
        return st;
    }
    *out = ev;
    return PP_OK;
}

void pp_event_free(pp_event *ev)
{
    if (!ev) return;
    ev->ops->event_destroy(ev);
    free(ev);
}

pp_status pp_event_record(pp_event *ev, pp_stream *s, pp_error *err)
{
    if (!ev || !s) return pp_error_set(err, PP_ERR_INVALID, "event record: null event or stream");
    if (ev->ops != s->ops)
        return pp_error_set(err, PP_ERR_INVALID,
                            "event record: event of %s recorded on stream '%s' of %s",
                            ev->dev->name, s->name, s->dev->name);
    if (s->capture && !s->capture->native) {
        pp_graph_item it = {.kind = PP_GRAPH_ITEM_RECORD, .s = s, .ev = ev};
        return pp_graph_record(s, &it, err);
    }
    PP_TRY(ev->ops->event_record(ev, s, err));
    ev->recorded = true;
    return PP_OK;
}

pp_status pp_stream_wait_event(pp_stream *s, pp_event *ev, pp_error *err)
{
    if (!ev || !s) return pp_error_set(err, PP_ERR_INVALID, "stream wait: null event or stream");
    if (s->capture && !s->capture->native) {
        pp_graph_item it = {.kind = PP_GRAPH_ITEM_WAIT, .s = s, .ev = ev};
        return pp_graph_record(s, &it, err);
    }
    if (!ev->recorded) return PP_OK;
    if (ev->ops != s->ops) return s->ops->wait_foreign(s, ev, err);
    return s->ops->wait_event(s, ev, err);
}

pp_status pp_event_query(pp_event *ev, bool *done, pp_error *err)
{
    if (!ev || !done) return pp_error_set(err, PP_ERR_INVALID, "event query: null argument");
    if (!ev->recorded) {
        *done = true;
        return PP_OK;
    }
    return ev->ops->event_query(ev, done, err);
}

pp_status pp_event_synchronize(pp_event *ev, pp_error *err)
{
    if (!ev) return pp_error_set(err, PP_ERR_INVALID, "event synchronize: null event");
    if (!ev->recorded) return PP_OK;
    return ev->ops->event_synchronize(ev, err);
}
