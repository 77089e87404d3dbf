/*
 * profile.c - measured forward and backward times of a model's units on a
 * device (fit.h), and the cache that keeps them so that `balance: time`,
 * --validate, the run and the planner see the same figures.
 *
 * Measuring: each unit runs as a one-unit stage on a micro-batch of the
 * size asked for: one forward and backward to warm up, then PROFILE_REPS
 * timed ones, each forward and backward synchronised and timed apart; the
 * fastest of each is kept (the least disturbed by other work on the host).
 *
 * The cache is one JSON file (PP_PROFILE_CACHE, or "off" for none; default
 * $XDG_CACHE_HOME/pipeline-run/unit-times.json, else
 * ~/.cache/pipeline-run/unit-times.json):
 *   {"format": 1, "entries": {KEY: {"version", "host", "threads", "measured",
 *    "forward_ms": [...], "backward_ms": [...]}}}
 * KEY names the model (name, depth, classes, channels, stem, input size,
 * layers of a sequential model), the device ("cpu": every cpu:N is the same
 * host; "cuda:N"), the micro-batch size and the precision. An entry is
 * fresh when this pipeline-run version measured it on this host with the
 * same CPU thread count and the same units; otherwise it is stale: measured
 * again and replaced. The file is replaced atomically (path.h); a cache that
 * cannot be read or written is not an error: the times are measured anyway
 * and the note says so.
 */
#include "pipeline/fit.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "models/stage.h"
#include "runtime/core/exec.h"
#include "runtime/core/path.h"
#include "runtime/core/tensor.h"
#include "runtime/version.h"
#include "streams/stream.h"

#define PROFILE_REPS 3
#define CACHE_FORMAT 1

const char *pp_profile_source_name(pp_profile_source s)
{
    switch (s) {
    case PP_PROFILE_FRESH: return "fresh";
    case PP_PROFILE_MEASURED: return "measured";
    case PP_PROFILE_STALE: return "stale";
    case PP_PROFILE_UNCACHED: return "uncached";
    default: return "none";
    }
}

void pp_unit_times_free(pp_unit_times *t)
{
    if (!t) return;
    free(t->forward_ms);
    free(t->backward_ms);
    memset(t, 0, sizeof *t);
}

/* ---- measuring ------------------------------------------------------------------ */

static pp_status measure_unit(const pp_model_config *cfg, uint64_t seed, int u, int mb,
                              pp_device_ctx *dev, pp_exec *ex, double *fwd, double *bwd,
                              pp_error *err)
{
    pp_stage *st = NULL;
    pp_tensor x = {0}, y = {0}, dy = {0}, dx = {0};
    int in_nd, out_nd;
    int64_t in_shape[PP_MAX_DIMS], out_shape[PP_MAX_DIMS];
    pp_status s = pp_stage_new(cfg, seed, u, u, dev, &st, err);
    if (s == PP_OK) s = pp_stage_input_shape(st, mb, &in_nd, in_shape, err);
    if (s == PP_OK) s = pp_stage_output_shape(st, mb, &out_nd, out_shape, err);
    pp_dtype in_t = s == PP_OK ? pp_stage_input_dtype(st) : PP_F32; /* token ids: 0 */
    if (s == PP_OK) s = pp_tensor_zeros(&x, dev, in_t, in_nd, in_shape, err);
    if (s == PP_OK) s = pp_tensor_zeros(&dx, dev, in_t, in_nd, in_shape, err);
    if (s == PP_OK) s = pp_tensor_zeros(&y, dev, pp_stage_output_dtype(st), out_nd, out_shape, err);
    if (s == PP_OK) s = pp_tensor_zeros(&dy, dev, pp_stage_output_dtype(st), out_nd, out_shape, err);
    *fwd = *bwd = 1e300;
    for (int r = 0; r <= PROFILE_REPS && s == PP_OK; r++) {
        int64_t t0 = pp_stream_clock_ns();
        s = pp_stage_forward(st, ex, 0, &x, &y, true, err);
        if (s == PP_OK) s = pp_exec_sync(ex, err);
        int64_t t1 = pp_stream_clock_ns();
        /* the model's first unit computes no input gradient */
        if (s == PP_OK) s = pp_stage_backward(st, ex, 0, &dy, u > 0 ? &dx : NULL, err);
        if (s == PP_OK) s = pp_exec_sync(ex, err);
        int64_t t2 = pp_stream_clock_ns();
        if (s != PP_OK || r == 0) continue; /* the first pair warms up */
        double f = (double)(t1 - t0) / 1e6, b = (double)(t2 - t1) / 1e6;
        if (f < *fwd) *fwd = f;
        if (b < *bwd) *bwd = b;
    }
    pp_tensor_free(&x);
    pp_tensor_free(&y);
    pp_tensor_free(&dx);
    pp_tensor_free(&dy);
    pp_stage_free(st);
    return s;
}

