/*
 * test_emu_self.c - the CUDA emulator (cuda_emu.h) against what a GPU does:
 * block-wide rendezvous and shared memory (sums over blocks of 1 to 1024
 * threads in 1 and 2 dimensions), warp shuffles down and xor (whole warps,
 * segments of 8 lanes, a last warp of fewer than 32 threads), the device's launch
 * limits (cudaErrorInvalidConfiguration from cudaGetLastError, then
 * cleared), and a shuffle that reads a lane which has returned, a fault the
 * emulator must count. The kernels: emu_selftest.cu.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "tests/emu/emu.h"

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

int main(void)
{
    test_block_sums();
    test_warp_sums();
    test_limits();
    CHECK_MSG(pp_emu_faults() == 0, "faults before the faulty kernel: %ld", pp_emu_faults());
    test_fault();
    return check_summary("test_emu_self");
}
