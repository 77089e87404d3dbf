/* absent.c - the CUDA backend's entry points in a build without CUDA. */
#include "runtime/core/backend.h"

const pp_backend_ops *pp_backend_cuda(void)
{
    return NULL;
}

int pp_backend_cuda_device_count(void)
{
    return 0;
}
