/*
 * image_work.c - a reading thread's kept buffers and decoder objects (see
 * image_work.h).
 */
#include "runtime/io/image_work.h"

#include <stdint.h>
#include <stdlib.h>

#define ALIGN 64

struct pp_image_work {
    void *buf[PP_WORK_SLOTS];
    size_t size[PP_WORK_SLOTS];
    void *state[PP_WORK_STATES];
    void (*drop[PP_WORK_STATES])(void *);
};

pp_status pp_image_work_new(pp_image_work **out, pp_error *err)
{
    *out = calloc(1, sizeof **out);
    return *out ? PP_OK : pp_error_set(err, PP_ERR_OOM, "out of host memory (image scratch)");
}

void pp_image_work_free(pp_image_work *w)
{
    if (!w) return;
    for (int i = 0; i < PP_WORK_SLOTS; i++) free(w->buf[i]);
    for (int i = 0; i < PP_WORK_STATES; i++)
        if (w->state[i]) w->drop[i](w->state[i]);
    free(w);
}

void *pp_image_work_buf(pp_image_work *w, pp_image_work_slot slot, size_t n)
{
    if (n <= w->size[slot] && w->buf[slot]) return w->buf[slot];
    if (n > SIZE_MAX / 2) return NULL;
    free(w->buf[slot]);
    w->size[slot] = 0;
    /* a little more than asked, so that sizes creeping up do not regrow each time */
    const size_t want = (n + n / 8 + ALIGN - 1) / ALIGN * ALIGN;
    w->buf[slot] = aligned_alloc(ALIGN, want ? want : ALIGN);
    if (w->buf[slot]) w->size[slot] = want;
    return w->buf[slot];
}

void *pp_image_work_state(pp_image_work *w, pp_image_work_state_kind kind, void *(*make)(void),
                          void (*drop)(void *))
{
    if (!w->state[kind]) {
        w->state[kind] = make();
        w->drop[kind] = drop;
    }
    return w->state[kind];
}

void pp_image_work_trim(pp_image_work *w)
{
    for (int i = 0; i < PP_WORK_SLOTS; i++)
        if (w->size[i] > PP_IMAGE_WORK_KEEP) {
            free(w->buf[i]);
            w->buf[i] = NULL;
            w->size[i] = 0;
        }
}
