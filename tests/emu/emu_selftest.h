/*
 * emu_selftest.h - launchers of emu_selftest.cu's kernels (test_emu_self.c).
 */
#ifndef PP_TESTS_EMU_SELFTEST_H
#define PP_TESTS_EMU_SELFTEST_H

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t pp_emu_self_block_sum(int blocks, int bx, int by, const int *in, int *out);
cudaError_t pp_emu_self_warp_sum(int blocks, int threads, int width, const double *in,
                                 double *out);
cudaError_t pp_emu_self_warp_allsum(int blocks, int threads, int width, const double *in,
                                    double *out);
cudaError_t pp_emu_self_early_return(float *out);
cudaError_t pp_emu_self_launch(unsigned gx, unsigned gy, unsigned bx, unsigned by, size_t smem);

#ifdef __cplusplus
}
#endif

#endif
