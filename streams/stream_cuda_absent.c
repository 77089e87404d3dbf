/* stream_cuda_absent.c - the CUDA stream implementation in builds without CUDA. */
#include "streams/stream_impl.h"

const pp_stream_ops *pp_stream_cuda_ops(void)
{
    return NULL;
}
