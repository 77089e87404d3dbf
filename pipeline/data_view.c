/*
 * data_view.c - what the model sees (pp_plan_show_data, pp_plan_dump_data in
 * pipeline.h): a plan's training or test samples read as a run reads them
 * (the same source, draws, order and normalisation), drawn as a captioned
 * grid or written as tensors with each sample's file; a token source's
 * windows written as their input and target ids, or shown as text: each
 * window's ids and its tokens' bytes.
 */
#include "pipeline/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/data_source.h"
#include "runtime/core/device.h"
#include "runtime/core/path.h"
#include "runtime/io/bpe.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/grid.h"

/* count samples from position pos of the source: images, labels and the
 * data set index of each (of the sample read: a bad image's replacement
 * where one was skipped). A token source's images are its windows' input
 * ids (int32, T a sample: w) and its labels their targets (T a sample); its
 * index is each window's position in the stream of samples. */
typedef struct view {
    pp_data *src;
    int count, c, h, w, targets;
    bool tokens; /* token windows (targets may be 1) */
    float *images;
    int32_t *labels;
    int64_t *index;
} view;

static void view_free(view *v)
{
    pp_data_close(v->src);
    free(v->images);
    free(v->labels);
    free(v->index);
}

static pp_status view_read(view *v, int64_t pos, int count, pp_error *err)
{
    pp_data_shape(v->src, &v->c, &v->h, &v->w, NULL);
    v->targets = pp_data_targets_per_sample(v->src);
    v->tokens = pp_data_is_tokens(v->src);
    v->count = count;
    v->images = malloc((size_t)count * v->c * v->h * v->w * sizeof(float));
    v->labels = malloc((size_t)count * v->targets * sizeof *v->labels);
    v->index = malloc((size_t)count * sizeof *v->index);
    if (!v->images || !v->labels || !v->index)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (%d samples)", count);
    return pp_data_read_indexed(v->src, pos, count, v->images, v->labels, v->index, err);
}

/* Bytes b[0, n) into f, escaped so that a line holds them and `sep` marks
 * stand apart: \n \r \t \\ and \<sep>; \xHH for the other control bytes,
 * and for bytes from 0x80 where b[0, n) is not UTF-8 by itself (a token that
 * holds part of a character). */
static void put_escaped(FILE *f, const char *b, size_t n, char sep)
{
    bool utf8 = true;
    for (size_t i = 0; i < n && utf8;) {
        const unsigned char c = (unsigned char)b[i];
        const size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                         : (c & 0xF8) == 0xF0 ? 4 : 0;
        utf8 = k > 0 && i + k <= n && (k < 2 || c >= 0xC2);
        for (size_t j = 1; utf8 && j < k; j++) utf8 = ((unsigned char)b[i + j] & 0xC0) == 0x80;
        i += k ? k : 1;
    }
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)b[i];
        if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\\' || (sep && c == (unsigned char)sep)) fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7F || (c >= 0x80 && !utf8)) fprintf(f, "\\x%02X", c);
        else fputc(c, f);
    }
}

/* Id k (0..T) of window j: its inputs, then its last target. */
static int32_t window_id(const view *v, int j, int k)
{
    const int32_t *in = (const int32_t *)(const void *)v->images;
    return k < v->w ? in[(size_t)j * v->w + k]
                    : v->labels[(size_t)j * v->targets + v->targets - 1];
}

/* A token source's first n windows as text into path: each window's ids
 * (its inputs, then its last target) and, where the plan has a tokenizer or
 * reads text as bytes, its tokens' bytes between | marks and its text. */
