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
/* pp_mma_tf32_1688 likewise (m16n8k8: A and B registers TF32 bit patterns) */
cudaError_t pp_emu_self_mma_tf32(int threads, int calls, const uint32_t *a, const uint32_t *b,
                                 const float *c, float *d);
/* one warp: thread i's f32 fragments a[4i..4i+3] (of a 16x8 A) and
 * b[2i, 2i+1] (of an 8x8 B) in the tf32 layout, split into TF32 parts and
 * multiplied in 3xTF32 (split 1: pp_mma_3xtf32_1688) or rounded to TF32
 * once (split 0), C from c[4i..], D into d[4i..] */
cudaError_t pp_emu_self_mma_f32(const float *a, const float *b, const float *c, float *d,
                                int split);
/* out[i] = pp_tf32_rna(in[i]), i < n */
cudaError_t pp_emu_self_tf32_rna(const float *in, uint32_t *out, int n);

/* pp_tf32_split(in[i], &hi[i], &lo[i]), i < n */
cudaError_t pp_emu_self_tf32_split(const float *in, uint32_t *hi, uint32_t *lo, int n);
/* ldmatrix x4 (trans: .trans) by one warp of the four 8x8 matrices
 * src[64 j..64 j+63] (row-major), lane l's registers into out[4 l..4 l+3];
 * lane `absent` returns first, lane `skewed` gives a row address 2 bytes off
 * (-1: none) */
cudaError_t pp_emu_self_ldmatrix(const uint16_t *src, int trans, int absent, int skewed,
                                 uint32_t *out);
/* cp.async by one warp: thread t's three 16-byte rows src[12 t..12 t+11]
 * (16-byte aligned), three groups, its shared words recorded into
 * out[48 t + 12 k..] before any wait (k 0), after a __syncthreads (1), after
 * wait_group 1 (2) and after wait_group 0 (3); mode 1: thread 3's first copy
 * from a source 4 bytes off, mode 2: no wait_group 0 */
cudaError_t pp_emu_self_cp_async(const uint32_t *src, uint32_t *out, int mode);
cudaError_t pp_emu_self_launch(unsigned gx, unsigned gy, unsigned bx, unsigned by, size_t smem);

#ifdef __cplusplus
}
#endif

#endif
