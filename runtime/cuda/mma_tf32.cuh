/*
 * mma_tf32.cuh - one warp-wide TF32 tensor-core product, D = A B + C, of the
 * shape m16n8k8 (A 16x8 row-major, B 8x8 "col", C and D 16x8 f32):
 * `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32` on the device, and
 * under the CPU emulator (PP_CUDA_EMU, tests/emu/cuda_emu.h) the emulator's
 * warp collective pp_emu::mma_tf32_1688; the rounding of an f32 to TF32
 * (`cvt.rna.tf32.f32`); and the split of an f32 into a TF32 value and a TF32
 * remainder, with which three such products give about f32's precision
 * (3xTF32: a_hi b_hi + a_hi b_lo + a_lo b_hi, the a_lo b_lo term below f32's
 * rounding; what PyTorch's fp32 attention multiplies with on sm_80 and later).
 *
 * The contract (the fragment layout) is the PTX ISA's, section 9.7.14.5.x
 * "Matrix Fragments for mma.m16n8k8" with .tf32 A and B (one element a
 * 32-bit register): with g = lane >> 2 (groupID) and q = lane % 4
 * (threadID_in_group),
 *
 *   a[0] = A[g    ][q    ]        b[0] = B[q    ][g]
 *   a[1] = A[g + 8][q    ]        b[1] = B[q + 4][g]
 *   a[2] = A[g    ][q + 4]
 *   a[3] = A[g + 8][q + 4]        c[0], c[1] = C[g    ][2q, 2q + 1]
 *                                 c[2], c[3] = C[g + 8][2q, 2q + 1]
 *
 * (D as C). A and B registers hold TF32 values as f32 bit patterns (the low
 * 13 bits zero: pp_tf32_rna's, which is what our kernels pass; the emulator
 * reads a register's upper 19 bits). Every lane of the warp must call it, with
 * the same instruction (.sync.aligned): the emulator counts a lane that has
 * returned, or one at another collective, as a fault. Arithmetic: each
 * product of two TF32 values (11 significant bits each) is exact in f32; the
 * emulator adds them to C in k order, each addition rounded to f32; the
 * tensor core's order and internal rounding are its own, so results agree
 * within f32 rounding of the 8-term sum, not bit for bit. sm_80 or later;
 * compiled for an older architecture, D is NaN.
 */
#ifndef PP_CUDA_MMA_TF32_CUH
#define PP_CUDA_MMA_TF32_CUH

#include <cstdint>
#include <cstring>

namespace {

/* x rounded to TF32 (10 explicit significand bits), to nearest with ties
 * away from zero, as the bits of an f32 whose low 13 bits are zero;
 * infinities and NaNs pass through (a NaN stays a NaN). */
__device__ __forceinline__ uint32_t pp_tf32_rna(float x)
{
#ifdef PP_CUDA_EMU
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) /* Inf, NaN: the upper bits, kept a NaN */
        return (u & 0x7fffffu) ? ((u & 0xffffe000u) | 0x00400000u) : u;
    /* ties away: add half of the dropped part's unit to the magnitude (a
     * carry into the exponent is the next binade, or infinity, as it should) */
    return (u + 0x1000u) & 0xffffe000u;
#else
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
#endif
}

__device__ __forceinline__ float pp_tf32_value(uint32_t bits)
{
#ifdef PP_CUDA_EMU
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
#else
    return __uint_as_float(bits);
#endif
}

__device__ __forceinline__ uint32_t pp_f32_bits(float x)
{
#ifdef PP_CUDA_EMU
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
#else
    return __float_as_uint(x);
#endif
}

/* The bits of the f32 with bits u rounded to TF32 by integer operations:
 * half of the dropped part's unit added to the magnitude, the low 13 bits
 * cleared (to nearest, ties away from zero, a carry into the exponent the
 * next binade or infinity): pp_tf32_rna's bits for every finite value; an
 * infinity stays itself, a NaN may become an infinity. Two integer
 * instructions instead of a conversion (with cvt.rna.tf32.f32 for the split,
 * ptxas gave attention_tf32.cu's dkv kernel 260 bytes of spills at heads of
 * 64, with these 80; which issues faster on a GPU is not measured yet); the
 * same code runs under the emulator, so its tests check this, not a model
 * of it. */
__device__ __forceinline__ uint32_t pp_tf32_round_bits(uint32_t u)
{
    return (u + 0x1000u) & 0xffffe000u;
}

/* x as hi + lo: hi = x rounded to TF32, lo = (x - hi) rounded to TF32 (the
 * difference is exact in f32), both by pp_tf32_round_bits (pp_tf32_rna's
 * bits for finite x: emu_self checks it); |x - hi - lo| <= 2^-22 |x| or
 * so. A NaN or an infinity in x gives a NaN or an infinity in hi or lo, so
 * the products are not finite either. */
__device__ __forceinline__ void pp_tf32_split(float x, uint32_t *hi, uint32_t *lo)
{
    *hi = pp_tf32_round_bits(pp_f32_bits(x));
    *lo = pp_tf32_round_bits(pp_f32_bits(x - pp_tf32_value(*hi)));
}

__device__ __forceinline__ void pp_mma_tf32_1688(float d[4], const uint32_t a[4],
                                                 const uint32_t b[2], const float c[4])
{
#ifdef PP_CUDA_EMU
    pp_emu::mma_tf32_1688(d, a, b, c);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    (void)a, (void)b, (void)c; /* no tf32 mma before sm_80: NaN */
    d[0] = d[1] = d[2] = d[3] = __int_as_float(0x7fffffff);
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

/* D = A B + C in 3xTF32 from the split fragments of f32 A and B (hi and lo
 * of each register, pp_tf32_split's): the small terms first, so that the
 * large one is added last, C + a_lo b_hi + a_hi b_lo + a_hi b_hi (CUTLASS's
 * order for its fast f32 products) */
__device__ __forceinline__ void pp_mma_3xtf32_1688(float d[4], const uint32_t a_hi[4],
                                                   const uint32_t a_lo[4],
                                                   const uint32_t b_hi[2],
                                                   const uint32_t b_lo[2], const float c[4])
{
    float t[4];
    pp_mma_tf32_1688(t, a_lo, b_hi, c);
    pp_mma_tf32_1688(t, a_hi, b_lo, t);
    pp_mma_tf32_1688(d, a_hi, b_hi, t);
}

} // namespace

#endif