static pp_status show_tokens(const pp_plan *plan, view *v, int n, const char *path,
                             pp_error *err)
{
    const pp_plan_data *d = &plan->data;
    const bool bytes = d->format == PP_PLAN_DATA_TEXT && !d->vocab;
    pp_bpe *bpe = NULL;
    if (d->vocab)
        PP_TRY(pp_bpe_open_files(d->vocab, d->merges, &bpe, err));
    pp_atomic_file af; /* written whole, then renamed: never half a file at path */
    pp_status s = pp_atomic_open(&af, path, err);
    if (s != PP_OK) {
        pp_bpe_close(bpe);
        pp_error_prefix(err, "--show-data");
        return s;
    }
    FILE *f = af.f;
    const int t = v->w; /* inputs a window */
    fprintf(f, "# the first %d training windows of %s as the model gets them (format %s, %s): "
            "%d tokens each, %d input%s each followed by its target%s\n", n, d->file,
            d->format == PP_PLAN_DATA_TEXT ? "text" : "tokens",
            bpe ? "GPT-2's tokenizer" : bytes ? "a byte a token" : "no tokenizer: ids only",
            t + 1, t, t == 1 ? "" : "s",
            bpe || bytes ? "; a token's bytes between | marks, \\n \\r \\t \\| \\\\ and "
                           "\\xHH escaped"
                         : "");
    for (int j = 0; j < n; j++) {
        fprintf(f, "\nwindow %lld\nids:", (long long)v->index[j]);
        for (int k = 0; k <= t; k++) fprintf(f, " %d", window_id(v, j, k));
        if (!bpe && !bytes) {
            fputc('\n', f);
            continue;
        }
        for (int pass = 0; pass < 2; pass++) {
            fputs(pass ? "\ntext: " : "\ntokens: |", f);
            for (int k = 0; k <= t; k++) {
                const int32_t id = window_id(v, j, k);
                char one = (char)id;
                size_t len = 1;
                const char *b = bpe ? pp_bpe_token(bpe, id, &len) : &one;
                if (!b) fprintf(f, "<|%d|>", id); /* an id the tokenizer has no token for */
                else put_escaped(f, b, len, pass ? 0 : '|');
                if (!pass) fputc('|', f);
            }
        }
        fputc('\n', f);
    }
    pp_bpe_close(bpe);
    if ((s = pp_atomic_commit(&af, err)) != PP_OK) pp_error_prefix(err, "--show-data");
    return s;
}

pp_status pp_plan_show_data(const pp_plan *plan, int n, const char *path, pp_error *err)
{
    if (!plan || !path)
        return pp_error_set(err, PP_ERR_INVALID, "pp_plan_show_data: no %s (NULL)",
                            plan ? "path" : "plan");
    if (n < 1 || n > 1024)
        return pp_error_set(err, PP_ERR_INPUT, "--show-data: %d samples (1 to 1024)", n);
    view v = {0};
    PP_TRY(pipe_data_open(plan, &plan->data, false, &v.src, err));
    if (pp_data_is_tokens(v.src)) { /* token windows: as text */
        const int64_t have = pp_data_size(v.src);
        pp_status s = view_read(&v, 0, have < n ? (int)have : n, err);
        if (s == PP_OK) s = show_tokens(plan, &v, v.count, path, err);
        view_free(&v);
        return s;
    }
    pp_status s = view_read(&v, 0, n, err);
    uint8_t *px = NULL;
    char **caps = calloc((size_t)n, sizeof *caps);
    const int64_t per = (int64_t)v.c * v.h * v.w;
    if (s == PP_OK) {
        px = malloc((size_t)(n * per));
        if (!px || !caps) s = pp_error_set(err, PP_ERR_OOM, "out of host memory");
    }
    for (int i = 0; s == PP_OK && i < n; i++) {
        /* back to bytes: x * std + mean, times 255 */
        const pp_plan_data *d = &plan->data;
        for (int ch = 0; ch < v.c; ch++) {
            const double mean = d->has_norm ? d->mean[ch] : 0, std = d->has_norm ? d->std[ch] : 1;
            const float *x = v.images + i * per + (int64_t)ch * v.h * v.w;
            uint8_t *o = px + i * per + (int64_t)ch * v.h * v.w;
            for (int64_t q = 0; q < (int64_t)v.h * v.w; q++) {
                const double b = floor((x[q] * std + mean) * 255.0 + 0.5);
                o[q] = (uint8_t)(b < 0 ? 0 : b > 255 ? 255 : b);
            }
        }
        char cls[128], name[256];
        pp_data_class_name(v.src, v.labels[i], cls, sizeof cls);
        pp_data_sample_name(v.src, v.index[i], name, sizeof name);
        const char *base = strrchr(name, '/');
        caps[i] = malloc(strlen(cls) + strlen(name) + 4);
        if (caps[i]) sprintf(caps[i], "%s %s", cls, base ? base + 1 : name);
    }
    if (s == PP_OK)
        s = pp_grid_write_png(path, px, n, v.c, v.h, v.w, (const char *const *)caps, err);
    for (int i = 0; caps && i < n; i++) free(caps[i]);
    free(caps);
    free(px);
    view_free(&v);
    return s;
}

/* A JSON string literal of s into t (n bytes), escaped. */
static size_t json_str(char *t, size_t n, const char *s)
{
    size_t k = 0;
    if (k < n) t[k++] = '"';
    for (; *s && k + 7 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            t[k++] = '\\';
            t[k++] = (char)ch;
        } else if (ch < 0x20) {
            k += (size_t)snprintf(t + k, n - k, "\\u%04x", ch);
        } else {
            t[k++] = (char)ch;
        }
    }
    if (k < n) t[k++] = '"';
    return k;
}

