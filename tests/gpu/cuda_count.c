/*
 * cuda_count.c - an LD_PRELOAD interposer that counts the CUDA runtime's
 * allocation calls (and the host's waits: device, stream and event
 * synchronisations and synchronous cudaMemcpy) a process makes, and its
 * launches: kernels launched through the runtime (cudaLaunchKernel: the
 * backend's own kernels; cuDNN and cuBLAS launch theirs out of sight), graph
 * launches (cudaGraphLaunch) and stream captures begun.
 *
 *   cc -O2 -shared -fPIC -o libcuda_count.so cuda_count.c -ldl
 *   LD_PRELOAD=./libcuda_count.so PP_CUDA_COUNT_OUT=counts.txt pipeline-run plan.yaml
 *
 * Each wrapped entry point counts the call (and the bytes asked for, where
 * there is a size), then calls the next definition of the same symbol
 * (dlsym(RTLD_NEXT): the real libcudart.so). At exit one line goes to the
 * file named by PP_CUDA_COUNT_OUT (appended; stderr when unset):
 *
 *   cuda_count prog=NAME pid=N cudaMalloc=C cudaMalloc.bytes=B cudaFree=C ...
 *
 * every counter always present, in a fixed order. The per-thread-stream
 * variants (..._ptsz) count under their plain name.
 *
 * Scope: only calls that reach libcudart.so through the dynamic linker are
 * seen, so the program must link the CUDA runtime dynamically (ldd shows
 * libcudart.so.N). Libraries that carry a static copy of the runtime
 * (cuDNN, cuBLAS) or call the driver API directly are not seen.
 *
 * No CUDA header is needed: the prototypes use the ABI types (cudaError_t is
 * an int-sized enum, streams and pools are pointers). Counters are atomic;
 * the wrappers may be called from any thread.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What a wrapper returns when no next definition exists: cudaErrorUnknown. */
#define CUDA_ERROR_UNKNOWN 999

/* Counters, in output order. */
enum counter {
    C_MALLOC,
    C_FREE,
    C_MALLOC_ASYNC,
    C_FREE_ASYNC,
    C_MALLOC_FROM_POOL_ASYNC,
    C_MALLOC_HOST,
    C_HOST_ALLOC,
    C_FREE_HOST,
    C_MALLOC_MANAGED,
    C_MALLOC_PITCH,
    C_HOST_REGISTER,
    C_HOST_UNREGISTER,
    C_DEVICE_SYNCHRONIZE,
    C_STREAM_SYNCHRONIZE,
    C_EVENT_SYNCHRONIZE,
    C_MEMCPY,
    C_LAUNCH_KERNEL,
    C_GRAPH_LAUNCH,
    C_BEGIN_CAPTURE,
    C_COUNT
};

static const char *const counter_names[C_COUNT] = {
    "cudaMalloc",         "cudaFree",           "cudaMallocAsync",       "cudaFreeAsync",
    "cudaMallocFromPoolAsync", "cudaMallocHost", "cudaHostAlloc",        "cudaFreeHost",
    "cudaMallocManaged",  "cudaMallocPitch",    "cudaHostRegister",      "cudaHostUnregister",
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaLaunchKernel",   "cudaGraphLaunch",    "cudaStreamBeginCapture",
};

static _Atomic unsigned long long g_calls[C_COUNT];
static _Atomic unsigned long long g_bytes[C_COUNT];

/* The real entry points, one slot per wrapped symbol, resolved on first use. */
enum symbol {
    S_MALLOC,
    S_FREE,
    S_MALLOC_ASYNC,
    S_MALLOC_ASYNC_PTSZ,
    S_FREE_ASYNC,
    S_FREE_ASYNC_PTSZ,
    S_MALLOC_FROM_POOL_ASYNC,
    S_MALLOC_FROM_POOL_ASYNC_PTSZ,
    S_MALLOC_HOST,
    S_HOST_ALLOC,
    S_FREE_HOST,
    S_MALLOC_MANAGED,
    S_MALLOC_PITCH,
    S_HOST_REGISTER,
    S_HOST_UNREGISTER,
    S_DEVICE_SYNCHRONIZE,
    S_STREAM_SYNCHRONIZE,
    S_STREAM_SYNCHRONIZE_PTSZ,
    S_EVENT_SYNCHRONIZE,
    S_MEMCPY,
    S_MEMCPY_PTDS,
    S_LAUNCH_KERNEL,
    S_LAUNCH_KERNEL_PTSZ,
    S_GRAPH_LAUNCH,
    S_GRAPH_LAUNCH_PTSZ,
    S_BEGIN_CAPTURE,
    S_BEGIN_CAPTURE_PTSZ,
    S_COUNT
};

