/*
 * layernorm.cu - layer normalisation over rows of features (ops.h:
 * pp_layernorm_forward / _backward), runtime/cpu/layernorm.c's arithmetic:
 *   forward   one warp per row: the mean and the biased variance in double
 *             (each lane's elements, then a butterfly of shuffles), rstd =
 *             1 / sqrt(var + eps); y = (x - mean) rstd gamma + beta in
 *             double, rounded once; mean and rstd kept as f32. With a
 *             residual add (pp_add_layernorm_forward) the first pass forms
 *             x = a + b in f32 (pp_add's sum) and writes it, the later
 *             passes read it back (each lane its own elements).
 *   backward  one block per chunk of PP_CUDA_LN_CHUNK rows. Its warps take
 *             the rows: xhat = (x - mean) rstd from the kept statistics, g =
 *             dy gamma, dx = (g - mean(g) - xhat mean(g xhat)) rstd (row means
 *             in double). Then its threads take the columns: the chunk's sums
 *             of dy xhat and dy in double, rows in order, into part; the
 *             chunks are added in chunk order by colsum.cu's parts_add. With
 *             a residual gradient (pp_layernorm_backward_add) dx gets it
 *             added in f32 as it is written. No float atomics: the same bits
 *             on every run.
 * Rows are read with one lane per element (coalesced, any c and alignment);
 * where a pass writes as it reads (the residual sum, y, dx) each lane loads
 * its next RUN elements before it uses the first (bf16.cuh's strided_run),
 * in the same order: the bits of one at a time.
 * The kernels are templates on the activations' element types (f32 or bf16:
 * the bf16 entries of mixed precision): bf16 elements are widened exactly,
 * the arithmetic is the f32 kernels', and each bf16 output is the f32 value
 * rounded once; a bf16 residual sum is rounded before it is normalised and
 * a bf16 dx before dres is added (and again after), as the f32 stand-ins
 * of runtime/core/ops_transformer.c compose those ops.
 */
#include "transformer.h"

#include <cmath>

#include "bf16.cuh"
#include "kernels.h"

namespace {

constexpr unsigned FULL = 0xffffffffu;
constexpr int WARP = 32;

/* the sum over the warp's lanes, in every lane */
__device__ __forceinline__ double warp_allsum(double v)
{
    for (int m = WARP / 2; m > 0; m /= 2) v += __shfl_xor_sync(FULL, v, m);
    return v;
}

/* loads in flight a lane: the forward's 8 (48 registers, as before); the
 * backward's 4, three operands each (more would cost it blocks per SM) */
constexpr int RUN = 8, RUN_BACK = 4;

/* x (rows, c), or x = a + b written to sum (add not NULL; sum may be a or add) */
template <class TX, class TY>
__global__ void ln_forward_k(int64_t rows, int c, float eps, const TX *a, const TX *add,
                             TX *sum, const float *gamma, const float *beta, TY *y,
                             float *mean, float *rstd)
{
    const int lane = threadIdx.x % WARP;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / WARP);
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / WARP; r < rows;
         r += warps) {
        double s = 0.0;
        if (add) {
            const TX *ar = a + r * c, *br = add + r * c;
            TX *sr = sum + r * c;
            for (int i0 = lane; i0 < c; i0 += RUN * WARP) {
                float av[RUN], bv[RUN];
                strided_run(ar, c, i0, WARP, av);
                strided_run(br, c, i0, WARP, bv);
                for (int u = 0; u < RUN && i0 + u * WARP < c; u++) {
                    const float v = rounded_as(sr, av[u] + bv[u]);
                    st_f32(sr, i0 + u * WARP, v);
                    s += (double)v;
                }
            }
        } else {
            for (int i = lane; i < c; i += WARP) s += (double)ld_f32(a, r * c + i);
        }
        const TX *xr = (add ? sum : a) + r * c; /* this lane's elements, as written */
        const double mu = warp_allsum(s) / c;
        double q = 0.0;
        for (int i = lane; i < c; i += WARP) {
            const double d = (double)ld_f32(xr, i) - mu;
            q += d * d;
        }
        const double rs = 1.0 / sqrt(warp_allsum(q) / c + (double)eps);
        TY *yr = y + r * c;
        for (int i0 = lane; i0 < c; i0 += RUN * WARP) {
            float xv[RUN];
            strided_run(xr, c, i0, WARP, xv);
            for (int u = 0; u < RUN && i0 + u * WARP < c; u++) {
                const int i = i0 + u * WARP;
                double v = ((double)xv[u] - mu) * rs * (double)gamma[i];
                if (beta) v += (double)beta[i];
                st_f32(yr, i, (float)v);
            }
        }
        if (lane == 0) {
            mean[r] = (float)mu;
            rstd[r] = (float)rs;
        }
    }
}

