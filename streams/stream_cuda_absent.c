/* stream_cuda_absent.c - the CUDA stream implementation in builds without CUDA. */
#include "streams/stream_impl.h"

const pp_stream_impl *pp_stream_impl_cuda(void)
{
    return NULL;
}
