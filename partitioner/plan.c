/*
 * plan.c - plan YAML -> pp_plan: schema walk, types, ranges, defaults, data
 * paths, micro-batch sizes. The model section is walked in plan_model.c, the
 * optimizer and loss in plan_recipe.c, stages and layer names are resolved
 * in plan_stages.c, typed values in
 * plan_walk.c; plan_equal.c compares two plans. Problems go to a pp_diag; the
 * walk goes on after most of them so one run reports as many as practical,
 * and they are sorted into file order.
 */
#include "partitioner/plan.h"

#include "runtime/core/batch_split.h"
#include "runtime/io/idx.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "partitioner/plan_walk_internal.h"
#include "partitioner/plan_walk.h"
#include "runtime/core/path.h"

/* ---- names --------------------------------------------------------------- */

static const char *const schedule_names[] = {
    [PP_PLAN_SCHEDULE_GPIPE] = "gpipe",
    [PP_PLAN_SCHEDULE_1F1B] = "1f1b",
    [PP_PLAN_SCHEDULE_INTERLEAVED_1F1B] = "interleaved1f1b",
    [PP_PLAN_SCHEDULE_LOOPED_BFS] = "loopedbfs",
    [PP_PLAN_SCHEDULE_INTERLEAVED_ZB] = "interleavedzb",
    [PP_PLAN_SCHEDULE_ZBH1] = "zbh1",
    [PP_PLAN_SCHEDULE_ZBH2] = "zbh2",
    [PP_PLAN_SCHEDULE_ZBV] = "zbv",
    [PP_PLAN_SCHEDULE_DUALPIPEV] = "dualpipev",
    [PP_PLAN_SCHEDULE_FILE] = "file",
};

const char *pp_plan_schedule_name(pp_plan_schedule s)
{
    return (unsigned)s <= PP_PLAN_SCHEDULE_FILE ? schedule_names[s] : "gpipe";
}

const char *pp_plan_precision_name(pp_plan_precision p)
{
    return p == PP_PLAN_PRECISION_TF32 ? "tf32" : p == PP_PLAN_PRECISION_BF16 ? "bf16" : "fp32";
}

const char *pp_plan_data_format_name(pp_plan_data_format f)
{
    switch (f) {
    case PP_PLAN_DATA_IDX: return "idx";
    case PP_PLAN_DATA_CIFAR10: return "cifar10";
    default: return "synthetic";
    }
}

const char *pp_plan_recompute_name(pp_plan_recompute r)
{
    switch (r) {
    case PP_PLAN_RECOMPUTE_EXCEPT_LAST: return "except_last";
    case PP_PLAN_RECOMPUTE_ALWAYS: return "always";
    default: return "never";
    }
}

const char *pp_plan_balance_name(pp_plan_balance b)
{
    switch (b) {
    case PP_PLAN_BALANCE_TIME: return "time";
    case PP_PLAN_BALANCE_FLOPS: return "flops";
    case PP_PLAN_BALANCE_MEMORY: return "memory";
    default: return "none";
    }
}

/* ---- batch --------------------------------------------------------------- */

/* Index of a unit that cannot train on the plan's smallest micro-batch (a
 * batch norm over one value per channel), or -1; *smallest receives that
 * size. */
static int min_batch_unit(const pp_plan *p, int *smallest)
{
    *smallest = p->batch_size;
    for (int m = 0; m < p->micro_batches; m++)
        if (p->micro_sizes[m] < *smallest) *smallest = p->micro_sizes[m];
    for (int u = 0; u < p->catalogue.n; u++)
        if (*smallest < p->catalogue.units[u].min_batch) return u;
    return -1;
}

pp_status pp_plan_split(pp_plan *p, int split_size, int micro_batches, pp_error *err)
{
    if (!p) return pp_error_set(err, PP_ERR_INVALID, "plan split: NULL plan");
    if ((split_size > 0) == (micro_batches > 0))
        return pp_error_set(err, PP_ERR_INVALID,
                            "plan split: give a split size or a number of micro-batches");
    int n = split_size > 0 ? split_size : micro_batches;
    if (n > p->batch_size)
        return pp_error_set(err, PP_ERR_INPUT, "%s %d exceeds the batch size %d",
                            split_size > 0 ? "split size" : "micro-batch count", n,
                            p->batch_size);
    int m = pp_batch_split_count(p->batch_size, split_size, micro_batches);
    int *sizes = malloc((size_t)m * sizeof *sizes);
    if (!sizes) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    free(p->micro_sizes);
    p->micro_sizes = sizes;
    p->split_size = pp_batch_split_sizes(p->batch_size, split_size, micro_batches, sizes);
    p->micro_batches = m;
    p->batch_by_micro = micro_batches > 0;
    return PP_OK;
}

