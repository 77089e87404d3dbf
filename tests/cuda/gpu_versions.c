/*
 * gpu_versions.c - what a GPU run measures with: the driver, the CUDA
 * runtime, cuDNN, cuBLAS, cuBLASLt and NCCL (the versions loaded, not those
 * built against, which it prints beside them) and every visible GPU (name,
 * compute capability, memory, multiprocessors, clock, ECC). One line per item
 * and a last line of JSON (tests/gpu/run-all.sh reads it into its results).
 * Exits 0 also without a GPU (the libraries are what a dry run checks).
 */
#include <stdio.h>

/* cublasLt.h and nccl.h declare a few functions without prototypes */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#ifdef PP_HAVE_NCCL
#include <nccl.h>
#endif
#pragma GCC diagnostic pop
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

static void triple(char *buf, size_t n, int v, int major_div, int minor_div)
{
    snprintf(buf, n, "%d.%d.%d", v / major_div, v % major_div / minor_div, v % minor_div);
}

int main(void)
{
    int drv = 0, rt = 0, n = 0, cublas = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    (void)cudaGetLastError();
    int mj = 0, mn = 0, pt = 0;
    if (cublasGetProperty(MAJOR_VERSION, &mj) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(MINOR_VERSION, &mn) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(PATCH_LEVEL, &pt) == CUBLAS_STATUS_SUCCESS)
        cublas = mj * 10000 + mn * 100 + pt;
    char d[32], r[32], dnn[32], bl[32], lt[32], nc[32] = "not built";
    triple(d, sizeof d, drv, 1000, 10);
    triple(r, sizeof r, rt, 1000, 10);
    triple(dnn, sizeof dnn, (int)cudnnGetVersion(), 10000, 100);
    triple(bl, sizeof bl, cublas, 10000, 100);
    triple(lt, sizeof lt, (int)cublasLtGetVersion(), 10000, 100);
#ifdef PP_HAVE_NCCL
    int v = 0;
    if (ncclGetVersion(&v) == ncclSuccess) triple(nc, sizeof nc, v, 10000, 100);
#endif
    printf("CUDA driver API %s (0 without a driver), runtime %s (built with %d)\n", d, r,
           CUDART_VERSION);
    printf("cuDNN %s (built with %d.%d.%d), cuBLAS %s, cuBLASLt %s, NCCL %s\n", dnn, CUDNN_MAJOR,
           CUDNN_MINOR, CUDNN_PATCHLEVEL, bl, lt, nc);
    printf("GPUs visible: %d\n", n);
    char gpus[2048] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        int clock = 0;
        (void)cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, i);
        printf("GPU %d: %s, sm_%d%d, %.1f GiB, %d SMs, %d MHz, ECC %s\n", i, p.name, p.major,
               p.minor, (double)p.totalGlobalMem / (1 << 30), p.multiProcessorCount,
               clock / 1000, p.ECCEnabled ? "on" : "off");
        used += (size_t)snprintf(gpus + used, used < sizeof gpus ? sizeof gpus - used : 0,
                                 "%s{\"name\": \"%s\", \"sm\": \"%d%d\", \"mem_gib\": %.1f}",
                                 i ? ", " : "", p.name, p.major, p.minor,
                                 (double)p.totalGlobalMem / (1 << 30));
        if (used >= sizeof gpus) used = sizeof gpus - 1;
    }
    (void)cudaGetLastError();
    printf("{\"driver\": \"%s\", \"runtime\": \"%s\", \"cudnn\": \"%s\", \"cublas\": \"%s\", "
           "\"cublaslt\": \"%s\", \"nccl\": \"%s\", \"gpus\": [%s]}\n",
           d, r, dnn, bl, lt, nc, gpus);
    return 0;
}
