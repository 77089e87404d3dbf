/*
 * transform.c - torchvision's transforms: the draws and their application
 * (see transform.h).
 */
#include "runtime/io/transform.h"

#include "runtime/io/pixels.h"
#include "runtime/io/resample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the generator: counter-based, keyed by (seed, epoch, index, transform) ---- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

#define TAG_TRANSFORM 0x7472616E73ull /* "trans" */

typedef struct drawer {
    uint64_t key;
    uint64_t count;
} drawer;

static drawer drawer_of(uint64_t seed, int64_t epoch, int64_t index, int t)
{
    uint64_t k = mix64(mix64(seed) ^ TAG_TRANSFORM);
    k = mix64(k ^ (uint64_t)epoch);
    k = mix64(k ^ (uint64_t)index);
    return (drawer){.key = mix64(k ^ (uint64_t)t), .count = 0};
}

static uint64_t next_u64(drawer *d)
{
    return mix64(d->key ^ d->count++);
}

/* torch's uniform_(from, to) on a float tensor: 24 random bits as a double
 * in [0, 1), times (to - from) in float, plus from, rounded to float. */
static float uniform_f(drawer *d, float from, float to)
{
    const double x = (double)((float)(next_u64(d) >> 40) * 0x1p-24f);
    return (float)(x * (double)(to - from) + (double)from);
}

/* torch.randint(0, n): a 32-bit random number modulo n (n >= 1). */
static int randint(drawer *d, int n)
{
    return (int)((uint32_t)next_u64(d) % (uint32_t)n);
}

/* Python's round() of a double to an int: half to even. */
static int round_half_even(double x)
{
    return (int)nearbyint(x);
}

/* ---- sizes ----------------------------------------------------------------------- */

pp_transform pp_transform_default(pp_transform_kind kind)
{
    return (pp_transform){.kind = kind,
                          .scale = {0.08, 1.0},
                          .ratio = {3.0 / 4.0, 4.0 / 3.0},
                          .p = 0.5};
}

/* torchvision's resize output for a shorter side s (F.resize, PIL). */
static void resize_short(int s, int w, int h, int *ow, int *oh)
{
    const int shorter = w <= h ? w : h, longer = w <= h ? h : w;
    if (shorter == s) {
        *ow = w;
        *oh = h;
        return;
    }
    const int nl = (int)((double)s * longer / shorter);
    *ow = w <= h ? s : nl;
    *oh = w <= h ? nl : s;
}

void pp_transform_out_size(const pp_transform *t, int n, int w, int h, int *out_w, int *out_h)
{
    for (int i = 0; i < n; i++) {
        switch (t[i].kind) {
        case PP_TF_HORIZONTAL_FLIP: break;
        case PP_TF_RESIZE:
            if (t[i].w == 0) {
                resize_short(t[i].h, w, h, &w, &h);
                break;
            }
            w = t[i].w;
            h = t[i].h;
            break;
        default:
            w = t[i].w;
            h = t[i].h;
            break;
        }
    }
    *out_w = w;
    *out_h = h;
}

bool pp_transform_fixed_size(const pp_transform *t, int n, int *out_w, int *out_h)
{
    bool fixed = false;
    for (int i = 0; i < n; i++) {
        if (t[i].kind == PP_TF_HORIZONTAL_FLIP) continue;
        fixed = !(t[i].kind == PP_TF_RESIZE && t[i].w == 0);
        if (fixed) {
            *out_w = t[i].w;
            *out_h = t[i].h;
        }
    }
    return fixed;
}

/* ---- draws ----------------------------------------------------------------------- */

/* RandomResizedCrop.get_params on a w x h image. */
static pp_tf_op rrc_box(drawer *d, const pp_transform *t, int w, int h)
{
    const double area = (double)h * w;
    const float lr0 = logf((float)t->ratio[0]), lr1 = logf((float)t->ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        const double target = area * (double)uniform_f(d, (float)t->scale[0], (float)t->scale[1]);
        const double aspect = (double)expf(uniform_f(d, lr0, lr1));
        const int cw = round_half_even(sqrt(target * aspect));
        const int ch = round_half_even(sqrt(target / aspect));
        if (0 < cw && cw <= w && 0 < ch && ch <= h) {
            const int i = randint(d, h - ch + 1);
            const int j = randint(d, w - cw + 1);
            return (pp_tf_op){.kind = PP_TF_OP_CROP, .box = {j, i, cw, ch}};
        }
    }
    const double in_ratio = (double)w / (double)h;
    const double rmin = t->ratio[0] < t->ratio[1] ? t->ratio[0] : t->ratio[1];
    const double rmax = t->ratio[0] < t->ratio[1] ? t->ratio[1] : t->ratio[0];
    int cw = w, ch = h;
    if (in_ratio < rmin)
        ch = round_half_even(cw / rmin);
    else if (in_ratio > rmax)
        cw = round_half_even(ch * rmax);
    return (pp_tf_op){.kind = PP_TF_OP_CROP, .box = {(w - cw) / 2, (h - ch) / 2, cw, ch},
                      .fallback = true};
}