/* The min-batch problem of a plan as a message; false when there is none. */
static bool min_batch_message(const pp_plan *p, char *msg, size_t n)
{
    int smallest, u = min_batch_unit(p, &smallest);
    if (u < 0) return false;
    char how[48];
    snprintf(how, sizeof how, "%s %d", p->batch_by_micro ? "into" : "by",
             p->batch_by_micro ? p->micro_batches : p->split_size);
    snprintf(msg, n,
             "batch %d split %s gives a micro-batch of %d sample%s, and layer '%s' (batch norm "
             "over one value per channel per sample) needs at least %d to train: choose "
             "another split",
             p->batch_size, how, smallest, smallest == 1 ? "" : "s", p->catalogue.units[u].name,
             p->catalogue.units[u].min_batch);
    return true;
}

pp_status pp_plan_check_micro_batches(const pp_plan *p, pp_error *err)
{
    char msg[400];
    if (!p) return pp_error_set(err, PP_ERR_INVALID, "plan check: NULL plan");
    if (!min_batch_message(p, msg, sizeof msg)) return PP_OK;
    return pp_error_set(err, PP_ERR_INPUT, "%s", msg);
}

static void walk_batch(pp_walk *w, const pp_ynode *n)
{
    enum { K_SIZE, K_SPLIT, K_MICRO, K_DEFER, K_N };
    static const char *const keys[K_N] = {"size", "split_size", "micro_batches",
                                          "deferred_batch_norm"};
    const pp_ynode *f[K_N];
    pp_plan *p = w->plan;
    p->batch_mark = pp_walk_mark(n);
    if (!pp_walk_map(w, n, "batch", keys, K_N, f)) return;
    if (f[K_DEFER])
        pp_walk_bool(w, f[K_DEFER], "batch.deferred_batch_norm", &p->deferred_batch_norm);
    int size = 0, split = 0, micro = 0;
    bool ok = true;
    if (!f[K_SIZE]) {
        pp_walk_error(w, n, "batch needs a size");
        ok = false;
    } else if (!pp_walk_int32(w, f[K_SIZE], "batch.size", 1, PP_PLAN_MAX_BATCH, &size)) {
        ok = false;
    }
    if (f[K_SPLIT] && f[K_MICRO]) {
        pp_walk_error(w, f[K_MICRO],
                      "batch takes split_size or micro_batches, not both");
        return;
    }
    if (!f[K_SPLIT] && !f[K_MICRO]) {
        pp_walk_error(w, n, "batch needs split_size (micro-batch size) or micro_batches");
        return;
    }
    if (f[K_SPLIT]) {
        if (!pp_walk_int32(w, f[K_SPLIT], "batch.split_size", 1, PP_PLAN_MAX_BATCH, &split))
            return;
        if (ok && split > size) {
            pp_walk_error(w, f[K_SPLIT], "batch.split_size (%d) is larger than batch.size (%d)",
                          split, size);
            return;
        }
    } else {
        if (!pp_walk_int32(w, f[K_MICRO], "batch.micro_batches", 1, PP_PLAN_MAX_BATCH, &micro))
            return;
        if (ok && micro > size) {
            pp_walk_error(w, f[K_MICRO],
                          "batch.micro_batches (%d) is larger than batch.size (%d)", micro, size);
            return;
        }
    }
    if (!ok) return;
    p->batch_size = size;
    if (pp_plan_split(p, split, micro, NULL) != PP_OK) {
        w->oom = true;
        return;
    }
    w->batch_ok = true;
}

/* ---- data ---------------------------------------------------------------- */

/* Resolves a data path against the plan's folder, checks that it is a
 * readable file and returns its absolute path (malloc'd), or NULL after
 * reporting the problem at n. */
