/* nccl_libs.c - NCCL opened on its first use (runtime/core/lazy_lib.h).
 *
 * As cuBLAS (runtime/cuda/libs.c): nccl.c calls NCCL's functions by their own
 * names, and these definitions (checked against nccl.h's declarations) open
 * the library at the first call, when a job of CUDA replicas sets up its
 * communicators, and pass every call on; a process without one never maps
 * NCCL (220 MB). Where the library or a symbol is missing, every call returns
 * ncclSystemError and ncclGetErrorString says what was missing, which nccl.c's
 * errors print with the rank and device. */
#include <cuda_runtime.h>
#include <string.h>

/* nccl.h's prototypes have no parameters where they take none */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "runtime/core/lazy_lib.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* X(name, (parameters), (arguments)), each returning ncclResult_t */
#define NCCL_FNS(X)                                                                              \
    X(ncclGetUniqueId, (ncclUniqueId * id), (id))                                                \
    X(ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank),             \
      (comm, nranks, id, rank))                                                                  \
    X(ncclCommDestroy, (ncclComm_t comm), (comm))                                                \
    X(ncclCommAbort, (ncclComm_t comm), (comm))                                                  \
    X(ncclGroupStart, (void), ())                                                                \
    X(ncclGroupEnd, (void), ())                                                                  \
    X(ncclAllReduce,                                                                             \
      (const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,          \
       ncclComm_t comm, cudaStream_t stream),                                                    \
      (send, recv, count, type, op, comm, stream))                                               \
    X(ncclSend,                                                                                  \
      (const void *send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,           \
       cudaStream_t stream),                                                                     \
      (send, count, type, peer, comm, stream))                                                   \
    X(ncclRecv,                                                                                  \
      (void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,                 \
       cudaStream_t stream),                                                                     \
      (recv, count, type, peer, comm, stream))

#define NAME(f, p, a) #f,
#define INDEX(f, p, a) I_##f,
enum { NCCL_FNS(INDEX) I_ncclGetErrorString, N_NCCL };
static const char *const nccl_names[] = {NCCL_FNS(NAME) "ncclGetErrorString", NULL};
static void *nccl_fns[N_NCCL];

/* beside: the CUDA runtime's folder (the toolkit's lib64 holds NCCL where it is installed
 * with it, as the wheels' lib folders do) */
static pp_lazy_lib nccl_lib = {
    .soname = "libnccl.so." STR(NCCL_MAJOR),
    .beside = (void (*)(void))cudaGetDeviceCount,
    .names = nccl_names,
    .fns = nccl_fns,
};

#define DEFINE(f, p, a)                                                                          \
    ncclResult_t f p                                                                             \
    {                                                                                            \
        ncclResult_t(*fn) p;                                                                     \
        if (!pp_lazy_lib_ready(&nccl_lib)) return ncclSystemError;                               \
        memcpy(&fn, &nccl_fns[I_##f], sizeof fn);                                                \
        return fn a;                                                                             \
    }
/* ncclGroupStart and ncclGroupEnd: nccl.h's () declarations are no prototypes */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
NCCL_FNS(DEFINE)
#pragma GCC diagnostic pop

const char *ncclGetErrorString(ncclResult_t result)
{
    const char *(*fn)(ncclResult_t);
    if (!pp_lazy_lib_ready(&nccl_lib)) return nccl_lib.why;
    memcpy(&fn, &nccl_fns[I_ncclGetErrorString], sizeof fn);
    return fn(result);
}