/* F.center_crop's box (padding with zeros where the crop is larger). */
static pp_image_box center_box(int cw, int ch, int w, int h)
{
    const int l = cw > w ? (cw - w) / 2 : 0, t = ch > h ? (ch - h) / 2 : 0;
    const int r = cw > w ? (cw - w + 1) / 2 : 0, b = ch > h ? (ch - h + 1) / 2 : 0;
    const int pw = w + l + r, ph = h + t + b;
    if (pw == cw && ph == ch) return (pp_image_box){-l, -t, cw, ch};
    const int top = round_half_even((ph - ch) / 2.0), left = round_half_even((pw - cw) / 2.0);
    return (pp_image_box){left - l, top - t, cw, ch};
}

pp_status pp_transform_draw(const pp_transform *t, int n, uint64_t seed, int64_t epoch,
                            int64_t index, int w, int h, const char *path, pp_tf_op *ops,
                            int *n_ops, pp_error *err)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        drawer d = drawer_of(seed, epoch, index, i);
        switch (t[i].kind) {
        case PP_TF_RANDOM_RESIZED_CROP:
            ops[k] = rrc_box(&d, &t[i], w, h);
            if (ops[k].box.w < 1 || ops[k].box.h < 1) /* the fallback, at an extreme ratio */
                return pp_error_set(err, PP_ERR_INPUT, "%s: random_resized_crop's box on this "
                                    "%dx%d image is %dx%d pixels (ratio [%g, %g]): nothing to "
                                    "resize (torchvision gives a black image)", path, w, h, ops[k].box.w,
                                    ops[k].box.h, t[i].ratio[0], t[i].ratio[1]);
            k++;
            ops[k++] = (pp_tf_op){.kind = PP_TF_OP_RESIZE, .w = t[i].w, .h = t[i].h};
            w = t[i].w;
            h = t[i].h;
            break;
        case PP_TF_HORIZONTAL_FLIP:
            if (uniform_f(&d, 0.0f, 1.0f) < t[i].p) ops[k++] = (pp_tf_op){.kind = PP_TF_OP_FLIP};
            break;
        case PP_TF_RANDOM_CROP: {
            const int pw = w + t[i].pad[0] + t[i].pad[2], ph = h + t[i].pad[1] + t[i].pad[3];
            if (pw < t[i].w || ph < t[i].h)
                return pp_error_set(err, PP_ERR_INPUT, "%s: random_crop of %dx%d is larger than "
                                    "the padded %dx%d image", path, t[i].w, t[i].h, pw, ph);
            int y = 0, x = 0;
            if (pw != t[i].w || ph != t[i].h) {
                y = randint(&d, ph - t[i].h + 1);
                x = randint(&d, pw - t[i].w + 1);
            }
            ops[k++] = (pp_tf_op){.kind = PP_TF_OP_CROP,
                                  .box = {x - t[i].pad[0], y - t[i].pad[1], t[i].w, t[i].h}};
            w = t[i].w;
            h = t[i].h;
            break;
        }
        case PP_TF_RESIZE: {
            int ow = t[i].w, oh = t[i].h;
            if (ow == 0) resize_short(t[i].h, w, h, &ow, &oh);
            if (ow != w || oh != h) ops[k++] = (pp_tf_op){.kind = PP_TF_OP_RESIZE, .w = ow, .h = oh};
            w = ow;
            h = oh;
            break;
        }
        case PP_TF_CENTER_CROP:
            ops[k++] = (pp_tf_op){.kind = PP_TF_OP_CROP, .box = center_box(t[i].w, t[i].h, w, h)};
            w = t[i].w;
            h = t[i].h;
            break;
        }
    }
    *n_ops = k;
    return PP_OK;
}

/* ---- application ----------------------------------------------------------------- */

