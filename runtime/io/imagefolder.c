/*
 * imagefolder.c - an image folder's samples, decoded and transformed on
 * demand (see imagefolder.h).
 */
#include "runtime/io/imagefolder.h"

#include "runtime/io/image.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct pp_images {
    pp_image_index *index;
    pp_image_index_note index_note;
    pp_transform tf[PP_TRANSFORMS_MAX];
    int n_tf;
    int c, h, w;
    bool skip_bad;
    uint64_t seed;
    pthread_mutex_t mu;
    int64_t *bad;                   /* under mu: the bad samples found, sorted, each once */
    int64_t n_bad, cap_bad;
    char first_bad[4096];           /* under mu */
};

/* Records sample i as bad (once). Called with mu held. */
static void note_bad(pp_images *im, int64_t i, const char *msg)
{
    int64_t lo = 0, hi = im->n_bad;
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (im->bad[mid] < i) lo = mid + 1; else hi = mid;
    }
    if (lo < im->n_bad && im->bad[lo] == i) return;
    if (im->n_bad == im->cap_bad) {
        const int64_t cap = im->cap_bad ? 2 * im->cap_bad : 16;
        int64_t *b = realloc(im->bad, (size_t)cap * sizeof *b);
        if (!b) return; /* counted no more: the replacement still happens */
        im->bad = b;
        im->cap_bad = cap;
    }
    memmove(im->bad + lo + 1, im->bad + lo, (size_t)(im->n_bad - lo) * sizeof *im->bad);
    im->bad[lo] = i;
    if (im->n_bad++ == 0) snprintf(im->first_bad, sizeof im->first_bad, "%s", msg);
}

