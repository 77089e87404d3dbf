/*
 * plan_data.c - the plan's data against its model, while the plan is read
 * (so `--validate` finds what a run would). IDX files: the images' channels
 * against model.in_channels, the label file's count against the images',
 * and every label below model.num_classes. Image folders: their class
 * folders at most model.num_classes. The same for the eval section's test
 * set, whose images must also have the training images' size (when known
 * now: IDX, CIFAR-10, synthetic, image folders whose transforms fix it).
 * Headers are read for the images; label files (one byte a sample) are read
 * whole. Each problem is reported at the data key that names the file or
 * folder. A file that cannot be read as IDX is reported there too (a run
 * would fail on it).
 */
#include <stdio.h>
#include <string.h>

#include "partitioner/plan_walk.h"
#include "runtime/io/idx.h"

/* The images at path (key node n): channels against the model, and their
 * count, height and width into *count, *h, *w (0 when unreadable). */
static void check_images(pp_walk *w, const pp_ynode *n, const char *key, const char *path,
                         int64_t *count, int *h, int *wd)
{
    *count = 0;
    int nd;
    int64_t dims[PP_IDX_MAX_DIMS];
    pp_error e;
    if (pp_idx_peek(path, 3, 4, "image", &nd, dims, &e) != PP_OK) {
        pp_walk_error(w, n, "%s: %s", key, e.msg);
        return;
    }
    int c = nd == 4 ? (int)dims[1] : 1, in_c = w->plan->model.in_channels;
    if (c != in_c)
        pp_walk_error(w, n, "%s: %s holds %d-channel images (%lldx%lld) but model.in_channels is "
                      "%d", key, path, c, (long long)dims[nd - 2], (long long)dims[nd - 1], in_c);
    *count = dims[0];
    *h = (int)dims[nd - 2];
    *wd = (int)dims[nd - 1];
}

/* The labels at path (key node n): as many as images (when known), each
 * below the model's classes. */
static void check_labels(pp_walk *w, const pp_ynode *n, const char *key, const char *path,
                         int64_t images, const char *images_path)
{
    pp_idx idx;
    pp_error e;
    if (pp_idx_read(path, 1, 1, "label", &idx, &e) != PP_OK) {
        pp_walk_error(w, n, "%s: %s", key, e.msg);
        return;
    }
    if (images > 0 && idx.dims[0] != images)
        pp_walk_error(w, n, "%s: %s holds %lld labels but %s holds %lld images", key, path,
                      (long long)idx.dims[0], images_path, (long long)images);
    int classes = w->plan->model.num_classes;
    for (int64_t i = 0; i < idx.dims[0]; i++)
        if (idx.data[i] >= classes) {
            pp_walk_error(w, n, "%s: %s: label %d of sample %lld is not below model.num_classes "
                          "%d", key, path, idx.data[i], (long long)i, classes);
            break;
        }
    pp_idx_free(&idx);
}

/* An image folder's classes against the model's. */
static void check_folder(pp_walk *w, const pp_ynode *n, const char *key, const pp_plan_data *d)
{
    const int classes = w->plan->model.num_classes;
    if (d->classes_found > classes)
        pp_walk_error(w, n, "%s: %s has %d class folders but model.num_classes is %d", key,
                      d->root, d->classes_found, classes);
}

void pp_walk_check_data(pp_walk *w)
{
    pp_plan *p = w->plan;
    if (!w->model_ok) return;
    int64_t n = 0;
    int h = 0, wd = 0;
    if (p->data.format == PP_PLAN_DATA_IDX) {
        if (p->data.images)
            check_images(w, w->src[0].images, "data.images", p->data.images, &n, &h, &wd);
        if (p->data.labels)
            check_labels(w, w->src[0].labels, "data.labels", p->data.labels, n,
                         p->data.images);
    }
    if (p->data.format == PP_PLAN_DATA_IMAGEFOLDER && p->data.root)
        check_folder(w, w->src[0].root, "data.root", &p->data);
    if (!p->eval.enabled) return;
    const pp_plan_data *e = &p->eval.data;
    if (e->format == PP_PLAN_DATA_IMAGEFOLDER && e->root)
        check_folder(w, w->src[1].root, "eval.root", e);
    if (e->format == PP_PLAN_DATA_IDX) {
        int64_t en = 0;
        int eh = 0, ew = 0;
        if (e->images) {
            check_images(w, w->src[1].images, "eval.images", e->images, &en, &eh, &ew);
            if (en > 0 && (eh != p->model.image_h || ew != p->model.image_w))
                pp_walk_error(w, w->src[1].images, "eval.images: %s holds %dx%d images but the "
                              "training images are %dx%d", e->images, eh, ew, p->model.image_h,
                              p->model.image_w);
        }
        if (e->labels)
            check_labels(w, w->src[1].labels, "eval.labels", e->labels, en, e->images);
        return;
    }
    const bool known = e->format != PP_PLAN_DATA_IMAGEFOLDER || e->root;
    if (known && e->image_h > 0 && (e->image_h != p->model.image_h || e->image_w != p->model.image_w))
        pp_walk_error(w, w->src[1].root ? w->src[1].root : w->src[1].section,
                      "eval: the test set's images are %dx%d but the training images are %dx%d "
                      "(give eval transforms that make them %dx%d)", e->image_h, e->image_w,
                      p->model.image_h, p->model.image_w, p->model.image_h, p->model.image_w);
}
