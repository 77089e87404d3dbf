/*
 * plan_source.c - the data sources of a plan: the `data` section (the
 * training set) and the test set of `eval`, walked by one function, so the
 * test set takes every format the training set takes (synthetic, idx,
 * cifar10, imagefolder), and the image folders' transforms. Paths are
 * resolved against the plan's folder. An image folder is indexed while the
 * plan is read (its classes are counted, its image size found when no
 * transform fixes it), so `--validate` reports a missing root, a folder
 * without classes or a class without images at the key that names it; the
 * index is cached (runtime/io/image_index.h) for the run that follows.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "partitioner/plan_walk.h"
#include "runtime/io/idx.h"
#include "runtime/io/image_index.h"
#include "runtime/io/imagefolder.h"

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

/* ---- transforms ------------------------------------------------------------ */

/* A size: N (N x N) or [H, W], each 1..16384. */
static bool walk_size(pp_walk *w, const pp_ynode *n, const char *what, int *h, int *wd)
{
    if (n && n->kind == PP_YNODE_SCALAR) {
        if (!pp_walk_int32(w, n, what, 1, 16384, h)) return false;
        *wd = *h;
        return true;
    }
    if (!n || n->kind != PP_YNODE_SEQ || n->n != 2) {
        pp_walk_error(w, n, "%s must be a size N (for N x N) or a list [height, width], got %s",
                      what, n && n->kind == PP_YNODE_SEQ ? "a list of another length"
                                                         : pp_walk_describe(n));
        return false;
    }
    char side[80];
    snprintf(side, sizeof side, "%s height", what);
    bool ok = pp_walk_int32(w, n->kids[0], side, 1, 16384, h);
    snprintf(side, sizeof side, "%s width", what);
    return pp_walk_int32(w, n->kids[1], side, 1, 16384, wd) && ok;
}

/* A pair of numbers [a, b] with lo <= a <= b <= hi. */
static bool walk_range(pp_walk *w, const pp_ynode *n, const char *what, double lo, double hi,
                       double out[2])
{
    if (!n || n->kind != PP_YNODE_SEQ || n->n != 2) {
        pp_walk_error(w, n, "%s must be [low, high], got %s", what, pp_walk_describe(n));
        return false;
    }
    bool ok = pp_walk_num(w, n->kids[0], what, lo, hi, &out[0]);
    ok = pp_walk_num(w, n->kids[1], what, lo, hi, &out[1]) && ok;
    if (ok && out[0] > out[1]) {
        pp_walk_error(w, n, "%s: low %g is above high %g", what, out[0], out[1]);
        return false;
    }
    return ok;
}

/* random_resized_crop: SIZE or {size, scale, ratio}. */
static bool walk_rrc(pp_walk *w, const pp_ynode *n, pp_transform *t)
{
    if (n->kind != PP_YNODE_MAP) return walk_size(w, n, "random_resized_crop", &t->h, &t->w);
    static const char *const keys[] = {"size", "scale", "ratio"};
    const pp_ynode *f[3];
    if (!pp_walk_map(w, n, "random_resized_crop", keys, 3, f)) return false;
    if (!f[0]) {
        pp_walk_error(w, n, "random_resized_crop needs a size");
        return false;
    }
    bool ok = walk_size(w, f[0], "random_resized_crop.size", &t->h, &t->w);
    if (f[1]) ok = walk_range(w, f[1], "random_resized_crop.scale", 1e-6, 1.0, t->scale) && ok;
    if (f[2]) ok = walk_range(w, f[2], "random_resized_crop.ratio", 1e-3, 1e3, t->ratio) && ok;
    return ok;
}

/* random_crop: SIZE or {size, padding: N | [LR, TB] | [L, T, R, B]}. */
static bool walk_random_crop(pp_walk *w, const pp_ynode *n, pp_transform *t)
{
    if (n->kind != PP_YNODE_MAP) return walk_size(w, n, "random_crop", &t->h, &t->w);
    static const char *const keys[] = {"size", "padding"};
    const pp_ynode *f[2];
    if (!pp_walk_map(w, n, "random_crop", keys, 2, f)) return false;
    if (!f[0]) {
        pp_walk_error(w, n, "random_crop needs a size");
        return false;
    }
    bool ok = walk_size(w, f[0], "random_crop.size", &t->h, &t->w);
    const pp_ynode *p = f[1];
    if (!p) return ok;
    int v[4];
    if (p->kind == PP_YNODE_SCALAR) {
        if (!pp_walk_int32(w, p, "random_crop.padding", 0, 4096, &v[0])) return false;
        v[1] = v[2] = v[3] = v[0];
    } else if (p->kind == PP_YNODE_SEQ && (p->n == 2 || p->n == 4)) {
        for (int i = 0; i < p->n; i++)
            if (!pp_walk_int32(w, p->kids[i], "random_crop.padding", 0, 4096, &v[i])) return false;
        if (p->n == 2) {
            v[2] = v[0];
            v[3] = v[1];
        }
    } else {
        pp_walk_error(w, p, "random_crop.padding must be N, [left/right, top/bottom] or [left, "
                      "top, right, bottom], got %s", pp_walk_describe(p));
        return false;
    }
    memcpy(t->pad, v, sizeof v);
    return ok;
}

