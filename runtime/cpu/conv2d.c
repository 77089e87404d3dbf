/*
 * conv2d.c - CPU convolution (no bias, NCHW, f32) as im2col/col2im + sgemm,
 * split into GEMM tiles that the device's worker pool runs in parallel.
 *
 * With CRS = C*R*S rows of unfolded input ("col") per output position:
 *   forward          Y (K, cols)   = W (K, CRS) x col (CRS, cols)
 *   backward-data    dcol (CRS, cols) = W^T x dY (K, cols), then col2im
 *   backward-filter  dW (K, CRS)  += dY (K, cols) x col^T (cols, CRS)
 * A 1x1 stride-1 unpadded ("pointwise") convolution needs no unfolding: the
 * input planes of one sample are its col matrix.
 *
 * Tiling. The output columns (samples x output positions) are cut into
 * column blocks: a block is a run of output rows of one sample when a plane
 * is wide (P*Q >= TILE_COLS), a whole sample when the convolution is
 * pointwise and the planes are not small (P*Q >= DIRECT_MIN_PQ: the GEMM then
 * reads and writes the tensors in place), or a run of whole samples side by
 * side otherwise; runs and sample groups are cut to about equal size. The other GEMM dimension is cut into row blocks when there are
 * too few column blocks to keep several threads busy. Every cut, and so every
 * sgemm call and the order of every sum, depends on the shape only; each tile
 * writes its own part of the output. Results are therefore bitwise identical
 * whatever the number of threads (and whichever thread runs a tile).
 * Backward-filter reduces over all columns: its tiles cut dW, and when dW is
 * too small to give enough tiles, the columns too, into partial sums added in
 * chunk order (a sample group's sum; the groups' sums add up in group order).
 * The call's gradient is so computed on its own and added to dW once, at the
 * end: dW + g whatever dW held (ops.h), which lets a micro-batch's weight
 * gradient be computed apart and added later with the same bits. With large
 * output planes ("per-sample mode") dY is read in place, and so is x when
 * pointwise (otherwise each sample is unfolded on its own): a tile runs one
 * GEMM per sample of its chunk (a chunk is then a run of whole samples),
 * accumulating with beta = 1 in sample order.
 *
 * Memory: unfolded blocks, gathered planes and partial sums live in the exec
 * workspace: a shared part plus one scratch area per pool thread. sgemm runs
 * single-threaded (the backend sets OpenBLAS to one thread); the parallelism
 * is ours.
 */
#include <cblas.h>
#include <string.h>

#include "kernels.h"
#include "workers.h"

/* Target output columns per GEMM tile. */
#define TILE_COLS 512
/* Fewest rows of a row block. */
#define TILE_ROWS_MIN 64
/* Tiles an op aims for (a shape property, not a thread count). */
#define TILES_TARGET 8
/* Cap on the shared unfolded buffer of one pass (floats). */
#define SHARED_MAX_FLOATS ((size_t)4 << 20)
/* Fewest reduction columns per partial sum in backward-filter. */
#define REDUCE_CHUNK_MIN 1024
/* Fewest output positions per sample for which backward-filter runs one
 * GEMM per sample on dY in place rather than on gathered copies of a group of
 * samples (the copies cost as much as the GEMM when C and K are small). */
#define DIRECT_MIN_PQ 128
/* Fewest dW rows of a backward-filter row block in per-sample mode (all K
 * rows when K is smaller). */
#define DIRECT_ROWS_MIN 128

static int is_pointwise(const pp_conv2d_desc *d)
{
    return d->r == 1 && d->s == 1 && d->stride_h == 1 && d->stride_w == 1 && d->pad_h == 0 &&
           d->pad_w == 0;
}

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

