/*
 * test_emu_attention_tf32.c - the f32 tensor-core attention (runtime/cuda:
 * attention_tf32.cu, its 3xTF32 mma.sync products by the emulator's warp
 * collective) against the CPU backend's f32 attention (the spec), on the CPU
 * by the emulator (cuda_emu.h): heads of 8 (run by the kernels of 16, zero
 * columns past the head), 16, 24 (by 32), 48 (by 64), 64 and 128 columns,
 * t of 1, 64, 70 and 130 (tiles whole and cut short), one to three samples,
 * several heads, operands 4 bytes off a 16-byte boundary (staged by plain
 * loads instead of cp.async).
 *   - forward: y within TOL of the largest element of the CPU's y, lse
 *     within TOL_LSE (absolute);
 *   - backward from the CPU's y and lse: dqkv within TOL of its largest
 *     element, and the same bits when run again;
 *   - the first call's check as a GPU makes it (attention_run.c): y, lse
 *     and dqkv against our CUDA-core kernels' (attention.cu) on the same
 *     operands, within TOL and TOL_LSE (the check's PP_ATTN_TOL_Y_F32 and
 *     PP_ATTN_TOL_LSE_F32 are ten times looser, for a device's sums);
 *   - dropout on the probabilities (p 0.1 and 0.5, heads of 16 and 64, t
 *     not a multiple of 64, first_sample not 0): the same checks against
 *     pp_attention_forward_dropout / _backward_dropout and against ours
 *     drawing the same masks; p 0 the bits of no dropout (NULL), forward and
 *     backward; dropout changes y and leaves lse;
 *   - heads of 12 and of 17 columns are refused (cudaErrorInvalidValue,
 *     nothing written), as pp_cuda_attention_tf32_takes says.
 * TOL (1e-5) is about 80 f32 units at the largest element: 3xTF32 drops
 * the a_lo b_lo term (2^-22 of each product) and sums in the tensor core's
 * order; one TF32 rounding a product (a kernel that lost its split) is 1e-3
 * or so, and a fragment or mask read wrongly tens of percent. The figures
 * each case reaches are printed. The checks are emu_attention_tc.h's,
 * shared with the bf16 kernels' test.
 */
#include <stdbool.h>
#include <stdint.h>

#include "tests/check.h"
#include "tests/emu/emu_rig.h"

#include "emu_attention_tf32.h"
#include "emu_transformer.h"
#include "tests/emu/emu_attention_tc.h"

#define MAX_GRID 3

static bool takes(pp_emu_cuda_attention_dims d)
{
    return pp_emu_cuda_attention_tf32_takes(d);
}

static cudaError_t forward(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop,
                           const void *qkv, void *y, float *lse)
{
    return pp_emu_cuda_launch_attention_forward_tf32(0, d, drop, qkv, y, lse);
}

static cudaError_t backward(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop,
                            const void *qkv, const void *y, const float *lse, const void *dy,
                            float *delta, void *dqkv)
{
    return pp_emu_cuda_launch_attention_backward_tf32(0, MAX_GRID, d, drop, qkv, y, lse, dy,
                                                      delta, dqkv);
}

/* ours on the CUDA cores (attention.cu) */
static cudaError_t ours_forward(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop,
                                const void *qkv, void *y, float *lse)
{
    return pp_emu_cuda_launch_attention_forward(0, d, drop, qkv, y, lse);
}

static cudaError_t ours_backward(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop,
                                 const void *qkv, const void *y, const float *lse,
                                 const void *dy, float *delta, void *dqkv)
{
    return pp_emu_cuda_launch_attention_backward(0, MAX_GRID, d, drop, qkv, y, lse, dy, delta,
                                                 dqkv);
}

int main(void)
{
    /* TOL and TOL_LSE 1e-5 */
    static const emu_tc_kernels tf32 = {.name = "3xTF32", .dtype = PP_F32, .tol = 1e-5,
                                        .tol_lse = 1e-5, .y_off = 0, .takes = takes,
                                        .forward = forward, .ours_forward = ours_forward,
                                        .backward = backward, .ours_backward = ours_backward};
    static const emu_tc_case cases[] = {
        {2, 70, 128, 2, 0, 0, 0},  /* GPT-2's heads of 64; two tiles, the last short */
        {1, 130, 64, 4, 0, 0, 0},  /* heads of 16; three tiles */
        {3, 1, 128, 2, 0, 0, 0},   /* one query */
        {1, 64, 64, 1, 0, 0, 0},   /* one whole tile */
        {1, 130, 256, 2, 0, 0, 0}, /* heads of 128: forward tiles of 32, backward of 16 */
        {2, 70, 96, 2, 4, 0, 0},   /* heads of 48, by the kernels of 64; 4 bytes off */
        {1, 37, 96, 4, 4, 0, 0},   /* heads of 24, by 32; 4 bytes off */
        {2, 20, 16, 2, 0, 0, 0},   /* heads of 8, by 16 */
        /* dropout on the probabilities: the CPU's masks */
        {3, 70, 48, 3, 0, 0.1f, 4},  /* heads of 16; three samples */
        {2, 70, 128, 2, 0, 0.5f, 9}, /* heads of 64; two samples */
        {1, 100, 64, 1, 4, 0.1f, 5}, /* one head of 64, one sample; 4 bytes off */
    };
    emu_rig_open();
    emu_tc_run(&tf32, cases, sizeof cases / sizeof cases[0], 40);
    emu_tc_refused(&tf32, (pp_emu_cuda_attention_dims){1, 4, 24, 2, 0}); /* heads of 12 */
    emu_tc_refused(&tf32, (pp_emu_cuda_attention_dims){1, 4, 34, 2, 0}); /* heads of 17 */
    return emu_rig_close("test_emu_attention_tf32");
}