/* The metadata list of every sample's name as JSON (a token source: each
 * window's position in the stream of samples, a number). */
static char *names_json(const view *v)
{
    size_t cap = 64 + (size_t)v->count * 520, k = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    t[k++] = '[';
    for (int j = 0; j < v->count; j++) {
        char name[512];
        if (j) t[k++] = ',';
        if (v->tokens) {
            k += (size_t)snprintf(t + k, cap - k, "%lld", (long long)v->index[j]);
            continue;
        }
        pp_data_sample_name(v->src, v->index[j], name, sizeof name);
        k += json_str(t + k, cap - k, name);
    }
    t[k++] = ']';
    t[k] = '\0';
    return t;
}

/* The view as safetensors: images (f32 N x C x H x W) and labels (i32 N)
 * with metadata {what: which} and "paths"; a token source's as inputs and
 * targets (i32 N x T) with "windows". */
static pp_status write_view(const view *v, const char *path, const char *what, const char *which,
                            pp_error *err)
{
    const bool tok = v->tokens;
    pp_registry *reg;
    PP_TRY(pp_registry_new(&reg, err));
    pp_device_ctx *cpu;
    pp_device_id id;
    pp_tensor x = {0}, y = {0};
    const int64_t per = (int64_t)v->c * v->h * v->w;
    pp_status s = pp_device_id_parse("cpu:0", &id, err);
    if (s == PP_OK) s = pp_registry_get(reg, id, &cpu, err);
    if (s == PP_OK && tok)
        s = pp_tensor_alloc(&x, cpu, PP_I32, 2, (int64_t[]){v->count, per}, err);
    else if (s == PP_OK)
        s = pp_tensor_alloc(&x, cpu, PP_F32, 4, (int64_t[]){v->count, v->c, v->h, v->w}, err);
    if (s == PP_OK)
        s = pp_tensor_alloc(&y, cpu, PP_I32, tok ? 2 : 1, (int64_t[]){v->count, v->targets},
                            err);
    if (s == PP_OK) s = pp_tensor_from_host(&x, v->images, (size_t)(v->count * per) * sizeof(float), err);
    if (s == PP_OK)
        s = pp_tensor_from_host(&y, v->labels, (size_t)v->count * v->targets * sizeof(int32_t),
                                err);
    char *paths = s == PP_OK ? names_json(v) : NULL;
    if (s == PP_OK && !paths) s = pp_error_set(err, PP_ERR_OOM, "out of host memory");
    if (s == PP_OK) {
        const pp_ckpt_tensor t[2] = {{tok ? "inputs" : "images", &x},
                                     {tok ? "targets" : "labels", &y}};
        const pp_checkpoint_meta meta[2] = {{what, which}, {tok ? "windows" : "paths", paths}};
        s = pp_checkpoint_save(path, t, 2, meta, 2, err);
    }
    free(paths);
    pp_tensor_free(&x);
    pp_tensor_free(&y);
    pp_registry_free(reg);
    return s;
}

pp_status pp_plan_dump_data(const pp_plan *plan, int64_t index, bool eval, const char *path,
                            pp_error *err)
{
    if (!plan || !path)
        return pp_error_set(err, PP_ERR_INVALID, "pp_plan_dump_data: no %s (NULL)",
                            plan ? "path" : "plan");
    if (eval && !plan->eval.enabled)
        return pp_error_set(err, PP_ERR_INPUT, "--dump-data eval:%lld: the plan has no eval "
                            "section", (long long)index);
    view v = {0};
    PP_TRY(pipe_data_open(plan, eval ? &plan->eval.data : &plan->data, eval, &v.src, err));
    const int64_t n = pp_data_size(v.src);
    int64_t pos, epoch;
    int count;
    if (eval) {
        const int b = plan->eval.batch_size;
        pos = index * b;
        count = n - pos < b ? (int)(n - pos) : b;
    } else {
        pipe_data_window(index, n, plan->batch_size, plan->epochs > 0, plan->data.drop_last, &pos,
                         &count, &epoch);
    }
    pp_status s = PP_OK;
    if (count <= 0)
        s = pp_error_set(err, PP_ERR_INPUT, "--dump-data eval:%lld: the test set has %lld "
                         "batches of %d", (long long)index,
                         (long long)((n + plan->eval.batch_size - 1) / plan->eval.batch_size),
                         plan->eval.batch_size);
    if (s == PP_OK) s = view_read(&v, pos, count, err);
    char which[32];
    snprintf(which, sizeof which, "%lld", (long long)index);
    if (s == PP_OK) s = write_view(&v, path, eval ? "eval_batch" : "step", which, err);
    view_free(&v);
    return s;
}