static pp_status measure(const pp_plan *plan, pp_device_id id, int mb, pp_unit_times *t,
                         pp_error *err)
{
    pp_model_config cfg = plan->model;
    cfg.bf16 = plan->precision == PP_PLAN_PRECISION_BF16;
    pp_registry *reg = NULL;
    pp_device_ctx *dev = NULL;
    pp_exec ex;
    PP_TRY(pp_registry_new(&reg, err));
    pp_status s = pp_registry_get(reg, id, &dev, err);
    if (s == PP_OK) {
        cfg.nhwc = cfg.bf16 && pp_device_prefers_nhwc_bf16(dev);
        dev->math = plan->precision == PP_PLAN_PRECISION_TF32 ? PP_MATH_TF32 : PP_MATH_FP32;
        s = pp_exec_init(&ex, dev, NULL, err);
    }
    if (s == PP_OK) {
        for (int u = 0; u < t->n && s == PP_OK; u++)
            s = measure_unit(&cfg, plan->seed, u, mb, dev, &ex, &t->forward_ms[u],
                             &t->backward_ms[u], err);
        pp_exec_destroy(&ex);
    }
    pp_registry_free(reg);
    if (s != PP_OK) pp_error_prefix(err, "profiling %s on micro-batches of %d", plan->model.name, mb);
    return s;
}

/* ---- the cache ------------------------------------------------------------------------ */

/* The cache file (n bytes of path), or false when the cache is off. */
static bool cache_path(char *path, size_t n)
{
    const char *env = getenv("PP_PROFILE_CACHE");
    if (env && !strcmp(env, "off")) return false;
    if (env && env[0]) {
        snprintf(path, n, "%s", env);
        return true;
    }
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0])
        snprintf(path, n, "%s/pipeline-run/unit-times.json", xdg);
    else if (home && home[0])
        snprintf(path, n, "%s/.cache/pipeline-run/unit-times.json", home);
    else
        return false;
    return true;
}

/* The key of an entry: model, device, micro-batch size, precision. */
static void cache_key(const pp_plan *plan, pp_device_id id, int mb, char *key, size_t n)
{
    const pp_model_config *m = &plan->model;
    char dev[16];
    if (id.kind == PP_DEVICE_CPU)
        snprintf(dev, sizeof dev, "cpu");
    else
        pp_device_id_format(id, dev, sizeof dev);
    int k = snprintf(key, n, "%s depth=%d classes=%d in=%d stem=%s %dx%d", m->name, m->depth,
                     m->num_classes, m->in_channels, m->stem == PP_STEM_CIFAR ? "cifar" : "imagenet",
                     m->image_h, m->image_w);
    if (m->kind == PP_MODEL_GPT2 && k > 0 && (size_t)k < n)
        k += snprintf(key + k, n - (size_t)k, " gpt2=%d,%d,%d,%d,%d,%d,%d,%d", m->gpt2.n_layer,
                      m->gpt2.n_head, m->gpt2.n_embd, m->gpt2.vocab_size, m->gpt2.block_size,
                      m->gpt2.seq_len, m->gpt2.bias, m->gpt2.tie_embeddings);
    for (int i = 0; i < m->n_layers && k > 0 && (size_t)k < n; i++) {
        const pp_seq_layer *l = &m->layers[i];
        k += snprintf(key + k, n - (size_t)k, "%s%s:%d:%d:%d:%d:%d:%d", i ? "," : " layers=",
                      l->name, (int)l->type, l->out, l->kernel, l->stride, l->pad, l->bias);
    }
    if (k > 0 && (size_t)k < n)
        snprintf(key + k, n - (size_t)k, " device=%s mb=%d precision=%s", dev, mb,
                 pp_plan_precision_name(plan->precision));
}

