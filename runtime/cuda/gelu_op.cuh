/*
 * gelu_op.cuh - GELU's arithmetic on the device, shared by the f32 elementwise
 * kernels (kernels.cu) and the mixed-precision ones (gelu.cu): the tanh
 * approximation through 1/2 (1 + tanh u) = 1 / (1 + exp(-2u)),
 * runtime/cpu/gelu.c's formula (one expf, no cancellation near 0), in f32.
 */
#ifndef PP_CUDA_GELU_OP_CUH
#define PP_CUDA_GELU_OP_CUH

namespace {

constexpr float k_sqrt_2_over_pi = 0.7978845608028654f;
constexpr float k_cubic = 0.044715f;

struct gelu_op { /* v -> GELU(v) (the second operand unused) */
    __device__ float operator()(float v, float) const
    {
        const float u = k_sqrt_2_over_pi * (v + k_cubic * v * v * v);
        return v / (1.0f + expf(-2.0f * u));
    }
};

struct gelu_backward_op { /* (v, dy) -> dy (s + 2 v s (1 - s) u') */
    __device__ float operator()(float v, float dy) const
    {
        const float u = k_sqrt_2_over_pi * (v + k_cubic * v * v * v);
        const float s = 1.0f / (1.0f + expf(-2.0f * u));
        const float du = k_sqrt_2_over_pi * (1.0f + 3.0f * k_cubic * v * v);
        return dy * (s + 2.0f * v * s * (1.0f - s) * du);
    }
};

} // namespace

#endif
