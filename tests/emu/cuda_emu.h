/*
 * cuda_emu.h - our CUDA kernels run on the CPU, for tests on machines
 * without a GPU. A kernel file (runtime/cuda, a .cu) passes through
 * unchevron.py, which turns each launch `k<<<grid, block, smem, stream>>>(a...)`
 * into pp_emu::launch(pp_emu::config(grid, block, smem, stream), CALL_k, a...)
 * (CALL_k: a lambda calling k),
 * and is compiled as C++ with this header included first.
 *
 * A launch runs synchronously: the blocks one after another (in reverse
 * order), each block's threads as fibers on the calling thread
 * (cuda_emu.cc), so that __syncthreads and the warp shuffles are real
 * rendezvous and __shared__ (made static here) is the running block's; the
 * tensor cores' m16n8k16 bf16 product (mma_bf16.cuh) and ldmatrix
 * (ldmatrix.cuh) are warp rendezvous too, on the PTX ISA's fragment layouts;
 * cp.async (cp_async.cuh) copies are held per thread until a wait_group
 * that covers them, so that a kernel reading its tile before the wait
 * sees the old bytes.
 * Device memory is host memory. Besides the kernels' results, the emulator
 * checks what a GPU would refuse or leave undefined: a launch configuration
 * out of the device's limits (cudaErrorInvalidConfiguration from
 * cudaGetLastError, as the runtime reports it), a shuffle whose mask names a
 * lane that has returned or is not in the block, an mma.sync or ldmatrix
 * without its whole warp, an ldmatrix row or cp.async address off a 16-byte
 * boundary, a cp.async copy still pending when its thread returns (reported
 * on stderr and counted, pp_emu::faults()), and a
 * rendezvous some threads never reach (the
 * waiting threads named, then abort). Built with AddressSanitizer, every
 * access is checked against its allocation.
 *
 * Floating point is the host's: f32 arithmetic in IEEE single precision
 * without contraction into fused multiply-adds (nvcc contracts where it
 * can), so a kernel's results agree with the GPU's within f32 rounding, not
 * bit for bit. The suite's _fma tests build some kernels again as nvcc
 * does, contracting (PP_EMU_CONTRACT, x86-64 hosts with FMA): a kernel
 * that claims the CPU's bits must then round each operation on its own
 * (__fmul_rn and kin, kept apart from contraction below).
 */
#ifndef PP_TESTS_CUDA_EMU_H
#define PP_TESTS_CUDA_EMU_H

#include <cuda_runtime.h> /* host types only: dim3, float4, uint4, cudaError_t */

#include <cmath> /* the kernels' sqrt, exp: the host's */
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>