template <class TX, class TG, class TD>
__global__ void ln_backward_k(int64_t rows, int c, const TX *x, const TG *dy,
                              const float *gamma, const float *mean, const float *rstd,
                              const TD *dres, TD *dx, double *part)
{
    const int64_t k = blockIdx.x, r0 = k * PP_CUDA_LN_CHUNK;
    const int64_t r1 = rows - r0 < PP_CUDA_LN_CHUNK ? rows : r0 + PP_CUDA_LN_CHUNK;
    const int lane = threadIdx.x % WARP, warps = blockDim.x / WARP;
    for (int64_t r = r0 + threadIdx.x / WARP; r < r1; r += warps) {
        const TX *xr = x + r * c;
        const TG *gr = dy + r * c;
        const double mu = mean[r], rs = rstd[r];
        double sg = 0.0, sgx = 0.0;
        for (int i = lane; i < c; i += WARP) {
            const double g = (double)ld_f32(gr, i) * (double)gamma[i];
            sg += g;
            sgx += g * (((double)ld_f32(xr, i) - mu) * rs);
        }
        const double mg = warp_allsum(sg) / c, mgx = warp_allsum(sgx) / c;
        TD *dxr = dx + r * c;
        const TD *rr = dres ? dres + r * c : nullptr;
        for (int i0 = lane; i0 < c; i0 += RUN_BACK * WARP) {
            float xv[RUN_BACK], gv[RUN_BACK], rv[RUN_BACK];
            strided_run(xr, c, i0, WARP, xv);
            strided_run(gr, c, i0, WARP, gv);
            if (rr) strided_run(rr, c, i0, WARP, rv);
            for (int u = 0; u < RUN_BACK && i0 + u * WARP < c; u++) {
                const int i = i0 + u * WARP;
                const double xhat = ((double)xv[u] - mu) * rs;
                const double g = (double)gv[u] * (double)gamma[i];
                const float v = (float)((g - mg - xhat * mgx) * rs);
                st_f32(dxr, i, rr ? rounded_as(dxr, v) + rv[u] : v);
            }
        }
    }
    double *pg = part + k * 2 * c, *pb = pg + c;
    for (int i = threadIdx.x; i < c; i += blockDim.x) {
        double ag = 0.0, ab = 0.0;
        for (int64_t r = r0; r < r1; r++) {
            const double g = (double)ld_f32(dy, r * c + i);
            ag += g * (((double)ld_f32(x, r * c + i) - (double)mean[r]) * (double)rstd[r]);
            ab += g;
        }
        pg[i] = ag;
        pb[i] = ab;
    }
}

template <class TX, class TY>
cudaError_t ln_forward(cudaStream_t s, unsigned max_grid, int64_t rows, int c, float eps,
                       const void *x, const void *add, void *sum, const float *gamma,
                       const float *beta, void *y, float *mean, float *rstd)
{
    if (rows <= 0) return cudaSuccess;
    const int64_t per_block = PP_CUDA_BLOCK / WARP;
    int64_t grid = (rows + per_block - 1) / per_block;
    if (grid > (int64_t)max_grid) grid = max_grid;
    ln_forward_k<TX, TY><<<(unsigned)grid, PP_CUDA_BLOCK, 0, s>>>(
        rows, c, eps, static_cast<const TX *>(x), static_cast<const TX *>(add),
        static_cast<TX *>(sum), gamma, beta, static_cast<TY *>(y), mean, rstd);
    return cudaGetLastError();
}

template <class TX, class TG, class TD>
cudaError_t ln_backward(cudaStream_t s, unsigned max_grid, int64_t rows, int c, const void *x,
                        const void *dy, const float *gamma, const float *mean, const float *rstd,
                        const void *dres, void *dx, double *part, float *dgamma, float *dbeta)
{
    if (rows <= 0 || c <= 0) return cudaSuccess;
    const int64_t chunks = pp_cuda_layernorm_chunks(rows);
    if (chunks > 2147483647) return cudaErrorInvalidValue;
    ln_backward_k<TX, TG, TD><<<(unsigned)chunks, PP_CUDA_BLOCK, 0, s>>>(
        rows, c, static_cast<const TX *>(x), static_cast<const TG *>(dy), gamma, mean, rstd,
        static_cast<const TD *>(dres), static_cast<TD *>(dx), part);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    return pp_cuda_launch_parts_add(s, max_grid, chunks, 2 * (int64_t)c, c, part, dgamma, dbeta);
}

