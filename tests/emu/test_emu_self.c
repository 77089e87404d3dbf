/*
 * test_emu_self.c - the CUDA emulator (cuda_emu.h) against what a GPU does:
 * block-wide rendezvous and shared memory (sums over blocks of 1 to 1024
 * threads in 1 and 2 dimensions), warp shuffles down and xor (whole warps,
 * segments of 8 lanes, a last warp of fewer than 32 threads), the device's launch
 * limits (cudaErrorInvalidConfiguration from cudaGetLastError, then
 * cleared), a shuffle that reads a lane which has returned, a fault the
 * emulator must count, and the tensor cores' m16n8k16 bf16 product
 * (mma_bf16.cuh) against a plain matrix product of random bf16 matrices,
 * each lane's fragments placed by the PTX ISA's table (written here from
 * the ISA's formulas, apart from the emulator's inverse of them), one and
 * two warps, and a lane that returned before the mma counted as a fault;
 * the m16n8k8 TF32 product (mma_tf32.cuh) likewise, with its own table;
 * the TF32 rounding (cvt.rna.tf32.f32), and the split by integer operations
 * (pp_tf32_split: its hi the rounding's bits, its lo the remainder's),
 * against its definition in double on
 * its ties, overflow, subnormals and random bit patterns; 3xTF32 products of
 * f32 matrices within f32's rounding of double, one TF32 rounding far off;
 * ldmatrix x4 and x4.trans against a gather by the PTX ISA's table (written
 * here), a lane returning first and a misaligned row counted as faults;
 * cp.async's groups: a read before the wait, or after a __syncthreads
 * alone, sees the old bytes, wait_group 1 leaves exactly the newest group
 * pending, wait_group 0 none; a misaligned copy and a copy never waited
 * for counted as faults.
 * The kernels: emu_selftest.cu.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "tests/emu/emu.h"
#include "runtime/core/tensor.h"

#include "emu_emu_selftest.h"

static void test_block_sums(void)
{
    static const struct {
        int blocks, bx, by;
    } cases[] = {{3, 256, 1}, {2, 1024, 1}, {4, 1, 1}, {2, 32, 8}, {3, 33, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].bx * cases[i].by, blocks = cases[i].blocks;
        int *in = malloc(sizeof(int) * (size_t)(blocks * n)),
            *out = calloc((size_t)blocks, sizeof(int));
        for (int k = 0; k < blocks * n; k++) in[k] = k % 7 - 3 + k / n;
        CHECK(pp_emu_self_block_sum(blocks, cases[i].bx, cases[i].by, in, out) == cudaSuccess);
        for (int b = 0; b < blocks; b++) {
            int want = 0;
            for (int k = 0; k < n; k++) want += in[b * n + k];
            CHECK_MSG(out[b] == want, "block sum, %d blocks of %dx%d, block %d: %d, expected %d",
                      blocks, cases[i].bx, cases[i].by, b, out[b], want);
        }
        free(in);
        free(out);
    }
}

static void test_warp_sums(void)
{
    static const struct {
        int blocks, threads, width;
    } cases[] = {{2, 64, 32}, {1, 128, 8}, {3, 32, 16}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int total = cases[i].blocks * cases[i].threads, w = cases[i].width;
        double *in = malloc(sizeof(double) * (size_t)total),
               *out = calloc((size_t)(total / w), sizeof(double));
        double *all = calloc((size_t)total, sizeof(double));
        for (int k = 0; k < total; k++) in[k] = 0.5 * k - 3.0;
        CHECK(pp_emu_self_warp_sum(cases[i].blocks, cases[i].threads, w, in, out) == cudaSuccess);
        CHECK(pp_emu_self_warp_allsum(cases[i].blocks, cases[i].threads, w, in, all) ==
              cudaSuccess);
        for (int s = 0; s < total / w; s++) {
            double want = 0;
            for (int k = 0; k < w; k++) want += in[s * w + k];
            CHECK_MSG(out[s] == want, "warp sum, width %d, segment %d: %g, expected %g", w, s,
                      out[s], want);
            for (int k = 0; k < w; k++)
                CHECK_MSG(all[s * w + k] == want, "xor warp sum, width %d, lane %d: %g, expected "
                          "%g", w, s * w + k, all[s * w + k], want);
        }
        free(in);
        free(out);
        free(all);
    }
}

static void test_limits(void)
{
    CHECK(pp_emu_self_launch(1, 1, 1024, 1, 0) == cudaSuccess);
    CHECK(pp_emu_self_launch(1, 1, 32, 33, 0) == cudaErrorInvalidConfiguration); /* 1056 threads */
    CHECK(pp_emu_self_launch(1, 1, 2048, 1, 0) == cudaErrorInvalidConfiguration);
    CHECK(pp_emu_self_launch(0, 1, 32, 1, 0) == cudaErrorInvalidConfiguration); /* no blocks */
    CHECK(pp_emu_self_launch(1, 65536, 32, 1, 0) == cudaErrorInvalidConfiguration);
    CHECK(pp_emu_self_launch(1, 1, 32, 1, 64 * 1024) == cudaErrorInvalidConfiguration);
    CHECK(pp_emu_self_launch(1, 1, 32, 1, 0) == cudaSuccess); /* the error was cleared */
}

