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

/* ---- checkpoint, schedule ---------------------------------------------- */

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
        p->schedule_file = pp_walk_path(w, f[0], "schedule.file", false);
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
    p->data.prefetch = 1;
    if (f[K_DATA]) pp_walk_source(w, f[K_DATA], false);
    if (w->model_ok && p->model.kind == PP_MODEL_SEQUENTIAL)
        pp_walk_resolve_sequential(w, f[K_MODEL]);
    if (w->model_ok) {
        p->data.num_classes = p->model.num_classes;
        if (w->src[0].classes)
            pp_walk_int32(w, w->src[0].classes, "data.num_classes", 1, p->model.num_classes,
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
    if (f[K_EVAL]) pp_walk_source(w, f[K_EVAL], true);
    if (p->eval.enabled && w->model_ok) {
        p->eval.data.num_classes = p->model.num_classes;
        if (w->src[1].classes)
            pp_walk_int32(w, w->src[1].classes, "eval.num_classes", 1, p->model.num_classes,
                          &p->eval.data.num_classes);
    }
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
    if (w->model_ok && (p->model.kind == PP_MODEL_RESNET || p->model.kind == PP_MODEL_GPT2) &&
        w->size_ok) {
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
    if (!w->errors) pp_walk_check_tokens(w);
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
    pp_plan_data_free(&p->data);
    pp_plan_data_free(&p->eval.data);
    free(p->checkpoint.path);
    free(p->schedule_file);
    if (p->catalogue.units) pp_catalogue_free(&p->catalogue);
    free(p);
}
