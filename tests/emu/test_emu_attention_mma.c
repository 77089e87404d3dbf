/*
 * test_emu_attention_mma.c - the tensor-core attention (runtime/cuda:
 * attention_mma.cu, its mma.sync products by the emulator's warp collective)
 * against the CPU backend's bf16 attention (the f32 arithmetic on widened
 * operands, each output rounded once: the spec), on the CPU by the emulator
 * (cuda_emu.h): heads of 16, 48 (run by the kernels of 64, zero columns
 * past the head), 64 and 128 columns, t of 1, 64, 70 and 130 (tiles of 64
 * whole and cut short), one to three samples, several heads, outputs 2 bytes off a 4-byte
 * boundary.
 *   - forward: y within TOL of the largest element of the CPU's y (the
 *     kernels round P to bf16 before P V, the CPU does not), lse within
 *     TOL_LSE (absolute, natural log: its sum is of the unrounded P);
 *   - backward from the CPU's y and lse: dqkv within TOL of its largest
 *     element, and the same bits when run again;
 *   - the first call's check as a GPU makes it (attention_run.c): y, lse
 *     and dqkv against our CUDA-core kernels' (attention_bf16.cu) on the
 *     same operands, within TOL and TOL_LSE (tighter than the check's);
 *   - dropout on the probabilities (p 0.1 and 0.5, heads of 16 and 64, t
 *     not a multiple of 64, one to three samples, first_sample not 0): the
 *     same checks against pp_attention_forward_dropout / _backward_dropout
 *     and against ours drawing the same masks; p 0 the bits of no dropout
 *     (NULL) forward and backward; dropout changes y and leaves lse;
 *   - a head of 17 columns is refused (cudaErrorInvalidValue, nothing
 *     written), as pp_cuda_attention_mma_takes says.
 * TOL (8e-3: one or two bf16 units at the largest element) is the kernels'
 * spec here, half the first call's check's PP_ATTN_TOL_Y (1.6e-2, which
 * leaves room for roundings on a device: runtime/cuda/attention_check.h);
 * TOL_LSE is its PP_ATTN_TOL_LSE. That header needs the CUDA runtime's, hence
 * the values here; the figures each case reaches are printed. The checks
 * are emu_attention_tc.h's, shared with the f32 kernels' test.
 */
#include <stdbool.h>
#include <stdint.h>

#include "tests/check.h"
#include "tests/emu/emu_rig.h"

#include "emu_attention_bf16.h"
#include "emu_attention_mma.h"
#include "tests/emu/emu_attention_tc.h"

#define MAX_GRID 3

static bool takes(pp_emu_cuda_attention_dims d)
{
    return pp_emu_cuda_attention_mma_takes(d);
}

static cudaError_t forward(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop,
                           const void *qkv, void *y, float *lse)
{
    return pp_emu_cuda_launch_attention_forward_mma(0, d, drop, qkv, y, lse);
}

static cudaError_t backward(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop,
                            const void *qkv, const void *y, const float *lse, const void *dy,
                            float *delta, void *dqkv)
{
    return pp_emu_cuda_launch_attention_backward_mma(0, MAX_GRID, d, drop, qkv, y, lse, dy, delta,
                                                     dqkv);
}

/* ours on the CUDA cores (attention_bf16.cu) */
static cudaError_t ours_forward(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop,
                                const void *qkv, void *y, float *lse)
{
    return pp_emu_cuda_launch_attention_forward_bf16(0, d, drop, qkv, y, lse);
}

static cudaError_t ours_backward(pp_emu_cuda_attention_dims d, const pp_dropout_desc *drop,
                                 const void *qkv, const void *y, const float *lse,
                                 const void *dy, float *delta, void *dqkv)
{
    return pp_emu_cuda_launch_attention_backward_bf16(0, MAX_GRID, d, drop, qkv, y, lse, dy,
                                                      delta, dqkv);
}

int main(void)
{
    /* TOL 8e-3, TOL_LSE 1e-3; y and dy 2 bytes off a 4-byte boundary */
    static const emu_tc_kernels mma = {.name = "mma", .dtype = PP_BF16, .tol = 8e-3,
                                       .tol_lse = 1e-3, .y_off = 2, .takes = takes,
                                       .forward = forward, .ours_forward = ours_forward,
                                       .backward = backward, .ours_backward = ours_backward};
    static const emu_tc_case cases[] = {
        {2, 70, 128, 2, 0, 0, 0},  /* GPT-2's heads of 64; two tiles, the last short; two samples */
        {1, 130, 64, 4, 0, 0, 0},  /* heads of 16; three tiles */
        {3, 1, 128, 2, 0, 0, 0},   /* one query */
        {1, 64, 64, 1, 0, 0, 0},   /* one whole tile */
        {1, 130, 256, 2, 0, 0, 0}, /* heads of 128: backward tiles of 32 */
        {2, 70, 96, 2, 0, 0, 0},   /* heads of 48, by the kernels of 64 */
        /* dropout on the probabilities: the CPU's masks */
        {3, 70, 48, 3, 0, 0.1f, 4},  /* heads of 16; three samples */
        {2, 70, 128, 2, 0, 0.5f, 9}, /* heads of 64; two samples */
        {1, 100, 64, 1, 0, 0.1f, 5}, /* one head of 64, one sample */
        {2, 45, 64, 4, 0, 0.5f, 1},  /* heads of 16, one short tile */
    };
    emu_rig_open();
    emu_tc_run(&mma, cases, sizeof cases / sizeof cases[0], 20);
    emu_tc_refused(&mma, (pp_emu_cuda_attention_dims){1, 4, 34, 2, 0}); /* heads of 17 */
    return emu_rig_close("test_emu_attention_mma");
}
