/*
 * emu_selftest.cu - kernels that exercise the emulator itself
 * (test_emu_self.c): a block-wide sum through shared memory and
 * __syncthreads, a warp sum by shuffles (whole and partial warps), the
 * same by xor shuffles into every lane (a butterfly), a shuffle naming a lane that has returned (a fault the emulator must
 * report), the tensor cores' m16n8k16 bf16 and m16n8k8 TF32 products (every
 * lane's fragments given, its D fragment returned; lanes that return first
 * are a fault), f32 products by 3xTF32 and by one TF32 rounding, the TF32
 * rounding itself,
 * ldmatrix x4 and x4.trans from a padded shared tile (a lane returning
 * first or giving a misaligned row is a fault), cp.async's groups (what a
 * read sees before and after each wait; a misaligned copy and a copy never
 * waited for are faults), and launches out of the device's limits. Written as the
 * project's kernel files are, and compiled as they are (unchevron.py).
 */
#include <cstdint>

#include "emu_selftest.h"
#include "cp_async.cuh"
#include "ldmatrix.cuh"
#include "mma_bf16.cuh"
#include "mma_tf32.cuh"

namespace {

/* out[block] = sum of in over the block's threads, through shared memory */
__global__ void block_sum_k(const int *in, int *out)
{
    __shared__ int s[1024];
    const int t = threadIdx.x + blockDim.x * threadIdx.y;
    const int n = blockDim.x * blockDim.y;
    s[t] = in[blockIdx.x * n + t];
    __syncthreads();
    for (int half = 512; half > 0; half /= 2) {
        if (t < half && t + half < n) s[t] += s[t + half];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

/* out[warp] = sum of in over the warp's lanes, by shuffles down */
__global__ void warp_sum_k(const double *in, double *out, int width)
{
    const int t = threadIdx.x;
    double v = in[blockIdx.x * blockDim.x + t];
    for (int off = width / 2; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off, width);
    if (t % width == 0) out[(blockIdx.x * blockDim.x + t) / width] = v;
}

/* out[thread] = sum of in over the thread's segment of width lanes, in
 * every lane: a butterfly of xor shuffles */
__global__ void warp_allsum_k(const double *in, double *out, int width)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    double v = in[t];
    for (int m = width / 2; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m, width);
    out[t] = v;
}

/* lane 1 returns before the others shuffle: lane 0 reads it */
__global__ void early_return_k(float *out)
{
    if (threadIdx.x == 1) return;
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}

/* thread i's fragments: a[4i..], b[2i..], c[4i..]; d[4i..] its D fragment;
 * threads at or above `calls` return without taking part */
__global__ void mma_k(const uint32_t *a, const uint32_t *b, const float *c, float *d, int calls)
{
    const int i = threadIdx.x;
    if (i >= calls) return;
    float out[4];
    pp_mma_bf16_16816(out, a + 4 * i, b + 2 * i, c + 4 * i);
    for (int r = 0; r < 4; r++) d[4 * i + r] = out[r];
}

/* the same with pp_mma_tf32_1688 (m16n8k8) */
__global__ void mma_tf32_k(const uint32_t *a, const uint32_t *b, const float *c, float *d,
                           int calls)
{
    const int i = threadIdx.x;
    if (i >= calls) return;
    float out[4];
    pp_mma_tf32_1688(out, a + 4 * i, b + 2 * i, c + 4 * i);
    for (int r = 0; r < 4; r++) d[4 * i + r] = out[r];
}

/* thread i's f32 fragments a[4i..], b[2i..] (A and B as f32 values) split
 * and multiplied in 3xTF32 (split 1) or rounded once to TF32 (split 0) */
__global__ void mma_f32_k(const float *a, const float *b, const float *c, float *d, int split)
{
    const int i = threadIdx.x;
    uint32_t ah[4], al[4], bh[2], bl[2];
    for (int r = 0; r < 4; r++) pp_tf32_split(a[4 * i + r], &ah[r], &al[r]);
    for (int r = 0; r < 2; r++) pp_tf32_split(b[2 * i + r], &bh[r], &bl[r]);
    float out[4];
    if (split)
        pp_mma_3xtf32_1688(out, ah, al, bh, bl, c + 4 * i);
    else
        pp_mma_tf32_1688(out, ah, bh, c + 4 * i);
    for (int r = 0; r < 4; r++) d[4 * i + r] = out[r];
}

/* out[i] = pp_tf32_rna(in[i]) */
__global__ void tf32_rna_k(const float *in, uint32_t *out, int n)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = pp_tf32_rna(in[i]);
}

/* pp_tf32_split(in[i], &hi[i], &lo[i]) */
__global__ void tf32_split_k(const float *in, uint32_t *hi, uint32_t *lo, int n)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x) pp_tf32_split(in[i], &hi[i], &lo[i]);
}

