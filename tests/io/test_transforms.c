/*
 * test_transforms.c - torchvision's transforms as drawn for one image
 * (runtime/io/transform.h): resize's truncation, center_crop's boxes and
 * padding, random_resized_crop's boxes inside the image, its fallback,
 * random_crop with padding, flips (the last left to the reader, an earlier
 * one done); draws depend on (seed, epoch, index) only (the resize itself:
 * test_resample.c; against torchvision: tests/torch/images_check.py).
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "runtime/io/transform.h"
#include "tests/check.h"

static bool op_equal(const pp_tf_op *a, const pp_tf_op *b)
{
    return a->kind == b->kind && a->box.x == b->box.x && a->box.y == b->box.y &&
           a->box.w == b->box.w && a->box.h == b->box.h && a->w == b->w && a->h == b->h &&
           a->fallback == b->fallback;
}

static pp_transform tf(pp_transform_kind kind, int h, int w)
{
    pp_transform t = pp_transform_default(kind);
    t.h = h;
    t.w = w;
    return t;
}

static void test_transforms(void)
{
    /* sizes: resize of the shorter side truncates the longer (torchvision) */
    static const struct {
        int w, h, size, ow, oh;
    } rs[] = {{500, 375, 256, 341, 256}, {375, 500, 256, 256, 341}, {333, 256, 256, 333, 256},
              {640, 427, 256, 383, 256}, {100, 100, 7, 7, 7}};
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) {
        pp_transform t = tf(PP_TF_RESIZE, rs[i].size, 0);
        int ow, oh;
        pp_transform_out_size(&t, 1, rs[i].w, rs[i].h, &ow, &oh);
        CHECK_MSG(ow == rs[i].ow && oh == rs[i].oh, "resize %d of %dx%d: %dx%d", rs[i].size,
                  rs[i].w, rs[i].h, ow, oh);
    }
    /* center_crop boxes: round half to even, padding when larger */
    static const struct {
        int w, h, cw, ch;
        pp_image_box box;
    } cc[] = {{341, 256, 224, 224, {58, 16, 224, 224}}, {255, 256, 224, 224, {16, 16, 224, 224}},
              {225, 227, 224, 224, {0, 2, 224, 224}},   {10, 10, 15, 12, {-2, -1, 15, 12}},
              {5, 10, 8, 4, {-1, 3, 8, 4}}};
    for (size_t i = 0; i < sizeof cc / sizeof cc[0]; i++) {
        pp_transform t = tf(PP_TF_CENTER_CROP, cc[i].ch, cc[i].cw);
        pp_tf_op ops[2];
        int n;
        pp_error err;
        CHECK_OK(pp_transform_draw(&t, 1, 1, 0, 0, cc[i].w, cc[i].h, "x", ops, &n, &err), &err);
        CHECK(n == 1 && ops[0].kind == PP_TF_OP_CROP);
        CHECK_MSG(ops[0].box.x == cc[i].box.x && ops[0].box.y == cc[i].box.y,
                  "center_crop %dx%d of %dx%d at (%d, %d)", cc[i].cw, cc[i].ch, cc[i].w, cc[i].h,
                  ops[0].box.x, ops[0].box.y);
    }
    /* random_resized_crop: boxes inside the image, sizes as asked; the
     * fallback on a thin image; draws a function of (seed, epoch, index) */
    pp_transform rrc[2] = {tf(PP_TF_RANDOM_RESIZED_CROP, 224, 224), tf(PP_TF_HORIZONTAL_FLIP, 0, 0)};
    int fallbacks = 0, flips = 0, differ = 0;
    for (int i = 0; i < 2000; i++) {
        pp_tf_op a[4], b[4];
        int na, nb;
        pp_error err;
        CHECK_OK(pp_transform_draw(rrc, 2, 7, i / 1000, i, 500, 375, "x", a, &na, &err), &err);
        CHECK_OK(pp_transform_draw(rrc, 2, 7, i / 1000, i, 500, 375, "x", b, &nb, &err), &err);
        CHECK(na == nb);
        for (int k = 0; k < na && k < nb; k++) CHECK(op_equal(&a[k], &b[k]));
        const pp_image_box *x = &a[0].box;
        CHECK(x->x >= 0 && x->y >= 0 && x->w > 0 && x->h > 0 && x->x + x->w <= 500 &&
              x->y + x->h <= 375);
        CHECK(a[1].kind == PP_TF_OP_RESIZE && a[1].w == 224 && a[1].h == 224);
        flips += na == 3;
        CHECK_OK(pp_transform_draw(rrc, 2, 7, i / 1000 + 1, i, 500, 375, "x", b, &nb, &err), &err);
        differ += memcmp(&a[0].box, &b[0].box, sizeof a[0].box) != 0;
        CHECK_OK(pp_transform_draw(rrc, 1, 7, 0, i, 2000, 20, "x", b, &nb, &err), &err);
        fallbacks += b[0].fallback;
        if (b[0].fallback) /* ratio 4/3 at most: 27 x 20, centred */
            CHECK(b[0].box.w == 27 && b[0].box.h == 20 && b[0].box.x == 986 && b[0].box.y == 0);
    }
    CHECK_MSG(flips > 900 && flips < 1100, "flips %d of 2000", flips);
    CHECK_MSG(differ > 1900, "only %d of 2000 boxes change with the epoch", differ);
    CHECK_MSG(fallbacks > 1500, "fallbacks %d of 2000 on a 2000x20 image", fallbacks);
    /* a fallback box of 0 rows (ratio 1000 on a square image) is an error naming the file */
    {
        pp_transform wide = tf(PP_TF_RANDOM_RESIZED_CROP, 8, 8);
        wide.ratio[0] = wide.ratio[1] = 1000;
        pp_tf_op o[2];
        int n;
        pp_error err;
        const pp_status s = pp_transform_draw(&wide, 1, 1, 0, 0, 8, 8, "sq.png", o, &n, &err);
        CHECK_MSG(s == PP_ERR_INPUT && strstr(err.msg, "sq.png: random_resized_crop's box on "
                                                       "this 8x8 image is 8x0 pixels"),
                  "a box of 0 rows: %d %s", (int)s, s ? err.msg : "");
    }
    /* random_crop with padding 4 of a 32x32 image: boxes from -4 to +4 */
    pp_transform rc = tf(PP_TF_RANDOM_CROP, 32, 32);
    for (int k = 0; k < 4; k++) rc.pad[k] = 4;
    int seen[9] = {0};
    for (int i = 0; i < 900; i++) {
        pp_tf_op o[1];
        int n;
        pp_error err;
        CHECK_OK(pp_transform_draw(&rc, 1, 3, 0, i, 32, 32, "x", o, &n, &err), &err);
        CHECK(o[0].box.x >= -4 && o[0].box.x <= 4 && o[0].box.y >= -4 && o[0].box.y <= 4);
        seen[o[0].box.x + 4]++;
    }
    for (int k = 0; k < 9; k++) CHECK(seen[k] > 50);
    /* apply: pad + crop + a last flip, left to the reader (mirror); a flip
     * before a crop, done */
    const uint8_t px[2 * 2] = {1, 2, 3, 4};
    pp_tf_op ops[2] = {{.kind = PP_TF_OP_CROP, .box = {-1, 0, 3, 2}}, {.kind = PP_TF_OP_FLIP}};
    pp_tf_image in = {.px = px, .w = 2, .h = 2, .c = 1, .part = {0, 0, 2, 2}, .plane = 4,
                      .xstep = 1, .ystep = 2};
    pp_image_work *work;
    pp_error err;
    CHECK_OK(pp_image_work_new(&work, &err), &err);
    const uint8_t *out;
    bool mirror;
    CHECK_OK(pp_transform_apply(ops, 2, &in, 3, 2, work, &out, &mirror, &err), &err);
    const uint8_t want[6] = {0, 1, 2, 0, 3, 4}; /* read mirrored: 2 1 0 / 4 3 0 */
    CHECK(mirror && memcmp(out, want, 6) == 0);
    pp_tf_op flip_crop[2] = {{.kind = PP_TF_OP_FLIP}, {.kind = PP_TF_OP_CROP, .box = {0, 0, 1, 2}}};
    CHECK_OK(pp_transform_apply(flip_crop, 2, &in, 1, 2, work, &out, &mirror, &err), &err);
    CHECK(!mirror && out[0] == 2 && out[1] == 4);
    pp_image_work_free(work);
    /* a random_crop larger than the padded image is refused, naming it */
    pp_transform big = tf(PP_TF_RANDOM_CROP, 40, 40);
    pp_tf_op o[1];
    int n;
    CHECK(pp_transform_draw(&big, 1, 1, 0, 0, 32, 32, "cat/1.png", o, &n, &err) == PP_ERR_INPUT &&
          strstr(err.msg, "cat/1.png"));
}

int main(void)
{
    test_transforms();
    return check_summary("test_transforms");
}
