/*
 * nvtx_record.c - an NVTX collector for the tests: a process started with
 * NVTX_INJECTION64_PATH naming this library writes every range it pushes or
 * pops (nvtxRangePushA, nvtxRangePushEx with an ASCII message, nvtxRangePop)
 * as a line of the file NVTX_RECORD_FILE, in the order the calls happen:
 *   push TID NAME
 *   pop TID
 * TID is the calling thread's kernel id, so each thread's ranges can be
 * checked for nesting on their own. As Nsight Systems and Nsight Compute do,
 * the NVTX headers load it at the process's first NVTX call (dlopen, then
 * InitializeInjectionNvtx2, which takes over the calls it fills in).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <nvtx3/nvToolsExt.h>
#pragma GCC diagnostic pop

static FILE *out;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static long tid(void)
{
    return (long)syscall(SYS_gettid);
}

static int push_a(const char *message)
{
    pthread_mutex_lock(&out_mu);
    fprintf(out, "push %ld %s\n", tid(), message ? message : "");
    fflush(out);
    pthread_mutex_unlock(&out_mu);
    return 0;
}

static int push_ex(const nvtxEventAttributes_t *a)
{
    const char *m = a && a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "";
    return push_a(m);
}

static int pop(void)
{
    pthread_mutex_lock(&out_mu);
    fprintf(out, "pop %ld\n", tid());
    fflush(out);
    pthread_mutex_unlock(&out_mu);
    return 0;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table);

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table)
{
    const char *path = getenv("NVTX_RECORD_FILE");
    if (!path || !path[0] || !get_table) return 0;
    const NvtxExportTableCallbacks *cb = get_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
        size < NVTX_CBID_CORE_RangePop)
        return 0;
    out = fopen(path, "a");
    if (!out) return 0;
    *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push_a;
    *table[NVTX_CBID_CORE_RangePushEx] = (NvtxFunctionPointer)push_ex;
    *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
    return 1;
}