static void test_fault(void)
{
    const long before = pp_emu_faults();
    fprintf(stderr, "test_emu_self: the faults reported next are expected\n");
    float out[32];
    memset(out, 0, sizeof out);
    CHECK(pp_emu_self_early_return(out) == cudaSuccess);
    CHECK_MSG(pp_emu_faults() > before, "a shuffle naming a returned lane went unreported");
    CHECK(out[2] == 1.0f); /* lane 2 read lane 3, which was there */
}

/* The PTX ISA's fragments of mma.m16n8k16 with .bf16 A and B and .f32 C/D
 * (section 9.7.14.5.8), element i of lane l at (row, col): groupID l >> 2,
 * threadID_in_group l % 4; A's a0..a7 two to a register, B's b0..b3 and
 * C's c0..c3 likewise, the lower index in the low half. */
static void a_at(int l, int i, int *row, int *col)
{
    const int g = l >> 2, q = l % 4;
    *row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
    *col = q * 2 + (i & 1) + (i >= 4 ? 8 : 0);
}

static void b_at(int l, int i, int *row, int *col)
{
    const int g = l >> 2, q = l % 4;
    *row = q * 2 + (i & 1) + (i >= 2 ? 8 : 0);
    *col = g;
}

static void c_at(int l, int i, int *row, int *col)
{
    const int g = l >> 2, q = l % 4;
    *row = i < 2 ? g : g + 8;
    *col = q * 2 + (i & 1);
}

static uint32_t rnd_state = 12345u;

/* a bf16 in [-2, 2), as bits */
static uint16_t rnd_bf16(void)
{
    rnd_state = rnd_state * 1664525u + 1013904223u;
    return pp_bf16_from_f32((float)(rnd_state >> 8) / 4194304.0f - 2.0f);
}

static float bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_mma(void)
{
    enum { MAXT = 64 };
    static const struct {
        int threads; /* whole warps, each its own product */
    } cases[] = {{32}, {64}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int threads = cases[ci].threads;
        uint16_t A[MAXT / 32][16][16], B[MAXT / 32][16][8];
        float C[MAXT / 32][16][8];
        uint32_t a[4 * MAXT], b[2 * MAXT];
        float c[4 * MAXT], d[4 * MAXT];
        for (int w = 0; w < threads / 32; w++) {
            for (int r = 0; r < 16; r++)
                for (int k = 0; k < 16; k++) A[w][r][k] = rnd_bf16();
            for (int k = 0; k < 16; k++)
                for (int n = 0; n < 8; n++) B[w][k][n] = rnd_bf16();
            for (int r = 0; r < 16; r++)
                for (int n = 0; n < 8; n++) C[w][r][n] = bf16_value(rnd_bf16()) * 3.0f;
        }
        memset(a, 0, sizeof a);
        memset(b, 0, sizeof b);
        for (int t = 0; t < threads; t++) {
            const int w = t / 32, l = t % 32;
            int row, col;
            for (int i = 0; i < 8; i++) {
                a_at(l, i, &row, &col);
                a[4 * t + i / 2] |= (uint32_t)A[w][row][col] << (16 * (i % 2));
            }
            for (int i = 0; i < 4; i++) {
                b_at(l, i, &row, &col);
                b[2 * t + i / 2] |= (uint32_t)B[w][row][col] << (16 * (i % 2));
                c_at(l, i, &row, &col);
                c[4 * t + i] = C[w][row][col];
            }
        }
        CHECK(pp_emu_self_mma(threads, threads, a, b, c, d) == cudaSuccess);
        for (int t = 0; t < threads; t++)
            for (int i = 0; i < 4; i++) {
                const int w = t / 32;
                int row, col;
                c_at(t % 32, i, &row, &col);
                double want = C[w][row][col], mag = fabs(want);
                for (int k = 0; k < 16; k++) {
                    const double p = (double)bf16_value(A[w][row][k]) * bf16_value(B[w][k][col]);
                    want += p;
                    mag += fabs(p);
                }
                /* 16 additions in f32 of exact products */
                CHECK_MSG(fabs(d[4 * t + i] - want) <= 16 * 0x1p-24 * mag,
                          "mma, %d threads, thread %d, D[%d][%d]: %.9g, expected %.9g", threads,
                          t, row, col, d[4 * t + i], want);
            }
    }
}

