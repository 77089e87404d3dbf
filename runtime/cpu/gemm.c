/*
 * gemm.c - a matrix product on the device's worker pool (see gemm.h).
 *
 * Tiles: TILE x TILE outputs, TILE halved (down to TILE_MIN) while the
 * product has fewer than TILES_TARGET tiles, so small products still spread
 * over a pool; a shape property, never a thread count. A tile reads its
 * TILE rows of A and columns of B whole (k), which OpenBLAS packs per call:
 * the packing is O(TILE * k) against O(TILE^2 * k) arithmetic.
 */
#include "gemm.h"

#include <cblas.h>
#include <string.h>

#include "workers.h"

#define TILE 256
#define TILE_MIN 64
#define TILES_TARGET 32

typedef struct gemm_job {
    const pp_cpu_gemm_args *g;
    int tile, tiles_n;
    float *scratch; /* PP_GEMM_ADD_APART: tile * tile floats per worker */
} gemm_job;

static int tiles_of(int len, int tile)
{
    return (len + tile - 1) / tile;
}

static void gemm_task(void *arg, int64_t t, int worker)
{
    const gemm_job *j = arg;
    const pp_cpu_gemm_args *g = j->g;
    const int i0 = (int)(t / j->tiles_n) * j->tile, j0 = (int)(t % j->tiles_n) * j->tile;
    const int m = g->m - i0 < j->tile ? g->m - i0 : j->tile;
    const int n = g->n - j0 < j->tile ? g->n - j0 : j->tile;
    const float *a = g->ta ? g->a + i0 : g->a + (size_t)i0 * g->lda;
    const float *b = g->tb ? g->b + (size_t)j0 * g->ldb : g->b + j0;
    float *c = g->c + (size_t)i0 * g->ldc + j0;
    const CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
    if (g->mode != PP_GEMM_ADD_APART) {
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, g->k, 1.0f, a, g->lda, b, g->ldb,
                    g->mode == PP_GEMM_ADD ? 1.0f : 0.0f, c, g->ldc);
        return;
    }
    float *s = j->scratch + (size_t)worker * j->tile * j->tile;
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, g->k, 1.0f, a, g->lda, b, g->ldb, 0.0f, s, n);
    for (int i = 0; i < m; i++) {
        float *cr = c + (size_t)i * g->ldc;
        const float *sr = s + (size_t)i * n;
        for (int q = 0; q < n; q++) cr[q] += sr[q];
    }
}

pp_status pp_cpu_gemm(pp_exec *ex, const pp_cpu_gemm_args *g, pp_error *err)
{
    if (g->m <= 0 || g->n <= 0) return PP_OK;
    if (g->k <= 0) { /* an empty sum: AB is zero */
        if (g->mode == PP_GEMM_SET)
            for (int i = 0; i < g->m; i++) memset(g->c + (size_t)i * g->ldc, 0, sizeof(float) * (size_t)g->n);
        return PP_OK;
    }
    int tile = TILE;
    while (tile > TILE_MIN && (int64_t)tiles_of(g->m, tile) * tiles_of(g->n, tile) < TILES_TARGET)
        tile /= 2;
    gemm_job j = {.g = g, .tile = tile, .tiles_n = tiles_of(g->n, tile)};
    if (g->mode == PP_GEMM_ADD_APART) {
        void *ws;
        PP_TRY(pp_exec_workspace(ex, (size_t)pp_cpu_threads(ex) * tile * tile * sizeof(float),
                                 &ws, err));
        j.scratch = ws;
    }
    pp_cpu_parallel(ex, (int64_t)tiles_of(g->m, tile) * j.tiles_n, gemm_task, &j);
    return PP_OK;
}