static pp_image_box intersect(pp_image_box b, int w, int h)
{
    int x0 = b.x < 0 ? 0 : b.x, y0 = b.y < 0 ? 0 : b.y;
    int x1 = b.x + b.w > w ? w : b.x + b.w, y1 = b.y + b.h > h ? h : b.y + b.h;
    if (x1 <= x0 || y1 <= y0) return (pp_image_box){0, 0, 0, 0};
    return (pp_image_box){x0, y0, x1 - x0, y1 - y0};
}

pp_image_box pp_transform_first_box(const pp_tf_op *ops, int n_ops, int w, int h)
{
    if (n_ops > 0 && ops[0].kind == PP_TF_OP_CROP) {
        pp_image_box b = intersect(ops[0].box, w, h);
        if (b.w > 0) return b;
    }
    return (pp_image_box){0, 0, w, h};
}

static bool same_box(pp_image_box a, pp_image_box b)
{
    return a.x == b.x && a.y == b.y && a.w == b.w && a.h == b.h;
}

bool pp_transform_wants_columns(const pp_tf_op *ops, int n_ops, const pp_image_box *got, int w,
                                int h)
{
    int i = 0, cw = w;
    if (n_ops > 0 && ops[0].kind == PP_TF_OP_CROP && same_box(ops[0].box, *got)) {
        cw = got->w; /* the decoded box is the crop: no copy, the resize reads it */
        i = 1;
    } else if (got->w != w || got->h != h) {
        return false; /* a crop copies first */
    }
    return i < n_ops && ops[i].kind == PP_TF_OP_RESIZE && ops[i].w != cw;
}

/* A buffer of the work for c planes of w x h, and the image that will hold
 * them (rows, the whole image). */
static uint8_t *new_rows(pp_image_work *work, pp_image_work_slot slot, int w, int h, int c,
                         pp_tf_image *img)
{
    uint8_t *px = pp_image_work_buf(work, slot, (size_t)c * w * h);
    *img = (pp_tf_image){.px = px, .w = w, .h = h, .c = c, .part = {0, 0, w, h},
                         .plane = (int64_t)w * h, .xstep = 1, .ystep = w};
    return px;
}

/* The box b (in the coordinates of cur's image) of cur into dst (c planes
 * of b.w x b.h rows): zeros outside the image. */
static void crop(const pp_tf_image *cur, pp_image_box b, uint8_t *dst)
{
    const pp_image_box in = intersect(b, cur->w, cur->h);
    const int64_t plane = (int64_t)b.w * b.h;
    memset(dst, 0, (size_t)cur->c * plane);
    if (in.w == 0) return;
    for (int k = 0; k < cur->c; k++)
        pp_px_move_plane(cur->px + k * cur->plane + (in.x - cur->part.x) * cur->xstep +
                             (in.y - cur->part.y) * cur->ystep,
                         cur->xstep, cur->ystep, in.w, in.h,
                         dst + k * plane + (int64_t)(in.y - b.y) * b.w + (in.x - b.x), 1, b.w);
}

/* cur mirrored left to right into dst (c planes of the part's rows). */
static void flip(const pp_tf_image *cur, uint8_t *dst)
{
    const int w = cur->part.w, h = cur->part.h;
    for (int k = 0; k < cur->c; k++)
        for (int y = 0; y < h; y++) {
            const uint8_t *s = cur->px + k * cur->plane + y * cur->ystep;
            uint8_t *d = dst + ((int64_t)k * h + y) * w;
            for (int x = 0; x < w; x++) d[x] = s[(int64_t)(w - 1 - x) * cur->xstep];
        }
}