/* lane 31 returns before the others' mma */
static void test_mma_fault(void)
{
    const long before = pp_emu_faults();
    fprintf(stderr, "test_emu_self: the mma fault reported next is expected\n");
    uint32_t a[4 * 32] = {0}, b[2 * 32] = {0};
    float c[4 * 32] = {0}, d[4 * 32];
    CHECK(pp_emu_self_mma(32, 31, a, b, c, d) == cudaSuccess);
    CHECK_MSG(pp_emu_faults() > before, "an mma without lane 31 went unreported");
}

/* The PTX ISA's fragments of mma.m16n8k8 with .tf32 A and B (one element a
 * register): a0..a3 at (g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4); b0,
 * b1 at (q, g), (q + 4, g); C as m16n8k16's (c_at). */
static void a_at_tf32(int l, int i, int *row, int *col)
{
    const int g = l >> 2, q = l % 4;
    *row = g + 8 * (i & 1);
    *col = q + 4 * (i >> 1);
}

static void b_at_tf32(int l, int i, int *row, int *col)
{
    *row = l % 4 + 4 * i;
    *col = l >> 2;
}

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* x rounded to TF32 (11 significant bits, subnormals at 2^-136 steps), to
 * nearest with ties away from zero, computed in double: the definition the
 * emulated cvt.rna.tf32.f32 is held to */
static float tf32_want(float x)
{
    if (!isfinite(x) || x == 0.0f) return x;
    const double a = fabs((double)x);
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    double unit = ldexp(1.0, e - 11);
    if (unit < 0x1p-136) unit = 0x1p-136;
    const double r = floor(a / unit + 0.5) * unit;
    const float f = r >= 0x1p128 ? INFINITY : (float)r;
    return x < 0 ? -f : f;
}