/* transforms: a list of one-key mappings, torchvision's transforms in order. */
static void walk_transforms(pp_walk *w, const pp_ynode *n, const char *section, pp_plan_data *d)
{
    char what[64];
    snprintf(what, sizeof what, "%s.transforms", section);
    d->transforms_mark = pp_walk_mark(n);
    if (n->kind != PP_YNODE_SEQ) {
        pp_walk_error(w, n, "%s must be a list such as [{random_resized_crop: 224}, "
                      "{horizontal_flip: 0.5}], got %s", what, pp_walk_describe(n));
        return;
    }
    if (n->n > PP_TRANSFORMS_MAX) {
        pp_walk_error(w, n, "%s has %d entries (at most %d)", what, n->n, PP_TRANSFORMS_MAX);
        return;
    }
    static const char *const keys[] = {"random_resized_crop", "horizontal_flip", "random_crop",
                                       "resize", "center_crop"};
    for (int i = 0; i < n->n; i++) {
        const pp_ynode *e = n->kids[i], *f[5];
        if (e->kind != PP_YNODE_MAP || e->n != 1) {
            pp_walk_error(w, e, "%s: each entry is one transform, {NAME: SETTINGS} with NAME "
                          "random_resized_crop, horizontal_flip, random_crop, resize or "
                          "center_crop; got %s", what, pp_walk_describe(e));
            continue;
        }
        if (!pp_walk_map(w, e, what, keys, 5, f)) continue;
        int k = 0;
        while (k < 5 && !f[k]) k++;
        if (k == 5) continue; /* reported as unknown */
        pp_transform t = pp_transform_default((pp_transform_kind)k);
        bool ok = true;
        switch (t.kind) {
        case PP_TF_RANDOM_RESIZED_CROP: ok = walk_rrc(w, f[k], &t); break;
        case PP_TF_HORIZONTAL_FLIP:
            ok = pp_walk_num(w, f[k], "horizontal_flip (its probability)", 0.0, 1.0, &t.p);
            break;
        case PP_TF_RANDOM_CROP: ok = walk_random_crop(w, f[k], &t); break;
        case PP_TF_RESIZE:
            if (f[k]->kind == PP_YNODE_SCALAR) { /* the shorter side */
                ok = pp_walk_int32(w, f[k], "resize", 1, 16384, &t.h);
                t.w = 0;
            } else {
                ok = walk_size(w, f[k], "resize", &t.h, &t.w);
            }
            break;
        case PP_TF_CENTER_CROP: ok = walk_size(w, f[k], "center_crop", &t.h, &t.w); break;
        }
        if (ok) d->transforms[d->n_transforms++] = t;
    }
}

/* ---- the sections ---------------------------------------------------------- */

/* The image folder of a section: indexed now (its classes counted), its
 * image size from the transforms or its first image. */
static void open_folder(pp_walk *w, const pp_ynode *root_node, const char *section,
                        pp_plan_data *d)
{
    const int c = w->plan->model.in_channels;
    if (c != 1 && c != 3) {
        pp_walk_error(w, root_node, "%s.root: an image folder gives 1-channel (L) or 3-channel "
                      "(RGB) images, but model.in_channels is %d", section, c);
        return;
    }
    char cache[4096];
    const bool cached = pp_image_index_cache_dir(cache, sizeof cache);
    pp_images_config ic = {.root = d->root,
                           .cache = {.dir = cached ? cache : NULL,
                                     .min_files = PP_IMAGE_INDEX_CACHE_MIN_FILES},
                           .channels = c, .n_transforms = d->n_transforms,
                           .transforms = d->transforms, .skip_bad = d->skip_bad_images};
    pp_images *im;
    pp_error e;
    if (cached && pp_plan_cache_max("PP_IMAGE_INDEX_CACHE_MAX", PP_IMAGE_INDEX_CACHE_MAX_BYTES,
                                    &ic.cache.max_bytes, &e) != PP_OK) {
        pp_walk_error(w, root_node, "%s.root: %s", section, e.msg);
        return;
    }
    if (pp_images_open(&ic, &im, &e) != PP_OK) {
        pp_walk_error(w, root_node, "%s.root: %s", section, e.msg);
        return;
    }
    pp_images_shape(im, NULL, &d->image_h, &d->image_w);
    d->classes_found = pp_image_index_classes(pp_images_index(im));
    const pp_image_index_note *note = pp_images_index_note(im);
    d->index = (pp_plan_index){.images = pp_image_index_size(pp_images_index(im)),
                               .from_cache = note->from_cache,
                               .cached = note->cache_written,
                               .seconds = note->seconds,
                               .evicted = note->evicted,
                               .evicted_bytes = note->evicted_bytes};
    snprintf(d->index.cache_path, sizeof d->index.cache_path, "%s", note->cache_path);
    pp_images_free(im);
}