static const char *const symbol_names[S_COUNT] = {
    "cudaMalloc",
    "cudaFree",
    "cudaMallocAsync",
    "cudaMallocAsync_ptsz",
    "cudaFreeAsync",
    "cudaFreeAsync_ptsz",
    "cudaMallocFromPoolAsync",
    "cudaMallocFromPoolAsync_ptsz",
    "cudaMallocHost",
    "cudaHostAlloc",
    "cudaFreeHost",
    "cudaMallocManaged",
    "cudaMallocPitch",
    "cudaHostRegister",
    "cudaHostUnregister",
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaStreamSynchronize_ptsz",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy_ptds",
    "cudaLaunchKernel",
    "cudaLaunchKernel_ptsz",
    "cudaGraphLaunch",
    "cudaGraphLaunch_ptsz",
    "cudaStreamBeginCapture",
    "cudaStreamBeginCapture_ptsz",
};

static void *_Atomic g_real[S_COUNT];

/* The next definition of symbol s (NULL when there is none). Racing first
 * calls resolve the same address, so a plain atomic store is enough. */
static void *real_symbol(enum symbol s)
{
    void *f = atomic_load_explicit(&g_real[s], memory_order_acquire);
    if (!f) {
        f = dlsym(RTLD_NEXT, symbol_names[s]);
        atomic_store_explicit(&g_real[s], f, memory_order_release);
    }
    return f;
}

static void count(enum counter c, size_t bytes)
{
    atomic_fetch_add_explicit(&g_calls[c], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_bytes[c], bytes, memory_order_relaxed);
}

/* Function pointer types of the wrapped entry points. */
typedef int (*fn_p_n)(void **, size_t);
typedef int (*fn_v)(void *);
typedef int (*fn_void)(void);
typedef int (*fn_p_n_s)(void **, size_t, void *);
typedef int (*fn_v_s)(void *, void *);
typedef int (*fn_p_n_pool_s)(void **, size_t, void *, void *);
typedef int (*fn_p_n_u)(void **, size_t, unsigned);
typedef int (*fn_p_pitch_w_h)(void **, size_t *, size_t, size_t);
typedef int (*fn_v_n_u)(void *, size_t, unsigned);
typedef int (*fn_v_cv_n_k)(void *, const void *, size_t, int);
typedef int (*fn_v_i)(void *, int);
/* dim3 as the ABI passes it: three unsigned ints by value */
typedef struct dim3_abi {
    unsigned x, y, z;
} dim3_abi;
typedef int (*fn_launch)(const void *, dim3_abi, dim3_abi, void **, size_t, void *);

/* Defines wrapper NAME(PARAMS) counting under counter C with BYTES bytes and
 * forwarding ARGS to symbol S of type T. */
#define WRAP(NAME, T, S, C, BYTES, PARAMS, ARGS)                                   \
    int NAME PARAMS;                                                               \
    int NAME PARAMS                                                                \
    {                                                                              \
        count(C, BYTES);                                                           \
        void *sym = real_symbol(S);                                                \
        if (!sym) return CUDA_ERROR_UNKNOWN;                                       \
        T fn;                                                                      \
        memcpy(&fn, &sym, sizeof fn);                                              \
        return fn ARGS;                                                            \
    }

WRAP(cudaMalloc, fn_p_n, S_MALLOC, C_MALLOC, n, (void **p, size_t n), (p, n))
WRAP(cudaFree, fn_v, S_FREE, C_FREE, 0, (void *p), (p))
WRAP(cudaMallocAsync, fn_p_n_s, S_MALLOC_ASYNC, C_MALLOC_ASYNC, n,
     (void **p, size_t n, void *stream), (p, n, stream))
WRAP(cudaMallocAsync_ptsz, fn_p_n_s, S_MALLOC_ASYNC_PTSZ, C_MALLOC_ASYNC, n,
     (void **p, size_t n, void *stream), (p, n, stream))
WRAP(cudaFreeAsync, fn_v_s, S_FREE_ASYNC, C_FREE_ASYNC, 0, (void *p, void *stream), (p, stream))
WRAP(cudaFreeAsync_ptsz, fn_v_s, S_FREE_ASYNC_PTSZ, C_FREE_ASYNC, 0, (void *p, void *stream),
     (p, stream))
WRAP(cudaMallocFromPoolAsync, fn_p_n_pool_s, S_MALLOC_FROM_POOL_ASYNC, C_MALLOC_FROM_POOL_ASYNC, n,
     (void **p, size_t n, void *pool, void *stream), (p, n, pool, stream))
WRAP(cudaMallocFromPoolAsync_ptsz, fn_p_n_pool_s, S_MALLOC_FROM_POOL_ASYNC_PTSZ,
     C_MALLOC_FROM_POOL_ASYNC, n, (void **p, size_t n, void *pool, void *stream),
     (p, n, pool, stream))
WRAP(cudaMallocHost, fn_p_n, S_MALLOC_HOST, C_MALLOC_HOST, n, (void **p, size_t n), (p, n))
WRAP(cudaHostAlloc, fn_p_n_u, S_HOST_ALLOC, C_HOST_ALLOC, n, (void **p, size_t n, unsigned flags),
     (p, n, flags))
