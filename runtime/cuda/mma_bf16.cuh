/*
 * mma_bf16.cuh - one warp-wide bf16 tensor-core product, D = A B + C, of the
 * shape m16n8k16 (A 16x16 row-major bf16, B 16x8 "col" bf16, C and D 16x8
 * f32): `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` on the device,
 * and under the CPU emulator (PP_CUDA_EMU, tests/emu/cuda_emu.h) the
 * emulator's warp collective pp_emu::mma_bf16_16816, which gathers the 32
 * lanes' fragments at a rendezvous and hands each lane its D fragment.
 *
 * The contract (the fragment layout) is the PTX ISA's, section 9.7.14.5.8
 * "Matrix Fragments for mma.m16n8k16 with floating point type" (its Figures
 * for A, B and C/D with .bf16 / .f32): with g = lane >> 2 (groupID) and
 * q = lane % 4 (threadID_in_group), and in each 32-bit register the element
 * of the smaller column (A) or row (B) in the low 16 bits,
 *
 *   a[0] = A[g    ][2q, 2q + 1]        b[0] = B[2q,     2q + 1][g]
 *   a[1] = A[g + 8][2q, 2q + 1]        b[1] = B[2q + 8, 2q + 9][g]
 *   a[2] = A[g    ][2q + 8, 2q + 9]
 *   a[3] = A[g + 8][2q + 8, 2q + 9]    c[0], c[1] = C[g    ][2q, 2q + 1]
 *                                      c[2], c[3] = C[g + 8][2q, 2q + 1]
 *
 * (D as C). Every lane of the warp must call it, with the same instruction
 * (.sync.aligned): the emulator counts a lane that has returned as a fault.
 * Arithmetic: each product of two bf16 is exact in f32; the emulator adds
 * them to C in k order, each addition rounded to f32; the tensor core's
 * order and internal rounding are its own, so results agree within f32
 * rounding of the 16-term sum, not bit for bit. The instruction needs sm_80
 * or later; compiled for an older architecture, D is NaN.
 */
#ifndef PP_CUDA_MMA_BF16_CUH
#define PP_CUDA_MMA_BF16_CUH

#include <cstdint>

namespace {

__device__ __forceinline__ void pp_mma_bf16_16816(float d[4], const uint32_t a[4],
                                                  const uint32_t b[2], const float c[4])
{
#ifdef PP_CUDA_EMU
    pp_emu::mma_bf16_16816(d, a, b, c);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    /* no bf16 mma before sm_80 (a build for an older gpu_arch): NaN, which
     * the first call's check (attention_check.h) refuses, so ours run */
    (void)a, (void)b, (void)c;
    d[0] = d[1] = d[2] = d[3] = __int_as_float(0x7fffffff);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

} // namespace

#endif