/* The keys of the source sections (each section takes some of them; see
 * walk_data_keys and walk_eval_keys), and which formats own which. */
enum { K_FORMAT, K_SIZE, K_IMAGES, K_LABELS, K_FILES, K_CLASSES, K_SAMPLES, K_ROOT, K_TRANSFORMS,
       K_BAD, K_FILE, K_BLOCK, K_SHUFFLE, K_MEAN, K_STD, K_WORKERS, K_PREFETCH, K_DROP, K_BATCH,
       K_EVERY, K_TOKENIZER, K_N };
static const char *const source_keys[K_N] = {
    "format",  "image_size", "images",  "labels",  "files",   "num_classes",
    "samples", "root",       "transforms", "on_bad_image", "file", "block_size", "shuffle",
    "mean",    "std",        "workers",    "prefetch",  "drop_last",  "batch_size",   "every",
    "tokenizer"};
#define FMT_SYNTH 1u
#define FMT_IDX 2u
#define FMT_CIFAR 4u
#define FMT_FOLDER 8u
#define FMT_TOKENS 48u /* tokens, text */
#define FMT_IMAGES 15u /* every image format */

/* The keys that belong to other formats, reported and dropped. */
static void drop_foreign(pp_walk *w, const pp_ynode **f, int format, const char *section)
{
    static const struct {
        int key;
        unsigned formats;
    } owners[] = {{K_SIZE, FMT_SYNTH},      {K_CLASSES, FMT_SYNTH},      {K_SAMPLES, FMT_SYNTH},
                  {K_IMAGES, FMT_IDX},      {K_LABELS, FMT_IDX},         {K_FILES, FMT_CIFAR},
                  {K_ROOT, FMT_FOLDER},     {K_TRANSFORMS, FMT_FOLDER},  {K_BAD, FMT_FOLDER},
                  {K_FILE, FMT_TOKENS},     {K_BLOCK, FMT_TOKENS},       {K_MEAN, FMT_IMAGES},
                  {K_STD, FMT_IMAGES},      {K_TOKENIZER, FMT_TOKENS}};
    static const char *const names[] = {"synthetic", "idx", "cifar10", "imagefolder", "tokens",
                                        "text"};
    for (size_t i = 0; i < sizeof owners / sizeof owners[0]; i++) {
        const int k = owners[i].key;
        if (!f[k] || (owners[i].formats & (1u << format))) continue;
        char only[96] = ""; /* the formats that own the key */
        for (int o = 0, seen = 0; o < 6; o++)
            if (owners[i].formats & (1u << o))
                snprintf(only + strlen(only), sizeof only - strlen(only), "%s%s",
                         seen++ ? (owners[i].formats >> (o + 1) ? ", " : " or ") : "", names[o]);
        pp_walk_error(w, f[k], "%s.%s applies only to format %s, not %s", section,
                      source_keys[k], only, names[format]);
        f[k] = NULL;
    }
}