static char *data_path(pp_walk *w, const pp_ynode *n, const char *what)
{
    const char *rel;
    if (!pp_walk_str(w, n, what, &rel)) return NULL;
    size_t need = strlen(w->dir) + strlen(rel) + 2;
    char *joined = malloc(need);
    if (!joined) {
        w->oom = true;
        return NULL;
    }
    if (rel[0] == '/')
        snprintf(joined, need, "%s", rel);
    else
        snprintf(joined, need, "%s/%s", w->dir, rel);
    struct stat sb;
    char *abs = NULL;
    if (stat(joined, &sb) != 0) {
        pp_walk_error(w, n, "%s: cannot open '%.200s': %s", what, joined, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        pp_walk_error(w, n, "%s: '%.200s' is a folder, not a file", what, joined);
    } else if (access(joined, R_OK) != 0) {
        pp_walk_error(w, n, "%s: cannot read '%.200s': %s", what, joined, strerror(errno));
    } else {
        abs = realpath(joined, NULL);
        if (!abs) pp_walk_error(w, n, "%s: cannot resolve '%.200s': %s", what, joined,
                                strerror(errno));
    }
    free(joined);
    return abs;
}

/* Best effort: the image size from an IDX header ((N,H,W) or (N,C,H,W),
 * plain or gzip-compressed); leaves h/w alone when the file is not one of
 * those (opening the data source reports why, naming the file). */
static void idx_image_size(const char *path, int *h, int *w)
{
    int nd;
    int64_t dims[PP_IDX_MAX_DIMS];
    if (pp_idx_peek(path, 3, 4, "image", &nd, dims, NULL) != PP_OK) return;
    *h = (int)dims[nd - 2];
    *w = (int)dims[nd - 1];
}

static bool walk_norm(pp_walk *w, const pp_ynode *n, const char *what, double *vals, bool is_std)
{
    int c = w->plan->model.in_channels;
    if (!n || n->kind != PP_YNODE_SEQ) {
        pp_walk_error(w, n, "%s must be a list of %d numbers (one per input channel), got %s",
                      what, c, pp_walk_describe(n));
        return false;
    }
    if (n->n != c) {
        pp_walk_error(w, n, "%s has %d value%s but the model has %d input channel%s", what,
                      n->n, n->n == 1 ? "" : "s", c, c == 1 ? "" : "s");
        return false;
    }
    bool ok = true;
    for (int i = 0; i < n->n; i++) {
        if (!pp_walk_num(w, n->kids[i], what, is_std ? 0.0 : -1e12, 1e12, &vals[i])) {
            ok = false;
        } else if (is_std && !(vals[i] > 0)) {
            pp_walk_error(w, n->kids[i], "%s values must be positive, got %g", what, vals[i]);
            ok = false;
        }
    }
    return ok;
}

static void walk_data(pp_walk *w, const pp_ynode *n)
{
    enum { K_FORMAT, K_SIZE, K_IMAGES, K_LABELS, K_FILES, K_SHUFFLE, K_MEAN, K_STD, K_CLASSES,
           K_N };
    static const char *const keys[K_N] = {"format",  "image_size", "images", "labels",
                                          "files",   "shuffle",    "mean",   "std",
                                          "num_classes"};
    const pp_ynode *f[K_N];
    pp_plan *p = w->plan;
    pp_plan_data *d = &p->data;
    d->mark = pp_walk_mark(n);
    if (!pp_walk_map(w, n, "data", keys, K_N, f)) {
        w->size_ok = false;
        return;
    }
    int format = 0;
    if (f[K_FORMAT]) {
        static const char *const formats[] = {"synthetic", "idx", "cifar10"};
        format = pp_walk_choice(w, f[K_FORMAT], "data.format", formats, 3,
                                "synthetic, idx or cifar10");
        if (format < 0) {
            w->size_ok = false;
            return;
        }
    }
    d->format = (pp_plan_data_format)format;
    const char *fmt = pp_plan_data_format_name(d->format);
    /* keys that belong to other formats */
    static const struct {
        int key;
        unsigned formats; /* bit per format */
    } owners[] = {{K_SIZE, 1u}, {K_CLASSES, 1u}, {K_IMAGES, 2u}, {K_LABELS, 2u}, {K_FILES, 4u}};
    for (size_t i = 0; i < sizeof owners / sizeof owners[0]; i++) {
        if (f[owners[i].key] && !(owners[i].formats & (1u << format))) {
            const char *only = owners[i].formats == 1u   ? "synthetic"
                               : owners[i].formats == 2u ? "idx"
                                                         : "cifar10";
            pp_walk_error(w, f[owners[i].key], "data.%s applies only to format %s, not %s",
                          keys[owners[i].key], only, fmt);
            f[owners[i].key] = NULL;
        }
    }
    if (d->format == PP_PLAN_DATA_SYNTHETIC) {
        const pp_ynode *s = f[K_SIZE];
        if (s) {
            w->size_node = s;
            if (s->kind == PP_YNODE_SCALAR) { /* image_size: N is [N, N] */
                int nn;
                if (pp_walk_int32(w, s, "data.image_size", 1, 8192, &nn))
                    p->model.image_h = p->model.image_w = nn;
                else
                    w->size_ok = false;
            } else if (s->kind != PP_YNODE_SEQ || s->n != 2) {
                pp_walk_error(w, s, "data.image_size must be a size N (for N x N) or a list "
                                    "[height, width], got %s",
                              s->kind == PP_YNODE_SEQ ? "a list of another length"
                                                      : pp_walk_describe(s));
                w->size_ok = false;
            } else {
                int hh, ww;
                bool ok = pp_walk_int32(w, s->kids[0], "data.image_size height", 1, 8192, &hh);
                ok &= pp_walk_int32(w, s->kids[1], "data.image_size width", 1, 8192, &ww);
                if (ok) {
                    p->model.image_h = hh;
                    p->model.image_w = ww;
                } else {
                    w->size_ok = false;
                }
            }
        }
        if (f[K_CLASSES]) w->data_classes_node = f[K_CLASSES];
    } else if (d->format == PP_PLAN_DATA_IDX) {
        if (!f[K_IMAGES]) pp_walk_error(w, n, "data format idx needs images (an IDX file)");
        if (!f[K_LABELS]) pp_walk_error(w, n, "data format idx needs labels (an IDX file)");
        if (f[K_IMAGES]) {
            d->images_mark = pp_walk_mark(f[K_IMAGES]);
            w->data_images_node = f[K_IMAGES];
            d->images = data_path(w, f[K_IMAGES], "data.images");
            if (d->images) idx_image_size(d->images, &p->model.image_h, &p->model.image_w);
        }
        if (f[K_LABELS]) {
            d->labels_mark = pp_walk_mark(f[K_LABELS]);
            w->data_labels_node = f[K_LABELS];
            d->labels = data_path(w, f[K_LABELS], "data.labels");
        }
    } else {
        p->model.image_h = p->model.image_w = 32;
        const pp_ynode *fl = f[K_FILES];
        if (!fl) {
            pp_walk_error(w, n, "data format cifar10 needs files (a list of batch files)");
        } else if (fl->kind != PP_YNODE_SEQ || fl->n == 0) {
            pp_walk_error(w, fl, "data.files must be a non-empty list of paths, got %s",
                          fl->kind == PP_YNODE_SEQ ? "an empty list" : pp_walk_describe(fl));
        } else if (fl->n > 1024) {
            pp_walk_error(w, fl, "data.files has %d entries (at most 1024)", fl->n);
        } else {
            d->files = calloc((size_t)fl->n, sizeof *d->files);
            d->files_marks = calloc((size_t)fl->n, sizeof *d->files_marks);
            if (!d->files || !d->files_marks) {
                w->oom = true;
                return;
            }
            d->n_files = fl->n;
            for (int i = 0; i < fl->n; i++) {
                d->files_marks[i] = pp_walk_mark(fl->kids[i]);
                d->files[i] = data_path(w, fl->kids[i], "data.files");
            }
        }
    }
    if (f[K_SHUFFLE]) pp_walk_bool(w, f[K_SHUFFLE], "data.shuffle", &d->shuffle);
    if (f[K_MEAN] && !f[K_STD]) pp_walk_error(w, f[K_MEAN], "data.mean needs data.std as well");
    if (f[K_STD] && !f[K_MEAN]) pp_walk_error(w, f[K_STD], "data.std needs data.mean as well");
    if (f[K_MEAN] && f[K_STD] && w->model_ok) {
        bool ok = walk_norm(w, f[K_MEAN], "data.mean", d->mean, false);
        ok &= walk_norm(w, f[K_STD], "data.std", d->std, true);
        d->has_norm = ok;
    }
}

/* ---- eval, checkpoint, schedule ------------------------------------------ */

static void walk_eval(pp_walk *w, const pp_ynode *n)
{
    enum { K_IMAGES, K_LABELS, K_BATCH, K_EVERY, K_N };
    static const char *const keys[K_N] = {"images", "labels", "batch_size", "every"};
    const pp_ynode *f[K_N];
    pp_plan_eval *e = &w->plan->eval;
    e->mark = pp_walk_mark(n);
    e->every = 1;
    if (!pp_walk_map(w, n, "eval", keys, K_N, f)) return;
    e->enabled = true;
    if (!f[K_IMAGES]) pp_walk_error(w, n, "eval needs images (an IDX file, may be gzipped)");
    if (!f[K_LABELS]) pp_walk_error(w, n, "eval needs labels (an IDX file, may be gzipped)");
    if (f[K_IMAGES]) {
        e->images_mark = pp_walk_mark(f[K_IMAGES]);
        w->eval_images_node = f[K_IMAGES];
        e->images = data_path(w, f[K_IMAGES], "eval.images");
    }
    if (f[K_LABELS]) {
        e->labels_mark = pp_walk_mark(f[K_LABELS]);
        w->eval_labels_node = f[K_LABELS];
        e->labels = data_path(w, f[K_LABELS], "eval.labels");
    }
    if (f[K_BATCH])
        pp_walk_int32(w, f[K_BATCH], "eval.batch_size", 1, PP_PLAN_MAX_BATCH, &e->batch_size);
    if (f[K_EVERY]) pp_walk_int32(w, f[K_EVERY], "eval.every", 1, PP_PLAN_MAX_STEPS, &e->every);
}

static void walk_checkpoint(pp_walk *w, const pp_ynode *n, bool epochs)
{
    enum { K_EVERY, K_PATH, K_KEEP, K_N };
    static const char *const keys[K_N] = {"every", "path", "keep"};
    const pp_ynode *f[K_N];
    pp_plan_checkpoint *c = &w->plan->checkpoint;
    c->mark = pp_walk_mark(n);
    c->every = 1;
    c->keep = 3;
    if (!pp_walk_map(w, n, "checkpoint", keys, K_N, f)) return;
    c->enabled = true;
    const char *tag = epochs ? "{epoch}" : "{step}";
    const char *path = epochs ? "checkpoint-{epoch}.safetensors" : "checkpoint-{step}.safetensors";
    if (f[K_PATH] && pp_walk_str(w, f[K_PATH], "checkpoint.path", &path) && !strstr(path, tag))
        pp_walk_error(w, f[K_PATH], "checkpoint.path must contain %s (where the %s goes)", tag,
                      epochs ? "epoch" : "step");
    c->path = strdup(path);
    if (!c->path) w->oom = true;
    if (f[K_EVERY]) pp_walk_int32(w, f[K_EVERY], "checkpoint.every", 1, PP_PLAN_MAX_STEPS, &c->every);
    if (f[K_KEEP]) pp_walk_int32(w, f[K_KEEP], "checkpoint.keep", 0, 1000000, &c->keep);
}

/* schedule: NAME (a built-in) or {file: PATH} (a program in torch's CSV
 * grammar, relative to the plan's folder). */
static void walk_schedule(pp_walk *w, const pp_ynode *n)
{
    pp_plan *p = w->plan;
    p->schedule_mark = pp_walk_mark(n);
    if (n->kind == PP_YNODE_MAP) {
        static const char *const keys[] = {"file"};
        const pp_ynode *f[1];
        if (!pp_walk_map(w, n, "schedule", keys, 1, f)) return;
        if (!f[0]) { /* (other keys are reported as unknown) */
            if (n->n == 0)
                pp_walk_error(w, n, "schedule: a mapping names a program with file: PATH (a CSV "
                                    "in torch's schedule grammar)");
            return;
        }
        p->schedule_file = data_path(w, f[0], "schedule.file");
        if (p->schedule_file) p->schedule = PP_PLAN_SCHEDULE_FILE;
        return;
    }
    int s = pp_walk_choice(w, n, "schedule", schedule_names, PP_PLAN_SCHEDULE_FILE,
                           "gpipe, 1f1b, interleaved1f1b, loopedbfs, interleavedzb, zbh1, zbh2, "
                           "zbv, dualpipev or {file: PATH}");
    if (s >= 0) p->schedule = (pp_plan_schedule)s;
}

/* ---- the top level ------------------------------------------------------- */

static void walk_root(pp_walk *w, const pp_ynode *root)
{
    enum { K_MODEL, K_BATCH, K_SCHEDULE, K_PRECISION, K_OPTIMIZER, K_DATA, K_SEED, K_STEPS,
           K_EPOCHS, K_EVAL, K_CKPT, K_STAGES, K_DEVICES, K_BALANCE, K_REPLICAS, K_GRAPHS,
           K_RECOMPUTE, K_LOSS, K_N };
    static const char *const keys[K_N] = {"model",      "batch",  "schedule", "precision",
                                          "optimizer",  "data",   "seed",     "steps",
                                          "epochs",     "eval",   "checkpoint", "stages",
                                          "devices",    "balance", "replicas", "cuda_graphs",
                                          "recompute", "loss"};
    const pp_ynode *f[K_N];
    pp_plan *p = w->plan;
    if (pp_ynode_is_null(root)) {
        pp_walk_error(w, NULL, "the plan is empty");
        return;
    }
    if (root->kind != PP_YNODE_MAP) {
        pp_walk_error(w, root, "a plan must be a mapping of sections (model, batch, stages...), "
                               "got %s",
                      pp_walk_describe(root));
        return;
    }
    pp_walk_map(w, root, "the plan", keys, K_N, f);

    /* defaults */
    p->schedule = PP_PLAN_SCHEDULE_GPIPE;
    p->precision = PP_PLAN_PRECISION_FP32;
    p->cuda_graphs = true;
    p->optimizer.lr = 0.1;
    p->optimizer.beta1 = 0.9; /* adamw's, torch.optim.AdamW's defaults */
    p->optimizer.beta2 = 0.999;
    p->optimizer.eps = 1e-8;
    p->data.format = PP_PLAN_DATA_SYNTHETIC;
    p->steps = 1;
    p->replicas = 1;
    w->size_ok = true;

    if (f[K_MODEL])
        pp_walk_model(w, f[K_MODEL]);
    else
        pp_walk_error(w, NULL, "the plan has no model section");
    if (f[K_DATA]) walk_data(w, f[K_DATA]);
    if (w->model_ok && p->model.kind == PP_MODEL_SEQUENTIAL)
        pp_walk_resolve_sequential(w, f[K_MODEL]);
    if (w->model_ok) {
        p->data.num_classes = p->model.num_classes;
        if (w->data_classes_node)
            pp_walk_int32(w, w->data_classes_node, "data.num_classes", 1, p->model.num_classes,
                          &p->data.num_classes);
    }
    if (f[K_BATCH])
        walk_batch(w, f[K_BATCH]);
    else
        pp_walk_error(w, NULL, "the plan has no batch section");
    if (f[K_SCHEDULE]) walk_schedule(w, f[K_SCHEDULE]);
    if (f[K_PRECISION]) {
        const char *s;
        if (pp_walk_str(w, f[K_PRECISION], "precision", &s) && strcmp(s, "fp32") != 0) {
            if (!strcmp(s, "tf32"))
                p->precision = PP_PLAN_PRECISION_TF32;
            else if (!strcmp(s, "bf16"))
                p->precision = PP_PLAN_PRECISION_BF16;
            else if (!strcmp(s, "fp16"))
                pp_walk_error(w, f[K_PRECISION],
                              "precision fp16 is not supported yet (use fp32, tf32 or bf16)");
            else
                pp_walk_error(w, f[K_PRECISION],
                              "unknown precision '%.64s' (expected fp32, tf32 or bf16)", s);
        }
    }
    if (f[K_RECOMPUTE]) {
        p->recompute_mark = pp_walk_mark(f[K_RECOMPUTE]);
        int r = pp_walk_recompute(w, f[K_RECOMPUTE], "recompute");
        if (r >= 0) p->recompute = (pp_plan_recompute)r;
    }
    if (f[K_GRAPHS]) {
        static const char *const names[] = {"off", "on"};
        int s = pp_walk_choice(w, f[K_GRAPHS], "cuda_graphs", names, 2, "on or off");
        if (s >= 0) p->cuda_graphs = s == 1;
    }
    if (f[K_OPTIMIZER]) pp_walk_optimizer(w, f[K_OPTIMIZER]);
    if (f[K_LOSS]) pp_walk_loss(w, f[K_LOSS]);
    if (f[K_SEED]) {
        int64_t seed;
        if (pp_walk_int(w, f[K_SEED], "seed", 0, INT64_MAX, &seed)) p->seed = (uint64_t)seed;
    }
    if (f[K_STEPS] && f[K_EPOCHS])
        pp_walk_error(w, f[K_EPOCHS], "give steps or epochs, not both");
    else if (f[K_STEPS]) {
        p->steps_mark = pp_walk_mark(f[K_STEPS]);
        pp_walk_int32(w, f[K_STEPS], "steps", 1, PP_PLAN_MAX_STEPS, &p->steps);
    }
    else if (f[K_EPOCHS]) {
        p->epochs_mark = pp_walk_mark(f[K_EPOCHS]);
        if (pp_walk_int32(w, f[K_EPOCHS], "epochs", 1, PP_PLAN_MAX_EPOCHS, &p->epochs))
            p->steps = 0;
    }
    if (f[K_EVAL]) walk_eval(w, f[K_EVAL]);
    if (f[K_CKPT]) walk_checkpoint(w, f[K_CKPT], f[K_EPOCHS] != NULL);
    if (p->eval.enabled && p->eval.batch_size == 0) p->eval.batch_size = p->batch_size;
    /* the learning-rate schedule over the run's periods (epochs or steps) */
    p->lr_schedule.base_lr = p->optimizer.lr;
    if (p->lr_schedule.kind == PP_LR_COSINE) p->lr_schedule.total = p->epochs ? p->epochs : p->steps;
    if (p->lr_schedule.kind != PP_LR_CONSTANT && p->optimizer.lr > 0) {
        pp_error e;
        if (pp_lr_schedule_check(&p->lr_schedule, &e) != PP_OK)
            pp_walk_error(w, f[K_OPTIMIZER], "optimizer.%s", e.msg);
    }

    /* the catalogue the stages are resolved against */
    if (w->model_ok && p->model.kind == PP_MODEL_RESNET && w->size_ok) {
        pp_error e;
        if (pp_catalogue_build(&p->model, &p->catalogue, &e) == PP_OK) {
            w->catalogue_ok = true;
        } else {
            memset(&p->catalogue, 0, sizeof p->catalogue);
            pp_walk_error(w, w->size_node ? w->size_node : f[K_MODEL], "%s", e.msg);
        }
    }
    char msg[400];
    if (w->catalogue_ok && w->batch_ok && p->micro_sizes && min_batch_message(p, msg, sizeof msg))
        pp_walk_error(w, f[K_BATCH], "%s", msg);
    if (f[K_REPLICAS]) {
        p->replicas_mark = pp_walk_mark(f[K_REPLICAS]);
        if (pp_walk_int32(w, f[K_REPLICAS], "replicas", 1, PP_PLAN_MAX_REPLICAS, &p->replicas) &&
            w->batch_ok && p->replicas > p->batch_size)
            pp_walk_error(w, f[K_REPLICAS], "replicas: %d exceeds the batch size %d (every "
                          "replica needs a sample)", p->replicas, p->batch_size);
    }
    if (!w->errors) pp_walk_check_data(w); /* reads files: once the rest is valid */
    pp_walk_stages(w, f[K_STAGES], f[K_DEVICES], f[K_BALANCE]);
}

/* Stable sort of the diagnostics from index first on into file order;
 * problems without a position stay in front, in the order found. */
static void sort_items(pp_diag *d, int first)
{
    if (!d) return;
    int kept = d->count < PP_DIAG_MAX ? d->count : PP_DIAG_MAX;
    for (int i = first + 1; i < kept; i++) {
        pp_diag_item tmp = d->items[i];
        int j = i;
        while (j > first && (d->items[j - 1].line > tmp.line ||
                             (d->items[j - 1].line == tmp.line && d->items[j - 1].col > tmp.col))) {
            d->items[j] = d->items[j - 1];
            j--;
        }
        d->items[j] = tmp;
    }
}

pp_status pp_plan_parse_string(const char *name, const char *text, size_t len, pp_plan **out,
                               pp_diag *diag)
{
    pp_diag_clear(diag);
    if (out) *out = NULL;
    if (!name) name = "<plan>";
    if (!out || (!text && len)) {
        return pp_diag_add(diag, PP_ERR_INVALID, name, 0, 0,
                           "pp_plan_parse_string: NULL output or text");
    }
    pp_ytree tree;
    pp_status st = pp_ytree_parse(name, text ? text : "", len, &tree, diag);
    if (st != PP_OK) {
        pp_ytree_free(&tree);
        return st;
    }
    pp_plan *p = calloc(1, sizeof *p);
    char *dir = pp_path_dir(name);
    char *path = strdup(name);
    if (!p || !dir || !path) {
        free(p);
        free(dir);
        free(path);
        pp_ytree_free(&tree);
        return pp_diag_add(diag, PP_ERR_OOM, name, 0, 0, "out of memory (plan)");
    }
    p->path = path;
    int first_item = diag ? diag->count : 0;
    pp_walk w;
    memset(&w, 0, sizeof w);
    w.file = name;
    w.dir = dir;
    w.diag = diag;
    w.plan = p;
    walk_root(&w, tree.root);
    pp_ytree_free(&tree);
    free(dir);
    if (w.oom) {
        pp_plan_free(p);
        return pp_diag_add(diag, PP_ERR_OOM, name, 0, 0, "out of memory (plan)");
    }
    if (w.errors) {
        pp_plan_free(p);
        sort_items(diag, first_item);
        return PP_ERR_INPUT;
    }
    *out = p;
    return PP_OK;
}

pp_status pp_plan_load(const char *path, pp_plan **out, pp_diag *diag)
{
    pp_diag_clear(diag);
    if (out) *out = NULL;
    if (!path || !out)
        return pp_diag_add(diag, PP_ERR_INVALID, "<plan>", 0, 0,
                           "pp_plan_load: NULL path or output");
    FILE *f = fopen(path, "rb");
    if (!f) return pp_diag_add(diag, PP_ERR_INPUT, path, 0, 0, "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return pp_diag_add(diag, PP_ERR_INPUT, path, 0, 0, "is a folder, not a plan file");
    }
    size_t cap = PP_YAML_MAX_BYTES + 1;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return pp_diag_add(diag, PP_ERR_OOM, path, 0, 0, "out of memory (plan text)");
    }
    size_t len = fread(buf, 1, cap, f);
    int read_err = ferror(f);
    int saved = errno;
    fclose(f);
    pp_status st;
    if (read_err)
        st = pp_diag_add(diag, PP_ERR_INPUT, path, 0, 0, "cannot read: %s", strerror(saved));
    else if (len > PP_YAML_MAX_BYTES)
        st = pp_diag_add(diag, PP_ERR_INPUT, path, 0, 0,
                         "the plan is too large (more than %u bytes)", PP_YAML_MAX_BYTES);
    else
        st = pp_plan_parse_string(path, buf, len, out, diag);
    free(buf);
    return st;
}

void pp_plan_free(pp_plan *p)
{
    if (!p) return;
    free(p->path);
    free(p->micro_sizes);
    free(p->data.images);
    free(p->data.labels);
    free(p->eval.images);
    free(p->eval.labels);
    free(p->checkpoint.path);
    free(p->schedule_file);
    for (int i = 0; i < p->data.n_files; i++) free(p->data.files[i]);
    free(p->data.files);
    free(p->data.files_marks);
    if (p->catalogue.units) pp_catalogue_free(&p->catalogue);
    free(p);
}