/* ldmatrix x4 (trans: .trans) of the four 8x8 matrices src[64 j..] (row-major)
 * staged in shared memory at a pitch of 24 elements; out[4 lane + j] the
 * lane's register j; lane `absent` returns first, lane `skewed` gives its row
 * 2 bytes on */
__global__ void ldmatrix_k(const uint16_t *src, int trans, int absent, int skewed, uint32_t *out)
{
    constexpr int LD = 24;
    alignas(16) __shared__ uint16_t s[32 * LD];
    const int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) s[i / 8 * LD + i % 8] = src[i];
    __syncthreads();
    if (l == absent) return;
    const uint16_t *row = s + l * LD + (l == skewed ? 1 : 0); /* row l % 8 of matrix l / 8 */
    uint32_t r[4];
    if (trans)
        pp_ldmatrix_x4<true>(r, row);
    else
        pp_ldmatrix_x4<false>(r, row);
    for (int j = 0; j < 4; j++) out[4 * l + j] = r[j];
}

/* each thread copies its 3 rows of 16 bytes, src[12 t..], into shared memory
 * (each row one cp.async group) over words 0xdead0000 + i, and records its 12
 * words into out[48 t + 12 k..] at k = 0: before any wait, 1: after a
 * __syncthreads, 2: after wait_group 1, 3: after wait_group 0 (skipped when
 * mode is 2); mode 1 gives thread 3's first copy a source 4 bytes on */
__global__ void cp_async_k(const uint32_t *src, uint32_t *out, int mode)
{
    alignas(16) __shared__ uint32_t s[32 * 12];
    const int t = threadIdx.x;
    uint32_t *mine = s + 12 * t, *rec = out + 48 * t;
    for (int i = 0; i < 12; i++) mine[i] = 0xdead0000u + (uint32_t)i;
    __syncthreads();
    for (int g = 0; g < 3; g++) {
        pp_cp_async_16(mine + 4 * g, src + 12 * t + 4 * g + (mode == 1 && t == 3 && g == 0));
        pp_cp_async_commit();
    }
    for (int i = 0; i < 12; i++) rec[i] = mine[i];
    __syncthreads();
    for (int i = 0; i < 12; i++) rec[12 + i] = mine[i];
    pp_cp_async_wait<1>();
    for (int i = 0; i < 12; i++) rec[24 + i] = mine[i];
    if (mode != 2) pp_cp_async_wait<0>();
    for (int i = 0; i < 12; i++) rec[36 + i] = mine[i];
}

__global__ void nothing_k() {}

} // namespace

extern "C" {

cudaError_t pp_emu_self_block_sum(int blocks, int bx, int by, const int *in, int *out)
{
    block_sum_k<<<blocks, dim3(bx, by)>>>(in, out);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_warp_sum(int blocks, int threads, int width, const double *in,
                                 double *out)
{
    warp_sum_k<<<blocks, threads>>>(in, out, width);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_warp_allsum(int blocks, int threads, int width, const double *in,
                                    double *out)
{
    warp_allsum_k<<<blocks, threads>>>(in, out, width);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_early_return(float *out)
{
    early_return_k<<<1, 32>>>(out);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_mma(int threads, int calls, const uint32_t *a, const uint32_t *b,
                            const float *c, float *d)
{
    mma_k<<<1, threads>>>(a, b, c, d, calls);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_mma_tf32(int threads, int calls, const uint32_t *a, const uint32_t *b,
                                 const float *c, float *d)
{
    mma_tf32_k<<<1, threads>>>(a, b, c, d, calls);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_mma_f32(const float *a, const float *b, const float *c, float *d,
                                int split)
{
    mma_f32_k<<<1, 32>>>(a, b, c, d, split);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_tf32_rna(const float *in, uint32_t *out, int n)
{
    tf32_rna_k<<<1, 32>>>(in, out, n);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_tf32_split(const float *in, uint32_t *hi, uint32_t *lo, int n)
{
    tf32_split_k<<<1, 32>>>(in, hi, lo, n);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_ldmatrix(const uint16_t *src, int trans, int absent, int skewed,
                                  uint32_t *out)
{
    ldmatrix_k<<<1, 32>>>(src, trans, absent, skewed, out);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_cp_async(const uint32_t *src, uint32_t *out, int mode)
{
    cp_async_k<<<1, 32>>>(src, out, mode);
    return cudaGetLastError();
}

cudaError_t pp_emu_self_launch(unsigned gx, unsigned gy, unsigned bx, unsigned by, size_t smem)
{
    nothing_k<<<dim3(gx, gy), dim3(bx, by), smem>>>();
    return cudaGetLastError();
}

} // extern "C"