/* The format's own keys. */
static void walk_format_keys(pp_walk *w, const pp_ynode *n, const pp_ynode **f, bool eval,
                             const char *section, pp_plan_data *d)
{
    pp_plan *p = w->plan;
    pp_walk_nodes *nodes = &w->src[eval];
    char what[64];
    d->image_h = p->model.image_h; /* unless the format says otherwise */
    d->image_w = p->model.image_w;
    switch (d->format) {
    case PP_PLAN_DATA_SYNTHETIC:
        if (f[K_SIZE]) {
            snprintf(what, sizeof what, "%s.image_size", section);
            if (!eval) w->size_node = f[K_SIZE];
            if (!walk_size(w, f[K_SIZE], what, &d->image_h, &d->image_w) && !eval)
                w->size_ok = false;
        }
        nodes->classes = f[K_CLASSES];
        if (f[K_SAMPLES]) {
            snprintf(what, sizeof what, "%s.samples", section);
            pp_walk_int(w, f[K_SAMPLES], what, 1, UINT32_MAX, &d->samples);
        }
        break;
    case PP_PLAN_DATA_IDX:
        if (!f[K_IMAGES])
            pp_walk_error(w, n, "%s needs images (an IDX file, may be gzipped)",
                          eval ? "eval" : "data format idx");
        if (!f[K_LABELS])
            pp_walk_error(w, n, "%s needs labels (an IDX file, may be gzipped)",
                          eval ? "eval" : "data format idx");
        if (f[K_IMAGES]) {
            snprintf(what, sizeof what, "%s.images", section);
            d->images_mark = pp_walk_mark(f[K_IMAGES]);
            nodes->images = f[K_IMAGES];
            d->images = pp_walk_path(w, f[K_IMAGES], what, false);
            if (d->images) idx_image_size(d->images, &d->image_h, &d->image_w);
        }
        if (f[K_LABELS]) {
            snprintf(what, sizeof what, "%s.labels", section);
            d->labels_mark = pp_walk_mark(f[K_LABELS]);
            nodes->labels = f[K_LABELS];
            d->labels = pp_walk_path(w, f[K_LABELS], what, false);
        }
        break;
    case PP_PLAN_DATA_CIFAR10: {
        d->image_h = d->image_w = 32;
        const pp_ynode *fl = f[K_FILES];
        snprintf(what, sizeof what, "%s.files", section);
        if (!fl) {
            pp_walk_error(w, n, "%s format cifar10 needs files (a list of batch files)", section);
        } else if (fl->kind != PP_YNODE_SEQ || fl->n == 0) {
            pp_walk_error(w, fl, "%s must be a non-empty list of paths, got %s", what,
                          fl->kind == PP_YNODE_SEQ ? "an empty list" : pp_walk_describe(fl));
        } else if (fl->n > 1024) {
            pp_walk_error(w, fl, "%s has %d entries (at most 1024)", what, fl->n);
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
                d->files[i] = pp_walk_path(w, fl->kids[i], what, false);
            }
        }
        break;
    }
    case PP_PLAN_DATA_IMAGEFOLDER:
        if (f[K_TRANSFORMS]) walk_transforms(w, f[K_TRANSFORMS], section, d);
        if (f[K_BAD]) {
            static const char *const modes[] = {"error", "skip"};
            snprintf(what, sizeof what, "%s.on_bad_image", section);
            int m = pp_walk_choice(w, f[K_BAD], what, modes, 2, "error or skip");
            d->skip_bad_images = m == 1;
        }
        if (!f[K_ROOT]) {
            pp_walk_error(w, n, "%s format imagefolder needs root (a folder of class folders)",
                          section);
            break;
        }
        snprintf(what, sizeof what, "%s.root", section);
        d->root_mark = pp_walk_mark(f[K_ROOT]);
        nodes->root = f[K_ROOT];
        d->root = pp_walk_path(w, f[K_ROOT], what, true);
        if (d->root && w->model_ok) open_folder(w, f[K_ROOT], section, d);
        break;
    case PP_PLAN_DATA_TOKENS:
    case PP_PLAN_DATA_TEXT:
        pp_walk_token_file(w, n, f[K_FILE], f[K_BLOCK], eval, d);
        if (f[K_TOKENIZER]) pp_walk_tokenizer(w, f[K_TOKENIZER], d);
        break;
    }
}

/* A section's keys (keys[i] found at got[i]) into f, indexed as source_keys. */
static void by_name(const char *const *keys, const pp_ynode *const *got, int n, const pp_ynode **f)
{
    for (int k = 0; k < K_N; k++) f[k] = NULL;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < K_N; k++)
            if (strcmp(keys[i], source_keys[k]) == 0) f[k] = got[i];
}

static bool walk_data_keys(pp_walk *w, const pp_ynode *n, const pp_ynode **f)
{
    static const char *const keys[] = {"format", "image_size", "images", "labels", "files",
                                       "num_classes", "samples", "root", "transforms",
                                       "on_bad_image", "file", "block_size", "shuffle", "mean",
                                       "std", "workers", "prefetch", "drop_last", "tokenizer"};
    enum { N = sizeof keys / sizeof keys[0] };
    const pp_ynode *got[N];
    if (!pp_walk_map(w, n, "data", keys, N, got)) return false;
    by_name(keys, got, N, f);
    return true;
}

