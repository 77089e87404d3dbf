/*
 * emu_selftest.h - launchers of emu_selftest.cu's kernels (test_emu_self.c).
 */
#ifndef PP_TESTS_EMU_SELFTEST_H
#define PP_TESTS_EMU_SELFTEST_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t pp_emu_self_block_sum(int blocks, int bx, int by, const int *in, int *out);
cudaError_t pp_emu_self_warp_sum(int blocks, int threads, int width, const double *in,
                                 double *out);
cudaError_t pp_emu_self_warp_allsum(int blocks, int threads, int width, const double *in,
                                    double *out);
cudaError_t pp_emu_self_early_return(float *out);
/* pp_mma_bf16_16816 by `threads` threads (whole warps), thread i's fragments
 * a[4i..4i+3], b[2i, 2i+1], c[4i..4i+3] and its D fragment d[4i..4i+3];
 * threads at or above `calls` return first */
cudaError_t pp_emu_self_mma(int threads, int calls, const uint32_t *a, const uint32_t *b,
                            const float *c, float *d);
cudaError_t pp_emu_self_launch(unsigned gx, unsigned gy, unsigned bx, unsigned by, size_t smem);

#ifdef __cplusplus
}
#endif

#endif