namespace pp_emu {

/* the calling CPU thread's CUDA thread and block */
struct ids {
    uint3 thread, block;
    dim3 block_dim, grid_dim;
};
extern thread_local ids here;

struct config {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    config(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0)
        : grid(g), block(b), smem(s), stream(st)
    {
    }
};

/* runs body once per thread of every block of c, blocks in order; a
 * configuration the device would refuse sets the last error instead */
void run(const config &c, const std::function<void()> &body);

/* call: a lambda calling the kernel (unchevron.py writes it), so that a
 * kernel template's arguments are deduced from the launch's, as nvcc does;
 * the arguments are copied once, as a launch copies them */
template <typename K, typename... A> void launch(const config &c, K call, A... a)
{
    const std::function<void()> body = [call, args = std::make_tuple(a...)]() {
        std::apply(call, args);
    };
    run(c, body);
}

cudaError_t last_error(); /* cudaGetLastError: returns and clears */
uint64_t now_ns();        /* %globaltimer: the host's monotonic clock */
void sync_block();        /* __syncthreads */
/* __shfl_down_sync's exchange: every lane of mask offers bits and receives
 * those of the lane delta above it within its segment of width lanes (its
 * own where that lane is past the segment) */
uint64_t shuffle_down(unsigned mask, uint64_t bits, unsigned delta, int width);
/* __shfl_xor_sync's: those of lane (own lane ^ lane_mask), own bits where that
 * lane lies in a later segment of width lanes */
uint64_t shuffle_xor(unsigned mask, uint64_t bits, unsigned lane_mask, int width);
/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (runtime/cuda/mma_bf16.cuh
 * states the fragment layout): a rendezvous of the warp's 32 lanes, each
 * offering its fragments of A, B and C and receiving its fragment of
 * D = A B + C (bf16 products exact, added to C in k order in f32); a lane
 * of the warp that has returned or is not in the block, or that meets the
 * others at a shuffle instead, is a fault (its fragments read as zero) */
void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
/* mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (runtime/cuda/mma_tf32.cuh
 * states the fragment layout): the same rendezvous, A and B read as TF32
 * (each register's upper 19 bits), their products exact, added to C in k
 * order in f32; a lane at a bf16 mma meanwhile is at another collective */
void mma_tf32_1688(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
/* ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16 (runtime/cuda/ldmatrix.cuh
 * states the layout): a rendezvous of the warp's 32 lanes, lanes below
 * 8 num each offering the 16-byte row at row (row i % 8 of matrix i / 8,
 * read at its arrival), each lane receiving r[0..num-1]; a lane absent or at
 * another collective, or a row address off a 16-byte boundary, is a fault
 * (the row reads as zero) */
void ldmatrix(uint32_t *r, int num, bool trans, const void *row);
/* cp.async.cg.shared.global 16 bytes (runtime/cuda/cp_async.cuh): recorded in
 * the calling thread's open group, performed only by a wait that covers
 * it; an address off a 16-byte boundary is a fault (nothing copied) */
void cp_async_16(void *dst, const void *src);
void cp_async_commit();   /* the thread's open group becomes its newest committed */
void cp_async_wait(int n); /* performs the thread's committed groups but the n newest */
long faults(); /* mask violations, absent lanes of a collective, misalignments so far */

template <typename T, typename F> T shfl(F exchange, unsigned mask, T v, unsigned arg, int width)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffled type");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    bits = exchange(mask, bits, arg, width);
    T r;
    std::memcpy(&r, &bits, sizeof r);
    return r;
}

} // namespace pp_emu

/* kernel files test it where a device instruction has no host spelling */
#define PP_CUDA_EMU 1

/* the device's builtins and qualifiers, for the host compiler */
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
#define threadIdx (pp_emu::here.thread)
#define blockIdx (pp_emu::here.block)
#define blockDim (pp_emu::here.block_dim)
#define gridDim (pp_emu::here.grid_dim)
#define cudaGetLastError pp_emu::last_error

inline void __syncthreads() { pp_emu::sync_block(); }
/* a block's threads are fibers of one CPU thread, switched only at a
 * rendezvous, and blocks run one after another: a read-modify-write is atomic */
inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    const unsigned old = *p;
    *p = old + v;
    return old;
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return pp_emu::shfl(pp_emu::shuffle_down, mask, v, delta, width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, unsigned lane_mask, int width = 32)
{
    return pp_emu::shfl(pp_emu::shuffle_xor, mask, v, lane_mask, width);
}
inline float __uint_as_float(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
inline uint32_t __float_as_uint(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
/* round-to-nearest single-precision operations, never contracted (under
 * PP_EMU_CONTRACT each result passes through memory, where no FMA reaches) */
#ifdef PP_EMU_CONTRACT
#define PP_EMU_ROUNDED(T, expr)                                                                    \
    do {                                                                                           \
        volatile T r_ = (expr);                                                                    \
        return r_;                                                                                 \
    } while (0)
#else
#define PP_EMU_ROUNDED(T, expr) return (expr)
#endif
inline float __fmul_rn(float a, float b) { PP_EMU_ROUNDED(float, a * b); }
inline float __fadd_rn(float a, float b) { PP_EMU_ROUNDED(float, a + b); }
inline float __fsub_rn(float a, float b) { PP_EMU_ROUNDED(float, a - b); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
/* and double precision */
inline double __dmul_rn(double a, double b) { PP_EMU_ROUNDED(double, a * b); }
inline double __dadd_rn(double a, double b) { PP_EMU_ROUNDED(double, a + b); }
inline double __dsub_rn(double a, double b) { PP_EMU_ROUNDED(double, a - b); }
inline double __ddiv_rn(double a, double b) { return a / b; }

#endif
