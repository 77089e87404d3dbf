/* test_cuda_libs.c - cuBLAS, cuBLASLt and NCCL opened on first use
 * (runtime/cuda/libs.c, runtime/comm/nccl_libs.c), without a GPU: none of
 * them is mapped when the process starts, every function the backend calls is
 * found in the libraries the build found, and calls pass through to them. */
#include <stdio.h>
#include <string.h>

/* cublasLt.h and nccl.h declare a few functions without prototypes */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#ifdef PP_HAVE_NCCL
#include <nccl.h>
#endif
#pragma GCC diagnostic pop
#include <cublas_v2.h>

#include "runtime/cuda/libs.h"
#include "tests/check.h"

/* whether a library whose file name starts with name is mapped into this process */
static bool mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        const char *slash = strrchr(line, '/');
        found = slash && !strncmp(slash + 1, name, strlen(name));
    }
    fclose(f);
    return found;
}

int main(void)
{
    CHECK_MSG(mapped("libcudart.so"), "the CUDA runtime is linked: expected mapped");
    CHECK_MSG(!mapped("libcublasLt.so"), "cuBLASLt mapped before its first use");
    CHECK_MSG(!mapped("libcublas.so"), "cuBLAS mapped before its first use");
    CHECK_MSG(!mapped("libnccl.so"), "NCCL mapped before its first use");

    const char *why = NULL;
    CHECK_MSG(pp_cuda_libs_ready(&why), "cuBLAS or cuBLASLt not opened: %s", why ? why : "?");
    CHECK(mapped("libcublasLt.so") && mapped("libcublas.so"));
    CHECK(!strcmp(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS"));
    CHECK(!strcmp(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
                  "CUBLAS_STATUS_NOT_SUPPORTED"));
    const char *s = cublasGetStatusString(CUBLAS_STATUS_ALLOC_FAILED);
    CHECK_MSG(s && s[0], "cublasGetStatusString: empty");
    /* a call with bad arguments reaches the library, which answers it */
    CHECK(cublasLtMatrixLayoutDestroy(NULL) != CUBLAS_STATUS_NOT_INITIALIZED ||
          cublasLtMatrixLayoutCreate(NULL, CUDA_R_32F, 1, 1, 1) != CUBLAS_STATUS_NOT_INITIALIZED);

#ifdef PP_HAVE_NCCL
    CHECK(!mapped("libnccl.so")); /* cuBLAS's opening did not bring it */
    const char *e = ncclGetErrorString(ncclInvalidArgument);
    CHECK_MSG(mapped("libnccl.so"), "NCCL not opened by its first call: %s", e ? e : "?");
    CHECK_MSG(e && strstr(e, "invalid") != NULL, "ncclGetErrorString(ncclInvalidArgument): %s",
              e ? e : "(null)");
#endif
    return check_summary("cuda libs");
}
