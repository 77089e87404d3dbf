/*
 * upload.c - the first stage's batches sent to its device ahead, on a copy
 * stream, into two buffers in turn (see upload.h).
 */
#include "pipeline/upload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ops.h"

#define BUFFERS 2

/* One device buffer and what it holds. */
typedef struct upload_buf {
    pp_tensor images;            /* (batch, C, H, W) on the upload's device */
    int32_t *labels;             /* (batch) page-locked on the labels' device */
    pp_event *sent;              /* recorded on the copy stream after the copy */
    int64_t step;                /* the step whose batch it holds (-1: none) */
    pipe_window win;
    /* the copy's arguments, valid until it has run */
    const float *src;
    pp_tensor dst;               /* the first count samples of images */
    char label[PP_STREAM_LABEL_MAX];
} upload_buf;

struct pipe_upload {
    pp_device_ctx *dev, *lbl_dev;
    pp_stream *stream;           /* "upload": stage 0's device, copies */
    upload_buf buf[BUFFERS];
    int last;                    /* the buffer of the last copy sent (-1: none) */
};

void pipe_upload_free(pipe_upload *u)
{
    if (!u) return;
    pp_stream_free(u->stream); /* waits for a copy in flight */
    for (int i = 0; i < BUFFERS; i++) {
        pp_tensor_free(&u->buf[i].images);
        pp_device_host_free(u->lbl_dev, u->buf[i].labels);
        pp_event_free(u->buf[i].sent);
    }
    free(u);
}

pp_status pipe_upload_new(pp_device_ctx *dev, pp_device_ctx *lbl_dev, int batch, int c, int h,
                          int w, pipe_upload **out, pp_error *err)
{
    *out = NULL;
    pipe_upload *u = calloc(1, sizeof *u);
    if (!u) return pp_error_set(err, PP_ERR_OOM, "out of host memory (upload)");
    u->dev = dev;
    u->lbl_dev = lbl_dev;
    u->last = -1;
    pp_status s = pp_stream_new(dev, PP_STREAM_COPY, "upload", &u->stream, err);
    for (int i = 0; s == PP_OK && i < BUFFERS; i++) {
        upload_buf *b = &u->buf[i];
        b->step = -1;
        s = pp_tensor_alloc(&b->images, dev, PP_F32, 4, (int64_t[]){batch, c, h, w}, err);
        if (s == PP_OK)
            s = pp_device_host_alloc(lbl_dev, (size_t)batch * sizeof(int32_t),
                                     (void **)&b->labels, err);
        if (s == PP_OK) s = pp_event_new(dev, &b->sent, err);
    }
    if (s != PP_OK) {
        pp_error_prefix(err, "the first stage's upload buffers");
        pipe_upload_free(u);
        return s;
    }
    *out = u;
    return PP_OK;
}

bool pipe_upload_sent(const pipe_upload *u, int64_t step, pipe_window win)
{
    const upload_buf *b = &u->buf[step % BUFFERS];
    return b->step == step && b->win.pos == win.pos && b->win.count == win.count;
}

/* The copy, on the upload stream: host images into the buffer's first
 * samples. */
static pp_status run_copy(pp_exec *ex, void *arg, pp_error *err)
{
    upload_buf *b = arg;
    return pp_copy_from_host(ex, b->src, &b->dst, err);
}

pp_status pipe_upload_send(pipe_upload *u, int64_t step, pipe_window win, const float *images,
                           const int32_t *labels, pp_error *err)
{
    upload_buf *b = &u->buf[step % BUFFERS];
    b->step = -1;
    b->src = images;
    b->dst = pp_tensor_view0(&b->images, 0, win.count);
    snprintf(b->label, sizeof b->label, "upload %lld", (long long)step);
    memcpy(b->labels, labels, (size_t)win.count * sizeof *labels);
    PP_TRY(pp_stream_launch(u->stream, b->label, run_copy, b, err));
    PP_TRY(pp_event_record(b->sent, u->stream, err));
    b->step = step;
    b->win = win;
    u->last = (int)(step % BUFFERS);
    return PP_OK;
}

pp_status pipe_upload_take(pipe_upload *u, int64_t step, pp_stream *stage0, pp_tensor **images,
                           const int32_t **labels, int *key, pp_error *err)
{
    upload_buf *b = &u->buf[step % BUFFERS];
    if (b->step != step)
        return pp_error_set(err, PP_ERR_INTERNAL, "upload: step %lld's batch was not sent",
                            (long long)step);
    PP_TRY(pp_stream_wait_event(stage0, b->sent, err));
    *images = &b->images;
    *labels = b->labels;
    *key = (int)(step % BUFFERS);
    return PP_OK;
}

/* Adds the upload's lane and its records' spans to stats. */
static pp_status add_lane(pipe_upload *u, const pp_stream_record *r, size_t n, pp_step_stats *st,
                          pp_error *err)
{
    pp_trace_lane *lanes = realloc(st->lanes, (size_t)(st->n_lanes + 1) * sizeof *lanes);
    if (!lanes) return pp_error_set(err, PP_ERR_OOM, "out of host memory (step stats)");
    st->lanes = lanes;
    pp_trace_lane *ln = &lanes[st->n_lanes];
    memset(ln, 0, sizeof *ln);
    snprintf(ln->name, sizeof ln->name, "upload s0");
    snprintf(ln->device, sizeof ln->device, "%s", u->dev->name);
    ln->kind = PP_STREAM_COPY;
    pp_trace_span *spans = realloc(st->spans, ((size_t)st->n_spans + n + 1) * sizeof *spans);
    if (!spans) return pp_error_set(err, PP_ERR_OOM, "out of host memory (step stats)");
    st->spans = spans;
    for (size_t j = 0; j < n; j++) {
        pp_trace_span *sp = &spans[st->n_spans++];
        memcpy(sp->name, r[j].label, sizeof sp->name);
        sp->lane = st->n_lanes;
        sp->start_ns = r[j].start_ns;
        sp->end_ns = r[j].end_ns;
        sp->bytes = r[j].bytes;
    }
    st->n_lanes++;
    return PP_OK;
}

pp_status pipe_upload_collect(pipe_upload *u, pp_step_stats *stats, pp_error *err)
{
    bool done = true; /* the last copy's event: every copy sent before it has run too */
    if (u->last >= 0) PP_TRY(pp_event_query(u->buf[u->last].sent, &done, err));
    const pp_stream_record *r = NULL;
    size_t n = 0;
    if (done && stats) PP_TRY(pp_stream_records(u->stream, &r, &n, err));
    if (stats) PP_TRY(add_lane(u, r, n, stats, err));
    if (done) pp_stream_records_clear(u->stream);
    return PP_OK;
}
