/*
 * multi.cuh - device code the multi-tensor kernels share (kernels.cu,
 * train.cu): a launch takes a list of tensors cut in tiles (kernels.h) and
 * each block finds the tensor of its tile.
 */
#ifndef PP_CUDA_MULTI_CUH
#define PP_CUDA_MULTI_CUH

#include <stdint.h>

/* The tensor of tile t: the last one whose first tile is <= t (every listed
 * tensor has at least one tile). The same for every thread of a block. */
static __device__ __forceinline__ int tile_owner(const int32_t *first_tile, int count, int32_t t)
{
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (first_tile[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

#endif