static void test_tf32_rna(void)
{
    enum { N = 4096 };
    static float in[N];
    static uint32_t out[N];
    const float fixed[] = {1.0f, 1.0f + 0x1p-11f, 1.0f + 0x1p-11f - 0x1p-23f,
                           -(1.0f + 0x1p-11f), 1.0f + 3 * 0x1p-11f, 0x1p-140f, 0x1p-137f,
                           3 * 0x1p-138f, 0x1.fffffep127f, -0x1.fffffep127f, INFINITY,
                           -INFINITY, 0.0f, -0.0f};
    const int nf = (int)(sizeof fixed / sizeof fixed[0]);
    for (int i = 0; i < nf; i++) in[i] = fixed[i];
    uint32_t st = 777u;
    for (int i = nf; i < N; i++) { /* random finite bit patterns */
        st = st * 1664525u + 1013904223u;
        uint32_t u = st;
        if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu;
        in[i] = f32_of(u);
    }
    in[N - 1] = NAN;
    CHECK(pp_emu_self_tf32_rna(in, out, N) == cudaSuccess);
    int bad = 0;
    for (int i = 0; i < N - 1; i++) {
        const float want = tf32_want(in[i]);
        if (out[i] != bits_of(want) || (out[i] & 0x1fffu)) {
            if (bad++ < 5)
                CHECK_MSG(0, "tf32 of %a (0x%08x): 0x%08x, expected 0x%08x (%a)", in[i],
                          bits_of(in[i]), out[i], bits_of(want), want);
        }
    }
    CHECK_MSG(bad == 0, "tf32 rounding: %d of %d values off", bad, N - 1);
    CHECK_MSG(isnan(f32_of(out[N - 1])), "tf32 of NaN: 0x%08x", out[N - 1]);
    /* the ties, explicitly: away from zero */
    CHECK(f32_of(out[1]) == 1.0f + 0x1p-10f && f32_of(out[2]) == 1.0f);
    CHECK(f32_of(out[3]) == -(1.0f + 0x1p-10f) && f32_of(out[4]) == 1.0f + 0x1p-9f);
    CHECK(isinf(f32_of(out[8])) && f32_of(out[9]) == -INFINITY);
    /* the split by integer operations: hi the rounding's bits, lo the
     * remainder's; an infinity's lo NaN, a NaN's hi NaN */
    static uint32_t hi[N], lo[N];
    CHECK(pp_emu_self_tf32_split(in, hi, lo, N) == cudaSuccess);
    int split_bad = 0;
    for (int i = 0; i < N - 1; i++) {
        const bool ok = hi[i] == out[i] &&
                        (isfinite(in[i]) ? lo[i] == bits_of(tf32_want(in[i] - f32_of(hi[i])))
                                         : isnan(f32_of(lo[i])));
        if (!ok && split_bad++ < 5)
            CHECK_MSG(0, "tf32 split of %a (0x%08x): hi 0x%08x lo 0x%08x, expected hi 0x%08x",
                      in[i], bits_of(in[i]), hi[i], lo[i], out[i]);
    }
    CHECK_MSG(split_bad == 0, "tf32 split: %d of %d values off", split_bad, N - 1);
    CHECK_MSG(isnan(f32_of(hi[N - 1])), "tf32 split of NaN: hi 0x%08x", hi[N - 1]);
}

/* a TF32 value in [-2, 2): 11 significant bits */
static float rnd_tf32(void)
{
    rnd_state = rnd_state * 1664525u + 1013904223u;
    return (float)((int)(rnd_state >> 21) - 1024) / 512.0f;
}

/* an f32 in [-2, 2) with a full significand */
static float rnd_f32(void)
{
    rnd_state = rnd_state * 1664525u + 1013904223u;
    return (float)(rnd_state >> 8) / 4194304.0f - 2.0f;
}

static void test_mma_tf32(void)
{
    enum { MAXT = 64 };
    for (int threads = 32; threads <= MAXT; threads += 32) {
        float A[MAXT / 32][16][8], B[MAXT / 32][8][8], C[MAXT / 32][16][8];
        uint32_t a[4 * MAXT], b[2 * MAXT];
        float c[4 * MAXT], d[4 * MAXT];
        for (int w = 0; w < threads / 32; w++) {
            for (int r = 0; r < 16; r++)
                for (int k = 0; k < 8; k++) A[w][r][k] = rnd_tf32();
            for (int k = 0; k < 8; k++)
                for (int n = 0; n < 8; n++) B[w][k][n] = rnd_tf32();
            for (int r = 0; r < 16; r++)
                for (int n = 0; n < 8; n++) C[w][r][n] = rnd_f32() * 3.0f;
        }
        for (int t = 0; t < threads; t++) {
            const int w = t / 32, l = t % 32;
            int row, col;
            for (int i = 0; i < 4; i++) {
                a_at_tf32(l, i, &row, &col);
                a[4 * t + i] = bits_of(A[w][row][col]);
                c_at(l, i, &row, &col);
                c[4 * t + i] = C[w][row][col];
            }
            for (int i = 0; i < 2; i++) {
                b_at_tf32(l, i, &row, &col);
                b[2 * t + i] = bits_of(B[w][row][col]);
            }
        }
        CHECK(pp_emu_self_mma_tf32(threads, threads, a, b, c, d) == cudaSuccess);
        for (int t = 0; t < threads; t++)
            for (int i = 0; i < 4; i++) {
                const int w = t / 32;
                int row, col;
                c_at(t % 32, i, &row, &col);
                double want = C[w][row][col], mag = fabs(want);
                for (int k = 0; k < 8; k++) {
                    const double p = (double)A[w][row][k] * B[w][k][col];
                    want += p;
                    mag += fabs(p);
                }
                /* 8 additions in f32 of exact products */
                CHECK_MSG(fabs(d[4 * t + i] - want) <= 8 * 0x1p-24 * mag,
                          "mma tf32, %d threads, thread %d, D[%d][%d]: %.9g, expected %.9g",
                          threads, t, row, col, d[4 * t + i], want);
            }
    }
    /* lane 31 returns before the others' tf32 mma */
    const long before = pp_emu_faults();
    fprintf(stderr, "test_emu_self: the tf32 mma fault reported next is expected\n");
    uint32_t a[4 * 32] = {0}, b[2 * 32] = {0};
    float c[4 * 32] = {0}, d[4 * 32];
    CHECK(pp_emu_self_mma_tf32(32, 31, a, b, c, d) == cudaSuccess);
    CHECK_MSG(pp_emu_faults() > before, "a tf32 mma without lane 31 went unreported");
}