pp_status pp_transform_apply(const pp_tf_op *ops, int n_ops, const pp_tf_image *in, int out_w,
                             int out_h, pp_image_work *work, const uint8_t **out, bool *mirror,
                             pp_error *err)
{
    pp_tf_image cur = *in;
    pp_image_work_slot to = PP_WORK_IMAGE_B; /* the buffer the next result goes to */
    int last = n_ops - 1; /* flips after the last other operation are the reader's */
    while (last >= 0 && ops[last].kind == PP_TF_OP_FLIP) last--;
    *mirror = false;
    for (int i = 0; i < n_ops; i++) {
        const pp_tf_op *op = &ops[i];
        pp_tf_image next;
        if (op->kind == PP_TF_OP_FLIP && i > last) {
            *mirror = !*mirror;
            continue;
        }
        if (op->kind == PP_TF_OP_CROP && same_box(op->box, cur.part)) {
            cur.w = cur.part.w; /* what is held is the crop: no copy */
            cur.h = cur.part.h;
            cur.part = (pp_image_box){0, 0, cur.w, cur.h};
            continue;
        }
        if (op->kind == PP_TF_OP_FLIP) {
            if (!new_rows(work, to, cur.part.w, cur.part.h, cur.c, &next)) goto oom;
            flip(&cur, (uint8_t *)next.px);
            next.w = cur.w;
            next.h = cur.h;
            next.part = (pp_image_box){cur.w - cur.part.x - cur.part.w, cur.part.y, cur.part.w,
                                       cur.part.h};
        } else if (op->kind == PP_TF_OP_CROP) {
            if (!new_rows(work, to, op->box.w, op->box.h, cur.c, &next)) goto oom;
            crop(&cur, op->box, (uint8_t *)next.px);
        } else {
            if (!same_box(cur.part, (pp_image_box){0, 0, cur.w, cur.h}))
                return pp_error_set(err, PP_ERR_INTERNAL, "transform: resize of a partial image");
            pp_image_box win = {0, 0, op->w, op->h};
            const pp_tf_op *after = i + 1 < n_ops ? &ops[i + 1] : NULL;
            if (after && after->kind == PP_TF_OP_CROP && after->box.x >= 0 &&
                after->box.y >= 0 && after->box.x + after->box.w <= op->w &&
                after->box.y + after->box.h <= op->h) {
                win = after->box; /* a crop inside the resize: only its pixels */
                i++;
            }
            if (!new_rows(work, to, win.w, win.h, cur.c, &next)) goto oom;
            PP_TRY(pp_resample_planes(cur.px, cur.c, cur.plane, cur.w, cur.h, cur.xstep,
                                      cur.ystep, op->w, op->h, win.x, win.y, win.w, win.h,
                                      (uint8_t *)next.px, next.plane, win.w, work, err));
        }
        cur = next;
        to = to == PP_WORK_IMAGE_B ? PP_WORK_IMAGE_A : PP_WORK_IMAGE_B;
    }
    if (cur.part.w != out_w || cur.part.h != out_h || cur.w != out_w || cur.h != out_h)
        return pp_error_set(err, PP_ERR_INTERNAL, "transform: made %dx%d, not %dx%d", cur.part.w,
                            cur.part.h, out_w, out_h);
    if (cur.xstep != 1 || cur.ystep != out_w || cur.plane != (int64_t)out_w * out_h) {
        pp_tf_image rows; /* the decoder's columns, when no operation read them */
        if (!new_rows(work, to, out_w, out_h, cur.c, &rows)) goto oom;
        crop(&cur, cur.part, (uint8_t *)rows.px);
        cur = rows;
    }
    *out = cur.px;
    return PP_OK;
oom:
    return pp_error_set(err, PP_ERR_OOM, "out of host memory (transforms)");
}

/* ---- description ----------------------------------------------------------------- */

void pp_transform_describe(const pp_transform *t, int n, char *buf, size_t size)
{
    size_t at = 0;
#define PUT(...)                                                                          \
    do {                                                                                  \
        int k_ = snprintf(buf + at, at < size ? size - at : 0, __VA_ARGS__);              \
        if (k_ > 0) at += (size_t)k_;                                                     \
    } while (0)
    if (size) buf[0] = '\0';
    PUT("[");
    for (int i = 0; i < n; i++) {
        const pp_transform *x = &t[i];
        PUT("%s", i ? ", " : "");
        switch (x->kind) {
        case PP_TF_RANDOM_RESIZED_CROP:
            PUT("{random_resized_crop: {size: [%d, %d], scale: [%.17g, %.17g], ratio: [%.17g, "
                "%.17g]}}", x->h, x->w, x->scale[0], x->scale[1], x->ratio[0], x->ratio[1]);
            break;
        case PP_TF_HORIZONTAL_FLIP: PUT("{horizontal_flip: %.17g}", x->p); break;
        case PP_TF_RANDOM_CROP:
            PUT("{random_crop: {size: [%d, %d], padding: [%d, %d, %d, %d]}}", x->h, x->w,
                x->pad[0], x->pad[1], x->pad[2], x->pad[3]);
            break;
        case PP_TF_RESIZE:
            if (x->w)
                PUT("{resize: [%d, %d]}", x->h, x->w);
            else
                PUT("{resize: %d}", x->h);
            break;
        case PP_TF_CENTER_CROP: PUT("{center_crop: [%d, %d]}", x->h, x->w); break;
        }
    }
    PUT("]");
#undef PUT
    if (size && at >= size) buf[size - 1] = '\0';
}
