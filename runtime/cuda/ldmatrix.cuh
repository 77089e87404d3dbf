/*
 * ldmatrix.cuh - a warp's collective load of four 8x8 matrices of 16-bit
 * elements from shared memory into registers, in the fragment layout of
 * mma.sync (mma_bf16.cuh): `ldmatrix.sync.aligned.m8n8.x4.shared.b16` and
 * its `.trans` form on the device, and under the CPU emulator (PP_CUDA_EMU,
 * tests/emu/cuda_emu.h) the warp collective pp_emu::ldmatrix.
 *
 * The contract is the PTX ISA's, "Warp-level matrix load instruction:
 * ldmatrix" (its table of the threads that give addresses and its figure of
 * one 8x8 matrix's fragment): with .x4, lane i gives the shared-memory
 * address of row i % 8 of matrix i / 8 (with .x2 lanes 0..15 give them,
 * with .x1 lanes 0..7; the others' are ignored), each row 8 consecutive
 * b16 elements (16 bytes) at a 16-byte aligned address. With g = lane >> 2
 * and q = lane % 4, lane's register r[j] holds, of matrix j, the element
 * of the smaller column in its low 16 bits:
 *
 *   without .trans   r[j] = M_j[g][2q],  M_j[g][2q + 1]
 *   with .trans      r[j] = M_j[2q][g],  M_j[2q + 1][g]   (row g of M_j^T)
 *
 * which is mma's B fragment of a matrix stored with n down the rows and k
 * along them (without .trans: b[0] from k 0..7, b[1] from k 8..15), or
 * stored with k down the rows (.trans). Every lane of the warp must call it
 * (.sync.aligned): the emulator counts a lane that has returned, or that is
 * at another collective, as a fault, and a row address off a 16-byte
 * boundary as a fault (the GPU's result is undefined). The instruction
 * needs sm_75 or later; compiled for a GPU without bf16 mma (before sm_80)
 * it gives zeros, as mma_bf16.cuh gives NaN there.
 */
#ifndef PP_CUDA_LDMATRIX_CUH
#define PP_CUDA_LDMATRIX_CUH

#include <cstdint>

namespace {

/* r[0..3] = matrices 0..3 (rows given by lanes 8j..8j+7: row, its address),
 * each transposed with TRANS (.trans) */
template <bool TRANS> __device__ __forceinline__ void pp_ldmatrix_x4(uint32_t r[4], const void *row)
{
#ifdef PP_CUDA_EMU
    pp_emu::ldmatrix(r, 4, TRANS, row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    (void)row;
    r[0] = r[1] = r[2] = r[3] = 0u;
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#endif
}

} // namespace

#endif