/* the backward with dx of type TD, the other operands' types chosen at run time */
template <class TD>
cudaError_t ln_backward_dx(cudaStream_t s, unsigned max_grid, int64_t rows, int c,
                           const void *x, bool x_bf16, const void *dy, bool dy_bf16,
                           const float *gamma, const float *mean, const float *rstd,
                           const void *dres, void *dx, double *part, float *dgamma,
                           float *dbeta)
{
    if (x_bf16)
        return dy_bf16 ? ln_backward<uint16_t, uint16_t, TD>(s, max_grid, rows, c, x, dy, gamma,
                                                             mean, rstd, dres, dx, part, dgamma,
                                                             dbeta)
                       : ln_backward<uint16_t, float, TD>(s, max_grid, rows, c, x, dy, gamma,
                                                          mean, rstd, dres, dx, part, dgamma,
                                                          dbeta);
    return dy_bf16 ? ln_backward<float, uint16_t, TD>(s, max_grid, rows, c, x, dy, gamma, mean,
                                                      rstd, dres, dx, part, dgamma, dbeta)
                   : ln_backward<float, float, TD>(s, max_grid, rows, c, x, dy, gamma, mean,
                                                   rstd, dres, dx, part, dgamma, dbeta);
}

} // namespace

extern "C" {

int64_t pp_cuda_layernorm_chunks(int64_t rows)
{
    const int64_t k = (rows + PP_CUDA_LN_CHUNK - 1) / PP_CUDA_LN_CHUNK;
    return k > 0 ? k : 1;
}

cudaError_t pp_cuda_launch_layernorm_forward(cudaStream_t s, unsigned max_grid, int64_t rows,
                                             int c, float eps, const float *x, const float *add,
                                             float *sum, const float *gamma, const float *beta,
                                             float *y, float *mean, float *rstd)
{
    return ln_forward<float, float>(s, max_grid, rows, c, eps, x, add, sum, gamma, beta, y,
                                    mean, rstd);
}

cudaError_t pp_cuda_launch_layernorm_forward_mixed(cudaStream_t s, unsigned max_grid,
                                                   int64_t rows, int c, float eps, bool x_bf16,
                                                   const void *x, const void *add, void *sum,
                                                   const float *gamma, const float *beta,
                                                   bool y_bf16, void *y, float *mean,
                                                   float *rstd)
{
    if (x_bf16)
        return y_bf16 ? ln_forward<uint16_t, uint16_t>(s, max_grid, rows, c, eps, x, add, sum,
                                                       gamma, beta, y, mean, rstd)
                      : ln_forward<uint16_t, float>(s, max_grid, rows, c, eps, x, add, sum, gamma,
                                                    beta, y, mean, rstd);
    return y_bf16 ? ln_forward<float, uint16_t>(s, max_grid, rows, c, eps, x, add, sum, gamma,
                                                beta, y, mean, rstd)
                  : ln_forward<float, float>(s, max_grid, rows, c, eps, x, add, sum, gamma, beta,
                                             y, mean, rstd);
}

cudaError_t pp_cuda_launch_layernorm_backward(cudaStream_t s, unsigned max_grid, int64_t rows,
                                              int c, const float *x, const float *dy,
                                              const float *gamma, const float *mean,
                                              const float *rstd, const float *dres, float *dx,
                                              double *part, float *dgamma, float *dbeta)
{
    return ln_backward<float, float, float>(s, max_grid, rows, c, x, dy, gamma, mean, rstd, dres,
                                            dx, part, dgamma, dbeta);
}

cudaError_t pp_cuda_launch_layernorm_backward_mixed(cudaStream_t s, unsigned max_grid,
                                                    int64_t rows, int c, bool x_bf16,
                                                    const void *x, bool dy_bf16, const void *dy,
                                                    const float *gamma, const float *mean,
                                                    const float *rstd, bool dx_bf16,
                                                    const void *dres, void *dx, double *part,
                                                    float *dgamma, float *dbeta)
{
    return dx_bf16 ? ln_backward_dx<uint16_t>(s, max_grid, rows, c, x, x_bf16, dy, dy_bf16, gamma,
                                              mean, rstd, dres, dx, part, dgamma, dbeta)
                   : ln_backward_dx<float>(s, max_grid, rows, c, x, x_bf16, dy, dy_bf16, gamma,
                                           mean, rstd, dres, dx, part, dgamma, dbeta);
}

} // extern "C"
