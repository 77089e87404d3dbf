/*
 * cp_async.cuh - copies from global to shared memory that run while the
 * thread goes on: `cp.async.cg.shared.global [dst], [src], 16` (16 bytes,
 * cached in L2 only), `cp.async.commit_group` and `cp.async.wait_group N`
 * on the device; under the CPU emulator (PP_CUDA_EMU, tests/emu/cuda_emu.h)
 * its pp_emu::cp_async_* functions.
 *
 * The contract is the PTX ISA's (cp.async, cp.async.commit_group,
 * cp.async.wait_group): a thread's copies issued since its last commit form
 * one group at the commit; wait_group N returns when at most the N most
 * recently committed groups of the thread are pending, all older ones done
 * (N = 0: every committed group). Until then the destination holds
 * anything: a read of it before the wait is a bug. The wait completes the
 * calling thread's copies only: the others' copies become visible to it
 * after their own waits and a __syncthreads; a __syncthreads alone completes
 * nothing. Both addresses must be 16-byte aligned. The emulator performs a
 * copy only at the wait that covers its group (so a missing wait shows as
 * the old bytes), and counts as a fault a misaligned address and a copy
 * still pending when its thread returns. Compiled for a GPU before sm_80
 * (no cp.async), the copy is a plain 16-byte load and store.
 */
#ifndef PP_CUDA_CP_ASYNC_CUH
#define PP_CUDA_CP_ASYNC_CUH

namespace {

/* dst[0..15] = src[0..15] (bytes), shared <- global, both 16-byte aligned */
__device__ __forceinline__ void pp_cp_async_16(void *dst, const void *src)
{
#ifdef PP_CUDA_EMU
    pp_emu::cp_async_16(dst, src);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    *static_cast<uint4 *>(dst) = *static_cast<const uint4 *>(src);
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src) : "memory");
#endif
}

/* the copies issued since the last commit become one group */
__device__ __forceinline__ void pp_cp_async_commit()
{
#ifdef PP_CUDA_EMU
    pp_emu::cp_async_commit();
#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* returns when at most the N newest committed groups are pending */
template <int N> __device__ __forceinline__ void pp_cp_async_wait()
{
#ifdef PP_CUDA_EMU
    pp_emu::cp_async_wait(N);
#elif !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

} // namespace

#endif