/* f32 A and B (full significands) by 3xTF32 against double: within the f32
 * rounding of its 24 additions and the split's 2^-22 per product; one TF32
 * rounding is thousands of times further (2^-11 per operand) */
static void test_3xtf32(void)
{
    float A[16][8], B[8][8], C[16][8], a[4 * 32], b[2 * 32], c[4 * 32], d3[4 * 32], d1[4 * 32];
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 8; k++) A[r][k] = rnd_f32();
    for (int k = 0; k < 8; k++)
        for (int n = 0; n < 8; n++) B[k][n] = rnd_f32();
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) C[r][n] = rnd_f32();
    for (int l = 0; l < 32; l++) {
        int row, col;
        for (int i = 0; i < 4; i++) {
            a_at_tf32(l, i, &row, &col);
            a[4 * l + i] = A[row][col];
            c_at(l, i, &row, &col);
            c[4 * l + i] = C[row][col];
        }
        for (int i = 0; i < 2; i++) {
            b_at_tf32(l, i, &row, &col);
            b[2 * l + i] = B[row][col];
        }
    }
    CHECK(pp_emu_self_mma_f32(a, b, c, d3, 1) == cudaSuccess);
    CHECK(pp_emu_self_mma_f32(a, b, c, d1, 0) == cudaSuccess);
    double worst3 = 0, worst1 = 0;
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            int row, col;
            c_at(l, i, &row, &col);
            double want = C[row][col], mag = fabs(want);
            for (int k = 0; k < 8; k++) {
                want += (double)A[row][k] * B[k][col];
                mag += fabs((double)A[row][k] * B[k][col]);
            }
            const double e3 = fabs(d3[4 * l + i] - want) / mag, e1 = fabs(d1[4 * l + i] - want) / mag;
            CHECK_MSG(e3 <= 40 * 0x1p-24, "3xtf32 D[%d][%d]: %.9g, expected %.9g (%.2g of the "
                      "magnitude)", row, col, d3[4 * l + i], want, e3);
            if (e3 > worst3) worst3 = e3;
            if (e1 > worst1) worst1 = e1;
        }
    fprintf(stderr, "3xtf32: worst error %.2e of the magnitude (one tf32 rounding: %.2e)\n",
            worst3, worst1);
    CHECK_MSG(worst1 >= 64 * worst3, "one tf32 rounding %.2e, 3xtf32 %.2e", worst1, worst3);
}

/* The PTX ISA's ldmatrix fragment of an 8x8 matrix M ("Warp-level matrix
 * load instruction: ldmatrix"): lane l's register j holds, of matrix j,
 * row l >> 2, columns 2 (l % 4) and 2 (l % 4) + 1 (low half first); .trans
 * loads M^T: rows 2 (l % 4) and 2 (l % 4) + 1 of column l >> 2. */