static int cpu_threads(void)
{
    const char *env = getenv("PP_CPU_THREADS");
    if (env && env[0]) return atoi(env);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void host_name(char *buf, size_t n)
{
    if (gethostname(buf, n) != 0) snprintf(buf, n, "unknown");
    buf[n - 1] = '\0';
}

/* Reads the entry into t when it is fresh; else says why in why. */
static bool entry_fresh(json_t *e, pp_device_id id, pp_unit_times *t, char *why, size_t n)
{
    char host[256];
    host_name(host, sizeof host);
    const char *version = json_string_value(json_object_get(e, "version"));
    const char *h = json_string_value(json_object_get(e, "host"));
    json_t *f = json_object_get(e, "forward_ms"), *b = json_object_get(e, "backward_ms");
    if (!version || strcmp(version, pp_version()) != 0) {
        snprintf(why, n, "measured by pipeline-run %.32s", version ? version : "(unknown)");
        return false;
    }
    if (!h || strcmp(h, host) != 0) {
        snprintf(why, n, "measured on host %.64s", h ? h : "(unknown)");
        return false;
    }
    if (id.kind == PP_DEVICE_CPU &&
        json_integer_value(json_object_get(e, "threads")) != cpu_threads()) {
        snprintf(why, n, "measured with %lld CPU threads, now %d",
                 (long long)json_integer_value(json_object_get(e, "threads")), cpu_threads());
        return false;
    }
    if (!json_is_array(f) || !json_is_array(b) || (int)json_array_size(f) != t->n ||
        (int)json_array_size(b) != t->n) {
        snprintf(why, n, "holds another number of units");
        return false;
    }
    for (int u = 0; u < t->n; u++) {
        t->forward_ms[u] = json_number_value(json_array_get(f, (size_t)u));
        t->backward_ms[u] = json_number_value(json_array_get(b, (size_t)u));
        if (!(t->forward_ms[u] >= 0) || !(t->backward_ms[u] >= 0)) {
            snprintf(why, n, "holds a bad time");
            return false;
        }
    }
    return true;
}

/* Creates the folders of path (mkdir -p of its folder). */
static void make_folders(const char *path)
{
    char *dir = pp_path_dir(path);
    if (!dir) return;
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(dir, 0755);
        *p = '/';
    }
    mkdir(dir, 0755);
    free(dir);
}

/* Adds (or replaces) the entry and writes the file atomically; false when
 * it cannot be written. */