WRAP(cudaFreeHost, fn_v, S_FREE_HOST, C_FREE_HOST, 0, (void *p), (p))
WRAP(cudaMallocManaged, fn_p_n_u, S_MALLOC_MANAGED, C_MALLOC_MANAGED, n,
     (void **p, size_t n, unsigned flags), (p, n, flags))
WRAP(cudaMallocPitch, fn_p_pitch_w_h, S_MALLOC_PITCH, C_MALLOC_PITCH, w * h,
     (void **p, size_t *pitch, size_t w, size_t h), (p, pitch, w, h))
WRAP(cudaHostRegister, fn_v_n_u, S_HOST_REGISTER, C_HOST_REGISTER, n,
     (void *p, size_t n, unsigned flags), (p, n, flags))
WRAP(cudaHostUnregister, fn_v, S_HOST_UNREGISTER, C_HOST_UNREGISTER, 0, (void *p), (p))
WRAP(cudaDeviceSynchronize, fn_void, S_DEVICE_SYNCHRONIZE, C_DEVICE_SYNCHRONIZE, 0, (void), ())
WRAP(cudaStreamSynchronize, fn_v, S_STREAM_SYNCHRONIZE, C_STREAM_SYNCHRONIZE, 0, (void *stream),
     (stream))
WRAP(cudaStreamSynchronize_ptsz, fn_v, S_STREAM_SYNCHRONIZE_PTSZ, C_STREAM_SYNCHRONIZE, 0,
     (void *stream), (stream))
WRAP(cudaEventSynchronize, fn_v, S_EVENT_SYNCHRONIZE, C_EVENT_SYNCHRONIZE, 0, (void *event),
     (event))
/* cudaMemcpy waits for the host: a synchronisation as well as a copy */
WRAP(cudaMemcpy, fn_v_cv_n_k, S_MEMCPY, C_MEMCPY, n,
     (void *dst, const void *src, size_t n, int kind), (dst, src, n, kind))
WRAP(cudaMemcpy_ptds, fn_v_cv_n_k, S_MEMCPY_PTDS, C_MEMCPY, n,
     (void *dst, const void *src, size_t n, int kind), (dst, src, n, kind))

WRAP(cudaLaunchKernel, fn_launch, S_LAUNCH_KERNEL, C_LAUNCH_KERNEL, 0,
     (const void *f, dim3_abi g, dim3_abi b, void **args, size_t shm, void *stream),
     (f, g, b, args, shm, stream))
WRAP(cudaLaunchKernel_ptsz, fn_launch, S_LAUNCH_KERNEL_PTSZ, C_LAUNCH_KERNEL, 0,
     (const void *f, dim3_abi g, dim3_abi b, void **args, size_t shm, void *stream),
     (f, g, b, args, shm, stream))
WRAP(cudaGraphLaunch, fn_v_s, S_GRAPH_LAUNCH, C_GRAPH_LAUNCH, 0, (void *exec, void *stream),
     (exec, stream))
WRAP(cudaGraphLaunch_ptsz, fn_v_s, S_GRAPH_LAUNCH_PTSZ, C_GRAPH_LAUNCH, 0,
     (void *exec, void *stream), (exec, stream))
WRAP(cudaStreamBeginCapture, fn_v_i, S_BEGIN_CAPTURE, C_BEGIN_CAPTURE, 0,
     (void *stream, int mode), (stream, mode))
WRAP(cudaStreamBeginCapture_ptsz, fn_v_i, S_BEGIN_CAPTURE_PTSZ, C_BEGIN_CAPTURE, 0,
     (void *stream, int mode), (stream, mode))

/* Appends the counts line to PP_CUDA_COUNT_OUT (or stderr) with one write(),
 * so lines of concurrent processes do not interleave. */
__attribute__((destructor)) static void cuda_count_report(void)
{
    char line[2048];
    size_t len = 0;
    const char *prog = program_invocation_short_name ? program_invocation_short_name : "?";
    int n = snprintf(line, sizeof line, "cuda_count prog=%s pid=%ld", prog, (long)getpid());
    if (n < 0) return;
    len = (size_t)n;
    for (int c = 0; c < C_COUNT && len < sizeof line; c++) {
        n = snprintf(line + len, sizeof line - len, " %s=%llu %s.bytes=%llu", counter_names[c],
                     atomic_load(&g_calls[c]), counter_names[c], atomic_load(&g_bytes[c]));
        if (n < 0) return;
        len += (size_t)n;
    }
    if (len >= sizeof line - 1) len = sizeof line - 2;
    line[len++] = '\n';
    int fd = 2;
    const char *path = getenv("PP_CUDA_COUNT_OUT");
    if (path && *path) {
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) fd = 2;
    }
    ssize_t w;
    do {
        w = write(fd, line, len);
    } while (w < 0 && errno == EINTR);
    if (fd != 2) close(fd);
}
