/*
 * grad_norm.c - CPU sums of squares (pp_sumsq_multi) and scaling
 * (pp_scale_multi) of several tensors, the arithmetic of gradient clipping.
 * A sum follows ops.h's order exactly (lanes of a tile, their tree, the
 * tiles in order), which is also the CUDA kernel's: both give the same
 * bits. Tasks of 16 tiles run on the device's pool, each writing its tiles'
 * sums; the caller adds a tensor's tiles in order.
 */
#include <stdlib.h>

#include "kernels.h"
#include "pieces.h"
#include "workers.h"

#define TILES_PER_TASK 16
#define SCALE_PIECE ((int64_t)1 << 16)

/* One tile's sum of squares in ops.h's order. */
static double tile_sumsq(const float *x, int64_t n)
{
    double lane[PP_SUMSQ_LANES] = {0};
    for (int64_t k0 = 0; k0 < n; k0 += PP_SUMSQ_LANES) {
        const int64_t m = n - k0 < PP_SUMSQ_LANES ? n - k0 : PP_SUMSQ_LANES;
        for (int64_t l = 0; l < m; l++) lane[l] += (double)x[k0 + l] * (double)x[k0 + l];
    }
    for (int o = PP_SUMSQ_LANES / 2; o > 0; o /= 2)
        for (int l = 0; l < o; l++) lane[l] += lane[l + o];
    return lane[0];
}

typedef struct sumsq_job {
    pp_cpu_pieces pieces; /* in tasks of TILES_PER_TASK tiles */
    const float *const *x;
    int64_t tile0[PP_CPU_PIECES_MAX]; /* index in part of each tensor's first tile */
    double *part;                      /* one sum per tile */
} sumsq_job;

static void sumsq_task(void *arg, int64_t t, int worker)
{
    const sumsq_job *j = arg;
    (void)worker;
    int i;
    int64_t lo, hi;
    pp_cpu_piece_of(&j->pieces, t, &i, &lo, &hi);
    for (int64_t a = lo; a < hi; a += PP_SUMSQ_TILE) {
        const int64_t n = hi - a < PP_SUMSQ_TILE ? hi - a : PP_SUMSQ_TILE;
        j->part[j->tile0[i] + a / PP_SUMSQ_TILE] = tile_sumsq(j->x[i] + a, n);
    }
}

pp_status pp_cpu_sumsq_multi(pp_exec *ex, int count, const float *const *x, const int64_t *sizes,
                             double *sums, pp_error *err)
{
    if (count > PP_CPU_PIECES_MAX)
        return pp_error_set(err, PP_ERR_INVALID, "sumsq: %d tensors in one call (at most %d)",
                            count, PP_CPU_PIECES_MAX);
    sumsq_job *j = malloc(sizeof *j);
    if (!j) return pp_error_set(err, PP_ERR_OOM, "out of host memory (sumsq)");
    int64_t tiles = 0;
    for (int i = 0; i < count; i++) {
        j->tile0[i] = tiles;
        tiles += (sizes[i] + PP_SUMSQ_TILE - 1) / PP_SUMSQ_TILE;
    }
    j->x = x;
    j->part = malloc((size_t)(tiles ? tiles : 1) * sizeof *j->part);
    if (!j->part) {
        free(j);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (sumsq)");
    }
    pp_cpu_pieces_init(&j->pieces, count, sizes, (int64_t)TILES_PER_TASK * PP_SUMSQ_TILE);
    pp_cpu_parallel(ex, j->pieces.first[count], sumsq_task, j);
    for (int i = 0; i < count; i++) {
        const int64_t n = (sizes[i] + PP_SUMSQ_TILE - 1) / PP_SUMSQ_TILE;
        double s = 0.0;
        for (int64_t k = 0; k < n; k++) s += j->part[j->tile0[i] + k];
        sums[i] = s;
    }
    free(j->part);
    free(j);
    return PP_OK;
}

typedef struct scale_job {
    pp_cpu_pieces pieces;
    float s;
    float *const *x;
} scale_job;

static void scale_task(void *arg, int64_t t, int worker)
{
    const scale_job *j = arg;
    (void)worker;
    int i;
    int64_t lo, hi;
    pp_cpu_piece_of(&j->pieces, t, &i, &lo, &hi);
    float *x = j->x[i];
    for (int64_t k = lo; k < hi; k++) x[k] *= j->s;
}

pp_status pp_cpu_scale_multi(pp_exec *ex, float s, int count, float *const *x,
                             const int64_t *sizes, pp_error *err)
{
    if (count > PP_CPU_PIECES_MAX)
        return pp_error_set(err, PP_ERR_INVALID, "scale: %d tensors in one call (at most %d)",
                            count, PP_CPU_PIECES_MAX);
    scale_job j = {.s = s, .x = x};
    pp_cpu_pieces_init(&j.pieces, count, sizes, SCALE_PIECE);
    pp_cpu_parallel(ex, j.pieces.first[count], scale_task, &j);
    return PP_OK;
}