static uint32_t ldmatrix_want(const uint16_t *m, int trans, int l, int j)
{
    uint32_t w = 0;
    for (int h = 0; h < 2; h++) {
        const int a = l >> 2, b = 2 * (l % 4) + h;
        const int row = trans ? b : a, col = trans ? a : b;
        w |= (uint32_t)m[64 * j + 8 * row + col] << (16 * h);
    }
    return w;
}

static void test_ldmatrix(void)
{
    uint16_t src[256];
    uint32_t out[128];
    for (int i = 0; i < 256; i++) src[i] = rnd_bf16();
    for (int trans = 0; trans < 2; trans++) {
        memset(out, 0, sizeof out);
        CHECK(pp_emu_self_ldmatrix(src, trans, -1, -1, out) == cudaSuccess);
        for (int l = 0; l < 32; l++)
            for (int j = 0; j < 4; j++)
                CHECK_MSG(out[4 * l + j] == ldmatrix_want(src, trans, l, j),
                          "ldmatrix x4%s, lane %d, register %d: 0x%08x, expected 0x%08x",
                          trans ? ".trans" : "", l, j, out[4 * l + j],
                          ldmatrix_want(src, trans, l, j));
    }
}

/* lane 9 returns first; lane 3 gives a row 2 bytes off */
static void test_ldmatrix_faults(void)
{
    uint16_t src[256] = {0};
    uint32_t out[128];
    fprintf(stderr, "test_emu_self: the ldmatrix faults reported next are expected\n");
    long before = pp_emu_faults();
    CHECK(pp_emu_self_ldmatrix(src, 0, 9, -1, out) == cudaSuccess);
    CHECK_MSG(pp_emu_faults() > before, "an ldmatrix without lane 9 went unreported");
    before = pp_emu_faults();
    CHECK(pp_emu_self_ldmatrix(src, 1, -1, 3, out) == cudaSuccess);
    CHECK_MSG(pp_emu_faults() > before, "an ldmatrix row 2 bytes off went unreported");
}

static void test_cp_async(void)
{
    static const char *const when[4] = {"before any wait", "after __syncthreads",
                                        "after wait_group 1", "after wait_group 0"};
    _Alignas(16) uint32_t src[32 * 12];
    uint32_t out[32 * 48];
    for (int i = 0; i < 32 * 12; i++) src[i] = 0x1000u * (uint32_t)i + 7u;
    CHECK(pp_emu_self_cp_async(src, out, 0) == cudaSuccess);
    for (int t = 0; t < 32; t++)
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 12; i++) {
                /* groups done: none before the waits, 2 after wait_group 1, 3 after 0 */
                const int done = k < 2 ? 0 : k == 2 ? 2 : 3;
                const uint32_t want = i / 4 < done ? src[12 * t + i] : 0xdead0000u + (uint32_t)i;
                CHECK_MSG(out[48 * t + 12 * k + i] == want,
                          "cp.async, thread %d, word %d %s: 0x%08x, expected 0x%08x", t, i,
                          when[k], out[48 * t + 12 * k + i], want);
            }
}

/* a misaligned source; a group never waited for (pending at the return) */
static void test_cp_async_faults(void)
{
    _Alignas(16) uint32_t src[32 * 12] = {0};
    uint32_t out[32 * 48];
    fprintf(stderr, "test_emu_self: the cp.async faults reported next are expected\n");
    long before = pp_emu_faults();
    CHECK(pp_emu_self_cp_async(src, out, 1) == cudaSuccess);
    CHECK_MSG(pp_emu_faults() > before, "a cp.async from 4 bytes off went unreported");
    before = pp_emu_faults();
    CHECK(pp_emu_self_cp_async(src, out, 2) == cudaSuccess);
    CHECK_MSG(pp_emu_faults() > before, "a cp.async never waited for went unreported");
}

int main(void)
{
    test_block_sums();
    test_warp_sums();
    test_limits();
    test_mma();
    test_ldmatrix();
    test_cp_async();
    CHECK_MSG(pp_emu_faults() == 0, "faults before the faulty kernels: %ld", pp_emu_faults());
    test_fault();
    test_mma_fault();
    test_tf32_rna();
    test_mma_tf32();
    test_3xtf32();
    test_ldmatrix_faults();
    test_cp_async_faults();
    return check_summary("test_emu_self");
}
