/*
 * image_probe.c - the image folder code of runtime/io on the command line,
 * for tests/torch/images_check.py to compare with torchvision:
 *
 *   image_probe index ROOT                 classes, then "LABEL\tPATH" per sample
 *   image_probe rrc W H N SEED S0 S1 R0 R1 N draws of random_resized_crop's box
 *                                          on a W x H image: "x y w h fallback"
 *   image_probe eval W H RESIZE CROP       the resize's size and center_crop's box
 *   image_probe pixels FILE C X Y W H OW OH FLIP
 *                                          FILE decoded (C channels), box (X, Y,
 *                                          W, H) resized to OW x OH, flipped when
 *                                          FLIP is 1, as the loader does it (the
 *                                          box decoded in the layout the resize
 *                                          reads, the flip left to the reader):
 *                                          raw HWC bytes on stdout
 *   image_probe sample FILE C T...         FILE through the transforms T (resize:S,
 *                                          center_crop:S): raw HWC bytes
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/image.h"
#include "runtime/io/image_index.h"
#include "runtime/io/transform.h"

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(size > 0 ? (size_t)size : 1);
    *n = fread(b, 1, (size_t)size, f);
    fclose(f);
    return b;
}

static int fail(const pp_error *err)
{
    fprintf(stderr, "image_probe: %s\n", err->msg);
    return 1;
}

/* FILE through the operations as the loader runs them (imagefolder.c): the
 * first box decoded in the layout they want, applied in one work, read
 * mirrored when they say so; HWC bytes on stdout. */
static int run_apply(const char *path, int c, const pp_tf_op *ops, int n_ops, int ow, int oh)
{
    size_t n;
    uint8_t *file = read_all(path, &n);
    if (!file) return 1;
    pp_error err;
    pp_image_work *work = NULL;
    int w, h;
    if (pp_image_work_new(&work, &err) != PP_OK ||
        pp_image_size(file, n, path, &w, &h, work, &err) != PP_OK) {
        pp_image_work_free(work);
        free(file);
        return fail(&err);
    }
    const pp_image_box box = pp_transform_first_box(ops, n_ops, w, h);
    uint8_t *px = malloc((size_t)box.w * box.h * c), *hwc = malloc((size_t)ow * oh * c);
    const pp_image_out o = pp_transform_wants_columns(ops, n_ops, &box, w, h)
                               ? pp_image_out_columns(px, box.w, box.h)
                               : pp_image_out_rows(px, box.w, box.h);
    const pp_tf_image in = {.px = px, .w = w, .h = h, .c = c, .part = box, .plane = o.plane,
                            .xstep = o.xstep, .ystep = o.ystep};
    const uint8_t *out;
    bool mirror;
    int rc = 0;
    if (!px || !hwc) {
        fprintf(stderr, "image_probe: out of memory\n");
        rc = 1;
    } else if (pp_image_decode_to(file, n, path, &box, c, &o, work, &err) != PP_OK ||
               pp_transform_apply(ops, n_ops, &in, ow, oh, work, &out, &mirror, &err) != PP_OK) {
        rc = fail(&err);
    } else {
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                for (int k = 0; k < c; k++)
                    hwc[((size_t)y * ow + x) * c + k] =
                        out[((size_t)k * oh + y) * ow + (mirror ? ow - 1 - x : x)];
        fwrite(hwc, 1, (size_t)ow * oh * c, stdout);
    }
    pp_image_work_free(work);
    free(px);
    free(hwc);
    free(file);
    return rc;
}