static bool cache_store(const char *path, json_t *root, const char *key, pp_device_id id,
                        const pp_unit_times *t)
{
    char host[256];
    host_name(host, sizeof host);
    json_t *f = json_array(), *b = json_array();
    for (int u = 0; u < t->n; u++) {
        json_array_append_new(f, json_real(t->forward_ms[u]));
        json_array_append_new(b, json_real(t->backward_ms[u]));
    }
    json_t *e = json_pack("{s:s, s:s, s:I, s:o, s:o}", "version", pp_version(), "host", host,
                          "measured", (json_int_t)time(NULL), "forward_ms", f, "backward_ms", b);
    if (!e) return false;
    if (id.kind == PP_DEVICE_CPU) json_object_set_new(e, "threads", json_integer(cpu_threads()));
    json_t *entries = json_object_get(root, "entries");
    if (!json_is_object(entries)) {
        entries = json_object();
        json_object_set_new(root, "entries", entries);
    }
    json_object_set_new(root, "format", json_integer(CACHE_FORMAT));
    json_object_set_new(entries, key, e);
    make_folders(path);
    pp_atomic_file af = {0};
    pp_error err;
    if (pp_atomic_open(&af, path, &err) != PP_OK) return false;
    if (json_dumpf(root, af.f, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9)) != 0) {
        pp_atomic_abort(&af);
        return false;
    }
    return pp_atomic_commit(&af, &err) == PP_OK;
}

/* Merges one lookup into the note: the least fresh source wins. */
static void note_add(pp_profile_note *note, pp_profile_source src, const char *path,
                     const char *why)
{
    if (!note) return;
    static const int rank[] = {[PP_PROFILE_NONE] = 0, [PP_PROFILE_FRESH] = 1,
                               [PP_PROFILE_MEASURED] = 2, [PP_PROFILE_UNCACHED] = 3,
                               [PP_PROFILE_STALE] = 4};
    note->lookups++;
    if (src == PP_PROFILE_FRESH) note->fresh++;
    if (rank[src] >= rank[note->source]) {
        note->source = src;
        if (why && why[0]) snprintf(note->why, sizeof note->why, "%s", why);
    }
    snprintf(note->cache, sizeof note->cache, "%s", path ? path : "");
}

pp_status pp_fit_profile(const pp_plan *plan, pp_device_id dev, int mb_size, pp_unit_times *out,
                         pp_profile_note *note, pp_error *err)
{
    if (!plan || !out || mb_size < 1)
        return pp_error_set(err, PP_ERR_INVALID, "pp_fit_profile: bad arguments");
    memset(out, 0, sizeof *out);
    if (plan->model.kind == PP_MODEL_DELAY || plan->catalogue.n < 1)
        return pp_error_set(err, PP_ERR_INVALID, "pp_fit_profile: the model has no units");
    out->n = plan->catalogue.n;
    out->mb_size = mb_size;
    out->forward_ms = calloc((size_t)out->n, sizeof(double));
    out->backward_ms = calloc((size_t)out->n, sizeof(double));
    if (!out->forward_ms || !out->backward_ms) {
        pp_unit_times_free(out);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    }
    char path[1024], key[4096], why[160] = "";
    const bool cached = cache_path(path, sizeof path);
    json_t *root = NULL;
    if (cached) {
        cache_key(plan, dev, mb_size, key, sizeof key);
        json_error_t je;
        root = json_load_file(path, 0, &je);
        if (!json_is_object(root)) {
            json_decref(root);
            root = json_object();
        }
        json_t *e = json_object_get(json_object_get(root, "entries"), key);
        if (e && entry_fresh(e, dev, out, why, sizeof why)) {
            note_add(note, PP_PROFILE_FRESH, path, NULL);
            json_decref(root);
            return PP_OK;
        }
        if (!e) why[0] = '\0';
    }
    pp_status s = measure(plan, dev, mb_size, out, err);
    if (s != PP_OK) {
        json_decref(root);
        pp_unit_times_free(out);
        return s;
    }
    if (!cached) {
        note_add(note, PP_PROFILE_UNCACHED, "", NULL);
    } else {
        const bool stale = why[0] != '\0';
        if (!cache_store(path, root, key, dev, out)) {
            size_t used = strlen(why);
            snprintf(why + used, sizeof why - used, "%scould not write the cache",
                     used ? "; " : "");
        }
        note_add(note, stale ? PP_PROFILE_STALE : PP_PROFILE_MEASURED, path, why);
    }
    json_decref(root);
    return PP_OK;
}