static bool walk_eval_keys(pp_walk *w, const pp_ynode *n, const pp_ynode **f)
{
    static const char *const keys[] = {"format", "image_size", "images", "labels", "files",
                                       "num_classes", "samples", "root", "transforms",
                                       "on_bad_image", "file", "batch_size", "every"};
    enum { N = sizeof keys / sizeof keys[0] };
    const pp_ynode *got[N];
    if (!pp_walk_map(w, n, "eval", keys, N, got)) return false;
    by_name(keys, got, N, f);
    return true;
}

void pp_walk_source(pp_walk *w, const pp_ynode *n, bool eval)
{
    pp_plan *p = w->plan;
    pp_plan_data *d = eval ? &p->eval.data : &p->data;
    const char *section = eval ? "eval" : "data";
    d->mark = pp_walk_mark(n);
    d->prefetch = 1;
    w->src[eval].section = n;
    if (eval) {
        p->eval.mark = d->mark;
        p->eval.every = 1;
    }
    const pp_ynode *f[K_N];
    if (!(eval ? walk_eval_keys(w, n, f) : walk_data_keys(w, n, f))) {
        if (!eval) w->size_ok = false;
        return;
    }
    if (eval) p->eval.enabled = true;
    /* eval's default: idx, or token data's own format (its windows are the data's) */
    const bool token_data =
        p->data.format == PP_PLAN_DATA_TOKENS || p->data.format == PP_PLAN_DATA_TEXT;
    int format = !eval ? PP_PLAN_DATA_SYNTHETIC : token_data ? (int)p->data.format
                                                             : PP_PLAN_DATA_IDX;
    if (f[K_FORMAT]) {
        static const char *const formats[] = {"synthetic", "idx", "cifar10", "imagefolder",
                                              "tokens", "text"};
        char what[32];
        snprintf(what, sizeof what, "%s.format", section);
        format = pp_walk_choice(w, f[K_FORMAT], what, formats, 6,
                                "synthetic, idx, cifar10, imagefolder, tokens or text");
        if (format < 0) {
            if (!eval) w->size_ok = false;
            return;
        }
    }
    d->format = (pp_plan_data_format)format;
    const bool tokens = format == PP_PLAN_DATA_TOKENS || format == PP_PLAN_DATA_TEXT;
    if (eval && tokens != token_data) {
        pp_walk_error(w, f[K_FORMAT] ? f[K_FORMAT] : n, "eval.format %s with data.format %s: "
                      "a language model is evaluated on tokens, an image model on images",
                      pp_plan_data_format_name(d->format),
                      pp_plan_data_format_name(p->data.format));
        return;
    }
    if (eval && tokens) d->block_size = p->data.block_size;
    drop_foreign(w, f, format, section);
    walk_format_keys(w, n, f, eval, section, d);
    if (!eval) {
        p->model.image_h = d->image_h;
        p->model.image_w = d->image_w;
    }
    if (f[K_SHUFFLE]) pp_walk_bool(w, f[K_SHUFFLE], "data.shuffle", &d->shuffle);
    if (f[K_DROP]) pp_walk_bool(w, f[K_DROP], "data.drop_last", &d->drop_last);
    if (f[K_MEAN] && !f[K_STD]) pp_walk_error(w, f[K_MEAN], "data.mean needs data.std as well");
    if (f[K_STD] && !f[K_MEAN]) pp_walk_error(w, f[K_STD], "data.std needs data.mean as well");
    if (f[K_MEAN] && f[K_STD] && w->model_ok) {
        bool ok = walk_norm(w, f[K_MEAN], "data.mean", d->mean, false);
        ok &= walk_norm(w, f[K_STD], "data.std", d->std, true);
        d->has_norm = ok;
    }
    if (f[K_WORKERS])
        pp_walk_int32(w, f[K_WORKERS], "data.workers", 1, PP_PLAN_MAX_WORKERS, &d->workers);
    if (f[K_PREFETCH])
        pp_walk_int32(w, f[K_PREFETCH], "data.prefetch", 1, PP_PLAN_MAX_PREFETCH, &d->prefetch);
    if (f[K_BATCH])
        pp_walk_int32(w, f[K_BATCH], "eval.batch_size", 1, PP_PLAN_MAX_BATCH,
                      &p->eval.batch_size);
    if (f[K_EVERY])
        pp_walk_int32(w, f[K_EVERY], "eval.every", 1, PP_PLAN_MAX_STEPS, &p->eval.every);
}

void pp_plan_data_free(pp_plan_data *d)
{
    free(d->file);
    free(d->vocab);
    free(d->merges);
    free(d->images);
    free(d->labels);
    free(d->root);
    for (int i = 0; i < d->n_files; i++) free(d->files[i]);
    free(d->files);
    free(d->files_marks);
}