int main(int argc, char **argv)
{
    pp_error err;
    if (argc == 3 && strcmp(argv[1], "index") == 0) {
        pp_image_index *ix;
        if (pp_image_index_open(argv[2], NULL, &ix, NULL, &err) != PP_OK) return fail(&err);
        for (int c = 0; c < pp_image_index_classes(ix); c++)
            printf("class\t%s\n", pp_image_index_class(ix, c));
        for (int64_t i = 0; i < pp_image_index_size(ix); i++)
            printf("%d\t%s\n", pp_image_index_label(ix, i), pp_image_index_relpath(ix, i));
        pp_image_index_free(ix);
        return 0;
    }
    if (argc == 10 && strcmp(argv[1], "rrc") == 0) {
        pp_transform t = pp_transform_default(PP_TF_RANDOM_RESIZED_CROP);
        t.w = t.h = 224;
        t.scale[0] = atof(argv[6]);
        t.scale[1] = atof(argv[7]);
        t.ratio[0] = atof(argv[8]);
        t.ratio[1] = atof(argv[9]);
        const int w = atoi(argv[2]), h = atoi(argv[3]), n = atoi(argv[4]);
        const uint64_t seed = strtoull(argv[5], NULL, 10);
        for (int i = 0; i < n; i++) {
            pp_tf_op ops[2];
            int k;
            if (pp_transform_draw(&t, 1, seed, 0, i, w, h, "x", ops, &k, &err) != PP_OK)
                return fail(&err);
            printf("%d %d %d %d %d\n", ops[0].box.x, ops[0].box.y, ops[0].box.w, ops[0].box.h,
                   ops[0].fallback);
        }
        return 0;
    }
    if (argc == 6 && strcmp(argv[1], "eval") == 0) {
        pp_transform t[2] = {pp_transform_default(PP_TF_RESIZE),
                             pp_transform_default(PP_TF_CENTER_CROP)};
        t[0].h = atoi(argv[4]);
        t[1].h = t[1].w = atoi(argv[5]);
        pp_tf_op ops[4];
        int k;
        if (pp_transform_draw(t, 2, 1, 0, 0, atoi(argv[2]), atoi(argv[3]), "x", ops, &k, &err))
            return fail(&err);
        int rw = atoi(argv[2]), rh = atoi(argv[3]);
        for (int i = 0; i < k; i++) {
            if (ops[i].kind == PP_TF_OP_RESIZE) {
                rw = ops[i].w;
                rh = ops[i].h;
            }
        }
        const pp_tf_op *crop = &ops[k - 1];
        printf("%d %d %d %d %d %d\n", rw, rh, crop->box.x, crop->box.y, crop->box.w, crop->box.h);
        return 0;
    }
    if (argc == 11 && strcmp(argv[1], "pixels") == 0) {
        pp_tf_op ops[3] = {
            {.kind = PP_TF_OP_CROP, .box = {atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7])}},
            {.kind = PP_TF_OP_RESIZE, .w = atoi(argv[8]), .h = atoi(argv[9])},
            {.kind = PP_TF_OP_FLIP}};
        return run_apply(argv[2], atoi(argv[3]), ops, atoi(argv[10]) ? 3 : 2, ops[1].w, ops[1].h);
    }
    if (argc >= 4 && strcmp(argv[1], "sample") == 0) {
        pp_transform t[PP_TRANSFORMS_MAX];
        int nt = 0;
        for (int i = 4; i < argc && nt < PP_TRANSFORMS_MAX; i++, nt++) {
            const bool resize = strncmp(argv[i], "resize:", 7) == 0;
            t[nt] = pp_transform_default(resize ? PP_TF_RESIZE : PP_TF_CENTER_CROP);
            const int s = atoi(strchr(argv[i], ':') + 1);
            t[nt].h = s;
            t[nt].w = resize ? 0 : s;
        }
        size_t n;
        uint8_t *file = read_all(argv[2], &n);
        int w, h, ow, oh, k;
        if (!file || pp_image_size(file, n, argv[2], &w, &h, NULL, &err) != PP_OK) return 1;
        free(file);
        pp_tf_op ops[2 * PP_TRANSFORMS_MAX];
        if (pp_transform_draw(t, nt, 1, 0, 0, w, h, argv[2], ops, &k, &err)) return fail(&err);
        pp_transform_out_size(t, nt, w, h, &ow, &oh);
        return run_apply(argv[2], atoi(argv[3]), ops, k, ow, oh);
    }
    fprintf(stderr, "usage: see the top of image_probe.c\n");
    return 2;
}