static int clamp_int(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Range [*q0, *q1) of output columns whose input column q*stride - pad + s
 * lies inside [0, w). */
static void valid_range(int q_out, int stride, int pad, int s, int w, int *q0, int *q1)
{
    int lo = pad - s;
    int a = lo <= 0 ? 0 : (lo + stride - 1) / stride;
    int hi = w - 1 + pad - s; /* q*stride <= hi */
    int b = hi < 0 ? 0 : hi / stride + 1;
    if (a > q_out) a = q_out;
    if (b > q_out) b = q_out;
    if (b < a) b = a;
    *q0 = a;
    *q1 = b;
}

/* Rows of channels [c0, c1) of col (CRS rows, (p1-p0)*Q columns from
 * column 0, row stride ld) = the unfolding of output rows [p0, p1) of one
 * sample x (C,H,W). */
static void im2col_part(const pp_conv2d_desc *d, const float *x, int c0, int c1, int p0, int p1,
                        float *col, size_t ld)
{
    const int sh = d->stride_h, sw = d->stride_w, q = d->q;
    for (int c = c0; c < c1; c++) {
        const float *xc = x + (size_t)c * d->h * d->w;
        for (int r = 0; r < d->r; r++) {
            for (int s = 0; s < d->s; s++) {
                float *row = col + ((size_t)(c * d->r + r) * d->s + s) * ld;
                int q0, q1;
                valid_range(q, sw, d->pad_w, s, d->w, &q0, &q1);
                for (int p = p0; p < p1; p++) {
                    float *dst = row + (size_t)(p - p0) * q;
                    int ih = p * sh - d->pad_h + r;
                    if (ih < 0 || ih >= d->h || q1 == q0) {
                        for (int j = 0; j < q; j++) dst[j] = 0.0f;
                        continue;
                    }
                    const float *src = xc + (size_t)ih * d->w + (q0 * sw - d->pad_w + s);
                    for (int j = 0; j < q0; j++) dst[j] = 0.0f;
                    if (sw == 1) {
                        for (int j = q0; j < q1; j++) dst[j] = src[j - q0];
                    } else {
                        for (int j = q0; j < q1; j++) dst[j] = src[(size_t)(j - q0) * sw];
                    }
                    for (int j = q1; j < q; j++) dst[j] = 0.0f;
                }
            }
        }
    }
}

static void im2col_rows(const pp_conv2d_desc *d, const float *x, int p0, int p1, float *col,
                        size_t ld)
{
    im2col_part(d, x, 0, d->c, p0, p1, col, ld);
}

/* dxc (H,W) = fold of the R*S rows of one channel (P*Q columns, row stride
 * ld): zeroed, then accumulated in (r, s, p, q) order. */
static void col2im_channel(const pp_conv2d_desc *d, const float *col, size_t ld, float *dxc)
{
    const int sh = d->stride_h, sw = d->stride_w;
    memset(dxc, 0, sizeof(float) * (size_t)d->h * d->w);
    for (int r = 0; r < d->r; r++) {
        for (int s = 0; s < d->s; s++) {
            const float *row = col + (size_t)(r * d->s + s) * ld;
            int q0, q1;
            valid_range(d->q, sw, d->pad_w, s, d->w, &q0, &q1);
            if (q1 == q0) continue;
            for (int p = 0; p < d->p; p++) {
                int ih = p * sh - d->pad_h + r;
                if (ih < 0 || ih >= d->h) continue;
                const float *src = row + (size_t)p * d->q;
                float *dst = dxc + (size_t)ih * d->w + (q0 * sw - d->pad_w + s);
                if (sw == 1) {
                    for (int j = q0; j < q1; j++) dst[j - q0] += src[j];
                } else {
                    for (int j = q0; j < q1; j++) dst[(size_t)(j - q0) * sw] += src[j];
                }
            }
        }
    }
}

/* dst (rows, m*len, row stride ld) = rows of m planes side by side; plane i
 * starts at src + i*plane_stride and has rows of len (row stride len). */
static void gather_planes(const float *src, size_t plane_stride, int m, int rows, size_t len,
                          float *dst, size_t ld)
{
    for (int k = 0; k < rows; k++)
        for (int i = 0; i < m; i++)
            memcpy(dst + (size_t)k * ld + (size_t)i * len, src + i * plane_stride + (size_t)k * len,
                   sizeof(float) * len);
}

/* dst[0..len) += src[0..len) */
static void add_into(const float *src, size_t len, float *dst)
{
    for (size_t j = 0; j < len; j++) dst[j] += src[j];
}

/* The inverse of gather_planes; with accumulate, added to dst. */
static void scatter_planes(const float *src, size_t ld, int m, int rows, size_t len, float *dst,
                           size_t plane_stride, int accumulate)
{
    for (int k = 0; k < rows; k++)
        for (int i = 0; i < m; i++) {
            const float *from = src + (size_t)k * ld + (size_t)i * len;
            float *to = dst + i * plane_stride + (size_t)k * len;
            if (accumulate)
                add_into(from, len, to);
            else
                memcpy(to, from, sizeof(float) * len);
        }
}

static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* ---- column blocks -------------------------------------------------------------- */

typedef struct col_blocks {
    int spb;      /* samples per block (1 when a sample is split) */
    int rpb;      /* output rows per block */
    int bps;      /* blocks per sample (1 unless a sample is split) */
    int count;    /* blocks in all */
    int max_cols; /* columns of the widest block */
} col_blocks;

typedef struct col_block {
    int n0, m;  /* samples [n0, n0+m) */
    int p0, p1; /* output rows [p0, p1) of each */
    int cols;   /* m * (p1-p0) * Q */
} col_block;

/* Cuts the N*P*Q output columns into blocks of about TILE_COLS; a sample is
 * split into runs of output rows only when split_ok. */
static col_blocks col_blocks_make(const pp_conv2d_desc *d, int split_ok)
{
    col_blocks b;
    const int pq = d->p * d->q;
    /* a pointwise block of one sample is x (or dY) itself: no gathering */
    if (pq >= TILE_COLS || (is_pointwise(d) && pq >= DIRECT_MIN_PQ)) {
        /* runs of about equal length; none when a pointwise block needs no
         * buffer and the samples alone give enough blocks */
        int runs = (pq + TILE_COLS - 1) / TILE_COLS;
        if (!split_ok || (is_pointwise(d) && d->n >= TILES_TARGET)) runs = 1;
        b.spb = 1;
        b.rpb = (d->p + runs - 1) / runs;
        b.bps = (d->p + b.rpb - 1) / b.rpb;
        b.count = d->n * b.bps;
        b.max_cols = b.rpb * d->q;
    } else {
        b.spb = min_int((TILE_COLS + pq - 1) / pq, d->n);
        b.count = (d->n + b.spb - 1) / b.spb;
        b.spb = (d->n + b.count - 1) / b.count; /* blocks of about equal size */
        b.rpb = d->p;
        b.bps = 1;
        b.max_cols = b.spb * pq;
    }
    return b;
}

static col_block col_block_get(const pp_conv2d_desc *d, const col_blocks *b, int i)
{
    col_block c;
    if (b->bps > 1 || b->spb == 1) {
        c.n0 = i / b->bps;
        c.m = 1;
        c.p0 = (i % b->bps) * b->rpb;
        c.p1 = min_int(c.p0 + b->rpb, d->p);
    } else {
        c.n0 = i * b->spb;
        c.m = min_int(b->spb, d->n - c.n0);
        c.p0 = 0;
        c.p1 = d->p;
    }
    c.cols = c.m * (c.p1 - c.p0) * d->q;
    return c;
}

/* Row blocks of `units` units of `unit_rows` rows each (channels of R*S rows
 * for backward-data, single rows otherwise): enough blocks to reach
 * TILES_TARGET tiles with `col_count` column blocks, none under TILE_ROWS_MIN
 * rows. Returns the units per block. */
static int row_block_units(int units, int unit_rows, int col_count)
{
    int want = (TILES_TARGET + col_count - 1) / col_count;
    int most = units * unit_rows / TILE_ROWS_MIN;
    int blocks = clamp_int(want, 1, most < 1 ? 1 : most);
    int per = (units + blocks - 1) / blocks;
    if (unit_rows == 1 && per < units) per = (int)round_up((size_t)per, 16);
    return per < units ? per : units;
}

static pp_status workspace(pp_exec *ex, size_t floats, float **ptr, pp_error *err)
{
    void *p = NULL;
    PP_TRY(pp_exec_workspace(ex, floats * sizeof(float), &p, err));
    *ptr = p;
    return PP_OK;
}

/* ---- forward ---------------------------------------------------------------------- */

typedef struct fwd_ctx {
    const pp_conv2d_desc *d;
    const float *x, *w;
    float *y;
    col_blocks cb;
    int crs, kpb, mblocks; /* output channels per row block, row blocks */
    float *panels;         /* shared unfolded blocks (two-pass mode), or NULL */
    size_t panel_stride;   /* floats per panel */
    int first_block;       /* column block of panel 0 */
    float *scratch;        /* per worker */
    size_t scratch_stride;
} fwd_ctx;

/* Unfolds column block b into dst (CRS, cols); returns the B operand and its
 * row stride, which for a pointwise block of one sample is x itself. */
static const float *fwd_operand(const fwd_ctx *c, const col_block *blk, float *dst, int *ld)
{
    const pp_conv2d_desc *d = c->d;
    const size_t x_stride = (size_t)d->c * d->h * d->w, pq = (size_t)d->p * d->q;
    const float *xs = c->x + (size_t)blk->n0 * x_stride;
    if (is_pointwise(d)) {
        if (blk->m == 1) {
            *ld = (int)pq;
            return xs + (size_t)blk->p0 * d->q;
        }
        gather_planes(xs, x_stride, blk->m, d->c, pq, dst, (size_t)blk->cols);
    } else {
        int rows = blk->p1 - blk->p0;
        for (int i = 0; i < blk->m; i++)
            im2col_rows(d, xs + i * x_stride, blk->p0, blk->p1, dst + (size_t)i * rows * d->q,
                        (size_t)blk->cols);
    }
    *ld = blk->cols;
    return dst;
}

/* Output channels [k0, k1) of column block b: GEMM into y directly for one
 * sample, or into out and then scattered to the samples' planes. */
static void fwd_tile(const fwd_ctx *c, const col_block *blk, const float *bmat, int ldb, int k0,
                     int k1, float *out)
{
    const pp_conv2d_desc *d = c->d;
    const size_t pq = (size_t)d->p * d->q, y_stride = (size_t)d->k * pq;
    float *ys = c->y + (size_t)blk->n0 * y_stride + (size_t)k0 * pq;
    const float *wk = c->w + (size_t)k0 * c->crs;
    if (blk->m == 1) {
        gemm(CblasNoTrans, CblasNoTrans, k1 - k0, blk->cols, c->crs, wk, c->crs, bmat, ldb, 0.0f,
             ys + (size_t)blk->p0 * d->q, (int)pq);
        return;
    }
    gemm(CblasNoTrans, CblasNoTrans, k1 - k0, blk->cols, c->crs, wk, c->crs, bmat, ldb, 0.0f, out,
         blk->cols);
    scatter_planes(out, (size_t)blk->cols, blk->m, k1 - k0, pq, ys, y_stride, 0);
}

/* One-pass task: column block t, every output channel. */
static void fwd_fused_task(void *arg, int64_t t, int worker)
{
    const fwd_ctx *c = arg;
    col_block blk = col_block_get(c->d, &c->cb, (int)t);
    float *col = c->scratch + (size_t)worker * c->scratch_stride;
    float *out = col + round_up((size_t)c->crs * c->cb.max_cols, 16);
    int ldb;
    const float *bmat = fwd_operand(c, &blk, col, &ldb);
    fwd_tile(c, &blk, bmat, ldb, 0, c->d->k, out);
}

/* Two-pass, pass 1: unfold channels [k*UNFOLD_PARTS.. of column block
 * first_block + t / UNFOLD_PARTS into panel t / UNFOLD_PARTS. */
#define UNFOLD_PARTS 8
static void fwd_unfold_task(void *arg, int64_t t, int worker)
{
    const fwd_ctx *c = arg;
    const pp_conv2d_desc *d = c->d;
    int panel = (int)(t / UNFOLD_PARTS), part = (int)(t % UNFOLD_PARTS);
    col_block blk = col_block_get(d, &c->cb, c->first_block + panel);
    float *dst = c->panels + (size_t)panel * c->panel_stride;
    (void)worker;
    if (is_pointwise(d)) {
        if (part == 0) {
            int ld;
            (void)fwd_operand(c, &blk, dst, &ld);
        }
        return;
    }
    int per = (d->c + UNFOLD_PARTS - 1) / UNFOLD_PARTS;
    int c0 = part * per, c1 = min_int(c0 + per, d->c);
    const size_t x_stride = (size_t)d->c * d->h * d->w;
    int rows = blk.p1 - blk.p0;
    for (int i = 0; i < blk.m && c0 < c1; i++)
        im2col_part(d, c->x + (size_t)(blk.n0 + i) * x_stride, c0, c1, blk.p0, blk.p1,
                    dst + (size_t)i * rows * d->q, (size_t)blk.cols);
}

/* Two-pass, pass 2: tile t = (panel, row block). */
static void fwd_tile_task(void *arg, int64_t t, int worker)
{
    const fwd_ctx *c = arg;
    int panel = (int)(t / c->mblocks), mb = (int)(t % c->mblocks);
    col_block blk = col_block_get(c->d, &c->cb, c->first_block + panel);
    float *out = c->scratch + (size_t)worker * c->scratch_stride;
    int ldb;
    const float *bmat;
    if (is_pointwise(c->d) && blk.m == 1) {
        bmat = fwd_operand(c, &blk, NULL, &ldb);
    } else {
        bmat = c->panels + (size_t)panel * c->panel_stride;
        ldb = blk.cols;
    }
    int k0 = mb * c->kpb, k1 = min_int(k0 + c->kpb, c->d->k);
    fwd_tile(c, &blk, bmat, ldb, k0, k1, out);
}

/* The forward's tiling and workspace (floats): fills c's cuts; with two
 * passes, *per_group column blocks share the unfolded panels. */
static size_t fwd_plan(fwd_ctx *c, const pp_conv2d_desc *d, size_t threads, int *per_group)
{
    c->crs = d->c * d->r * d->s;
    c->cb = col_blocks_make(d, 1);
    c->kpb = row_block_units(d->k, 1, c->cb.count);
    c->mblocks = (d->k + c->kpb - 1) / c->kpb;
    const size_t col_floats = round_up((size_t)c->crs * c->cb.max_cols, 16);
    const size_t out_floats = round_up((size_t)d->k * c->cb.max_cols, 16);
    *per_group = c->cb.count;
    if (c->mblocks == 1) {
        c->panel_stride = 0;
        c->scratch_stride = col_floats + out_floats;
        return threads * c->scratch_stride;
    }
    /* Two passes per group of column blocks: unfold into shared panels, then
     * tiles of (panel, row block). */
    const int pointwise_direct = is_pointwise(d) && c->cb.spb == 1;
    c->panel_stride = pointwise_direct ? 0 : col_floats;
    if (c->panel_stride) {
        size_t fit = SHARED_MAX_FLOATS / c->panel_stride;
        *per_group = clamp_int(fit > (size_t)c->cb.count ? c->cb.count : (int)fit, 1, c->cb.count);
    }
    c->scratch_stride = out_floats;
    return (size_t)*per_group * c->panel_stride + threads * c->scratch_stride;
}

pp_status pp_cpu_conv2d_forward(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                const float *w, float *y, pp_error *err)
{
    fwd_ctx c = {.d = d, .x = x, .w = w, .y = y};
    int per_group;
    float *ws;
    PP_TRY(workspace(ex, fwd_plan(&c, d, (size_t)pp_cpu_threads(ex), &per_group), &ws, err));
    if (c.mblocks == 1) {
        c.scratch = ws;
        pp_cpu_parallel(ex, c.cb.count, fwd_fused_task, &c);
        return PP_OK;
    }
    const int pointwise_direct = c.panel_stride == 0;
    c.panels = ws;
    c.scratch = ws + (size_t)per_group * c.panel_stride;
    for (int g = 0; g < c.cb.count; g += per_group) {
        int blocks = min_int(per_group, c.cb.count - g);
        c.first_block = g;
        if (!pointwise_direct) pp_cpu_parallel(ex, (int64_t)blocks * UNFOLD_PARTS, fwd_unfold_task, &c);
        pp_cpu_parallel(ex, (int64_t)blocks * c.mblocks, fwd_tile_task, &c);
    }
    return PP_OK;
}

/* ---- backward-data ------------------------------------------------------------------ */

typedef struct bwd_data_ctx {
    const pp_conv2d_desc *d;
    const float *dy, *w;
    float *dx;
    int accumulate; /* dx += the result (each element computed as without, then added) */
    col_blocks cb;
    int crs, rs, cpb, cblocks; /* input channels per row block, row blocks */
    float *scratch;
    size_t scratch_stride;
    size_t dyb_floats;  /* gathered dY part of a scratch area */
    size_t dcol_floats; /* then dcol; then, accumulating, one folded plane */
} bwd_data_ctx;

/* Tile t = (column block, channel block): dcol rows of channels [c0, c1) for
 * the block's samples, folded into those channels of dx. Accumulating, each
 * result goes to scratch first and is then added to dx, so that it is
 * rounded exactly as when written directly. */
static void bwd_data_task(void *arg, int64_t t, int worker)
{
    const bwd_data_ctx *c = arg;
    const pp_conv2d_desc *d = c->d;
    const size_t pq = (size_t)d->p * d->q, hw = (size_t)d->h * d->w;
    const size_t x_stride = (size_t)d->c * hw, y_stride = (size_t)d->k * pq;
    col_block blk = col_block_get(d, &c->cb, (int)(t / c->cblocks));
    int cbi = (int)(t % c->cblocks);
    int c0 = cbi * c->cpb, c1 = min_int(c0 + c->cpb, d->c);
    int rows = (c1 - c0) * c->rs;
    float *dyb = c->scratch + (size_t)worker * c->scratch_stride;
    float *dcol = dyb + c->dyb_floats;
    const float *dys = c->dy + (size_t)blk.n0 * y_stride;
    const float *bmat = dys + (size_t)blk.p0 * d->q;
    int ldb = (int)pq;
    if (blk.m > 1) {
        gather_planes(dys, y_stride, blk.m, d->k, pq, dyb, (size_t)blk.cols);
        bmat = dyb;
        ldb = blk.cols;
    }
    float *dxs = c->dx + (size_t)blk.n0 * x_stride + (size_t)c0 * hw;
    if (is_pointwise(d) && blk.m == 1 && !c->accumulate) {
        gemm(CblasTrans, CblasNoTrans, rows, blk.cols, d->k, c->w + (size_t)c0 * c->rs, c->crs,
             bmat, ldb, 0.0f, dxs + (size_t)blk.p0 * d->q, (int)hw);
        return;
    }
    gemm(CblasTrans, CblasNoTrans, rows, blk.cols, d->k, c->w + (size_t)c0 * c->rs, c->crs, bmat,
         ldb, 0.0f, dcol, blk.cols);
    if (is_pointwise(d) && blk.m == 1) { /* accumulating: rows of dcol into the block's rows */
        for (int ch = 0; ch < rows; ch++)
            add_into(dcol + (size_t)ch * blk.cols, (size_t)blk.cols,
                     dxs + (size_t)ch * hw + (size_t)blk.p0 * d->q);
        return;
    }
    if (is_pointwise(d)) {
        scatter_planes(dcol, (size_t)blk.cols, blk.m, rows, pq, dxs, x_stride, c->accumulate);
        return;
    }
    float *plane = dcol + c->dcol_floats;
    for (int i = 0; i < blk.m; i++)
        for (int ch = 0; ch < c1 - c0; ch++) {
            const float *col = dcol + (size_t)ch * c->rs * blk.cols + (size_t)i * pq;
            float *dxc = dxs + i * x_stride + (size_t)ch * hw;
            if (!c->accumulate) {
                col2im_channel(d, col, (size_t)blk.cols, dxc);
                continue;
            }
            col2im_channel(d, col, (size_t)blk.cols, plane);
            add_into(plane, hw, dxc);
        }
}

/* Backward-data's tiling and workspace (floats). */
static size_t bwd_data_plan(bwd_data_ctx *c, const pp_conv2d_desc *d, size_t threads,
                            int accumulate)
{
    c->rs = d->r * d->s;
    c->crs = d->c * c->rs;
    /* col2im of neighbouring output rows overlaps: split samples only when
     * pointwise. */
    c->cb = col_blocks_make(d, is_pointwise(d));
    c->cpb = row_block_units(d->c, c->rs, c->cb.count);
    c->cblocks = (d->c + c->cpb - 1) / c->cpb;
    c->dyb_floats = c->cb.spb > 1 ? round_up((size_t)d->k * c->cb.max_cols, 16) : 0;
    c->dcol_floats = round_up((size_t)c->cpb * c->rs * c->cb.max_cols, 16);
    const size_t plane = accumulate ? round_up((size_t)d->h * d->w, 16) : 0;
    c->scratch_stride = c->dyb_floats + c->dcol_floats + plane;
    return threads * c->scratch_stride;
}

static pp_status backward_data(pp_exec *ex, const pp_conv2d_desc *d, const float *dy,
                               const float *w, float *dx, int accumulate, pp_error *err)
{
    bwd_data_ctx c = {.d = d, .dy = dy, .w = w, .dx = dx, .accumulate = accumulate};
    const size_t floats = bwd_data_plan(&c, d, (size_t)pp_cpu_threads(ex), accumulate);
    PP_TRY(workspace(ex, floats, &c.scratch, err));
    pp_cpu_parallel(ex, (int64_t)c.cb.count * c.cblocks, bwd_data_task, &c);
    return PP_OK;
}

pp_status pp_cpu_conv2d_backward_data(pp_exec *ex, const pp_conv2d_desc *d, const float *dy,
                                      const float *w, float *dx, pp_error *err)
{
    return backward_data(ex, d, dy, w, dx, 0, err);
}

pp_status pp_cpu_conv2d_backward_data_accumulate(pp_exec *ex, const pp_conv2d_desc *d,
                                                 const float *dy, const float *w, float *dx,
                                                 pp_error *err)
{
    return backward_data(ex, d, dy, w, dx, 1, err);
}

/* ---- backward-filter ---------------------------------------------------------------- */

typedef struct bwd_filter_ctx {
    const pp_conv2d_desc *d;
    const float *x, *dy;
    float *dw;
    int crs;
    int n0, m;          /* samples of the current group */
    const float *colm;  /* (CRS, cols) unfolded group, row stride ldc */
    const float *dym;   /* (K, cols) gathered dY of the group, row stride ldd */
    int ldc, ldd, cols;
    float *col_buf, *dy_buf; /* where pass 1 writes them */
    int kpb, kblocks;        /* dW rows per block */
    int npb, nblocks;        /* dW columns per block */
    int chunks, chunk_cols;  /* reduction chunks of a group */
    int per_sample;          /* per-sample mode: chunk_cols counts samples */
    float *partial;          /* chunks x (K, CRS): the chunks' sums */
    float *total;            /* (K, CRS): the groups' sum so far (several groups) */
    int first, last;         /* the current group is the first, the last */
} bwd_filter_ctx;

/* Pass 1: unfold sample t of the group and gather its dY (in per-sample
 * mode, only unfold it). */
static void bwd_filter_unfold_task(void *arg, int64_t t, int worker)
{
    const bwd_filter_ctx *c = arg;
    const pp_conv2d_desc *d = c->d;
    const size_t pq = (size_t)d->p * d->q;
    const size_t x_stride = (size_t)d->c * d->h * d->w, y_stride = (size_t)d->k * pq;
    const int n = c->n0 + (int)t;
    (void)worker;
    if (c->per_sample) { /* sample t alone, (CRS, PQ) */
        im2col_rows(d, c->x + n * x_stride, 0, d->p, c->col_buf + (size_t)t * c->crs * pq, pq);
        return;
    }
    if (is_pointwise(d))
        gather_planes(c->x + n * x_stride, x_stride, 1, d->c, pq, c->col_buf + (size_t)t * pq,
                      (size_t)c->cols);
    else
        im2col_rows(d, c->x + n * x_stride, 0, d->p, c->col_buf + (size_t)t * pq,
                    (size_t)c->cols);
    gather_planes(c->dy + n * y_stride, y_stride, 1, d->k, pq, c->dy_buf + (size_t)t * pq,
                  (size_t)c->cols);
}

/* Pass 2: tile t = (chunk, row block, column block) of dW. */
static void bwd_filter_tile_task(void *arg, int64_t t, int worker)
{
    const bwd_filter_ctx *c = arg;
    (void)worker;
    int nb = (int)(t % c->nblocks);
    int kb = (int)(t / c->nblocks % c->kblocks);
    int ch = (int)(t / c->nblocks / c->kblocks);
    int k0 = kb * c->kpb, k1 = min_int(k0 + c->kpb, c->d->k);
    int j0 = nb * c->npb, j1 = min_int(j0 + c->npb, c->crs);
    int len = c->per_sample ? c->m : c->cols;
    int r0 = ch * c->chunk_cols, r1 = min_int(r0 + c->chunk_cols, len);
    if (r1 <= r0) { /* an empty chunk of a short last group */
        float *p = c->partial + (size_t)ch * c->d->k * c->crs;
        for (int k = k0; k < k1; k++)
            memset(p + (size_t)k * c->crs + j0, 0, sizeof(float) * (size_t)(j1 - j0));
        return;
    }
    float *p = c->partial + (size_t)ch * c->d->k * c->crs + (size_t)k0 * c->crs + j0;
    if (c->per_sample) {
        /* samples [r0, r1) of the group, one GEMM each, in sample order */
        const pp_conv2d_desc *d = c->d;
        const size_t pq = (size_t)d->p * d->q;
        const size_t x_stride = (size_t)d->c * d->h * d->w, y_stride = (size_t)d->k * pq;
        float beta = 0.0f;
        for (int s = r0; s < r1; s++) {
            const int n = c->n0 + s;
            const float *col = is_pointwise(d) ? c->x + n * x_stride
                                               : c->col_buf + (size_t)s * c->crs * pq;
            gemm(CblasNoTrans, CblasTrans, k1 - k0, j1 - j0, (int)pq,
                 c->dy + n * y_stride + (size_t)k0 * pq, (int)pq, col + (size_t)j0 * pq,
                 (int)pq, beta, p, c->crs);
            beta = 1.0f;
        }
        return;
    }
    const float *a = c->dym + (size_t)k0 * c->ldd + r0;
    const float *b = c->colm + (size_t)j0 * c->ldc + r0;
    gemm(CblasNoTrans, CblasTrans, k1 - k0, j1 - j0, r1 - r0, a, c->ldd, b, c->ldc, 0.0f, p,
         c->crs);
}

/* Pass 3: row t of the group's sum (its chunks' partial sums in chunk order),
 * added to the groups' sum before it; the last group's adds the total to dW. */
static void bwd_filter_reduce_task(void *arg, int64_t t, int worker)
{
    const bwd_filter_ctx *c = arg;
    (void)worker;
    const size_t len = (size_t)c->crs, plane = (size_t)c->d->k * c->crs;
    float *dw = c->dw + (size_t)t * len;
    float *total = c->total ? c->total + (size_t)t * len : NULL;
    const float *p = c->partial + (size_t)t * len;
    for (size_t j = 0; j < len; j++) {
        float s = p[j];
        for (int ch = 1; ch < c->chunks; ch++) s += p[(size_t)ch * plane + j];
        if (!c->first) s = total[j] + s;
        if (c->last)
            dw[j] += s;
        else
            total[j] = s;
    }
}

/* Backward-filter's grouping, tiling and workspace (floats): *shared of it
 * holds the unfolded x (and gathered dY) of a group, the rest the partial
 * sums. */
static size_t bwd_filter_plan(bwd_filter_ctx *c, const pp_conv2d_desc *d, size_t *col_out,
                              size_t *shared_out, size_t *partial_out, int *spg_out)
{
    c->crs = d->c * d->r * d->s;
    const size_t pq = (size_t)d->p * d->q;
    const int pointwise = is_pointwise(d);
    /* samples per group: as many as fit the shared buffers (at least one) */
    size_t per_sample = ((size_t)c->crs + d->k) * pq;
    int spg = clamp_int((int)(SHARED_MAX_FLOATS / per_sample), 1, d->n);
    const int direct = pq >= DIRECT_MIN_PQ || (pointwise && spg == 1);
    if (direct) /* only the unfolded x is buffered, and not even that when pointwise */
        spg = pointwise ? d->n : clamp_int((int)(SHARED_MAX_FLOATS / (c->crs * pq)), 1, d->n);
    const int groups = (d->n + spg - 1) / spg;
    spg = (d->n + groups - 1) / groups; /* groups of about equal size */
    c->per_sample = direct;

    c->npb = c->crs;
    c->nblocks = 1;
    if (c->crs >= 2 * 256) {
        c->nblocks = min_int(c->crs / 256, TILES_TARGET);
        c->npb = (int)round_up((size_t)(c->crs + c->nblocks - 1) / c->nblocks, 16);
        c->nblocks = (c->crs + c->npb - 1) / c->npb;
    }
    if (direct) {
        /* long row blocks; whole samples make up the rest of the tiles */
        int want = (TILES_TARGET + c->nblocks - 1) / c->nblocks;
        int blocks = clamp_int(want, 1, d->k / DIRECT_ROWS_MIN < 1 ? 1 : d->k / DIRECT_ROWS_MIN);
        c->kpb = min_int((int)round_up((size_t)(d->k + blocks - 1) / blocks, 16), d->k);
    } else {
        c->kpb = row_block_units(d->k, 1, c->nblocks);
    }
    c->kblocks = (d->k + c->kpb - 1) / c->kpb;
    const int tiles = c->kblocks * c->nblocks;
    const int group_cols = spg * (int)pq;
    c->chunks = 1;
    if (tiles < TILES_TARGET)
        c->chunks = clamp_int(min_int((TILES_TARGET + tiles - 1) / tiles,
                                     direct ? spg : group_cols / REDUCE_CHUNK_MIN),
                             1, TILES_TARGET);
    if (direct) {
        c->chunk_cols = (spg + c->chunks - 1) / c->chunks;
        c->chunks = (spg + c->chunk_cols - 1) / c->chunk_cols;
    }

    size_t col_floats = pointwise && direct ? 0 : round_up((size_t)c->crs * group_cols, 16);
    size_t shared = col_floats + (direct ? 0 : (size_t)d->k * group_cols);
    size_t partial = round_up((size_t)c->chunks * d->k * c->crs, 16);
    size_t total = groups > 1 ? (size_t)d->k * c->crs : 0;
    *col_out = col_floats;
    *shared_out = shared;
    *partial_out = partial;
    *spg_out = spg;
    return shared + partial + total;
}

pp_status pp_cpu_conv2d_backward_filter(pp_exec *ex, const pp_conv2d_desc *d, const float *x,
                                        const float *dy, float *dw, pp_error *err)
{
    bwd_filter_ctx c = {.d = d, .x = x, .dy = dy, .dw = dw};
    size_t col_floats, shared, partial;
    int spg;
    const size_t floats = bwd_filter_plan(&c, d, &col_floats, &shared, &partial, &spg);
    const size_t pq = (size_t)d->p * d->q;
    const int pointwise = is_pointwise(d), direct = c.per_sample;
    const int tiles = c.kblocks * c.nblocks;
    const bool grouped = spg < d->n;
    float *ws;
    PP_TRY(workspace(ex, floats, &ws, err));
    c.col_buf = ws;
    c.dy_buf = ws + col_floats;
    c.partial = ws + shared;
    c.total = grouped ? ws + shared + partial : NULL;

    for (int n0 = 0; n0 < d->n; n0 += spg) {
        c.n0 = n0;
        c.m = min_int(spg, d->n - n0);
        c.first = n0 == 0;
        c.last = n0 + spg >= d->n;
        c.cols = c.m * (int)pq;
        if (!(direct && pointwise)) pp_cpu_parallel(ex, c.m, bwd_filter_unfold_task, &c);
        if (!direct) {
            c.colm = c.col_buf;
            c.dym = c.dy_buf;
            c.ldc = c.ldd = c.cols;
            c.chunk_cols = (c.cols + c.chunks - 1) / c.chunks;
        }
        pp_cpu_parallel(ex, (int64_t)c.chunks * tiles, bwd_filter_tile_task, &c);
        pp_cpu_parallel(ex, d->k, bwd_filter_reduce_task, &c);
    }
    return PP_OK;
}

size_t pp_cpu_conv2d_workspace_bytes(const pp_conv2d_desc *d, int threads)
{
    fwd_ctx f = {.d = d};
    bwd_data_ctx b = {.d = d};
    bwd_filter_ctx w = {.d = d};
    int per_group, spg;
    size_t col, shared, partial;
    const size_t t = threads > 0 ? (size_t)threads : 1;
    size_t most = fwd_plan(&f, d, t, &per_group);
    size_t v = bwd_data_plan(&b, d, t, 1);
    if (v > most) most = v;
    v = bwd_filter_plan(&w, d, &col, &shared, &partial, &spg);
    if (v > most) most = v;
    return most * sizeof(float);
}