/* Reads the whole file at path into the work's file buffer: *buf, *n. */
static pp_status read_file(const char *path, pp_image_work *work, const uint8_t **buf, size_t *n,
                           pp_error *err)
{
    /* O_NONBLOCK: a FIFO under an image's name opens without a writer (and is
     * then refused as no regular file) instead of blocking the reader */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return pp_error_set(err, PP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pp_error_set(err, PP_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size > PP_IMAGES_MAX_FILE_BYTES) {
        close(fd);
        return pp_error_set(err, PP_ERR_IO, "%s: too large (%lld bytes; image files of at most "
                            "%lld bytes are read)", path, (long long)sb.st_size,
                            (long long)PP_IMAGES_MAX_FILE_BYTES);
    }
    uint8_t *b = pp_image_work_buf(work, PP_WORK_FILE, sb.st_size > 0 ? (size_t)sb.st_size : 1);
    if (!b) {
        close(fd);
        return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory reading", path);
    }
    size_t got = 0;
    while (got < (size_t)sb.st_size) {
        ssize_t r = read(fd, b + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = errno;
            close(fd);
            return pp_error_set(err, PP_ERR_IO, "%s: read failed: %s", path,
                                r == 0 ? "the file shrank" : strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *n = got;
    return PP_OK;
}

/* Sample index as drawn in epoch: its planes (*px, in the work; *mirror as
 * pp_transform_apply says) when px is not NULL; with px NULL it only finds
 * the size the transforms give it: *got_w, *got_h. */
static pp_status load(const pp_images *im, int64_t index, int64_t epoch, pp_image_work *work,
                      const uint8_t **px, bool *mirror, int *got_w, int *got_h, pp_error *err)
{
    char path[8192];
    pp_image_index_path(im->index, index, path, sizeof path);
    const uint8_t *file = NULL;
    size_t n = 0;
    PP_TRY(read_file(path, work, &file, &n, err));
    int w, h;
    PP_TRY(pp_image_size(file, n, path, &w, &h, work, err));
    pp_tf_op ops[2 * PP_TRANSFORMS_MAX];
    int n_ops = 0;
    PP_TRY(pp_transform_draw(im->tf, im->n_tf, im->seed, epoch, index, w, h, path, ops, &n_ops,
                             err));
    int ow = 0, oh = 0;
    pp_transform_out_size(im->tf, im->n_tf, w, h, &ow, &oh);
    if (got_w) *got_w = ow;
    if (got_h) *got_h = oh;
    if (!px) return PP_OK;
    if (ow != im->w || oh != im->h)
        return pp_error_set(err, PP_ERR_INPUT, "%s: %dx%d after the transforms, but the data's "
                            "samples are %dx%d (give a transform that fixes the size: resize "
                            "[H, W], center_crop, random_crop or random_resized_crop)", path, ow,
                            oh, im->w, im->h);
    /* the first crop's box, laid out as the first operation reads it */
    const pp_image_box box = pp_transform_first_box(ops, n_ops, w, h);
    uint8_t *dec = pp_image_work_buf(work, PP_WORK_IMAGE_A, (size_t)box.w * box.h * im->c);
    if (!dec) return pp_error_set(err, PP_ERR_OOM, "%s: out of host memory decoding", path);
    const pp_image_out out = pp_transform_wants_columns(ops, n_ops, &box, w, h)
                                 ? pp_image_out_columns(dec, box.w, box.h)
                                 : pp_image_out_rows(dec, box.w, box.h);
    PP_TRY(pp_image_decode_to(file, n, path, &box, im->c, &out, work, err));
    const pp_tf_image in = {.px = dec, .w = w, .h = h, .c = im->c, .part = box,
                            .plane = out.plane, .xstep = out.xstep, .ystep = out.ystep};
    return pp_transform_apply(ops, n_ops, &in, im->w, im->h, work, px, mirror, err);
}

/* The samples' size when no transform fixes it: the first image's. With
 * skip_bad, the first image that decodes (of the first PP_IMAGES_MAX_SKIP),
 * as the samples that replace bad ones are found. */
static pp_status size_from_first_image(pp_images *im, pp_error *err)
{
    pp_image_work *work;
    PP_TRY(pp_image_work_new(&work, err));
    const int64_t n = pp_image_index_size(im->index);
    const int64_t tries = !im->skip_bad ? 1 : n < PP_IMAGES_MAX_SKIP ? n : PP_IMAGES_MAX_SKIP;
    pp_status s = PP_OK;
    pp_error first = {0};
    for (int64_t i = 0; i < tries; i++) {
        pp_error e;
        s = load(im, i, 0, work, NULL, NULL, &im->w, &im->h, &e);
        if (s == PP_OK && im->skip_bad) { /* the whole image decodes, not only its header */
            const uint8_t *px;
            bool mirror;
            s = load(im, i, 0, work, &px, &mirror, NULL, NULL, &e);
        }
        if (s == PP_OK || s == PP_ERR_OOM) {
            if (s != PP_OK && err) *err = e;
            break;
        }
        if (i == 0) first = e;
    }
    pp_image_work_free(work);
    if (s == PP_OK || s == PP_ERR_OOM) return s;
    if (err) *err = first;
    if (tries > 1)
        pp_error_prefix(err, "the data's image size comes from its first image that decodes (no "
                        "transform fixes it), and none of the first %lld does; the first",
                        (long long)tries);
    else
        pp_error_prefix(err, "the data's image size comes from its first image (no transform "
                        "fixes it)");
    return s;
}

pp_status pp_images_open(const pp_images_config *cfg, pp_images **out, pp_error *err)
{
    *out = NULL;
    if (cfg->channels != 1 && cfg->channels != 3)
        return pp_error_set(err, PP_ERR_INPUT, "%s: images have 1 or 3 channels, not %d",
                            cfg->root, cfg->channels);
    if (cfg->n_transforms < 0 || cfg->n_transforms > PP_TRANSFORMS_MAX)
        return pp_error_set(err, PP_ERR_INPUT, "%s: at most %d transforms", cfg->root,
                            PP_TRANSFORMS_MAX);
    pp_images *im = calloc(1, sizeof *im);
    if (!im) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    pthread_mutex_init(&im->mu, NULL);
    im->n_tf = cfg->n_transforms;
    if (im->n_tf) memcpy(im->tf, cfg->transforms, (size_t)im->n_tf * sizeof *im->tf);
    im->c = cfg->channels;
    im->skip_bad = cfg->skip_bad;
    im->seed = cfg->seed;
    pp_status s = pp_image_index_open(cfg->root, &cfg->cache, &im->index, &im->index_note, err);
    if (s == PP_OK && !pp_transform_fixed_size(im->tf, im->n_tf, &im->w, &im->h))
        s = size_from_first_image(im, err);
    if (s != PP_OK) {
        pp_images_free(im);
        return s;
    }
    *out = im;
    return PP_OK;
}

void pp_images_free(pp_images *im)
{
    if (!im) return;
    pp_image_index_free(im->index);
    free(im->bad);
    pthread_mutex_destroy(&im->mu);
    free(im);
}

void pp_images_shape(const pp_images *im, int *c, int *h, int *w)
{
    if (c) *c = im->c;
    if (h) *h = im->h;
    if (w) *w = im->w;
}

const pp_image_index *pp_images_index(const pp_images *im)
{
    return im->index;
}

const pp_image_index_note *pp_images_index_note(const pp_images *im)
{
    return &im->index_note;
}

pp_status pp_images_sample(pp_images *im, int64_t index, int64_t epoch, pp_image_work *work,
                           const uint8_t **px, bool *mirror, int32_t *label, int64_t *used,
                           pp_error *err)
{
    const int64_t n = pp_image_index_size(im->index);
    pp_status s = PP_ERR_IO;
    pp_error e = {0}; /* the last bad image's */
    for (int k = 0; k < PP_IMAGES_MAX_SKIP && s != PP_OK; k++) {
        const int64_t i = (index + k) % n;
        s = load(im, i, epoch, work, px, mirror, NULL, NULL, &e);
        if (s == PP_OK) {
            *label = pp_image_index_label(im->index, i);
            if (used) *used = i;
        } else if (s == PP_ERR_OOM || !im->skip_bad) {
            if (s == PP_ERR_INPUT) s = PP_ERR_IO; /* a failure of the run, not of the plan */
            if (err) {
                *err = e;
                err->code = s;
            }
            pp_image_work_trim(work);
            return s;
        } else {
            pthread_mutex_lock(&im->mu);
            note_bad(im, i, e.msg);
            pthread_mutex_unlock(&im->mu);
        }
    }
    pp_image_work_trim(work);
    if (s != PP_OK)
        return pp_error_set(err, PP_ERR_IO, "%s: %d bad images in a row from sample %lld (the "
                            "last: %s)", pp_image_index_root(im->index), PP_IMAGES_MAX_SKIP,
                            (long long)index, e.msg);
    return PP_OK;
}

int64_t pp_images_skipped(pp_images *im, char *first, size_t n)
{
    pthread_mutex_lock(&im->mu);
    const int64_t k = im->n_bad;
    if (first) snprintf(first, n, "%s", im->first_bad);
    pthread_mutex_unlock(&im->mu);
    return k;
}

bool pp_images_skips(const pp_images *im)
{
    return im->skip_bad;
}
