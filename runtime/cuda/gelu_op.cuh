/*
 * gelu_op.cuh - GELU's arithmetic on the device, shared by the f32 elementwise
 * kernels (kernels.cu) and the mixed-precision ones (gelu.cu): the tanh
 * approximation through 1/2 (1 + tanh u) = 1 / (1 + exp(-2u)),
 * runtime/cpu/gelu.c's formula (one expf, no cancellation near 0), in f32,
 * each operation rounded on its own in C's order, as the CPU computes it
 * (__fmul_rn and kin: nvcc contracts none of them into an FMA). With the
 * host's expf (the emulator) that is the CPU's bits; a GPU's expf differs
 * from the host's by an ulp or two.
 */
#ifndef PP_CUDA_GELU_OP_CUH
#define PP_CUDA_GELU_OP_CUH

namespace {

constexpr float k_sqrt_2_over_pi = 0.7978845608028654f;
constexpr float k_cubic = 0.044715f;

/* u = sqrt(2 / pi) (v + 0.044715 v^3) */
__device__ __forceinline__ float gelu_u(float v)
{
    return __fmul_rn(k_sqrt_2_over_pi,
                     __fadd_rn(v, __fmul_rn(__fmul_rn(__fmul_rn(k_cubic, v), v), v)));
}

/* s = 1 / (1 + exp(-2u)) */
__device__ __forceinline__ float gelu_s(float u)
{
    return 1.0f / __fadd_rn(1.0f, expf(__fmul_rn(-2.0f, u)));
}

struct gelu_op { /* v -> GELU(v) = v s (the second operand unused) */
    __device__ float operator()(float v, float) const
    {
        return v / __fadd_rn(1.0f, expf(__fmul_rn(-2.0f, gelu_u(v))));
    }
};

struct gelu_backward_op { /* (v, dy) -> dy (s + 2 v s (1 - s) u') */
    __device__ float operator()(float v, float dy) const
    {
        const float s = gelu_s(gelu_u(v));
        const float du = __fmul_rn(k_sqrt_2_over_pi,
                                   __fadd_rn(1.0f, __fmul_rn(__fmul_rn(3.0f * k_cubic, v), v)));
        const float t = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(2.0f, v), s),
                                            __fsub_rn(1.0f, s)),
                                  du);
        return __fmul_rn(dy, __fadd_rn(s, t));
    }
};

} // namespace

#endif
